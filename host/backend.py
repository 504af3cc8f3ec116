"""The ``"dlcp"`` torch.distributed backend: a ``ProcessGroup`` whose collectives run over the DLCP transport.

Use it like any backend::

    import torch.distributed as dist
    dist.init_process_group("dlcp")          # env:// (torchrun) or init_method=..., rank=..., world_size=...

The name is registered when ``import torch`` runs (the ``torch.backends`` entry point of the dlcp distribution
calls :func:`host.torch_plugin.register`); ``import host.backend`` registers it too.

How it works:

* **Rendezvous** through the c10d Store: every rank publishes the UDP address it bound (``DLCP_ADDR`` or the
  source address towards ``MASTER_ADDR``; on loopback ``127.0.0.<rank+1>``, so every rank has the well-known
  port) and its global rank; rank 0 publishes a random per-job nonce. One transport
  :class:`~host.transport.endpoint.Endpoint` per process serves every group; subgroups (``new_group``) share it,
  each with its own 6-bit group tag in the transfer ids.
* **Execution**: each group runs its collectives in issue order on one worker thread (every rank issues them in
  the same order, so their transfers match); point-to-point send/recv run on a small pool so that a blocking
  receive does not hold back collectives. Every call returns a :class:`DlcpWork` at once; ``wait()`` blocks and
  re-raises the operation's error (a dead peer becomes a ``TransportError`` within the timeout).
* **Options** (:class:`DlcpOptions`, or environment variables ``DLCP_LOSS_BOUND``, ``DLCP_MTU``,
  ``DLCP_POLICY``, ``DLCP_CC``, ``DLCP_TIMEOUT``, ``DLCP_PEER_TIMEOUT``, ``DLCP_ADDR``, ``DLCP_PORT``,
  ``DLCP_JOB_ID``): the loss bound applies to gradient all-reduces; control traffic (barrier, broadcast of
  parameters, gathers) is always reliable unless a call says otherwise through :func:`loss_bound_scope`.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import queue
import random
import socket
import threading
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Callable

import torch
import torch.distributed as dist

from host import wire
from host.collectives import Collectives, EndpointLink, Outcome, ReduceOp
from host.transport.cc import CCParams, params_for_mode
from host.transport.chunking import payload_capacity
from host.transport.endpoint import Endpoint, Options, TransportError, path_mtu

__all__ = ["DlcpOptions", "DlcpProcessGroup", "DlcpWork", "create_dlcp_process_group", "loss_bound_scope",
           "BACKEND_NAME", "transport_stats"]

log = logging.getLogger("host.backend")
BACKEND_NAME = "dlcp"


@dataclass
class DlcpOptions:
    """Backend options. ``from_env()`` reads the ``DLCP_*`` variables; explicit fields win over them."""

    loss_bound: float = 0.0  # fraction of a gradient all-reduce that may be zero-filled (0 = exact)
    mtu: int | None = None  # None: the smallest path MTU towards the peers (65535 on loopback, 1500 on Ethernet)
    policy: str = "layer-magnitude"  # the transport's priority policy (host.policy)
    # "on": DCTCP-style window on ECN marks and on queueing delay (paths whose queues only drop); "fast": the same
    # with FAST's delay law (equal shares for flows through one queue: all-to-all traffic); "ecn": ECN marks only
    # (every switch marks: the DLCP P4 program); "off": a fixed large window (lossless fabrics).
    # True/False are accepted for "on"/"off".
    congestion_control: str | bool = "on"
    timeout: float = 60.0  # seconds an operation may take before wait() raises
    peer_timeout: float = 10.0  # seconds without feedback from a peer before its transfers fail
    addr: str | None = None  # IPv4 address to bind; None = auto
    port: int = wire.UDP_PORT
    job_id: int | None = None  # None: derived from the rendezvous (MASTER_ADDR/PORT, run id)
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_env(cls, **overrides: Any) -> "DlcpOptions":
        env = os.environ
        o = cls()
        conv: dict[str, tuple[str, Callable[[str], Any]]] = {
            "loss_bound": ("DLCP_LOSS_BOUND", float), "mtu": ("DLCP_MTU", int), "policy": ("DLCP_POLICY", str),
            "congestion_control": ("DLCP_CC", _cc_mode),
            "timeout": ("DLCP_TIMEOUT", float), "peer_timeout": ("DLCP_PEER_TIMEOUT", float),
            "addr": ("DLCP_ADDR", str), "port": ("DLCP_PORT", int), "job_id": ("DLCP_JOB_ID", int),
        }
        for name, (var, fn) in conv.items():
            if var in env and env[var] != "":
                try:
                    setattr(o, name, fn(env[var]))
                except ValueError:
                    raise ValueError(f"environment variable {var}={env[var]!r} is not a valid {name}") from None
        for k, v in overrides.items():
            setattr(o, k, v)
        if not 0.0 <= o.loss_bound < 1.0:
            raise ValueError(f"loss bound must be in [0, 1), got {o.loss_bound}")
        return o


_scope = threading.local()


@contextlib.contextmanager
def loss_bound_scope(loss_bound: float, layer: int | None = None):
    """Within this block, all-reduces and reduce-scatters issued by this thread use ``loss_bound`` and ``layer`` as
    the priority position; all-gathers take only the ``layer`` (their data, e.g. DeAR's reduced gradients, must
    arrive whole). The DDP comm hook (``host.hooks``) and DeAR use it to tag each bucket or fusion group."""
    old = getattr(_scope, "v", None)
    _scope.v = (loss_bound, layer)
    try:
        yield
    finally:
        _scope.v = old


def _scoped(default_bound: float) -> tuple[float, int]:
    v = getattr(_scope, "v", None)
    if v is None:
        return default_bound, 0
    return v[0], (v[1] or 0)


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

class DlcpWork(dist._Work):
    """Completion of one operation. ``wait()`` blocks and re-raises its error; ``lost_ranges`` lists what bounded
    loss zero-filled (see ``host.collectives.Outcome``)."""

    def __init__(self, result: list[torch.Tensor]):
        super().__init__()
        self._fut: torch.futures.Future = torch.futures.Future()
        self._result = result
        self._exc: BaseException | None = None
        self._done = threading.Event()
        self.lost_ranges: list[tuple[int, int]] = []

    def _complete(self, outcome: Outcome | None, exc: BaseException | None) -> None:
        if outcome is not None:
            self.lost_ranges = outcome.merged()
        self._exc = exc
        self._done.set()
        if exc is None:
            self._fut.set_result(self._result)
        else:
            self._fut.set_exception(exc)

    def is_completed(self) -> bool:
        return self._done.is_set()

    def is_success(self) -> bool:
        return self._done.is_set() and self._exc is None

    def exception(self):
        return self._exc

    def source_rank(self) -> int:
        return -1

    def wait(self, timeout: timedelta | None = None) -> bool:
        secs = timeout.total_seconds() if isinstance(timeout, timedelta) and timeout.total_seconds() > 0 else None
        if not self._done.wait(secs):
            raise TransportError(f"dlcp operation not complete after {secs}s")
        if self._exc is not None:
            raise self._exc
        return True

    def synchronize(self) -> None:
        self.wait()

    def get_future(self) -> torch.futures.Future:
        return self._fut

    def result(self) -> list[torch.Tensor]:
        self.wait()
        return self._result


def _all_loopback(addr_map: dict[int, tuple[str, int]], ranks: list[int]) -> bool:
    """Whether every rank of ``ranks`` has a loopback address (one host: memory-speed links). Every member sees
    the same address map, so all agree."""
    try:
        return all(ipaddress.ip_address(addr_map[r][0]).is_loopback for r in ranks)
    except ValueError:  # a host name: not known to be local
        return False


# --- the process group ----------------------------------------------------------------------------------------

def _flat_views(tensors: list[torch.Tensor]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(original, flat contiguous working tensor) pairs; copy back when they differ."""
    out = []
    for t in tensors:
        if t.device.type != "cpu":
            raise ValueError(f"the dlcp backend handles CPU tensors only, got one on {t.device}")
        out.append((t, t.view(-1) if t.is_contiguous() else t.contiguous().view(-1)))
    return out


def _copy_back(pairs) -> None:
    for orig, flat in pairs:
        if flat.data_ptr() != orig.data_ptr():
            orig.copy_(flat.view_as(orig))


class DlcpProcessGroup(dist.ProcessGroup):
    """A torch.distributed process group over the DLCP transport (CPU tensors)."""

    def __init__(self, store, rank: int, size: int, timeout: timedelta | None = None,
                 options: DlcpOptions | None = None):
        super().__init__(rank, size)
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
        self._queue: queue.Queue = queue.Queue()
        self._worker = threading.Thread(target=self._run, name=f"dlcp-pg{group_tag}-r{rank}", daemon=True)
        self._worker.start()
        self._p2p = ThreadPoolExecutor(max_workers=4, thread_name_prefix=f"dlcp-p2p{group_tag}")
        self._group_tag = group_tag
        self._owns_endpoint = group_tag == 0

    # rendezvous ---------------------------------------------------------------------------------------------
    def _rendezvous(self, store, rank: int, size: int) -> tuple[list[int], int]:
        o = self.options
        with _Process.lock:
            first = _Process.endpoint is None
        if first:
            # the default group: its ranks are the global ranks
            addr = o.addr or _auto_addr(rank)
            store.set(f"dlcp/addr/{rank}", f"{addr}:{o.port}")
            if rank == 0:
                store.set("dlcp/nonce", str(random.SystemRandom().randrange(1, 1 << 16)))
            nonce = int(store.get("dlcp/nonce"))
            addrs = {}
            for r in range(size):
                host, port = store.get(f"dlcp/addr/{r}").decode().rsplit(":", 1)
                addrs[r] = (host, int(port))
            if o.mtu is None:
                o.mtu = path_mtu(addr, [h for r, (h, _) in addrs.items() if r != rank])
            job_id = o.job_id if o.job_id is not None else zlib.crc32(
                f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}:"
                f"{os.environ.get('TORCHELASTIC_RUN_ID', '')}".encode())
            from host.policy import LayerMagnitudePolicy
            if o.policy not in ("layer-magnitude", "default"):
                raise ValueError(f"unknown priority policy {o.policy!r} (known: layer-magnitude)")
            cc = _cc_params(_cc_mode(o.congestion_control), o.mtu)
            ep = Endpoint(rank, addrs, job_id=job_id, nonce=nonce,
                          options=Options(mtu=o.mtu, policy=LayerMagnitudePolicy(), recv_timeout=o.timeout,
                                          peer_timeout=o.peer_timeout, cc=cc))
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
            tag = int(_Process.global_store.add("dlcp/group_tags", 1)) % 63 + 1
            store.set("dlcp/group_tag", str(tag))
        ranks = [int(store.get(f"dlcp/grank/{r}")) for r in range(size)]
        return ranks, int(store.get("dlcp/group_tag"))

    # execution ------------------------------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            fn, work = item
            self._execute(fn, work)

    @staticmethod
    def _execute(fn, work: DlcpWork) -> None:
        try:
            outcome = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the caller through wait()
            log.debug("dlcp operation failed: %s", e)
            work._complete(None, e)
        else:
            work._complete(outcome if isinstance(outcome, Outcome) else None, None)

    def _submit(self, fn: Callable[[], Outcome | None], result: list[torch.Tensor]) -> DlcpWork:
        if self._closed:
            raise RuntimeError("dlcp process group has been shut down")
        work = DlcpWork(result)
        self._queue.put((fn, work))
        return work

    def _submit_p2p(self, fn, result) -> DlcpWork:
        if self._closed:
            raise RuntimeError("dlcp process group has been shut down")
        work = DlcpWork(result)
        self._p2p.submit(self._execute, fn, work)
        return work

    # names ----------------------------------------------------------------------------------------------------
    def getBackendName(self) -> str:  # noqa: N802 - torch's name
        return BACKEND_NAME

    @property
    def name(self) -> str:  # type: ignore[override]
        return BACKEND_NAME

    # collectives ----------------------------------------------------------------------------------------------
    def allreduce(self, tensors, opts=None):
        op = ReduceOp.from_torch(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)
        bound, layer = _scoped(self.options.loss_bound)
        pairs = _flat_views(list(tensors))

        def run():
            out = Outcome()
            for _, flat in pairs:
                out.lost += self._coll.allreduce(flat, op, layer=layer, loss_bound=bound).lost
            _copy_back(pairs)
            return out
        return self._submit(run, list(tensors))

    def allreduce_coalesced(self, tensors, opts=None):
        op = ReduceOp.from_torch(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)
        tensors = list(tensors)
        bound, layer = _scoped(self.options.loss_bound)
        if len({t.dtype for t in tensors}) > 1:
            raise ValueError("allreduce_coalesced needs tensors of one dtype")

        def run():
            flat = torch.cat([t.reshape(-1) for t in tensors]) if tensors else torch.empty(0)
            out = self._coll.allreduce(flat, op, layer=layer, loss_bound=bound)
            pos = 0
            for t in tensors:
                t.copy_(flat[pos:pos + t.numel()].view_as(t))
                pos += t.numel()
            return out
        return self._submit(run, tensors)

    def allgather(self, output_tensors, input_tensors, opts=None):
        if len(input_tensors) != 1:
            raise ValueError("dlcp allgather takes one input tensor per process")
        outs, inp = list(output_tensors[0]), input_tensors[0]
        _, layer = _scoped(0.0)
        return self._submit(lambda: self._coll.all_gather(outs, inp, layer=layer), [outs])

    def _allgather_base(self, output, input, opts=None):
        return self.all_gather_single(output, input, opts)

    def all_gather_single(self, output, input, opts=None):
        if output.numel() != input.numel() * self._size:
            raise ValueError(f"all_gather_into_tensor: output has {output.numel()} elements, expected "
                             f"{input.numel()} x {self._size}")
        pairs = _flat_views([output])
        _, layer = _scoped(0.0)  # priority from the caller's scope; never a loss bound for gathers

        def run():
            flat = pairs[0][1]
            n = input.numel()
            out = self._coll.all_gather([flat[i * n:(i + 1) * n] for i in range(self._size)], input.reshape(-1),
                                        layer=layer)
            _copy_back(pairs)
            return out
        return self._submit(run, [output])

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        op = ReduceOp.from_torch(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)
        if len(output_tensors) != 1:
            raise ValueError("dlcp reduce_scatter takes one output tensor per process")
        out_t, ins = output_tensors[0], list(input_tensors[0])
        bound, layer = _scoped(0.0)
        return self._submit(lambda: self._coll.reduce_scatter(out_t, ins, op, layer=layer, loss_bound=bound),
                            [out_t])

    def _reduce_scatter_base(self, output, input, opts=None):
        return self.reduce_scatter_single(output, input, opts)

    def reduce_scatter_single(self, output, input, opts=None):
        op = ReduceOp.from_torch(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)
        if input.numel() != output.numel() * self._size:
            raise ValueError(f"reduce_scatter_tensor: input has {input.numel()} elements, expected "
                             f"{output.numel()} x {self._size}")
        bound, layer = _scoped(0.0)

        def run():
            n = output.numel()
            flat = input.reshape(-1)
            return self._coll.reduce_scatter(output, [flat[i * n:(i + 1) * n] for i in range(self._size)], op,
                                             layer=layer, loss_bound=bound)
        return self._submit(run, [output])

    def broadcast(self, tensors, opts=None):
        root = opts.rootRank if opts is not None else 0
        pairs = _flat_views(list(tensors))

        def run():
            out = Outcome()
            for _, flat in pairs:
                out.lost += self._coll.broadcast(flat, root).lost
            _copy_back(pairs)
            return out
        return self._submit(run, list(tensors))

    def reduce(self, tensors, opts=None):
        root = opts.rootRank if opts is not None else 0
        op = ReduceOp.from_torch(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)
        pairs = _flat_views(list(tensors))

        def run():
            out = Outcome()
            for _, flat in pairs:
                out.lost += self._coll.reduce(flat, root, op).lost
            _copy_back(pairs)
            return out
        return self._submit(run, list(tensors))

    def gather(self, output_tensors, input_tensors, opts=None):
        root = opts.rootRank if opts is not None else 0
        outs = list(output_tensors[0]) if self._rank == root else None
        inp = input_tensors[0]
        return self._submit(lambda: self._coll.gather(outs, inp, root), [outs] if outs is not None else [])

    def scatter(self, output_tensors, input_tensors, opts=None):
        root = opts.rootRank if opts is not None else 0
        out_t = output_tensors[0]
        ins = list(input_tensors[0]) if self._rank == root else None
        return self._submit(lambda: self._coll.scatter(out_t, ins, root), [out_t])

    def barrier(self, opts=None):
        return self._submit(self._coll.barrier, [])

    def alltoall(self, output_tensors, input_tensors, opts=None):
        outs, ins = list(output_tensors), list(input_tensors)
        return self._submit(lambda: self._coll.all_to_all(outs, ins), outs)

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        return self.all_to_all_single(output, input, output_split_sizes, input_split_sizes, opts)

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        P = self._size
        out_splits = list(output_split_sizes) or [output.shape[0] // P] * P
        in_splits = list(input_split_sizes) or [input.shape[0] // P] * P
        if sum(out_splits) != output.shape[0] or sum(in_splits) != input.shape[0]:
            raise ValueError("all_to_all_single: split sizes do not add up to the tensors' first dimension")
        pairs = _flat_views([output])

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
        return self._submit(run, [output])

    # point to point ---------------------------------------------------------------------------------------------
    def send(self, tensors, dstRank, tag):  # noqa: N803 - torch's names
        t = tensors[0]
        tid = self._coll._p2p_tid(dstRank, tag, "send")  # numbered in program order, on the caller's thread
        flat = t.reshape(-1).contiguous()

        def run():
            self._coll.link.isend(self._global_ranks[dstRank], flat, tid).wait(self.options.timeout)
        return self._submit_p2p(run, [t])

    def recv(self, tensors, srcRank, tag):  # noqa: N803
        t = tensors[0]
        tid = self._coll._p2p_tid(srcRank, tag, "recv")
        pairs = _flat_views([t])

        def run():
            out = Outcome()
            out.add(0, self._coll.link.recv(self._global_ranks[srcRank], pairs[0][1], tid,
                                            timeout=self.options.timeout))
            _copy_back(pairs)
            return out
        return self._submit_p2p(run, [t])

    # life cycle -------------------------------------------------------------------------------------------------
    def shutdown(self) -> None:
        """Finish queued work, join every thread; the default group also closes the process's endpoint."""
        if self._closed:
            return
        self._closed = True
        self._queue.put(None)
        self._worker.join()
        self._p2p.shutdown(wait=True)
        if self._owns_endpoint:
            with _Process.lock:
                ep, _Process.endpoint, _Process.link = _Process.endpoint, None, None
            if ep is not None:
                ep.close()

    def abort(self) -> None:
        self.shutdown()

    def transport_stats(self) -> dict[str, Any]:
        """The process's transport counters (bytes, packets, retransmissions, zero-filled elements, ...)."""
        return transport_stats()


def transport_stats() -> dict[str, Any]:
    """This process's dlcp transport counters; empty when no dlcp group is open. Every group of the process shares
    one endpoint, so these cover all of them (call before ``destroy_process_group``)."""
    ep = _Process.endpoint
    return ep.stats() if ep is not None else {}


def create_dlcp_process_group(store, rank: int, size: int, timeout: timedelta | None = None):
    """The creator registered with ``dist.Backend.register_backend``."""
    return DlcpProcessGroup(store, rank, size, timeout)


from host.torch_plugin import register as _register  # noqa: E402  (registering needs the class above)

_register()
