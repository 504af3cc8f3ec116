"""dlcp.p4 forwarding: routes and rewrites, TTL expiry, IPv4 checksums (with and without options), ARP pass-through,
and the drops that come with them, each counted under its reason."""
from __future__ import annotations

from scapy.all import ARP, IP, UDP, Ether, Raw

from host import wire
from host.scapy_dlcp import DLCP

from .dlcp_switch import (
    DROP_BAD_CHECKSUM, DROP_HAIRPIN, DROP_NO_ROUTE, DROP_TTL_EXPIRED, HOST_PORT, NHOP_PACKETS, PORT_FORWARDED,
    add_route, arp_packet, dlcp_packet, dropped, forwarded, ipv4_checksum_ok, nhop_mac, packets,
    router_mac, slot, tcp_packet, udp_packet,
)

OPTIONS = b"\x07\x07\x04\x00\x00\x00\x00\x00"  # record-route with room for one address: 8 bytes, IHL 7


def expected_rewrite(sent: bytes, port: int, nhop_id: int) -> bytes:
    """What a router must send for ``sent``: next-hop MACs, TTL - 1, checksum recomputed, nothing else changed."""
    pkt = Ether(sent)
    pkt.dst, pkt.src = nhop_mac(nhop_id), router_mac(port)
    pkt[IP].ttl -= 1
    del pkt[IP].chksum
    return bytes(pkt)


def test_routed_packet_gets_next_hop_macs_ttl_and_checksum_and_nothing_else(sw):
    add_route(sw, "10.0.1.0", 24, 3, 7)
    for sent in (udp_packet("10.0.1.9", payload=b"hello"), tcp_packet("10.0.1.10", dscp=10, ecn=2),
                 dlcp_packet("10.0.1.11", layer=12, seq=99)):
        out = forwarded(sw, sent)
        assert out.port == 3
        assert out.data == expected_rewrite(bytes(sent), 3, 7)
        assert ipv4_checksum_ok(out.data)
    assert packets(sw, NHOP_PACKETS, 7) == 3
    assert sum(packets(sw, PORT_FORWARDED, slot(3, p)) for p in range(8)) == 3


def test_longest_prefix_wins(sw):
    add_route(sw, "10.0.0.0", 8, 2, 1)
    add_route(sw, "10.0.1.0", 24, 3, 2)
    add_route(sw, "10.0.1.128", 25, 4, 3)
    add_route(sw, "10.0.1.200", 32, 5, 4)
    add_route(sw, "0.0.0.0", 0, 6, 5)
    for dst, port, nhop in [("10.9.9.9", 2, 1), ("10.0.1.1", 3, 2), ("10.0.1.127", 3, 2), ("10.0.1.128", 4, 3),
                            ("10.0.1.199", 4, 3), ("10.0.1.200", 5, 4), ("10.0.1.201", 4, 3), ("11.0.0.1", 6, 5)]:
        out = forwarded(sw, udp_packet(dst))
        assert (out.port, Ether(out.data).dst) == (port, nhop_mac(nhop)), dst


def test_no_route_and_non_ip_are_dropped_and_counted(sw):
    add_route(sw, "10.0.1.0", 24, 3, 7)
    dropped(sw, udp_packet("10.0.2.1"), DROP_NO_ROUTE)
    dropped(sw, Ether(type=0x86DD) / Raw(bytes(60)), DROP_NO_ROUTE)   # IPv6 is not routed by this program
    dropped(sw, Ether(type=0x88CC) / Raw(bytes(60)), DROP_NO_ROUTE)   # LLDP
    assert packets(sw, NHOP_PACKETS, 7) == 0


def test_packet_is_never_sent_back_out_of_its_ingress_port(sw):
    add_route(sw, "10.0.1.0", 24, HOST_PORT, 7)
    dropped(sw, udp_packet("10.0.1.9"), DROP_HAIRPIN)
    assert forwarded(sw, udp_packet("10.0.1.9"), port=2).port == HOST_PORT


def test_ttl_expiry(sw):
    add_route(sw, "10.0.1.0", 24, 3, 7)
    dropped(sw, udp_packet("10.0.1.9", ttl=1), DROP_TTL_EXPIRED)
    dropped(sw, udp_packet("10.0.1.9", ttl=0), DROP_TTL_EXPIRED)
    dropped(sw, dlcp_packet("10.0.1.9", ttl=1), DROP_TTL_EXPIRED)
    out = forwarded(sw, udp_packet("10.0.1.9", ttl=2))
    assert Ether(out.data)[IP].ttl == 1 and ipv4_checksum_ok(out.data)
    out = forwarded(sw, udp_packet("10.0.1.9", ttl=255))
    assert Ether(out.data)[IP].ttl == 254 and ipv4_checksum_ok(out.data)
    assert packets(sw, NHOP_PACKETS, 7) == 2


def test_bad_ipv4_checksum_is_dropped_with_and_without_options(sw):
    add_route(sw, "10.0.1.0", 24, 3, 7)
    for options in (None, OPTIONS):
        good = Ether(bytes(udp_packet("10.0.1.9", options=options)))
        bad = good.copy()
        bad[IP].chksum ^= 0x0100
        dropped(sw, bad, DROP_BAD_CHECKSUM)
        forwarded(sw, good)
    # a corrupted option byte is caught as well: the checksum covers the options
    raw = bytearray(bytes(udp_packet("10.0.1.9", options=OPTIONS)))
    raw[14 + 20 + 3] ^= 0x40
    dropped(sw, bytes(raw), DROP_BAD_CHECKSUM)


def test_ipv4_options_are_kept_and_the_checksum_recomputed(sw):
    add_route(sw, "10.0.1.0", 24, 3, 7)
    for sent in (udp_packet("10.0.1.9", options=OPTIONS, payload=b"opt"),
                 dlcp_packet("10.0.1.9", options=OPTIONS, seq=5),
                 udp_packet("10.0.1.9", options=b"\x01" * 40)):  # 40 bytes of NOPs: IHL 15, the maximum
        out = forwarded(sw, sent)
        assert out.data == expected_rewrite(bytes(sent), 3, 7)
        assert ipv4_checksum_ok(out.data)
    got = Ether(out.data)
    assert got[IP].ihl == 15 and bytes(got[UDP].payload) == bytes(32)


def test_dlcp_header_and_payload_pass_unchanged(sw):
    add_route(sw, "10.0.1.0", 24, 3, 7)
    sent = dlcp_packet("10.0.1.9", priority=5, mag_class=3, layer=77, seq=1234, eligible=True, payload=200)
    got = Ether(forwarded(sw, sent).data)
    assert bytes(got[DLCP]) == bytes(sent[DLCP])
    assert wire.Header.unpack(bytes(got[DLCP])[:wire.HEADER_LEN]).seq == 1234


def test_arp_passes_through_towards_its_target_unmodified(sw):
    add_route(sw, "10.0.1.0", 24, 3, 7)
    add_route(sw, "10.0.0.0", 24, HOST_PORT, 8)
    request = arp_packet("10.0.1.9")
    out = forwarded(sw, request)
    assert out.port == 3 and out.data == bytes(request)          # no MAC rewrite, no change at all
    reply = Ether(src="02:00:00:00:01:09", dst="02:00:00:00:00:01") / ARP(
        op=2, hwsrc="02:00:00:00:01:09", psrc="10.0.1.9", hwdst="02:00:00:00:00:01", pdst="10.0.0.1")
    out = forwarded(sw, reply, port=3)
    assert out.port == HOST_PORT and out.data == bytes(reply)
    dropped(sw, arp_packet("10.0.9.9"), DROP_NO_ROUTE)
    dropped(sw, arp_packet("10.0.0.2"), DROP_HAIRPIN)            # its target is behind the port it came from
    assert packets(sw, NHOP_PACKETS, 7) == 1 and packets(sw, NHOP_PACKETS, 8) == 1
    assert packets(sw, PORT_FORWARDED, slot(3, 0)) == 1          # ARP goes to the best-effort queue

