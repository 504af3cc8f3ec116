"""``python -m host.acid train``: the library (:class:`host.acid.library.Acid`) training one of the testbed's models
on its data, one process per rank, under ``torchrun`` (or any env:// launcher)::

    torchrun --nproc-per-node 4 -m host.acid train --model cnn --data digits --algo acid --steps 300 --out run.json

``--algo acid`` (A²CiD²), ``gossip`` (the same without the momentum) or ``allreduce`` (the synchronous baseline:
DDP, gradients averaged every step). Models and data are the testbed's (``testbed.models``, ``testbed.data``):
``mlp``, ``cnn`` (8x8 digits are shaped into 1x8x8 images for it), ``char-mlp`` on ``digits``,
``synthetic-cifar``, ``text``. Each rank trains on its shard for ``--steps`` gradient steps; the asynchronous
algorithms end with the global average of the ranks' models. Rank 0 prints one JSON line (and writes ``--out``):
test accuracy and loss of the final model, communications per step, wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

from host.acid.constants import TOPOLOGIES

__all__ = ["add_arguments", "train"]


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--algo", choices=("acid", "gossip", "allreduce"), default="acid")
    ap.add_argument("--graph", choices=TOPOLOGIES, default="ring")
    ap.add_argument("--rate", type=float, default=1.0, help="communications per gradient step of each worker")
    ap.add_argument("--model", default="cnn", help="mlp, cnn or char-mlp (the testbed's models)")
    ap.add_argument("--data", default="digits", help="digits, synthetic-cifar or text (the testbed's data)")
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--steps", type=int, default=300, help="gradient steps per worker")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--step-seconds", type=float, default=0.0,
                    help="pad each gradient step to this long by sleeping (emulates an accelerator)")
    ap.add_argument("--backend", default="gloo")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", help="rank 0 writes the record (JSON) here")


def _data(name: str, model: str, seed: int):
    from testbed import data as tb_data

    split = tb_data.load(name, seed=seed)
    if model == "cnn" and len(split.input_shape) == 1:  # digits: 64 pixels -> one 8x8 channel
        side = int(round(split.input_shape[0] ** 0.5))
        if side * side != split.input_shape[0]:
            raise ValueError(f"--model cnn needs image data; {name} has shape {split.input_shape}")
        split.x_train = split.x_train.reshape(-1, 1, side, side)
        split.x_test = split.x_test.reshape(-1, 1, side, side)
        split.input_shape = (1, side, side)
    return split


def train(a: argparse.Namespace) -> dict[str, Any]:
    """Run this rank's part; returns the record (identical final model on every rank)."""
    from testbed import data as tb_data
    from testbed import models as tb_models

    from host.acid.library import Acid

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    owned = not dist.is_initialized()
    if owned:
        dist.init_process_group(a.backend, timeout=timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    split = _data(a.data, a.model, a.seed)
    X, y = tb_data.shard(split.x_train, split.y_train, rank, world)
    model = tb_models.build(a.model, split, hidden=a.hidden, seed=a.seed)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum)
    gen = torch.Generator().manual_seed(a.seed * 1000 + rank)
    if a.algo == "allreduce":
        from torch.nn.parallel import DistributedDataParallel as DDP
        net, acid = DDP(model), None
    else:
        acid = Acid(model, opt, topology=a.graph, rate_com=a.rate, algo=a.algo, seed=a.seed)
        net = acid
    t0 = time.monotonic()
    losses = []
    for _ in range(a.steps):
        ts = time.monotonic()
        idx = torch.randint(0, X.shape[0], (a.batch,), generator=gen)
        opt.zero_grad()
        loss = F.cross_entropy(net(X[idx]), y[idx])
        loss.backward()
        if acid is None:
            opt.step()
        else:
            acid.step()
        losses.append(float(loss))
        rest = a.step_seconds - (time.monotonic() - ts)
        if rest > 0:
            time.sleep(rest)
    comms = 0
    if acid is not None:
        acid.finish()  # the global average: every rank ends with the same model
        comms = acid.comms
    wall = time.monotonic() - t0
    model.eval()
    with torch.no_grad():
        out = model(split.x_test)
        test_loss = float(F.cross_entropy(out, split.y_test))
        acc = float((out.argmax(1) == split.y_test).float().mean())
    tot = torch.tensor([float(comms)])
    dist.all_reduce(tot)
    rec = {"algo": a.algo, "graph": a.graph, "rate": a.rate, "model": a.model, "data": a.data, "world": world,
           "steps": a.steps, "test_acc": acc, "test_loss": test_loss, "train_loss_last": sum(losses[-20:]) / 20,
           "comms_per_step": float(tot[0]) / (world * a.steps), "wall_seconds": wall}
    if acid is not None:
        rec["eta"], rec["alpha_tilde"] = acid.mixing_constants
    if rank == 0:
        print(json.dumps(rec), flush=True)
        if a.out:
            with open(a.out, "w") as f:
                json.dump(rec, f, indent=1)
    dist.barrier()
    if owned:  # every group (the library's private gloo group included) is torn down while all ranks are here: a
        # gloo group left to the interpreter's exit has aborted a rank ("terminate called without an active exception")
        dist.destroy_process_group()
    return rec
