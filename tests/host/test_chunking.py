"""Chunking, header batches, the fast header decode and zero-copy tensor views."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from host import wire
from host.policy import LayerMagnitudePolicy
from host.transport.chunking import chunk_elems, payload_capacity, plan_packets, tos_byte
from host.transport import control
from host.transport.control import HDR, decode_words, pack_control_header
from host.transport.tensors import allocate, dtype_code, view_tensor
from host.wire import DType, Flag


@pytest.mark.parametrize("mtu,itemsize,expect", [(1500, 4, 356), (1500, 2, 712), (1500, 1, 1424),
                                                 (9000, 4, 2231), (9000, 8, 1115), (65536, 1, 65459)])
def test_chunk_sizes_fit_mtu(mtu, itemsize, expect):
    assert chunk_elems(mtu, itemsize) == expect
    assert expect * itemsize + wire.HEADER_LEN + 28 <= mtu
    assert (expect + 1) * itemsize > payload_capacity(mtu) or expect == 0xFFFF  # nothing wasted
    assert payload_capacity(mtu) + wire.HEADER_LEN <= 65507  # a UDP datagram, even on loopback
    with pytest.raises(ValueError):
        payload_capacity(60)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 20000), mtu=st.sampled_from([576, 1500, 9000]),
       dt=st.sampled_from([DType.FLOAT32, DType.FLOAT16, DType.BFLOAT16, DType.INT64, DType.UINT8]),
       p=st.sampled_from([0.0, 0.01, 0.1, 0.5]))
def test_plan_covers_tensor_eligible_first(n, mtu, dt, p):
    rng = np.random.default_rng(n)
    vals = rng.standard_normal(n).astype(np.float32)
    isz = dt.itemsize
    chunk = chunk_elems(mtu, isz)
    npk = max(1, -(-n // chunk))
    counts = np.minimum(chunk, n - np.arange(npk) * chunk).clip(min=0)
    is_float = dt in (DType.FLOAT32, DType.FLOAT16, DType.BFLOAT16)
    cls = LayerMagnitudePolicy().classify(vals if is_float else None, counts, layer=1,
                                          loss_bound=p if is_float else 0.0)
    plan = plan_packets(nelems=n, dtype=dt, mtu=mtu, classes=cls, rank=3, job_id=9, transfer_id=5, nonce=7)
    h = wire.unpack_batch(plan.headers.view(np.uint8))
    assert plan.total == npk and h["seq"].tolist() == list(range(npk))
    # payload ranges tile [0, n*isz) exactly
    order = np.argsort(plan.offsets)
    ends = plan.offsets[order] + plan.lengths[order]
    assert plan.offsets[order][0] == 0 and ends[-1] == n * isz
    assert np.all(plan.offsets[order][1:] == ends[:-1])
    assert np.all(plan.lengths + wire.HEADER_LEN + 28 <= mtu)
    # eligible seqs first, then protected, as every header's eligible count says; DE flag and TOS agree; LAST on
    # the last seq only, which is protected
    el = (h["flags"] & Flag.DROP_ELIGIBLE) != 0
    assert np.array_equal(el, plan.eligible) and np.all(np.diff(el.astype(int)) <= 0)
    assert np.all(h["eligible"] == int(el.sum())) and not el[-1]
    assert ((h["flags"] & Flag.LAST) != 0).tolist() == [False] * (npk - 1) + [True]
    assert np.all((plan.tos & 3) == np.where(el, wire.ECN_NOT_ECT, wire.ECN_ECT0))
    assert np.all(plan.tos >> 2 == wire.dscp_for_priority(int(h["priority"][0])))
    assert (plan.lengths[el].sum() // isz) <= np.floor(p * n + 1e-9)
    # every header field: the transfer's constants, and each packet's own offset, count and magnitude class
    order_pos = plan.offsets // (chunk * isz)
    assert np.array_equal(h["mag_class"], np.asarray(cls.mag_class)[order_pos])
    assert np.array_equal(h["offset"], plan.offsets) and np.array_equal(h["count"].astype(np.int64) * isz,
                                                                         plan.lengths)
    for name, want in (("total", npk), ("rank", 3), ("job_id", 9), ("transfer_id", 5), ("nonce", 7),
                       ("layer", 0), ("dtype", int(dt)), ("priority", cls.priority), ("msg_type", 0),
                       ("version", wire.VERSION), ("reserved", 0)):
        assert np.all(h[name] == want), name


@settings(max_examples=150, deadline=None)
@given(prio=st.integers(0, 7), dt=st.sampled_from(list(DType)), layer=st.integers(0, 0xFFFF),
       rank=st.integers(0, 0xFFFF), job=st.integers(0, 2**32 - 1), tids=st.lists(st.integers(0, 2**64 - 1), min_size=1,
                                                                             max_size=4),
       elig=st.integers(0, 2**32 - 1), npk=st.integers(1, 2**32 - 1), nonce=st.integers(0, 0xFFFF))
def test_a_transfer_header_template_is_the_checked_header(prio, dt, layer, rank, job, tids, elig, npk, nonce):
    """The template a plan's headers start from is kept per sender and size without its transfer id and gets the
    id patched in: byte for byte the checked Header.pack of the same fields, for every id in a row; bad fields
    still raise the wire's error naming the field."""
    from host.transport import chunking

    elig %= npk  # a transfer keeps one protected packet
    for tid in tids:
        want = bytearray(wire.Header(msg_type=wire.MsgType.DATA, priority=prio, dtype=dt, layer=layer, rank=rank,
                                     job_id=job, transfer_id=tid & 0xFFFFFFFF, transfer_hi=tid >> 32, eligible=elig,
                                     seq=elig, total=npk, nonce=nonce).pack())
        want[20:24] = bytes(4)  # the seq word is per packet: zero in the template
        assert chunking._template(prio, dt, layer, rank, job, tid, elig, npk, nonce) == bytes(want)
    for bad, field in (((prio, dt, layer, rank, job, 2**64, elig, npk, nonce), "transfer_id"),
                       ((prio, dt, layer, rank, job, 0, elig, 0, nonce), "total"),
                       ((prio, dt, layer, rank, job, 0, npk, npk, nonce), "eligible"),
                       ((prio, dt, 1 << 16, rank, job, 0, elig, npk, nonce), "layer")):
        with pytest.raises(wire.WireError, match=field):
            chunking._template(*bad)


def test_fast_decode_matches_wire_header():
    hd = wire.Header(msg_type=wire.MsgType.DATA, flags=Flag.DROP_ELIGIBLE | Flag.LAST, priority=5, mag_class=3,
                     dtype=DType.BFLOAT16, layer=300, rank=65000, job_id=0xDEADBEEF, transfer_id=123456789,
                     eligible=8, seq=7, total=9, offset=1024, count=11, nonce=0xABCD, transfer_hi=0xC0FFEE,
                     tag=0x1122334455667788)
    w = decode_words(hd.pack())
    assert w[0] == (1 << 4) | 0 and w[1] == int(hd.flags) and w[2] == (5 << 5) | (3 << 2)
    assert w[3:] == (int(DType.BFLOAT16), 300, 65000, 0xDEADBEEF, 123456789, 8, 7, 9, 1024, 11, 0xABCD, 0xC0FFEE,
                     0x1122334455667788)
    assert w[control.W_TAG] == hd.tag and w[control.W_NONCE] == hd.nonce
    buf = bytearray(wire.HEADER_LEN + 4)
    pack_control_header(buf, wire.MsgType.NACK, flags=int(Flag.ECN_ECHO), rank=2, job_id=3,
                        transfer_id=(5 << 32) | 4, seq=6, total=70, count=8, nonce=9)
    buf[wire.HEADER_LEN] = 0xFF
    back, payload = wire.parse_datagram(buf, wire.HEADER_LEN + 1)
    assert (back.msg_type, back.flags, back.priority, back.rank, back.job_id, back.transfer_id, back.seq,
            back.total, back.count, back.nonce, back.transfer_hi) == (wire.MsgType.NACK, Flag.ECN_ECHO, 7, 2, 3, 4, 6,
                                                                      70, 8, 9, 5)
    assert HDR.size == wire.HEADER_LEN == 48 and tos_byte(7, False) == (56 << 2) | 2


def test_views_are_zero_copy_and_dtypes_map():
    t = torch.arange(10, dtype=torch.float32)
    v = view_tensor(t, writable=True)
    v.raw[:4] = 0
    assert t[0].item() == 0 and v.dtype == DType.FLOAT32
    b = torch.randn(6).to(torch.bfloat16)
    vb = view_tensor(b)
    assert vb.dtype == DType.BFLOAT16 and vb.array.dtype == np.uint16 and vb.nbytes == 12
    a = np.zeros((3, 4), np.int16)
    assert view_tensor(a).array.base is not None and view_tensor(a).dtype == DType.INT16
    assert dtype_code(torch.bool) == DType.BOOL and dtype_code(np.float64) == DType.FLOAT64
    with pytest.raises(TypeError):
        dtype_code(np.complex64)
    with pytest.raises(TypeError):
        dtype_code(np.dtype(">f4"))
    with pytest.raises(ValueError):
        view_tensor(torch.zeros(4, 4).t(), writable=True)
    assert view_tensor(torch.zeros(4, 4).t()).nelems == 16  # sending copies a non-contiguous tensor once
    assert isinstance(allocate((2, 3), torch.float16), torch.Tensor) and allocate(5, np.uint8).dtype == np.uint8
    w = torch.ones(5, requires_grad=True)  # a parameter: viewed without autograd, still its memory
    vw = view_tensor(w)
    with torch.no_grad():
        w[1] = 7.0
    assert vw.array[1] == 7.0 and vw.obj is w
    with pytest.raises(TypeError, match="CPU tensors; got one on meta"):
        view_tensor(torch.empty(3, device="meta"))


@settings(max_examples=120, deadline=None)
@given(npk=st.integers(1, 20), short=st.integers(0, 100), dt=st.sampled_from(list(DType)),
       mtu=st.sampled_from([1500, 9000]), with_classes=st.booleans(), data=st.data())
def test_small_plans_from_lists_equal_the_array_builder(npk, short, dt, mtu, with_classes, data):
    """Plans of up to SMALL_PLAN packets are built from Python lists; the array builder must give the same plan,
    field for field and byte for byte, whatever the eligibility and magnitude classes."""
    from host.policy import PacketClasses
    from host.transport import chunking
    isz = dt.itemsize
    chunk = chunk_elems(mtu, isz)
    n = max(0, npk * chunk - min(short, chunk - 1))
    npk = max(1, -(-n // chunk))
    classes = None
    if with_classes:
        elig = np.array(data.draw(st.lists(st.booleans(), min_size=npk, max_size=npk)), bool)
        elig[data.draw(st.integers(0, npk - 1))] = False  # (a policy always keeps one packet protected)
        mag = np.array(data.draw(st.lists(st.integers(0, 7), min_size=npk, max_size=npk)), np.uint8)
        classes = PacketClasses(data.draw(st.integers(0, 7)), mag, elig)
    args = dict(nelems=n, dtype=dt, mtu=mtu, classes=classes, priority=3, layer=2, rank=5, job_id=77,
                transfer_id=123456, nonce=0xBEEF)
    assert chunking._native_plan() is not None  # (the build is there: the C builder is compared too)
    native = plan_packets(**args)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(chunking, "_native_plan", lambda: None)
        got = plan_packets(**args)  # (Python's lists)
        mp.setattr(chunking, "SMALL_PLAN", 0)  # everything through the array builder
        want = plan_packets(**args)
    for plan in (got, native):
        assert plan.total == want.total and plan.chunk == want.chunk and plan.template == want.template
        for f in ("offsets", "lengths", "eligible", "tos"):
            a, b = getattr(plan, f), getattr(want, f)
            assert a.dtype == b.dtype and np.array_equal(a, b), f
        assert plan.headers.dtype == want.headers.dtype
        assert plan.headers.tobytes() == want.headers.tobytes()


@settings(max_examples=80, deadline=None)
@given(n=st.integers(0, 300000), dt=st.sampled_from(list(DType)), mtu=st.sampled_from([576, 1500, 9000]),
       with_classes=st.booleans(), data=st.data())
def test_the_c_plan_builder_equals_the_array_builder(n, dt, mtu, with_classes, data):
    """``_txlane.classified_plan`` (behind plan_packets) against numpy's builder, for plans of any size, byte for
    byte and field for field, with eligible packets anywhere (the wire's seq order puts them first)."""
    from host.policy import PacketClasses
    from host.transport import chunking
    assert chunking._native_plan() is not None
    chunk = chunk_elems(mtu, dt.itemsize)
    npk = max(1, -(-n // chunk))
    classes = None
    if with_classes:
        rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
        elig = rng.random(npk) < data.draw(st.sampled_from([0.0, 0.1, 0.9]))
        elig[rng.integers(npk)] = False
        classes = PacketClasses(data.draw(st.integers(0, 7)), rng.integers(0, 8, npk).astype(np.uint8), elig)
    args = dict(nelems=n, dtype=dt, mtu=mtu, classes=classes, priority=5, layer=1, rank=2, job_id=9,
                transfer_id=(1 << 50) + 3, nonce=0x77)
    got = plan_packets(**args)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(chunking, "_native_plan", lambda: None)
        mp.setattr(chunking, "SMALL_PLAN", 0)
        want = plan_packets(**args)
    assert got.total == want.total == npk and got.template == want.template
    for f in ("offsets", "lengths", "eligible", "tos"):
        a, b = getattr(got, f), getattr(want, f)
        assert a.dtype == b.dtype and np.array_equal(a, b), f
    assert got.headers.tobytes() == want.headers.tobytes()


def test_the_c_plan_builder_refuses_what_is_not_a_plan():
    from host.transport import _txlane
    p = plan_packets(nelems=1000, dtype=DType.FLOAT32, mtu=1500)
    n = p.total
    arrays = lambda k: (np.empty(k, wire.WIRE_DTYPE), np.empty(k, np.int64), np.empty(k, np.int64),  # noqa: E731
                        np.empty(k, bool), np.empty(k, np.uint8))
    with pytest.raises(ValueError, match="do not make a plan"):
        _txlane.classified_plan(*arrays(n + 1), p.template, p.chunk, 4, 1000, None, None, 0, 0)
    with pytest.raises(ValueError, match="do not match"):
        _txlane.classified_plan(*arrays(n), p.template[:40], p.chunk, 4, 1000, None, None, 0, 0)
    with pytest.raises(ValueError, match="magnitude classes are 0..7"):
        _txlane.classified_plan(*arrays(n), p.template, p.chunk, 4, 1000, None, np.full(n, 9, np.uint8), 0, 0)
    with pytest.raises(ValueError, match="all 3 packets drop-eligible"):
        _txlane.classified_plan(*arrays(n), p.template, p.chunk, 4, 1000, np.ones(n, bool), None, 0, 0)
    with pytest.raises(TypeError, match="13 arguments"):
        _txlane.classified_plan(p.headers)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 60000), mtu=st.sampled_from([576, 1500, 9000]),
       dt=st.sampled_from([DType.FLOAT32, DType.FLOAT16, DType.INT64, DType.UINT8]), data=st.data())
def test_headers_written_a_range_at_a_time_equal_the_whole_plan(n, mtu, dt, data):
    """A send classified in slices writes its headers range by range (``plan_in_order`` + ``write_headers``); the
    result must be the plan ``plan_packets`` builds from the same classes, byte for byte, however it is cut."""
    from host.policy import PacketClasses
    from host.transport.chunking import plan_in_order, write_headers
    chunk = chunk_elems(mtu, dt.itemsize)
    npk = max(1, -(-n // chunk))
    mag = np.array(data.draw(st.lists(st.integers(0, 7), min_size=npk, max_size=npk)), np.uint8)
    ids = dict(layer=3, rank=2, job_id=41, transfer_id=99, nonce=0x1234)
    want = plan_packets(nelems=n, dtype=dt, mtu=mtu, classes=PacketClasses(4, mag, np.zeros(npk, bool)), **ids)
    got = plan_in_order(nelems=n, dtype=dt, mtu=mtu, priority=4, **ids)
    cuts = sorted(set(data.draw(st.lists(st.integers(1, npk), max_size=6))) | {npk})
    lo = 0
    for hi in cuts:
        write_headers(got, lo, hi, mag[lo:hi])
        lo = hi
    assert got.headers.tobytes() == want.headers.tobytes()
    for f in ("total", "chunk", "itemsize", "template"):
        assert getattr(got, f) == getattr(want, f), f
    for f in ("offsets", "lengths", "eligible", "tos"):
        assert np.array_equal(getattr(got, f), getattr(want, f)), f
    with pytest.raises(ValueError):
        write_headers(got, 0, npk, mag[:-1] if npk > 1 else np.zeros(2, np.uint8))


@settings(max_examples=80, deadline=None)
@given(n=st.integers(0, 200000), mtu=st.sampled_from([576, 1500, 9000]),
       dt=st.sampled_from([DType.FLOAT32, DType.FLOAT16, DType.INT64, DType.UINT8]), data=st.data())
def test_the_c_header_writer_equals_numpys(n, mtu, dt, data):
    """``_txlane.in_order_headers`` (behind write_headers) against write_headers_numpy: the same bytes for every
    range of every in-order plan, with and without magnitude classes; its layout is the wire format's."""
    from host.transport import _txlane
    from host.transport.chunking import _LAYOUT, _native_headers, plan_in_order, write_headers, write_headers_numpy
    assert _txlane.HEADER_LAYOUT == _LAYOUT and _native_headers() is not None  # two real paths compared
    ids = dict(layer=5, rank=3, job_id=77, transfer_id=(1 << 40) + 9, nonce=0xBEEF)
    a = plan_in_order(nelems=n, dtype=dt, mtu=mtu, priority=2, **ids)
    b = plan_in_order(nelems=n, dtype=dt, mtu=mtu, priority=2, **ids)
    a.headers.view(np.uint8)[:] = b.headers.view(np.uint8)[:] = 0xA5  # (unwritten rows must stay as they were)
    lo = data.draw(st.integers(0, a.total - 1))
    hi = data.draw(st.integers(lo, a.total))
    mag = None if data.draw(st.booleans()) else np.array(
        data.draw(st.lists(st.integers(0, 7), min_size=hi - lo, max_size=hi - lo)), np.uint8)
    write_headers(a, lo, hi, mag)
    write_headers_numpy(b, lo, hi, mag)
    assert a.headers.tobytes() == b.headers.tobytes()


def test_the_c_header_writer_refuses_what_is_not_a_plan():
    from host.transport import _txlane
    from host.transport.chunking import plan_in_order, write_headers
    p = plan_in_order(nelems=1000, dtype=DType.FLOAT32, mtu=1500, priority=2)
    with pytest.raises(ValueError, match="magnitude classes are 0..7"):
        write_headers(p, 0, p.total, np.full(p.total, 8, np.uint8))
    with pytest.raises(ValueError, match=r"\(2,\) magnitude classes"):
        write_headers(p, 0, p.total, np.zeros(2, np.uint8))
    with pytest.raises(ValueError, match="do not make a plan"):
        _txlane.in_order_headers(p.headers, p.template, 0, p.total + 1, p.total, p.chunk, 4, 1000, None)
    with pytest.raises(ValueError, match="the template 3"):
        _txlane.in_order_headers(p.headers, b"abc", 0, p.total, p.total, p.chunk, 4, 1000, None)
    with pytest.raises(TypeError, match="9 arguments"):
        _txlane.in_order_headers(p.headers)
