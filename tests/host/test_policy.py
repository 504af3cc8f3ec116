"""The priority policy alone: layer priorities, magnitude classes, eligibility within the loss bound."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from host.policy import (DATA_PRIORITY_MAX, DATA_PRIORITY_MIN, LayerMagnitudePolicy, as_float_view,
                         eligible_smallest, magnitude_classes, octile_edges, packet_mean_abs)


def test_layer_priority_front_layers_higher():
    pol = LayerMagnitudePolicy(num_layers=12)
    prios = [pol.priority(layer) for layer in range(12)]
    assert prios[0] == DATA_PRIORITY_MAX and prios[-1] == DATA_PRIORITY_MIN
    assert all(a >= b for a, b in zip(prios, prios[1:]))
    unknown = LayerMagnitudePolicy()
    assert [unknown.priority(i) for i in range(8)] == [6, 5, 4, 3, 2, 1, 1, 1]
    with pytest.raises(ValueError):
        unknown.priority(-1)


def test_packet_means_and_classes():
    vals = np.concatenate([np.full(10, 0.1), np.full(10, -5.0), np.full(5, 2.0)]).astype(np.float32)
    means = packet_mean_abs(vals, np.array([10, 10, 5]))
    np.testing.assert_allclose(means, [0.1, 5.0, 2.0], rtol=1e-6)
    cls = magnitude_classes(np.arange(16, dtype=float))
    assert cls.min() == 0 and cls.max() == 7 and np.all(np.diff(cls.astype(int)) >= 0)
    # NaN/inf make a packet "large": protected, top class
    means = packet_mean_abs(np.array([np.nan, 1, 0, 0], np.float32), np.array([2, 2]))
    assert np.isinf(means[0]) and means[1] == 0


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_packet_means_in_the_transport_layout_match_float64(dtype):
    """Equal packets and a shorter last one (the fast, blockwise path): means within 1e-6 of a float64 reference;
    a packet whose float32 sum overflows counts as +inf (protected), without a warning."""
    rng = np.random.default_rng(0)
    c0, n = 700, 2000
    vals = (rng.standard_normal(c0 * (n - 1) + 123) * rng.choice([1e-3, 1.0, 30.0], c0 * (n - 1) + 123)).astype(dtype)
    counts = np.array([c0] * (n - 1) + [123])
    ref = np.array([np.abs(vals[i * c0: i * c0 + k].astype(np.float64)).mean() for i, k in enumerate(counts)])
    np.testing.assert_allclose(packet_mean_abs(vals, counts), ref, rtol=1e-6)
    big = np.full(3 * c0, 1e36, np.float32)  # a row sum of 7e38 overflows float32
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        means = packet_mean_abs(big, np.array([c0] * 3))
    assert np.isinf(means[:2]).all() and magnitude_classes(means)[:2].tolist() == [7, 7]


def test_eligible_prefix_of_smallest_within_bound():
    means = np.array([5.0, 0.1, 3.0, 0.2, 0.05])
    counts = np.array([10, 10, 10, 10, 10])
    el = eligible_smallest(means, counts, 0.41)  # budget 20 elements -> the two smallest packets
    assert el.tolist() == [False, True, False, False, True]
    assert not eligible_smallest(means, counts, 0.0).any()
    assert not eligible_smallest(means, counts, 0.19).any()  # no packet fits in 9 elements


def test_integer_data_never_eligible():
    pol = LayerMagnitudePolicy()
    out = pol.classify(None, np.array([4, 4]), layer=0, loss_bound=0.0)
    assert not out.eligible.any()
    with pytest.raises(ValueError, match="loss_bound=0"):
        pol.classify(None, np.array([4]), layer=0, loss_bound=0.1)
    with pytest.raises(ValueError):
        pol.classify(np.zeros(4, np.float32), np.array([4]), layer=0, loss_bound=1.0)


def test_bf16_float_view_is_exact():
    torch = pytest.importorskip("torch")
    t = torch.randn(100).to(torch.bfloat16)
    raw = t.view(torch.int16).numpy().view(np.uint16)
    np.testing.assert_array_equal(as_float_view(raw, bf16=True), t.float().numpy())


@settings(max_examples=200, deadline=None)
@given(n=st.integers(0, 3000), chunk=st.integers(1, 400), p=st.floats(0, 0.99), seed=st.integers(0, 2**32 - 1))
def test_eligible_elements_never_exceed_bound(n, chunk, p, seed):
    rng = np.random.default_rng(seed)
    vals = (rng.standard_normal(n) * rng.choice([1e-3, 1, 1e3], n)).astype(np.float32)
    npk = max(1, -(-n // chunk))
    counts = np.minimum(chunk, n - np.arange(npk) * chunk).clip(min=0)
    cls = LayerMagnitudePolicy().classify(vals, counts, layer=3, loss_bound=p)
    assert counts[cls.eligible].sum() <= np.floor(p * n + 1e-9)
    if cls.eligible.any() and (~cls.eligible).any():
        means = packet_mean_abs(vals, counts)
        # every eligible packet is no larger than every protected (non-empty) one
        prot = ~cls.eligible & (counts > 0)
        if prot.any():
            assert means[cls.eligible].max() <= means[prot].min()
    assert cls.mag_class.shape == (npk,) and cls.mag_class.max(initial=0) <= 7


@settings(max_examples=200, deadline=None)
@given(vals=st.lists(st.floats(0, 1e30, allow_nan=False), min_size=1, max_size=80))
def test_octile_edges_equal_numpy_quantile(vals):
    a = np.array(vals, np.float64)
    assert np.array_equal(octile_edges(a), np.quantile(a, np.arange(1, 8) / 8.0))


@settings(max_examples=80, deadline=None)
@given(n=st.integers(1, 3000), special=st.sampled_from([None, np.nan, np.inf, -np.inf, 1e38, 0.0]),
       p=st.sampled_from([0.0, 0.01, 0.5, 0.999, 1 - 1e-12]), dtype=st.sampled_from([np.float32, np.float64]),
       seed=st.integers(0, 2**16))
def test_single_packet_classes_equal_the_general_path(n, special, p, dtype, seed):
    """classify() answers a one-packet tensor without the octile and eligibility machinery: the same classes as
    the general functions give, including NaN/inf (class 7) and a loss bound so close to 1 that the packet fits."""
    x = np.random.default_rng(seed).standard_normal(n).astype(dtype)
    if special is not None:
        x[seed % n] = special
    got = _classify_as_the_array_functions(x, np.array([n], np.int64), layer=2, p=p)
    assert got.priority == LayerMagnitudePolicy().priority(2)


def _classify_as_the_array_functions(x, counts, *, layer, p):
    """classify()'s answer, after checking its classes and eligibility equal those of packet_mean_abs,
    magnitude_classes and eligible_smallest bit for bit (dtypes included)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        got = LayerMagnitudePolicy().classify(x, counts, layer=layer, loss_bound=p)
        means = packet_mean_abs(x, counts)
        want_mag, want_elig = magnitude_classes(means), eligible_smallest(means, counts, p)
    assert got.mag_class.dtype == want_mag.dtype and np.array_equal(got.mag_class, want_mag)
    assert got.eligible.dtype == want_elig.dtype and np.array_equal(got.eligible, want_elig)
    return got


@settings(max_examples=300, deadline=None)
@given(npk=st.integers(2, 64), chunk=st.sampled_from([1, 3, 366, 2240, 16377]), tail=st.floats(0.01, 1.0),
       special=st.sampled_from([None, np.nan, np.inf, -np.inf, 3e38, 0.0]), ties=st.booleans(),
       p=st.sampled_from([0.0, 0.01, 0.3, 0.5, 0.999]), dtype=st.sampled_from([np.float32, np.float64, np.float16]),
       seed=st.integers(0, 2**16))
def test_few_packet_classes_equal_the_array_functions(npk, chunk, tail, special, ties, p, dtype, seed):
    """Up to SMALL_CLASSIFY packets classify() works on Python lists: bit for bit the classes and eligibility of
    the array functions (packet_mean_abs, magnitude_classes, eligible_smallest), with non-finite values, equal
    means (ties), a short last packet and dtypes the C kernel does not take (float16)."""
    import host.policy as policy

    assert npk <= policy.SMALL_CLASSIFY
    rng = np.random.default_rng(seed)
    size = chunk * (npk - 1) + max(1, int(chunk * tail))
    x = (rng.standard_normal(size) * rng.choice([1e-3, 1.0, 1e3], size)).astype(dtype)
    if ties:
        x = np.abs(x[:1]).repeat(size) if seed % 2 else np.ones(size, dtype)
    if special is not None:
        x[seed % size] = special
    with pytest.MonkeyPatch.context() as mp:  # (the list path itself: float32/float64 would take the C verdict)
        mp.setattr(policy, "_classify_kernel", lambda: None)
        _classify_as_the_array_functions(x, np.minimum(chunk, size - np.arange(npk, dtype=np.int64) * chunk),
                                         layer=1, p=p)


def _layout_values(rng: np.random.Generator, dtype) -> tuple[np.ndarray, np.ndarray]:
    """Values of ``dtype`` and their packet counts in the transport's layout (packets of ``c0`` elements, a shorter
    last one) for the C kernels' twin tests: a few packets or thousands, one-element packets, and one of four kinds
    of data: spread magnitudes; few distinct values (ties among the means, repeated order statistics); a constant
    (every mean ties: an eligible prefix is the first positions); 30% NaN/inf (non-finite packets, sometimes all)."""
    c0 = int(rng.choice([1, 3, 183, 366, 2240]))
    n = int(rng.choice([2, 3, 9, 17, 64, 65, int(rng.integers(2, 3000))]))
    size = c0 * (n - 1) + int(rng.integers(1, c0 + 1))
    kind = rng.integers(0, 4)
    if kind == 0:
        x = rng.standard_normal(size) * rng.choice([1e-6, 1.0, 1e3], size)
    elif kind == 1:
        x = rng.choice([0.0, 0.5, -1.0, 2.0], size)
    elif kind == 2:
        x = np.full(size, float(rng.standard_normal()))
    else:
        x = rng.standard_normal(size)
        x[rng.random(size) < 0.3] = rng.choice([np.nan, np.inf])
    return x.astype(dtype), np.array([c0] * (n - 1) + [size - c0 * (n - 1)])


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), dtype=st.sampled_from([np.float32, np.float64]),
       p=st.sampled_from([0.0, 1e-4, 0.01, 0.02, 0.3, 0.5, 0.999]))
def test_the_c_verdict_equals_the_python_paths_bit_for_bit(seed, dtype, p):
    """``_txlane.classify_packets`` (behind classify() for float32/float64 in the transport's layout) against the
    array functions (packet_mean_abs, magnitude_classes, eligible_smallest) and, up to SMALL_CLASSIFY packets, the
    list path: the same classes and eligible packets, bit for bit, with ties among the means (broken by position),
    non-finite packets, a short last packet, one-element packets, a few packets or thousands."""
    import host.policy as policy
    import host.transport  # noqa: F401  (hands the policy its C kernels)

    assert policy._classify_kernel() is not None  # the build is there: this compares real paths
    x, counts = _layout_values(np.random.default_rng(seed), dtype)
    got = _classify_as_the_array_functions(x, counts, layer=2, p=p)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(policy, "_classify_kernel", lambda: None)
        ref = LayerMagnitudePolicy().classify(x, counts, layer=2, loss_bound=p)
    assert np.array_equal(got.mag_class, ref.mag_class) and np.array_equal(got.eligible, ref.eligible)
    assert got.priority == ref.priority


def test_the_c_verdict_rejects_bad_arguments():
    from host.transport import _txlane

    c, e = np.zeros(4, np.uint8), np.zeros(4, bool)
    with pytest.raises(TypeError, match="float32 or float64"):
        _txlane.classify_packets(np.zeros(8, np.int32), 2, 0.1, c, e)
    with pytest.raises(TypeError, match="eligible bool"):
        _txlane.classify_packets(np.ones(8, np.float32), 2, 0.1, c, np.zeros(4, np.uint8))
    with pytest.raises(ValueError, match="5 packets need them"):
        _txlane.classify_packets(np.ones(9, np.float32), 2, 0.1, c, e)
    with pytest.raises(ValueError, match="no values"):
        _txlane.classify_packets(np.ones(0, np.float32), 2, 0.1, c[:0], e[:0])
    with pytest.raises(ValueError, match="chunk must be > 0"):
        _txlane.classify_packets(np.ones(8, np.float32), 0, 0.1, c, e)
    with pytest.raises(ValueError, match=r"loss_bound must be in \[0, 1\)"):
        _txlane.classify_packets(np.ones(8, np.float32), 2, 1.0, c, e)
    # means 1.5, 3.5, 5.5, 7.5 (classes as mag_classes gives them); a budget of floor(0.5 * 8) = 4 elements: the
    # two smallest packets
    assert _txlane.classify_packets(np.array([1, -2, 3, -4, 5, 6, 7, 8], np.float32), 2, 0.5, c, e) == 2
    assert c.tolist() == [0, 2, 5, 7] and e.tolist() == [True, True, False, False]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("seed", range(4))
def test_the_c_kernel_gives_the_numpy_paths_means(dtype, seed, monkeypatch):
    """packet_mean_abs through ``_txlane.abs_sums`` (float32/float64 in the transport's layout) against its numpy
    path: the same means within 1e-6, the same packets +inf (NaN, inf, a float32 row sum past its range), the
    same magnitude classes."""
    import host.policy as policy
    import host.transport  # noqa: F401  (hands the policy its C kernel)

    assert policy._abs_sums_kernel() is not None  # the build is there: this compares two real paths
    rng = np.random.default_rng(seed)
    c0 = int(rng.choice([1, 7, 366, 2240, 16377]))
    n = int(rng.integers(2, 400))
    size = c0 * (n - 1) + int(rng.integers(1, c0 + 1))
    vals = (rng.standard_normal(size) * rng.choice([1e-4, 1.0, 50.0], size)).astype(dtype)
    for _ in range(3):  # non-finite values, and (float32) a packet whose sum overflows
        vals[rng.integers(size)] = rng.choice([np.nan, np.inf, -np.inf])
    if dtype == np.float32 and n > 3:
        vals[c0: 2 * c0] = 3e38
    counts = np.array([c0] * (n - 1) + [size - c0 * (n - 1)])
    native = packet_mean_abs(vals, counts)
    monkeypatch.setattr(policy, "_abs_sums_kernel", lambda: None)
    python = packet_mean_abs(vals, counts)
    assert np.array_equal(np.isinf(native), np.isinf(python))
    fin = np.isfinite(native)
    np.testing.assert_allclose(native[fin], python[fin], rtol=1e-6)
    if dtype == np.float32 and n > 3 and c0 > 1:
        assert np.isinf(native[1])
    differ = magnitude_classes(native) != magnitude_classes(python)
    edges = octile_edges(native[fin])  # a class may differ only for a mean within rounding of an octile edge
    near = np.isclose(native[:, None], edges[None, :], rtol=1e-6, atol=0).any(axis=1)
    assert not (differ & ~near).any()


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), dtype=st.sampled_from([np.float32, np.float64]))
def test_the_c_classes_equal_the_python_functions_bit_for_bit(seed, dtype):
    """``_txlane.mag_classes`` (behind mean_abs_and_classes) against packet_mean_abs with the abs_sums kernel and
    magnitude_classes in numpy: the same means and classes, bit for bit, on tensors with ties, repeated values,
    non-finite packets, a few packets or thousands, and an all-non-finite one."""
    import host.policy as policy
    import host.transport  # noqa: F401  (hands the policy its C kernels)

    assert policy._mag_classes_kernel() is not None  # the build is there: this compares two real paths
    vals, counts = _layout_values(np.random.default_rng(seed), dtype)
    means, classes = policy.mean_abs_and_classes(vals, counts)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(policy, "_mag_classes_kernel", lambda: None)
        ref_means, ref_classes = policy.mean_abs_and_classes(vals, counts)
    assert ref_means.tobytes() == means.tobytes()
    assert np.array_equal(ref_classes, classes)
    assert classes.dtype == np.uint8 and ref_classes.dtype == np.uint8


def test_the_c_classes_reject_bad_arguments():
    from host.transport import _txlane

    m, c = np.zeros(4), np.zeros(4, np.uint8)
    with pytest.raises(TypeError, match="float32 or float64"):
        _txlane.mag_classes(np.zeros(8, np.int32), 2, m, c)
    with pytest.raises(TypeError, match="classes uint8"):
        _txlane.mag_classes(np.ones(8, np.float32), 2, m, np.zeros(4, np.int8))
    with pytest.raises(ValueError, match="5 packets need them"):
        _txlane.mag_classes(np.ones(9, np.float32), 2, m, c)
    with pytest.raises(ValueError, match="no values"):
        _txlane.mag_classes(np.ones(0, np.float32), 2, m[:0], c[:0])
    with pytest.raises(ValueError, match="chunk must be > 0"):
        _txlane.mag_classes(np.ones(8, np.float32), 0, m, c)
    assert _txlane.mag_classes(np.array([1, -2, 3, -4, 5, 6, 7, 8], np.float32), 2, m, c) == 4
    assert m.tolist() == [1.5, 3.5, 5.5, 7.5] and c.tolist() == [0, 2, 5, 7]  # (edges 2.25, 3, 3.875, 4.5, ...)


def test_the_c_kernel_rejects_bad_arguments():
    from host.transport import _txlane

    out = np.zeros(4)
    with pytest.raises(TypeError, match="float32 or float64"):
        _txlane.abs_sums(np.zeros(8, np.int32), 2, out)
    with pytest.raises(TypeError, match="out float64"):
        _txlane.abs_sums(np.zeros(8, np.float32), 2, np.zeros(4, np.float32))
    with pytest.raises(ValueError, match="out has 4 entries, 5 packets"):
        _txlane.abs_sums(np.zeros(9, np.float32), 2, out)
    with pytest.raises(ValueError, match="chunk must be > 0"):
        _txlane.abs_sums(np.zeros(8, np.float32), 0, out)
    assert _txlane.abs_sums(np.array([1, -2, 3, -4, 5], np.float32), 2, out) == 3
    assert out[:3].tolist() == [3.0, 7.0, 5.0]


@pytest.mark.parametrize("npk,chunk", [(1, 100), (9, 100), (200, 64)])
def test_eligibility_off_keeps_priority_and_classes_and_marks_nothing(npk, chunk):
    """LayerMagnitudePolicy(eligible=False), the backend's no-eligible policy: the same priority and magnitude
    classes as the default on every classification path (one packet, few, many), no packet eligible whatever
    the bound."""
    from host.backend import POLICIES

    rng = np.random.default_rng(npk)
    values = rng.standard_normal(npk * chunk).astype(np.float32)
    counts = np.full(npk, chunk)
    on = POLICIES["layer-magnitude"]().classify(values, counts, layer=2, loss_bound=0.5)
    off = POLICIES["no-eligible"]().classify(values, counts, layer=2, loss_bound=0.5)
    assert on.eligible.any() == (npk > 1)  # a lone packet fits no bound under 1
    assert off.priority == on.priority and np.array_equal(off.mag_class, on.mag_class)
    assert not off.eligible.any() and off.eligible.shape == on.eligible.shape
