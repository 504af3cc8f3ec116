"""Runs PyTorch's distributed test suite (``tests/host/distributed_suite.py``) for one backend in a subprocess and
reads its outcome; compares gloo's and dlcp's outcomes; writes them side by side as a results file.

Used by ``tests/host/test_torch_suite.py`` (a subset in ``make test``), ``tests/host/torch_suite_full.py`` (the
full run behind ``make test-torch-suite``, which writes ``results/torch_suite.json``) and on the command line::

    python -m tests.host.torch_suite --backend gloo --backend dlcp --out build/torch-suite [-k EXPR] \
        [--from-junit gloo=build/torch-suite/gloo.xml] [--results results/torch_suite.json] [--note TEXT]

The results file (:func:`summarise`; ``--results``, by default ``OUT/torch_suite.json``) holds each test's outcome
on both backends, the suite's skip reasons, the reason recorded in :data:`GLOO_SPECIFIC` for each test that
passes on gloo only, the torch version, the command, and each run's start, length and host as its JUnit file
gives them; ``make report`` renders ``docs/torch-suite.md``'s tables from the committed one (``testbed.report``),
and ``OUT/summary.md`` is the same rendering. ``--from-junit B=PATH`` takes backend ``B``'s outcomes from an
earlier run's JUnit file instead of running it again (gloo's do not change with dlcp's code); the results file
says so in its ``produced`` field, with ``--note`` added.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SUITE = "tests/host/distributed_suite.py"
WORLD_SIZE = 3  # PyTorch's CI runs the suite on gloo (CPU) with 3 processes

#: Tests that pass on gloo and not on dlcp, each with the reason. Almost all are tests the suite itself runs only on
#: gloo (or a list of built-in backends): their decorators skip them on any other backend, dlcp included, so they
#: name or require gloo rather than exercise a feature dlcp lacks. One is a limitation of torch for every plugin.
_GATED_GLOO = "the suite runs it on gloo only (require_backend_is_available({'gloo'}))"
_GATED_BUILTIN = "the suite runs it on gloo, nccl and ucc only (require_backend_is_available)"
_GATED_FUTURE = "the suite runs it on mpi, nccl and gloo only ('get_future is only supported on mpi, nccl and gloo')"
GLOO_SPECIFIC: dict[str, str] = {
    "test_batch_isend_irecv_gloo": "the suite runs it on gloo only ('GLOO Batch Send Recv CPU')",
    "test_batch_isend_irecv_gloo_tags": "the suite runs it on gloo only ('GLOO Batch Send Recv CPU')",
    "test_monitored_barrier_gloo": _GATED_GLOO,
    "test_monitored_barrier_gloo_rank_0_timeout": _GATED_GLOO,
    "test_monitored_barrier_gloo_subgroup": _GATED_GLOO,
    "test_barrier_timeout_full_group": "the suite runs it on gloo only ('Only gloo backend supports timeouts')",
    "test_sparse_all_reduce_sum": "the suite runs it on gloo only ('Only Gloo backend supports sparse all reduce'); "
                                  "dlcp has no sparse all-reduce",
    "test_all_reduce_coalesced_full_group_max": _GATED_GLOO,
    "test_all_reduce_coalesced_full_group_min": _GATED_GLOO,
    "test_all_reduce_coalesced_full_group_product": _GATED_GLOO,
    "test_all_reduce_coalesced_full_group_sum": _GATED_GLOO,
    "test_all_reduce_coalesced_max": _GATED_GLOO,
    "test_all_reduce_coalesced_min": _GATED_GLOO,
    "test_all_reduce_coalesced_product": _GATED_GLOO,
    "test_all_reduce_coalesced_sum": _GATED_GLOO,
    "test_grads_same_across_ranks_with_no_sync": _GATED_GLOO,
    "test_scatter_object_list": _GATED_GLOO,
    "test_all_gather_object_default_pg": _GATED_BUILTIN,
    "test_all_gather_object_subgroup": _GATED_BUILTIN,
    "test_accumulate_gradients_no_sync": _GATED_FUTURE,
    "test_accumulate_gradients_no_sync_allreduce_hook": _GATED_FUTURE,
    "test_accumulate_gradients_no_sync_allreduce_with_then_hook": _GATED_FUTURE,
    "test_accumulate_gradients_no_sync_grad_is_view": _GATED_FUTURE,
    "test_get_future": _GATED_FUTURE,
    "test_ddp_logging_data_cpu": "torch: DDP's logger records ProcessGroup::getBackendName(), which is 'custom' for "
                                 "every register_backend plugin, and the test expects dist.get_backend()'s 'dlcp'",
}


def run_suite(backend: str, junit: Path, *, select: str | None = None, timeout: float = 6 * 3600) -> dict[str, str]:
    """Run the suite for ``backend`` (``select``: a pytest ``-k`` expression); return ``{test: outcome}`` with
    outcome ``passed``, ``failed``, or ``skipped: reason``."""
    junit.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"torch-suite-{backend}-") as tmp:
        env = {**os.environ, "BACKEND": backend, "WORLD_SIZE": str(WORLD_SIZE), "TEMP_DIR": tmp,
               "OMP_NUM_THREADS": "1"}
        for var in ("DLCP_PORT", "DLCP_ADDR"):  # dlcp's defaults: every rank binds a free port (docs/backend.md)
            env.pop(var, None)
        env.pop("CI", None)  # the suite's own skips (CUDA, other backends) are outcomes here, compared below
        cmd = [sys.executable, "-m", "pytest", SUITE, "-q", "-p", "no:cacheprovider", f"--junitxml={junit}",
               "-o", "addopts=", "--timeout=600"]
        if select:
            cmd += ["-k", select]
        subprocess.run(cmd, cwd=ROOT, env=env, timeout=timeout, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
    return read_junit(junit)


def _junit_root(path: Path) -> ET.Element:
    try:
        return ET.parse(path).getroot()
    except ET.ParseError as e:
        raise ValueError(f"{path}: not a JUnit XML file ({e})") from None


def read_junit(path: Path) -> dict[str, str]:
    """``{test: outcome}`` from a JUnit file: ``passed``, ``failed`` (a failure or an error), or ``skipped`` /
    ``skipped: reason`` (the first line of pytest's message, at most 160 characters)."""
    out: dict[str, str] = {}
    for case in _junit_root(path).iter("testcase"):
        name = case.get("name", "")
        skipped = case.find("skipped")
        if case.find("failure") is not None or case.find("error") is not None:
            out[name] = "failed"
        elif skipped is not None:
            message = (skipped.get("message") or "").strip()
            out[name] = "skipped: " + message.splitlines()[0][:160] if message else "skipped"
        else:
            out[name] = "passed"
    return out


def junit_run(path: Path) -> dict[str, Any]:
    """When a JUnit file's run started, how long it took (seconds) and on which host, as pytest records them."""
    root = _junit_root(path)
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    try:
        started = datetime.fromisoformat(suite.get("timestamp", "") if suite is not None else "")
        seconds = float(suite.get("time", ""))  # type: ignore[union-attr]
    except ValueError:
        raise ValueError(f"{path}: no <testsuite timestamp=... time=...> (not a JUnit file written by pytest?)") \
            from None
    return {"started": started.isoformat(timespec="seconds"), "seconds": round(seconds, 1),
            "hostname": suite.get("hostname", "?")}  # type: ignore[union-attr]


def summarise(junit: dict[str, Path], *, command: str, produced: str) -> dict[str, Any]:
    """The results file (``results/torch_suite.json``) from each backend's JUnit file: every test's outcome on
    each backend (``gloo``, ``dlcp``: ``passed``, ``failed``, ``skipped``; absent: not in that run), the suite's
    skip reason on dlcp (``skip``) and gloo's where it differs (``gloo_skip``; most are the same, so they are kept
    once), and for a test that passed on gloo and not on dlcp its reason from :data:`GLOO_SPECIFIC` (``exception``;
    none: a regression). ``date``: the day the last run started."""
    missing = {"gloo", "dlcp"} - set(junit)
    if missing:
        raise ValueError(f"summarise: no JUnit file for {sorted(missing)}")
    outcomes = {b: read_junit(p) for b, p in junit.items()}
    runs = {b: junit_run(p) for b, p in junit.items()}
    tests: dict[str, dict[str, Any]] = {}
    for name in sorted(set().union(*outcomes.values())):
        split = {b: outcomes[b][name].partition(": ") for b in ("gloo", "dlcp") if name in outcomes[b]}
        entry: dict[str, Any] = {b: outcome for b, (outcome, _, _) in split.items()}
        dlcp_reason, gloo_reason = split.get("dlcp", ("",) * 3)[2], split.get("gloo", ("",) * 3)[2]
        if dlcp_reason:
            entry["skip"] = dlcp_reason
        if gloo_reason and gloo_reason != dlcp_reason:
            entry["gloo_skip"] = gloo_reason
        if entry.get("gloo") == "passed" and entry.get("dlcp") != "passed" and name in GLOO_SPECIFIC:
            entry["exception"] = GLOO_SPECIFIC[name]
        tests[name] = entry
    return {"name": "torch_suite", "command": command, "produced": produced,
            "torch": importlib.metadata.version("torch"), "world_size": WORLD_SIZE,
            "date": max(r["started"] for r in runs.values())[:10], "runs": runs, "tests": tests}


def regressions(gloo: dict[str, str], dlcp: dict[str, str]) -> list[str]:
    """Tests passing on gloo that do not pass on dlcp and are not listed in :data:`GLOO_SPECIFIC`."""
    return sorted(t for t, o in gloo.items()
                  if o == "passed" and dlcp.get(t) != "passed" and t not in GLOO_SPECIFIC)


def write_results(summary: dict[str, Any], path: Path, out: Path) -> None:
    """Write :func:`summarise`'s dict to ``path`` (one line per test) and its tables to ``out/summary.md``."""
    from testbed.report import dumps, torch_suite_table

    for d in (path.parent, out):
        d.mkdir(parents=True, exist_ok=True)
    path.write_text(dumps(summary, "tests"))
    (out / "summary.md").write_text(torch_suite_table(summary) + "\n")


def produced(ran: list[str], earlier: dict[str, Path], note: str = "") -> str:
    """How a results file was made, for its ``produced`` field: which backends ran now, at which commit, and which
    outcomes were read from earlier runs' JUnit files."""
    from bench.harness import machine_info

    return " ".join(filter(None, [
        f"Run by this command at commit {machine_info()['commit'] or '?'}: {' and '.join(ran)}." if ran else "",
        *(f"{b}'s outcomes read from {p} (an earlier run's JUnit file)." for b, p in earlier.items()), note]))


def _from_junit(spec: str) -> tuple[str, Path]:
    backend, sep, path = spec.partition("=")
    if not sep or backend not in ("gloo", "dlcp") or not Path(path).is_file():
        raise argparse.ArgumentTypeError(f"--from-junit {spec!r}: expected gloo=PATH or dlcp=PATH of an existing "
                                         f"JUnit file")
    return backend, Path(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", action="append", choices=["gloo", "dlcp"], required=True)
    ap.add_argument("--out", type=Path, default=ROOT / "build" / "torch-suite")
    ap.add_argument("-k", dest="select")
    ap.add_argument("--from-junit", action="append", type=_from_junit, default=[],
                    help="BACKEND=PATH: that backend's outcomes from an earlier run's JUnit file, not a new run")
    ap.add_argument("--results", type=Path, help="where to write the results file (default: OUT/torch_suite.json)")
    ap.add_argument("--note", default="", help="added to the results file's account of how it was produced")
    a = ap.parse_args()
    earlier = dict(a.from_junit)
    junit: dict[str, Path] = {}
    res = {}
    for b in a.backend:
        junit[b] = earlier.get(b) or a.out / f"{b}.xml"
        res[b] = read_junit(junit[b]) if b in earlier else run_suite(b, junit[b], select=a.select)
        print(b, sum(o == "passed" for o in res[b].values()), "passed of", len(res[b]), flush=True)
    if {"gloo", "dlcp"} <= set(res):
        argv = sys.argv[1:]
        if "--note" in argv:  # the note is said in `produced`, not repeated in the command
            del argv[argv.index("--note"):argv.index("--note") + 2]
        summary = summarise(junit, command=" ".join(["python -m tests.host.torch_suite", *argv]),
                            produced=produced([b for b in junit if b not in earlier], earlier, a.note))
        write_results(summary, a.results or a.out / "torch_suite.json", a.out)
        bad = regressions(res["gloo"], res["dlcp"])
        print("regressions:", bad or "none")
        sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
