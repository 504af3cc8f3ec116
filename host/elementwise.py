"""The collectives' element-wise work (reduce, copy, divide) on the calling thread, outside PyTorch's OpenMP pool.

Why not torch's own ops: a CPU kernel of torch splits any tensor over 32768 elements across its intra-op OpenMP
threads; the region ends only when every pool thread has done its part, and the pool's threads spin after it
(libgomp's default wait policy). A collective runs such ops on every step, from whatever thread runs it, while the
model's kernels use the same pool. Once, on an idle machine, perf put 76% of a rank's CPU in libgomp's spin loop
during a back-to-back all-reduce loop (9.4 ms per 1 MiB call against 3.1 ms with ``OMP_WAIT_POLICY=passive``);
that was not reproduced later, and on a machine shared with other work a 1 MiB ``torch.add`` averaged 711 us
(the pool's waits) where this module's sum took 71 us, while on a quiet one torch's two threads are the faster
(docs/decisions.md has the figures). Changing the user's OpenMP settings is not ours to do, so the collectives do
their element-wise work here, on the calling thread:

* numpy ufuncs on zero-copy views of the tensors: one thread, the GIL released for large arrays, and the same
  element-wise IEEE arithmetic as torch's kernels (float16 widened to float32 and rounded back to nearest even);
* bf16, which numpy lacks, in ``host/_elementwise.c`` (float32 arithmetic, round to nearest even, as
  ``c10::BFloat16`` element by element, so as gloo's bf16 reduction);
* torch's op where neither applies (a non-contiguous bf16 view, or a build without the C extension), and for
  tensors small enough that torch runs them on the calling thread anyway (:data:`SERIAL_BELOW`).

The price: one thread instead of the pool's two on a large tensor on a quiet machine (a 16 MiB sum 1.23 against
0.94 ms here); what it buys is no spinning pool and no wait for a preempted pool thread (``bench/elementwise.py``,
results/elementwise.json).

``tests/host/test_elementwise.py`` holds every function bit-for-bit equal to the torch op it replaces, on every
dtype the transport carries, with NaN, infinities, signed zeros and integer overflow.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch

try:  # built by setup.py (make setup); without it bf16 falls back to torch's kernels
    from host import _elementwise as _native
except ImportError:  # pragma: no cover - a broken install
    _native = None

__all__ = ["REDUCTIONS", "SERIAL_BELOW", "as_array", "combine_into", "copy_into", "divide_"]

#: Below this many elements torch's CPU kernels run on the calling thread (``at::internal::GRAIN_SIZE``), and with
#: less overhead per call than three numpy views (3.5 against 9 us for a 64 KiB sum, bench/elementwise.py): such
#: tensors take torch's op. From it up, torch would split the work over its pool, and the functions here keep it
#: on the calling thread.
SERIAL_BELOW = 32768

#: The reductions :func:`combine_into` knows, by name: numpy's ufunc and the C kernel's op code.
REDUCTIONS: dict[str, tuple[Callable, int]] = {
    "sum": (np.add, 0), "product": (np.multiply, 1), "min": (np.minimum, 2), "max": (np.maximum, 3)}

_TORCH_OPS = {"sum": torch.add, "product": torch.mul, "min": torch.minimum, "max": torch.maximum}


def as_array(t: torch.Tensor) -> np.ndarray:
    """A numpy view sharing ``t``'s memory (bf16 as its raw uint16 words; strides kept)."""
    if t.requires_grad:
        t = t.detach()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(np.uint16)
    return t.numpy()


def _bf16_native(*ts: torch.Tensor) -> bool:
    return _native is not None and all(t.is_contiguous() for t in ts)


def combine_into(kind: str, out: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    """``out = a <kind> b`` element by element (``kind`` a key of :data:`REDUCTIONS`); ``out`` may be ``a`` or
    ``b``. All three have the same dtype and number of elements."""
    ufunc, code = REDUCTIONS[kind]
    if out.numel() < SERIAL_BELOW:
        _TORCH_OPS[kind](a, b, out=out)
        return
    if out.dtype == torch.bfloat16:
        if _bf16_native(out, a, b):
            _native.bf16_combine(code, as_array(out), as_array(a), as_array(b))
        else:
            _TORCH_OPS[kind](a, b, out=out)
        return
    with np.errstate(all="ignore"):  # overflow and NaN are results, as in torch, not warnings
        ufunc(as_array(a), as_array(b), out=as_array(out))


def copy_into(dst: torch.Tensor, src: torch.Tensor) -> None:
    """``dst.copy_(src)`` for tensors of one dtype and shape, as one memory copy on this thread."""
    if dst.dtype != src.dtype or dst.numel() < SERIAL_BELOW:
        dst.copy_(src)  # (a conversion is not on the collectives' path)
        return
    np.copyto(as_array(dst), as_array(src), casting="no")


def divide_(t: torch.Tensor, d: int) -> None:
    """``t.div_(d)`` in place for a floating-point ``t`` (an AVG's division by the group size)."""
    if not t.is_floating_point():
        raise TypeError(f"dividing needs a floating-point tensor, got {t.dtype}")
    if t.numel() < SERIAL_BELOW:
        t.div_(d)
        return
    if t.dtype == torch.bfloat16:
        if _bf16_native(t):
            _native.bf16_divide(as_array(t), float(d))
        else:
            t.div_(d)
        return
    arr = as_array(t)
    with np.errstate(all="ignore"):  # overflow and NaN are results, as in torch, not warnings
        np.true_divide(arr, arr.dtype.type(d), out=arr)
