"""SparDL's pure parts: block partition, exact top-k, the communication schedules, merging, global residual
collection and the adaptive per-holder budget h. No I/O here; :mod:`host.spardl.program` strings them together.

Layout (``P`` ranks, ``d`` teams, ``m = P / d`` ranks per team): rank ``r`` is position ``j = r % m`` of team
``t = r // m``. The flat gradient is cut into ``m`` blocks (``P`` blocks when ``d = 1``); block ``b`` ends on
position ``b`` of every team, and ``k_b = density * len(b)`` is its non-zero budget.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from host.collectives import chunk_bounds
from host.spardl import select, sparse_ops

__all__ = ["team_size", "block_bounds", "block_budget", "topk_indices", "Hop", "srs_schedule", "BruckStep",
           "bruck_schedule", "merge_pieces", "cut_to_budget", "collect_residual", "UndoLog",
           "collect_residual_in_place", "AdaptiveH"]


def team_size(world: int, teams: int) -> int:
    """Ranks per team; ``teams`` must divide the world size (1 <= teams <= world)."""
    if world < 1:
        raise ValueError(f"world size must be >= 1, got {world}")
    if not isinstance(teams, int) or not 1 <= teams <= world or world % teams:
        raise ValueError(f"teams={teams!r} must divide the world size {world} (1 <= teams <= {world})")
    return world // teams


def block_bounds(n: int, blocks: int) -> list[int]:
    """Boundaries of ``blocks`` contiguous blocks of an ``n``-element tensor (sizes differ by at most one)."""
    return chunk_bounds(n, blocks)


def block_budget(block_len: int, density: float) -> int:
    """k for one block: ``round(density * len)``, at least 1 for a non-empty block, at most ``len``."""
    if not 0.0 < density <= 1.0:
        raise ValueError(f"density must be in (0, 1], got {density}")
    if block_len <= 0:
        return 0
    return min(block_len, max(1, int(round(density * block_len))))


def topk_indices(x: torch.Tensor, k: int) -> torch.Tensor:
    """Indices (ascending, int64) of ``k`` largest-magnitude elements of the flat tensor ``x``; exact and
    deterministic (equal inputs give equal outputs, which the cross-team merge relies on: every holder of a block
    computes the same selection). The threshold method of :mod:`host.spardl.select` (one pass over ``x``, then
    ``torch.topk`` over a small candidate set; ``torch.topk`` over all of ``x`` when the guess falls short)."""
    return select.topk_magnitude(x, k)


# --- schedules ----------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Hop:
    """One step of Spar-Reduce-Scatter for one team position: send ``send_blocks`` (top-k each) to position
    ``send_to`` and receive ``recv_blocks`` from ``recv_from`` (either side may be None), then add what arrived."""

    phase: str  # "pre" (fold the extra ranks in), "halve", "post" (hand the extra ranks their block)
    step: int  # the same for both ends of a message: pre 0, halving 1.., post last
    send_to: int | None
    send_blocks: tuple[int, ...]
    recv_from: int | None
    recv_blocks: tuple[int, ...]


def srs_schedule(pos: int, m: int) -> list[Hop]:
    """Spar-Reduce-Scatter hops of team position ``pos`` in a team of ``m``; afterwards ``pos`` owns block ``pos``.

    ``pof2`` = largest power of two <= m, ``rem = m - pof2``. Non-power-of-two teams get the **extra steps**:
    first every extra position ``e >= pof2`` sends all its blocks (top-k each) to ``e - pof2``; the ``pof2``
    remaining positions run recursive halving over *virtual blocks* ``V(v) = {v} + ({v + pof2} if v < rem)``
    (``log2 pof2`` hops, halving the blocks each time); finally position ``v < rem`` sends block ``v + pof2`` to
    position ``v + pof2``. So ``ceil(log2 m)`` hops on the critical path plus one for the fold.
    """
    if not 0 <= pos < m:
        raise ValueError(f"position {pos} outside a team of {m}")
    pof2 = 1 << (m.bit_length() - 1)
    rem = m - pof2
    everything = tuple(range(m))
    hops: list[Hop] = []
    if rem:
        if pos >= pof2:
            hops.append(Hop("pre", 0, pos - pof2, everything, None, ()))
        elif pos < rem:
            hops.append(Hop("pre", 0, None, (), pos + pof2, everything))
    if pos < pof2:
        def blocks(lo: int, hi: int) -> tuple[int, ...]:
            return tuple(b for v in range(lo, hi) for b in ((v, v + pof2) if v < rem else (v,)))
        lo, hi = 0, pof2
        mask = pof2 >> 1
        step = 1
        while mask:
            mid = (lo + hi) // 2
            partner = pos ^ mask
            if pos & mask:
                send, keep = (lo, mid), (mid, hi)
            else:
                send, keep = (mid, hi), (lo, mid)
            hops.append(Hop("halve", step, partner, blocks(*send), partner, blocks(*keep)))
            lo, hi = keep
            mask >>= 1
            step += 1
    last = pof2.bit_length()
    if rem:
        if pos < rem:
            hops.append(Hop("post", last, pos + pof2, (pos + pof2,), None, ()))
        elif pos >= pof2:
            hops.append(Hop("post", last, None, (), pos - pof2, (pos,)))
    return hops


@dataclass(frozen=True)
class BruckStep:
    """Bruck all-gather step: send the first ``count`` items held to ``send_to``, receive ``count`` items from
    ``recv_from`` and append them. Participant ``q`` holds the items of origins ``q, q+1, ...`` (mod n)."""

    gap: int
    count: int
    send_to: int
    recv_from: int


def bruck_schedule(q: int, n: int) -> list[BruckStep]:
    """``ceil(log2 n)`` steps for participant ``q`` of ``n`` (any n): after them it holds all n items."""
    if not 0 <= q < n:
        raise ValueError(f"participant {q} outside 0..{n - 1}")
    steps = []
    gap = 1
    while gap < n:
        steps.append(BruckStep(gap, min(gap, n - gap), (q - gap) % n, (q + gap) % n))
        gap <<= 1
    return steps


# --- merging and residuals ----------------------------------------------------------------------------------------

def merge_pieces(pieces: list[tuple[torch.Tensor, torch.Tensor]], block_len: int,
                 dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Sum sparse pieces ``(indices, values)`` of one block, in list order (so every rank merging the same list
    gets the same bits: each sum is ``0 + v_1 + v_2 + ...`` over the pieces holding the index). Returns the union
    of the indices (ascending) and the sums there, on the pieces' device. Sparse throughout: the work follows the
    pieces' sizes, not ``block_len`` (which only bounds the indices). One ``index_add_`` per piece: within a piece
    positions are unique, so the order of the adds is the list order on every device (a single ``index_add_`` of
    all pieces would leave it to CUDA's atomics)."""
    if not pieces:
        return torch.empty(0, dtype=torch.int64, device="cpu"), torch.empty(0, dtype=dtype, device="cpu")
    idx = torch.cat([p[0] for p in pieces])
    if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= block_len):
        raise ValueError(f"piece index outside a block of {block_len} elements")
    union, where = torch.unique(idx, return_inverse=True)
    acc = torch.zeros(union.numel(), dtype=dtype, device=union.device)
    off = 0
    for p_idx, p_vals in pieces:
        n = p_idx.numel()
        acc.index_add_(0, where[off:off + n], p_vals.to(dtype))
        off += n
    return union, acc


def cut_to_budget(indices: torch.Tensor, values: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The at most ``k`` largest-magnitude entries of a sparse block (ascending indices)."""
    if indices.numel() <= k:
        return indices, values
    keep = topk_indices(values, k)
    return indices[keep], values[keep]


def collect_residual(original: torch.Tensor, live: torch.Tensor, selected: torch.Tensor, *,
                     in_place: bool = False) -> torch.Tensor:
    """Global residual collection: at globally selected indices a rank keeps what it dropped along the way (its
    live buffer: everything it held there and did not pass on, received partial sums included); elsewhere it
    keeps its own original value (input plus old residual), and partial sums of others it dropped there are
    forgotten, because their owners keep their originals. Every contribution then sits either in the result or
    in exactly one residual. ``in_place``: build it in ``original``."""
    residual = original if in_place else original.clone()
    residual[selected] = live[selected]
    return residual


class UndoLog:
    """What a dense buffer held before sparse changes, so that exactly its earlier contents can be restored.

    SparDL works on one dense buffer per rank (the input plus old residual, which becomes its live buffer, which
    becomes its new residual) instead of a copy: every change is sparse (a sent top-k zeroed, a received piece
    added), so recording the old values at the changed positions costs a few ``k`` elements, where a copy of the
    buffer costs a pass over the gradient."""

    def __init__(self) -> None:
        self._entries: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []

    def record(self, view: torch.Tensor, positions: torch.Tensor, old: torch.Tensor | None = None) -> None:
        """Remember ``view[positions]`` before they change; ``old`` if the caller has them."""
        self._entries.append((view, positions, sparse_ops.gather(view, positions) if old is None else old))

    def restore(self) -> None:
        """Write every recorded value back, newest first: the buffer holds what it held before the first change
        (a position recorded twice in one entry gets its one old value twice)."""
        for view, positions, old in reversed(self._entries):
            sparse_ops.put(view, positions, old)
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


def collect_residual_in_place(live: torch.Tensor, undo: UndoLog, selected: torch.Tensor) -> torch.Tensor:
    """:func:`collect_residual` built in the live buffer itself: ``undo`` holds everything the live buffer
    changed since it was the original; the result is the original with ``live``'s values at ``selected``."""
    keep = sparse_ops.gather(live, selected)
    undo.restore()
    sparse_ops.put(live, selected, keep)
    return live


@dataclass
class AdaptiveH:
    """The budget h a block holder contributes to the cross-team exchange (``d > 1`` teams).

    The ``d`` holders of a block each send their top-h; the union of the ``d`` pieces is cut back to ``k``. With
    ``h = k`` the union can reach ``d*k`` (bandwidth wasted on values cut away); with ``h = k/d`` it can be far
    below ``k`` when the pieces overlap (budget unused). After every exchange the holders see the union size
    ``u`` and move ``h`` towards the value that makes ``u = k`` (proportional step ``h <- h*k/u``), clamped to
    ``[ceil(k/d), k]``. All holders of a block see the same ``u``, so they keep the same ``h`` (message sizes
    depend on it). With one team, or when ``k`` is the whole block (density 1), ``h = k`` and nothing adapts.
    """

    k: int
    teams: int
    block_len: int
    h: int = field(default=-1)

    def __post_init__(self) -> None:
        if self.h < 0:
            self.h = self.hi if self.fixed else self.lo

    @property
    def fixed(self) -> bool:
        return self.teams == 1 or self.k >= self.block_len

    @property
    def lo(self) -> int:
        return min(self.k, math.ceil(self.k / self.teams))

    @property
    def hi(self) -> int:
        return self.k

    def update(self, union: int) -> int:
        """Adapt to the union size seen in the last exchange; returns the new h."""
        if not self.fixed and union > 0:
            self.h = max(self.lo, min(self.hi, int(round(self.h * self.k / union))))
        return self.h
