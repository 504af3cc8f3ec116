"""Bounded loss: a lossy all-reduce under forced 1% packet loss vs the same all-reduce with loss bound 0.

P=4 ranks, one network namespace each on a bridge, every link tbf-shaped to 1 Gb/s both ways (MTU 9000). Each
rank runs two transport endpoints side by side, both with a socket that drops about 1% of the data packets it
sends, and times the same all-reduce (``host.collectives.Collectives`` over the endpoint) on each, alternating
which goes first every round:

* **candidate** (``loss_bound=0.01``): the socket drops every drop-eligible packet, as a congested DLCP switch does
  (it drops only eligible packets). The call's budget, 1% of its elements in whole packets, makes about 1% of the
  reduce-scatter packets eligible; the receivers complete without them and every rank reports the same
  zero-filled ranges.
* **baseline** (``loss_bound=0``): the socket drops each data packet with probability 1% (a drop-tail switch
  picks no packet in particular); every loss is detected and retransmitted.

Both endpoints take the same path (Python send path: a socket wrapper turns GSO off for both). The difference
is the point of the measurement: what it costs to insist on every packet versus accepting the bounded loss.
Report: per size the median seconds of each (slowest rank), the speedup, and in the case's params the
zero-filled fraction and the retransmitted packets per call. Needs root. ``--quick``: 4 and 16 MiB only.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORLD = 4
P_LOSS = 0.01
SIZES = [4 << 20, 16 << 20, 64 << 20]
QUICK_SIZES = [4 << 20, 16 << 20]


def _worker(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(ROOT))
    import torch
    import torch.distributed as dist

    from host.collectives import Collectives, EndpointLink
    from host.transport.endpoint import Endpoint, Options
    from host.transport.faults import LossySocket

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, ips = dist.get_rank(), json.loads(args.ips)
    wrappers = {  # candidate: every eligible packet dropped; baseline: 1% of all data packets at random
        "lossy": lambda s: LossySocket(s, loss_eligible=1.0, loss_protected=0.0, seed=rank),
        "exact": lambda s: LossySocket(s, loss_eligible=P_LOSS, loss_protected=P_LOSS, seed=rank),
    }
    eps = {k: Endpoint(rank, {q: (ip, 19400 + i) for q, ip in enumerate(ips)}, job_id=11, nonce=0x5A5A,
                       options=Options(mtu=9000, socket_wrapper=w)) for i, (k, w) in enumerate(wrappers.items())}
    colls = {k: Collectives(EndpointLink(ep), list(range(WORLD)), rank, timeout=120) for k, ep in eps.items()}
    bounds = {"lossy": P_LOSS, "exact": 0.0}
    rows = []
    for nbytes in json.loads(args.sizes):
        x = torch.randn(nbytes // 4)
        got = {k: [] for k in colls}
        zf, retx = [], {k: [] for k in colls}
        for rnd in range(args.reps + 1):
            for k in (("lossy", "exact") if rnd % 2 == 0 else ("exact", "lossy")):
                t = x.clone()
                r0 = eps[k].stats()["retransmissions"]
                dist.barrier()
                t0 = time.perf_counter()
                out = colls[k].allreduce(t, loss_bound=bounds[k])
                dt = time.perf_counter() - t0
                if rnd:  # round 0 warms up
                    got[k].append(dt)
                    retx[k].append(eps[k].stats()["retransmissions"] - r0)
                    if k == "lossy":
                        zf.append(out.fraction)
        t = torch.tensor(got["lossy"] + got["exact"], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)  # a call ends when its slowest rank is done
        rt = torch.tensor(retx["lossy"] + retx["exact"], dtype=torch.float64)
        dist.all_reduce(rt)  # retransmissions of all ranks
        n = args.reps
        rows.append({"bytes": nbytes, "lossy": t[:n].tolist(), "exact": t[n:].tolist(), "zero_filled": zf,
                     "retx_lossy": rt[:n].tolist(), "retx_exact": rt[n:].tolist()})
    if rank == 0:
        Path(args.out).write_text(json.dumps(rows))
    dist.barrier()
    for ep in eps.values():
        ep.close()
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(sizes: list[int], reps: int, timeout: float = 1200) -> list[dict]:
    from harness import wait_ranks
    from testbed.netns import Star

    net = Star(WORLD, rate="1gbit", mtu=9000)
    try:
        ips = [h.ip for h in net.hosts]
        port = _free_port()
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "r.json")
            procs = []
            for r in range(WORLD):
                argv = net.cmd(r, [sys.executable, str(Path(__file__).resolve()), "--worker", "--out", out,
                                   "--ips", json.dumps(ips), "--sizes", json.dumps(sizes), "--reps", str(reps)])
                env = {**os.environ, "MASTER_ADDR": ips[0], "MASTER_PORT": str(port), "RANK": str(r),
                       "WORLD_SIZE": str(WORLD), "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "eth0"}
                procs.append(subprocess.Popen(argv, cwd=ROOT, env=env))
            wait_ranks(procs, timeout, "bounded_loss")
            return json.loads(Path(out).read_text())
    finally:
        net.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--out")
    ap.add_argument("--ips")
    ap.add_argument("--sizes")
    ap.add_argument("--reps", type=int, default=6)
    ap.add_argument("--quick", action="store_true", default=os.environ.get("DLCP_BENCH_QUICK") == "1")
    args = ap.parse_args()
    if args.worker:
        from host.procexit import exit_process

        _worker(args)
        exit_process()  # not interpreter finalization: see host/procexit.py
    if os.geteuid() != 0:
        raise SystemExit("bench/bounded_loss.py needs root (network namespaces and tbf)")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from harness import Report

    sizes = QUICK_SIZES if args.quick else SIZES
    reps = 4 if args.quick else args.reps
    rows = run(sizes, reps)
    rep = Report("bounded_loss", params={
        "world": WORLD, "network": "testbed.netns.Star(4, rate='1gbit', mtu=9000), tbf both directions",
        "loss": f"~{P_LOSS:.0%} of data packets dropped by each sender's socket",
        "candidate": f"loss_bound={P_LOSS}: every drop-eligible packet dropped",
        "baseline": f"loss_bound=0: each data packet dropped with probability {P_LOSS}, retransmitted",
        "command": "make bench (or: .venv/bin/python bench/bounded_loss.py)"})
    for row in rows:
        it_c, it_b = iter(row["lossy"]), iter(row["exact"])
        rep.compare(f"P=4 all-reduce {row['bytes'] >> 20} MiB", candidate=lambda: {"seconds": next(it_c)},
                    baseline=lambda: {"seconds": next(it_b)}, metric="seconds", higher_is_better=False,
                    repetitions=len(row["lossy"]), warmup=0, candidate_name="lossy p=1%",
                    baseline_name="exact, retransmits",
                    params={"zero_filled_fraction_median": statistics.median(row["zero_filled"]),
                            "zero_filled_fraction_max": max(row["zero_filled"]),
                            "retransmitted_packets_lossy": statistics.median(row["retx_lossy"]),
                            "retransmitted_packets_exact": statistics.median(row["retx_exact"])})
    rep.write()


if __name__ == "__main__":
    main()
