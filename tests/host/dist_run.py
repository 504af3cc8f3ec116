"""Launch N real processes running a scenario function, with torchrun's environment (env:// rendezvous)."""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
from pathlib import Path
from typing import Sequence

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_udp_port(addrs: Sequence[str]) -> int:
    """A UDP port free on every address of ``addrs`` (the loopback addresses dlcp ranks bind, 127.0.0.<rank+1>),
    so a launched job's transport does not meet another job's on the well-known port (several test runs share
    this machine). Drawn at random: two runs asking at once rarely draw the same one."""
    for _ in range(100):
        port = random.randrange(20000, 40000)
        socks = []
        try:
            for a in addrs:
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                socks.append(s)
                s.bind((a, port))
            return port
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError(f"no UDP port free on all of {list(addrs)}")


def launch(module: str, scenario: str, size: int, *, timeout: float = 120, env: dict | None = None,
           args: list[str] | None = None) -> list[subprocess.CompletedProcess]:
    """Run ``python -m module scenario`` as ``size`` ranks; returns the finished processes (rank order). The
    dlcp transport gets a free UDP port (``DLCP_PORT``) unless ``env`` names one."""
    port = free_port()
    dlcp_port = str(free_udp_port([f"127.0.0.{r + 1}" for r in range(size)]))
    procs = []
    for r in range(size):
        e = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(r),
             "WORLD_SIZE": str(size), "LOCAL_RANK": str(r), "OMP_NUM_THREADS": "1", "DLCP_PORT": dlcp_port,
             **(env or {})}
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
