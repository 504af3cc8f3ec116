"""The fast generated code against the reference code and against independent computations.

The code generator has fast paths (struct-based header parse/emit, csum16 folded over small integers,
inline counters and registers, one flat parser function, cached simple tables keyed by the bare value),
and, on top of them, the fused mode: the whole pipeline as two generated functions over local variables
(actions and tables inlined, the switch's glue and the traffic manager's enqueue included, only the slots
egress uses carried through the queue, headers nothing writes re-emitted from the received bytes, checksums
of such headers summed from those bytes).  ``Switch(..., fast_paths=False)`` generates the plain code;
``Switch(..., fuse=False)`` the fast code without fusing.  Every test here drives all three with the same
packets and control-plane operations and requires identical departures (port, bytes, times), drops, parser
errors, counters, registers, direct counters and queue statistics.  The layout helpers are also checked
against big-integer and switch.backend.runtime references on random field lists, and the traffic manager's drain
shortcuts against the step-by-step dequeue loop.
"""
from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st
from scapy.all import ARP, IP, TCP, UDP, Ether, Raw

from host import wire
from switch.backend import layout, runtime
from switch.target import Switch

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = Path(__file__).parent / "programs"
ODD_GROUP = [(1, 11), (2, 12), (3, 13)]


# ---- layout helpers against big-integer references --------------------------------------------------
@st.composite
def field_lists(draw, max_width=80):
    widths = draw(st.lists(st.integers(1, max_width), min_size=1, max_size=12))
    if sum(widths) % 8:
        widths.append(8 - sum(widths) % 8)
    values = [draw(st.integers(0, (1 << w) - 1)) for w in widths]
    return widths, values


def concat(widths, values) -> int:
    v = 0
    for w, x in zip(widths, values):
        v = (v << w) | x
    return v


@settings(max_examples=300, deadline=None)
@given(field_lists())
def test_struct_plan_parses_and_packs_like_big_integers(fv):
    widths, values = fv
    plan = layout.struct_plan(widths)
    ref = concat(widths, values).to_bytes(sum(widths) // 8, "big")
    assert struct.calcsize(plan.fmt) == len(ref)
    parts = struct.unpack(plan.fmt, ref)
    names = [f"p{j}" for j in range(len(parts))]
    env = dict(zip(names, parts))
    assert [eval(layout.unpack_field(plan, i, names), env) for i in range(len(widths))] == values
    codes = [f"f{i}" for i in range(len(widths))]
    fenv = dict(zip(codes, values))
    packed = struct.pack(plan.fmt, *(eval(layout.pack_part(plan, j, codes), fenv) for j in range(len(parts))))
    assert packed == ref


def test_struct_plan_rejects_partial_bytes():
    assert layout.struct_plan([4, 3]) is None
    assert layout.struct_plan([]) is None
    assert layout.struct_plan([48, 48, 16]).fmt == "!IHIHH"


@settings(max_examples=500, deadline=None)
@given(field_lists(max_width=48).map(lambda fv: (fv[0][:-1] or fv[0], fv[1][:-1] or fv[1])))
def test_csum16_fold_matches_runtime(fv):
    widths, values = fv                          # any total width: the fold pads like csum16_bits
    terms = layout.csum16_terms([(f"f{i}", w) for i, w in enumerate(widths)])
    t = eval(" + ".join(terms) or "0", {f"f{i}": v for i, v in enumerate(values)})
    assert layout.csum16_fold(t) == runtime.csum16_bits(concat(widths, values), sum(widths))


@pytest.mark.parametrize("widths,values,want", [
    ([16, 16], [0, 0], 0xFFFF),                  # all zero: ones' complement of +0
    ([16, 16], [0xFFFF, 0], 0),                  # non-zero sum folding to 0xFFFF (-0): checksum 0
    ([4, 12], [0xF, 0xFFF], 0),
    ([8], [0x01], 0xFEFF),                       # padded to a whole word
])
def test_csum16_fold_edge_cases(widths, values, want):
    terms = layout.csum16_terms([(f"f{i}", w) for i, w in enumerate(widths)])
    t = eval(" + ".join(terms), {f"f{i}": v for i, v in enumerate(values)})
    assert layout.csum16_fold(t) == want == runtime.csum16_bits(concat(widths, values), sum(widths))


# ---- fast vs reference switches ---------------------------------------------------------------------------
def observed(sw: Switch):
    """Everything a program or controller could observe (queue statistics included)."""
    ext = {}
    for name, o in sw.instances.items():
        if isinstance(o, runtime.Counter):
            ext[name] = (list(o.packets), list(o.bytes))
        elif isinstance(o, runtime.Register):
            ext[name] = list(o.values)
    direct = {n: [(e.packets, e.bytes) for e in t.entries.values()] for n, t in sw.tables.items()}
    queues = {k: (len(q.fifo), q.enq_packets, q.deq_packets, q.peak_depth) for k, q in sw.tm.queues.items()}
    return ([(d.port, d.data, d.time_ns, d.arrival_ns) for d in sw.outputs], dict(sw.tm.drops), sw.parser_errors,
            ext, direct, queues, sw.tm.backlog, sw.now_ns)


class Pair:
    """The same program built three times: fused (``fast``), fast without fusing (``listed``) and
    reference (``ref``); every call goes to all three and returns the three results.  ``fused``: whether
    the program is expected to compile to the fused functions."""

    def __init__(self, program: str, fused: bool = True, **kw):
        self.fast = Switch(program, **kw)
        self.listed = Switch(program, fuse=False, **kw)
        self.ref = Switch(program, fast_paths=False, **kw)
        assert self.fast.fused == fused, self.fast.not_fused_because
        assert not self.listed.fused and not self.ref.fused
        assert self.ref.source != self.listed.source
        assert (self.fast.source != self.listed.source) == fused
        self.all = (self.fast, self.listed, self.ref)

    def set_queue_depth(self, depth: int) -> None:
        for sw in self.all:
            sw.tm.set_queue_depth(depth)

    def __getattr__(self, name):
        def each(*a, **kw):
            return tuple(getattr(sw, name)(*a, **kw) for sw in self.all)
        return each

    def check(self):
        want = observed(self.ref)
        assert observed(self.fast) == want
        assert observed(self.listed) == want


def mutated(bases):
    """A base packet with some bytes overwritten and possibly truncated, or random bytes."""
    def build(args):
        base, flips, cut = args
        b = bytearray(base)
        for pos, val in flips:
            if b:
                b[pos % len(b)] = val
        return bytes(b[:cut]) if cut is not None else bytes(b)
    fuzzed = st.tuples(st.sampled_from(bases), st.lists(st.tuples(st.integers(0, 1 << 16), st.integers(0, 255)),
                                                        max_size=4),
                       st.one_of(st.none(), st.integers(0, 120))).map(build)
    return st.one_of(fuzzed, fuzzed, st.binary(max_size=96))


def odd_packet(seed: int, idx: int) -> bytes:
    body = bytearray((seed * 37 + i * 11) & 0xFF for i in range(26))
    body[16] = (body[16] & 0xF8) | idx
    body[25] = (0, 3, 4, 255)[seed % 4]          # register/counter index: in range, last, size, far out
    return bytes(Ether(dst="00:00:00:00:00:02", type=0x88B6)) + bytes(body) + b"payload"


@pytest.fixture(scope="module")
def odd():
    return Pair(str(PROGRAMS / "odd_fields.p4"), mcast_groups={1: ODD_GROUP})


@settings(max_examples=200, deadline=None)
@given(mutated([odd_packet(s, i) for s in range(4) for i in (0, 3, 7)]), st.integers(0, 3))
def test_odd_fields_fast_equals_reference(odd, data, port):
    odd.send(port, data)
    odd.check()


def test_odd_fields_behaviour(odd):
    """Independent of the reference: checksum verified and rewritten (checked by hand), fields
    incremented across boundaries, register and counter out-of-range indexes ignored, multicast copies
    carry the payload and their own egress_rid."""
    sw = Switch(str(PROGRAMS / "odd_fields.p4"), mcast_groups={1: ODD_GROUP})
    fields = dict(a=0xA, b=0xFFF, c=0x12345, d=0xABC, wide=(1 << 72) - 1, sgn=-2048 & 0xFFF, flag=1, idx=3,
                  mac=0x0000FFFFFFFF, ridx=2)
    widths = dict(a=4, b=12, c=20, d=12, wide=72, sgn=12, flag=1, idx=3, csum=16, mac=48, ridx=8)

    def header(f):
        v = 0
        for n, w in widths.items():
            v = (v << w) | f.get(n, 0)
        return v.to_bytes(26, "big")

    def csum(f):
        return runtime.csum16(((f["a"] << 48 | f["b"] << 36 | f["c"] << 16 | f["sgn"] << 4 | f["flag"] << 3
                                | f["idx"]) << 12).to_bytes(8, "big"))
    eth = bytes(Ether(dst="00:00:00:00:00:02", src="00:00:00:00:00:01", type=0x88B6))
    good = dict(fields, csum=csum(fields))
    for i in range(2):
        (out,) = sw.send(0, eth + header(good) + b"tail")
        want = dict(good, b=0, wide=0, sgn=(-2049) & 0xFFF, flag=0, mac=good["mac"] + i)
        want["csum"] = csum(want)
        assert out.port == 1 and out.data == eth + header(want) + b"tail"
    assert sw.register_read("I.reg", 2) == 2 and sw.counter_read("I.cnt", 2) == (2, 2 * (14 + 26 + 4))
    bad = dict(good, csum=good["csum"] ^ 1, ridx=200)           # bad checksum, index out of range
    (out,) = sw.send(0, eth + header(bad) + b"tail")
    assert out.data[12:14] == b"\xba\xd0"
    (out,) = sw.send(0, eth + header(dict(good, ridx=4)) + b"tail")  # one past the end
    assert out.data[12:14] == b"\x88\xb6"
    assert [sw.register_read("I.reg", i) for i in range(4)] == [0, 0, 2, 0]
    assert [sw.counter_read("I.cnt", i)[0] for i in range(4)] == [0, 0, 2, 0]
    copies = sw.send(0, eth + header(dict(good, idx=7)) + b"tail")
    assert sorted(d.port for d in copies) == [1, 2, 3]
    for d in copies:
        assert d.data.endswith(b"tail") and d.data[14 + 25] == dict(ODD_GROUP)[d.port]


def router_pair() -> Pair:
    p = Pair(str(PROGRAMS / "l3_router.p4"))
    p.set_queue_depth(4)
    for i in range(4):
        p.insert_entry("RouterIngress.ipv4_lpm", {"hdr.ipv4.dstAddr": (f"10.{i}.0.0", 16)},
                       "RouterIngress.set_nhop", {"dmac": i + 1, "smac": 0xAA, "port": i + 1})
    p.insert_entry("RouterIngress.acl", {"hdr.ipv4.srcAddr": ("172.16.0.0", "255.255.0.0"), "dport": (0, 100)},
                   "RouterIngress.acl_deny", priority=10)
    return p


@pytest.fixture(scope="module")
def router():
    return router_pair()


ROUTER_PACKETS = [bytes(Ether() / IP(src=src, dst=f"10.{i}.0.1", ttl=ttl) / UDP(dport=dport) / Raw(b"x" * 20))
                  for i in range(5) for src, dport, ttl in (("192.168.0.1", 53, 64), ("172.16.3.4", 80, 2),
                                                            ("172.16.3.4", 200, 1))]
ROUTER_PACKETS += [bytes(Ether() / IP(dst="10.1.0.1", ihl=6, options=b"\x01\x01\x01\x01") / TCP()),
                   bytes(Ether() / IP(dst="10.2.2.2") / TCP(dport=99) / Raw(b"y"))]


@settings(max_examples=200, deadline=None)
@given(mutated(ROUTER_PACKETS), st.integers(0, 4), st.booleans())
def test_router_fast_equals_reference(router, data, port, run):
    router.inject(port, data)                    # queues of 4: a backlog builds up and tail-drops
    if run:
        router.run()
    router.check()


def test_table_cache_follows_every_change():
    """The cached simple-table result (keyed by the bare value) is dropped on insert, modify, delete and
    default-action changes: every packet after a change takes the new path, as with no cache."""
    p = router_pair()
    pkt = bytes(Ether() / IP(dst="10.7.0.1") / UDP() / Raw(b"z"))

    def port():
        (a, b, c) = p.send(1, pkt)
        assert [(d.port, d.data) for d in a] == [(d.port, d.data) for d in b] == [(d.port, d.data) for d in c]
        return [d.port for d in a]
    assert port() == []                                                   # default: drop
    p.insert_entry("RouterIngress.ipv4_lpm", {"hdr.ipv4.dstAddr": ("10.7.0.0", 16)}, "RouterIngress.set_nhop",
                   {"dmac": 1, "smac": 2, "port": 3})
    assert port() == [3]
    p.insert_entry("RouterIngress.ipv4_lpm", {"hdr.ipv4.dstAddr": ("10.7.0.0", 24)}, "RouterIngress.set_nhop",
                   {"dmac": 1, "smac": 2, "port": 4})
    assert port() == [4]                                                  # longer prefix wins
    p.modify_entry("RouterIngress.ipv4_lpm", {"hdr.ipv4.dstAddr": ("10.7.0.0", 24)}, "RouterIngress.set_nhop",
                   {"dmac": 1, "smac": 2, "port": 2})
    assert port() == [2]
    p.delete_entry("RouterIngress.ipv4_lpm", {"hdr.ipv4.dstAddr": ("10.7.0.0", 24)})
    assert port() == [3]
    p.delete_entry("RouterIngress.ipv4_lpm", {"hdr.ipv4.dstAddr": ("10.7.0.0", 16)})
    p.set_default_action("RouterIngress.ipv4_lpm", "RouterIngress.set_nhop", {"dmac": 1, "smac": 2, "port": 1})
    assert port() == [1]
    p.reset_default_action("RouterIngress.ipv4_lpm")
    assert port() == []
    # the ACL has a direct counter: its cache holds (entry, result), the entry is counted per hit
    p.set_default_action("RouterIngress.ipv4_lpm", "RouterIngress.set_nhop", {"dmac": 1, "smac": 2, "port": 1})
    acl = {"hdr.ipv4.srcAddr": ("192.168.0.0", "255.255.0.0"), "dport": (0, 100)}
    p.insert_entry("RouterIngress.acl", acl, "RouterIngress.acl_deny", priority=20)
    pkt = bytes(Ether() / IP(src="192.168.1.1", dst="10.7.0.1") / UDP(dport=53) / Raw(b"z"))
    assert port() == [] and port() == []
    p.modify_entry("RouterIngress.acl", acl, "RouterIngress.acl_permit", priority=20)
    assert port() == [1]
    assert p.fast.direct_counter("RouterIngress.acl", acl, 20)[0] == 3
    p.delete_entry("RouterIngress.acl", acl, priority=20)
    assert port() == [1]
    p.check()


def dlcp_packets() -> list[bytes]:
    out = []
    for i in range(8):
        ip = IP(src=f"192.168.0.{i}", dst=f"10.{i % 3}.0.1", tos=(i % 8) << 2 | (i % 3), ttl=1 + i % 3)
        if i % 2:
            hdr = wire.Header(priority=i % 8, layer=i, seq=0, total=1).pack()
            out.append(bytes(Ether() / ip / UDP(sport=1000 + i, dport=wire.UDP_PORT) / Raw(hdr + b"d" * 8)))
        else:
            out.append(bytes(Ether() / ip / UDP(sport=1000 + i, dport=53) / Raw(b"u" * 8)))
    out.append(bytes(Ether() / IP(dst="10.1.0.9", options=b"\x01\x01\x01\x01\x01\x01\x01\x00") / TCP()))
    out.append(bytes(Ether() / ARP(pdst="10.2.0.7")))
    return out


@pytest.fixture(scope="module")
def dlcp():
    p = Pair(str(ROOT / "p4src/dlcp.p4"), priority_queues=8)
    p.set_queue_depth(3)
    for i in range(3):
        p.insert_entry("DlcpIngress.ipv4_lpm", {"meta.dst_addr": (f"10.{i}.0.0", 16)}, "DlcpIngress.set_nhop",
                       {"dmac": i + 1, "smac": 0xAA, "port": i + 1, "nhop_id": i})
    p.insert_entry("DlcpIngress.dlcp_priority", {"hdr.dlcp.msg_type": (0, 0xF)}, "DlcpIngress.trust_dlcp_priority",
                   priority=1)
    for d in range(0, 64, 5):
        p.insert_entry("DlcpIngress.dscp_priority", {"hdr.ipv4.dscp": d}, "DlcpIngress.set_priority",
                       {"prio": d % 8})
    for port in range(4):
        for prio in range(8):
            p.register_write("mark_threshold", port * 8 + prio, 1)
            p.register_write("drop_threshold", port * 8 + prio, 2)
    return p


@settings(max_examples=200, deadline=None)
@given(mutated(dlcp_packets()), st.integers(0, 3), st.booleans())
def test_dlcp_fast_equals_reference(dlcp, data, port, run):
    dlcp.inject(port, data)
    if run:
        dlcp.run()
    dlcp.check()


@pytest.mark.parametrize("program", ["stack_counter.p4", "varbit_shared.p4", "arith.p4", "ecn.p4", "ecmp.p4", "p4rt_router.p4"])
def test_other_programs_fast_equal_reference(program):
    p = Pair(str(PROGRAMS / program), fused=program != "stack_counter.p4")   # header stacks: not fused

    types = st.sampled_from([b"\x08\x00", b"\x88\x47", b"\x90\x01", b"\x88\xb5", b"\x12\x34"])

    @settings(max_examples=80, deadline=None)
    @given(st.one_of(st.binary(max_size=96), st.tuples(st.binary(min_size=12, max_size=12), types,
                                                         st.binary(max_size=80)).map(b"".join)),
           st.integers(0, 3))
    def run(data, port):
        p.send(port, data)
        p.check()
    run()


# ---- the fused mode's own constructs ---------------------------------------------------------------------
# Returns in actions and controls (one-pass loops), exit from an inlined action and from a switch case, a
# nested action call with the same parameter name, local variables set before use (no initial value) and
# read before set, constant arguments (a counter index in range and out of it), table applies in an if
# condition and a switch, a header copy and setInvalid (not re-emitted from the received bytes), a header
# nothing writes (re-emitted from them, and read by egress), verify checksums summed from the received
# bytes (one leaving out the checksum field, one a 32-bit field), standard_metadata read in egress, egress
# drops, reject, multicast replicas with their egress_rid.
FUSED_P4 = """#include <core.p4>
#include <v1model.p4>

header eth_t { bit<48> dst; bit<48> src; bit<16> type; }
header tag_t { bit<16> a; bit<32> b; bit<16> csum; bit<8> kind; bit<8> idx; }
header pass_t { bit<8> x; bit<8> y; }
header tail_t { bit<24> z; }

struct headers_t { eth_t eth; tag_t tag; pass_t ps; pass_t cp; tail_t tail; }
struct meta_t { bit<8> n; bit<8> m; bit<32> k; }

parser P(packet_in pkt, out headers_t h, inout meta_t m, inout standard_metadata_t sm) {
    state start {
        pkt.extract(h.eth);
        transition select(h.eth.type) { 0x88B7: tag; default: accept; }
    }
    state tag {
        pkt.extract(h.tag);
        transition select(h.tag.kind) { 1: ps; 2: ps2; 3: reject; default: accept; }
    }
    state ps { pkt.extract(h.ps); pkt.extract(h.tail); transition accept; }
    state ps2 { pkt.extract(h.ps); pkt.extract(h.cp); transition accept; }
}

control V(inout headers_t h, inout meta_t m) {
    apply {
        verify_checksum(h.tag.isValid(), { h.tag.a, h.tag.b, h.tag.kind, h.tag.idx }, h.tag.csum,
                        HashAlgorithm.csum16);
        verify_checksum(h.tag.kind == 9, { h.tag.a, h.tag.csum, h.tag.kind, h.tag.idx }, h.tag.csum,
                        HashAlgorithm.csum16);
    }
}

control I(inout headers_t h, inout meta_t m, inout standard_metadata_t sm) {
    counter(4, CounterType.packets_and_bytes) cnt;
    register<bit<8>>(4) reg;
    action nop() { }
    action count_it(bit<32> i) { cnt.count(i); }
    action early(bit<8> v) {
        m.n = v;
        if (v == 3) {
            return;
        }
        m.m = v + 1;
    }
    action outer(bit<8> v) { early(v + 1); m.k = (bit<32>)v; }
    action bail() { m.n = 99; exit; }
    action fwd(bit<9> port) { sm.egress_spec = port; }
    table t1 {
        key = { h.tag.kind: exact; }
        actions = { fwd; early; bail; nop; }
        default_action = nop();
        size = 16;
    }
    table t2 {
        key = { h.tag.idx: ternary; }
        actions = { fwd; nop; }
        default_action = fwd(2);
        size = 16;
    }
    apply {
        sm.egress_spec = 1;
        if (!h.tag.isValid()) {
            return;
        }
        count_it(4);
        count_it(1);
        count_it((bit<32>)h.tag.idx);
        outer(h.tag.a[7:0]);
        bit<8> acc;
        acc = acc + h.tag.idx;
        m.n = m.n + acc;
        if (sm.checksum_error == 1) {
            h.eth.type = 0xBAD0;
        }
        if (t1.apply().hit) {
            switch (t2.apply().action_run) {
                fwd: { m.m = m.m + 10; }
                default: { bail(); }
            }
        }
        if (h.tag.kind == 2) {
            h.cp = h.ps;
            h.ps.setInvalid();
        }
        bit<8> r;
        reg.read(r, (bit<32>)h.tag.idx);
        reg.write((bit<32>)h.tag.idx, r + m.n);
        h.tag.idx = r;
        if (h.tag.kind == 7) {
            sm.mcast_grp = 1;
        }
    }
}

control E(inout headers_t h, inout meta_t m, inout standard_metadata_t sm) {
    apply {
        if (!h.tag.isValid()) {
            return;
        }
        h.eth.src = (bit<48>)sm.deq_timedelta;
        h.eth.dst[15:0] = (bit<16>)sm.enq_qdepth;
        h.eth.dst[31:16] = (bit<16>)sm.deq_qdepth;
        h.eth.dst[47:40] = m.m;
        if (sm.instance_type == 5) {
            h.tag.kind = (bit<8>)sm.egress_rid;
        }
        if (h.tail.z == 5) {
            h.tag.b = h.tag.b + 1;
        }
        if (h.tag.a == 0xDEAD) {
            mark_to_drop(sm);
        }
    }
}

control C(inout headers_t h, inout meta_t m) {
    apply {
        update_checksum(h.tag.isValid(), { h.tag.a, h.tag.b, h.tag.kind, h.tag.idx }, h.tag.csum,
                        HashAlgorithm.csum16);
    }
}

control D(packet_out pkt, in headers_t h) {
    apply { pkt.emit(h.eth); pkt.emit(h.tag); pkt.emit(h.ps); pkt.emit(h.cp); pkt.emit(h.tail); }
}

V1Switch(P(), V(), I(), E(), C(), D()) main;
"""
FUSED_GROUP = [(1, 21), (3, 23)]


def tag_packet(kind: int, idx: int, a: int = 0x1234, b: int = 0xCAFEF00D, tail: int = 5, good: bool = True) -> bytes:
    csum = runtime.csum16(struct.pack("!HIBB", a, b, kind, idx))
    tag = struct.pack("!HIHBB", a, b, csum if good else csum ^ 0x10, kind, idx)
    return bytes(Ether(dst="00:00:00:00:00:02", type=0x88B7)) + tag + b"\x11\x22" + tail.to_bytes(3, "big") + b"data"


def fused_pair(tmp_path, source: str = FUSED_P4, fused: bool = True) -> Pair:
    path = tmp_path / "fused.p4"
    path.write_text(source)
    p = Pair(str(path), fused=fused, mcast_groups={1: FUSED_GROUP})
    p.set_queue_depth(3)
    p.insert_entry("I.t1", {"h.tag.kind": 1}, "I.fwd", {"port": 2})
    p.insert_entry("I.t1", {"h.tag.kind": 4}, "I.early", {"v": 3})
    p.insert_entry("I.t1", {"h.tag.kind": 5}, "I.bail")
    p.insert_entry("I.t1", {"h.tag.kind": 7}, "I.nop")
    p.insert_entry("I.t2", {"h.tag.idx": (1, 1)}, "I.nop", priority=5)
    p.insert_entry("I.t2", {"h.tag.idx": (2, 2)}, "I.fwd", {"port": 3}, priority=4)
    return p


FUSED_PACKETS = [tag_packet(k, i, a=a, good=g) for k in (0, 1, 2, 3, 4, 5, 7, 9) for i in (0, 1, 2, 3, 200)
                 for a, g in ((0x1234, True), (0x0002, False), (0xDEAD, True))]


def test_fused_constructs_equal_reference(tmp_path):
    p = fused_pair(tmp_path)
    p.fast.tm.set_port(1, delay_ns=500)
    for sw in p.all[1:]:
        sw.tm.set_port(1, delay_ns=500)

    @settings(max_examples=150, deadline=None)
    @given(mutated(FUSED_PACKETS), st.integers(0, 3), st.sampled_from(["inject", "at", "run"]))
    def run(data, port, how):
        if how == "at":                              # as the daemon: inject at a time, which drains first
            t = p.fast.now_ns + 700
            p.inject(port, data, t)
        else:
            p.inject(port, data)
            if how == "run":
                p.run()
        p.check()
    run()
    for data in FUSED_PACKETS:                      # every construct at least once, unmutated
        p.inject(0, data)
        p.run()
    p.check()
    got = {d.data[14 + 8] for d in p.fast.outputs if len(d.data) > 24 and d.data[12:14] == b"\x88\xb7"}
    assert {21, 23} <= got                          # multicast copies carry their egress_rid


def test_fused_fallback_when_an_apply_is_conditional(tmp_path):
    """A table applied in the right operand of && runs only when the left one holds: that cannot be
    placed before the statement, so the program is generated in list mode -- and still behaves the same."""
    src = FUSED_P4.replace("if (t1.apply().hit) {", "if (h.tag.idx != 3 && t1.apply().hit) {")
    assert src != FUSED_P4
    p = fused_pair(tmp_path, src, fused=False)
    assert "conditionally evaluated" in p.fast.not_fused_because
    for data in FUSED_PACKETS:
        p.send(1, data)
    p.check()


def test_fused_paths_are_taken():
    """The programs the benchmark measures do compile to the fused functions, with the headers nothing
    writes re-emitted from the received bytes and the IPv4 verify checksum summed from them."""
    sw = Switch(str(ROOT / "p4src/dlcp.p4"), priority_queues=8)
    assert sw.fused
    deparse = next(x for x in sw.source.splitlines() if "g_data = " in x)
    assert deparse.count("pkt[") == 4                # arp, tcp, udp, dlcp; ethernet and ipv4 are rewritten
    assert "sum(U" in sw.source
    assert Switch(str(PROGRAMS / "l3_router.p4")).fused


@pytest.mark.parametrize("nprio", [1, 4])
def test_dlcp_link_emulation_and_priorities_equal_reference(nprio):
    """Loss, delay and a queue rate on the fused glue; with fewer queues than DLCP priorities, packets of
    a priority out of range are dropped and counted."""
    p = Pair(str(ROOT / "p4src/dlcp.p4"), priority_queues=nprio)
    for i in range(3):
        p.insert_entry("DlcpIngress.ipv4_lpm", {"meta.dst_addr": (f"10.{i}.0.0", 16)}, "DlcpIngress.set_nhop",
                       {"dmac": i + 1, "smac": 0xAA, "port": i + 1, "nhop_id": i})
    p.insert_entry("DlcpIngress.dlcp_priority", {"hdr.dlcp.msg_type": (0, 0xF)}, "DlcpIngress.trust_dlcp_priority",
                   priority=1)
    for sw in p.all:
        sw.tm.set_port(2, rate_bps=1e9, loss=0.3)
        sw.tm.set_port(3, delay_ns=2000, loss=0.2)
        sw.tm.set_queue_rate(1e5, 3)
    pk = dlcp_packets()
    for r in range(6):
        for i, data in enumerate(pk):
            p.inject(i % 4, data, p.fast.now_ns + 300 * (r % 2))
        p.run(p.fast.now_ns + 10_000)
        p.check()
    p.run()
    p.check()
    assert any(k[2] == "emulated_loss" for k in p.fast.tm.drops)
    if nprio < 8:
        assert any(k[2] == "priority_out_of_range" for k in p.fast.tm.drops)


def _stepwise(tm, until, now, egress):
    """The reference loop drain() stands for: next_departure, then dequeue_raw, one packet at a time."""
    while True:
        nd = tm.next_departure()
        if nd is None or (until is not None and nd[0] > until):
            return now
        t, port, prio = nd
        now = max(now, t)
        e, depth = tm.dequeue_raw(port, prio, now)
        egress(port, prio, e, depth, now)


@settings(max_examples=120, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3), st.integers(0, 2), st.booleans()), max_size=60),
       st.integers(1, 4), st.booleans())
def test_drain_runs_and_single_packets_equal_stepwise(ops, nprio, shaped_first):
    """drain()'s shortcuts -- a run of due packets from one queue, and one queued packet -- against the
    step-by-step loop: the same departures, times, depths and queue statistics, in batches (enqueue many,
    then drain), one at a time (as the switch daemon drives it), and with enqueue times in the future."""
    from switch.target.tm import TrafficManager
    tms = [TrafficManager(nprio, 5, 1) for _ in range(2)]
    if shaped_first:
        for tm in tms:
            tm.set_queue_rate(1e6, 2, 0)           # leaves next_ok_ns behind once switched off
    logs: list[list] = [[], []]
    now = [0, 0]
    for step, (port, prio, dt, drain_now) in enumerate(ops):
        for i, tm in enumerate(tms):
            if step == len(ops) // 2 and shaped_first:
                tm.set_queue_rate(0, 2, 0)
            tm.enqueue(port, prio, (step,), 100, now[i] + dt * 1000)

            def egress(port, prio, e, depth, t, log=logs[i]):
                log.append((port, prio, e[0], e[1:], depth, t))
            if drain_now:
                run = tm.drain if i == 0 else (lambda u, n, eg, tm=tm: _stepwise(tm, u, n, eg))
                now[i] = run(now[i] + dt * 500, now[i], egress)
    for i, tm in enumerate(tms):
        def final(port, prio, e, depth, t, log=logs[i]):
            log.append((port, prio, e[0], e[1:], depth, t))
        now[i] = (tm.drain if i == 0 else (lambda u, n, eg, tm=tm: _stepwise(tm, u, n, eg)))(None, now[i], final)
    assert logs[0] == logs[1] and now[0] == now[1]
    stats = [{k: (q.enq_packets, q.deq_packets, q.peak_depth) for k, q in tm.queues.items()} for tm in tms]
    assert stats[0] == stats[1] and tms[0].drops == tms[1].drops and tms[0].backlog == tms[1].backlog == 0
