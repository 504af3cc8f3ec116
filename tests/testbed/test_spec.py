"""Run specs: strict validation with key and line, and the bundled examples load."""

from pathlib import Path

import pytest

from testbed.spec import RunSpec, SpecError, load_spec, parse_rate
from testbed.worker import spec_from_json, spec_to_json

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "testbed"


def write(tmp_path, text: str) -> Path:
    p = tmp_path / "spec.yaml"
    p.write_text(text)
    return p


@pytest.mark.parametrize("name", ["demo.yaml", "star2.yaml", "workloads/mlp.yaml", "workloads/cnn.yaml",
                                  "workloads/transformer.yaml", "dear.yaml", "sparse.yaml"])
def test_examples_load(name):
    spec = load_spec(EXAMPLES / name)
    assert isinstance(spec, RunSpec) and spec.workers >= 2


def test_unknown_key_names_key_and_line(tmp_path):
    p = write(tmp_path, "name: x\nworkers: 2\nlearning_rate: 0.1\n")
    with pytest.raises(SpecError) as e:
        load_spec(p)
    assert "learning_rate" in str(e.value) and f"{p}:3" in str(e.value)


def test_unknown_nested_key(tmp_path):
    p = write(tmp_path, "topology:\n  kind: star\n  link: {rate: 10mbit, latency: 5}\n")
    with pytest.raises(SpecError) as e:
        load_spec(p)
    assert e.value.key == "topology.link.latency" and ":3" in e.value.where


def test_bad_values(tmp_path):
    cases = {
        "algorithm: allreduce-magic\n": "algorithm",
        "workers: two\n": "workers",
        "topology: {kind: ring}\n": "topology.kind",
        "topology: {link: {rate: fast}}\n": "topology.link.rate",
        "workers: 3\ntopology: {hosts: 2}\n": "workers",
        "background: [{src: h1, dst: nowhere}]\n": "background[0].dst",
        "loss_bound: 1.5\n": "loss_bound",
        "name: a\nname: b\n": "name",
        "thresholds: {drop: 100}\n": "thresholds.drop",
        "thresholds: {mark: -1}\n": "thresholds.mark",
        "thresholds: {early: 3}\n": "thresholds.early",
    }
    for text, key in cases.items():
        with pytest.raises(SpecError) as e:
            load_spec(write(tmp_path, text))
        assert e.value.key == key, (text, str(e.value))


def test_rates():
    assert parse_rate("100mbit") == 100e6 and parse_rate("1gbit") == 1e9 and parse_rate(5000) == 5000.0
    with pytest.raises(ValueError):
        parse_rate("quick")


def test_json_round_trip():
    spec = load_spec(EXAMPLES / "demo.yaml")
    assert spec_from_json(spec_to_json(spec)) == spec


def test_overrides_are_validated_like_the_file(tmp_path):
    p = write(tmp_path, "workers: 2\n")
    spec = load_spec(p, {"topology": {"kind": "dumbbell", "hosts": 4, "mtu": 9000}, "steps": 7})
    assert spec.topology.kind == "dumbbell" and spec.topology.mtu == 9000 and spec.steps == 7
    with pytest.raises(SpecError) as e:
        load_spec(p, {"topology": {"knd": "star"}})
    assert e.value.key == "topology.knd"


def test_knob_keys_are_validated(tmp_path):
    """Every knob of the evaluation (issue 32) is a validated key: the error names it."""
    cases = {
        "priority_mode: magnitude\n": "priority_mode",
        "load_balancing: ecmp\n": "load_balancing",
        "dscp_map: {64: 1}\n": "dscp_map.64",
        "dscp_map: {46: 9}\n": "dscp_map.46",
        "dscp_map: {46: 5}\npriority_queues: 4\n": "dscp_map.46",
        "dscp_map: [46]\n": "dscp_map",
        "job_dscp: 64\n": "job_dscp",
        "job_dscp: ef\n": "job_dscp",
        "tcp: {congestion_control: fastest}\n": "tcp.congestion_control",
        "tcp: {ecn: maybe}\n": "tcp.ecn",
        "tcp: {rto_min_ms: 0}\n": "tcp.rto_min_ms",
        "tcp: {rto: 5}\n": "tcp.rto",
        "compute_ms: -1\n": "compute_ms",
        "compute_ms: fast\n": "compute_ms",
        "priority_queues: 9\n": "priority_queues",
        "algorithm: dear-nccl\n": "algorithm",
    }
    for text, key in cases.items():
        with pytest.raises(SpecError) as e:
            load_spec(write(tmp_path, "workers: 2\n" + text))
        assert e.value.key == key, (text, str(e.value))
    spec = load_spec(write(tmp_path, "workers: 2\npriority_mode: layer-table\nload_balancing: per-flow\n"
                                     "dscp_map: {48: 6, 0: 0}\njob_dscp: 48\ncompute_ms: 20\nalgorithm: dear-gloo\n"
                                     "tcp: {congestion_control: dctcp, ecn: true, rto_min_ms: 5}\n"))
    assert (spec.priority_mode, spec.load_balancing, spec.dscp_map, spec.job_dscp, spec.compute_ms) == \
        ("layer-table", "per-flow", {48: 6, 0: 0}, 48, 20.0)
    assert (spec.tcp.congestion_control, spec.tcp.ecn, spec.tcp.rto_min_ms) == ("dctcp", True, 5)
    assert spec_from_json(spec_to_json(spec)) == spec


def test_workload_keys_are_validated(tmp_path):
    """The workloads' keys (issue 32 item 3): test_size only for generated datasets and in range, models only on
    data they fit, the transformer's width a multiple of its heads, the sparse baselines' names."""
    cases = {
        "dataset: digits\ntest_size: 5000\n": "test_size",
        "dataset: text\nmodel: transformer\nhidden: 64\ntest_size: 50\n": "test_size",
        "dataset: text\nmodel: transformer\nhidden: 64\ntest_size: many\n": "test_size",
        "dataset: text\nmodel: transformer\nhidden: 66\n": "hidden",
        "dataset: digits\nmodel: transformer\n": "model",
        "dataset: text\nmodel: cnn\n": "model",
        "dataset: imagenet\n": "dataset",
        "model: resnet\n": "model",
        "algorithm: topk-allreduce\n": "algorithm",
    }
    for text, key in cases.items():
        with pytest.raises(SpecError) as e:
            load_spec(write(tmp_path, "workers: 2\n" + text))
        assert e.value.key == key, (text, str(e.value))
    spec = load_spec(write(tmp_path, "workers: 2\ndataset: synthetic-cifar\nmodel: cnn\ntest_size: 10000\n"
                                     "algorithm: topk-allgather-gloo\ndensity: 0.01\n"))
    assert (spec.test_size, spec.algorithm) == (10000, "topk-allgather-gloo")
    assert spec_from_json(spec_to_json(spec)) == spec
    for algorithm in ("spardl-gloo", "topk-allgather"):
        assert load_spec(write(tmp_path, f"workers: 2\nalgorithm: {algorithm}\n")).algorithm == algorithm


def test_dotted_overrides_reach_nested_keys(tmp_path):
    spec = load_spec(EXAMPLES / "demo.yaml", {"topology.link.rate": "5mbit", "tcp.ecn": True})
    assert spec.topology.link.rate == 5e6 and spec.topology.core.rate == 20e6 and spec.tcp.ecn is True
    with pytest.raises(SpecError) as e:
        load_spec(EXAMPLES / "demo.yaml", {"topology.link.speed": 1})
    assert e.value.key == "topology.link.speed"
    spec = load_spec(EXAMPLES / "demo.yaml", {"background.0.flows": 1})
    assert spec.background[0].flows == 1 and spec.background[0].src == "b1"
    assert load_spec(EXAMPLES / "demo.yaml", {"background.0.flows": 0}).background == []  # 0: the entry is off
    with pytest.raises(SpecError) as e:
        load_spec(EXAMPLES / "demo.yaml", {"background.0.flows": -1})
    assert e.value.key == "background[0]" and ">= 0" in str(e.value)
    spec = load_spec(EXAMPLES / "demo.yaml", {"background.0": {"kind": "udp", "src": "b2", "dst": "b1"}})
    assert (spec.background[0].kind, spec.background[0].src) == ("udp", "b2")
    for bad in ("background.1.flows", "background.x", "steps.x"):
        with pytest.raises(SpecError) as e:
            load_spec(EXAMPLES / "demo.yaml", {bad: 1})
        assert e.value.key == bad and "demo.yaml:" in e.value.where


@pytest.mark.parametrize("queues", [8, 4, 2, 1])
@pytest.mark.parametrize("mode", ["trust", "layer-table", "single"])
def test_network_file_follows_priority_queues_and_mode(tmp_path, queues, mode):
    """The generated network file names the switches' queue count, and the controller accepts it: ACK/NACK/control
    messages go to the top queue that exists (not queue 7 of a 4-queue switch), data never above it."""
    from controller.netfile import loads
    from testbed.netfile import network_yaml
    from testbed.topos import plan

    spec = load_spec(EXAMPLES / "demo.yaml", {"priority_queues": queues, "priority_mode": mode,
                                              "load_balancing": "per-flow"})
    net = loads(network_yaml(plan(spec.topology), spec))
    assert {s.priority_queues for s in net.switches.values()} == {queues} and net.lb_mode == "per-flow"
    top = queues - 1
    qs = {r.queue for r in net.dlcp_rules}
    assert all(q is None or 0 <= q <= top for q in qs)
    ack = next(r for r in net.dlcp_rules if r.msg_type in (None, 1))  # first rule an ACK (msg_type 1) matches
    if mode == "single" or queues == 1:
        assert qs == {0}
    else:
        assert ack.queue == top
        data = [r for r in net.dlcp_rules if r.msg_type in (None, 0)]
        assert all(r.queue is None or r.queue < top or top == 0 for r in data)
    assert max(net.dscp_map.values()) <= top


def test_sweep_files_are_validated_before_running(tmp_path):
    from testbed.sweep import load_sweep

    assert len(load_sweep(EXAMPLES / "rates.yaml").cells) == 12
    sweep = load_sweep(EXAMPLES / "ablation.yaml")
    order = [c.name for _r, _s, c in sweep.order()]
    n = len(sweep.cells)
    assert order[:n] == order[n:2 * n] and len(set(order[:n])) == n  # interleaved: every cell once per repetition
    assert {c.spec.tcp.ecn for c in sweep.cells} == {True}
    cases = {"base: demo.yaml\nrepeats: 3\n": "repeats",
             "base: demo.yaml\ncells: {a: {algoritm: dear}}\n": "cells.a",
             "base: demo.yaml\nmatrix: {steps: []}\n": "matrix.steps",
             "base: demo.yaml\nrepetitions: 0\n": "repetitions",
             "cells: {a: {}}\n": "base"}
    for text, key in cases.items():
        q = tmp_path / "s.yaml"
        q.write_text(text.replace("demo.yaml", str(EXAMPLES / "demo.yaml")))
        with pytest.raises(SpecError) as e:
            load_sweep(q)
        assert e.value.key == key, (text, str(e.value))


@pytest.mark.parametrize("name", ["ablation.yaml", "rates.yaml", "rates-small.yaml", "goals.yaml", "goals-dlcp.yaml",
                                  "workloads.yaml"])
def test_example_sweeps_validate(name):
    from testbed.sweep import load_sweep

    sweep = load_sweep(EXAMPLES / name)
    assert len(sweep.cells) >= 2 and sweep.repetitions >= 2
    if name.startswith("goals"):  # each goal's two sides differ in the algorithm only
        by = {c.name: c.spec for c in sweep.cells}
        for a, b in (("ddp-4", "dear-4"), ("topk-ag-8", "spardl-8")):
            suffix = "-dlcp" if name == "goals-dlcp.yaml" else ""
            x, y = by[a + suffix], by[b + suffix]
            assert x.algorithm != y.algorithm and x.workers == y.workers and x.topology == y.topology
            assert (x.compute_ms, x.hidden, x.density, x.loss_bound) == (y.compute_ms, y.hidden, y.density,
                                                                         y.loss_bound)


def test_stop_at_target_is_a_validated_boolean(tmp_path):
    """stop_at_target: true by default; false keeps training to the last step (the pressure specs'); anything but
    a boolean is an error naming the key and its line, and the value survives the trip to the workers."""
    assert load_spec(write(tmp_path, "workers: 2\n")).stop_at_target is True
    spec = load_spec(write(tmp_path, "workers: 2\ntarget_accuracy: 0.9\nstop_at_target: false\n"))
    assert (spec.target_accuracy, spec.stop_at_target) == (0.9, False)
    assert spec_from_json(spec_to_json(spec)) == spec
    with pytest.raises(SpecError) as e:
        load_spec(write(tmp_path, "workers: 2\nstop_at_target: sometimes\n"))
    assert e.value.key == "stop_at_target" and ":2" in str(e.value)
    assert load_spec(write(tmp_path, "workers: 2\n"), {"stop_at_target": False}).stop_at_target is False
    # host_eligibility, the same kind of key (the dlcp backend's DLCP_POLICY=no-eligible when false)
    assert load_spec(write(tmp_path, "workers: 2\n")).host_eligibility is True
    off = load_spec(write(tmp_path, "workers: 2\nhost_eligibility: false\n"))
    assert off.host_eligibility is False and spec_from_json(spec_to_json(off)) == off
    with pytest.raises(SpecError) as e:
        load_spec(write(tmp_path, "workers: 2\nhost_eligibility: 0\n"))
    assert e.value.key == "host_eligibility"
    for regime in ("bursty", "flapping", "incast", "lossy", "shallow"):
        p = load_spec(EXAMPLES / "pressure" / f"{regime}.yaml")
        assert p.target_accuracy is not None and p.stop_at_target is False, regime
