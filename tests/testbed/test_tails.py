"""Tail figures of a run: quantile intervals that cover as they claim, the summary's rules (warm-up steps left out,
a step with an RTO on any rank counted once), and the worker-side timer on a real gloo process group."""

import itertools
import math
import random
import socket
import time
from fractions import Fraction

import pytest

from testbed.colltime import CollectiveTimer, rto_count, tcp_timeouts
from testbed.tails import quantile, quantile_ci, tail_summary


def test_quantile_interval_covers_the_true_quantile_as_claimed():
    rng = random.Random(7)
    true_p90 = -__import__("math").log(0.1)  # exponential(1)
    hits, trials = 0, 400
    for _ in range(trials):
        st = quantile_ci([rng.expovariate(1.0) for _ in range(200)], 0.9)
        assert st["coverage"] >= 0.95 and st["lo"] <= st["value"] <= st["hi"]
        hits += st["lo"] <= true_p90 <= st["hi"]
    assert hits / trials >= 0.92  # 95% nominal, 400 trials: a failing interval would sit far lower


def _exact_interval(n: int, q: float, confidence: float = 0.95) -> tuple[int, int, Fraction]:
    """quantile_ci's order statistics (1-based) and coverage, in exact rational arithmetic."""
    qq = Fraction(q).limit_denominator(1000)
    pmf = [math.comb(n, i) * qq ** i * (1 - qq) ** (n - i) for i in range(n + 1)]
    cdf = list(itertools.accumulate(pmf))
    below = lambda k: cdf[min(k, n)] if k >= 0 else Fraction(0)  # noqa: E731
    tail = (1 - Fraction(confidence).limit_denominator(1000)) / 2
    lo = 1
    while lo + 1 <= n and below(lo) <= tail:
        lo += 1
    hi = n
    while hi - 1 >= lo and 1 - below(hi - 2) <= tail:
        hi -= 1
    return lo, hi, below(hi - 1) - below(lo - 1)


@pytest.mark.parametrize("n", [1, 2, 7, 30, 100, 299])
@pytest.mark.parametrize("q", [0.5, 0.9, 0.99])
def test_interval_equals_exact_arithmetic(n, q):
    """The floating-point binomial CDF picks the same order statistics as exact rationals, with the coverage to
    1e-9."""
    st = quantile_ci(list(range(n)), q)
    lo, hi, coverage = _exact_interval(n, q)
    assert (st["lo"], st["hi"]) == (lo - 1, hi - 1)
    assert abs(st["coverage"] - float(coverage)) < 1e-9


def test_a_long_run_gets_its_interval():
    """Thousands of steps (a long run): the binomial coefficients outgrow a float (this failed with OverflowError
    past about 1030 samples) and the interval is still found, and it is narrow."""
    st = quantile_ci([float(i) for i in range(5000)], 0.99)
    assert st["coverage"] >= 0.95 and st["lo"] <= st["value"] <= st["hi"]
    assert 4900 < st["lo"] and st["hi"] < 4980


def test_small_samples_say_how_little_their_interval_covers():
    st = quantile_ci(list(range(100)), 0.99)
    assert st["hi"] == 99 and st["coverage"] < 0.95  # a p99 of 100 steps cannot reach 95%
    assert quantile_ci([], 0.5)["value"] is None
    assert quantile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5


def _worker(dts, rtos, calls=()):
    return {"iterations": [{"step": i, "dt": d, "rto": r} for i, (d, r) in enumerate(zip(dts, rtos))],
            "collectives": [{"op": op, "bytes": 8, "step": s, "start": 0.0, "dt": dt} for op, s, dt in calls]}


def test_tail_summary_counts_steps_with_a_timeout_on_any_rank_once():
    dts = [1.0, 1.0] + [0.1] * 8
    a = _worker(dts, [1, 0, 0, 1, 0, 0, 2, 0, 0, 0], [("all_reduce", 0, 9.0), ("all_reduce", 3, 0.2)])
    b = _worker(dts, [0, 0, 0, 1, 1, 0, 0, 0, 0, 0], [("reduce_scatter", 4, 0.4)])
    out = tail_summary([a, b], [0.1] * 8)
    # step 0 (warm-up) is left out; steps 3, 4 and 6 had a timeout on some rank; 1 + 1 + 1 + 2 timeouts
    assert out["rto_steps"] == 3 and out["rto_timeouts"] == 5
    assert out["coll_calls"] == 2 and set(out["collectives"]) == {"all_reduce", "reduce_scatter"}
    assert out["coll_p50_s"] <= out["coll_p90_s"] <= out["coll_p99_s"] <= 0.4
    assert out["iter_quantiles"]["p99"]["value"] == pytest.approx(0.1)


def test_tcp_timeouts_reads_this_namespace_netstat(tmp_path):
    f = tmp_path / "netstat"
    f.write_text("TcpExt: SyncookiesSent TCPTimeouts X\nTcpExt: 0 17 3\nIpExt: A\nIpExt: 1\n")
    assert tcp_timeouts(f) == 17
    assert tcp_timeouts(tmp_path / "missing") == 0
    assert rto_count(lambda: {"rto_timeouts": 4}) == tcp_timeouts() + 4


def test_timer_records_calls_inside_steps_only():
    import torch
    import torch.distributed as dist

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    store = dist.TCPStore("127.0.0.1", port, 1, True)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    original = dist.all_reduce
    timer = CollectiveTimer().install()
    try:
        t = torch.ones(256)
        dist.all_reduce(t)                  # between steps: not recorded
        timer.step(0)
        dist.all_reduce(t)                  # blocking
        w = dist.all_reduce(t, async_op=True)
        w.wait()
        shard = torch.empty(256)
        dist.reduce_scatter_single(shard, torch.ones(256))  # a world of 1: the shard is the whole buffer
        timer.step(None)
        deadline = time.monotonic() + 5  # the async call is recorded by its future's callback, maybe after wait()
        while len(timer.snapshot()) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        calls = timer.snapshot()
        assert sorted((c["op"], c["step"], c["bytes"]) for c in calls) == [("all_reduce", 0, 1024)] * 2 + [
            ("reduce_scatter", 0, 1024)]
        assert all(c["dt"] >= 0 for c in calls)
    finally:
        timer.uninstall()
        dist.destroy_process_group()
    assert dist.all_reduce is original  # uninstall put the originals back
