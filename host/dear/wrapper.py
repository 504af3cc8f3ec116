"""DeAR: reduce-scatter in backward, all-gather in the next forward, per-group optimizer updates just before use.

See ``docs/dear.md`` for the user's view. The schedule of one iteration:

* **backward**: a ``post_accumulate_grad`` hook per parameter copies its gradient (divided by the world size when
  averaging) into its fusion group's padded flat buffer; when a group is complete its reduce-scatter starts
  asynchronously. Launches are strictly in descending group order (the order backward completes groups), so every
  rank issues the same collectives in the same order even if autograd finishes layers in a different order.
* **step()**: completes groups that got no gradient (a missing gradient counts as zero), waits for every
  reduce-scatter, clips by global norm if asked (one extra scalar all-reduce), snapshots the optimizer's
  hyperparameters and starts group 0's all-gather. It updates no parameter.
* **next forward**: a forward pre-hook on every parameter-owning module ensures that every group up to the
  module's own is applied: wait for the group's all-gather, start the next group's, then run the optimizer on just
  that group's parameters (its own state, the hyperparameters of the ``step()`` call) with the averaged gradient.
* **flush()** applies whatever is pending (evaluation, checkpointing; the model's and optimizer's ``state_dict()``
  call it through pre-hooks). It only issues the same all-gathers the next forward would, in the same order, so
  it is collective-safe: one rank may flush while the others flush later or run their next forward (which issues
  the same all-gathers). A rank whose peers will never issue them (they exited, or stopped training without a
  forward or flush) gets a :class:`DeARError` after ``timeout`` seconds instead of waiting forever.
* **buffers** (BatchNorm running statistics): as DDP does, rank 0's buffers are broadcast at the start of every
  forward that has grad enabled and is not under ``no_sync()`` (``broadcast_buffers=False`` turns it off).
* **unused parameters**: a parameter that gets no gradient keeps its group (and, since launches are in order,
  every group below it) from launching until ``step()``. Once an iteration had such parameters (or always, with
  ``find_unused_parameters=True``), DeAR walks the autograd graph from the forward's output, as DDP does, and
  counts the parameters it cannot reach as complete (zero gradient, or the one accumulated under ``no_sync()``)
  as soon as backward starts.

Fusion groups are consecutive layers (parameter-owning modules) in *forward* order, detected from the first
forward's module calls (modules never called come first). The plan (byte threshold) is fixed, one group per layer
(``"layers"``), or ``"auto"``: an alpha-beta probe at construction, per-layer compute times measured over the first
iterations, and the threshold whose simulated DeAR schedule is fastest (``host.dear.fusion``). ``tune=True`` then
runs online Bayesian optimisation (``host.dear.tuner``): rank 0 proposes thresholds, broadcasts them, each is timed
over a short window, the best is kept. Plans change only at the start of a backward pass, when nothing is pending.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import inspect
import math
import statistics
import time
import zlib
from dataclasses import dataclass
from typing import Any, Iterator

import torch
import torch.distributed as dist
from torch import nn

from host.collectives import LossStats
from host.dear.compressor import (ClippableCompressor, DenseCompressor, GroupCompressor, GroupLayout, ParamSlot,
                                  ReplannableCompressor, RingReduceScatter, StatefulCompressor, ring_reduce_scatter,
                                  wait_work)
from host.dear.fusion import CommModel, choose_threshold, efficiency_threshold, padded_numel, plan_groups
from host.dear.tuner import BayesTuner

__all__ = ["DeAR", "DeARError", "TunerConfig"]


class DeARError(RuntimeError):
    """A DeAR collective failed (e.g. a peer died), or DeAR was used against its contract."""


@dataclass
class TunerConfig:
    """Online Bayesian optimisation of the fusion threshold. ``lo_bytes``/``hi_bytes`` default to the smallest
    layer (one group per layer) and the whole model (one group)."""

    trials: int = 10
    window: int = 3  # iterations timed per trial
    settle: int = 1  # iterations skipped after a plan change (their forward still uses the old plan)
    n_init: int = 3
    lo_bytes: int | None = None
    hi_bytes: int | None = None
    seed: int = 0


@dataclass
class _Layer:
    name: str
    module: nn.Module
    own: list[nn.Parameter]  # trainable parameters registered directly on the module
    params: list[nn.Parameter]  # those assigned to it (a shared parameter goes to its first layer in forward order)
    nbytes: int = 0


class _Group:
    """One fusion group: its layers (forward positions), parameters, flat buffer and per-iteration state."""

    def __init__(self, index: int, layers: list[int], params: list[nn.Parameter], position: int, world: int,
                 dtype: torch.dtype, opt_index: dict[int, int], device: torch.device | None = None):
        self.index, self.layers, self.params, self.position = index, layers, params, position
        self.numels = [p.numel() for p in params]
        self.offsets = [0]
        for n in self.numels:
            self.offsets.append(self.offsets[-1] + n)
        self.numel = self.offsets[-1]
        self.flat = torch.zeros(padded_numel(self.numel, world), dtype=dtype, device=device)  # the params' device
        by_opt: dict[int, list[nn.Parameter]] = {}
        for p in params:
            by_opt.setdefault(opt_index[id(p)], []).append(p)
        self.by_opt = sorted(by_opt.items())
        self.filled = [False] * len(params)
        self.n_filled = 0
        self.launched = False
        self.rs_handle: Any = None
        self.rs_result: Any = None
        self.ag_handle: Any = None

    def reset(self) -> None:
        self.filled = [False] * len(self.params)
        self.n_filled = 0
        self.launched = False
        self.rs_handle = None

    @property
    def complete(self) -> bool:
        return self.n_filled == len(self.params)


class DeAR:
    """Wrap ``model`` and ``optimizer`` for DeAR data-parallel training over ``process_group``.

    Training loop (the same as plain training with ``dear.step()`` for ``optimizer.step()``)::

        dear = DeAR(model, torch.optim.AdamW(model.parameters(), lr=1e-3))
        for x, y in data:
            optimizer.zero_grad()
            loss_fn(dear(x), y).backward()
            dear.step()
        dear.flush()                     # before evaluating or saving (state_dict() does it itself)

    Arguments: ``fusion`` = ``"auto"`` (cost model), ``"layers"`` (one group per layer) or a byte threshold;
    ``compressor``: a :class:`~host.dear.compressor.GroupCompressor` (default dense reduce-scatter/all-gather);
    ``average``: divide gradients by the world size; ``max_grad_norm``: clip by global norm; ``loss_bound``: the
    fraction of each reduce-scatter the dlcp backend may zero-fill (dlcp only; all-gathers are always exact);
    ``tune``: True or a :class:`TunerConfig` for online Bayesian optimisation of the threshold;
    ``broadcast_init``: copy rank 0's parameters and buffers to every rank at construction (as DDP does);
    ``measure_iters``: iterations timed for the ``"auto"`` cost model; ``comm_model``: skip the probe and use this;
    ``reduce_scatter``: ``"ring"`` (a ring over isend/irecv on a worker thread), ``"native"`` (the backend's
    ``reduce_scatter_single``) or ``"auto"``: ring on gloo, whose own reduce-scatter moves a whole all-reduce's
    bytes, native elsewhere (dlcp's is a ring and takes the group's priority and loss bound); ``prefetch``:
    all-gathers in flight ahead of the forward pass (1 = DeAR's chain: group g+1's starts when group g's forward
    is due; k: ``step()`` starts groups 0..k-1 and each pre-hook the one k ahead); ``broadcast_buffers``: rank 0's
    buffers to every rank at the start of each training forward, as DDP does; ``find_unused_parameters``: None
    (default) = walk the autograd graph for parameters the forward did not use once an iteration had some, True =
    always, False = never (unused parameters then hold their group back until ``step()``); ``timeout``: seconds
    any wait for a collective may take before :class:`DeARError` (None: the process group's own timeout).
    """

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, process_group=None, *,
                 fusion: str | int = "auto", compressor: GroupCompressor | None = None, average: bool = True,
                 max_grad_norm: float | None = None, loss_bound: float = 0.0, tune: bool | TunerConfig = False,
                 broadcast_init: bool = True, measure_iters: int = 2, comm_model: CommModel | None = None,
                 reduce_scatter: str = "auto", prefetch: int = 1, broadcast_buffers: bool = True,
                 find_unused_parameters: bool | None = None, timeout: float | None = None):
        if not dist.is_initialized():
            raise DeARError("DeAR needs torch.distributed initialised (dist.init_process_group) first")
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
        if not (fusion in ("auto", "layers") or (isinstance(fusion, int) and not isinstance(fusion, bool)
                                                 and fusion >= 0)):
            raise ValueError(f"fusion must be 'auto', 'layers' or a byte threshold >= 0, got {fusion!r}")
        if max_grad_norm is not None and not max_grad_norm > 0:
            raise ValueError(f"max_grad_norm must be > 0, got {max_grad_norm}")
        if not 0.0 <= loss_bound < 1.0:
            raise ValueError(f"loss_bound must be in [0, 1), got {loss_bound}")
        if not (isinstance(prefetch, int) and prefetch >= 1):
            raise ValueError(f"prefetch must be an int >= 1, got {prefetch!r}")
        self.prefetch = prefetch
        if timeout is not None and not timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds or None, got {timeout!r}")
        if find_unused_parameters not in (None, True, False):
            raise ValueError(f"find_unused_parameters must be None, True or False, got {find_unused_parameters!r}")
        self.timeout = timeout
        self.broadcast_buffers = broadcast_buffers
        self.find_unused_parameters = find_unused_parameters
        self._track_unused = find_unused_parameters is True
        self._reachable: set[int] | None = None  # parameters reachable from this iteration's forward outputs
        self._prefilled: set[int] = set()  # parameters counted complete at backward start (unreachable)
        self._timeout_ok: dict[type, bool] = {}
        self._wait_timeout: float | None = None  # flush(timeout=...) for the waits it makes
        if measure_iters < 1:
            raise ValueError(f"measure_iters must be >= 1, got {measure_iters}")
        self.model, self.optimizer, self.process_group = model, optimizer, process_group
        self.world = dist.get_world_size(process_group)
        self.rank = dist.get_rank(process_group)
        self.backend = str(dist.get_backend(process_group))
        if loss_bound > 0 and self.backend != "dlcp":
            raise ValueError(f"loss_bound > 0 needs the dlcp backend; this process group runs {self.backend!r}")
        self.loss_bound, self.average, self.max_grad_norm = loss_bound, average, max_grad_norm
        # what bounded loss did to each fusion group's reduce-scatter (host.collectives.LossStats; take() per step)
        self.loss_stats = LossStats()
        self.fusion = fusion
        if compressor is not None:
            if not isinstance(compressor, GroupCompressor):
                raise TypeError("compressor must have start_reduce_scatter() and start_all_gather() "
                                "(host.dear.GroupCompressor)")
            if max_grad_norm is not None and not isinstance(compressor, ClippableCompressor):
                raise ValueError("max_grad_norm with a compressor needs its local_sq_norm() and scale() "
                                 "(host.dear.ClippableCompressor)")
        if reduce_scatter not in ("auto", "native", "ring"):
            raise ValueError(f"reduce_scatter must be 'auto', 'native' or 'ring', got {reduce_scatter!r}")
        use_ring = reduce_scatter == "ring" or (reduce_scatter == "auto" and self.backend == "gloo")
        self.reduce_scatter = "ring" if use_ring else "native"
        self._comp: GroupCompressor = compressor or DenseCompressor(
            self.world, self._priority_scope(),
            RingReduceScatter(process_group, self.rank, self.world) if use_ring else None)

        # layers: modules with trainable parameters of their own, in registration order
        self._layers: list[_Layer] = []
        for name, m in model.named_modules():
            own = [p for p in m.parameters(recurse=False) if p.requires_grad]
            if own:
                self._layers.append(_Layer(name or "<root>", m, own, []))
        trainable = {id(p): p for layer in self._layers for p in layer.own}
        if not trainable:
            raise ValueError("the model has no trainable parameters")
        dtypes = {p.dtype for p in trainable.values()}
        if len(dtypes) != 1 or not next(iter(dtypes)).is_floating_point:
            raise ValueError(f"DeAR needs every trainable parameter in one floating-point dtype, got {dtypes}")
        self._dtype = next(iter(dtypes))
        devices = {p.device for p in trainable.values()}
        if len(devices) != 1:  # one flat buffer per fusion group, on the parameters' device
            raise ValueError(f"DeAR needs every trainable parameter on one device, got {sorted(map(str, devices))}")
        self._opt_index: dict[int, int] = {}
        for j, grp in enumerate(optimizer.param_groups):
            for p in grp["params"]:
                if id(p) in self._opt_index:
                    raise ValueError("a parameter appears twice in the optimizer's param_groups")
                self._opt_index[id(p)] = j
        names = {id(p): n for n, p in model.named_parameters()}
        for pid, p in trainable.items():
            if pid not in self._opt_index:
                raise ValueError(f"trainable parameter {names.get(pid, '?')} is not in the optimizer")
        for pid in self._opt_index:
            if pid not in trainable:
                raise ValueError("the optimizer holds a parameter that is not a trainable parameter of the model")
        self._param_name = names
        self._trainable = trainable
        self._buffers = [b for b in model.buffers()]

        # schedule state
        self._order: list[int] | None = None  # forward order of layer indices, once known
        self._seen: list[int] = []  # layer indices in first-call order during the first forward
        self._seen_set: set[int] = set()
        self._n_uncalled = 0
        self._groups: list[_Group] = []
        self._group_of_layer: dict[int, int] = {}  # layer index -> group whose application covers it
        self._slot: dict[int, tuple[int, int]] = {}
        self._threshold: int | None = None
        self._next_threshold: int | None = None
        self._pending = False
        self._next_apply = 0
        self._launch_ptr = -1
        self._in_backward = False
        self._no_sync = False
        self._broken: str | None = None
        self._applying = False  # DeAR itself is calling optimizer.step() (one fusion group's update)
        self._hp_snapshot: list[dict[str, Any]] = []
        self.last_grad_norm: float | None = None
        self.steps = 0
        self.skipped_steps = 0  # steps skipped for inf/NaN gradients (step(scaler))

        # cost model / tuner
        self.comm_model: CommModel | None = comm_model
        self.cost_table: list[tuple[int, int, float]] = []
        self._measure_iters = measure_iters if fusion == "auto" else 0
        self._fwd_t: list[dict[int, tuple[float, float]]] = []
        self._fwd_end: float | None = None
        self._ready_t: dict[int, float] = {}
        self._layer_left: dict[int, int] = {}
        self._times: list[tuple[list[float], list[float]]] = []
        self._last_step_t: float | None = None
        self.tuner_cfg = TunerConfig() if tune is True else (tune or None)
        self.tuner: BayesTuner | None = None
        self._tune_x: float | None = None
        self._tune_samples: list[float] = []
        self._tune_iter = 0
        self.tuning = False
        self.tune_history: list[tuple[int, float]] = []  # (threshold, seconds per iteration), rank 0's view

        if broadcast_init and self.world > 1:
            self._broadcast_state()
        if fusion == "auto" and self.comm_model is None:
            from host.dear.probe import probe_comm
            total = sum(p.numel() * p.element_size() for p in trainable.values())
            ring = None
            if self.reduce_scatter == "ring":
                ring = lambda f, s: ring_reduce_scatter(f, s, process_group, self.rank, self.world)  # noqa: E731
            self.comm_model = probe_comm(process_group, self.world, max_bytes=total, dtype=self._dtype,
                                         reduce_scatter=ring)

        self._handles: list[Any] = [model.register_forward_pre_hook(self._root_pre_hook)]  # before the root's own
        for i, layer in enumerate(self._layers):
            self._handles.append(layer.module.register_forward_pre_hook(self._make_pre_hook(i)))
        self._handles.append(model.register_forward_hook(self._root_post_hook))
        for p in trainable.values():
            self._handles.append(p.register_post_accumulate_grad_hook(self._on_grad))
        # optimizer.step() called by the user instead of dear.step(): an error at that call, before any update
        self._handles.append(optimizer.register_step_pre_hook(self._on_optimizer_step))
        self._handles.append(model.register_state_dict_pre_hook(lambda *a, **k: self.flush()))
        self._handles.append(optimizer.register_state_dict_pre_hook(lambda *a, **k: self.flush()))

    # ------------------------------------------------------------------------------------------------ public API
    def __call__(self, *args, **kwargs):
        return self.model(*args, **kwargs)

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none=set_to_none)

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """Backward passes inside accumulate gradients locally (in ``.grad``) without communicating; the next
        backward outside (or ``step()``) exchanges the accumulated sum."""
        old, self._no_sync = self._no_sync, True
        try:
            yield
        finally:
            self._no_sync = old

    def step(self, scaler: "torch.amp.GradScaler | None" = None) -> None:
        """Finish the gradient exchange's first half and start the second; the update is applied in the next
        forward (or ``flush()``).

        ``scaler``: the ``torch.amp.GradScaler`` that scaled the loss; ``dear.step(scaler)`` then stands for
        ``scaler.step(optimizer)`` (call ``scaler.update()`` after it, as with DDP). The averaged gradient shards
        are unscaled through ``scaler.unscale_`` (so the scaler records the inf check), after one all-reduce of a
        non-finite flag so that every rank sees the same verdict; on inf/NaN the step is skipped on every rank (no
        all-gather, no optimizer step: the parameters and the optimizer's state stay as they are), as
        ``scaler.step`` skips ``optimizer.step()`` under DDP. Clipping (``max_grad_norm``) applies to the
        unscaled gradient. Needs a compressor whose reduce-scatter result is a dense shard (the default)."""
        self._check_usable()
        now = time.perf_counter()
        if self._order is None:
            self._freeze_order()
        self.flush()
        if not self._in_backward and self._next_threshold is not None:
            self._install_plan(self._next_threshold)
        G = len(self._groups)
        # groups some parameters of which got no gradient this iteration (or all accumulated under no_sync)
        backward_ran = self._in_backward
        for g in range(self._launch_ptr, -1, -1):
            grp = self._groups[g]
            for slot, p in enumerate(grp.params):
                if not grp.filled[slot]:
                    self._copy_in(grp, slot, p.grad)
                    if backward_ran and self.find_unused_parameters is None:
                        self._track_unused = True  # from now on: find them from the graph at backward start
            self._launch(g)
        self._launch_ptr = -1
        for g in range(G - 1, -1, -1):
            grp = self._groups[g]
            grp.rs_result = self._wait(grp.rs_handle, f"reduce-scatter of fusion group {g}")
        if scaler is not None and self._unscale(scaler):
            self.skipped_steps += 1
            self.steps += 1
            self._bookkeeping(now)
            for grp in self._groups:
                grp.reset()
                grp.rs_result = None
            self._launch_ptr = G - 1
            self._in_backward = False
            self._reachable = None
            self._prefilled = set()
            return
        if self.max_grad_norm is not None:
            self._clip()
        self._hp_snapshot = [{k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in d.items()
                              if k != "params"} for d in self.optimizer.param_groups]
        self.steps += 1
        # this is the optimizer's step (deferred): tell LR schedulers so, or they warn that they stepped first
        self.optimizer._opt_called = True  # type: ignore[attr-defined]
        self._bookkeeping(now)  # may issue a small collective (tuner): before the all-gathers, same on all ranks
        for grp in self._groups:
            grp.reset()
        self._launch_ptr = G - 1
        self._in_backward = False
        self._reachable = None
        self._prefilled = set()
        self._pending, self._next_apply = True, 0
        for g in range(self.prefetch):
            self._start_ag(g)

    def flush(self, timeout: float | None = None) -> None:
        """Apply every pending update now (before evaluation or checkpointing).

        Collective-safe: it waits for the all-gathers of the last ``step()`` and issues the remaining ones in the
        order every rank's next forward (or flush) issues them, so ranks may flush at different points. Each wait
        lasts at most ``timeout`` seconds (default: the constructor's ``timeout``); a peer that never issues its
        side (it exited, or stopped without a forward or flush) gives :class:`DeARError` then, not a hang."""
        if not self._pending:
            return
        self._check_usable()
        self._wait_timeout = timeout
        try:
            self._ensure(len(self._groups) - 1)
        except DeARError as e:
            if self._broken is None or "did not complete" not in self._broken:
                raise
            raise DeARError(f"{e} (flush() waits for the same all-gathers on every rank: each rank must call "
                            "flush() or run a forward pass after its last step())") from e
        finally:
            self._wait_timeout = None

    def state_dict(self) -> dict[str, Any]:
        """``{"model", "optimizer", "dear"}`` after flushing, loadable by :meth:`load_state_dict` (the first two
        by the plain model/optimizer too). ``"dear"`` holds the forward order, the plan in force, the cost model,
        the tuner's state and the compressor's (error-feedback residuals, if it keeps any), so a run resumed from
        it continues as the uninterrupted run would."""
        self.flush()
        dear: dict[str, Any] = {"threshold": self._threshold, "next_threshold": self._next_threshold,
                                "steps": self.steps, "track_unused": self._track_unused,
                                "order": self.forward_order, "n_uncalled": self._n_uncalled,
                                "comm_model": None if self.comm_model is None else self.comm_model.as_list(),
                                "tuning": self.tuning, "tune_x": self._tune_x,
                                "tune_samples": list(self._tune_samples), "tune_iter": self._tune_iter,
                                "tune_history": list(self.tune_history),
                                "tuner": None if self.tuner is None else self.tuner.state_dict(),
                                "layouts": [[(s.name, s.offset, s.numel) for s in lay.params]
                                            for lay in self.layouts()]}
        if isinstance(self._comp, StatefulCompressor):
            dear["compressor"] = self._comp.state_dict()
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(), "dear": dear}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Load a :meth:`state_dict` (on every rank, before or between iterations); a pending update is drained
        (its all-gathers awaited) and dropped. A checkpoint of the model and optimizer only (no ``"dear"``) is
        accepted too: the plan and cost model then start afresh."""
        self._check_usable()
        if self._pending:
            for k in range(self._next_apply, len(self._groups)):
                self._wait(self._groups[k].ag_handle, f"all-gather of fusion group {k}")
                self._start_ag(k + self.prefetch)
            self._pending = False
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        d = state.get("dear")
        if not d:
            return
        if d.get("order") is not None:
            by_name = {layer.name: i for i, layer in enumerate(self._layers)}
            missing = [n for n in d["order"] if n not in by_name]
            if missing or len(d["order"]) != len(self._layers):
                raise ValueError(f"DeAR checkpoint: its layers {d['order']} are not this model's "
                                 f"{[la.name for la in self._layers]}")
            order = [by_name[n] for n in d["order"]]
            if self._order is None or self._order != order:
                self._set_order(order, int(d.get("n_uncalled", 0)))
        if d.get("comm_model") is not None:
            self.comm_model = CommModel(*d["comm_model"])
        self.steps = int(d.get("steps", self.steps))
        self._track_unused = bool(d.get("track_unused", self._track_unused)) or self.find_unused_parameters is True
        if self.find_unused_parameters is False:
            self._track_unused = False
        self.tune_history = [tuple(h) for h in d.get("tune_history", [])]
        self.tuning = bool(d.get("tuning", False)) and self.tuner_cfg is not None
        self._tune_x = d.get("tune_x")
        self._tune_samples = list(d.get("tune_samples", []))
        self._tune_iter = int(d.get("tune_iter", 0))
        if d.get("tuner") is not None and self.tuner_cfg is not None:
            cfg = self.tuner_cfg
            self.tuner = BayesTuner(0.0, 1.0, n_init=cfg.n_init, seed=cfg.seed)
            self.tuner.load_state_dict(d["tuner"])
        self.tuning = self.tuning and self.tuner is not None and self._tune_x is not None
        if self._order is not None:
            thr = d.get("threshold")
            if thr is not None and (thr != self._threshold or not self._groups):
                self._install_plan(int(thr))
            self._next_threshold = d.get("next_threshold")
        self._last_step_t = None
        if "compressor" in d:
            if not isinstance(self._comp, StatefulCompressor):
                raise ValueError("DeAR checkpoint holds compressor state, but this DeAR's compressor has no "
                                 "load_state_dict()")
            self._comp.load_state_dict(d["compressor"])

    def layouts(self) -> list[GroupLayout]:
        """The plan in force as :class:`~host.dear.compressor.GroupLayout` (what each group's buffer holds)."""
        out = []
        for grp in self._groups:
            slots = tuple(ParamSlot(self._param_name.get(id(p), f"<param {k}>"), off, n)
                          for k, (p, off, n) in enumerate(zip(grp.params, grp.offsets, grp.numels)))
            out.append(GroupLayout(grp.index, slots, grp.flat.numel()))
        return out

    def close(self) -> None:
        """Flush and remove every hook; the model and optimizer are plain again."""
        if self._broken is None:
            self.flush()
        for h in self._handles:
            h.remove()
        self._handles.clear()
        if isinstance(self._comp, DenseCompressor):
            self._comp.close()

    @property
    def forward_order(self) -> list[str] | None:
        """Names of the parameter-owning modules in the order the plan uses (None before the first forward)."""
        return None if self._order is None else [self._layers[i].name for i in self._order]

    @property
    def plan(self) -> list[list[str]]:
        """The fusion groups as lists of module names."""
        return [[self._layers[self._order[i]].name for i in grp.layers] for grp in self._groups] \
            if self._order is not None else []

    @property
    def threshold(self) -> int | None:
        """The byte threshold of the plan in force (0 = one group per layer); a change decided at ``step()`` (cost
        model, tuner) is reported at once and takes effect at the next backward pass."""
        return self._next_threshold if self._next_threshold is not None else self._threshold

    # ------------------------------------------------------------------------------------------------ hooks
    def _make_pre_hook(self, layer_index: int):
        def hook(module, args):
            self._check_usable()
            t0 = time.perf_counter()
            if self._order is None and layer_index not in self._seen_set:
                self._seen.append(layer_index)
                self._seen_set.add(layer_index)
            if self._pending:
                g = self._group_of_layer.get(layer_index, -1)
                if g >= 0:
                    self._ensure(g)
            if self._measuring() and not self._in_backward:
                rec = self._fwd_t[-1] if self._fwd_t else None
                if rec is not None and layer_index not in rec:
                    rec[layer_index] = (t0, time.perf_counter())
            return None
        return hook

    def _root_pre_hook(self, module, args):
        self._check_usable()
        if self.broadcast_buffers and self._buffers and self.world > 1 and torch.is_grad_enabled() \
                and not self._no_sync:
            self._broadcast_tensors(self._buffers, "buffer broadcast")
        if self._measuring():
            self._fwd_t.append({})
        if self._pending and self._n_uncalled:
            # layers never seen in a forward come first in the order: apply them before anything runs
            self._ensure(self._group_of_layer.get(self._order[self._n_uncalled - 1], -1))
        return None

    def _root_post_hook(self, module, args, output):
        if self._measuring():
            self._fwd_end = time.perf_counter()
        if self._track_unused and torch.is_grad_enabled() and not self._no_sync:
            found = _reachable_params(output)
            self._reachable = found if self._reachable is None else self._reachable | found
        return None

    def _on_grad(self, p: torch.Tensor) -> None:
        if self._no_sync:
            return
        self._check_usable()
        if not self._in_backward:
            self._begin_backward()
        g, slot = self._slot[id(p)]
        grp = self._groups[g]
        if grp.launched:
            if id(p) in self._prefilled:
                raise DeARError(f"gradient of {self._param_name.get(id(p), '?')} arrived, but the forward's output "
                                "does not reach it (it is used outside the model's forward): pass "
                                "find_unused_parameters=False")
            raise DeARError(f"gradient of {self._param_name.get(id(p), '?')} arrived after fusion group {g} was "
                            "already sent: one backward per step() (accumulate with no_sync())")
        self._copy_in(grp, slot, p.grad)
        if self._measuring():
            li = self._layer_of_param[id(p)]
            self._layer_left[li] -= 1
            if self._layer_left[li] == 0:
                self._ready_t[li] = time.perf_counter()
        self._launch_ready()

    def _on_optimizer_step(self, optimizer, args, kwargs) -> None:
        """The optimizer's step pre-hook: DeAR's own group updates pass; a step the user calls (the common mistake
        of ``optimizer.step()`` for ``dear.step()``, or ``scaler.step(optimizer)``) fails here, before it changes
        any parameter, naming the fix. (Left alone it would update each rank with its own unaveraged gradients,
        and the next backward would fail on a fusion group never exchanged.)"""
        if self._applying:
            return None
        raise DeARError("optimizer.step() was called on the optimizer DeAR wraps: call dear.step() instead "
                        "(dear.step(scaler) for scaler.step(optimizer)). DeAR averages the gradients across ranks "
                        "and applies the update itself, group by group, in the next forward; optimizer.step() "
                        "would update this rank's parameters with its own gradients alone. (dear.close() makes "
                        "the optimizer plain again.)")

    # ------------------------------------------------------------------------------------------------ internals
    def _priority_scope(self):
        if self.backend != "dlcp":
            return None
        from host.backend import loss_bound_scope

        return lambda g: loss_bound_scope(self.loss_bound, self._groups[g].position, stats=self.loss_stats)

    def _check_usable(self) -> None:
        if self._broken is not None:
            raise DeARError(f"DeAR is unusable after an earlier failure: {self._broken}")

    def _measuring(self) -> bool:
        return self.steps < self._measure_iters

    def _broadcast_state(self) -> None:
        self._broadcast_tensors([p.data for p in self.model.parameters()] + list(self.model.buffers()),
                                "initial broadcast")

    def _broadcast_tensors(self, tensors: list[torch.Tensor], what: str) -> None:
        """Rank 0's values of ``tensors`` to every rank, one broadcast per dtype."""
        by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
        for t in tensors:
            by_dtype.setdefault(t.dtype, []).append(t)
        src = dist.get_global_rank(self.process_group, 0) if self.process_group is not None else 0
        for ts in by_dtype.values():
            flat = torch.cat([t.detach().reshape(-1) for t in ts])
            w = dist.broadcast(flat, src=src, group=self.process_group, async_op=True)
            self._wait(_WorkWait(w), what)
            pos = 0
            with torch.no_grad():
                for t in ts:
                    t.copy_(flat[pos:pos + t.numel()].view_as(t))
                    pos += t.numel()

    def _freeze_order(self) -> None:
        """Fix the forward order (first forward's first calls; never-called layers first, registration order),
        check every rank agrees, assign shared parameters, and build the first plan."""
        uncalled = [i for i in range(len(self._layers)) if i not in self._seen_set]
        order = uncalled + self._seen
        names = "\n".join(self._layers[i].name for i in order)
        h = zlib.crc32(names.encode())
        chk = torch.tensor([h, -h], dtype=torch.int64)
        dist.all_reduce(chk, op=dist.ReduceOp.MAX, group=self.process_group)
        if int(chk[0]) != h or int(chk[1]) != -h:
            raise DeARError("ranks disagree on the forward order of the model's layers (different models or "
                            "data-dependent control flow in the first iteration)")
        thr = self._set_order(order, len(uncalled))
        if self.tuner_cfg is not None and self.fusion != "auto":
            self._start_tuning(thr)

    def _set_order(self, order: list[int], n_uncalled: int) -> int:
        """Fix the forward order, assign shared parameters to their first layer, install the initial plan;
        returns its threshold."""
        self._order, self._n_uncalled = order, n_uncalled
        taken: set[int] = set()
        self._layer_of_param: dict[int, int] = {}
        for i in order:
            layer = self._layers[i]
            layer.params = [p for p in layer.own if id(p) not in taken]
            taken.update(id(p) for p in layer.params)
            layer.nbytes = sum(p.numel() * p.element_size() for p in layer.params)
            for p in layer.params:
                self._layer_of_param[id(p)] = i
        if self.fusion == "layers":
            thr = 0
        elif isinstance(self.fusion, int):
            thr = self.fusion
        else:  # auto: before compute times are measured, the size at which collectives reach 90% efficiency
            assert self.comm_model is not None
            thr = efficiency_threshold(self.comm_model)
        self._install_plan(thr)
        return thr

    def _layer_bytes(self) -> list[int]:
        assert self._order is not None
        return [self._layers[i].nbytes for i in self._order]

    def _plan_for(self, threshold: int) -> list[list[int]]:
        """Groups of forward positions; layers without parameters of their own are left out of the cut."""
        lb = self._layer_bytes()
        nonempty = [pos for pos, b in enumerate(lb) if b > 0]
        cut = plan_groups([lb[pos] for pos in nonempty], threshold)
        return [[nonempty[k] for k in grp] for grp in cut]

    def _install_plan(self, threshold: int) -> None:
        assert self._order is not None and not self._pending
        plan = self._plan_for(threshold)
        self._groups = []
        self._slot = {}
        self._group_of_layer = {}
        for g, positions in enumerate(plan):
            params = [p for pos in positions for p in self._layers[self._order[pos]].params]
            grp = _Group(g, positions, params, positions[0], self.world, self._dtype, self._opt_index,
                         params[0].device if params else None)
            self._groups.append(grp)
            for slot, p in enumerate(params):
                self._slot[id(p)] = (g, slot)
        covering = {pos: grp.index for grp in self._groups for pos in grp.layers}
        g = -1
        for pos, li in enumerate(self._order):  # a layer whose parameters all belong to an earlier layer is
            g = covering.get(pos, g)             # covered by the group before it
            self._group_of_layer[li] = g
        self._threshold = threshold
        self._next_threshold = None
        self._launch_ptr = len(self._groups) - 1
        if isinstance(self._comp, ReplannableCompressor):  # nothing is in flight: re-key per-group state now
            self._comp.replan(self.layouts())

    def _begin_backward(self) -> None:
        self._in_backward = True
        if self._order is None:
            self._freeze_order()
        self.flush()
        if self._next_threshold is not None:
            self._install_plan(self._next_threshold)
        if self._measuring():
            self._ready_t = {}
            self._layer_left = {i: len(self._layers[i].params) for i in self._order or []}
        if self._track_unused and self._reachable is not None:
            # parameters the forward's output cannot reach get no gradient in this backward: count them
            # complete now (what they hold: zero, or what no_sync() accumulated) so their groups can launch
            for pid, p in self._trainable.items():
                if pid not in self._reachable:
                    g, slot = self._slot[pid]
                    self._copy_in(self._groups[g], slot, p.grad)
                    self._prefilled.add(pid)
            self._reachable = None
            self._launch_ready()

    def _launch_ready(self) -> None:
        """Launch every complete group from the top down, stopping at the first incomplete one."""
        while self._launch_ptr >= 0 and self._groups[self._launch_ptr].complete:
            self._launch(self._launch_ptr)
            self._launch_ptr -= 1

    def _copy_in(self, grp: _Group, slot: int, grad: torch.Tensor | None) -> None:
        view = grp.flat[grp.offsets[slot]:grp.offsets[slot + 1]]
        if grad is None:
            view.zero_()
        elif self.average and self.world > 1:
            torch.mul(grad.detach().reshape(-1), 1.0 / self.world, out=view)
        else:
            view.copy_(grad.detach().reshape(-1))
        if not grp.filled[slot]:
            grp.filled[slot] = True
            grp.n_filled += 1

    def _launch(self, g: int) -> None:
        grp = self._groups[g]
        grp.flat[grp.numel:].zero_()
        try:
            grp.rs_handle = self._comp.start_reduce_scatter(g, grp.flat, self.process_group)
        except Exception as e:
            self._broken = f"reduce-scatter of fusion group {g} could not start: {e}"
            raise DeARError(f"DeAR rank {self.rank}: {self._broken}") from e
        grp.launched = True

    def _start_ag(self, g: int) -> None:
        if g >= len(self._groups):
            return
        grp = self._groups[g]
        try:
            grp.ag_handle = self._comp.start_all_gather(g, grp.rs_result, self.process_group)
        except Exception as e:
            self._broken = f"all-gather of fusion group {g} could not start: {e}"
            raise DeARError(f"DeAR rank {self.rank}: {self._broken}") from e

    def _wait(self, handle, what: str):
        timeout = self._wait_timeout if self._wait_timeout is not None else self.timeout
        try:
            if timeout is not None and self._takes_timeout(handle):
                return handle.wait(timeout=timeout)
            return handle.wait()
        except Exception as e:
            if isinstance(e, concurrent.futures.TimeoutError) or "timed out" in str(e).lower():
                self._broken = f"{what} did not complete within {timeout}s ({type(e).__name__}: {e})"
            else:
                self._broken = f"{what} failed: {type(e).__name__}: {e}"
            raise DeARError(f"DeAR rank {self.rank}: {self._broken}") from e

    def _takes_timeout(self, handle) -> bool:
        ok = self._timeout_ok.get(type(handle))
        if ok is None:
            try:
                ok = "timeout" in inspect.signature(handle.wait).parameters
            except (TypeError, ValueError):
                ok = False
            self._timeout_ok[type(handle)] = ok
        return ok

    def _ensure(self, g: int) -> None:
        """Apply every pending group up to ``g`` in order (wait its all-gather, start the next, update)."""
        while self._pending and self._next_apply <= g:
            k = self._next_apply
            full = self._wait(self._groups[k].ag_handle, f"all-gather of fusion group {k}")
            self._next_apply = k + 1
            self._start_ag(k + self.prefetch)
            if k + 1 == len(self._groups):
                self._pending = False
            self._apply(k, full)

    def _apply(self, k: int, full) -> None:
        grp = self._groups[k]
        if not isinstance(full, torch.Tensor) or full.shape != grp.flat.shape:
            raise DeARError(f"the all-gather of fusion group {k} returned "
                            f"{getattr(full, 'shape', type(full).__name__)}, expected a tensor of shape "
                            f"{tuple(grp.flat.shape)}")
        opt = self.optimizer
        saved_grads = [p.grad for p in grp.params]
        all_groups = opt.param_groups
        saved: list[tuple[dict, list, dict]] = []
        try:
            with torch.inference_mode(False), torch.no_grad():
                for p, off, n in zip(grp.params, grp.offsets, grp.numels):
                    p.grad = full[off:off + n].view_as(p)
                sub = []
                for j, plist in grp.by_opt:
                    d = all_groups[j]
                    snap = self._hp_snapshot[j] if j < len(self._hp_snapshot) else {}
                    saved.append((d, d["params"], {key: d[key] for key in snap if key in d}))
                    d.update(snap)
                    d["params"] = plist
                    sub.append(d)
                opt.param_groups = sub
                self._applying = True
                opt.step()
        finally:
            self._applying = False
            opt.param_groups = all_groups
            for d, params, hp in saved:
                d["params"] = params
                d.update(hp)
            for p, gsaved in zip(grp.params, saved_grads):
                p.grad = gsaved

    def _unscale(self, scaler: "torch.amp.GradScaler") -> bool:
        """Unscale the reduced shards with ``scaler`` (it records the inf check); True: inf/NaN on some rank, the
        step is to be skipped (the same answer on every rank)."""
        if not scaler.is_enabled():
            return False
        shards = [grp.rs_result for grp in self._groups]
        if not all(isinstance(t, torch.Tensor) for t in shards):
            raise DeARError(f"DeAR.step(scaler): the compressor {type(self._comp).__name__} does not reduce to dense "
                            f"shards; a GradScaler needs the dense one")
        bad = torch.zeros(1, dtype=torch.float32)
        for t in shards:
            if t.numel() and not bool(torch.isfinite(t).all()):
                bad.fill_(1.0)
                break
        w = dist.all_reduce(bad, op=dist.ReduceOp.MAX, group=self.process_group, async_op=True)
        self._wait(_WorkWait(w), "non-finite gradient check all-reduce")
        found = bool(bad[0] > 0)
        # scaler.unscale_ walks optimizer.param_groups' .grad: stand-ins (no storage of their own) carry the shards,
        # and a one-element flag carries the agreed verdict, so the scaler's found_inf is the same on every rank
        carriers = []
        for t in shards + [torch.full((1,), math.inf if found else 0.0, dtype=shards[0].dtype
                                      if shards else torch.float32)]:
            c = torch.empty(1, dtype=t.dtype, device=t.device).expand(t.shape)
            c.grad = t
            carriers.append(c)
        opt, all_groups = self.optimizer, self.optimizer.param_groups
        try:
            opt.param_groups = [{**all_groups[0], "params": carriers}]
            scaler.unscale_(opt)
        finally:
            opt.param_groups = all_groups
        return found

    def _clip(self) -> None:
        comp = self._comp
        assert isinstance(comp, ClippableCompressor)
        local = sum(comp.local_sq_norm(g, grp.rs_result) for g, grp in enumerate(self._groups))
        t = torch.tensor([local], dtype=torch.float64)
        w = dist.all_reduce(t, group=self.process_group, async_op=True)
        self._wait(_WorkWait(w), "gradient-norm all-reduce")
        norm = math.sqrt(max(float(t[0]), 0.0))
        self.last_grad_norm = norm
        coef = self.max_grad_norm / (norm + 1e-6)  # the same formula as torch.nn.utils.clip_grad_norm_
        if coef < 1.0:
            for g, grp in enumerate(self._groups):
                grp.rs_result = comp.scale(g, grp.rs_result, coef)

    # ------------------------------------------------------------------------------------------------ cost model
    def _bookkeeping(self, now: float) -> None:
        """At every step(): record the iteration's layer times (auto), pick the cost-model plan when the
        measurement is complete, and advance the tuner."""
        dt = None if self._last_step_t is None else now - self._last_step_t
        self._last_step_t = now
        if self.fusion == "auto" and self.steps <= self._measure_iters:
            self._record_times()
            if self.steps == self._measure_iters:
                thr = self._choose_by_cost_model()
                if thr != self._threshold:
                    self._next_threshold = thr
                if self.tuner_cfg is not None:
                    self._start_tuning(thr)
                return
        if self.tuning and dt is not None:
            self._tune_step(dt)

    def _record_times(self) -> None:
        assert self._order is not None
        fwd_rec = self._fwd_t[-1] if self._fwd_t else {}
        end = self._fwd_end
        if not fwd_rec or end is None:
            return
        # forward: time from the end of a layer's pre-hook to the next called layer's pre-hook (or forward end)
        calls = sorted(fwd_rec.items(), key=lambda kv: kv[1][0])
        f = {li: 0.0 for li in self._order}
        for (li, (_, out)), nxt in zip(calls, calls[1:] + [(None, (end, end))]):
            f[li] = max(nxt[1][0] - out, 0.0)
        # backward: a layer's gradients complete after the next layer's (forward order), from forward end on
        b = {li: 0.0 for li in self._order}
        prev = end
        for li in reversed(self._order):
            t = self._ready_t.get(li)
            if t is None:
                continue
            b[li] = max(t - prev, 0.0)
            prev = max(prev, t)
        self._times.append(([f[li] for li in self._order], [b[li] for li in self._order]))
        self._fwd_t.clear()

    def _choose_by_cost_model(self) -> int:
        assert self.comm_model is not None and self._order is not None
        L = len(self._order)
        if self._times:
            f = [min(t[0][i] for t in self._times) for i in range(L)]
            b = [min(t[1][i] for t in self._times) for i in range(L)]
        else:
            f, b = [0.0] * L, [0.0] * L
        both = torch.tensor(f + b, dtype=torch.float64)
        dist.all_reduce(both, op=dist.ReduceOp.MAX, group=self.process_group)
        f, b = both[:L].tolist(), both[L:].tolist()
        lb = self._layer_bytes()
        keep = [i for i in range(L) if lb[i] > 0]
        # a parameterless layer's compute is charged to the layer before it
        fk, bk = [], []
        for i in range(L):
            if lb[i] > 0 or not fk:
                fk.append(f[i])
                bk.append(b[i])
            else:
                fk[-1] += f[i]
                bk[-1] += b[i]
        fk, bk = fk[:len(keep)], bk[:len(keep)]
        esize = torch.empty(0, dtype=self._dtype).element_size()
        thr, _, table = choose_threshold([lb[i] for i in keep], fk, bk, self.comm_model, self.world, esize)
        self.cost_table = table
        self.layer_times = (f, b)
        return thr

    # ------------------------------------------------------------------------------------------------ tuner
    def _plan_key(self, x: float) -> tuple[int, ...]:
        return tuple(len(g) for g in self._plan_for(int(2 ** x)))

    def _start_tuning(self, x0_threshold: int) -> None:
        cfg = self.tuner_cfg
        assert cfg is not None
        lb = [b for b in self._layer_bytes() if b > 0]
        lo = math.log2(max(cfg.lo_bytes or min(lb), 1))
        hi = math.log2(max(cfg.hi_bytes or sum(lb), 1))
        x0 = math.log2(max(x0_threshold, 1))
        self.tuner = BayesTuner(lo, max(hi, lo), n_init=cfg.n_init, x0=min(max(x0, lo), hi), seed=cfg.seed)
        self._tune_x = x0
        self._tune_samples, self._tune_iter = [], 0
        self.tuning = True

    def _tune_step(self, dt: float) -> None:
        cfg, tuner = self.tuner_cfg, self.tuner
        assert cfg is not None and tuner is not None and self._tune_x is not None
        self._tune_iter += 1
        if self._tune_iter <= cfg.settle:
            return
        self._tune_samples.append(dt)
        if len(self._tune_samples) < cfg.window:
            return
        msg = torch.zeros(2, dtype=torch.float64)  # [done, x]
        if self.rank == 0:
            y = statistics.median(self._tune_samples)
            tuner.tell(self._tune_x, y, key=self._plan_key(self._tune_x))
            self.tune_history.append((int(2 ** self._tune_x), y))
            nxt = tuner.ask(self._plan_key) if len(tuner.xs) < cfg.trials else None
            if nxt is None:
                msg[0], msg[1] = 1.0, tuner.best()[0]
            else:
                msg[1] = nxt
        src = dist.get_global_rank(self.process_group, 0) if self.process_group is not None else 0
        w = dist.broadcast(msg, src=src, group=self.process_group, async_op=True)
        self._wait(_WorkWait(w), "tuner broadcast")
        self._tune_x = float(msg[1])
        thr = int(2 ** self._tune_x)
        if self._plan_for(thr) != self._plan_for(self.threshold or 0):
            self._next_threshold = thr  # rebuilt at the next backward
        elif self._next_threshold is not None:
            self._next_threshold = thr
        else:
            self._threshold = thr  # the same plan: nothing to rebuild
        self._tune_samples, self._tune_iter = [], 0
        if msg[0] == 1.0:
            self.tuning = False


class _WorkWait:
    """A bare torch.distributed Work as a handle whose wait takes a timeout in seconds."""

    def __init__(self, work):
        self._work = work

    def wait(self, timeout: float | None = None) -> None:
        wait_work(self._work, timeout)


def _reachable_params(output: Any) -> set[int]:
    """ids of the leaf tensors (parameters) the autograd graph of ``output``'s tensors reaches, as DDP's
    ``find_unused_parameters`` finds them: every ``AccumulateGrad`` node behind the outputs' ``grad_fn``."""
    stack: list[Any] = []
    todo = [output]
    found: set[int] = set()
    while todo:
        o = todo.pop()
        if isinstance(o, torch.Tensor):
            if o.grad_fn is not None:
                stack.append(o.grad_fn)
            elif o.requires_grad:
                found.add(id(o))
        elif isinstance(o, (list, tuple)):
            todo.extend(o)
        elif isinstance(o, dict):
            todo.extend(o.values())
    seen: set[Any] = set()
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        var = getattr(node, "variable", None)
        if var is not None:
            found.add(id(var))
        for nxt, _ in node.next_functions:
            if nxt is not None and nxt not in seen:
                stack.append(nxt)
    return found
