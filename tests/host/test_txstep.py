"""The sender's steady state in C (``host/transport/_txstep.h``: ``_rxlane.cum_ack`` and ``_rxlane.pick_peer``)
against the Python functions it mirrors (``sender.on_cum_ack`` with ``cc.DctcpWindow.on_ack``, and
``Sender.pick_burst``): twin senders driven by the same random events -- bursts under window and pacing, cumulative
ACKs with and without ECN-Echo and with receiver clocks that show queues of every size (delay marks, HyStart's exit,
the empty-queue growth), timeouts and their undo, each congestion-control mode -- end every step in the same state,
field by field, floats bit for bit."""

from __future__ import annotations

import socket
import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from host.transport.api import Options
from host.transport.control import (CTL, CTL_DONE, HDR, W_FLAGS, W_SEQ, W_TAG, W_TID, W_VT, clock_us,
                                    pack_control_header)
from host.transport.packetio import packet_tag
from host.transport.cc import FAST_ALPHA, CCParams
from host.transport.packetio import _rxlane
from host.transport.sender import Sender, on_cum_ack, plan_send
from host.transport.stats import Counters
from host.transport.tensors import view_tensor
from host.wire import TAG_AT as W_TAG_AT
from host.wire import Flag, MsgType

ARRAYS = ("acked", "inflight", "queued", "retx", "sent_order", "sent_time")
SCALARS = ("cum_acked", "acked_hi", "progress", "probes", "next_seq", "order", "pkts_sent", "last_sent")
PEER = ("inflight", "progress", "rto_at", "rto_fired", "owd_base", "owd_min", "next_send")

MODES = {
    "default": CCParams(mss=1436),
    "fast": CCParams(mss=1436, fast_alpha=FAST_ALPHA),
    "fast-small": CCParams(mss=1436, fast_alpha=16 << 10, init_cwnd_pkts=64),  # (FAST's own cuts)
    "ecn": CCParams(mss=1436, delay_target=None, hystart_delay=None, probe_delay=None),
    "no-stretch": CCParams(mss=1436, ack_delay_comp=False, init_cwnd_pkts=4),
    "small": CCParams(mss=1436, init_cwnd_pkts=2, max_cwnd_bytes=64 << 10),
}


def _sender(ccp: CCParams, native: bool) -> Sender:
    opts = Options(mtu=1500, native=native)  # (native=False: the reference, Python's pick_burst and on_cum_ack)
    # (the PacketSocket is only touched when SO_SNDBUF must change, which one peer's sends never ask)
    return Sender(opts, {1: ("127.0.0.1", 9)}, ccp, None, Counters(), threading.Lock())


def _start(s: Sender, x: np.ndarray, tid: int, loss_bound: float, now: float):
    ids = dict(layer=0, rank=0, job_id=7, transfer_id=tid, nonce=1)
    plan, ready, slicer = plan_send(view_tensor(x), s.opts, loss_bound, ids, in_slices=False)
    return s.start(1, tid, view_tensor(x), plan, ready, now, layer=0, loss_bound=loss_bound, slicer=slicer)


def _same(a: Sender, b: Sender) -> None:
    pa, pb = a.peers[1], b.peers[1]
    assert [o.tid for o in pa.active] == [o.tid for o in pb.active] and pa.out.keys() == pb.out.keys()
    for oa, ob in zip(pa.active, pb.active):
        for k in ARRAYS:
            assert np.array_equal(getattr(oa, k), getattr(ob, k)), k
        for k in SCALARS:
            assert getattr(oa, k) == getattr(ob, k), k
    for k in PEER:
        assert getattr(pa, k) == getattr(pb, k), k
    assert a._rr == b._rr and a.n_active == b.n_active
    va, vb = vars(pa.cc), vars(pb.cc)
    assert va.keys() == vb.keys()
    for k in va:  # (floats bit for bit: == would let -0.0 pass for 0.0, and NaN fail itself)
        x, y = va[k], vb[k]
        assert type(x) is type(y) or {type(x), type(y)} <= {int, float}, (k, x, y)
        assert x == y or (x != x and y != y), (k, x, y)


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), mode=st.sampled_from(sorted(MODES)))
def test_the_c_steady_state_equals_the_python_sender(seed, mode):
    """Sends to one peer, one to three in progress at once (started, finished and caught mid-send by a caller as
    a ring's segments are), driven through the same events."""
    rng = np.random.default_rng(seed)
    now = 1.0
    a, b = _sender(MODES[mode], False), _sender(MODES[mode], True)
    assert a._pick_peer is None and b._pick_peer is not None
    burst = a.opts.burst
    clock_skew = int(rng.integers(0, 1 << 32))  # the receiver's clock: any offset from ours
    queue = 0.0  # the forward queue the receiver's timestamps show (seconds)
    picked = acked = 0
    tid = 5

    def start() -> None:
        nonlocal tid
        n = int(rng.integers(40, 400)) * 356
        x = rng.standard_normal(n).astype(np.float32)
        loss_bound = float(rng.choice([0.0, 0.0, 0.05]))
        for s in (a, b):
            _start(s, x, tid, loss_bound, now)
        tid += 1

    start()
    for _ in range(int(rng.integers(20, 160))):
        ev = rng.random()
        act_a, act_b = a.peers[1].active, b.peers[1].active
        if ev < 0.4:  # the I/O thread picks a burst
            now += float(rng.choice([0.0, rng.uniform(0, 2e-4), rng.uniform(0, 5e-3)]))
            ja, wa = a.pick_burst(now)
            rb = _rxlane.pick_peer(b, b.peers[1], now, burst, b.opts.send_buf) if act_b else (None, 1.0)
            assert rb is not None
            if ja is None:
                assert rb == (None, wa)
            else:
                o, _, seqs, nbytes = ja
                assert rb[0].tid == o.tid and rb[1:] == (seqs[0], seqs[-1] + 1, nbytes)
                assert seqs == list(range(seqs[0], seqs[-1] + 1))
                picked += 1
        elif ev < 0.8 and act_a:  # a cumulative ACK of part or all of what one send sent
            i = int(rng.integers(len(act_a)))
            o = act_a[i]
            if o.next_seq <= o.cum_acked and rng.random() < 0.8:
                continue
            hi = int(rng.integers(o.cum_acked, o.next_seq + 1))
            now += float(rng.uniform(0, 3e-3))
            if rng.random() < 0.3:
                queue = float(rng.choice([0.0, rng.uniform(0, 2e-3), rng.uniform(2e-3, 0.03)]))
            ts = (int((now - queue * rng.random()) * 1e6) + clock_skew) & 0xFFFFFFFF
            ecn = bool(rng.random() < 0.15)
            on_cum_ack(a.peers[1], o, hi, ecn, now, ts)
            _rxlane.cum_ack(b.peers[1], act_b[i], hi, ecn, now, ts)
            acked += 1
        elif ev < 0.86 and len(act_a) < 3:  # another send starts (a ring's next segment)
            start()
        elif ev < 0.9 and act_a:  # a caller is sending one's first burst (the I/O thread leaves it alone), or
            i = int(rng.integers(len(act_a)))  # is done with it
            act_a[i].sending = act_b[i].sending = not act_a[i].sending
        elif ev < 0.93 and act_a:  # a send ends (its DONE)
            i = int(rng.integers(len(act_a)))
            oa, ob = act_a[i], act_b[i]
            a.finish(a.peers[1], oa, None)
            b.finish(b.peers[1], ob, None)
        elif ev < 0.96:  # a retransmission timeout (Sender._timeout's window part): a later ACK may undo it
            fired = now - float(rng.uniform(0, 0.01))
            for s in (a, b):
                s.peers[1].cc.on_timeout()
                s.peers[1].rto_fired = fired
        elif act_a:  # a packet resent (Karn: no RTT sample from it)
            i = int(rng.integers(len(act_a)))
            o = act_a[i]
            if o.next_seq > o.cum_acked:
                s = int(rng.integers(o.cum_acked, o.next_seq))
                act_a[i].retx[s] = act_b[i].retx[s] = True
        _same(a, b)
    assert picked + acked


def test_the_steady_state_declines_what_is_not_its_shape():
    """pick_peer decides only while one peer has sends in progress, none with a retransmission to send, and the
    send buffer as it is; otherwise it returns None and changes nothing (the Python pick decides). A send a caller
    is sending is passed over, as pick_burst passes it over."""
    x = np.ones(356 * 50, np.float32)
    s, ref = _sender(MODES["default"], True), _sender(MODES["default"], True)
    o, o_ref = _start(s, x, 5, 0.0, 1.0), _start(ref, x, 5, 0.0, 1.0)
    p = s.peers[1]
    burst, buf = s.opts.burst, s.opts.send_buf
    o.retxq.append(3)
    o_ref.retxq.append(3)
    assert _rxlane.pick_peer(s, p, 1.0, burst, buf) is None
    o.retxq.clear()
    o_ref.retxq.clear()
    assert _rxlane.pick_peer(s, p, 1.0, burst, buf + 1) is None  # (SO_SNDBUF would change)
    s.n_active = 2  # (a send to another peer in progress)
    assert _rxlane.pick_peer(s, p, 1.0, burst, buf) is None
    s.n_active = 1
    _same(s, ref)
    o.sending = o_ref.sending = True
    assert _rxlane.pick_peer(s, p, 1.0, burst, buf) == (None, 1.0)  # (its caller sends it: nothing else to send)
    o2, o2_ref = _start(s, x, 6, 0.0, 1.0), _start(ref, x, 6, 0.0, 1.0)
    got = _rxlane.pick_peer(s, p, 1.0, burst, buf)
    assert got is not None and got[0] is o2 and got[1:] == (0, burst, burst * 356 * 4)


def test_bad_state_is_an_error_not_a_crash():
    x = np.ones(356 * 10, np.float32)
    s = _sender(MODES["default"], True)
    o = _start(s, x, 5, 0.0, 1.0)
    p = s.peers[1]
    with pytest.raises(ValueError, match="ACK of 11 packets"):
        _rxlane.cum_ack(p, o, 11, False, 1.0, 0)
    o.next_seq = 5
    o.sent_time = o.sent_time[:-1]
    with pytest.raises(ValueError, match="sent_time"):
        _rxlane.cum_ack(p, o, 5, False, 1.0, 0)
    with pytest.raises(TypeError, match="6 arguments"):
        _rxlane.cum_ack(p, o, 5)


# --- sends in rx_wait, end to end -------------------------------------------------------------------------------------

KEY = bytes(range(60, 76))
JOB, NONCE = 9, 0x4321


class _Peer:
    """A silent rank 1 on a real socket, answering the sends of rank 0's endpoint (``native_wait`` on or off;
    ``tids``: the sends, started at once as a ring's segments are) with ACKs it builds itself, in lock step: each
    answer (about the send ``self.tid``), then every data packet the endpoint sends for it, until it goes quiet. A
    small fixed window (4 packets, no delay signal, no ACK-delay stretch, RTOs of seconds) makes every burst depend
    only on the ACKs, not on the clock, so both loops must send the same packets for the same answers."""

    def __init__(self, native_wait: bool, x: np.ndarray, tids: tuple[int, ...] = (5,)):
        from host.transport import Endpoint
        from host.transport.chunking import payload_capacity

        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.1)
        mss = payload_capacity(1500)
        ccp = CCParams(mss=mss, init_cwnd_pkts=4, max_cwnd_bytes=4 * mss, delay_target=None, hystart_delay=None,
                       probe_delay=None, ack_delay_comp=False, rto_min=5.0, rto_max=10.0, rto_init=5.0)
        self.ep = Endpoint(0, {0: ("127.0.0.1", 0), 1: self.sock.getsockname()}, JOB, NONCE,
                           Options(mtu=1500, native_wait=native_wait, cc=ccp, peer_timeout=30, linger=0.0), key=KEY)
        self.to = self.ep._io.sock.getsockname()
        self.total = -(-x.size // 356)
        self.got: list[tuple[int, int, int]] = []  # (transfer, seq, flags) of every data packet, in order
        self.steps: list[list[tuple[int, int]]] = []  # the (transfer, seq)s each answer brought
        self.hs = [self.ep.send(1, x, transfer_id=tid) for tid in tids]
        self.h = self.hs[0]
        self.tid, self.cum, self.prev = tids[0], 0, 0
        self._collect()

    def focus(self, tid: int) -> None:
        """Answer about send ``tid`` from now on."""
        self.tid, self.cum, self.prev = tid, 0, 0
        self._collect()

    def _collect(self) -> None:
        seqs = []
        while True:
            try:
                d = self.sock.recv(65536)
            except socket.timeout:
                break
            w = HDR.unpack_from(d)
            if w[W_VT] & 0x0F == MsgType.CONTROL:
                continue  # (a liveness probe: the peer had not been heard from yet)
            assert w[W_VT] & 0x0F == MsgType.DATA and packet_tag(KEY, d[:48], d[48:]) == w[W_TAG]
            seqs.append((w[W_TID], w[W_SEQ]))
            self.got.append((w[W_TID], w[W_SEQ], w[W_FLAGS]))
        while self.cum < self.total and any(t == self.tid and s == self.cum for t, s, _ in self.got):
            self.cum += 1
        self.steps.append(seqs)

    def answer(self, kind: str, upto: int | None = None) -> None:
        """One answer: ``kind`` ack (cumulative, of ``upto`` packets or all in), ecn (the same with ECN-Echo), dup
        (the last ACK again),
        bitmap (an ACK of the next two packets as a bitmap above the current base), nack (of the first packet
        not ACKed: one retransmission), forged (a wrong tag),
        foreign (another job), stale (another transfer), done (the DONE)."""
        buf = bytearray(48 + (1 if kind in ("bitmap", "nack") else 0) + (CTL.size if kind == "done" else 0))
        tid, job, seq, count = self.tid, JOB, min(self.cum, upto) if upto is not None else self.cum, 0
        mt, flags = MsgType.ACK, 0
        if kind == "ecn":
            flags = int(Flag.ECN_ECHO)
        elif kind == "dup":
            seq = self.prev
        elif kind == "bitmap":
            seq, count = self.prev, 2
            buf[48] = 0b11000000 if self.cum >= self.prev + 2 else 0
        elif kind == "nack":  # (of the first packet sent and not ACKed)
            mt, seq, count = MsgType.NACK, self.prev, 1
            buf[48] = 0b10000000
        elif kind == "foreign":
            job += 1
        elif kind == "stale":
            tid = 99
        elif kind == "done":
            mt = MsgType.CONTROL
            CTL.pack_into(buf, 48, CTL_DONE, self.total)
        pack_control_header(buf, mt, flags=flags, rank=1, job_id=job, transfer_id=tid, seq=seq, total=self.total,
                            count=count, nonce=NONCE, offset=clock_us(time.monotonic()))
        tag = packet_tag(KEY, buf[:48], buf[48:])
        buf[W_TAG_AT:48] = (tag ^ (1 if kind == "forged" else 0)).to_bytes(8, "big")
        self.sock.sendto(bytes(buf), self.to)
        if kind in ("ack", "ecn"):
            self.prev = seq
        self._collect()

    def close(self) -> None:
        self.ep.close()
        self.sock.close()


def test_a_send_in_the_native_wait_equals_the_python_loop():
    """The sender's steady state in ``_rxlane.rx_wait`` (one send: its cumulative ACKs taken and its next bursts
    sent natively) against the Python loop: the same answers -- plain ACKs of one to three packets, ECN-Echo
    (a cut), a forged, a foreign and a stale ACK, a duplicate, an ACK with a bitmap and a NACK (the Python
    sender's, called from the wait), the DONE -- bring the same data packets, burst by burst (the NACKed one
    again), the same counters and the same window; most ACKs took no Python loop (``io_native_wakes``)."""
    x = np.random.default_rng(3).standard_normal(60 * 356).astype(np.float32)
    script = [("ack", 2), ("ack", None), ("ecn", None), ("forged", None), ("foreign", None), ("stale", None),
              ("ack", None), ("dup", None), ("ack", None), ("bitmap", None), ("ack", None), ("nack", None),
              ("ack", None)]
    twins = []
    try:
        for native in (True, False):  # (one after the other: a send left waiting would time out)
            t = _Peer(native, x)
            twins.append(t)
            for kind, upto in script:
                t.answer(kind, upto)
            rng = np.random.default_rng(8)
            for _ in range(200):
                if t.cum >= t.total:
                    break
                t.answer("ack", t.prev + int(rng.integers(1, 4)))
            assert t.cum == t.total, (t.cum, t.total)
            t.answer("done")
            stats = t.h.wait(10)
            assert stats["packets_sent"] == t.total + 1 and stats["retransmissions"] == 1
        a, b = twins
        assert a.steps == b.steps and a.got == b.got
        keys = ("tx_data_packets", "acks_rx", "ecn_echo_rx", "stale_feedback", "foreign",
                "rejected_by_field", "malformed", "retransmissions", "dones_rx", "transfers_sent", "rx_datagrams")
        sa, sb = (t.ep.stats() for t in twins)
        assert {k: sa[k] for k in keys} == {k: sb[k] for k in keys}
        assert sa["foreign"] == 1 and sa["stale_feedback"] == 1 and sa["rejected_by_field"] == {"tag": 1}
        assert sa["ecn_echo_rx"] == 1 and sa["transfers_sent"] == 1
        ca, cb = (t.ep.stats()["peers"][1] for t in twins)
        for k in ("cwnd", "ssthresh", "alpha", "cuts", "ecn_marks", "timeouts"):
            assert ca[k] == cb[k], k
        assert ca["cuts"] >= 1
        print("NATIVE_WAKES", sa["io_native_wakes"], "of", sa["acks_rx"], "ACKs")
        assert sa["io_native_wakes"] >= sa["acks_rx"] // 2 and sb["io_native_wakes"] == 0
    finally:
        for t in twins:
            t.close()


def test_sends_to_one_peer_in_the_native_wait_equal_the_python_loop():
    """Three sends to one peer at once (a pipelined ring's first step): the wait takes the cumulative ACKs of each
    (the send named by the ACK), picks the first send in order with packets ready, and takes a DONE, a stale ACK and
    an ACK with a bitmap through the Python sender from within the wait; the same data packets, burst by burst, the
    same counters and window as the Python loop, and most ACKs took no Python loop."""
    x = np.random.default_rng(4).standard_normal(30 * 356).astype(np.float32)
    twins = []
    try:
        for native in (True, False):
            t = _Peer(native, x, tids=(5, 6, 7))
            twins.append(t)
            rng = np.random.default_rng(9)
            for tid in (5, 6, 7):
                t.focus(tid)
                first = True
                for _ in range(200):
                    if t.cum >= t.total:
                        break
                    t.answer("ack", t.prev + int(rng.integers(1, 4)))
                    if first and tid == 6:  # (a stale ACK, and a bitmap above the base, mid-send)
                        t.answer("stale")
                        t.answer("bitmap")
                        first = False
                assert t.cum == t.total, (tid, t.cum, t.total)
                t.answer("done")
            for h in t.hs:
                assert h.wait(10)["packets_sent"] == t.total
        a, b = twins
        assert a.steps == b.steps and a.got == b.got
        assert {tid for tid, _, _ in a.got} == {5, 6, 7}
        keys = ("tx_data_packets", "acks_rx", "stale_feedback", "retransmissions", "dones_rx", "transfers_sent",
                "rx_datagrams")
        sa, sb = (t.ep.stats() for t in twins)
        assert {k: sa[k] for k in keys} == {k: sb[k] for k in keys}
        assert sa["transfers_sent"] == 3 and sa["dones_rx"] == 3 and sa["stale_feedback"] == 1
        ca, cb = (t.ep.stats()["peers"][1] for t in twins)
        for k in ("cwnd", "ssthresh", "alpha", "cuts", "timeouts"):
            assert ca[k] == cb[k], k
        assert sa["io_native_wakes"] >= sa["acks_rx"] // 2 and sb["io_native_wakes"] == 0
    finally:
        for t in twins:
            t.close()


def _endpoint_pair(mtu: int, **options) -> list:
    """Ranks 0 and 1, each an endpoint on its own real loopback socket (native lanes and wait as configured;
    ``options``: further ``Options`` fields)."""
    from host.transport import Endpoint

    socks = []
    for _ in range(2):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    amap = {r: s.getsockname() for r, s in enumerate(socks)}
    return [Endpoint(r, amap, JOB, NONCE, Options(mtu=mtu, linger=0.0, **options), key=KEY, sock=socks[r])
            for r in range(2)]


@pytest.mark.parametrize("mtu", [1500, 65535])
def test_the_native_wait_runs_at_every_mtu(mtu):
    """A send and its receive between two real endpoints at MTU 1500 and at loopback's path MTU (64 KiB datagrams,
    whose ACK bitmaps may report 8 * (mss - 8) packets): the data arrives whole, most socket wake-ups are native,
    and the I/O threads met no internal error (an exception in the native wait is caught, counted and logged, so
    only this counter shows it)."""
    eps = _endpoint_pair(mtu)
    try:
        x = np.random.default_rng(5).standard_normal(3 << 20).astype(np.float32)  # 12 MiB
        out = np.zeros_like(x)
        for rep in range(3):
            h = eps[0].send(1, x, transfer_id=10 + rep)
            eps[1].recv(0, 10 + rep, out=out, timeout=30)
            h.wait(30)
            assert np.array_equal(out, x)
        stats = [e.stats() for e in eps]
        assert [s["internal_errors"] for s in stats] == [0, 0]
        native = sum(s["io_native_wakes"] for s in stats)
        sock = sum(s["io_wakes_socket"] for s in stats)
        print("MTU", mtu, "native", native, "of", sock)
        assert native > 0
    finally:
        for e in eps:
            e.close()


def test_one_peers_bursts_leave_from_the_native_wait_not_the_python_loop():
    """Sends both ways at once between two real endpoints (a ring step: four segments each way): once the wait may
    take one peer's sends, the I/O thread's Python loop picks none of their bursts itself, not even after the wait
    returned for something else (a datagram of another transfer, a completion): it goes straight back to the wait,
    whose first step picks. Only a pick the wait hands back (a retransmission queued) is the loop's. The data
    arrives whole either way."""
    eps = _endpoint_pair(9000)
    loop_bursts = [0, 0]
    try:
        for r, ep in enumerate(eps):
            io, inner = ep._io_thread, ep._tx.transmit

            def counted(job, _r=r, _io=io, _inner=inner):
                if threading.current_thread() is _io:
                    loop_bursts[_r] += 1
                return _inner(job)

            ep._tx.transmit = counted
        rng = np.random.default_rng(6)
        segs = [[rng.standard_normal(1 << 20).astype(np.float32) for _ in range(4)] for _ in range(2)]
        outs = [[np.zeros(1 << 20, np.float32) for _ in range(4)] for _ in range(2)]
        for rep in range(3):
            recvs = [eps[r].post_recv(1 - r, 100 * rep + k, outs[r][k], timeout=30) for r in range(2) for k in range(4)]
            sends = [eps[r].send(1 - r, segs[r][k], transfer_id=100 * rep + k) for r in range(2) for k in range(4)]
            for h in recvs + sends:
                h.wait(30)
            for r in range(2):
                for k in range(4):
                    assert np.array_equal(outs[r][k], segs[1 - r][k])
        stats = [e.stats() for e in eps]
        assert [s["internal_errors"] for s in stats] == [0, 0]
        for r, s in enumerate(stats):
            bursts = s["tx_data_packets"] // Options().burst
            print("rank", r, "loop bursts", loop_bursts[r], "of about", bursts, "retransmissions", s["retransmissions"])
            assert bursts >= 100
            assert loop_bursts[r] <= s["transfers_sent"] + s["retransmissions"], (r, loop_bursts[r], s)
    finally:
        for e in eps:
            e.close()


class _ReorderingRelay:
    """A UDP relay between ranks 0 and 1 (two real sockets, one thread): rank 0 addresses rank 1 at ``to1`` and rank
    1 addresses rank 0 at ``to0``; every datagram is forwarded from the other socket, so each rank sees its peer's
    datagrams come from the address it has for it. Every ``every``-th data datagram from rank 0 is held back until
    the next one has gone (a swap, as per-packet spraying makes), so rank 1's ACKs carry bitmaps; ``bitmap_acks``
    counts the ACKs with a bitmap it forwarded to rank 0."""

    def __init__(self, every: int = 5):
        self.s0, self.s1 = (socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(2))
        for s in (self.s0, self.s1):
            s.bind(("127.0.0.1", 0))
            s.settimeout(0.05)
        self.to1, self.to0 = self.s0.getsockname(), self.s1.getsockname()
        self.every, self.bitmap_acks, self.peer = every, 0, {}
        self._stop = False
        self._t = threading.Thread(target=self._run, daemon=True)

    def start(self, addr0, addr1) -> None:
        self.peer = {0: addr0, 1: addr1}
        self._t.start()

    def _run(self) -> None:
        import select as _select
        held, n = None, 0
        while not self._stop:
            ready, _, _ = _select.select([self.s0, self.s1], [], [], 0.05)
            for s in ready:
                try:
                    d = s.recv(65535)
                except OSError:
                    continue
                mt = d[0] & 0x0F if d else -1
                if s is self.s0:  # from rank 0, to rank 1
                    if mt == MsgType.DATA:
                        n += 1
                        if held is None and n % self.every == 0:
                            held = d
                            continue
                    self.s1.sendto(d, self.peer[1])
                    if held is not None and mt == MsgType.DATA:
                        self.s1.sendto(held, self.peer[1])
                        held = None
                else:  # from rank 1, to rank 0
                    if mt == MsgType.ACK and len(d) > 48:
                        self.bitmap_acks += 1
                    self.s0.sendto(d, self.peer[0])
            if not ready and held is not None:  # (the last one: let it go)
                self.s1.sendto(held, self.peer[1])
                held = None

    def close(self) -> None:
        self._stop = True
        self._t.join(5)
        self.s0.close()
        self.s1.close()


def test_acks_with_bitmaps_are_taken_in_the_native_wait():
    """Data from rank 0 to rank 1 through a relay that swaps packets (rank 1's ACKs then carry bitmaps): rank 0's
    native wait takes those ACKs itself (``_txstep.h``'s on_ack), as it takes cumulative ones; before, each went
    back to the Python sender (``Intake.native_feedback``), ~40 us of interpreter apiece. Only a stale one (its send
    finished) may still take that path. The data arrives whole, and rank 0 counted every ACK."""
    from host.transport import Endpoint

    relay = _ReorderingRelay()
    socks = []
    for _ in range(2):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    relay.start(socks[0].getsockname(), socks[1].getsockname())
    amaps = [{0: socks[0].getsockname(), 1: relay.to1}, {0: relay.to0, 1: socks[1].getsockname()}]
    eps = [Endpoint(r, amaps[r], JOB, NONCE, Options(mtu=1500, linger=0.0), key=KEY, sock=socks[r]) for r in range(2)]
    acks_to_python = [0]
    try:
        intake = eps[0]._intake
        inner = intake.native_feedback

        def counted(pos, nbytes, now):
            if intake._io.rxmv[pos] & 0x0F == MsgType.ACK:
                acks_to_python[0] += 1
            return inner(pos, nbytes, now)

        intake.native_feedback = counted
        rng = np.random.default_rng(7)
        for rep in range(4):
            x = rng.standard_normal(1 << 18).astype(np.float32)  # 1 MiB, ~730 packets at MTU 1500
            out = np.zeros_like(x)
            r = eps[1].post_recv(0, 50 + rep, out, timeout=30)
            eps[0].send(1, x, transfer_id=50 + rep).wait(30)
            r.wait(30)
            assert np.array_equal(out, x)
        s0 = eps[0].stats()
        print("bitmap ACKs", relay.bitmap_acks, "ACKs to Python", acks_to_python[0], "stale", s0["stale_feedback"],
              "native wakes", s0["io_native_wakes"])
        assert [e.stats()["internal_errors"] for e in eps] == [0, 0]
        assert relay.bitmap_acks >= 50
        assert s0["io_native_wakes"] > 0
        assert acks_to_python[0] <= s0["stale_feedback"], (acks_to_python[0], s0["stale_feedback"])
        assert s0["acks_rx"] + s0["stale_feedback"] >= relay.bitmap_acks
    finally:
        for e in eps:
            e.close()
        relay.close()


def test_a_stale_done_is_counted_in_the_native_wait():
    """Repeated DONEs (a one-packet transfer's copies, Options.small_copies; answers to probes) of a send that has
    finished arrive while rank 0's native wait drives another send to the same peer: the wait counts each as stale
    feedback itself, as the Python sender would (the source heard, the datagram, ``stale_feedback``), instead of
    calling back into Python (``Intake.native_feedback``, ~70 us apiece). The live DONE still goes to the Python
    sender, which finishes the send."""
    eps = _endpoint_pair(1500, small_copies=1)  # (one DONE per transfer: the only stale ones are those sent below)
    to_python = {"stale": 0, "live": 0}
    try:
        small = np.arange(8, dtype=np.int64)
        r = eps[1].post_recv(0, 7, np.zeros_like(small), timeout=30)
        eps[0].send(1, small, transfer_id=7).wait(30)
        r.wait(30)
        intake, sender = eps[0]._intake, eps[0]._sender
        inner = intake.native_feedback

        def counted(pos, nbytes, now):
            mv = intake._io.rxmv
            if mv[pos] & 0x0F == MsgType.CONTROL:
                tid = int.from_bytes(mv[pos + 12: pos + 16], "big")
                to_python["live" if tid in sender.peers[1].out else "stale"] += 1
            return inner(pos, nbytes, now)

        intake.native_feedback = counted
        before = eps[0].stats()["stale_feedback"]
        x = np.random.default_rng(3).standard_normal(1 << 23).astype(np.float32)  # 32 MiB: ~23,000 packets
        out = np.zeros_like(x)
        r = eps[1].post_recv(0, 8, out, timeout=30)
        h = eps[0].send(1, x, transfer_id=8)
        sent = 0
        while not h._event.is_set() and sent < 400:
            with eps[1]._lock:
                eps[1]._receiver.send_done(0, 7, 1, 1)  # (transfer 7's DONE again)
            sent += 1
            time.sleep(0.0002)
        h.wait(30)
        r.wait(30)
        assert np.array_equal(out, x)
        s0 = eps[0].stats()
        print("stale DONEs sent", sent, "counted", s0["stale_feedback"] - before, "to Python from the wait", to_python)
        assert sent >= 20 and s0["io_native_wakes"] > 0
        assert [e.stats()["internal_errors"] for e in eps] == [0, 0]
        assert s0["stale_feedback"] - before == sent  # every one counted once, wherever it was taken
        assert to_python["stale"] == 0 and to_python["live"] <= 1
    finally:
        for e in eps:
            e.close()
