"""Small models for testbed runs, sized so a 2-core machine trains them in seconds while the gradients are large
enough (hundreds of KB) for the network to matter."""

from __future__ import annotations

import torch
from torch import nn

from .data import Split

__all__ = ["build", "MODELS"]

MODELS = ("mlp", "cnn", "char-mlp")


class CharMLP(nn.Module):
    """Next-character model: embedding of a fixed context window, then an MLP."""

    def __init__(self, vocab: int, context: int, hidden: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, 32)
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(32 * context, hidden), nn.ReLU(), nn.Linear(hidden, vocab))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(self.embed(x.long()))


def build(name: str, data: Split, *, hidden: int = 256, seed: int = 0) -> nn.Module:
    """Model ``name`` (one of :data:`MODELS`) for ``data``, initialised from ``seed`` (the same on every worker)."""
    torch.manual_seed(seed)
    if name == "mlp":
        n_in = 1
        for d in data.input_shape:
            n_in *= d
        return nn.Sequential(nn.Flatten(), nn.Linear(n_in, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                             nn.Linear(hidden, data.num_classes))
    if name == "cnn":
        if len(data.input_shape) != 3:
            raise ValueError(f"model cnn needs image data (C, H, W), dataset {data.name} has shape {data.input_shape}")
        c, h, w = data.input_shape
        return nn.Sequential(nn.Conv2d(c, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                             nn.Linear(32 * (h // 4) * (w // 4), hidden), nn.ReLU(), nn.Linear(hidden, data.num_classes))
    if name == "char-mlp":
        if not data.vocab:
            raise ValueError(f"model char-mlp needs the text dataset, not {data.name}")
        return CharMLP(data.vocab, data.input_shape[0], hidden)
    raise ValueError(f"unknown model {name!r} (known: {', '.join(MODELS)})")
