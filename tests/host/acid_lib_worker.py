"""Scenarios of tests/host/test_acid_library.py in real processes over gloo, launched like torchrun
(tests/host/dist_run.py): the A²CiD² library on an existing process group, pairing on its store.

``python -m tests.host.acid_lib_worker SCENARIO[,SCENARIO...] [ARGS]``; each scenario prints ``ok <name> <rank>``.

* ``resume_save`` / ``resume_load`` (ring of 4: on 2 or 3 ranks the ring is complete, alpha~ = 1/2 and x~ moves
  with x): Adam + StepLR in the deterministic test mode (no background gossip, explicit exchanges on a fixed
  schedule, a scripted clock): save after 3 steps (``ACID_DIR``); new processes load into fresh objects and make
  3 more steps == 6 uninterrupted steps, bit for bit.
* ``consensus_scheduled`` (ring of n): A²CiD² and plain gossip on the same random schedules, batches and scripted
  clock (deterministic); rank 0 prints the mean consensus distance of each per schedule.
* ``consensus`` (ring of n): A²CiD² and plain asynchronous gossip at the same rate on the non-iid MLP task, steps
  padded to ``STEP`` seconds (an emulated accelerator); rank 0 prints the achieved rate, the final averaged model's
  loss and the consensus distance.
* ``dead`` (last): the last rank dies mid-training; the others' exchanges with it fail within the timeout, are
  counted, training goes on, and ``finish()`` averages the survivors.
"""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

from host.acid.library import Acid
from host.acid.monitor import consensus_distance
from host.acid.problem import ProblemSpec, build_model, make_full, make_shard
from host.procexit import exit_process

STEP = 0.03


def _resume_setup():
    """The deterministic test mode: no background gossip, explicit exchanges on a fixed schedule, a scripted clock
    (mixing depends on elapsed time). Returns ``(build, train)``."""
    r, n = dist.get_rank(), dist.get_world_size()
    assert n % 2 == 0 and n >= 4, "resume needs an even ring of >= 4"
    spec = ProblemSpec(hidden=16, samples_per_worker=128, batch=32)
    X, y = make_shard(spec, n, r)
    batches = [(X[i * 16:(i + 1) * 16], y[i * 16:(i + 1) * 16]) for i in range(6)]
    now = [0.0]

    def build(seed: int = 0, start_average: bool = True):
        model = build_model(spec, seed=seed * 100 + r)  # different initial models: the start average matters
        opt = torch.optim.Adam(model.parameters(), lr=0.01)
        sch = torch.optim.lr_scheduler.StepLR(opt, 2, 0.5)
        return model, Acid(model, opt, scheduler=sch, communicate=False, start_average=start_average,
                           clock=lambda: now[0])

    def train(acid, steps):
        for i in steps:
            now[0] = float(i)
            acid.optimizer.zero_grad()
            F.cross_entropy(acid(batches[i][0]), batches[i][1]).backward()
            acid.step()
            if i in (1, 3, 4):  # pairs (0,1)(2,3)..., then (1,2)(3,4)...(n-1,0), then the first again
                now[0] = i + 0.5
                peer = r ^ 1 if i != 3 else ((r + 1) % n if r % 2 else (r - 1) % n)
                acid.exchange(peer, pair_id=i)

    def set_clock(t: float) -> None:
        now[0] = t

    return build, train, set_clock


def resume_save() -> None:
    """6 uninterrupted steps (x, x~ saved), then a fresh run of 3 steps whose state_dict is saved (ACID_DIR)."""
    r = dist.get_rank()
    d = Path(os.environ["ACID_DIR"])
    build, train, _ = _resume_setup()
    model, acid = build()
    train(acid, range(6))
    assert not torch.equal(acid.x, acid.xt), "x~ never left x: the momentum did nothing"
    torch.save({"x": acid.x.clone(), "xt": acid.xt.clone()}, d / f"full-{r}.pt")
    acid.finish(average=False)
    model, acid = build()
    train(acid, range(3))
    torch.save(acid.state_dict(), d / f"ckpt-{r}.pt")
    acid.finish(average=False)
    print("ok resume_save", r, flush=True)


def resume_load() -> None:
    """New processes: fresh model, optimizer, scheduler and Acid (other initial weights, no start average), the
    checkpoint loaded, steps 3..5: x, x~ and the model equal the uninterrupted run's bit for bit."""
    r = dist.get_rank()
    d = Path(os.environ["ACID_DIR"])
    build, train, set_clock = _resume_setup()
    model, acid = build(seed=50, start_average=False)
    # a checkpoint carries no clock: mixing time counts from the load. The scripted clock resumes at the save's
    # time (step 2), as the uninterrupted run's clock reads there
    set_clock(2.0)
    acid.load_state_dict(torch.load(d / f"ckpt-{r}.pt", weights_only=False))
    train(acid, range(3, 6))
    full = torch.load(d / f"full-{r}.pt")
    assert torch.equal(acid.x, full["x"]) and torch.equal(acid.xt, full["xt"]), "resumed != uninterrupted"
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    assert torch.equal(flat, full["x"]), "the model does not hold x"
    acid.finish()
    print("ok resume_load", r, flush=True)


def _schedule(n: int, steps: int, rate: float, seed: int) -> list[list[tuple[float, int, int]]]:
    """A shared random gossip schedule on the ring of ``n``: every worker's Poisson clock at ``rate`` events per
    step picks a neighbour uniformly; per step ``i``, the events ``(t, a, b)`` with ``i < t < i + 1``, in time
    order. Every rank draws the same schedule from ``seed``, so pairwise blocking exchanges taken in this one
    global order cannot deadlock."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(steps):
        k = rng.poisson(rate * n)
        ts = np.sort(rng.uniform(i, i + 1, k))
        ev = []
        for t in ts:
            a = int(rng.integers(n))
            b = (a + (1 if rng.integers(2) else -1)) % n
            ev.append((float(t), a, b))
        out.append(ev)
    return out


def consensus_scheduled(steps: int = 150, seeds: int = 3) -> None:
    """A²CiD² and plain gossip on the same random schedule (``_schedule``, rate 1) with the same batches and a
    scripted clock (one unit per step), so that only the algorithm differs: timing noise, which on a busy machine
    is as large as A²CiD²'s gain on a ring of 4 (sqrt(chi1/chi2) = 1.15), cannot reverse the comparison. Rank 0
    prints, per schedule seed, the mean consensus distance of each over the last two thirds of the run."""
    r, n = dist.get_rank(), dist.get_world_size()
    spec = ProblemSpec(hidden=32, batch=64)
    X, y = make_shard(spec, n, r)
    out: dict[str, list[float]] = {"gossip": [], "acid": []}
    for seed in range(seeds):
        sched = _schedule(n, steps, 1.0, seed)
        for algo in ("gossip", "acid"):
            gen = torch.Generator().manual_seed(1000 * seed + r)
            now = [0.0]
            model = build_model(spec, seed=r)
            opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
            acid = Acid(model, opt, topology="ring", rate_com=1.0, algo=algo, communicate=False,
                        clock=lambda: now[0])
            snaps = []
            for i in range(steps):
                now[0] = float(i)
                idx = torch.randint(0, X.shape[0], (spec.batch,), generator=gen)
                opt.zero_grad()
                F.cross_entropy(acid(X[idx]), y[idx]).backward()
                acid.step()
                for k, (t, a, b) in enumerate(sched[i]):
                    if r in (a, b):
                        now[0] = t
                        acid.exchange(b if r == a else a, pair_id=i * 1000 + k)
                if i >= steps // 3:
                    now[0] = i + 1.0
                    snaps.append(acid.consensus_snapshot())
            stack = torch.stack(snaps)
            every = [torch.empty_like(stack) for _ in range(n)]
            dist.all_gather(every, stack)
            cons = [consensus_distance(np.stack([e[k].numpy() for e in every])) for k in range(stack.shape[0])]
            out[algo].append(float(np.mean(cons)))
            acid.finish(average=False)
    if r == 0:
        print("scheduled " + json.dumps(out), flush=True)
    print("ok consensus_scheduled", r, flush=True)


def consensus(steps: int = 120) -> None:
    """A²CiD² and plain asynchronous gossip at rate 1 in real time (background pairing on the store, steps padded
    to ``STEP`` seconds, an emulated accelerator): both achieve most of the requested rate, no exchange fails, and
    both train; rank 0 prints the rate, the final averaged model's loss and the consensus distance of each. Which
    of the two is closer is ``consensus_scheduled``'s question: here the machine's timing decides too much."""
    r, n = dist.get_rank(), dist.get_world_size()
    spec = ProblemSpec(hidden=32, batch=64)
    X, y = make_shard(spec, n, r)
    gen = torch.Generator().manual_seed(r)
    out = {}
    for algo in ("gossip", "acid"):
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
        out[algo] = {"consensus": float(np.mean(cons)), "comms_per_step": float(comms[0]) / (n * steps),
                     "loss": loss, "failed": int(comms[1])}
    if r == 0:
        print("consensus " + json.dumps(out), flush=True)
    print("ok consensus", r, flush=True)


def dead() -> None:
    """The last rank dies (``os._exit``, no goodbye) after 15 steps; the others keep training and gossiping for 60
    steps: exchanges with it fail within the timeout and are counted, nobody hangs, and ``finish()`` averages the
    survivors' models (the dead rank is left out after ``dead_after``) (run it last)."""
    r, n = dist.get_rank(), dist.get_world_size()
    spec = ProblemSpec(hidden=16, batch=32)
    X, y = make_shard(spec, n, r)
    model = build_model(spec, seed=r)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    acid = Acid(model, opt, topology="ring", rate_com=2.0, exchange_timeout=3.0, dead_after=3.0)
    t0 = time.monotonic()
    for i in range(60):
        if r == n - 1 and i == 15:
            os._exit(0)
        ts = time.monotonic()
        opt.zero_grad()
        F.cross_entropy(acid(X[:32]), y[:32]).backward()
        acid.step()
        time.sleep(max(0.0, STEP - (time.monotonic() - ts)))
    acid.finish()
    dt = time.monotonic() - t0
    assert acid.survivors == list(range(n - 1)), acid.survivors
    assert acid.comms > 0, acid
    assert dt < 60, f"training with a dead peer took {dt:.0f}s"
    assert acid.failed_exchanges <= 2, f"rank {r}: {acid.failed_exchanges} failed exchanges with one dead peer"
    x = acid.x.clone()
    dist.all_reduce(x, group=acid.final_group)  # every survivor holds the same average
    assert torch.equal(x / (n - 1), acid.x), "survivors' final models differ"
    print(f"dead: rank {r} comms {acid.comms} failed {acid.failed_exchanges} in {dt:.1f}s", flush=True)
    print("ok dead", r, flush=True)
    dist.barrier(group=acid.final_group)  # rank 0 hosts the store: it must outlive the others' use of it
    os._exit(0)


if __name__ == "__main__":
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    scenarios = {"resume_save": resume_save, "resume_load": resume_load, "consensus": consensus,
                 "consensus_scheduled": consensus_scheduled, "dead": dead}
    for name in sys.argv[1].split(","):
        t0 = time.monotonic()
        scenarios[name](*[int(a) for a in sys.argv[2:]])
        print(f"{name} took {time.monotonic() - t0:.1f}s", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    exit_process()  # not interpreter finalization: see host/procexit.py
