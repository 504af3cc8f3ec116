"""Side-by-side benchmark harness: every candidate is measured against its baseline in the same run.

These machines are shared and noisy, so absolute numbers mean little; a ratio of candidate to baseline measured
in alternating repetitions (c, b, c, b, ...) does. A benchmark script builds a :class:`Report`, calls
:meth:`Report.compare` once per case, and :meth:`Report.write` saves ``bench/results/<name>.json`` (machine info,
parameters, every repetition, medians, ratios) and prints a table::

    from harness import Report
    rep = Report("wire", params={"batch": 1000})
    rep.compare("pack 1000 headers", candidate=fast, baseline=slow, metric="headers_per_s", higher_is_better=True)
    rep.write()

Each callable takes no arguments and returns a dict of metrics that contains ``metric`` (other keys are kept).
``ratio`` is candidate/baseline of the medians; ``speedup`` is the same ratio oriented so that > 1 means the
candidate is better.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

RESULTS = Path(__file__).resolve().parent / "results"

Metrics = dict[str, Any]


def machine_info() -> dict[str, Any]:
    """What a reader needs to judge the numbers: host, CPU, load, versions, commit."""
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=Path(__file__).parent, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "hostname": platform.node(), "platform": platform.platform(), "python": sys.version.split()[0],
        "cpu": cpu, "cpus": os.cpu_count(), "loadavg": os.getloadavg(), "commit": commit,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


class Report:
    """The results of one benchmark script: several cases, each a candidate/baseline comparison."""

    def __init__(self, name: str, params: dict[str, Any] | None = None):
        self.name = name
        self.params = dict(params or {})
        self.cases: list[dict[str, Any]] = []
        self.started = time.time()

    def compare(self, case: str, *, candidate: Callable[[], Metrics], baseline: Callable[[], Metrics],
                metric: str, higher_is_better: bool, repetitions: int = 5, warmup: int = 1,
                candidate_name: str = "candidate", baseline_name: str = "baseline",
                params: dict[str, Any] | None = None) -> dict[str, Any]:
        """Run ``warmup`` unrecorded rounds, then ``repetitions`` rounds alternating candidate and baseline
        (the order flips every round so neither always runs first), and record the comparison."""
        if repetitions < 1:
            raise ValueError("repetitions must be >= 1")
        for _ in range(warmup):
            candidate()
            baseline()
        runs: dict[str, list[Metrics]] = {"candidate": [], "baseline": []}
        for i in range(repetitions):
            order = (("candidate", candidate), ("baseline", baseline))
            for role, fn in (order if i % 2 == 0 else order[::-1]):
                m = fn()
                if metric not in m:
                    raise KeyError(f"{self.name}/{case}: {role} returned no {metric!r} (got {sorted(m)})")
                runs[role].append(m)
        med_c = statistics.median(float(m[metric]) for m in runs["candidate"])
        med_b = statistics.median(float(m[metric]) for m in runs["baseline"])
        ratio = med_c / med_b if med_b else float("inf")
        speedup = ratio if higher_is_better else (1 / ratio if ratio else float("inf"))
        result = {
            "case": case, "metric": metric, "higher_is_better": higher_is_better,
            "candidate_name": candidate_name, "baseline_name": baseline_name, "params": dict(params or {}),
            "repetitions": runs, "median": {"candidate": med_c, "baseline": med_b},
            "ratio": ratio, "speedup": speedup,
        }
        self.cases.append(result)
        return result

    def to_dict(self) -> dict[str, Any]:
        # the command line that made the result, so that a figure quoted from it can be re-made
        command = " ".join(["python", os.path.relpath(sys.argv[0], Path(__file__).resolve().parent.parent),
                            *sys.argv[1:]]) if sys.argv and sys.argv[0] else ""
        return {"name": self.name, "command": command, "machine": machine_info(), "params": self.params,
                "seconds": round(time.time() - self.started, 3), "cases": self.cases}

    def table(self) -> str:
        rows = [f"{self.name}", f"{'case':40} {'metric':16} {'candidate':>12} {'baseline':>12} {'speedup':>8}"]
        for c in self.cases:
            rows.append(f"{c['case'][:40]:40} {c['metric'][:16]:16} {c['median']['candidate']:12.4g} "
                        f"{c['median']['baseline']:12.4g} {c['speedup']:7.2f}x"
                        f"  ({c['candidate_name']} vs {c['baseline_name']})")
        return "\n".join(rows)

    def write(self, directory: Path | None = None) -> Path:
        """Save the JSON result and print the table; returns the path written."""
        directory = directory or Path(os.environ.get("DLCP_BENCH_RESULTS", RESULTS))
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{self.name}.json"
        path.write_text(json.dumps(self.to_dict(), indent=2, default=float) + "\n")
        print(self.table())
        print(f"-> {path}")
        return path


def timed(fn: Callable[[], Any], work: float, unit: str) -> Metrics:
    """Call ``fn`` once and report ``work / seconds`` as ``unit`` (e.g. headers_per_s), plus the seconds."""
    t0 = time.perf_counter()
    fn()
    dt = time.perf_counter() - t0
    return {unit: work / dt if dt > 0 else float("inf"), "seconds": dt}


def wait_ranks(procs: list[subprocess.Popen], timeout: float, what: str) -> None:
    """Wait for every process of a multi-process benchmark; raise SystemExit naming ``what`` if one fails or
    outlives ``timeout``; kill whatever is still running on the way out."""
    try:
        for p in procs:
            if p.wait(timeout=timeout) != 0:
                raise SystemExit(f"{what}: a rank exited with {p.returncode}")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def await_release() -> None:
    """Worker side of :func:`run_released`: say ``ready`` (after the setup that must not be measured) and block
    until the parent releases every worker at once."""
    print("ready", flush=True)
    sys.stdin.readline()


def run_released(commands: list[list[str]], timeout: float, what: str) -> list[Metrics]:
    """Start one worker process per command, wait until each has called :func:`await_release`, release them all
    together (so that no worker measures while another still sets up) and return each worker's last stdout line
    parsed as JSON, in the order of ``commands``. A worker that does not start, fails or outlives ``timeout``
    raises RuntimeError naming ``what``; no worker outlives the call."""
    procs = [subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for cmd in commands]
    try:
        for p in procs:
            line = p.stdout.readline().strip()
            if line != "ready":
                raise RuntimeError(f"{what}: a worker did not start: {line!r}")
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        results = []
        for p in procs:
            out, _ = p.communicate(timeout=timeout)
            if p.returncode:
                raise RuntimeError(f"{what}: a worker failed ({p.returncode}): {out}")
            results.append(json.loads(out.strip().splitlines()[-1]))
        return results
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
