"""A simulated network between the real sender and receiver stages, on a simulated clock.

What: rank 0's :class:`host.transport.sender.Sender` and rank 1's :class:`host.transport.receiver.Receiver`, built
as an ``Endpoint`` builds them but without sockets or threads, exchange their real datagrams (the sender's packet
headers and payload bytes, the receiver's ACK/NACK/DONE messages) through a one-way-delay link whose loss is a
function of the send time, the direction and the packet. Every millisecond of simulated time the loop delivers
what is due, runs both stages' timers, and sends every burst ``Sender.pick_burst`` allows, as the I/O thread does.
Both modules' clocks (``time.monotonic``) read the simulated clock while a :class:`SimLink` runs.

Why: the stalls this catches (a window full of packets lost in a blackout, a retransmission that the receiver's
NACKs keep asking for but the window never lets out) depend on the exact order of sends, losses, NACKs and timers;
on a real network they show once in a few runs, here they replay exactly, in a fraction of a second, so a property
test can search blackouts, loss patterns and transfer mixes (``tests/host/test_loss_recovery.py``).
"""

from __future__ import annotations

import heapq
import threading
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from host import wire
from host.transport import receiver as receiver_mod
from host.transport import sender as sender_mod
from host.transport.api import Options
from host.transport.cc import CCParams
from host.transport.chunking import payload_capacity
from host.transport.control import HDR, W_COUNT, W_SEQ, W_TID, W_TID_HI, W_VT
from host.transport.receiver import Receiver
from host.transport.sender import OutTransfer, Sender, plan_send
from host.transport.stats import Counters
from host.transport.tensors import view_tensor
from host.wire import MsgType

__all__ = ["SimLink", "SimClock", "Transfer", "transfer", "LossModel"]

JOB, NONCE = 3, 0x5151
ADDRS = {0: ("127.0.0.1", 1), 1: ("127.0.0.2", 1)}

#: ``loss(t, kind, info)``: whether a datagram sent at simulated time ``t`` is lost. ``kind`` is "data" (sender to
#: receiver; ``info`` = (transfer id, seq, a retransmission?)) or "ctl" (receiver to sender; ``info`` = message type).
LossModel = Callable[[float, str, tuple], bool]


class SimClock:
    """The simulated clock, in seconds; stands in for the ``time`` module of the stages."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now


class _CtlOut:
    """The receiver's transmitter: control messages are written into ``ctl_buf`` and handed to the link."""

    def __init__(self, link: "SimLink"):
        self.ctl_buf = bytearray(wire.HEADER_LEN + 9000)
        self._link = link

    def send_ctl(self, addr, nbytes: int) -> None:
        self._link._ctl(bytes(self.ctl_buf[:nbytes]))

    def send_msg(self, msg: bytes, addr) -> None:
        self._link._ctl(bytes(msg))


class _RxIO:
    """The receiver's packet layer: the buffer datagrams are delivered into."""

    def __init__(self) -> None:
        self.rxbuf = bytearray(1 << 21)
        self.rxmv = memoryview(self.rxbuf)


class _TxIO:
    def set_send_buf(self, nbytes: int) -> None:
        pass


@dataclass
class Transfer:
    """One send from rank 0 to rank 1 and its posted receive."""
    tid: int
    x: np.ndarray
    loss_bound: float
    start: float
    out: np.ndarray = field(init=False)
    o: OutTransfer | None = None
    inc: object | None = None
    done_at: float | None = None

    def __post_init__(self) -> None:
        self.out = np.full_like(self.x, 7)


class SimLink:
    """Rank 0 sends ``transfers`` to rank 1 over a link with one-way ``delay`` and loss model ``loss``."""

    def __init__(self, transfers: list[Transfer], loss: LossModel, *, delay: float = 0.025,
                 options: Options | None = None, srtt: float | None = None):
        self.clock = SimClock()
        self.opts = opts = options or Options(peer_timeout=10.0)
        self.loss, self.delay = loss, delay
        self.transfers = sorted(transfers, key=lambda t: t.start)
        self.lock = threading.Lock()
        mss = payload_capacity(opts.mtu)
        self.sc, self.rc = Counters(), Counters()
        self.sender = Sender(opts, dict(ADDRS), opts.cc or CCParams(mss=mss), _TxIO(), self.sc, self.lock)
        self.rx_io = _RxIO()
        self.receiver = Receiver(1, JOB, NONCE, dict(ADDRS), opts, mss, self.rx_io, _CtlOut(self), self.rc,
                                 self.lock, dead={}, heard={})
        self.peer = self.sender.peer(1)
        if srtt is not None:
            self.peer.cc.on_rtt(srtt)
        self._events: list[tuple[float, int, str, bytes, int]] = []  # (arrival, order, kind, datagram, tos)
        self._order = 0
        self.data_sent = 0
        self.delivered: list[float] = []  # arrival time of every data packet new to the receiver
        self.sent_at: dict[tuple[int, int], list[float]] = {}  # (transfer id, seq) -> when each copy left
        self.arrived_at: dict[tuple[int, int], float] = {}  # (transfer id, seq) -> when its first copy arrived
        self.nacks: list[tuple[float, int, list[int]]] = []  # NACKs the sender took: (when, transfer id, seqs)
        self._by_tid = {t.tid: t for t in self.transfers}

    # --- the link ---------------------------------------------------------------------------------------------
    def _push(self, kind: str, dgram: bytes, tos: int = 0) -> None:
        self._order += 1
        heapq.heappush(self._events, (self.clock.now + self.delay, self._order, kind, dgram, tos))

    def _ctl(self, msg: bytes) -> None:
        if not self.loss(self.clock.now, "ctl", (HDR.unpack_from(msg)[W_VT] & 0x0F,)):
            self._push("ctl", msg)

    def _transmit(self, job) -> None:
        o, _addr, seqs, _n = job
        hl = wire.HEADER_LEN
        for s in seqs:
            hdr = bytes(o.hdr[s * hl:(s + 1) * hl])
            dgram = hdr + bytes(o.payload[o.offs[s]: o.offs[s] + o.lens[s]])
            self.data_sent += 1
            self.sent_at.setdefault((o.tid, s), []).append(self.clock.now)
            retx = bool(hdr[1] & int(wire.Flag.RETRANSMIT))
            if not self.loss(self.clock.now, "data", (o.tid, s, retx)):
                self._push("data", dgram, o.tos[o.elig[s]])

    def _deliver(self, now: float) -> None:
        data: list[tuple[bytes, int]] = []
        ctl: list[bytes] = []
        while self._events and self._events[0][0] <= now + 1e-12:
            _t, _k, kind, dgram, tos = heapq.heappop(self._events)
            (data.append((dgram, tos)) if kind == "data" else ctl.append(dgram))
        if data:
            groups: dict[tuple[int, int], list[tuple]] = {}
            pos, buf = 0, self.rx_io.rxbuf
            for dgram, tos in data:
                buf[pos: pos + len(dgram)] = dgram
                w = HDR.unpack_from(buf, pos)
                tid = w[W_TID_HI] << 32 | w[W_TID]
                groups.setdefault((0, tid), []).append((w, pos, len(dgram), tos))
                self.arrived_at.setdefault((tid, w[W_SEQ]), now)
                pos += len(dgram)
            for key, items in groups.items():
                inc = self.receiver.incoming.get(key)
                before = int(inc.st.npackets) if inc is not None and inc.st is not None else 0
                self.receiver.on_data(key, items, now)
                inc = self.receiver.incoming.get(key) or self._by_tid[key[1]].inc
                after = int(inc.st.npackets) if inc is not None and inc.st is not None else 0
                self.delivered.extend([now] * max(0, after - before))
            self.receiver.flush_acks()
        for msg in ctl:
            w = HDR.unpack_from(msg)
            if w[W_VT] & 0x0F == MsgType.NACK:
                bits = wire.unpack_bitmap(memoryview(msg)[wire.HEADER_LEN:], w[W_COUNT])
                self.nacks.append((now, w[W_TID_HI] << 32 | w[W_TID], (np.flatnonzero(bits) + w[W_SEQ]).tolist()))
            self.sender.on_feedback(w, w[W_VT] & 0x0F, memoryview(msg)[wire.HEADER_LEN:], now)

    # --- the loop ---------------------------------------------------------------------------------------------
    def run(self, until: float, tick: float = 0.001) -> None:
        """Run the simulated endpoints until every transfer is done (or failed) or ``until`` seconds."""
        saved = receiver_mod.time, sender_mod.time
        receiver_mod.time = sender_mod.time = self.clock  # (both stages read the simulated clock)
        try:
            self._run(until, tick)
        finally:
            receiver_mod.time, sender_mod.time = saved

    def _run(self, until: float, tick: float) -> None:
        clock = self.clock
        pending = list(self.transfers)
        steps = 0
        while clock.now < until:
            now = clock.now
            while pending and pending[0].start <= now:
                t = pending.pop(0)
                tv = view_tensor(t.x)
                ids = dict(layer=0, rank=0, job_id=JOB, transfer_id=t.tid, nonce=NONCE)
                plan, ready, slicer = plan_send(tv, self.opts, t.loss_bound, ids, in_slices=False)
                inc = self.receiver.claim(0, t.tid, lambda peer, tid: None)
                self.receiver.post(inc, view_tensor(t.out, writable=True), None)
                t.inc = inc
                t.o = self.sender.start(1, t.tid, tv, plan, ready, now, layer=0, loss_bound=t.loss_bound,
                                        slicer=slicer)
            self._deliver(now)
            self.receiver.timers(now)
            self.sender.timers(now)
            while True:
                job, _wait = self.sender.pick_burst(now)
                if job is None:
                    break
                self._transmit(job)
            for t in self.transfers:
                if t.done_at is None and t.o is not None and t.o.handle.done() and t.inc.event.is_set():
                    t.done_at = now
            if not pending and all(t.done_at is not None for t in self.transfers):
                return
            steps += 1
            clock.now = round(steps * tick, 9)

    # --- results ----------------------------------------------------------------------------------------------
    def check_results(self) -> None:
        """Every transfer ended without error; its receiver holds the sent data except the ranges it reports
        zero-filled, which are zero and within the transfer's loss bound."""
        for t in self.transfers:
            assert t.done_at is not None, f"transfer {t.tid} not done by t={self.clock.now:.3f}s"
            assert t.inc.error is None, t.inc.error
            t.o.handle.wait(0)  # (raises the send's error, if it failed)
            rep = t.inc.result.report
            lost = np.zeros(t.x.size, bool)
            for a, b in rep.lost_ranges:
                lost[a:b] = True
            assert rep.zero_filled <= int(t.loss_bound * t.x.size + 1e-9)
            assert np.array_equal(t.out[~lost], t.x[~lost]) and (t.out[lost] == 0).all()


def transfer(tid: int, packets: int, *, loss_bound: float = 0.0, start: float = 0.0, seed: int = 0) -> Transfer:
    """A float32 transfer of ``packets`` full MTU-1500 packets of random non-zero values."""
    n = packets * (payload_capacity(1500) // 4)
    x = np.random.default_rng(seed).uniform(0.5, 2.0, n).astype(np.float32)
    return Transfer(tid, x, loss_bound, start)

