"""Bayesian optimisation of the fusion buffer size (ask/tell, one process; the wrapper runs it on rank 0).

The objective is the measured iteration time as a function of ``x = log2(threshold bytes)`` over ``[lo, hi]``.
Surrogate: a Gaussian process (scikit-learn's ``GaussianProcessRegressor``, Matern 5/2 kernel plus a white-noise
term, since iteration times are noisy), acquisition: expected improvement over a dense grid. Many thresholds give
the same fusion plan, so :meth:`BayesTuner.ask` takes a ``plan_key`` function and never proposes a point whose
plan was already measured; it returns ``None`` once every plan on the grid has been tried.

The first ``n_init`` points are the caller's ``x0`` (the cost model's choice) followed by evenly spread points,
then the GP takes over. :meth:`best` is the measured point with the lowest time.
"""

from __future__ import annotations

import math
import warnings
from typing import Callable, Hashable

import numpy as np

__all__ = ["BayesTuner"]


class BayesTuner:
    def __init__(self, lo: float, hi: float, *, n_init: int = 3, x0: float | None = None, grid: int = 256,
                 seed: int = 0, xi: float = 0.01):
        if not hi >= lo:
            raise ValueError(f"tuner bounds need lo <= hi, got [{lo}, {hi}]")
        self.lo, self.hi = float(lo), float(hi)
        self.n_init = max(1, n_init)
        self.xi = xi
        self.grid = np.linspace(self.lo, self.hi, max(2, grid))
        self._rng = np.random.default_rng(seed)
        init = [] if x0 is None else [min(max(float(x0), self.lo), self.hi)]
        spread = np.linspace(self.lo, self.hi, self.n_init + 1)
        init += [float(v) for v in spread]
        self._init = init
        self.xs: list[float] = []
        self.ys: list[float] = []
        self.keys: list[Hashable] = []

    def state_dict(self) -> dict:
        """Everything :meth:`ask` depends on (bounds, observations, pending initial points, the random state)."""
        return {"lo": self.lo, "hi": self.hi, "n_init": self.n_init, "xi": self.xi, "grid": len(self.grid),
                "init": list(self._init), "xs": list(self.xs), "ys": list(self.ys), "keys": list(self.keys),
                "rng": self._rng.bit_generator.state}

    def load_state_dict(self, state: dict) -> None:
        self.lo, self.hi, self.n_init, self.xi = float(state["lo"]), float(state["hi"]), int(state["n_init"]), \
            float(state["xi"])
        self.grid = np.linspace(self.lo, self.hi, max(2, int(state["grid"])))
        self._init = [float(v) for v in state["init"]]
        self.xs, self.ys = [float(v) for v in state["xs"]], [float(v) for v in state["ys"]]
        self.keys = [tuple(k) if isinstance(k, list) else k for k in state["keys"]]
        self._rng.bit_generator.state = state["rng"]

    def tell(self, x: float, y: float, key: Hashable = None) -> None:
        if not math.isfinite(y):
            raise ValueError(f"objective must be finite, got {y}")
        self.xs.append(float(x))
        self.ys.append(float(y))
        self.keys.append(key)

    def best(self) -> tuple[float, float]:
        """(x, y) of the lowest measured objective."""
        if not self.ys:
            raise ValueError("no observation yet")
        i = int(np.argmin(self.ys))
        return self.xs[i], self.ys[i]

    def ask(self, plan_key: Callable[[float], Hashable] = lambda x: x) -> float | None:
        """The next point to measure, or None when every distinct plan has been measured."""
        tried = {k for k in self.keys if k is not None} | {plan_key(x) for x in self.xs}
        while len(self.xs) < self.n_init and self._init:
            x = self._init.pop(0)
            if plan_key(x) not in tried:
                return x
        free = [x for x in self.grid if plan_key(float(x)) not in tried]
        if not free:
            return None
        if len(self.xs) < 2:
            return float(free[len(free) // 2])
        ei = self._expected_improvement(np.array(free))
        return float(free[int(np.argmax(ei))])

    def _expected_improvement(self, cand: np.ndarray) -> np.ndarray:
        from scipy.stats import norm
        from sklearn.gaussian_process import GaussianProcessRegressor
        from sklearn.gaussian_process.kernels import ConstantKernel, Matern, WhiteKernel

        span = max(self.hi - self.lo, 1e-9)
        X = ((np.array(self.xs) - self.lo) / span).reshape(-1, 1)
        y = np.array(self.ys)
        kernel = ConstantKernel(1.0, (1e-3, 1e3)) * Matern(length_scale=0.3, length_scale_bounds=(0.05, 10.0),
                                                           nu=2.5) + WhiteKernel(0.05, (1e-6, 1.0))
        gp = GaussianProcessRegressor(kernel=kernel, normalize_y=True, n_restarts_optimizer=1,
                                      random_state=int(self._rng.integers(1 << 31)))
        with warnings.catch_warnings():  # few noisy points: hyperparameters at their bounds are expected
            warnings.simplefilter("ignore")
            gp.fit(X, y)
        mu, sigma = gp.predict(((cand - self.lo) / span).reshape(-1, 1), return_std=True)
        best = y.min()
        sigma = np.maximum(sigma, 1e-12)
        z = (best - mu - self.xi * abs(best)) / sigma
        return (best - mu - self.xi * abs(best)) * norm.cdf(z) + sigma * norm.pdf(z)
