"""Event-driven simulation of asynchronous gossip and A²CiD² in continuous time: no processes, no network.

Why: the real runs (``launch``) mix the algorithm with systems effects (CPU contention, exchange latency, pairing
waits, clocks measured by wall time). This module runs the same algorithm on an ideal machine, with the very update
functions the workers use (:mod:`host.acid.mixing`) and the same constants (:mod:`host.acid.constants`), so a
difference between the two is a systems effect and a shortfall shared by both is the algorithm's.

Model (time in units of one mean gradient step, as in the workers):

* **gradient events**: worker ``i`` makes steps at intervals drawn from ``grad_timing``: ``"periodic"`` (uniform in
  ``[1 - jitter, 1 + jitter]``, first step at a uniform phase: the real workers pad every step to a fixed time) or
  ``"poisson"`` (``Exp(1)``, the paper's model). At an event: mix up to now, the gradient of the oracle at the
  current x, the optimiser's step (:func:`~host.acid.mixing.sgd_momentum_delta`) applied to x and x~.
* **communication events**, ``comm_model``:

  - ``"edge"`` (the paper's model): every edge of the graph fires as an independent Poisson process of rate
    ``rate_com / degree`` (regular graphs), so each worker takes part in ``rate_com`` communications per unit of
    time and the expected communication Laplacian is ``rate_com (I - W)`` (what :mod:`~host.acid.constants` uses);
  - ``"pairing"`` (what ``host.acid``'s pairing service does): each worker has a Poisson clock of rate
    ``rate_com``; when it fires the worker is free; if a graph neighbour is free they are paired at once (a random
    one of them), otherwise it waits. After its exchange a worker's next firing is its previous scheduled time
    plus an ``Exp(rate_com)`` gap, and events lagging more than ``max_backlog`` events behind lapse, as in
    ``worker.Worker._comm_loop``.

  An exchange is instantaneous: both sides mix up to now and apply
  :func:`~host.acid.mixing.communication_update_` with each other's x.
* **start and end**: x (and x~) start at the average of the workers' initial points (``average_start``; without
  it each worker starts at its own point: a pure consensus experiment); the final model is the average of x.
* **records** every ``record_every``: consensus distance ``(1/n) sum_i ||x_i - xbar||^2`` (x mixed up to that
  time; mixing is a flow, so doing it early changes nothing) and the oracle's loss of ``xbar``.

Oracles (:class:`Oracle`): :class:`MLPOracle` (the real runs' problem, :mod:`host.acid.problem`) and
:class:`QuadraticOracle` (``f_i(x) = (c/2)||x||^2 - <b_i, x>`` plus Gaussian gradient noise: heterogeneous constant
drift ``b_i``, analysable in closed form).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import numpy as np
import torch
import torch.nn.functional as F

from host.acid.constants import acid_constants, edges, neighbors
from host.acid.mixing import communication_update_, gradient_update_, mix_, sgd_momentum_delta
from host.acid.monitor import consensus_distance
from host.acid.problem import FlatModel, ProblemSpec, build_model, make_full, make_shard

__all__ = ["Oracle", "QuadraticOracle", "MLPOracle", "SimConfig", "SimResult", "simulate", "decay_rate",
           "COMM_MODELS", "GRAD_TIMINGS"]

COMM_MODELS = ("edge", "pairing")
GRAD_TIMINGS = ("periodic", "poisson")


class Oracle(Protocol):
    """What the simulation trains: per-worker initial points, stochastic gradients, and a loss of the average."""

    dim: int

    def init(self, rank: int) -> torch.Tensor: ...

    def grad(self, rank: int, x: torch.Tensor, gen: torch.Generator) -> tuple[float, torch.Tensor]: ...

    def evaluate(self, x: torch.Tensor) -> dict[str, float]: ...


class QuadraticOracle:
    """``f_i(x) = (curvature/2) ||x||^2 - <b_i, x>``, gradient ``curvature x - b_i + noise * N(0, I)``.

    The ``b_i`` are ``heterogeneity * N(0, I)`` centred over the workers, so the global objective is
    ``(curvature/2)||x||^2`` (optimum 0) and ``b_i`` is a constant disagreement between the local gradients: the
    drift that gossip has to fight. ``curvature = 0`` makes it a pure drift (the mean of x does not move);
    ``heterogeneity = noise = 0`` (and no start average) a pure consensus problem. Initial points:
    ``init_scale * N(0, I)`` per rank."""

    def __init__(self, world: int, dim: int, *, curvature: float = 0.0, heterogeneity: float = 1.0,
                 noise: float = 0.0, init_scale: float = 1.0, seed: int = 0):
        if world < 2 or dim < 1:
            raise ValueError(f"QuadraticOracle needs world >= 2 and dim >= 1, got world={world}, dim={dim}")
        if curvature < 0 or heterogeneity < 0 or noise < 0 or init_scale < 0:
            raise ValueError("QuadraticOracle: curvature, heterogeneity, noise and init_scale must be >= 0")
        g = torch.Generator().manual_seed(seed)
        b = torch.randn(world, dim, generator=g, dtype=torch.float64) * heterogeneity
        self.b = (b - b.mean(0)).float()
        self.x0 = (torch.randn(world, dim, generator=g, dtype=torch.float64) * init_scale).float()
        self.dim, self.curvature, self.noise = dim, curvature, noise

    def init(self, rank: int) -> torch.Tensor:
        return self.x0[rank].clone()

    def grad(self, rank: int, x: torch.Tensor, gen: torch.Generator) -> tuple[float, torch.Tensor]:
        g = x * self.curvature - self.b[rank]
        if self.noise:
            g = g + torch.randn(self.dim, generator=gen) * self.noise
        loss = 0.5 * self.curvature * float(x @ x) - float(self.b[rank] @ x)
        return loss, g

    def evaluate(self, x: torch.Tensor) -> dict[str, float]:
        return {"loss": 0.5 * self.curvature * float(x.double() @ x.double())}


class MLPOracle:
    """The real runs' problem (:mod:`host.acid.problem`): worker ``r`` trains the MLP on its non-iid shard with
    minibatches of ``spec.batch``; initial models from the same seeds as ``worker.Worker`` (``seed * 7919 +
    rank``); the loss/accuracy of an averaged model on the union of the shards, as the runs' monitor computes."""

    def __init__(self, spec: ProblemSpec, world: int, seed: int = 0):
        self.spec, self.world, self.seed = spec, world, seed
        self.shards = [make_shard(spec, world, r) for r in range(world)]
        self.X, self.y = make_full(spec, world)
        self.flat = FlatModel(build_model(spec, seed=0))
        self.dim = self.flat.numel

    def init(self, rank: int) -> torch.Tensor:
        return FlatModel(build_model(self.spec, seed=self.seed * 7919 + rank)).flat.clone()

    def grad(self, rank: int, x: torch.Tensor, gen: torch.Generator) -> tuple[float, torch.Tensor]:
        X, y = self.shards[rank]
        idx = torch.randint(0, X.shape[0], (self.spec.batch,), generator=gen)
        with torch.no_grad():
            self.flat.flat.copy_(x)
        for p in self.flat.params:
            p.grad = None
        loss = F.cross_entropy(self.flat.module(X[idx]), y[idx])
        loss.backward()
        return float(loss.detach()), self.flat.flat_grad()

    def evaluate(self, x: torch.Tensor) -> dict[str, float]:
        loss, acc = self.flat.loss_of(x.float(), self.X, self.y)
        return {"loss": loss, "acc": acc}


@dataclass(frozen=True)
class SimConfig:
    """One simulated run. ``algo``: ``"acid"`` or ``"gossip"`` (eta = alpha~ = 0, no x~). ``rate_com``:
    communications per worker per unit of time (one mean gradient step), as ``RunConfig.rate_com``.
    ``constants_rate``: the rate the constants eta, alpha~ are computed for (default ``rate_com``; set it to study a
    mismatch between the constants and the achieved rate). ``steps``: duration in units of time (each worker makes
    about that many gradient steps)."""

    algo: str = "acid"
    topology: str = "ring"
    world: int = 8
    rate_com: float = 1.0
    steps: float = 250.0
    lr: float = 0.05
    momentum: float = 0.9
    weight_decay: float = 0.0
    comm_model: str = "pairing"
    grad_timing: str = "periodic"
    jitter: float = 0.1
    record_every: float = 5.0
    average_start: bool = True
    max_backlog: float = 2.0
    constants_rate: float | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if self.algo not in ("acid", "gossip"):
            raise ValueError(f"SimConfig.algo must be 'acid' or 'gossip', got {self.algo!r}")
        if self.comm_model not in COMM_MODELS:
            raise ValueError(f"SimConfig.comm_model: unknown {self.comm_model!r} (known: {', '.join(COMM_MODELS)})")
        if self.grad_timing not in GRAD_TIMINGS:
            raise ValueError(f"SimConfig.grad_timing: unknown {self.grad_timing!r} "
                             f"(known: {', '.join(GRAD_TIMINGS)})")
        if not self.rate_com > 0:
            raise ValueError(f"SimConfig.rate_com must be > 0, got {self.rate_com!r}")
        if self.constants_rate is not None and not self.constants_rate > 0:
            raise ValueError(f"SimConfig.constants_rate must be > 0, got {self.constants_rate!r}")
        if not self.steps > 0 or not self.record_every > 0:
            raise ValueError("SimConfig.steps and record_every must be > 0")
        if not 0 <= self.jitter < 1:
            raise ValueError(f"SimConfig.jitter must be in [0, 1), got {self.jitter!r}")
        neighbors(self.topology, self.world)  # validates topology and world


@dataclass
class SimResult:
    config: SimConfig
    eta: float
    alpha_tilde: float
    times: list[float] = field(default_factory=list)
    consensus: list[float] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    steps: int = 0
    comms: int = 0  # counted once per worker, so twice per exchange (as the runs' reports)
    lapsed: int = 0
    final: dict[str, float] = field(default_factory=dict)

    @property
    def comms_per_step(self) -> float:
        return self.comms / self.steps if self.steps else 0.0

    @property
    def mean_consensus(self) -> float:
        return float(np.mean(self.consensus))

    @property
    def mean_consensus_2nd_half(self) -> float:
        return float(np.mean(self.consensus[len(self.consensus) // 2:]))

    @property
    def mean_loss(self) -> float:
        return float(np.mean(self.loss))

    def summary(self) -> dict[str, Any]:
        return {"algo": self.config.algo, "world": self.config.world, "rate_com": self.config.rate_com,
                "eta": self.eta, "alpha_tilde": self.alpha_tilde, "steps": self.steps, "comms": self.comms,
                "comms_per_step": self.comms_per_step, "lapsed": self.lapsed,
                "mean_consensus": self.mean_consensus, "mean_consensus_2nd_half": self.mean_consensus_2nd_half,
                "mean_loss": self.mean_loss, "final_loss": self.final.get("loss"), "config": asdict(self.config)}


_GRAD, _CLOCK, _EDGE, _RECORD = 0, 1, 2, 3


def simulate(cfg: SimConfig, oracle: Oracle) -> SimResult:
    """Run ``cfg`` on ``oracle``; deterministic for a given ``cfg.seed``."""
    n = cfg.world
    neigh = neighbors(cfg.topology, n)
    edge_list = edges(neigh)
    degree = {len(ns) for ns in neigh}
    if cfg.comm_model == "edge" and len(degree) != 1:
        raise ValueError("the 'edge' model needs a regular graph")
    acid = cfg.algo == "acid"
    if acid:
        k = acid_constants(cfg.topology, n, cfg.constants_rate or cfg.rate_com)
        eta, alpha = k.eta, k.alpha_tilde
    else:
        eta = alpha = 0.0
    res = SimResult(cfg, eta, alpha)
    rng = np.random.default_rng([cfg.seed, 0xAC1D])
    gens = [torch.Generator().manual_seed(cfg.seed * 104729 + r) for r in range(n)]

    x = [oracle.init(r).float().clone() for r in range(n)]
    if cfg.average_start:
        avg = torch.stack(x).mean(0)
        x = [avg.clone() for _ in range(n)]
    xt = [xi.clone() for xi in x] if acid else [None] * n
    bufs = [torch.zeros_like(xi) for xi in x] if cfg.momentum else [None] * n
    t_last = [0.0] * n
    steps = [0] * n
    comms = [0] * n

    def mix_to(i: int, t: float) -> None:
        if acid and t > t_last[i]:
            mix_(x[i], xt[i], eta, t - t_last[i])
        t_last[i] = max(t_last[i], t)

    def exchange(i: int, j: int, t: float) -> None:
        mix_to(i, t)
        mix_to(j, t)
        xi, xj = x[i].clone(), x[j].clone()
        communication_update_(x[i], xt[i], xi, xj, alpha)
        communication_update_(x[j], xt[j], xj, xi, alpha)
        comms[i] += 1
        comms[j] += 1

    def grad_gap() -> float:
        if cfg.grad_timing == "poisson":
            return float(rng.exponential(1.0))
        return float(rng.uniform(1.0 - cfg.jitter, 1.0 + cfg.jitter))

    queue: list[tuple[float, int, int, int]] = []
    seq = 0

    def push(t: float, kind: int, rank: int = -1) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(queue, (t, seq, kind, rank))

    for r in range(n):
        first = float(rng.uniform(0.0, 1.0)) if cfg.grad_timing == "periodic" else grad_gap()
        push(first, _GRAD, r)
    sched = [0.0] * n  # pairing model: each worker's last scheduled clock time
    free: set[int] = set()
    if cfg.comm_model == "pairing":
        for r in range(n):
            sched[r] = float(rng.exponential(1.0 / cfg.rate_com))
            push(sched[r], _CLOCK, r)
    else:
        push(float(rng.exponential(1.0 / (n * cfg.rate_com / 2))), _EDGE)
    n_rec = int(math.floor(cfg.steps / cfg.record_every + 1e-9))
    for k in range(1, n_rec + 1):
        push(k * cfg.record_every, _RECORD)
    lag = cfg.max_backlog / cfg.rate_com

    def reschedule(i: int, now: float) -> None:
        sched[i] += float(rng.exponential(1.0 / cfg.rate_com))
        if sched[i] < now - lag:
            res.lapsed += 1
            sched[i] = now - lag
        push(max(sched[i], now), _CLOCK, i)

    while queue:
        t, _, kind, r = heapq.heappop(queue)
        if t > cfg.steps:
            break
        if kind == _GRAD:
            mix_to(r, t)
            _, g = oracle.grad(r, x[r], gens[r])
            delta = sgd_momentum_delta(x[r], g, bufs[r], lr=cfg.lr, momentum=cfg.momentum,
                                       weight_decay=cfg.weight_decay)
            gradient_update_(x[r], xt[r], delta)
            steps[r] += 1
            push(t + grad_gap(), _GRAD, r)
        elif kind == _CLOCK:
            cands = sorted(free.intersection(neigh[r]))
            if not cands:
                free.add(r)
                continue
            j = cands[int(rng.integers(len(cands)))]
            free.discard(j)
            exchange(r, j, t)
            reschedule(r, t)
            reschedule(j, t)
        elif kind == _EDGE:
            i, j = edge_list[int(rng.integers(len(edge_list)))]
            exchange(i, j, t)
            push(t + float(rng.exponential(1.0 / (n * cfg.rate_com / 2))), _EDGE)
        else:
            for i in range(n):
                mix_to(i, t)
            xs = torch.stack(x)
            res.times.append(t)
            res.consensus.append(consensus_distance(xs.double().numpy()))
            res.loss.append(oracle.evaluate(xs.mean(0))["loss"])
    for i in range(n):
        mix_to(i, cfg.steps)
    res.steps, res.comms = sum(steps), sum(comms)
    res.final = oracle.evaluate(torch.stack(x).mean(0))
    return res


def decay_rate(times: list[float] | np.ndarray, values: list[float] | np.ndarray, floor: float = 1e-20) -> float:
    """The exponential decay rate ``kappa`` of ``values ~ C exp(-kappa t)`` (least squares on the log over the
    points above ``floor``, which must be at least 2)."""
    t = np.asarray(times, dtype=float)
    v = np.asarray(values, dtype=float)
    keep = v > floor
    if keep.sum() < 2:
        raise ValueError("decay_rate needs at least 2 values above the floor")
    slope = np.polyfit(t[keep], np.log(v[keep]), 1)[0]
    return float(-slope)
