"""Small models for testbed runs, sized so a 2-core machine trains them in seconds while the gradients are large
enough (hundreds of KB) for the network to matter.

* ``mlp``: two hidden layers of ``hidden`` units on flattened inputs (digits: 85k parameters at 256).
* ``cnn``: two 3x3 convolutions (16, 32 channels) with pooling, then ``hidden`` units (CIFAR-shaped images:
  140k parameters at ``hidden: 64``, 530k at 256).
* ``char-mlp``: next character from an embedding of the context window and an MLP.
* ``transformer``: a small pre-norm transformer encoder over the context window (``hidden`` is the model width,
  4 heads, 2 blocks, feed-forward 2x wide), predicting the next character from the last position (text: 103k
  parameters at ``hidden: 64``). Attention is written with ``nn.Linear`` modules so that every parameter belongs
  to a module whose forward runs (DeAR's and the emulated compute's per-module hooks see all of them, which
  ``nn.MultiheadAttention``'s fused projections would hide).
"""

from __future__ import annotations

import torch
from torch import nn

from .data import Split
from .spec import MODELS  # one list of names, checked by the spec reader

__all__ = ["build", "MODELS"]


class CharMLP(nn.Module):
    """Next-character model: embedding of a fixed context window, then an MLP."""

    def __init__(self, vocab: int, context: int, hidden: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, 32)
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(32 * context, hidden), nn.ReLU(), nn.Linear(hidden, vocab))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(self.embed(x.long()))


class _Block(nn.Module):
    """Pre-norm transformer block: multi-head self-attention, then a 2x feed-forward, each residual."""

    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.norm2 = nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        att = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
        return x + self.ff(self.norm2(x))


class TinyTransformer(nn.Module):
    """Token and position embeddings, ``layers`` blocks, a final norm and a linear head on the last position."""

    def __init__(self, vocab: int, context: int, d: int, heads: int = 4, layers: int = 2):
        super().__init__()
        if d % heads:
            raise ValueError(f"model transformer: hidden ({d}) must be a multiple of its {heads} heads")
        self.embed = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(context, d)
        self.blocks = nn.Sequential(*(_Block(d, heads) for _ in range(layers)))
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ids = x.long()
        h = self.embed(ids) + self.pos(torch.arange(ids.shape[1]))
        return self.head(self.norm(self.blocks(h))[:, -1])


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
    if name == "transformer":
        if not data.vocab:
            raise ValueError(f"model transformer needs the text dataset, not {data.name}")
        return TinyTransformer(data.vocab, data.input_shape[0], hidden)
    raise ValueError(f"unknown model {name!r} (known: {', '.join(MODELS)})")
