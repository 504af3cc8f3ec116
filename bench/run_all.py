"""Run every benchmark in bench/ and write bench/results/summary.md.

A benchmark is any ``bench/*.py`` other than this runner and ``harness.py``; each is run as its own process (so a
crash in one does not hide the others) and must write ``results/<name>.json`` through :class:`harness.Report`.
Exit status is non-zero if any benchmark failed. ``--only NAME`` runs a subset; ``--list`` lists them.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "results"
NOT_BENCHMARKS = {"run_all.py", "harness.py"}


def discover() -> list[Path]:
    return sorted(p for p in BENCH.glob("*.py") if p.name not in NOT_BENCHMARKS and not p.name.startswith("_"))


def summarize(results: list[Path], failures: dict[str, str]) -> str:
    lines = ["# Benchmark summary", "", f"Generated {time.strftime('%Y-%m-%d %H:%M:%S')}; every figure is the median"
             " of alternating repetitions; speedup > 1 means the candidate beats its baseline.", "",
             "| benchmark | case | metric | candidate | baseline | speedup |", "|---|---|---|---|---|---|"]
    machine = None
    for path in results:
        data = json.loads(path.read_text())
        machine = machine or data.get("machine")
        for c in data["cases"]:
            lines.append(f"| {data['name']} | {c['case']} ({c['candidate_name']} vs {c['baseline_name']}) | "
                         f"{c['metric']} | {c['median']['candidate']:.4g} | {c['median']['baseline']:.4g} | "
                         f"{c['speedup']:.2f}x |")
    for name, why in failures.items():
        lines.append(f"| {name} | FAILED: {why} | | | | |")
    if machine:
        lines += ["", f"Machine: {machine.get('cpu')} x{machine.get('cpus')}, {machine.get('platform')}, "
                  f"load {machine.get('loadavg')}, commit {machine.get('commit')}"]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", action="append", default=[], help="run only this benchmark (name without .py)")
    ap.add_argument("--list", action="store_true")
    args = ap.parse_args()
    scripts = [p for p in discover() if not args.only or p.stem in args.only]
    if args.list:
        print("\n".join(p.stem for p in scripts))
        return 0
    if not scripts:
        print("run_all: no benchmarks selected", file=sys.stderr)
        return 1
    RESULTS.mkdir(exist_ok=True)
    failures: dict[str, str] = {}
    written: list[Path] = []
    for script in scripts:
        print(f"== {script.stem}", flush=True)
        out = RESULTS / f"{script.stem}.json"
        before = out.stat().st_mtime if out.exists() else None
        r = subprocess.run([sys.executable, str(script)], cwd=BENCH.parent, stdin=subprocess.DEVNULL)
        if r.returncode != 0:
            failures[script.stem] = f"exit status {r.returncode}"
        elif not out.exists() or out.stat().st_mtime == before:
            failures[script.stem] = f"wrote no {out.name}"
        else:
            written.append(out)
    summary = RESULTS / "summary.md"
    summary.write_text(summarize(written, failures))
    print(summary.read_text())
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
