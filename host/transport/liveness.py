"""Liveness: which peers are dead, found out fast, and told to everyone who shares work with them.

What :class:`Liveness` does:

* hears every valid datagram's source (:attr:`Liveness.heard`, written by the datagram intake and the receiver);
* probes a peer this rank waits on (a posted receive, an unacknowledged send) once it has been silent for a quarter
  of ``peer_timeout`` (at most :data:`PROBE_EVERY`), and declares it dead once silent for all of it
  (:meth:`Liveness.check`); reads the socket's error queue, where a port-unreachable from a peer that was heard
  from means its process ended (:meth:`Liveness.read_errors`);
* on a death (:meth:`Liveness.peer_died`): fails every pending transfer with that peer, and every pending
  transfer of a group that shares its fate (``Endpoint.share_fate``), and, when this rank saw the death itself,
  sends every other peer a DEAD notice (again after :data:`DEAD_NOTICE_AGAIN`, datagrams get lost); answers
  probes and takes DEAD notices (:meth:`Liveness.on_control`);
* runs the closing handshake (:meth:`Liveness.start_closing`, :meth:`Liveness.settled`): a closing endpoint sends
  every peer heard from a BYE, again every :data:`BYE_AGAIN`, until each answers that it needs nothing more (its own
  sends to the closing rank are DONE: told of a BYE, a peer probes those at once, so that a DONE lost at the end of
  a job is repeated while the closing rank still listens), its address refuses, or it is dead;
* judges a refused datagram (port unreachable) by evidence: the peer is dead only when this rank has an
  operation with it that is incomplete (a send not DONE, a posted receive not complete); a peer that exited after
  completing everything asked of it is not;
* attributes every death to its root cause, the rank that failed first: a DEAD notice carries the rank whose
  failure the dead one's end followed (an abort after a peer's death names that peer), a receiver declares that
  rank dead first, and a group's work fails naming its member that died first (:meth:`Liveness.dead_error`).
  Before it acts on a refused datagram it handles what the socket already holds (the ``settle`` callback), so a
  notice a peer sent before its socket closed explains the refusal rather than losing the race with it.

Why a stage of its own: a death ends work on both sides (the sender's and the receiver's transfers) and is
decided from timers, the error queue and control messages together. Runs under the endpoint's lock.

Promises: a rank is declared dead once and stays dead (its stragglers open nothing); a peer that is slow to
compute but whose endpoint answers probes is never declared dead; one that was never heard from is judged by its
silence alone (it may not have bound its socket yet); a refusal makes a peer dead only while an operation with it
is incomplete; every failure names the dead rank and why, and a group's
failure names the first of its members known dead (first failure wins), not one that ended because of it.

The root cause travels in the DEAD notice's header: ``seq`` is 1 + the rank whose failure came first (0: the named
rank's own failure), so old reasons need no parsing.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Callable

from host import wire
from host.transport.api import Options, TransportError
from host.transport.control import (BYE_CLOSING, BYE_DONE, CTL, CTL_ALIVE, CTL_BYE, CTL_DEAD, CTL_PROBE, W_RANK,
                                    W_SEQ, pack_control_header)
from host.transport.packetio import PacketSocket, src_key
from host.transport.receiver import Receiver
from host.transport.sender import Sender
from host.transport.stats import Counters
from host.transport.transmit import Transmitter
from host.wire import MsgType

__all__ = ["Liveness", "BYE_AGAIN", "DEAD_NOTICE_AGAIN", "PROBE_EVERY"]

log = logging.getLogger("host.transport")

_DEAD_REASON_MAX = 400  # bytes of reason a DEAD notice carries
DEAD_NOTICE_AGAIN = (0.05, 0.25)  # a DEAD notice is sent at once and again this long after (datagrams get lost)
PROBE_EVERY = 1.0  # seconds between probes of a silent peer this rank waits on (peer_timeout / 4 if shorter)
BYE_AGAIN = 0.02  # a closing endpoint repeats its BYE to the peers that have not answered this often


class Liveness:
    """The dead ranks of one endpoint, its probes, its fate groups and the DEAD notices still to repeat."""

    def __init__(self, rank: int, job_id: int, nonce: int, addr_map: dict[int, tuple[str, int]],
                 rank_of: dict, opts: Options, io: PacketSocket, tx: Transmitter, counters: Counters):
        self.rank, self.job_id, self.nonce, self.addr_map, self._rank_of = rank, job_id, nonce, addr_map, rank_of
        self.opts, self._io, self._tx, self._counters, self._c = opts, io, tx, counters, counters.c
        self.dead: dict[int, str] = {}  # dead ranks and why, in the order they were declared
        self.root: dict[int, int] = {}  # dead rank -> the rank whose failure its end followed (itself: its own)
        self.heard: dict[int, float] = {}  # when each rank was last heard from (any valid datagram)
        self._probe_next: dict[int, float] = {}  # when to probe a silent rank next
        self.fates: list[tuple[frozenset[int], int, int]] = []  # (ranks, tid mask, tid value): share_fate
        self._notices: list[tuple[float, bytes]] = []  # DEAD notices still to repeat: (when, message)
        self._sender: Sender | None = None
        self._receiver: Receiver | None = None
        self._settle: Callable[[], None] | None = None
        self.closed_peers: dict[int, float] = {}  # peers that said their endpoint is closing (BYE), and when
        self.closing = False  # this endpoint is closing (start_closing)
        self._bye_wait: set[int] = set()  # peers whose answer to this endpoint's BYE is still awaited
        self._bye_next = 0.0

    def attach(self, sender: Sender, receiver: Receiver, settle: Callable[[], None] | None = None) -> None:
        """The stages whose transfers a death fails (they are built after this one: they share its dicts), and
        ``settle``: handle every datagram the socket holds now (under the lock), called before a refusal is acted
        on (:meth:`read_errors`)."""
        self._sender, self._receiver, self._settle = sender, receiver, settle

    def share_fate(self, ranks, tid_mask: int, tid_value: int) -> None:
        """See ``Endpoint.share_fate`` (under the lock)."""
        fate = (frozenset(int(r) for r in ranks), int(tid_mask), int(tid_value))
        self.fates = [f for f in self.fates if f[1:] != fate[1:]] + [fate]

    def dead_error(self, peer: int, tid: int) -> TransportError | None:
        """Why a transfer ``tid`` with ``peer`` cannot complete (its peer, or a member of a group whose fate it
        shares, is dead), or None."""
        if not self.dead:
            return None
        if peer in self.dead:
            return TransportError(f"rank {peer} is dead: {self.dead[peer]}", peer)
        for ranks, mask, value in self.fates:
            if tid & mask == value:
                r = self.first_dead(ranks)
                if r is not None:
                    return TransportError(f"transfer {tid} with rank {peer} cannot complete: rank {r} of its "
                                          f"group is dead: {self.dead[r]}", r)
        return None

    def first_dead(self, ranks) -> int | None:
        """The root cause among ``ranks``: of the members known dead, the first declared (a rank that ended because
        of an earlier death is declared after it), or None when all live."""
        for r in self.dead:
            if r in ranks:
                return r
        return None

    def peer_died(self, rank: int, reason: str, *, tell: bool, root: int | None = None) -> None:
        """``rank`` is dead: fail every pending transfer with it, and every pending transfer of a group that shares
        its fate (:meth:`share_fate`), with a :class:`TransportError` naming it; new ones fail when started. With
        ``tell`` (this rank saw the death itself), first send every other peer a DEAD notice, so that their work
        fails now rather than after their own timeouts (first: the failures wake waiters, and a process that ends on
        its error must not take the notice with it). ``root``: the rank whose failure ``rank``'s end followed (a
        notice said so); it is declared dead first, with the same reason, so that work in a group with both fails
        naming the root."""
        if rank in self.dead or rank == self.rank or rank not in self.addr_map:
            return
        if root is not None and root != rank and root != self.rank and root in self.addr_map:
            self.peer_died(root, reason, tell=False)
        self.root[rank] = self.root.get(root, root) if root is not None and root in self.dead else rank
        self.dead[rank] = reason
        self._c["peers_dead"] += 1
        log.warning("dlcp rank %d: rank %d is dead: %s", self.rank, rank, reason)
        if tell:  # before any work fails: a waiter woken by its failure may end this process at once
            msg = self.dead_notice(rank, reason, self.root[rank])
            self.notify_all(msg, skip=rank)
            now = time.monotonic()
            self._notices.extend((now + dt, msg) for dt in DEAD_NOTICE_AGAIN)
        masks = [(m, v) for ranks, m, v in self.fates if rank in ranks]
        for p in list(self._sender.peers.values()):
            for o in list(p.active):
                if p.rank == rank or any(o.tid & m == v for m, v in masks):
                    self._sender.finish(p, o, self.dead_error(p.rank, o.tid))
        for inc in list(self._receiver.incoming.values()):
            if inc.peer == rank and not inc.posted:  # staged data nobody will complete
                self._receiver.drop_in(inc, TransportError(f"rank {rank} is dead: {reason}", rank))
            elif inc.posted and not inc.done and (inc.peer == rank or any(inc.tid & m == v for m, v in masks)):
                self._receiver.drop_in(inc, self.dead_error(inc.peer, inc.tid))

    def dead_notice(self, rank: int, reason: str, root: int | None = None) -> bytes:
        """A CONTROL datagram saying ``rank`` is dead, and why; ``root``: the rank whose failure came first, when
        not ``rank`` itself (carried as ``seq`` = root + 1)."""
        why = reason.encode("utf-8", "replace")[:_DEAD_REASON_MAX]
        buf = bytearray(wire.HEADER_LEN + CTL.size + len(why))
        cause = 0 if root is None or root == rank else root + 1
        pack_control_header(buf, MsgType.CONTROL, flags=0, rank=self.rank, job_id=self.job_id, transfer_id=0,
                            seq=cause, total=0, count=0, nonce=self.nonce)
        CTL.pack_into(buf, wire.HEADER_LEN, CTL_DEAD, rank)
        buf[wire.HEADER_LEN + CTL.size:] = why
        return bytes(buf)

    def abort_notice(self, reason: str) -> bytes:
        """The DEAD notice about this rank itself (``Endpoint.abort``): when a peer is known dead here, this rank's
        end follows the first such death (first failure wins), and the notice names that rank as the root cause."""
        first = next(iter(self.dead), None)
        return self.dead_notice(self.rank, reason, None if first is None else self.root[first])

    def notify_all(self, msg: bytes, skip: int) -> None:
        """Send ``msg`` to every peer but ``skip`` and the ranks known dead."""
        for r, addr in self.addr_map.items():
            if r != self.rank and r != skip and r not in self.dead:
                self._tx.send_msg(msg, addr)
                self._c["dead_notices_sent"] += 1

    def _send_probe(self, rank: int, op: int, arg: int = 0) -> None:
        """Send ``rank`` a CONTROL message about ranks (transfer id 0): PROBE, ALIVE or BYE, with ``arg``."""
        buf = self._tx.ctl_buf
        pack_control_header(buf, MsgType.CONTROL, flags=0, rank=self.rank, job_id=self.job_id, transfer_id=0,
                            seq=0, total=0, count=0, nonce=self.nonce)
        CTL.pack_into(buf, wire.HEADER_LEN, op, arg)
        self._tx.send_ctl(self.addr_map[rank], wire.HEADER_LEN + CTL.size)
        if op == CTL_PROBE:
            self._c["probes_sent"] += 1

    def incomplete_with(self, rank: int) -> str | None:
        """What operation with ``rank`` is incomplete here (a send not DONE, a posted receive not complete), named,
        or None: the evidence a dead-peer verdict on a refusal needs."""
        p = self._sender.peers.get(rank)
        if p is not None and p.active:
            o = p.active[0]
            return f"send of transfer {o.tid} ({int(o.acked.sum())}/{o.total} packets acknowledged)"
        for inc in self._receiver.incoming.values():
            if inc.peer == rank and inc.posted and not inc.done:
                got = f"{inc.st.npackets}/{inc.st.total} packets" if inc.st is not None else "no packet"
                return f"receive of transfer {inc.tid} ({got} received)"
        return None

    def start_closing(self, now: float) -> None:
        """This endpoint is closing (``Endpoint.close``): send every live peer heard from a BYE; :meth:`check`
        repeats it to those that have not answered."""
        self.closing = True
        self._bye_wait = {r for r in self.heard if r != self.rank and r not in self.dead and r in self.addr_map}
        self._bye_next = now
        self._send_byes(now)

    def settled(self) -> bool:
        """Every peer a BYE went to answered it (needs nothing more from this rank), refused it, or is dead."""
        return not self._bye_wait

    def _send_byes(self, now: float) -> None:
        self._bye_wait -= self.dead.keys()
        if now < self._bye_next or not self._bye_wait:
            return
        self._bye_next = now + BYE_AGAIN
        for r in self._bye_wait:
            self._send_probe(r, CTL_BYE, BYE_CLOSING)
            self._c["byes_sent"] += 1

    def _on_bye(self, src: int, arg: int, now: float) -> None:
        """A BYE from ``src``: its endpoint is closing (answer once this rank's sends to it are DONE, probing them
        now so that a lost DONE is repeated while it listens), or its answer to this rank's BYE."""
        self._c["byes_rx"] += 1
        if arg == BYE_DONE:
            self._bye_wait.discard(src)
            return
        self.closed_peers[src] = now
        if self._sender.probe_peer(src, now):
            return  # (sends to src still wait for DONE: the answer follows a later BYE, once they are done)
        self._send_probe(src, CTL_BYE, BYE_DONE)

    def on_control(self, w: tuple, payload: memoryview) -> None:
        """A CONTROL message that is not about a transfer: a probe, its answer, a BYE, or a DEAD notice."""
        op, arg = CTL.unpack_from(payload)
        src = w[W_RANK]
        root = w[W_SEQ] - 1 if op == CTL_DEAD and w[W_SEQ] else None  # (peer_died ignores one not in addr_map)
        if op == CTL_BYE and arg in (BYE_CLOSING, BYE_DONE):
            self._on_bye(src, arg, time.monotonic())
        elif op == CTL_PROBE:
            self._c["probes_rx"] += 1
            self._send_probe(src, CTL_ALIVE)
        elif op == CTL_ALIVE:
            pass  # (the datagram itself refreshed when src was last heard from)
        elif op == CTL_DEAD and arg in self.addr_map:
            self._c["dead_notices_rx"] += 1
            reason = bytes(payload[CTL.size:]).decode("utf-8", "replace")
            if arg == src:
                self.peer_died(src, f"rank {src} aborted: {reason}", tell=False, root=root)
            elif arg == self.rank:  # src has given up on this rank: its work with this rank ends here too
                self.peer_died(src, f"rank {src} declared this rank dead ({reason})", tell=False)
            else:
                self.peer_died(arg, f"{reason} (reported by rank {src})", tell=False, root=root)
        else:
            self._counters.malformed("payload")

    def read_errors(self, now: float) -> None:
        """Read the socket's error queue (IP_RECVERR): a port-unreachable from a peer's address means its socket is
        closed, its process gone. Such a peer is dead at once if it was heard from before and an operation with it
        is incomplete here (:meth:`incomplete_with`). One not heard from yet may not have bound its socket yet,
        however long this endpoint has waited: its silence decides, after peer_timeout. One with nothing
        incomplete (it exited after completing everything asked of it; a late DONE or ACK of ours met its closed
        socket) is not dead: counted, and judged again by the next refusal if an operation with it is started."""
        refused = list(self._io.refused())
        if refused and self._settle is not None:
            self._settle()  # first what the peer sent before its socket closed: a notice saying why it ended
        for addr in refused:
            r = self._rank_of.get(src_key(addr))
            self._c["refused"] += 1
            if r is None:
                continue
            self._bye_wait.discard(r)  # (a closing endpoint: a peer whose socket is closed needs nothing more)
            what = self.incomplete_with(r) if r in self.heard else None
            if what is not None:
                how = ("closed its endpoint (it said BYE)" if r in self.closed_peers else
                       "its socket is closed, its process ended")
                self.peer_died(r, f"peer rank {r} at {addr[0]}:{addr[1]} refused a datagram (port unreachable: "
                                  f"{how}) with the {what} incomplete", tell=True)

    def check(self, now: float) -> None:
        """Probe the peers this rank waits on (posted receives, unacknowledged sends) that have been silent for a
        quarter of ``peer_timeout`` (at most ``PROBE_EVERY``); declare dead one silent for all of it. (A probe to
        a peer whose process ended is refused at once: :meth:`read_errors`.) Silence counts from the later of the
        last datagram heard from the peer and the start of the wait, so a peer that computes for a long time but
        whose endpoint answers probes is never declared dead."""
        waiting: dict[int, float] = {}
        for inc in self._receiver.incoming.values():
            if inc.posted and not inc.done:
                t = waiting.get(inc.peer)
                waiting[inc.peer] = inc.posted_at if t is None else min(t, inc.posted_at)
        for p in self._sender.peers.values():
            if p.active:
                t = waiting.get(p.rank)
                waiting[p.rank] = p.last_feedback if t is None else min(t, p.last_feedback)
        pt = self.opts.peer_timeout
        for r, since in waiting.items():
            silent = now - max(since, self.heard.get(r, 0.0))
            if silent > pt:
                self._c["peer_timeouts"] += 1
                a = self.addr_map[r]
                self.peer_died(r, f"peer rank {r} at {a[0]}:{a[1]} sent nothing for {silent:.3f}s (peer_timeout "
                                   f"{pt}s) while rank {self.rank} waited on it", tell=True)
            elif silent > min(pt / 4, PROBE_EVERY) and now >= self._probe_next.get(r, 0.0):
                self._probe_next[r] = now + min(pt / 4, PROBE_EVERY)
                self._send_probe(r, CTL_PROBE)
        if self._bye_wait:
            self._send_byes(now)
        if self._notices:
            due = [m for t, m in self._notices if t <= now]
            if due:
                self._notices = [(t, m) for t, m in self._notices if t > now]
                for m in due:
                    self.notify_all(m, skip=CTL.unpack_from(m, wire.HEADER_LEN)[1])

    def next_due(self, now: float) -> float:
        """The earliest time :meth:`check` may have something to do (early is safe, late delays a probe): per peer
        this rank waits on, its probe once silent for ``min(peer_timeout / 4, PROBE_EVERY)`` and its death at
        ``peer_timeout``; a BYE to repeat; a DEAD notice to repeat."""
        pt = self.opts.peer_timeout
        quiet = min(pt / 4, PROBE_EVERY)
        due = math.inf
        for inc in self._receiver.incoming.values():
            if inc.posted and not inc.done:
                base = max(inc.posted_at, self.heard.get(inc.peer, 0.0))
                due = min(due, max(base + quiet, self._probe_next.get(inc.peer, 0.0)), base + pt)
        for p in self._sender.peers.values():
            if p.active:
                base = max(p.last_feedback, self.heard.get(p.rank, 0.0))
                due = min(due, max(base + quiet, self._probe_next.get(p.rank, 0.0)), base + pt)
        if self._bye_wait:
            due = min(due, self._bye_next)
        if self._notices:
            due = min(due, min(t for t, _ in self._notices))
        return due
