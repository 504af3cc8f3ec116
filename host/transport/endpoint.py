"""The DLCP endpoint: one UDP socket per process and one I/O thread (receive, timers, send).

Usage (see ``docs/transport.md`` for the protocol)::

    ep = Endpoint(rank, {0: "10.0.0.1", 1: "10.0.0.2"}, job_id=7, nonce=0x1234)
    h = ep.send(1, grad, transfer_id=42, layer=3, loss_bound=0.01)    # returns at once
    res = ep.recv(0, 42, out=buf, timeout=5.0)                         # blocks; res.data is buf
    res.report.lost_ranges                                             # [(start, stop), ...] zero-filled
    h.wait(); ep.stats(); ep.close()

Addresses: ``addr_map`` maps every rank to ``"host"`` (port :data:`host.wire.UDP_PORT`) or ``("host", port)``.
Every endpoint binds its own entry, so several ranks on one machine use distinct addresses (127.0.0.x on
loopback, the whole 127/8 is local) and all keep the well-known port a DLCP switch parses. A packet is accepted
only if its job id and nonce are ours, its source address is the one ``addr_map`` gives its rank and, for a job
with a ``key`` (16 bytes agreed at rendezvous), its keyed tag (``wire.packet_tag``) is right: every packet this
endpoint sends carries the tag, computed in the C send lane (or by ``_send_ctl`` for control messages), and the
receive paths check it before a packet touches any state.

Threads and locking: the I/O thread loops over three steps: it drains the socket and handles every datagram (data
into the destination buffer, ACK/NACK into sender state, ACKs back); it runs the timers every millisecond (receiver
NACKs, sender RTO probes, peer timeouts); it picks bursts under the window and pacing rate
of each peer and sends them outside the lock. It sleeps in ``select`` (the socket, a wake-up socket that ``send()``
writes to, the next timer or pacing deadline) only when none of them has work. One lock guards the transfer
tables; user calls only post work and wait on events.
"""

from __future__ import annotations

import bisect
import ipaddress
import itertools
import logging
import math
import select
import socket
import struct
import threading
import time
from collections import deque
from typing import Any, Callable, Mapping

import numpy as np

from host import wire
from host.policy import CONTROL_PRIORITY, as_float_view
from host.transport.cc import CCParams, DctcpWindow
from host.transport.chunking import (chunk_elems, payload_capacity, plan_in_order, plan_packets,
                                     tos_byte, write_headers)
from host.transport.reassembly import Reassembly
from host.transport.tensors import TensorView, allocate, view_tensor
from host.transport.unclaimed import MAX_PAYLOAD as _MAX_PAYLOAD
from host.transport.unclaimed import NO_STAGE as _NO_STAGE
from host.transport.unclaimed import StagingBudget
from host.wire import DType, Flag, MsgType
from host.transport.api import LossReport, Options, RecvHandle, RecvResult, SendHandle, TransportError
from host.transport.control import (CTL, CTL_ALIVE, CTL_DEAD, CTL_DONE, CTL_PROBE, FLAGS_AT, HDR, ITEMSIZE, NDTYPES,
                                    W_COUNT, W_DTYPE, W_ELIG, W_FLAGS, W_JOB, W_LAYER, W_NONCE, W_OFFSET, W_PMR,
                                    W_RANK, W_SEQ, W_TAG, W_TID, W_TID_HI, W_TOTAL, W_VT, clock_us, decode_words,
                                    pack_control_header)
from host.transport.stats import Counters

from host.transport.packetio import ICMP_ERRNOS as _ICMP_ERRNOS
from host.transport.packetio import SOL_UDP as _SOL_UDP
from host.transport.packetio import UDP_SEGMENT as _UDP_SEGMENT
from host.transport.packetio import _rxlane, _txlane  # the C fast lanes (None in a broken install: Python paths)
from host.transport.packetio import AddressInUse, PacketSocket, packet_tag, path_mtu, src_key
from host.transport.packetio import norm_addr as _norm_addr
from host.transport.packetio import unrefused as _unrefused

__all__ = ["Endpoint", "Options", "SendHandle", "RecvHandle", "RecvResult", "LossReport", "TransportError", "path_mtu",
           "HDR", "decode_words", "pack_control_header"]

log = logging.getLogger("host.transport")

# --- constants of the stages -----------------------------------------------------------------------------------
_DEAD_REASON_MAX = 400  # bytes of reason a DEAD notice carries
_DEAD_NOTICE_AGAIN = (0.05, 0.25)  # a DEAD notice is sent at once and again this long after (datagrams get lost)
_PROBE_EVERY = 1.0  # seconds between probes of a silent peer this rank waits on (peer_timeout / 4 if shorter)
# Loss detection by ACK (RACK-like, RFC 8985): a packet is lost once a packet sent at least _REORDER_PKTS packets
# and one reordering window later has been ACKed. The count alone (TCP's dupthresh) is not enough: packets of one
# burst can arrive out of order (sprayed over paths, or on Linux veth/loopback paths without RPS, where each CPU's
# backlog delivers the packets that CPU dequeued; a whole GRO buffer can arrive behind the next one). The window
# is a quarter of the minimum RTT, at least _REORDER_TIME (as RACK's reo_wnd; docs/decisions.md).
_REORDER_PKTS = 3
_REORDER_TIME = 0.001
# The receiver's wait after the LAST packet before it NACKs the holes starts at _REORDER_TIME per sending peer and
# adapts (as RACK's reo_wnd does on DSACKs). An original packet (RETRANSMIT flag clear) of a seq the receiver had
# NACKed, arriving before or after its transfer completed, shows the NACK was premature: the path reorders more
# than the wait, so the wait doubles, up to _REORDER_MAX. Each transfer of that peer completed without a NACK
# shrinks it by _REORDER_DECAY. (Once a transfer has NACKed, its packets take the Python path, which sees each
# packet's flags.) Sprayed paths through a software switch reorder by milliseconds, more than a fixed 1 ms wait.
_REORDER_MAX = 0.016
_REORDER_DECAY = 0.98
_TOS_CONTROL = tos_byte(CONTROL_PRIORITY, False)
_F_ECN_ECHO, _F_RETRANSMIT = int(Flag.ECN_ECHO), int(Flag.RETRANSMIT)

# --- segmentation offload (Linux UDP GSO, as QUIC stacks use it) ------------------------------------------------
#: A send of up to ``_GSO_MAX_SEGS`` equal-size datagrams is one ``sendmsg`` whose UDP_SEGMENT control message
#: tells the kernel where to cut (the receive side's UDP GRO is the packet I/O layer's, ``packetio.py``). The wire
#: is unchanged: every datagram on the link is an ordinary DLCP packet (on an interface with offloads off the kernel
#: cuts the buffer before the link). A kernel that refuses UDP_SEGMENT makes the endpoint fall back to one datagram
#: per sendmsg.
_GSO_MAX_SEGS = 64
_GSO_MAX_BYTES = 65000
_TX_BURSTS_PER_ROUND = 4  # bursts sent between two receive passes of the I/O thread
_BATCH_MIN = 16  # packets of one transfer in one batch from which Reassembly takes arrays
_CTL_BACKLOG = 4096  # control messages held while the send buffer is full

# --- internal state ---------------------------------------------------------------------------------------------

#: Packets up to which a send's byte prefix sums come from its Python list of lengths, not numpy.
_SMALL_PREFIX = 256


class _Out:
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
        self.layer = 0
        self.loss_bound = 0.0
        self.handle = SendHandle(peer, tid)
        # the caller of send() is transmitting this transfer's first burst outside the lock: the I/O thread leaves
        # the transfer alone until it is done, or its next burst would race the first one onto the wire and
        # arrive ahead of it (the receiver would then NACK everything before it)
        self.sending = False
        # a send classified in slices, until its last slice is: (classify(lo, hi), packets per slice); the I/O
        # thread classifies the next slice when the unsent headers run low (Endpoint._classify_slices)
        self.slicer: tuple[Callable, int] | None = None

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


class _Peer:
    def __init__(self, rank: int, addr: tuple[str, int], ccp: CCParams):
        self.rank, self.addr = rank, addr
        self.cc = DctcpWindow(ccp)
        self.inflight = 0
        self.active: list[_Out] = []
        self.out: dict[int, _Out] = {}
        self.next_send = 0.0
        self.last_feedback = 0.0
        self.rto_at = 0.0
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


def fits_transfer(nelems: int, total: int, count: int) -> bool:
    """Whether a genuine transfer of ``nelems`` elements can have ``total`` packets one of which carries ``count``
    elements. A sender cuts a tensor into packets of one chunk size ``c`` but the last (``chunking.py``; the
    eligible-first order only permutes them): so either ``count == c`` and ``total == ceil(nelems / c)``, or the
    packet is the short one, ``count == nelems - (total - 1) * c`` for a ``c >= count`` that makes ``total``
    packets. A transfer of no elements is one empty packet. (MTU-independent: it needs no chunk size.)"""
    if nelems <= 0:
        return total == 1 and count == 0
    if not 0 < count <= nelems:
        return False
    if -(-nelems // count) == total:
        return True
    if total < 2:
        return False
    c, rest = divmod(nelems - count, total - 1)
    return rest == 0 and c >= count and -(-nelems // c) == total


class _In:
    """Receiver state of one transfer."""

    def __init__(self, peer: int, tid: int, now: float):
        self.peer, self.tid, self.created = peer, tid, now
        self.st: Reassembly | None = None
        self.dtype: int = -1
        self.layer = 0
        self.stage: np.ndarray | None = _NO_STAGE  # uint8, before recv() is posted (np.empty: no zero-fill)
        self.dst: memoryview | None = None  # the out buffer's bytes, once posted
        self.tv: TensorView | None = None
        self.loss_bound: float | None = None
        self.posted = False
        self.event = threading.Event()
        self.result: RecvResult | None = None
        self.error: BaseException | None = None
        self.done = False
        self.first_arrival = self.last_arrival = 0.0
        self.since_ack = 0
        self.ce_state = False
        self.ce_marks = self.dups = self.nacks = self.acks = 0
        self.nack_next = 0.0
        self.nack_interval = 0.0
        self.nacked: set[int] | None = None  # every seq NACKed so far
        self.bytes = 0
        self.book = 0  # bytes of Reassembly bookkeeping charged to the staging budget while unposted
        self.touched = now  # last arrival or completion: an unposted transfer idle past Options.unposted_expiry ends
        self.posted_at = 0.0  # when post_recv attached the buffer (the peer's silence counts from then at most)
        self.rejected = 0  # packets of this transfer dropped for a header field its receive does not allow
        self.reject_why = ""  # the last such reason (named when the receive times out)

    @property
    def cap(self) -> int:
        return len(self.dst) if self.dst is not None else -1


# --- the endpoint -------------------------------------------------------------------------------------------------

class Endpoint:
    """One rank's DLCP transport. Thread-safe: any thread may call send/recv concurrently."""

    def __init__(self, rank: int, addr_map: Mapping[int, Any], job_id: int, nonce: int,
                 options: Options | None = None, *, key: bytes | None = None):
        """``key``: the job's 16-byte tag key, the same on every rank (agreed at rendezvous, secret to the job):
        every packet sent carries its keyed tag and every packet received must (a wrong one is dropped, counted
        as ``rejected_by_field["tag"]``). None: an unkeyed job, whose tags are 0 and unchecked (tests, tools); its
        packets are accepted on job id, nonce and source address alone."""
        self.rank, self.job_id, self.nonce = int(rank), int(job_id), int(nonce)
        if not 0 <= self.job_id < 1 << 32 or not 0 <= self.nonce < 1 << 16 or not 0 <= self.rank < 1 << 16:
            raise ValueError("rank must fit 16 bits, job_id 32 bits, nonce 16 bits")
        if key is not None and (not isinstance(key, bytes) or len(key) != wire.KEY_LEN):
            raise ValueError(f"key must be {wire.KEY_LEN} bytes or None")
        self._key = key
        self.opts = opts = options or Options()
        self._mss = payload_capacity(opts.mtu)
        self._ccp = opts.cc or CCParams(mss=self._mss)
        self.addr_map = {int(r): _norm_addr(a, opts.port) for r, a in addr_map.items()}
        if self.rank not in self.addr_map:
            raise ValueError(f"rank {self.rank} has no address in addr_map")
        self._rank_of = {src_key(a): r for r, a in self.addr_map.items()}  # a record's source -> rank
        self.local_addr = self.addr_map[self.rank]
        # peers to whom large reliable sends are classified in slices (Options.classify_slice): not those on this
        # host. A loopback "link" runs at the CPU's speed, so there is no wire time to hide a slice's classification
        # behind, and the slices' extra steps only cost time there (docs/decisions.md).
        self._slice_to = {r: not ipaddress.ip_address(a[0]).is_loopback for r, a in self.addr_map.items()}

        # the packet I/O layer: the exclusively bound socket, its receive buffer and records, the tag key
        try:
            self._io = io = PacketSocket(self.rank, self.local_addr, sock_buf=opts.sock_buf, send_buf=opts.send_buf,
                                         tos=_TOS_CONTROL, offload=opts.offload, native=opts.native, key=key,
                                         socket_wrapper=opts.socket_wrapper)
        except AddressInUse as e:
            raise TransportError(f"rank {self.rank}: {e.strerror}", self.rank) from e
        except OSError as e:
            raise TransportError(f"rank {self.rank}: cannot bind {self.local_addr[0]}:{self.local_addr[1]}: {e}",
                                 self.rank) from e
        self._sock, self._tx, self._capped = io.sock, io.tx, io.capped
        self._send_buf = opts.send_buf  # what SO_SNDBUF is set to now (see _pick_burst)
        self._gso = opts.offload and opts.socket_wrapper is None
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)

        self._lock = threading.Lock()
        self._closed = False
        self._peers: dict[int, _Peer] = {}
        self._incoming: dict[tuple[int, int], _In] = {}
        self._ready: dict[tuple[int, int], _In] = {}  # completed before recv() was posted
        self._tomb: dict[tuple[int, int], list] = {}  # key -> [kind, last DONE reply time]
        self._ack_pending: set[tuple[int, int]] = set()
        self._staging = StagingBudget(opts.max_staged_bytes)  # what unclaimed transfers hold (unclaimed.py)
        self._created = itertools.count()
        self._rr = 0
        self._next_tick = 0.0
        self._sliced: dict[_Out, None] = {}  # sends with slices still to classify (_Out.slicer), oldest first
        self._ctl_buf = bytearray(wire.HEADER_LEN + 9000)
        # the send buffer is full (Options.send_buf): nothing more is sent until select says the socket is writable
        # (half the buffer free), and control messages that met the full buffer wait here, to go before any data
        self._tx_full = False
        self._ctl_backlog: deque[tuple[bytes, tuple[str, int]]] = deque()
        self._counters = Counters()  # every stage counts into these (stats.py)
        self._c = self._counters.c
        self._reo: dict[int, float] = {}  # per sending peer: the adaptive wait after LAST (see _REORDER_MAX)
        # failure propagation (see _peer_died): dead ranks and why, when each rank was last heard from (any valid
        # datagram), when to probe a silent one next, fate groups (share_fate), DEAD notices still to repeat
        self._dead: dict[int, str] = {}
        self._heard: dict[int, float] = {}
        self._probe_next: dict[int, float] = {}
        self._fates: list[tuple[frozenset[int], int, int]] = []
        self._notices: list[tuple[float, bytes]] = []
        self._next_expiry = 0.0  # when _expire_unposted runs next
        self._rxbuf, self._rxmv, self._recs = io.rxbuf, io.rxmv, io.recs  # (the records of a batch: io.drain)
        self._native_rx = io.native_rx
        # the send lane calls sendmsg on the socket itself: not with a socket_wrapper, which must see every datagram
        self._fast_tx = _txlane.send_run if opts.native and _txlane is not None and self._tx is io.sock else None
        self._ip4: dict[str, bytes] = {}
        self._sleeping = False
        self._io_thread = threading.Thread(target=self._io_loop, name=f"dlcp-io-{rank}", daemon=True)
        self._io_thread.start()

    # --- public API -------------------------------------------------------------------------------------------

    def send(self, peer: int, tensor: Any, *, transfer_id: int, layer: int = 0, loss_bound: float = 0.0) -> SendHandle:
        """Start sending ``tensor`` to ``peer``; returns at once. The tensor must not change until the handle is
        done (packets are sent from its memory). ``loss_bound``: fraction of elements that may be lost (0 =
        reliable); the policy marks at most that fraction drop-eligible."""
        if peer not in self.addr_map:
            raise ValueError(f"rank {peer} has no address in addr_map")
        if not 0 <= transfer_id < 1 << 64:
            raise ValueError("transfer_id must fit 64 bits")
        tv = view_tensor(tensor)
        if tv.nbytes >= 1 << 32:
            raise ValueError("a transfer is < 4 GiB (the offset field is 32 bits); split the tensor")
        values = as_float_view(tv.array, bf16=tv.dtype == DType.BFLOAT16)
        chunk = chunk_elems(self.opts.mtu, tv.dtype.itemsize)
        npk = max(1, -(-tv.nelems // chunk))
        counts = np.minimum(chunk, tv.nelems - np.arange(npk, dtype=np.int64) * chunk).clip(min=0)
        per_slice = max(1, -(-self.opts.classify_slice // (chunk * tv.dtype.itemsize)))  # (a 4 MiB tensor: 1 slice)
        ids = dict(layer=layer, rank=self.rank, job_id=self.job_id, transfer_id=transfer_id, nonce=self.nonce)
        if loss_bound == 0 and self.opts.classify_slice > 0 and npk > per_slice and self._slice_to[peer]:
            # in slices (Options.classify_slice): the first one now, the rest on the I/O thread (_classify_slices)
            classify = self._slice_classifier(values, counts, chunk, layer)
            first = classify(0, per_slice)
            plan = plan_in_order(nelems=tv.nelems, dtype=tv.dtype, mtu=self.opts.mtu, priority=first.priority, **ids)
            write_headers(plan, 0, per_slice, first.mag_class)
            ready = per_slice
        else:
            classes = self.opts.policy.classify(values, counts, layer=layer, loss_bound=loss_bound)
            plan = plan_packets(nelems=tv.nelems, dtype=tv.dtype, mtu=self.opts.mtu, classes=classes, **ids)
            ready = npk
        with self._lock:
            if self._closed:
                raise TransportError("endpoint is closed", peer)
            dead = self._dead_error(peer, transfer_id)
            if dead is not None:
                raise dead
            p = self._peer(peer)
            if transfer_id in p.out:
                raise ValueError(f"transfer {transfer_id} to rank {peer} is already in progress")
            now = time.monotonic()
            o = _Out(peer, transfer_id, tv, plan, next(self._created), now, ready)
            o.layer, o.loss_bound = layer, loss_bound
            if ready < npk:
                o.slicer = (classify, per_slice)
                self._sliced[o] = None
            if not p.active:
                p.last_feedback = now  # the peer timeout counts from the first outstanding send
            p.out[transfer_id] = o
            p.active.append(o)
            p.active.sort(key=lambda x: (-x.priority, x.created))
            # An idle I/O thread would first have to wake up, be scheduled and run its timers before the first
            # packet left: on a loaded host that is the larger part of a small transfer's latency. The caller sends
            # the first burst itself instead (chosen under the lock as the I/O thread would) and wakes the I/O
            # thread for the rest: later bursts, ACKs and timers.
            job = self._pick_burst(now)[0] if self._sleeping and not self._tx_full else None
            o.sending = job is not None
            if job is None:
                self._wake()
        if job is not None:  # the wake-up follows the burst: one per send(), and no GIL contention while it leaves
            try:
                self._transmit(job)
            finally:
                with self._lock:
                    o.sending = False
                    p.rto_at = max(p.rto_at, time.monotonic() + p.cc.rto)  # the RTO counts from when they left
                    self._wake()
        return o.handle

    def _classify_slices(self) -> None:
        """On the I/O thread: classify the next slice of every sliced send with less than half a slice of written
        headers left to send, and make its packets sendable. Here and not in send()'s caller, nor in a thread of its
        own: either would hand the GIL back and forth with the I/O thread (up to the switch interval, 5 ms, per
        handoff) and delay the other flows' sends (docs/decisions.md). A policy that fails on a slice fails that
        transfer (its handle raises)."""
        with self._lock:
            due = []
            for o in list(self._sliced):
                if o.handle.done():
                    del self._sliced[o]
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
                    self._sliced.pop(o, None)
                    continue
                if err is not None:
                    self._sliced.pop(o, None)
                    self._finish_out(self._peers[o.peer], o, TransportError(
                        f"send of transfer {o.tid} to rank {o.peer} failed while classifying packets {lo}-{hi - 1}: "
                        f"{err!r}", o.peer))
                    continue
                o.extend(hi)
                if hi == o.total:
                    o.slicer = None
                    self._sliced.pop(o, None)

    def _slice_classifier(self, values: np.ndarray | None, counts: np.ndarray, chunk: int, layer: int):
        """``classify(lo, hi)``: the policy's classes of packets ``lo..hi-1`` as a tensor of their own (loss bound
        0), for a send classified in slices."""
        def classify(lo: int, hi: int):
            part = None if values is None else values[lo * chunk: lo * chunk + int(counts[lo:hi].sum())]
            return self.opts.policy.classify(part, counts[lo:hi], layer=layer, loss_bound=0.0)
        return classify

    def recv(self, peer: int, transfer_id: int, out: Any, *, timeout: float | None = None,
             loss_bound: float | None = None) -> RecvResult:
        """Receive transfer ``transfer_id`` from ``peer`` into ``out`` (a tensor/array written in place, or a
        ``(shape, dtype)`` pair to allocate). Blocks until complete; raises :class:`TransportError` after
        ``timeout`` (default ``Options.recv_timeout``). ``loss_bound``: the receiver's own bound; when given,
        missing eligible packets are requested until ``(1 - loss_bound)`` of the elements are present (enforced if
        posted before the transfer completes; checked afterwards either way)."""
        return self.post_recv(peer, transfer_id, out, timeout=timeout, loss_bound=loss_bound).wait()

    def post_recv(self, peer: int, transfer_id: int, out: Any, *, timeout: float | None = None,
                  loss_bound: float | None = None) -> RecvHandle:
        """:meth:`recv` without the wait: post the receive and return at once. Posting before the sender starts
        lets every packet go straight to ``out``; a packet that arrives earlier is staged and copied again (a
        process that sends and receives at once should post its receive first)."""
        if isinstance(out, tuple) and len(out) == 2 and not hasattr(out, "shape"):
            out = allocate(*out)
        tv = view_tensor(out, writable=True)
        timeout = self.opts.recv_timeout if timeout is None else timeout
        key = (peer, transfer_id)
        with self._lock:
            if self._closed:
                raise TransportError("endpoint is closed", peer)
            inc = self._ready.pop(key, None)
            if inc is None:
                tomb = self._tomb.get(key)
                if tomb is not None and tomb[0] == "expired":
                    raise TransportError(f"transfer {transfer_id} from rank {peer} arrived, but no receive was "
                                         f"posted for it within unposted_expiry ({self.opts.unposted_expiry}s): "
                                         "its data was dropped", peer)
                if tomb is not None:
                    raise ValueError(f"transfer {transfer_id} from rank {peer} was already received "
                                     "(transfer ids are unique per sender and receiver)")
                dead = self._dead_error(peer, transfer_id)
                if dead is not None:
                    raise dead
                inc = self._incoming.get(key)
                if inc is None:
                    inc = self._incoming[key] = _In(peer, transfer_id, time.monotonic())
                elif inc.posted:
                    raise ValueError(f"transfer {transfer_id} from rank {peer} is already being received")
            self._post(inc, tv, loss_bound)
            if inc.done and inc.result is None and inc.error is None:
                self._deliver(inc)
        return RecvHandle(inc, timeout, self._abandon, self.addr_map.get(peer))

    def _abandon(self, inc: _In, why: str, *, count: bool = True) -> None:
        """A posted receive nobody waits for any more: fail it (see :meth:`_drop_in`) unless it completed
        meanwhile. ``count``: a receive timeout."""
        with self._lock:
            if inc.event.is_set():
                return
            if count:
                self._c["recv_timeouts"] += 1
            self._drop_in(inc, TransportError(why, inc.peer))

    def share_fate(self, ranks: Any, tid_mask: int, tid_value: int) -> None:
        """Transfers whose id matches ``tid & tid_mask == tid_value`` (with any peer) fail as soon as any rank of
        ``ranks`` is known dead, pending ones at once and new ones when started: a collective over a group cannot
        complete without every member, and a rank whose own steps are all with live members would otherwise wait
        for a message that a member whose collective failed will never send. A second call with the same mask and
        value replaces the first (a group id used again)."""
        fate = (frozenset(int(r) for r in ranks), int(tid_mask), int(tid_value))
        with self._lock:
            self._fates = [f for f in self._fates if f[1:] != fate[1:]] + [fate]

    def dead_peers(self) -> dict[int, str]:
        """The ranks this endpoint knows dead, with the reason (its own detection, or a peer's DEAD notice)."""
        with self._lock:
            return dict(self._dead)

    def abort(self, reason: str) -> None:
        """Give up: tell every peer that this rank is gone (each fails its work with this rank, and the work of
        every group it shares with it, at once), then :meth:`close` (which fails what is pending here)."""
        with self._lock:
            if not self._closed:
                msg = self._dead_notice(self.rank, reason)
                for _ in range(1 + len(_DEAD_NOTICE_AGAIN)):
                    self._notify_all(msg, skip=self.rank)
        self.close()

    def stats(self) -> dict[str, Any]:
        """Totals, malformed drops by field, rejected packets by field (well-formed, but a field the receive they
        belong to does not allow: ``total`` more packets than the posted buffer or the staging budget can take,
        ``offset`` past the end of the posted buffer, ``dtype`` not the posted one, ``eligible`` not below
        ``total``), and the congestion state per peer."""
        with self._lock:
            d = self._counters.snapshot()
            d["dead_peers"] = dict(self._dead)
            # socket buffers the kernel capped below what Options asked: {"SO_RCVBUF": (asked, granted), ...}
            d["sock_buf_capped"] = dict(self._capped)
            d["peers"] = {r: {**p.cc.snapshot(), "inflight": p.inflight, "active": len(p.active)}
                          for r, p in self._peers.items()}
            d["pending_recv"] = len(self._incoming)
        return d

    def close(self) -> None:
        """Stop the I/O thread (joined), fail whatever is pending with TransportError, close the socket."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            self._wake_w.send(b"x")
        except OSError:  # pragma: no cover
            pass
        self._io_thread.join()
        with self._lock:
            err = TransportError(f"rank {self.rank}: endpoint closed")
            for p in self._peers.values():
                for o in list(p.active):
                    self._finish_out(p, o, err)
            for inc in self._incoming.values():
                if not inc.event.is_set():
                    inc.error = TransportError(f"endpoint closed while receiving transfer {inc.tid} from rank "
                                               f"{inc.peer}", inc.peer)
                    inc.event.set()
            self._incoming.clear()
        self._io.close()
        self._wake_r.close()
        self._wake_w.close()

    @property
    def _staged_bytes(self) -> int:
        """Bytes the unclaimed transfers hold now, bookkeeping included (``StagingBudget.used``)."""
        return self._staging.used

    def __enter__(self) -> "Endpoint":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- helpers under the lock ----------------------------------------------------------------------------------

    def _peer(self, rank: int) -> _Peer:
        p = self._peers.get(rank)
        if p is None:
            p = self._peers[rank] = _Peer(rank, self.addr_map[rank], self._ccp)
        return p

    # --- failure propagation (under the lock) ------------------------------------------------------------------

    def _dead_error(self, peer: int, tid: int) -> TransportError | None:
        """Why a transfer ``tid`` with ``peer`` cannot complete (its peer, or a member of a group whose fate it
        shares, is dead), or None."""
        if not self._dead:
            return None
        if peer in self._dead:
            return TransportError(f"rank {peer} is dead: {self._dead[peer]}", peer)
        for ranks, mask, value in self._fates:
            if tid & mask == value:
                for r in ranks:
                    if r in self._dead:
                        return TransportError(f"transfer {tid} with rank {peer} cannot complete: rank {r} of its "
                                              f"group is dead: {self._dead[r]}", r)
        return None

    def _peer_died(self, rank: int, reason: str, *, tell: bool) -> None:
        """``rank`` is dead: fail every pending transfer with it, and every pending transfer of a group that shares
        its fate (:meth:`share_fate`), with a :class:`TransportError` naming it; new ones fail when started. With
        ``tell`` (this rank saw the death itself), send every other peer a DEAD notice, so that their work fails
        now rather than after their own timeouts."""
        if rank in self._dead or rank == self.rank or rank not in self.addr_map:
            return
        self._dead[rank] = reason
        self._c["peers_dead"] += 1
        log.warning("dlcp rank %d: rank %d is dead: %s", self.rank, rank, reason)
        masks = [(m, v) for ranks, m, v in self._fates if rank in ranks]
        for p in list(self._peers.values()):
            for o in list(p.active):
                if p.rank == rank or any(o.tid & m == v for m, v in masks):
                    self._finish_out(p, o, self._dead_error(p.rank, o.tid))
        for inc in list(self._incoming.values()):
            if inc.peer == rank and not inc.posted:  # staged data nobody will complete
                self._drop_in(inc, TransportError(f"rank {rank} is dead: {reason}", rank))
            elif inc.posted and not inc.done and (inc.peer == rank or any(inc.tid & m == v for m, v in masks)):
                self._drop_in(inc, self._dead_error(inc.peer, inc.tid))
        if tell:
            msg = self._dead_notice(rank, reason)
            self._notify_all(msg, skip=rank)
            now = time.monotonic()
            self._notices.extend((now + dt, msg) for dt in _DEAD_NOTICE_AGAIN)

    def _dead_notice(self, rank: int, reason: str) -> bytes:
        """A CONTROL datagram saying ``rank`` is dead, and why."""
        why = reason.encode("utf-8", "replace")[:_DEAD_REASON_MAX]
        buf = bytearray(wire.HEADER_LEN + CTL.size + len(why))
        pack_control_header(buf, MsgType.CONTROL, flags=0, rank=self.rank, job_id=self.job_id, transfer_id=0,
                            seq=0, total=0, count=0, nonce=self.nonce)
        CTL.pack_into(buf, wire.HEADER_LEN, CTL_DEAD, rank)
        buf[wire.HEADER_LEN + CTL.size:] = why
        return bytes(buf)

    def _notify_all(self, msg: bytes, skip: int) -> None:
        """Send ``msg`` to every peer but ``skip`` and the ranks known dead."""
        for r, addr in self.addr_map.items():
            if r != self.rank and r != skip and r not in self._dead:
                self._send_msg(msg, addr)
                self._c["dead_notices_sent"] += 1

    def _send_msg(self, msg: bytes, addr: tuple[str, int]) -> None:
        n = len(msg)
        self._ctl_buf[:n] = msg
        self._send_ctl(addr, n)

    def _send_probe(self, rank: int, op: int) -> None:
        buf = self._ctl_buf
        pack_control_header(buf, MsgType.CONTROL, flags=0, rank=self.rank, job_id=self.job_id, transfer_id=0,
                            seq=0, total=0, count=0, nonce=self.nonce)
        CTL.pack_into(buf, wire.HEADER_LEN, op, 0)
        self._send_ctl(self.addr_map[rank], wire.HEADER_LEN + CTL.size)
        if op == CTL_PROBE:
            self._c["probes_sent"] += 1

    def _on_control(self, w: tuple, payload: memoryview) -> None:
        """A CONTROL message that is not about a transfer: a probe, its answer, or a DEAD notice."""
        op, arg = CTL.unpack_from(payload)
        src = w[W_RANK]
        if op == CTL_PROBE:
            self._c["probes_rx"] += 1
            self._send_probe(src, CTL_ALIVE)
        elif op == CTL_ALIVE:
            pass  # (the datagram itself refreshed when src was last heard from)
        elif op == CTL_DEAD and arg in self.addr_map:
            self._c["dead_notices_rx"] += 1
            reason = bytes(payload[CTL.size:]).decode("utf-8", "replace")
            if arg == src:
                self._peer_died(src, f"rank {src} aborted: {reason}", tell=False)
            elif arg == self.rank:  # src has given up on this rank: its work with this rank ends here too
                self._peer_died(src, f"rank {src} declared this rank dead ({reason})", tell=False)
            else:
                self._peer_died(arg, f"{reason} (reported by rank {src})", tell=False)
        else:
            self._malformed("payload")

    def _read_errors(self, now: float) -> None:
        """Read the socket's error queue (IP_RECVERR): a port-unreachable from a peer's address means its socket is
        closed, its process gone. Such a peer is dead at once if it was heard from before (one not heard from yet
        may not have bound its socket yet, however long this endpoint has waited: its silence decides, after
        peer_timeout)."""
        for addr in self._io.refused():
            r = self._rank_of.get(src_key(addr))
            self._c["refused"] += 1
            if r is not None and r in self._heard:
                self._peer_died(r, f"peer rank {r} at {addr[0]}:{addr[1]} refused a datagram (port unreachable: "
                                   "its socket is closed, its process ended)", tell=True)

    def _liveness(self, now: float) -> None:
        """Probe the peers this rank waits on (posted receives, unacknowledged sends) that have been silent for a
        quarter of ``peer_timeout`` (at most ``_PROBE_EVERY``); declare dead one silent for all of it. (A probe to
        a peer whose process ended is refused at once: :meth:`_read_errors`.) Silence counts from the later of the
        last datagram heard from the peer and the start of the wait, so a peer that computes for a long time but
        whose endpoint answers probes is never declared dead."""
        waiting: dict[int, float] = {}
        for inc in self._incoming.values():
            if inc.posted and not inc.done:
                t = waiting.get(inc.peer)
                waiting[inc.peer] = inc.posted_at if t is None else min(t, inc.posted_at)
        for p in self._peers.values():
            if p.active:
                t = waiting.get(p.rank)
                waiting[p.rank] = p.last_feedback if t is None else min(t, p.last_feedback)
        pt = self.opts.peer_timeout
        for r, since in waiting.items():
            silent = now - max(since, self._heard.get(r, 0.0))
            if silent > pt:
                self._c["peer_timeouts"] += 1
                a = self.addr_map[r]
                self._peer_died(r, f"peer rank {r} at {a[0]}:{a[1]} sent nothing for {silent:.3f}s (peer_timeout "
                                   f"{pt}s) while rank {self.rank} waited on it", tell=True)
            elif silent > min(pt / 4, _PROBE_EVERY) and now >= self._probe_next.get(r, 0.0):
                self._probe_next[r] = now + min(pt / 4, _PROBE_EVERY)
                self._send_probe(r, CTL_PROBE)
        if self._notices:
            due = [m for t, m in self._notices if t <= now]
            if due:
                self._notices = [(t, m) for t, m in self._notices if t > now]
                for m in due:
                    self._notify_all(m, skip=CTL.unpack_from(m, wire.HEADER_LEN)[1])

    def _tombstone(self, key: tuple[int, int], kind: str, nacked: set[int] | None = None) -> None:
        """Remember a finished transfer: [kind, when DONE was last repeated, the seqs it NACKed (or None)]."""
        self._tomb[key] = [kind, 0.0, nacked]
        if len(self._tomb) > self.opts.tombstones:
            self._tomb.pop(next(iter(self._tomb)))

    def _send_ctl(self, addr: tuple[str, int], nbytes: int) -> None:
        """Send the control message in ``_ctl_buf[:nbytes]``; behind a full send buffer it waits in the backlog
        (an ACK or DONE lost here would stall the peer until its timeout). Every control message goes out here, so
        this is where it gets its keyed tag."""
        self._io.tag(self._ctl_buf, nbytes)
        if self._ctl_backlog:  # keep the order: behind the ones already waiting
            self._queue_ctl(bytes(self._ctl_buf[:nbytes]), addr)
            return
        try:
            _unrefused(self._tx.sendmsg, [memoryview(self._ctl_buf)[:nbytes]], [], 0, addr)
            self._c["tx_datagrams"] += 1
        except BlockingIOError:
            self._queue_ctl(bytes(self._ctl_buf[:nbytes]), addr)
        except OSError:
            self._c["send_errors"] += 1

    def _queue_ctl(self, msg: bytes, addr: tuple[str, int]) -> None:
        if len(self._ctl_backlog) >= _CTL_BACKLOG:
            self._c["send_errors"] += 1  # (only a socket that stays full for thousands of messages gets here)
            return
        self._ctl_backlog.append((msg, addr))
        self._tx_full = True

    def _flush_ctl(self) -> None:
        """Send the control backlog, oldest first, until it is empty or the buffer is full again."""
        q, c = self._ctl_backlog, self._c
        while q:
            msg, addr = q[0]
            try:
                _unrefused(self._tx.sendmsg, [msg], [], 0, addr)
                c["tx_datagrams"] += 1
            except BlockingIOError:
                self._tx_full = True
                return
            except OSError:
                c["send_errors"] += 1
            q.popleft()

    # --- receiver side ---------------------------------------------------------------------------------------

    def _post(self, inc: _In, tv: TensorView, loss_bound: float | None) -> None:
        """Attach the caller's buffer; move anything staged into it."""
        if loss_bound is not None and not 0.0 <= loss_bound < 1.0:
            raise ValueError("loss_bound must be in [0, 1)")
        inc.tv, inc.loss_bound, inc.posted = tv, loss_bound, True
        inc.posted_at = time.monotonic()
        inc.dst = memoryview(tv.raw)
        st = inc.st
        if st is not None and inc.dtype != int(tv.dtype):
            inc.error = TransportError(f"transfer {inc.tid} from rank {inc.peer} carries {DType(inc.dtype).name}, "
                                       f"recv() was given {tv.dtype.name}", inc.peer)
        elif st is not None and st.max_end > tv.nbytes:
            inc.error = TransportError(f"transfer {inc.tid} from rank {inc.peer} is larger than the out buffer "
                                       f"({st.max_end} > {tv.nbytes} bytes)", inc.peer)
        elif st is not None and st.npackets and not fits_transfer(tv.nelems, st.total, st.max_count):
            inc.error = TransportError(f"transfer {inc.tid} from rank {inc.peer} has {st.total} packets of up to "
                                       f"{st.max_count} elements: no cut of the out buffer's {tv.nelems} elements "
                                       "makes that (it does not fit)", inc.peer)
        if inc.error is not None:
            self._incoming.pop((inc.peer, inc.tid), None)
            self._tombstone((inc.peer, inc.tid), "abandoned")
            self._release_stage(inc)
            inc.event.set()
            return
        if inc.stage is not None:
            used = min(len(inc.stage), st.max_end if st is not None else 0)  # the stage may be larger
            if used:
                tv.raw[:used] = inc.stage[:used]
            self._release_stage(inc)

    def _release_stage(self, inc: _In) -> None:
        """Drop ``inc``'s staging buffer and its bytes from the staging budget (on every path that ends staging:
        moved into the posted buffer, a failed post, a failed transfer)."""
        if inc.stage is not None:
            self._staging.release(inc.stage, inc.book)
            inc.stage, inc.book = None, 0

    def _on_data(self, key: tuple[int, int], items: list[tuple], now: float) -> None:
        """The data packets of one transfer from one receive batch, in arrival order: ``(words, start, length,
        tos)`` each. Payloads are copied one slice each; the bookkeeping goes to ``Reassembly`` one packet at a time
        for a few packets and as arrays for many (numpy's per-call cost beats Python's per-packet cost only
        then)."""
        c = self._c
        rank, tid = key
        n = len(items)
        w0 = items[0][0]
        inc = self._incoming.get(key)
        if inc is None:
            tomb = self._tomb.get(key)
            if tomb is not None or key in self._ready:
                c["late"] += n
                if tomb is not None and tomb[2]:  # an original of a NACKed seq: that NACK was premature
                    nacked = tomb[2]
                    if any(w[W_SEQ] in nacked and not w[W_FLAGS] & _F_RETRANSMIT for w, *_ in items):
                        tomb[2] = None  # once per transfer
                        self._premature_nack(rank)
                if tomb is None or (tomb[0] == "done" and now - tomb[1] > 0.001):
                    if tomb is not None:
                        tomb[1] = now
                    self._send_done(rank, tid, w0[W_TOTAL], -1)
                return
            if rank in self._dead:  # (a rank declared dead stays dead: its stragglers open nothing)
                c["late"] += n
                return
            if self._staging.exhausted:
                c["unclaimed_dropped"] += n
                return
            inc = _In(rank, tid, now)  # (kept only once its first header passed the checks below)
        st = inc.st
        if st is None:
            # The first accepted header fixes the transfer's shape; nothing is reserved on its word beyond what the
            # posted receive, or the staging budget, allows. A rejected packet is dropped and counted, never fails
            # the receive: the receiver cannot tell a mismatched sender from a stranger's packet (a genuine
            # mismatch shows in the receive's timeout message).
            k = 0
            while k < n:  # each packet on its own word: the first acceptable one opens the transfer
                why = self._first_header_check(inc, items[k][0])
                if why is None:
                    break
                self._reject(inc, why[0], 1, why[1])
                if why[0] == "total" and inc.tv is None:
                    c["unclaimed_dropped"] += 1
                k += 1
            if k == n:
                return
            if k:
                items = items[k:]
                n = len(items)
                w0 = items[0][0]
            total, elig = w0[W_TOTAL], w0[W_ELIG]
            if inc.tv is None:
                inc.book = self._staging.charge_book(total)
            st = inc.st = Reassembly(total, elig)
            inc.dtype, inc.layer = w0[W_DTYPE], w0[W_LAYER]
            inc.first_arrival = now
            inc.nack_interval = self.opts.nack_interval
            self._incoming[key] = inc
        inc.touched = now
        total, dtype, arrived, n_elig = st.total, inc.dtype, st.arrived, st.eligible
        hl = wire.HEADER_LEN
        src = self._rxmv
        posted = inc.dst is not None
        if posted:
            dst = inc.dst
        else:
            # only packets the loop below can take size the stage: one whose end lies past what the claimed
            # packets carry, or whose shape is not the transfer's, is refused there and must reserve nothing here
            # (one such packet sized the stage to the whole staging budget; tests/fuzz/test_regressions.py)
            carry = total * _MAX_PAYLOAD
            top = max((w[W_OFFSET] + ln - hl for w, _s, ln, _t in items
                       if w[W_OFFSET] + ln - hl <= carry and w[W_TOTAL] == total and w[W_DTYPE] == dtype), default=0)
            stage = inc.stage
            if top > len(stage):  # size it for the whole transfer at once when these are full-size packets
                full = max(ln for _w, _s, ln, _t in items) - hl
                new = self._staging.grow(stage, top, full, total, st.max_end)
                if new is not stage:  # (what still does not fit is dropped below, as over the budget)
                    if not len(stage):
                        c["staged_transfers"] += 1  # data came before its receive was posted
                    stage = inc.stage = new
            dst = memoryview(stage)
        cap = len(dst)
        batch = n >= _BATCH_MIN
        nacked = inc.nacked
        seen: set[int] = set()
        seqs: list[int] = []
        offs: list[int] = []
        cnts: list[int] = []
        plens: list[int] = []
        got = fresh = 0
        for w, s, ln, tos in items:
            seq = w[W_SEQ]
            if w[W_TOTAL] != total or w[W_DTYPE] != dtype or w[W_ELIG] != n_elig:
                c["inconsistent"] += 1
                continue
            if arrived[seq] or seq in seen:
                inc.dups += 1
                c["duplicates"] += 1
                inc.since_ack += 1
                self._ack_pending.add(key)
                continue
            if nacked and seq in nacked and not w[W_FLAGS] & _F_RETRANSMIT:  # the original came after all
                nacked = inc.nacked = None
                self._premature_nack(rank)
            off = w[W_OFFSET]
            plen = ln - hl
            if off + plen > cap:  # dropped, not fatal (see above)
                if posted:
                    self._reject(inc, "offset", 1, f"packet {seq} ends at byte {off + plen}, the out buffer has "
                                                   f"{cap} (it does not fit)")
                elif off + plen > total * _MAX_PAYLOAD:
                    self._reject(inc, "offset", 1, f"packet {seq} ends at byte {off + plen}, past what {total} "
                                                   "packets carry")
                else:
                    c["unclaimed_dropped"] += 1  # over the staging budget
                continue
            dst[off: off + plen] = src[s + hl: s + ln]
            ce = (tos & 3) == wire.ECN_CE
            if ce:
                inc.ce_marks += 1
                c["ecn_ce_rx"] += 1
            if ce != inc.ce_state:  # DCTCP receiver: ACK the packets before the first with the other CE state
                if seqs:
                    Endpoint._add_arrivals(st, seqs, offs, cnts, plens)
                    seqs, offs, cnts, plens = [], [], [], []
                if inc.since_ack:
                    self._send_ack(inc)
                inc.ce_state = ce
            if batch:
                seen.add(seq)
                seqs.append(seq)
                offs.append(off)
                cnts.append(w[W_COUNT])
                plens.append(plen)
            else:
                st.add(seq, off, w[W_COUNT], plen)
            inc.since_ack += 1
            got += plen
            fresh += 1
        if seqs:
            Endpoint._add_arrivals(st, seqs, offs, cnts, plens)
        if fresh:
            self._arrived(inc, key, fresh, got, now)

    def _arrived(self, inc: _In, key: tuple[int, int], fresh: int, got: int, now: float) -> None:
        """After ``fresh`` new packets (``got`` bytes) of ``inc`` were recorded: counters, then complete, ACK now,
        or leave the ACK for the end of the receive pass."""
        c = self._c
        inc.last_arrival = now
        inc.bytes += got
        inc.nack_interval = self.opts.nack_interval
        c["rx_bytes"] += got
        c["rx_data_packets"] += fresh
        st = inc.st
        if st.complete or st.satisfied(inc.loss_bound, inc.tv.nelems if inc.tv is not None else None):
            self._complete_in(inc, now)  # every protected packet is in: what eligible one is missing is lost
        elif inc.since_ack >= self.opts.ack_every or st.last_seen and inc.since_ack:
            self._send_ack(inc)
        else:
            self._ack_pending.add(key)

    def _fast_progress(self, prog: list[tuple], now: float) -> None:
        """Account for what the C fast lane (``_rxlane.fast_pass``) recorded this pass: one tuple per transfer,
        ``(state, datagrams, fresh, duplicates, bytes, elements, max_count, max_end, max_seq, cum, ce,
        premature)``. All of a transfer's records the lane took in one pass have one ECN state, ``ce``; when it
        differs from the transfer's, the packets before it are ACKed first (DCTCP's receiver); a second change
        within the pass went the Python path. ``premature``: an original of a NACKed seq arrived."""
        c = self._c
        for inc, _ndg, fresh, dups, got, nelems, max_count, max_end, max_seq, cum, ce, premature in prog:
            key = (inc.peer, inc.tid)
            self._heard[inc.peer] = now
            inc.touched = now
            if premature:
                inc.nacked = None
                self._premature_nack(inc.peer)
            if fresh and ce != inc.ce_state:
                if inc.since_ack:
                    self._send_ack(inc)
                inc.ce_state = ce
            if dups:
                inc.dups += dups
                c["duplicates"] += dups
                inc.since_ack += dups
                self._ack_pending.add(key)
            if fresh:
                if ce:
                    inc.ce_marks += fresh
                    c["ecn_ce_rx"] += fresh
                inc.st.add_counted(fresh, nelems, max_count, max_end, max_seq, cum)
                inc.since_ack += fresh
                self._arrived(inc, key, fresh, got, now)

    @staticmethod
    def _add_arrivals(st: Reassembly, seqs, offs, cnts, plens) -> None:
        """Record distinct new arrivals (lists): one at a time for a few, as one range for a run in seq order (the
        common case), else as arrays."""
        k = len(seqs)
        if k < _BATCH_MIN:
            for a in zip(seqs, offs, cnts, plens):
                st.add(*a)
        elif seqs[-1] - seqs[0] == k - 1 and seqs == list(range(seqs[0], seqs[0] + k)):
            st.add_range(seqs[0], offs, cnts, max(map(int.__add__, offs, plens)))
        else:
            st.add_batch(np.array(seqs, np.int64), np.array(offs, np.int64), np.array(cnts, np.int64),
                         np.array(plens, np.int64))

    def _first_header_check(self, inc: _In, w: tuple) -> tuple[str, str] | None:
        """Why the first header ``w`` of a transfer may not open it, as (field, reason), or None when it may: its
        eligible count is below its total, and against a posted receive its dtype is the posted one and its total
        and count fit the posted elements (:func:`fits_transfer`); without one, its bookkeeping fits the staging
        budget."""
        total, elig, count = w[W_TOTAL], w[W_ELIG], w[W_COUNT]
        tv = inc.tv
        if elig >= total:
            return "eligible", f"{elig} eligible packets of {total}"
        if tv is None:
            if not self._staging.admits(total):
                return "total", f"claims {total} packets, more than the staging budget holds"
            return None
        if int(tv.dtype) != w[W_DTYPE]:
            return "dtype", f"carries {DType(w[W_DTYPE]).name}, recv() was given {tv.dtype.name}"
        if not fits_transfer(tv.nelems, total, count):
            return "total", (f"claims {total} packets, one of {count} elements: no cut of the out buffer's "
                             f"{tv.nelems} elements makes that (it does not fit)")
        return None

    def _reject(self, inc: _In, fld: str, n: int, why: str) -> None:
        """Drop ``n`` packets of ``inc`` whose header field ``fld`` its receive does not allow (counted per field;
        the last reason is named if the receive times out)."""
        self._counters.rejected(fld, n)
        inc.rejected += n
        inc.reject_why = f"{fld}: {why}"

    def _fail_in(self, inc: _In, why: str) -> None:
        self._c["inconsistent"] += 1
        self._drop_in(inc, TransportError(f"transfer {inc.tid} from rank {inc.peer}: {why}", inc.peer))

    def _drop_in(self, inc: _In, error: BaseException) -> None:
        """End an incoming transfer with ``error`` (lock held): forget it, so its later packets are dropped as
        late and never answered (the sender fails after its peer timeout), give back its staging, wake the
        receiver."""
        key = (inc.peer, inc.tid)
        self._incoming.pop(key, None)
        self._tombstone(key, "abandoned")
        self._release_stage(inc)
        inc.error = error
        inc.done = True
        inc.event.set()

    def _send_ack(self, inc: _In) -> None:
        st = inc.st
        base = st.ack_base()
        if st.max_seq < base:  # in order so far: nothing beyond cum to report
            seg, count = None, 0
        else:
            maxbits = 8 * (self._mss - 8)
            seg = st.arrived[base: base + maxbits]
            nz = np.flatnonzero(seg)
            count = int(nz[-1]) + 1 if nz.size else 0
        buf = self._ctl_buf
        pack_control_header(buf, MsgType.ACK, flags=Flag.ECN_ECHO if inc.ce_state else 0, rank=self.rank,
                            job_id=self.job_id, transfer_id=inc.tid, offset=clock_us(time.monotonic()),
                            seq=base, total=st.total,
                            count=count, nonce=self.nonce)
        bm = np.packbits(seg[:count]).tobytes() if count else b""
        buf[wire.HEADER_LEN: wire.HEADER_LEN + len(bm)] = bm
        self._send_ctl(self.addr_map[inc.peer], wire.HEADER_LEN + len(bm))
        inc.since_ack = 0
        inc.acks += 1
        self._c["acks_sent"] += 1

    def _send_nack(self, inc: _In, seqs: np.ndarray) -> None:
        base = int(seqs[0])
        maxbits = 8 * (self._mss - 8)
        seqs = seqs[seqs < base + maxbits]
        count = int(seqs[-1]) - base + 1
        bits = np.zeros(count, bool)
        bits[seqs - base] = True
        buf = self._ctl_buf
        pack_control_header(buf, MsgType.NACK, flags=Flag.ECN_ECHO if inc.ce_state else 0, rank=self.rank,
                            job_id=self.job_id, transfer_id=inc.tid, offset=clock_us(time.monotonic()),
                            seq=base, total=inc.st.total,
                            count=count, nonce=self.nonce)
        bm = np.packbits(bits).tobytes()
        buf[wire.HEADER_LEN: wire.HEADER_LEN + len(bm)] = bm
        self._send_ctl(self.addr_map[inc.peer], wire.HEADER_LEN + len(bm))
        if inc.nacked is None:
            inc.nacked = set()
        inc.nacked.update(seqs.tolist())
        inc.nacks += 1
        self._c["nacks_sent"] += 1

    def _premature_nack(self, peer: int) -> None:
        """An original packet of a seq this receiver had NACKed arrived: the path reorders more than the wait."""
        self._c["premature_nacks"] += 1
        self._reo[peer] = min(_REORDER_MAX, 2 * self._reo.get(peer, _REORDER_TIME))

    def _send_done(self, peer: int, tid: int, total: int, received: int) -> None:
        buf = self._ctl_buf
        pack_control_header(buf, MsgType.CONTROL, flags=0, rank=self.rank, job_id=self.job_id, transfer_id=tid,
                            seq=0, total=total, count=0, nonce=self.nonce)
        CTL.pack_into(buf, wire.HEADER_LEN, CTL_DONE, max(received, 0) if received >= 0 else 0xFFFFFFFF)
        self._send_ctl(self.addr_map[peer], wire.HEADER_LEN + CTL.size)
        self._c["dones_sent"] += 1

    def _complete_in(self, inc: _In, now: float) -> None:
        """The transfer is done at the packet level: tell the sender, remember it, deliver if posted."""
        key = (inc.peer, inc.tid)
        st = inc.st
        inc.done = True
        self._incoming.pop(key, None)
        self._ack_pending.discard(key)
        self._tombstone(key, "done", inc.nacked)
        if not inc.nacks and inc.peer in self._reo:
            self._reo[inc.peer] = max(_REORDER_TIME, self._reo[inc.peer] * _REORDER_DECAY)
        self._send_done(inc.peer, inc.tid, st.total, st.npackets)
        inc.completed_at = inc.touched = now
        if inc.posted:
            self._deliver(inc)
        else:
            self._ready[key] = inc

    def _deliver(self, inc: _In) -> None:
        """Zero-fill what is missing in the out buffer, build the report, wake the caller."""
        st, tv = inc.st, inc.tv
        itemsize = tv.dtype.itemsize
        n = tv.nelems
        if inc.stage is not None:  # completed while staged: move the data now
            self._post(inc, tv, inc.loss_bound)
            if inc.error is not None:
                return
        # the sender's tensor must have exactly n elements: exact when everything arrived; otherwise two necessary
        # conditions (the true chunk is >= the largest count seen)
        mc = max(st.max_count, 1)
        fits = st.nelems == n if st.complete else (st.total <= max(1, -(-n // mc)) and (st.total - 1) * mc < max(n, 1))
        if inc.dtype != int(tv.dtype) or st.max_end > tv.nbytes or not fits:
            inc.error = TransportError(f"transfer {inc.tid} from rank {inc.peer} ({st.total} packets, "
                                       f"{DType(inc.dtype).name}) does not fit out ({n} {tv.dtype.name})", inc.peer)
            inc.event.set()
            return
        lost = st.lost_ranges(n, itemsize)
        for a, b in lost:
            tv.raw[a * itemsize: b * itemsize] = 0
        report = LossReport(n, lost)
        dur = max(inc.last_arrival - inc.first_arrival, 1e-9)
        stats = {"peer": inc.peer, "transfer_id": inc.tid, "layer": inc.layer, "bytes": tv.nbytes,
                 "packets": st.total, "packets_received": st.npackets, "duplicates": inc.dups,
                 "ce_marks": inc.ce_marks, "acks_sent": inc.acks, "nacks_sent": inc.nacks,
                 "zero_filled": report.zero_filled, "lost_ranges": lost, "duration_s": dur,
                 "gbps": tv.nbytes * 8 / dur / 1e9}
        self._c["zero_filled_elements"] += report.zero_filled
        self._c["transfers_received"] += 1
        if inc.loss_bound is not None and report.fraction > inc.loss_bound + 1e-12:
            inc.error = TransportError(f"transfer {inc.tid} from rank {inc.peer} lost {report.fraction:.4%} of its "
                                       f"elements, more than the receiver's bound {inc.loss_bound:.4%} (it "
                                       "completed before recv() was posted)", inc.peer)
        inc.result = RecvResult(tv.obj, report, stats)
        log.debug("recv done %s", stats)
        inc.event.set()

    def _flush_acks(self) -> None:
        if not self._ack_pending:
            return
        with self._lock:
            for key in self._ack_pending:
                inc = self._incoming.get(key)
                if inc is not None and inc.st is not None and inc.since_ack:
                    self._send_ack(inc)
            self._ack_pending.clear()

    def _expire_unposted(self, now: float) -> None:
        """Drop the transfers nobody posted a receive for (in progress or complete) whose last packet or completion
        is older than ``Options.unposted_expiry``, with their staging; a later ``post_recv`` names the expiry."""
        limit = now - self.opts.unposted_expiry
        gone = [(k, i) for k, i in self._incoming.items() if not i.posted and i.touched < limit]
        gone += [(k, i) for k, i in self._ready.items() if not i.posted and i.touched < limit]
        for key, inc in gone:
            self._incoming.pop(key, None)
            self._ready.pop(key, None)
            self._ack_pending.discard(key)
            self._tombstone(key, "expired")
            self._release_stage(inc)
            inc.done = True
            self._c["expired_unposted"] += 1

    def _rx_timers(self, now: float) -> None:
        o = self.opts
        if now >= self._next_expiry:
            self._next_expiry = now + min(1.0, o.unposted_expiry / 4)
            self._expire_unposted(now)
        self._liveness(now)
        for inc in list(self._incoming.values()):
            st = inc.st
            if st is None or inc.done:
                continue
            idle = now - inc.last_arrival
            if inc.posted and idle > o.peer_timeout:  # the sender went silent mid-transfer
                self._c["peer_timeouts"] += 1
                self._fail_in(inc, f"peer rank {inc.peer} at {self.addr_map[inc.peer][0]} sent nothing for "
                                   f"{idle:.3f}s (peer_timeout {o.peer_timeout}s) with {st.npackets}/{st.total} "
                                   "packets received")
                continue
            n = inc.tv.nelems if inc.tv is not None else None
            if st.satisfied(inc.loss_bound, n):  # (a receive posted after its protected packets were all in)
                self._complete_in(inc, now)
                continue
            # what is missing is lost once the LAST packet came in and nothing else did for the peer's reordering
            # wait, or nothing at all came for nack_idle (at least that wait)
            reo = self._reo.get(inc.peer, _REORDER_TIME)
            if (idle >= max(o.nack_idle, reo) or st.last_seen and idle >= reo) and now >= inc.nack_next:
                need = st.needed(inc.loss_bound, n)
                if need.size:
                    self._send_nack(inc, need)
                inc.nack_next = now + inc.nack_interval
                inc.nack_interval = min(o.nack_interval_max, inc.nack_interval * 2)

    # --- sender side -----------------------------------------------------------------------------------------

    def _on_feedback(self, w: tuple, mt: int, payload: memoryview, now: float) -> None:
        c = self._c
        if mt == MsgType.CONTROL and len(payload) >= CTL.size and payload[0] != CTL_DONE:
            self._on_control(w, payload)
            return
        p = self._peers.get(w[W_RANK])
        o = p.out.get(w[W_TID_HI] << 32 | w[W_TID]) if p is not None else None
        if o is None or w[W_TOTAL] != o.total:
            c["stale_feedback"] += 1
            return
        p.last_feedback = now
        p.rto_at = 0.0
        p.cc.backoff = 0
        if mt == MsgType.CONTROL:
            if len(payload) != CTL.size or payload[0] != CTL_DONE:
                self._malformed("payload")
                return
            c["dones_rx"] += 1
            got = CTL.unpack_from(payload)[1]
            o.delivered = None if got == 0xFFFFFFFF else got
            self._finish_out(p, o, None)
            return
        base, count = w[W_SEQ], w[W_COUNT]
        ecn = bool(w[W_FLAGS] & _F_ECN_ECHO)
        if mt == MsgType.ACK and not count and not len(payload) and o.acked_hi <= o.cum_acked <= base <= o.next_seq:
            c["acks_rx"] += 1  # the common ACK: purely cumulative, no hole open at the sender
            o.acks += 1
            self._on_cum_ack(p, o, base, ecn, now, w[W_OFFSET])
            if ecn:
                o.ecn_echoes += 1
                c["ecn_echo_rx"] += 1
            return
        try:
            bits = wire.unpack_bitmap(payload, count)
        except wire.WireError as e:
            self._malformed(e.field)
            return
        if base + count > o.total:
            self._malformed("count")
            return
        if mt == MsgType.ACK:
            c["acks_rx"] += 1
            o.acks += 1
            self._on_ack(p, o, base, bits, ecn, now, w[W_OFFSET])
        else:
            c["nacks_rx"] += 1
            o.nacks += 1
            self._on_nack(p, o, base, bits, now)
        if ecn:
            o.ecn_echoes += 1
            c["ecn_echo_rx"] += 1

    def _on_ack(self, p: _Peer, o: _Out, base: int, bits: np.ndarray, ecn: bool, now: float, ts: int) -> None:
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
            # loss detection by send order and time (see _REORDER_PKTS): still in flight, sent well before
            # something now ACKed
            hi = min(o.total, base + bits.size)
            if hi > lo:
                region = slice(lo, hi)
                reo = max(_REORDER_TIME, 0.25 * p.cc.min_rtt) if p.cc.min_rtt else _REORDER_TIME
                lost = np.flatnonzero(o.inflight[region] & ~acked[region]
                                      & (o.sent_order[region] < int(so[j]) - _REORDER_PKTS)
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

    def _on_cum_ack(self, p: _Peer, o: _Out, hi: int, ecn: bool, now: float, ts: int) -> None:
        """:meth:`_on_ack` for its common case, a bitmap-free ACK of everything below ``hi`` when nothing above
        ``cum_acked`` was ACKed before (no hole open) and all of it was sent: the new packets are the slice
        ``[cum_acked, hi)``, so a handful of slice operations replace the general path's fancy indexing. Nothing can
        be judged lost (every packet of the region is now ACKed). Same state afterwards as the general path
        (``tests/host/test_endpoint.py`` runs both on reordered and lossy traffic)."""
        lo = o.cum_acked
        rtt = qdelay = None
        nbytes = 0
        if hi > lo:
            o.acked[lo:hi] = True
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

    def _on_nack(self, p: _Peer, o: _Out, base: int, bits: np.ndarray, now: float) -> None:
        seqs = np.flatnonzero(bits) + base
        seqs = seqs[o.sent_order[seqs] >= 0]
        # An ACK's base passes eligible holes (Reassembly.ack_base): a receiver whose own loss bound is tighter than
        # the sender's asks for such a packet by NACK, which overrides that ACK.
        o.acked[seqs[o.plan.eligible[seqs]]] = False
        seqs = seqs[~o.acked[seqs]]
        infl = seqs[o.inflight[seqs]]
        if infl.size:
            p.inflight -= int(o.plan.lengths[infl].sum())
            o.inflight[infl] = False
        min_gap = 0.5 * p.cc.srtt if p.cc.srtt else 0.0
        want = seqs[~o.queued[seqs] & (now - o.sent_time[seqs] >= min_gap)]
        if want.size:
            o.queued[want] = True
            o.retxq.extend(want.tolist())

    def _finish_out(self, p: _Peer, o: _Out, err: BaseException | None) -> None:
        infl = np.flatnonzero(o.inflight)
        if infl.size:
            p.inflight -= int(o.plan.lengths[infl].sum())
            o.inflight[infl] = False
        p.out.pop(o.tid, None)
        if o in p.active:
            p.active.remove(o)
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

    def _pick_burst(self, now: float):
        """Choose the next burst: (out, addr, seqs, payload bytes) or (None, seconds to wait)."""
        peers = [p for p in self._peers.values() if p.active]
        if not peers:
            return None, 1.0
        wait = 1.0
        k = len(peers)
        want = self.opts.send_buf if k == 1 else self.opts.send_buf_shared
        if want != self._send_buf:  # (a smaller buffer than what is queued only holds sends back until it drains)
            self._send_buf = want
            self._io.set_send_buf(want)  # (closed under us: nothing; the I/O loop ends on its own)
        for i in range(k):
            p = peers[(self._rr + i) % k]
            if now < p.next_send:
                wait = min(wait, p.next_send - now)
                continue
            avail = p.cc.window() - p.inflight
            if avail <= 0:
                continue
            o = next((x for x in p.active if not x.sending and x.has_work()), None)
            if o is None:
                continue
            self._rr = (self._rr + i + 1) % k
            burst = self.opts.burst
            lens, hdr, hl = o.lens, o.hdr, wire.HEADER_LEN
            seqs: list[int] = []
            nbytes = 0
            nretx = 0
            while o.retxq and len(seqs) < burst and nbytes < avail:
                s = o.retxq.popleft()
                o.queued[s] = False
                if o.acked[s]:
                    continue
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
                    o.inflight[s0:s1] = True  # (never sent, so none was in flight)
                    nbytes = cum[s1] - cum[s0]
                    p.inflight += nbytes
                    o.pkts_sent += m
                    seqs = list(range(s0, s1))
                    self._after_burst(p, nbytes, now)
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
            newly = arr[~o.inflight[arr]]
            o.inflight[arr] = True
            p.inflight += int(o.plan.lengths[newly].sum())
            o.pkts_sent += len(seqs)
            o.retransmissions += nretx
            self._c["retransmissions"] += nretx
            self._after_burst(p, nbytes, now)
            return (o, p.addr, seqs, nbytes), 0.0
        return None, wait

    @staticmethod
    def _after_burst(p: _Peer, nbytes: int, now: float) -> None:
        """Pacing: the peer's next burst may leave once this one has at the pacing rate."""
        rate = p.cc.pacing_rate()
        if math.isfinite(rate):
            p.next_send = max(p.next_send, now - 0.0005) + nbytes / rate

    def _unsend(self, o: _Out, seqs: list[int]) -> None:
        """Undo the part of a burst the full send buffer refused (``seqs``, the burst's tail, never on the wire):
        retransmissions go back to the front of the queue, new packets back before ``next_seq``; nothing of them
        counts as in flight or sent. Waiting in the I/O thread instead would hold up receives and ACKs for as long
        as the host's queue takes to drain."""
        hl = wire.HEADER_LEN
        with self._lock:
            p = self._peers.get(o.peer)
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
            elif new:  # (not a burst _pick_burst makes) queue them with the retransmissions
                o.retx[new] = True
                old = sorted(old + new)
            for s in reversed(old):
                o.retxq.appendleft(s)
                o.queued[s] = True
            c["tx_buffer_full"] += 1
            self._tx_full = True

    def _transmit(self, job) -> None:
        """Send a burst outside the lock: runs of consecutive, equal-size, same-TOS packets as one GSO send."""
        o, addr, seqs, nbytes = job
        hdr, pay, offs, lens, elig, anc = o.hdr, o.payload, o.offs, o.lens, o.elig, o.anc
        hl = wire.HEADER_LEN
        with self._lock:  # counted before they leave, so the stats never lag a completion the peer reports
            c = self._c
            c["tx_datagrams"] += len(seqs)
            c["tx_data_packets"] += len(seqs)
            c["tx_bytes"] += nbytes + hl * len(seqs)
        gso_sends = 0
        fast, key = self._fast_tx, self._key
        i, n = 0, len(seqs)
        while i < n:
            s = seqs[i]
            size = lens[s]
            j = i + 1
            if self._gso:
                e0 = elig[s]
                lim = min(n, i + _GSO_MAX_SEGS, i + _GSO_MAX_BYTES // (hl + size))
                while j < lim and seqs[j] == seqs[j - 1] + 1 and lens[seqs[j - 1]] == size \
                        and lens[seqs[j]] <= size and elig[seqs[j]] == e0:
                    j += 1
            gso = j > i + 1
            if fast is not None:
                ip4 = self._ip4.get(addr[0])
                if ip4 is None:
                    ip4 = self._ip4[addr[0]] = socket.inet_aton(addr[0])
                call = (fast, (self._sock.fileno(), hdr, pay, offs, lens, seqs, i, j, ip4, addr[1], o.tos[elig[s]],
                               hl + size if gso else 0, key))
            else:
                bufs = []
                for t in seqs[i:j]:
                    off = offs[t]
                    h, p = hdr[t * hl: t * hl + hl], pay[off: off + lens[t]]
                    if key is not None:
                        h[wire.TAG_AT:] = packet_tag(key, h, p).to_bytes(8, "big")
                    bufs.append(h)
                    bufs.append(p)
                a = anc[elig[s]]
                ancdata = a + [(_SOL_UDP, _UDP_SEGMENT, struct.pack("=H", hl + size))] if gso else a
                call = (self._tx.sendmsg, (bufs, ancdata, 0, addr))
            ok = self._sendmsg(*call, gso)
            if ok is None:  # the send buffer is full: the rest goes back to be sent when there is room
                self._unsend(o, seqs[i:])
                break
            if not ok:
                if self._closed:
                    return
                if j > i + 1 and self._gso is False:
                    continue  # GSO was refused: send this run again one datagram at a time
            elif j > i + 1:
                gso_sends += 1
            i = j
        if gso_sends:
            with self._lock:
                self._c["tx_gso_sends"] += gso_sends

    def _sendmsg(self, fn: Callable, args: tuple, gso: bool) -> bool | None:
        """One send, ``fn(*args)`` (the socket's sendmsg, or the send lane's ``send_run``). None when the socket
        buffer is full (nothing sent; ``_tx_full`` is set), False when it failed (counted); a refused segmentation
        offload (a ``gso`` send failing) turns GSO off for good (the caller resends one by one)."""
        try:
            _unrefused(fn, *args)
            return True
        except BlockingIOError:
            self._tx_full = True
            return None
        except OSError as e:
            if gso and self._gso and e.errno not in _ICMP_ERRNOS:
                self._gso = False
                log.info("dlcp rank %d: UDP segmentation offload refused (%s); sending datagrams one by one",
                         self.rank, e)
                return False
            with self._lock:
                self._c["send_errors"] += 1
            return False

    def _tx_timers(self, now: float) -> None:
        for p in list(self._peers.values()):
            if not p.active:
                continue
            silent = now - p.last_feedback
            if silent > self.opts.peer_timeout:
                self._c["peer_timeouts"] += 1
                err = TransportError(f"peer rank {p.rank} at {p.addr[0]}:{p.addr[1]} sent no feedback for "
                                     f"{silent:.3f}s (peer_timeout {self.opts.peer_timeout}s)", p.rank)
                for o in list(p.active):
                    self._finish_out(p, o, err)
                continue
            if silent <= p.cc.rto or now < p.rto_at or any(o.sending for o in p.active):
                continue  # (a caller still transmitting a first burst: its packets have not all left yet)
            waiting = [o for o in p.active if o.next_seq >= o.total or p.inflight > 0]
            if not waiting and p.inflight <= 0:
                continue
            # retransmission timeout: forget what is in flight (so the window opens again), restart the window and
            # send one probe per transfer. Not a mass retransmission: a timeout on this shared, Python-paced host
            # is as often a stall as a loss, and the receiver's NACK names exactly what is missing.
            self._c["rto_timeouts"] += 1
            p.cc.on_timeout()
            p.rto_fired = now
            p.rto_at = now + p.cc.rto
            for o in p.active:
                o.inflight[:] = False
                if o.retxq:
                    continue
                un = np.flatnonzero(~o.acked[: o.next_seq])
                if un.size:  # the highest unACKed packet sent (a tail probe): the receiver answers with a NACK
                    s = int(un[-1])  # for every hole below it, an ACK, or DONE
                    o.queued[s] = True
                    o.retxq.append(s)
            p.inflight = 0

    # --- threads ---------------------------------------------------------------------------------------------

    def _io_loop(self) -> None:
        """The endpoint's one I/O thread: receive what is there, run due timers, send what window and pacing allow,
        and sleep in ``select`` only when there is nothing to do. One thread, not a receive and a send thread: the
        thread that handles an ACK sends the burst it opens, with no GIL handoff or cross-thread wake-up per ACK
        (which on a loaded host cost more than the work itself)."""
        sock, wake = self._sock, self._wake_r
        tick = self.opts.tick
        flush = getattr(self._tx, "flush", None)
        while not self._closed:
            try:
                recs = self._drain()
            except OSError as e:
                if self._closed:
                    return
                if e.errno not in _ICMP_ERRNOS:  # (an ICMP error is read from the error queue by the timers)
                    with self._lock:
                        self._c["internal_errors"] += 1
                recs = 0
            with self._lock:
                if recs:
                    try:
                        self._handle(recs)
                    except Exception:  # never let a bug kill the I/O thread silently
                        self._c["internal_errors"] += 1
                        log.exception("dlcp receive")
                now = time.monotonic()
                if now >= self._next_tick:
                    try:
                        self._read_errors(now)
                        self._rx_timers(now)
                        self._tx_timers(now)
                    except Exception:
                        self._c["internal_errors"] += 1
                        log.exception("dlcp timers")
                    self._next_tick = now + tick
            if self._sliced:
                self._classify_slices()
            sent = 0
            wait = 1.0
            if self._tx_full and select.select([], [sock], [], 0)[1]:  # (receiving without a pause never sleeps
                self._tx_full = False  # in the select below, which would see it too)
            if self._ctl_backlog and not self._tx_full:
                with self._lock:
                    self._flush_ctl()
            while sent < _TX_BURSTS_PER_ROUND and not self._tx_full:  # then receive again: ACKs and data must
                # not wait behind sends
                with self._lock:
                    job, wait = self._pick_burst(time.monotonic())
                if job is None:
                    break
                self._transmit(job)
                sent += 1
            if recs or sent:
                continue
            self._flush_acks()
            if flush is not None:
                flush()
            with self._lock:
                if self._closed:
                    return
                now = time.monotonic()
                job, wait = self._pick_burst(now) if not self._tx_full else (None, 1.0)
                if job is None:
                    self._sleeping = True  # from here on, send() writes to the wake socket
                busy = self._incoming or any(p.active for p in self._peers.values())
                timeout = max(0.0, min(wait, self._next_tick - now)) if busy else 0.2
            if job is not None:
                self._transmit(job)
                continue
            try:  # (a full send buffer: until half of it is free)
                ready, writable, _ = select.select([sock, wake], [sock] if self._tx_full else [], [], timeout)
            except (OSError, ValueError):
                return
            self._sleeping = False
            if writable:
                self._tx_full = False
            if wake in ready:
                try:
                    while wake.recv(4096):
                        pass
                except (BlockingIOError, OSError):
                    pass

    def _drain(self) -> int:
        """Receive until the socket is empty or the batch is full; returns the records, described in ``_recs``."""
        return self._io.drain()

    def _wake(self) -> None:
        """Called under the lock after posting work: wake the I/O thread if it sleeps in select."""
        if self._sleeping:
            self._sleeping = False
            try:
                self._wake_w.send(b"x")
            except OSError:  # full: a wake-up is already pending
                pass

    def _malformed(self, fld: str) -> None:
        self._counters.malformed(fld)

    def _handle(self, n: int) -> None:
        """The ``n`` records of ``_recs`` (called with the lock held): the C fast lane takes the data records it
        can (see ``_rxlane.fast_pass``), the rest go to :meth:`_handle_records`."""
        now = time.monotonic()
        if self._native_rx:
            prog, slow, dgrams, gro = _rxlane.fast_pass(self._rxbuf, self._recs, n, self._rank_of, self._incoming,
                                                        self.job_id, self.nonce, self._key)
            if dgrams:
                c = self._c
                c["rx_datagrams"] += dgrams
                c["rx_fast_datagrams"] += dgrams
                c["rx_gro_buffers"] += gro
                self._fast_progress(prog, now)
        else:
            rank_of = self._rank_of
            slow = [(pos, nbytes, tos, seg, rank_of.get(key)) for pos, nbytes, tos, seg, key in self._recs[:n].tolist()]
        if slow:
            self._handle_records(slow, now)

    def _handle_records(self, recs: list[tuple], now: float) -> None:
        """Received records ``(position, bytes, TOS, GRO segment size, source rank or None)`` the Python path
        takes: split GRO buffers into datagrams, check each header (one ``struct`` unpack and a few integer tests;
        anything failing them is re-parsed by ``wire.parse_datagram`` to name the bad field), group data packets
        per transfer for :meth:`_on_data`, and hand feedback to :meth:`_on_feedback` one message at a time."""
        c = self._c
        hl = wire.HEADER_LEN
        mv, unpack = self._rxmv, HDR.unpack_from
        job, nonce, tag_key = self.job_id, self.nonce, self._key
        groups: dict[tuple[int, int], list[tuple]] = {}
        feedback: list[tuple] = []
        ndgrams = 0
        for pos, nbytes, tos, seg, src in recs:
            gro = seg and nbytes > seg
            if gro:
                c["rx_gro_buffers"] += 1
            segs = [(s, min(seg, pos + nbytes - s)) for s in range(pos, pos + nbytes, seg)] if gro else [(pos, nbytes)]
            for s, ln in segs:
                ndgrams += 1
                if ln < hl:
                    self._slow_parse(s, ln)
                    continue
                w = unpack(mv, s)
                vt = w[W_VT]
                mt = vt & 0x0F
                dt = w[W_DTYPE]
                ok = (vt >> 4) == wire.VERSION and mt <= 3 and not (w[W_FLAGS] & 0xF0) and not (w[W_PMR] & 3) \
                    and dt < NDTYPES
                if ok:
                    plen = ln - hl
                    if mt == MsgType.DATA:
                        isz = ITEMSIZE[dt]
                        ok = 0 <= w[W_SEQ] < w[W_TOTAL] and not w[W_OFFSET] % isz and plen == w[W_COUNT] * isz
                    elif mt != MsgType.CONTROL:
                        ok = plen == (w[W_COUNT] + 7) >> 3
                if not ok:
                    self._slow_parse(s, ln)
                elif w[W_JOB] != job or w[W_NONCE] != nonce:
                    c["foreign"] += 1
                elif tag_key is not None and packet_tag(tag_key, mv[s: s + hl], mv[s + hl: s + ln]) != w[W_TAG]:
                    self._bad_tag()
                elif src != w[W_RANK]:
                    c["stray"] += 1
                elif mt == MsgType.DATA:
                    self._heard[src] = now
                    key = (w[W_RANK], w[W_TID_HI] << 32 | w[W_TID])
                    g = groups.get(key)
                    if g is None:
                        g = groups[key] = []
                    g.append((w, s, ln, tos))
                else:
                    self._heard[src] = now
                    feedback.append((w, mt, s, ln))
        c["rx_datagrams"] += ndgrams
        for key, items in groups.items():
            self._on_data(key, items, now)
        for w, mt, s, ln in feedback:
            self._on_feedback(w, mt, mv[s + hl: s + ln], now)

    def _bad_tag(self) -> None:
        """A well-formed datagram of this job whose keyed tag is wrong: a stranger's (who knows the job id and
        nonce but not the key), or one changed on the way. Dropped before it touches any state; counted."""
        self._counters.rejected("tag")

    def _slow_parse(self, start: int, nbytes: int) -> None:
        try:
            wire.parse_datagram(self._rxmv[start: start + nbytes], nbytes)
        except wire.WireError as e:
            self._malformed(e.field)
        else:
            self._malformed("transport")
