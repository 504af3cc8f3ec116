"""End-to-end transfers between real endpoints on loopback, with faults injected by the lossy socket wrapper."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from host.policy import LayerMagnitudePolicy
from host.transport import LossySocket, Options, TransportError
from host.transport.cc import CCParams
from host.transport.chunking import chunk_elems, payload_capacity, plan_packets
from host.wire import DType, Flag
from tests.host.conftest import loopback_map
from host.transport import Endpoint
from host.transport.transmit import Transmitter


class FirstSendDropper:
    """A ``LossySocket`` drop rule: the first transmission (not a retransmission) of the data packets of transfers
    ``tids`` (once per transfer), or of data packet ``seq`` of any transfer; ``dropped``: the transfers it hit."""

    def __init__(self, *, tids: tuple[int, ...] = (), seq: int | None = None):
        self.tids, self.seq = set(tids), seq
        self.dropped: set[int] = set()

    def __call__(self, h: bytes) -> bool:
        if len(h) < 24 or h[0] & 0x0F != 0 or h[1] & Flag.RETRANSMIT:
            return False
        tid = int.from_bytes(h[12:16], "big")  # (wire.py's layout: transfer id, then seq at 20)
        if self.seq is not None and int.from_bytes(h[20:24], "big") == self.seq:
            self.dropped.add(tid)
            return True
        if tid in self.tids and tid not in self.dropped:
            self.dropped.add(tid)
            return True
        return False

FAST = dict(peer_timeout=5.0, recv_timeout=20.0)


def lossy(**kw):
    return lambda s: LossySocket(s, **kw)


def eligible_ranges(x: np.ndarray, mtu: int, p: float, itemsize: int) -> set[tuple[int, int]]:
    """Element ranges of the packets the sender's policy marks drop-eligible."""
    n = x.size
    chunk = chunk_elems(mtu, itemsize)
    npk = max(1, -(-n // chunk))
    counts = np.minimum(chunk, n - np.arange(npk) * chunk)
    cls = LayerMagnitudePolicy().classify(x.astype(np.float32), counts, layer=0, loss_bound=p)
    return {(int(i * chunk), int(i * chunk + counts[i])) for i in np.flatnonzero(cls.eligible)}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.uint8,
                                   torch.bool])
def test_reliable_transfer_torch_dtypes(make_endpoints, dtype):
    a, b = make_endpoints(2, Options(**FAST))
    if dtype.is_floating_point:
        x = torch.randn(50_000).to(dtype)
    elif dtype == torch.bool:
        x = torch.rand(50_000) > 0.5
    else:
        x = torch.randint(0, 200, (50_000,), dtype=dtype)
    h = a.send(1, x, transfer_id=1)
    r = b.recv(0, 1, out=(x.shape, dtype), timeout=10)
    assert r.data.dtype == dtype and torch.equal(r.data, x) and r.report.lost_ranges == []
    s = h.wait(5)
    assert s["packets"] == s["delivered_packets"] == r.stats["packets_received"]


def test_numpy_multidim_in_place(make_endpoints):
    a, b = make_endpoints(2, Options(mtu=9000, **FAST))
    x = np.random.default_rng(1).standard_normal((64, 33, 7))
    out = np.empty_like(x)
    a.send(1, x, transfer_id=5, layer=2)
    r = b.recv(0, 5, out=out, timeout=10)
    assert r.data is out and np.array_equal(out, x)


@pytest.mark.parametrize("mtu", [1500, 9000])
def test_p0_identical_under_loss_reorder_dup(make_endpoints, mtu):
    faults = dict(loss=0.1, dup=0.05, reorder=0.1, loss_control=0.1)
    a, b = make_endpoints(2, per_rank={0: Options(mtu=mtu, socket_wrapper=lossy(seed=1, **faults), **FAST),
                                       1: Options(mtu=mtu, socket_wrapper=lossy(seed=2, **faults), **FAST)})
    x = torch.randn(200_000)
    h = a.send(1, x, transfer_id=9, loss_bound=0.0)
    r = b.recv(0, 9, out=torch.empty_like(x), timeout=15)
    assert torch.equal(r.data, x) and r.report.zero_filled == 0
    s = h.wait(5)
    assert s["retransmissions"] > 0
    assert a._io.tx.dropped > 0 and a._io.tx.duplicated > 0 and a._io.tx.reordered > 0  # the faults did happen
    assert b.stats()["duplicates"] > 0


@pytest.mark.parametrize("p", [0.01, 0.05, 0.2])
def test_bounded_loss_only_eligible_missing_and_exact_report(make_endpoints, p):
    # eligible packets are dropped often, protected ones sometimes (they must be retransmitted)
    a, b = make_endpoints(2, per_rank={0: Options(socket_wrapper=lossy(seed=3, loss_eligible=0.5,
                                                                         loss_protected=0.05, reorder=0.05), **FAST),
                                       1: Options(**FAST)})
    rng = np.random.default_rng(7)
    x = (rng.standard_normal(100_000) * rng.choice([1e-4, 1.0], 100_000)).astype(np.float32)
    h = a.send(1, x, transfer_id=11, loss_bound=p)
    r = b.recv(0, 11, out=np.full_like(x, np.nan), timeout=15)
    lost = r.report.lost_ranges
    assert r.report.fraction <= p
    if p >= 0.05:  # dozens of eligible packets, half of them dropped: some loss must be reported
        assert lost
    mask = np.zeros(x.size, bool)
    for lo, hi in lost:
        mask[lo:hi] = True
    assert np.all(r.data[mask] == 0)  # zero-filled
    assert np.array_equal(r.data[~mask], x[~mask])  # everything else exact
    elig = eligible_ranges(x, 1500, p, 4)
    covered = np.zeros(x.size, bool)
    for lo, hi in elig:
        covered[lo:hi] = True
    assert np.all(covered[mask])  # only eligible packets are missing
    # the report is exact: each lost range is a union of whole eligible packets
    for lo, hi in lost:
        assert any(e[0] == lo for e in elig) and any(e[1] == hi for e in elig)
    s = h.wait(5)
    assert s["eligible_packets"] > 0 and s["retransmissions"] > 0
    assert b.stats()["zero_filled_elements"] == r.report.zero_filled


def test_deterministic_drop_reported_exactly(make_endpoints):
    """The same eligible packets dropped every time: the report must name exactly their element ranges."""
    x = np.linspace(-1, 1, 40_000, dtype=np.float32)
    p = 0.1
    chunk = chunk_elems(1500, 4)
    npk = -(-x.size // chunk)
    cls = LayerMagnitudePolicy().classify(x, np.minimum(chunk, x.size - np.arange(npk) * chunk), layer=0,
                                          loss_bound=p)
    plan = plan_packets(nelems=x.size, dtype=DType.FLOAT32, mtu=1500, classes=cls)
    el_seqs = np.flatnonzero(plan.eligible)
    drop_seqs = set(el_seqs[1::3].tolist())  # not the first eligible seq, so the boundary is visible

    def drop(first16: bytes) -> bool:
        return first16[0] & 0x0F == 0 and int.from_bytes(first16[20:24], "big") in drop_seqs if len(first16) >= 24 \
            else False

    a, b = make_endpoints(2, per_rank={0: Options(socket_wrapper=lambda s: _Full(s, drop), **FAST)})
    a.send(1, x, transfer_id=3, loss_bound=p)
    r = b.recv(0, 3, out=np.empty_like(x), timeout=10)
    expect = sorted((int(plan.offsets[s] // 4), int((plan.offsets[s] + plan.lengths[s]) // 4)) for s in drop_seqs)
    merged: list[tuple[int, int]] = []
    for lo, hi in expect:
        if merged and merged[-1][1] == lo:
            merged[-1] = (merged[-1][0], hi)
        else:
            merged.append((lo, hi))
    assert r.report.lost_ranges == merged


class _Full(LossySocket):
    """A wrapper whose drop rule sees the whole 36-byte header (the base class passes 16 bytes)."""

    def __init__(self, sock, fn):
        super().__init__(sock)
        self._fn = fn

    def sendmsg(self, buffers, ancdata=(), flags=0, address=None):
        if self._fn(bytes(buffers[0][:36])):
            self.dropped += 1
            return 0
        return self.sock.sendmsg(buffers, ancdata, flags, address)


def test_receiver_bound_zero_recovers_everything(make_endpoints):
    a, b = make_endpoints(2, per_rank={0: Options(socket_wrapper=lossy(seed=5, loss_eligible=0.5), **FAST)})
    x = np.random.default_rng(2).standard_normal(60_000).astype(np.float32)
    out = np.empty_like(x)
    # recv posted first, with the receiver's own bound 0: eligible packets are NACKed too
    t = threading.Thread(target=lambda: results.append(b.recv(0, 4, out=out, timeout=10, loss_bound=0.0)))
    results: list = []
    t.start()
    a.send(1, x, transfer_id=4, loss_bound=0.1)
    t.join(15)
    assert results and np.array_equal(out, x) and results[0].report.zero_filled == 0


def test_send_before_recv_and_recv_after_completion(make_endpoints):
    a, b = make_endpoints(2, Options(**FAST))
    xs = [torch.randn(10_000 + i) for i in range(3)]
    hs = [a.send(1, x, transfer_id=100 + i) for i, x in enumerate(xs)]
    for h in hs:
        h.wait(5)  # the receiver completed every transfer before anybody called recv()
    for i, x in reversed(list(enumerate(xs))):
        r = b.recv(0, 100 + i, out=torch.empty_like(x), timeout=5)
        assert torch.equal(r.data, x)
    with pytest.raises(ValueError, match="already received"):
        b.recv(0, 100, out=torch.empty_like(xs[0]), timeout=1)


def test_a_posted_receive_takes_the_data_directly_and_can_time_out_or_be_cancelled(make_endpoints):
    """post_recv() returns at once; the data then goes straight into ``out`` (nothing staged) and wait() returns
    what recv() would. A wait that times out abandons the receive (counted, TransportError); cancel() abandons it
    without waiting, and the transfer's packets are then dropped as late, never written into ``out``."""
    a, b = make_endpoints(2, Options(**FAST))
    x = torch.randn(100_000)
    out = torch.empty_like(x)
    rh = b.post_recv(0, 500, out, timeout=5)
    assert not rh.done()
    a.send(1, x, transfer_id=500).wait(5)
    r = rh.wait()
    assert rh.done() and r.data is out and torch.equal(out, x) and r.report.zero_filled == 0
    assert b.stats()["staged_transfers"] == 0
    a.send(1, x, transfer_id=501).wait(5)  # the other way round: staged, then claimed
    assert torch.equal(b.recv(0, 501, out=torch.empty_like(x), timeout=5).data, x)
    assert b.stats()["staged_transfers"] == 1

    late = b.post_recv(0, 502, torch.empty(10), timeout=0.05)
    with pytest.raises(TransportError, match="transfer 502 from rank 0 .* timed out after 0.05s"):
        late.wait()
    assert b.stats()["recv_timeouts"] == 1

    untouched = torch.full((100_000,), 7.0)
    rh = b.post_recv(0, 503, untouched, timeout=5)
    rh.cancel()
    with pytest.raises(TransportError, match="cancelled"):
        rh.wait()
    late0 = b.stats()["late"]
    a.send(1, x, transfer_id=503)  # (the sender fails later: an abandoned receive is never answered)
    deadline = time.monotonic() + 5
    while b.stats()["late"] == late0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert b.stats()["late"] > late0  # its packets arrived and were dropped
    assert torch.equal(untouched, torch.full((100_000,), 7.0))
    assert b.stats()["recv_timeouts"] == 1  # a cancel is not a timeout
    with pytest.raises(ValueError, match="already received"):
        b.post_recv(0, 503, torch.empty_like(x))


def test_staging_budget_holds_back_new_transfers_until_recv(make_endpoints):
    """Data for a transfer nobody has called recv() for is staged, sized for the whole transfer at once; once the
    staged bytes reach max_staged_bytes (never more), packets of further unclaimed transfers are dropped (counted),
    and those transfers still complete, by retransmission, once recv() is posted."""
    a, b = make_endpoints(2, per_rank={0: Options(**FAST), 1: Options(max_staged_bytes=200_000, **FAST)})
    xs = [torch.randn(n) for n in (40_000, 30_000, 1)]  # 160 kB, 120 kB (past the budget after the first), one
    hs = [a.send(1, x, transfer_id=200 + i) for i, x in enumerate(xs)]
    hs[0].wait(5)  # completed while staged
    time.sleep(0.2)
    st = b.stats()
    assert st["unclaimed_dropped"] > 0 and not hs[1].done() and not hs[2].done()
    assert b._staged_bytes <= 200_000
    for i, x in reversed(list(enumerate(xs))):
        r = b.recv(0, 200 + i, out=torch.empty_like(x), timeout=10)
        assert torch.equal(r.data, x)


def test_staged_bytes_are_released_on_every_path(make_endpoints):
    """Every path that ends staging gives its bytes back to the budget: data moved into the posted buffer, and a
    recv() with the wrong dtype, which fails. Before, that failure kept its bytes counted for good, and once the
    leaks reached max_staged_bytes every later unclaimed transfer was refused."""
    a, b = make_endpoints(2, per_rank={0: Options(**FAST), 1: Options(max_staged_bytes=300_000, **FAST)})
    for i in range(3):
        x = torch.randn(50_000 - 1000 * i)  # 200 kB, staged whole
        a.send(1, x, transfer_id=300 + i).wait(5)
        assert torch.equal(b.recv(0, 300 + i, out=torch.empty_like(x), timeout=5).data, x)
    assert b._staged_bytes == 0
    y = torch.randn(50_000)
    a.send(1, y, transfer_id=310).wait(5)  # staged, then claimed with the wrong dtype
    with pytest.raises(TransportError, match="carries FLOAT32"):
        b.recv(0, 310, out=torch.empty(50_000, dtype=torch.float64), timeout=5)
    assert b._staged_bytes == 0
    z = torch.randn(50_000)
    a.send(1, z, transfer_id=311).wait(5)  # within the budget again: staged, not dropped
    assert b.stats()["unclaimed_dropped"] == 0
    assert torch.equal(b.recv(0, 311, out=torch.empty_like(z), timeout=5).data, z)


def test_an_idle_endpoint_sends_the_first_burst_from_the_caller(make_endpoints, monkeypatch):
    """With the I/O thread asleep, send() transmits the first burst itself (no wake-up on the latency path) and
    the I/O thread does the rest; a transfer larger than one burst still completes. (The I/O thread's bursts
    leave through Transmitter.transmit from its Python loop, or from the native wait in C, which the spy does not
    see: so what the caller sent is counted by the spy, and everything sent by the endpoint's counter.)"""
    a, b = make_endpoints(2, Options(mtu=9000, **FAST))
    senders: list[tuple[str, int]] = []
    orig = Transmitter.transmit

    def spy(self, job):
        if self is a._tx:
            senders.append((threading.current_thread().name, len(job[2])))
        return orig(self, job)

    monkeypatch.setattr(Transmitter, "transmit", spy)
    me = threading.current_thread().name
    for i, n in enumerate((100, 2_000_000)):  # one packet; then ~900 packets, many bursts
        deadline = time.monotonic() + 5
        while not a._sleeping and time.monotonic() < deadline:
            time.sleep(0.001)
        senders.clear()
        before = a.stats()["tx_data_packets"]
        x = torch.randn(n)
        h = a.send(1, x, transfer_id=400 + i)
        assert senders and senders[0][0] == me
        assert torch.equal(b.recv(0, 400 + i, out=torch.empty_like(x), timeout=10).data, x)
        h.wait(10)
        mine = [k for who, k in senders if who == me]
        sent = a.stats()["tx_data_packets"] - before
        assert len(mine) == 1  # the caller sent the first burst, and only that
        assert sent == mine[0] if n == 100 else sent > mine[0]  # (the I/O thread the rest)


@pytest.mark.parametrize("native", [True, False])
def test_a_small_send_wakes_the_io_thread_only_for_its_answer(make_endpoints, native):
    """A send whose first burst (transmitted by its caller) is the whole transfer leaves the sleeping I/O thread
    asleep: nothing is left for it to do until the DONE arrives, which wakes it through the socket, so the caller
    arms the wake-up timer for the transfer's first deadline instead of waking it (one wake-up per small send
    instead of two). The Python path (no timer, ``native=False``) wakes it for every send, as before; either way
    every transfer completes. The lost-answer side (the timer firing for the RTO) is
    test_failures.py::test_lost_done_is_recovered_by_probe."""
    a, b = make_endpoints(2, Options(native=native, **FAST))
    x = torch.randn(100)  # one packet
    sends = 40
    for i in range(sends):
        deadline = time.monotonic() + 5
        while not a._sleeping and time.monotonic() < deadline:  # (a sleeping I/O thread: the case in question)
            time.sleep(0.001)
        r = b.post_recv(0, 500 + i, torch.empty_like(x))
        h = a.send(1, x, transfer_id=500 + i)
        assert torch.equal(r.wait().data, x)
        h.wait(5)
    s = a.stats()
    # (either way a few sends may find the thread awake after all: woken between the wait above and the send by its
    # own timeout, or not yet back in select)
    if native:
        assert s["io_wakes_caller"] <= sends // 4, s
    else:
        assert s["io_wakes_caller"] >= sends - sends // 4, s


def test_the_io_thread_does_not_race_the_callers_first_burst(make_endpoints, monkeypatch):
    """While send()'s caller transmits the first burst (outside the lock), the woken I/O thread must not send the
    same transfer's next packets: they would reach the wire first, and the receiver would see the tail before
    the head (a NACK for everything, spurious retransmissions). The caller's burst is slowed to widen the
    window; every transfer's packets must leave in seq order, with no retransmission and no duplicate."""
    a, b = make_endpoints(2, Options(mtu=9000, **FAST))
    sent: dict[int, list[int]] = {}
    orig = Transmitter.transmit

    def slow_caller(self, job):
        if self is a._tx:
            sent.setdefault(job[0].tid, []).extend(job[2])
            if threading.current_thread().name == threading.main_thread().name:
                time.sleep(0.05)
        return orig(self, job)

    monkeypatch.setattr(Transmitter, "transmit", slow_caller)
    for i in range(3):
        deadline = time.monotonic() + 5
        while not a._sleeping and time.monotonic() < deadline:
            time.sleep(0.001)
        x = torch.randn(1_000_000)  # ~450 packets: many bursts after the caller's
        h = a.send(1, x, transfer_id=500 + i)
        assert torch.equal(b.recv(0, 500 + i, out=torch.empty_like(x), timeout=10).data, x)
        h.wait(10)
        assert sent[500 + i] == sorted(sent[500 + i]) == list(range(len(sent[500 + i])))
    assert a.stats()["retransmissions"] == 0 and b.stats()["duplicates"] == 0

def test_many_concurrent_transfers_all_to_all(make_endpoints):
    n = 4
    eps = make_endpoints(n, Options(socket_wrapper=lossy(seed=None, loss=0.02, reorder=0.02), **FAST))
    data = {(s, d, k): torch.randn(3000 + 100 * k) for s in range(n) for d in range(n) if s != d for k in range(4)}
    handles = [eps[s].send(d, x, transfer_id=1000 * s + k, layer=k) for (s, d, k), x in data.items()]
    errors: list = []

    def receiver(d: int) -> None:
        try:
            for (s, dd, k), x in data.items():
                if dd == d:
                    r = eps[d].recv(s, 1000 * s + k, out=torch.empty_like(x), timeout=20)
                    assert torch.equal(r.data, x)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=receiver, args=(d,)) for d in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    for h in handles:
        h.wait(10)
    tot = [e.stats() for e in eps]
    assert sum(s["transfers_received"] for s in tot) == len(data)


def test_ecn_marks_echoed_and_window_reacts(make_endpoints):
    a, b = make_endpoints(2, per_rank={0: Options(socket_wrapper=lossy(seed=4, ce=0.3), **FAST)})
    x = torch.randn(300_000)
    h = a.send(1, x, transfer_id=8)
    r = b.recv(0, 8, out=torch.empty_like(x), timeout=15)
    assert torch.equal(r.data, x)
    s = h.wait(5)
    assert r.stats["ce_marks"] > 0 and s["ecn_echoes"] > 0
    peer = a.stats()["peers"][1]
    assert peer["ecn_marks"] > 0 and peer["cuts"] > 0 and peer["alpha"] > 0


def test_stats_available(make_endpoints):
    a, b = make_endpoints(2, Options(**FAST))
    x = torch.randn(1000)
    h = a.send(1, x, transfer_id=1, layer=4)
    r = b.recv(0, 1, out=torch.empty_like(x), timeout=5)
    s = h.wait(5)
    for k in ("bytes", "packets", "retransmissions", "duration_s", "gbps", "ecn_echoes"):
        assert k in s
    for k in ("bytes", "packets_received", "zero_filled", "lost_ranges", "ce_marks", "gbps"):
        assert k in r.stats
    assert r.stats["layer"] == 4 and s["bytes"] == 4000
    tot = a.stats()
    assert tot["tx_data_packets"] >= 3 and tot["transfers_sent"] == 1 and 1 in tot["peers"]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(0, 30_000), dtype=st.sampled_from([np.float32, np.float16, np.int32, np.float64]),
       mtu=st.sampled_from([1500, 9000]), loss=st.floats(0, 0.3), p=st.sampled_from([0.0, 0.05]),
       seed=st.integers(0, 100))
def test_property_endpoint(n, dtype, mtu, loss, p, seed):
    amap = loopback_map(2)
    is_float = np.dtype(dtype).kind == "f"
    p = p if is_float else 0.0
    a = Endpoint(0, amap, 1, 2, Options(mtu=mtu, socket_wrapper=lossy(seed=seed, loss=loss, reorder=0.05,
                                                                       dup=0.05, loss_control=loss), **FAST))
    b = Endpoint(1, amap, 1, 2, Options(mtu=mtu, socket_wrapper=lossy(seed=seed + 1, loss_control=loss), **FAST))
    try:
        x = (np.random.default_rng(seed).standard_normal(n) * 100).astype(dtype)
        a.send(1, x, transfer_id=seed, loss_bound=p)
        r = b.recv(0, seed, out=(x.shape, dtype), timeout=15)
        assert r.report.fraction <= p
        mask = np.zeros(n, bool)
        for lo, hi in r.report.lost_ranges:
            mask[lo:hi] = True
        assert np.array_equal(r.data[~mask], x[~mask]) and np.all(r.data[mask] == 0)
        if p == 0:
            assert r.report.lost_ranges == []
    finally:
        a.close()
        b.close()


def test_a_stalled_receiver_makes_a_timeout_that_is_undone(make_endpoints):
    """The receiver's thread stalls (its lock held, as a descheduled process would) longer than the sender's RTO:
    the sender times out, but the ACKs that follow cover packets sent before the timeout, so the timeout is undone
    (F-RTO) and the data arrives intact."""
    a, b = make_endpoints(2, Options(**FAST))
    x = torch.randn(2_000_000)
    out = torch.empty_like(x)
    got: dict = {}
    t = threading.Thread(target=lambda: got.update(r=b.recv(0, 1, out=out, timeout=20)))
    t.start()
    h = a.send(1, x, transfer_id=1)
    deadline = time.monotonic() + 10
    while a.stats()["tx_data_packets"] < 50 and time.monotonic() < deadline:
        time.sleep(0.001)
    with b._lock:  # the receive thread blocks here with packets in flight
        time.sleep(0.3)
    h.wait(20)
    t.join(20)
    assert torch.equal(out, x)
    peer = a.stats()["peers"][1]
    assert peer["timeouts"] >= 1 and peer["spurious_timeouts"] >= 1


def test_one_way_queue_cancels_the_clock_offset_and_wraps():
    """The sender's estimate of forward queueing from the receiver's 32-bit µs clock in ACKs: any clock offset
    cancels, the 71-minute wrap is harmless, and the least delay seen is the zero."""
    from host.transport.control import clock_us
    from host.transport.sender import PeerState
    from host.transport.cc import CCParams
    p = PeerState(1, ("127.0.0.1", 1), CCParams())
    offset = (1 << 32) - 1500  # the receiver's clock is just below the wrap
    got = []
    for sent, delay in ((10.0, 0.002), (10.1, 0.003), (10.2, 0.0015), (10.3, 0.0045)):
        got.append(p.one_way_queue(clock_us(sent + delay) + offset & 0xFFFFFFFF, sent))
    assert abs(got[0]) < 1e-6 and abs(got[1] - 0.001) < 2e-6 and abs(got[2]) < 1e-6
    assert abs(got[3] - 0.003) < 2e-6  # against the least one-way delay so far (1.5 ms)


@pytest.mark.parametrize("seed", range(12))
def test_cumulative_ack_fast_path_equals_the_general_path(seed):
    """``sender.on_cum_ack`` (a bitmap-free ACK with no hole open) must leave exactly the state ``sender.on_ack``
    leaves. A sender with random reordering, loss, retransmissions and stale ACKs; every ACK the fast path would take is
    applied both ways to twin copies, which must agree field by field afterwards."""
    import copy

    from host.transport.cc import CCParams
    from host.transport.sender import OutTransfer, PeerState, on_ack, on_cum_ack
    from host.transport.tensors import view_tensor

    rng = np.random.default_rng(seed)
    n = int(rng.integers(40, 200))
    x = np.zeros(n * 300, np.float32)
    plan = plan_packets(nelems=x.size, dtype=DType.FLOAT32, mtu=1500)
    o = OutTransfer(1, 7, view_tensor(x), plan, 0, 0.0)
    p = PeerState(1, ("127.0.0.1", 1), CCParams(mss=1436))
    arrived = np.zeros(o.total, bool)
    loss = (0.0, 0.03, 0.1)[seed % 3]
    now, fast_taken = 0.0, 0

    def twin(o, p):
        o2, p2 = copy.copy(o), copy.copy(p)
        for k in ("acked", "inflight", "queued", "retx", "sent_order", "sent_time"):
            setattr(o2, k, getattr(o, k).copy())
        o2.retxq, p2.cc = copy.copy(o.retxq), copy.deepcopy(p.cc)
        return o2, p2

    def state(o, p):
        return ([getattr(o, k).copy() for k in ("acked", "inflight", "queued", "retx", "sent_order", "sent_time")],
                o.cum_acked, o.acked_hi, p.inflight, p.rto_fired, sorted(o.retxq),
                {k: v for k, v in vars(p.cc).items() if k != "p"})

    while not o.acked.all():
        now += 1e-4
        # send: retransmissions first, then new packets (as Sender.pick_burst)
        burst = [s for s in list(o.retxq) if not o.acked[s]][:8]
        o.retxq.clear()
        o.queued[:] = False
        burst += list(range(o.next_seq, min(o.total, o.next_seq + int(rng.integers(1, 12)))))
        o.next_seq = max(o.next_seq, max(burst, default=-1) + 1)
        for s in burst:
            o.retx[s] |= o.sent_order[s] >= 0
            o.sent_order[s], o.sent_time[s] = o.order, now
            o.order += 1
            if not o.inflight[s]:
                o.inflight[s] = True
                p.inflight += int(o.plan.lengths[s])
            if rng.random() >= loss:
                arrived[s] = True
        if rng.random() < 0.05:
            p.rto_fired = now - 5e-5
        # the receiver's ACK: base = its cumulative point, bitmap of what arrived above it
        base = int(np.argmin(arrived)) if not arrived.all() else o.total
        if rng.random() < 0.1:
            base = max(0, base - int(rng.integers(1, 5)))  # a stale ACK
        seg = arrived[base: base + 64]
        nz = np.flatnonzero(seg)
        bits = seg[: int(nz[-1]) + 1] if nz.size and arrived[base:].any() and rng.random() < 0.5 else seg[:0]
        ts = int(now * 1e6) & 0xFFFFFFFF
        if not bits.size and o.acked_hi <= o.cum_acked <= base <= o.next_seq:
            fast_taken += 1
            o2, p2 = twin(o, p)
            on_ack(p, o, base, bits, False, now, ts)
            on_cum_ack(p2, o2, base, False, now, ts)
            a, b = state(o, p), state(o2, p2)
            for u, v in zip(a[0], b[0]):
                assert np.array_equal(u, v)
            assert a[1:] == b[1:]
        else:
            on_ack(p, o, base, bits, False, now, ts)
        if not arrived[: o.next_seq].all() and rng.random() < 0.3:  # resend what the receiver lacks
            for s in np.flatnonzero(~arrived[: o.next_seq] & ~o.acked[: o.next_seq])[:4]:
                if not o.queued[s]:
                    o.queued[s] = True
                    o.retxq.append(int(s))
        if o.next_seq == o.total and not o.retxq:
            for s in np.flatnonzero(~o.acked):
                o.queued[s] = True
                o.retxq.append(int(s))
    assert fast_taken >= (5 if loss == 0 else 1)


def test_pick_burst_sets_a_pacing_deadline_only_for_a_peer_that_may_send(make_endpoints):
    """The wait ``Sender.pick_burst`` returns with no burst is the earliest pacing deadline of a peer that could
    send at it: a peer whose window is full, or whose transfers have nothing ready, sets none (the I/O thread would
    wake only to find that; what opens either wakes it anyway)."""
    from host.transport.sender import OutTransfer
    from host.transport.tensors import view_tensor

    ep, _, _ = make_endpoints(3, Options(**FAST))
    with ep._lock:  # the I/O thread stays out
        now = 100.0
        peers = {}
        for r in (1, 2):
            p = peers[r] = ep._sender.peer(r)
            plan = plan_packets(nelems=50_000, dtype=DType.FLOAT32, mtu=ep.opts.mtu)
            o = OutTransfer(r, 7, view_tensor(np.zeros(50_000, np.float32)), plan, 0, 0.0)
            p.active, p.out = [o], {o.tid: o}
            p.inflight = 0
        p1, p2 = peers[1], peers[2]
        p1.next_send, p2.next_send = now + 0.003, now + 0.007
        p1.cc.window = p2.cc.window = lambda: 10**6
        assert ep._sender.pick_burst(now) == (None, pytest.approx(0.003))  # both may send: the earlier deadline
        p1.cc.window = lambda: 0  # rank 1's window is full: rank 2's deadline
        assert ep._sender.pick_burst(now) == (None, pytest.approx(0.007))
        p2.active[0].next_seq = p2.active[0].ready  # rank 2 has nothing ready: no deadline at all
        assert ep._sender.pick_burst(now) == (None, 1.0)
        p1.cc.window = lambda: 10**6  # rank 1's window opens (an ACK): its deadline again
        assert ep._sender.pick_burst(now) == (None, pytest.approx(0.003))
        job, wait = ep._sender.pick_burst(now + 0.004)  # and once it passes, rank 1 sends
        assert job is not None and job[0] is p1.active[0] and wait == 0.0
        for p in peers.values():
            p.active, p.out = [], {}


@pytest.mark.parametrize("seed", range(16))
def test_pick_burst_takes_exactly_what_window_and_burst_allow(make_endpoints, seed):
    """``Sender.pick_burst`` against its specification, written out packet by packet: queued retransmissions first
    (skipping ACKed ones), then new packets in seq order, each while the burst has room and the bytes before it are
    below the window's room; afterwards the chosen packets have consecutive send orders, the send time, are in
    flight, and the peer's in-flight bytes grew by those not in flight before. Random packet sizes (a short last
    packet, MTUs 1500 and 9000), window rooms, burst limits, send progress and retransmission queues."""
    from host.transport.sender import OutTransfer
    from host.transport.tensors import view_tensor

    rng = np.random.default_rng(seed)
    burst = int(rng.integers(1, 40))
    ep, _ = make_endpoints(2, Options(mtu=(1500, 9000)[seed % 2], burst=burst, **FAST))
    mtu = ep.opts.mtu
    with ep._lock:  # the I/O thread stays out
        p = ep._sender.peer(1)
        for rnd in range(6):
            n = int(rng.integers(1, 300_000))
            x = np.zeros(n, np.float32)
            plan = plan_packets(nelems=n, dtype=DType.FLOAT32, mtu=mtu)
            o = OutTransfer(1, 90 + rnd, view_tensor(x), plan, rnd, 0.0)
            sent = int(rng.integers(0, o.total + 1))  # already sent once: [0, sent)
            if sent:
                o.sent_order[:sent] = np.arange(sent)
                o.order = sent
                o.inflight[:sent] = rng.random(sent) < 0.5
                o.acked[:sent] = ~o.inflight[:sent] & (rng.random(sent) < 0.7)
                o.next_seq = sent
                for s in rng.permutation(np.flatnonzero(~o.acked[:sent]))[: int(rng.integers(0, 12))]:
                    o.queued[s] = True
                    o.retxq.append(int(s))
                if rng.random() < 0.3:
                    o.acked[list(o.retxq)[:2]] = True  # ACKed while queued: skipped
            if not o.has_work():
                continue
            lens = plan.lengths.tolist()
            room = int(rng.integers(1, 40 * mtu))
            if rng.random() < 0.5:  # exactly the bytes of the queued retransmissions and the next k new packets
                k = int(rng.integers(1, 20))
                room = max(1, sum(lens[q] for q in o.retxq if not o.acked[q]) + sum(lens[o.next_seq: o.next_seq + k]))
            p.inflight = int(plan.lengths[o.inflight].sum())
            p.cc.window = lambda room=room: p.inflight + room
            p.next_send = 0.0
            p.active, p.out = [o], {o.tid: o}
            # the specification
            want, nbytes, queue, s = [], 0, list(o.retxq), o.next_seq
            while queue and len(want) < burst and nbytes < room:
                q = queue.pop(0)
                if not o.acked[q]:
                    want.append(q)
                    nbytes += lens[q]
            nretx = len(want)
            while s < o.total and len(want) < burst and nbytes < room:
                want.append(s)
                nbytes += lens[s]
                s += 1
            before = (o.inflight.copy(), p.inflight, o.order, o.pkts_sent)
            job, _ = ep._sender.pick_burst(12.5)
            if not want:
                assert job is None
                continue
            assert job[0] is o and job[2] == want
            assert o.next_seq == s
            w = np.asarray(want)
            assert np.array_equal(o.sent_order[w], np.arange(before[2], before[2] + len(want)))
            assert (o.sent_time[w] == 12.5).all() and o.inflight[w].all()
            assert o.retx[w[:nretx]].all() and o.pkts_sent == before[3] + len(want)
            assert p.inflight == before[1] + int(plan.lengths[w][~before[0][w]].sum())
        p.active, p.out = [], {}


def test_retransmitted_packets_carry_the_retransmit_flag(make_endpoints):
    """Every packet's first transmission has the RETRANSMIT flag clear and every later one has it set (the wire
    format's meaning of the bit); the data still arrives intact. The sender's wrapper drops the first copy of
    every fifth packet."""
    sent: dict[int, list[int]] = {}

    def record_and_drop(h: bytes) -> bool:
        if len(h) < 24 or h[0] & 0x0F != 0:  # DATA only
            return False
        seq = int.from_bytes(h[20:24], "big")
        sent.setdefault(seq, []).append(h[1])
        return seq % 5 == 0 and len(sent[seq]) == 1

    a, b = make_endpoints(2, per_rank={0: Options(socket_wrapper=lambda s: _Full(s, record_and_drop), **FAST)})
    x = torch.randn(200_000)
    h = a.send(1, x, transfer_id=8)
    assert torch.equal(b.recv(0, 8, out=torch.empty_like(x), timeout=10).data, x)
    assert h.wait(10)["retransmissions"] >= len([s for s in sent if s % 5 == 0])
    for seq, flags in sent.items():
        assert not flags[0] & Flag.RETRANSMIT, seq
        assert all(f & Flag.RETRANSMIT for f in flags[1:]), (seq, flags)
        assert len(flags) >= (2 if seq % 5 == 0 else 1)


class _DelayFirst(LossySocket):
    """A wrapper that holds back seq 0 of every transfer, its first transmission for ``delay`` seconds and its
    retransmissions for ``retx_delay`` (a path that reorders by milliseconds, as spraying over unequal queues
    does), and passes everything else on."""

    def __init__(self, sock, delay: float, retx_delay: float = 0.0):
        super().__init__(sock)
        self._delay, self._retx_delay = delay, retx_delay
        self._timers: list[threading.Timer] = []
        # per transfer id: what the path really did, i.e. the longest the receiver went without a packet of the
        # transfer before the held-back seq 0 came (the delay, less what the sender still sent meanwhile, plus
        # however late the timer thread ran or the sender paused: on a loaded host, anything)
        self.gap: dict[int, float] = {}
        self._latest: dict[int, float] = {}  # per transfer id: when its latest packet left
        self._gap: dict[int, float] = {}  # per transfer id: the longest pause so far

    def _sent(self, tid: int) -> None:
        now = time.monotonic()
        if tid in self._latest and tid not in self.gap:
            self._gap[tid] = max(self._gap.get(tid, 0.0), now - self._latest[tid])
        self._latest[tid] = now

    def _late_send(self, tid: int, data, ancdata, flags, address) -> None:
        self.sock.sendmsg(data, ancdata, flags, address)
        if tid not in self.gap:
            self._sent(tid)
            self.gap[tid] = self._gap.get(tid, 0.0)

    def sendmsg(self, buffers, ancdata=(), flags=0, address=None):
        h = bytes(buffers[0][:36])
        if len(h) >= 24 and h[0] & 0x0F == 0:
            tid, seq = int.from_bytes(h[12:16], "big"), int.from_bytes(h[20:24], "big")  # (wire.py's layout)
            if seq == 0 and (self._retx_delay or not h[1] & Flag.RETRANSMIT):
                data = [bytes(b) for b in buffers]
                delay = self._retx_delay if h[1] & Flag.RETRANSMIT else self._delay
                t = threading.Timer(delay, self._late_send, (tid, data, ancdata, flags, address))
                t.start()
                self._timers.append(t)
                return sum(len(b) for b in data)
            sent = self.sock.sendmsg(buffers, ancdata, flags, address)
            self._sent(tid)
            return sent
        return self.sock.sendmsg(buffers, ancdata, flags, address)


@pytest.mark.parametrize("retx_delay", [0.0, 0.010])
def test_the_nack_wait_adapts_to_a_reordering_path(make_endpoints, retx_delay):
    """A path that delivers each transfer's first packet 6 ms late: the receiver's first NACKs (1 ms after the LAST
    packet) are premature, which it learns when the originals arrive (RETRANSMIT clear, for seqs it NACKed): after
    the retransmission completed the transfer, or (``retx_delay``: the retransmission is slower still) before it.
    Its wait for that peer doubles until it exceeds the path's reordering, and the NACKs stop."""
    wrappers: list[_DelayFirst] = []

    def wrap(s):
        wrappers.append(_DelayFirst(s, 0.006, retx_delay))
        return wrappers[-1]

    a, b = make_endpoints(2, per_rank={0: Options(mtu=9000, socket_wrapper=wrap, **FAST)})
    rounds = []  # (the receiver's wait in force, NACKs the transfer cost)
    for i in range(12):
        x = torch.randn(20_000)  # 9 packets at MTU 9000
        wait, before = b._receiver.reo.get(0, 0.001), b.stats()["nacks_sent"]
        h = a.send(1, x, transfer_id=600 + i)
        assert torch.equal(b.recv(0, 600 + i, out=torch.empty_like(x), timeout=10).data, x)
        h.wait(10)
        time.sleep(0.012)  # the held-back original arrives (late, after a premature NACK)
        rounds.append((wait, b.stats()["nacks_sent"] - before))
    # What the path really did is measured per transfer (the wrapper's ``gap``): about 6 ms on an idle host; on a
    # loaded one the sender's pace and the timer thread's lateness make it anything, and a receiver that runs late
    # sees less of it. So the checks hold whatever the host did: the wait grew on premature NACKs; a transfer whose
    # pauses the wait in force covered (with 1 ms to spare) cost no NACK; and the NACKs stop: the wait covers any
    # pause under 12 ms (twice the path's delay) once it has doubled four times (1 -> 2 -> 4 -> 8 -> 16 ms), so at
    # most four transfers, and one spare, NACK for such a pause.
    for t in wrappers[0]._timers:  # every held-back original has left (a loaded host may run a timer late)
        t.join(5)
    gaps = [wrappers[0].gap[600 + i] for i in range(len(rounds))]
    reo = b._receiver.reo[0]
    assert b.stats()["premature_nacks"] >= 1 and max([w for w, _ in rounds] + [reo]) >= 0.002, (rounds, gaps)
    assert not any(n for (wait, n), gap in zip(rounds, gaps) if gap < wait - 0.001), (rounds, gaps)
    assert sum(1 for (_, n), gap in zip(rounds, gaps) if n and gap < 0.012) <= 5, (rounds, gaps)


def test_a_fresh_peers_lost_first_packet_waits_the_rto_of_the_measured_peers_not_rto_init(make_endpoints):
    """A one-packet send to a peer never sent to before, its only datagram dropped: nothing later reveals the loss
    (no NACK, no ACK), so the RTO alone recovers it. With no peer measured yet that RTO is ``rto_init`` (0.4 s
    here); once another peer is measured (a 2 MB transfer to it, loopback: srtt + 4 rttvar well under rto_init),
    the fresh peer's first RTO is seeded from it (``cc.seed_rto``) and the same loss costs that RTO instead."""
    rto_init = 0.4
    drop_first = FirstSendDropper(tids=(7, 8))  # the first transmission of transfers 7 and 8, once each
    first_dropped = drop_first.dropped

    wrapped: list[LossySocket] = []

    def wrapper(s):
        wrapped.append(LossySocket(s, drop_fn=drop_first))
        return wrapped[-1]

    cc = CCParams(mss=payload_capacity(1500), rto_init=rto_init)
    # (one copy of each packet: with Options.small_copies the same loss needs every copy lost, test_small_copies.py)
    a, b, c, d = make_endpoints(4, Options(cc=cc, **FAST),
                                per_rank={0: Options(cc=cc, socket_wrapper=wrapper, small_copies=1, **FAST)})
    small = torch.arange(16, dtype=torch.float32)

    def lost_first_packet(dst, tid: int) -> tuple[float, dict]:
        got: dict = {}
        t = threading.Thread(target=lambda: got.update(r=dst.recv(0, tid, out=torch.empty_like(small), timeout=10)))
        t.start()
        t0 = time.monotonic()
        a.send(dst.rank, small, transfer_id=tid).wait(10)
        took = time.monotonic() - t0
        t.join(10)
        assert torch.equal(got["r"].data, small)
        return took, a.stats()["peers"][dst.rank]

    # no peer measured: the lost packet waits rto_init
    took, peer = lost_first_packet(d, 7)
    assert peer["rto_seed_ms"] is None and peer["timeouts"] + a.stats()["tail_probes"] >= 1
    assert took >= rto_init, took

    x = torch.randn(500_000)
    h = a.send(1, x, transfer_id=1)
    assert torch.equal(b.recv(0, 1, out=torch.empty_like(x), timeout=10).data, x)
    h.wait(10)
    measured = a.stats()["peers"][1]
    assert measured["srtt_us"] is not None

    # peer 2 has never been sent to: its first RTO is the measured peer's, and so is the wait for its lost packet
    timeouts = a.stats()["rto_timeouts"] + a.stats()["tail_probes"]
    took, peer = lost_first_packet(c, 8)
    assert first_dropped == {7, 8} and sum(w.dropped for w in wrapped) == 2
    assert a.stats()["rto_timeouts"] + a.stats()["tail_probes"] > timeouts  # recovered by a timeout, not otherwise
    assert peer["rto_seed_ms"] is not None and peer["rto_seed_ms"] <= 0.25 * rto_init * 1e3, peer
    assert peer["rto_seed_ms"] * 1e-3 * 0.9 <= took < 0.5 * rto_init, (took, peer)


def test_a_done_ends_the_backoff_of_a_peer_sent_only_one_packet_messages(make_endpoints):
    """One-packet sends are answered by DONE alone. The first one's only datagram is dropped: it waits the RTO
    (``rto_init``, no peer measured) and the timeout doubles it; the DONE that follows ends that backoff, so the
    second one, its datagram dropped too, waits the same RTO again, not twice it (nothing else would ever reset it:
    no ACK comes). A third, not dropped, gives the peer an RTT sample of its own from its DONE."""
    rto_init = 0.3
    drop_first = FirstSendDropper(tids=(7, 8))  # the first transmission of transfers 7 and 8
    dropped = drop_first.dropped

    cc = CCParams(mss=payload_capacity(1500), rto_init=rto_init)
    # (one copy of each packet: with Options.small_copies the same loss needs every copy lost, test_small_copies.py)
    a, b = make_endpoints(2, Options(cc=cc, **FAST),
                          per_rank={0: Options(cc=cc, socket_wrapper=lambda s: LossySocket(s, drop_fn=drop_first),
                                               small_copies=1, **FAST)})
    small = torch.arange(16, dtype=torch.float32)

    def one(tid: int) -> float:
        got: dict = {}
        t = threading.Thread(target=lambda: got.update(r=b.recv(0, tid, out=torch.empty_like(small), timeout=10)))
        t.start()
        t0 = time.monotonic()
        a.send(1, small, transfer_id=tid).wait(10)
        took = time.monotonic() - t0
        t.join(10)
        assert torch.equal(got["r"].data, small)
        return took

    assert one(7) >= rto_init
    peer = a.stats()["peers"][1]
    assert peer["timeouts"] + a.stats()["tail_probes"] >= 1 and peer["srtt_us"] is None  # (Karn: resent)
    assert peer["rto_ms"] == rto_init * 1e3  # the DONE ended the backoff
    took = one(8)
    assert dropped == {7, 8}
    assert rto_init <= took < 1.5 * rto_init, took  # one RTO, not the doubled one (0.6 s)
    assert one(9) < rto_init
    peer = a.stats()["peers"][1]
    assert peer["srtt_us"] is not None and peer["rto_ms"] < rto_init * 1e3, peer


def _count_timer_runs(ep, monkeypatch) -> list[float]:
    """Record when ``ep``'s I/O thread runs its receiver timers (the stages' timers run together)."""
    runs: list[float] = []
    real = ep._receiver.timers

    def counted(now):
        runs.append(now)
        real(now)

    monkeypatch.setattr(ep._receiver, "timers", counted)
    return runs


def test_a_waiting_endpoint_runs_its_timers_when_due_not_every_tick(make_endpoints, monkeypatch):
    """A posted receive whose sender has not started: nothing can be NACKed, and the peer's silence matters only
    after peer_timeout / 4. The I/O thread wakes for its timers when one of them may act (here the 100 ms bound),
    not every Options.tick (1 ms): a few runs in 0.5 s, not hundreds."""
    a, b = make_endpoints(2, Options(peer_timeout=30.0))
    runs = _count_timer_runs(b, monkeypatch)
    h = b.post_recv(0, 1, np.empty(1000, np.float32))
    time.sleep(0.5)
    assert 1 <= len(runs) <= 12, len(runs)
    a.send(1, np.ones(1000, np.float32), transfer_id=1).wait(5)
    assert h.wait().report.zero_filled == 0


def test_a_hole_is_nacked_when_its_wait_ends_while_the_timers_sleep(make_endpoints):
    """The timers run when a deadline comes, not every tick (docs/decisions.md): a transfer whose next-to-last
    packet was lost (one later packet only: too few for the sender to judge it lost) gets its NACK once the
    reordering wait after the LAST packet ends, and the packet is resent then. Had the plan missed that deadline,
    the sender's retransmission timeout or a tail probe (20 ms or more) would have recovered it first."""
    n = 20_000
    total = -(-n // chunk_elems(1500, 4))
    per = {0: Options(mtu=1500, socket_wrapper=lambda s: LossySocket(s, drop_fn=FirstSendDropper(seq=total - 2))),
           1: Options(mtu=1500)}
    a, b = make_endpoints(2, per_rank=per)
    x = np.arange(n, dtype=np.float32)
    out = np.empty_like(x)
    rh = b.post_recv(0, 1, out)
    h = a.send(1, x, transfer_id=1)
    res = rh.wait()
    h.wait(5)
    assert np.array_equal(out, x) and res.report.zero_filled == 0
    sa, sb = a.stats(), b.stats()
    assert sb["nacks_sent"] >= 1 and sa["retransmissions"] >= 1, (sa, sb)
    assert sa["rto_timeouts"] == 0 and sa["tail_probes"] == 0, sa
