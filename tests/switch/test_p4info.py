"""P4Info: p4c's id scheme, names, aliases, and the text file parses back."""
from pathlib import Path

from finsy.proto import p4i
from google.protobuf import text_format

from switch.frontend.check import load_ir
from switch.backend.p4info import P4InfoBuilder, assign_ids, jenkins_one_at_a_time, to_text

PROGRAMS = Path(__file__).parent / "programs"


def jenkins_by_hand(s: str) -> int:
    h = 0
    for c in s.encode():
        h = (h + c) % 2**32
        h = (h + (h * 1024)) % 2**32
        h = h ^ (h // 64)
    h = (h + h * 8) % 2**32
    h = h ^ (h // 2048)
    return (h + h * 32768) % 2**32


def test_jenkins_and_prefix():
    for name in ("NoAction", "RouterIngress.ipv4_lpm", "a"):
        assert jenkins_one_at_a_time(name.encode()) == jenkins_by_hand(name)
    info = P4InfoBuilder(load_ir(str(PROGRAMS / "l3_router.p4"))).build()
    acts = {a.preamble.name: a.preamble.id for a in info.actions}
    # NoAction's id in every p4c-generated v1model P4Info
    assert acts["NoAction"] == 21257015 == (0x01 << 24) | (jenkins_by_hand("NoAction") & 0xFFFFFF)
    tables = {t.preamble.name: t for t in info.tables}
    t = tables["RouterIngress.ipv4_lpm"]
    assert t.preamble.id == (0x02 << 24) | (jenkins_by_hand("RouterIngress.ipv4_lpm") & 0xFFFFFF)
    assert t.preamble.alias == "ipv4_lpm"
    assert [f.name for f in t.match_fields] == ["hdr.ipv4.dstAddr"]
    assert t.match_fields[0].match_type == p4i.MatchField.LPM and t.match_fields[0].bitwidth == 32
    acl = tables["RouterIngress.acl"]
    assert [f.name for f in acl.match_fields][-1] == "dport"
    assert acl.direct_resource_ids[0] >> 24 == 0x13
    c = info.counters[0]
    assert c.preamble.id >> 24 == 0x12 and c.size == 64 and c.spec.unit == p4i.CounterSpec.BOTH
    sn = {a.preamble.name: a for a in info.actions}["RouterIngress.set_nhop"]
    assert [(p.id, p.name, p.bitwidth) for p in sn.params] == [(1, "dmac", 48), (2, "smac", 48), (3, "port", 9)]


def test_probing_and_id_annotation():
    ids = assign_ids("tables", ["b", "a"], {"c": 5}, set())
    assert ids["c"] == (0x02 << 24) | 5
    taken = {(0x02 << 24) | (jenkins_by_hand("a") & 0xFFFFFF)}
    ids = assign_ids("tables", ["a"], {}, taken)
    assert ids["a"] == ((0x02 << 24) | ((jenkins_by_hand("a") + 1) & 0xFFFFFF))


def test_selector_profile_and_text_round_trip(tmp_path):
    info = P4InfoBuilder(load_ir(str(PROGRAMS / "ecmp.p4"))).build()
    prof = info.action_profiles[0]
    assert prof.preamble.name == "I.ecmp_sel" and prof.with_selector and prof.size == 64
    t = info.tables[0]
    assert t.implementation_id == prof.preamble.id and prof.table_ids == [t.preamble.id]
    assert [f.name for f in t.match_fields] == ["h.ipv4.dstAddr"]        # selector fields are not listed
    assert info.meters[0].size == 16
    text = to_text(info)
    assert text.startswith("# proto-file: p4/config/v1/p4info.proto\n# proto-message: p4.config.v1.P4Info")
    back = text_format.Parse(text, p4i.P4Info())
    assert back == info and back.pkg_info.arch == "v1model"
    reg = P4InfoBuilder(load_ir(str(PROGRAMS / "stack_counter.p4"))).build().registers[0]
    assert reg.type_spec.bitstring.bit.bitwidth == 32 and reg.size == 16 and reg.preamble.id >> 24 == 0x16


DLCP = Path(__file__).parents[2] / "p4src" / "dlcp.p4"


def test_dlcp_p4info_as_p4c_writes_it():
    """What p4c (p4c-bm2-ss, P4Runtime 1.4 serializer) writes for dlcp.p4 and the embedded front end once did
    not: the directly called action drop_with (no table refers to it; p4c binds all its parameters, so it lists
    none), and every table's initial_default_action with its arguments as padded big-endian bytes."""
    info = P4InfoBuilder(load_ir(str(DLCP), [str(DLCP.parent)])).build()
    acts = {a.preamble.name: a for a in info.actions}
    drop = acts["DlcpIngress.drop_with"]
    assert list(drop.params) == []
    assert all(drop.preamble.id not in [r.id for r in t.action_refs] for t in info.tables)
    defaults = {t.preamble.name: t.initial_default_action for t in info.tables}
    assert set(defaults) == {"DlcpIngress.ipv4_lpm", "DlcpIngress.ecmp_nhop", "DlcpIngress.dlcp_priority",
                             "DlcpIngress.dscp_priority"}
    for name in ("DlcpIngress.ipv4_lpm", "DlcpIngress.ecmp_nhop"):
        assert defaults[name].action_id == acts["DlcpIngress.no_route"].preamble.id
        assert list(defaults[name].arguments) == []
    for name in ("DlcpIngress.dlcp_priority", "DlcpIngress.dscp_priority"):       # set_priority(0), bit<3>
        d = defaults[name]
        assert d.action_id == acts["DlcpIngress.set_priority"].preamble.id
        assert [(a.param_id, a.value) for a in d.arguments] == [(1, b"\x00")]


ORDER_P4 = """
#include <core.p4>
#include <v1model.p4>
header h_t { bit<8> a; bit<8> b; }
struct H { h_t h; }
struct M { bit<8> x; }
action top_b() { }
action top_a() { }
parser P(packet_in pkt, out H hdr, inout M m, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.h); transition accept; }
}
control V(inout H hdr, inout M m) { apply { } }
control I(inout H hdr, inout M m, inout standard_metadata_t sm) {
    counter(4, CounterType.packets) zc;
    counter(4, CounterType.packets) ac;
    action zeta(bit<8> v) { hdr.h.b = v; }
    action alpha() { hdr.h.b = 1; }
    action unused() { }
    action direct(bit<9> port) { sm.egress_spec = port; }
    table zt { key = { hdr.h.a: exact; } actions = { zeta; top_b; } default_action = zeta(0x2a); }
    table at { key = { hdr.h.b: exact; } actions = { alpha; NoAction; top_a; } const default_action = alpha(); }
    apply { zt.apply(); at.apply(); direct(1); }
}
control E(inout H hdr, inout M m, inout standard_metadata_t sm) {
    action egress_only() { }
    table et { key = { hdr.h.a: exact; } actions = { egress_only; NoAction; } }
    apply { et.apply(); }
}
control C(inout H hdr, inout M m) { apply { } }
control D(packet_out pkt, in H hdr) { apply { pkt.emit(hdr.h); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
"""


def test_entities_in_p4cs_order(tmp_path):
    """p4c lists entities in the order its serializer visits the program, not by id: per control (V1Switch's
    order), the top-level actions the control uses in the order of first use (p4c copies them ahead of the
    control's own declarations), then the control's own actions in declaration order; unused actions are left
    out (p4c removes them); tables and externs in declaration order.  (The names are chosen so that sorting by
    id or by name would give another order.)"""
    f = tmp_path / "order.p4"
    f.write_text(ORDER_P4)
    info = P4InfoBuilder(load_ir(str(f))).build()
    assert [a.preamble.name for a in info.actions] == [
        "top_b", "NoAction", "top_a", "I.zeta", "I.alpha", "I.direct", "E.egress_only"]
    assert [t.preamble.name for t in info.tables] == ["I.zt", "I.at", "E.et"]
    assert [c.preamble.name for c in info.counters] == ["I.zc", "I.ac"]
    ids = {a.preamble.name: a.preamble.id for a in info.actions}
    assert [a.preamble.name for a in info.actions] != sorted(ids, key=ids.get)
    na = next(a for a in info.actions if a.preamble.name == "NoAction")
    assert list(na.preamble.annotations) == ['@noWarn("unused")']                 # core.p4's, kept as p4c keeps it
    zt, at, et = info.tables
    assert (zt.initial_default_action.action_id, [(a.param_id, a.value) for a in zt.initial_default_action.arguments]) \
        == (ids["I.zeta"], [(1, b"\x2a")])
    assert zt.const_default_action_id == 0
    assert at.const_default_action_id == at.initial_default_action.action_id == ids["I.alpha"]
    assert et.initial_default_action.action_id == ids["NoAction"]                 # no default_action: NoAction
    assert [p.name for p in next(a for a in info.actions if a.preamble.name == "I.direct").params] == []
