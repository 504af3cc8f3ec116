"""The three ways to use SparDL: :func:`sparse_allreduce`, the DDP comm hook :func:`spardl_hook`, and
:class:`SparDLCompressor` for DeAR (``host.dear``'s ``GroupCompressor`` contract).

Error feedback: a :class:`SparDLState` keeps, per key (a tensor name, a DDP bucket, a DeAR group), this rank's
residual (added to the next input of the same key) and the adaptive h of the block it holds.

Residual ownership: a residual belongs to **parameter ranges**, not to a bucket or group index. The DDP hook and
the DeAR compressor both tell the state which parameter lies at which offset of a key's buffer (a *layout*: the
hook reads it from DDP's bucket, DeAR hands it to :meth:`SparDLCompressor.replan`). When a key's layout changes
(DDP rebuilt its buckets, DeAR re-planned its fusion groups) the residuals of every key that held any of its
parameters are cut into per-parameter pieces and reassembled in the new layout, so no residual is dropped or
added to the wrong parameter, and the sum of applied updates plus residuals stays the sum of the gradients. The
same per-parameter pieces are what ``state_dict()`` saves.

Devices: the tensors may be host or CUDA tensors. Everything gradient-sized (the input, the residuals, the live
buffer, the result) and every selection (``torch.topk`` on CUDA) stays on the tensor's device; only each
message's selected indices and values cross to the host, where the wire is (:mod:`host.spardl.device`). The
private group must therefore take host tensors (gloo, dlcp; with NCCL as the default backend give a CPU-capable
one, e.g. ``init_process_group("cpu:gloo,cuda:nccl")``). On CUDA the background jobs run on SparDL's own stream
of the device, after the work the submitting thread had queued, and their results are consumed after them: the
hook's future is CUDA-aware (completed on that stream), the compressor's handles make the caller's current
stream wait.

Asynchrony: the hook and the compressor run the multi-step send/recv schedule on one background thread each,
over a **private process group** over the same ranks (``dist.new_group``, created in their constructors, which
therefore must run on every rank of the default group in the same order). Jobs run in submission order, which is
the same on every rank, so messages match; DDP's or DeAR's own collectives use their groups and never interleave
with ours.
"""

from __future__ import annotations

import queue
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Sequence

import torch
import torch.distributed as dist

from host.spardl import algo
from host.spardl.clock import PhaseClock, phase
from host.spardl.device import DeviceJob, device_of
from host.spardl.exchange import run_on_group
from host.spardl.program import Plan, RSState, SparDLOutput, spar_all_gather, spar_reduce_scatter, spardl

__all__ = ["SparDLState", "SparseAllreduceResult", "sparse_allreduce", "SparDLHookState", "spardl_hook",
           "SparDLCompressor", "SparDLRSResult"]


Layout = tuple[tuple[Hashable, int, int], ...]
"""A key's buffer contents: ``(parameter key, offset, numel)`` per parameter, in buffer order."""


class SparDLState:
    """Per-key residuals (error feedback) and adaptive h of one rank, tied to parameter ranges by layouts."""

    def __init__(self, error_feedback: bool = True):
        self.error_feedback = error_feedback
        self.residuals: dict[Hashable, torch.Tensor] = {}
        self.h: dict[Hashable, algo.AdaptiveH] = {}
        self.layouts: dict[Hashable, Layout] = {}
        self._loose: dict[Hashable, torch.Tensor] = {}  # per-parameter residuals no key holds (after a change)
        self._loose_h: dict[Layout, int] = {}  # h of a layout whose key is not known yet (a loaded state)

    def input_for(self, key: Hashable, flat: torch.Tensor, layout: Layout | None = None) -> torch.Tensor:
        """``flat`` plus the key's residual, built **in the residual's buffer** (no new gradient-sized tensor:
        the program then uses it as its live buffer and leaves the new residual in it). So a residual returned by
        an earlier call for ``key`` changes with this one. Without a residual (first call, no error feedback, or
        one of another shape/dtype: the key now names something else) a copy of ``flat``. Residuals live on
        ``flat``'s device (one kept elsewhere, e.g. before the model moved, moves there)."""
        buf, addend = self.buffers_for(key, flat, layout)
        return buf if addend is None else buf.add_(addend)

    def buffers_for(self, key: Hashable, flat: torch.Tensor,
                    layout: Layout | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """What :meth:`input_for` adds, unadded: ``(residual, flat)``, for a program to add fused with its first
        pass over the buffer (``addend=``), or ``(copy of flat, None)`` without a usable residual. ``layout``:
        which parameter ranges ``flat`` holds; when it differs from the key's last one the residuals are
        regrouped by parameter first (see the module's docstring)."""
        if layout is not None and self.layouts.get(key) != layout:
            self._regroup(key, tuple(layout), flat)
        r = self.residuals.pop(key, None)
        if not self.error_feedback or r is None or r.shape != flat.shape or r.dtype != flat.dtype:
            return flat.detach().clone(), None
        if r.device != flat.device:
            r = r.to(flat.device)
        return r, flat.detach()

    def _regroup(self, key: Hashable, layout: Layout, flat: torch.Tensor) -> None:
        """Give ``key`` the ``layout``: release the residuals of every key holding one of its parameters into
        per-parameter pieces, then build the key's residual from the pieces of its parameters (zero where none)."""
        wanted = {pk for pk, _, _ in layout}
        for k in [k for k, lay in self.layouts.items() if k == key or any(pk in wanted for pk, _, _ in lay)]:
            self._release(k)
        self.residuals.pop(key, None)  # a residual without a layout cannot be placed
        self.h.pop(key, None)
        self.layouts[key] = layout
        if not self.error_feedback:
            return
        pieces = [(off, n, self._loose.pop(pk)) for pk, off, n in layout
                  if pk in self._loose and self._loose[pk].numel() == n]
        if pieces:
            buf = torch.zeros(flat.shape, dtype=flat.dtype, device=flat.device)
            flat_buf = buf.reshape(-1)
            for off, n, piece in pieces:
                flat_buf[off:off + n].copy_(piece)
            self.residuals[key] = buf

    def _release(self, key: Hashable) -> None:
        lay = self.layouts.pop(key)
        r = self.residuals.pop(key, None)
        self.h.pop(key, None)
        if r is None:
            return
        flat = r.reshape(-1)
        for pk, off, n in lay:
            self._loose[pk] = flat[off:off + n].clone()

    def h_for(self, key: Hashable, plan: Plan, rank: int) -> algo.AdaptiveH:
        j = rank % plan.m
        h = self.h.get(key)
        if h is None or (h.k, h.teams, h.block_len) != (plan.ks[j], plan.teams, plan.block_len(j)):
            h = self.h[key] = plan.new_h(rank)
            saved = self._loose_h.pop(self.layouts.get(key), None) if key in self.layouts else None
            if saved is not None:
                h.h = max(h.lo, min(h.hi, saved))
        return h

    def finish(self, key: Hashable, plan: Plan, rank: int, out: SparDLOutput) -> None:
        if self.error_feedback:
            self.residuals[key] = out.residual
        self.h_for(key, plan, rank).update(out.union)

    # --- per-parameter view: conservation checks and checkpoints -------------------------------------------------
    def residuals_by_param(self) -> dict[Hashable, torch.Tensor]:
        """This rank's residual of every parameter it holds one for (flat copies), wherever it is kept."""
        out = {pk: t.clone() for pk, t in self._loose.items()}
        for key, lay in self.layouts.items():
            r = self.residuals.get(key)
            if r is not None:
                flat = r.reshape(-1)
                for pk, off, n in lay:
                    out[pk] = flat[off:off + n].clone()
        return out

    def state_dict(self) -> dict[str, Any]:
        """Residuals per parameter and h per layout: independent of key numbering, so loadable into another
        bucketing or fusion plan. Residuals of keys without a layout are not included."""
        hs = [(list(map(list, lay)), self.h[k].h) for k, lay in self.layouts.items() if k in self.h]
        hs += [(list(map(list, lay)), h) for lay, h in self._loose_h.items()]
        return {"error_feedback": self.error_feedback, "residuals": self.residuals_by_param(), "h": hs}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Replace everything by ``state``; each key gets its residual back at its next call with a layout."""
        self.error_feedback = bool(state.get("error_feedback", self.error_feedback))
        self.residuals.clear()
        self.h.clear()
        self.layouts.clear()
        self._loose = {pk: t.detach().clone().reshape(-1) for pk, t in state.get("residuals", {}).items()}
        self._loose_h = {tuple(tuple(x) for x in lay): int(h) for lay, h in state.get("h", [])}


@dataclass
class SparseAllreduceResult:
    tensor: torch.Tensor  # the caller's tensor, now holding the result
    selected: torch.Tensor  # flat indices of the result's non-zero entries (the global selection)
    residual: torch.Tensor  # this rank's new residual (flat)
    bytes_sent: int  # bytes this rank sent
    h: int  # the per-holder budget used (d > 1), or k


def _group_info(group) -> tuple[int, int]:
    return dist.get_rank(group), dist.get_world_size(group)


def sparse_allreduce(tensor: torch.Tensor, density: float, teams: int = 1, group: dist.ProcessGroup | None = None,
                     *, state: SparDLState | None = None, key: Hashable = "default", average: bool = False,
                     timeout: float = 60.0, clock: PhaseClock | None = None) -> SparseAllreduceResult:
    """SparDL sparse all-reduce of ``tensor`` (floating point, on the host or a CUDA device) in place, over
    ``group``'s send/recv. On CUDA the work is queued on the caller's current stream (selection, arithmetic) and
    the result is ready for the kernels the caller queues next, as after any torch operation.

    Every rank ends with the same tensor: the sum (``average``: mean) over ranks of at most ``density`` of each
    block's elements. With ``state`` the residual of ``key`` is added first and the new one kept (error
    feedback; the residual is updated in place, see :meth:`SparDLState.input_for`); without, the residual is
    only returned. ``teams`` must divide the group size. ``clock`` collects per-phase times (profiling).
    """
    device_of(tensor, "sparse_allreduce")  # host or CUDA: anything else is refused by name
    rank, world = _group_info(group)
    flat = tensor.reshape(-1)
    plan = Plan.make(flat.numel(), world, teams, density, tensor.dtype)
    st = state if state is not None else SparDLState(error_feedback=False)
    with phase(clock, "ef"):
        original, addend = st.buffers_for(key, flat)  # added in SparDL's first pass over the buffer
    h = st.h_for(key, plan, rank)
    used = h.h
    direct = tensor.is_contiguous()  # then the result goes straight into the caller's tensor
    out = run_on_group(spardl(plan, rank, original, h.h, own_input=True, addend=addend,
                              out=flat if direct else None, divisor=world if average else 1, clock=clock),
                       group, timeout, clock)
    st.finish(key, plan, rank, out)
    if not direct:
        tensor.copy_(out.result.view_as(tensor))
    return SparseAllreduceResult(tensor, out.selected, out.residual, out.bytes_sent, used)


# --- background execution -------------------------------------------------------------------------------------

class _SerialWorker:
    """One daemon thread running jobs in submission order; ``submit`` returns a concurrent Future."""

    def __init__(self, name: str):
        self._q: queue.Queue = queue.Queue()
        self._t = threading.Thread(target=self._run, name=name, daemon=True)
        self._t.start()
        self._closed = False

    def _run(self) -> None:
        while True:
            item = self._q.get()
            if item is None:
                return
            fn, fut = item
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(fn())
            except BaseException as e:  # noqa: BLE001 - handed to whoever waits
                fut.set_exception(e)

    def submit(self, fn: Callable[[], Any]) -> Future:
        if self._closed:
            raise RuntimeError("SparDL worker is closed")
        fut: Future = Future()
        self._q.put((fn, fut))
        return fut

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._q.put(None)
            self._t.join()


def _private_group(process_group) -> tuple[dist.ProcessGroup, int, int]:
    ranks = (list(range(dist.get_world_size())) if process_group is None
             else dist.get_process_group_ranks(process_group))
    g = dist.new_group(ranks=ranks)
    return g, dist.get_rank(g), dist.get_world_size(g)


# --- DDP comm hook ----------------------------------------------------------------------------------------------

class SparDLHookState:
    """State of :func:`spardl_hook`. Construct on every rank (it creates a private process group)::

        state = SparDLHookState(density=0.01, teams=1)
        ddp.register_comm_hook(state, spardl_hook)

    The first ``dense_iterations`` iterations (default 2) all-reduce densely (a warm-up, as sparsified training
    usually has). Residuals belong to parameter ranges read from each bucket (:class:`SparDLState`), so DDP's
    bucket rebuild after the first iteration moves them with their parameters. ``model`` (the module DDP wraps)
    names the parameters, which :meth:`state_dict` needs; without it they are keyed by object identity.
    """

    def __init__(self, density: float, teams: int = 1, process_group: dist.ProcessGroup | None = None, *,
                 dense_iterations: int = 2, timeout: float = 60.0, model: torch.nn.Module | None = None):
        algo.block_budget(1, density)  # validates density
        if dense_iterations < 0:
            raise ValueError(f"dense_iterations must be >= 0, got {dense_iterations}")
        self._names = None if model is None else {id(p): n for n, p in model.named_parameters()}
        self.density, self.teams, self.process_group = density, teams, process_group
        self.dense_iterations, self.timeout = dense_iterations, timeout
        self.group, self.rank, self.world = _private_group(process_group)
        algo.team_size(self.world, teams)
        self.state = SparDLState()
        self.iteration = 0
        self.bytes_sent = 0
        self._worker = _SerialWorker(f"spardl-hook-r{self.rank}")

    def close(self) -> None:
        self._worker.close()

    def state_dict(self) -> dict[str, Any]:
        """Residuals per parameter name, h, the iteration count (needs ``model=``). Call it between iterations
        (nothing in flight); checkpoint it with the model and optimizer."""
        if self._names is None:
            raise ValueError("SparDLHookState.state_dict() needs the parameter names: pass model= to the "
                             "constructor")
        return {"iteration": self.iteration, "sparse": self.state.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self._names is None:
            raise ValueError("SparDLHookState.load_state_dict() needs the parameter names: pass model= to the "
                             "constructor")
        self.iteration = int(state["iteration"])
        self.state.load_state_dict(state["sparse"])

    def layout_of(self, bucket: dist.GradBucket) -> Layout | None:
        """The bucket's parameters and their ranges in its buffer (DDP packs their gradients back to back);
        None if the buffer does not hold exactly that (then the residual stays keyed by the bucket index)."""
        params = bucket.parameters()
        lay, off = [], 0
        for p in params:
            pk = self._names.get(id(p), id(p)) if self._names is not None else id(p)
            lay.append((pk, off, p.numel()))
            off += p.numel()
        return tuple(lay) if off == bucket.buffer().numel() else None

    def _run(self, key: int, buf: torch.Tensor, layout: Layout | None = None) -> torch.Tensor:
        flat = buf.reshape(-1)
        plan = Plan.make(flat.numel(), self.world, self.teams, self.density, flat.dtype)
        original, addend = self.state.buffers_for(key, flat, layout)
        h = self.state.h_for(key, plan, self.rank)
        direct = buf.is_contiguous()
        out = run_on_group(spardl(plan, self.rank, original, h.h, own_input=True, addend=addend,
                                  out=flat if direct else None, divisor=self.world), self.group, self.timeout)
        self.state.finish(key, plan, self.rank, out)
        self.bytes_sent += out.bytes_sent
        if not direct:
            buf.copy_(out.result.view_as(buf))
        return buf


def spardl_hook(state: SparDLHookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP comm hook: the averaged bucket through SparDL (dense for the first ``dense_iterations``)."""
    it = state.iteration
    if bucket.is_last():
        state.iteration += 1
    if it < state.dense_iterations:
        work = dist.all_reduce(bucket.buffer(), op=dist.ReduceOp.SUM, group=state.process_group, async_op=True)
        world = state.world
        return work.get_future().then(lambda f: f.value()[0].div_(world))
    buf, key, layout = bucket.buffer(), bucket.index(), state.layout_of(bucket)
    job = DeviceJob(device_of(buf, "spardl_hook"))  # after the kernels that produced the bucket
    fut = job.future()  # CUDA-aware for a CUDA bucket: its value (the bucket's buffer) is on the bucket's device

    def run() -> None:
        with job.running():
            try:
                value = state._run(key, buf, layout)
            except BaseException as e:  # noqa: BLE001 - DDP raises it from backward
                fut.set_exception(e)
                return
            fut.set_result(value)  # on SparDL's stream: DDP's use of the value is ordered after the job's kernels
    state._worker.submit(run)
    return fut


# DDP checks that a hook's annotations are the real classes (this module's annotations are strings)
spardl_hook.__annotations__ = {"state": SparDLHookState, "bucket": dist.GradBucket,
                               "return": torch.futures.Future[torch.Tensor]}


# --- DeAR compressor ---------------------------------------------------------------------------------------------

@dataclass
class SparDLRSResult:
    """What DeAR holds between the halves: the rank's Spar-Reduce-Scatter state and the group's shape."""

    group_index: int
    shape: torch.Size
    rs: RSState


class _Handle:
    """A compressor job; ``wait()`` returns its value or raises its error. It cannot hang: every round of messages
    inside the job has the compressor's timeout. On CUDA, ``wait()`` also makes the caller's current stream wait
    for the job's kernels (:meth:`host.spardl.device.DeviceJob.wait_on_current`)."""

    def __init__(self, fut: Future, job: DeviceJob):
        self._fut, self._job = fut, job

    def wait(self, timeout: float | None = None) -> object:
        return self._job.wait_on_current(self._fut.result(timeout))


class SparDLCompressor:
    """DeAR ``GroupCompressor``: Spar-Reduce-Scatter as the reduce-scatter half, Spar-All-Gather (with global
    residual collection) as the all-gather half. Construct on every rank (it creates a private process group over
    ``process_group``'s ranks, default: the world).

    DeAR hands ``flat_grad`` already divided by the world size, so the all-gather returns the plain sum over
    ranks (``average=False``, the default; ``average=True`` divides by the world size). Residuals belong to
    parameter ranges: DeAR calls :meth:`replan` with every plan it installs, and a group's residual is rebuilt
    from its parameters' pieces when its layout changed (see :class:`SparDLState`). :meth:`state_dict` (carried
    by DeAR's) saves them per parameter name.
    """

    def __init__(self, density: float, teams: int = 1, process_group: dist.ProcessGroup | None = None, *,
                 average: bool = False, timeout: float = 60.0):
        algo.block_budget(1, density)
        self.density, self.teams, self.average, self.timeout = density, teams, average, timeout
        self.group, self.rank, self.world = _private_group(process_group)
        algo.team_size(self.world, teams)
        self.state = SparDLState()
        self.bytes_sent = 0
        self._layouts: dict[int, Layout] = {}
        self._device = torch.device("cpu")  # of the gradients, from the first reduce-scatter on
        self._worker = _SerialWorker(f"spardl-dear-r{self.rank}")

    def replan(self, layouts: Sequence[Any]) -> None:
        """DeAR's new fusion plan (``host.dear.GroupLayout`` per group). Runs on the worker thread, after every
        job already submitted, so it never changes a layout under a running job."""
        new = {lay.index: lay.key for lay in layouts}

        def job() -> None:
            self._layouts = new
        self._worker.submit(job).result()

    def _on_worker(self, fn: Callable[[], Any], device: torch.device) -> Any:
        """``fn()`` on the worker thread, after every job already submitted, and in ``device``'s stream order
        between the caller's work queued so far and its work queued after this returns."""
        order = DeviceJob(device)

        def job() -> Any:
            with order.running():
                return fn()
        return order.wait_on_current(self._worker.submit(job).result())

    def state_dict(self) -> dict[str, Any]:
        """Residuals per parameter and h per layout (DeAR calls it after flushing: nothing in flight)."""
        return self._on_worker(self.state.state_dict, self._device)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        saved = [t for t in state.get("residuals", {}).values() if isinstance(t, torch.Tensor)]
        self._on_worker(lambda: self.state.load_state_dict(state), saved[0].device if saved else self._device)

    def residuals_by_param(self) -> dict[Hashable, torch.Tensor]:
        """This rank's current residual per parameter name (after DeAR flushed)."""
        return self._on_worker(self.state.residuals_by_param, self._device)

    def _check(self, process_group) -> None:
        if process_group is not None and dist.get_world_size(process_group) != self.world:
            raise ValueError(f"SparDLCompressor was built for {self.world} ranks, called with a group of "
                             f"{dist.get_world_size(process_group)}")

    def start_reduce_scatter(self, group_index: int, flat_grad: torch.Tensor, process_group) -> _Handle:
        self._check(process_group)
        if flat_grad.dim() != 1:
            raise ValueError(f"group {group_index}: flat_grad must be 1-D, got shape {tuple(flat_grad.shape)}")
        order = DeviceJob(device_of(flat_grad, f"SparDLCompressor group {group_index}"))
        self._device = order.device  # where the residuals are (state_dict and the like order themselves there)

        def job() -> SparDLRSResult:
            with order.running():
                plan = Plan.make(flat_grad.numel(), self.world, self.teams, self.density, flat_grad.dtype)
                original, addend = self.state.buffers_for(group_index, flat_grad, self._layouts.get(group_index))
                h = self.state.h_for(group_index, plan, self.rank)
                rs = run_on_group(spar_reduce_scatter(plan, self.rank, original, h.h, own_input=True,
                                                      addend=addend), self.group, self.timeout)
                return SparDLRSResult(group_index, flat_grad.shape, rs)
        return _Handle(self._worker.submit(job), order)

    def start_all_gather(self, group_index: int, rs_result: object, process_group) -> _Handle:
        self._check(process_group)
        if not isinstance(rs_result, SparDLRSResult) or rs_result.group_index != group_index:
            raise TypeError(f"group {group_index}: start_all_gather needs this compressor's reduce-scatter result "
                            f"for the same group, got {type(rs_result).__name__}")

        order = DeviceJob(rs_result.rs.live.device)

        def job() -> torch.Tensor:
            with order.running():
                rs = rs_result.rs
                out = run_on_group(spar_all_gather(rs, divisor=self.world if self.average else 1), self.group,
                                   self.timeout)
                self.state.finish(group_index, rs.plan, self.rank, out)
                self.bytes_sent += out.bytes_sent
                return out.result.view(rs_result.shape)
        return _Handle(self._worker.submit(job), order)

    def close(self) -> None:
        self._worker.close()
