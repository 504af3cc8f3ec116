"""``python -m host.acid train``: one rank of an A²CiD² job, a plain user of the library
(:class:`host.acid.library.Acid`), under ``torchrun`` or any env:// launcher (``python -m host.acid run`` is one)::

    torchrun --nproc-per-node 4 -m host.acid train --model cnn --data digits --algo acid --steps 300 --out run.json

``--algo acid`` (A²CiD²), ``gossip`` (the same without the momentum) or ``allreduce`` (the synchronous baseline:
DDP, gradients averaged every step). Data: ``--data acid`` is A²CiD²'s own synthetic non-iid task
(:mod:`host.acid.problem`: label-skewed Gaussian clusters and its MLP, where consensus matters); ``digits``,
``synthetic-cifar`` and ``text`` are the testbed's (``testbed.data``) with its models (``--model mlp``, ``cnn``
(8x8 digits shaped into 1x8x8 images), ``char-mlp``...).

Budget: ``--budget worker`` (default): every rank makes ``--steps`` gradient steps. ``--budget total``
(asynchronous algorithms): the ranks together make ``steps * world`` steps, counted on the rendezvous store, so a
fast worker does more and a slow one fewer (the paper's setting; all-reduce, in lockstep, makes ``--steps``
each either way). The asynchronous algorithms end with the
average of the surviving ranks' models (``Acid.finish``); a rank that died is left out of it.

Monitoring (``--log-interval`` > 0): each rank samples its x (mixed up to now) every interval from the common
start; at the end rank 0 gathers the samples and logs, per tick, the consensus distance ``(1/n) sum ||x_i -
xbar||^2`` over the ranks that sampled it, and the loss and accuracy of ``xbar`` (training set of ``--data acid``,
test set otherwise). Faults (tests, demonstrations): ``--slow RANK:SECONDS`` adds sleep to each of that rank's
steps, ``--kill RANK:STEP`` makes it SIGKILL itself (not rank 0: it hosts the store).

Rank 0 prints one JSON line and writes ``--out``; every field is described in ``docs/acid.md``.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import logging
import os
import signal
import threading
import time
from datetime import timedelta
from typing import Any, Callable

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from host.acid.constants import TOPOLOGIES, acid_constants

__all__ = ["add_arguments", "train", "rank_value", "ALGOS"]

log = logging.getLogger("host.acid.train")

ALGOS = ("acid", "gossip", "allreduce")


def rank_value(kind: type) -> Callable[[str], tuple[int, Any]]:
    """An argparse type for ``RANK:VALUE``."""
    def parse(s: str) -> tuple[int, Any]:
        r, sep, v = s.partition(":")
        try:
            if not sep:
                raise ValueError
            return int(r), kind(v)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{s!r}: expected RANK:{kind.__name__.upper()}") from None
    return parse


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--algo", choices=ALGOS, default="acid")
    ap.add_argument("--graph", choices=TOPOLOGIES, default="ring")
    ap.add_argument("--rate", type=float, default=1.0, help="communications per gradient step of each worker")
    ap.add_argument("--data", default="digits", help="acid (A²CiD²'s synthetic non-iid task), or the testbed's "
                                                      "digits, synthetic-cifar, text")
    ap.add_argument("--model", default="cnn", help="the testbed's mlp, cnn, char-mlp... (--data acid: its MLP)")
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--features", type=int, default=32, help="--data acid: input dimensions")
    ap.add_argument("--classes", type=int, default=10, help="--data acid: classes")
    ap.add_argument("--samples", type=int, default=1024, help="--data acid: samples per worker")
    ap.add_argument("--skew", type=float, default=0.8, help="--data acid: fraction of a worker's samples from its "
                                                            "home classes")
    ap.add_argument("--steps", type=int, default=300, help="gradient steps per worker (see --budget)")
    ap.add_argument("--budget", choices=("worker", "total"), default="worker",
                    help="worker: each rank makes --steps; total: all ranks together make steps * world")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--weight-decay", type=float, default=0.0)
    ap.add_argument("--step-seconds", type=float, default=0.0,
                    help="pad each gradient step to this long by sleeping (emulates an accelerator)")
    ap.add_argument("--exchange-timeout", type=float, default=10.0)
    ap.add_argument("--dead-after", type=float, default=30.0,
                    help="a rank without a heartbeat this long is left out of the final average")
    ap.add_argument("--log-interval", type=float, default=0.0, help="seconds between consensus samples (0: none)")
    ap.add_argument("--backend", default="gloo",
                    help="the process group's backend: gloo (the default) or dlcp; the output and the record say "
                         "which ran")
    ap.add_argument("--exchange-backend", default="gloo",
                    help="backend of the pairwise exchanges: gloo (the default), or 'same' = the process group's "
                         "(with --backend dlcp: gossip over DLCP)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--slow", type=rank_value(float), action="append", default=[], metavar="RANK:SECONDS",
                    help="fault: add SECONDS of sleep to every gradient step of RANK")
    ap.add_argument("--kill", type=rank_value(int), action="append", default=[], metavar="RANK:STEP",
                    help="fault: RANK kills itself (SIGKILL) at gradient step STEP")
    ap.add_argument("--progress", action="store_true",
                    help="rank 0 prints 'step I/N' lines (I: mean steps per worker so far under --budget total)")
    ap.add_argument("--out", help="rank 0 writes the record (JSON) here")


class _Task:
    """Local training data, the model, and how to evaluate a flat parameter vector."""

    def __init__(self, a: argparse.Namespace, rank: int, world: int):
        if a.data == "acid":
            from host.acid.problem import ProblemSpec, build_model, make_full, make_shard

            spec = ProblemSpec(features=a.features, classes=a.classes, hidden=a.hidden, batch=a.batch,
                               samples_per_worker=a.samples, skew=a.skew, seed=a.seed)
            self.X, self.y = make_shard(spec, world, rank)
            self.model: nn.Module = build_model(spec, seed=a.seed * 7919 + rank)  # start average: makes them equal
            self.X_eval, self.y_eval = make_full(spec, world)  # the global training set the run minimises
            self.classes = spec.classes
        else:
            from testbed import data as tb_data
            from testbed import models as tb_models

            split = tb_data.load(a.data, seed=a.seed)
            if a.model == "cnn" and len(split.input_shape) == 1:  # digits: 64 pixels -> one 8x8 channel
                side = int(round(split.input_shape[0] ** 0.5))
                if side * side != split.input_shape[0]:
                    raise ValueError(f"--model cnn needs image data; {a.data} has shape {split.input_shape}")
                split.x_train = split.x_train.reshape(-1, 1, side, side)
                split.x_test = split.x_test.reshape(-1, 1, side, side)
                split.input_shape = (1, side, side)
            self.X, self.y = tb_data.shard(split.x_train, split.y_train, rank, world)
            self.model = tb_models.build(a.model, split, hidden=a.hidden, seed=a.seed)
            self.X_eval, self.y_eval = split.x_test, split.y_test
            self.classes = split.num_classes
        self.params = [p for p in self.model.parameters() if p.requires_grad]

    def flat(self) -> torch.Tensor:
        with torch.no_grad():
            return torch.cat([p.detach().reshape(-1) for p in self.params]).clone()

    @torch.no_grad()
    def evaluate(self, x: torch.Tensor | None = None) -> dict[str, float]:
        """Loss and accuracy of ``x`` (default: the model as it is) on the evaluation set; the model is restored."""
        saved = self.flat() if x is not None else None
        if x is not None:
            self._load(x)
        was = self.model.training
        self.model.eval()
        try:
            out = self.model(self.X_eval)
            return {"loss": float(F.cross_entropy(out, self.y_eval)),
                    "acc": float((out.argmax(1) == self.y_eval).float().mean())}
        finally:
            self.model.train(was)
            if saved is not None:
                self._load(saved)

    def _load(self, x: torch.Tensor) -> None:
        pos = 0
        for p in self.params:
            p.copy_(x[pos:pos + p.numel()].view_as(p))
            pos += p.numel()


class _Sampler:
    """x every ``interval`` seconds from ``t0`` (a thread), with the rank's step and communication counters."""

    def __init__(self, interval: float, t0: float, snapshot: Callable[[], torch.Tensor],
                 counters: Callable[[], dict[str, Any]]):
        self.samples: list[tuple[int, float, np.ndarray, dict[str, Any]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(interval, t0, snapshot, counters),
                                        name="acid-sampler", daemon=True)
        self._thread.start()

    def _run(self, interval, t0, snapshot, counters) -> None:
        tick = 0
        while True:
            tick += 1
            if self._stop.wait(max(0.0, t0 + tick * interval - time.monotonic())):
                return
            self.samples.append((tick, time.monotonic() - t0, snapshot().numpy(), counters()))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def consensus_series(per_rank: list[list[tuple[int, float, np.ndarray, dict[str, Any]]]],
                     evaluate: Callable[[torch.Tensor], dict[str, float]] | None) -> list[dict[str, Any]]:
    """Per tick: the consensus distance over the ranks that sampled it, their counters, and (``evaluate``) the loss
    and accuracy of their mean."""
    from host.acid.monitor import consensus_distance

    by_tick: dict[int, list[tuple[float, np.ndarray, dict[str, Any]]]] = {}
    for samples in per_rank:
        for tick, t, x, info in samples:
            by_tick.setdefault(tick, []).append((t, x, info))
    series = []
    for tick in sorted(by_tick):
        snaps = by_tick[tick]
        xs = np.stack([s[1] for s in snaps])
        losses = [s[2]["loss"] for s in snaps if s[2].get("loss") is not None]
        rec: dict[str, Any] = {"tick": tick, "t": float(np.mean([s[0] for s in snaps])), "workers": len(snaps),
                               "consensus": consensus_distance(xs),
                               "steps": int(sum(s[2]["steps"] for s in snaps)),
                               "comms": int(sum(s[2]["comms"] for s in snaps)),
                               "local_loss": float(np.mean(losses)) if losses else None}
        if evaluate is not None:
            rec.update(evaluate(torch.from_numpy(xs.mean(axis=0).astype(np.float32))))
        series.append(rec)
    return series


def train(a: argparse.Namespace) -> dict[str, Any]:
    """Run this rank's part; returns the record (rank 0's has the gathered parts)."""
    from host.acid.library import Acid

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    owned = not dist.is_initialized()
    if owned:
        dist.init_process_group(a.backend, timeout=timedelta(seconds=max(120.0, 4 * a.dead_after)))
    rank, world = dist.get_rank(), dist.get_world_size()
    slow, kill = dict(a.slow), dict(a.kill)
    for r in (*slow, *kill):
        if not 0 <= r < world:
            raise ValueError(f"fault for rank {r}, outside the world of {world}")
    if 0 in kill:
        raise ValueError("--kill 0:...: rank 0 hosts the rendezvous store; killing it ends the whole run")
    budget = "worker" if a.algo == "allreduce" else a.budget  # all-reduce: in lockstep, the two are the same
    task = _Task(a, rank, world)
    model = task.model
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum, weight_decay=a.weight_decay)
    gen = torch.Generator().manual_seed(a.seed * 104729 + rank)
    store = dist.PrefixStore("acid-train/", dist.distributed_c10d._get_default_store())
    acid: Acid | None = None
    if a.algo == "allreduce":
        from torch.nn.parallel import DistributedDataParallel as DDP

        net: Callable = DDP(model)
        snapshot = task.flat
    else:
        acid = Acid(model, opt, topology=a.graph, rate_com=a.rate, algo=a.algo, seed=a.seed,
                    exchange_timeout=a.exchange_timeout, dead_after=a.dead_after,
                    exchange_backend=None if a.exchange_backend == "same" else a.exchange_backend)
        net, snapshot = acid, acid.consensus_snapshot
    dist.barrier()
    t0 = time.monotonic()
    loss_acc = [0.0, 0]
    steps = [0]

    def counters() -> dict[str, Any]:
        loss = loss_acc[0] / loss_acc[1] if loss_acc[1] else None
        loss_acc[0], loss_acc[1] = 0.0, 0
        return {"steps": steps[0], "comms": acid.comms if acid is not None else 0, "loss": loss}

    sampler = _Sampler(a.log_interval, t0, snapshot, counters) if a.log_interval > 0 else None
    losses: list[float] = []
    total = a.steps * world
    while True:
        if budget == "worker" and steps[0] >= a.steps:
            break
        done = int(store.add("steps", 0)) if budget == "total" else None
        if done is not None and done >= total:
            break
        if a.progress and rank == 0:
            print(f"step {steps[0] if done is None else done // world}/{a.steps}", flush=True)
        ts = time.monotonic()
        idx = torch.randint(0, task.X.shape[0], (a.batch,), generator=gen)
        opt.zero_grad()
        loss = F.cross_entropy(net(task.X[idx]), task.y[idx])
        loss.backward()
        if acid is None:
            opt.step()
        else:
            acid.step()
        steps[0] += 1
        if budget == "total":
            store.add("steps", 1)
        lv = float(loss.detach())
        losses.append(lv)
        loss_acc[0] += lv
        loss_acc[1] += 1
        rest = a.step_seconds - (time.monotonic() - ts)
        if rest > 0:
            time.sleep(rest)
        if rank in slow:
            time.sleep(slow[rank])
        if kill.get(rank) == steps[0]:
            log.warning("rank %d: fault injection, killing this worker at step %d", rank, steps[0])
            os.kill(os.getpid(), signal.SIGKILL)
    train_seconds = time.monotonic() - t0
    if sampler is not None:
        sampler.stop()
    group = None
    survivors = list(range(world))
    if acid is not None:
        acid.finish()  # the survivors' average: every survivor ends with the same model
        group, survivors = acid.final_group, acid.survivors
    transport: dict[str, Any] = {}
    if "dlcp" in (a.backend, a.exchange_backend):
        from host.backend import transport_stats

        transport = {k: v for k, v in transport_stats().items() if isinstance(v, (int, float))}
    x = task.flat()
    digest = hashlib.sha256(x.numpy().tobytes()).hexdigest()
    report: dict[str, Any] = {
        "rank": rank, "steps": steps[0], "train_seconds": train_seconds,
        "comms": acid.comms if acid is not None else 0,
        "comms_per_step": (acid.comms / steps[0]) if acid is not None and steps[0] else 0.0,
        "failed_exchanges": acid.failed_exchanges if acid is not None else 0,
        "mean_exchange_seconds": acid.exchange_seconds / acid.comms if acid is not None and acid.comms else None,
        "peers": {str(p): n for p, n in sorted(acid.peer_counts.items())} if acid is not None else {},
        "eta": acid.mixing_constants[0] if acid is not None else 0.0,
        "alpha_tilde": acid.mixing_constants[1] if acid is not None else 0.0,
        "mean_step_seconds": acid.timer.mean if acid is not None else train_seconds / max(1, steps[0]),
        "final_sha256": digest, "transport": transport,
    }
    parts = [None] * len(survivors) if rank == 0 else None
    dist.gather_object((report, sampler.samples if sampler else []), parts, dst=0, group=group)
    rec: dict[str, Any] = {}
    if rank == 0:
        assert parts is not None
        reports = {p[0]["rank"]: p[0] for p in parts}
        final = task.evaluate()
        rec = {"algo": a.algo, "graph": a.graph, "rate": a.rate, "model": a.model, "data": a.data, "world": world,
               # the backends that ran (the process group's may have been made by the caller, not --backend)
               "backend": str(dist.get_backend()),
               "exchange_backend": acid.exchange_backend if acid is not None else None,
               "classes": task.classes,
               "budget": a.budget, "steps": sum(r["steps"] for r in reports.values()),
               "comms": sum(r["comms"] for r in reports.values()),
               "test_acc": final["acc"], "test_loss": final["loss"], "final": final,
               "final_identical": len({r["final_sha256"] for r in reports.values()}) == 1,
               "survivors": survivors, "dropped": sorted(set(range(world)) - set(survivors)),
               "train_loss_last": float(np.mean(losses[-20:])) if losses else None,
               "train_seconds": max(r["train_seconds"] for r in reports.values()),
               "reports": reports,
               "series": consensus_series([p[1] for p in parts], task.evaluate if a.log_interval > 0 else None),
               "error": None}
        rec["comms_per_step"] = rec["comms"] / max(1, rec["steps"])
        if acid is not None:
            rec["eta"], rec["alpha_tilde"] = acid.mixing_constants
        if a.algo == "acid":
            k = acid_constants(a.graph, world, a.rate)
            rec["constants"] = {"eta": k.eta, "alpha_tilde": k.alpha_tilde, "chi1": k.chi1, "chi2": k.chi2}
        summary = {k: v for k, v in rec.items() if k not in ("reports", "series")}
        print(json.dumps(summary), flush=True)
        if a.out:
            with open(a.out, "w") as f:
                json.dump(rec, f, indent=1, default=float)
    # DDP's reducer and the library hold process groups and may hold work on them: drop them before the groups are
    # destroyed (a gloo group destroyed under a live DDP has aborted a rank at exit: "terminate called without an
    # active exception"), as the testbed worker does
    net = acid = None  # noqa: F841
    gc.collect()
    dist.barrier(group=group)
    if owned:
        if len(survivors) < world:  # a dead rank: tearing down groups that include it could wait on it
            logging.shutdown()
            os._exit(0)
        # every group (the library's private gloo group included) is torn down while all ranks are here: a
        # gloo group left to the interpreter's exit has aborted a rank ("terminate called without an active exception")
        dist.destroy_process_group()
    return rec
