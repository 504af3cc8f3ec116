"""Scenarios run by tests/host/test_dear.py in real processes (tests/host/dist_run.py): DeAR against DDP with the
same optimizer, data and initial weights, over gloo and over the dlcp backend; flush, forward-order detection,
state_dict round trip, pluggable compressors, the tuner, and a dying peer.

``python -m tests.host.dear_worker SCENARIO BACKEND``; every rank prints ``ok <rank>`` at the end.
"""

from __future__ import annotations

import math
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from host.dear import DeAR, DeARError, TunerConfig
from host.dear.fusion import CommModel
from host.procexit import exit_process

FAST_COMM = CommModel(1e-4, 1e-9, 1e-4, 1e-9)  # skip the probe where the plan does not matter


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 4))


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(1, 4, 3)
        self.c2 = nn.Conv2d(4, 8, 3)
        self.fc = nn.Linear(8 * 4 * 4, 4)

    def forward(self, x):
        x = x.view(-1, 1, 8, 8)
        return self.fc(torch.flatten(F.relu(self.c2(F.relu(self.c1(x)))), 1))


class Shuffled(nn.Module):
    """Registration order a, b, c, head; forward order c, a, b (b twice), and head is never called: its weights
    are used functionally."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(20, 20)
        self.b = nn.Linear(20, 20)
        self.c = nn.Linear(20, 20)
        self.head = nn.Linear(20, 4)

    def forward(self, x):
        h = torch.tanh(self.b(self.a(torch.relu(self.c(x)))))
        h = torch.tanh(self.b(h))
        return F.linear(h, self.head.weight, self.head.bias)


def _opt(name: str, params):
    if name == "sgd":
        return torch.optim.SGD(params, lr=0.1)
    if name == "momentum":
        return torch.optim.SGD(params, lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-3)
    if name == "adam":
        return torch.optim.Adam(params, lr=0.01)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=0.01, weight_decay=0.05)
    raise ValueError(name)


def _batches(steps: int, accum: int, seed: int, dim: int = 20):
    g = torch.Generator().manual_seed(seed)
    return [[(torch.randn(16, dim, generator=g), torch.randint(0, 4, (16,), generator=g))
             for _ in range(accum)] for _ in range(steps)]


def _flat(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def _close(a: torch.Tensor, b: torch.Tensor, what: str, rtol=1e-5, atol=1e-6) -> None:
    torch.testing.assert_close(a, b, rtol=rtol, atol=atol, msg=lambda m: f"rank {dist.get_rank()} {what}: {m}")


def train_ddp(make, opt_name, batches, *, clip=None, sched=False, group=None) -> nn.Module:
    torch.manual_seed(0)
    model = make()
    ddp = DDP(model, process_group=group)
    opt = _opt(opt_name, ddp.parameters())
    sch = torch.optim.lr_scheduler.StepLR(opt, 2, 0.5) if sched else None
    for micro in batches:
        opt.zero_grad()
        for i, (x, y) in enumerate(micro):
            if i < len(micro) - 1:
                with ddp.no_sync():
                    F.cross_entropy(ddp(x), y).backward()
            else:
                F.cross_entropy(ddp(x), y).backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(ddp.parameters(), clip)
        opt.step()
        if sch is not None:
            sch.step()
    return model


def train_dear(group, make, opt_name, batches, *, clip=None, sched=False, seed=0, **kw):
    torch.manual_seed(seed)
    model = make()
    opt = _opt(opt_name, model.parameters())
    sch = torch.optim.lr_scheduler.StepLR(opt, 2, 0.5) if sched else None
    dear = DeAR(model, opt, group, max_grad_norm=clip, **kw)
    for micro in batches:
        opt.zero_grad()
        for i, (x, y) in enumerate(micro):
            if i < len(micro) - 1:
                with dear.no_sync():
                    F.cross_entropy(dear(x), y).backward()
            else:
                F.cross_entropy(dear(x), y).backward()
        dear.step()
        if sch is not None:
            sch.step()
    return model, opt, dear


def equivalence(backend: str, group) -> None:
    """DeAR == DDP after K steps, for several optimizers, fusion plans, accumulation, clipping, LR schedules."""
    r = dist.get_rank()
    if backend == "dlcp":
        configs = [("momentum", mlp, "layers", {}), ("adamw", mlp, 5000, {"clip": 0.3}),
                   ("adamw", SmallCNN, "auto", {"accum": 2})]
    else:
        configs = [("sgd", mlp, 10 ** 9, {"accum": 2}), ("momentum", mlp, "layers", {"sched": True}),
                   ("adam", SmallCNN, "auto", {"clip": 0.3}),
                   ("adamw", SmallCNN, 600, {"sched": True, "clip": 1.0, "accum": 3, "prefetch": 2})]
    tagged: list[tuple[float, int]] = []
    if backend == "dlcp":  # record what DeAR hands the backend per collective (loss bound, layer position)
        import host.backend
        real = host.backend.loss_bound_scope

        def spy(bound, layer=None, **kw):
            tagged.append((bound, layer))
            return real(bound, layer, **kw)
        host.backend.loss_bound_scope = spy
    for opt_name, make, fusion, kw in configs:
        batches = _batches(5, kw.get("accum", 1), seed=10 + r, dim=64 if make is SmallCNN else 20)
        ref = train_ddp(make, opt_name, batches, clip=kw.get("clip"), sched=kw.get("sched", False),
                        group=group)
        tagged.clear()
        model, _, dear = train_dear(group, make, opt_name, batches, clip=kw.get("clip"),
                                    sched=kw.get("sched", False), fusion=fusion, prefetch=kw.get("prefetch", 1))
        if backend == "dlcp":  # every collective tagged, front groups with the smaller (higher-priority) layer
            G = len(dear.plan)
            positions = [dear._groups[g].position for g in range(G)]
            assert positions == sorted(positions) and positions[0] == 0, positions
            # One iteration: reduce-scatters last group first (backward), then all-gathers first group first
            # (group 0's from step(), the others from the next forward), each tagged with its group's layer; the
            # run ends with the last step's reduce-scatters and group 0's all-gather.
            assert tagged[-(G + 1):] == [(0.0, positions[g]) for g in reversed(range(G))] + [(0.0, positions[0])], \
                (tagged, positions)
            layers = [la for _, la in tagged]
            cycle = [positions[g] for g in reversed(range(G))] + positions
            assert any(layers[i:i + 2 * G] == cycle for i in range(len(layers))), (tagged, positions)
            assert len(tagged) >= 5 and {b for b, _ in tagged} == {0.0}, tagged
        before = _flat(model)
        dear.flush()
        what = f"{opt_name} {make.__name__} fusion={fusion} {kw} plan={dear.plan}"
        assert not torch.equal(before, _flat(model)), f"{what}: the last update was not deferred"
        _close(_flat(model), _flat(ref), what)
        if kw.get("clip"):
            assert dear.last_grad_norm is not None and dear.last_grad_norm > 0
        if fusion == "layers":
            assert len(dear.plan) == len(dear.forward_order), dear.plan
        if fusion == 10 ** 9:
            assert len(dear.plan) == 1, dear.plan
        if fusion == "auto":
            assert dear.comm_model is not None and dear.cost_table, "auto: no cost model"
        dear.close()
        print("equal", what, flush=True)


class AllReduceCompressor:
    """The whole exchange in the first half (one all-reduce); the second half returns it without communicating."""

    class _Done:
        def __init__(self, v):
            self.v = v

        def wait(self):
            return self.v

    class _Work:
        def __init__(self, w, v):
            self.w, self.v = w, v

        def wait(self):
            self.w.wait()
            return self.v

    def __init__(self):
        self.calls: list[tuple[str, int]] = []

    def start_reduce_scatter(self, group_index, flat_grad, process_group):
        self.calls.append(("rs", group_index))
        buf = flat_grad.clone()
        return self._Work(dist.all_reduce(buf, group=process_group, async_op=True), buf)

    def start_all_gather(self, group_index, rs_result, process_group):
        self.calls.append(("ag", group_index))
        return self._Done(rs_result)


class Fp16Compressor:
    """Real compression: the reduce-scatter and all-gather carry fp16 (half the bytes)."""

    def __init__(self, world):
        self.world = world

    class _Work:
        def __init__(self, w, fn):
            self.w, self.fn = w, fn

        def wait(self):
            self.w.wait()
            return self.fn()

    def start_reduce_scatter(self, group_index, flat_grad, process_group):
        half = flat_grad.half()
        shard = torch.empty(flat_grad.numel() // self.world, dtype=torch.float16)
        w = dist.reduce_scatter_single(shard, half, group=process_group, async_op=True)
        return self._Work(w, lambda: shard)

    def start_all_gather(self, group_index, rs_result, process_group):
        full = torch.empty(rs_result.numel() * self.world, dtype=torch.float16)
        w = dist.all_gather_single(full, rs_result, group=process_group, async_op=True)
        return self._Work(w, lambda: full.float())


def features(backend: str, group) -> None:
    r, P = dist.get_rank(), dist.get_world_size()
    # forward order differs from registration; a module called twice; a module never called
    batches = _batches(4, 1, seed=20 + r)
    ref = train_ddp(Shuffled, "momentum", batches, group=group)
    model, _, dear = train_dear(group, Shuffled, "momentum", batches, fusion="layers")
    assert dear.forward_order == ["head", "c", "a", "b"], dear.forward_order
    dear.flush()
    _close(_flat(model), _flat(ref), "out-of-order forward")
    dear.close()

    # flush: deferred after step(); applied by flush(), by an eval forward, by state_dict() on one rank only
    batches = _batches(5, 1, seed=30 + r)
    ref3 = train_ddp(mlp, "adamw", batches[:3], group=group)
    ref5 = train_ddp(mlp, "adamw", batches, group=group)
    model, opt, dear = train_dear(group, mlp, "adamw", batches[:2], fusion=1000)
    before = _flat(model)
    x, y = batches[2][0]
    opt.zero_grad()
    F.cross_entropy(dear(x), y).backward()
    after_bwd = _flat(model)  # the forward applied step 2's update
    assert not torch.equal(before, after_bwd)
    dear.step()
    assert torch.equal(_flat(model), after_bwd), "step() must not update parameters"
    if r == 0:  # checkpointing on one rank only: state_dict() flushes
        sd = model.state_dict()
        _close(torch.cat([sd[k].reshape(-1) for k in sd]), _flat(ref3), "state_dict() flush on rank 0")
    else:
        with torch.no_grad():  # an evaluation forward applies the pending update before use
            model.eval()
            model(torch.zeros(1, 20))
            model.train()
        _close(_flat(model), _flat(ref3), "eval forward applies pending update")
    for micro in batches[3:]:
        opt.zero_grad()
        F.cross_entropy(dear(micro[0][0]), micro[0][1]).backward()
        dear.step()
    dear.flush()
    _close(_flat(model), _flat(ref5), "training after a one-rank flush")
    dear.close()

    # state_dict round trip: 3 steps, save, fresh model/optimizer/DeAR (other init), load, 3 more == 6 steps
    batches = _batches(6, 1, seed=40 + r, dim=64)
    ref = train_ddp(SmallCNN, "adamw", batches, group=group)
    model, opt, dear = train_dear(group, SmallCNN, "adamw", batches[:3], fusion=2000)
    sd = dear.state_dict()
    dear.close()
    torch.manual_seed(1234)
    model2 = SmallCNN()
    opt2 = _opt("adamw", model2.parameters())
    dear2 = DeAR(model2, opt2, group, fusion=2000)
    dear2.load_state_dict(sd)
    for micro in batches[3:]:
        opt2.zero_grad()
        F.cross_entropy(dear2(micro[0][0]), micro[0][1]).backward()
        dear2.step()
    dear2.flush()
    _close(_flat(model2), _flat(ref), "state_dict round trip")
    dear2.close()

    # pluggable compressors
    batches = _batches(4, 1, seed=50 + r)
    ref = train_ddp(mlp, "momentum", batches, group=group)
    comp = AllReduceCompressor()
    model, _, dear = train_dear(group, mlp, "momentum", batches, fusion="layers", compressor=comp)
    dear.flush()
    _close(_flat(model), _flat(ref), "all-reduce compressor")
    G = len(dear.plan)
    assert comp.calls[:G] == [("rs", g) for g in reversed(range(G))], comp.calls[:G]
    assert comp.calls[G:2 * G] == [("ag", g) for g in range(G)], comp.calls[G:2 * G]
    dear.close()
    model, _, dear = train_dear(group, mlp, "momentum", batches, fusion=1500, compressor=Fp16Compressor(P))
    dear.flush()
    _close(_flat(model), _flat(ref), "fp16 compressor", rtol=0, atol=2e-3)
    assert not torch.equal(_flat(model), _flat(ref)), "fp16 compressor changed nothing: not on the path?"
    dear.close()

    # bad input: clear errors
    m = mlp()
    for kw, msg in (({"fusion": "big"}, "fusion must be"), ({"max_grad_norm": 0.0}, "max_grad_norm"),
                    ({"compressor": AllReduceCompressor(), "max_grad_norm": 1.0}, "ClippableCompressor"),
                    ({"compressor": object()}, "start_reduce_scatter")):
        try:
            DeAR(m, _opt("sgd", m.parameters()), group, broadcast_init=False, **kw)
        except (ValueError, TypeError) as e:
            assert msg in str(e), (kw, e)
        else:
            raise AssertionError(f"no error for {kw}")
    try:
        DeAR(m, _opt("sgd", list(m.parameters())[:-1]), group, broadcast_init=False, fusion="layers")
    except ValueError as e:
        assert "is not in the optimizer" in str(e) and "4.bias" in str(e), e
    else:
        raise AssertionError("parameter missing from the optimizer not detected")
    if backend != "dlcp":
        try:
            DeAR(m, _opt("sgd", m.parameters()), group, broadcast_init=False, fusion="layers", loss_bound=0.01)
        except ValueError as e:
            assert "dlcp" in str(e)
        else:
            raise AssertionError("loss_bound accepted on gloo")
    # two backward passes without no_sync in one step: refused
    model, opt, dear = train_dear(group, mlp, "sgd", [], fusion="layers")
    x, y = batches[0][0]
    F.cross_entropy(dear(x), y).backward()
    try:
        F.cross_entropy(dear(x), y).backward()
    except DeARError as e:
        assert "one backward per step" in str(e), e
    else:
        raise AssertionError("second backward accepted")


def tune(backend: str, group) -> None:
    """Online Bayesian tuning: plans change between iterations, rank 0 decides, the result equals DDP."""
    r = dist.get_rank()
    batches = _batches(16, 1, seed=60 + r, dim=64)
    ref = train_ddp(SmallCNN, "adamw", batches, group=group)
    cfg = TunerConfig(trials=4, window=1, settle=1, n_init=2)
    model, _, dear = train_dear(group, SmallCNN, "adamw", batches, fusion="auto", tune=cfg)
    dear.flush()
    _close(_flat(model), _flat(ref), "tuned")
    assert not dear.tuning, "tuning did not finish"
    thr = torch.tensor([float(dear.threshold)], dtype=torch.float64)
    all_thr = [torch.zeros(1, dtype=torch.float64) for _ in range(dist.get_world_size())]
    dist.all_gather(all_thr, thr)
    assert len({float(t) for t in all_thr}) == 1, f"ranks ended with different thresholds {all_thr}"
    if r == 0:
        hist = dear.tune_history
        assert len(hist) >= 2, hist
        keys = {dear._plan_key(math.log2(max(t, 1))) for t, _ in hist}
        assert len(keys) == len(hist), f"a plan was measured twice: {hist}"
        best = min(hist, key=lambda h: h[1])[0]
        assert dear._plan_key(math.log2(max(best, 1))) == \
            dear._plan_key(math.log2(max(dear.threshold, 1))), (hist, dear.threshold)
        assert tuple(len(g) for g in dear.plan) == dear._plan_key(math.log2(max(dear.threshold, 1))), dear.plan
        print("tune history", hist, "kept", dear.threshold, flush=True)


def dead() -> None:
    """Rank 1 dies in the middle of a backward pass. Rank 0 trains two DeARs in lockstep, one over a gloo group,
    one over the dlcp default group: each raises DeARError within its timeout, and stays failed."""
    r = dist.get_rank()
    gloo = dist.new_group(backend="gloo", timeout=timedelta(seconds=20))
    dears = {}
    for name, group in (("gloo", gloo), ("dlcp", None)):
        torch.manual_seed(0)
        model = mlp()
        dears[name] = DeAR(model, _opt("sgd", model.parameters()), group, fusion="layers")
    batches = _batches(4, 1, seed=r)
    for step, micro in enumerate(batches[:2]):  # both healthy for two steps
        for dear in dears.values():
            x, y = micro[0]
            F.cross_entropy(dear(x), y).backward()
            dear.step()
    x, y = batches[2][0]
    for name, dear in dears.items():
        t0 = time.monotonic()
        try:
            out = dear(x)  # (dlcp: may already fail here, on the all-gather of the pending update)
            if r == 1:
                def die(grad):
                    os._exit(0)
                out.register_hook(die)
            F.cross_entropy(out, y).backward()
            dear.step()
            dear(x)  # the pending update's all-gathers
        except DeARError as e:
            dt = time.monotonic() - t0
            assert dt < 30, f"{name}: error took {dt:.1f}s"
            try:
                dear.step()
            except DeARError as e2:
                assert "unusable" in str(e2)
            else:
                raise AssertionError(f"{name}: DeAR kept going after a failure")
            print(f"{name}: error after {dt:.1f}s: {e}", flush=True)
        else:
            print(f"{name}: no error", file=sys.stderr, flush=True)
            os._exit(1)
    os._exit(0)


def main_scenario() -> None:
    """DeAR over the dlcp default group and over a gloo subgroup of the same processes."""
    gloo = dist.new_group(backend="gloo")
    equivalence("gloo", gloo)
    equivalence("dlcp", None)
    features("gloo", gloo)
    tune("gloo", gloo)


if __name__ == "__main__":
    torch.set_num_threads(1)
    os.environ.setdefault("DLCP_TIMEOUT", "4")
    os.environ.setdefault("DLCP_PEER_TIMEOUT", "2")
    dist.init_process_group("dlcp", timeout=timedelta(seconds=60))
    {"main": main_scenario, "dead": dead}[sys.argv[1]]()
    print("ok", dist.get_rank(), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    exit_process()  # not interpreter finalization: see host/procexit.py
