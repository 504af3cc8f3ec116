"""The DLCP endpoint: one rank's transport, a small facade over the stages that do the work.

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
endpoint sends carries the tag, and the receive paths check it before a packet touches any state.

The stages, each a module with its own contract (this class only builds and wires them, and runs the thread):

* ``packetio.PacketSocket``: the bound socket, batched receives (GRO), the error queue, keyed tags;
* ``intake.Intake``: checks every received datagram and hands it to the stage it is for;
* ``receiver.Receiver``: reassembly into the ``out`` buffer, ACK/NACK, completion under the loss bound, zero-fill;
* ``sender.Sender``: bursts under window and pacing, ACK/NACK/DONE, retransmission of protected packets, RTO;
* ``transmit.Transmitter``: bursts and control messages onto the socket (GSO, the full send buffer);
* ``liveness.Liveness``: probes, dead peers, fate groups, DEAD notices;
* ``stats.Counters``: the totals :meth:`Endpoint.stats` reports.

Threads and locking: one I/O thread (:meth:`Endpoint._io_loop`) loops over three steps: it drains the socket and
hands the batch to the intake; when one of them is due it runs the timers of the stages (liveness, receiver NACKs
and expiry, sender RTO and peer timeouts; each stage's ``next_due`` says when, :meth:`Endpoint._plan_timers`); it
sends the bursts the sender picks, outside the lock. It sleeps in
``select`` (the socket, a wake-up socket that ``send()`` writes to, the wake-up timer a small send arms instead,
the next timer or pacing deadline) only when none of them has work; with ``Options.rx_hold``, after a pass of a
few records mid-transfer it first sleeps through arrivals for up to the hold (:meth:`Endpoint._rx_hold`). One
lock, shared by every stage, guards the transfer tables; user calls only post work and wait on events.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import select
import socket
import threading
import time
from typing import Any, Mapping

from host import wire
from host.policy import CONTROL_PRIORITY
from host.transport.api import LossReport, Options, RecvHandle, RecvResult, SendHandle, TransportError
from host.transport.cc import CCParams
from host.transport.chunking import payload_capacity, tos_byte
from host.transport.intake import TOOK, Intake
from host.transport.liveness import DEAD_NOTICE_AGAIN, Liveness
from host.transport.packetio import ICMP_ERRNOS as _ICMP_ERRNOS
from host.transport.packetio import _rxlane, _txlane  # the C lanes (None in a broken install: the Python path)
from host.transport.packetio import AddressInUse, PacketSocket, norm_addr, path_mtu, src_key
from host.transport.receiver import HOLD_WINDOW, InTransfer, Receiver
from host.transport.sender import Sender, plan_send
from host.transport.stats import Counters
from host.transport.tensors import allocate, view_tensor
from host.transport.transmit import Transmitter

__all__ = ["Endpoint", "Options", "SendHandle", "RecvHandle", "RecvResult", "LossReport", "TransportError", "path_mtu"]

log = logging.getLogger("host.transport")

_TOS_CONTROL = tos_byte(CONTROL_PRIORITY, False)
_TX_BURSTS_PER_ROUND = 4  # bursts sent between two receive passes of the I/O thread
_TIMERS_MAX = 0.1  # the timers run at least this often while transfers are in progress (Endpoint._plan_timers)
_IDLE_MAX = 0.2  # and at least this often when none is
_SETTLE_BATCHES = 64  # receive batches Endpoint._settle takes at most (a flood must not hold the I/O thread)


class Endpoint:
    """One rank's DLCP transport. Thread-safe: any thread may call send/recv concurrently."""

    def __init__(self, rank: int, addr_map: Mapping[int, Any], job_id: int, nonce: int,
                 options: Options | None = None, *, key: bytes | None = None, sock: socket.socket | None = None):
        """``key``: the job's 16-byte tag key, the same on every rank (agreed at rendezvous, secret to the job):
        every packet sent carries its keyed tag and every packet received must (a wrong one is dropped, counted
        as ``rejected_by_field["tag"]``). None: an unkeyed job, whose tags are 0 and unchecked (tests, tools); its
        packets are accepted on job id, nonce and source address alone. ``sock``: a UDP socket already bound to
        this rank's entry of ``addr_map`` (``packetio.bind_exclusive``; the backend binds a free port, then
        publishes it), which the endpoint takes over; None: the endpoint binds the entry itself."""
        self.rank, self.job_id, self.nonce = int(rank), int(job_id), int(nonce)
        if not 0 <= self.job_id < 1 << 32 or not 0 <= self.nonce < 1 << 16 or not 0 <= self.rank < 1 << 16:
            raise ValueError("rank must fit 16 bits, job_id 32 bits, nonce 16 bits")
        if key is not None and (not isinstance(key, bytes) or len(key) != wire.KEY_LEN):
            raise ValueError(f"key must be {wire.KEY_LEN} bytes or None")
        self._key = key  # (the job's tag key: tests of the backend check it is the one agreed)
        self.opts = opts = options or Options()
        mss = payload_capacity(opts.mtu)
        self.addr_map = {int(r): norm_addr(a, opts.port) for r, a in addr_map.items()}
        if self.rank not in self.addr_map:
            raise ValueError(f"rank {self.rank} has no address in addr_map")
        rank_of = {src_key(a): r for r, a in self.addr_map.items()}  # a record's source -> rank
        self.local_addr = self.addr_map[self.rank]
        # peers to whom large reliable sends are classified in slices (Options.classify_slice): not those on this
        # host. A loopback "link" runs at the CPU's speed, so there is no wire time to hide a slice's classification
        # behind, and the slices' extra steps only cost time there (docs/decisions.md).
        self._slice_to = {r: not ipaddress.ip_address(a[0]).is_loopback for r, a in self.addr_map.items()}

        # the packet I/O layer: the exclusively bound socket, its receive buffer and records, the tag key
        try:
            self._io = io = PacketSocket(self.rank, self.local_addr, sock_buf=opts.sock_buf, send_buf=opts.send_buf,
                                         tos=_TOS_CONTROL, offload=opts.offload, native=opts.native, key=key,
                                         socket_wrapper=opts.socket_wrapper, sock=sock)
        except AddressInUse as e:
            raise TransportError(f"rank {self.rank}: {e.strerror}", self.rank) from e
        except OSError as e:
            raise TransportError(f"rank {self.rank}: cannot bind {self.local_addr[0]}:{self.local_addr[1]}: {e}",
                                 self.rank) from e
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        # The wake-up timer (a timerfd, from the C send lane; None without it: every send wakes the thread): a
        # caller that sent a whole transfer arms it for the transfer's first deadline instead of waking the
        # sleeping I/O thread (_after_first_burst); _timer_at is when it is armed for (0.0: disarmed), _sleep_until
        # when the sleeping thread's select times out on its own
        self._timer = _txlane.timer_fd() if opts.native and _txlane is not None else None
        self._timer_at = 0.0
        self._sleep_until = 0.0
        self._wait_cand = None  # the transfer the native wait in progress receives (its held ACK is the wait's)
        self._lock = threading.Lock()
        self._closed = False
        self._sleeping = False
        self._next_tick = 0.0  # when the stages' timers run next (Endpoint._plan_timers)
        self._timers_at = 0.0  # when they last ran
        self._planned_at = 0.0  # when _next_tick was last planned
        self._dirty = True  # something happened since (a datagram, a send, a caller's work): plan again

        # the stages (see the module's docstring), sharing the lock and the counters
        self._counters = counters = Counters()
        self._c = counters.c
        self._sender = Sender(opts, self.addr_map, opts.cc or CCParams(mss=mss), io, counters, self._lock)
        # the send lane calls sendmsg on the socket itself: not with a socket_wrapper, which must see every datagram
        fast_tx = _txlane.send_run if opts.native and _txlane is not None and io.tx is io.sock else None
        self._tx = Transmitter(self.rank, io, counters, self._lock, gso=opts.offload and opts.socket_wrapper is None,
                               fast_tx=fast_tx, key=key, unsend=self._sender.unsend, closed=lambda: self._closed)
        self._liveness = Liveness(self.rank, self.job_id, self.nonce, self.addr_map, rank_of, opts, io, self._tx,
                                  counters)
        self._receiver = Receiver(self.rank, self.job_id, self.nonce, self.addr_map, opts, mss, io, self._tx,
                                  counters, self._lock, dead=self._liveness.dead, heard=self._liveness.heard)
        self._liveness.attach(self._sender, self._receiver, settle=self._settle)
        self._intake = Intake(self.job_id, self.nonce, key, rank_of, io, native_rx=io.native_rx, counters=counters,
                              receiver=self._receiver, sender=self._sender, liveness=self._liveness)
        self._native_wait = io.native_rx and opts.native_wait and io.tx is io.sock
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
        ids = dict(layer=layer, rank=self.rank, job_id=self.job_id, transfer_id=transfer_id, nonce=self.nonce)
        plan, ready, slicer = plan_send(tv, self.opts, loss_bound, ids, in_slices=self._slice_to[peer])
        with self._lock:
            if self._closed:
                raise TransportError("endpoint is closed", peer)
            dead = self._liveness.dead_error(peer, transfer_id)
            if dead is not None:
                raise dead
            now = time.monotonic()
            o = self._sender.start(peer, transfer_id, tv, plan, ready, now, layer=layer, loss_bound=loss_bound,
                                   slicer=slicer)
            p = self._sender.peers[peer]
            # An idle I/O thread would first have to wake up, be scheduled and run its timers before the first
            # packet left: on a loaded host that is the larger part of a small transfer's latency. The caller sends
            # the first burst itself instead (chosen under the lock as the I/O thread would) and wakes the I/O
            # thread for the rest: later bursts, ACKs and timers.
            job = self._sender.pick_burst(now)[0] if self._sleeping and not self._tx.full else None
            o.sending = job is not None
            if job is None:
                self._wake()
        if job is not None:  # the wake-up follows the burst: one per send(), and no GIL contention while it leaves
            try:
                self._tx.transmit(job)
            finally:
                with self._lock:
                    o.sending = False
                    p.rto_at = max(p.rto_at, time.monotonic() + p.cc.rto)  # the RTO counts from when they left
                    self._after_first_burst(o)
        return o.handle

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
        with self._lock:
            if self._closed:
                raise TransportError("endpoint is closed", peer)
            inc = self._receiver.claim(peer, transfer_id, self._liveness.dead_error)
            self._receiver.post(inc, tv, loss_bound)
            if inc.done and inc.result is None and inc.error is None:
                self._receiver.deliver(inc)
            elif not inc.done and inc.st is not None and inc.st.pcum >= inc.st.total:
                self._wake()  # (every protected packet is in: the timers may complete it under the loss bound)
        return RecvHandle(inc, timeout, self._receiver.abandon, self.addr_map.get(peer))

    def share_fate(self, ranks: Any, tid_mask: int, tid_value: int) -> None:
        """Transfers whose id matches ``tid & tid_mask == tid_value`` (with any peer) fail as soon as any rank of
        ``ranks`` is known dead, pending ones at once and new ones when started: a collective over a group cannot
        complete without every member, and a rank whose own steps are all with live members would otherwise wait
        for a message that a member whose collective failed will never send. A second call with the same mask and
        value replaces the first (a group id used again)."""
        with self._lock:
            self._liveness.share_fate(ranks, tid_mask, tid_value)

    def dead_peers(self) -> dict[int, str]:
        """The ranks this endpoint knows dead, with the reason (its own detection, or a peer's DEAD notice)."""
        with self._lock:
            return dict(self._liveness.dead)

    def abort(self, reason: str) -> None:
        """Give up: tell every peer that this rank is gone (each fails its work with this rank, and the work of
        every group it shares with it, at once), then :meth:`close` (which fails what is pending here)."""
        with self._lock:
            if not self._closed:
                msg = self._liveness.abort_notice(reason)  # (names the peer whose death came first, if any)
                for _ in range(1 + len(DEAD_NOTICE_AGAIN)):
                    self._liveness.notify_all(msg, skip=self.rank)
        self.close(linger=False)

    def stats(self) -> dict[str, Any]:
        """Totals, malformed drops by field, rejected packets by field (well-formed, but a field the receive they
        belong to does not allow: ``total`` more packets than the posted buffer or the staging budget can take,
        ``offset`` past the end of the posted buffer, ``dtype`` not the posted one, ``eligible`` not below
        ``total``), and the congestion state per peer."""
        with self._lock:
            d = self._counters.snapshot()
            d["dead_peers"] = dict(self._liveness.dead)
            # socket buffers the kernel capped below what Options asked: {"SO_RCVBUF": (asked, granted), ...}
            d["sock_buf_capped"] = dict(self._io.capped)
            d["peers"] = {r: {**p.cc.snapshot(), "inflight": p.inflight, "active": len(p.active)}
                          for r, p in self._sender.peers.items()}
            d["pending_recv"] = len(self._receiver.incoming)
        return d

    def close(self, *, linger: bool = True) -> None:
        """Stop the I/O thread (joined), fail whatever is pending with TransportError, close the socket.

        A clean end first (``linger``, and no posted receive incomplete): for at most ``Options.linger`` the I/O
        thread goes on until this rank's own sends are DONE and every peer heard from answered its BYE (it needs
        nothing more from this rank; a peer told of the BYE probes its sends to this rank at once, and this rank
        answers a probe of a transfer it completed with DONE again). So a DONE lost at the end of a job is
        repeated, and a peer's late retransmission does not meet a closed socket (docs/transport.md, Failures)."""
        with self._lock:
            if self._closed:
                return
            linger = linger and not any(i.posted and not i.done for i in self._receiver.incoming.values())
        if linger:
            self._linger()
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
            self._sender.fail_all(TransportError(f"rank {self.rank}: endpoint closed"))
            self._receiver.fail_all()
        self._io.close()
        self._wake_r.close()
        self._wake_w.close()
        if self._timer is not None:
            os.close(self._timer)

    def _linger(self) -> None:
        """The closing handshake of :meth:`close`: wait (the I/O thread running) until this rank's sends are done
        and the peers answered its BYE (``Liveness.start_closing``), at most ``Options.linger``."""
        deadline = time.monotonic() + self.opts.linger
        with self._lock:
            self._liveness.start_closing(time.monotonic())
            self._wake()
        while time.monotonic() < deadline:
            with self._lock:
                if self._liveness.settled() and not any(p.active for p in self._sender.peers.values()):
                    return
                self._wake()  # (an idle I/O thread sleeps up to 0.2 s; the BYEs repeat when their timer is due)
            time.sleep(0.002)

    @property
    def _staged_bytes(self) -> int:
        """Bytes the unclaimed transfers hold now, bookkeeping included (``StagingBudget.used``)."""
        return self._receiver.staging.used

    def __enter__(self) -> "Endpoint":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- the I/O thread ---------------------------------------------------------------------------------------

    def _io_loop(self) -> None:
        """The endpoint's one I/O thread: receive what is there, run due timers, send what window and pacing allow,
        and sleep in ``select`` only when there is nothing to do. One thread, not a receive and a send thread: the
        thread that handles an ACK sends the burst it opens, with no GIL handoff or cross-thread wake-up per ACK
        (which on a loaded host cost more than the work itself)."""
        sock, wake, timer = self._io.sock, self._wake_r, self._timer
        waits = [sock, wake] if timer is None else [sock, wake, timer]
        sender, tx = self._sender, self._tx
        tick = self.opts.tick
        flush = getattr(self._io.tx, "flush", None)
        readable = False
        taken = 0  # records received since the thread last slept (Options.rx_hold)
        left = 0  # records a native wait left in the socket's recs (handled before the next receive)
        native_wait = self._native_wait
        py_pick = False  # the last native wait left the sends' next pick to this loop (W_TXPY)
        wake_fd, timer_fd = wake.fileno(), -1 if timer is None else timer
        while not self._closed:
            try:
                recs, left = (left, 0) if left else (self._io.drain(), 0)
            except OSError as e:
                if self._closed:
                    return
                if e.errno not in _ICMP_ERRNOS:  # (an ICMP error is read from the error queue by the timers)
                    with self._lock:
                        self._c["internal_errors"] += 1
                recs = 0
                self._next_tick = 0.0  # (the timers read the error queue now)
            if readable and not recs:  # readable, yet nothing to receive: an error queued (a refusal)
                self._next_tick = 0.0
            readable = False
            taken += recs
            with self._lock:
                if recs:
                    self._dirty = True
                    try:
                        self._intake.handle(recs)
                    except Exception:  # never let a bug kill the I/O thread silently
                        self._c["internal_errors"] += 1
                        log.exception("dlcp receive")
                now = time.monotonic()
                ran = now >= self._next_tick
                if ran:
                    try:
                        self._liveness.read_errors(now)
                        self._receiver.expire_due(now)
                        self._liveness.check(now)
                        self._receiver.timers(now)
                        self._sender.timers(now)
                    except Exception:
                        self._c["internal_errors"] += 1
                        log.exception("dlcp timers")
                    self._timers_at = now
                if ran or self._dirty and now >= self._planned_at + tick:
                    self._plan_timers(now)
            if sender.sliced:
                sender.classify_slices()
            sent = 0
            wait = 1.0
            if tx.full and select.select([], [sock], [], 0)[1]:  # (receiving without a pause never sleeps
                tx.full = False  # in the select below, which would see it too)
            if tx.ctl_backlog and not tx.full:
                with self._lock:
                    tx.flush_ctl()
            # With the native wait, the one peer's bursts are its to send (no Python per burst): this loop only
            # picks when there is no such peer, or when the last wait handed the pick back (W_TXPY).
            defer = native_wait and not py_pick and not tx.full and not tx.ctl_backlog
            if defer:
                with self._lock:
                    defer = sender.native_candidate() is not None
            py_pick = False
            while not defer and sent < _TX_BURSTS_PER_ROUND and not tx.full:  # then receive again: ACKs and
                # data must not wait behind sends
                with self._lock:
                    job, wait = sender.pick_burst(time.monotonic())
                if job is None:
                    break
                tx.transmit(job)
                sent += 1
                self._dirty = True
            # Again at once after a send (ACKs and data must not wait behind sends), and after a pass that took
            # datagrams -- unless the native wait may take over: with it, the loop goes on to its sleep, where a
            # wait for the candidate transfers receives, ACKs and sends in C what comes next (on a fast link the
            # next GRO buffer is nearly always there: looping here kept that steady state in Python).
            if sent or recs and not native_wait:
                continue
            self._receiver.flush_acks()
            if flush is not None:
                flush()
            with self._lock:
                if self._closed:
                    return
                now = time.monotonic()
                if defer and (tx.full or tx.ctl_backlog or sender.native_candidate() is None):
                    defer = False  # (a caller's send to another peer came meanwhile: this loop picks after all)
                job, wait = sender.pick_burst(now) if not tx.full and not defer else (None, 1.0)
                if job is None:
                    self._sleeping = True  # from here on, send() writes to the wake socket
                busy = self._receiver.incoming or any(p.active for p in sender.peers.values())
                if self._dirty:  # plan before sleeping: a wake-up only to plan (a tick after anything happened,
                    self._plan_timers(now)  # as before) was most of the thread's wake-ups on a slow link
                until = self._next_tick
                cand = send = redue = None
                may_wait = native_wait and job is None and not tx.full and not tx.ctl_backlog
                if may_wait:
                    cand = self._receiver.native_candidate()
                    if cand is not None and cand.since_ack and self.opts.ack_hold:
                        until = self._due(now, cand)  # (the wait sends cand's held ACK itself)
                timeout = max(0.0, min(wait, until - now)) if busy else min(0.2, max(0.0, until - now))
                if may_wait:
                    peer = sender.native_candidate()
                    if peer is not None:  # (the wait sends the peer's bursts itself, when pacing allows; a
                        # deferred pick is due at once: the wait's first step picks, as pick_burst would have)
                        send = (peer, now if defer else now + wait if wait < 1.0 else 0.0)
                        timeout = max(0.0, until - now)
                    o = self.opts
                    if busy and (send is not None or until - now <= wait):  # (the timers' plan made the
                        redue = self._redue  # timeout, not the pacing of a send this loop picks: see _redue)
                    if cand is not None and (o.ack_hold or o.rx_hold) and not self._receiver.holds(cand):
                        # a wait for a transfer the holds do not apply to (yet: Receiver.holds, judged by the
                        # Python path when the wait returns) returns within two runs of HOLD_WINDOW packets at
                        # the hold gap, so a slow arrival is judged so soon (else one wait could take a whole slow
                        # transfer without them); on a fast link such a wait is idle by then
                        timeout = min(timeout, 2 * HOLD_WINDOW * o.hold_gap)
                        redue = None  # (that return is for the Python path to judge the holds)
                    self._wait_cand = cand
                self._sleep_until = now + timeout
            if job is not None:
                tx.transmit(job)
                continue
            native = cand is not None or send is not None
            held = not native and self._rx_hold(taken, timeout)  # (the native wait keeps the hold itself)
            took, taken = taken, 0
            if held:
                continue
            if native:  # (the steady state, natively: Intake.wait)
                try:
                    why, left = self._intake.wait(cand, send, timeout, wake_fd, timer_fd, self._lock, tx, took,
                                                  redue)
                except Exception:  # never let a bug kill the I/O thread silently
                    with self._lock:
                        self._c["internal_errors"] += 1
                    log.exception("dlcp native wait")
                    why, left = _rxlane.W_TIMEOUT, 0
                if why & _rxlane.W_CLOSED:
                    return
                py_pick = bool(why & _rxlane.W_TXPY)
                ready = [w for w, bit in ((sock, _rxlane.W_SOCK), (wake, _rxlane.W_WAKE), (timer, _rxlane.W_TIMER))
                         if why & bit]
                writable = []
                if why & _rxlane.W_PROGRESS:  # (a socket wake-up the Python path finishes: counted as one)
                    self._c["io_wakes_socket"] += 1
                if why & TOOK:
                    self._dirty = True
                if why & _rxlane.W_SENDERR:
                    self._next_tick = 0.0  # (the timers read an ICMP report from the error queue now)
                self._sleeping = False
                readable = bool(why & _rxlane.W_SOCK)
            else:
                try:  # (a full send buffer: until half of it is free)
                    ready, writable, _ = select.select(waits, [sock] if tx.full else [], [], timeout)
                except (OSError, ValueError):
                    return
                self._sleeping = False
                readable = sock in ready
            if writable:
                tx.full = False
            # what woke it (counted by this thread alone; several at once count each): datagrams (or an error
            # report), a caller's work, the wake-up timer a send armed, room in the send buffer, its own timeout
            c = self._c
            if readable:
                c["io_wakes_socket"] += 1
            if wake in ready:
                c["io_wakes_caller"] += 1
            if timer is not None and timer in ready:
                c["io_wakes_timer"] += 1
            if writable:
                c["io_wakes_writable"] += 1
            if not ready and not writable:
                c["io_wakes_timeout"] += 1
            if self._timer_at:  # (armed by a send while the thread slept: whatever woke it, it plans its timers
                # again now, and they cover that send's deadlines)
                with self._lock:
                    self._disarm(timer in ready)
            if wake in ready:
                self._dirty = True
                try:
                    while wake.recv(4096):
                        pass
                except (BlockingIOError, OSError):
                    pass

    def _rx_hold(self, taken: int, timeout: float) -> bool:
        """On the I/O thread, about to sleep after a pass that took ``taken`` records: with ``Options.rx_hold``, a
        few records while a posted transfer has more than a few packets to come (a slow link, where datagrams come
        one per wake-up), sleep through arrivals for up to ``rx_hold`` (at most ``timeout``), waking only for a
        caller's work or the wake-up timer. True when it slept the hold out: the caller drains the socket now,
        everything that came meanwhile in one pass (its ACKs wait as long: ``ack_hold`` tells the sender's window
        of such a delay). False when it did not hold, or was woken (the caller's own wait then returns at once)."""
        hold = self.opts.rx_hold
        if not hold or not 0 < taken <= self.opts.rx_hold_records or timeout <= 0 or not any(
                i.posted and i.st is not None and i.st.total - i.st.npackets > 4 and self._receiver.holds(i)
                for i in list(self._receiver.incoming.values())):
            return False
        waits = [self._wake_r] if self._timer is None else [self._wake_r, self._timer]
        try:
            ready, _, _ = select.select(waits, [], [], min(hold, timeout))
        except (OSError, ValueError):  # (closed under us: the loop ends on its own)
            return False
        if ready:
            return False
        self._sleeping = False
        self._c["io_rx_holds"] += 1
        return True

    def _plan_timers(self, now: float) -> None:
        """Under the lock, on the I/O thread: when the stages' timers run next. Not every ``Options.tick`` while
        anything is in progress (on a 20 Mb/s link that was nine wake-ups in ten), but at the earliest time one of
        them may act (each stage's ``next_due``), at most once per tick, and at least every ``_TIMERS_MAX``
        seconds while transfers are in progress (a bound on what a missed deadline could cost), ``_IDLE_MAX``
        when none is. Planned again after the timers run, and after anything happened (a datagram, a send, a
        caller's work: new deadlines) before the thread sleeps, or once per tick while it does not. (Planning a
        tick later instead, by a wake-up of its own, was 70% of the thread's wake-ups on a 20 Mb/s link whose
        packets arrive one at a time.)"""
        self._next_tick = self._due(now)
        self._planned_at = now
        self._dirty = False

    def _due(self, now: float, held: InTransfer | None = None) -> float:
        """Under the lock: when the timers run next (:meth:`_plan_timers`' rule); ``held``: a transfer whose held
        ACK (``Options.ack_hold``) the caller's native wait sends itself when its hold runs out, so that its
        deadline is not the timers' (waking Python at each hold's end was most of the wait's returns)."""
        busy = self._receiver.incoming or any(p.active for p in self._sender.peers.values())
        due = min(self._receiver.next_due(now, held), self._sender.next_due(now, self.opts.tick),
                  self._liveness.next_due(now), now + (_TIMERS_MAX if busy else _IDLE_MAX))
        return max(due, self._timers_at + self.opts.tick)

    def _redue(self, now: float, last: float) -> float:
        """From the native wait, on the I/O thread, when its timeout (the timers' planned time) has passed: that
        time planned again (:meth:`_due`, the wait's own held ACK left out as when it started), which the wait
        sleeps on until when it is later. A deadline moves while the wait runs without Python: a peer's RTO with
        every ACK that frees packets, a NACK's wait with every arrival; on a paced 20 Mb/s link nearly every return
        of the wait was such a deadline, each a pass of the Python loop (its timers, the plan, the candidates) that
        found nothing to do. ``_TIMERS_MAX`` still counts from when the timers last ran, so planning again never
        postpones that bound; the thread's sleep deadline follows, for :meth:`_after_first_burst`. ``last``: the
        latest arrival of the wait's transfer that the wait took (``Receiver.native_progress`` records it when the
        wait returns; a NACK's wait counts from it). Only a wait whose timeout is the timers' plan gets it: not one
        ended early by the pacing of a send this loop picks (sends to several peers), nor by the holds' judging."""
        with self._lock:
            if self._closed:
                return 0.0
            cand = self._wait_cand
            if cand is not None and last > cand.last_arrival:
                cand.last_arrival = last
            due = min(self._due(now, cand), self._timers_at + _TIMERS_MAX)
            if due > now:
                self._next_tick = due
                self._sleep_until = due
            return due

    def _disarm(self, fired: bool) -> None:
        """Under the lock, on the I/O thread, awake: disarm the wake-up timer (read its expiry when it ``fired``:
        then a deadline is due, and the timers run now)."""
        self._timer_at = 0.0
        self._dirty = True
        try:
            if fired:
                os.read(self._timer, 8)
                self._next_tick = 0.0
            else:
                _txlane.timer_arm(self._timer, 0.0)
        except OSError:  # (BlockingIOError: it was disarmed before it fired; closed: the loop ends)
            pass

    def _settle(self) -> None:
        """Under the lock, on the I/O thread: receive and handle every datagram the socket holds now (at most
        :data:`_SETTLE_BATCHES` batches). Liveness calls it before it acts on a refused datagram: what the refusing
        peer sent before its socket closed (a DEAD notice naming the root cause of its end) is queued ahead of the
        refusal, and must be taken first."""
        for _ in range(_SETTLE_BATCHES):
            try:
                recs = self._io.drain()
            except OSError as e:
                if e.errno in _ICMP_ERRNOS:  # (reported once; the datagrams behind it are still there)
                    continue
                return
            if not recs:
                return
            self._intake.handle(recs)

    def _after_first_burst(self, o) -> None:
        """Under the lock, after the caller of send() transmitted ``o``'s first burst: the I/O thread has the rest.
        When that burst was the whole transfer and the thread sleeps, it has nothing to do until the DONE comes,
        which wakes it through the socket, or until the transfer's first deadline (its RTO, a tail probe) passes
        without one: the wake-up timer is armed for that deadline (if the thread would sleep past it) instead of
        waking the thread now. One wake-up per small send instead of two, the second of which only planned its
        timers. Anything else (more to send, slices to classify, no timer): :meth:`_wake`."""
        if self._closed:
            return
        if self._timer is None or not self._sleeping or o.has_work() or o.ready < o.total:
            self._wake()
            return
        self._dirty = True  # (when it wakes, for the DONE or the timer, it plans its timers again)
        now = time.monotonic()
        due = min(self._sender.next_due(now, self.opts.tick), now + _TIMERS_MAX)
        if due < self._sleep_until and (not self._timer_at or due < self._timer_at):
            try:
                _txlane.timer_arm(self._timer, due)
            except OSError:  # (closed under us: the I/O loop ends on its own)
                self._wake()
                return
            self._timer_at = due

    def _wake(self) -> None:
        """Called under the lock after posting work: wake the I/O thread if it sleeps in select (and have it plan
        its timers again: the work may bring deadlines)."""
        self._dirty = True
        if self._sleeping:
            self._sleeping = False
            try:
                self._wake_w.send(b"x")
            except OSError:  # full: a wake-up is already pending
                pass
