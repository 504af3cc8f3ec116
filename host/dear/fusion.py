"""Fusion planning and the DeAR schedule cost model (pure functions, no I/O, no torch.distributed).

* :func:`plan_groups` cuts the layers (parameter-owning modules, in forward order) into consecutive fusion groups
  by a byte threshold, the way DeAR does: a layer joins the open group, and the group closes once it holds at
  least ``threshold`` bytes. ``threshold <= 0`` gives one group per layer.
* :class:`CommModel` is the alpha-beta model of one reduce-scatter and one all-gather of an ``m``-byte buffer
  over the process group (``alpha + beta * m`` seconds each), fitted by :func:`fit_alpha_beta` to probe timings.
* :func:`simulate_dear` predicts the steady-state iteration time of the DeAR schedule for a plan, from per-layer
  forward/backward compute times and the comm model: all-gathers chained through the forward pass (group g+1's
  starts once group g's has completed and g's forward is due), reduce-scatters launched in backward as groups
  complete, strictly last group first, on one communication channel.
* :func:`choose_threshold` evaluates every distinct plan reachable by a power-of-two threshold (plus one group
  per layer and one group for everything) and returns the one predicted fastest.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

__all__ = ["plan_groups", "padded_numel", "CommModel", "fit_alpha_beta", "simulate_dear", "choose_threshold",
           "efficiency_threshold", "candidate_thresholds"]


def plan_groups(layer_bytes: Sequence[int], threshold: int) -> list[list[int]]:
    """Consecutive groups of layer indices; a group closes when it holds >= ``threshold`` bytes.

    >>> plan_groups([4, 4, 4, 10, 1], 8)
    [[0, 1], [2, 3], [4]]
    """
    if any(b < 0 for b in layer_bytes):
        raise ValueError(f"layer sizes must be >= 0, got {list(layer_bytes)}")
    groups: list[list[int]] = []
    cur: list[int] = []
    acc = 0
    for i, b in enumerate(layer_bytes):
        cur.append(i)
        acc += b
        if acc >= threshold:
            groups.append(cur)
            cur, acc = [], 0
    if cur:
        groups.append(cur)
    return groups


def padded_numel(numel: int, world: int) -> int:
    """``numel`` rounded up to a multiple of ``world`` (at least ``world``), so the buffer splits into equal
    shards."""
    if world < 1:
        raise ValueError(f"world size must be >= 1, got {world}")
    return max(1, math.ceil(numel / world)) * world


@dataclass(frozen=True)
class CommModel:
    """Seconds for one reduce-scatter / all-gather of an ``m``-byte (full, padded) buffer: ``alpha + beta*m``."""

    rs_alpha: float
    rs_beta: float
    ag_alpha: float
    ag_beta: float

    def rs(self, nbytes: float) -> float:
        return self.rs_alpha + self.rs_beta * nbytes

    def ag(self, nbytes: float) -> float:
        return self.ag_alpha + self.ag_beta * nbytes

    def as_list(self) -> list[float]:
        return [self.rs_alpha, self.rs_beta, self.ag_alpha, self.ag_beta]


def fit_alpha_beta(sizes: Sequence[float], seconds: Sequence[float]) -> tuple[float, float]:
    """Least-squares ``seconds = alpha + beta * size`` with ``alpha >= 0`` and ``beta > 0``."""
    if len(sizes) != len(seconds) or len(sizes) < 2:
        raise ValueError("need at least two (size, seconds) points of equal count")
    n = len(sizes)
    mx, my = sum(sizes) / n, sum(seconds) / n
    sxx = sum((x - mx) ** 2 for x in sizes)
    if sxx == 0:
        raise ValueError("probe sizes must differ")
    beta = sum((x - mx) * (y - my) for x, y in zip(sizes, seconds)) / sxx
    beta = max(beta, 1e-13)  # >= 10 TB/s: never zero, so the model always charges for bytes
    alpha = max(my - beta * mx, 0.0)
    return alpha, beta


def efficiency_threshold(comm: CommModel, efficiency: float = 0.9) -> int:
    """Smallest buffer whose reduce-scatter spends at most ``1 - efficiency`` of its time on latency:
    ``alpha / (alpha + beta*m) <= 1 - e``  =>  ``m >= alpha * e / ((1 - e) * beta)``. Used before compute times are
    known."""
    if not 0 < efficiency < 1:
        raise ValueError(f"efficiency must be in (0, 1), got {efficiency}")
    alpha = (comm.rs_alpha + comm.ag_alpha) / 2
    beta = (comm.rs_beta + comm.ag_beta) / 2
    return int(alpha * efficiency / ((1 - efficiency) * beta))


def simulate_dear(groups: Sequence[Sequence[int]], group_bytes: Sequence[float], fwd: Sequence[float],
                  bwd: Sequence[float], comm: CommModel) -> float:
    """Predicted seconds of one steady-state DeAR iteration (from ``step()`` to the next ``step()`` returning).

    ``fwd[i]``/``bwd[i]``: compute seconds of layer i (forward order) in the forward/backward pass;
    ``group_bytes[g]``: padded buffer bytes of group g. One channel: collectives run one at a time, in issue order.
    """
    G = len(groups)
    if G == 0:
        return sum(fwd) + sum(bwd)
    gf = [sum(fwd[i] for i in grp) for grp in groups]
    gb = [sum(bwd[i] for i in grp) for grp in groups]
    # forward with the all-gather chain, starting when step() starts group 0's all-gather
    t = 0.0
    ag_end = comm.ag(group_bytes[0])
    chan = ag_end
    for g in range(G):
        t = max(t, ag_end)  # the pre-hook waits for group g's all-gather
        if g + 1 < G:  # ... then starts group g+1's
            start = max(t, chan)
            ag_end = start + comm.ag(group_bytes[g + 1])
            chan = ag_end
        t += gf[g]
    # backward: last group first; group g is complete once its first layer's gradients are
    ready = t
    for g in range(G - 1, -1, -1):
        ready += gb[g]
        start = max(ready, chan)
        chan = start + comm.rs(group_bytes[g])
    return max(ready, chan)


def candidate_thresholds(layer_bytes: Sequence[int]) -> list[int]:
    """0 (one group per layer), every power of two from 1 KiB up to the total, and the total (one group)."""
    total = sum(layer_bytes)
    out = [0]
    k = 10
    while (1 << k) < total:
        out.append(1 << k)
        k += 1
    out.append(max(total, 1))
    return out


def choose_threshold(layer_bytes: Sequence[int], fwd: Sequence[float], bwd: Sequence[float], comm: CommModel,
                     world: int, elem_bytes: int = 4,
                     candidates: Sequence[int] | None = None) -> tuple[int, float, list[tuple[int, int, float]]]:
    """The threshold whose plan :func:`simulate_dear` predicts fastest (ties: fewer groups).

    Returns ``(threshold, predicted_seconds, [(threshold, groups, predicted), ...])`` for every distinct plan."""
    if not (len(layer_bytes) == len(fwd) == len(bwd)):
        raise ValueError("layer_bytes, fwd and bwd need one entry per layer")
    seen: dict[tuple[tuple[int, ...], ...], int] = {}
    table: list[tuple[int, int, float]] = []
    for thr in (candidates if candidates is not None else candidate_thresholds(layer_bytes)):
        groups = plan_groups(layer_bytes, thr)
        key = tuple(tuple(g) for g in groups)
        if key in seen:
            continue
        seen[key] = thr
        gbytes = [padded_numel(sum(layer_bytes[i] for i in g) // elem_bytes, world) * elem_bytes for g in groups]
        table.append((thr, len(groups), simulate_dear(groups, gbytes, fwd, bwd, comm)))
    if not table:
        raise ValueError("no candidate thresholds")
    best = min(table, key=lambda row: (row[2], row[1]))
    return best[0], best[2], table
