"""Per-step times of a testbed run: the one rule that the run's summary and its plots share.

A synchronous training step is as slow as its slowest worker, so a step's time is the largest of the workers'
times for it; the first :data:`WARMUP_STEPS` (connection set-up, first-touch allocations: they measure start-up,
not the network) are left out when the run has more than twice as many steps.
"""

from __future__ import annotations

from typing import Any

__all__ = ["WARMUP_STEPS", "step_times", "measured_range"]

WARMUP_STEPS = 2


def measured_range(workers: list[dict[str, Any]]) -> tuple[int, int]:
    """``(first, end)``: the indexes of the measured steps, every step all workers reached without the warm-up."""
    steps = min(len(w["iterations"]) for w in workers)
    return (WARMUP_STEPS if steps > 2 * WARMUP_STEPS else 0), steps


def step_times(workers: list[dict[str, Any]]) -> list[float]:
    """The slowest worker's ``dt`` for every step all workers reached, without the warm-up steps."""
    first, end = measured_range(workers)
    return [max(w["iterations"][i]["dt"] for w in workers) for i in range(first, end)]
