"""Scenarios run by tests/host/test_spardl.py in real processes (gloo or dlcp): SparDL over a process group's
send/recv against the in-memory simulation of the same program, the DDP comm hook, the DeAR compressor, a dead
peer. ``python -m tests.host.spardl_worker SCENARIO[,SCENARIO...] BACKEND`` (one process start for several
scenarios: starting Python with torch costs seconds on a loaded machine)."""

from __future__ import annotations

import os
import sys
import time

import torch
import torch.distributed as dist

from host.procexit import exit_process
from host.spardl import (Plan, SparDLCompressor, SparDLHookState, SparDLState, run_simulated, sparse_allreduce,
                         spardl, spardl_hook)


def _inputs(P: int, n: int, it: int, dtype=torch.float32) -> list[torch.Tensor]:
    """Every rank's input of iteration ``it``, computable on any rank (so each can replay the simulation)."""
    return [torch.randn(n, generator=torch.Generator().manual_seed(1000 * it + r)).to(dtype) for r in range(P)]


def _gather(t: torch.Tensor, group) -> list[torch.Tensor]:
    out = [torch.empty_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(out, t, group=group)
    return out


def name_of() -> str:
    return sys._getframe(1).f_code.co_name


def allreduce() -> None:
    """sparse_allreduce with error feedback over the backend == the simulation, bit for bit; conservation."""
    r, P = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo")
    n = 10_007
    for teams in [d for d in (1, 2, P) if P % d == 0 and d <= P]:
        for density in (0.01, 1.0):
            state = SparDLState()
            sim_res = [torch.zeros(n) for _ in range(P)]
            plan = Plan.make(n, P, teams, density, torch.float32)
            sim_h = [plan.new_h(q) for q in range(P)]
            for it in range(3):
                xs = _inputs(P, n, it)
                t = xs[r].clone()
                out = sparse_allreduce(t, density, teams=teams, state=state, key="g")
                sims = run_simulated([spardl(plan, q, xs[q] + sim_res[q], sim_h[q].h) for q in range(P)])
                for q in range(P):
                    sim_res[q] = sims[q].residual
                    sim_h[q].update(sims[q].union)
                what = f"teams={teams} density={density} it={it}"
                assert torch.equal(t, sims[r].result), what
                assert torch.equal(out.residual, sims[r].residual), what
                if density == 1.0:
                    dense = xs[r].clone()
                    dist.all_reduce(dense, group=gloo)
                    torch.testing.assert_close(t, dense, rtol=1e-5, atol=1e-5, msg=lambda m: f"{what}: {m}")
                results = _gather(t, gloo)
                assert all(torch.equal(results[0], x) for x in results), f"{what}: ranks disagree"
    # averaging and a non-flat tensor
    x = torch.arange(12, dtype=torch.float64).reshape(3, 4) * (r + 1)
    sparse_allreduce(x, 1.0, average=True)
    torch.testing.assert_close(x, torch.arange(12, dtype=torch.float64).reshape(3, 4) * (P + 1) / 2)
    y = torch.arange(24, dtype=torch.float64).reshape(4, 6).t() * (r + 1)  # non-contiguous: copied back
    sparse_allreduce(y, 1.0, average=True)
    torch.testing.assert_close(y, torch.arange(24, dtype=torch.float64).reshape(4, 6).t() * (P + 1) / 2)
    dist.barrier(group=gloo)
    print("ok", name_of(), r, flush=True)


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(),
                               torch.nn.Linear(64, 4))


def hook() -> None:
    """DDP with the SparDL hook: density 1 gives the default hook's weights; 5% keeps ranks identical, trains."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    r = dist.get_rank()
    gloo = dist.new_group(backend="gloo")
    weights, losses = {}, {}
    for name, density in (("default", None), ("spardl-1.0", 1.0), ("spardl-0.05", 0.05)):
        model = _model()
        ddp = DDP(model, bucket_cap_mb=0.01)
        state = None
        if density is not None:
            state = SparDLHookState(density, teams=1 if dist.get_world_size() % 2 else 2)
            ddp.register_comm_hook(state, spardl_hook)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.2)
        g = torch.Generator().manual_seed(100 + r)
        xs, ys = torch.randn(64, 20, generator=g), torch.randint(0, 4, (64,), generator=g)
        hist = []
        for step in range(20):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(ddp(xs), ys)
            loss.backward()
            opt.step()
            hist.append(loss.item())
        weights[name] = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        losses[name] = hist
        if state is not None:
            assert state.iteration == 20 and state.bytes_sent > 0, (state.iteration, state.bytes_sent)
            assert state.state.residuals, "no residual kept"
            state.close()
    torch.testing.assert_close(weights["spardl-1.0"], weights["default"], rtol=1e-4, atol=1e-5)
    everyone = _gather(weights["spardl-0.05"], gloo)
    assert all(torch.equal(everyone[0], w) for w in everyone), "ranks' weights differ"
    dense_gain = losses["default"][0] - losses["default"][-1]
    sparse_gain = losses["spardl-0.05"][0] - losses["spardl-0.05"][-1]
    assert sparse_gain > 0.3 * dense_gain > 0, (losses["default"], losses["spardl-0.05"])
    print("ok", name_of(), r, flush=True)


def compressor() -> None:
    """The DeAR GroupCompressor protocol: reduce-scatters of several groups in flight, all-gathers later, in
    DeAR's order; the results equal the simulation of SparDL on the same inputs, with residuals carried."""
    r, P = dist.get_rank(), dist.get_world_size()
    teams = 2 if P % 2 == 0 else 1
    comp = SparDLCompressor(0.02, teams=teams)
    sizes = [P * 1000, P * 37, P * 5000]
    sim_res = {g: [torch.zeros(n) for _ in range(P)] for g, n in enumerate(sizes)}
    sim_h = {}
    for it in range(3):
        flats = {g: _inputs(P, n, 10 * it + g) for g, n in enumerate(sizes)}
        handles = {g: comp.start_reduce_scatter(g, flats[g][r].clone(), None) for g in reversed(range(len(sizes)))}
        rs = {g: handles[g].wait() for g in reversed(range(len(sizes)))}
        for g in range(len(sizes)):
            full = comp.start_all_gather(g, rs[g], None).wait()
            plan = Plan.make(sizes[g], P, teams, 0.02, torch.float32)
            hs = sim_h.setdefault(g, [plan.new_h(q) for q in range(P)])
            sims = run_simulated([spardl(plan, q, flats[g][q] + sim_res[g][q], hs[q].h) for q in range(P)])
            for q in range(P):
                sim_res[g][q] = sims[q].residual
                hs[q].update(sims[q].union)
            assert full.shape == flats[g][r].shape and full.dtype == torch.float32
            assert torch.equal(full, sims[r].result), f"group {g} iteration {it}"
    try:
        comp.start_all_gather(0, "not a result", None)
    except TypeError as e:
        assert "reduce-scatter result" in str(e)
    else:
        raise AssertionError("a foreign rs_result was accepted")
    comp.close()
    print("ok", name_of(), r, flush=True)


def dear() -> None:
    """DeAR training with SparDLCompressor at density 1.0 equals DeAR's dense default; at 5% ranks agree."""
    from host.dear import DeAR

    r = dist.get_rank()
    gloo = dist.new_group(backend="gloo")
    out = {}
    for name, density in (("dense", None), ("spardl-1.0", 1.0), ("spardl-0.05", 0.05)):
        model = _model()
        kw = {} if density is None else {"compressor": SparDLCompressor(density)}
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        d = DeAR(model, opt, fusion="layers", **kw)
        g = torch.Generator().manual_seed(100 + r)
        xs, ys = torch.randn(64, 20, generator=g), torch.randint(0, 4, (64,), generator=g)
        for _ in range(10):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(d(xs), ys).backward()
            d.step()
        d.flush()
        out[name] = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        d.close()
    torch.testing.assert_close(out["spardl-1.0"], out["dense"], rtol=1e-4, atol=1e-5)
    everyone = _gather(out["spardl-0.05"], gloo)
    assert all(torch.equal(everyone[0], w) for w in everyone), "ranks' weights differ"
    print("ok", name_of(), r, flush=True)


def dead_peer() -> None:
    """Rank 1 dies; rank 0's sparse_allreduce fails within the timeout instead of hanging (run it last)."""
    r = dist.get_rank()
    dist.barrier()
    if r == 1:
        sys.stdout.flush()
        os._exit(0)
    time.sleep(0.5)
    t0 = time.monotonic()
    try:
        sparse_allreduce(torch.randn(100_000), 0.01, timeout=5)
    except Exception as e:  # noqa: BLE001 - the point of the scenario
        dt = time.monotonic() - t0
        assert dt < 20, f"error took {dt:.1f}s"
        print(f"error after {dt:.1f}s: {type(e).__name__}: {e}", flush=True)
        os._exit(0)
    print("no error", file=sys.stderr)
    os._exit(1)


if __name__ == "__main__":
    from datetime import timedelta

    torch.set_num_threads(1)
    scenarios = {"allreduce": allreduce, "hook": hook, "compressor": compressor, "dear": dear,
                 "dead-peer": dead_peer}
    names = sys.argv[1].split(",")
    if "dead-peer" in names:
        os.environ.setdefault("DLCP_TIMEOUT", "3")
        os.environ.setdefault("DLCP_PEER_TIMEOUT", "2")
    dist.init_process_group(sys.argv[2], timeout=timedelta(seconds=30))
    for name in names:
        t0 = time.monotonic()
        scenarios[name]()
        print(f"{name} took {time.monotonic() - t0:.1f}s", flush=True)
    dist.destroy_process_group()
    exit_process()  # not interpreter finalization: see host/procexit.py
