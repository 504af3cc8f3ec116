"""SparDL vs dense ring all-reduce, top-k all-gather and a gTop-k tree: time per gradient step, side by side.

Cases: 4 and 8 worker processes; density 1% and 0.1%; links shaped to 1 Gb/s (``testbed.netns.Star``: one
namespace per worker on a bridge, tbf on both directions of every link) and plain loopback. All algorithms run
in the same processes over the same gloo process group, in alternating repetitions, each with its own error
feedback state:

* ``dense``: ``dist.all_reduce`` (gloo's ring for large tensors) of the whole gradient;
* ``topk-ag``: local top-k (with residual), one ``all_gather_single`` of int32 indices and fp32 value bits, summed;
* ``gtopk``: ``host.spardl.baselines.gtopk`` (binomial tree with top-k at every merge, then back down);
* ``spardl-d<d>``: ``host.spardl`` with d teams, d in {1, 2, 4} where d divides P.

**Fairness.** Every sparse method selects with the same functions (``host.spardl.select``: exact top-k by a
sampled threshold, one dense pass, then ``np.partition`` over the candidates) and does error feedback the same
way (the gradient added into the residual buffer inside that pass, which also clears the gradient buffer that
receives the result), with the same sparse helpers (``host.spardl.sparse_ops``). So selection speed helps all of
them alike, and SparDL's edge over top-k all-gather and gTop-k comes from its communication design (at most k per
block on every hop, the result holding k per block instead of up to P k).

Each step's gradient is copied into the algorithm's buffer before the barrier (not timed); the step is the
collective only, as after backward. A step's time is the slowest rank's (each repetition starts after a
barrier). The report compares SparDL with d = 1 and with the best d (lowest median) against each baseline; metric
``seconds`` (lower is better). Each case also prints a per-phase profile (``host.spardl.clock``: wall and
thread-CPU ms per phase, mean over ranks; thread and process CPU per step), stored in the JSON as ``wall_ms`` /
``cpu_ms``. ``--worlds``, ``--densities``, ``--nets shaped,loopback`` select cases (e.g. ``--worlds 8
--densities 0.01 --nets shaped``); ``--quick`` runs a smaller gradient and fewer repetitions. Worker mode
(``--worker``) runs inside the namespaces.
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

    from host.spardl import SparDLState, run_on_group, select, sparse_allreduce, sparse_ops
    from host.spardl.baselines import gtopk
    from host.spardl.clock import PhaseClock

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    r, P = dist.get_rank(), dist.get_world_size()
    n, density = args.n, args.density
    g = torch.Generator().manual_seed(r)
    grad = torch.randn(n, generator=g)
    k = max(1, int(round(density * n)))
    residuals: dict[str, torch.Tensor] = {}
    scratch = select.new_scratch(grad)

    def ef(name: str, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Error feedback as SparDLState does it: the residual buffer and the gradient to add into it during
        the selection pass (or, the first time, a copy of the gradient and nothing to add)."""
        res = residuals.pop(name, None)
        return (x.clone(), None) if res is None else (res, x)

    def dense(x: torch.Tensor, clock: PhaseClock) -> None:
        with clock("exchange"):
            dist.all_reduce(x)

    def topk_ag(x: torch.Tensor, clock: PhaseClock) -> None:
        with clock("ef"):
            buf, addend = ef("topk-ag", x)
        with clock("pass"):  # adds the gradient into the residual buffer in the same pass, clearing it
            cand = select.Candidates.take(buf, k, addend=addend, clear_addend=True, scratch=scratch)
        with clock("select"):
            idx = select.select_topk(buf, k, cand)
        with clock("pack"):  # one message: k int32 indices, then k fp32 values as int32 bits
            vals = buf[idx]
            buf[idx] = 0
            residuals["topk-ag"] = buf
            msg = torch.cat([idx.to(torch.int32), vals.view(torch.int32)])
        with clock("exchange"):
            everyone = torch.empty(P * 2 * k, dtype=torch.int32)
            dist.all_gather_single(everyone, msg)
        with clock("output"):  # sum in rank order (each rank's indices are ascending: vectorised adds)
            everyone = everyone.view(P, 2, k)
            if addend is None:  # else the pass cleared it
                x.zero_()
            for q in range(P):
                sparse_ops.add(x, everyone[q, 0].long(), everyone[q, 1].view(torch.float32))

    def gtopk_step(x: torch.Tensor, clock: PhaseClock) -> None:
        with clock("ef"):
            buf, addend = ef("gtopk", x)
        out = run_on_group(gtopk(r, P, buf, density, own_input=True, addend=addend, out=x, clock=clock),
                           clock=clock)
        residuals["gtopk"] = out.residual

    def spardl_step(d: int):
        st = SparDLState()

        def run(x: torch.Tensor, clock: PhaseClock) -> None:
            sparse_allreduce(x, density, teams=d, state=st, clock=clock)
        return run

    algos = {"dense": dense, "topk-ag": topk_ag, "gtopk": gtopk_step}
    for d in (1, 2, 4):
        if P % d == 0 and d <= P:
            algos[f"spardl-d{d}"] = spardl_step(d)
    names = list(algos)
    bufs = {a: torch.empty(n) for a in names}  # each algorithm's gradient buffer, refilled before every step
    clocks = {a: PhaseClock() for a in names}
    times: dict[str, list[float]] = {a: [] for a in names}
    for rep in range(args.reps + 1):
        order = names[rep % len(names):] + names[:rep % len(names)]  # rotate so no algorithm always goes first
        for a in order:
            x = bufs[a].copy_(grad)  # the step's gradient, as backward would leave it (not timed)
            if rep == 0:  # repetition 0 warms up (and fills the residuals)
                algos[a](x, PhaseClock())
                continue
            dist.barrier()
            c0, h0 = time.process_time(), time.thread_time()
            t0 = time.perf_counter()
            algos[a](x, clocks[a])
            times[a].append(time.perf_counter() - t0)
            clocks[a].cpu["step-thread"] += time.thread_time() - h0  # this thread
            clocks[a].cpu["step-process"] += time.process_time() - c0  # all threads (gloo's too)
    mine = torch.tensor([times[a] for a in names], dtype=torch.float64)
    dist.all_reduce(mine, op=dist.ReduceOp.MAX)  # a step ends when the slowest rank is done
    phases = sorted({p for c in clocks.values() for p in c.totals})
    cpus = sorted({p for c in clocks.values() for p in c.cpu})
    prof = torch.tensor([[clocks[a].totals.get(p, 0.0) / args.reps for p in phases]
                         + [clocks[a].cpu.get(p, 0.0) / args.reps for p in cpus] for a in names],
                        dtype=torch.float64)
    dist.all_reduce(prof)  # mean over ranks of the per-step phase times
    prof /= P
    if r == 0:
        Path(args.out).write_text(json.dumps({
            "times": {a: mine[i].tolist() for i, a in enumerate(names)},
            "profile": {a: {p: prof[i, j].item() for j, p in enumerate(phases) if prof[i, j] > 0}
                        for i, a in enumerate(names)},
            "cpu": {a: {p: prof[i, len(phases) + j].item() for j, p in enumerate(cpus) if prof[i, len(phases) + j] > 0}
                    for i, a in enumerate(names)}}))
    dist.barrier()
    dist.destroy_process_group()


# --- parent side -------------------------------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_case(P: int, density: float, n: int, reps: int, shaped: bool) -> dict:
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


def _median(xs: list[float]) -> float:
    return sorted(xs)[len(xs) // 2]


PHASES = ["pass", "select", "pack", "exchange", "merge", "residual", "output"]


def _profile_table(where: str, P: int, density: float, times: dict, profile: dict, cpu: dict) -> str:
    """Per algorithm: median step (slowest rank) and per phase the mean over ranks of wall / CPU ms per step;
    ``thread`` is the calling thread's CPU per step (all phases and the Python between them), ``proc`` the
    whole process's (gloo's threads included)."""
    rows = [f"{where} P={P} {density:g}: ms per step; per phase wall/CPU (CPU = the calling thread's), mean over "
            f"ranks; thread/proc = CPU per step of the thread / the process (incl. gloo's threads)",
            f"  {'algorithm':11}{'step':>7}" + "".join(f"{p:>13}" for p in PHASES) + f"{'thread':>7}{'proc':>7}"]
    for a, t in times.items():
        w, c = profile.get(a, {}), cpu.get(a, {})
        rows.append(f"  {a:11}{_median(t) * 1e3:7.1f}"
                    + "".join(f"{w.get(p, 0) * 1e3:7.1f}/{c.get(p, 0) * 1e3:5.1f}" for p in PHASES)
                    + f"{c.get('step-thread', 0) * 1e3:7.1f}{c.get('step-process', 0) * 1e3:7.1f}")
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--out")
    ap.add_argument("--n", type=int, default=None, help="gradient elements (fp32)")
    ap.add_argument("--density", type=float)
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-shaped", action="store_true", help="loopback only (no namespaces, no root needed)")
    ap.add_argument("--worlds", default="4,8", help="comma-separated worker counts (default 4,8)")
    ap.add_argument("--densities", default="0.01,0.001", help="comma-separated densities (default 0.01,0.001)")
    ap.add_argument("--nets", default="shaped,loopback", help="comma-separated: shaped, loopback")
    args = ap.parse_args()
    if args.worker:
        from host.procexit import exit_process

        _worker(args)
        exit_process()  # not interpreter finalization: see host/procexit.py

    from harness import Report

    quick = args.quick or os.environ.get("DLCP_BENCH_QUICK") == "1"
    n = args.n or ((1 << 20) if quick else (4 << 20))
    reps = args.reps or (3 if quick else 5)
    worlds = [int(w) for w in args.worlds.split(",")]
    densities = [float(d) for d in args.densities.split(",")]
    wanted = set(args.nets.split(","))
    if not wanted <= {"shaped", "loopback"}:
        raise SystemExit(f"--nets: unknown {sorted(wanted - {'shaped', 'loopback'})}")
    nets = [s for s in (True, False) if ("shaped" if s else "loopback") in wanted]
    if args.no_shaped or os.geteuid() != 0:
        nets = [False]
    rep = Report("spardl", params={"gradient_elements": n, "dtype": "float32", "worlds": worlds,
                                   "densities": densities, "repetitions": reps, "backend": "gloo",
                                   "shaped": "1gbit tbf per link (testbed.netns.Star, MTU 1500)",
                                   "metric": "seconds per step, slowest rank",
                                   "selection": "all sparse methods: host.spardl.select (exact top-k, threshold "
                                                "candidates)"})
    tables = []
    for shaped in nets:
        for P in worlds:
            for density in densities:
                got = _run_case(P, density, n, reps, shaped)
                times, profile, cpu = got["times"], got["profile"], got["cpu"]
                spardl = {a: t for a, t in times.items() if a.startswith("spardl-")}
                best = min(spardl, key=lambda a: _median(spardl[a]))
                where = "1Gb/s" if shaped else "loopback"
                tables.append(_profile_table(where, P, density, times, profile, cpu))
                print(tables[-1], flush=True)
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
                                            "all_medians": {a: _median(t) for a, t in times.items()},
                                            "wall_ms": {a: {p: round(v * 1e3, 3) for p, v in pr.items()}
                                                        for a, pr in profile.items()},
                                            "cpu_ms": {a: {p: round(v * 1e3, 3) for p, v in pr.items()}
                                                       for a, pr in cpu.items()}})
    rep.write()
    print("\n\n".join(tables))


if __name__ == "__main__":
    main()
