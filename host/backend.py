"""The ``"dlcp"`` torch.distributed backend: a ``ProcessGroup`` whose collectives run over the DLCP transport.

Use it like any backend::

    import torch.distributed as dist
    dist.init_process_group("dlcp")          # env:// (torchrun) or init_method=..., rank=..., world_size=...

The name is registered when ``import torch`` runs (the ``torch.backends`` entry point of the dlcp distribution
calls :func:`host.torch_plugin.register`); ``import host.backend`` registers it too (both through
:mod:`host.backend_registry`, so that neither imports the other).

How it works:

* **Rendezvous** through the c10d Store: every rank binds its UDP socket first and publishes the address and port
  it got (address: ``DLCP_ADDR`` or the source address towards ``MASTER_ADDR``, on loopback ``127.0.0.<rank+1>``;
  port: ``DLCP_PORT``, or by default a free port the kernel picks on a loopback address, so any number of jobs
  share a host as gloo's do, and the well-known DLCP port 19400 on any other address, the destination port a DLCP
  switch recognises DLCP by) and its global rank; rank 0 publishes a random per-job nonce and a random 16-byte tag key (unless
  ``DLCP_TAG=0``): every packet of the job then carries a keyed tag (a MAC), and a receiver drops any packet
  whose tag is wrong, so a host that can reach the ports but not the store cannot inject data. One transport
  :class:`~host.transport.endpoint.Endpoint` per process serves every group; subgroups (``new_group``) share it,
  each with its own group tag in the 64-bit transfer ids (a million groups per job; see ``host.collectives``).
* **Registration**: the creator returns a C++ ``c10d::Backend`` (``host/dlcp_c10d.cpp``, built on first use by
  :mod:`host.backend_ext`) that forwards every operation to a :class:`DlcpBackend`; torch wraps it in its own
  ``ProcessGroup``, so group names, the dispatcher's ops, functional collectives, DeviceMesh, DTensor and FSDP2
  reach it like gloo.
* **Execution**: each group runs its collectives one at a time in issue order (every rank issues them in the
  same order, so their transfers match), on its worker thread, or on the thread that waits for one that is next
  while nothing runs (a synchronous call runs on its caller's thread: :class:`_Runner`); point-to-point sends and
  receives are posted to the transport when issued, with no thread per operation, so receives posted before their
  sends never deadlock. Every call returns a :class:`DlcpWork` at once; ``wait()`` blocks and re-raises the
  operation's error (a dead peer becomes a ``TransportError`` within the timeout).
* **CUDA tensors** (:mod:`host.staging`): every operation takes them; they are staged through pinned host
  buffers, copied on a side stream of their device that follows the caller's current stream, and ``wait()``
  makes the caller's current stream wait for the copies back (the host does not block), as gloo's CUDA path
  does. One operation's tensors are on one device.
* **Options** (:class:`DlcpOptions`, or environment variables ``DLCP_LOSS_BOUND``, ``DLCP_MTU``,
  ``DLCP_POLICY``, ``DLCP_CC``, ``DLCP_TIMEOUT``, ``DLCP_PEER_TIMEOUT``, ``DLCP_ADDR``, ``DLCP_PORT``,
  ``DLCP_JOB_ID``, ``DLCP_TAG``, ``DLCP_ACK_HOLD_MS``, ``DLCP_ACK_MIN``, ``DLCP_RX_HOLD_MS``): ``DLCP_LOSS_BOUND`` is the bound of the callers that ask for loss without naming
  one (the DDP hook, DeAR, SparDL, :func:`loss_bound_scope` with ``None``); every other call is exact whatever it
  says, and only SUM/AVG reductions of floating-point tensors may be lossy (``docs/bounded-loss.md``).
"""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import logging
import os
import random
import socket
import threading
import time
import zlib
from collections import deque
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Callable

import torch
import torch.distributed as dist

from host import elementwise, wire
from host.collectives import Collectives, EndpointLink, LossStats, Outcome, RecvReport, ReduceOp, check_loss
from host.policy import LayerMagnitudePolicy
from host.staging import DeviceStreams, Staged, operation_device, tensors_in
from host.transport.cc import CCParams, params_for_mode
from host.transport.chunking import payload_capacity
from host.transport.endpoint import Endpoint, Options, TransportError, path_mtu
from host.transport.packetio import AddressInUse, bind_exclusive

__all__ = ["DlcpOptions", "DlcpBackend", "DlcpWork", "create_dlcp_process_group", "dlcp_backend", "loss_bound_scope",
           "BACKEND_NAME", "transport_stats"]

log = logging.getLogger("host.backend")
BACKEND_NAME = "dlcp"


@dataclass
class DlcpOptions:
    """Backend options. ``from_env()`` reads the ``DLCP_*`` variables; explicit fields win over them."""

    loss_bound: float = 0.0  # default bound of calls that ask for loss (loss_bound_scope(None)); others are exact
    mtu: int | None = None  # None: the smallest path MTU towards the peers (65535 on loopback, 1500 on Ethernet)
    # the transport's priority policy (host.policy): one of POLICIES ("no-eligible": the same, no packet eligible)
    policy: str = "layer-magnitude"
    # "on": DCTCP-style window on ECN marks and on queueing delay (paths whose queues only drop); "fast": the same
    # with FAST's delay law (equal shares for flows through one queue: all-to-all traffic); "ecn": ECN marks only
    # (every switch marks: the DLCP P4 program); "off": a fixed large window (lossless fabrics).
    # True/False are accepted for "on"/"off".
    congestion_control: str | bool = "on"
    timeout: float = 60.0  # seconds an operation may take before wait() raises
    peer_timeout: float = 10.0  # seconds without feedback from a peer before its transfers fail
    addr: str | None = None  # IPv4 address to bind; None = auto
    # UDP port to bind. None: a free port the kernel picks on a loopback address (jobs on one host never collide),
    # the well-known DLCP port (wire.UDP_PORT, 19400) on any other: a DLCP switch recognises DLCP datagrams by that
    # destination port, and a job on real interfaces is there for the switches. 0: a free port on any address (for
    # networks without DLCP switches). Every rank publishes the port it got; peers read it from the store.
    port: int | None = None
    job_id: int | None = None  # None: derived from the rendezvous (MASTER_ADDR/PORT, run id)
    # a per-job key agreed at rendezvous and a keyed tag on every packet (docs/transport.md, "Keyed tag"); rank 0's
    # setting decides for the whole job. On by default: about 0.5 ms of CPU per MB moved (both ends together) and
    # no goodput lost on a 1 Gb/s link; only CPU-bound loopback runs lose goodput (bench/keyed_tag.py).
    tag: bool = True
    # Fault injection for tests and experiments: the fraction of this process's drop-eligible packets its socket
    # drops as it sends them, as a congested DLCP switch would (host.transport.faults.LossySocket); 0: none.
    drop_eligible: float = 0.0
    # the transport's holds for slow links (docs/transport.md, Packets), in milliseconds and packets: an ACK of
    # fewer than ack_min new packets waits up to ack_hold_ms; the I/O thread sleeps through arrivals for up to
    # rx_hold_ms mid-transfer; both only for a transfer whose packets come at least hold_gap_us apart (a slow link;
    # 0: at any rate). ack_hold_ms or rx_hold_ms 0: that hold off
    ack_hold_ms: float = 3.0
    ack_min: int = 4
    rx_hold_ms: float = 1.5
    hold_gap_us: float = 200.0
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_env(cls, **overrides: Any) -> "DlcpOptions":
        env = os.environ
        opts = cls()
        conv: dict[str, tuple[str, Callable[[str], Any]]] = {
            "loss_bound": ("DLCP_LOSS_BOUND", float), "mtu": ("DLCP_MTU", int), "policy": ("DLCP_POLICY", str),
            "congestion_control": ("DLCP_CC", _cc_mode),
            "timeout": ("DLCP_TIMEOUT", float), "peer_timeout": ("DLCP_PEER_TIMEOUT", float),
            "addr": ("DLCP_ADDR", str), "port": ("DLCP_PORT", int), "job_id": ("DLCP_JOB_ID", int),
            "drop_eligible": ("DLCP_DROP_ELIGIBLE", float), "tag": ("DLCP_TAG", _on_off),
            "ack_hold_ms": ("DLCP_ACK_HOLD_MS", float), "ack_min": ("DLCP_ACK_MIN", int),
            "rx_hold_ms": ("DLCP_RX_HOLD_MS", float), "hold_gap_us": ("DLCP_HOLD_GAP_US", float),
        }
        for name, (var, fn) in conv.items():
            if var in env and env[var] != "":
                try:
                    setattr(opts, name, fn(env[var]))
                except ValueError:
                    raise ValueError(f"environment variable {var}={env[var]!r} is not a valid {name}") from None
        for k, v in overrides.items():
            setattr(opts, k, v)
        if not 0.0 <= opts.loss_bound < 1.0:
            raise ValueError(f"loss bound must be in [0, 1), got {opts.loss_bound}")
        if not 0.0 <= opts.drop_eligible <= 1.0:
            raise ValueError(f"drop_eligible (DLCP_DROP_ELIGIBLE) must be in [0, 1], got {opts.drop_eligible}")
        for name, var in (("ack_hold_ms", "DLCP_ACK_HOLD_MS"), ("rx_hold_ms", "DLCP_RX_HOLD_MS")):
            if not 0.0 <= getattr(opts, name) <= 1000.0:
                raise ValueError(f"{name} ({var}) must be in [0, 1000] ms, got {getattr(opts, name)}")
        if not 0.0 <= opts.hold_gap_us <= 1e6:
            raise ValueError(f"hold_gap_us (DLCP_HOLD_GAP_US) must be in [0, 1e6] us, got {opts.hold_gap_us}")
        if not 1 <= opts.ack_min <= 64:
            raise ValueError(f"ack_min (DLCP_ACK_MIN) must be in [1, 64], got {opts.ack_min}")
        return opts


#: DlcpOptions.policy (DLCP_POLICY) -> the transport's priority policy. ``no-eligible`` is the default with the
#: host's drop-eligibility marking off (an ablation: every packet protected, even in calls that ask for loss).
POLICIES: dict[str, Callable[[], Any]] = {
    "layer-magnitude": LayerMagnitudePolicy, "default": LayerMagnitudePolicy,
    "no-eligible": lambda: LayerMagnitudePolicy(eligible=False),
}


def _on_off(v: str) -> bool:
    """A boolean environment variable: 1/true/on/yes or 0/false/off/no."""
    s = v.strip().lower()
    if s in ("1", "true", "on", "yes"):
        return True
    if s in ("0", "false", "off", "no"):
        return False
    raise ValueError(v)


_scope = threading.local()


@contextlib.contextmanager
def loss_bound_scope(loss_bound: float | None = None, layer: int | None = None, stats: LossStats | None = None):
    """The one way to ask for bounded loss: within this block, SUM/AVG all-reduces, reduce-scatters and reduces of
    floating-point tensors issued by this thread may zero-fill up to ``loss_bound`` of their elements (None: the
    process group's ``DlcpOptions.loss_bound``, i.e. ``DLCP_LOSS_BOUND``), and every call takes ``layer`` as its
    priority position. Asking for loss on another op or dtype raises ``ValueError`` at the call. Outside such a
    block every collective is exact, whatever ``DLCP_LOSS_BOUND`` says. ``stats`` (a
    :class:`~host.collectives.LossStats`) receives each reducing call's outcome. The DDP comm hook
    (``host.hooks``) and DeAR use it to tag each bucket or fusion group."""
    old = getattr(_scope, "v", None)
    _scope.v = (loss_bound, layer, stats)
    try:
        yield
    finally:
        _scope.v = old


def _scoped(default_bound: float) -> tuple[float, int, LossStats | None]:
    """(loss bound, layer, stats) of the calling thread's :func:`loss_bound_scope`: exact outside any scope."""
    v = getattr(_scope, "v", None)
    if v is None:
        return 0.0, 0, None
    return (default_bound if v[0] is None else v[0]), (v[1] or 0), v[2]


def _recorded(run: Callable[[], Outcome], stats: LossStats | None, bound: float) -> Callable[[], Outcome]:
    """``run`` that also hands its outcome to ``stats``."""
    if stats is None:
        return run

    def wrapped() -> Outcome:
        out = run()
        stats.record(out, bound > 0)
        return out
    return wrapped


# --- the process-wide transport -------------------------------------------------------------------------------

class _Process:
    """The one endpoint of this process, created by the first (default) group."""

    lock = threading.Lock()
    endpoint: Endpoint | None = None
    link: EndpointLink | None = None
    global_store: Any = None
    groups: int = 0


def _cc_params(mode: str, mtu: int) -> CCParams | None:
    """The transport's congestion-control parameters for a ``_cc_mode`` at this MTU (None: the defaults)."""
    return params_for_mode(mode, payload_capacity(mtu))


def _cc_mode(v: str | bool) -> str:
    """Normalise a congestion-control setting to "on", "fast", "ecn" or "off"."""
    if isinstance(v, bool):
        return "on" if v else "off"
    s = str(v).strip().lower()
    if s in ("0", "off", "none", "false", "no"):
        return "off"
    if s in ("1", "on", "true", "yes", "dctcp", ""):
        return "on"
    if s in ("ecn", "fast"):
        return s
    raise ValueError(f"congestion control {v!r}: expected on, fast, ecn or off")


def _dropper(o: DlcpOptions):
    """The socket wrapper of ``DlcpOptions.drop_eligible`` (None without one)."""
    if o.drop_eligible <= 0:
        return None
    from host.transport.faults import LossySocket
    return lambda sock: LossySocket(sock, loss_eligible=o.drop_eligible, loss_protected=0.0)


def _default_port(addr: str) -> int:
    """``DlcpOptions.port`` when not set: 0 (a free port) on a loopback address, the well-known port elsewhere."""
    return 0 if ipaddress.ip_address(socket.gethostbyname(addr)).is_loopback else wire.UDP_PORT


def _bind(addr: str, port: int) -> socket.socket:
    """This rank's socket, bound before the rendezvous; a taken address is an error naming the variables that fix
    it."""
    try:
        return bind_exclusive((socket.gethostbyname(addr), port))
    except AddressInUse:
        raise RuntimeError(
            f"dlcp: address {addr}:{port} is already in use (another DLCP job on this host, or another rank of this "
            f"job, has bound it). Give this job another port with DLCP_PORT (DLCP_PORT=0: a free port the kernel "
            f"picks, for networks without DLCP switches, which recognise DLCP by port {wire.UDP_PORT}) or another "
            f"address with DLCP_ADDR") from None
    except OSError as e:
        raise RuntimeError(f"dlcp: cannot bind {addr}:{port} ({e.strerror}); set DLCP_ADDR to an address of this "
                           f"host (and DLCP_PORT to a free port)") from None


def _auto_addr(rank: int) -> str:
    master = os.environ.get("MASTER_ADDR", "127.0.0.1")
    try:
        target = socket.gethostbyname(master)
    except OSError:
        target = "127.0.0.1"
    if target.startswith("127.") or target == "0.0.0.0":
        return f"127.0.0.{rank + 1}" if rank < 254 else "127.0.0.1"
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect((target, 9))  # no packet is sent: this only asks the kernel which source address it would use
        return s.getsockname()[0]
    finally:
        s.close()


# --- work objects ---------------------------------------------------------------------------------------------

class _Runner:
    """A group's collectives, run one at a time in issue order (every rank issues them in the same order, so their
    transfers match). The group's worker thread runs them; but the thread that waits for one that is next in line
    while nothing runs takes it and runs it itself (:meth:`run_now`). A synchronous call (``dist.all_reduce(t)``,
    which waits at once) then runs on its caller's thread: two thread wake-ups fewer per call (the worker's and the
    caller's), each a GIL hand-off, which beside busy processes cost more than a small call's own work
    (docs/backend.md, "Where the CPU goes"). Asynchronous calls (DDP's hooks, ``async_op=True``) are run by the
    worker, so they still overlap the caller's computation.

    torch says which is which: a call with ``async_op=False`` carries ``opts.asyncOp = False`` and torch waits
    for its work at once. Such an item is queued without waking the worker (``waited``): a woken worker nearly
    always won the race against the caller on its way back through torch's layers to ``wait()``. The worker still
    runs it if it finds it first (it was busy with earlier work), and a wait that cannot run it (a timeout given,
    device tensors) or a poll (``is_completed``, ``get_future``) wakes the worker (:meth:`kick`)."""

    def __init__(self, name: str):
        self._cv = threading.Condition()
        self._items: deque[tuple[Callable[[], Outcome | None], "DlcpWork"]] = deque()
        self._running = False  # one item is being run (by the worker or a waiter)
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def put(self, fn: Callable[[], Outcome | None], work: "DlcpWork", *, waited: bool = False) -> None:
        """Queue ``work``; ``waited``: its caller waits for it at once (the worker is not woken for it)."""
        with self._cv:
            self._items.append((fn, work))
            if not waited:
                self._cv.notify_all()

    def kick(self) -> None:
        """Wake the worker: whatever is queued runs without waiting for a caller."""
        with self._cv:
            self._cv.notify_all()

    def run_now(self, work: "DlcpWork") -> bool:
        """Run ``work`` on this thread if it is next and nothing runs; False (nothing done) otherwise."""
        with self._cv:
            if self._running or not self._items or self._items[0][1] is not work:
                return False
            fn, _ = self._items.popleft()
            self._running = True
        self._run_taken(fn, work)
        return True

    def _run_taken(self, fn: Callable[[], Outcome | None], work: "DlcpWork") -> None:
        """Run an item taken off the queue (``_running`` set), then let the next one go: the worker is woken
        only if something is queued or it is stopping (after a waiter's call it has nothing to do)."""
        try:
            _execute(fn, work)
        finally:
            with self._cv:
                self._running = False
                if self._items or self._stopping:
                    self._cv.notify_all()

    def _loop(self) -> None:
        while True:
            with self._cv:
                while self._running or not self._items:
                    if self._stopping and not self._items and not self._running:
                        return
                    self._cv.wait()
                fn, work = self._items.popleft()
                self._running = True
            self._run_taken(fn, work)

    def stop(self) -> None:
        """Run what is queued, then end the worker thread."""
        with self._cv:
            self._stopping = True
            self._cv.notify_all()
        self._thread.join()

    def drop_queued(self) -> list["DlcpWork"]:
        """Take every item not yet started off the queue (their works), and end the worker once idle."""
        with self._cv:
            works = [w for _, w in self._items]
            self._items.clear()
            self._stopping = True
            self._cv.notify_all()
        return works


def _execute(fn: Callable[[], Outcome | None], work: "DlcpWork") -> None:
    """Run one operation and complete its work with the outcome or the error."""
    try:
        if work._staging is not None:
            work._staging.copy_in()
        outcome = fn()
    except BaseException as e:  # noqa: BLE001 - handed to the caller through wait()
        log.debug("dlcp operation failed: %s", e)
        work._complete(None, e)
    else:
        work._complete(outcome if isinstance(outcome, Outcome) else None, None)


class DlcpWork:
    """Completion of one operation, seen by torch through the C++ ``DlcpWork`` of ``host/dlcp_c10d.cpp`` (which
    calls these methods). ``wait()`` blocks and re-raises the operation's error; ``lost_ranges`` lists what
    bounded loss zero-filled (see ``host.collectives.Outcome``).

    Collectives are completed by whichever thread ran them (:meth:`_complete`): the group's worker, or the waiter
    that took one that was next (:class:`_Runner`). Point-to-point operations have
    no thread: they are posted to the transport when issued and finished by whoever waits first (``finish``,
    given the timeout) or finds them ready (``ready``); only ``get_future()`` on one still pending starts a
    thread that waits for it."""

    def __init__(self, result: list[torch.Tensor], *, finish: Callable[[float | None], Outcome | None] | None = None,
                 ready: Callable[[], bool] | None = None, cancel: Callable[[], None] | None = None,
                 devices: list[str] | None = None):
        self._fut: torch.futures.Future = torch.futures.Future()
        self._result = result
        self._exc: BaseException | None = None
        self._done = threading.Event()
        self._finish, self._ready, self._cancel = finish, ready, cancel
        self._lock = threading.Lock()  # one finisher at a time
        self._waiter: threading.Thread | None = None
        self.source: int = -1  # the sender of a receive from any source
        self.lost_ranges: list[tuple[int, int]] = []  # union over the group's ranks (Outcome.lost)
        self.zero_filled = 0  # elements covered by lost_ranges
        self.elements = 0  # elements of the operation's flat buffer
        self._staging: Staged | None = None  # device tensors' host stand-ins (host.staging)
        self._devices = devices or []  # (a joint work's: its parts')
        self._runner: _Runner | None = None  # a collective's: its group's runner (wait() may run it, _Runner)

    def _stage(self, staged: Staged) -> None:
        """Run on the host stand-ins of ``staged``: the results are the device tensors, the future a device
        one. Called before the work can complete."""
        self._staging = staged
        self._result = staged.to_device(self._result)
        self._fut = staged.future()

    def devices(self) -> list[str]:
        """The non-CPU devices of the results (the C++ work's future is made for them)."""
        st = self._staging
        if st is None:
            return list(self._devices)
        return [str(st.device)] if st.device.type != "cpu" else []

    def _complete(self, outcome: Outcome | None, exc: BaseException | None) -> None:
        if self._done.is_set():
            return
        st = self._staging
        if st is not None and exc is None:
            try:  # the results back to the device (queued on its side stream)
                st.copy_out()
            except BaseException as e:  # noqa: BLE001 - handed to the caller through wait()
                exc = e
        if outcome is not None:
            self.lost_ranges = outcome.merged()
            self.zero_filled, self.elements = outcome.zero_filled, outcome.elements
        self._exc = exc
        self._done.set()
        with st.completing() if st is not None else contextlib.nullcontext():
            if exc is None:
                self._fut.set_result(self._result)
            else:
                self._fut.set_exception(exc)

    def _drive(self, timeout: float | None) -> None:
        """Run the finishing step of a work completed by its waiter (point-to-point)."""
        with self._lock:
            if self._done.is_set():
                return
            try:
                outcome = self._finish(timeout)  # type: ignore[misc]
            except BaseException as e:  # noqa: BLE001 - handed to the caller through wait()
                self._complete(None, e)
            else:
                self._complete(outcome if isinstance(outcome, Outcome) else None, None)

    def _kicked(self) -> threading.Event:
        """The completion event, after making sure the group's worker will run this work if nobody else does
        (a work queued for a caller that waits, :class:`_Runner`)."""
        if self._runner is not None and not self._done.is_set():
            self._runner.kick()
        return self._done

    def is_completed(self) -> bool:
        if not self._done.is_set() and self._finish is not None and self._ready is not None and self._ready():
            self._drive(None)
        return self._kicked().is_set()

    def is_success(self) -> bool:
        return self.is_completed() and self._exc is None

    def exception(self) -> BaseException | None:
        return self._exc

    def source_rank(self) -> int:
        return self.source

    def wait(self, timeout: float | None = None) -> bool:
        """Block until done (``timeout`` seconds at most; None: the operation's own timeout) and re-raise its
        error. Device tensors: the caller's current stream then waits for the copies back (the host does not)."""
        if self._finish is not None:
            self._drive(timeout)
        elif (timeout is None and self._runner is not None and self._staging is None and not self._done.is_set()
              and self._runner.run_now(self)):
            pass  # it was next and nothing ran: run here, not on the worker (_Runner). (With a timeout, or device
            # tensors whose copies belong to the worker's streams, it is left to the worker.)
        elif not self._kicked().wait(timeout):
            raise TransportError(f"dlcp operation not complete after {timeout}s")
        if self._exc is not None:
            raise self._exc
        if self._staging is not None:
            self._staging.wait_on_current()
        return True

    def synchronize(self) -> None:
        self.wait()

    def abort(self) -> None:
        """Fail the operation now if it has not completed (a posted receive is cancelled)."""
        if self._done.is_set():
            return
        if self._cancel is not None:
            self._cancel()
        self._complete(None, RuntimeError("dlcp operation aborted"))

    def get_future(self) -> torch.futures.Future:
        if self._finish is not None and not self._done.is_set() and self._waiter is None:
            self._waiter = threading.Thread(target=self._drive, args=(None,), daemon=True, name="dlcp-p2p-future")
            self._waiter.start()
        self._kicked()  # a collective queued for a waiting caller: whoever holds the future may be the only waiter
        return self._fut

    def result(self) -> list[torch.Tensor]:
        self.wait()
        return self._result


def _joint_work(works: list[DlcpWork]) -> DlcpWork:
    """One work for several (a coalescing block): done when all are, fails with the first failure. Its parts'
    waits, on the thread that completes it, order that thread's current streams after their copies back, so its
    future (made for their devices) completes after them too."""
    def finish(timeout: float | None) -> None:
        for w in works:
            w.wait(timeout)
    return DlcpWork([t for w in works for t in w._result], finish=finish,
                    ready=lambda: all(w.is_completed() for w in works),
                    devices=sorted({d for w in works for d in w.devices()}))


def _all_loopback(addr_map: dict[int, tuple[str, int]], ranks: list[int]) -> bool:
    """Whether every rank of ``ranks`` has a loopback address (one host: memory-speed links). Every member sees
    the same address map, so all agree."""
    try:
        return all(ipaddress.ip_address(addr_map[r][0]).is_loopback for r in ranks)
    except ValueError:  # a host name: not known to be local
        return False


# --- the process group ----------------------------------------------------------------------------------------

def _plain(tensors) -> list[torch.Tensor]:
    """The tensors without autograd (same storage): a collective writes its results in place, as gloo does,
    whether or not they require grad (DDP with ``create_graph``)."""
    out = []
    for t in tensors:
        if t.device.type != "cpu":  # (device tensors are staged by @_device_tensors before they get here)
            raise ValueError(f"dlcp: a tensor on {t.device} reached an operation that takes host tensors")
        out.append(t.detach())
    return out


def _flat_views(tensors: list[torch.Tensor]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(original without autograd, flat contiguous working tensor) pairs; copy back when they differ."""
    return [(t, t.view(-1) if t.is_contiguous() else t.contiguous().view(-1)) for t in _plain(tensors)]


def _copy_back(pairs) -> None:
    for orig, flat in pairs:
        if flat.data_ptr() != orig.data_ptr():
            elementwise.copy_into(orig, flat.view_as(orig))


@dataclass
class _Posted:
    """A receive posted to the transport for the next message of one (peer, tag) stream ahead of the recv that
    will take it (posted by a receive from any source that another sender won)."""

    handle: Any  # host.transport.endpoint.RecvHandle
    buf: torch.Tensor


def _on_device(t: torch.Tensor) -> bool:
    """Whether a tensor is staged through host memory (it is not in host memory). The tests replace this to
    stage CPU tensors too, which runs every operation's staging with plain copies instead of a GPU's."""
    return t.device.type != "cpu"


_P2P = frozenset({"send", "recv", "recv_anysource"})


def _device_tensors(reads: tuple[int, ...] = (), writes: tuple[int, ...] = ()):
    """A backend method that takes device tensors: the positional arguments ``reads`` hold the tensors the
    operation reads, ``writes`` those it writes (an in-place operation's are in both). When any of them is on a
    device, the method runs on their host stand-ins (:class:`~host.staging.Staged`) and its work copies them in
    before it runs and out when it completes; a send's are copied in at once (it is posted at once). A method
    called by another staged one (``_allgather_base`` -> ``all_gather_single``) runs as it is."""
    def wrap(method):
        name = method.__name__

        @functools.wraps(method)
        def staged(self: "DlcpBackend", *args, **kwargs):
            if getattr(self._issuing, "staged", None) is not None:
                return method(self, *args, **kwargs)
            rd = [t for i in reads if i < len(args) for t in tensors_in(args[i])]
            wr = [t for i in writes if i < len(args) for t in tensors_in(args[i])]
            st = self._stage(name, rd, wr)
            if st is None:
                return method(self, *args, **kwargs)
            if name == "send":
                st.copy_in()
            args = tuple(st.to_host(a) if i in reads or i in writes else a for i, a in enumerate(args))
            self._issuing.staged = st
            try:
                return method(self, *args, **kwargs)
            finally:
                self._issuing.staged = None
        return staged
    return wrap


class DlcpBackend:
    """The ``dlcp`` backend of one process group: what the C++ ``DlcpBackend`` (``host/dlcp_c10d.cpp``), which
    PyTorch wraps in its ProcessGroup, calls for every operation. Method names and arguments are those of
    ``torch.distributed.ProcessGroup``; each returns a :class:`DlcpWork` at once.

    Collectives run one at a time in issue order (every rank issues them in the same order, so their transfers
    match), on the group's worker thread or on a waiting caller's (:class:`_Runner`). Point-to-point operations
    are posted to the transport at once on the caller's thread (a receive is a posted buffer, not a blocked
    thread), numbered per (peer, tag) in program order."""

    def __init__(self, store, rank: int, size: int, timeout: timedelta | None = None,
                 options: DlcpOptions | None = None):
        self.options = options or DlcpOptions.from_env()
        if timeout is not None and timeout.total_seconds() > 0:
            self.options.timeout = min(self.options.timeout, timeout.total_seconds())
        self._store = store
        self._rank, self._size = rank, size
        self._closed = False
        self._global_ranks, group_tag = self._rendezvous(store, rank, size)
        self._coll = Collectives(_Process.link, self._global_ranks, self._global_ranks[rank], group_tag=group_tag,
                                 timeout=self.options.timeout,
                                 local=_all_loopback(_Process.endpoint.addr_map, self._global_ranks))
        self._endpoint = _Process.endpoint
        # a member's death (seen here or reported by another rank) fails this group's pending and later collectives
        self._endpoint.share_fate(self._global_ranks, *self._coll.collective_ids())
        self._runner = _Runner(f"dlcp-pg{group_tag}-r{rank}")
        self._group_tag = group_tag
        self._owns_endpoint = group_tag == 0
        self._seq = 0  # collectives issued (torch's sequence number for the group)
        self._coalesced: list[DlcpWork] | None = None  # works issued inside a coalescing block
        self._p2p_lock = threading.Lock()
        self._ahead: dict[tuple[int, int], deque[_Posted]] = {}  # (group peer, tag) -> receives posted ahead
        self._anysource: dict[int, DlcpWork] = {}  # tag -> the unresolved receive from any source
        self._barriers = 0  # monitored barriers run
        self._streams: dict[torch.device, DeviceStreams] = {}  # side streams per device (host.staging)
        self._streams_lock = threading.Lock()
        self._issuing = threading.local()  # .staged: the Staged of the operation the thread is issuing

    # rendezvous ---------------------------------------------------------------------------------------------
    def _rendezvous(self, store, rank: int, size: int) -> tuple[list[int], int]:
        o = self.options
        with _Process.lock:
            first = _Process.endpoint is None
        if first:
            # the default group: its ranks are the global ranks
            if o.policy not in POLICIES:
                raise ValueError(f"unknown priority policy {o.policy!r} (DLCP_POLICY; known: {', '.join(POLICIES)})")
            addr = o.addr or _auto_addr(rank)
            # bound before it is published: the port may be one the kernel picks (DlcpOptions.port)
            sock = _bind(addr, _default_port(addr) if o.port is None else o.port)
            try:
                ep = self._open_endpoint(store, rank, size, sock)
            except BaseException:
                sock.close()
                raise
            with _Process.lock:
                _Process.endpoint, _Process.link = ep, EndpointLink(ep)
                _Process.global_store = store
                _Process.groups = 1
            store.set(f"dlcp/ready/{rank}", "1")
            return list(range(size)), 0
        # a subgroup: learn the members' global ranks and agree on a group tag
        grank = dist.get_rank()
        store.set(f"dlcp/grank/{rank}", str(grank))
        if rank == 0:
            tag = int(_Process.global_store.add("dlcp/group_tags", 1))  # never reused: ids do not wrap
            if tag >= Collectives.MAX_GROUPS:
                raise RuntimeError(f"dlcp: this job has created {tag} process groups, more than the transfer ids "
                                   f"name ({Collectives.MAX_GROUPS - 1})")
            store.set("dlcp/group_tag", str(tag))
        ranks = [int(store.get(f"dlcp/grank/{r}")) for r in range(size)]
        return ranks, int(store.get("dlcp/group_tag"))

    def _open_endpoint(self, store, rank: int, size: int, sock: socket.socket) -> Endpoint:
        """Publish this rank's bound address, read everyone's, agree on the job's nonce and key, and build the
        process's endpoint on ``sock``."""
        o = self.options
        addr, port = sock.getsockname()
        store.set(f"dlcp/addr/{rank}", f"{addr}:{port}")
        if rank == 0:
            store.set("dlcp/nonce", str(random.SystemRandom().randrange(1, 1 << 16)))
            store.set("dlcp/key", os.urandom(wire.KEY_LEN).hex() if o.tag else "")  # "": an unkeyed job
        nonce = int(store.get("dlcp/nonce"))
        key = bytes.fromhex(store.get("dlcp/key").decode()) or None
        addrs = {}
        for r in range(size):
            host, peer_port = store.get(f"dlcp/addr/{r}").decode().rsplit(":", 1)
            addrs[r] = (host, int(peer_port))
        if o.mtu is None:
            o.mtu = path_mtu(addr, [h for r, (h, _) in addrs.items() if r != rank])
        job_id = o.job_id if o.job_id is not None else zlib.crc32(
            f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}:"
            f"{os.environ.get('TORCHELASTIC_RUN_ID', '')}".encode())
        cc = _cc_params(_cc_mode(o.congestion_control), o.mtu)
        return Endpoint(rank, addrs, job_id=job_id, nonce=nonce,
                        options=Options(mtu=o.mtu, policy=POLICIES[o.policy](), recv_timeout=o.timeout,
                                        peer_timeout=o.peer_timeout, cc=cc, socket_wrapper=_dropper(o),
                                        ack_hold=o.ack_hold_ms / 1000, ack_min=o.ack_min,
                                        rx_hold=o.rx_hold_ms / 1000, hold_gap=o.hold_gap_us / 1e6),
                        key=key, sock=sock)

    # execution ------------------------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("dlcp process group has been shut down")

    def _stage(self, what: str, reads: list[torch.Tensor], writes: list[torch.Tensor]) -> Staged | None:
        """The staging of an operation's tensors if they are on a device (None for host tensors)."""
        tensors = [*reads, *writes]
        device = operation_device(tensors, what)
        if device is None or not any(_on_device(t) for t in tensors):
            return None
        with self._streams_lock:
            streams = self._streams.get(device)
            if streams is None:
                streams = self._streams[device] = DeviceStreams(device)
        return Staged(streams, reads, writes, kind="p2p" if what in _P2P else "collectives")

    def _issued(self, work: DlcpWork) -> DlcpWork:
        st = getattr(self._issuing, "staged", None)
        if st is not None and work._staging is None:
            work._stage(st)
        if self._coalesced is not None:
            self._coalesced.append(work)
        return work

    def _submit(self, fn: Callable[[], Outcome | None], result: list[torch.Tensor], opts: Any = None) -> DlcpWork:
        """Queue a collective on the group's runner. ``opts``: torch's options of the call; ``asyncOp`` False (torch
        waits for the work at once: ``async_op=False``) lets the caller's ``wait()`` run it without waking the
        worker (:class:`_Runner`)."""
        self._check_open()
        work = DlcpWork(result)
        st = getattr(self._issuing, "staged", None)
        if st is not None:
            work._stage(st)  # before the worker can complete it
        self._seq += 1
        work._runner = self._runner
        self._runner.put(fn, work, waited=getattr(opts, "asyncOp", True) is False)
        return self._issued(work)

    # torch's hooks ----------------------------------------------------------------------------------------------
    def sequence_number(self) -> int:
        """Collectives issued so far (every member issues the same ones, so all agree)."""
        return self._seq

    def set_timeout(self, seconds: float) -> None:
        if seconds > 0:
            self.options.timeout = seconds
            self._coll.timeout = seconds

    def start_coalescing(self) -> None:
        """Open a coalescing block (``batch_isend_irecv``, ``_coalescing_manager(device=...)``): operations
        issue as usual and :meth:`end_coalescing` returns one work for all of them."""
        if self._coalesced is not None:
            raise RuntimeError("dlcp: a coalescing block is already open on this group")
        self._coalesced = []

    def end_coalescing(self) -> DlcpWork:
        if self._coalesced is None:
            raise RuntimeError("dlcp: end_coalescing without start_coalescing")
        works, self._coalesced = self._coalesced, None
        return _joint_work(works)

    # collectives ----------------------------------------------------------------------------------------------
    @_device_tensors(reads=(0,), writes=(0,))
    def allreduce(self, tensors, opts=None):
        op = ReduceOp.from_torch(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)
        bound, layer, stats = _scoped(self.options.loss_bound)
        for t in tensors:
            check_loss(op, t, bound)
        pairs = _flat_views(list(tensors))

        def run():
            out = Outcome()
            for _, flat in pairs:
                out.extend(self._coll.allreduce(flat, op, layer=layer, loss_bound=bound))
            _copy_back(pairs)
            return out
        return self._submit(_recorded(run, stats, bound), list(tensors), opts=opts)

    @_device_tensors(reads=(0,), writes=(0,))
    def allreduce_coalesced(self, tensors, opts=None):
        op = ReduceOp.from_torch(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)
        result = list(tensors)
        tensors = _plain(result)
        bound, layer, stats = _scoped(self.options.loss_bound)
        if len({t.dtype for t in tensors}) > 1:
            raise ValueError("allreduce_coalesced needs tensors of one dtype")
        for t in tensors:
            check_loss(op, t, bound)

        def run():
            flat = torch.empty(sum(t.numel() for t in tensors), dtype=tensors[0].dtype if tensors else torch.float32)
            pos = 0
            for t in tensors:
                elementwise.copy_into(flat[pos:pos + t.numel()], t.reshape(-1))
                pos += t.numel()
            out = self._coll.allreduce(flat, op, layer=layer, loss_bound=bound)
            pos = 0
            for t in tensors:
                elementwise.copy_into(t, flat[pos:pos + t.numel()].view_as(t))
                pos += t.numel()
            return out
        return self._submit(_recorded(run, stats, bound), result, opts=opts)

    @_device_tensors(reads=(1,), writes=(0,))
    def allgather(self, output_tensors, input_tensors, opts=None):
        if len(input_tensors) != 1:
            raise ValueError("dlcp allgather takes one input tensor per process")
        result = list(output_tensors[0])
        outs, (inp,) = _plain(result), _plain(input_tensors)
        _, layer, _ = _scoped(0.0)
        return self._submit(lambda: self._coll.all_gather(outs, inp, layer=layer), [result], opts=opts)

    @_device_tensors(reads=(1,), writes=(0,))
    def allgather_coalesced(self, output_lists, input_tensors, opts=None):
        """``all_gather_coalesced``: ``output_lists[r][i]`` receives rank ``r``'s ``input_tensors[i]``; one
        all-gather per input, run back to back as one operation."""
        ins = _plain(input_tensors)
        if len(output_lists) != self._size or any(len(o) != len(ins) for o in output_lists):
            raise ValueError(f"allgather_coalesced: expected {self._size} output lists (one per rank) of "
                             f"{len(ins)} tensors (one per input), got {[len(o) for o in output_lists]}")
        outs = [_plain(output_lists[r][i] for r in range(self._size)) for i in range(len(ins))]
        _, layer, _ = _scoped(0.0)

        def run():
            for o, i in zip(outs, ins):
                self._coll.all_gather(o, i, layer=layer)
        return self._submit(run, [t for o in output_lists for t in o], opts=opts)

    @_device_tensors(reads=(1,), writes=(0,))
    def _allgather_base(self, output, input, opts=None):
        return self.all_gather_single(output, input, opts)

    def _gather_into(self, output: torch.Tensor, input: torch.Tensor) -> Callable[[], Outcome]:
        """The body of ``all_gather_into_tensor``: checked now, run later."""
        if output.numel() != input.numel() * self._size:
            raise ValueError(f"all_gather_into_tensor: output has {output.numel()} elements, expected "
                             f"{input.numel()} x {self._size}")
        pairs = _flat_views([output])
        (input,) = _plain([input])
        _, layer, _ = _scoped(0.0)  # priority from the caller's scope; never a loss bound for gathers

        def run():
            flat = pairs[0][1]
            n = input.numel()
            out = self._coll.all_gather([flat[i * n:(i + 1) * n] for i in range(self._size)], input.reshape(-1),
                                        layer=layer)
            _copy_back(pairs)
            return out
        return run

    @_device_tensors(reads=(1,), writes=(0,))
    def all_gather_single(self, output, input, opts=None):
        return self._submit(self._gather_into(output, input), [output], opts=opts)

    @_device_tensors(reads=(1,), writes=(0,))
    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        runs = [self._gather_into(o, i) for o, i in zip(outputs, inputs, strict=True)]

        def run():
            for r in runs:
                r()
        return self._submit(run, list(outputs), opts=opts)

    @_device_tensors(reads=(1,), writes=(0,))
    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        op = ReduceOp.from_torch(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)
        if len(output_tensors) != 1:
            raise ValueError("dlcp reduce_scatter takes one output tensor per process")
        (out_t,), ins = _plain(output_tensors), _plain(input_tensors[0])
        bound, layer, stats = _scoped(self.options.loss_bound)
        check_loss(op, out_t, bound)
        return self._submit(_recorded(lambda: self._coll.reduce_scatter(out_t, ins, op, layer=layer, loss_bound=bound),
                                      stats, bound), [output_tensors[0]], opts=opts)

    @_device_tensors(reads=(1,), writes=(0,))
    def _reduce_scatter_base(self, output, input, opts=None):
        return self.reduce_scatter_single(output, input, opts)

    def _scatter_reduce_into(self, output: torch.Tensor, input: torch.Tensor, opts) -> Callable[[], Outcome]:
        """The body of ``reduce_scatter_tensor``: checked now, run later."""
        op = ReduceOp.from_torch(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)
        if input.numel() != output.numel() * self._size:
            raise ValueError(f"reduce_scatter_tensor: input has {input.numel()} elements, expected "
                             f"{output.numel()} x {self._size}")
        output, input = _plain([output, input])
        bound, layer, stats = _scoped(self.options.loss_bound)
        check_loss(op, output, bound)

        def run():
            n = output.numel()
            flat = input.reshape(-1)
            return self._coll.reduce_scatter(output, [flat[i * n:(i + 1) * n] for i in range(self._size)], op,
                                             layer=layer, loss_bound=bound)
        return _recorded(run, stats, bound)

    @_device_tensors(reads=(1,), writes=(0,))
    def reduce_scatter_single(self, output, input, opts=None):
        return self._submit(self._scatter_reduce_into(output, input, opts), [output], opts=opts)

    @_device_tensors(reads=(1,), writes=(0,))
    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        runs = [self._scatter_reduce_into(o, i, opts) for o, i in zip(outputs, inputs, strict=True)]

        def run():
            out = Outcome()  # the outputs' inputs end to end
            for r in runs:
                out.extend(r())
            return out
        return self._submit(run, list(outputs), opts=opts)

    @_device_tensors(reads=(0,), writes=(0,))
    def broadcast(self, tensors, opts=None):
        root = opts.rootRank if opts is not None else 0
        pairs = _flat_views(list(tensors))

        def run():
            for _, flat in pairs:
                self._coll.broadcast(flat, root)
            _copy_back(pairs)
            return Outcome()
        return self._submit(run, list(tensors), opts=opts)

    @_device_tensors(reads=(0,), writes=(0,))
    def reduce(self, tensors, opts=None):
        root = opts.rootRank if opts is not None else 0
        op = ReduceOp.from_torch(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)
        bound, layer, stats = _scoped(self.options.loss_bound)
        for t in tensors:
            check_loss(op, t, bound)
        pairs = _flat_views(list(tensors))

        def run():
            out = Outcome()
            for _, flat in pairs:
                out.extend(self._coll.reduce(flat, root, op, layer=layer, loss_bound=bound))
            _copy_back(pairs)
            return out
        return self._submit(_recorded(run, stats, bound), list(tensors), opts=opts)

    @_device_tensors(reads=(1,), writes=(0,))
    def gather(self, output_tensors, input_tensors, opts=None):
        root = opts.rootRank if opts is not None else 0
        result = list(output_tensors[0]) if self._rank == root else None
        outs = _plain(result) if result is not None else None
        (inp,) = _plain(input_tensors)
        return self._submit(lambda: self._coll.gather(outs, inp, root), [result] if result is not None else [],
                            opts=opts)

    @_device_tensors(reads=(1,), writes=(0,))
    def scatter(self, output_tensors, input_tensors, opts=None):
        root = opts.rootRank if opts is not None else 0
        (out_t,) = _plain(output_tensors)
        ins = _plain(input_tensors[0]) if self._rank == root else None
        return self._submit(lambda: self._coll.scatter(out_t, ins, root), [output_tensors[0]], opts=opts)

    def barrier(self, opts=None):
        return self._submit(self._coll.barrier, [], opts=opts)

    def monitored_barrier(self, opts=None, wait_all_ranks: bool = False) -> None:
        """A barrier that names the ranks that did not reach it within the timeout (``opts.timeout``, else the
        group's): group rank 0 waits for every other rank's arrival in the group's store and raises
        ``RuntimeError("Rank 2 failed to pass monitoredBarrier in 1000 ms")`` (every missing rank with
        ``wait_all_ranks``, as gloo's); the others wait (up to twice the timeout) for rank 0's verdict and raise
        it too. Runs on the caller's thread, beside the queued collectives."""
        self._check_open()
        t = getattr(opts, "timeout", None)
        secs = t.total_seconds() if isinstance(t, timedelta) and t.total_seconds() > 0 else self.options.timeout
        key = f"dlcp/monitored_barrier/{self._barriers}"
        self._barriers += 1
        if self._rank != 0:
            self._store.set(f"{key}/{self._rank}", "1")
            try:  # rank 0 may take the whole timeout to find a late rank: its verdict can take twice that
                self._store.wait([f"{key}/done"], timedelta(seconds=2 * secs))
            except Exception:  # noqa: BLE001 - the store's timeout, said in the barrier's terms
                raise RuntimeError(f"Rank 0 failed to pass monitoredBarrier in {int(2 * secs * 1000)} ms") from None
            verdict = self._store.get(f"{key}/done").decode()
            if verdict != "ok":
                raise RuntimeError(verdict)
            return
        deadline = time.monotonic() + secs
        missing = list(range(1, self._size))
        while True:
            missing = [r for r in missing if not self._store.check([f"{key}/{r}"])]
            if not missing or time.monotonic() >= deadline:
                break
            time.sleep(0.01)
        if not missing:
            self._store.set(f"{key}/done", "ok")
            return
        shown = missing if wait_all_ranks else missing[:1]
        who = f"Ranks {', '.join(map(str, shown))}" if len(shown) > 1 else f"Rank {shown[0]}"
        verdict = f"{who} failed to pass monitoredBarrier in {int(secs * 1000)} ms"
        self._store.set(f"{key}/done", verdict)
        raise RuntimeError(verdict)

    @_device_tensors(reads=(1,), writes=(0,))
    def alltoall(self, output_tensors, input_tensors, opts=None):
        outs, ins = _plain(output_tensors), _plain(input_tensors)
        return self._submit(lambda: self._coll.all_to_all(outs, ins), list(output_tensors), opts=opts)

    @_device_tensors(reads=(1,), writes=(0,))
    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        return self.all_to_all_single(output, input, output_split_sizes, input_split_sizes, opts)

    @_device_tensors(reads=(1,), writes=(0,))
    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        P = self._size
        out_splits = list(output_split_sizes) or [output.shape[0] // P] * P
        in_splits = list(input_split_sizes) or [input.shape[0] // P] * P
        if sum(out_splits) != output.shape[0] or sum(in_splits) != input.shape[0]:
            raise ValueError("all_to_all_single: split sizes do not add up to the tensors' first dimension")
        pairs = _flat_views([output])
        result = [output]
        output, input = pairs[0][0], _plain([input])[0]

        def run():
            row_out = output[0].numel() if output.dim() and output.shape[0] else 1
            row_in = input[0].numel() if input.dim() and input.shape[0] else 1
            flat_out, flat_in = pairs[0][1], input.reshape(-1)
            outs, ins, po, pi = [], [], 0, 0
            for so, si in zip(out_splits, in_splits):
                outs.append(flat_out[po:po + so * row_out])
                ins.append(flat_in[pi:pi + si * row_in])
                po += so * row_out
                pi += si * row_in
            res = self._coll.all_to_all(outs, ins)
            _copy_back(pairs)
            return res
        return self._submit(run, result, opts=opts)

    # point to point ---------------------------------------------------------------------------------------------
    def _check_peer(self, peer: int, what: str) -> None:
        if not 0 <= peer < self._size or peer == self._rank:
            raise ValueError(f"dlcp {what}: peer rank {peer} is not another member of this group of "
                             f"{self._size} (this rank is {self._rank})")

    @_device_tensors(reads=(0,))
    def send(self, tensors, dstRank, tag):  # noqa: N803 - torch's names
        """Posted to the transport now; the work completes when the receiver has it all."""
        self._check_open()
        self._check_peer(dstRank, "send")
        t = tensors[0]
        flat = _flat_views([t])[0][1]
        tid = self._coll._p2p_tid(dstRank, tag, "send")  # numbered in program order, on the caller's thread
        h = self._coll.link.isend(self._global_ranks[dstRank], flat, tid)
        return self._issued(DlcpWork([t], finish=lambda timeout: h.wait(timeout or self.options.timeout) and None,
                                     ready=h.done))

    def _post(self, src: int, tag: int, buf: torch.Tensor):
        """Post the receive of the next message of (src, tag) into the flat tensor ``buf``."""
        tid = self._coll._p2p_tid(src, tag, "recv")
        return self._endpoint.post_recv(self._global_ranks[src], tid, buf, timeout=self.options.timeout)

    def _settle_anysource(self, tag: int) -> None:
        """Wait for an earlier receive from any source on ``tag`` to pick its sender: until it has, which posted
        receive a new one on that tag may take is not known."""
        w = self._anysource.get(tag)
        if w is not None:
            try:
                w.wait()
            except Exception:  # noqa: BLE001 - its own waiter sees the error; this one only needed it settled
                pass

    @_device_tensors(writes=(0,))
    def recv(self, tensors, srcRank, tag):  # noqa: N803
        """Posted to the transport now (or taken over from a receive a recv from any source posted ahead); no
        thread waits for it."""
        self._check_open()
        self._check_peer(srcRank, "recv")
        t = tensors[0]
        pairs = _flat_views([t])
        self._settle_anysource(tag)
        with self._p2p_lock:
            ahead = self._ahead.get((srcRank, tag))
            posted = ahead.popleft() if ahead else None
        if posted is not None:
            if posted.buf.numel() != t.numel() or posted.buf.dtype != t.dtype:
                raise ValueError(f"dlcp recv from rank {srcRank} tag {tag}: a receive from any source posted "
                                 f"this message's receive for {posted.buf.numel()} x {posted.buf.dtype}, this recv "
                                 f"wants {t.numel()} x {t.dtype}")
            h, buf = posted.handle, posted.buf
        else:
            buf = pairs[0][1]
            h = self._post(srcRank, tag, buf)

        def finish(timeout: float | None) -> Outcome:
            out = Outcome()
            res = h.wait(timeout)
            out.add(0, RecvReport(lost=list(res.report.lost_ranges)))
            if buf.data_ptr() != pairs[0][1].data_ptr():
                elementwise.copy_into(pairs[0][1], buf)
            _copy_back(pairs)
            return out
        work = DlcpWork([t], finish=finish, ready=h.done, cancel=h.cancel)
        work.source = srcRank
        return self._issued(work)

    @_device_tensors(writes=(0,))
    def recv_anysource(self, tensors, tag):
        """Receive the next message on ``tag`` from whichever member sends first: a receive for the next message
        of every other member is posted (or one posted earlier reused); the first to complete is taken and its
        sender becomes ``source_rank()``, the others stay posted for the recvs that come next from those members.
        An earlier receive from any source on the same tag is settled first."""
        self._check_open()
        t = tensors[0]
        pairs = _flat_views([t])
        self._settle_anysource(tag)
        cands: dict[int, _Posted] = {}
        with self._p2p_lock:
            for peer in range(self._size):
                if peer == self._rank:
                    continue
                ahead = self._ahead.setdefault((peer, tag), deque())
                if not ahead:
                    buf = torch.empty(t.numel(), dtype=t.dtype)
                    ahead.append(_Posted(self._post(peer, tag, buf), buf))
                cands[peer] = ahead[0]
        deadline = time.monotonic() + self.options.timeout

        def finish(timeout: float | None) -> Outcome:
            end = deadline if timeout is None else min(deadline, time.monotonic() + timeout)
            pause = 0.0002
            while True:  # the transport signals each receive on its own; poll the heads, backing off to 5 ms
                done = [p for p, c in cands.items() if c.handle.done()]
                if done:
                    break
                if time.monotonic() >= end:
                    raise TransportError(f"recv from any source on tag {tag}: nothing from ranks "
                                         f"{sorted(cands)} within {self.options.timeout}s")
                time.sleep(pause)
                pause = min(pause * 2, 0.005)
            src = done[0]
            with self._p2p_lock:
                self._ahead[(src, tag)].popleft()
            res = cands[src].handle.wait()
            if cands[src].buf.numel() != t.numel() or cands[src].buf.dtype != t.dtype:
                raise ValueError(f"recv from any source on tag {tag}: rank {src}'s message was received for "
                                 f"{cands[src].buf.numel()} x {cands[src].buf.dtype}, this recv wants "
                                 f"{t.numel()} x {t.dtype}")
            elementwise.copy_into(pairs[0][1], cands[src].buf)
            _copy_back(pairs)
            work.source = src
            out = Outcome()
            out.add(0, RecvReport(lost=list(res.report.lost_ranges)))
            return out
        work = DlcpWork([t], finish=finish, ready=lambda: any(c.handle.done() for c in cands.values()))
        self._anysource[tag] = work
        return self._issued(work)

    # life cycle -------------------------------------------------------------------------------------------------
    def _cancel_ahead(self) -> None:
        with self._p2p_lock:
            posted = [p for q in self._ahead.values() for p in q]
            self._ahead.clear()
        for p in posted:
            p.handle.cancel()

    def _close_endpoint(self, abort: str | None = None) -> None:
        """The default group closes the process's endpoint; with ``abort`` (a reason) it first tells every peer
        that this rank is gone (``Endpoint.abort``: their work with it fails at once, and the notice names the
        peer whose death came first when one is known, so the others blame that one, not this rank)."""
        if self._owns_endpoint:
            with _Process.lock:
                ep, _Process.endpoint, _Process.link = _Process.endpoint, None, None
            if ep is not None:
                if abort is not None:
                    ep.abort(abort)
                else:
                    ep.close()

    def shutdown(self) -> None:
        """Finish queued collectives, join the worker thread, cancel receives posted ahead; the default group also
        closes the process's endpoint."""
        if self._closed:
            return
        self._closed = True
        self._runner.stop()
        self._cancel_ahead()
        self._close_endpoint()

    def abort(self) -> None:
        """Stop without waiting: queued collectives fail at once with "aborted", the running one fails with the
        transport (the default group closes the endpoint, which fails every transfer in flight) or its timeout. The
        default group tells the peers first (a DEAD notice about this rank), so their work with it fails at once."""
        if self._closed:
            return
        self._closed = True
        err = RuntimeError("dlcp process group aborted")
        for work in self._runner.drop_queued():
            work._complete(None, err)
        self._cancel_ahead()
        self._close_endpoint(abort="its dlcp process group was aborted")

    def transport_stats(self) -> dict[str, Any]:
        """The process's transport counters (bytes, packets, retransmissions, zero-filled elements, ...)."""
        return transport_stats()


def transport_stats() -> dict[str, Any]:
    """This process's dlcp transport counters; empty when no dlcp group is open. Every group of the process shares
    one endpoint, so these cover all of them (call before ``destroy_process_group``)."""
    ep = _Process.endpoint
    return ep.stats() if ep is not None else {}


def create_dlcp_process_group(store, rank: int, size: int, timeout: timedelta | None = None):
    """The creator registered with ``dist.Backend.register_backend``: the C++ ``c10d::Backend`` (built by
    ``host.backend_ext``) around a :class:`DlcpBackend`, which torch wraps in its own ProcessGroup."""
    from host.backend_ext import load

    return load().DlcpBackend(rank, size, DlcpBackend(store, rank, size, timeout))


def dlcp_backend(group=None) -> DlcpBackend:
    """The :class:`DlcpBackend` of a dlcp process group (default: the default group), e.g. for its options. Under
    ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` torch wraps every backend in a ``ProcessGroupWrapper`` (which checks, over
    a gloo helper group, that all ranks call the same collective with the same shapes before each call): the
    backend inside it is the one returned."""
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    backend = pg._get_backend(torch.device("cpu"))
    while getattr(backend, "wrapped_pg", None) is not None:  # ProcessGroupWrapper (DETAIL), possibly nested
        backend = backend.wrapped_pg
    impl = getattr(backend, "impl", None)
    if not isinstance(impl, DlcpBackend):
        raise ValueError(f"process group {pg.group_name} is not a dlcp group (backend {dist.get_backend(pg)})")
    return impl


from host.backend_registry import register_dlcp  # noqa: E402  (registering needs the creator above)

register_dlcp(create_dlcp_process_group)
