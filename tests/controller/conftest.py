"""Live ``dlcp-switch`` daemons for the controller tests (real processes, gRPC on 127.0.0.1, port chosen by the
kernel), and helpers to write network files that point at them."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable


@dataclass
class Daemon:
    proc: subprocess.Popen
    address: str
    name: str

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if self.proc.stdout:
            self.proc.stdout.close()


def start_daemon(name: str, *args: str, timeout: float = 60.0, env: dict[str, str] | None = None,
                 address: str = "127.0.0.1:0") -> Daemon:
    """Start ``dlcp-switch`` and wait for its ``listening on HOST:PORT`` line (fail, with its stderr, if it dies).
    ``env`` adds environment variables (test modes); ``address`` a fixed address (a restart on the same port)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", **(env or {}))
    proc = subprocess.Popen([PY, "-m", "switch.daemon", "--grpc-server-addr", address, "--cpu-port", "255",
                             "--log-level", "warn", *args], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + timeout
    line = ""
    while time.monotonic() < deadline:
        r, _, _ = select.select([proc.stdout], [], [], 0.2)
        if r:
            line = proc.stdout.readline()
            if "listening on" in line:
                return Daemon(proc, line.rsplit(" ", 1)[1].strip(), name)
        if proc.poll() is not None:
            break
    proc.kill()
    err = proc.stderr.read() if proc.stderr else ""
    proc.wait(5)
    pytest.fail(f"dlcp-switch {name} did not start: {line!r} {err[-2000:]}")


@pytest.fixture(scope="module")
def daemons():
    """Three switch daemons (s1, s2, s3) for a module; stopped at its end."""
    ds = []
    try:
        for n in ("s1", "s2", "s3"):
            ds.append(start_daemon(n))
        yield {d.name: d for d in ds}
    finally:
        for d in ds:
            d.stop()


def dlcpctl(*args: str, timeout: float = 120.0, input: str | None = None) -> subprocess.CompletedProcess:
    """Run the real ``dlcpctl`` console script's code path in a subprocess (non-interactive stdout)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", COLUMNS="200")
    return subprocess.run([PY, "-m", "controller.cli", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout, input=input)
