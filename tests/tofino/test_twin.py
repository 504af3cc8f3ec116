"""The Tofino twin (p4src/tofino/dlcp_tna.p4) against dlcp.p4, without the Tofino back end: the same headers, parse
graph and P4Runtime names, the generated per-flow table, and the resource summary's arithmetic. What needs the back
end (compiling, its P4Info and resource figures) is in tests/tofino/backend_suite.py (`make test-tofino`)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from controller.client import load_program
from controller.state import MANAGED_REGISTERS, MANAGED_TABLES

ROOT = Path(__file__).resolve().parents[2]
V1MODEL = ROOT / "p4src" / "dlcp.p4"
TWIN = ROOT / "p4src" / "tofino" / "dlcp_tna.p4"
TWIN_P4INFO = ROOT / "p4src" / "tofino" / "dlcp_tna.p4info.txt"

#: Headers both programs declare themselves (dlcp_h comes from the shared include: tests/test_wire.py).
SHARED_HEADERS = ("ethernet_t", "arp_t", "ipv4_t", "ipv4_options_t", "tcp_t", "udp_t", "packet_out_h", "packet_in_h")
#: v1model objects the twin does without, and why (docs/p4-tofino.md): the TM's colour admission replaces the
#: ingress estimate of queue depths.
V1MODEL_ONLY = {"queue_depth"}


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _code(text: str) -> str:
    """P4 text without comments, whitespace runs collapsed."""
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    return re.sub(r"\s+", " ", text)


def _header_body(text: str, name: str) -> str:
    m = re.search(r"\bheader " + name + r" \{(.*?)\}", _code(text))
    assert m, f"header {name} not declared"
    # @padding (a field the Tofino back end need not write) changes no bit of the layout
    return re.sub(r"@padding ", "", m.group(1)).strip()


def _typedefs(text: str) -> dict[str, str]:
    return {m.group(2): m.group(1) for m in re.finditer(r"\btypedef (bit ?< ?\d+ ?>) (\w+) ?;", _code(text))}


def _declared(text: str) -> dict[str, set[str]]:
    """Tables, actions, registers and counters a program declares, by the name P4Runtime aliases them with."""
    code = _code(text)
    return {
        "tables": set(re.findall(r"\btable (\w+) ?\{", code)),
        "actions": set(re.findall(r"\baction (\w+) ?\(", code)),
        "registers": set(re.findall(r"\b[Rr]egister ?<[^;()]*> ?\([^;]*?\) (\w+) ?;", code)),
        "counters": set(re.findall(r"\b(?:counter|Counter ?<[^;()]*>) ?\([^;]*?\) (\w+) ?;", code)),
    }


def test_headers_are_dlcp_p4s() -> None:
    v1, twin = V1MODEL.read_text(), TWIN.read_text()
    for name in SHARED_HEADERS:
        assert _header_body(twin, name) == _header_body(v1, name), f"header {name} differs from dlcp.p4's"
    assert _typedefs(twin) == _typedefs(v1)


def test_header_comparison_can_fail() -> None:
    twin = TWIN.read_text()
    changed = twin.replace("bit<8>  ttl;", "bit<7>  ttl;")
    assert changed != twin
    assert _header_body(changed, "ipv4_t") != _header_body(V1MODEL.read_text(), "ipv4_t")


def test_parse_graph_extracts_the_same_headers() -> None:
    def extracted(text: str) -> set[str]:
        return set(re.findall(r"\.extract\(hdr\.(\w+)", _code(text)))

    assert extracted(TWIN.read_text()) - {"bridge"} == extracted(V1MODEL.read_text())
    for text in (V1MODEL.read_text(), TWIN.read_text()):
        code = _code(text)
        assert re.search(r"select\(hdr\.udp\.dstPort\) \{ DLCP_UDP_PORT: parse_dlcp;", code)
        assert re.search(r"\(0, PROTO_UDP\): parse_udp;", code)


def test_p4runtime_names_are_dlcp_p4s_where_tna_allows() -> None:
    """Every table, action, register and counter of dlcp.p4's P4Info (embedded compiler) is in the twin under the same
    alias, except the v1model-only ones the docs explain; everything the controller manages is there."""
    info = load_program(V1MODEL).p4info
    v1 = {"tables": {t.preamble.alias for t in info.tables}, "actions": {a.preamble.alias for a in info.actions},
          "registers": {r.preamble.alias for r in info.registers}, "counters": {c.preamble.alias for c in info.counters}}
    twin = _declared(TWIN.read_text())
    for kind, names in v1.items():
        missing = names - twin[kind] - V1MODEL_ONLY
        assert not missing, f"the twin lacks dlcp.p4's {kind}: {sorted(missing)}"
    assert set(MANAGED_TABLES) <= twin["tables"]
    assert set(MANAGED_REGISTERS) <= twin["registers"]
    assert V1MODEL_ONLY <= v1["registers"] and not V1MODEL_ONLY & twin["registers"]


def test_committed_p4info_has_the_names_the_source_declares() -> None:
    """The P4Info the Tofino back end wrote (committed) agrees with the source's declarations, so the checks above
    speak about what a P4Runtime client sees."""
    from controller.client import load_p4info_program

    info = load_p4info_program(TWIN_P4INFO, None).p4info
    declared = _declared(TWIN.read_text())
    assert {t.preamble.alias for t in info.tables} >= set(MANAGED_TABLES)
    assert {r.preamble.alias for r in info.registers} == declared["registers"]
    assert {c.preamble.alias for c in info.counters} == declared["counters"]


def test_committed_p4infos_of_both_chips_differ_only_in_the_architecture() -> None:
    """dlcpctl writes the same entities and ids to a Tofino 1 and a Tofino 2 (docs/controller.md): the committed
    P4Infos (scripts/tofino_resources.py) differ in pkg_info.arch alone."""
    res = _load("tofino_resources", ROOT / "scripts" / "tofino_resources.py")
    assert res.P4INFOS["tofino"] == TWIN_P4INFO
    texts = {t: p.read_text() for t, p in res.P4INFOS.items()}
    assert set(texts) == {"tofino", "tofino2"}
    assert res.p4info_but_arch(texts["tofino"]) == res.p4info_but_arch(texts["tofino2"])
    assert [res.p4info_but_arch(t).pkg_info.arch for t in texts.values()] == ["", ""]
    assert 'arch: "tna"' in texts["tofino"] and 'arch: "t2na"' in texts["tofino2"]


def test_flow_index_entries_are_generated_and_partition_the_hash() -> None:
    gen = _load("gen_flow_index", ROOT / "p4src" / "tofino" / "gen_flow_index.py")
    assert gen.OUT.read_text() == gen.render(), "flow_index_entries.p4 is stale: python p4src/tofino/gen_flow_index.py"
    for size in range(1, gen.MAX_SIZE + 1):
        rs = gen.ranges(size)
        assert rs[0][0] == 0 and rs[-1][1] == gen.HASH_SPACE - 1
        assert all(a[1] + 1 == b[0] for a, b in zip(rs, rs[1:]))
        shares = [hi - lo + 1 for lo, hi in rs]
        assert max(shares) - min(shares) <= 1
        for member, (lo, hi) in enumerate(rs):  # the range holds exactly the h with floor(h * size / 65536) = member
            assert lo * size // gen.HASH_SPACE == member == hi * size // gen.HASH_SPACE
    with pytest.raises(ValueError, match="group size 17"):
        gen.ranges(17)


def _stage(n: int, tables: list[str], srams: int, tcams: int, salus: int) -> dict:
    use = [{"used_by": "t", "used_for": "match"}]
    return {
        "stage_number": n,
        "logical_tables": {"size": 16, "ids": [{"id": i, "table_name": t} for i, t in enumerate(tables)]},
        "rams": {"nRows": 8, "nColumns": 10, "srams": [{"row": 0, "column": c, "usages": use} for c in range(srams)]},
        "tcams": {"nRows": 12, "nColumns": 2, "tcams": [{"row": r, "column": 0, "usages": use} for r in range(tcams)]},
        "map_rams": {"nRows": 8, "nUnits": 6, "maprams": []},
        "meter_alus": {"nAlus": 4, "meters": [{"row": r, "usages": use} for r in range(salus)]},
        "statistic_alus": {"nAlus": 4, "stats": []},
        "gateways": {"nRows": 8, "nUnits": 2, "gateways": []},
        "xbar_bytes": {"size": 128, "exact_size": 64, "ternary_size": 66, "bytes": []},
        "vliw": {"size": 32, "instructions": []},
    }


def test_resource_summary_adds_up_the_back_ends_stages() -> None:
    res = _load("tofino_resources", ROOT / "scripts" / "tofino_resources.py")
    doc = {"compiler_version": "9.13.4", "resources": {"mau": {"nStages": 12, "mau_stages": [
        _stage(1, ["DlcpIngress.ecmp_nhop"], 3, 0, 1), _stage(0, ["DlcpIngress.ipv4_lpm", "tbl_a"], 2, 4, 0),
        _stage(2, [], 0, 0, 0), _stage(3, ["DlcpIngress.ecmp_nhop"], 1, 0, 0)]}}}
    s = res.summarize(doc)
    assert s["stages_used"] == 3 and s["stages_available"] == 12
    assert [st["stage"] for st in s["stages"]] == [0, 1, 3]
    assert s["tables"]["DlcpIngress.ecmp_nhop"] == [1, 3]
    assert s["used"]["sram"] == 6 and s["available"]["sram"] == 80 * 12
    assert s["used"]["tcam"] == 4 and s["available"]["tcam"] == 24 * 12
    assert s["used"]["stateful_alu"] == 1 and s["available"]["stateful_alu"] == 48
    assert s["share"]["sram"] == round(6 / 960, 4)
