"""Datagram intake: every record the socket layer received, checked and handed to the stage it is for.

What :class:`Intake` does with a receive batch (``PacketSocket.drain``'s records, under the endpoint's lock):
the C receive lane (``_rxlane.fast_pass``) takes the data records it can (well-formed, this job's, right tag and
source, for a transfer already open) and writes them into their buffers itself; the receiver accounts for them
(``Receiver.fast_progress``). A posted transfer not open yet is opened by its first datagram on the Python path,
and the lane takes the rest of it in a second pass (:meth:`Intake._open_posted`). Every other record takes the
Python path (:meth:`Intake._handle_records`): a GRO buffer is split into its datagrams; each header is checked
with one ``struct`` unpack and a few integer tests (what fails them is re-parsed by ``wire.parse_datagram`` to
name the bad field); a datagram of another job or nonce, with a wrong keyed tag, or from an address that is not its rank's is dropped and counted; data packets
are grouped per transfer for ``Receiver.on_data``; feedback goes to the sender, probes and DEAD notices to the
liveness checks.

Promises: nothing reaches any transfer's state before its header, job, nonce, tag and source passed; every
dropped datagram is counted (``malformed`` by field, ``foreign``, ``stray``, ``rejected["tag"]``); a valid
datagram refreshes when its source was last heard from.
"""

from __future__ import annotations

import time

import numpy as np

from host import wire
from host.transport.control import (CTL, CTL_DONE, HDR, ITEMSIZE, NDTYPES, REORDER_TIME, W_COUNT, W_DTYPE, W_FLAGS,
                                    W_JOB, W_NONCE, W_OFFSET, W_PMR, W_RANK, W_SEQ, W_TAG, W_TID, W_TID_HI, W_TOTAL,
                                    W_VT)
from host.transport.liveness import Liveness
from host.transport.packetio import MAX_DGRAM, RX_BATCH, RX_BATCH_BYTES, PacketSocket, _rxlane, packet_tag
from host.transport.receiver import Receiver
from host.transport.sender import REORDER_PKTS, Sender
from host.transport.stats import Counters
from host.wire import MsgType

__all__ = ["Intake", "TOOK"]

#: in :meth:`Intake.wait`'s first result: the wait took datagrams (not one of ``_rxlane``'s W_* bits)
TOOK = _TOOK = 0x1000
_NO_ACK = bytes(wire.HEADER_LEN)  # (rx_wait's ACK header when it waits for sends alone: never sent)


class Intake:
    """Checks and dispatches the records of one endpoint's receive batches."""

    def __init__(self, job_id: int, nonce: int, key: bytes | None, rank_of: dict, io: PacketSocket, *,
                 native_rx: bool, counters: Counters, receiver: Receiver, sender: Sender, liveness: Liveness):
        self.job_id, self.nonce, self._key, self._rank_of, self._io = job_id, nonce, key, rank_of, io
        self._native_rx, self._counters, self._c = native_rx, counters, counters.c
        self._receiver, self._sender, self._liveness, self._heard = receiver, sender, liveness, liveness.heard
        self._key_of = {r: k for k, r in rank_of.items()}  # a rank -> its records' source key (the lane's input)
        self._again = np.zeros_like(io.recs)  # records the lane takes on its second pass (see _open_posted)

    def handle(self, n: int) -> None:
        """The ``n`` records of ``_recs`` (called with the lock held): the C fast lane takes the data records it
        can (see ``_rxlane.fast_pass``), the rest go to :meth:`_handle_records`."""
        now = time.monotonic()
        io = self._io
        if self._native_rx:
            slow = self._lane(io.recs, n, now)
            if slow:
                slow = self._open_posted(slow, now)
        else:
            rank_of = self._rank_of
            slow = [(pos, nbytes, tos, seg, rank_of.get(key)) for pos, nbytes, tos, seg, key in io.recs[:n].tolist()]
        if slow:
            self._handle_records(slow, now)

    def _lane(self, recs, n: int, now: float) -> list[tuple]:
        """One pass of the C lane over ``recs[:n]``; returns the records it left to the Python path."""
        prog, slow, dgrams, gro = _rxlane.fast_pass(self._io.rxbuf, recs, n, self._rank_of, self._receiver.incoming,
                                                    self.job_id, self.nonce, self._key)
        if dgrams:
            c = self._c
            c["rx_datagrams"] += dgrams
            c["rx_fast_datagrams"] += dgrams
            c["rx_gro_buffers"] += gro
            self._receiver.fast_progress(prog, now)
        return slow

    def _open_posted(self, slow: list[tuple], now: float) -> list[tuple]:
        """The lane takes only transfers already open (their first header checked, their ``Reassembly`` made), so
        a small transfer, all of whose packets come in one receive pass (one GRO buffer), used to take the Python
        path whole: per-packet Python that was most of a small receive's cost. Here the first data datagram of each
        posted, unopened transfer among the lane's leftovers opens it on the Python path (every check as before),
        and the lane takes the rest of it in a second pass. Returns what is still left to the Python path, in
        order. Transfers not posted yet (staged) keep the Python path: their stage is sized there."""
        mv, hl, incoming = self._io.rxmv, wire.HEADER_LEN, self._receiver.incoming
        data_vt = (wire.VERSION << 4) | int(MsgType.DATA)
        rest: list[tuple] = []
        again = self._again
        m = 0
        opened: set[tuple[int, int]] = set()
        for rec in slow:
            pos, nbytes, tos, seg, src = rec
            if src is None or nbytes < hl or mv[pos] != data_vt:
                rest.append(rec)
                continue
            w = HDR.unpack_from(mv, pos)
            key = (src, w[W_TID_HI] << 32 | w[W_TID])
            if key not in opened:
                inc = incoming.get(key)
                if inc is None or inc.st is not None or inc.dst is None:
                    rest.append(rec)
                    continue
                first = seg if seg and nbytes > seg else nbytes
                self._handle_records([(pos, first, tos, 0, src)], now)
                if nbytes == first:
                    if incoming.get(key) is inc and inc.st is not None:
                        opened.add(key)
                    continue
                if nbytes - first <= seg:  # (a GRO buffer of two: what is left is one datagram; counted once here,
                    self._c["rx_gro_buffers"] += 1  # as the Python path counts the buffer it splits)
                pos, nbytes = pos + first, nbytes - first
                if incoming.get(key) is not inc or inc.st is None:  # rejected (it stays unopened), or complete
                    rest.append((pos, nbytes, tos, seg, src))
                    continue
                opened.add(key)
            again[m] = (pos, nbytes, tos, seg, self._key_of[src])
            m += 1
        if m:
            rest.extend(self._lane(again, m, now))  # (what it leaves: the Python path, after the others)
        return rest

    def wait(self, inc, send, timeout: float, wake_fd: int, timer_fd: int, lock, transmitter,
             taken: int, redue=None) -> tuple[int, int]:
        """The I/O thread's sleep while ``inc`` (``Receiver.native_candidate``; None: none) arrives and
        the sends ``send`` (``(peer, pacing deadline)``: the one peer with sends in progress,
        ``Sender.native_candidate``; None: none) are ACKed, called without the lock: ``_rxlane.rx_wait`` receives,
        writes in and ACKs the one's packets, and takes the others' cumulative ACKs and sends their next bursts
        (through ``transmitter``), natively, one socket
        wake-up after another, until something else needs the Python loop. Then, under the lock, the receiver
        accounts for what it did (``Receiver.native_progress``; the send's ACKs and bursts were counted as they
        came) and this counts the datagrams and wake-ups. Returns (why, records): the ``_rxlane.W_*`` bits that
        ended the wait, with ``TOOK`` when it took any datagram (the timers' plan is stale: a NACK's deadline may
        come from them), and how many records it left at the front of the socket's ``recs`` for :meth:`handle`.
        ``taken``: the records the loop's passes took since it last slept (the receive hold's rule, Options.rx_hold,
        which the wait keeps). ``redue(now)``: asked when ``timeout`` passes, the time the wait should end instead
        (``Endpoint._redue``; None: it ends then)."""
        io = self._io
        o = self._receiver.opts
        tx = None
        if send is not None:
            p, pacing = send
            tx = (self._sender, p, p.rank, self._key_of[p.rank], o.burst, o.send_buf, transmitter.transmit,
                  transmitter, self._c, self._heard, p.addr, pacing, self.native_feedback, REORDER_TIME, REORDER_PKTS)
        slow = inc is not None and self._receiver.holds(inc)  # (the holds are for slow links: Options.hold_gap)
        if inc is not None:
            args = (self._receiver.incoming, inc, inc.peer, self._key_of[inc.peer], self.job_id, self.nonce,
                    self._key, self._receiver.ack_template(inc), o.ack_every, lock, inc.since_ack, inc.unacked_at,
                    inc.last_arrival)
        else:
            args = (self._receiver.incoming, None, 0, 0, self.job_id, self.nonce, self._key, _NO_ACK, o.ack_every,
                    lock, 0, 0.0, 0.0)
        acks_rx = self._c["acks_rx"]
        (why, left, wakes, dgrams, gro, fresh, dups, got, nelems, max_count, max_end, max_seq, cum, acks, unacked,
         last, unacked_at, ce_state, marked, holds) = _rxlane.rx_wait(
            io.sock.fileno(), wake_fd, timer_fd, timeout, io.rxbuf, io.recs, RX_BATCH, RX_BATCH_BYTES, MAX_DGRAM,
            *args, float(o.ack_hold) if slow else 0.0, o.ack_min, tx, float(o.rx_hold) if slow else 0.0,
            o.rx_hold_records, taken,
            self._receiver.ack_bits, redue)
        if holds:
            self._c["io_rx_holds"] += holds  # (this thread's counter)
        if dgrams or acks or wakes or self._c["acks_rx"] != acks_rx:
            why |= _TOOK
            with lock:
                c = self._c
                c["rx_datagrams"] += dgrams
                c["rx_fast_datagrams"] += dgrams
                c["rx_gro_buffers"] += gro
                c["io_wakes_socket"] += wakes
                c["io_native_wakes"] += wakes
                if inc is not None:
                    self._receiver.native_progress(inc, fresh, dups, got, nelems, max_count, max_end, max_seq, cum,
                                                   acks, unacked, unacked_at, bool(ce_state), marked, last)
        return why, left

    def native_feedback(self, pos: int, nbytes: int, now: float) -> None:
        """Under the lock, from ``_rxlane.rx_wait``: the feedback datagram at ``pos`` of the receive buffer (an ACK
        with a bitmap, a NACK, an ACK while a hole is open at the sender), which the wait checked as
        :meth:`_handle_records` checks one (header, job, nonce, keyed tag, source), handed on as that method
        hands it on."""
        mv = self._io.rxmv
        w = HDR.unpack_from(mv, pos)
        self._c["rx_datagrams"] += 1
        self._heard[w[W_RANK]] = now
        self._on_feedback(w, w[W_VT] & 0x0F, mv[pos + wire.HEADER_LEN: pos + nbytes], now)

    def _handle_records(self, recs: list[tuple], now: float) -> None:
        """Received records ``(position, bytes, TOS, GRO segment size, source rank or None)`` the Python path
        takes: split GRO buffers into datagrams, check each header (one ``struct`` unpack and a few integer tests;
        anything failing them is re-parsed by ``wire.parse_datagram`` to name the bad field), group data packets
        per transfer for ``Receiver.on_data``, and hand feedback to :meth:`_on_feedback` one message at a time."""
        c = self._c
        hl = wire.HEADER_LEN
        mv, unpack = self._io.rxmv, HDR.unpack_from
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
            self._receiver.on_data(key, items, now)
        for w, mt, s, ln in feedback:
            self._on_feedback(w, mt, mv[s + hl: s + ln], now)

    def _on_feedback(self, w: tuple, mt: int, payload: memoryview, now: float) -> None:
        """A message that is not data: a probe, its answer or a DEAD notice to the liveness checks, an ACK, NACK
        or DONE to the sender."""
        if mt == MsgType.CONTROL and len(payload) >= CTL.size and payload[0] != CTL_DONE:
            self._liveness.on_control(w, payload)
        else:
            self._sender.on_feedback(w, mt, payload, now)

    def _bad_tag(self) -> None:
        """A well-formed datagram of this job whose keyed tag is wrong: a stranger's (who knows the job id and
        nonce but not the key), or one changed on the way. Dropped before it touches any state; counted."""
        self._counters.rejected("tag")

    def _slow_parse(self, start: int, nbytes: int) -> None:
        try:
            wire.parse_datagram(self._io.rxmv[start: start + nbytes], nbytes)
        except wire.WireError as e:
            self._counters.malformed(e.field)
        else:
            self._counters.malformed("transport")
