"""Tails of a testbed run: quantiles of the step times and of every collective call, with distribution-free
intervals, and the steps that waited on a retransmission timeout.

Why: bounded loss exists to cut the tail (a step that would wait for a retransmission finishes with a few
zero-filled elements instead), so a run must report more than its median. What the run's summary gets
(:func:`tail_summary`):

* ``iter_p90_s`` and ``iter_p99_s`` beside ``iter_p50_s``, and ``iter_quantiles``: each of p50/p90/p99 with an
  order-statistic interval (:func:`quantile_ci`) over the run's measured steps;
* ``coll_p50_s``, ``coll_p90_s``, ``coll_p99_s``: quantiles of the completion time of every collective call made
  in a measured step, on every rank (each call as its worker saw it, :mod:`testbed.colltime`), with
  ``coll_calls``; ``collectives`` holds the same per operation (``all_reduce``, ``reduce_scatter``, ...);
* ``rto_steps``: how many measured steps had a retransmission timeout fire on at least one rank (the dlcp
  transport's and the namespace's TCP timeouts), ``rto_timeouts`` their total over ranks and measured steps.

Steps are the ones :func:`testbed.steps.step_times` measures (the warm-up steps left out), so every figure here
describes the same steps as the iteration-time percentiles.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

from .steps import measured_range

__all__ = ["quantile", "quantile_ci", "tail_summary", "QUANTILES"]

#: The quantiles reported, as (name, q).
QUANTILES: tuple[tuple[str, float], ...] = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))


def quantile(values: list[float], q: float) -> float | None:
    """The ``q`` quantile of ``values``, interpolated between order statistics (numpy's default); None if empty."""
    if not values:
        return None
    s = sorted(values)
    k = (len(s) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def _binom_cdfs(n: int, q: float) -> list[float]:
    """``P(B <= k)`` for ``k = 0..n``, ``B ~ Binomial(n, q)``: the terms summed once, in order (each ``P(B <= k)``
    summed afresh was O(n^2): 10 s for one interval of 1000 steps). Past n ~ 1030 the exact binomial coefficients
    outgrow a float (a run of more steps failed at its end with OverflowError): each term then comes from its
    logarithm (``math.lgamma``)."""
    try:
        terms = [math.comb(n, i) * q ** i * (1 - q) ** (n - i) for i in range(n + 1)]
    except OverflowError:
        lq = math.log(q) if q > 0.0 else -math.inf
        lr = math.log1p(-q) if q < 1.0 else -math.inf
        top = math.lgamma(n + 1)
        terms = [math.exp(top - math.lgamma(i + 1) - math.lgamma(n - i + 1)
                          + (i * lq if i else 0.0) + ((n - i) * lr if n - i else 0.0)) for i in range(n + 1)]
    return list(itertools.accumulate(terms))


def quantile_ci(values: list[float], q: float, confidence: float = 0.95) -> dict[str, Any]:
    """The ``q`` quantile of ``values`` with a distribution-free interval ``[x_(l), x_(u)]`` (1-based order
    statistics): the interval covers the true quantile when at least ``l`` and fewer than ``u`` of the samples lie
    below it, probability ``P(l <= B < u)`` for ``B ~ Binomial(n, q)``. ``l`` is the largest with
    ``P(B < l) <= (1 - confidence) / 2`` and ``u`` the smallest with ``P(B >= u) <= (1 - confidence) / 2``; where
    ``n`` is too small for that (a p99 from fewer than a few hundred samples), the interval stops at the sample's
    minimum or maximum and ``coverage`` says how much it actually covers. The samples are treated as independent,
    which successive steps of one run are only approximately."""
    xs = sorted(float(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v)))
    n = len(xs)
    if n == 0:
        return {"n": 0, "value": None, "lo": None, "hi": None, "coverage": None}
    tail = (1.0 - confidence) / 2.0
    cdf = _binom_cdfs(n, q)

    def below(k: int) -> float:  # P(B <= k)
        return cdf[min(k, n)] if k >= 0 else 0.0

    lo = 1
    while lo + 1 <= n and below(lo) <= tail:  # P(B < lo + 1) = P(B <= lo)
        lo += 1
    hi = n
    while hi - 1 >= lo and 1.0 - below(hi - 2) <= tail:  # P(B >= hi - 1)
        hi -= 1
    coverage = below(hi - 1) - below(lo - 1)
    return {"n": n, "value": quantile(xs, q), "lo": xs[lo - 1], "hi": xs[hi - 1], "coverage": coverage}


def tail_summary(workers: list[dict[str, Any]], per_step: list[float]) -> dict[str, Any]:
    """The tail figures of a run (see the module docstring) from its workers' records and its per-step times
    (:func:`testbed.steps.step_times`)."""
    first, end = measured_range(workers)
    out: dict[str, Any] = {"iter_quantiles": {name: quantile_ci(per_step, q) for name, q in QUANTILES}}
    out["iter_p90_s"] = out["iter_quantiles"]["p90"]["value"]
    calls = [c for w in workers for c in (w.get("collectives") or []) if first <= c["step"] < end]
    durations = [float(c["dt"]) for c in calls]
    for name, q in QUANTILES:
        out[f"coll_{name}_s"] = quantile(durations, q)
    out["coll_calls"] = len(calls)
    by_op: dict[str, list[float]] = {}
    for c in calls:
        by_op.setdefault(c["op"], []).append(float(c["dt"]))
    out["collectives"] = {op: {"calls": len(ds), "bytes_max": max(int(c["bytes"]) for c in calls if c["op"] == op),
                               **{f"{name}_s": quantile(ds, q) for name, q in QUANTILES}}
                          for op, ds in sorted(by_op.items())}
    # a step waited on a retransmission timeout when one fired on any rank during it
    have_rto = all(all("rto" in it for it in w["iterations"]) for w in workers)
    if have_rto:
        per = [sum(int(w["iterations"][i]["rto"]) for w in workers) for i in range(first, end)]
        out["rto_steps"] = sum(1 for n in per if n > 0)
        out["rto_timeouts"] = sum(per)
    else:  # a record without per-step counts (A²CiD²'s workers have no common step)
        out["rto_steps"] = None
        out["rto_timeouts"] = None
    return out
