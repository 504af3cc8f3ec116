"""SparDL vs dense ring all-reduce, top-k all-gather and a gTop-k tree: time per gradient step, side by side.

Cases: 4 and 8 worker processes; density 1% and 0.1%; links shaped to 1 Gb/s (``testbed.netns.Star``: one
namespace per worker on a bridge, tbf on both directions of every link) and plain loopback. All algorithms run
in the same processes over the same gloo process group, in alternating repetitions, each with its own error
feedback state:

* ``dense``: ``dist.all_reduce`` (gloo's ring for large tensors) of the whole gradient;
* ``topk-ag``: local top-k (with residual), ``all_gather_into_tensor`` of int32 indices and values, summed;
* ``gtopk``: ``host.spardl.baselines.gtopk`` (binomial tree with top-k at every merge, then back down);
* ``spardl-d<d>``: ``host.spardl`` with d teams, d in {1, 2, 4} where d divides P.

A step's time is the slowest rank's (each repetition starts after a barrier). The report compares SparDL with
d = 1 and with the best d (lowest median) against each baseline; metric ``seconds`` (lower is better).
``--quick`` runs a smaller gradient and fewer repetitions. Worker mode (``--worker``) runs inside the namespaces.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


# --- worker side ---------------------------------------------------------------------------------------------------

def _worker(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(ROOT))
    import torch
    import torch.distributed as dist

    from host.spardl import SparDLState, sparse_allreduce
    from host.spardl.algo import topk_indices
    from host.spardl.baselines import gtopk
    from host.spardl.exchange import run_on_group

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    r, P = dist.get_rank(), dist.get_world_size()
    n, density = args.n, args.density
    g = torch.Generator().manual_seed(r)
    grad = torch.randn(n, generator=g)
    k = max(1, int(round(density * n)))
    states: dict[str, object] = {}

    def dense() -> None:
        x = grad.clone()
        dist.all_reduce(x)

    def topk_ag() -> None:
        res = states.setdefault("topk-ag", torch.zeros(n))
        x = grad + res
        idx = topk_indices(x, k)
        vals = x[idx]
        x[idx] = 0
        states["topk-ag"] = x
        all_idx = torch.empty(P * k, dtype=torch.int32)
        all_vals = torch.empty(P * k)
        dist.all_gather_single(all_idx, idx.to(torch.int32))
        dist.all_gather_single(all_vals, vals)
        out = torch.zeros(n)
        out.index_add_(0, all_idx.long(), all_vals)

    def gtopk_step() -> None:
        res = states.setdefault("gtopk", torch.zeros(n))
        out = run_on_group(gtopk(r, P, grad + res, density))
        states["gtopk"] = out.residual

    def spardl_step(d: int):
        def run() -> None:
            st = states.setdefault(f"spardl-d{d}", SparDLState())
            sparse_allreduce(grad.clone(), density, teams=d, state=st)
        return run

    algos = {"dense": dense, "topk-ag": topk_ag, "gtopk": gtopk_step}
    for d in (1, 2, 4):
        if P % d == 0 and d <= P:
            algos[f"spardl-d{d}"] = spardl_step(d)
    names = list(algos)
    times: dict[str, list[float]] = {a: [] for a in names}
    for rep in range(args.reps + 1):
        order = names[rep % len(names):] + names[:rep % len(names)]  # rotate so no algorithm always goes first
        for a in order:
            dist.barrier()
            t0 = time.perf_counter()
            algos[a]()
            dt = time.perf_counter() - t0
            if rep:  # repetition 0 warms up (and fills the residuals)
                times[a].append(dt)
    mine = torch.tensor([times[a] for a in names], dtype=torch.float64)
    dist.all_reduce(mine, op=dist.ReduceOp.MAX)  # a step ends when the slowest rank is done
    if r == 0:
        Path(args.out).write_text(json.dumps({a: mine[i].tolist() for i, a in enumerate(names)}))
    dist.barrier()
    dist.destroy_process_group()


# --- parent side -------------------------------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_case(P: int, density: float, n: int, reps: int, shaped: bool) -> dict[str, list[float]]:
    net = None
    if shaped:
        from testbed.netns import Star
        net = Star(P, rate="1gbit", mtu=1500)
        master = net.hosts[0].ip
    else:
        master = "127.0.0.1"
    port = _free_port()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "times.json")
            procs = []
            for i in range(P):
                argv = [sys.executable, str(Path(__file__).resolve()), "--worker", "--out", out, "--n", str(n),
                        "--density", str(density), "--reps", str(reps)]
                env = {**os.environ, "MASTER_ADDR": master, "MASTER_PORT": str(port), "RANK": str(i),
                       "WORLD_SIZE": str(P), "OMP_NUM_THREADS": "1"}
                if shaped:
                    env["GLOO_SOCKET_IFNAME"] = "eth0"
                    argv = net.cmd(i, argv)
                procs.append(subprocess.Popen(argv, cwd=ROOT, env=env))
            for p in procs:
                if p.wait(timeout=1800) != 0:
                    raise SystemExit(f"benchmark worker exited with {p.returncode}")
            return json.loads(Path(out).read_text())
    finally:
        if net is not None:
            net.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--out")
    ap.add_argument("--n", type=int, default=None, help="gradient elements (fp32)")
    ap.add_argument("--density", type=float)
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-shaped", action="store_true", help="loopback only (no namespaces, no root needed)")
    args = ap.parse_args()
    if args.worker:
        _worker(args)
        return

    from harness import Report

    quick = args.quick or os.environ.get("DLCP_BENCH_QUICK") == "1"
    n = args.n or ((1 << 20) if quick else (4 << 20))
    reps = args.reps or (3 if quick else 5)
    worlds = [4, 8]
    densities = [0.01, 0.001]
    nets = [False] if args.no_shaped or os.geteuid() != 0 else [True, False]
    rep = Report("spardl", params={"gradient_elements": n, "dtype": "float32", "worlds": worlds,
                                   "densities": densities, "repetitions": reps, "backend": "gloo",
                                   "shaped": "1gbit tbf per link (testbed.netns.Star, MTU 1500)",
                                   "metric": "seconds per step, slowest rank"})
    for shaped in nets:
        for P in worlds:
            for density in densities:
                times = _run_case(P, density, n, reps, shaped)
                spardl = {a: t for a, t in times.items() if a.startswith("spardl-")}
                best = min(spardl, key=lambda a: sorted(spardl[a])[len(spardl[a]) // 2])
                where = "1Gb/s" if shaped else "loopback"
                for cand in dict.fromkeys(["spardl-d1", best]):
                    for base in ("dense", "topk-ag", "gtopk"):
                        it_c, it_b = iter(times[cand]), iter(times[base])
                        label = cand if cand == "spardl-d1" else f"{cand} (best d)"
                        rep.compare(f"{where} P={P} {density:g}: {label} vs {base}",
                                    candidate=lambda: {"seconds": next(it_c)},
                                    baseline=lambda: {"seconds": next(it_b)}, metric="seconds",
                                    higher_is_better=False, repetitions=len(times[cand]), warmup=0,
                                    candidate_name=cand, baseline_name=base,
                                    params={"world": P, "density": density, "shaped": shaped,
                                            "all_medians": {a: sorted(t)[len(t) // 2] for a, t in times.items()}})
    rep.write()


if __name__ == "__main__":
    main()
