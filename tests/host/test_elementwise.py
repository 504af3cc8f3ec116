"""host/elementwise.py against the torch ops it replaces: bit for bit, every dtype the transport carries."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from host import elementwise
from host.elementwise import as_array, combine_into, copy_into, divide_

FLOATS = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
INTS = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]
N = 70_001  # above torch's 32768-element grain (its parallel kernels) and not a multiple of any vector width
assert N >= elementwise.SERIAL_BELOW


def _values(dtype: torch.dtype, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, (N,), generator=g).bool()
    if not dtype.is_floating_point:
        info = torch.iinfo(dtype)
        return torch.randint(info.min, info.max, (N,), generator=g, dtype=torch.int64).to(dtype)
    x = torch.randn(N, generator=g, dtype=torch.float64) * torch.exp(torch.randn(N, generator=g, dtype=torch.float64) * 4)
    x = x.to(dtype)
    specials = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1e-40, -1e-45, 65504.0, 3e38])
    x[seed * 7 % 50:seed * 7 % 50 + len(specials)] = specials.to(dtype)
    x[1000:1100] = x[2000:2100]  # equal operands (min/max ties, x - x)
    return x


def _bits(t: torch.Tensor) -> np.ndarray:
    """Raw words, with every NaN made one pattern (the C kernel writes c10's scalar NaN, torch's vector kernels
    another; both are NaN, and NaN-ness itself is compared)."""
    a = as_array(t).copy()
    if t.is_floating_point():
        nan = torch.isnan(t).numpy()
        a = a.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.itemsize])
        a[nan] = 0
        return np.concatenate([a.view(np.uint8), nan.view(np.uint8)])
    return a.view(np.uint8)


@pytest.mark.parametrize("kind", sorted(elementwise.REDUCTIONS))
@pytest.mark.parametrize("dtype", FLOATS + INTS + [torch.bool], ids=str)
def test_combine_is_the_torch_op_bit_for_bit(kind, dtype):
    a, b = _values(dtype, 1), _values(dtype, 2)
    want = {"sum": torch.add, "product": torch.mul, "min": torch.minimum, "max": torch.maximum}[kind](a, b)
    out = torch.empty_like(a)
    combine_into(kind, out, a, b)
    assert np.array_equal(_bits(out), _bits(want))
    inplace = a.clone()  # out is a (the ring's in-place reduce), and out is b
    combine_into(kind, inplace, inplace, b)
    assert np.array_equal(_bits(inplace), _bits(want))
    other = b.clone()
    combine_into(kind, other, a, other)
    assert np.array_equal(_bits(other), _bits(want))


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("d", [2, 3, 4, 7])
def test_divide_is_torch_div_bit_for_bit(dtype, d):
    x = _values(dtype, 3)
    want = x.clone().div_(d)
    divide_(x, d)
    assert np.array_equal(_bits(x), _bits(want))


@pytest.mark.parametrize("dtype", INTS + [torch.bool], ids=str)
def test_divide_refuses_integers(dtype):
    with pytest.raises(TypeError, match="floating-point"):
        divide_(torch.zeros(4, dtype=dtype), 2)


@pytest.mark.parametrize("dtype", FLOATS + INTS + [torch.bool], ids=str)
def test_copy_into_copies_views(dtype):
    src = _values(dtype, 4)
    dst = torch.zeros(2 * N, dtype=dtype)
    copy_into(dst[N // 2:N // 2 + N], src)
    assert np.array_equal(_bits(dst[N // 2:N // 2 + N]), _bits(src))
    assert not as_array(dst[:N // 2]).any() and not as_array(dst[N // 2 + N:]).any()


def test_bf16_views_that_are_not_contiguous_take_torchs_kernel():
    a, b = _values(torch.bfloat16, 5), _values(torch.bfloat16, 6)
    out = torch.empty(2 * N, dtype=torch.bfloat16)[::2]
    combine_into("sum", out, a, b)
    assert np.array_equal(_bits(out.contiguous()), _bits(a + b))


def test_native_kernel_rejects_mismatched_buffers():
    native = elementwise._native
    assert native is not None, "host/_elementwise.c is not built (make setup builds it)"
    a = np.zeros(8, np.uint16)
    with pytest.raises(ValueError, match="same whole number of bf16 words"):
        native.bf16_combine(0, a, a, np.zeros(7, np.uint16))
    with pytest.raises(ValueError, match="op must be 0..3"):
        native.bf16_combine(4, a, a, a)
    with pytest.raises(ValueError, match="not whole bf16 words"):
        native.bf16_divide(np.zeros(3, np.uint8), 2.0)


def test_overflow_and_nan_are_results_not_warnings():
    a = torch.tensor([3e38, float("inf"), 1.0], dtype=torch.float32)
    out = torch.empty_like(a)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        combine_into("product", out, a, a)
        combine_into("sum", out, a, -a)
        divide_(out, 2)
    assert torch.isnan(out[1]) and out[2] == 0


def test_gradients_needing_grad_are_viewed_not_refused():
    t = torch.ones(4, requires_grad=True)
    assert as_array(t).tolist() == [1.0] * 4
