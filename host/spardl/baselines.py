"""Sparse all-reduce baselines as programs on the same drivers as SparDL (for bench/spardl.py and tests).

* :func:`gtopk` - gTop-k style tree (Shi et al., 2019): in ``ceil(log2 P)`` rounds ranks pair up along a binomial
  tree, the receiver sums the two top-k sets and keeps the top-k of the sum; rank 0 ends with the global top-k
  and sends it back down the same tree. ``2 ceil(log2 P)`` sequential messages of k entries each.
* :func:`topk_allgather` - every rank's top-k gathered by all (Bruck all-gather, ``ceil(log2 P)`` steps,
  ``(P-1) k`` entries received) and summed: the union grows up to ``P k`` (the sparse-gradient accumulation
  dilemma SparDL avoids).

Both use the same error feedback bookkeeping as SparDL (live buffer plus global residual collection, the live
buffer changed in place and restored from an undo log) and the same selection (:mod:`host.spardl.select`), so
the conservation invariant holds for them too and a faster selection helps all three alike.
"""

from __future__ import annotations

import torch

from host import sparse_wire as sw
from host.spardl import algo, select, sparse_ops
from host.spardl.clock import PhaseClock, phase
from host.spardl.program import (HopRecord, Program, Recv, Round, Send, SparDLOutput, _bruck, decode_message,
                                 encode_message, same_memory)

__all__ = ["gtopk", "topk_allgather", "TAG_GTOPK_UP", "TAG_GTOPK_DOWN", "TAG_TOPK_AG"]

TAG_GTOPK_UP, TAG_GTOPK_DOWN, TAG_TOPK_AG = 4, 5, 6


def _check(original: torch.Tensor, density: float, own_input: bool) -> tuple[torch.Tensor, int, int]:
    if not original.dtype.is_floating_point:
        raise TypeError(f"sparse all-reduce of floating-point tensors, got {original.dtype}")
    flat = original.detach().reshape(-1)
    n = flat.numel()
    return flat if own_input else flat.clone(), n, algo.block_budget(n, density)


def _addend(addend: torch.Tensor | None, live: torch.Tensor) -> torch.Tensor | None:
    if addend is None:
        return None
    if addend.numel() != live.numel() or addend.dtype != live.dtype or addend.device != live.device:
        raise ValueError(f"addend of {addend.numel()} {addend.dtype} elements on {addend.device} for "
                         f"{live.numel()} {live.dtype} on {live.device}")
    return addend.detach().reshape(-1)


def _output(out: torch.Tensor | None, clear: bool, n: int, dtype: torch.dtype, idx: torch.Tensor,
            vals: torch.Tensor) -> torch.Tensor:
    if out is not None and (out.numel() != n or out.dtype != dtype or not out.is_contiguous()):
        raise ValueError(f"out must be a contiguous tensor of {n} {dtype} elements")
    if out is not None and out.device != idx.device:
        raise ValueError(f"out on {out.device}, the reduced tensor on {idx.device}")
    if out is None:
        result = torch.zeros(n, dtype=dtype, device=idx.device)
    else:
        result = out.view(-1) if clear else out.view(-1).zero_()
    sparse_ops.put(result, idx, vals)
    return result


def _local_topk(live: torch.Tensor, k: int, addend: torch.Tensor | None, clear: bool, undo: algo.UndoLog,
                clock: PhaseClock | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Both baselines' first step, as SparDL's: one pass adds ``addend`` and lists candidates, exact top-k of
    ``live``, then the picked values are taken out of ``live`` (recorded in ``undo`` for the residual)."""
    with phase(clock, "pass"):
        cand = select.Candidates.take(live, k, addend=_addend(addend, live), clear_addend=clear,
                                      scratch=select.new_scratch(live))
    with phase(clock, "select"):
        idx = select.select_topk(live, k, cand)
    with phase(clock, "pack"):
        vals = live[idx]
        undo.record(live, idx, vals)
        live[idx] = 0
    return idx, vals


def gtopk(rank: int, world: int, original: torch.Tensor, density: float, *, own_input: bool = False,
          addend: torch.Tensor | None = None, out: torch.Tensor | None = None,
          clock: PhaseClock | None = None) -> Program[SparDLOutput]:
    """gTop-k sparse all-reduce on ``rank``; ``original`` is the input plus old residual (``own_input``: it
    becomes the live buffer and the new residual; ``addend``: added to it first, fused with the selection pass,
    as in SparDL); the dense result goes into ``out`` (default: a new tensor)."""
    live, n, k = _check(original, density, own_input)
    undo = algo.UndoLog()
    spec = sw.SegmentSpec(0, n, k)
    vsize = live.element_size()
    trace: list[HopRecord] = []
    sent = 0
    clear = same_memory(out, addend)
    idx, vals = _local_topk(live, k, addend, clear, undo, clock)
    gap, step = 1, 0
    gaps = []
    while gap < world:  # reduction up the binomial tree
        gaps.append(gap)
        if rank % (2 * gap) == gap:
            with phase(clock, "pack"):
                msg = encode_message([spec], [sw.Segment(0, idx, vals)], live.dtype)
            sent += msg.numel()
            trace.append(HopRecord("up", step, "send", rank - gap, ((0, idx.numel()),)))
            yield Round((Send(rank - gap, msg, TAG_GTOPK_UP * 32 + step),), ())
            break
        if rank % (2 * gap) == 0 and rank + gap < world:
            (buf,) = yield Round((), (Recv(rank + gap, sw.message_bytes([spec], vsize), TAG_GTOPK_UP * 32 + step),))
            with phase(clock, "merge"):
                (seg,) = decode_message(buf, [spec], live.dtype, live.device)
                trace.append(HopRecord("up", step, "recv", rank + gap, ((0, seg.indices.numel()),)))
                u_idx, u_vals = algo.merge_pieces([(idx, vals), (seg.indices, seg.values)], n, live.dtype)
            with phase(clock, "select"):
                keep = select.topk_magnitude(u_vals, k)
            with phase(clock, "merge"):
                dropped = torch.ones(u_idx.numel(), dtype=torch.bool, device=u_idx.device)
                dropped[keep] = False
                d_idx = u_idx[dropped]
                undo.record(live, d_idx)
                live.index_add_(0, d_idx, u_vals[dropped])  # partial sums this rank drops stay with it
                idx, vals = u_idx[keep], u_vals[keep]
        gap <<= 1
        step += 1
    # broadcast the global top-k back down the same tree
    have = rank == 0
    for s in reversed(range(len(gaps))):
        gap = gaps[s]
        tag = TAG_GTOPK_DOWN * 32 + s
        if have and rank % (2 * gap) == 0 and rank + gap < world:
            with phase(clock, "pack"):
                msg = encode_message([spec], [sw.Segment(0, idx, vals)], live.dtype)
            sent += msg.numel()
            trace.append(HopRecord("down", s, "send", rank + gap, ((0, idx.numel()),)))
            yield Round((Send(rank + gap, msg, tag),), ())
        elif not have and rank % (2 * gap) == gap:
            (buf,) = yield Round((), (Recv(rank - gap, sw.message_bytes([spec], vsize), tag),))
            with phase(clock, "merge"):
                (seg,) = decode_message(buf, [spec], live.dtype, live.device)
            trace.append(HopRecord("down", s, "recv", rank - gap, ((0, seg.indices.numel()),)))
            idx, vals, have = seg.indices, seg.values, True
    with phase(clock, "output"):
        result = _output(out, clear, n, live.dtype, idx, vals)
    with phase(clock, "residual"):
        residual = algo.collect_residual_in_place(live, undo, idx)
    return SparDLOutput(result, residual, idx, idx.numel(), trace, sent)


def topk_allgather(rank: int, world: int, original: torch.Tensor, density: float, *, own_input: bool = False,
                   addend: torch.Tensor | None = None, out: torch.Tensor | None = None,
                   clock: PhaseClock | None = None) -> Program[SparDLOutput]:
    """Top-k all-gather on ``rank``: every rank's top-k reaches every rank, summed in rank order (arguments as
    :func:`gtopk`)."""
    live, n, k = _check(original, density, own_input)
    undo = algo.UndoLog()
    clear = same_memory(out, addend)
    idx, vals = _local_topk(live, k, addend, clear, undo, clock)
    trace: list[HopRecord] = []
    pieces, sent = yield from _bruck(list(range(world)), rank, [(idx, vals)],
                                     lambda origin: sw.SegmentSpec(origin, n, k), live.dtype, live.device,
                                     TAG_TOPK_AG, "allgather", trace, clock)
    with phase(clock, "merge"):
        u_idx, u_vals = algo.merge_pieces(pieces, n, live.dtype)
    with phase(clock, "output"):
        result = _output(out, clear, n, live.dtype, u_idx, u_vals)
    with phase(clock, "residual"):
        residual = algo.collect_residual_in_place(live, undo, u_idx)
    return SparDLOutput(result, residual, u_idx, u_idx.numel(), trace, sent)
