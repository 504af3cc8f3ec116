"""Scenarios of tests/host/test_dear_library.py in real processes over gloo (tests/host/dist_run.py): the library
contract of DeAR and SparDL. ``python -m tests.host.dear_lib_worker SCENARIO[,SCENARIO...]``; each scenario
prints ``ok <name> <rank>``.

* ``buffers``: BatchNorm running statistics follow DDP's (rank 0's broadcast at every training forward).
* ``unused``: a parameter the forward does not use no longer holds back the groups below it; equal to DDP with
  ``find_unused_parameters=True``.
* ``resume``: DeAR (``fusion="auto"`` + tuner) and DeAR + SparDL checkpointed and resumed in fresh objects end
  with the parameters of the uninterrupted run.
* ``conserve``: DeAR(fusion="auto", tuned) + SparDL re-plans several times; the sum of the applied updates plus
  every rank's residuals equals the sum of the gradients, parameter by parameter, across every re-plan. The same
  for the DDP hook across DDP's bucket rebuild.
* ``amp``: CPU autocast (bf16) + GradScaler with DeAR == with DDP, an inf gradient skipping the same step.
* ``bf16``: a bf16 model: DeAR's buffers and collectives stay bf16; parameters equal DDP's.
* ``mistake``: ``optimizer.step()`` called instead of ``dear.step()`` (and ``scaler.step(optimizer)``) fails at
  that call, naming ``dear.step()``, before any parameter changes; ``dear.step()`` then goes on as if it had not
  happened (equal to DDP); after ``dear.close()`` the optimizer is plain again.
* ``flush-timeout`` (last): rank 1 stops taking part after a step; rank 0's flush() raises within its timeout.
"""

from __future__ import annotations

import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from host.dear import DeAR, DeARError, DenseCompressor, TunerConfig
from host.dear.fusion import CommModel
from host.procexit import exit_process
from host.spardl import SparDLCompressor, SparDLHookState, spardl_hook

FAST_COMM = CommModel(1e-4, 1e-9, 1e-4, 1e-9)
TUNE = TunerConfig(trials=4, window=1, settle=1, n_init=2)


def _flat(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def _close(a, b, what: str, rtol=1e-5, atol=1e-6) -> None:
    torch.testing.assert_close(a, b, rtol=rtol, atol=atol, msg=lambda m: f"rank {dist.get_rank()} {what}: {m}")


def _data(steps: int, seed: int, dim: int = 12):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(16, dim, generator=g), torch.randint(0, 4, (16,), generator=g)) for _ in range(steps)]


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(12, 24), nn.ReLU(), nn.Linear(24, 24), nn.Tanh(), nn.Linear(24, 24), nn.ReLU(),
                         nn.Linear(24, 4))


class BNNet(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc1 = nn.Linear(12, 16)
        self.bn = nn.BatchNorm1d(16)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(torch.relu(self.bn(self.fc1(x))))


class Aux(nn.Module):
    """The last layer in forward order (``aux``) is called, but its output is thrown away: its parameters get no
    gradient, and they sit in the top fusion group."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a = nn.Linear(12, 16)
        self.b = nn.Linear(16, 4)
        self.aux = nn.Linear(16, 3)

    def forward(self, x):
        h = torch.relu(self.a(x))
        out = self.b(h)
        self.aux(h)  # unused branch
        return out


def buffers() -> None:
    r = dist.get_rank()
    data = _data(4, seed=100 + r)
    ref = BNNet()
    ddp = DDP(ref)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    for x, y in data:
        opt.zero_grad()
        F.cross_entropy(ddp(x * (1 + r)), y).backward()
        opt.step()
    for sync in (True, False):
        model = BNNet()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        dear = DeAR(model, opt, fusion="layers", comm_model=FAST_COMM, broadcast_buffers=sync)
        for x, y in data:
            opt.zero_grad()
            F.cross_entropy(dear(x * (1 + r)), y).backward()
            dear.step()
        dear.flush()
        mean = model.bn.running_mean.clone()
        everyone = [torch.empty_like(mean) for _ in range(dist.get_world_size())]
        dist.all_gather(everyone, mean)
        if sync:  # the last forward started from rank 0's statistics and updated them with its own batch: as DDP
            _close(model.bn.running_mean, ref.bn.running_mean, "running mean == DDP's")
            _close(model.bn.running_var, ref.bn.running_var, "running var == DDP's")
            assert int(model.bn.num_batches_tracked) == len(data)
            _close(_flat(model), _flat(ref), "parameters == DDP's")
        else:  # every rank keeps its own statistics
            assert not torch.equal(everyone[0], everyone[1]), "buffers synchronised although broadcast_buffers=False"
        dear.close()
    print("ok buffers", r, flush=True)


class _CountingDense(DenseCompressor):
    def __init__(self, world):
        super().__init__(world)
        self.started = 0

    def start_reduce_scatter(self, group_index, flat_grad, process_group):
        self.started += 1
        return super().start_reduce_scatter(group_index, flat_grad, process_group)


def unused() -> None:
    r, P = dist.get_rank(), dist.get_world_size()
    data = _data(5, seed=200 + r)
    ref = Aux()
    ddp = DDP(ref, find_unused_parameters=True)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    for x, y in data:
        opt.zero_grad()
        F.cross_entropy(ddp(x), y).backward()
        opt.step()
    for mode in (None, True, False):
        model = Aux()
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        comp = _CountingDense(P)
        dear = DeAR(model, opt, fusion="layers", compressor=comp, find_unused_parameters=mode)
        G = None
        before_step = []
        for x, y in data:
            opt.zero_grad()
            comp.started = 0
            F.cross_entropy(dear(x), y).backward()
            before_step.append(comp.started)  # reduce-scatters launched during backward
            dear.step()
            G = len(dear.plan)
        assert dear.forward_order[-1] == "aux" and G == 3, (dear.forward_order, dear.plan)
        if mode is None:  # the first iteration finds out at step(); from the second on, everything in backward
            assert before_step[0] == 0 and before_step[1:] == [G] * (len(data) - 1), before_step
        elif mode is True:
            assert before_step == [G] * len(data), before_step
        else:
            assert before_step == [0] * len(data), before_step
        dear.flush()
        _close(_flat(model), _flat(ref), f"find_unused_parameters={mode} == DDP")
        dear.close()
    print("ok unused", r, flush=True)


def _train(dear, opt, data) -> None:
    for x, y in data:
        opt.zero_grad()
        F.cross_entropy(dear(x), y).backward()
        dear.step()


def resume() -> None:
    """Uninterrupted vs save after 4 steps + fresh objects + load + 4 more; dense DeAR (auto + tuner) and
    DeAR + SparDL (residuals and h must come back)."""
    r = dist.get_rank()
    data = _data(8, seed=300 + r)
    for name in ("dense-tuned", "spardl"):
        def build():
            model = mlp()
            opt = torch.optim.AdamW(model.parameters(), lr=0.01)
            if name == "spardl":
                return model, opt, DeAR(model, opt, fusion=1500, comm_model=FAST_COMM,
                                        compressor=SparDLCompressor(0.1))
            return model, opt, DeAR(model, opt, fusion="auto", comm_model=FAST_COMM, tune=TUNE)
        model, opt, dear = build()
        _train(dear, opt, data)
        dear.flush()
        full = _flat(model)
        dear.close()
        model, opt, dear = build()
        _train(dear, opt, data[:4])
        ckpt = dear.state_dict()
        if name == "dense-tuned":
            assert ckpt["dear"]["tuner"] is not None and ckpt["dear"]["order"], ckpt["dear"]
        else:
            res = ckpt["dear"]["compressor"]["residuals"]
            assert res and any(float(t.abs().sum()) > 0 for t in res.values()), "no residual in the checkpoint"
        dear.close()
        torch.manual_seed(99)
        model2 = mlp()
        with torch.no_grad():
            for p in model2.parameters():
                p.add_(1.0)  # other weights: the checkpoint must bring them back
        model2, opt2, dear2 = build()
        dear2.load_state_dict(ckpt)
        assert dear2.threshold == ckpt["dear"]["threshold"] or ckpt["dear"]["next_threshold"] is not None
        _train(dear2, opt2, data[4:])
        dear2.flush()
        _close(_flat(model2), full, f"{name}: resumed == uninterrupted", rtol=1e-5, atol=1e-6)
        dear2.close()

    # DDP + SparDL hook. A fresh DDP's first iteration packs its bucket in registration order and the rebuilt one
    # is in gradient-ready order (reversed), and SparDL's blocks follow the buffer: resumed == uninterrupted needs
    # the same bucket layout, so this model has a single parameter. The residuals come back per parameter anyway.
    def one_param() -> nn.Module:
        torch.manual_seed(0)
        return nn.Linear(12, 4, bias=False)

    def build_ddp():
        model = one_param()
        ddp = DDP(model)
        state = SparDLHookState(0.1, model=model, dense_iterations=0)
        ddp.register_comm_hook(state, spardl_hook)
        return model, ddp, state, torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)

    def train_ddp(ddp, opt, batches):
        for x, y in batches:
            opt.zero_grad()
            F.cross_entropy(ddp(x), y).backward()
            opt.step()
    model, ddp, state, opt = build_ddp()
    train_ddp(ddp, opt, data)
    full = _flat(model)
    state.close()
    model, ddp, state, opt = build_ddp()
    train_ddp(ddp, opt, data[:4])
    ckpt = {"model": model.state_dict(), "opt": opt.state_dict(), "hook": state.state_dict()}
    assert ckpt["hook"]["sparse"]["residuals"], "no residual in the hook's checkpoint"
    state.close()
    model2 = one_param()
    model2.load_state_dict(ckpt["model"])
    ddp2 = DDP(model2)
    state2 = SparDLHookState(0.1, model=model2, dense_iterations=0)
    ddp2.register_comm_hook(state2, spardl_hook)
    opt2 = torch.optim.SGD(ddp2.parameters(), lr=0.1, momentum=0.9)
    opt2.load_state_dict(ckpt["opt"])
    state2.load_state_dict(ckpt["hook"])
    train_ddp(ddp2, opt2, data[4:])
    _close(_flat(model2), full, "DDP + SparDL hook: resumed == uninterrupted", rtol=1e-5, atol=1e-6)
    state2.close()
    print("ok resume", r, flush=True)


def _sum_all(t: torch.Tensor) -> torch.Tensor:
    t = t.clone()
    dist.all_reduce(t)
    return t


def conserve() -> None:
    r, P = dist.get_rank(), dist.get_world_size()
    lr = 0.5
    # DeAR(fusion="auto") tuned: plans change several times; SGD without momentum, so update == lr * result
    model = mlp()
    names = [n for n, _ in model.named_parameters()]
    params = dict(model.named_parameters())
    p0 = {n: p.detach().double().clone() for n, p in params.items()}
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    comp = SparDLCompressor(0.05)
    dear = DeAR(model, opt, fusion="auto", tune=TUNE, compressor=comp)
    grads = {n: torch.zeros_like(p, dtype=torch.float64) for n, p in params.items()}
    plans = []
    for x, y in _data(14, seed=400 + r):
        opt.zero_grad()
        F.cross_entropy(dear(x), y).backward()
        for n, p in params.items():
            grads[n] += p.grad.double()  # the local gradient (DeAR leaves .grad alone)
        dear.step()
        plans.append(tuple(len(g) for g in dear.plan))
    dear.flush()
    assert len(set(plans)) >= 3, f"DeAR did not re-plan enough: {plans}"
    res = comp.residuals_by_param()
    assert set(res) <= set(names) and res, sorted(res)
    assert sum(float(t.abs().sum()) for t in res.values()) > 0, "no residual at all: nothing was sparsified?"
    for n, p in params.items():
        applied = (p0[n] - p.detach().double()) / lr  # sum of the averaged updates applied
        resid = _sum_all(res[n].double().view_as(p)) if n in res else _sum_all(torch.zeros_like(p0[n]))
        want = _sum_all(grads[n]) / P
        _close(applied + resid, want, f"DeAR conservation of {n} across plans {sorted(set(plans))}",
               rtol=1e-4, atol=1e-5)
    dear.close()
    comp.close()

    # DDP hook: no dense warm-up, small buckets, DDP rebuilds them after the first iteration
    model = mlp()
    params = dict(model.named_parameters())
    p0 = {n: p.detach().double().clone() for n, p in params.items()}
    ddp = DDP(model, bucket_cap_mb=0.002)
    state = SparDLHookState(0.05, model=model, dense_iterations=0)
    ddp.register_comm_hook(state, spardl_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=lr)
    shadow = mlp()  # the local gradient at the same weights
    grads = {n: torch.zeros_like(p, dtype=torch.float64) for n, p in params.items()}
    layouts = []
    for x, y in _data(6, seed=500 + r):
        shadow.load_state_dict(model.state_dict())
        shadow.zero_grad()
        F.cross_entropy(shadow(x), y).backward()
        for n, p in shadow.named_parameters():
            grads[n] += p.grad.double()
        opt.zero_grad()
        F.cross_entropy(ddp(x), y).backward()
        opt.step()
        layouts.append(sorted(state.state.layouts.values()))
    assert layouts[0] != layouts[-1], "DDP did not rebuild its buckets: the test checks nothing"
    res = state.state.residuals_by_param()
    for n, p in params.items():
        applied = (p0[n] - p.detach().double()) / lr
        resid = _sum_all(res[n].double().view_as(p)) if n in res else _sum_all(torch.zeros_like(p0[n]))
        want = _sum_all(grads[n])
        _close(applied * P + resid, want, f"DDP hook conservation of {n} across the bucket rebuild",
               rtol=1e-4, atol=1e-5)
    sd = state.state_dict()
    assert set(sd["sparse"]["residuals"]) == set(res), "hook state_dict lacks residuals"
    state.close()
    print("ok conserve", r, flush=True)


def mistake() -> None:
    r = dist.get_rank()
    data = _data(4, seed=7 + r)

    def train(kind: str) -> torch.Tensor:
        model = mlp()
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        net = DDP(model) if kind == "ddp" else DeAR(model, opt, fusion=1500, comm_model=FAST_COMM)
        for i, (x, y) in enumerate(data):
            opt.zero_grad()
            F.cross_entropy(net(x), y).backward()
            if kind == "dear" and i == 1:
                before = _flat(model).clone()
                try:
                    opt.step()
                except DeARError as e:
                    assert "call dear.step() instead" in str(e), e
                else:
                    raise AssertionError("optimizer.step() under DeAR did not fail")
                scaler = torch.amp.GradScaler("cpu", init_scale=1.0)  # (scale 1: unscale_ leaves .grad as it is)
                scaler.scale(torch.ones(()))
                try:
                    scaler.step(opt)
                except DeARError as e:
                    assert "dear.step(scaler) for scaler.step(optimizer)" in str(e), e
                else:
                    raise AssertionError("scaler.step(optimizer) under DeAR did not fail")
                assert torch.equal(_flat(model), before), "the mistaken step changed parameters"
            (opt if kind == "ddp" else net).step()
        if kind == "dear":
            net.flush()
            net.close()
        out = _flat(model).clone()
        x, y = data[0]
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()  # after close() the optimizer is plain again: no error, the parameters move
        assert not torch.equal(_flat(model), out), "a plain step after close() changed nothing"
        return out

    ddp, dear = train("ddp"), train("dear")
    _close(dear, ddp, "DeAR after the refused optimizer.step() vs DDP")
    print("ok mistake", r, flush=True)


def flush_timeout() -> None:
    """Rank 1 stops after a step (alive, never flushing); rank 0's flush(timeout=2) raises instead of hanging."""
    r = dist.get_rank()
    gloo = dist.new_group(backend="gloo", timeout=timedelta(seconds=60))
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    dear = DeAR(model, opt, gloo, fusion="layers", comm_model=FAST_COMM)
    _train(dear, opt, _data(2, seed=r))
    if r == 1:  # alive, silent: its connections stay open, so only a timeout can end rank 0's wait
        time.sleep(6)
        os._exit(0)
    t0 = time.monotonic()
    try:
        dear.flush(timeout=2.0)
    except DeARError as e:
        dt = time.monotonic() - t0
        assert dt < 10, f"flush error took {dt:.1f}s"
        assert "flush()" in str(e) and "within 2.0s" in str(e), e
        print(f"flush error after {dt:.1f}s: {e}", flush=True)
        print("ok flush-timeout", r, flush=True)
        os._exit(0)
    print("flush returned although rank 1 never took part", file=sys.stderr, flush=True)
    os._exit(1)


def amp() -> None:
    """torch.amp with DeAR as with DDP: CPU autocast (bf16) and a GradScaler, 6 steps of AdamW; rank 1's batch of
    step 2 holds an inf, so both DDP and DeAR must skip that step on every rank (parameters and optimizer state
    unchanged, the scale backed off) and then go on; DeAR's parameters and scale follow DDP's at every step."""
    r = dist.get_rank()
    data = _data(6, seed=500 + r)
    if r == 1:
        data[2][0][0, 0] = float("inf")

    def run(kind: str):
        model = mlp()
        opt = torch.optim.AdamW(model.parameters(), lr=0.01)
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 10, growth_interval=2)
        net = DDP(model) if kind == "ddp" else DeAR(model, opt, fusion=1500, comm_model=FAST_COMM)
        params, scales = [], []
        for x, y in data:
            opt.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                out = net(x)
                assert out.dtype == torch.bfloat16, out.dtype  # autocast really ran the layers in bf16
                loss = F.cross_entropy(out.float(), y)
            scaler.scale(loss).backward()
            if kind == "ddp":
                scaler.step(opt)
            else:
                net.step(scaler)
            scaler.update()
            if kind == "dear":
                net.flush()
            params.append(_flat(model).clone())
            scales.append(scaler.get_scale())
        steps = {int(st["step"]) for st in opt.state.values()}
        if kind == "dear":
            assert net.skipped_steps == 1, net.skipped_steps
            net.close()
        return params, scales, steps

    ddp_p, ddp_s, ddp_steps = run("ddp")
    dear_p, dear_s, dear_steps = run("dear")
    assert ddp_s[2] == ddp_s[1] / 2 and torch.equal(ddp_p[2], ddp_p[1]), "DDP did not skip the inf step"
    assert torch.equal(dear_p[2], dear_p[1]), "DeAR applied the step with an inf gradient"
    assert dear_s == ddp_s, (dear_s, ddp_s)
    assert dear_steps == ddp_steps == {5}, (dear_steps, ddp_steps)  # AdamW stepped 5 times of 6
    # bit for bit: on two ranks both add two gradients each divided by the world size, then unscale the same way
    for i, (a, b) in enumerate(zip(dear_p, ddp_p)):
        assert torch.isfinite(a).all(), f"step {i}: non-finite parameters"
        assert torch.equal(a, b), f"step {i}: DeAR + GradScaler != DDP + GradScaler by {float((a - b).abs().max())}"
    print(f"amp: scales {dear_s}", flush=True)
    print("ok amp", r, flush=True)


def bf16() -> None:
    """A bf16 model: DeAR's group buffers, its reduce-scatter and all-gather stay in bf16 (no float32 round trip),
    and after 5 SGD steps the parameters equal DDP's (which all-reduces bf16 buckets)."""
    r = dist.get_rank()
    data = [(x.to(torch.bfloat16), y) for x, y in _data(5, seed=700 + r)]

    def run(kind: str):
        model = mlp().to(torch.bfloat16)
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        net = DDP(model) if kind == "ddp" else DeAR(model, opt, fusion=1500, comm_model=FAST_COMM)
        for x, y in data:
            opt.zero_grad()
            F.cross_entropy(net(x).float(), y).backward()
            (opt if kind == "ddp" else net).step()
        if kind == "dear":
            net.flush()
            dtypes = {g.flat.dtype for g in net._groups}
            assert dtypes == {torch.bfloat16}, f"DeAR's group buffers are {dtypes}, not bf16"
            net.close()
        return _flat(model)

    ddp, dear = run("ddp"), run("dear")
    assert dear.dtype == torch.bfloat16
    assert torch.equal(dear, ddp), f"bf16 DeAR != DDP by {float((dear.float() - ddp.float()).abs().max())}"
    print("ok bf16", r, flush=True)


if __name__ == "__main__":
    torch.set_num_threads(1)
    scenarios = {"buffers": buffers, "unused": unused, "resume": resume, "conserve": conserve,
                 "flush-timeout": flush_timeout, "amp": amp, "bf16": bf16,
                 "mistake": mistake}
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    for name in sys.argv[1].split(","):
        t0 = time.monotonic()
        scenarios[name]()
        print(f"{name} took {time.monotonic() - t0:.1f}s", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    exit_process()  # not interpreter finalization: see host/procexit.py
