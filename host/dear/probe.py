"""Latency/bandwidth probe: time reduce-scatter and all-gather of a few buffer sizes over the process group and fit
the alpha-beta :class:`~host.dear.fusion.CommModel`. Every rank gets the same model (the timings are combined by
an all-reduce MAX before fitting), so every rank derives the same fusion plan from it."""

from __future__ import annotations

import statistics
import time
from typing import Callable

import torch
import torch.distributed as dist

from host.dear.fusion import CommModel, fit_alpha_beta, padded_numel

__all__ = ["probe_comm", "PROBE_SIZES"]

PROBE_SIZES = (4 << 10, 64 << 10, 1 << 20)  # bytes of the full (padded) buffer


def probe_comm(process_group, world: int, *, max_bytes: int | None = None, reps: int = 3,
               sizes: tuple[int, ...] = PROBE_SIZES, dtype: torch.dtype = torch.float32,
               reduce_scatter: Callable[[torch.Tensor, torch.Tensor], None] | None = None) -> CommModel:
    """Measure and fit. ``max_bytes`` caps the largest size (no point probing beyond the model's size);
    ``reduce_scatter(flat, shard)``: the blocking reduce-scatter DeAR will use (default: the backend's)."""
    rs_fn = reduce_scatter or (lambda f, s: dist.reduce_scatter_single(s, f, group=process_group))
    esize = torch.empty(0, dtype=dtype).element_size()
    cap = max(max_bytes or sizes[-1], 2 * sizes[0])
    use = sorted({min(s, cap) for s in sizes})
    if len(use) < 2:
        use = [sizes[0], 2 * sizes[0]]
    numels = [padded_numel(max(1, s // esize), world) for s in use]
    rs_t, ag_t = [], []
    for n in numels:
        flat = torch.zeros(n, dtype=dtype)
        shard = torch.zeros(n // world, dtype=dtype)
        rs, ag = [], []
        for rep in range(reps + 1):
            t0 = time.perf_counter()
            rs_fn(flat, shard)
            t1 = time.perf_counter()
            dist.all_gather_single(flat, shard, group=process_group)
            t2 = time.perf_counter()
            if rep:  # the first round also absorbs the ranks' arrival skew
                rs.append(t1 - t0)
                ag.append(t2 - t1)
        rs_t.append(statistics.median(rs))
        ag_t.append(statistics.median(ag))
    both = torch.tensor(rs_t + ag_t, dtype=torch.float64)
    dist.all_reduce(both, op=dist.ReduceOp.MAX, group=process_group)
    k = len(numels)
    nbytes = [n * esize for n in numels]
    ra, rb = fit_alpha_beta(nbytes, both[:k].tolist())
    aa, ab = fit_alpha_beta(nbytes, both[k:].tolist())
    return CommModel(ra, rb, aa, ab)
