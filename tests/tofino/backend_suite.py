"""The Tofino twin through p4c's open Tofino back end (`make test-tofino`; marker ``tofino``; not collected by
`make test`, whose file names start with ``test_``). Needs p4c-barefoot (scripts/build-tofino-backend.sh); without
it every test fails saying how to build it.

- the twin compiles for Tofino 1 (tna) and Tofino 2 (t2na) from its one source and fits each (stages, tables
  placed); each chip gets its own architecture include and CPU port (the compiler's preprocessor);
- the committed resource summary and both P4Infos are what the compiler makes now (scripts/tofino_resources.py
  --check), equal but for pkg_info.arch;
- dlcpctl's desired state for a tofino switch of either chip encodes against that chip's P4Info (every write it
  would make, thresholds in that chip's cells);
- the egress drop written as one action (count + drop_ctl) is refused on Tofino 2, which is why the twin splits it
  (docs/p4-tofino.md, "Tofino 2"): when a back end accepts it, this test says the split may go;
- a register may serve both gresses: the back end puts one stateful ALU behind an ingress and an egress table
  (so the twin's choice of the TM's colour admission over dlcp.p4's queue_depth estimate is not forced by it).
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from controller import netfile, state
from controller.api import Network

pytestmark = pytest.mark.tofino

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("tofino_resources", ROOT / "scripts" / "tofino_resources.py")
res = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(res)


@pytest.fixture(scope="module")
def compiler() -> Path:
    try:
        return res.find_compiler()
    except res.CompilerMissing as e:
        pytest.fail(f"make test-tofino needs p4c's Tofino back end: {e}")


@pytest.fixture(scope="module")
def compiled(compiler: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, dict[str, Path]]:
    """Both chips compiled once for the module: the results document and each target's P4Info file."""
    work = tmp_path_factory.mktemp("tofino")
    doc, p4infos = res.run(compiler, work)
    return doc, {target: work / f"{target}.p4info.txt" for target in p4infos}


#: MAU stages of each chip's pipeline: the summary is of the chip asked for.
STAGES = {"tofino": 12, "tofino2": 20}


def test_the_twin_fits_tofino_and_tofino2(compiled: tuple[dict, dict[str, Path]]) -> None:
    doc, _ = compiled
    assert [t for t, _ in res.TARGETS] == list(doc["targets"]) == ["tofino", "tofino2"]
    for target in doc["targets"]:
        s = doc["targets"][target]
        assert s["stages_available"] == STAGES[target]
        assert 0 < s["stages_used"] <= s["stages_available"]
        placed = {t.rsplit(".", 1)[-1] for t in s["tables"]}
        assert {"ipv4_lpm", "ecmp_nhop", "dlcp_priority", "dscp_priority", "flow_index"} <= placed, sorted(placed)
        assert s["used"]["tcam"] > 0 and s["used"]["stateful_alu"] >= 5  # 2 ingress + 3 egress registers


def test_committed_figures_and_p4info_are_the_compilers(compiler: Path) -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "tofino_resources.py"), "--check"],
                          capture_output=True, text=True, timeout=3600)
    assert proc.returncode == 0, proc.stderr


def test_the_p4infos_differ_only_in_the_architecture(compiled: tuple[dict, dict[str, Path]]) -> None:
    """dlcpctl writes the same entities and ids to either chip (docs/controller.md)."""
    _, p4infos = compiled
    texts = {t: p.read_text() for t, p in p4infos.items()}
    assert texts["tofino"] != texts["tofino2"]
    assert res.p4info_but_arch(texts["tofino"]) == res.p4info_but_arch(texts["tofino2"])
    assert 'arch: "tna"' in texts["tofino"] and 'arch: "t2na"' in texts["tofino2"]


def _preprocessed(compiler: Path, target: str, arch: str) -> str:
    """The twin after the compiler's own preprocessor (-E) for one target. p4c-barefoot stops after -E with exit
    3 (run_frontend returns no program), so success is output without an error."""
    includes = [arg for d in res.include_dirs() for arg in ("-I", str(d))]
    proc = subprocess.run([str(compiler), "--target", target, "--arch", arch, "-E", *includes, str(res.PROGRAM)],
                          capture_output=True, text=True, timeout=120)
    assert "error" not in proc.stderr.lower() and "parse_packet_out;" in proc.stdout, proc.stderr
    return proc.stdout


@pytest.mark.parametrize("target,arch,include,cpu_port", [("tofino", "tna", "tna.p4", 64),
                                                          ("tofino2", "t2na", "t2na.p4", 0)])
def test_each_chip_gets_its_architecture_and_cpu_port(compiler: Path, target: str, arch: str, include: str,
                                                      cpu_port: int) -> None:
    text = _preprocessed(compiler, target, arch)
    included = {Path(m).name for m in re.findall(r'^# \d+ "([^"]+)"', text, re.M)}
    assert include in included and ({"tna.p4", "t2na.p4"} - {include}).isdisjoint(included), sorted(included)
    assert re.search(rf"^\s*{cpu_port}: parse_packet_out;", text, re.M), "CPU port"


#: The egress drop as one block (the form Tofino 2 refuses), made from the twin's split form.
SPLIT_DROP = ("""                dropped = true;
                eligible_drops.count(slot);
            }""", """        if (dropped) {
            eg_dprsr_md.drop_ctl = 1;
        } else {
            port_forwarded.count(slot);
        }""")
MERGED_DROP = ("""                dropped = true;
                eligible_drops.count(slot);
                eg_dprsr_md.drop_ctl = 1;
            }""", """        if (!dropped) {
            port_forwarded.count(slot);
        }""")


def test_tofino2_refuses_the_egress_drop_as_one_action(compiler: Path, tmp_path: Path) -> None:
    """Why the twin sets drop_ctl in an action of its own: with it beside the hash-indexed eligible_drops count,
    Tofino 2's constants become action data in a keyless table, which the back end refuses (docs/p4-tofino.md)."""
    text = res.PROGRAM.read_text()
    for split, merged in zip(SPLIT_DROP, MERGED_DROP):
        assert text.count(split) == 1, f"the twin's egress drop changed; update SPLIT_DROP:\n{split}"
        text = text.replace(split, merged)
    src = tmp_path / "merged_drop.p4"
    src.write_text(text)
    includes = [arg for d in [*res.include_dirs(), res.PROGRAM.parent] for arg in ("-I", str(d))]
    proc = subprocess.run([str(compiler), "--target", "tofino2", "--arch", "t2na", "-o", str(tmp_path / "out"),
                           *includes, str(src)], capture_output=True, text=True, timeout=1800)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, "Tofino 2 now accepts the merged egress drop: the split in the twin may go"
    assert re.search(r"with no key cannot have the action \S+\.\s+This action requires hash", out), out[-3000:]


@pytest.mark.parametrize("target,cells,cpu_port", [("tofino", 19, 64), ("tofino2", 9, 0)])
def test_dlcpctl_writes_encode_against_the_back_ends_p4info(compiled: tuple[dict, dict[str, Path]], tmp_path: Path,
                                                            target: str, cells: int, cpu_port: int) -> None:
    _, p4infos = compiled
    p4info = p4infos[target]
    spec = netfile.loads("\n".join([
        "switches:",
        f"  t1: {{address: 127.0.0.1:1, target: tofino, p4info: {p4info}, cpu_port: {cpu_port}, "
        f"cells_per_packet: {cells}}}",
        f"  t2: {{address: 127.0.0.1:2, target: tofino, p4info: {p4info}, cells_per_packet: {cells}}}",
        "hosts:",
        '  h1: {ip: 10.0.0.1, mac: "02:00:00:00:00:01", attach: "t1:1"}',
        '  h2: {ip: 10.0.0.2, mac: "02:00:00:00:00:02", attach: "t2:1"}',
        "links:",
        '  - between: ["t1:2", "t2:2"]',
        '  - between: ["t1:3", "t2:3"]',
        "thresholds:",
        "  - {drop: 40, mark: 20}",
        "class_thresholds:",
        "  - {class: 0, drop: 8}",
    ]) + "\n", base=tmp_path)
    net = Network(spec)
    program = net.program("t1")
    assert program.loaded_by_switch
    net.check_program(program)
    desired = net.desired("t1")
    plan = state.diff(desired, [], managed_tables=[program.schema.tables[t].id for t in state.MANAGED_TABLES],
                      managed_registers=[program.schema.registers[r].id for r in state.MANAGED_REGISTERS],
                      ecmp_table=program.schema.tables["ecmp_nhop"].id)
    described = [state.describe_entity(u.entity, program.schema) for u in plan.updates]
    assert any("ecmp_nhop" in d for d in described) and any("set_ecmp" in d for d in described)
    assert f"drop_threshold[{state.slot(1, 0)}] = {40 * cells}" in described
    assert f"class_drop_threshold[0] = {8 * cells}" in described


TWO_GRESS_REGISTER = """
#include <core.p4>
#include <tna.p4>
header eth_h { bit<48> dst; bit<48> src; bit<16> type; }
struct h_t { eth_h eth; }
struct m_t { }
Register<bit<32>, bit<1>>(1) shared;
parser IP(packet_in p, out h_t h, out m_t m, out ingress_intrinsic_metadata_t ig) {
    state start { p.extract(ig); p.advance(PORT_METADATA_SIZE); p.extract(h.eth); transition accept; } }
control I(inout h_t h, inout m_t m, in ingress_intrinsic_metadata_t ig, in ingress_intrinsic_metadata_from_parser_t pm,
          inout ingress_intrinsic_metadata_for_deparser_t dm, inout ingress_intrinsic_metadata_for_tm_t tm) {
    RegisterAction<bit<32>, bit<1>, bit<32>>(shared) bump = { void apply(inout bit<32> v, out bit<32> r) { v = v + 1; r = v; } };
    apply { h.eth.src[31:0] = bump.execute(0); tm.ucast_egress_port = 1; } }
control ID(packet_out p, inout h_t h, in m_t m, in ingress_intrinsic_metadata_for_deparser_t dm) { apply { p.emit(h); } }
parser EP(packet_in p, out h_t h, out m_t m, out egress_intrinsic_metadata_t eg) {
    state start { p.extract(eg); p.extract(h.eth); transition accept; } }
control E(inout h_t h, inout m_t m, in egress_intrinsic_metadata_t eg, in egress_intrinsic_metadata_from_parser_t pm,
          inout egress_intrinsic_metadata_for_deparser_t dm, inout egress_intrinsic_metadata_for_output_port_t op) {
    RegisterAction<bit<32>, bit<1>, bit<32>>(shared) peek = { void apply(inout bit<32> v, out bit<32> r) { r = v; } };
    apply { h.eth.dst[31:0] = peek.execute(0); } }
control ED(packet_out p, inout h_t h, in m_t m, in egress_intrinsic_metadata_for_deparser_t dm) { apply { p.emit(h); } }
Pipeline(IP(), I(), ID(), EP(), E(), ED()) pipe;
Switch(pipe) main;
"""


def test_a_register_can_serve_ingress_and_egress(compiler: Path, tmp_path: Path) -> None:
    """dlcp.p4's queue_depth estimate (egress writes, ingress reads) would compile: the back end accepts a register
    used from both gresses and gives both tables the one stateful ALU (docs/p4-tofino.md)."""
    src = tmp_path / "two_gress.p4"
    src.write_text(TWO_GRESS_REGISTER)
    includes = [arg for d in res.include_dirs() for arg in ("-I", str(d))]
    proc = subprocess.run([str(compiler), "--target", "tofino", "--arch", "tna", "-o", str(tmp_path / "out"),
                           *includes, str(src)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    bfa = "".join(p.read_text() for p in (tmp_path / "out").rglob("*.bfa"))
    assert len(re.findall(r"^\s*stateful \S+shared:", bfa, re.M)) == 1, bfa
    assert len(re.findall(r"^\s*stateful: \S+shared\(", bfa, re.M)) == 2, bfa
