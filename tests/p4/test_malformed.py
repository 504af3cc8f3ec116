"""dlcp.p4 on malformed input. As in BMv2, a parser error does not drop a packet by itself: ingress runs with
standard_metadata.parser_error set, and dlcp.p4 drops it and counts it under ingress_drops[DROP_PARSER_ERROR].
A UDP datagram to the DLCP port whose payload is shorter than the 48-byte DLCP header is such a parser error
(PacketTooShort), not plain UDP. Whatever arrives, the switch never raises and accounts for every frame."""
from __future__ import annotations

import random

from scapy.all import ARP, IP, UDP, Ether, Raw

from host import wire

from .dlcp_switch import (
    DROP_PARSER_ERROR, DROP_REASONS, HOST_PORT, add_route, dlcp_packet, drop_counts, dropped, forwarded,
    ipv4_checksum_ok, tcp_packet, udp_packet,
)


def routed(sw):
    add_route(sw, "0.0.0.0", 0, 2, 1)          # a default route, so anything well-formed would be forwarded
    return sw


def test_dlcp_port_with_a_payload_shorter_than_the_header_is_a_parser_error(sw):
    routed(sw)
    header = wire.Header(seq=1, total=4, count=0).pack()
    for n in range(wire.HEADER_LEN):
        frame = Ether() / IP(dst="10.0.1.9") / UDP(sport=4000, dport=wire.UDP_PORT) / Raw(header[:n])
        errors = sw.parser_errors
        dropped(sw, frame, DROP_PARSER_ERROR)
        assert sw.parser_errors == errors + 1
    # exactly a header (no payload) parses and is forwarded; so is plain UDP with a short payload to another port
    out = forwarded(sw, Ether() / IP(dst="10.0.1.9") / UDP(sport=4000, dport=wire.UDP_PORT) / Raw(header))
    assert bytes(Ether(out.data)[UDP].payload) == header
    forwarded(sw, udp_packet("10.0.1.9", dport=wire.UDP_PORT + 1, payload=b"abc"))
    # DLCP as the *source* port only is plain UDP to the switch, whatever its length
    forwarded(sw, Ether() / IP(dst="10.0.1.9") / UDP(sport=wire.UDP_PORT, dport=4000) / Raw(b"x"))


def test_truncated_and_invalid_ipv4_headers_are_parser_errors(sw):
    routed(sw)
    good = bytes(udp_packet("10.0.1.9"))
    for cut in range(14, 14 + 20):                         # Ethernet, then 0..19 bytes of IPv4
        dropped(sw, good[:cut], DROP_PARSER_ERROR)
    with_options = bytes(udp_packet("10.0.1.9", options=b"\x01" * 40))     # IHL 15
    for cut in (14 + 20, 14 + 24, 14 + 59):                # options cut short
        dropped(sw, with_options[:cut], DROP_PARSER_ERROR)
    for ihl in range(5):                                   # IHL below 5
        bad = bytearray(good)
        bad[14] = 0x40 | ihl
        dropped(sw, bytes(bad), DROP_PARSER_ERROR)
    bad = bytearray(good)
    bad[14] = 0x65                                         # version 6 under the IPv4 EtherType
    dropped(sw, bytes(bad), DROP_PARSER_ERROR)
    for cut in range(14):                                  # not even an Ethernet header
        dropped(sw, good[:cut], DROP_PARSER_ERROR)
    tcp = bytes(tcp_packet("10.0.1.9"))
    dropped(sw, tcp[:14 + 20 + 10], DROP_PARSER_ERROR)     # TCP header cut short
    arp = bytes(Ether() / ARP(pdst="10.0.1.9"))
    dropped(sw, arp[:14 + 20], DROP_PARSER_ERROR)          # ARP cut short
    forwarded(sw, good)                                    # and the switch still works


def test_random_bytes_never_crash_and_every_frame_is_accounted_for(sw):
    """Random frames, and valid frames with random bytes from some offset on, so every parser state sees junk."""
    routed(sw)
    rng = random.Random(1234)
    templates = [bytes(udp_packet("10.0.1.9")), bytes(tcp_packet("10.0.1.9")), bytes(dlcp_packet("10.0.1.9")),
                 bytes(udp_packet("10.0.1.9", options=b"\x01" * 12)), bytes(Ether() / ARP(pdst="10.0.1.9"))]
    frames = []
    for _ in range(1500):
        if rng.random() < 0.3:
            frames.append(rng.randbytes(rng.randrange(0, 160)))
        else:
            t = rng.choice(templates)
            keep = rng.randrange(0, len(t))
            frames.append(t[:keep] + rng.randbytes(rng.randrange(0, len(t) - keep + 40)))
    before = drop_counts(sw)
    out = []
    for f in frames:
        out += sw.send(HOST_PORT, f)
    dropped_now = sum(drop_counts(sw)) - sum(before)
    assert len(out) + dropped_now == len(frames)           # each frame either left or was counted as dropped
    assert len(out) > 0 and drop_counts(sw)[DROP_PARSER_ERROR] > 0
    assert not any(reason != "pipeline_drop" for (_p, _q, reason) in sw.drops())
    for d in out:                                          # what was forwarded is well-formed IPv4 or ARP
        assert d.port == 2
        ethertype = d.data[12:14]
        assert ethertype in (b"\x08\x00", b"\x08\x06")
        if ethertype == b"\x08\x00":
            assert ipv4_checksum_ok(d.data)
    assert len(drop_counts(sw)) == DROP_REASONS
