"""``make test-bmv2``: tests marked ``bmv2`` run the real P4 toolchain (p4c-bm2-ss, BMv2 simple_switch_grpc) beside
the embedded target.  They run only when the marker is selected (``-m bmv2``); under ``make test`` (no ``-m``)
and ``make test-fast`` they are deselected (tests/conftest.py's ``OPT_IN``), so the suite never needs the
toolchain.  Selected without the toolchain on PATH, each fails saying what is missing and how to get it (never a
skip that reads as a pass).

The cases compared, the differences found and the documented BMv2 deviations seen (``twin.Deviation``), and every
switch restart, are written to ``results/bmv2_differential.json`` at the end of a
``make test-bmv2`` session that ran them all (``BMV2_RESULTS`` overrides the path; a partial run, e.g. with
``-k``, writes nothing unless it is set)."""
from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from .twin import BINARIES, ROOT, Tally

TALLIES: dict[str, Tally] = {}


def _require(binaries: tuple[str, ...]) -> dict[str, str]:
    missing = [b for b in binaries if shutil.which(b) is None]
    if missing:
        pytest.fail(f"make test-bmv2 needs the P4 toolchain on PATH, missing: {', '.join(missing)}. Build it with "
                    f"build-p4-toolchain.sh (p4c and BMv2 from p4lang's sources, docs/development.md) and run "
                    f"`make test-bmv2 P4TOOLS=<its folder>` (default /work/p4tools; its p4tools.env sets PATH)")
    return {b: shutil.which(b) or "" for b in binaries}


@pytest.fixture(scope="session")
def p4c_tool() -> dict[str, str]:
    """p4c-bm2-ss alone (the P4Info tests; fails naming it when it is not on PATH)."""
    return _require(BINARIES[:1])


@pytest.fixture(scope="session")
def toolchain(root_required) -> dict[str, str]:
    """The toolchain's binaries (fails, naming what is missing, when they are not on PATH)."""
    return _require(BINARIES)


def tally(group: str) -> Tally:
    """The session's count for one group of differential cases."""
    return TALLIES.setdefault(group, Tally())


def _version(binary: str) -> str:
    if shutil.which(binary) is None:
        return "not on PATH"
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=20)
        return " ".join((out.stdout + out.stderr).split()) or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not TALLIES:
        return
    out = os.environ.get("BMV2_RESULTS")
    full = not session.config.option.keyword and session.config.args == ["tests/bmv2"]
    if out is None:
        if not full:
            return                                   # a partial run: keep the committed full run
        out = str(ROOT / "results" / "bmv2_differential.json")
    command = "make test-bmv2" if full else " ".join(
        ["python -m pytest -m bmv2", *(["-k", repr(session.config.option.keyword)] if session.config.option.keyword
                                       else []), *session.config.args])
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    data = {
        "name": "bmv2_differential",
        "command": command,
        "machine": {"hostname": platform.node(), "python": platform.python_version(), "commit": commit,
                    "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                    "p4c": _version("p4c-bm2-ss"), "bmv2": _version("simple_switch_grpc")},
        "groups": {g: {"cases": t.cases, "differences": len(t.differences), "details": t.differences,
                       **({"documented_deviations": len(t.deviations), "deviation_details": t.deviations}
                          if t.deviations else {}),
                       **({"notes": t.notes} if t.notes else {})} for g, t in sorted(TALLIES.items())},
        "total": {"cases": sum(t.cases for t in TALLIES.values()),
                  "differences": sum(len(t.differences) for t in TALLIES.values()),
                  "documented_deviations": sum(len(t.deviations) for t in TALLIES.values())},
        "exit_status": int(exitstatus),
    }
    Path(out).write_text(json.dumps(data, indent=1) + "\n")


@pytest.fixture(scope="session")
def twin(toolchain):
    """BMv2 and dlcp-switch on switch ports 0, 1, 2, 3, 4 and 7 (CPU port 255, 8 priority queues per port), for
    the whole session; each test pushes its own program, which clears the previous one's state."""
    from .twin import Twin
    t = Twin((0, 1, 2, 3, 4, 7), cpu_port=255, priority_queues=8)
    try:
        yield t
    finally:
        if t.restarts:                                  # which test left a switch dead or stuck (test_harness's own)
            tally("harness").notes.extend(t.restarts)
        t.close()
