"""Training data for testbed runs: real but bundled or generated here; nothing is downloaded.

* ``digits``: scikit-learn's handwritten digits (1,797 8x8 images, 10 classes), shipped inside the wheel.
* ``synthetic-cifar``: CIFAR-shaped (3x32x32, 10 classes) images generated from a seed: class templates mixed
  from shared smooth parts (so classes overlap), samples are a template under random shifts and contrast plus
  clutter and noise. Hard enough that a small CNN is at 60-90% after a few hundred steps, not 99%.
* ``text``: a small generated corpus (a seeded grammar of subject/verb/object sentences) for next-character
  prediction from a fixed context window.
* ``cifar10``: the real CIFAR-10 from a local directory holding the python pickles (``data_batch_1..5``,
  ``test_batch``), for users who have it; ``path`` is required.

Every dataset is a :class:`Split` of float32 inputs and int64 labels, the same on every worker for a given seed
(each worker then takes its shard with :func:`shard`).
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .spec import DATASETS  # one list of names, checked by the spec reader

__all__ = ["Split", "DataError", "load", "shard", "DATASETS"]


class DataError(ValueError):
    """A dataset could not be loaded; the message says which and why."""


@dataclass
class Split:
    """Train and test tensors plus what a model needs to know about them."""

    name: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int
    input_shape: tuple[int, ...]
    vocab: int = 0  # text: number of distinct tokens (inputs are token ids)


def load(name: str, *, seed: int = 0, path: str | None = None, size: int | None = None,
         test_size: int | None = None) -> Split:
    """Load dataset ``name`` (one of :data:`DATASETS`); ``size`` caps the number of generated samples.
    ``test_size`` (generated datasets only): that many held-out samples generated beside ``size`` training ones,
    instead of a 20% split: a larger test set resolves smaller accuracy differences (the standard error of an
    accuracy p measured on n samples is sqrt(p (1 - p) / n): at 10,000 samples 0.3 points at 90%, 0.46 at 70%)."""
    if test_size is not None and name not in ("synthetic-cifar", "text"):
        raise DataError(f"test_size: dataset {name} has a fixed test set (only synthetic-cifar and text are "
                        f"generated)")
    if name == "digits":
        return _digits(seed)
    if name == "synthetic-cifar":
        return _synthetic_cifar(seed, size or 4000, test_size)
    if name == "text":
        return _text(seed, size or 20000, test_size)
    if name == "cifar10":
        if not path:
            raise DataError("dataset cifar10 needs `path:` (a directory with data_batch_1..5 and test_batch)")
        return _cifar10(Path(path))
    raise DataError(f"unknown dataset {name!r} (known: {', '.join(DATASETS)})")


def shard(x: torch.Tensor, y: torch.Tensor, rank: int, world: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank ``rank``'s contiguous equal share (the remainder is dropped so every rank runs the same steps)."""
    n = len(x) // world
    return x[rank * n:(rank + 1) * n], y[rank * n:(rank + 1) * n]


def _split(name: str, x: np.ndarray, y: np.ndarray, seed: int, test_fraction: float, num_classes: int,
           vocab: int = 0, n_test: int | None = None) -> Split:
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(x))
    x, y = x[order], y[order]
    n_test = int(len(x) * test_fraction) if n_test is None else n_test
    xt = torch.from_numpy(np.ascontiguousarray(x))
    yt = torch.from_numpy(np.ascontiguousarray(y)).long()
    return Split(name, xt[n_test:], yt[n_test:], xt[:n_test], yt[:n_test], num_classes, tuple(x.shape[1:]), vocab)


def digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """sklearn's digits as ``load_digits(return_X_y=True)`` gives them (float64 pixels 0..16, int targets), read
    from the file sklearn ships, parsed as sklearn parses it (``np.loadtxt`` of the gzipped CSV, the target the last
    column), without importing sklearn: ``sklearn.datasets`` takes 0.9 s to import, which every testbed worker paid
    on start. Where that file is not (another sklearn layout), sklearn's loader."""
    import gzip
    import importlib.util

    spec = importlib.util.find_spec("sklearn")  # (finds the package without running it)
    where = [Path(p) / "datasets" / "data" / "digits.csv.gz" for p in (spec.submodule_search_locations or [])] \
        if spec is not None else []
    csv = next((p for p in where if p.is_file()), None)
    if csv is None:
        from sklearn.datasets import load_digits

        return load_digits(return_X_y=True)
    with gzip.open(csv, mode="rt", encoding="utf-8") as f:
        data = np.loadtxt(f, delimiter=",")
    return data[:, :-1], data[:, -1].astype(int, copy=False)


def _digits(seed: int) -> Split:
    data, target = digits_arrays()
    x = (data.astype(np.float32) / 16.0 - 0.5) / 0.5
    return _split("digits", x, target.astype(np.int64), seed, 0.2, 10)


#: Shape of the synthetic image task (:func:`_synthetic_cifar`), chosen so the workload's CNN (``hidden: 64``, SGD
#: 0.02 with momentum, 4 x 32 images per step) is at about 40% after 40 steps, 75% after 100 and 85-88% after
#: 200-400 on 4,000 training images: accuracy differences between methods stay visible instead of saturating.
CIFAR_PARTS = 6            # shared smooth parts every class template is mixed from (classes overlap through them)
CIFAR_OWN = 0.1            # weight of each class's own part next to the shared mixture (unit variance)
CIFAR_SHIFT = 6            # samples are the template rolled by up to this many pixels each way
CIFAR_CONTRAST = (0.3, 1.5)  # per-sample contrast (the template's scale)
CIFAR_CLUTTER = 1.2        # scale of a random mixture of the shared parts added to every sample
CIFAR_NOISE = 1.5          # per-pixel Gaussian noise


def _smooth(rng: np.random.Generator, k: int) -> np.ndarray:
    """``k`` smooth random images (3x32x32 flattened): 8x8 Gaussian noise upsampled 4x."""
    return rng.normal(size=(k, 3, 8, 8)).astype(np.float32).repeat(4, axis=2).repeat(4, axis=3).reshape(k, -1)


def _synthetic_cifar(seed: int, n_train: int, n_test: int | None) -> Split:
    """Ten class templates that overlap: each is a random mixture of :data:`CIFAR_PARTS` shared smooth parts plus
    a small part of its own, scaled to unit variance. A sample is its class's template rolled by a random shift,
    times a random contrast, plus clutter (a random mixture of the same shared parts, so it looks like other
    classes) and pixel noise. Everything is drawn from one generator seeded by ``seed``: the same seed gives the
    same images on every worker."""
    n = n_train + (n_test or 0)
    rng = np.random.default_rng(1000 + seed)
    classes = 10
    parts = _smooth(rng, CIFAR_PARTS)
    own = _smooth(rng, classes)
    weights = rng.normal(size=(classes, CIFAR_PARTS)).astype(np.float32) / np.sqrt(CIFAR_PARTS)
    templates = weights @ parts + CIFAR_OWN * own
    templates /= templates.std(axis=1, keepdims=True)
    templates = templates.reshape(classes, 3, 32, 32)
    y = rng.integers(0, classes, size=n)
    shifts = rng.integers(-CIFAR_SHIFT, CIFAR_SHIFT + 1, size=(n, 2))
    x = np.empty((n, 3, 32, 32), np.float32)
    for i in range(n):
        x[i] = np.roll(templates[y[i]], tuple(shifts[i]), axis=(1, 2))
    x *= rng.uniform(*CIFAR_CONTRAST, size=(n, 1, 1, 1)).astype(np.float32)
    clutter = rng.normal(size=(n, CIFAR_PARTS)).astype(np.float32) * (CIFAR_CLUTTER / np.sqrt(CIFAR_PARTS))
    x += (clutter @ parts).reshape(n, 3, 32, 32)
    x += rng.normal(scale=CIFAR_NOISE, size=x.shape).astype(np.float32)
    return _split("synthetic-cifar", x, y.astype(np.int64), seed, 0.2, classes, n_test=n_test)


_SUBJECTS = ["the switch", "a worker", "the gradient", "every packet", "the ring", "a queue", "the model", "one host"]
_VERBS = ["sends", "drops", "marks", "reduces", "gathers", "forwards", "averages", "sprays"]
_OBJECTS = ["the tensor", "a layer", "each chunk", "the loss", "its peers", "the bytes", "a priority", "the step"]
_ENDS = [" quickly.", " again.", " in order.", " at once.", ".", " under load."]
TEXT_CONTEXT = 8


def _text(seed: int, n_train: int, n_test: int | None) -> Split:
    n_chars = n_train + (n_test or 0)
    rng = np.random.default_rng(2000 + seed)
    parts = []
    total = 0
    while total < n_chars + TEXT_CONTEXT:
        s = (f"{_SUBJECTS[rng.integers(len(_SUBJECTS))]} {_VERBS[rng.integers(len(_VERBS))]} "
             f"{_OBJECTS[rng.integers(len(_OBJECTS))]}{_ENDS[rng.integers(len(_ENDS))]} ")
        parts.append(s)
        total += len(s)
    corpus = "".join(parts)
    alphabet = sorted(set(corpus))
    ids = np.array([alphabet.index(c) for c in corpus], np.int64)
    windows = np.lib.stride_tricks.sliding_window_view(ids, TEXT_CONTEXT + 1)[:n_chars]
    x = windows[:, :TEXT_CONTEXT].astype(np.float32)  # token ids as floats: one tensor type for every dataset
    y = windows[:, TEXT_CONTEXT].copy()
    return _split("text", x, y, seed, 0.2, len(alphabet), vocab=len(alphabet), n_test=n_test)


def _cifar10(path: Path) -> Split:
    if not path.is_dir():
        raise DataError(f"cifar10: {path} is not a directory")

    def read(name: str) -> tuple[np.ndarray, np.ndarray]:
        f = path / name
        if not f.exists():
            raise DataError(f"cifar10: {f} is missing (expected the python version of CIFAR-10)")
        with open(f, "rb") as fh:
            d = pickle.load(fh, encoding="bytes")
        try:
            return np.asarray(d[b"data"], np.uint8).reshape(-1, 3, 32, 32), np.asarray(d[b"labels"], np.int64)
        except (KeyError, ValueError) as e:
            raise DataError(f"cifar10: {f} is not a CIFAR-10 batch ({e})") from None

    xs, ys = zip(*(read(f"data_batch_{i}") for i in range(1, 6)))
    xt, yt = read("test_batch")
    mean = np.array([0.49, 0.48, 0.45], np.float32).reshape(1, 3, 1, 1)
    std = np.array([0.25, 0.24, 0.26], np.float32).reshape(1, 3, 1, 1)

    def norm(a: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(((a.astype(np.float32) / 255.0) - mean) / std)

    return Split("cifar10", norm(np.concatenate(xs)), torch.from_numpy(np.concatenate(ys)), norm(xt),
                 torch.from_numpy(yt), 10, (3, 32, 32))
