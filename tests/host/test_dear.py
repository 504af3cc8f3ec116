"""DeAR: the pure parts (fusion planning, alpha-beta fit, schedule model, tuner) in-process; the wrapper in real
processes (tests/host/dear_worker.py) against DDP over gloo and over the dlcp backend."""

from __future__ import annotations

import math

import pytest

from host.dear.fusion import (CommModel, candidate_thresholds, choose_threshold, efficiency_threshold,
                              fit_alpha_beta, padded_numel, plan_groups, simulate_dear)
from host.dear.tuner import BayesTuner

from .dist_run import check, launch

MOD = "tests.host.dear_worker"


# ---------------------------------------------------------------------------------------------- pure functions
def test_plan_groups_cuts_consecutive_layers_by_threshold() -> None:
    assert plan_groups([4, 4, 4, 10, 1], 8) == [[0, 1], [2, 3], [4]]
    assert plan_groups([4, 4, 4], 0) == [[0], [1], [2]]
    assert plan_groups([4, 4, 4], 1000) == [[0, 1, 2]]
    assert plan_groups([], 5) == []
    with pytest.raises(ValueError, match="sizes must be >= 0"):
        plan_groups([1, -1], 4)


def test_padded_numel_splits_into_equal_shards() -> None:
    assert padded_numel(10, 4) == 12
    assert padded_numel(12, 4) == 12
    assert padded_numel(0, 3) == 3
    assert padded_numel(7, 1) == 7
    with pytest.raises(ValueError):
        padded_numel(5, 0)


def test_fit_alpha_beta_recovers_the_line() -> None:
    a, b = fit_alpha_beta([1e3, 1e4, 1e6], [2e-4 + 1e-9 * x for x in (1e3, 1e4, 1e6)])
    assert a == pytest.approx(2e-4, rel=1e-6) and b == pytest.approx(1e-9, rel=1e-6)
    a, b = fit_alpha_beta([1, 2], [5.0, 3.0])  # decreasing (noise): beta clamped positive, alpha >= 0
    assert b > 0 and a >= 0
    with pytest.raises(ValueError):
        fit_alpha_beta([1, 1], [1, 2])


def test_efficiency_threshold() -> None:
    comm = CommModel(1e-3, 1e-9, 1e-3, 1e-9)
    m = efficiency_threshold(comm, 0.9)
    assert 1e-3 / (1e-3 + 1e-9 * m) == pytest.approx(0.1, rel=1e-3)


def test_simulate_dear_bounds() -> None:
    comm = CommModel(0.0, 1.0, 0.0, 1.0)  # seconds == bytes
    groups, gbytes = [[0], [1]], [2.0, 2.0]
    # no compute: everything serial, AG0 AG1 then RS1 RS0
    assert simulate_dear(groups, gbytes, [0, 0], [0, 0], comm) == pytest.approx(8.0)
    # compute hides all but the first all-gather and the last reduce-scatter
    t = simulate_dear(groups, gbytes, [10, 10], [10, 10], comm)
    assert t == pytest.approx(2 + 40 + 2)
    # never faster than compute or than communication alone
    for f, b in ((1, 1), (3, 0.5), (0.2, 4)):
        t = simulate_dear(groups, gbytes, [f, f], [b, b], comm)
        assert t >= 2 * (f + b) and t >= 8.0


def test_choose_threshold_follows_latency_and_overlap() -> None:
    sizes = [4000] * 8
    f, b = [1e-3] * 8, [2e-3] * 8
    # huge per-message latency: one group
    thr, _, table = choose_threshold(sizes, f, b, CommModel(1.0, 1e-9, 1.0, 1e-9), world=2)
    assert plan_groups(sizes, thr) == [list(range(8))]
    assert len({row[1] for row in table}) == len(table)  # one row per distinct plan
    # no latency, bandwidth comparable to compute: more groups overlap better than one
    thr, _, _ = choose_threshold(sizes, f, b, CommModel(0.0, 2e-7, 0.0, 2e-7), world=2)
    assert len(plan_groups(sizes, thr)) > 1
    assert candidate_thresholds([1000, 3000])[0] == 0 and candidate_thresholds([1000, 3000])[-1] == 4000


@pytest.mark.slow
def test_bayes_tuner_finds_the_minimum_without_repeating_plans() -> None:
    def cost(x: float) -> float:
        return (x - 17.3) ** 2 / 10 + 1.0

    key = lambda x: int(round(x))  # noqa: E731 - plans are integer "bins" of x
    t = BayesTuner(10, 28, n_init=3, x0=12, seed=1)
    asked = []
    for _ in range(12):
        x = t.ask(key)
        assert x is not None and 10 <= x <= 28
        asked.append(key(x))
        t.tell(x, cost(x), key=key(x))
    assert len(set(asked)) == len(asked), asked
    assert asked[0] == 12  # the cost model's choice goes first
    assert abs(t.best()[0] - 17.3) <= 1.5, (t.best(), asked)


def test_bayes_tuner_stops_when_every_plan_was_measured() -> None:
    key = lambda x: x < 5  # noqa: E731 - two plans only
    t = BayesTuner(0, 10, n_init=2)
    seen = []
    while (x := t.ask(key)) is not None:
        seen.append(key(x))
        t.tell(x, 1.0 + x, key=key(x))
        assert len(seen) <= 2
    assert sorted(seen) == [False, True]
    with pytest.raises(ValueError):
        BayesTuner(3, 1)
    with pytest.raises(ValueError):
        t.tell(1.0, math.inf)


def test_dear_needs_an_initialised_process_group() -> None:
    import torch

    from host.dear import DeAR, DeARError

    m = torch.nn.Linear(2, 2)
    with pytest.raises(DeARError, match="init_process_group"):
        DeAR(m, torch.optim.SGD(m.parameters(), lr=0.1))


# ---------------------------------------------------------------------------------------------- real processes
# One set of processes runs every scenario (dlcp default group plus a gloo subgroup): starting a process that
# builds an optimizer costs seconds here (torch imports its compiler stack), so scenarios share processes.

@pytest.mark.slow
def test_dear_matches_ddp_over_gloo_and_dlcp() -> None:
    """After K steps DeAR == DDP (same optimizer, data, initial weights) over gloo and dlcp: SGD, momentum, Adam,
    AdamW; per-layer, byte and cost-model fusion; accumulation, clipping, LR schedule; dlcp gets each group's
    loss bound and layer position. Then: out-of-order forward, flush (explicit, eval forward, one-rank
    state_dict), state_dict round trip, pluggable compressors (all-reduce, fp16), bad input, online Bayesian
    tuning (plans rebuilt between iterations by rank 0's choice) still equal to DDP."""
    out = check(launch(MOD, "main", 3, timeout=240))  # 3: buffers padded, ring reduce-scatter over 3 hops
    for r, o in enumerate(out):
        assert o.strip().endswith(f"ok {r}"), o
        assert o.count("equal ") == 4 + 3, o
    assert "tune history" in out[0]


@pytest.mark.slow
def test_dead_peer_raises_on_gloo_and_dlcp() -> None:
    out = check(launch(MOD, "dead", 2, timeout=120))
    for name in ("gloo", "dlcp"):
        assert f"{name}: error after" in out[0], out[0]
    assert out[0].count("DeAR rank 0") == 2 and "reduce-scatter of fusion group" in out[0], out[0]
