"""``make test-bmv2``'s tests stay out of ``make test`` and, selected without the P4 toolchain, fail saying what is
missing (never a skip that reads as a pass): both checked by running pytest on tests/bmv2 as the targets do."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def pytest_run(*args: str, path: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=path, BMV2_RESULTS=os.devnull)
    env.pop("PYTHONPATH", None)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=240)


def test_deselected_without_the_marker():
    done = pytest_run("tests/bmv2", "--co", path=os.environ["PATH"])
    assert "no tests collected" in done.stdout and "deselected" in done.stdout, done.stdout[-2000:]


def test_selected_without_the_toolchain_fails_naming_it(tmp_path):
    done = pytest_run("-m", "bmv2", "tests/bmv2/test_p4info.py", "-k", "dlcp", path=str(tmp_path))  # nothing there
    assert done.returncode == 1, done.stdout[-2000:]
    assert "1 error" in done.stdout or "1 failed" in done.stdout, done.stdout[-2000:]
    assert "make test-bmv2 needs the P4 toolchain on PATH, missing: p4c-bm2-ss." in done.stdout, done.stdout[-2000:]
    done = pytest_run("-m", "bmv2", "tests/bmv2/test_dlcp.py", "-k", "forwarding", path=str(tmp_path))
    assert done.returncode == 1, done.stdout[-2000:]
    assert "make test-bmv2 needs the P4 toolchain on PATH, missing: p4c-bm2-ss, simple_switch_grpc, " \
           "simple_switch_CLI" in done.stdout, done.stdout[-2000:]
