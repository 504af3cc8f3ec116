"""Zero-copy views of torch tensors and numpy arrays as wire payloads, and the DType they travel as.

The transport never copies a tensor to send it: it sends slices of a flat byte view of the caller's memory. On the
receiving side payloads are written straight into the caller's ``out`` tensor/array. bf16 has no numpy dtype, so a
bf16 tensor is viewed as its raw 16-bit words (:class:`host.wire.DType` says BFLOAT16 on the wire).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from host.wire import DType

try:  # torch is a hard dependency of the project, but keep this module importable without it
    import torch
except ImportError:  # pragma: no cover
    torch = None  # type: ignore[assignment]

__all__ = ["TensorView", "view_tensor", "allocate", "dtype_code"]

_NP_TO_DTYPE = {np.dtype("uint8"): DType.UINT8, np.dtype("int8"): DType.INT8, np.dtype("int16"): DType.INT16,
                np.dtype("int32"): DType.INT32, np.dtype("int64"): DType.INT64, np.dtype("float16"): DType.FLOAT16,
                np.dtype("float32"): DType.FLOAT32, np.dtype("float64"): DType.FLOAT64, np.dtype("bool"): DType.BOOL}

if torch is not None:
    _TORCH_TO_DTYPE = {torch.uint8: DType.UINT8, torch.int8: DType.INT8, torch.int16: DType.INT16,
                       torch.int32: DType.INT32, torch.int64: DType.INT64, torch.float16: DType.FLOAT16,
                       torch.bfloat16: DType.BFLOAT16, torch.float32: DType.FLOAT32, torch.float64: DType.FLOAT64,
                       torch.bool: DType.BOOL}
    _DTYPE_TO_TORCH = {v: k for k, v in _TORCH_TO_DTYPE.items()}
else:  # pragma: no cover
    _TORCH_TO_DTYPE, _DTYPE_TO_TORCH = {}, {}


@dataclass(frozen=True)
class TensorView:
    """A tensor seen by the transport: ``array`` is a flat numpy view sharing the caller's memory (bf16 as uint16),
    ``raw`` the same memory as bytes (uint8), ``dtype`` the wire DType, ``obj`` the caller's object."""

    obj: Any
    array: np.ndarray
    raw: np.ndarray
    dtype: DType

    @property
    def nelems(self) -> int:
        return int(self.array.size)

    @property
    def nbytes(self) -> int:
        return int(self.raw.size)


def dtype_code(dt: Any) -> DType:
    """The wire DType of a numpy dtype or torch dtype (TypeError for anything else)."""
    if torch is not None and isinstance(dt, torch.dtype):
        if dt not in _TORCH_TO_DTYPE:
            raise TypeError(f"dtype {dt} cannot be sent by the DLCP transport")
        return _TORCH_TO_DTYPE[dt]
    nd = np.dtype(dt)
    code = _NP_TO_DTYPE.get(nd) if nd.byteorder != ">" else None
    if code is None:
        raise TypeError(f"dtype {nd} cannot be sent by the DLCP transport (little-endian numeric types only)")
    return code


def view_tensor(obj: Any, *, writable: bool = False) -> TensorView:
    """Flat zero-copy view of a CPU torch tensor or numpy array. Non-contiguous inputs are rejected for writing
    (the data would land in a copy) and copied once for sending."""
    if torch is not None and isinstance(obj, torch.Tensor):
        # (detach() and .device each cost 30-50 us on a cold cache, the state a collective's call starts in)
        t = obj.detach() if obj.requires_grad else obj
        if not t.is_cpu:
            raise TypeError(f"the DLCP transport sends CPU tensors; got one on {t.device}")
        code = dtype_code(t.dtype)
        if not t.is_contiguous():
            if writable:
                raise ValueError("out tensor must be contiguous")
            t = t.contiguous()
        if code == DType.BFLOAT16:
            arr = t.view(torch.int16).numpy().view(np.uint16)
        else:
            arr = t.numpy()
    elif isinstance(obj, np.ndarray):
        code = dtype_code(obj.dtype)
        arr = obj
        if not arr.flags.c_contiguous:
            if writable:
                raise ValueError("out array must be C-contiguous")
            arr = np.ascontiguousarray(arr)
        if arr.dtype.byteorder == ">":
            raise TypeError("big-endian arrays are not supported")
    else:
        raise TypeError(f"expected a torch.Tensor or numpy.ndarray, got {type(obj).__name__}")
    if writable and not arr.flags.writeable:
        raise ValueError("out array is read-only")
    flat = arr.reshape(-1)
    raw = flat.view(np.uint8) if flat.size else np.zeros(0, np.uint8)
    return TensorView(obj, flat, raw, code)


def allocate(shape: Any, dtype: Any) -> Any:
    """A zero-filled output for ``recv(out=(shape, dtype))``: a torch tensor for a torch dtype, else numpy."""
    if torch is not None and isinstance(dtype, torch.dtype):
        dtype_code(dtype)
        return torch.zeros(shape, dtype=dtype)
    dtype_code(dtype)
    return np.zeros(shape, dtype=np.dtype(dtype))
