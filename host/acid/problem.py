"""The training problem of an A²CiD² run: a small MLP classifier on synthetic, deliberately non-iid data.

Data: ``classes`` Gaussian clusters in ``features`` dimensions (means drawn once from the seed, scaled by
``separation``; unit noise). Worker ``r`` holds ``samples_per_worker`` points, a fraction ``skew`` of them from its
"home" classes (``r mod classes``, ...) and the rest from all classes: label skew makes local gradients disagree,
which is what makes consensus matter (with iid data any local model is nearly as good as the average).
Everything is a deterministic function of the spec, the world size and the rank, so a monitor can rebuild the
full dataset (the union of the shards) to evaluate models.

The model's parameters live in one flat float32 tensor (:class:`FlatModel`): the worker averages, mixes and sends
that tensor; the module's parameters are views into it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["ProblemSpec", "make_shard", "make_full", "build_model", "FlatModel"]


@dataclass(frozen=True)
class ProblemSpec:
    features: int = 32
    classes: int = 10
    hidden: int = 64
    samples_per_worker: int = 1024
    batch: int = 64
    skew: float = 0.8  # fraction of a worker's samples from its home classes
    separation: float = 1.0  # scale of the cluster means (larger: easier)
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("features", "classes", "hidden", "samples_per_worker", "batch"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"ProblemSpec.{name} must be >= 1, got {getattr(self, name)!r}")
        if not 0.0 <= self.skew <= 1.0:
            raise ValueError(f"ProblemSpec.skew must be in [0, 1], got {self.skew!r}")


def _means(spec: ProblemSpec) -> torch.Tensor:
    g = torch.Generator().manual_seed(spec.seed)
    return torch.randn(spec.classes, spec.features, generator=g) * spec.separation


def make_shard(spec: ProblemSpec, world: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank ``rank``'s local data ``(X [m, features], y [m])``."""
    if not 0 <= rank < world:
        raise ValueError(f"rank {rank} outside world of {world}")
    g = torch.Generator().manual_seed(spec.seed * 1_000_003 + 7919 * (rank + 1))
    m, C = spec.samples_per_worker, spec.classes
    per = max(1, C // world)  # home classes per worker
    home = torch.tensor([(rank * per + k) % C for k in range(per)])
    from_home = torch.rand(m, generator=g) < spec.skew
    y = torch.where(from_home, home[torch.randint(0, per, (m,), generator=g)], torch.randint(0, C, (m,), generator=g))
    X = _means(spec)[y] + torch.randn(m, spec.features, generator=g)
    return X, y


def make_full(spec: ProblemSpec, world: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The union of all shards: the global training set whose loss the run minimises."""
    parts = [make_shard(spec, world, r) for r in range(world)]
    return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])


def build_model(spec: ProblemSpec, seed: int) -> nn.Module:
    g = torch.Generator().manual_seed(seed)
    model = nn.Sequential(nn.Linear(spec.features, spec.hidden), nn.ReLU(), nn.Linear(spec.hidden, spec.classes))
    with torch.no_grad():
        for p in model.parameters():  # default init, but from our generator (reproducible per seed)
            bound = 1.0 / (p.shape[-1] ** 0.5) if p.dim() > 1 else 0.1
            p.uniform_(-bound, bound, generator=g)
    return model


class FlatModel:
    """A module whose parameters are views into one flat tensor ``flat`` (contiguous float32)."""

    def __init__(self, module: nn.Module):
        self.module = module
        params = list(module.parameters())
        self.flat = torch.cat([p.detach().reshape(-1) for p in params]).float().contiguous()
        off = 0
        for p in params:
            n = p.numel()
            p.data = self.flat[off:off + n].view_as(p)
            off += n
        self.params = params

    @property
    def numel(self) -> int:
        return self.flat.numel()

    def flat_grad(self) -> torch.Tensor:
        return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in self.params])

    @torch.no_grad()
    def loss_of(self, x: torch.Tensor, X: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
        """Mean cross-entropy and accuracy of parameters ``x`` on ``(X, y)`` (``flat`` is restored after)."""
        saved = self.flat.clone()
        self.flat.copy_(x)
        try:
            out = self.module(X)
            return float(F.cross_entropy(out, y)), float((out.argmax(1) == y).float().mean())
        finally:
            self.flat.copy_(saved)
