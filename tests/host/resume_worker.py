"""Checkpoint / resume across processes for tests/host/test_resume_dear_spardl.py (gloo, 2 ranks, launched like
torchrun by tests/host/dist_run.py). ``python -m tests.host.resume_worker save|load`` with ``RESUME_DIR`` set:

* ``save``: for each case, the uninterrupted run of ``K + M`` steps (its parameters saved), then a fresh run of
  ``K`` steps whose checkpoint (``torch.save``) is written;
* ``load`` (new processes): fresh objects from other weights, the checkpoint loaded, ``M`` more steps; the
  parameters must equal the uninterrupted run's bit for bit (``torch.equal``).

Cases: ``dear-tuned`` (DeAR, ``fusion="auto"`` with the tuner, AdamW), ``dear-spardl`` (DeAR with the SparDL
compressor at 10%: residuals in the checkpoint), ``ddp-spardl-hook`` (DDP with the SparDL comm hook: its state).
Bit-identical is expected: with two ranks every reduction adds two numbers (commutative, so a different fusion plan
gives the same bits), SparDL's selection is deterministic, and nothing else depends on time.
"""

from __future__ import annotations

import os
import sys
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from host.dear import DeAR
from host.procexit import exit_process
from host.spardl import SparDLCompressor, SparDLHookState, spardl_hook

from .dear_lib_worker import FAST_COMM, TUNE, _data, _flat, mlp

K, M = 4, 4


def _other_weights(model: nn.Module) -> nn.Module:
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)  # the checkpoint must bring the weights back
    return model


def _dear(case: str, model: nn.Module):
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    if case == "dear-spardl":
        return opt, DeAR(model, opt, fusion=1500, comm_model=FAST_COMM, compressor=SparDLCompressor(0.1))
    return opt, DeAR(model, opt, fusion="auto", comm_model=FAST_COMM, tune=TUNE)


def _train_dear(dear, opt, batches) -> None:
    for x, y in batches:
        opt.zero_grad()
        F.cross_entropy(dear(x), y).backward()
        dear.step()
    dear.flush()


def _one_param() -> nn.Module:
    # DDP packs a fresh bucket in registration order and the rebuilt one in gradient-ready order, and SparDL's
    # blocks follow the bucket: one parameter keeps the layout the same in the uninterrupted and resumed runs
    torch.manual_seed(0)
    return nn.Linear(12, 4, bias=False)


def _ddp(model: nn.Module):
    ddp = DDP(model)
    state = SparDLHookState(0.1, model=model, dense_iterations=0)
    ddp.register_comm_hook(state, spardl_hook)
    return ddp, state, torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)


def _train_ddp(ddp, opt, batches) -> None:
    for x, y in batches:
        opt.zero_grad()
        F.cross_entropy(ddp(x), y).backward()
        opt.step()


def save(d: Path) -> None:
    r = dist.get_rank()
    data = _data(K + M, seed=300 + r)
    for case in ("dear-tuned", "dear-spardl"):
        model = mlp()
        opt, dear = _dear(case, model)
        _train_dear(dear, opt, data)
        torch.save(_flat(model), d / f"{case}-full-{r}.pt")
        dear.close()
        model = mlp()
        opt, dear = _dear(case, model)
        _train_dear(dear, opt, data[:K])
        ckpt = dear.state_dict()
        if case == "dear-spardl":
            res = ckpt["dear"]["compressor"]["residuals"]
            assert any(float(t.abs().sum()) > 0 for t in res.values()), "no residual in the checkpoint"
        torch.save(ckpt, d / f"{case}-ckpt-{r}.pt")
        dear.close()
    model = _one_param()
    ddp, state, opt = _ddp(model)
    _train_ddp(ddp, opt, data)
    torch.save(_flat(model), d / f"ddp-spardl-hook-full-{r}.pt")
    state.close()
    model = _one_param()
    ddp, state, opt = _ddp(model)
    _train_ddp(ddp, opt, data[:K])
    ckpt = {"model": model.state_dict(), "optimizer": opt.state_dict(), "hook": state.state_dict()}
    assert ckpt["hook"]["sparse"]["residuals"], "no residual in the hook's checkpoint"
    torch.save(ckpt, d / f"ddp-spardl-hook-ckpt-{r}.pt")
    state.close()
    print("ok save", r, flush=True)


def load(d: Path) -> None:
    r = dist.get_rank()
    data = _data(K + M, seed=300 + r)
    for case in ("dear-tuned", "dear-spardl"):
        model = _other_weights(mlp())
        opt, dear = _dear(case, model)
        dear.load_state_dict(torch.load(d / f"{case}-ckpt-{r}.pt", weights_only=False))
        _train_dear(dear, opt, data[K:])
        full = torch.load(d / f"{case}-full-{r}.pt")
        assert torch.equal(_flat(model), full), (
            f"rank {r} {case}: resumed != uninterrupted, max |diff| {float((_flat(model) - full).abs().max())}")
        dear.close()
        print(f"ok {case}", r, flush=True)
    model = _other_weights(_one_param())
    ckpt = torch.load(d / f"ddp-spardl-hook-ckpt-{r}.pt", weights_only=False)
    model.load_state_dict(ckpt["model"])  # before DDP: it broadcasts rank 0's parameters at construction
    ddp, state, opt = _ddp(model)
    opt.load_state_dict(ckpt["optimizer"])
    state.load_state_dict(ckpt["hook"])
    _train_ddp(ddp, opt, data[K:])
    full = torch.load(d / f"ddp-spardl-hook-full-{r}.pt")
    assert torch.equal(_flat(model), full), (
        f"rank {r} ddp-spardl-hook: resumed != uninterrupted, max |diff| {float((_flat(model) - full).abs().max())}")
    state.close()
    print("ok ddp-spardl-hook", r, flush=True)


if __name__ == "__main__":
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    {"save": save, "load": load}[sys.argv[1]](Path(os.environ["RESUME_DIR"]))
    dist.barrier()
    dist.destroy_process_group()
    exit_process()  # not interpreter finalization: see host/procexit.py
