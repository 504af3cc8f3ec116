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


@dataclass
class Queued:
    item: Any
    enq_ns: int
    enq_depth: int
    size: int


@dataclass
class Queue:
    capacity: int = 64
    rate_pps: float = 0.0
    next_ok_ns: int = 0
    fifo: deque = field(default_factory=deque)


@dataclass
class Port:
    rate_bps: float = 0.0
    delay_ns: int = 0
    loss: float = 0.0
    busy_until_ns: int = 0


class TrafficManager:
    def __init__(self, priority_queues: int = 1, capacity: int = 64, seed: int = 0):
        if priority_queues < 1 or priority_queues > 8:
            raise ValueError("priority_queues must be 1..8 (standard_metadata.priority is bit<3>)")
        self.nprio = priority_queues
        self.default_capacity = capacity
        self.queues: dict[tuple[int, int], Queue] = {}
        self.ports: dict[int, Port] = {}
        self.drops: Counter = Counter()
        self.rng = random.Random(seed)
        self.backlog = 0

    # -- configuration ---------------------------------------------------------------------------
    def queue(self, port: int, prio: int) -> Queue:
        q = self.queues.get((port, prio))
        if q is None:
            q = self.queues[(port, prio)] = Queue(self.default_capacity)
        return q

    def port(self, port: int) -> Port:
        p = self.ports.get(port)
        if p is None:
            p = self.ports[port] = Port()
        return p

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

    # -- data path -------------------------------------------------------------------------------
    def drop(self, port: int, prio: int, reason: str, n: int = 1) -> None:
        self.drops[(port, prio, reason)] += n

    def enqueue(self, port: int, prio: int, item: Any, size: int, now_ns: int) -> int | None:
        """Returns enq_qdepth, or None when dropped (counted)."""
        if not 0 <= prio < self.nprio:
            self.drop(port, prio, "priority_out_of_range")
            return None
        q = self.queue(port, prio)
        depth = len(q.fifo)
        if depth >= q.capacity:
            self.drop(port, prio, "queue_full")
            return None
        q.fifo.append(Queued(item, now_ns, depth, size))
        self.backlog += 1
        return depth

    def _port_ready(self, port: int) -> tuple[int, int] | None:
        """(earliest time the port can send, priority) or None if nothing is queued."""
        p = self.port(port)
        best_t = None
        for prio in range(self.nprio - 1, -1, -1):
            q = self.queues.get((port, prio))
            if q is None or not q.fifo:
                continue
            t = max(p.busy_until_ns, q.next_ok_ns, q.fifo[0].enq_ns)
            if best_t is None or t < best_t:
                best_t = t
        if best_t is None:
            return None
        # strict priority: at best_t, the highest priority eligible queue sends
        for prio in range(self.nprio - 1, -1, -1):
            q = self.queues.get((port, prio))
            if q is not None and q.fifo and max(q.next_ok_ns, q.fifo[0].enq_ns) <= best_t:
                return best_t, prio
        return None  # pragma: no cover

    def next_departure(self) -> tuple[int, int, int] | None:
        """(time, port, prio) of the next dequeue, or None when all queues are empty."""
        if not self.backlog:
            return None
        best = None
        for port in {k[0] for k, q in self.queues.items() if q.fifo}:
            r = self._port_ready(port)
            if r is not None and (best is None or (r[0], port) < (best[0], best[1])):
                best = (r[0], port, r[1])
        return best

    def dequeue(self, port: int, prio: int, now_ns: int) -> tuple[Queued, int]:
        q = self.queues[(port, prio)]
        e = q.fifo.popleft()
        self.backlog -= 1
        if q.rate_pps > 0:
            q.next_ok_ns = now_ns + int(round(1e9 / q.rate_pps))
        p = self.port(port)
        tx = int(round(e.size * 8 * 1e9 / p.rate_bps)) if p.rate_bps > 0 else 0
        p.busy_until_ns = now_ns + tx
        return e, len(q.fifo)

    def link(self, port: int) -> Port:
        return self.port(port)
