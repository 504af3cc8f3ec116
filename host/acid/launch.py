"""Run a whole A²CiD² job on this machine: the pairing service in this process, the workers as processes.

Workers are forked from a ``forkserver`` that imported torch once (``host.acid.worker`` is preloaded), so eight
workers do not pay eight torch imports. Each rank's DLCP endpoint binds its own address in a random
``127.a.b.0/24`` (all of 127/8 is local), so every rank keeps the well-known DLCP port and concurrent runs do not
collide. Worker logs go to ``<log_dir>/rank<r>.log``.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from host import wire
from host.acid.config import RunConfig
from host.acid.constants import acid_constants
from host.acid.monitor import Monitor
from host.acid.pairing import PairingService
from host.acid.problem import FlatModel, build_model, make_full

__all__ = ["launch", "loopback_addresses", "make_evaluator", "worker_log_tails"]

log = logging.getLogger("host.acid.launch")


def loopback_addresses(world: int, port: int = wire.UDP_PORT, rng: random.Random | None = None
                       ) -> dict[int, tuple[str, int]]:
    rng = rng or random.SystemRandom()
    a, b = rng.randrange(1, 255), rng.randrange(1, 255)
    if world > 253:
        raise ValueError("at most 253 local workers (one 127.a.b.0/24)")
    return {r: (f"127.{a}.{b}.{r + 1}", port) for r in range(world)}


def make_evaluator(cfg: RunConfig) -> Callable[[np.ndarray], dict[str, float]]:
    """Loss and accuracy of flat parameters on the whole training set (the union of the workers' shards)."""
    X, y = make_full(cfg.problem, cfg.world)
    flat = FlatModel(build_model(cfg.problem, seed=0))

    def evaluate(x: np.ndarray) -> dict[str, float]:
        loss, acc = flat.loss_of(torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)), X, y)
        return {"loss": loss, "acc": acc}

    return evaluate


def _child(rank: int, coordinator: tuple[str, int], udp_addr: tuple[str, int], log_path: str) -> None:
    from host.acid.worker import run_worker
    sys.exit(run_worker(rank, coordinator, udp_addr, log_path=log_path))


def launch(cfg: RunConfig, *, log_dir: str | os.PathLike | None = None, evaluate: bool = True,
           timeout: float | None = None, bind_host: str = "127.0.0.1") -> dict[str, Any]:
    """Run ``cfg`` with ``cfg.world`` local worker processes; returns the run's record (see ``docs/acid.md``)."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    log_dir = Path(log_dir or tempfile.mkdtemp(prefix="acid-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    evaluator = make_evaluator(cfg) if evaluate else None
    monitor = Monitor(cfg.world, evaluator)
    svc = PairingService(cfg, (bind_host, 0), monitor)
    amap = loopback_addresses(cfg.world)
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["host.acid.worker"])
    procs = [ctx.Process(target=_child, args=(r, svc.address, amap[r], str(log_dir / f"rank{r}.log")),
                         name=f"acid-rank{r}") for r in range(cfg.world)]
    t0 = time.monotonic()
    for p in procs:
        p.start()
    limit = timeout if timeout is not None else (
        cfg.join_timeout + cfg.max_seconds + 3 * cfg.collective_timeout + 30)
    finished = svc.wait(limit)
    deadline = time.monotonic() + 30
    for p in procs:
        p.join(max(0.1, deadline - time.monotonic()))
    killed = []
    for r, p in enumerate(procs):
        if p.is_alive():
            killed.append(r)
            p.kill()
            p.join()
    wall = time.monotonic() - t0
    monitor.flush()
    res = svc.result()
    final_x = svc.final_model()
    svc.close()
    if not finished:
        res["error"] = res["error"] or f"the run did not finish within {limit}s"
    out: dict[str, Any] = {
        "config": cfg.to_dict(), "wall_seconds": wall, **res, "series": monitor.series,
        "exitcodes": {r: p.exitcode for r, p in enumerate(procs)}, "killed_by_launcher": killed,
        "log_dir": str(log_dir),
    }
    if cfg.algo == "acid":
        k = acid_constants(cfg.topology, cfg.world, cfg.rate_com)
        out["constants"] = {"eta": k.eta, "alpha_tilde": k.alpha_tilde, "chi1": k.chi1, "chi2": k.chi2}
    out["steps"] = sum(r.get("steps", 0) for r in res["reports"].values())
    out["comms"] = sum(r.get("comms", 0) for r in res["reports"].values())
    out["final"] = evaluator(final_x) if final_x is not None and evaluator is not None else None
    return out


def worker_log_tails(result: dict[str, Any], chars: int = 3000) -> str:
    """The end of every worker's log (for error messages)."""
    parts = []
    for p in sorted(Path(result["log_dir"]).glob("rank*.log")):
        parts.append(f"--- {p.name}\n{p.read_text()[-chars:]}")
    return "\n".join(parts)

