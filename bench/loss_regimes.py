"""How the transport's loss recovery degrades with loss, from slow to dead: the real sender and receiver stages on
the simulated link of ``tests/host/losssim.py`` (no bandwidth limit, one-way delay 5 ms, peer_timeout 10 s).

For each loss rate (every datagram, data and control, both directions, independently) and seed: four exact
transfers of 200 MTU-1500 packets each, started together; the time until all are done (or the first error),
the retransmissions and timeouts. Writes ``results/loss_regimes.json``; docs/transport.md ("Between slow and
dead") quotes its medians.

usage: python bench/loss_regimes.py [--seeds N] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from host.transport.api import Options, TransportError  # noqa: E402
from tests.host.losssim import SimLink, transfer  # noqa: E402

LOSS = (0.0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7)


def one(p: float, seed: int) -> dict:
    rng = random.Random(seed)
    transfers = [transfer(i + 1, 200, seed=seed + i) for i in range(4)]
    sim = SimLink(transfers, lambda t, kind, info: rng.random() < p, delay=0.005,
                  options=Options(peer_timeout=10.0))
    sim.run(60.0)
    errors = []
    for t in transfers:
        if t.inc is not None and t.inc.error is not None:
            errors.append(str(t.inc.error))
        elif t.o is not None and t.o.handle.done():
            try:
                t.o.handle.wait(0)
            except TransportError as e:
                errors.append(str(e))
    done = [t.done_at for t in transfers]
    return {"loss": p, "seed": seed, "ok": not errors and all(d is not None for d in done),
            "seconds": max(d for d in done if d is not None) if all(d is not None for d in done) else None,
            "ended": sim.clock.now, "error": errors[0][:200] if errors else None,
            "retransmissions": sim.sc.c["retransmissions"], "rto_timeouts": sim.sc.c["rto_timeouts"],
            "tail_probes": sim.sc.c["tail_probes"], "data_sent": sim.data_sent}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=15)
    ap.add_argument("--out", default="results/loss_regimes.json")
    a = ap.parse_args()
    runs = [one(p, s) for p in LOSS for s in range(a.seeds)]
    summary = []
    for p in LOSS:
        rs = [r for r in runs if r["loss"] == p]
        ok = [r["seconds"] for r in rs if r["ok"]]
        summary.append({"loss": p, "runs": len(rs), "completed": len(ok),
                        "median_s": round(statistics.median(ok), 3) if ok else None,
                        "max_s": round(max(ok), 3) if ok else None,
                        "median_rto_timeouts": statistics.median(r["rto_timeouts"] for r in rs),
                        "median_data_sent": statistics.median(r["data_sent"] for r in rs),
                        "errors": sorted({r["error"].split(" for ")[0] for r in rs if r["error"]})})
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    out = {"command": "python bench/loss_regimes.py", "commit": commit, "machine": platform.node(),
           "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "setup": "4 x 200 packets, MTU 1500, one-way delay 5 ms, "
           "peer_timeout 10 s, independent loss of every datagram both ways", "summary": summary, "runs": runs}
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
    for s in summary:
        print(json.dumps(s))


if __name__ == "__main__":
    main()
