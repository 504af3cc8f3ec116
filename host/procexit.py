"""Ending a distributed training process without Python's interpreter finalization.

Why: PyTorch's gloo backend runs C++ worker threads. After a collective's future completes, the worker thread still
holds the operation's tensors for a moment; if the main thread has already dropped its own references, the worker
thread's release is the last one and (for a tensor whose Python object was preserved) has to take the GIL. When
that happens while the interpreter is finalizing, CPython ends the thread with ``pthread_exit``; the forced unwind
crosses a ``noexcept`` frame and the process aborts: "terminate called without an active exception", SIGABRT,
after the program's work was done and reported. It is a race (about 1 run in 40 of a DTensor scenario on a loaded
2-core machine), torch's own attempt at an exit hook was abandoned (pytorch/pytorch#179291), and a job that made a
gloo group, directly or through DDP, DeviceMesh or the algorithms' side groups, can meet it.

Our own backend has no native threads, so it does not need this; but processes that also use gloo end through
:func:`exit_process` after ``destroy_process_group``: it stops thread pools and waits for the process's own
(non-daemon) Python threads exactly as a normal exit would, flushes logs and standard streams, and leaves with
``os._exit`` so the interpreter never finalizes under gloo's threads. A non-daemon thread still running after
``join_timeout`` is named on stderr and turns the exit status into 3: a normal exit would have hung on it, and
hiding that would hide a bug.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from typing import NoReturn

STILL_RUNNING = 3
"""Exit status when a non-daemon thread outlived ``join_timeout``."""


def exit_process(code: int | None = 0, *, join_timeout: float = 30.0) -> NoReturn:
    """Leave the process with ``code`` (``None`` means 0, as ``sys.exit`` does) once its non-daemon threads have
    ended, without interpreter finalization. Call it last, after the process groups were destroyed."""
    deadline = time.monotonic() + join_timeout
    _stop_executors(deadline)
    late = []
    for t in threading.enumerate():
        if t is threading.main_thread() or t.daemon:
            continue
        t.join(max(0.0, deadline - time.monotonic()))
        if t.is_alive():
            late.append(t.name)
    status = int(code or 0)
    if late:
        print(f"exit_process: non-daemon threads still running after {join_timeout:.0f}s: {late}", file=sys.stderr)
        status = status or STILL_RUNNING
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed or broken pipe: nothing more can be said on it
            pass
    os._exit(status)


def _stop_executors(deadline: float) -> None:
    """Tell ``concurrent.futures`` thread pools that the interpreter is exiting, as a normal exit does before it
    joins threads (their workers are non-daemon and leave only when told; a pool its owner never shut down, e.g.
    a DeAR not closed, would otherwise wait forever). Done in a helper thread so that a pool whose task is stuck
    cannot hold this past ``deadline``: its worker is then named by the join that follows."""
    pools = sys.modules.get("concurrent.futures.thread")
    shut = getattr(pools, "_python_exit", None)  # CPython's own exit hook for these pools (3.9 and later)
    if shut is None:
        return
    t = threading.Thread(target=shut, name="exit_process-pools", daemon=True)
    t.start()
    t.join(max(0.0, deadline - time.monotonic()))
