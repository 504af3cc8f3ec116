"""Per-phase CPU/wall time of a sparse all-reduce on one rank, for profiling (``bench/spardl.py --profile``).

The programs and drivers take an optional :class:`PhaseClock`; without one they time nothing (a shared no-op
context manager, no clock reads). Phases used:

* ``ef``: error feedback bookkeeping (the adding itself is fused into ``pass``);
* ``pass``: the one dense pass over the gradient: adding it into the residual buffer and taking the top-k
  threshold candidates (:mod:`host.spardl.select`);
* ``select``: every top-k selection from candidates (and any fallback to a full selection);
* ``pack``: encoding messages (and zeroing what was sent);
* ``exchange``: posting sends and receives and waiting for them (the driver's share);
* ``merge``: decoding received messages and adding them in (and the cross-team merge);
* ``residual``: global residual collection;
* ``output``: writing the dense result.
"""

from __future__ import annotations

import time
from collections import defaultdict
from contextlib import AbstractContextManager, nullcontext

__all__ = ["PhaseClock", "phase"]

_NULL = nullcontext()


class _Span(AbstractContextManager):
    __slots__ = ("clock", "name", "t0", "c0")

    def __init__(self, clock: "PhaseClock", name: str):
        self.clock, self.name = clock, name

    def __enter__(self) -> "_Span":
        self.t0 = time.perf_counter()
        self.c0 = time.thread_time()
        return self

    def __exit__(self, *exc) -> None:
        self.clock.cpu[self.name] += time.thread_time() - self.c0
        self.clock.totals[self.name] += time.perf_counter() - self.t0


class PhaseClock:
    """Seconds spent per phase name, summed over every span timed with it: wall time (``totals``) and the
    calling thread's CPU time (``cpu``). With more processes than cores the two differ: wall time includes
    waiting for a core (and, in ``exchange``, for peers and the network)."""

    def __init__(self) -> None:
        self.totals: defaultdict[str, float] = defaultdict(float)
        self.cpu: defaultdict[str, float] = defaultdict(float)

    def __call__(self, name: str) -> _Span:
        return _Span(self, name)

    def reset(self) -> None:
        self.totals.clear()
        self.cpu.clear()


def phase(clock: PhaseClock | None, name: str) -> AbstractContextManager:
    """A span of ``name`` on ``clock``, or a no-op if there is no clock."""
    return _NULL if clock is None else clock(name)
