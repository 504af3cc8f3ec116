"""The sender: every transfer this rank sends, from its packet plan to the receiver's DONE.

What it does, per peer (:class:`PeerState`) and per transfer (:class:`OutTransfer`):

* chooses bursts (:meth:`Sender.pick_burst`): queued retransmissions first, then new packets in seq order, under the
  peer's congestion window and pacing rate (``cc.py``), peers served round-robin, a transfer of higher priority
  first within a peer;
* takes feedback (:meth:`Sender.on_feedback`): an ACK (cumulative base and bitmap) marks packets delivered, feeds
  the window its RTT, one-way queueing delay and ECN echo, and judges lost (RACK-like, by send order and time) the
  packets sent well before one now ACKed; a NACK queues the named packets (one sent too recently is deferred,
  keeping its place in the window); a DONE ends the transfer;
* retransmits only protected packets: a drop-eligible packet judged lost is not sent again (the receiver counts it
  lost and zero-fills it), unless the receiver names it in a NACK (its own loss bound is tighter);
  retransmissions go before new data, across a peer's transfers;
* runs the sender's timers (:meth:`Sender.timers`): a peer silent past ``peer_timeout`` fails its sends; a
  retransmission timeout (no packet newly ACKed for an RTO while packets are in flight, retransmissions wait or a
  send waits for its DONE, whatever NACKs arrive meanwhile) restarts the window and sends one probe per transfer,
  not a mass retransmission; a fully sent transfer without progress of its own for an RTO gets a tail probe; a
  peer without an RTT sample of its own starts a send with the RTO of the peers already measured
  (:meth:`Sender.seed`, ``cc.seed_rto``), not ``rto_init``: a one-packet message lost on the way (a collective's
  loss report to a peer the call never sent to) has no later packet to reveal it, and only that RTO recovers it;
* plans a send's packets (:func:`plan_send`: the policy's classes, the headers), a large reliable send in slices,
  the next slice classified on the I/O thread (:meth:`Sender.classify_slices`).

Bursts leave through ``transmit.Transmitter``; a burst the full send buffer refused comes back by
:meth:`Sender.unsend`. Everything here runs under the endpoint's lock, which the sender shares.

Promises: a send's handle is finished exactly once (:meth:`Sender.finish`); ``PeerState.inflight`` is the payload
bytes of its packets in flight, drop-eligible packets sent for the first time not counted (they never hold the
window: ``OutTransfer.n_elig``); the window cannot wedge: a NACKed packet is queued within :func:`nack_gap` (or at
the next timeout) and sent before any new data, and a window full of lost packets times out an RTO after the last
progress (``tests/host/test_loss_recovery.py``); an ACK never counts a packet that was not sent;
:func:`on_cum_ack` leaves exactly the state :func:`on_ack` leaves for the ACKs it takes
(``tests/host/test_endpoint.py`` checks both).
"""

from __future__ import annotations

import bisect
import itertools
import logging
import math
import socket
import threading
import time
from collections import deque
from typing import Callable

import numpy as np

from host import wire
from host.policy import Policy, as_float_view
from host.transport.api import Options, SendHandle, TransportError
from host.transport.cc import CCParams, DctcpWindow, seed_rto
from host.transport.chunking import chunk_elems, plan_in_order, plan_packets, tos_byte, write_headers
from host.transport.control import (CTL, CTL_DONE, DONE_UNKNOWN, FLAGS_AT, W_COUNT, W_FLAGS, W_OFFSET, W_RANK, W_SEQ,
                                    W_TID, W_TID_HI, W_TOTAL, REORDER_TIME, clock_us)
from host.transport.packetio import PacketSocket, _rxlane
from host.transport.stats import Counters
from host.transport.tensors import TensorView
from host.wire import DType, Flag, MsgType

__all__ = ["OutTransfer", "PeerState", "Sender", "nack_gap", "on_ack", "on_cum_ack", "on_nack", "pace", "plan_send",
           "slice_classifier"]

log = logging.getLogger("host.transport")

# Loss detection by ACK (RACK-like, RFC 8985): a packet is lost once a packet sent at least REORDER_PKTS packets
# and one reordering window later has been ACKed. The count alone (TCP's dupthresh) is not enough: packets of one
# burst can arrive out of order (sprayed over paths, or on Linux veth/loopback paths without RPS, where each CPU's
# backlog delivers the packets that CPU dequeued; a whole GRO buffer can arrive behind the next one). The window
# is a quarter of the minimum RTT, at least REORDER_TIME (as RACK's reo_wnd; docs/decisions.md).
REORDER_PKTS = 3
_F_ECN_ECHO, _F_RETRANSMIT = int(Flag.ECN_ECHO), int(Flag.RETRANSMIT)

#: Packets up to which a send's byte prefix sums come from its Python list of lengths, not numpy.
_SMALL_PREFIX = 256

#: Payload bytes up to which a one-packet transfer's packet goes out in ``Options.small_copies`` copies: small
#: messages (loss reports, tokens, scalars), whose copies cost less than their headers' share of any link.
COPY_BYTES = 1024


class OutTransfer:
    """Sender state of one transfer."""

    def __init__(self, peer: int, tid: int, tv: TensorView, plan, created: int, now: float,
                 ready: int | None = None):
        self.peer, self.tid, self.tv, self.plan, self.created = peer, tid, tv, plan, created
        n = plan.total
        ready = n if ready is None else ready
        self.total = n
        hdr = plan.headers.view(np.uint8)
        self.priority = int(hdr[2]) >> 5 if n else 0
        self.hdr = memoryview(hdr)
        self.payload = memoryview(tv.raw)
        # seqs below ``ready`` have their headers written and may be sent (a send classified in slices raises it
        # with extend(); the per-seq lists below cover exactly these seqs)
        self.ready = ready
        self.offs = plan.offsets[:ready].tolist()
        self.lens = plan.lengths[:ready].tolist()
        self.elig = plan.eligible[:ready].tolist()
        self.tos = (tos_byte(self.priority, False), tos_byte(self.priority, True))  # by eligibility: tos[elig[seq]]
        # the same as sendmsg control messages, for the Python send path
        self.anc = tuple([(socket.IPPROTO_IP, socket.IP_TOS, bytes([t]))] for t in self.tos)
        # per-seq flags: rows of one allocation (each numpy call costs 5-20 us on the cold cache a send starts on)
        self.acked, self.inflight, self.queued, self.retx = np.zeros((4, n), bool)
        # drop-eligible packets are the seqs below this (chunking's seq order: eligible positions first). They are
        # never counted in flight: they do not hold the window (pacing alone spaces them), so a run of them dropped
        # (a congested switch drops exactly those, every one of them at worst) cannot leave a window full of
        # packets that no ACK will free. Only a NACK (a receiver whose own bound is tighter) puts one in flight,
        # as a retransmission.
        self.n_elig = int(np.count_nonzero(plan.eligible))
        self.sent_order = np.full(n, -1, np.int64)
        self.sent_time = np.zeros(n, np.float64)
        self.retxq: deque[int] = deque()
        self.next_seq = 0
        self.cum_acked = 0
        self.acked_hi = 0  # 1 + the highest seq ACKed: above cum_acked only while a hole is open
        # bytes before each seq (Python ints: bisected per burst, subtracted per ACK)
        self.cuml = (list(itertools.accumulate(self.lens, initial=0)) if ready <= _SMALL_PREFIX else
                     np.concatenate(([0], np.cumsum(plan.lengths[:ready], dtype=np.int64))).tolist())
        self.order = 0
        self.pkts_sent = self.retransmissions = self.ecn_echoes = self.acks = self.nacks = 0
        self.delivered: int | None = None
        self.start = now
        # forward progress of this transfer: when a packet of it was last newly ACKed (or it started), when a
        # packet of it last left, and its tail probes (Sender.timers: a fully sent transfer silent for an RTO)
        self.progress = self.last_sent = now
        self.probe_at = 0.0
        self.probes = 0
        # NACKed packets sent too recently to resend yet (the NACK may have crossed a retransmission): seq -> when
        # they are queued (Sender.timers); they stay counted in flight until then, so new data cannot take their
        # place in the window
        self.deferred: dict[int, float] = {}
        self.layer = 0
        self.loss_bound = 0.0
        self.handle = SendHandle(peer, tid)
        # the caller of send() is transmitting this transfer's first burst outside the lock: the I/O thread leaves
        # the transfer alone until it is done, or its next burst would race the first one onto the wire and
        # arrive ahead of it (the receiver would then NACK everything before it)
        self.sending = False
        # a send classified in slices, until its last slice is: (classify(lo, hi), packets per slice); the I/O
        # thread classifies the next slice when the unsent headers run low (Sender.classify_slices)
        self.slicer: tuple[Callable, int] | None = None
        # times each transmission of this transfer's packet goes out back to back (Options.small_copies: a small
        # one-packet transfer; Transmitter.transmit sends the copies, and the C pick leaves such a send to Python)
        self.copies = 1

    def has_work(self) -> bool:
        return bool(self.retxq) or self.next_seq < self.ready

    def extend(self, hi: int) -> None:
        """Seqs ``ready..hi-1`` have their headers now: make them sendable (under the endpoint's lock)."""
        lo, plan = self.ready, self.plan
        self.offs.extend(plan.offsets[lo:hi].tolist())
        self.lens.extend(plan.lengths[lo:hi].tolist())
        self.elig.extend(plan.eligible[lo:hi].tolist())
        self.cuml.extend((np.cumsum(plan.lengths[lo:hi], dtype=np.int64) + self.cuml[-1]).tolist())
        self.ready = hi


class PeerState:
    """Sender state towards one peer: its congestion window and pacing, its transfers, its timers."""

    def __init__(self, rank: int, addr: tuple[str, int], ccp: CCParams):
        self.rank, self.addr = rank, addr
        self.cc = DctcpWindow(ccp)
        self.inflight = 0
        self.active: list[OutTransfer] = []
        self.out: dict[int, OutTransfer] = {}
        self.next_send = 0.0
        self.last_feedback = 0.0  # any ACK, NACK or DONE: the peer answers (its peer timeout counts from here)
        self.progress = 0.0  # a packet newly ACKed or a send DONE (or the window idle until then): its RTO clock
        self.rto_at = 0.0  # no retransmission timeout before this (the backed-off RTO after one fired)
        self.rto_fired = 0.0  # time of the last timeout, until the next ACK judges it (spurious or not)
        self.owd_base: int | None = None  # first (receiver clock - send time) sample, µs mod 2^32
        self.owd_min = 0  # smallest one-way delay seen, µs relative to owd_base

    def one_way_queue(self, ts: int, sent: float) -> float:
        """Forward queueing delay of a packet sent at ``sent`` (our clock) whose ACK left the receiver at ``ts``
        (its 32-bit µs clock): one-way delay over the smallest seen. The clocks' offset cancels; their drift over
        a run is negligible against milliseconds of queue."""
        raw = (ts - clock_us(sent)) & 0xFFFFFFFF
        if self.owd_base is None:
            self.owd_base = raw
        d = ((raw - self.owd_base + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)
        if d < self.owd_min:
            self.owd_min = d
        return (d - self.owd_min) * 1e-6


def _progress(p: PeerState, o: OutTransfer, now: float) -> None:
    """Packets of ``o`` were newly ACKed: forward progress. The RTO clock and ``o``'s tail probes start again, and
    a backed-off RTO returns to srtt + 4 rttvar (as Linux does when new data is ACKed: after a timeout every packet
    is a retransmission, so Karn's rule would otherwise keep the RTO backed off until the loss ends)."""
    o.progress = p.progress = now
    o.probes = 0
    p.rto_at = 0.0
    cc = p.cc
    if cc.backoff:
        cc.rto = cc.base_rto()  # (without a sample of its own: the seed from other peers, else rto_init)


def on_ack(p: PeerState, o: OutTransfer, base: int, bits: np.ndarray, ecn: bool, now: float, ts: int) -> None:
    """An ACK of every seq below ``base`` and of the seqs ``base + i`` set in ``bits``, sent by the receiver at its
    clock ``ts``: mark the new ones delivered, judge lost what was sent well before the newest of them (protected
    ones are queued again), and tell the window."""
    acked = o.acked
    lo = o.cum_acked
    parts = []
    if base > lo:
        parts.append(np.flatnonzero(~acked[lo:base]) + lo)
    if bits.size:
        parts.append(np.flatnonzero(bits & ~acked[base: base + bits.size]) + base)
    new = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    rtt = qdelay = None
    nbytes = 0
    if new.size:
        new = new[o.sent_order[new] >= 0]  # never trust an ACK for a packet not sent yet
    if new.size:
        acked[new] = True
        _progress(p, o, now)
        if new[-1] >= o.acked_hi:  # new is ascending
            o.acked_hi = int(new[-1]) + 1
        lens = o.plan.lengths
        nbytes = int(lens[new].sum())
        infl = new[o.inflight[new]]
        if infl.size:
            p.inflight -= int(lens[infl].sum())
            o.inflight[infl] = False
        so = o.sent_order[new]
        j = int(np.argmax(so))
        s = int(new[j])
        if not o.retx[s]:
            rtt = now - float(o.sent_time[s])
            qdelay = p.one_way_queue(ts, float(o.sent_time[s]))
        # loss detection by send order and time (see REORDER_PKTS): still in flight, sent well before
        # something now ACKed
        hi = min(o.total, base + bits.size)
        if hi > lo:
            region = slice(lo, hi)
            reo = max(REORDER_TIME, 0.25 * p.cc.min_rtt) if p.cc.min_rtt else REORDER_TIME
            lost = np.flatnonzero(o.inflight[region] & ~acked[region]
                                  & (o.sent_order[region] < int(so[j]) - REORDER_PKTS)
                                  & (o.sent_time[region] <= o.sent_time[s] - reo)) + lo
            if lost.size:
                p.inflight -= int(lens[lost].sum())
                o.inflight[lost] = False
                prot = lost[~o.plan.eligible[lost] & ~o.queued[lost]]
                if prot.size:
                    o.queued[prot] = True
                    o.retxq.extend(prot.tolist())
    c = o.cum_acked
    while c < o.total and acked[c]:
        c += 1
    o.cum_acked = c
    if p.rto_fired and new.size and np.any((o.sent_time[new] < p.rto_fired) & ~o.retx[new]):
        p.cc.undo_timeout()  # data sent before the timeout got through: the timeout was spurious
    p.rto_fired = 0.0
    p.cc.on_ack(nbytes, ecn=ecn, rtt=rtt, qdelay=qdelay, now=now)


def on_cum_ack(p: PeerState, o: OutTransfer, hi: int, ecn: bool, now: float, ts: int) -> None:
    """:func:`on_ack` for its common case, a bitmap-free ACK of everything below ``hi`` when nothing above
    ``cum_acked`` was ACKed before (no hole open) and all of it was sent: the new packets are the slice
    ``[cum_acked, hi)``, so a handful of slice operations replace the general path's fancy indexing. Nothing can
    be judged lost (every packet of the region is now ACKed). Same state afterwards as the general path
    (``tests/host/test_endpoint.py`` runs both on reordered and lossy traffic)."""
    lo = o.cum_acked
    rtt = qdelay = None
    nbytes = 0
    if hi > lo:
        o.acked[lo:hi] = True
        _progress(p, o, now)
        nbytes = o.cuml[hi] - o.cuml[lo]
        infl = o.inflight[lo:hi]
        if np.count_nonzero(infl) == hi - lo:  # (not infl.all(): numpy's Python-level wrapper costs more)
            p.inflight -= nbytes
        else:
            p.inflight -= int(o.plan.lengths[lo:hi][infl].sum())
        infl[:] = False
        s = lo + int(o.sent_order[lo:hi].argmax())
        if not o.retx[s]:
            rtt = now - float(o.sent_time[s])
            qdelay = p.one_way_queue(ts, float(o.sent_time[s]))
        o.cum_acked = o.acked_hi = hi
        if p.rto_fired and np.any((o.sent_time[lo:hi] < p.rto_fired) & ~o.retx[lo:hi]):
            p.cc.undo_timeout()
    p.rto_fired = 0.0
    p.cc.on_ack(nbytes, ecn=ecn, rtt=rtt, qdelay=qdelay, now=now)


def nack_gap(p: PeerState) -> float:
    """How long after a packet was sent a NACK of it is taken at its word: half the smoothed RTT (a NACK sooner
    than that may have crossed the packet's retransmission), at most half the largest RTO, so that a NACKed packet
    is resent within a bounded time however large a stalled RTT sample made srtt."""
    return min(0.5 * p.cc.srtt, 0.5 * p.cc.p.rto_max) if p.cc.srtt else 0.0


def on_nack(p: PeerState, o: OutTransfer, base: int, bits: np.ndarray, now: float) -> None:
    """A NACK of the seqs ``base + i`` set in ``bits``: queue them for retransmission. A packet sent less than
    :func:`nack_gap` ago is deferred to that time instead (``o.deferred``, queued by ``Sender.timers``) and keeps
    its place in the window meanwhile: freed now, its place would go to new data and the retransmission would find
    the window full."""
    seqs = np.flatnonzero(bits) + base
    seqs = seqs[o.sent_order[seqs] >= 0]
    # An ACK's base passes eligible holes (Reassembly.ack_base): a receiver whose own loss bound is tighter than
    # the sender's asks for such a packet by NACK, which overrides that ACK.
    o.acked[seqs[o.plan.eligible[seqs]]] = False
    seqs = seqs[~o.acked[seqs] & ~o.queued[seqs]]
    if not seqs.size:
        return
    gap = nack_gap(p)
    sent = o.sent_time[seqs]
    ripe = now - sent >= gap
    want = seqs[ripe]
    if want.size:
        infl = want[o.inflight[want]]
        if infl.size:
            p.inflight -= int(o.plan.lengths[infl].sum())
            o.inflight[infl] = False
        o.queued[want] = True
        o.retxq.extend(want.tolist())
        for s in want.tolist():
            o.deferred.pop(s, None)
    if not ripe.all():
        for s, t in zip(seqs[~ripe].tolist(), (sent[~ripe] + gap).tolist()):
            if s not in o.deferred:
                o.deferred[s] = t



def pace(p: PeerState, nbytes: int, now: float) -> None:
    """Pacing: the peer's next burst may leave once this one has at the pacing rate."""
    rate = p.cc.pacing_rate()
    if math.isfinite(rate):
        p.next_send = max(p.next_send, now - 0.0005) + nbytes / rate

def slice_classifier(policy: Policy, values: np.ndarray | None, counts: np.ndarray, chunk: int, layer: int):
    """``classify(lo, hi)``: the policy's classes of packets ``lo..hi-1`` as a tensor of their own (loss bound
    0), for a send classified in slices."""
    def classify(lo: int, hi: int):
        part = None if values is None else values[lo * chunk: lo * chunk + int(counts[lo:hi].sum())]
        return policy.classify(part, counts[lo:hi], layer=layer, loss_bound=0.0)
    return classify


def plan_send(tv: TensorView, opts: Options, loss_bound: float, ids: dict, *, in_slices: bool):
    """The packet plan of a send of ``tv`` (``ids``: the header's layer, rank, job id, transfer id and nonce):
    ``(plan, ready, slicer)``, where the packets below ``ready`` have their headers and ``slicer`` (or None) is
    ``(classify(lo, hi), packets per slice)`` for the rest. The policy classifies the whole tensor at once, except a
    reliable send larger than ``opts.classify_slice`` to a peer ``in_slices`` allows (not on this host): its first
    slice is classified now, the rest on the I/O thread (:meth:`Sender.classify_slices`), so the link is not idle
    while a large tensor is classified."""
    layer = ids["layer"]
    values = as_float_view(tv.array, bf16=tv.dtype == DType.BFLOAT16)
    chunk = chunk_elems(opts.mtu, tv.dtype.itemsize)
    npk = max(1, -(-tv.nelems // chunk))
    counts = np.minimum(chunk, tv.nelems - np.arange(npk, dtype=np.int64) * chunk).clip(min=0)
    per_slice = max(1, -(-opts.classify_slice // (chunk * tv.dtype.itemsize)))  # (a 4 MiB tensor: 1 slice)
    if loss_bound == 0 and opts.classify_slice > 0 and npk > per_slice and in_slices:
        classify = slice_classifier(opts.policy, values, counts, chunk, layer)
        first = classify(0, per_slice)
        plan = plan_in_order(nelems=tv.nelems, dtype=tv.dtype, mtu=opts.mtu, priority=first.priority, **ids)
        write_headers(plan, 0, per_slice, first.mag_class)
        return plan, per_slice, (classify, per_slice)
    classes = opts.policy.classify(values, counts, layer=layer, loss_bound=loss_bound)
    return plan_packets(nelems=tv.nelems, dtype=tv.dtype, mtu=opts.mtu, classes=classes, **ids), npk, None


class Sender:
    """The send side of one endpoint: its peers' windows and transfers (state under the endpoint's ``lock``)."""

    def __init__(self, opts: Options, addr_map: dict[int, tuple[str, int]], ccp: CCParams, io: PacketSocket,
                 counters: Counters, lock: threading.Lock):
        self.opts, self.addr_map, self._ccp, self._io = opts, addr_map, ccp, io
        self._counters, self._c, self._lock = counters, counters.c, lock
        self.peers: dict[int, PeerState] = {}
        self.sliced: dict[OutTransfer, None] = {}  # sends with slices still to classify (slicer), oldest first
        self._created = itertools.count()
        self._rr = 0  # the peer pick_burst looks at first
        self.n_active = 0  # transfers in progress, over all peers (the C steady state acts while all are one peer's)
        self._send_buf = opts.send_buf  # what SO_SNDBUF is set to now (see pick_burst)
        # the steady state in C (_txstep.h: on_cum_ack, on_ack with a bitmap, and the common burst while one peer
        # has sends in progress; the same state afterwards, tests/host/test_txstep.py and test_ack_scan.py); None:
        # the Python functions (Options.native off)
        native = opts.native and _rxlane is not None
        self._cum_ack = _rxlane.cum_ack if native else on_cum_ack
        self._bitmap_ack = _rxlane.bitmap_ack if native else None
        self._pick_peer = _rxlane.pick_peer if native else None

    def peer(self, rank: int) -> PeerState:
        p = self.peers.get(rank)
        if p is None:
            p = self.peers[rank] = PeerState(rank, self.addr_map[rank], self._ccp)
        return p

    def seed(self, p: PeerState) -> bool:
        """Seed the RTO of ``p``, which has no RTT sample of its own, from the peers that have (``cc.seed_rto``:
        those at its address if any, else all). Whether a seed was taken (not without a measured peer, nor during
        a backoff)."""
        rto = seed_rto(p.addr[0], ((q.addr[0], q.cc.srtt, q.cc.rttvar) for q in self.peers.values()
                                   if q is not p and q.cc.srtt is not None), p.cc.p)
        return rto is not None and p.cc.seed(rto)

    def start(self, peer: int, tid: int, tv: TensorView, plan, ready: int, now: float, *, layer: int,
              loss_bound: float, slicer: tuple[Callable, int] | None) -> OutTransfer:
        """Register a send whose packets ``0..ready-1`` have headers (``slicer``: how to classify the rest)."""
        p = self.peer(peer)
        if tid in p.out:
            raise ValueError(f"transfer {tid} to rank {peer} is already in progress")
        if not p.active and p.cc.srtt is None:
            self.seed(p)
        o = OutTransfer(peer, tid, tv, plan, next(self._created), now, ready)
        o.layer, o.loss_bound = layer, loss_bound
        if o.total == 1 and o.ready == 1 and o.lens[0] <= COPY_BYTES:
            o.copies = max(1, self.opts.small_copies)
        if slicer is not None:
            o.slicer = slicer
            self.sliced[o] = None
        if not p.active:
            p.last_feedback = now  # the peer timeout counts from the first outstanding send
        if p.inflight <= 0:
            p.progress = now  # nothing was in flight: the RTO clock starts with this send
        p.out[tid] = o
        p.active.append(o)
        self.n_active += 1
        p.active.sort(key=lambda x: (-x.priority, x.created))
        return o

    def fail_all(self, err: BaseException) -> None:
        """Fail every send in progress with ``err`` (the endpoint closes)."""
        for p in self.peers.values():
            for o in list(p.active):
                self.finish(p, o, err)

    def on_feedback(self, w: tuple, mt: int, payload: memoryview, now: float) -> None:
        """An ACK, NACK or DONE (header words ``w``, message type ``mt``) about one of this rank's sends; feedback
        for a transfer that is not in progress (or of another shape) is stale and counted so."""
        c = self._c
        p = self.peers.get(w[W_RANK])
        o = p.out.get(w[W_TID_HI] << 32 | w[W_TID]) if p is not None else None
        if o is None or w[W_TOTAL] != o.total:
            c["stale_feedback"] += 1
            return
        # Any feedback shows the peer alive (its peer timeout); only an ACK of new packets or a DONE is progress
        # (on_ack, below): a receiver that keeps NACKing a hole must not keep the RTO from firing
        p.last_feedback = now
        if mt == MsgType.CONTROL:
            if len(payload) != CTL.size or payload[0] != CTL_DONE:
                self._counters.malformed("payload")
                return
            c["dones_rx"] += 1
            p.progress = now
            p.rto_at = 0.0
            # the DONE answers the send's last packet (a one-packet send gets no ACK before it): progress that ends
            # a backoff, and an RTT sample when nothing of the send was resent (Karn; its last packet, protected,
            # arrived before the DONE left)
            # (o.last_sent is the latest sent_time, o.retransmissions counts what went out again: no numpy
            # reductions on the cold arrays of a transfer that ends here)
            p.cc.on_done(now - o.last_sent if o.next_seq and not o.retransmissions else None)
            got = CTL.unpack_from(payload)[1]
            o.delivered = None if got == DONE_UNKNOWN else got
            self.finish(p, o, None)
            return
        base, count = w[W_SEQ], w[W_COUNT]
        ecn = bool(w[W_FLAGS] & _F_ECN_ECHO)
        if mt == MsgType.ACK and not count and not len(payload) and o.acked_hi <= o.cum_acked <= base <= o.next_seq:
            c["acks_rx"] += 1  # the common ACK: purely cumulative, no hole open at the sender
            o.acks += 1
            self._cum_ack(p, o, base, ecn, now, w[W_OFFSET])
            if ecn:
                o.ecn_echoes += 1
                c["ecn_echo_rx"] += 1
            return
        if mt == MsgType.ACK and self._bitmap_ack is not None and base + count <= o.total:
            if not self._bitmap_ack(p, o, base, payload, count, ecn, now, w[W_OFFSET], REORDER_TIME, REORDER_PKTS):
                try:  # (a malformed bitmap: name its field)
                    wire.unpack_bitmap(payload, count)
                except wire.WireError as e:
                    self._counters.malformed(e.field)
                else:  # (the C check and wire's disagree: still dropped and counted, never silently)
                    self._counters.malformed("count")
                return
            c["acks_rx"] += 1
            o.acks += 1
            if ecn:
                o.ecn_echoes += 1
                c["ecn_echo_rx"] += 1
            return
        try:
            bits = wire.unpack_bitmap(payload, count)
        except wire.WireError as e:
            self._counters.malformed(e.field)
            return
        if base + count > o.total:
            self._counters.malformed("count")
            return
        if mt == MsgType.ACK:
            c["acks_rx"] += 1
            o.acks += 1
            on_ack(p, o, base, bits, ecn, now, w[W_OFFSET])
        else:
            c["nacks_rx"] += 1
            o.nacks += 1
            on_nack(p, o, base, bits, now)
        if ecn:
            o.ecn_echoes += 1
            c["ecn_echo_rx"] += 1

    def native_candidate(self) -> PeerState | None:
        """The peer whose sends the I/O thread may sleep in ``_rxlane.rx_wait`` for (under the lock, about to
        sleep): the one peer with sends in progress, when none of them has a retransmission queued, no slices are
        left to classify, and the send buffer is as :meth:`pick_burst` wants it (the shape ``_rxlane.pick_peer``
        decides for). Their cumulative ACKs and next bursts then take no Python loop. None when there is none, or
        the C lanes are off."""
        if not self.n_active or self._pick_peer is None or self.sliced or self._send_buf != self.opts.send_buf:
            return None
        for p in self.peers.values():
            if p.active:
                if len(p.active) != self.n_active or any(o.retxq or o.tid >> 63 for o in p.active):
                    return None
                return p
        return None

    def classify_slices(self) -> None:
        """On the I/O thread: classify the next slice of every sliced send with less than half a slice of written
        headers left to send, and make its packets sendable. Here and not in send()'s caller, nor in a thread of its
        own: either would hand the GIL back and forth with the I/O thread (up to the switch interval, 5 ms, per
        handoff) and delay the other flows' sends (docs/decisions.md). A policy that fails on a slice fails that
        transfer (its handle raises)."""
        with self._lock:
            due = []
            for o in list(self.sliced):
                if o.handle.done():
                    del self.sliced[o]
                elif o.ready - o.next_seq <= o.slicer[1] // 2:
                    due.append(o)
        for o in due:
            classify, per = o.slicer
            lo, hi = o.ready, min(o.total, o.ready + per)
            try:
                write_headers(o.plan, lo, hi, classify(lo, hi).mag_class)
                err = None
            except Exception as e:  # (a policy that fails on a later slice): the transfer fails, not hangs
                err = e
            with self._lock:
                if o.handle.done():  # failed meanwhile (peer timeout, close): nothing more to send
                    self.sliced.pop(o, None)
                    continue
                if err is not None:
                    self.sliced.pop(o, None)
                    self.finish(self.peers[o.peer], o, TransportError(
                        f"send of transfer {o.tid} to rank {o.peer} failed while classifying packets {lo}-{hi - 1}: "
                        f"{err!r}", o.peer))
                    continue
                o.extend(hi)
                if hi == o.total:
                    o.slicer = None
                    self.sliced.pop(o, None)

    def pick_burst(self, now: float):
        """Choose the next burst: (out, addr, seqs, payload bytes) or (None, seconds to wait)."""
        peers = [p for p in self.peers.values() if p.active]
        if not peers:
            return None, 1.0
        wait = 1.0
        k = len(peers)
        if k == 1 and self._pick_peer is not None:  # (the common case, in C)
            p = peers[0]
            r = self._pick_peer(self, p, now, self.opts.burst, self.opts.send_buf)
            if r is not None:  # (None: not its shape, a retransmission queued, say; decided below)
                if r[0] is None:
                    return r
                o, s0, s1, nbytes = r
                return (o, p.addr, list(range(s0, s1)), nbytes), 0.0
        want = self.opts.send_buf if k == 1 else self.opts.send_buf_shared
        if want != self._send_buf:  # (a smaller buffer than what is queued only holds sends back until it drains)
            self._send_buf = want
            self._io.set_send_buf(want)  # (closed under us: nothing; the I/O loop ends on its own)
        for i in range(k):
            p = peers[(self._rr + i) % k]
            avail = p.cc.window() - p.inflight
            if avail <= 0:
                continue
            # retransmissions before new data: the first transfer (by priority) with queued retransmissions, else
            # the first with new packets ready
            o = None
            for x in p.active:
                if x.sending:
                    continue
                if x.retxq:
                    o = x
                    break
                if o is None and x.next_seq < x.ready:
                    o = x
            if o is None:
                continue
            # Pacing last: a peer whose window is full, or that has nothing to send, sets no deadline. The I/O
            # thread would wake at it only to find that (at 20 Mb/s, a quarter of all its wake-ups), and what
            # changes either (an ACK or NACK, the timers, a new send, room in the send buffer) wakes it anyway.
            if now < p.next_send:
                wait = min(wait, p.next_send - now)
                continue
            o.last_sent = now
            self._rr = (self._rr + i + 1) % k
            burst = self.opts.burst
            lens, hdr, hl = o.lens, o.hdr, wire.HEADER_LEN
            seqs: list[int] = []
            nbytes = 0
            nretx = 0
            deferred = o.deferred
            while o.retxq and len(seqs) < burst and nbytes < avail:
                s = o.retxq.popleft()
                o.queued[s] = False
                if o.acked[s]:
                    continue
                if deferred:
                    deferred.pop(s, None)
                seqs.append(s)
                nbytes += lens[s]
                nretx += 1
                hdr[s * hl + FLAGS_AT] |= _F_RETRANSMIT  # (the packet's header says so from now on)
            s0 = o.next_seq
            if s0 < o.ready and len(seqs) < burst and nbytes < avail:
                # new packets s0, s0+1, ... while the burst has room and the bytes before each are below avail:
                # one bisection of the byte prefix sums, not a step per packet
                cum = o.cuml
                s1 = min(bisect.bisect_left(cum, cum[s0] + avail - nbytes, s0, o.ready), s0 + burst - len(seqs))
                o.next_seq = s1
                if not seqs:  # the common burst, new packets only: slices instead of index arrays
                    m = s1 - s0
                    o.sent_order[s0:s1] = np.arange(o.order, o.order + m)
                    o.order += m
                    o.sent_time[s0:s1] = now
                    e = min(max(s0, o.n_elig), s1)  # s0..e-1 are drop-eligible: not in flight (see n_elig)
                    o.inflight[e:s1] = True  # (never sent, so none was in flight)
                    nbytes = cum[s1] - cum[s0]
                    p.inflight += cum[s1] - cum[e]
                    o.pkts_sent += m
                    seqs = list(range(s0, s1))
                    pace(p, nbytes, now)
                    return (o, p.addr, seqs, nbytes), 0.0
                seqs.extend(range(s0, s1))
                nbytes += cum[s1] - cum[s0]
            if not seqs:
                continue
            arr = np.asarray(seqs, np.int64)
            o.sent_order[arr] = np.arange(o.order, o.order + len(seqs))
            o.order += len(seqs)
            o.sent_time[arr] = now
            if nretx:
                o.retx[arr[:nretx]] = True
            track = arr[(arr >= o.n_elig) | o.retx[arr]] if o.n_elig else arr  # (new eligible ones: see n_elig)
            newly = track[~o.inflight[track]]
            o.inflight[track] = True
            p.inflight += int(o.plan.lengths[newly].sum())
            o.pkts_sent += len(seqs)
            o.retransmissions += nretx
            self._c["retransmissions"] += nretx
            pace(p, nbytes, now)
            return (o, p.addr, seqs, nbytes), 0.0
        return None, wait

    def unsend(self, o: OutTransfer, seqs: list[int]) -> None:
        """Undo the part of a burst the full send buffer refused (``seqs``, the burst's tail, never on the wire):
        retransmissions go back to the front of the queue, new packets back before ``next_seq``; nothing of them
        counts as in flight or sent. Waiting in the I/O thread instead would hold up receives and ACKs for as long
        as the host's queue takes to drain."""
        hl = wire.HEADER_LEN
        with self._lock:
            p = self.peers.get(o.peer)
            lens = o.lens
            c = self._c
            nbytes = sum(lens[s] for s in seqs)
            c["tx_datagrams"] -= len(seqs)
            c["tx_data_packets"] -= len(seqs)
            c["tx_bytes"] -= nbytes + hl * len(seqs)
            o.pkts_sent -= len(seqs)
            new = [s for s in seqs if not o.retx[s]]  # (a burst: its retransmissions, then new packets)
            old = [s for s in seqs if o.retx[s]]
            o.retransmissions -= len(old)  # (counted again when they go out)
            c["retransmissions"] -= len(old)
            for s in seqs:
                if o.inflight[s]:
                    o.inflight[s] = False
                    if p is not None:
                        p.inflight -= lens[s]
            if new and new == list(range(new[0], o.next_seq)):  # the burst's new packets end at next_seq
                o.next_seq = new[0]
                o.sent_order[new[0]:new[-1] + 1] = -1  # never sent: an ACK for them is not trusted
                o.sent_time[new[0]:new[-1] + 1] = 0.0
            elif new:  # (not a burst pick_burst makes) queue them with the retransmissions
                o.retx[new] = True
                old = sorted(old + new)
            for s in reversed(old):
                o.retxq.appendleft(s)
                o.queued[s] = True
            c["tx_buffer_full"] += 1

    def finish(self, p: PeerState, o: OutTransfer, err: BaseException | None) -> None:
        """End send ``o`` to ``p``: forget it, give back its bytes in flight, finish its handle with its stats and
        ``err`` (None: delivered)."""
        infl = np.flatnonzero(o.inflight)
        if infl.size:
            p.inflight -= int(o.plan.lengths[infl].sum())
            o.inflight[infl] = False
        p.out.pop(o.tid, None)
        if o in p.active:
            p.active.remove(o)
            self.n_active -= 1
        ended = time.monotonic()
        dur = max(ended - o.start, 1e-9)
        stats = {"peer": o.peer, "transfer_id": o.tid, "layer": o.layer, "bytes": o.tv.nbytes, "ended": ended,
                 "packets": o.total, "eligible_packets": int(o.plan.eligible.sum()), "packets_sent": o.pkts_sent,
                 "retransmissions": o.retransmissions, "acked_packets": int(o.acked.sum()),
                 "delivered_packets": o.delivered, "ecn_echoes": o.ecn_echoes, "acks": o.acks, "nacks": o.nacks,
                 "duration_s": dur, "gbps": o.tv.nbytes * 8 / dur / 1e9}
        if err is None:
            self._c["transfers_sent"] += 1
            log.debug("send done %s", stats)
        else:
            log.debug("send failed %s: %s", stats, err)
        o.handle._finish(stats, err)

    def timers(self, now: float) -> None:
        """When a timer is due (:meth:`next_due`), per peer with sends in progress: fail them when the peer has
        given no feedback for ``peer_timeout``; queue the NACKed packets whose deferral ended; on a retransmission
        timeout (no forward progress, no packet newly ACKed and no send DONE, for an RTO while packets are in
        flight, retransmissions wait or a fully sent transfer waits for its DONE: whatever NACKs keep arriving)
        restart the window and queue one probe per transfer; and send a tail probe for a fully sent transfer that
        has seen no progress of its own for an RTO while other transfers to the peer progress (its last packets or
        its DONE lost)."""
        for p in list(self.peers.values()):
            if not p.active:
                continue
            silent = now - p.last_feedback
            if silent > self.opts.peer_timeout:
                self._c["peer_timeouts"] += 1
                err = TransportError(f"peer rank {p.rank} at {p.addr[0]}:{p.addr[1]} sent no feedback for "
                                     f"{silent:.3f}s (peer_timeout {self.opts.peer_timeout}s)", p.rank)
                for o in list(p.active):
                    self.finish(p, o, err)
                continue
            for o in p.active:
                if o.deferred:
                    self._ripen(p, o, now)
            if any(o.sending for o in p.active):
                continue  # (a caller still transmitting a first burst: its packets have not all left yet)
            rto = p.cc.rto
            if now - p.progress > rto and now >= p.rto_at and (p.inflight > 0 or any(
                    o.retxq or o.deferred or o.next_seq >= o.total for o in p.active)):
                self._timeout(p, now)
                continue
            if now - p.progress > rto:
                continue  # nothing progresses: the peer-wide timeout above is what recovers (once rto_at passes)
            for o in p.active:
                if (o.next_seq >= o.total and not o.retxq and not o.deferred and now >= o.probe_at
                        and now - max(o.progress, o.last_sent) > rto):
                    self._probe(p, o)
                    o.probe_at = now + rto * (1 << min(o.probes, 4))
                    o.probes += 1
                    self._c["tail_probes"] += 1

    def next_due(self, now: float, tick: float) -> float:
        """The earliest time :meth:`timers` may have something to do (it may find nothing then: an early answer is
        safe, a late one delays a timeout): a peer's ``peer_timeout``, the end of a NACK's deferral, the RTO of a
        peer with packets in flight (or retransmissions waiting, or a send waiting for its DONE), a tail probe.
        The I/O thread sleeps until then instead of waking every ``tick`` (``now + tick`` while a caller is still
        transmitting a first burst, which :meth:`timers` skips)."""
        due = math.inf
        pt = self.opts.peer_timeout
        for p in self.peers.values():
            if not p.active:
                continue
            due = min(due, p.last_feedback + pt)
            rto = p.cc.rto
            need = p.inflight > 0
            for o in p.active:
                if o.sending:
                    due = min(due, now + tick)
                if o.deferred:
                    due = min(due, min(o.deferred.values()))
                    need = True
                if o.retxq:
                    need = True
                if o.next_seq >= o.total:
                    need = True
                    if not o.retxq and not o.deferred:
                        due = min(due, max(o.probe_at, max(o.progress, o.last_sent) + rto))
            if need:
                due = min(due, max(p.progress + rto, p.rto_at))
        return due

    def probe_peer(self, rank: int, now: float) -> bool:
        """``rank`` is closing its endpoint: probe every send to it that is fully sent and waits for ACKs or DONE
        now, not after an RTO (the receiver answers a probe of a completed transfer with DONE again), at most once
        per smoothed RTT (10 ms at least). Whether sends to it are still in progress."""
        p = self.peers.get(rank)
        if p is None or not p.active:
            return False
        gap = max(0.01, p.cc.srtt or 0.0)
        for o in p.active:
            if (o.next_seq >= o.total and not o.retxq and not o.deferred and not o.sending
                    and now - o.last_sent >= gap):
                self._probe(p, o)
        return True

    def _ripen(self, p: PeerState, o: OutTransfer, now: float) -> None:
        """Queue the deferred NACKed packets of ``o`` whose wait has ended (see :func:`on_nack`)."""
        due = [s for s, t in o.deferred.items() if t <= now]
        for s in due:
            del o.deferred[s]
            if not o.acked[s] and not o.queued[s]:
                Sender._requeue(p, o, s)

    @staticmethod
    def _requeue(p: PeerState, o: OutTransfer, s: int) -> None:
        """Queue packet ``s`` of ``o`` for retransmission, no longer counted in flight."""
        if o.inflight[s]:
            o.inflight[s] = False
            p.inflight -= o.lens[s]
        o.queued[s] = True
        o.retxq.append(s)

    @staticmethod
    def _probe(p: PeerState, o: OutTransfer) -> None:
        """Queue one probe of ``o``: its highest unACKed packet sent (the receiver answers with a NACK of every
        hole below it, an ACK, or DONE), or its last packet when all are ACKed (a DONE was lost: the receiver's
        tombstone answers with DONE again)."""
        un = np.flatnonzero(~o.acked[: o.next_seq])
        if un.size:
            s = int(un[-1])
        elif o.next_seq >= o.total:
            s = o.total - 1
        else:
            return  # (everything sent is ACKed and new packets are ready: those go next)
        if not o.queued[s]:
            Sender._requeue(p, o, s)

    def _timeout(self, p: PeerState, now: float) -> None:
        """Retransmission timeout of ``p``: forget what is in flight (so the window opens again), restart the
        window and queue one probe per transfer with nothing queued already (the deferred NACKed packets are
        queued now). Not a mass retransmission: a timeout on a shared, Python-paced host is as often a stall as a
        loss, and the receiver's NACK names exactly what is missing."""
        self._c["rto_timeouts"] += 1
        p.cc.on_timeout()
        p.rto_fired = now
        p.rto_at = now + p.cc.rto
        for o in p.active:
            o.inflight[:] = False
            for s in o.deferred:
                if not o.acked[s] and not o.queued[s]:
                    o.queued[s] = True
                    o.retxq.append(s)
            o.deferred.clear()
            o.probe_at = now + p.cc.rto
            if not o.retxq:
                self._probe(p, o)
        p.inflight = 0

    # --- threads ---------------------------------------------------------------------------------------------
