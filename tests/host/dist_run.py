"""Launch N real processes running a scenario function, with torchrun's environment (env:// rendezvous)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(module: str, scenario: str, size: int, *, timeout: float = 120, env: dict | None = None,
           args: list[str] | None = None) -> list[subprocess.CompletedProcess]:
    """Run ``python -m module scenario`` as ``size`` ranks; returns the finished processes (rank order)."""
    port = free_port()
    procs = []
    for r in range(size):
        e = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(r),
             "WORLD_SIZE": str(size), "LOCAL_RANK": str(r), "OMP_NUM_THREADS": "1", **(env or {})}
        procs.append(subprocess.Popen([sys.executable, "-m", module, scenario, *(args or [])], cwd=ROOT, env=e,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    done = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            out, err = p.communicate()
            err += f"\n[killed after {timeout}s]"
        done.append(subprocess.CompletedProcess(p.args, p.returncode, out, err))
    return done


def check(done: list[subprocess.CompletedProcess]) -> list[str]:
    """Assert every rank exited 0 (showing the failing ranks' stderr) and return their stdouts."""
    bad = [(r, d) for r, d in enumerate(done) if d.returncode != 0]
    assert not bad, "\n".join(f"--- rank {r} exit {d.returncode}\n{d.stderr[-3000:]}" for r, d in bad)
    return [d.stdout for d in done]
