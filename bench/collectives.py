"""Collectives: dlcp backend vs gloo, side by side in the same processes, on loopback.

Each rank process initialises dlcp as the default group and a gloo group over the same ranks, then times
all-reduce, reduce-scatter and all-gather at several sizes, alternating dlcp and gloo repetitions. Rank 0 writes
the per-repetition seconds; this script turns them into a Report (metric: seconds, lower is better).
``DLCP_BENCH_QUICK=1`` runs a reduced matrix. Shaped 1 Gb/s namespaces: bench/transport.py (transport level).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import Report

ROOT = Path(__file__).resolve().parent.parent
QUICK = os.environ.get("DLCP_BENCH_QUICK") == "1"
SIZES = [4 << 10, 1 << 20, 16 << 20] if QUICK else [4 << 10, 256 << 10, 1 << 20, 16 << 20, 64 << 20]
WORLDS = [2] if QUICK else [2, 4]
REPS = 3 if QUICK else 5


def worker(out_path: str) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("dlcp")
    gloo = dist.new_group(backend="gloo")
    P, r = dist.get_world_size(), dist.get_rank()
    results = []
    for nbytes in SIZES:
        n = nbytes // 4
        x = torch.randn(n)
        shard = torch.empty(n // P)
        full = torch.empty((n // P) * P)
        ops = {
            "all_reduce": lambda g: dist.all_reduce(x, group=g),
            "reduce_scatter": lambda g: dist.reduce_scatter_single(shard, full, group=g),
            "all_gather": lambda g: dist.all_gather_single(full, shard, group=g),
        }
        for name, fn in ops.items():
            times = {"dlcp": [], "gloo": []}
            for rep in range(REPS + 1):
                order = [("dlcp", None), ("gloo", gloo)]
                for label, g in (order if rep % 2 == 0 else order[::-1]):
                    dist.barrier(group=gloo)
                    t0 = time.perf_counter()
                    fn(g)
                    dt = time.perf_counter() - t0
                    if rep:  # repetition 0 is the warm-up
                        times[label].append(dt)
            results.append({"op": name, "bytes": nbytes, "world": P, **times})
    if r == 0:
        Path(out_path).write_text(json.dumps(results))
    dist.barrier(group=gloo)
    dist.destroy_process_group()


def run_world(P: int) -> list[dict]:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "r.json")
        procs = [subprocess.Popen([sys.executable, __file__, "--worker", out], cwd=ROOT,
                                  env={**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                                       "RANK": str(r), "WORLD_SIZE": str(P), "OMP_NUM_THREADS": "1"})
                 for r in range(P)]
        for p in procs:
            if p.wait(timeout=1800) != 0:
                raise SystemExit(f"benchmark rank exited with {p.returncode}")
        return json.loads(Path(out).read_text())


def main() -> None:
    rep = Report("collectives", params={"sizes": SIZES, "worlds": WORLDS, "repetitions": REPS,
                                        "network": "loopback"})
    for P in WORLDS:
        for row in run_world(P):
            it_c, it_b = iter(row["dlcp"]), iter(row["gloo"])
            mb = row["bytes"] / (1 << 20)
            rep.compare(f"{row['op']} {mb:g} MiB P={P}", candidate=lambda: {"seconds": next(it_c)},
                        baseline=lambda: {"seconds": next(it_b)}, metric="seconds", higher_is_better=False,
                        repetitions=len(row["dlcp"]), warmup=0, candidate_name="dlcp", baseline_name="gloo",
                        params={"bytes": row["bytes"], "world": P, "op": row["op"]})
    rep.write()


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--worker":
        worker(sys.argv[2])
    else:
        main()
