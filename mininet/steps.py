"""Per-step times of a testbed run: the one rule that the run's summary and its plots share.

A synchronous training step is as slow as its slowest worker, so a step's time is the largest of the workers'
times for it; the first :data:`WARMUP_STEPS` (connection set-up, first-touch allocations: they measure start-up,
not the network) are left out when the run has more than twice as many steps.
"""

from __future__ import annotations

from typing import Any

__all__ = ["WARMUP_STEPS", "step_times"]

WARMUP_STEPS = 2


def step_times(workers: list[dict[str, Any]]) -> list[float]:
    """The slowest worker's ``dt`` for every step all workers reached, without the warm-up steps."""
    steps = min(len(w["iterations"]) for w in workers)
    skip = WARMUP_STEPS if steps > 2 * WARMUP_STEPS else 0
    return [max(w["iterations"][i]["dt"] for w in workers) for i in range(skip, steps)]
