"""One training worker of a testbed run: ``python -m testbed.worker SPEC_JSON OUT_JSON``.

Started by :mod:`testbed.run` inside a host's network namespace with torchrun's environment (``MASTER_ADDR``,
``MASTER_PORT``, ``RANK``, ``WORLD_SIZE``). Trains ``spec.model`` on its shard of ``spec.dataset`` with the
spec's algorithm and writes a results JSON: per-iteration start time and duration, loss, test accuracy at every
evaluation, and the dlcp transport counters. Progress goes to stdout, one line per step (``step I/N loss L``), so
the orchestrator can drive a progress bar.

Algorithms:

* ``ddp-gloo``: ``DistributedDataParallel`` over the gloo backend (TCP), the baseline.
* ``dlcp-allreduce``: DDP over the dlcp backend with :func:`host.hooks.dlcp_allreduce_hook` (layer priorities,
  the spec's loss bound).
* ``dear``: :class:`host.dear.DeAR` over the dlcp backend (reduce-scatter in backward, all-gather in the next
  forward) with the loss bound on the gradient reduce-scatters.
* ``dear-gloo``: the same DeAR over the gloo backend (exact; its ring reduce-scatter over isend/irecv), so
  DeAR's overlap and DLCP's network mechanisms can be told apart.
* ``spardl``: DDP over dlcp with the SparDL comm hook at ``spec.density``.
* ``topk-allgather``: DDP over dlcp with a top-k all-gather comm hook at ``spec.density`` (every rank's top-k
  reaches every rank: :func:`host.spardl.baselines.topk_allgather`, the baseline SparDL is measured against),
  with the same selection, error feedback and dense warm-up steps as the SparDL hook.
* ``spardl-gloo``, ``topk-allgather-gloo``: the same two over the gloo backend (their exchanges are isend/irecv),
  so the sparse algorithms can be compared without the dlcp transport.
* ``acid`` does not come here: :meth:`testbed.run.Testbed.run_acid` starts A²CiD²'s own trainer
  (``python -m host.acid train``, the library), whose workers have no global step.

Emulated compute (``spec.compute_ms``): every parameterised layer sleeps its share of the step, a third of it in
forward and two thirds in backward (as an accelerator's kernels would take, leaving the CPU to communication), so
an algorithm that overlaps communication with computation (DeAR) has something to hide behind.

Compute time: before training, every worker times a few forward/backward passes of its model on its own (no
communication, no parameter update, emulated compute included) and reports the median as ``compute_s``, so the
summary can state how communication compares with computation.

Communication per step (:mod:`testbed.colltime`): every collective call made in a step, with its completion time
as this worker saw it (``collectives`` in the record), and per iteration ``rto``: the retransmission timeouts that
fired on this rank during it (the dlcp transport's and this namespace's TCP's). So that DDP over Gloo's bucket
all-reduces can be timed like the others, ``ddp-gloo`` registers torch's own ``allreduce_hook`` (the same
all-reduce and division by the world size as DDP's built-in path, called from Python).

Replicas: at the end every rank's parameters are compared bit for bit (a digest all-gathered):
``replicas_identical`` in the record.

Stopping: after ``spec.steps`` steps, or at the first evaluation reaching ``spec.target_accuracy`` (rank 0
decides and broadcasts the decision, so every rank stops at the same step) unless ``spec.stop_at_target`` is false.
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed as dist
from torch import nn

from .colltime import CollectiveTimer, rto_count
from .data import load, shard
from .models import build
from .spec import RunSpec, spec_from_json, spec_to_json

__all__ = ["main", "spec_from_json", "spec_to_json"]


def _optimizer(spec: RunSpec, params) -> torch.optim.Optimizer:
    if spec.optimizer == "sgd":
        return torch.optim.SGD(params, lr=spec.lr, momentum=spec.momentum)
    if spec.optimizer == "adam":
        return torch.optim.Adam(params, lr=spec.lr)
    return torch.optim.AdamW(params, lr=spec.lr)


def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    model.eval()
    with torch.no_grad():
        correct = (model(x).argmax(1) == y).sum().item()
    model.train()
    return correct / max(1, len(y))


class Trainer:
    """A training algorithm: ``step(x, y) -> loss`` and ``eval_model()`` (the model as it should be evaluated)."""

    def __init__(self, spec: RunSpec, model: nn.Module):
        self.spec = spec
        self.model = model
        self.loss_fn = nn.CrossEntropyLoss()

    def step(self, x: torch.Tensor, y: torch.Tensor) -> float:
        raise NotImplementedError

    def eval_model(self) -> nn.Module:
        return self.model

    def loss_step(self) -> dict[str, float]:
        """What bounded loss did in the last step: ``{elements, zero_filled, ...}`` (host.collectives.LossStats)."""
        stats = getattr(self, "loss_stats", None)
        return stats.take() if stats is not None else {"elements": 0, "zero_filled": 0}

    def close(self) -> None:
        pass


class DDPTrainer(Trainer):
    """DDP (gloo or dlcp), optionally with a comm hook."""

    def __init__(self, spec: RunSpec, model: nn.Module, hook: tuple[Any, Callable] | None = None):
        super().__init__(spec, model)
        self.ddp = nn.parallel.DistributedDataParallel(model)
        if hook is not None:
            self.ddp.register_comm_hook(*hook)
            self.loss_stats = getattr(hook[0], "stats", None)
        self.opt = _optimizer(spec, self.ddp.parameters())

    def step(self, x, y) -> float:
        self.opt.zero_grad(set_to_none=True)
        loss = self.loss_fn(self.ddp(x), y)
        loss.backward()
        self.opt.step()
        return loss.item()


def _topk_allgather_state(density: float):
    """A DDP comm-hook state like :class:`host.spardl.api.SparDLHookState` (same private group, per-bucket error
    feedback, dense warm-up, serial worker thread) whose bucket exchange is a top-k all-gather: each rank's top-k
    of (gradient + residual) is gathered by every rank (Bruck, ceil(log2 P) steps) and summed; what a rank did not
    select stays in its residual."""
    from host.spardl.api import SparDLHookState
    from host.spardl.baselines import topk_allgather
    from host.spardl.exchange import run_on_group

    class _State(SparDLHookState):
        def _run(self, key, buf, layout=None):
            flat = buf.reshape(-1)
            original, addend = self.state.buffers_for(key, flat, layout)
            direct = buf.is_contiguous()
            out = run_on_group(topk_allgather(self.rank, self.world, original, self.density, own_input=True,
                                              addend=addend, out=flat if direct else None), self.group,
                               self.timeout)
            if self.state.error_feedback:
                self.state.residuals[key] = out.residual
            self.bytes_sent += out.bytes_sent
            if not direct:
                buf.copy_(out.result.view_as(buf))
            return buf.div_(self.world)

    return _State(density=density)


class DeARTrainer(Trainer):
    def __init__(self, spec: RunSpec, model: nn.Module):
        super().__init__(spec, model)
        from host.dear import DeAR

        self.opt = _optimizer(spec, model.parameters())
        # Bounded loss on the gradient reduce-scatters (all-gathers of parameters' gradients stay exact).
        self.dear = DeAR(model, self.opt, loss_bound=spec.loss_bound if backend_for(spec) == "dlcp" else 0.0)
        self.loss_stats = self.dear.loss_stats

    def step(self, x, y) -> float:
        self.opt.zero_grad(set_to_none=True)
        loss = self.loss_fn(self.dear(x), y)
        loss.backward()
        self.dear.step()
        return loss.item()

    def eval_model(self) -> nn.Module:
        self.dear.flush()
        return self.model

    def close(self) -> None:
        self.dear.flush()


def emulate_compute(model: nn.Module, compute_ms: float) -> None:
    """Make each forward+backward of ``model`` take ``compute_ms`` longer, spread over its parameterised layers
    (forward hooks sleep 1/3, full backward hooks 2/3 of each layer's share): the time an accelerator would
    compute, without using this machine's CPU."""
    if compute_ms <= 0:
        return
    layers = [m for m in model.modules() if any(True for _ in m.parameters(recurse=False))]
    share = compute_ms / 1000.0 / max(1, len(layers))
    def forward(mod: nn.Module, inp: Any, out: Any) -> None:  # returns None: the output stays as it is
        if mod.training:  # not in evaluation
            time.sleep(share / 3)

    def backward(mod: nn.Module, gin: Any, gout: Any) -> None:
        time.sleep(share * 2 / 3)

    for m in layers:
        m.register_forward_hook(forward)
        m.register_full_backward_hook(backward)


def make_trainer(spec: RunSpec, model: nn.Module) -> Trainer:
    if spec.algorithm in ("ddp-gloo",):
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        # DDP's own all-reduce, as a comm hook so that its calls go through torch.distributed and are timed
        return DDPTrainer(spec, model, (None, allreduce_hook))
    if spec.algorithm == "dlcp-allreduce":
        from host.hooks import DlcpHookState, dlcp_allreduce_hook

        return DDPTrainer(spec, model, (DlcpHookState.for_model(model, loss_bound=spec.loss_bound),
                                        dlcp_allreduce_hook))
    if spec.algorithm in ("dear", "dear-gloo"):
        return DeARTrainer(spec, model)
    if spec.algorithm in ("spardl", "spardl-gloo"):
        from host.spardl.api import SparDLHookState, spardl_hook

        return DDPTrainer(spec, model, (SparDLHookState(density=spec.density, teams=spec.teams), spardl_hook))
    if spec.algorithm in ("topk-allgather", "topk-allgather-gloo"):
        from host.spardl.api import spardl_hook

        return DDPTrainer(spec, model, (_topk_allgather_state(spec.density), spardl_hook))
    raise ValueError(f"algorithm {spec.algorithm!r} has no synchronous trainer")


def replica_digest(model: nn.Module) -> int:
    """A 63-bit digest of the model's parameters, bit for bit (BLAKE2b of their bytes in order)."""
    h = hashlib.blake2b(digest_size=8)
    for p in model.parameters():
        h.update(p.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return int.from_bytes(h.digest(), "big") >> 1


def replicas_identical(model: nn.Module) -> bool:
    """Whether every rank's model has the same parameters, bit for bit (a collective: every rank calls it).
    Data-parallel training keeps replicas identical, bounded loss included (every rank applies the same
    zero-filled average); a difference is a bug the run's record must show."""
    mine = torch.tensor([replica_digest(model)], dtype=torch.int64)
    every = [torch.zeros_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(every, mine)
    return all(int(e) == int(mine) for e in every)


def backend_for(spec: RunSpec) -> str:
    return "gloo" if spec.algorithm in ("ddp-gloo", "dear-gloo", "spardl-gloo", "topk-allgather-gloo") else "dlcp"


def measure_compute(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int, repeats: int = 5) -> float:
    """Median seconds of one forward + backward of ``model`` alone on ``batch_size`` samples (after one warm-up
    pass): this worker's computation per step without any communication. Gradients are cleared afterwards and
    no parameter changes, so every rank still starts from the same model."""
    loss_fn = nn.CrossEntropyLoss()
    xb, yb = x[:batch_size], y[:batch_size]
    times = []
    for i in range(repeats + 1):
        t = time.perf_counter()
        loss_fn(model(xb), yb).backward()
        if i:
            times.append(time.perf_counter() - t)
        model.zero_grad(set_to_none=True)
    return sorted(times)[len(times) // 2]


def train(spec: RunSpec, out: Path) -> dict[str, Any]:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(1)
    data = load(spec.dataset, seed=spec.seed, path=spec.dataset_path, test_size=spec.test_size)
    x, y = shard(data.x_train, data.y_train, rank, world)
    model = build(spec.model, data, hidden=spec.hidden, seed=spec.seed)
    emulate_compute(model, spec.compute_ms)
    compute_s = measure_compute(model, x, y, spec.batch_size)
    if spec.loss_bound:
        os.environ.setdefault("DLCP_LOSS_BOUND", str(spec.loss_bound))
    os.environ.setdefault("DLCP_CC", spec.congestion_control)
    if not spec.host_eligibility:
        os.environ.setdefault("DLCP_POLICY", "no-eligible")
    dist.init_process_group(backend_for(spec), rank=rank, world_size=world)
    timer = CollectiveTimer().install()  # before the trainer: SparDL's hook binds its exchange when built
    trainer = make_trainer(spec, model)
    transport = None
    if backend_for(spec) == "dlcp":
        from host.backend import transport_stats as transport
    g = torch.Generator().manual_seed(spec.seed * 1000 + rank)
    iters: list[dict[str, float]] = []
    evals: list[dict[str, float]] = []
    t0 = time.monotonic()
    timer.t0 = t0
    cpu0 = time.process_time()
    per_epoch = max(1, len(x) // spec.batch_size)
    order = torch.randperm(len(x), generator=g)
    stop = torch.zeros(1)
    for step in range(spec.steps):
        if step % per_epoch == 0 and step:
            order = torch.randperm(len(x), generator=g)
        idx = order[(step % per_epoch) * spec.batch_size:(step % per_epoch + 1) * spec.batch_size]
        rto0 = rto_count(transport)
        timer.step(step)
        start = time.monotonic()
        loss = trainer.step(x[idx], y[idx])
        end = time.monotonic()
        timer.step(None)
        lost = trainer.loss_step()  # collective-level: the union over ranks, the same figure on every rank
        iters.append({"step": step, "start": start - t0, "dt": end - start, "loss": loss,
                      "elements": lost["elements"], "zero_filled": lost["zero_filled"],
                      "rto": rto_count(transport) - rto0})
        if (step + 1) % spec.eval_every == 0 or step + 1 == spec.steps:
            acc = accuracy(trainer.eval_model(), data.x_test, data.y_test)
            evals.append({"step": step + 1, "t": time.monotonic() - t0, "accuracy": acc})
            print(f"eval {step + 1} accuracy {acc:.4f}", flush=True)
            if spec.target_accuracy is not None and spec.stop_at_target:
                stop[0] = 1.0 if (rank == 0 and acc >= spec.target_accuracy) else 0.0
                dist.broadcast(stop, 0)
                if stop[0]:
                    print(f"step {step + 1}/{spec.steps} loss {loss:.4f}", flush=True)
                    break
        print(f"step {step + 1}/{spec.steps} loss {loss:.4f}", flush=True)
    loop_cpu_s = time.process_time() - cpu0  # (the training loop's CPU alone: cpu_s adds the tear-down)
    loop_wall_s = time.monotonic() - t0
    trainer.close()
    collectives = timer.snapshot()  # DeAR's last all-gathers completed in close()
    timer.uninstall()
    final = accuracy(trainer.eval_model(), data.x_test, data.y_test)
    identical = replicas_identical(trainer.eval_model())
    stats: dict[str, Any] = {}
    if backend_for(spec) == "dlcp":
        from host.backend import transport_stats

        stats = transport_stats()
    # DDP's reducer and DeAR hold the process group and may hold work on it: drop them before the group is
    # destroyed (a gloo group destroyed under a live DDP has aborted the process at exit: "terminate called
    # without an active exception")
    del trainer
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()
    result = {"rank": rank, "world": world, "algorithm": spec.algorithm, "iterations": iters, "evals": evals,
              "final_accuracy": final, "replicas_identical": identical, "wall_s": time.monotonic() - t0,
              "compute_s": compute_s,
              "cpu_s": time.process_time() - cpu0, "loop_cpu_s": loop_cpu_s, "loop_wall_s": loop_wall_s,
              "collectives": collectives,
              "transport": _jsonable(stats)}
    out.write_text(json.dumps(result))
    return result


def _jsonable(v: Any) -> Any:
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, (int, float, str, bool)) or v is None:
        return v
    return str(v)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m testbed.worker SPEC_JSON OUT_JSON", file=sys.stderr)
        return 2
    spec = spec_from_json(Path(args[0]).read_text())
    train(spec, Path(args[1]))
    return 0


if __name__ == "__main__":
    from host.procexit import exit_process

    exit_process(main())  # not interpreter finalization: see host/procexit.py
