"""The receiver: every transfer this rank receives, from its first datagram to the filled ``out`` buffer.

What it does, per transfer (:class:`InTransfer`, its arrival state a ``reassembly.Reassembly``):

* datagram intake into buffers (:meth:`Receiver.on_data`, and :meth:`Receiver.fast_progress` for what the C receive
  lane took): the first acceptable header fixes the transfer's shape (against a posted receive: its dtype and a cut
  of its elements, :func:`fits_transfer`; without one: the staging budget, ``unclaimed.py``); each payload is
  copied once to its offset in the posted buffer, or in a staging buffer when the receive is not posted yet
  (:meth:`Receiver.post` moves it); a packet that does not fit is rejected and counted, never fails the receive;
* ACKs (every ``ack_every`` packets, on an ECN state change as DCTCP's receiver, at LAST, when the socket is
  drained) and NACKs of the protected holes once the peer's reordering wait has passed (:meth:`Receiver.timers`,
  the wait adapting per peer when a NACK proves premature);
* completion under the loss bound (:meth:`Receiver.complete`): once every protected packet is in (and the
  receiver's own bound holds), the transfer is done, DONE goes to the sender, and whatever drop-eligible packet is
  missing is lost; :meth:`Receiver.deliver` zero-fills exactly those element ranges and reports them;
* transfers nobody posted a receive for end after ``unposted_expiry`` (:meth:`Receiver.expire_unposted`).

Everything here runs under the endpoint's lock. Control messages leave through ``transmit.Transmitter``.

Promises: a posted receive ends exactly once (result or :class:`TransportError`, its event set); the
``LossReport`` names exactly the zero-filled ranges; a completed or abandoned transfer is remembered (a tombstone),
so its late packets are answered with DONE or dropped, never reopen it; staging never exceeds
``Options.max_staged_bytes``.
"""

from __future__ import annotations

import logging
import math
import threading
import time

import numpy as np

from host import wire
from host.transport.api import LossReport, Options, RecvResult, TransportError
from host.transport.control import (CTL, CTL_DONE, DONE_UNKNOWN, REORDER_TIME, W_COUNT, W_DTYPE, W_ELIG, W_FLAGS,
                                    W_LAYER, W_OFFSET, W_SEQ, W_TOTAL, clock_us, pack_control_header)
from host.transport.packetio import PacketSocket
from host.transport.reassembly import SMALL_BATCH, Reassembly
from host.transport.stats import Counters
from host.transport.tensors import TensorView
from host.transport.transmit import Transmitter
from host.transport.unclaimed import MAX_PAYLOAD, NO_STAGE, StagingBudget
from host.wire import DType, Flag, MsgType

__all__ = ["InTransfer", "Receiver", "fits_transfer"]

log = logging.getLogger("host.transport")

# The receiver's wait after the LAST packet before it NACKs the holes starts at REORDER_TIME per sending peer and
# adapts (as RACK's reo_wnd does on DSACKs). An original packet (RETRANSMIT flag clear) of a seq the receiver had
# NACKed, arriving before or after its transfer completed, shows the NACK was premature: the path reorders more
# than the wait, so the wait doubles, up to _REORDER_MAX. Each transfer of that peer completed without a NACK
# shrinks it by _REORDER_DECAY. (Once a transfer has NACKed, its packets take the Python path, which sees each
# packet's flags.) Sprayed paths through a software switch reorder by milliseconds, more than a fixed 1 ms wait.
_REORDER_MAX = 0.016
_REORDER_DECAY = 0.98
_F_RETRANSMIT = int(Flag.RETRANSMIT)


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


#: Packets per run over which a transfer's arrival rate is measured for the holds (Options.hold_gap).
HOLD_WINDOW = 8


class InTransfer:
    """Receiver state of one transfer."""

    def __init__(self, peer: int, tid: int, now: float):
        self.peer, self.tid, self.created = peer, tid, now
        self.st: Reassembly | None = None
        self.dtype: int = -1
        self.layer = 0
        self.stage: np.ndarray | None = NO_STAGE  # uint8, before recv() is posted (np.empty: no zero-fill)
        self.dst: memoryview | None = None  # the out buffer's bytes, once posted
        self.tv: TensorView | None = None
        self.loss_bound: float | None = None
        self.posted = False
        self.event = threading.Event()
        self.result: RecvResult | None = None
        self.error: BaseException | None = None
        self.done = False
        self.first_arrival = self.last_arrival = 0.0
        # the holds' rate test (Options.hold_gap): whether the last full run of HOLD_WINDOW packets came slowly, and
        # where the run in progress began (its first arrival's time and the packet count then; -1: none yet)
        self.slow = False
        self.gap_t, self.gap_n = 0.0, -1
        self.since_ack = 0
        self.unacked_at = 0.0  # when the first packet since the last ACK arrived (0.0: a duplicate, ACK at once)
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


class Receiver:
    """The receive side of one endpoint: its transfers in progress, completed before their receive was posted, and
    finished (tombstones). State under the endpoint's ``lock``."""

    def __init__(self, rank: int, job_id: int, nonce: int, addr_map: dict[int, tuple[str, int]], opts: Options,
                 mss: int, io: PacketSocket, tx: Transmitter, counters: Counters, lock: threading.Lock, *,
                 dead: dict[int, str], heard: dict[int, float]):
        """``dead``, ``heard``: the liveness checks' ranks known dead and when each rank was last heard from (shared
        dicts: a dead rank's stragglers open nothing; data refreshes when its sender was heard from)."""
        self.rank, self.job_id, self.nonce, self.addr_map = rank, job_id, nonce, addr_map
        self.opts, self._mss = opts, mss
        self.ack_bits = 8 * (mss - 8)  # the most seqs an ACK's bitmap reports (what fits a datagram)
        self._io, self._tx, self._counters, self._c, self._lock = io, tx, counters, counters.c, lock
        self._dead, self._heard = dead, heard
        self.incoming: dict[tuple[int, int], InTransfer] = {}
        self.ready: dict[tuple[int, int], InTransfer] = {}  # completed before recv() was posted
        self.tomb: dict[tuple[int, int], list] = {}  # key -> [kind, last DONE reply time, NACKed seqs or None]
        self._ack_pending: set[tuple[int, int]] = set()
        self.staging = self._staging = StagingBudget(opts.max_staged_bytes)  # what unclaimed transfers hold
        self.reo: dict[int, float] = {}  # per sending peer: the adaptive wait after LAST (see _REORDER_MAX)
        self.slow_peers: dict[int, bool] = {}  # per sending peer: its last judged run of packets came slowly (holds)
        self._next_expiry = 0.0  # when expire_unposted runs next

    def claim(self, peer: int, tid: int, dead_error) -> InTransfer:
        """The transfer a receive is being posted for: completed already, in progress (staged), or new. Raises
        when it was received before, expired unclaimed, is being received already, or its peer is dead
        (``dead_error(peer, tid)``)."""
        key = (peer, tid)
        inc = self.ready.pop(key, None)
        if inc is not None:
            return inc
        tomb = self.tomb.get(key)
        if tomb is not None and tomb[0] == "expired":
            raise TransportError(f"transfer {tid} from rank {peer} arrived, but no receive was "
                                 f"posted for it within unposted_expiry ({self.opts.unposted_expiry}s): "
                                 "its data was dropped", peer)
        if tomb is not None:
            raise ValueError(f"transfer {tid} from rank {peer} was already received "
                             "(transfer ids are unique per sender and receiver)")
        dead = dead_error(peer, tid)
        if dead is not None:
            raise dead
        inc = self.incoming.get(key)
        if inc is None:
            inc = self.incoming[key] = InTransfer(peer, tid, time.monotonic())
        elif inc.posted:
            raise ValueError(f"transfer {tid} from rank {peer} is already being received")
        return inc

    def fail_all(self) -> None:
        """Fail every receive in progress (the endpoint closes)."""
        for inc in self.incoming.values():
            if not inc.event.is_set():
                inc.error = TransportError(f"endpoint closed while receiving transfer {inc.tid} from rank "
                                           f"{inc.peer}", inc.peer)
                inc.event.set()
        self.incoming.clear()

    def post(self, inc: InTransfer, tv: TensorView, loss_bound: float | None) -> None:
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
            self.incoming.pop((inc.peer, inc.tid), None)
            self.tombstone((inc.peer, inc.tid), "abandoned")
            self.release_stage(inc)
            inc.event.set()
            return
        if inc.stage is not None:
            used = min(len(inc.stage), st.max_end if st is not None else 0)  # the stage may be larger
            if used:
                tv.raw[:used] = inc.stage[:used]
            self.release_stage(inc)

    def release_stage(self, inc: InTransfer) -> None:
        """Drop ``inc``'s staging buffer and its bytes from the staging budget (on every path that ends staging:
        moved into the posted buffer, a failed post, a failed transfer)."""
        if inc.stage is not None:
            self._staging.release(inc.stage, inc.book)
            inc.stage, inc.book = None, 0

    def on_data(self, key: tuple[int, int], items: list[tuple], now: float) -> None:
        """The data packets of one transfer from one receive batch, in arrival order: ``(words, start, length,
        tos)`` each. Payloads are copied one slice each; the bookkeeping goes to ``Reassembly`` one packet at a time
        for a few packets and as arrays for many (numpy's per-call cost beats Python's per-packet cost only
        then)."""
        c = self._c
        rank, tid = key
        n = len(items)
        w0 = items[0][0]
        inc = self.incoming.get(key)
        if inc is None:
            tomb = self.tomb.get(key)
            if tomb is not None or key in self.ready:
                c["late"] += n
                if tomb is not None and tomb[2]:  # an original of a NACKed seq: that NACK was premature
                    nacked = tomb[2]
                    if any(w[W_SEQ] in nacked and not w[W_FLAGS] & _F_RETRANSMIT for w, *_ in items):
                        tomb[2] = None  # once per transfer
                        self._premature_nack(rank)
                if tomb is None or (tomb[0] == "done" and now - tomb[1] > 0.001):
                    if tomb is not None:
                        tomb[1] = now
                    self.send_done(rank, tid, w0[W_TOTAL], -1)
                return
            if rank in self._dead:  # (a rank declared dead stays dead: its stragglers open nothing)
                c["late"] += n
                return
            if self._staging.exhausted:
                c["unclaimed_dropped"] += n
                return
            inc = InTransfer(rank, tid, now)  # (kept only once its first header passed the checks below)
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
            self.incoming[key] = inc
        inc.touched = now
        total, dtype, arrived, n_elig = st.total, inc.dtype, st.arrived, st.eligible
        hl = wire.HEADER_LEN
        src = self._io.rxmv
        posted = inc.dst is not None
        if posted:
            dst = inc.dst
        else:
            # only packets the loop below can take size the stage: one whose end lies past what the claimed
            # packets carry, or whose shape is not the transfer's, is refused there and must reserve nothing here
            # (one such packet sized the stage to the whole staging budget; tests/fuzz/test_regressions.py)
            carry = total * MAX_PAYLOAD
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
        batch = n >= SMALL_BATCH
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
                inc.unacked_at = 0.0
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
                elif off + plen > total * MAX_PAYLOAD:
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
                    st.add_many(seqs, offs, cnts, plens)
                    seqs, offs, cnts, plens = [], [], [], []
                if inc.since_ack:
                    self.send_ack(inc)
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
            st.add_many(seqs, offs, cnts, plens)
        if fresh:
            self._arrived(inc, key, fresh, got, now)

    def _arrived(self, inc: InTransfer, key: tuple[int, int], fresh: int, got: int, now: float) -> None:
        """After ``fresh`` new packets (``got`` bytes) of ``inc`` were recorded: counters, then complete, ACK now,
        or leave the ACK for the end of the receive pass."""
        c = self._c
        inc.last_arrival = now
        n = inc.st.npackets
        if inc.gap_n < 0:
            inc.gap_t, inc.gap_n = now, n
            # its first run is taken as the peer's last judged run came (the same link, moments ago), not as fast:
            # judged fast, each of the demo's transfers of a few dozen packets spent its first two runs unheld, an
            # ACK and a wake-up per packet, and its native wait returned once to the Python loop to judge them
            inc.slow = self.slow_peers.get(inc.peer, False)
        elif n - inc.gap_n >= HOLD_WINDOW:  # (a run's time over its packets, not the transfer's: a pause of the
            inc.slow = now - inc.gap_t >= self.opts.hold_gap * (n - inc.gap_n)  # sender's is not a slow link)
            inc.gap_t, inc.gap_n = now, n
            self.slow_peers[inc.peer] = inc.slow
        if inc.since_ack == fresh:  # (nothing unACKed before these, no duplicate among them)
            inc.unacked_at = now
        inc.bytes += got
        inc.nack_interval = self.opts.nack_interval
        c["rx_bytes"] += got
        c["rx_data_packets"] += fresh
        st = inc.st
        if st.complete or st.satisfied(inc.loss_bound, inc.tv.nelems if inc.tv is not None else None):
            self.complete(inc, now)  # every protected packet is in: what eligible one is missing is lost
        elif inc.since_ack >= self.opts.ack_every or st.last_seen and inc.since_ack:
            self.send_ack(inc)
        else:
            self._ack_pending.add(key)

    def fast_progress(self, prog: list[tuple], now: float) -> None:
        """Account for what the C fast lane (``_rxlane.fast_pass``) recorded this pass: one tuple per transfer,
        ``(state, datagrams, fresh, duplicates, bytes, elements, max_count, max_end, max_seq, cum, ce,
        premature)``. All of a transfer's records the lane took in one pass have one ECN state, ``ce``; when it
        differs from the transfer's, the packets before it are ACKed first (DCTCP's receiver); a second change
        within the pass went the Python path. ``premature``: an original of a NACKed seq arrived."""
        for inc, _ndg, fresh, dups, got, nelems, max_count, max_end, max_seq, cum, ce, premature in prog:
            key = (inc.peer, inc.tid)
            self._heard[inc.peer] = now
            inc.touched = now
            if premature:
                inc.nacked = None
                self._premature_nack(inc.peer)
            if fresh and ce != inc.ce_state:
                if inc.since_ack:
                    self.send_ack(inc)
                inc.ce_state = ce
            self._took(inc, key, fresh, dups, got, nelems, max_count, max_end, max_seq, cum, fresh,
                       fresh if ce else 0, now)

    def _took(self, inc: InTransfer, key: tuple[int, int], fresh: int, dups: int, got: int, nelems: int,
              max_count: int, max_end: int, max_seq: int, cum: int, unacked: int, marked: int, now: float) -> None:
        """What a C lane (``fast_pass`` or ``rx_wait``) wrote into ``inc``: duplicates are ACKed at the pass's
        end, ``fresh`` new packets recorded (``unacked`` of them not ACKed yet, ``marked`` of them CE-marked),
        then :meth:`_arrived`."""
        c = self._c
        if dups:
            inc.dups += dups
            c["duplicates"] += dups
            inc.since_ack += dups
            inc.unacked_at = 0.0
            self._ack_pending.add(key)
        if fresh:
            if marked:
                inc.ce_marks += marked
                c["ecn_ce_rx"] += marked
            inc.st.add_counted(fresh, nelems, max_count, max_end, max_seq, cum)
            inc.since_ack += unacked
            self._arrived(inc, key, fresh, got, now)

    def native_candidate(self) -> InTransfer | None:
        """The transfer the I/O thread may sleep in ``_rxlane.rx_wait`` for (called under the lock, about to
        sleep): the posted one that is mid-way (the one last heard from, when several; holes left by reordering or
        loss are the wait's too: its ACKs carry the bitmap), whose every packet so far is ACKed (the pass's ACKs
        went out) or, with ``ack_hold``, its ACK held for no duplicate, with no NACK sent, not at its LAST or its
        completion. Its next packets, while they keep that
        shape, take no Python at all (:meth:`native_progress` accounts for them afterwards). None when there is
        none."""
        hold = self.opts.ack_hold
        best = None
        for inc in self.incoming.values():
            st = inc.st
            if (st is None or inc.done or not inc.posted or inc.dst is None or inc.nacked is not None
                    or inc.since_ack and not (hold and inc.unacked_at) or st.last_seen or st.pcum >= st.total
                    or inc.tid >> 63):
                continue
            if best is None or inc.last_arrival > best.last_arrival:
                best = inc
        return best

    def holds(self, inc: InTransfer) -> bool:
        """Whether the holds (``Options.ack_hold``, ``rx_hold``) apply to ``inc``: its packets come at least
        ``hold_gap`` apart (its last run of :data:`HOLD_WINDOW` packets did; before its first run was judged, the
        last judged run of its peer's), or ``hold_gap`` is 0."""
        return inc.slow or self.opts.hold_gap <= 0

    def ack_template(self, inc: InTransfer) -> bytearray:
        """``inc``'s ACK header as :meth:`send_ack` writes it, but for the cumulative seq, the clock, the count
        and bitmap past a hole, and the keyed tag, which ``_rxlane.rx_wait`` writes per ACK."""
        buf = bytearray(wire.HEADER_LEN)
        pack_control_header(buf, MsgType.ACK, flags=Flag.ECN_ECHO if inc.ce_state else 0, rank=self.rank,
                            job_id=self.job_id, transfer_id=inc.tid, offset=0, seq=0, total=inc.st.total, count=0,
                            nonce=self.nonce)
        return buf

    def native_progress(self, inc: InTransfer, fresh: int, dups: int, got: int, nelems: int, max_count: int,
                        max_end: int, max_seq: int, cum: int, acks: int, unacked: int, unacked_at: float,
                        ce_state: bool, marked: int, now: float) -> None:
        """Account for what ``_rxlane.rx_wait`` wrote into ``inc`` while the thread slept (totals as
        :meth:`fast_progress`'s, ``now`` its last receive): ``acks`` ACKs it sent (at each change of ECN state
        too), ``unacked`` packets not ACKed yet, the first of which arrived at ``unacked_at``, the ECN state it
        ended in and the ``marked`` packets that came CE-marked. Then as after a receive pass: complete, ACK now,
        or leave the ACK for the end of the pass (:meth:`_flush`, which may hold it)."""
        if not (fresh or dups or acks):
            return
        c = self._c
        key = (inc.peer, inc.tid)
        self._heard[inc.peer] = now
        inc.touched = now
        if acks:
            inc.acks += acks
            c["acks_sent"] += acks
            c["tx_datagrams"] += acks
        inc.since_ack = unacked
        inc.ce_state = ce_state
        self._took(inc, key, fresh, dups, got, nelems, max_count, max_end, max_seq, cum, 0, marked, now)
        if fresh and unacked and not dups:  # (_arrived takes its packets as this pass's: the first came earlier)
            inc.unacked_at = unacked_at

    def _first_header_check(self, inc: InTransfer, w: tuple) -> tuple[str, str] | None:
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

    def _reject(self, inc: InTransfer, fld: str, n: int, why: str) -> None:
        """Drop ``n`` packets of ``inc`` whose header field ``fld`` its receive does not allow (counted per field;
        the last reason is named if the receive times out)."""
        self._counters.rejected(fld, n)
        inc.rejected += n
        inc.reject_why = f"{fld}: {why}"

    def _fail_in(self, inc: InTransfer, why: str) -> None:
        self._c["inconsistent"] += 1
        self.drop_in(inc, TransportError(f"transfer {inc.tid} from rank {inc.peer}: {why}", inc.peer))

    def drop_in(self, inc: InTransfer, error: BaseException) -> None:
        """End an incoming transfer with ``error`` (lock held): forget it, so its later packets are dropped as
        late and never answered (the sender fails after its peer timeout), give back its staging, wake the
        receiver."""
        key = (inc.peer, inc.tid)
        self.incoming.pop(key, None)
        self.tombstone(key, "abandoned")
        self.release_stage(inc)
        inc.error = error
        inc.done = True
        inc.event.set()

    def abandon(self, inc: InTransfer, why: str, *, count: bool = True) -> None:
        """A posted receive nobody waits for any more: fail it (see :meth:`drop_in`) unless it completed
        meanwhile. ``count``: a receive timeout."""
        with self._lock:
            if inc.event.is_set():
                return
            if count:
                self._c["recv_timeouts"] += 1
            self.drop_in(inc, TransportError(why, inc.peer))

    def tombstone(self, key: tuple[int, int], kind: str, nacked: set[int] | None = None) -> None:
        """Remember a finished transfer: [kind, when DONE was last repeated, the seqs it NACKed (or None)]."""
        self.tomb[key] = [kind, 0.0, nacked]
        if len(self.tomb) > self.opts.tombstones:
            self.tomb.pop(next(iter(self.tomb)))

    def send_ack(self, inc: InTransfer, stamp: float | None = None) -> None:
        """ACK ``inc``'s packets; ``stamp``: the time its ``offset`` carries (None: now)."""
        st = inc.st
        base = st.ack_base()
        if st.max_seq < base:  # in order so far: nothing beyond cum to report
            seg, count = None, 0
        else:
            seg = st.arrived[base: base + self.ack_bits]
            nz = np.flatnonzero(seg)
            count = int(nz[-1]) + 1 if nz.size else 0
        buf = self._tx.ctl_buf
        pack_control_header(buf, MsgType.ACK, flags=Flag.ECN_ECHO if inc.ce_state else 0, rank=self.rank,
                            job_id=self.job_id, transfer_id=inc.tid,
                            offset=clock_us(time.monotonic() if stamp is None else stamp),
                            seq=base, total=st.total,
                            count=count, nonce=self.nonce)
        bm = np.packbits(seg[:count]).tobytes() if count else b""
        buf[wire.HEADER_LEN: wire.HEADER_LEN + len(bm)] = bm
        self._tx.send_ctl(self.addr_map[inc.peer], wire.HEADER_LEN + len(bm))
        inc.since_ack = 0
        inc.acks += 1
        self._c["acks_sent"] += 1

    def _send_nack(self, inc: InTransfer, seqs: np.ndarray) -> None:
        base = int(seqs[0])
        maxbits = 8 * (self._mss - 8)
        seqs = seqs[seqs < base + maxbits]
        count = int(seqs[-1]) - base + 1
        bits = np.zeros(count, bool)
        bits[seqs - base] = True
        buf = self._tx.ctl_buf
        pack_control_header(buf, MsgType.NACK, flags=Flag.ECN_ECHO if inc.ce_state else 0, rank=self.rank,
                            job_id=self.job_id, transfer_id=inc.tid, offset=clock_us(time.monotonic()),
                            seq=base, total=inc.st.total,
                            count=count, nonce=self.nonce)
        bm = np.packbits(bits).tobytes()
        buf[wire.HEADER_LEN: wire.HEADER_LEN + len(bm)] = bm
        self._tx.send_ctl(self.addr_map[inc.peer], wire.HEADER_LEN + len(bm))
        if inc.nacked is None:
            inc.nacked = set()
        inc.nacked.update(seqs.tolist())
        inc.nacks += 1
        self._c["nacks_sent"] += 1

    def _premature_nack(self, peer: int) -> None:
        """An original packet of a seq this receiver had NACKed arrived: the path reorders more than the wait."""
        self._c["premature_nacks"] += 1
        self.reo[peer] = min(_REORDER_MAX, 2 * self.reo.get(peer, REORDER_TIME))

    def send_done(self, peer: int, tid: int, total: int, received: int, copies: int = 1) -> None:
        """DONE of transfer ``tid`` to ``peer``, built once and sent ``copies`` times."""
        buf = self._tx.ctl_buf
        pack_control_header(buf, MsgType.CONTROL, flags=0, rank=self.rank, job_id=self.job_id, transfer_id=tid,
                            seq=0, total=total, count=0, nonce=self.nonce)
        CTL.pack_into(buf, wire.HEADER_LEN, CTL_DONE, max(received, 0) if received >= 0 else DONE_UNKNOWN)
        for _ in range(copies):
            self._tx.send_ctl(self.addr_map[peer], wire.HEADER_LEN + CTL.size)
        self._c["dones_sent"] += copies

    def complete(self, inc: InTransfer, now: float) -> None:
        """The transfer is done at the packet level: tell the sender, remember it, deliver if posted."""
        key = (inc.peer, inc.tid)
        st = inc.st
        inc.done = True
        self.incoming.pop(key, None)
        self._ack_pending.discard(key)
        self.tombstone(key, "done", inc.nacked)
        if not inc.nacks and inc.peer in self.reo:
            self.reo[inc.peer] = max(REORDER_TIME, self.reo[inc.peer] * _REORDER_DECAY)
        # a one-packet transfer's DONE in copies, as its packet came (Options.small_copies): its sender has no later
        # ACK to learn of the delivery from; a copy of the packet arriving late then gets no DONE of its own (the
        # tombstone's reply time is now)
        copies = max(1, self.opts.small_copies) if st.total == 1 else 1
        self.send_done(inc.peer, inc.tid, st.total, st.npackets, copies)
        if copies > 1:
            self.tomb[key][1] = now
        inc.completed_at = inc.touched = now
        if inc.posted:
            self.deliver(inc)
        else:
            self.ready[key] = inc

    def deliver(self, inc: InTransfer) -> None:
        """Zero-fill what is missing in the out buffer, build the report, wake the caller."""
        st, tv = inc.st, inc.tv
        itemsize = tv.dtype.itemsize
        n = tv.nelems
        if inc.stage is not None:  # completed while staged: move the data now
            self.post(inc, tv, inc.loss_bound)
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

    def flush_acks(self) -> None:
        """At the end of a receive pass: the ACKs left for it (see :meth:`_flush`)."""
        if not self._ack_pending:
            return
        with self._lock:
            self._flush(time.monotonic())

    def _flush(self, now: float) -> None:
        """Send the pending ACKs, except (``Options.ack_hold``) one of fewer than ``ack_min`` new packets whose first
        arrived less than ``ack_hold`` ago: it waits for more packets or for that deadline (:meth:`next_due`). A held
        ACK carries the arrival time of the transfer's latest packet, not its sending time: the sender's one-way
        delay (queueing) signal must not count the hold, which shows as ACK delay instead (``cc``)."""
        hold, amin = self.opts.ack_hold, self.opts.ack_min
        held = []
        for key in self._ack_pending:
            inc = self.incoming.get(key)
            if inc is None or inc.st is None or not inc.since_ack:
                continue
            slow = hold and self.holds(inc)
            if slow and inc.since_ack < amin and inc.unacked_at and now - inc.unacked_at < hold:
                held.append(key)
                continue
            self.send_ack(inc, inc.last_arrival if slow else None)
        self._ack_pending.clear()
        self._ack_pending.update(held)

    def expire_unposted(self, now: float) -> None:
        """Drop the transfers nobody posted a receive for (in progress or complete) whose last packet or completion
        is older than ``Options.unposted_expiry``, with their staging; a later ``post_recv`` names the expiry."""
        limit = now - self.opts.unposted_expiry
        gone = [(k, i) for k, i in self.incoming.items() if not i.posted and i.touched < limit]
        gone += [(k, i) for k, i in self.ready.items() if not i.posted and i.touched < limit]
        for key, inc in gone:
            self.incoming.pop(key, None)
            self.ready.pop(key, None)
            self._ack_pending.discard(key)
            self.tombstone(key, "expired")
            self.release_stage(inc)
            inc.done = True
            self._c["expired_unposted"] += 1

    def expire_due(self, now: float) -> None:
        """On the timers' run: :meth:`expire_unposted` when it is due (a few times per ``unposted_expiry``)."""
        if now >= self._next_expiry:
            self._next_expiry = now + min(1.0, self.opts.unposted_expiry / 4)
            self.expire_unposted(now)

    def timers(self, now: float) -> None:
        """When a timer is due (:meth:`next_due`): fail a posted receive whose sender went silent past
        ``peer_timeout``, complete one whose protected packets are all in, NACK what is missing once the peer's
        reordering wait has passed."""
        o = self.opts
        if self._ack_pending and o.ack_hold:  # (held ACKs whose deadline passed)
            self._flush(now)
        for inc in list(self.incoming.values()):
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
                self.complete(inc, now)
                continue
            # what is missing is lost once the LAST packet came in and nothing else did for the peer's reordering
            # wait, or nothing at all came for nack_idle (at least that wait)
            reo = self.reo.get(inc.peer, REORDER_TIME)
            if (idle >= max(o.nack_idle, reo) or st.last_seen and idle >= reo) and now >= inc.nack_next:
                need = st.needed(inc.loss_bound, n)
                if need.size:
                    self._send_nack(inc, need)
                inc.nack_next = now + inc.nack_interval
                inc.nack_interval = min(o.nack_interval_max, inc.nack_interval * 2)

    def next_due(self, now: float, held: InTransfer | None = None) -> float:
        """The earliest time :meth:`timers` or :meth:`expire_due` may have something to do (an early answer is
        safe, a late one delays a NACK): per transfer in progress, the NACK of what is missing (the reordering
        wait after its LAST packet, else ``nack_idle``, and not before ``nack_next``; none while every packet up to
        the highest arrived is in: there is nothing to NACK, and :meth:`timers` would find nothing) and a posted one's
        ``peer_timeout``; now for a posted one whose protected packets are all in (the loss bound may complete it);
        the expiry of unclaimed transfers while there are any; the end of each held ACK's hold but ``held``'s (a
        native wait's own: ``_rxlane.rx_wait`` sends it when its hold runs out)."""
        o = self.opts
        due = self._next_expiry if self.incoming or self.ready else math.inf
        if self._ack_pending and o.ack_hold:  # held ACKs (_flush)
            for key in self._ack_pending:
                inc = self.incoming.get(key)
                if inc is not None and inc is not held:
                    due = min(due, inc.unacked_at + o.ack_hold)
        for inc in self.incoming.values():
            st = inc.st
            if st is None or inc.done:
                continue
            if inc.posted:
                if st.pcum >= st.total:
                    return now
                due = min(due, inc.last_arrival + o.peer_timeout)
            if not st.last_seen and st.cum > st.max_seq:
                continue  # in order so far, no hole to NACK until a later packet arrives (or the LAST one)
            reo = self.reo.get(inc.peer, REORDER_TIME)
            due = min(due, max(inc.last_arrival + (reo if st.last_seen else max(o.nack_idle, reo)), inc.nack_next))
        return due
