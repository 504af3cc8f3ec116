"""Scenarios of tests/host/test_acid_library.py in real processes over gloo, launched like torchrun
(tests/host/dist_run.py): the A²CiD² library on an existing process group, pairing on its store.

``python -m tests.host.acid_lib_worker SCENARIO[,SCENARIO...] [ARGS]``; each scenario prints ``ok <name> <rank>``.

* ``resume`` (ring of 4: on 2 or 3 ranks the ring is complete, alpha~ = 1/2 and x~ moves with x): Adam + StepLR, explicit exchanges and a scripted clock (so the run is deterministic):
  save after 3 steps, load into fresh objects, 3 more steps == 6 uninterrupted steps, bit for bit.
* ``consensus`` (ring of n): A²CiD² and plain asynchronous gossip at the same rate on the non-iid MLP task, steps
  padded to ``STEP`` seconds (an emulated accelerator); x snapshots every few steps; rank 0 prints the mean
  consensus distance of each, and the final averaged model's loss.
* ``dead`` (last): the last rank dies mid-training; the others' exchanges with it fail within the timeout, are
  counted, and training and stopping go on.
"""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

from host.acid.library import Acid
from host.acid.monitor import consensus_distance
from host.acid.problem import ProblemSpec, build_model, make_full, make_shard

STEP = 0.03


def resume() -> None:
    r, n = dist.get_rank(), dist.get_world_size()
    assert n % 2 == 0 and n >= 4, "resume needs an even ring of >= 4"
    spec = ProblemSpec(hidden=16, samples_per_worker=128, batch=32)
    X, y = make_shard(spec, n, r)
    batches = [(X[i * 16:(i + 1) * 16], y[i * 16:(i + 1) * 16]) for i in range(6)]
    now = [0.0]

    def build():
        model = build_model(spec, seed=r)  # different initial models: the start average matters
        opt = torch.optim.Adam(model.parameters(), lr=0.01)
        sch = torch.optim.lr_scheduler.StepLR(opt, 2, 0.5)
        return model, Acid(model, opt, scheduler=sch, communicate=False, clock=lambda: now[0])

    def train(model, acid, steps):
        for i in steps:
            now[0] = float(i)
            acid.optimizer.zero_grad()
            F.cross_entropy(acid(batches[i][0]), batches[i][1]).backward()
            acid.step()
            if i in (1, 3, 4):  # pairs (0,1)(2,3)..., then (1,2)(3,4)...(n-1,0), then the first again
                now[0] = i + 0.5
                peer = r ^ 1 if i != 3 else ((r + 1) % n if r % 2 else (r - 1) % n)
                acid.exchange(peer, pair_id=i)

    model, acid = build()
    train(model, acid, range(6))
    full_x, full_xt = acid.x.clone(), acid.xt.clone()
    assert not torch.equal(full_x, full_xt), "x~ never left x: the momentum did nothing"
    acid.finish(average=False)

    model, acid = build()
    train(model, acid, range(3))
    ckpt = acid.state_dict()
    acid.finish(average=False)
    model2 = build_model(spec, seed=50 + r)
    opt2 = torch.optim.Adam(model2.parameters(), lr=0.01)
    sch2 = torch.optim.lr_scheduler.StepLR(opt2, 2, 0.5)
    acid2 = Acid(model2, opt2, scheduler=sch2, communicate=False, start_average=False, clock=lambda: now[0])
    acid2.load_state_dict(ckpt)
    train(model2, acid2, range(3, 6))
    assert torch.equal(acid2.x, full_x) and torch.equal(acid2.xt, full_xt), "resumed != uninterrupted"
    flat = torch.cat([p.detach().reshape(-1) for p in model2.parameters()])
    assert torch.equal(flat, full_x), "the model does not hold x"
    acid2.finish()
    print("ok resume", r, flush=True)


def consensus(steps: int = 120, reps: int = 4) -> None:
    r, n = dist.get_rank(), dist.get_world_size()
    spec = ProblemSpec(hidden=32, batch=64)
    X, y = make_shard(spec, n, r)
    gen = torch.Generator().manual_seed(r)
    out = {}
    for algo in ("gossip", "acid") * reps:  # alternated: drifts in machine load hit both alike
        model = build_model(spec, seed=r)
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        acid = Acid(model, opt, topology="ring", rate_com=1.0, algo=algo, exchange_timeout=10.0)
        snaps = []
        for i in range(steps):
            t0 = time.monotonic()
            idx = torch.randint(0, X.shape[0], (spec.batch,), generator=gen)
            opt.zero_grad()
            F.cross_entropy(acid(X[idx]), y[idx]).backward()
            acid.step()
            if i >= steps // 3 and i % 4 == 0:
                snaps.append(acid.consensus_snapshot())
            rest = STEP - (time.monotonic() - t0)
            if rest > 0:
                time.sleep(rest)
        acid.stop_communication()
        stack = torch.stack(snaps)
        every = [torch.empty_like(stack) for _ in range(n)]
        dist.all_gather(every, stack)
        cons = [consensus_distance(np.stack([e[k].numpy() for e in every])) for k in range(stack.shape[0])]
        comms = torch.tensor([float(acid.comms), float(acid.failed_exchanges)])
        dist.all_reduce(comms)
        acid.finish()
        Xf, yf = make_full(spec, n)
        with torch.no_grad():
            loss = float(F.cross_entropy(model(Xf), yf))
        rec = out.setdefault(algo, {"consensus": [], "comms_per_step": [], "loss": [], "failed": 0})
        rec["consensus"].append(float(np.mean(cons)))
        rec["comms_per_step"].append(float(comms[0]) / (n * steps))
        rec["loss"].append(loss)
        rec["failed"] += int(comms[1])
    if r == 0:
        print("consensus " + json.dumps(out), flush=True)
    print("ok consensus", r, flush=True)


def dead() -> None:
    """The last rank dies (SIGKILL-like ``os._exit``) after 15 steps; the others keep training and gossiping for 60
    steps: exchanges with it fail within the timeout and are counted, nobody hangs, stopping works (run it last)."""
    r, n = dist.get_rank(), dist.get_world_size()
    survivors = dist.new_group(list(range(n - 1)))  # (collective over all ranks: made before anyone dies)
    spec = ProblemSpec(hidden=16, batch=32)
    X, y = make_shard(spec, n, r)
    model = build_model(spec, seed=r)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    acid = Acid(model, opt, topology="ring", rate_com=2.0, exchange_timeout=3.0)
    t0 = time.monotonic()
    for i in range(60):
        if r == n - 1 and i == 15:
            os._exit(0)
        ts = time.monotonic()
        opt.zero_grad()
        F.cross_entropy(acid(X[:32]), y[:32]).backward()
        acid.step()
        time.sleep(max(0.0, STEP - (time.monotonic() - ts)))
    acid.stop_communication()
    dt = time.monotonic() - t0
    assert acid.comms > 0, acid
    assert dt < 60, f"training with a dead peer took {dt:.0f}s"
    assert acid.failed_exchanges <= 2, f"rank {r}: {acid.failed_exchanges} failed exchanges with one dead peer"
    print(f"dead: rank {r} comms {acid.comms} failed {acid.failed_exchanges} in {dt:.1f}s", flush=True)
    print("ok dead", r, flush=True)
    dist.barrier(group=survivors)  # rank 0 hosts the store: it must outlive the others' use of it
    os._exit(0)


if __name__ == "__main__":
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    scenarios = {"resume": resume, "consensus": consensus, "dead": dead}
    for name in sys.argv[1].split(","):
        t0 = time.monotonic()
        scenarios[name](*[int(a) for a in sys.argv[2:]])
        print(f"{name} took {time.monotonic() - t0:.1f}s", flush=True)
    dist.barrier()
    dist.destroy_process_group()
