"""Runs PyTorch's distributed test suite (``tests/host/distributed_suite.py``) for one backend in a subprocess and
reads its outcome; compares gloo's and dlcp's outcomes; writes the side-by-side pass list.

Used by ``tests/host/test_torch_suite.py`` (the full run behind ``make test-torch-suite``, a subset in
``make test``) and on the command line::

    python -m tests.host.torch_suite --backend gloo --backend dlcp --out build/torch-suite [-k EXPR] \
        [--from-junit gloo=build/torch-suite/gloo.xml] [--doc docs/torch-suite.md]

``--from-junit B=PATH`` takes backend ``B``'s outcomes from an earlier run's JUnit file instead of running it
again (gloo's do not change with dlcp's code); ``--doc`` also writes the pass list as a whole markdown document
(``docs/torch-suite.md`` is made this way; its first line says by which command).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from .dist_run import free_udp_port

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
               "OMP_NUM_THREADS": "1",
               "DLCP_PORT": str(free_udp_port([f"127.0.0.{r + 1}" for r in range(WORLD_SIZE)]))}
        env.pop("CI", None)  # the suite's own skips (CUDA, other backends) are outcomes here, compared below
        cmd = [sys.executable, "-m", "pytest", SUITE, "-q", "-p", "no:cacheprovider", f"--junitxml={junit}",
               "-o", "addopts=", "--timeout=600"]
        if select:
            cmd += ["-k", select]
        subprocess.run(cmd, cwd=ROOT, env=env, timeout=timeout, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
    return read_junit(junit)


def read_junit(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        name = case.get("name", "")
        skipped = case.find("skipped")
        if case.find("failure") is not None or case.find("error") is not None:
            out[name] = "failed"
        elif skipped is not None:
            out[name] = "skipped: " + (skipped.get("message") or "").splitlines()[0][:160] if skipped.get(
                "message") else "skipped"
        else:
            out[name] = "passed"
    return out


def regressions(gloo: dict[str, str], dlcp: dict[str, str]) -> list[str]:
    """Tests passing on gloo that do not pass on dlcp and are not listed in :data:`GLOO_SPECIFIC`."""
    return sorted(t for t, o in gloo.items()
                  if o == "passed" and dlcp.get(t) != "passed" and t not in GLOO_SPECIFIC)


def table(gloo: dict[str, str], dlcp: dict[str, str], command: str) -> str:
    """The pass list side by side (markdown): every test that passed or failed on either backend, then how many the
    suite skipped on both and why."""
    names = sorted(set(gloo) | set(dlcp))
    count = {b: sum(o == "passed" for o in r.values()) for b, r in (("gloo", gloo), ("dlcp", dlcp))}

    def short(o: str) -> str:
        return "skipped" if o.startswith("skipped") else o

    ran = [n for n in names if not (gloo.get(n, "skipped").startswith("skipped")
                                    and dlcp.get(n, "skipped").startswith("skipped"))]
    lines = [f"Made by `{command}` (world size {WORLD_SIZE}, {time.strftime('%Y-%m-%d')}): {len(names)} tests, "
             f"passed on gloo {count['gloo']}, on dlcp {count['dlcp']}; failed on gloo "
             f"{sum(o == 'failed' for o in gloo.values())}, on dlcp {sum(o == 'failed' for o in dlcp.values())}.",
             "", "| test | gloo | dlcp | why not passed on dlcp |", "|---|---|---|---|"]
    for n in ran:
        g, d = gloo.get(n, "-"), dlcp.get(n, "-")
        note = GLOO_SPECIFIC.get(n, "") if g == "passed" and d != "passed" else ""
        lines.append(f"| {n} | {short(g)} | {short(d)} | {note} |")
    both = [n for n in names if n not in ran]
    why: dict[str, int] = {}
    for n in both:
        r = dlcp.get(n, gloo.get(n, "skipped"))[9:] or "no reason given"
        why[r] = why.get(r, 0) + 1
    lines += ["", f"Skipped on both ({len(both)}), with the suite's reasons on dlcp:", ""]
    lines += [f"- {k} ({v})" for k, v in sorted(why.items(), key=lambda kv: -kv[1])]
    return "\n".join(lines) + "\n"


def document(summary: str) -> str:
    """The pass list as a whole markdown document (``docs/torch-suite.md``)."""
    return ("# PyTorch's distributed test suite on gloo and dlcp\n\n"
            "<!-- generated whole by tests/host/torch_suite.py (--doc): re-run its command, do not edit -->\n\n"
            "Every test of PyTorch's `DistributedTest` suite that passed or failed on either backend, side by side; "
            "how the suite is run and what the exceptions mean: [backend.md](backend.md), PyTorch's distributed "
            "test suite.\n\n" + summary)


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
    ap.add_argument("--doc", type=Path, help="also write the pass list as a markdown document here")
    a = ap.parse_args()
    earlier = dict(a.from_junit)
    res = {}
    for b in a.backend:
        res[b] = read_junit(earlier[b]) if b in earlier else run_suite(b, a.out / f"{b}.xml", select=a.select)
        print(b, sum(o == "passed" for o in res[b].values()), "passed of", len(res[b]), flush=True)
    if {"gloo", "dlcp"} <= set(res):
        summary = table(res["gloo"], res["dlcp"], " ".join(["python -m tests.host.torch_suite", *sys.argv[1:]]))
        a.out.mkdir(parents=True, exist_ok=True)
        (a.out / "summary.md").write_text(summary)
        if a.doc is not None:
            a.doc.write_text(document(summary))
        bad = regressions(res["gloo"], res["dlcp"])
        print("regressions:", bad or "none")
        sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
