"""The configuration of one A²CiD² run, shared by the pairing service and every worker (sent in the start message).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from host.acid.constants import TOPOLOGIES
from host.acid.problem import ProblemSpec

__all__ = ["ALGOS", "RunConfig"]

ALGOS = ("acid", "gossip", "allreduce")


@dataclass
class RunConfig:
    """``algo``: ``acid`` (asynchronous gossip with the continuous momentum), ``gossip`` (the same without it,
    AD-PSGD-like) or ``allreduce`` (synchronous SGD, gradients averaged every step).

    ``steps`` is the mean number of gradient steps per worker: the run stops once all workers together made
    ``steps * world`` (asynchronous algorithms: fast workers do more, slow ones fewer; all-reduce: everyone makes
    exactly ``steps``). ``rate_com`` is the expected number of communications per gradient step of each worker.
    ``step_seconds`` > 0 pads every gradient step to at least that long by sleeping after the real computation:
    it emulates workers whose accelerator computes while the host CPU is free, so that several workers can share a
    small machine without their computation starving each other's communication.
    Faults (tests and demonstrations): ``slow`` {rank: extra seconds per gradient step}, ``kill`` {rank: step at
    which that worker SIGKILLs itself}.
    """

    algo: str = "acid"
    topology: str = "ring"
    world: int = 8
    rate_com: float = 1.0
    steps: int = 200
    lr: float = 0.05
    momentum: float = 0.9
    weight_decay: float = 0.0
    problem: ProblemSpec = field(default_factory=ProblemSpec)
    mtu: int | None = None  # None: the path MTU towards the peers (65535 on loopback)
    step_seconds: float = 0.0  # minimum wall time of a gradient step: the rest is slept (emulated accelerator)
    exchange_timeout: float = 5.0  # a pairwise exchange fails if the peer does not deliver within this
    collective_timeout: float = 60.0  # each transfer of the start/end averages and of all-reduce SGD
    join_timeout: float = 60.0  # all workers must have connected to the pairing service by then
    dead_after: float = 10.0  # a worker silent this long is dropped from the pairing
    log_interval: float = 0.25  # seconds between consensus snapshots
    max_seconds: float = 600.0  # hard limit on the training phase
    max_backlog: float = 2.0  # communication events a worker may lag behind its Poisson clock before they lapse
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

    @property
    def total_steps(self) -> int:
        return self.steps * self.world

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["slow"] = {str(k): v for k, v in self.slow.items()}
        d["kill"] = {str(k): v for k, v in self.kill.items()}
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "RunConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"RunConfig: unknown fields {sorted(unknown)}")
        return cls(**d)
