"""Smoke test of the project's real program, p4src/dlcp.p4, on the embedded target."""
from pathlib import Path

import pytest
from scapy.all import IP, UDP, Ether, Raw

from host import wire
from switch.target import Switch

DLCP_P4 = Path(__file__).resolve().parents[2] / "p4src" / "dlcp.p4"
DMAC, SMAC, PORT, NHOP = "0a:00:00:00:00:02", "0a:00:00:00:00:01", 3, 7


@pytest.fixture(scope="module")
def sw():
    s = Switch(str(DLCP_P4), priority_queues=8)
    s.insert_entry("DlcpIngress.ipv4_lpm", {"meta.dst_addr": ("10.0.1.0", 24)}, "DlcpIngress.set_nhop",
                   {"dmac": DMAC, "smac": SMAC, "port": PORT, "nhop_id": NHOP})
    s.insert_entry("DlcpIngress.dlcp_priority",
                   {"hdr.dlcp.msg_type": (0, 0xF), "hdr.dlcp.layer": (0, 100)},
                   "DlcpIngress.set_priority", {"prio": 5}, priority=10)
    return s


def forward(sw, pkt: bytes):
    out = sw.send(1, pkt)
    assert len(out) == 1, sw.drops()
    assert out[0].port == PORT
    return Ether(out[0].data)


def test_ipv4_udp_is_routed(sw):
    sent = Ether(dst="02:00:00:00:00:99", src="02:00:00:00:00:01") / IP(src="192.168.0.5", dst="10.0.1.9", ttl=64) \
        / UDP(sport=1234, dport=5678) / Raw(b"hello")
    got = forward(sw, bytes(sent))
    assert got.dst == DMAC and got.src == SMAC
    assert got[IP].ttl == 63
    ck = got[IP].chksum
    del got[IP].chksum
    assert Ether(bytes(got))[IP].chksum == ck          # valid header checksum after the TTL change
    assert bytes(got[UDP].payload) == b"hello"
    assert sw.counter_read("DlcpIngress.nhop_packets", NHOP)[0] >= 1


def test_ipv4_with_options_keeps_them_and_adjusts_checksum(sw):
    sent = Ether() / IP(dst="10.0.1.9", ttl=9, options=b"\x01\x01\x01\x00") / UDP(dport=9) / Raw(b"x")
    got = forward(sw, bytes(sent))
    assert got[IP].ihl == 6 and bytes(got)[34:38] == b"\x01\x01\x01\x00"   # varbit options re-emitted
    assert got[IP].ttl == 8
    ck = got[IP].chksum
    del got[IP].chksum
    assert Ether(bytes(got))[IP].chksum == ck


def test_dlcp_packet_gets_installed_priority(sw):
    hdr = wire.Header(msg_type=wire.MsgType.DATA, priority=1, layer=42, seq=3, total=8).pack()
    sent = Ether() / IP(dst="10.0.1.20") / UDP(sport=4000, dport=wire.UDP_PORT) / Raw(hdr + b"payload")
    before = sw.counter_read("DlcpEgress.port_forwarded", PORT * 8 + 5)[0]
    got = forward(sw, bytes(sent))
    assert bytes(got[UDP].payload) == hdr + b"payload"
    # the egress counter is indexed by (port, priority) the packet was queued with
    assert sw.counter_read("DlcpEgress.port_forwarded", PORT * 8 + 5)[0] == before + 1
    assert (PORT, 5) in sw.tm.queues
