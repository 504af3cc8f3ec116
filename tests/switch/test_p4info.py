"""P4Info: p4c's id scheme, names, aliases, and the text file parses back."""
from pathlib import Path

from finsy.proto import p4i
from google.protobuf import text_format

from switch.check import load_ir
from switch.p4info import P4InfoBuilder, assign_ids, jenkins_one_at_a_time, to_text

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
