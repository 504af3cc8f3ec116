"""Pressure regimes as run-spec knobs: incast senders, bursty on-off traffic, a degraded or flapping spine; their
validation (file:line and the key), what they become in the plan and the network file, the on-off generator as
real processes, and the flapper against a real switch daemon's traffic manager."""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from testbed.netfile import network_yaml
from testbed.run import background_goodput
from testbed.spec import SpecError, load_spec
from testbed.sweep import load_sweep
from testbed.topos import plan

ROOT = Path(__file__).resolve().parents[2]
PRESSURE = ROOT / "examples" / "testbed" / "pressure"
REGIMES = ("incast", "shallow", "bursty", "lossy", "flapping")


@pytest.mark.parametrize("regime", REGIMES)
def test_regime_examples_load(regime):
    spec = load_spec(PRESSURE / f"{regime}.yaml")
    assert spec.workers == 4 and spec.topology.kind == "leaf-spine"
    sweep = load_sweep(PRESSURE / f"{regime}-sweep.yaml")
    assert [c.name for c in sweep.cells] == ["gloo-fair", "dlcp", "dlcp-no-loss"] and sweep.repetitions == 8


def test_six_worker_incast_differs_from_the_regime_only_in_workers_and_compute():
    """incast-6-sweep.yaml: the incast regime at 6 workers with emulated compute; the plan puts the workers on
    alternate leaves (every ring hop crosses a spine) and the incast still targets h1."""
    sweep = load_sweep(PRESSURE / "incast-6-sweep.yaml")
    base = load_spec(PRESSURE / "incast.yaml")
    assert [c.name for c in sweep.cells] == ["gloo-fair", "dlcp", "dlcp-no-loss"]
    for c in sweep.cells:
        assert (c.spec.workers, c.spec.topology.hosts, c.spec.compute_ms) == (6, 6, 100.0)
        assert c.spec.background == base.background and c.spec.target_accuracy == base.target_accuracy
    p = plan(sweep.cells[0].spec.topology)
    leaves = [p.host(f"h{i}").switch for i in range(1, 7)]
    assert leaves[0::2] == [leaves[0]] * 3 and leaves[1::2] == [leaves[1]] * 3 and leaves[0] != leaves[1]


def test_incast_becomes_one_entry_per_sender():
    spec = load_spec(PRESSURE / "incast.yaml")
    assert [(f.src, f.dst, f.on_ms, f.off_ms) for f in spec.background] == [
        (s, "h1", 50.0, 250.0) for s in ("b1", "b2", "b3")]


def write(tmp_path, text: str) -> Path:
    p = tmp_path / "spec.yaml"
    p.write_text(text)
    return p


LEAF_SPINE = "topology: {kind: leaf-spine, hosts: 4, background_hosts: 3}\nworkers: 4\n"


@pytest.mark.parametrize("text,key,line", [
    (LEAF_SPINE + "background:\n  - {src: [b1, b9], dst: h1}\n", "background[0].src", 4),
    (LEAF_SPINE + "background:\n  - {src: [b1, b1], dst: h1}\n", "background[0].src", 4),
    (LEAF_SPINE + "background:\n  - {src: [b1, h1], dst: h1}\n", "background[0]", 4),
    (LEAF_SPINE + "background:\n  - {src: [], dst: h1}\n", "background[0].src", 4),
    (LEAF_SPINE + "background:\n  - {src: b1, dst: b2,\n     on_ms: 50}\n", "background[0].off_ms", 4),
    (LEAF_SPINE + "background:\n  - {src: b1, dst: b2, on_ms: 2, off_ms: 50}\n", "background[0].on_ms", 4),
    (LEAF_SPINE + "background:\n  - {src: b1, dst: b2, on_ms: -5, off_ms: 50}\n", "background[0].on_ms", 4),
    ("topology:\n  kind: star\n  degraded: {rate: 5mbit}\n", "topology.degraded", 3),
    ("topology:\n  kind: leaf-spine\n  degraded: {spine: spine3, rate: 5mbit}\n", "topology.degraded.spine", 3),
    ("topology:\n  kind: leaf-spine\n  degraded: {}\n", "topology.degraded", 3),
    ("topology:\n  kind: leaf-spine\n  degraded:\n    loss: 1\n", "topology.degraded.loss", 4),
    ("topology:\n  kind: leaf-spine\n  degraded:\n    rate: 5mbit\n    flap_ms: 20\n", "topology.degraded.flap_ms", 5),
    ("topology:\n  kind: leaf-spine\n  degraded:\n    loss: 1.5\n    flap_ms: 500\n", "topology.degraded.loss", 4),
    ("topology:\n  kind: leaf-spine\n  degraded: {delay_us: many}\n", "topology.degraded.delay_us", 3),
])
def test_pressure_knobs_are_validated_with_file_and_line(tmp_path, text, key, line):
    p = write(tmp_path, text)
    with pytest.raises(SpecError) as e:
        load_spec(p)
    assert e.value.key == key, str(e.value)
    assert e.value.where == f"{p}:{line}", str(e.value)
    assert str(e.value).startswith(f"{p}:{line}: {key}: ")


def test_semantic_errors_of_older_keys_name_their_line_too(tmp_path):
    p = write(tmp_path, "name: x\nthresholds:\n  drop: 100\n")
    with pytest.raises(SpecError) as e:
        load_spec(p)
    assert e.value.where == f"{p}:3" and e.value.key == "thresholds.drop"


def test_degraded_spine_links_get_its_settings_and_keep_the_normal_ones():
    spec = load_spec(PRESSURE / "flapping.yaml")
    p = plan(spec.topology)
    degraded = [ln for ln in p.links if "spine2" in (ln.a, ln.b)]
    others = [ln for ln in p.links if ln.a_port and "spine2" not in (ln.a, ln.b)]
    assert len(degraded) == 2 and len(others) == 2
    for ln in degraded:
        assert (ln.props.rate, ln.props.loss, ln.props.delay_us) == (2e6, 0.05, 500)
        assert (ln.normal.rate, ln.normal.loss) == (20e6, 0.0)
    assert all(ln.normal is None and ln.props.rate == 20e6 for ln in others)
    doc = yaml.safe_load(network_yaml(p, spec))
    rates = {tuple(sorted(x.split(":")[0] for x in link["between"])): (link["rate"], link.get("loss", 0))
             for link in doc["links"]}
    assert rates[("leaf1", "spine2")] == rates[("leaf2", "spine2")] == (2_000_000, 0.05)
    assert rates[("leaf1", "spine1")] == (20_000_000, 0)


def test_lossy_regime_programs_loss_in_the_traffic_manager():
    spec = load_spec(PRESSURE / "lossy.yaml")
    doc = yaml.safe_load(network_yaml(plan(spec.topology), spec))
    assert all(link["loss"] == 0.01 for link in doc["links"])
    assert all("loss" not in h for h in doc["hosts"].values())


def test_on_off_generator_sends_in_bursts_and_reports_like_iperf3(tmp_path):
    """Real processes on loopback: the receiver's report is what background_goodput reads, and the sender was
    silent between bursts (on a third of the time: its goodput is about a third of its rate)."""
    from testbed.onoff import in_burst

    assert in_burst(9.05, 0.1, 0.2) == pytest.approx(0.05) and in_burst(9.25, 0.1, 0.2) == 0.0
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "server.json"
    py = [sys.executable, "-m", "testbed.onoff"]
    server = subprocess.Popen(py + ["serve", "--port", str(port), "--out", str(out), "--udp"], cwd=ROOT)
    time.sleep(0.5)
    client = subprocess.Popen(py + ["send", "--host", "127.0.0.1", "--port", str(port), "--on-ms", "100",
                                    "--off-ms", "200", "--udp", "--rate", "8e6"], cwd=ROOT)
    time.sleep(2.0)
    for p in (client, server):
        p.send_signal(signal.SIGINT)
        assert p.wait(10) == 0
    report = json.loads(out.read_text())
    got = background_goodput(out)
    assert got["goodput_bps"] == report["end"]["sum_received"]["bits_per_second"]
    # 8 Mb/s while on, on a third of the time: about 2.7 Mb/s on average (loopback loses nothing)
    assert 1.5e6 < got["goodput_bps"] < 4.5e6, got
    assert subprocess.run(py + ["send", "--host", "127.0.0.1", "--port", "1", "--on-ms", "0", "--off-ms", "5"],
                          cwd=ROOT, capture_output=True).returncode == 2


def test_flapper_switches_a_real_traffic_manager(tmp_path):
    from controller import Network
    from controller.tm import open_tm
    from testbed.flap import PathFlapper
    from testbed.spec import LinkSpec
    from testbed.topos import PlanLink
    from tests.controller.conftest import start_daemon

    d = start_daemon("s1")
    try:
        net = tmp_path / "net.yaml"
        net.write_text(f"switches:\n  s1: {{address: '{d.address}', device_id: 0}}\n")
        network = Network.from_file(net)
        slow, normal = LinkSpec(rate=2e6, loss=0.05, delay_us=100), LinkSpec(rate=20e6, delay_us=500)
        flapper = PathFlapper(network, [PlanLink("s1", 1, "s1", 2, slow, normal=normal)], 200).start()
        deadline = time.monotonic() + 15  # a change takes a few calls; the machine may be busy
        while len(flapper.changes) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        changes = flapper.stop()
        assert len(changes) >= 3 and all("error" not in c for c in changes), changes
        assert [c["state"] for c in changes[:3]] == ["normal", "degraded", "normal"]
        want = (normal if changes[-1]["state"] == "normal" else slow)
        tm = open_tm(network.spec.switches["s1"])
        try:
            links = tm.current().links
        finally:
            tm.close()
        for port in (1, 2):
            assert links[port] == (want.rate, want.delay_us, want.loss)
    finally:
        d.stop()


def test_class_thresholds_reach_the_network_file(tmp_path):
    p = write(tmp_path, "topology: {kind: star, link: {queue: 32}}\nthresholds:\n  drop: 24\n  classes: {0: 6, 1: 12}\n")
    spec = load_spec(p)
    doc = yaml.safe_load(network_yaml(plan(spec.topology), spec))
    assert doc["class_thresholds"] == [{"class": 0, "drop": 6}, {"class": 1, "drop": 12}]
    from controller import netfile
    from controller.state import threshold_values

    net = netfile.loads(network_yaml(plan(spec.topology), spec), "net.yaml", tmp_path)
    values = threshold_values(net, "s1")
    assert values[("class_drop_threshold", 0)] == 6 and values[("class_drop_threshold", 1)] == 12
    from testbed.worker import spec_from_json, spec_to_json

    assert spec_from_json(spec_to_json(spec)).thresholds.classes == {0: 6, 1: 12}
    for text, key, line in (("thresholds:\n  classes:\n    9: 4\n", "thresholds.classes.9", 3),
                            ("thresholds:\n  classes:\n    1: 400\n", "thresholds.classes.1", 3),
                            ("thresholds:\n  classes: {1: -2}\n", "thresholds.classes.1", 2)):
        bad = write(tmp_path, text)
        with pytest.raises(SpecError) as e:
            load_spec(bad)
        assert (e.value.key, e.value.where) == (key, f"{bad}:{line}"), str(e.value)


def test_incast_ablation_changes_one_part_per_cell():
    """examples/testbed/pressure/incast-ablation.yaml: each cell differs from full DLCP in the one part it names, and
    the per-class thresholds reach every switch's network file below the queue threshold."""
    sweep = load_sweep(PRESSURE / "incast-ablation.yaml")
    cells = {c.name: c.spec for c in sweep.cells}
    assert list(cells) == ["dlcp", "dlcp-class-thresholds", "dlcp-no-priorities", "dlcp-no-host-eligibility",
                           "dlcp-no-loss"]
    full = cells["dlcp"]
    assert full.thresholds.classes is None and full.loss_bound == 0.02 and full.priority_mode == "trust"
    assert full.host_eligibility is True and all(c.host_eligibility for n, c in cells.items()
                                                 if n != "dlcp-no-host-eligibility")
    off = cells["dlcp-no-host-eligibility"]
    assert (off.host_eligibility, off.loss_bound, off.priority_mode) == (False, 0.02, "trust")
    assert cells["dlcp-class-thresholds"].thresholds.classes == {0: 2, 1: 4, 2: 6}
    assert cells["dlcp-class-thresholds"].thresholds.drop == full.thresholds.drop == 8
    assert (cells["dlcp-no-priorities"].priority_mode, cells["dlcp-no-priorities"].loss_bound) == ("single", 0.02)
    assert (cells["dlcp-no-loss"].loss_bound, cells["dlcp-no-loss"].thresholds.classes) == (0, None)
    spec = cells["dlcp-class-thresholds"]
    doc = yaml.safe_load(network_yaml(plan(spec.topology), spec))
    assert doc["class_thresholds"] == [{"class": 0, "drop": 2}, {"class": 1, "drop": 4}, {"class": 2, "drop": 6}]
