"""The sender's general ACK in C (``_rxlane.bitmap_ack``, which ``Sender.on_feedback`` and the native wait take an
ACK with a bitmap by) against the Python ``sender.on_ack`` it replaces: the same state afterwards, field by field, the
window's included, on random transfers (drop-eligible packets, retransmissions, reordering, stale and duplicate ACKs,
ECN echoes, timeouts to undo) and random ACK bitmaps; and a malformed bitmap changes nothing."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from host import wire
from host.policy import PacketClasses
from host.transport.cc import CCParams
from host.transport.chunking import plan_packets
from host.transport.control import REORDER_TIME
from host.transport.packetio import _rxlane
from host.transport.sender import REORDER_PKTS, OutTransfer, PeerState, on_ack
from host.transport.tensors import view_tensor
from host.wire import DType

ARRAYS = ("acked", "inflight", "queued", "retx", "sent_order", "sent_time")
SCALARS = ("cum_acked", "acked_hi", "progress", "probes")
PEER = ("inflight", "progress", "rto_at", "rto_fired", "owd_base", "owd_min")


def _native(p: PeerState, o: OutTransfer, base: int, payload: bytes, count: int, ecn: bool, now: float,
            ts: int) -> bool:
    return _rxlane.bitmap_ack(p, o, base, payload, count, ecn, now, ts, REORDER_TIME, REORDER_PKTS)


def _twin(o: OutTransfer, p: PeerState) -> tuple[OutTransfer, PeerState]:
    o2, p2 = copy.copy(o), copy.copy(p)
    for k in ARRAYS:
        setattr(o2, k, getattr(o, k).copy())
    o2.retxq, p2.cc = copy.copy(o.retxq), copy.deepcopy(p.cc)
    return o2, p2


def _same(a: tuple[OutTransfer, PeerState], b: tuple[OutTransfer, PeerState]) -> None:
    (oa, pa), (ob, pb) = a, b
    for k in ARRAYS:
        assert np.array_equal(getattr(oa, k), getattr(ob, k)), k
    for k in SCALARS:
        assert getattr(oa, k) == getattr(ob, k), k
    assert list(oa.retxq) == list(ob.retxq)
    for k in PEER:
        assert getattr(pa, k) == getattr(pb, k), k
    assert vars(pa.cc) == vars(pb.cc)


def _transfer(rng: np.random.Generator) -> tuple[OutTransfer, PeerState]:
    n = int(rng.integers(8, 160))
    chunk = 356  # floats per packet at MTU 1500
    x = np.zeros(n * chunk - int(rng.integers(0, chunk)), np.float32)
    npk = -(-x.size // chunk)
    n_elig = int(rng.integers(0, npk // 3 + 1))
    classes = PacketClasses(priority=2, mag_class=np.zeros(npk, np.uint8),
                            eligible=np.arange(npk) < n_elig)  # (eligible positions first: seqs 0..n_elig-1)
    plan = plan_packets(nelems=x.size, dtype=DType.FLOAT32, mtu=1500, classes=classes)
    o = OutTransfer(1, 7, view_tensor(x), plan, 0, 0.0)
    p = PeerState(1, ("127.0.0.1", 1), CCParams(mss=1436))
    return o, p


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_native_general_ack_equals_the_python_one(seed):
    rng = np.random.default_rng(seed)
    o, p = _transfer(rng)
    now, checked = 1.0, 0
    for _ in range(int(rng.integers(5, 40))):
        # send some more (new packets, and now and then a retransmission of an unacked one)
        k = int(rng.integers(0, 12))
        for s in range(o.next_seq, min(o.total, o.next_seq + k)):
            o.sent_order[s] = o.order
            o.order += 1
            o.sent_time[s] = now
            if s >= o.n_elig:
                o.inflight[s] = True
                p.inflight += int(o.plan.lengths[s])
            o.next_seq = s + 1
            now += float(rng.uniform(0, 0.002))
        unacked = np.flatnonzero(~o.acked[: o.next_seq])
        if unacked.size and rng.random() < 0.5:
            s = int(rng.choice(unacked))
            o.retx[s] = True
            o.sent_order[s] = o.order
            o.order += 1
            o.sent_time[s] = now
            if not o.inflight[s]:
                o.inflight[s] = True
                p.inflight += int(o.plan.lengths[s])
        if rng.random() < 0.3:  # a timeout fired (Sender._timeout): an ACK of data sent before it undoes it
            p.cc.on_timeout()
            p.rto_fired = now - float(rng.uniform(0, 0.01))
        if rng.random() < 0.5:
            p.cc.on_rtt(float(rng.uniform(1e-4, 0.02)))  # (the loss-detection wait follows min_rtt)
        now += float(rng.uniform(0, 0.003))
        # an ACK: base somewhere around cum_acked, bits for a random subset of what was sent (stale ones too)
        base = int(rng.integers(max(0, o.cum_acked - 3), o.next_seq + 1))
        count = int(rng.integers(0, o.total - base + 1))
        bits = rng.random(count) < 0.6
        if rng.random() < 0.2:
            bits[:] = False
        payload = np.packbits(bits).tobytes()
        ts = int(now * 1e6) & 0xFFFFFFFF
        ecn = bool(rng.random() < 0.3)
        a, b = _twin(o, p), _twin(o, p)
        on_ack(a[1], a[0], base, bits, ecn, now, ts)
        assert _native(b[1], b[0], base, payload, count, ecn, now, ts) is True
        _same(a, b)
        checked += 1
        o, p = a
    assert checked


def test_a_malformed_bitmap_changes_nothing():
    """Too few or too many bytes for ``count``, or padding bits set: the C function reports it (None) before it
    touches anything, and wire.unpack_bitmap names the same field the Python path would ("count")."""
    rng = np.random.default_rng(5)
    o, p = _transfer(rng)
    o.sent_order[:5] = np.arange(5)
    o.next_seq, o.order = 5, 5
    before = _twin(o, p)
    for payload, count in ((b"\xff", 9), (b"\xff\x00", 7), (b"\xf1", 4)):
        assert _native(p, o, 0, payload, count, False, 1.0, 0) is False
        with pytest.raises(wire.WireError) as e:
            wire.unpack_bitmap(payload, count)
        assert e.value.field == "count"
        _same(before, (o, p))


def test_bad_arguments_are_refused():
    """A count past the transfer's end, or state arrays of the wrong size or type: an error that names what was
    wrong, nothing changed."""
    rng = np.random.default_rng(6)
    o, p = _transfer(rng)
    before = _twin(o, p)
    with pytest.raises(ValueError, match="of a transfer of"):
        _native(p, o, o.total, b"\x80", 1, False, 1.0, 0)
    _same(before, (o, p))
    o.sent_order = o.sent_order[:-1]
    with pytest.raises(ValueError, match="sent_order"):
        _native(p, o, 0, b"", 0, False, 1.0, 0)
    o, p = _transfer(rng)
    o.sent_time = o.sent_time.astype(np.float32)
    with pytest.raises(ValueError, match="sent_time"):
        _native(p, o, 0, b"", 0, False, 1.0, 0)
    with pytest.raises(TypeError, match="10 arguments"):
        _rxlane.bitmap_ack(p, o, 0, b"", 0, False, 1.0, 0)
