"""Network files: the examples load; every kind of mistake is reported with its key and line."""

from __future__ import annotations

import ipaddress
import textwrap
from pathlib import Path

import pytest

from controller import netfile
from controller.netfile import NetFileError

ROOT = Path(__file__).resolve().parents[2]

BASE = """\
switches:
  s1: {address: 127.0.0.1:50051}
  s2: {address: 127.0.0.1:50052}
hosts:
  h1: {ip: 10.0.0.1, mac: "00:00:0a:00:00:01", attach: s1:1}
  h2: {ip: 10.0.0.2, mac: "00:00:0a:00:00:02", attach: s2:1}
links:
  - {between: [s1:2, s2:2]}
"""


def load(text: str, tmp_path: Path | None = None) -> netfile.Network:
    return netfile.loads(textwrap.dedent(text), "net.yaml", tmp_path)


def error(text: str) -> NetFileError:
    with pytest.raises(NetFileError) as ei:
        load(text)
    return ei.value


@pytest.mark.parametrize("name", ["star2.yaml", "leafspine.yaml"])
def test_examples_load(name: str) -> None:
    net = netfile.load(ROOT / "examples" / name)
    assert net.switches and net.hosts
    assert net.program == netfile.DEFAULT_PROGRAM and net.program.is_file()


def test_values_and_defaults() -> None:
    net = load(BASE + """\
priorities:
  dlcp:
    - {msg_type: [ack, nack], queue: 7}
    - {msg_type: data, mag_class: 0, layer: 2-5, queue: 1}
    - {trust: true}
  dscp: {46: 7}
thresholds:
  - {drop: 40, mark: 20}
  - {switch: s2, port: 2, priority: [0, 1], drop: 8}
load_balancing: per-flow
""")
    h1 = net.hosts["h1"]
    assert h1.ip == ipaddress.IPv4Address("10.0.0.1") and h1.mac == 0x00000A000001 and (h1.switch, h1.port) == ("s1", 1)
    assert net.switches["s1"].device_id == 0 and net.switches["s1"].target == "embedded"
    assert net.switches["s1"].priority_queues == 8 and net.switches["s1"].lb_mode == "per-flow"
    assert [(r.msg_type, r.queue, r.rank) for r in net.dlcp_rules[:2]] == [(1, 7, 0), (2, 7, 0)]
    assert net.dlcp_rules[2].layer == (2, 5) and net.dlcp_rules[2].mag_class == 0
    assert net.dlcp_rules[3].queue is None  # trust
    assert net.dscp_map == {46: 7}
    assert net.thresholds[1].switches == ("s2",) and net.thresholds[1].priorities == (0, 1)
    # switch names hash to distinct, locally administered MAC bases with the port bytes free
    bases = {s.mac_base for s in net.switches.values()}
    assert len(bases) == 2 and all(b >> 40 == 0x02 and b & 0xFFFF == 0 for b in bases)


def test_unquoted_mac_and_port_refs_are_not_base60() -> None:
    # YAML 1.1 reads 10:00:00:00:00:01 as a base-60 integer; the loader keeps it a string
    net = load(BASE.replace('"00:00:0a:00:00:01"', "10:00:00:00:00:01"))
    assert net.hosts["h1"].mac == 0x100000000001


def test_units() -> None:
    assert netfile.parse_rate("100Mbit") == 100e6 and netfile.parse_rate("1Gbps") == 1e9
    assert netfile.parse_rate(5e8) == 5e8 and netfile.parse_rate("2.5g") == 2.5e9
    assert netfile.parse_delay("1.5ms") == 1500 and netfile.parse_delay(250) == 250
    assert netfile.parse_loss("1%") == pytest.approx(0.01) and netfile.parse_loss(0.2) == 0.2
    for bad, fn in (("fast", netfile.parse_rate), ("-3", netfile.parse_rate), ("1 hour", netfile.parse_delay),
                    ("150%", netfile.parse_loss)):
        with pytest.raises(ValueError):
            fn(bad)


@pytest.mark.parametrize("text, key, line, words", [
    (BASE.replace("  s1: {address", "  s1: {adress"), "switches.s1.adress", 2, ["unknown key", "address"]),
    (BASE.replace('attach: s1:1}', 'attach: s9:1}'), "hosts.h1.attach", 5, ["unknown switch 's9'"]),
    (BASE.replace('"00:00:0a:00:00:02"', '"00:00:0a:00:00:zz"'), "hosts.h2.mac", 6, ["invalid MAC"]),
    (BASE.replace("10.0.0.2", "10.0.0.1"), "hosts.h2.ip", 6, ["also the address of host 'h1'"]),
    (BASE.replace("attach: s2:1}", "attach: s1:1}"), "hosts.h2.attach", 6, ["already used by host h1"]),
    (BASE.replace("[s1:2, s2:2]", "[s1:1, s2:2]"), "links[0].between[0]", 8, ["already used by host h1"]),
    (BASE.replace("[s1:2, s2:2]", "[s1:2, s1:3]"), "links[0].between", 8, ["two different switches"]),
    (BASE.replace("[s1:2, s2:2]", "[s1:2, s2:600]"), "links[0].between[1]", 8, ["out of range"]),
    (BASE.replace("127.0.0.1:50052", "localhost"), "switches.s2.address", 3, ["HOST:PORT"]),
    (BASE + "  - {between: [s1:3, s2:3], rate: fast}\n", "links[1].rate", 9, ["invalid rate"]),
    (BASE + "priorities:\n  dscp: {46: 9}\n", "priorities.dscp.46", 10, ["out of range 0..7"]),
    (BASE + "priorities:\n  dlcp:\n    - {msg_type: data}\n", "priorities.dlcp[0]", 11, ["exactly one of"]),
    (BASE + "priorities:\n  dlcp:\n    - {msg_type: bogus, queue: 1}\n", "priorities.dlcp[0].msg_type", 11,
     ["unknown name 'bogus'"]),
    (BASE + "thresholds:\n  - {drop: 600000}\n", "thresholds[0].drop", 10, ["out of range"]),
    (BASE + "thresholds:\n  - {port: 1}\n", "thresholds[0]", 10, ["sets 'drop', 'mark'"]),
    (BASE + "load_balancing: random\n", "load_balancing", 9, ["spray, per-flow"]),
    (BASE + "class_thresholds:\n  - {class: 8, drop: 4}\n", "class_thresholds[0].class", 10, ["out of range 0..7"]),
    (BASE + "class_thresholds:\n  - {class: [0, 1]}\n", "class_thresholds[0]", 10, ["needs 'drop'"]),
    (BASE + "class_thresholds:\n  - {class: 0, drop: 4, switch: s9}\n", "class_thresholds[0].switch", 10,
     ["unknown switch 's9'"]),
    (BASE + "class_thresholds:\n  - {class: 0, drop: -1}\n", "class_thresholds[0].drop", 10, ["out of range"]),
    (BASE + "class_thresholds:\n  - {classes: 0, drop: 1}\n", "class_thresholds[0].classes", 10, ["unknown key"]),
    (BASE + "routes:\n  - {switch: s1, prefix: 10.9.0.1/16, via: 2}\n", "routes[0].prefix", 10,
     ["host bits set"]),
    (BASE + "routes:\n  - {switch: s1, prefix: 10.9.0.0/16, via: 7}\n", "routes[0].via", 10,
     ["connects to no host or link"]),
    (BASE.replace("hosts:\n", "hosts:\n  h1: {ip: 10.0.0.9, mac: \"00:00:0a:00:00:09\", attach: s1:5}\n"),
     "hosts.h1", 6, ["duplicate key", "line 5"]),
    ("switches: {}\n", "switches", 1, ["non-empty"]),
    ("hosts: {}\n", "", 1, ["missing required key 'switches'"]),
    (BASE + "links: [\n", "", 10, ["not valid YAML"]),
])
def test_errors_name_key_and_line(text: str, key: str, line: int, words: list[str]) -> None:
    e = error(text)
    assert e.key == key, str(e)
    assert e.line == line, str(e)
    for w in words:
        assert w in str(e), str(e)
    assert str(e).startswith(f"net.yaml:{line}: ")


def test_missing_file_and_program(tmp_path: Path) -> None:
    with pytest.raises(NetFileError, match="cannot read"):
        netfile.load(tmp_path / "nope.yaml")
    (tmp_path / "n.yaml").write_text("program: missing.p4\n" + BASE)
    with pytest.raises(NetFileError) as ei:
        netfile.load(tmp_path / "n.yaml")
    assert ei.value.key == "program" and ei.value.line == 1 and "missing.p4" in str(ei.value)


def test_tls_paths_resolve_against_the_file(tmp_path: Path) -> None:
    (tmp_path / "ca.pem").write_text("x")
    (tmp_path / "n.yaml").write_text(BASE.replace("s1: {address: 127.0.0.1:50051}",
                                                  "s1: {address: 127.0.0.1:50051, tls: {ca: ca.pem}}"))
    net = netfile.load(tmp_path / "n.yaml")
    assert net.switches["s1"].tls.ca == tmp_path / "ca.pem"
    (tmp_path / "n.yaml").write_text(BASE.replace("s1: {address: 127.0.0.1:50051}",
                                                  "s1: {address: 127.0.0.1:50051, tls: {ca: ca.pem, cert: c.pem}}"))
    with pytest.raises(NetFileError, match="cert and key go together"):
        netfile.load(tmp_path / "n.yaml")
