"""Consensus distance and loss over time, from the snapshots of x the workers send every ``log_interval``.

Worker ``i`` sends its x at its local ticks ``k = 1, 2, ...`` (``k * log_interval`` seconds after it started
training). Tick ``k`` is complete once every live worker has sent tick ``k`` or a later one; the monitor then logs

* ``consensus``: ``(1/n) sum_i ||x_i - xbar||^2`` over the workers that sent tick ``k`` (``xbar`` their mean),
* ``loss``/``acc`` of ``xbar`` on the whole training set (if an evaluator was given),
* ``local_loss``: the mean of the workers' minibatch losses since their previous tick,
* ``steps``/``comms``: gradient steps and communications made so far by all of them.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable

import numpy as np

__all__ = ["Monitor", "consensus_distance"]

log = logging.getLogger("host.acid.monitor")


def consensus_distance(xs: np.ndarray) -> float:
    """``(1/n) sum_i ||x_i - mean||^2`` of the rows of ``xs``."""
    xs = np.asarray(xs, dtype=np.float64)
    return float(((xs - xs.mean(axis=0)) ** 2).sum(axis=1).mean())


class Monitor:
    def __init__(self, world: int, evaluator: Callable[[np.ndarray], dict[str, float]] | None = None):
        self.world = world
        self.evaluator = evaluator
        self.series: list[dict[str, Any]] = []
        self._pending: dict[int, dict[int, tuple[float, np.ndarray, dict[str, Any]]]] = {}
        self._latest: dict[int, int] = {}
        self._lock = threading.Lock()

    def add(self, rank: int, tick: int, t: float, x: np.ndarray, info: dict[str, Any], alive: set[int]) -> None:
        with self._lock:
            self._pending.setdefault(tick, {})[rank] = (t, x, info)
            self._latest[rank] = max(tick, self._latest.get(rank, 0))
            known = [self._latest.get(r, 0) for r in alive]
            upto = min(known) if known else tick
            for k in sorted(k for k in self._pending if k <= upto):
                self._finalize(k)

    def flush(self) -> None:
        """Log whatever ticks are still incomplete (end of the run)."""
        with self._lock:
            for k in sorted(self._pending):
                self._finalize(k)

    def _finalize(self, k: int) -> None:
        snaps = self._pending.pop(k)
        ranks = sorted(snaps)
        xs = np.stack([snaps[r][1] for r in ranks])
        rec: dict[str, Any] = {
            "tick": k, "t": float(np.mean([snaps[r][0] for r in ranks])), "workers": len(ranks),
            "consensus": consensus_distance(xs),
            "steps": int(sum(snaps[r][2].get("steps", 0) for r in ranks)),
            "comms": int(sum(snaps[r][2].get("comms", 0) for r in ranks)),
        }
        losses = [snaps[r][2]["loss"] for r in ranks if snaps[r][2].get("loss") is not None]
        rec["local_loss"] = float(np.mean(losses)) if losses else None
        if self.evaluator is not None:
            rec.update(self.evaluator(xs.mean(axis=0)))
        self.series.append(rec)
        log.info("t=%.2fs workers=%d steps=%d comms=%d consensus=%.3e loss(avg)=%s", rec["t"], rec["workers"],
                 rec["steps"], rec["comms"], rec["consensus"],
                 f"{rec['loss']:.4f}" if rec.get("loss") is not None else "-")
