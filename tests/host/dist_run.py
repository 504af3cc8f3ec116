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


def spawn(module: str, scenario: str, size: int, *, env: dict | None = None,
          args: list[str] | None = None, net=None) -> list[subprocess.Popen]:
    """Start ``python -m module scenario`` as ``size`` ranks of one job (their own rendezvous port) and return the
    processes at once (rank order). The dlcp transport keeps its defaults (each rank binds a free port and
    publishes it, so jobs on this host never collide) unless ``env`` sets ``DLCP_PORT``/``DLCP_ADDR``; a
    ``DLCP_*`` variable of the calling process is not passed on unless ``env`` names it. With ``net`` (a
    ``testbed.netns.Star`` of at least ``size`` hosts) rank r runs in host r's namespace and the rendezvous is at
    host 0's address (there the transport binds the well-known DLCP port)."""
    if net is not None and len(net.hosts) < size:
        raise ValueError(f"spawn: {size} ranks need {size} hosts, the network has {len(net.hosts)}")
    port = free_port()
    master = net.hosts[0].ip if net is not None else "127.0.0.1"
    base = {k: v for k, v in os.environ.items() if k not in ("DLCP_PORT", "DLCP_ADDR")}
    procs = []
    for r in range(size):
        e = {**base, "MASTER_ADDR": master, "MASTER_PORT": str(port), "RANK": str(r),
             "WORLD_SIZE": str(size), "LOCAL_RANK": str(r), "OMP_NUM_THREADS": "1", **(env or {})}
        argv = [sys.executable, "-m", module, scenario, *(args or [])]
        procs.append(subprocess.Popen(net.cmd(r, argv) if net is not None else argv, cwd=ROOT, env=e,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    return procs


def launch(module: str, scenario: str, size: int, *, timeout: float = 120, env: dict | None = None,
           args: list[str] | None = None) -> list[subprocess.CompletedProcess]:
    """Run ``python -m module scenario`` as ``size`` ranks (:func:`spawn`); returns the finished processes (rank
    order)."""
    return finish(spawn(module, scenario, size, env=env, args=args), timeout)


def finish(procs: list[subprocess.Popen], timeout: float) -> list[subprocess.CompletedProcess]:
    """Wait for a job's processes (all killed once one runs past ``timeout``); the finished processes."""
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
