"""The benchmark harness: alternation, medians, ratios, results files, and the runner's failure reporting."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import harness  # noqa: E402


def test_compare_alternates_and_computes_ratios(tmp_path: Path) -> None:
    calls: list[str] = []
    c_vals = iter([10.0, 99.0, 30.0, 20.0])  # first is warm-up
    b_vals = iter([5.0, 5.0, 10.0, 10.0])

    def cand():
        calls.append("c")
        return {"x": next(c_vals)}

    def base():
        calls.append("b")
        return {"x": next(b_vals)}

    rep = harness.Report("t", params={"p": 1})
    res = rep.compare("case", candidate=cand, baseline=base, metric="x", higher_is_better=True, repetitions=3)
    assert calls == ["c", "b", "c", "b", "b", "c", "c", "b"]  # warm-up, then the order flips every round
    assert res["median"] == {"candidate": 30.0, "baseline": 10.0}
    assert res["ratio"] == 3.0 and res["speedup"] == 3.0
    lower = rep.compare("time", candidate=lambda: {"s": 2.0}, baseline=lambda: {"s": 4.0}, metric="s",
                        higher_is_better=False, repetitions=2, warmup=0)
    assert lower["ratio"] == 0.5 and lower["speedup"] == 2.0
    path = rep.write(tmp_path)
    data = json.loads(path.read_text())
    assert data["name"] == "t" and data["params"] == {"p": 1} and len(data["cases"]) == 2
    assert len(data["cases"][0]["repetitions"]["candidate"]) == 3
    assert {"cpu", "cpus", "loadavg", "python", "commit"} <= set(data["machine"])


def test_missing_metric_is_an_error() -> None:
    rep = harness.Report("t")
    with pytest.raises(KeyError, match="returned no 'x'"):
        rep.compare("c", candidate=lambda: {"y": 1}, baseline=lambda: {"x": 1}, metric="x",
                    higher_is_better=True, repetitions=1, warmup=0)


def test_runner_reports_failures(tmp_path: Path) -> None:
    """run_all exits non-zero and lists a benchmark that crashed; the summary still has the good ones."""
    bench = tmp_path / "bench"
    bench.mkdir()
    for f in ("harness.py", "run_all.py"):
        (bench / f).write_text((ROOT / "bench" / f).read_text())
    (bench / "good.py").write_text(
        "from harness import Report\nr = Report('good')\n"
        "r.compare('c', candidate=lambda: {'x': 2}, baseline=lambda: {'x': 1}, metric='x', higher_is_better=True,"
        " repetitions=1, warmup=0)\nr.write()\n")
    (bench / "bad.py").write_text("raise SystemExit(3)\n")
    r = subprocess.run([sys.executable, str(bench / "run_all.py")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    summary = (bench / "results" / "summary.md").read_text()
    assert "| good | c (candidate vs baseline) | x | 2 | 1 | 2.00x |" in summary
    assert "| bad | FAILED: exit status 3" in summary


def test_run_released_starts_workers_together_and_reports_failures() -> None:
    """Each worker's last stdout line comes back as JSON, in the order of the commands; a worker that fails, or
    never says ready, raises an error naming the run."""
    worker = ("import json, sys; sys.path.insert(0, {bench!r}); from harness import await_release; "
              "await_release(); print('noise'); print(json.dumps({{'rank': {rank}}}))")
    bench = str(ROOT / "bench")
    cmds = [[sys.executable, "-c", worker.format(bench=bench, rank=r)] for r in range(3)]
    got = harness.run_released(cmds, 30, "three workers")
    assert [g["rank"] for g in got] == [0, 1, 2]
    cmds[1] = [sys.executable, "-c", f"import sys; sys.path.insert(0, {bench!r}); from harness import "
               "await_release; await_release(); raise SystemExit(5)"]
    with pytest.raises(RuntimeError, match=r"three workers: a worker failed \(5\)"):
        harness.run_released(cmds, 30, "three workers")
    with pytest.raises(RuntimeError, match="three workers: a worker did not start"):
        harness.run_released([[sys.executable, "-c", "print('oops')"]], 30, "three workers")
