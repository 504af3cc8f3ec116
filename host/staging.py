"""Device tensors (CUDA) through the dlcp backend: staged in pinned host memory, ordered with the device's streams.

The transport moves host memory, so an operation on CUDA tensors runs on host copies of them, the way gloo's CUDA
path does (``AsyncWork`` with a stream and events per device):

1. **Issue** (the caller's thread, :class:`Staged`): an event is recorded on the caller's *current* stream, so the
   copies below start after the kernels that produced the tensors; a pinned host buffer is allocated per tensor,
   and every device tensor is marked used by the side stream (``record_stream``), so the caching allocator does not
   reuse its memory before the side stream's copies ran, even if the caller drops it.
2. **Copy in** (:meth:`Staged.copy_in`, the group's worker thread when the operation's turn comes): the side stream
   waits for that event, copies the tensors the operation reads device -> host (non-blocking, into pinned memory)
   and the host waits for those copies only (an event), not for the whole device.
3. **Copy out** (:meth:`Staged.copy_out`, when the operation has finished): the tensors it writes are copied host
   -> device on the side stream (non-blocking) and ``done`` is recorded there. The host does not wait.
4. **Wait** (:meth:`Staged.wait_on_current`, the caller's ``work.wait()``): the caller's current stream waits for
   ``done``; kernels queued after ``wait()`` see the results and the host never blocks on the device. A work's
   future is completed while the side stream is current (:meth:`Staged.completing`), so a CUDA-aware future
   records its event after the copies and its consumers (DDP's reducer, ``then`` callbacks) are ordered after them.

One side stream per (process group, device) (:class:`DeviceStreams`): the worker thread enqueues every operation's
copies on it in issue order, so an operation's copy-in follows the previous one's copy-out, and two operations
issued back to back on one tensor (``w1 = all_reduce(t, async_op=True); w2 = all_reduce(t, async_op=True)``) see
each other's results as on CPU. Point-to-point operations use a second side stream: a send is copied in on the
caller's thread when issued (the transport reads the host buffer at once), a receive copied out by whoever finishes
it.

Everything here also runs with host tensors as the "device" (no streams, no pinned memory, plain copies): the
tests stage CPU tensors through this path to check which tensors are copied in and out for every operation
(``tests/host/test_staging.py``); the stream and event calls need a GPU (``make test-cuda``).
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable, Iterator, Sequence

import torch

__all__ = ["DeviceStreams", "Staged", "map_tensors", "tensors_in", "operation_device"]


def tensors_in(obj: Any) -> list[torch.Tensor]:
    """The tensors of an argument: a tensor, or (nested) lists and tuples of them; anything else holds none."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for x in obj for t in tensors_in(x)]
    return []


def map_tensors(obj: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """``obj`` with every tensor ``t`` in it replaced by ``fn(t)``, lists and tuples rebuilt with the same nesting."""
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, list):
        return [map_tensors(x, fn) for x in obj]
    if isinstance(obj, tuple):
        return tuple(map_tensors(x, fn) for x in obj)
    return obj


def operation_device(tensors: Sequence[torch.Tensor], what: str) -> torch.device | None:
    """The one device of an operation's tensors (None when it has none). Tensors on two devices, or on a device
    type the backend cannot stage (only host memory and CUDA), are refused naming them."""
    devices = {t.device for t in tensors}
    if not devices:
        return None
    if len(devices) > 1:
        raise ValueError(f"dlcp {what}: the tensors of one operation must be on one device, got "
                         f"{', '.join(sorted(map(str, devices)))}")
    (device,) = devices
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"dlcp {what}: tensors on {device} are not supported (CPU and CUDA tensors are)")
    return device


class DeviceStreams:
    """The side streams of one process group on one device (created on first use): ``collectives`` for the
    operations the group's worker runs in issue order, ``p2p`` for point-to-point. For host memory (the tests'
    staging of CPU tensors) there are none and every copy is synchronous."""

    def __init__(self, device: torch.device):
        self.device = device
        self.cuda = device.type == "cuda"
        self._lock = threading.Lock()
        self._streams: dict[str, Any] = {}

    def stream(self, kind: str):
        """The side stream ``kind`` (None for host memory). ``torch.cuda.Stream`` takes one from the device's pool."""
        if not self.cuda:
            return None
        with self._lock:
            s = self._streams.get(kind)
            if s is None:
                s = self._streams[kind] = torch.cuda.Stream(device=self.device)
            return s


class Staged:
    """The host stand-ins of one operation's device tensors and the copies between them (see the module
    docstring). Made on the caller's thread when the operation is issued; :meth:`host` gives the stand-in the
    operation runs on."""

    def __init__(self, streams: DeviceStreams, reads: Sequence[torch.Tensor], writes: Sequence[torch.Tensor], *,
                 kind: str = "collectives"):
        self.device = streams.device
        self._cuda = streams.cuda
        self._stream = streams.stream(kind)
        self._host: dict[int, torch.Tensor] = {}  # id(device tensor) -> stand-in
        self._device: dict[int, torch.Tensor] = {}  # id(stand-in) -> device tensor
        self._keep: list[torch.Tensor] = []  # every device tensor, alive until the copies are queued
        for t in [*reads, *writes]:
            if id(t) in self._host:
                continue
            # host memory even where the user made another device the default (torch.set_default_device)
            h = torch.empty(t.shape, dtype=t.dtype, device="cpu", pin_memory=self._cuda)
            self._host[id(t)], self._device[id(h)] = h, t
            self._keep.append(t)
            if self._cuda:
                t.record_stream(self._stream)
        self._reads = list({id(t): t for t in reads}.values())
        self._writes = list({id(t): t for t in writes}.values())
        self._issued = self._done = None
        if self._cuda:
            self._issued = torch.cuda.Event()
            self._issued.record(torch.cuda.current_stream(self.device))

    # --- the stand-ins --------------------------------------------------------------------------------------
    def host(self, t: torch.Tensor) -> torch.Tensor:
        """The host stand-in of one of the operation's tensors."""
        return self._host[id(t)]

    def to_host(self, obj: Any) -> Any:
        """An argument with its tensors replaced by their stand-ins (tensors not staged stay)."""
        return map_tensors(obj, lambda t: self._host.get(id(t), t))

    def to_device(self, obj: Any) -> Any:
        """The inverse of :meth:`to_host`: stand-ins replaced by the device tensors they stand for."""
        return map_tensors(obj, lambda h: self._device.get(id(h), h))

    # --- the copies -----------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _on_side(self) -> Iterator[None]:
        if not self._cuda:
            yield
            return
        with torch.cuda.device(self.device), torch.cuda.stream(self._stream):
            yield

    def copy_in(self) -> None:
        """Copy the tensors the operation reads into their stand-ins, after the caller's kernels that were queued
        when it was issued; returns when the host copies are complete."""
        if not self._cuda:
            for t in self._reads:
                self._host[id(t)].copy_(t)
            return
        with self._on_side():
            self._stream.wait_event(self._issued)
            for t in self._reads:
                self._host[id(t)].copy_(t, non_blocking=True)
            copied = torch.cuda.Event()
            copied.record(self._stream)
        copied.synchronize()

    def copy_out(self) -> None:
        """Queue the copies of the written stand-ins back to their device tensors; ``done`` marks their end. They
        follow the caller's kernels queued before the operation was issued even without a :meth:`copy_in` (a
        receive: nothing to read, but a kernel queued before it may still write or read the tensor)."""
        with self._on_side():
            if self._cuda:
                self._stream.wait_event(self._issued)
            for t in self._writes:
                t.copy_(self._host[id(t)], non_blocking=self._cuda)
            if self._cuda:
                self._done = torch.cuda.Event()
                self._done.record(self._stream)
        self._keep = []

    def wait_on_current(self) -> None:
        """Make the caller's current stream wait for the copies out (the host does not block)."""
        if self._done is not None:
            torch.cuda.current_stream(self.device).wait_event(self._done)

    @contextlib.contextmanager
    def completing(self) -> Iterator[None]:
        """The side stream as the current one, to complete a work's future after the copies out."""
        with self._on_side():
            yield

    def future(self) -> torch.futures.Future:
        """A future for the operation's results: CUDA-aware on a GPU (its consumers synchronise with the stream
        that completes it), plain otherwise."""
        return torch.futures.Future(devices=[self.device]) if self._cuda else torch.futures.Future()
