"""The configuration of one local A²CiD² run (:func:`host.acid.launch.launch`): the options of
``python -m host.acid train`` as a typed value, for benchmarks and tests that start runs from Python.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from host.acid.constants import TOPOLOGIES
from host.acid.problem import ProblemSpec
from host.acid.train import ALGOS

__all__ = ["ALGOS", "RunConfig"]


@dataclass
class RunConfig:
    """``algo``: ``acid`` (asynchronous gossip with the continuous momentum), ``gossip`` (the same without it,
    AD-PSGD-like) or ``allreduce`` (synchronous SGD, DDP).

    The run trains A²CiD²'s synthetic non-iid task (``problem``, :mod:`host.acid.problem`). ``steps``: gradient
    steps per worker (``budget="worker"``) or the mean per worker of a shared budget of ``steps * world``
    (``budget="total"``: fast workers do more, slow ones fewer). ``rate_com``: expected communications per
    gradient step of each worker. ``step_seconds`` > 0 pads every gradient step to at least that long by sleeping
    (an emulated accelerator, so that several workers can share a small machine). ``log_interval`` > 0: consensus
    samples (see ``host/acid/train.py``). Faults: ``slow`` {rank: extra seconds per step}, ``kill`` {rank: step
    at which it SIGKILLs itself}.
    """

    algo: str = "acid"
    topology: str = "ring"
    world: int = 8
    rate_com: float = 1.0
    steps: int = 200
    budget: str = "worker"
    lr: float = 0.05
    momentum: float = 0.9
    weight_decay: float = 0.0
    problem: ProblemSpec = field(default_factory=ProblemSpec)
    step_seconds: float = 0.0
    exchange_timeout: float = 5.0  # a pairwise exchange fails if the peer does not deliver within this
    dead_after: float = 10.0  # a rank without a heartbeat this long is left out of the final average
    log_interval: float = 0.25  # seconds between consensus samples (0: none)
    backend: str = "gloo"
    exchange_backend: str = "gloo"  # "same": the process group's
    seed: int = 0
    slow: dict[int, float] = field(default_factory=dict)
    kill: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.problem, dict):
            self.problem = ProblemSpec(**self.problem)
        self.slow = {int(k): float(v) for k, v in self.slow.items()}
        self.kill = {int(k): int(v) for k, v in self.kill.items()}
        if self.algo not in ALGOS:
            raise ValueError(f"RunConfig.algo: unknown algorithm {self.algo!r} (known: {', '.join(ALGOS)})")
        if self.topology not in TOPOLOGIES:
            raise ValueError(f"RunConfig.topology: unknown graph {self.topology!r} (known: {', '.join(TOPOLOGIES)})")
        if self.budget not in ("worker", "total"):
            raise ValueError(f"RunConfig.budget must be 'worker' or 'total', got {self.budget!r}")
        if self.world < 2:
            raise ValueError(f"RunConfig.world must be >= 2, got {self.world}")
        if self.algo != "allreduce" and not self.rate_com > 0:
            raise ValueError(f"RunConfig.rate_com must be > 0, got {self.rate_com}")
        if self.step_seconds < 0:
            raise ValueError(f"RunConfig.step_seconds must be >= 0, got {self.step_seconds}")
        if self.steps < 1:
            raise ValueError(f"RunConfig.steps must be >= 1, got {self.steps}")
        for r in (*self.slow, *self.kill):
            if not 0 <= r < self.world:
                raise ValueError(f"RunConfig fault for rank {r}, outside the world of {self.world}")
        if 0 in self.kill:
            raise ValueError("RunConfig.kill: rank 0 hosts the rendezvous store; it cannot be the one killed")

    def train_args(self) -> list[str]:
        """The ``python -m host.acid train`` arguments of this configuration."""
        p = self.problem
        args = ["--algo", self.algo, "--graph", self.topology, "--rate", str(self.rate_com), "--data", "acid",
                "--steps", str(self.steps), "--budget", self.budget, "--lr", str(self.lr),
                "--momentum", str(self.momentum), "--weight-decay", str(self.weight_decay),
                "--hidden", str(p.hidden), "--features", str(p.features), "--classes", str(p.classes),
                "--samples", str(p.samples_per_worker), "--skew", str(p.skew), "--batch", str(p.batch),
                "--step-seconds", str(self.step_seconds), "--exchange-timeout", str(self.exchange_timeout),
                "--dead-after", str(self.dead_after), "--log-interval", str(self.log_interval),
                "--backend", self.backend, "--exchange-backend", self.exchange_backend, "--seed", str(self.seed)]
        if p.seed != self.seed or p.separation != ProblemSpec.separation:
            raise ValueError("RunConfig.problem: its seed is the run's seed and its separation the default "
                             f"(got seed {p.seed} for run seed {self.seed}, separation {p.separation})")
        for r, s in self.slow.items():
            args += ["--slow", f"{r}:{s}"]
        for r, k in self.kill.items():
            args += ["--kill", f"{r}:{k}"]
        return args

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["slow"] = {str(k): v for k, v in self.slow.items()}
        d["kill"] = {str(k): v for k, v in self.kill.items()}
        return d
