"""Busy processes beside the tests: the suite must pass on a loaded machine, not only on an idle one.

``pytest --cpu-load N`` (``make test-loaded``) starts N busy processes per CPU core this process may run on, at
the tests' own priority, before the first test and ends them after the last; the report header says how many ran.
A timing assumption that holds only on an idle machine (a peer answers within a second, a notice arrives before
a port is closed) then fails here rather than on a user's busy one. Each busy process dies with the pytest process
that started it (``PR_SET_PDEATHSIG``), so a killed run leaves none behind.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

__all__ = ["CpuLoad", "cores"]

# The busy loop: asks the kernel to kill it when its parent (pytest) dies, then spins. prctl(PR_SET_PDEATHSIG=1).
_SPIN = ("import ctypes, signal\n"
         "ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)\n"
         "while True:\n    pass\n")


def cores() -> int:
    """The CPU cores this process may run on (its affinity mask, not the machine's count)."""
    return len(os.sched_getaffinity(0))


class CpuLoad:
    """``per_core`` busy processes per core of :func:`cores`, started by :meth:`start`, ended by :meth:`stop`."""

    def __init__(self, per_core: int) -> None:
        if per_core < 0:
            raise ValueError(f"--cpu-load must be a count of busy processes per core (0 or more), got {per_core}")
        self.per_core = per_core
        self.procs: list[subprocess.Popen] = []

    @property
    def count(self) -> int:
        return self.per_core * cores()

    def start(self) -> None:
        for _ in range(self.count):
            self.procs.append(subprocess.Popen([sys.executable, "-c", _SPIN], stdin=subprocess.DEVNULL,
                                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

    def alive(self) -> int:
        """How many of the busy processes still run (each must, for the whole session)."""
        return sum(p.poll() is None for p in self.procs)

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
        for p in self.procs:
            p.wait()
        self.procs.clear()
