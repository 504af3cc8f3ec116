"""Drivers that run :mod:`host.spardl.program` programs: in memory, over a process group, over a DLCP Link.

* :func:`run_simulated` runs one program per rank in one process, moving messages through mailboxes. It
  behaves like a real transport where it matters: a receive needs a matching send of exactly the posted size,
  messages between a pair with one tag arrive in order, a program waiting for a message nobody sends is a
  deadlock (reported with who waits for what), and a message nobody receives is an error.
* :func:`run_on_group` runs this rank's program over ``torch.distributed`` ``isend``/``irecv`` of any backend
  (gloo, or ``"dlcp"``, whose point-to-point transfers are DLCP transport transfers). Ranks are group ranks.
* :class:`LinkExchange` runs it straight over a :class:`host.collectives.Link` (e.g. a transport
  :class:`~host.transport.Endpoint`), naming transfers itself; use it on an endpoint no dlcp process group
  shares (or give it an id prefix the group does not use).
"""

from __future__ import annotations

import threading
from collections import defaultdict, deque
from datetime import timedelta
from typing import Callable, Sequence

import torch
import torch.distributed as dist

from host.collectives import EndpointLink
from host.spardl.clock import PhaseClock, phase
from host.spardl.program import Program, Round

__all__ = ["run_simulated", "run_on_group", "LinkExchange", "ExchangeError"]


class ExchangeError(RuntimeError):
    """A schedule that cannot complete: deadlock, size mismatch, unmatched message."""


Inspector = Callable[[int, int, int, torch.Tensor], None]


def run_simulated(programs: Sequence[Program], inspect: Inspector | None = None) -> list:
    """Run ``programs[r]`` as rank ``r``; returns their return values. ``inspect(src, dst, tag, message)`` sees
    every delivered message (tests decode them)."""
    P = len(programs)
    mail: dict[tuple[int, int, int], deque] = defaultdict(deque)
    pending: list[Round | None] = [None] * P
    results: list = [None] * P
    done = [False] * P

    def advance(r: int, value) -> None:
        try:
            rnd = programs[r].send(value)
        except StopIteration as stop:
            results[r], done[r], pending[r] = stop.value, True, None
            return
        for s in rnd.sends:
            if not 0 <= s.peer < P or s.peer == r:
                raise ExchangeError(f"rank {r} sends to invalid peer {s.peer}")
            mail[(r, s.peer, s.tag)].append(s.data.clone())
        pending[r] = rnd

    for r in range(P):
        advance(r, None)
    while not all(done):
        progress = False
        for r in range(P):
            rnd = pending[r]
            if rnd is None or not all(mail[(v.peer, r, v.tag)] for v in rnd.recvs):
                continue
            need: dict[tuple[int, int], int] = defaultdict(int)
            for v in rnd.recvs:
                need[(v.peer, v.tag)] += 1
            if any(len(mail[(p, r, t)]) < c for (p, t), c in need.items()):
                continue
            bufs = []
            for v in rnd.recvs:
                msg = mail[(v.peer, r, v.tag)].popleft()
                if msg.numel() != v.nbytes:
                    raise ExchangeError(f"rank {r} posted {v.nbytes} bytes for tag {v.tag} from rank {v.peer}, "
                                        f"which sent {msg.numel()}")
                if inspect is not None:
                    inspect(v.peer, r, v.tag, msg)
                bufs.append(msg)
            advance(r, bufs)
            progress = True
        if not progress:
            waits = {r: [(v.peer, v.tag) for v in pending[r].recvs] for r in range(P) if pending[r] is not None}
            raise ExchangeError(f"deadlock: ranks waiting for (peer, tag) {waits}")
    left = {k: len(q) for k, q in mail.items() if q}
    if left:
        raise ExchangeError(f"messages sent but never received (src, dst, tag): {left}")
    return results


def run_on_group(program: Program, group: dist.ProcessGroup | None = None, timeout: float = 60.0,
                 clock: PhaseClock | None = None):
    """Run this rank's program over ``group``'s isend/irecv; each round's operations must all finish within
    ``timeout`` seconds or the call raises (the failing backend's error, or a timeout). ``clock`` times the
    exchange (posting and waiting) as phase ``exchange``."""
    def glob(r: int) -> int:
        return r if group is None else dist.get_global_rank(group, r)

    wait_for = timedelta(seconds=timeout)
    try:
        rnd = next(program)
        while True:
            with phase(clock, "exchange"):
                bufs = [torch.empty(v.nbytes, dtype=torch.uint8, device="cpu") for v in rnd.recvs]  # the wire: host
                works = [dist.irecv(b, src=glob(v.peer), group=group, tag=v.tag)
                         for b, v in zip(bufs, rnd.recvs)]
                works += [dist.isend(s.data, dst=glob(s.peer), group=group, tag=s.tag) for s in rnd.sends]
                for w in works:
                    if not w.wait(wait_for):
                        raise ExchangeError(f"SparDL exchange not complete after {timeout}s")
            rnd = program.send(bufs)
    except StopIteration as stop:
        return stop.value


class LinkExchange:
    """Runs programs over a :class:`host.collectives.Link` (or a transport Endpoint) among the global ranks
    ``ranks`` (``ranks[i]`` is group rank i). Transfer ids: ``prefix | tag << 16 | n``, ``n`` counting messages
    per (peer, direction, tag), so the n-th send of a tag to a peer matches that peer's n-th receive of it."""

    def __init__(self, link, ranks: Sequence[int], my_rank: int, *, timeout: float = 60.0,
                 id_prefix: int = 0xFC000000):
        if my_rank not in ranks:
            raise ValueError(f"rank {my_rank} is not among {list(ranks)}")
        if id_prefix & 0x00FFFFFF:
            raise ValueError("id_prefix must leave the low 24 bits free")
        self.link = link if hasattr(link, "isend") else EndpointLink(link)
        self.ranks, self.timeout, self.prefix = list(ranks), timeout, id_prefix
        self.rank = self.ranks.index(my_rank)
        self._counts: dict[tuple[int, str, int], int] = defaultdict(int)
        self._lock = threading.Lock()

    def _tid(self, peer: int, direction: str, tag: int) -> int:
        if not 0 <= tag < 256:
            raise ValueError(f"tag {tag} outside 0..255")
        with self._lock:
            n = self._counts[(peer, direction, tag)]
            self._counts[(peer, direction, tag)] = n + 1
        return self.prefix | (tag << 16) | (n & 0xFFFF)

    def run(self, program: Program):
        try:
            rnd = next(program)
            while True:
                bufs = [torch.empty(v.nbytes, dtype=torch.uint8, device="cpu") for v in rnd.recvs]
                # receives posted before the round's sends: the peers send at the same moment, and what arrives
                # before its receive is posted is staged and copied again
                posted = [self.link.irecv(self.ranks[v.peer], b, self._tid(v.peer, "r", v.tag), timeout=self.timeout)
                          for v, b in zip(rnd.recvs, bufs)]
                try:
                    handles = [self.link.isend(self.ranks[s.peer], s.data, self._tid(s.peer, "s", s.tag))
                               for s in rnd.sends]
                    for h in posted:
                        h.wait()
                except BaseException:
                    for h in posted:
                        h.cancel()
                    raise
                for h in handles:
                    h.wait(self.timeout)
                rnd = program.send(bufs)
        except StopIteration as stop:
            return stop.value
