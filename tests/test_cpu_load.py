"""``pytest --cpu-load N`` (``tests/cpu_load.py``, ``make test-loaded``): the busy processes run beside the tests,
one per core and per N, and none outlives the pytest process that started them, even a killed one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.cpu_load import cores

ROOT = Path(__file__).resolve().parents[1]

# The inner test: lists its pytest process's busy children (the spin loop's source names prctl) and how much CPU
# each used over half a second, writes them to the file named by BUSY_OUT, then sleeps as long as SLEEP says.
_INNER = '''
import json, os, time

def _busy():
    kids = []
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == os.getpid() and b"prctl" in cmd:
            kids.append(int(pid))
    return kids

def _ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime

def test_inner():
    kids = _busy()
    before = {p: _ticks(p) for p in kids}
    time.sleep(0.5)
    used = {p: _ticks(p) - before[p] for p in kids}
    with open(os.environ["BUSY_OUT"] + ".tmp", "w") as f:
        json.dump({"pids": kids, "ticks": list(used.values())}, f)
    os.rename(os.environ["BUSY_OUT"] + ".tmp", os.environ["BUSY_OUT"])
    time.sleep(float(os.environ.get("SLEEP", "0")))
'''


def _inner(tmp_path: Path, per_core: int, sleep: float = 0.0) -> tuple[subprocess.Popen, Path]:
    test = tmp_path / "test_inner.py"
    test.write_text(_INNER)
    out = tmp_path / "busy.json"
    env = {**os.environ, "BUSY_OUT": str(out), "SLEEP": str(sleep)}
    p = subprocess.Popen([sys.executable, "-m", "pytest", "-p", "tests.conftest", "-q", "-p", "no:cacheprovider",
                          "--rootdir", str(tmp_path), f"--cpu-load={per_core}", str(test)], cwd=ROOT, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return p, out


def _gone(pids: list[int], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(os.path.exists(f"/proc/{p}") and _state(p) != "Z" for p in pids):
            return True
        time.sleep(0.05)
    return False


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def test_busy_processes_run_beside_the_tests_and_end_with_the_session(tmp_path):
    p, out = _inner(tmp_path, 2)
    text = p.communicate(timeout=120)[0]
    assert p.returncode == 0, text
    busy = json.loads(out.read_text())
    assert len(busy["pids"]) == 2 * cores(), busy
    assert all(t > 0 for t in busy["ticks"]), busy  # each one spent CPU while the test ran
    assert _gone(busy["pids"]), busy


def test_header_names_the_load(tmp_path):
    test = tmp_path / "test_inner.py"
    test.write_text("def test_nothing():\n    pass\n")
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider",
                           "--rootdir", str(tmp_path), "--cpu-load=1", str(test)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"cpu load: {cores()} busy processes beside the tests (1 per core, {cores()} cores)" in done.stdout


def test_a_killed_run_leaves_no_busy_process(tmp_path):
    p, out = _inner(tmp_path, 1, sleep=60)
    deadline = time.monotonic() + 60
    while not out.exists():
        assert time.monotonic() < deadline and p.poll() is None, p.stdout.read() if p.poll() is not None else "slow"
        time.sleep(0.05)
    busy = json.loads(out.read_text())
    assert len(busy["pids"]) == cores(), busy
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert _gone(busy["pids"]), busy  # PR_SET_PDEATHSIG: they die with the pytest process


def test_a_negative_count_is_refused(tmp_path):
    test = tmp_path / "test_inner.py"
    test.write_text("def test_nothing():\n    pass\n")
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider",
                           "--rootdir", str(tmp_path), "--cpu-load=-1", str(test)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode != 0
    assert "--cpu-load must be a count of busy processes per core" in done.stdout + done.stderr
