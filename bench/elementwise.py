"""A collective's reduction step: ``host.elementwise.combine_into`` against ``torch.add`` (``python bench/elementwise.py``).

One step of a ring or of recursive doubling adds a received segment into the buffer. Done with ``torch.add`` it
runs in torch's intra-op OpenMP pool (two threads here) for anything over 32768 elements; done by
``host.elementwise`` it is one numpy ufunc on the calling thread. The pool is fast when its threads get a core at
once and slow when they wait for one: a training host's data loaders and model keep its cores busy. Each case adds
two float32 tensors in place, one call per repetition (alternating the two), with torch's default thread count
(as a user's script has it), on an otherwise idle machine and with one busy process per core beside it. The
metric is the time per call; the cases also record the mean and the 90th and 99th percentiles, since the pool's
cost is in the tail (a call that waits for a preempted pool thread).

``--quick``: fewer repetitions.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SIZES = [64 << 10, 1 << 20, 16 << 20]
LOADS = ["idle", "busy"]


def _reps(nbytes: int, quick: bool) -> int:
    return (400 if nbytes <= 1 << 20 else 60) // (4 if quick else 1)


def _pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    import torch

    from harness import Report
    from host.elementwise import combine_into

    rep = Report("elementwise", params={
        "op": "in-place float32 sum of two tensors (a reduction step of a collective)",
        "torch_threads": torch.get_num_threads(), "cpus": os.cpu_count(),
        "busy": f"{os.cpu_count()} processes spinning in Python (one per core) beside the benchmark"})
    for load in LOADS:
        hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)] \
            if load == "busy" else []
        try:
            time.sleep(0.2 if hogs else 0)
            for nbytes in SIZES:
                a, b = torch.ones(nbytes // 4), torch.ones(nbytes // 4)
                times: dict[str, list[float]] = {"elementwise": [], "torch": []}

                def timed(label: str, fn) -> dict[str, float]:
                    t0 = time.perf_counter()
                    fn()
                    dt = time.perf_counter() - t0
                    times[label].append(dt)
                    return {"seconds": dt}

                reps = _reps(nbytes, args.quick)
                name = f"{load} add {nbytes >> 10} KiB" if nbytes < 1 << 20 else f"{load} add {nbytes >> 20} MiB"
                params = {"bytes": nbytes, "load": load}
                case = rep.compare(name, candidate=lambda: timed("elementwise", lambda: combine_into("sum", a, a, b)),
                                   baseline=lambda: timed("torch", lambda: torch.add(a, b, out=a)),
                                   metric="seconds", higher_is_better=False, repetitions=reps, warmup=3,
                                   candidate_name="host.elementwise", baseline_name="torch.add", params=params)
                for label, xs in times.items():
                    xs = xs[3:]  # (the warm-up rounds)
                    case["params"][label] = {"mean": statistics.fmean(xs), "p90": _pct(xs, 0.9),
                                             "p99": _pct(xs, 0.99)}
                t, e = case["params"]["torch"], case["params"]["elementwise"]
                print(f"{name:18} elementwise median {case['median']['candidate'] * 1e6:8.1f} us mean "
                      f"{e['mean'] * 1e6:8.1f} p99 {e['p99'] * 1e6:8.1f} | torch.add median "
                      f"{case['median']['baseline'] * 1e6:8.1f} us mean {t['mean'] * 1e6:8.1f} p99 {t['p99'] * 1e6:8.1f}",
                      flush=True)
        finally:
            for h in hogs:
                h.kill()
                h.wait()
    rep.write()


if __name__ == "__main__":
    main()
