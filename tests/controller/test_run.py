"""``dlcpctl run`` against a live ``dlcp-switch``: applies at start, follows file changes, reports and corrects
drift, re-programs a restarted switch as soon as it listens again, exits cleanly on SIGTERM; and ``watch``
keeps one connection per switch."""

from __future__ import annotations

import os
import re
import select
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import finsy as fy
import pytest

from controller import Network, state
from switch.daemon.mgmt import MgmtClient

from .conftest import PY, ROOT, dlcpctl, start_daemon
from .test_live import finsy_read

pytestmark = pytest.mark.slow

NET = """\
connect_timeout: 10
switches:
  s1: {{address: {address}}}
hosts:
  h1: {{ip: 10.0.0.1, mac: "00:00:0a:00:00:01", attach: s1:1}}
  h2: {{ip: 10.0.0.2, mac: "00:00:0a:00:00:02", attach: s1:2}}
thresholds:
  - {{drop: 40}}
"""


def free_address() -> str:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"127.0.0.1:{port}"


class Output:
    """Lines of a running process's stdout, read as they come (from the raw pipe: a buffered reader would hold
    lines back from select)."""

    def __init__(self, proc: subprocess.Popen):
        self.proc = proc
        self.lines: list[str] = []
        self._pending = b""
        self._next = 0

    def wait_for(self, pattern: str, timeout: float = 30.0) -> str:
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while True:
            while self._next < len(self.lines):
                line = self.lines[self._next]
                self._next += 1
                if rx.search(line):
                    return line
            if time.monotonic() >= deadline:
                break
            r, _, _ = select.select([fd], [], [], 0.1)
            if r:
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                self._pending += chunk
                *done, self._pending = self._pending.split(b"\n")
                self.lines += [ln.decode() + "\n" for ln in done]
        pytest.fail(f"no line matching {pattern!r} within {timeout} s; output so far:\n{''.join(self.lines)}")


def programmed(address: str) -> bool:
    """The switch holds the file's routes and thresholds (read with finsy, independently of the controller)."""
    try:
        lpm = finsy_read(address, fy.P4TableEntry("ipv4_lpm"))
        regs = finsy_read(address, fy.P4RegisterEntry("drop_threshold", index=state.slot(2, 0)))
    except Exception:  # noqa: BLE001 - no pipeline yet, or not listening: not programmed
        return False
    return len(lpm) == 2 and regs[0].data == 40


def test_run_follows_file_drift_and_restarts(tmp_path: Path) -> None:
    address = free_address()
    path = tmp_path / "net.yaml"
    path.write_text(NET.format(address=address))
    d = start_daemon("s1", address=address)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.Popen([PY, "-m", "controller.cli", "run", str(path), "--drift-interval", "0.5", "--poll",
                             "0.2"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=(tmp_path / "stderr.txt").open("w"))
    out = Output(proc)
    try:
        out.wait_for(r"s1: applied: pipeline pushed, \d+ inserts.*\(connected\)")
        assert programmed(address)

        # an imperative write takes the primary role for a moment; when it is back, run undoes the change
        r = dlcpctl("-n", str(path), "set", "threshold", "--port", "2", "--priority", "0", "--drop", "9")
        assert r.returncode == 0, r.stderr
        out.wait_for(r"s1: applied: 0 inserts, 1 modifies, 0 deletes \(session ready again\)")
        assert programmed(address)
        # drift outside P4Runtime (the management service): found by the periodic check, reported, corrected
        r = dlcpctl("-n", str(path), "set", "queue", "--port", "2", "--priority", "1", "--depth", "17")
        assert r.returncode == 0, r.stderr
        out.wait_for(r"s1: drift from the network file \(1 differences\)")
        out.wait_for(r"s1: tm queue 2/1: depth=64")
        out.wait_for(r"s1: applied: 0 inserts, 0 modifies, 0 deletes, 1 traffic-manager changes \(drift\)")
        with MgmtClient(address) as m:
            assert m.stats().ports[2].queues[1].capacity == 64

        # the file changes: applied; an invalid file is reported and the last valid one stays
        path.write_text(NET.format(address=address) + "  - {switch: s1, port: 1, priority: 3, mark: 5}\n")
        out.wait_for(r"s1: applied: 0 inserts, 1 modifies, 0 deletes \(file changed\)")
        mark = finsy_read(address, fy.P4RegisterEntry("mark_threshold", index=state.slot(1, 3)))
        assert mark[0].data == 5
        path.write_text(NET.format(address=address) + "  - {switch: s1, port: 1, priority: 3, mark: -5}\n")
        out.wait_for(r"invalid network file, keeping the previous one: .*thresholds\[1\]\.mark")

        # the switch restarts (empty): re-programmed as soon as it listens again
        d.stop()
        out.wait_for(r"s1: session to .* lost; reconnecting")
        d = start_daemon("s1", address=address)
        listening = time.monotonic()
        while not programmed(address):
            assert time.monotonic() - listening < 10, "not re-programmed"
            time.sleep(0.02)
        took = time.monotonic() - listening
        out.wait_for(r"s1: applied: pipeline pushed.*\(connected\)")
        # the runner retries every 0.1 s (about 0.2-0.3 s measured on an idle machine); finsy's own reconnect loop
        # would take 10-15 s (gRPC backoff, 10 s wait after a short session), so 5 s still tells the two apart
        # while leaving room for a loaded machine
        assert took < 5.0, f"re-programmed {took:.2f} s after the switch listened again: {''.join(out.lines)}"

        proc.send_signal(signal.SIGTERM)
        out.wait_for(r"stopped$")
        assert proc.wait(15) == 0, (tmp_path / "stderr.txt").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
        d.stop()


def test_watch_keeps_one_connection_per_switch(tmp_path: Path) -> None:
    d = start_daemon("s1")
    try:
        path = tmp_path / "net.yaml"
        path.write_text(NET.format(address=d.address))
        r = dlcpctl("apply", str(path))
        assert r.returncode == 0, r.stderr
        env = dict(os.environ, OMP_NUM_THREADS="1", COLUMNS="200")
        proc = subprocess.Popen([PY, "-m", "controller.cli", "-n", str(path), "watch", "--frames", "8",
                                 "--interval", "0.25"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        port = d.address.rsplit(":", 1)[1]
        seen: list[set[str]] = []
        try:
            while proc.poll() is None:
                ss = subprocess.run(["ss", "-Htnp", "state", "established", "dport", f"= :{port}"],
                                    capture_output=True, text=True, timeout=10).stdout
                conns = {ln.split()[2] for ln in ss.splitlines() if f"pid={proc.pid}," in ln}
                if conns:
                    seen.append(conns)
                time.sleep(0.1)
            assert proc.returncode == 0, proc.stderr.read()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(5)
        assert len(seen) >= 5, seen
        # the same connections throughout (P4Runtime, and the management channel from its first use), never a
        # new one per frame: eight frames on sessions per frame would show up to 16
        assert len(set().union(*seen)) <= 2 and seen[-1] == set().union(*seen), seen
    finally:
        d.stop()


def test_apply_waits_for_a_switch_that_is_starting(tmp_path: Path) -> None:
    """Within connect_timeout, a switch that refuses connections (not listening yet) is retried, not failed."""
    address = free_address()
    path = tmp_path / "net.yaml"
    path.write_text(NET.format(address=address))
    result: list = []
    t = threading.Thread(target=lambda: result.append(Network.from_file(path).apply(check=False)))
    t.start()
    d = None
    try:
        time.sleep(1.5)  # compiled and refused by now: a controller that does not wait has failed already
        assert t.is_alive() and not result, result
        d = start_daemon("s1", address=address)
        t.join(30)
        assert result and not result[0].errors, result
        assert result[0].switches["s1"].pipeline_pushed and programmed(address)
    finally:
        t.join(30)
        if d is not None:
            d.stop()
