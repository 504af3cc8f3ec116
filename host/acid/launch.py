"""``python -m host.acid run``: a whole A²CiD² job on this machine, as ``torchrun`` would start it.

:func:`launch_local` starts ``world`` processes of ``python -m host.acid train`` with torchrun's environment
(``MASTER_ADDR=127.0.0.1``, a free ``MASTER_PORT``, ``RANK``, ``WORLD_SIZE``): they form one process group (rank
0 hosts the rendezvous store, on which the library pairs workers) and train with :class:`host.acid.library.Acid`.
There is no service of our own: the launcher only starts the ranks, waits for them (killing them all at the
timeout) and reads rank 0's record, to which it adds every rank's exit status. Worker logs go to
``<log_dir>/rank<r>.log``. :func:`launch` does the same from a :class:`~host.acid.config.RunConfig`.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from host.acid.config import RunConfig

__all__ = ["launch", "launch_local", "worker_log_tails"]

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_local(world: int, train_args: list[str], *, log_dir: str | os.PathLike | None = None,
                 timeout: float = 600.0) -> dict[str, Any]:
    """Run ``python -m host.acid train *train_args`` as ``world`` local ranks; returns rank 0's record plus
    ``exitcodes`` {rank: status}, ``killed_by_launcher`` (ranks still running at ``timeout``), ``wall_seconds``,
    ``log_dir`` and ``error`` (None when every rank that was not told to die exited 0 and rank 0 wrote its
    record)."""
    if world < 2:
        raise ValueError(f"A²CiD² needs at least 2 workers, got {world}")
    if "--out" in train_args:
        raise ValueError("launch_local writes rank 0's record itself: leave --out out of train_args")
    log_dir = Path(log_dir or tempfile.mkdtemp(prefix="acid-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    record = log_dir / "record.json"
    record.unlink(missing_ok=True)
    port = _free_port()
    procs, logs = [], []
    t0 = time.monotonic()
    for r in range(world):
        env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(r),
               "WORLD_SIZE": str(world), "LOCAL_RANK": str(r), "LOCAL_WORLD_SIZE": str(world),
               "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), "PYTHONUNBUFFERED": "1"}
        log = open(log_dir / f"rank{r}.log", "w")
        logs.append(log)
        procs.append(subprocess.Popen([sys.executable, "-m", "host.acid", "train", *train_args, "--out", str(record)],
                                      cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT))
    deadline = t0 + timeout
    killed = []
    for r, p in enumerate(procs):
        try:
            p.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            killed.append(r)
    for r in killed:
        procs[r].kill()
        procs[r].wait()
    for log in logs:
        log.close()
    out: dict[str, Any] = json.loads(record.read_text()) if record.exists() else {}
    out.update({"exitcodes": {r: p.returncode for r, p in enumerate(procs)}, "killed_by_launcher": killed,
                "wall_seconds": time.monotonic() - t0, "log_dir": str(log_dir)})
    failed = [r for r, code in out["exitcodes"].items() if code != 0 and r not in out.get("dropped", [])]
    if killed:
        out["error"] = f"ranks {killed} did not finish within {timeout:.0f}s (killed)"
    elif failed:
        out["error"] = f"ranks {failed} failed (exit status {[out['exitcodes'][r] for r in failed]})"
    elif not record.exists():
        out["error"] = "rank 0 wrote no record"
    else:
        out["error"] = None
    return out


def launch(cfg: RunConfig, *, log_dir: str | os.PathLike | None = None, timeout: float = 600.0) -> dict[str, Any]:
    """Run ``cfg`` as ``cfg.world`` local ranks (see :func:`launch_local`); the record carries ``config``."""
    out = launch_local(cfg.world, cfg.train_args(), log_dir=log_dir, timeout=timeout)
    out["config"] = cfg.to_dict()
    return out


def worker_log_tails(result: dict[str, Any], chars: int = 3000) -> str:
    """The end of every worker's log (for error messages)."""
    parts = []
    for p in sorted(Path(result["log_dir"]).glob("rank*.log")):
        parts.append(f"--- {p.name}\n{p.read_text(errors='replace')[-chars:]}")
    return "\n".join(parts)
