"""One worker's A²CiD² state, used by the library (:mod:`host.acid.library`): x, x~, the lock that serialises the
gradient and communication updates, and the clock of the continuous mixing, in units of the running mean
gradient-step time (:class:`StepTimer`)."""

from __future__ import annotations

import threading
import time
from typing import Callable

import torch

from host.acid.mixing import communication_update_, gradient_update_, mix_

__all__ = ["StepTimer", "AcidState"]


class StepTimer:
    """Running mean of the gradient-step time (exponential moving average): the run's unit of time."""

    def __init__(self, smoothing: float = 0.05):
        self.smoothing = smoothing
        self.mean: float | None = None
        self.count = 0

    def add(self, seconds: float) -> None:
        self.count += 1
        self.mean = seconds if self.mean is None else self.mean + self.smoothing * (seconds - self.mean)


class AcidState:
    """x, x~ (A²CiD² only), the lock that serialises updates, and the continuous-time clock of the mixing.

    ``clock``: the time source in seconds (``time.monotonic``; tests script it to make runs deterministic)."""

    def __init__(self, x: torch.Tensor, *, eta: float, alpha_tilde: float, momentum: bool, timer: StepTimer,
                 clock: Callable[[], float] = time.monotonic):
        self.x = x
        self.xt = x.clone() if momentum else None
        self.eta, self.alpha_tilde = (eta, alpha_tilde) if momentum else (0.0, 0.0)
        self.timer = timer
        self.clock = clock
        self.lock = threading.Lock()
        self.t_last = clock()

    def start_clock(self) -> None:
        with self.lock:
            self.t_last = self.clock()

    def _mix_to_now(self) -> None:
        now = self.clock()
        if self.xt is not None and self.timer.mean:
            mix_(self.x, self.xt, self.eta, max(0.0, now - self.t_last) / self.timer.mean)
        self.t_last = now

    def read_into(self, out: torch.Tensor) -> None:
        with self.lock:
            out.copy_(self.x)

    def snapshot(self, mix: bool = True) -> torch.Tensor:
        with self.lock:
            if mix:
                self._mix_to_now()
            return self.x.clone()

    def apply_gradient(self, delta: torch.Tensor) -> None:
        with self.lock:
            self._mix_to_now()
            gradient_update_(self.x, self.xt, delta)

    def apply_communication(self, x_sent: torch.Tensor, x_peer: torch.Tensor) -> None:
        with self.lock:
            self._mix_to_now()
            communication_update_(self.x, self.xt, x_sent, x_peer, self.alpha_tilde)
