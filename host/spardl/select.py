"""Top-k selection by magnitude, the CPU-heavy part of every sparse all-reduce: exact, but with one cheap pass.

Every sparse method in ``host.spardl`` (SparDL, the gTop-k tree, the top-k all-gather, in the library and in
``bench/spardl.py``) selects with these functions, so a faster selection helps them all alike.

The exact ``torch.topk`` over millions of elements costs tens of milliseconds. The threshold method here costs
about one pass of ``abs``, a compare and a ``nonzero``:

1. :func:`sample_threshold`: from a sample of 4096 elements (64 evenly spaced runs of 64) guess a magnitude
   ``t`` that about ``1.5 k`` elements reach (the sample's ``q``-th largest, ``q`` scaled from ``k / n`` with
   slack).
2. :func:`take_candidates`: one vectorised pass (in chunks that stay in cache) keeps the positions with
   ``|x| >= t``. If at least ``k`` pass, every element of the true top-k is among them, because everything
   outside has ``|x| < t``.
3. :func:`select_topk`: ``torch.topk`` over the small candidate set gives exactly the top-k; if fewer than ``k``
   candidates reach ``t`` it falls back to the exact ``torch.topk`` over the whole tensor. So the result is
   always the exact top-k (ties broken deterministically: equal inputs give equal outputs) and never more than
   ``k`` positions.

A :class:`Candidates` set stays valid while the tensor changes only at positions added to it with
:meth:`Candidates.touch`: an untouched position outside still has ``|x| < t``. SparDL takes candidates of all its
blocks in one pass before the first hop and touches the positions it receives into; every later re-selection of a
block then looks only at the candidates and the touched positions (a few ``k``), not at the block.

The dense pass runs on numpy views of the tensor's memory (no copy; numpy's ``abs``/``>=``/``flatnonzero`` are
about three times faster than torch's single-threaded ones on this kind of machine); bfloat16, which numpy
lacks, and non-contiguous tensors use torch.

**Device tensors** (CUDA): the selection runs on the tensor's device and returns indices there. The threshold
method is a host optimisation (it trades passes over the tensor for a few host round trips, which on a GPU cost
more than the one ``torch.topk`` kernel over the block they would save), so device tensors always take the exact
selection: ``torch.topk`` gives the k-th largest magnitude, and the positions are chosen by the same rule as the
numpy path (everything above it, then the first ties by position). ``torch.topk`` alone would not do: which of
tied elements it returns is not specified (PyTorch's documentation: "the indices of tied elements are not
guaranteed to be stable"), and SparDL's holders of a block must all pick the same ones. So a CUDA selection picks
exactly the positions the host one does, bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from host.spardl.sparse_ops import numpy_ok

__all__ = ["SAMPLE", "SLACK", "CHUNK", "Scratch", "new_scratch", "sample_threshold", "take_candidates", "Candidates",
           "select_topk", "exact_topk", "topk_magnitude"]

SAMPLE = 4096  # elements sampled to guess the threshold
RUNS = 64  # ... in this many evenly spaced runs of contiguous elements
SLACK = 1.5  # aim for about SLACK * k candidates
CHUNK = 1 << 16  # elements per chunk of the dense pass (abs and mask stay in L2)
_MIN_FAST = 1 << 14  # smaller tensors: exact torch.topk directly


def _top_mask(a: np.ndarray, k: int) -> np.ndarray:
    """A bool mask of exactly ``k`` (0 < k <= len) entries of ``a`` none smaller than any unmasked one: all above
    the k-th largest value, then the first entries equal to it (so the choice among ties is by position,
    deterministic). Positions come out in order, so no sort is needed afterwards."""
    if k >= a.size:
        return np.ones(a.size, dtype=np.bool_)
    kth = np.partition(a, a.size - k)[a.size - k]
    mask = a > kth
    need = k - int(np.count_nonzero(mask))
    if need > 0:
        mask[np.flatnonzero(a == kth)[:need]] = True
    return mask


def _top_mask_torch(a: torch.Tensor, k: int) -> torch.Tensor:
    """:func:`_top_mask` in torch, on ``a``'s device (magnitudes, NaN already counted as infinity): the k-th
    largest from ``torch.topk``, then the same choice among ties (by position)."""
    if k >= a.numel():
        return torch.ones(a.numel(), dtype=torch.bool, device=a.device)
    kth = torch.topk(a, k, sorted=False).values.min()
    mask = a > kth
    need = k - int(torch.count_nonzero(mask))
    if need > 0:
        mask[torch.nonzero(a == kth).squeeze(1)[:need]] = True
    return mask


def _magnitudes(x: torch.Tensor) -> torch.Tensor:
    """``|x|`` with NaN counted as the largest magnitude (infinity), as in the numpy path and in torch.topk."""
    a = x.detach().abs()
    return a.masked_fill_(torch.isnan(a), float("inf"))


def exact_topk(x: torch.Tensor, k: int) -> torch.Tensor:
    """Indices (ascending, int64, on ``x``'s device) of ``k`` largest-magnitude elements of the flat tensor ``x``,
    looking at all of it (numpy's introselect on the host, ``torch.topk`` for dtypes numpy lacks and on devices);
    ties are chosen by position either way."""
    n = x.numel()
    if k >= n:
        return torch.arange(n, dtype=torch.int64, device=x.device)
    if k <= 0:
        return torch.empty(0, dtype=torch.int64, device=x.device)
    if numpy_ok(x):
        a = np.abs(x.detach().numpy())
        if np.isnan(a).any():  # NaN counts as the largest magnitude, as in torch.topk
            a = np.where(np.isnan(a), np.inf, a)
        return torch.from_numpy(np.flatnonzero(_top_mask(a, k)).astype(np.int64, copy=False))
    return torch.nonzero(_top_mask_torch(_magnitudes(x), k)).squeeze(1)


def sample_threshold(x: torch.Tensor, k: int, *, addend: torch.Tensor | None = None, sample: int = SAMPLE,
                     slack: float = SLACK) -> float | None:
    """A magnitude about ``slack * k`` elements of the flat tensor ``x`` (plus ``addend``, if given) reach,
    guessed from a sample; None when a guess would not pay (small tensor, ``k`` a large fraction of it, a zero
    threshold, or a device tensor: see the module docstring)."""
    n = x.numel()
    if n < _MIN_FAST or k <= 0 or k * 8 > n or x.device.type != "cpu":
        return None
    # RUNS evenly spaced runs of contiguous elements: a few dozen cache lines and pages to fetch instead of
    # one of each per sampled element (the buffer is usually cold: the sample costs 10x less than a strided one)
    run = max(1, sample // RUNS)
    stride = n // RUNS
    s = x.detach()[:RUNS * stride].view(RUNS, stride)[:, :run]
    if addend is not None:
        s = s + addend.detach()[:RUNS * stride].view(RUNS, stride)[:, :run]
    s = s.abs().reshape(-1)
    q = int(s.numel() * k / n * slack) + 8
    if q >= s.numel():
        return None
    t = float(torch.topk(s, q, sorted=True).values[-1])
    return t if t > 0 else None


Scratch = tuple[np.ndarray, np.ndarray]


def new_scratch(x: torch.Tensor) -> Scratch | None:
    """Work arrays for :func:`take_candidates` on tensors like ``x`` (None if it takes the torch path)."""
    if not numpy_ok(x):
        return None
    return np.empty(CHUNK, dtype=x.detach()[:0].numpy().dtype), np.empty(CHUNK, dtype=np.bool_)


def _scratch(scratch: Scratch | None, dtype: np.dtype) -> Scratch:
    if scratch is not None and scratch[0].dtype == dtype and scratch[0].size >= CHUNK:
        return scratch
    return np.empty(CHUNK, dtype=dtype), np.empty(CHUNK, dtype=np.bool_)


def take_candidates(x: torch.Tensor, t: float | None, *, addend: torch.Tensor | None = None,
                    clear_addend: bool = False, scratch: Scratch | None = None) -> torch.Tensor | None:
    """Positions (ascending, int64) of the flat tensor ``x`` with ``|x| >= t``: one pass, chunk by chunk.

    ``addend`` (same shape and dtype) is first added into ``x`` **in place**, in the same pass (error feedback
    fused with selection: each chunk is added, then compared while it is in cache); ``clear_addend`` then
    zeroes the addend's chunk too (when the addend is the buffer the dense result will be written into, this
    replaces a separate pass that clears it). With ``t`` None only the addition happens and the result is None.
    ``scratch`` (a value and a bool array of at least :data:`CHUNK` elements) saves two allocations per call."""
    if addend is not None and (addend.shape != x.shape or addend.dtype != x.dtype):
        raise ValueError(f"addend of shape {tuple(addend.shape)} {addend.dtype} for a tensor of "
                         f"{tuple(x.shape)} {x.dtype}")
    if not numpy_ok(x) or not x.is_contiguous() or (addend is not None and not addend.is_contiguous()):
        if addend is not None:
            x.detach().add_(addend.detach())
            if clear_addend:
                addend.detach().zero_()
        return None if t is None else torch.nonzero(x.detach().abs() >= t).squeeze(1)
    xn = x.detach().numpy()
    gn = None if addend is None else addend.detach().numpy()
    if t is None:
        if gn is not None:
            np.add(xn, gn, out=xn)
            if clear_addend:
                gn.fill(0)
        return None
    n = xn.size
    a, m = _scratch(scratch, xn.dtype)
    parts = []
    for lo in range(0, n, CHUNK):
        c = xn[lo:lo + CHUNK]
        w = c.size
        if gn is not None:
            gc = gn[lo:lo + CHUNK]
            np.add(c, gc, out=c)
            if clear_addend:
                gc.fill(0)
        np.abs(c, out=a[:w])
        np.greater_equal(a[:w], t, out=m[:w])
        nz = np.flatnonzero(m[:w])
        if nz.size:
            parts.append(nz + lo if lo else nz)
    if not parts:
        return torch.empty(0, dtype=torch.int64, device=x.device)
    return torch.from_numpy(np.concatenate(parts).astype(np.int64, copy=False))


def _sorted_unique(a: np.ndarray) -> np.ndarray:
    """Sorted distinct values of a small int array made of a few sorted runs (timsort merges the runs; keep the
    first of each run of equal values; several times faster than ``np.unique``, which hashes first)."""
    a = np.sort(a, kind="stable")
    if a.size < 2:
        return a
    keep = np.empty(a.size, dtype=np.bool_)
    keep[0] = True
    np.not_equal(a[1:], a[:-1], out=keep[1:])
    return a[keep]


@dataclass
class Candidates:
    """A superset of a flat tensor's top-k positions, valid while the tensor changes only at touched positions.

    ``indices`` (int64, ascending, unique) had ``|x| >= threshold`` when taken; every other position had less.
    Positions whose value changes afterwards must be :meth:`touch` ed; they join the set at the next selection.
    Host tensors only (:meth:`take` gives None for a device tensor, whose selection is exact).
    """

    threshold: float
    indices: torch.Tensor
    _touched: list[torch.Tensor] = field(default_factory=list)

    @classmethod
    def take(cls, x: torch.Tensor, k: int, *, addend: torch.Tensor | None = None, clear_addend: bool = False,
             scratch: Scratch | None = None) -> "Candidates | None":
        """Candidates for the top-``k`` of ``x`` (one pass), or None if the threshold method does not apply or
        found fewer than ``k`` (the caller then selects exactly). ``addend`` is added into ``x`` first, in
        place, in the same pass (and cleared with ``clear_addend``; see :func:`take_candidates`)."""
        t = sample_threshold(x, k, addend=addend)
        idx = take_candidates(x, t, addend=addend, clear_addend=clear_addend, scratch=scratch)
        if t is None or idx is None or idx.numel() < k:
            return None
        return cls(t, idx)

    def touch(self, positions: torch.Tensor) -> None:
        """Record that the tensor's values at ``positions`` (int64) changed."""
        if positions.numel():
            self._touched.append(positions)

    def positions(self) -> torch.Tensor:
        """The candidate positions including everything touched (ascending, unique)."""
        if self._touched:
            self.indices = torch.from_numpy(_sorted_unique(
                np.concatenate([self.indices.numpy()] + [p.numpy() for p in self._touched])))
            self._touched.clear()
        return self.indices


def select_topk(x: torch.Tensor, k: int, cand: Candidates | None = None) -> torch.Tensor:
    """Exactly the ``k`` largest-magnitude positions of the flat tensor ``x`` (ascending, int64, on ``x``'s device;
    all of them if ``k >= len(x)``), looking only at ``cand`` when that is enough to be exact, else at all of
    ``x``."""
    n = x.numel()
    if k >= n or k <= 0 or cand is None:
        return exact_topk(x, k)
    pos = cand.positions()
    if pos.numel() < k:
        return exact_topk(x, k)
    if numpy_ok(x):
        p = pos.numpy()
        a = np.abs(x.detach().numpy()[p])
        if int(np.count_nonzero(a >= cand.threshold)) < k:
            return exact_topk(x, k)  # values at candidates shrank below the threshold: the set may miss some
        return torch.from_numpy(p[_top_mask(a, k)])
    a = _magnitudes(x[pos])
    if int(torch.count_nonzero(a >= cand.threshold)) < k:
        return exact_topk(x, k)
    return pos[_top_mask_torch(a, k)]


def topk_magnitude(x: torch.Tensor, k: int, *, addend: torch.Tensor | None = None,
                   scratch: Scratch | None = None) -> torch.Tensor:
    """Exact top-``k`` positions by magnitude of the flat tensor ``x`` (ascending, int64), by the threshold
    method (one pass) when it applies, else by a full selection. ``addend`` is added into ``x`` first, in
    place, fused with the pass."""
    return select_topk(x, k, Candidates.take(x, k, addend=addend, scratch=scratch))
