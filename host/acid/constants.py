"""Communication graphs and the A²CiD² constants eta and alpha~ from their Laplacian (pure functions).

The model (``../shared/papers.md``, Nabli et al. 2023): each worker communicates at rate ``rate_com`` (events per
unit of time, the unit being one mean gradient step), choosing a neighbour uniformly, so the expected
communication Laplacian is ``L = rate_com * (I - W)`` with ``W_ij = 1/|N_i|`` for ``j`` in ``N_i``. From it:

* ``chi1 = 1 / lambda_2(L)`` (inverse algebraic connectivity: how slowly gossip mixes),
* ``chi2 = max over edges (i, j) of (1/2) (e_i - e_j)^T L^+ (e_i - e_j)`` (the largest effective resistance of an
  edge, halved),
* ``eta = 1 / (2 sqrt(chi1 chi2))`` (rate at which x and x~ mix between events) and
  ``alpha~ = (1/2) sqrt(chi1 / chi2)`` (how far a communication moves x~).

Graphs are given as neighbour lists (``list[list[int]]``, rank -> sorted neighbours). ``complete``: everyone;
``ring``: i +- 1; ``exponential``: i +- 2^k for 2^k < n (a set: i + n/2 and i - n/2 are one neighbour). All three
are circulant, hence regular, so ``L`` is symmetric. The constants are meaningful for non-complete graphs; on the
complete graph chi1 = chi2 and alpha~ = 1/2, so x~ moves like x and the momentum brings nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.linalg

__all__ = ["TOPOLOGIES", "AcidConstants", "neighbors", "edges", "laplacian", "chi1", "chi2", "acid_constants"]

TOPOLOGIES = ("complete", "ring", "exponential")


def neighbors(topology: str, n: int) -> list[list[int]]:
    """Neighbour lists of the named graph on ``n`` ranks (sorted, no self-loops, no duplicates)."""
    if not isinstance(n, int) or n < 2:
        raise ValueError(f"a communication graph needs at least 2 workers, got n={n!r}")
    if topology == "complete":
        return [[j for j in range(n) if j != i] for i in range(n)]
    if topology == "ring":
        return [sorted({(i - 1) % n, (i + 1) % n} - {i}) for i in range(n)]
    if topology == "exponential":
        offsets = [1 << k for k in range(max(1, math.ceil(math.log2(n))))]
        return [sorted({(i + o) % n for o in offsets} | {(i - o) % n for o in offsets} - {i}) for i in range(n)]
    raise ValueError(f"unknown graph topology {topology!r} (known: {', '.join(TOPOLOGIES)})")


def edges(neigh: list[list[int]]) -> list[tuple[int, int]]:
    """Undirected edges ``(i, j)``, ``i < j``, of a neighbour list; raises if it is not symmetric."""
    out = set()
    for i, ns in enumerate(neigh):
        for j in ns:
            if i not in neigh[j]:
                raise ValueError(f"graph is not symmetric: {j} is a neighbour of {i} but not the reverse")
            if i != j:
                out.add((min(i, j), max(i, j)))
    return sorted(out)


def laplacian(neigh: list[list[int]], rate_com: float) -> np.ndarray:
    """``L = rate_com * (I - W)``, ``W_ij = 1/|N_i|``; must be symmetric (a regular graph)."""
    if not rate_com > 0:
        raise ValueError(f"rate_com must be > 0, got {rate_com!r}")
    n = len(neigh)
    W = np.zeros((n, n))
    for i, ns in enumerate(neigh):
        if not ns:
            raise ValueError(f"rank {i} has no neighbour")
        W[i, ns] = 1.0 / len(ns)
    if not np.allclose(W, W.T):
        raise ValueError("W is not symmetric (the graph is not regular); the A²CiD² constants assume it is")
    return rate_com * (np.eye(n) - W)


def chi1(L: np.ndarray) -> float:
    """``1 / lambda_2(L)``; raises if the graph is disconnected (lambda_2 = 0)."""
    lam = scipy.linalg.eigh(L, eigvals_only=True, subset_by_index=[1, 1])[0]
    if lam <= 1e-12 * max(1.0, float(np.abs(L).max())):
        raise ValueError("the communication graph is disconnected (lambda_2 = 0)")
    return float(1.0 / lam)


def chi2(L: np.ndarray, edge_list: list[tuple[int, int]]) -> float:
    """Max over edges of half the effective resistance ``(e_i - e_j)^T L^+ (e_i - e_j)``."""
    Lp = scipy.linalg.pinvh(L)
    return max(0.5 * float(Lp[i, i] + Lp[j, j] - 2.0 * Lp[i, j]) for i, j in edge_list)


@dataclass(frozen=True)
class AcidConstants:
    """The continuous-momentum constants of one graph and communication rate."""

    topology: str
    n: int
    rate_com: float
    chi1: float
    chi2: float
    eta: float
    alpha_tilde: float


def acid_constants(topology: str, n: int, rate_com: float) -> AcidConstants:
    """eta and alpha~ for ``n`` workers on the named graph, each communicating at ``rate_com`` per gradient step."""
    neigh = neighbors(topology, n)
    L = laplacian(neigh, rate_com)
    c1, c2 = chi1(L), chi2(L, edges(neigh))
    return AcidConstants(topology, n, float(rate_com), c1, c2, eta=0.5 / math.sqrt(c1 * c2),
                         alpha_tilde=0.5 * math.sqrt(c1 / c2))
