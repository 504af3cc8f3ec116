"""A Tofino switch in a network file (``target: tofino``), and what dlcpctl does for one: the twin's P4Info (never a
pushed pipeline without a device config), thresholds in cells, no traffic-manager management. The P4Runtime server
in the live test is dlcp-switch standing in for a Tofino's: the same code path, with dlcp.p4's P4Info."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from google.protobuf import text_format
from finsy.proto import p4r

from controller import netfile, netfile_model, state
from controller.api import Network
from controller.client import load_p4info_program, load_program
from controller.errors import TrafficManagerError
from controller.netfile_yaml import NetFileError
from tests.controller.conftest import dlcpctl, start_daemon

ROOT = Path(__file__).resolve().parents[2]


def _file(tmp_path: Path, switch: str, extra: str = "", body: str = "") -> str:
    """A network file: tofino switch s1 (settings ``switch``, one per line) linked to embedded switch e1, a host on
    each (``extra``: more settings of h1's link)."""
    lines = ["switches:", "  s1:", "    address: 127.0.0.1:50999"]
    lines += [f"    {line}" for line in switch.splitlines()]
    lines += ["  e1:", "    address: 127.0.0.1:50998",
              "hosts:",
              f'  h1: {{ip: 10.0.0.1, mac: "02:00:00:00:00:01", attach: "s1:1"{extra}}}',
              '  h2: {ip: 10.0.0.2, mac: "02:00:00:00:00:02", attach: "e1:1"}',
              "links:",
              '  - between: ["s1:2", "e1:2"]']
    return "\n".join(lines) + "\n" + body


@pytest.fixture()
def p4info_file(tmp_path: Path) -> Path:
    """dlcp.p4's P4Info as text, standing in for the twin's (the same names; see the module docstring)."""
    path = tmp_path / "twin.p4info.txt"
    path.write_text(text_format.MessageToString(load_program(ROOT / "p4src" / "dlcp.p4").p4info))
    return path


def test_a_tofino_switch_gets_its_p4info_and_cells(tmp_path: Path, p4info_file: Path) -> None:
    net = netfile.loads(_file(tmp_path, f"target: tofino\np4info: {p4info_file}\ncells_per_packet: 113"),
                        base=tmp_path)
    s1 = net.switches["s1"]
    assert (s1.target, s1.p4info, s1.device_config, s1.cells_per_packet) == ("tofino", p4info_file, None, 113)
    assert net.artifacts("s1") == (p4info_file, None)
    assert net.switches["e1"].cells_per_packet == 1 and net.artifacts("e1") == (None, None)
    default = netfile.loads(_file(tmp_path, f"target: tofino\np4info: {p4info_file}"), base=tmp_path)
    assert default.switches["s1"].cells_per_packet == netfile_model.TOFINO_CELLS_PER_PACKET == 19


def test_the_twins_p4info_is_the_default_and_its_absence_is_named(tmp_path: Path, p4info_file: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(netfile, "TOFINO_P4INFO", p4info_file)
    assert netfile.loads(_file(tmp_path, "target: tofino"), base=tmp_path).switches["s1"].p4info == p4info_file
    monkeypatch.setattr(netfile, "TOFINO_P4INFO", tmp_path / "absent.p4info.txt")
    with pytest.raises(NetFileError) as e:
        netfile.loads(_file(tmp_path, "target: tofino"), path="net.yaml", base=tmp_path)
    msg = str(e.value)
    assert "net.yaml:4: switches.s1.target" in msg and "scripts/tofino_resources.py" in msg, msg


@pytest.mark.parametrize("switch, key, words", [
    ("cells_per_packet: 19", "switches.s1.cells_per_packet", "only for target: tofino"),
    ("target: tofino\nbmv2_json: {p4info}", "switches.s1.bmv2_json", "not BMv2 JSON"),
    ("target: tofino\np4info: {p4info}\ncells_per_packet: 0", "switches.s1.cells_per_packet", "0"),
    ("target: tofino\np4info: {p4info}\ndevice_config: nowhere.bin", "switches.s1.device_config", "file not found"),
])
def test_bad_tofino_settings_are_named(tmp_path: Path, p4info_file: Path, switch: str, key: str, words: str) -> None:
    with pytest.raises(NetFileError) as e:
        netfile.loads(_file(tmp_path, switch.format(p4info=p4info_file)), path="net.yaml", base=tmp_path)
    assert key in str(e.value) and words in str(e.value), str(e.value)


def test_thresholds_are_written_in_cells_on_a_tofino(tmp_path: Path, p4info_file: Path) -> None:
    body = "thresholds:\n  - {drop: 10, mark: 4}\nclass_thresholds:\n  - {class: 0, drop: 3}\n"
    net = netfile.loads(_file(tmp_path, f"target: tofino\np4info: {p4info_file}", body=body), base=tmp_path)
    tofino, embedded = state.threshold_values(net, "s1"), state.threshold_values(net, "e1")
    assert tofino[("drop_threshold", state.slot(1, 0))] == 190 and tofino[("mark_threshold", state.slot(2, 7))] == 76
    assert tofino[("class_drop_threshold", 0)] == 57
    assert embedded[("drop_threshold", state.slot(1, 0))] == 10 and embedded[("class_drop_threshold", 0)] == 3
    assert set(tofino) == set(embedded)  # the same slots, only the unit differs


def test_a_p4info_without_device_config_is_a_program_the_switch_loads(p4info_file: Path, tmp_path: Path) -> None:
    prog = load_p4info_program(p4info_file, None)
    assert prog.loaded_by_switch and prog.device_config == b""
    assert prog.is_config(p4r.ForwardingPipelineConfig(p4info=prog.p4info, p4_device_config=b"tofino.bin"))
    other = load_p4info_program(p4info_file, None).p4info
    other.tables[0].size += 1
    assert not prog.is_config(p4r.ForwardingPipelineConfig(p4info=other))
    cfg = tmp_path / "cfg.bin"
    cfg.write_bytes(b"x")
    assert not load_p4info_program(p4info_file, cfg).loaded_by_switch


def test_traffic_manager_settings_on_a_tofino_are_refused(tmp_path: Path, p4info_file: Path) -> None:
    spec = netfile.loads(_file(tmp_path, f"target: tofino\np4info: {p4info_file}", extra=", rate: 100Mbit"),
                         base=tmp_path)
    with pytest.raises(TrafficManagerError, match="target tofino.*SDE"):
        Network(spec)._tm_sync("s1", dry_run=True)
    quiet = netfile.loads(_file(tmp_path, f"target: tofino\np4info: {p4info_file}"), base=tmp_path)
    assert Network(quiet)._tm_sync("s1", dry_run=True) == []


@pytest.mark.slow
def test_diff_and_apply_on_a_p4runtime_server_as_a_tofino(tmp_path: Path, p4info_file: Path) -> None:
    """Against a live P4Runtime server: no pipeline is pushed to a tofino switch (the error says why), and once the
    switch runs the P4Info, diff lists the writes with thresholds in cells and apply makes them."""
    d = start_daemon("t1")
    try:
        body = "thresholds:\n  - {drop: 10, mark: 4}\n"
        net = tmp_path / "net.yaml"
        net.write_text(textwrap.dedent(f"""\
            switches:
              t1: {{address: "{d.address}", target: tofino, p4info: {p4info_file}, cpu_port: 255}}
            hosts:
              h1: {{ip: 10.0.0.1, mac: "02:00:00:00:00:01", attach: "t1:1"}}
              h2: {{ip: 10.0.0.2, mac: "02:00:00:00:00:02", attach: "t1:2"}}
            """) + body)
        empty = dlcpctl("diff", str(net))
        assert empty.returncode == 6 and "does not run the program" in empty.stderr, empty.stderr
        assert "device_config" in empty.stderr
        # the switch's own loader: here, a push of the same program by a plain network file
        plain = tmp_path / "plain.yaml"
        plain.write_text(net.read_text().replace(f"target: tofino, p4info: {p4info_file}, ", ""))
        assert dlcpctl("apply", "--no-tm", str(plain)).returncode == 0
        # now the tofino file sees the thresholds in packets as drift: it wants cells
        drift = dlcpctl("diff", str(net))
        assert drift.returncode == 9, drift.stderr
        assert "drop_threshold[8] = 190" in drift.stdout and "mark_threshold[8] = 76" in drift.stdout, drift.stdout
        assert dlcpctl("apply", str(net)).returncode == 0
        assert dlcpctl("diff", str(net)).returncode == 0
    finally:
        d.stop()
