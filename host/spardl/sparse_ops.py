"""Sparse reads and writes of a dense buffer at a few thousand positions: gather, put, fill, add.

Every step of a sparse all-reduce does dozens of these on the gradient-sized live buffer (take the selected
values, zero them, add a received piece, record old values for the residual, write the result). On one
intra-op thread torch's advanced indexing costs 50-200 us per call for ~10 k positions, numpy's fancy indexing
on a view of the same memory 15-60 us, so the helpers here use numpy views (no copies) for float16/32/64 host
tensors and torch for other dtypes (bfloat16) and for device (CUDA) tensors. Results are the same bits either way:
IEEE adds of the same two operands.

Positions are int64 tensors of positions within ``x`` (a flat tensor), on ``x``'s device, and values are on it too.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["numpy_ok", "np_view", "gather", "put", "fill", "add"]

_NUMPY = {torch.float32, torch.float64, torch.float16}


def numpy_ok(x: torch.Tensor) -> bool:
    """Whether numpy can work on ``x``'s memory in place: a host tensor of a dtype numpy has (not bfloat16)."""
    return x.dtype in _NUMPY and x.device.type == "cpu"


def np_view(x: torch.Tensor) -> np.ndarray | None:
    """A numpy array sharing ``x``'s memory, or None if numpy cannot hold it (its dtype, or device memory)."""
    if not numpy_ok(x):
        return None
    return x.detach().numpy()


def gather(x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """``x[pos]`` (a new tensor)."""
    xn = np_view(x)
    if xn is None:
        return x[pos]
    return torch.from_numpy(xn[pos.numpy()])


def put(x: torch.Tensor, pos: torch.Tensor, vals: torch.Tensor) -> None:
    """``x[pos] = vals``."""
    xn = np_view(x)
    if xn is None or vals.dtype != x.dtype:
        x[pos] = vals
    else:
        xn[pos.numpy()] = vals.detach().numpy()


def fill(x: torch.Tensor, pos: torch.Tensor, value: float) -> None:
    """``x[pos] = value``."""
    xn = np_view(x)
    if xn is None:
        x[pos] = value
    else:
        xn[pos.numpy()] = value


def add(x: torch.Tensor, pos: torch.Tensor, vals: torch.Tensor) -> torch.Tensor:
    """``x.index_add_(0, pos, vals)``; returns ``x[pos]`` from before. Repeated positions add up, in order on the
    host; on CUDA ``index_add_`` adds them atomically in no set order (the float sum may round differently), so
    callers that need the same bits everywhere pass unique positions (SparDL's are a segment's, ascending)."""
    xn = np_view(x)
    if xn is None or vals.dtype != x.dtype:
        old = x[pos]
        x.index_add_(0, pos, vals)
        return old
    p, v = pos.numpy(), vals.detach().numpy()
    old = xn[p]
    if p.size < 2 or bool(np.all(p[1:] > p[:-1])):  # strictly ascending, so unique: one vectorised add
        xn[p] = old + v
    else:
        np.add.at(xn, p, v)
    return torch.from_numpy(old)
