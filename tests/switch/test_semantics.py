"""Semantics: arithmetic, match kinds and priorities, defaults, checksums, hashes, selectors, meters."""
import struct
import zlib
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st
from scapy.all import IP, UDP, Ether, Raw

from switch.backend import runtime
from switch.errors import SwitchError
from switch.target import Switch

PROGRAMS = Path(__file__).parent / "programs"


@pytest.fixture(scope="module")
def arith():
    return Switch(str(PROGRAMS / "arith.p4"))


def s8(v):
    v &= 0xFF
    return v - 256 if v & 0x80 else v


def reference(a, b, sa, sb):
    clamp = lambda v: max(-128, min(127, v))
    return dict(
        add=(a + b) & 0xFF, sub=(a - b) & 0xFF, mul=(a * b) & 0xFF,
        shl=(a << b) & 0xFF if b < 8 else 0, shr=a >> b, sat_add=min(a + b, 255), sat_sub=max(a - b, 0),
        ssat_add=clamp(sa + sb), ssat_sub=clamp(sa - sb), sshr=sa >> 2, concat=(a << 8) | b,
        slice=(a >> 3) & 0xF, widen=a, swiden=sa, neg=(-a) & 0xFF, inv=(~a) & 0xFF,
        div=(a // 8 + 200 // 7) & 0xFF, mod=a % 16 + 100 % 7, big_shift=0,
        sliced_assign=(a & 0xF0) | (b >> 4), cmp_signed=int(sa < sb))


def run_arith(sw, a, b, sa, sb):
    out = sw.send(0, bytes([a, b, sa & 0xFF, sb & 0xFF]) + b"payload")
    assert len(out) == 1 and out[0].port == 1
    d = out[0].data
    assert d[:4] == bytes([a, b, sa & 0xFF, sb & 0xFF]) and d.endswith(b"payload")
    r = d[4:4 + 24]
    bits = int.from_bytes(r, "big")
    fields = [("add", 8, 0), ("sub", 8, 0), ("mul", 8, 0), ("shl", 8, 0), ("shr", 8, 0), ("sat_add", 8, 0),
              ("sat_sub", 8, 0), ("ssat_add", 8, 1), ("ssat_sub", 8, 1), ("sshr", 8, 1), ("concat", 16, 0),
              ("slice", 4, 0), ("widen", 16, 0), ("swiden", 16, 1), ("neg", 8, 0), ("inv", 8, 0), ("div", 8, 0),
              ("mod", 8, 0), ("big_shift", 8, 0), ("sliced_assign", 8, 0), ("cmp_signed", 8, 0), ("pad", 4, 0)]
    got, pos = {}, 192
    for name, w, signed in fields:
        pos -= w
        v = (bits >> pos) & ((1 << w) - 1)
        if signed and v >> (w - 1):
            v -= 1 << w
        got[name] = v
    del got["pad"]
    return got


@pytest.mark.parametrize("a,b,sa,sb", [(255, 1, 127, 1), (0, 1, -128, 1), (200, 100, -100, 100), (7, 0, 0, 0),
                                       (1, 7, -1, -1), (128, 9, 64, -128), (0xAB, 0xCD, -128, -128)])
def test_arithmetic_edge_cases(arith, a, b, sa, sb):
    assert run_arith(arith, a, b, sa, sb) == reference(a, b, sa, sb)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 255), st.integers(0, 255), st.integers(-128, 127), st.integers(-128, 127))
def test_arithmetic_random(arith, a, b, sa, sb):
    assert run_arith(arith, a, b, sa, sb) == reference(a, b, sa, sb)


# ---- L3 router -------------------------------------------------------------------------------
@pytest.fixture
def router():
    sw = Switch(str(PROGRAMS / "l3_router.p4"))
    T, A = "RouterIngress.ipv4_lpm", "RouterIngress.set_nhop"
    sw.insert_entry(T, {"hdr.ipv4.dstAddr": ("10.0.0.0", 8)}, A, {"dmac": 0xA, "smac": 0x1, "port": 1})
    sw.insert_entry(T, {"hdr.ipv4.dstAddr": ("10.1.0.0", 16)}, A, {"dmac": 0xB, "smac": 0x1, "port": 2})
    sw.insert_entry(T, {"hdr.ipv4.dstAddr": ("10.1.2.3", 32)}, A, {"dmac": 0xC, "smac": 0x1, "port": 3})
    return sw


def pkt(dst="10.9.9.9", src="192.168.0.1", ttl=64, l4=None):
    return bytes(Ether(src="00:00:00:00:00:99", dst="00:00:00:00:00:01") / IP(src=src, dst=dst, ttl=ttl)
                 / (l4 if l4 is not None else UDP(sport=1000, dport=53)) / Raw(b"hello"))


@pytest.mark.parametrize("dst,port", [("10.9.9.9", 1), ("10.1.9.9", 2), ("10.1.2.3", 3)])
def test_lpm_longest_prefix_and_rewrite(router, dst, port):
    out = router.send(5, pkt(dst))
    assert [o.port for o in out] == [port]
    e = Ether(out[0].data)
    assert e.dst == f"00:00:00:00:00:0{ {1: 'a', 2: 'b', 3: 'c'}[port] }" and e[IP].ttl == 63
    assert bytes(e[Raw]) == b"hello"
    # the recomputed checksum is what scapy computes
    chk = e[IP].chksum
    e[IP].chksum = None
    assert Ether(bytes(e))[IP].chksum == chk


def test_default_action_drops_and_can_be_changed(router):
    assert router.send(5, pkt("11.0.0.1")) == []
    assert router.drop_total("pipeline_drop") == 1
    router.set_default_action("RouterIngress.ipv4_lpm", "RouterIngress.set_nhop", {"dmac": 1, "smac": 2, "port": 7})
    assert [o.port for o in router.send(5, pkt("11.0.0.1"))] == [7]
    router.reset_default_action("RouterIngress.ipv4_lpm")
    assert router.send(5, pkt("11.0.0.1")) == []


def test_bad_checksum_is_dropped(router):
    p = bytearray(pkt())
    p[14 + 10] ^= 0xFF
    assert router.send(5, bytes(p)) == []


def test_ternary_priority_and_range(router):
    acl = "RouterIngress.acl"
    router.insert_entry(acl, {"hdr.ipv4.dstAddr": ("10.0.0.0", "255.0.0.0")}, "RouterIngress.acl_deny", priority=10)
    router.insert_entry(acl, {"hdr.ipv4.dstAddr": ("10.1.0.0", "255.255.0.0"), "dport": (50, 60)},
                        "RouterIngress.acl_permit", priority=20)
    assert router.send(5, pkt("10.1.9.9", l4=UDP(dport=53))) != []      # higher priority permit
    assert router.send(5, pkt("10.1.9.9", l4=UDP(dport=80))) == []      # range misses -> deny
    assert router.send(5, pkt("10.9.9.9", l4=UDP(dport=53))) == []      # only deny matches
    router.modify_entry(acl, {"hdr.ipv4.dstAddr": ("10.0.0.0", "255.0.0.0")}, "RouterIngress.acl_permit", priority=10)
    assert router.send(5, pkt("10.9.9.9")) != []
    assert router.direct_counter(acl, {"hdr.ipv4.dstAddr": ("10.0.0.0", "255.0.0.0")}, 10)[0] == 3
    assert router.counter_read("RouterIngress.port_rx", 5)[0] == 4
    with pytest.raises(SwitchError) as ei:
        router.insert_entry(acl, {"hdr.ipv4.dstAddr": ("10.0.0.0", "255.0.0.0")}, "RouterIngress.acl_deny", priority=10)
    assert ei.value.code == "ALREADY_EXISTS"
    with pytest.raises(SwitchError) as ei:
        router.insert_entry(acl, {"hdr.ipv4.dstAddr": ("10.0.0.0", "255.0.0.0")}, "RouterIngress.acl_deny")
    assert ei.value.code == "INVALID_ARGUMENT"
    router.delete_entry(acl, {"hdr.ipv4.dstAddr": ("10.0.0.0", "255.0.0.0")}, 10)
    with pytest.raises(SwitchError) as ei:
        router.delete_entry(acl, {"hdr.ipv4.dstAddr": ("10.0.0.0", "255.0.0.0")}, 10)
    assert ei.value.code == "NOT_FOUND"


def test_entries_read_back_canonical(router):
    ents = router.entries("RouterIngress.ipv4_lpm")
    e = [x for x in ents if x["match"][1][2] == 32][0]
    assert e["match"][1] == ("lpm", bytes([10, 1, 2, 3]), 32)
    assert e["params"] == {1: b"\x0c", 2: b"\x01", 3: b"\x03"}


def test_table_size_limit():
    sw = Switch(str(PROGRAMS / "ecmp.p4"))
    for i in range(64):
        sw.insert_member("ecmp_sel", i + 1, "I.set_port", {"port": 1})
    for i in range(64):
        sw.insert_entry("I.ecmp", {"h.ipv4.dstAddr": (i << 8, 24)}, member=1)
    with pytest.raises(SwitchError) as ei:
        sw.insert_entry("I.ecmp", {"h.ipv4.dstAddr": (0xFFFF00, 24)}, member=1)
    assert ei.value.code == "RESOURCE_EXHAUSTED"


def test_const_entries_every_match_kind():
    sw = Switch(str(PROGRAMS / "stack_counter.p4"))
    eth = b"\xff" * 12
    assert [o.port for o in sw.send(0, eth + b"\x90\x00" + bytes([1, 0x1A]))] == [1]   # ternary + optional
    assert [o.port for o in sw.send(0, eth + b"\x91\x00" + bytes([1, 0x22]))] == [2]   # range
    assert sw.send(0, eth + b"\x90\x00" + bytes([2, 0x05])) == []                       # exact -> drop
    assert [o.port for o in sw.send(0, eth + b"\x90\x00" + bytes([3, 0x05]))] == [9]   # default
    with pytest.raises(SwitchError) as ei:
        sw.insert_entry("I.classify", {"h.tag.kind": 1}, "I.fwd", {"port": 1}, priority=1)
    assert ei.value.code == "PERMISSION_DENIED"


def test_header_stack_lookahead_and_register():
    sw = Switch(str(PROGRAMS / "stack_counter.p4"))
    eth = b"\xff" * 12 + b"\x88\x47"
    lab = lambda label, bos, ttl: ((label << 12) | (bos << 8) | ttl).to_bytes(4, "big")
    p = eth + lab(5, 0, 10) + lab(6, 0, 20) + lab(7, 1, 30) + bytes([0x01, 0x42]) + b"rest"
    out = sw.send(0, p)
    assert [o.port for o in out] == [9]          # tag parsed after lookahead (0x01 in 0..15), default
    assert out[0].data == eth + lab(5, 0, 9) + lab(6, 0, 20) + lab(7, 1, 30) + bytes([0x01, 0x42]) + b"rest"
    sw.send(0, p)
    assert sw.register_read("I.per_label", 5) == 2
    # five labels overflow the stack of four: StackOutOfBounds, ingress still runs (BMv2)
    p5 = eth + b"".join(lab(1, 0, 1) for _ in range(5)) + b"x"
    sw.send(0, p5)
    assert sw.parser_errors == 1


def test_hash_vectors():
    assert runtime.crc16(b"123456789") == 0xBB3D
    assert runtime.crc32(b"123456789") == 0xCBF43926
    hdr = bytes.fromhex("450000730000400040110000c0a80001c0a800c7")
    assert runtime.csum16(hdr) == 0xB861
    assert runtime.identity(b"\x01\x02") == 0x0102
    assert runtime.serialise(0b101, 3) == b"\xa0"


def test_hash_extern_and_selector():
    sw = Switch(str(PROGRAMS / "ecmp.p4"))
    for m, port in ((1, 1), (2, 2), (3, 3)):
        sw.insert_member("I.ecmp_sel", m, "I.set_port", {"port": port})
    sw.insert_group("I.ecmp_sel", 10, [1, 2, 3])
    sw.insert_entry("I.ecmp", {"h.ipv4.dstAddr": ("10.0.0.0", 8)}, group=10)
    ports = {}
    for i in range(60):
        src = f"192.168.{i}.{i}"
        out = sw.send(0, bytes(Ether() / IP(src=src, dst="10.0.0.1") / UDP(sport=1000 + i, dport=9)))
        e = Ether(out[0].data)
        data = bytes(map(int, src.split("."))) + bytes([10, 0, 0, 1])
        assert e[IP].id == runtime.crc16(data) and e[UDP].chksum == zlib.crc32(data) & 0xFFFF
        sel = runtime.crc16(data[:4] + struct.pack(">H", 1000 + i))
        assert out[0].port == [1, 2, 3][sel % 3]
        ports[out[0].port] = ports.get(out[0].port, 0) + 1
        # the same flow always takes the same path
        assert sw.send(0, bytes(Ether() / IP(src=src, dst="10.0.0.1") / UDP(sport=1000 + i, dport=9)))[0].port == out[0].port
    assert set(ports) == {1, 2, 3}
    sw.modify_group("I.ecmp_sel", 10, [1, 2, 3], random_selection=True)
    seen = {sw.send(0, bytes(Ether() / IP(src="1.1.1.1", dst="10.0.0.1") / UDP(sport=5)))[0].port for _ in range(40)}
    assert seen == {1, 2, 3}


def test_meter_colours():
    sw = Switch(str(PROGRAMS / "ecmp.p4"))
    sw.insert_member("I.ecmp_sel", 1, "I.set_port", {"port": 4})
    sw.insert_entry("I.ecmp", {"h.ipv4.dstAddr": ("10.0.0.0", 8)}, member=1)
    sw.meter_set("I.port_meter", 0, cir=1, cburst=2, pir=1, pburst=3)
    colours = []
    for _ in range(5):
        out = sw.send(0, bytes(Ether() / IP(dst="10.0.0.1") / UDP()))
        colours.append(Ether(out[0].data)[IP].tos >> 2 if out else 2)
    assert colours == [0, 0, 1, 2, 2]
    assert sw.drop_total("pipeline_drop") == 2
    sw.run(until_ns=sw.now_ns + 3_000_000_000)    # 3 s refill both buckets (capped at burst)
    out = sw.send(0, bytes(Ether() / IP(dst="10.0.0.1") / UDP()))
    assert Ether(out[0].data)[IP].tos >> 2 == 0
