"""Sparse all-reduce baselines as programs on the same drivers as SparDL (for bench/spardl.py and tests).

* :func:`gtopk` - gTop-k style tree (Shi et al., 2019): in ``ceil(log2 P)`` rounds ranks pair up along a binomial
  tree, the receiver sums the two top-k sets and keeps the top-k of the sum; rank 0 ends with the global top-k
  and sends it back down the same tree. ``2 ceil(log2 P)`` sequential messages of k entries each.
* :func:`topk_allgather` - every rank's top-k gathered by all (Bruck all-gather, ``ceil(log2 P)`` steps,
  ``(P-1) k`` entries received) and summed: the union grows up to ``P k`` (the sparse-gradient accumulation
  dilemma SparDL avoids).

Both use the same error feedback bookkeeping as SparDL (live buffer plus global residual collection), so the
conservation invariant holds for them too.
"""

from __future__ import annotations

import torch

from host import sparse_wire as sw
from host.spardl import algo
from host.spardl.program import HopRecord, Program, Recv, Round, Send, SparDLOutput, _bruck

__all__ = ["gtopk", "topk_allgather", "TAG_GTOPK_UP", "TAG_GTOPK_DOWN", "TAG_TOPK_AG"]

TAG_GTOPK_UP, TAG_GTOPK_DOWN, TAG_TOPK_AG = 4, 5, 6


def _check(original: torch.Tensor, density: float) -> tuple[torch.Tensor, int, int]:
    if not original.dtype.is_floating_point:
        raise TypeError(f"sparse all-reduce of floating-point tensors, got {original.dtype}")
    flat = original.detach().reshape(-1)
    n = flat.numel()
    return flat, n, algo.block_budget(n, density)


def gtopk(rank: int, world: int, original: torch.Tensor, density: float) -> Program[SparDLOutput]:
    """gTop-k sparse all-reduce on ``rank``; ``original`` is the input plus old residual."""
    flat, n, k = _check(original, density)
    live = flat.clone()
    spec = sw.SegmentSpec(0, n, k)
    vsize = live.element_size()
    trace: list[HopRecord] = []
    sent = 0
    idx = algo.topk_indices(live, k)
    vals = live[idx].clone()
    live[idx] = 0
    gap, step = 1, 0
    gaps = []
    while gap < world:  # reduction up the binomial tree
        gaps.append(gap)
        if rank % (2 * gap) == gap:
            msg = sw.encode([spec], [sw.Segment(0, idx, vals)], live.dtype)
            sent += msg.numel()
            trace.append(HopRecord("up", step, "send", rank - gap, ((0, idx.numel()),)))
            yield Round((Send(rank - gap, msg, TAG_GTOPK_UP * 32 + step),), ())
            break
        if rank % (2 * gap) == 0 and rank + gap < world:
            (buf,) = yield Round((), (Recv(rank + gap, sw.message_bytes([spec], vsize), TAG_GTOPK_UP * 32 + step),))
            (seg,) = sw.decode(buf, [spec], live.dtype)
            trace.append(HopRecord("up", step, "recv", rank + gap, ((0, seg.indices.numel()),)))
            u_idx, u_vals = algo.merge_pieces([(idx, vals), (seg.indices, seg.values)], n, live.dtype)
            keep = algo.topk_indices(u_vals, k)
            dropped = torch.ones(u_idx.numel(), dtype=torch.bool)
            dropped[keep] = False
            live.index_add_(0, u_idx[dropped], u_vals[dropped])  # partial sums this rank drops stay with it
            idx, vals = u_idx[keep], u_vals[keep]
        gap <<= 1
        step += 1
    # broadcast the global top-k back down the same tree
    have = rank == 0
    for s in reversed(range(len(gaps))):
        gap = gaps[s]
        tag = TAG_GTOPK_DOWN * 32 + s
        if have and rank % (2 * gap) == 0 and rank + gap < world:
            msg = sw.encode([spec], [sw.Segment(0, idx, vals)], live.dtype)
            sent += msg.numel()
            trace.append(HopRecord("down", s, "send", rank + gap, ((0, idx.numel()),)))
            yield Round((Send(rank + gap, msg, tag),), ())
        elif not have and rank % (2 * gap) == gap:
            (buf,) = yield Round((), (Recv(rank - gap, sw.message_bytes([spec], vsize), tag),))
            (seg,) = sw.decode(buf, [spec], live.dtype)
            trace.append(HopRecord("down", s, "recv", rank - gap, ((0, seg.indices.numel()),)))
            idx, vals, have = seg.indices, seg.values, True
    result = torch.zeros(n, dtype=live.dtype)
    result[idx] = vals
    residual = algo.collect_residual(flat, live, idx)
    return SparDLOutput(result, residual, idx, idx.numel(), trace, sent)


def topk_allgather(rank: int, world: int, original: torch.Tensor, density: float) -> Program[SparDLOutput]:
    """Top-k all-gather on ``rank``: every rank's top-k reaches every rank, summed in rank order."""
    flat, n, k = _check(original, density)
    live = flat.clone()
    idx = algo.topk_indices(live, k)
    vals = live[idx].clone()
    live[idx] = 0
    trace: list[HopRecord] = []
    pieces, sent = yield from _bruck(list(range(world)), rank, [(idx, vals)],
                                     lambda origin: sw.SegmentSpec(origin, n, k), live.dtype, TAG_TOPK_AG,
                                     "allgather", trace)
    u_idx, u_vals = algo.merge_pieces(pieces, n, live.dtype)
    result = torch.zeros(n, dtype=live.dtype)
    result[u_idx] = u_vals
    residual = algo.collect_residual(flat, live, u_idx)
    return SparDLOutput(result, residual, u_idx, u_idx.numel(), trace, sent)
