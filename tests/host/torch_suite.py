"""Runs PyTorch's distributed test suite (``tests/host/distributed_suite.py``) for one backend in a subprocess and
reads its outcome; compares gloo's and dlcp's outcomes; writes the side-by-side pass list.

Used by ``tests/host/test_torch_suite.py`` (the full run behind ``make test-torch-suite``, a subset in
``make test``) and on the command line::

    python -m tests.host.torch_suite --backend gloo --backend dlcp --out build/torch-suite [-k EXPR]
"""

from __future__ import annotations

import argparse
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SUITE = "tests/host/distributed_suite.py"
WORLD_SIZE = 3  # PyTorch's CI runs the suite on gloo (CPU) with 3 processes

#: Tests that pass on gloo and are not expected to pass on dlcp, with the reason. Only tests whose subject is gloo
#: itself belong here.
GLOO_SPECIFIC: dict[str, str] = {
    "test_batch_isend_irecv_gloo": "requires BACKEND == 'gloo' inside (the P2P batch on gloo's own process group)",
}


def _free_udp_port() -> int:
    """A UDP port free on the loopback addresses the suite's ranks bind (127.0.0.1..WORLD_SIZE), so the suite's
    dlcp transport does not meet another job's on the well-known port."""
    for _ in range(100):
        port = random.randrange(20000, 40000)
        socks = []
        try:
            for r in range(WORLD_SIZE):
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                socks.append(s)
                s.bind((f"127.0.0.{r + 1}", port))
            return port
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free UDP port for the suite's dlcp transport")


def run_suite(backend: str, junit: Path, *, select: str | None = None, timeout: float = 6 * 3600) -> dict[str, str]:
    """Run the suite for ``backend`` (``select``: a pytest ``-k`` expression); return ``{test: outcome}`` with
    outcome ``passed``, ``failed``, or ``skipped: reason``."""
    junit.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"torch-suite-{backend}-") as tmp:
        env = {**os.environ, "BACKEND": backend, "WORLD_SIZE": str(WORLD_SIZE), "TEMP_DIR": tmp,
               "OMP_NUM_THREADS": "1", "DLCP_PORT": str(_free_udp_port())}
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
    """The pass list side by side (markdown)."""
    names = sorted(set(gloo) | set(dlcp))
    count = {b: sum(o == "passed" for o in r.values()) for b, r in (("gloo", gloo), ("dlcp", dlcp))}
    lines = [f"Made by `{command}` (world size {WORLD_SIZE}, {time.strftime('%Y-%m-%d')}): "
             f"{len(names)} tests, passed on gloo {count['gloo']}, on dlcp {count['dlcp']}.", "",
             "| test | gloo | dlcp | note |", "|---|---|---|---|"]
    for n in names:
        g, d = gloo.get(n, "-"), dlcp.get(n, "-")
        note = GLOO_SPECIFIC.get(n, "") if g == "passed" and d != "passed" else ""
        short = {o: (o if not o.startswith("skipped") else "skipped") for o in (g, d)}
        lines.append(f"| {n} | {short[g]} | {short[d]} | {note} |")
    skips = sorted({o[9:] for o in dlcp.values() if o.startswith("skipped: ")})
    lines += ["", "Reasons the suite gave for its skips on dlcp:", ""] + [f"- {s}" for s in skips]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", action="append", choices=["gloo", "dlcp"], required=True)
    ap.add_argument("--out", type=Path, default=ROOT / "build" / "torch-suite")
    ap.add_argument("-k", dest="select")
    a = ap.parse_args()
    res = {}
    for b in a.backend:
        res[b] = run_suite(b, a.out / f"{b}.xml", select=a.select)
        print(b, sum(o == "passed" for o in res[b].values()), "passed of", len(res[b]), flush=True)
    if {"gloo", "dlcp"} <= set(res):
        (a.out / "summary.md").write_text(table(res["gloo"], res["dlcp"], " ".join(["python -m tests.host.torch_suite",
                                                                                    *sys.argv[1:]])))
        bad = regressions(res["gloo"], res["dlcp"])
        print("regressions:", bad or "none")
        sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
