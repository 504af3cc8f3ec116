"""Traffic manager between ingress and egress, as BMv2 simple_switch with ``--priority-queues N``,
on a simulated clock (integer nanoseconds) so queueing is deterministic.

* One FIFO per (egress port, priority); strict priority, higher ``priority`` value first (0 is the
  lowest, as in BMv2).  A packet whose priority is >= N is dropped.
* Capacity in packets per queue (default 64, BMv2's default) and an optional rate per queue in
  packets/s (BMv2 ``set_queue_rate``), plus an optional port line rate in bits/s (serialisation).
* Link emulation the kernel here cannot do (no netem): per-port propagation delay and seeded
  random loss.
* Every drop is counted by (port, priority, reason); reasons: ``queue_full``,
  ``priority_out_of_range``, ``pipeline_drop``, ``emulated_loss`` (plus ``parser_error`` counted
  apart, see :class:`switch.target.Switch`).

``enq_qdepth`` is the number of packets already in the packet's own queue when it is enqueued;
``deq_qdepth`` the number left behind when it is dequeued.
"""
from __future__ import annotations

import random
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

REASONS = ("queue_full", "priority_out_of_range", "pipeline_drop", "emulated_loss", "parser_error")


class Queued:
    """A queued packet (the FIFOs hold plain tuples ``(item, enq_ns, enq_depth, size)``; this is
    the named view :meth:`TrafficManager.dequeue` returns)."""
    __slots__ = ("item", "enq_ns", "enq_depth", "size")

    def __init__(self, item: Any, enq_ns: int, enq_depth: int, size: int):
        self.item, self.enq_ns, self.enq_depth, self.size = item, enq_ns, enq_depth, size


@dataclass(slots=True)
class Queue:
    capacity: int = 64
    rate_pps: float = 0.0
    next_ok_ns: int = 0
    fifo: deque = field(default_factory=deque)
    enq_packets: int = 0         # statistics for the switch daemon's management service
    deq_packets: int = 0
    peak_depth: int = 0


@dataclass(slots=True)
class Port:
    rate_bps: float = 0.0
    delay_ns: int = 0
    loss: float = 0.0
    busy_until_ns: int = 0


class TrafficManager:
    """Per (port, priority) FIFOs.  The next departure is found without scanning every queue: the
    earliest send time of each port with packets is cached (``ready``) and recomputed only for the
    ports an enqueue, dequeue or configuration change touched (``dirty``).  With no queue rate and
    no port line rate configured (the default), a dequeue does no timing arithmetic at all."""

    def __init__(self, priority_queues: int = 1, capacity: int = 64, seed: int = 0, rate_pps: float = 0.0):
        if priority_queues < 1 or priority_queues > 8:
            raise ValueError("priority_queues must be 1..8 (standard_metadata.priority is bit<3>)")
        self.nprio = priority_queues
        self.default_capacity = capacity
        self.default_rate_pps = float(rate_pps)     # rate of queues created from now on (0 = unlimited)
        self.queues: dict[tuple[int, int], Queue] = {}
        self.ports: dict[int, Port] = {}
        self.drops: Counter = Counter()
        self.rng = random.Random(seed)
        self.backlog = 0
        self._port_queues: dict[int, list[tuple[int, Queue]]] = {}   # port -> [(prio, queue)], highest first
        self._ready: dict[int, tuple[int, int]] = {}                  # port with packets -> (time, prio)
        self._dirty: set[int] = set()
        # port * 8 + prio -> queue, for priorities in range only: the switch's generated ingress
        # code enqueues inline through it (the same steps as enqueue) and calls enqueue otherwise
        self.qmap: dict[int, Queue] = {}
        self.shaped = False          # any queue rate or port line rate configured
        self.plain_links = True      # no port delay or loss configured

    # -- configuration ---------------------------------------------------------------------------
    def queue(self, port: int, prio: int) -> Queue:
        q = self.queues.get((port, prio))
        if q is None:
            q = self.queues[(port, prio)] = Queue(self.default_capacity, self.default_rate_pps)
            if 0 <= prio < self.nprio:
                self.qmap[port * 8 + prio] = q
            if q.rate_pps > 0:
                self.shaped = True
            self.port(port)
            lst = self._port_queues.setdefault(port, [])
            lst.append((prio, q))
            lst.sort(key=lambda x: -x[0])
        return q

    def port(self, port: int) -> Port:
        p = self.ports.get(port)
        if p is None:
            p = self.ports[port] = Port()
        return p

    def _reconfigured(self) -> None:
        self.shaped = any(q.rate_pps > 0 for q in self.queues.values()) or \
            any(p.rate_bps > 0 for p in self.ports.values())
        self.plain_links = all(p.delay_ns == 0 and p.loss == 0 for p in self.ports.values())
        self._dirty.update(self._ready)

    def set_queue_depth(self, depth: int, port: int | None = None, prio: int | None = None) -> None:
        """Like BMv2 ``set_queue_depth <pkts> [port [prio]]``; without a port, the default for all."""
        if port is None:
            self.default_capacity = depth
            for q in self.queues.values():
                q.capacity = depth
            return
        for p in ([prio] if prio is not None else range(self.nprio)):
            self.queue(port, p).capacity = depth

    def set_queue_rate(self, pps: float, port: int, prio: int | None = None) -> None:
        """Like BMv2 ``set_queue_rate <pps> [port [prio]]`` (0 = unlimited)."""
        for p in ([prio] if prio is not None else range(self.nprio)):
            self.queue(port, p).rate_pps = float(pps)
        self._reconfigured()

    def set_port(self, port: int, rate_bps: float | None = None, delay_ns: int | None = None,
                 loss: float | None = None) -> None:
        p = self.port(port)
        if rate_bps is not None:
            p.rate_bps = float(rate_bps)
        if delay_ns is not None:
            p.delay_ns = int(delay_ns)
        if loss is not None:
            if not 0.0 <= loss <= 1.0:
                raise ValueError("loss must be in [0, 1]")
            p.loss = float(loss)
        self._reconfigured()

    # -- data path -------------------------------------------------------------------------------
    def drop(self, port: int, prio: int, reason: str, n: int = 1) -> None:
        self.drops[(port, prio, reason)] += n

    def enqueue(self, port: int, prio: int, item: Any, size: int, now_ns: int) -> int | None:
        """Returns enq_qdepth, or None when dropped (counted)."""
        if not 0 <= prio < self.nprio:
            self.drop(port, prio, "priority_out_of_range")
            return None
        q = self.queues.get((port, prio))
        if q is None:
            q = self.queue(port, prio)
        fifo = q.fifo
        depth = len(fifo)
        if depth >= q.capacity:
            self.drop(port, prio, "queue_full")
            return None
        fifo.append((item, now_ns, depth, size))
        q.enq_packets += 1
        if depth >= q.peak_depth:
            q.peak_depth = depth + 1
        self.backlog += 1
        self._dirty.add(port)
        return depth

    def _port_ready(self, port: int) -> tuple[int, int] | None:
        """(earliest time the port can send, priority) or None if nothing is queued.

        A queue can send at t = max(head's enqueue time, its rate limit, the port's busy time);
        the port sends at the smallest t, from the highest priority queue that can send then
        (strict priority).  A queue that can send at the smallest t has exactly that t, so one pass
        over the queues, highest priority first, keeping the first strict minimum, finds both; and
        since no t is below the busy time, the first queue whose t is the busy time ends the pass."""
        busy = self.ports[port].busy_until_ns
        best_t = None
        best_p = 0
        for prio, q in self._port_queues[port]:
            f = q.fifo
            if f:
                t = f[0][1]
                if q.next_ok_ns > t:
                    t = q.next_ok_ns
                if busy >= t:
                    best_t = busy
                    best_p = prio
                    break
                if best_t is None or t < best_t:
                    best_t = t
                    best_p = prio
        if best_t is None:
            return None
        return best_t, best_p

    def next_departure(self) -> tuple[int, int, int] | None:
        """(time, port, prio) of the next dequeue, or None when all queues are empty.  Ties in
        time go to the lowest port number."""
        if not self.backlog:
            return None
        ready = self._ready
        dirty = self._dirty
        if dirty:
            for port in dirty:
                r = self._port_ready(port)
                if r is None:
                    ready.pop(port, None)
                else:
                    ready[port] = r
            dirty.clear()
        best = None
        bp = 0
        for port, r in ready.items():
            if best is None or r[0] < best[0] or (r[0] == best[0] and port < bp):
                best, bp = r, port
        return best[0], bp, best[1]

    def drain(self, until_ns: int | None, now_ns: int, egress) -> int:
        """Dequeue, in order, every packet that departs by ``until_ns`` (None: until all queues are
        empty), calling ``egress(port, prio, entry, depth_left, time)`` for each; returns the clock
        after the last one (``now_ns`` if none departed).

        Exactly the loop ``t, port, prio = next_departure(); now = max(now, t);
        egress(port, prio, *dequeue_raw(port, prio, now), now)`` with those methods' bodies inlined,
        plus three shortcuts.  A dequeue changes only its own port's readiness, so when that port
        can send again at the same time t it stays the earliest (every other port was later, or
        equal with a higher port number) and the scan over the ports is skipped.  With no shaping,
        when t is the clock itself (``now``): the port's busy time stays ``now``, every
        higher-priority queue of the port was due strictly after t (else it would have been
        chosen), so while the chosen queue's head is due by ``now`` (and its old rate limit, if any,
        has passed) the same queue is chosen again -- those packets are taken in a tight loop.  And
        a single queued packet, unshaped, is sent by the loop unrolled for that case.
        tests/switch/test_tm.py and tests/switch/test_fastpath.py compare drain with the
        step-by-step loop, and next_departure with a naive definition, on random queue
        configurations.  ``egress`` may call :meth:`drop`; it must not enqueue or reconfigure."""
        if not self.backlog:
            return now_ns
        ready = self._ready
        dirty = self._dirty
        if self.backlog == 1 and not ready and len(dirty) == 1 and not self.shaped:
            # one packet, in a queue of the one dirty port (how the switch daemon drives the target:
            # every inject first drains the packet before it): the loop below, unrolled
            for port in dirty:
                for prio, q in self._port_queues[port]:
                    fifo = q.fifo
                    if fifo:
                        p = self.ports[port]
                        e = fifo[0]
                        t = e[1]
                        if q.next_ok_ns > t:
                            t = q.next_ok_ns
                        if p.busy_until_ns > t:
                            t = p.busy_until_ns
                        if until_ns is not None and t > until_ns:
                            return now_ns
                        if t > now_ns:
                            now_ns = t
                        fifo.popleft()
                        q.deq_packets += 1
                        self.backlog = 0
                        p.busy_until_ns = now_ns
                        egress(port, prio, e, 0, now_ns)
                        dirty.clear()
                        return now_ns
        ports = self.ports
        pq = self._port_queues
        queues = self.queues
        shaped = self.shaped
        nxt = None                  # priority to send from bp next, when the shortcut applies
        t = bp = 0
        while True:
            if nxt is None:
                if dirty:
                    for port in dirty:                    # _port_ready(port), inlined
                        busy = ports[port].busy_until_ns
                        best_t = None
                        best_p = 0
                        for prio, q in pq[port]:
                            f = q.fifo
                            if f:
                                qt = f[0][1]
                                if q.next_ok_ns > qt:
                                    qt = q.next_ok_ns
                                if busy >= qt:
                                    best_t = busy
                                    best_p = prio
                                    break
                                if best_t is None or qt < best_t:
                                    best_t = qt
                                    best_p = prio
                        if best_t is None:
                            ready.pop(port, None)
                        else:
                            ready[port] = (best_t, best_p)
                    dirty.clear()
                if len(ready) == 1:
                    (bp, best), = ready.items()
                else:
                    best = None
                    for port, r in ready.items():         # next_departure: earliest, then lowest port
                        if best is None or r[0] < best[0] or (r[0] == best[0] and port < bp):
                            best, bp = r, port
                t = best[0]
                if until_ns is not None and t > until_ns:
                    break
                if t > now_ns:
                    now_ns = t
                prio = best[1]
            else:
                prio = nxt
            q = queues[(bp, prio)]                        # dequeue_raw, inlined
            fifo = q.fifo
            popleft = fifo.popleft
            e = popleft()
            q.deq_packets += 1
            self.backlog -= 1
            dirty.add(bp)                                 # until recomputed below (egress may raise)
            p = ports[bp]
            if shaped:
                if q.rate_pps > 0:
                    q.next_ok_ns = now_ns + int(round(1e9 / q.rate_pps))
                tx = int(round(e[3] * 8 * 1e9 / p.rate_bps)) if p.rate_bps > 0 else 0
                p.busy_until_ns = now_ns + tx
            else:
                p.busy_until_ns = now_ns
            egress(bp, prio, e, len(fifo), now_ns)
            if fifo and t == now_ns and not shaped and q.next_ok_ns <= now_ns:
                # a run from this queue: the rest of the loop would pick it again and again while
                # its head is already due (see the docstring), so take those packets in a tight loop
                k = 0
                try:
                    while fifo and fifo[0][1] <= now_ns:
                        e = popleft()
                        k += 1
                        egress(bp, prio, e, len(fifo), now_ns)
                finally:
                    q.deq_packets += k
                    self.backlog -= k
            if not self.backlog:                          # all sent: no port is ready
                ready.clear()
                dirty.clear()
                break
            dirty.discard(bp)
            busy = p.busy_until_ns                        # _port_ready(bp), inlined
            best_t = None
            best_p = 0
            for prio, q in pq[bp]:
                f = q.fifo
                if f:
                    qt = f[0][1]
                    if q.next_ok_ns > qt:
                        qt = q.next_ok_ns
                    if busy >= qt:
                        best_t = busy
                        best_p = prio
                        break
                    if best_t is None or qt < best_t:
                        best_t = qt
                        best_p = prio
            if best_t is None:
                ready.pop(bp, None)
                nxt = None
            else:
                ready[bp] = (best_t, best_p)
                nxt = best_p if best_t == t and not dirty else None
        return now_ns

    def dequeue(self, port: int, prio: int, now_ns: int) -> tuple[Queued, int]:
        e, depth = self.dequeue_raw(port, prio, now_ns)
        return Queued(*e), depth

    def dequeue_raw(self, port: int, prio: int, now_ns: int) -> tuple[tuple, int]:
        """:meth:`dequeue` returning the raw tuple ``(item, enq_ns, enq_depth, size)``."""
        q = self.queues[(port, prio)]
        fifo = q.fifo
        e = fifo.popleft()
        q.deq_packets += 1
        self.backlog -= 1
        self._dirty.add(port)
        p = self.ports[port]
        if self.shaped:
            if q.rate_pps > 0:
                q.next_ok_ns = now_ns + int(round(1e9 / q.rate_pps))
            tx = int(round(e[3] * 8 * 1e9 / p.rate_bps)) if p.rate_bps > 0 else 0
            p.busy_until_ns = now_ns + tx
        else:
            p.busy_until_ns = now_ns
        return e, len(fifo)

    def link(self, port: int) -> Port:
        return self.port(port)
