"""Scenarios for tests/host/test_bounded_loss.py, run as real ranks by tests/host/dist_run.py with the dlcp
backend (DLCP_LOSS_BOUND and DLCP_DROP_ELIGIBLE set by the test). Each prints one JSON line at the end."""

from __future__ import annotations

import hashlib
import json
import sys

import torch
import torch.distributed as dist
from torch import nn

import host.backend  # noqa: F401 - registers "dlcp"
from host.backend import loss_bound_scope
from host.collectives import LossStats
from host.hooks import DlcpHookState, dlcp_allreduce_hook
from host.procexit import exit_process


def _digest(model: nn.Module) -> str:
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def ddp() -> dict:
    """50 DDP steps of an MLP with the dlcp hook (bound from DLCP_LOSS_BOUND): a parameter digest per step."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    ddp_model = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.25)
    state = DlcpHookState.for_model(ddp_model, loss_bound=None)
    ddp_model.register_comm_hook(state, dlcp_allreduce_hook)
    opt = torch.optim.SGD(ddp_model.parameters(), lr=0.05, momentum=0.9)
    gen = torch.Generator().manual_seed(100 + dist.get_rank())
    digests, zero, worst = [], 0, 0.0
    for _ in range(50):
        x, y = torch.randn(32, 128, generator=gen), torch.randint(0, 10, (32,), generator=gen)
        opt.zero_grad()
        nn.functional.cross_entropy(ddp_model(x), y).backward()
        opt.step()
        step = state.stats.take()
        zero += step["zero_filled"]
        worst = max(worst, step["fraction"])
        digests.append(_digest(model))
    return {"steps": len(digests), "digests": digests, "zero_filled": zero, "max_fraction": worst}


def ops() -> dict:
    """Exact reductions with a loss bound in the environment; loss refused where it does not apply; a scoped
    lossy SUM."""
    r, w = dist.get_rank(), dist.get_world_size()
    n = 50_000
    inputs = [torch.rand(n, generator=torch.Generator().manual_seed(q)) - 0.5 for q in range(w)]
    exact = True
    for op, ref in ((dist.ReduceOp.MIN, torch.stack(inputs).min(0).values),
                    (dist.ReduceOp.MAX, torch.stack(inputs).max(0).values),
                    (dist.ReduceOp.PRODUCT, None), (dist.ReduceOp.SUM, None)):
        t = inputs[r].clone()
        dist.all_reduce(t, op=op)
        if ref is None:  # the product/sum order differs from torch's: compare what every rank holds
            got = [torch.empty_like(t) for _ in range(w)]
            dist.all_gather(got, t)
            exact &= all(torch.equal(g, t) for g in got)
            ref = torch.stack(inputs).prod(0) if op == dist.ReduceOp.PRODUCT else sum(inputs)
            exact &= bool(torch.allclose(t, ref, rtol=1e-4, atol=1e-6))
        else:
            exact &= torch.equal(t, ref)
    ints = torch.arange(n, dtype=torch.int64) * (r + 1)
    dist.all_reduce(ints)
    exact &= torch.equal(ints, torch.arange(n, dtype=torch.int64) * sum(range(1, w + 1)))
    refused = 0
    with loss_bound_scope(0.05):
        for op, t in ((dist.ReduceOp.MAX, inputs[r].clone()), (dist.ReduceOp.MIN, inputs[r].clone()),
                      (dist.ReduceOp.PRODUCT, inputs[r].clone()), (dist.ReduceOp.SUM, ints.clone())):
            try:
                dist.all_reduce(t, op=op)
            except ValueError as e:
                refused += "SUM/AVG" in str(e)
    t = inputs[r].clone()
    stats = LossStats()
    with loss_bound_scope(None, stats=stats):
        work = dist.all_reduce(t, async_op=True)
    work.wait()
    outcome = stats.last
    exact &= [tuple(x) for x in work.lost_ranges] == outcome.merged()  # the work object reports the same union
    got = [torch.empty_like(t) for _ in range(w)]
    dist.all_gather(got, t)
    exact &= all(torch.equal(g, t) for g in got)  # lossy, yet the same bits everywhere
    return {"exact": bool(exact), "refused": refused, "lossy_zero_filled": outcome.zero_filled,
            "lossy_ranges": outcome.lost}


if __name__ == "__main__":
    dist.init_process_group("dlcp")
    torch.set_num_threads(1)
    result = {"ddp": ddp, "ops": ops}[sys.argv[1]]()
    dist.barrier()
    dist.destroy_process_group()
    print(json.dumps(result))
    exit_process()  # not interpreter finalization: see host/procexit.py
