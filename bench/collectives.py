"""Collectives: the dlcp backend vs gloo, side by side in the same processes, on loopback and on 1 Gb/s links.

Each rank process initialises dlcp as the default group and a gloo group over the same ranks, then times
all-reduce, reduce-scatter (``reduce_scatter_tensor``) and all-gather (``all_gather_into_tensor``) of float32
tensors from 4 KiB to 256 MiB, alternating dlcp and gloo repetitions (the order flips every round; each timed
call starts after a gloo barrier; a repetition's time is the slowest rank's). Worlds of 2 and 4 processes on:

* ``loopback``: all ranks in one private network namespace (its own ``lo``, so nothing else on the machine shares
  the DLCP port), dlcp on 127.0.0.<rank+1> with the loopback path MTU;
* ``1Gb/s``: ``testbed.netns.Star(P, rate="1gbit", mtu=9000)``, one namespace per rank on a bridge, every link
  tbf-shaped to 1 Gb/s both ways; gloo on ``eth0``.

Report (harness): per case ``seconds`` (dlcp vs gloo); on the shaped links also ``ideal_fraction`` = the ideal
ring time over the measured time, the ideal being ``2(P-1)/P * S/B`` for all-reduce and ``(P-1)/P * S/B`` for
reduce-scatter / all-gather (``S`` the full tensor, ``B`` = 1 Gb/s; framing overhead makes ~0.99 the ceiling).
Plot: ``bench/results/collectives.png`` (time vs size per collective, world and network; dlcp, gloo, ideal).
Process CPU seconds per call are recorded too (``cpu_s``, and the kernel's part of them ``sys_s``), to tell a
CPU-bound gap from a network-bound one and user-space work from the kernel's (system calls, copies, wake-ups). The
total is the precise process CPU clock; Linux splits it into user and system in proportion to tick samples, so the
system part is an estimate (good as a median over many calls; the summary's user part is the total less it, at
least 0).

``--bf16`` adds ``all_reduce_bf16``: the all-reduce of the same number of elements as bf16 (half the bytes; a
case's size stays the float32 size), on both backends, and per size a ``bf16 vs f32`` line comparing dlcp's bf16
call with its float32 one (2-byte elements on the wire, reduced in bf16: ``host/collectives.py``).

``--quick`` (or ``DLCP_BENCH_QUICK=1``): sizes up to 16 MiB, fewer repetitions. ``--only TEXT``: only cases whose
name (``<net> P=<P> <op> <size>``) contains TEXT (repeatable; a case runs if any matches). Without root only
the loopback cases run (in the root namespace). Worker mode (``--worker``) is what runs inside the namespaces.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"
OPS = ("all_reduce", "reduce_scatter", "all_gather")
HALF_OPS = ("all_reduce_bf16",)  # with --bf16: the same elements as bf16 (the case's size is float32's)
SIZES = [4 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20]
QUICK_SIZES = [4 << 10, 256 << 10, 1 << 20, 16 << 20]
WORLDS = [2, 4]
NETS = ["loopback", "1Gb/s"]
LINK_BPS = 1e9
GOAL_LOOPBACK = 1.25  # dlcp within 1.25x of gloo on loopback from 1 MiB up
GOAL_IDEAL = 0.95  # and on the shaped links at least 95% of the ideal ring time, not slower than gloo


def repetitions(nbytes: int, quick: bool, net: str = "1Gb/s") -> int:
    """Timed rounds per case (after one warm-up round): fewer for the large sizes to keep the run short. Loopback
    calls are short, and gloo's own times there moved by up to 3x between runs of one case on this VM, so those
    cases take about three times as many rounds for steadier medians."""
    if quick:
        return 5 if nbytes <= 1 << 20 else 3
    if nbytes <= 1 << 20:
        reps = 9
    elif nbytes <= 16 << 20:
        reps = 5
    else:
        reps = 3 if nbytes <= 64 << 20 else 2
    return 3 * reps if net == "loopback" else reps


def ideal_seconds(op: str, nbytes: int, world: int, bps: float = LINK_BPS) -> float:
    """The bandwidth-optimal ring's time on links of ``bps``: every rank sends (P-1)/P of the tensor per phase
    (``nbytes`` is the float32 size: a bf16 case moves half of it)."""
    phases = 2 if op.startswith("all_reduce") else 1
    return phases * (world - 1) / world * nbytes * 8 / bps * (0.5 if op.endswith("_bf16") else 1.0)


def size_label(nbytes: int) -> str:
    return f"{nbytes >> 20}MiB" if nbytes >= 1 << 20 else f"{nbytes >> 10}KiB"


def case_name(net: str, world: int, op: str, nbytes: int) -> str:
    return f"{net} P={world} {op} {size_label(nbytes)}"


# --- worker side (one process per rank) ---------------------------------------------------------------------------

def _worker(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(ROOT))
    import torch
    import torch.distributed as dist

    from host.collectives import Collectives

    torch.set_num_threads(1)
    for attr, val in json.loads(args.tune).items():  # tuning experiments only (e.g. RING_SEGMENT_MIN)
        setattr(Collectives, attr, val)
    plan = json.loads(args.plan)  # [[nbytes, [ops...], reps], ...]
    dist.init_process_group("dlcp")
    gloo = dist.new_group(backend="gloo")
    P = dist.get_world_size()
    times: list[float] = []  # flat, in plan order: per (size, op): dlcp reps, gloo reps
    cpus: list[float] = []
    syss: list[float] = []  # the system (kernel) part of cpus
    for nbytes, ops, reps in plan:
        n = (nbytes // 4) // P * P
        x = torch.randn(n)
        full = torch.zeros(n)
        shard = torch.randn(n // P)
        x16 = torch.randn(n).to(torch.bfloat16)
        calls = {
            "all_reduce": lambda g: dist.all_reduce(x, group=g),
            "all_reduce_bf16": lambda g: dist.all_reduce(x16, group=g),
            "reduce_scatter": lambda g: dist.reduce_scatter_tensor(shard, x, group=g),
            "all_gather": lambda g: dist.all_gather_into_tensor(full, shard, group=g),
        }
        for op in ops:
            got = {"dlcp": [], "gloo": []}
            cpu = {"dlcp": [], "gloo": []}
            sys_ = {"dlcp": [], "gloo": []}
            for rnd in range(reps + 1):
                order = [("dlcp", None), ("gloo", gloo)]
                for label, g in (order if rnd % 2 == 0 else order[::-1]):
                    dist.barrier(group=gloo)
                    c0, k0 = time.process_time(), resource.getrusage(resource.RUSAGE_SELF).ru_stime
                    t0 = time.perf_counter()
                    calls[op](g)
                    dt = time.perf_counter() - t0
                    c1, k1 = time.process_time(), resource.getrusage(resource.RUSAGE_SELF).ru_stime
                    if rnd:  # round 0 warms up
                        got[label].append(dt)
                        cpu[label].append(c1 - c0)
                        sys_[label].append(k1 - k0)
            times += got["dlcp"] + got["gloo"]
            cpus += cpu["dlcp"] + cpu["gloo"]
            syss += sys_["dlcp"] + sys_["gloo"]
    t = torch.tensor(times, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=gloo)  # a repetition ends when the slowest rank is done
    c = torch.tensor([cpus, syss], dtype=torch.float64)
    dist.all_reduce(c, group=gloo)  # mean CPU per rank
    c /= P
    if dist.get_rank() == 0:
        Path(args.out).write_text(json.dumps({"times": t.tolist(), "cpu": c[0].tolist(), "sys": c[1].tolist()}))
    dist.barrier(group=gloo)
    dist.destroy_process_group()


# --- parent side ------------------------------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_world(net_kind: str, world: int, plan: list, tune: dict, timeout: float = 900) -> list[dict]:
    """Run one world over ``plan`` on the given network; returns one row per (size, op) with both backends'
    per-repetition seconds and CPU seconds."""
    got = spawn_world(net_kind, world, ["--plan", json.dumps(plan), "--tune", json.dumps(tune)], timeout)
    rows, pos = [], 0
    for nbytes, ops, reps in plan:
        for op in ops:
            t, c, k = (got[key][pos:pos + 2 * reps] for key in ("times", "cpu", "sys"))
            rows.append({"net": net_kind, "world": world, "op": op, "bytes": nbytes, "dlcp": t[:reps], "gloo": t[reps:],
                         "cpu_dlcp": c[:reps], "cpu_gloo": c[reps:], "sys_dlcp": k[:reps], "sys_gloo": k[reps:]})
            pos += 2 * reps
    return rows


#: Shaped networks other than the default 1 Gb/s at MTU 9000: (tc rate, MTU, tbf burst). ``20Mb/s`` is the demo's
#: link rate (examples/testbed/demo.yaml), where a transfer is many small, paced datagrams; tbf's default 256 KB
#: burst lets a GSO run through at line rate, so the receiver takes it as one GRO buffer. ``20Mb/s-paced`` has a
#: burst of two packets: datagrams arrive one at a time, as the testbed's switches emulate a link.
SHAPED = {"20Mb/s": ("20mbit", 1500, "256kb"), "20Mb/s-paced": ("20mbit", 1500, "3kb")}


def spawn_world(net_kind: str, world: int, worker_args: list[str], timeout: float = 900,
                script: Path | None = None, env_overrides: dict[str, str | None] | None = None) -> dict:
    """Run ``script --worker --out FILE *worker_args`` (default: this file) as ``world`` ranks on the network
    ``net_kind`` and return the JSON rank 0 wrote to FILE. Networks: ``loopback`` (one private namespace, its own
    lo), ``veth`` (one namespace per rank on a bridge, unshaped veth links, MTU 9000), ``1Gb/s`` (the same
    links shaped by tbf) and those of :data:`SHAPED`; without root only loopback, in the root namespace. The ranks
    run with ``OMP_NUM_THREADS=1``; ``env_overrides`` changes their environment after that (None: unset it)."""
    from harness import wait_ranks

    net = None
    env_extra: dict[str, str] = {}
    if os.geteuid() == 0:
        from testbed.netns import Star
        if net_kind == "loopback":  # one private namespace: its own lo for all ranks
            net = Star(1, rate=None)
            master, env_extra["GLOO_SOCKET_IFNAME"] = "127.0.0.1", "lo"
        else:
            rate, mtu, burst = SHAPED.get(net_kind, (None, 9000, "256kb") if net_kind == "veth" else
                                          ("1gbit", 9000, "256kb"))
            net = Star(world, rate=rate, mtu=mtu, tbf_burst=burst)
            master, env_extra["GLOO_SOCKET_IFNAME"] = net.hosts[0].ip, "eth0"
    elif net_kind != "loopback":
        raise SystemExit("the shaped cases need root (network namespaces)")
    else:
        master = "127.0.0.1"
    port = _free_port()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "r.json")
            procs = []
            for r in range(world):
                argv = [sys.executable, str((script or Path(__file__)).resolve()), "--worker", "--out", out,
                        *worker_args]
                if net is not None:
                    argv = net.cmd(0 if net_kind == "loopback" else r, argv)
                env = {**os.environ, "MASTER_ADDR": master, "MASTER_PORT": str(port), "RANK": str(r),
                       "WORLD_SIZE": str(world), "OMP_NUM_THREADS": "1", **env_extra}
                for k, v in (env_overrides or {}).items():
                    if v is None:
                        env.pop(k, None)
                    else:
                        env[k] = v
                procs.append(subprocess.Popen(argv, cwd=ROOT, env=env))
            wait_ranks(procs, timeout, f"{net_kind} P={world}")
            return json.loads(Path(out).read_text())
    finally:
        if net is not None:
            net.close()


def plot(rows: list[dict], path: Path) -> Path:
    """Time vs size per collective (rows) and network/world (columns): dlcp, gloo, and the ideal ring time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = [(n, w) for n in NETS for w in WORLDS if any(r["net"] == n and r["world"] == w for r in rows)]
    ops = [op for op in OPS + HALF_OPS if any(r["op"] == op for r in rows)]
    fig, axes = plt.subplots(len(ops), len(cols), figsize=(4.2 * len(cols), 3.4 * len(ops)), squeeze=False)
    for i, op in enumerate(ops):
        for j, (net, w) in enumerate(cols):
            ax = axes[i][j]
            sel = sorted((r for r in rows if r["op"] == op and r["net"] == net and r["world"] == w),
                         key=lambda r: r["bytes"])
            xs = [r["bytes"] for r in sel]
            ax.loglog(xs, [statistics.median(r["dlcp"]) for r in sel], "o-", label="dlcp")
            ax.loglog(xs, [statistics.median(r["gloo"]) for r in sel], "s-", label="gloo")
            if net != "loopback":
                ax.loglog(xs, [ideal_seconds(op, x, w) for x in xs], "k--", label="ideal ring (1 Gb/s)")
            ax.set_title(f"{op}, {net}, P={w}", fontsize=10)
            ax.set_xlabel("tensor bytes")
            ax.set_ylabel("seconds (median, slowest rank)")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def summary(rows: list[dict]) -> str:
    """One line per case: medians, gloo/dlcp, fractions of the ideal, CPU ms per call and rank as user + system,
    and whether the issue's goal is met."""
    out = [f"{'case':36} {'dlcp ms':>9} {'gloo ms':>9} {'gloo/dlcp':>9} {'dlcp/ideal':>10} {'gloo/ideal':>10}"
           f" {'cpu dlcp u+s':>13} {'cpu gloo u+s':>13}  goal"]
    med = statistics.median
    for r in rows:
        d, g = med(r["dlcp"]), med(r["gloo"])
        cpu = {b: f"{max(0.0, med(r['cpu_' + b]) - med(r['sys_' + b])) * 1e3:.1f}+{med(r['sys_' + b]) * 1e3:.1f}"
               for b in ("dlcp", "gloo")}
        line = f"{case_name(r['net'], r['world'], r['op'], r['bytes']):36} {d * 1e3:9.2f} {g * 1e3:9.2f} {g / d:9.2f}"
        if r["net"] == "loopback":
            line += f" {'':>10} {'':>10}"
            goal = ("met" if d <= GOAL_LOOPBACK * g else "NOT met") if r["bytes"] >= 1 << 20 else "-"
        else:
            ideal = ideal_seconds(r["op"], r["bytes"], r["world"])
            line += f" {ideal / d:10.3f} {ideal / g:10.3f}"
            goal = "met" if ideal / d >= GOAL_IDEAL and d <= g else "NOT met"
        out.append(line + f" {cpu['dlcp']:>13} {cpu['gloo']:>13}  {goal}")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--out")
    ap.add_argument("--plan")
    ap.add_argument("--tune", default="{}", help="JSON of Collectives class attributes to override (tuning)")
    ap.add_argument("--quick", action="store_true", help="sizes up to 16 MiB, fewer repetitions")
    ap.add_argument("--only", action="append", default=[], help="run only cases whose name contains this text")
    ap.add_argument("--name", default="collectives", help="result name (bench/results/<name>.json/.png)")
    ap.add_argument("--bf16", action="store_true", help="also all-reduce the same elements as bf16, and compare")
    args = ap.parse_args()
    if args.worker:
        from host.procexit import exit_process

        _worker(args)
        exit_process()  # not interpreter finalization: see host/procexit.py

    from harness import Report

    quick = args.quick or os.environ.get("DLCP_BENCH_QUICK") == "1"
    sizes = QUICK_SIZES if quick else SIZES
    nets = NETS if os.geteuid() == 0 else ["loopback"]
    tune = json.loads(args.tune)
    rep = Report(args.name, params={
        "sizes": sizes, "worlds": WORLDS, "networks": nets, "dtype": "float32" + (" and bfloat16" if args.bf16 else ""),
        "quick": quick,
        "repetitions": {net: {size_label(s): repetitions(s, quick, net) for s in sizes} for net in nets},
        "warmup_rounds": 1,
        "shaped": "testbed.netns.Star(P, rate='1gbit', mtu=9000), tbf both directions",
        "loopback": "all ranks in one private namespace (own lo), dlcp at the loopback path MTU",
        "metric": "seconds per call, slowest rank; ideal_fraction = ideal ring time / measured",
        "goals": {"loopback_within": GOAL_LOOPBACK, "shaped_ideal_fraction": GOAL_IDEAL}, "tune": tune})
    rows: list[dict] = []
    t_start = time.monotonic()
    for net in nets:
        for world in WORLDS:
            plan = []
            for s in sizes:
                ops = [op for op in OPS + (HALF_OPS if args.bf16 else ())
                       if not args.only or any(o in case_name(net, world, op, s) for o in args.only)]
                if ops:
                    plan.append([s, ops, repetitions(s, quick, net)])
            if not plan:
                continue
            t0 = time.monotonic()
            got = run_world(net, world, plan, tune)
            print(f"# {net} P={world}: {time.monotonic() - t0:.0f} s", flush=True)
            print(summary(got), flush=True)
            rows += got
    for r in rows:
        name = case_name(r["net"], r["world"], r["op"], r["bytes"])
        params = {"bytes": r["bytes"], "world": r["world"], "op": r["op"], "network": r["net"],
                  "cpu_s_median": {"dlcp": statistics.median(r["cpu_dlcp"]), "gloo": statistics.median(r["cpu_gloo"])},
                  "sys_s_median": {"dlcp": statistics.median(r["sys_dlcp"]), "gloo": statistics.median(r["sys_gloo"])}}
        it_c, it_b = iter(r["dlcp"]), iter(r["gloo"])
        if r["net"] != "loopback":
            params["ideal_s"] = ideal_seconds(r["op"], r["bytes"], r["world"])
        rep.compare(name, candidate=lambda: {"seconds": next(it_c)}, baseline=lambda: {"seconds": next(it_b)},
                    metric="seconds", higher_is_better=False, repetitions=len(r["dlcp"]), warmup=0,
                    candidate_name="dlcp", baseline_name="gloo", params=params)
        if r["net"] != "loopback":
            ideal = params["ideal_s"]
            it_c, it_b = iter(r["dlcp"]), iter(r["gloo"])
            rep.compare(name + " ideal", candidate=lambda: {"ideal_fraction": ideal / next(it_c)},
                        baseline=lambda: {"ideal_fraction": ideal / next(it_b)}, metric="ideal_fraction",
                        higher_is_better=True, repetitions=len(r["dlcp"]), warmup=0, candidate_name="dlcp",
                        baseline_name="gloo", params=params)
    f32 = {(r["net"], r["world"], r["bytes"]): r for r in rows if r["op"] == "all_reduce"}
    for r in rows:  # dlcp's bf16 all-reduce against its float32 one of the same elements (same processes, in turn)
        base = f32.get((r["net"], r["world"], r["bytes"])) if r["op"] == "all_reduce_bf16" else None
        if base is None:
            continue
        it_c, it_b = iter(r["dlcp"]), iter(base["dlcp"])
        rep.compare(case_name(r["net"], r["world"], "all_reduce", r["bytes"]) + " bf16 vs f32",
                    candidate=lambda: {"seconds": next(it_c)}, baseline=lambda: {"seconds": next(it_b)},
                    metric="seconds", higher_is_better=False, repetitions=min(len(r["dlcp"]), len(base["dlcp"])),
                    warmup=0, candidate_name="dlcp bf16", baseline_name="dlcp f32",
                    params={"bytes_f32": r["bytes"], "world": r["world"], "network": r["net"]})
    rep.params["wall_seconds"] = round(time.monotonic() - t_start, 1)
    rep.params["summary"] = summary(rows).splitlines()
    rep.write()
    if rows:
        out_dir = Path(os.environ.get("DLCP_BENCH_RESULTS", RESULTS))
        print(f"-> {plot(rows, out_dir / (args.name + '.png'))}")
    print(summary(rows))


if __name__ == "__main__":
    main()
