"""SparDL on the gradient's device: selection and arithmetic stay there, only the sparse pieces cross to the wire.

A SparDL program keeps every gradient-sized buffer (live buffer, residual, result) and every selection on the
device of the tensor it reduces: block selection is ``torch.topk`` there, received pieces are added there. The
wire (:mod:`host.sparse_wire`, the process group's ``isend``/``irecv`` or the DLCP transport) is host memory, so
what crosses is exactly the selected indices and values of each message, a few ``k`` entries:

* :func:`to_host` before encoding a message: one :class:`host.staging.Staged` operation reads the message's
  device tensors into pinned host stand-ins, after the kernels the current stream has queued, and the host waits
  for those copies only.
* :func:`to_device` after decoding one: the decoded host tensors go into pinned stand-ins of new device tensors,
  copied on the staging side stream, and the current stream waits for them (the host does not).

Host tensors pass through both unchanged (no copies: a CPU run does exactly what it did before devices).

:class:`DeviceJob` orders SparDL's background jobs (the DDP hook's, the DeAR compressor's, which run on worker
threads) with the thread that submitted them: the job runs on SparDL's own stream of the device, after the work
the submitting thread's current stream had queued, and a consumer's current stream waits for the job's work
before using its results. This is what makes the DDP hook's future (CUDA-aware, completed on that stream) safe
for DDP's reducer and ``then`` callbacks.

Only host memory and CUDA are supported (:func:`host.staging.operation_device` refuses anything else by name).
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator, Sequence

import torch

from host.staging import DeviceStreams, Staged, operation_device

__all__ = ["device_of", "streams_for", "to_host", "to_device", "DeviceJob"]

_STREAMS: dict[torch.device, DeviceStreams] = {}
_LOCK = threading.Lock()
_WIRE = "spardl-wire"  # the side stream of the staging copies
_COMPUTE = "spardl"  # the stream background jobs run on


def device_of(t: torch.Tensor, what: str) -> torch.device:
    """The device of a tensor SparDL reduces; a device it cannot stage through the host is refused naming it."""
    device = operation_device([t], what)
    assert device is not None
    return device


def streams_for(device: torch.device) -> DeviceStreams:
    """SparDL's streams on ``device`` (one set per device and process, shared by every SparDL user in it)."""
    with _LOCK:
        s = _STREAMS.get(device)
        if s is None:
            s = _STREAMS[device] = DeviceStreams(device)
        return s


def _staging(device: torch.device) -> DeviceStreams | None:
    """The streams to stage ``device``'s tensors through; None for host tensors, which need no staging."""
    return None if device.type == "cpu" else streams_for(device)


def to_host(tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Host copies of device tensors (all on one device) for the wire; host tensors are returned as they are."""
    streams = _staging(tensors[0].device) if tensors else None
    if streams is None:
        return list(tensors)
    moving = [t for t in tensors if t.numel()]  # empty ones have nothing to copy
    st = Staged(streams, reads=moving, writes=(), kind=_WIRE)
    st.copy_in()
    return [st.host(t) if t.numel() else torch.empty(t.shape, dtype=t.dtype, device="cpu") for t in tensors]


def to_device(tensors: Sequence[torch.Tensor], device: torch.device) -> list[torch.Tensor]:
    """New tensors on ``device`` holding the host tensors ``tensors`` (decoded from the wire), ready for the
    kernels the current stream queues next; for a host ``device`` the tensors themselves."""
    streams = _staging(device)
    if streams is None:
        return list(tensors)
    outs = [torch.empty(t.shape, dtype=t.dtype, device=device) for t in tensors]
    moving = [(t, o) for t, o in zip(tensors, outs) if t.numel()]  # empty ones have nothing to copy
    st = Staged(streams, reads=(), writes=[o for _, o in moving], kind=_WIRE)
    for t, o in moving:
        st.host(o).copy_(t)
    st.copy_out()
    st.wait_on_current()
    return outs


def _tensors(value: Any) -> list[torch.Tensor]:
    """The tensors in a job's result: a tensor, or (nested) lists, tuples and dict values of them."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return []


class DeviceJob:
    """One background job's place in ``device``'s stream order. Made on the submitting thread (it records the
    point the job must follow); :meth:`running` wraps the job on the worker; :meth:`wait_on_current` orders a
    consumer after it. On the host all three are no-ops."""

    def __init__(self, device: torch.device):
        self.device = device
        self.cuda = device.type == "cuda"
        self._issued = self._done = None
        if self.cuda:
            self._issued = torch.cuda.Event()
            self._issued.record(torch.cuda.current_stream(device))

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """The job's body: SparDL's stream of the device is current (a CUDA-aware future completed inside is
        ordered after everything the job queued) and waits for the submitter's queued work first."""
        if not self.cuda:
            yield
            return
        stream = streams_for(self.device).stream(_COMPUTE)
        with torch.cuda.device(self.device), torch.cuda.stream(stream):
            stream.wait_event(self._issued)
            try:
                yield
            finally:
                self._done = torch.cuda.Event()
                self._done.record(stream)

    def future(self) -> torch.futures.Future:
        """A future for the job's device results: CUDA-aware on a GPU (complete it inside :meth:`running`)."""
        return torch.futures.Future(devices=[self.device]) if self.cuda else torch.futures.Future()

    def wait_on_current(self, value: Any = None) -> Any:
        """After the job finished (on the host): the caller's current stream waits for the job's device work, and
        the device tensors in ``value`` (a tensor, or lists, tuples, dicts of them) are marked used by it, so
        the caching allocator does not hand their memory to SparDL's stream while the caller still reads them.
        Returns ``value``."""
        if self._done is not None:
            current = torch.cuda.current_stream(self.device)
            current.wait_event(self._done)
            for t in _tensors(value):
                if t.device == self.device:
                    t.record_stream(current)
        return value
