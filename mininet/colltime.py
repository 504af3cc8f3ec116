"""What a worker's communication did in each training step: every collective call's completion time, and the
retransmission timeouts that fired on this rank.

:class:`CollectiveTimer` wraps the ``torch.distributed`` collectives the trainers call (``all_reduce``,
``reduce_scatter_single``, ``all_gather_single``, ...), DeAR's ring reduce-scatter over Gloo and SparDL's
exchanges, in the worker process only. A call made while a step runs (:meth:`CollectiveTimer.step`) is recorded
with its operation, its size, the step it started in and its completion time: from the call until its work's
future completes (``async_op=True``), or until the call returns. Calls outside steps (DDP's start-up broadcast,
evaluations, the stop decision) are not recorded. Why from the worker: the completion time of a call is what a
step waits for, retransmission timeouts and zero-filled tails included, whatever the backend does inside.

:func:`rto_count` is how many retransmission timeouts have fired on this rank so far: the dlcp transport's
``rto_timeouts`` (``Endpoint.stats()``) plus the kernel's ``TCPTimeouts`` of the worker's network namespace (Gloo's
TCP, the rendezvous store's), read from ``/proc/net/netstat``, which is per namespace. The worker takes it before
and after every step, so a step that waited on a timeout on any rank is known (:mod:`testbed.tails`).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed as dist

__all__ = ["CollectiveTimer", "rto_count", "tcp_timeouts", "TIMED_COLLECTIVES"]

#: torch.distributed functions timed by name (the op recorded is the name).
TIMED_COLLECTIVES = ("all_reduce", "reduce_scatter_single", "all_gather_single", "reduce_scatter_tensor",
                     "all_gather_into_tensor", "reduce_scatter", "all_gather", "broadcast", "all_to_all_single")


def _nbytes(args: tuple, kwargs: dict) -> int:
    """Bytes of the call's largest tensor argument (a list of tensors counts as their sum): the whole buffer of a
    reduce-scatter (its input) or an all-gather (its output), not the shard; 0 if none."""
    sizes = [0]
    for a in list(args) + list(kwargs.values()):
        if isinstance(a, torch.Tensor):
            sizes.append(a.numel() * a.element_size())
        elif isinstance(a, (list, tuple)) and a and all(isinstance(t, torch.Tensor) for t in a):
            sizes.append(sum(t.numel() * t.element_size() for t in a))
    return max(sizes)


class CollectiveTimer:
    """Records every timed call made inside a step as ``{"op", "bytes", "step", "start", "dt"}`` (seconds, start
    from ``t0``). :meth:`install` patches the module attributes the trainers look up at call time; it must run
    before the trainer is built (SparDL's hook binds ``run_on_group`` when its module is imported, so that
    binding is patched too)."""

    def __init__(self, t0: float | None = None):
        self.t0 = time.monotonic() if t0 is None else t0
        self.calls: list[dict[str, Any]] = []
        self.current: int | None = None  # the step running, None between steps
        self._lock = threading.Lock()
        self._undo: list[tuple[Any, str, Any]] = []

    # -- recording -----------------------------------------------------------------------------------
    def _record(self, op: str, nbytes: int, step: int, start: float, end: float) -> None:
        with self._lock:
            self.calls.append({"op": op, "bytes": nbytes, "step": step, "start": start - self.t0, "dt": end - start})

    def _wrap_work(self, op: str, fn: Callable) -> Callable:
        """A collective that may return a Work (``async_op=True``): timed until its future completes."""
        def timed(*args, **kwargs):
            step = self.current
            if step is None:
                return fn(*args, **kwargs)
            start = time.monotonic()
            work = fn(*args, **kwargs)
            nbytes = _nbytes(args, kwargs)
            if work is None or not kwargs.get("async_op", False):
                self._record(op, nbytes, step, start, time.monotonic())
                return work
            work.get_future().add_done_callback(
                lambda _f: self._record(op, nbytes, step, start, time.monotonic()))
            return work
        timed.__wrapped__ = fn
        return timed

    def _wrap_sync(self, op: str, fn: Callable) -> Callable:
        """A blocking call (it returns when the exchange is done)."""
        def timed(*args, **kwargs):
            step = self.current
            if step is None:
                return fn(*args, **kwargs)
            start = time.monotonic()
            try:
                return fn(*args, **kwargs)
            finally:
                self._record(op, _nbytes(args, kwargs), step, start, time.monotonic())
        timed.__wrapped__ = fn
        return timed

    def _wrap_future(self, op: str, fn: Callable) -> Callable:
        """DeAR's ring reduce-scatter over Gloo: ``submit(flat, shard)`` returns a handle on a
        ``concurrent.futures.Future`` run by its own thread."""
        def timed(this, flat, shard):
            handle = fn(this, flat, shard)
            step = self.current
            if step is not None:
                start = time.monotonic()
                nbytes = flat.numel() * flat.element_size()
                handle._fut.add_done_callback(lambda _f: self._record(op, nbytes, step, start, time.monotonic()))
            return handle
        timed.__wrapped__ = fn
        return timed

    def _patch(self, owner: Any, name: str, wrapped: Callable) -> None:
        self._undo.append((owner, name, getattr(owner, name)))
        setattr(owner, name, wrapped)

    def install(self) -> "CollectiveTimer":
        for name in TIMED_COLLECTIVES:
            fn = getattr(dist, name, None)
            if fn is not None:
                self._patch(dist, name, self._wrap_work(name.replace("_single", "").replace("_tensor", "")
                                                        .replace("_into", ""), fn))
        from host.dear import compressor

        self._patch(compressor.RingReduceScatter, "submit",
                    self._wrap_future("reduce_scatter", compressor.RingReduceScatter.submit))
        from host.spardl import api, exchange

        run = self._wrap_sync("sparse_exchange", exchange.run_on_group)
        self._patch(exchange, "run_on_group", run)
        self._patch(api, "run_on_group", run)
        return self

    def uninstall(self) -> None:
        for owner, name, old in reversed(self._undo):
            setattr(owner, name, old)
        self._undo.clear()

    # -- steps ---------------------------------------------------------------------------------------
    def step(self, index: int | None) -> None:
        """Calls from now on belong to step ``index`` (None: between steps, not recorded)."""
        self.current = index

    def snapshot(self) -> list[dict[str, Any]]:
        """Every call recorded so far, in completion order (calls still running are not in it)."""
        with self._lock:
            return list(self.calls)


def tcp_timeouts(netstat: Path = Path("/proc/net/netstat")) -> int:
    """The kernel's ``TcpExt: TCPTimeouts`` of this process's network namespace (0 if the file lacks it)."""
    try:
        lines = netstat.read_text().splitlines()
    except OSError:
        return 0
    for head, vals in zip(lines[::2], lines[1::2]):
        if head.startswith("TcpExt:"):
            names, values = head.split()[1:], vals.split()[1:]
            if "TCPTimeouts" in names:
                return int(values[names.index("TCPTimeouts")])
    return 0


def rto_count(transport: Callable[[], dict[str, Any]] | None = None) -> int:
    """Retransmission timeouts fired on this rank so far: the dlcp transport's ``rto_timeouts`` (``transport``
    returns its stats; None: no dlcp group) plus this namespace's TCP timeouts."""
    n = tcp_timeouts()
    if transport is not None:
        n += int((transport() or {}).get("rto_timeouts", 0) or 0)
    return n
