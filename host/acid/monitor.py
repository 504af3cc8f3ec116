"""The consensus distance of a set of workers' parameters (``host.acid.train`` logs it over time)."""

from __future__ import annotations

import numpy as np

__all__ = ["consensus_distance"]


def consensus_distance(xs: np.ndarray) -> float:
    """``(1/n) sum_i ||x_i - mean||^2`` of the rows of ``xs``."""
    xs = np.asarray(xs, dtype=np.float64)
    return float(((xs - xs.mean(axis=0)) ** 2).sum(axis=1).mean())
