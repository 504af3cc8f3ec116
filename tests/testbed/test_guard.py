"""Testbed hardening (issue 35 item 4): a run refuses to start on a taken P4Runtime port or switch interface
instead of programming another run's switch; `dlcp-testbed clean` removes what a killed orchestrator left
(processes by recorded pid and start time, interfaces, namespaces) and never touches a live run."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed.guard import PortTaken, RunRecord, claim, clean, links, live_records, proc_start
from testbed.run import RunError, run_spec
from testbed.spec import load_spec

ROOT = Path(__file__).resolve().parents[2]
STAR2 = ROOT / "examples" / "testbed" / "star2.yaml"

pytestmark = [pytest.mark.netns]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_run_refuses_a_taken_grpc_port(root_required, tmp_path, monkeypatch):
    monkeypatch.setenv("DLCP_TESTBED_STATE", str(tmp_path / "state"))
    stale = socket.socket()
    stale.bind(("127.0.0.1", 0))
    stale.listen()
    port = stale.getsockname()[1]
    try:
        spec = load_spec(STAR2, {"name": "t-taken"})
        with pytest.raises(RunError, match=f"switch s1: its P4Runtime port 127.0.0.1:{port} is taken"):
            run_spec(spec, tmp_path / "out", plots=False, grpc_base_port=port)
    finally:
        stale.close()
    assert list((tmp_path / "state").glob("run-*.json")) == []  # nothing claimed, nothing built
    assert not (tmp_path / "out" / "switches").exists()


def test_claim_refuses_an_existing_interface_and_names_the_live_run(root_required, tmp_path):
    name = f"tg{os.getpid() % 10000}"
    base = tmp_path / "state"
    # a veth pair (this kernel has no dummy interfaces); its peer's name is not a switch interface's
    subprocess.run(["ip", "link", "add", f"{name}-eth1", "type", "veth", "peer", "name", f"{name}p"], check=True)
    other = subprocess.Popen(["sleep", "60"])  # stands for another live orchestrator
    try:
        with pytest.raises(PortTaken, match=f"{name}-eth1 already exists, left by an earlier run"):
            claim([(name, _free_port())], tmp_path, base)
        port = _free_port()
        base.mkdir(exist_ok=True)
        RunRecord(other.pid, proc_start(other.pid), str(tmp_path / "a"), [f"{name}-eth"], [port],
                  path=str(base / f"run-{other.pid}.json")).save()
        with pytest.raises(PortTaken, match=f"held by the testbed run with pid {other.pid}"):
            claim([(name, _free_port())], tmp_path / "b", base)
        # claimed but not built yet (nothing listens, no interface): the record alone holds the port
        with pytest.raises(PortTaken, match=f"127.0.0.1:{port} or interfaces zz9-eth\\* are held by the testbed "
                                            f"run with pid {other.pid}"):
            claim([("zz9", port)], tmp_path / "c", base)
        assert clean(base, strays=False) == []  # a live run's things are left alone
        assert f"{name}-eth1" in links() and len(list(base.glob("run-*.json"))) == 1
    finally:
        other.kill()
        other.wait()
        subprocess.run(["ip", "link", "del", f"{name}-eth1"], capture_output=True)


def test_claim_waits_for_a_live_run_to_finish(root_required, tmp_path):
    """Runs take turns: a claim held by another live run waits for it (here, until that orchestrator exits and its
    record is cleaned as a dead run's), while a claim that may not wait fails at once saying it could wait."""
    base = tmp_path / "state"
    base.mkdir()
    port = _free_port()
    other = subprocess.Popen(["sleep", "3"])
    try:
        RunRecord(other.pid, proc_start(other.pid), str(tmp_path / "a"), ["zz8-eth"], [port],
                  path=str(base / f"run-{other.pid}.json")).save()
        with pytest.raises(PortTaken) as e:
            claim([("zz8", port)], tmp_path / "b", base)
        assert e.value.waitable
        rec = claim([("zz8", port)], tmp_path / "c", base, wait_s=60)
        assert other.poll() is not None and rec.pid == os.getpid() and rec.grpc_ports == [port]
        assert [p.name for p in base.glob("run-*.json")] == [f"run-{os.getpid()}.json"]
        rec.release()
    finally:
        other.kill()
        other.wait()


def test_clean_removes_a_dead_runs_leftovers_and_spares_recycled_pids(root_required, tmp_path):
    base = tmp_path / "state"
    base.mkdir()
    tag = f"tc{os.getpid() % 10000}"
    dead = subprocess.Popen(["true"])
    dead.wait()
    orphan = subprocess.Popen(["sleep", "600"], start_new_session=True)
    subprocess.run(["ip", "netns", "add", f"{tag}ns"], check=True)
    subprocess.run(["ip", "link", "add", f"{tag}-eth3", "type", "veth", "peer", "name", "eth0", "netns", f"{tag}ns"],
                   check=True)
    try:
        rec = RunRecord(dead.pid, 1, str(tmp_path), [f"{tag}-eth"], [_free_port()], namespaces=[f"{tag}ns"],
                        procs=[[orphan.pid, proc_start(orphan.pid), "switch s1"],
                               [os.getpid(), 1, "a pid since reused (start time differs)"]],
                        path=str(base / f"run-{dead.pid}.json"))
        rec.save()
        done = clean(base, strays=False)
        assert orphan.wait(timeout=5) == -signal.SIGKILL
        assert f"{tag}-eth3" not in links()
        assert f"{tag}ns" not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert list(base.glob("run-*.json")) == []
        assert len(done) == 3 and any("switch s1" in d for d in done)
    finally:
        if orphan.poll() is None:
            orphan.kill()
        subprocess.run(["ip", "link", "del", f"{tag}-eth3"], capture_output=True)
        subprocess.run(["ip", "netns", "del", f"{tag}ns"], capture_output=True)


def _pids_of(out_dir: Path) -> list[int]:
    out = subprocess.run(["pgrep", "-f", str(out_dir)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split() if int(p) != os.getpid()]


@pytest.mark.slow
def test_clean_after_a_killed_orchestrator(root_required, tmp_path):
    """SIGKILL the orchestrator mid-run: its switch daemon, workers and host shells live on holding s1's names;
    `dlcp-testbed clean` kills them by their recorded pids, removes the interfaces, and the names are free again."""
    out = tmp_path / "run"
    orch = subprocess.Popen([sys.executable, "-m", "testbed.cli", "run", str(STAR2), "--out", str(out), "--set",
                             "steps=100000", "--set", "eval_every=100000", "--set", "timeout_s=120"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    try:
        deadline = time.monotonic() + 90
        log0 = out / "worker-0.log"
        while time.monotonic() < deadline and not (log0.exists() and "step 3/" in log0.read_text(errors="replace")):
            assert orch.poll() is None, "the run ended before it could be killed"
            time.sleep(0.3)
        record = json.loads(Path(f"/run/dlcp-testbed/run-{orch.pid}.json").read_text())
        orch.kill()
        orch.wait()
        assert any("switch s1" in what for _, _, what in record["procs"])
        assert _pids_of(out), "nothing outlived the orchestrator (the test proves nothing)"
        cp = subprocess.run([sys.executable, "-m", "testbed.cli", "clean"], capture_output=True, text=True, cwd=ROOT)
        assert cp.returncode == 0 and f"of dead run {orch.pid}" in cp.stdout, cp.stdout + cp.stderr
        deadline = time.monotonic() + 10
        while _pids_of(out) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _pids_of(out) == []
        held = any("s1-eth" in r.interfaces for r in live_records())  # another live run's s1 (a concurrent run)
        assert held or not [n for n in links() if n.startswith("s1-eth")]
        assert not Path(f"/run/dlcp-testbed/run-{orch.pid}.json").exists()
    finally:
        if orch.poll() is None:
            orch.kill()
            orch.wait()
        subprocess.run([sys.executable, "-m", "testbed.cli", "clean"], capture_output=True, cwd=ROOT)
