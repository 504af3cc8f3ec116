"""DeAR against DDP: iteration time of a small CNN and a small transformer on CPU, 2 and 4 workers, over tbf-shaped
network-namespace links (communication made the bottleneck), side by side in the same processes.

Variants, each compared with DDP (bucketed WFBP, default 25 MB buckets) over the same backend in alternating
repetitions: per-layer WFBP (one all-reduce per layer as soon as its gradients are ready), DeAR without fusion
(``fusion="layers"``), DeAR with the cost-model fusion (``"auto"``) and DeAR with the buffer size found by online
Bayesian tuning (tuned once in the first repetition; the tuning iterations are reported, not timed).

Per (backend, workers), rank 0 records seconds per iteration (the median of a repetition's timed iterations, so
that a stall of the shared machine does not decide a repetition) for every variant and repetition, plus the
compute-only iteration time F (the same loop with no communication) and the blocking all-reduce time C of the
whole gradient; the fraction of communication hidden is ``(F + C - T) / C`` clipped to [0, 1].

Needs root (namespaces). ``DLCP_BENCH_QUICK=1``: 2 workers, gloo only, fewer iterations. ``DEAR_BENCH_RATE``
(tc syntax, default 400mbit), ``DEAR_BENCH_BACKENDS`` (default ``gloo,dlcp``), ``DEAR_BENCH_WORLDS`` (``2,4``).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import Report

ROOT = Path(__file__).resolve().parent.parent
QUICK = os.environ.get("DLCP_BENCH_QUICK") == "1"
RATE = os.environ.get("DEAR_BENCH_RATE", "400mbit")
BACKENDS = os.environ.get("DEAR_BENCH_BACKENDS", "gloo" if QUICK else "gloo,dlcp").split(",")
WORLDS = [int(w) for w in os.environ.get("DEAR_BENCH_WORLDS", "2" if QUICK else "2,4").split(",")]
REPS = 3
WARMUP = 4
ITERS = 6 if QUICK else 10
VARIANTS = ["wfbp", "dear-layers", "dear-auto", "dear-tuned"]
MODELS = ["cnn", "transformer"]


# ------------------------------------------------------------------------------------------------ worker side
def _models():
    import torch
    from torch import nn

    def cnn():
        return nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(64, 128, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
            nn.Linear(128 * 4 * 4, 256), nn.ReLU(), nn.Linear(256, 10))

    class Transformer(nn.Module):
        def __init__(self, vocab: int = 1000, d: int = 128, layers: int = 4):
            super().__init__()
            self.emb = nn.Embedding(vocab, d)
            self.enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(d, 4, 4 * d, dropout=0.0, batch_first=True),
                                             layers, enable_nested_tensor=False)
            self.out = nn.Linear(d, vocab)

        def forward(self, x):
            return self.out(self.enc(self.emb(x)))

    def data(name: str, rank: int):
        g = torch.Generator().manual_seed(rank)
        if name == "cnn":
            return torch.randn(16, 3, 32, 32, generator=g), torch.randint(0, 10, (16,), generator=g)
        return torch.randint(0, 1000, (8, 32), generator=g), torch.randint(0, 1000, (8, 32), generator=g)

    return {"cnn": cnn, "transformer": Transformer}, data


class LayerWFBP:
    """Per-layer WFBP baseline: each parameter-owning module's gradients are averaged by one async all-reduce as
    soon as they are all accumulated; step() waits, copies back and runs the optimizer."""

    def __init__(self, model, optimizer, group=None):
        import torch
        import torch.distributed as dist

        self.model, self.opt, self.group = model, optimizer, group
        self.world = dist.get_world_size(group)
        self.layers = [[p for p in m.parameters(recurse=False) if p.requires_grad] for m in model.modules()]
        self.layers = [ps for ps in self.layers if ps]
        self.left: dict[int, int] = {}
        self.works: list = []
        self.owner = {id(p): i for i, ps in enumerate(self.layers) for p in ps}
        for ps in self.layers:
            for p in ps:
                p.register_post_accumulate_grad_hook(self._ready)
        self._reset()
        self._torch, self._dist = torch, dist

    def _reset(self) -> None:
        self.left = {i: len(ps) for i, ps in enumerate(self.layers)}
        self.works = []

    def _ready(self, p) -> None:
        i = self.owner[id(p)]
        self.left[i] -= 1
        if self.left[i] == 0:
            ps = self.layers[i]
            flat = self._torch.cat([q.grad.reshape(-1) for q in ps]).div_(self.world)
            self.works.append((self._dist.all_reduce(flat, group=self.group, async_op=True), flat, ps))

    def __call__(self, x):
        return self.model(x)

    def step(self) -> None:
        for w, flat, ps in self.works:
            w.wait()
            pos = 0
            for q in ps:
                q.grad.copy_(flat[pos:pos + q.numel()].view_as(q))
                pos += q.numel()
        self.opt.step()
        self._reset()


def worker(out_path: str, backend: str) -> None:
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    from host.dear import DeAR, TunerConfig

    torch.set_num_threads(1)
    dist.init_process_group(backend)
    P, r = dist.get_world_size(), dist.get_rank()
    makers, data = _models()
    results: dict = {"backend": backend, "world": P, "models": {}}

    def loss_of(out, y):
        return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))

    for mname in MODELS:
        x, y = data(mname, r)
        tuned: dict = {}

        def build(variant: str):
            torch.manual_seed(0)
            model = makers[mname]()
            opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
            if variant == "ddp":
                d = DDP(model)
                return d, opt, opt.step
            if variant == "wfbp":
                w = LayerWFBP(model, opt)
                return w, opt, w.step
            if variant == "local":
                return model, opt, opt.step
            if variant == "dear-layers":
                de = DeAR(model, opt, fusion="layers")
            elif variant == "dear-auto":
                de = DeAR(model, opt, fusion="auto")
            elif variant == "dear-tuned" and "threshold" in tuned:
                de = DeAR(model, opt, fusion=tuned["threshold"])
            else:
                de = DeAR(model, opt, fusion="auto", tune=TunerConfig(trials=6, window=4, settle=1))
                its = 0
                while de.tuning or its < WARMUP:
                    opt.zero_grad()
                    loss_of(de(x), y).backward()
                    de.step()
                    its += 1
                tuned.update(threshold=de.threshold, iterations=its, history=de.tune_history)
            return de, opt, de.step

        def run(variant: str, iters: int) -> float:
            net, opt, step = build(variant)
            for _ in range(WARMUP):
                opt.zero_grad()
                loss_of(net(x), y).backward()
                step()
            dist.barrier()
            per_it = []
            t0 = time.perf_counter()
            for _ in range(iters):
                opt.zero_grad()
                loss_of(net(x), y).backward()
                step()
                t1 = time.perf_counter()
                per_it.append(t1 - t0)
                t0 = t1
            dt = statistics.median(per_it)  # robust to the stalls of a shared machine
            if hasattr(net, "flush"):
                net.flush()
                results["models"].setdefault(mname, {}).setdefault("plans", {})[variant] = {
                    "groups": len(net.plan), "threshold": net.threshold,
                    "comm_model": net.comm_model.as_list() if net.comm_model else None,
                    "cost_table": net.cost_table}
            if hasattr(net, "close"):
                net.close()
            return dt

        times = {v: [] for v in ["ddp", *VARIANTS]}
        compute, comm = [], []
        nbytes = sum(p.numel() * 4 for p in makers[mname]().parameters())
        flat = torch.zeros(nbytes // 4)
        for rep in range(REPS):
            order = ["ddp", *VARIANTS] if rep % 2 == 0 else [*VARIANTS[::-1], "ddp"]
            for v in order:
                times[v].append(run(v, ITERS))
            # compute only (no communication) and blocking communication of the whole gradient
            compute.append(run("local", ITERS))
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(flat)
            comm.append(time.perf_counter() - t0)
        results["models"].setdefault(mname, {}).update(
            times=times, compute=compute, comm=comm, bytes=nbytes, tuned=tuned)
    if r == 0:
        Path(out_path).write_text(json.dumps(results))
    dist.barrier()
    dist.destroy_process_group()


# ------------------------------------------------------------------------------------------------ driver side
def run_setting(backend: str, P: int) -> dict:
    sys.path.insert(0, str(ROOT))
    from testbed.netns import Star

    with tempfile.TemporaryDirectory() as d, Star(P, rate=RATE, mtu=9000) as net:
        out = os.path.join(d, "r.json")
        env = {**os.environ, "MASTER_ADDR": net.hosts[0].ip, "MASTER_PORT": "29500", "WORLD_SIZE": str(P),
               "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "eth0", "PYTHONPATH": str(ROOT)}
        logs = [open(os.path.join(d, f"rank{i}.err"), "w+") for i in range(P)]
        procs = [net.popen(i, [sys.executable, __file__, "--worker", out, backend], cwd=ROOT, stderr=logs[i],
                           env={**env, "RANK": str(i), "LOCAL_RANK": str(i)}) for i in range(P)]
        deadline = time.monotonic() + 3600
        for p in procs:
            try:
                rc = p.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                for q in procs:
                    q.kill()
                raise SystemExit(f"dear benchmark {backend} P={P} timed out")
            if rc != 0:
                for q in procs:
                    q.kill()
                tails = []
                for i, f in enumerate(logs):
                    f.seek(0)
                    tails.append(f"--- rank {i}\n" + f.read()[-2000:])
                raise SystemExit(f"dear benchmark rank exited with {rc} ({backend}, P={P})\n" + "\n".join(tails))
        return json.loads(Path(out).read_text())


def hidden(compute: float, comm: float, t: float) -> float:
    """Fraction of the blocking communication time that the iteration does not pay for."""
    if comm <= 0:
        return 1.0
    return min(1.0, max(0.0, (compute + comm - t) / comm))


def main() -> None:
    if os.geteuid() != 0:
        raise SystemExit("bench/dear.py shapes links in network namespaces and needs root")
    rep = Report("dear", params={"rate": RATE, "backends": BACKENDS, "worlds": WORLDS, "repetitions": REPS,
                                 "iterations": ITERS, "warmup": WARMUP, "mtu": 9000,
                                 "network": f"tbf-shaped namespace star, {RATE} per link"})
    for backend in BACKENDS:
        for P in WORLDS:
            res = run_setting(backend, P)
            for mname, m in res["models"].items():
                F = statistics.median(m["compute"])
                C = statistics.median(m["comm"])
                base = m["times"]["ddp"]
                for v in VARIANTS:
                    cand = m["times"][v]
                    it_c, it_b = iter(cand), iter(base)
                    case = rep.compare(
                        f"{mname} P={P} {backend}: {v}", candidate=lambda: {"seconds": next(it_c)},
                        baseline=lambda: {"seconds": next(it_b)}, metric="seconds", higher_is_better=False,
                        repetitions=len(cand), warmup=0, candidate_name=v, baseline_name="ddp",
                        params={"model": mname, "world": P, "backend": backend, "bytes": m["bytes"],
                                "compute_s": F, "comm_s": C, "plan": m.get("plans", {}).get(v),
                                "tuning": m["tuned"] if v == "dear-tuned" else None})
                    tc, tb = case["median"]["candidate"], case["median"]["baseline"]
                    case["params"]["hidden_candidate"] = hidden(F, C, tc)
                    case["params"]["hidden_ddp"] = hidden(F, C, tb)
                print(f"{mname} P={P} {backend}: compute {F * 1e3:.1f} ms, blocking all-reduce {C * 1e3:.1f} ms, "
                      f"ddp {statistics.median(base) * 1e3:.1f} ms/it", flush=True)
    for c in rep.cases:
        p = c["params"]
        print(f"{c['case']:40} speedup {c['speedup']:.2f}x  hidden {p['hidden_candidate']:.0%} "
              f"(ddp {p['hidden_ddp']:.0%})")
    rep.write()


if __name__ == "__main__":
    if len(sys.argv) > 3 and sys.argv[1] == "--worker":
        sys.path.insert(0, str(ROOT))
        worker(sys.argv[2], sys.argv[3])
        from host.procexit import exit_process

        exit_process()  # not interpreter finalization: see host/procexit.py
    else:
        main()
