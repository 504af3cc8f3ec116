"""Pure parts of the testbed: datasets, models, topology plans, summaries and the comparison table; and the worker's
stopping rule, on real worker processes."""

import subprocess
import sys

import numpy as np
import pytest
import torch

from testbed.compare import comparison_rows
from testbed.data import DataError, digits_arrays, load, shard
from testbed.models import build
from testbed.run import summarise
from testbed.spec import LinkSpec, RunSpec, TopologySpec
from testbed.topos import plan


def test_digits_are_sklearns_read_without_importing_sklearn():
    """The digits a worker loads are sklearn's ``load_digits`` bit for bit, read without importing sklearn (0.9 s
    of every worker's start)."""
    from sklearn.datasets import load_digits

    x, y = digits_arrays()
    want_x, want_y = load_digits(return_X_y=True)
    assert x.dtype == want_x.dtype and y.dtype == want_y.dtype
    assert np.array_equal(x, want_x) and np.array_equal(y, want_y)
    code = ("import sys; from testbed.data import load; d = load('digits', seed=0); "
            "print(len(d.x_train) + len(d.x_test), sorted(m for m in sys.modules if m.startswith('sklearn')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.split(" ", 1) == ["1797", "[]\n"], out.stdout + out.stderr


@pytest.mark.parametrize("name,model", [("digits", "mlp"), ("synthetic-cifar", "cnn"), ("text", "char-mlp"),
                                        ("text", "transformer")])
def test_datasets_and_models_fit(name, model):
    d = load(name, seed=0, size=600)
    assert len(d.x_train) > len(d.x_test) > 0 and d.num_classes >= 2
    m = build(model, d, hidden=32)
    out = m(d.x_train[:5])
    assert out.shape == (5, d.num_classes)
    # Deterministic: the same seed gives the same data and the same initial weights on every worker.
    d2 = load(name, seed=0, size=600)
    assert torch.equal(d.x_train, d2.x_train) and torch.equal(d.y_test, d2.y_test)
    assert all(torch.equal(a, b) for a, b in zip(m.state_dict().values(),
                                                  build(model, d2, hidden=32).state_dict().values()))


def test_transformer_and_bigger_test_sets():
    """The transformer trains on text (every parameter gets a gradient through module forwards, which DeAR's
    hooks need), and test_size generates that many held-out samples beside the training ones."""
    d = load("text", seed=0, size=2000, test_size=3000)
    assert (len(d.x_train) + len(d.x_test), len(d.x_test)) == (5000, 3000)
    c = load("synthetic-cifar", seed=0, size=300, test_size=700)
    assert (len(c.x_train), len(c.x_test)) == (300, 700)
    with pytest.raises(DataError, match="test_size"):
        load("digits", test_size=1000)
    m = build("transformer", d, hidden=32)
    ran = set()
    for mod in m.modules():
        if any(True for _ in mod.parameters(recurse=False)):
            mod.register_forward_hook(lambda mod, i, o: ran.add(mod))
    opt = torch.optim.Adam(m.parameters(), lr=3e-3)
    first = None
    for i in range(60):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(m(d.x_train[i * 32 % 1900:][:32]), d.y_train[i * 32 % 1900:][:32])
        loss.backward()
        opt.step()
        first = first if first is not None else loss.item()
    assert all(p.grad is not None for p in m.parameters())
    assert ran == {mod for mod in m.modules() if any(True for _ in mod.parameters(recurse=False))}
    assert loss.item() < 0.8 * first


@pytest.mark.slow
def test_synthetic_cifar_is_learnable_but_not_saturated():
    """The synthetic image task separates methods by accuracy: far from trivial (a nearest-class-mean classifier,
    which scores 99.8% on templates under plain shifts and noise, stays below 60%) yet learnable (the workload's
    CNN gets well above chance's 10% in 80 steps without reaching 90%). Different seeds give different images."""
    d = load("synthetic-cifar", seed=0, size=1500, test_size=1000)
    assert d.x_train.shape == (1500, 3, 32, 32) and set(d.y_test.tolist()) == set(range(10))
    assert not torch.equal(d.x_train[:10], load("synthetic-cifar", seed=1, size=1500, test_size=1000).x_train[:10])
    flat = d.x_train.flatten(1)
    means = torch.stack([flat[d.y_train == c].mean(0) for c in range(10)])
    centroid = (torch.cdist(d.x_test.flatten(1), means).argmin(1) == d.y_test).float().mean().item()
    assert 0.15 < centroid < 0.6, centroid
    m = build("cnn", d, hidden=64, seed=0)
    opt = torch.optim.SGD(m.parameters(), lr=0.02, momentum=0.9)
    g = torch.Generator().manual_seed(0)
    for _ in range(80):
        idx = torch.randint(0, len(d.x_train), (64,), generator=g)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(m(d.x_train[idx]), d.y_train[idx]).backward()
        opt.step()
    with torch.no_grad():
        acc = (m(d.x_test).argmax(1) == d.y_test).float().mean().item()
    assert 0.4 < acc < 0.9, acc


def test_digits_is_learnable_quickly():
    d = load("digits")
    m = build("mlp", d, hidden=64)
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    for _ in range(3):
        for i in range(0, len(d.x_train), 64):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(m(d.x_train[i:i + 64]), d.y_train[i:i + 64]).backward()
            opt.step()
    acc = (m(d.x_test).argmax(1) == d.y_test).float().mean().item()
    assert acc > 0.85


def test_cifar10_needs_a_real_directory(tmp_path):
    with pytest.raises(DataError, match="path"):
        load("cifar10")
    with pytest.raises(DataError, match="data_batch_1"):
        load("cifar10", path=str(tmp_path))


def test_shards_are_disjoint_and_equal():
    x = torch.arange(10)
    parts = [shard(x, x, r, 3)[0] for r in range(3)]
    assert [len(p) for p in parts] == [3, 3, 3]
    assert len(set(torch.cat(parts).tolist())) == 9


def test_leaf_spine_plan():
    p = plan(TopologySpec(kind="leaf-spine", hosts=4, background_hosts=2, link=LinkSpec(rate=1e7),
                          core=LinkSpec(rate=2e7)))
    assert [s.name for s in p.switches] == ["leaf1", "leaf2", "spine1", "spine2"]
    assert len({s.grpc_port for s in p.switches}) == 4
    leaves = {h.name: h.switch for h in p.hosts}
    assert leaves["h1"] != leaves["h2"] and leaves["b1"] != leaves["b2"]
    core = [ln for ln in p.links if ln.a.startswith("leaf")]
    assert len(core) == 4 and all(ln.props.rate == 2e7 for ln in core)
    # Ports are unique per switch.
    used = [(ln.b, ln.b_port) for ln in p.links] + [(ln.a, ln.a_port) for ln in p.links if ln.a_port]
    assert len(used) == len(set(used))


def fake_worker(dts, accs):
    return {"iterations": [{"step": i, "start": sum(dts[:i]), "dt": d, "loss": 1.0, "elements": 1000,
                            "zero_filled": 2 * i} for i, d in enumerate(dts)],
            "evals": [{"step": i, "t": float(i), "accuracy": a} for i, a in enumerate(accs, 1)],
            "final_accuracy": accs[-1], "transport": {"zero_filled_elements": 3}}


def test_summary_uses_slowest_worker_and_first_target_hit():
    spec = RunSpec(target_accuracy=0.8)
    s = summarise(spec, [fake_worker([0.1, 0.2, 0.1], [0.5, 0.85, 0.9]),
                         fake_worker([0.3, 0.1, 0.1], [0.5, 0.85, 0.9])], 5.0)
    assert s["steps"] == 3 and s["iter_p50_s"] == pytest.approx(0.2)
    # zero-filled: the collectives' union (the same on every rank: rank 0's), not the transports' sum
    assert s["time_to_target_s"] == 2.0 and s["zero_filled_elements"] == 6
    assert s["zero_filled_fraction"] == pytest.approx(6 / 3000) and s["zero_filled_step_max"] == pytest.approx(0.004)
    run = {"spec": {"name": "a", "algorithm": "x"}, "summary": s, "workers": [], "switches": {
        "drops_by_priority": {"0": 5, "3": 0}, "marks_by_priority": {}}}
    rows = dict(comparison_rows([run, run]))
    assert rows["drops by priority"] == ["p0:5", "p0:5"] and rows["p50 speed-up vs first"][1] == "1.00x"
    assert s["compute_s"] is None and s["comm_compute_ratio"] is None  # workers that did not time their compute
    timed = [{**fake_worker([0.1, 0.2, 0.1], [0.5]), "compute_s": c} for c in (0.05, 0.08, 0.02)]
    s = summarise(spec, timed, 5.0)  # compute: the median over ranks; the rest of the p50 step is communication
    assert s["compute_s"] == 0.05 and s["comm_compute_ratio"] == pytest.approx((0.1 - 0.05) / 0.05)


def test_emulated_compute_splits_the_step_and_skips_evaluation(monkeypatch):
    """compute_ms is slept, not computed: a third in forward, two thirds in backward, nothing in evaluation."""
    import warnings

    import torch

    import testbed.worker as worker
    from testbed.data import load
    from testbed.models import build

    data = load("digits", seed=0)
    model = build("mlp", data, hidden=16, seed=0)
    worker.emulate_compute(model, 90.0)
    slept: list[tuple[str, float]] = []
    phase = ["forward"]
    monkeypatch.setattr(worker.time, "sleep", lambda s: slept.append((phase[0], s)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the first layer's input needs no gradient (torch says so once)
        loss = torch.nn.functional.cross_entropy(model(data.x_train[:4]), data.y_train[:4])
        phase[0] = "backward"
        loss.backward()
    fwd = sum(s for p, s in slept if p == "forward")
    bwd = sum(s for p, s in slept if p == "backward")
    assert abs(fwd - 0.030) < 1e-9 and abs(bwd - 0.060) < 1e-9
    slept.clear()
    worker.accuracy(model, data.x_test[:8], data.y_test[:8])
    assert slept == []


def test_measured_compute_includes_emulated_time_and_leaves_the_model_alone():
    from testbed.worker import emulate_compute, measure_compute

    d = load("digits")
    m = build("mlp", d, hidden=32)
    emulate_compute(m, 30.0)
    before = [p.detach().clone() for p in m.parameters()]
    t = measure_compute(m, d.x_train, d.y_train, 16, repeats=3)
    assert t >= 0.03  # forward + backward of the three layers sleep 30 ms in all
    assert all(torch.equal(a, p) for a, p in zip(before, m.parameters()))
    assert all(p.grad is None for p in m.parameters())


@pytest.mark.slow
def test_workers_stop_at_the_target_unless_told_not_to(tmp_path):
    """Real worker processes on loopback (testbed.accuracy.run_local, DDP over the dlcp backend): with a target
    every evaluation reaches (0.0), training stops at the first evaluation; with stop_at_target false it runs all
    its steps, and the summary's time to target is still that first evaluation's."""
    from testbed.accuracy import run_local

    spec = RunSpec(name="stop", workers=2, model="mlp", dataset="digits", hidden=16, steps=6, eval_every=2,
                   target_accuracy=0.0, timeout_s=120.0)
    stopped = run_local(spec, drop_eligible=False, workdir=tmp_path / "stop", timeout=120.0)
    assert [len(w["iterations"]) for w in stopped] == [2, 2]
    spec.stop_at_target = False
    full = run_local(spec, drop_eligible=False, workdir=tmp_path / "full", timeout=120.0)
    assert [len(w["iterations"]) for w in full] == [6, 6] and [e["step"] for e in full[0]["evals"]] == [2, 4, 6]
    assert summarise(spec, full, 1.0)["time_to_target_s"] == full[0]["evals"][0]["t"]
