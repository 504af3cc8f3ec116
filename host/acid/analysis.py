"""Exact second-moment analysis of asynchronous gossip and A²CiD² in the paper's model (pure numpy).

Why: the paper's rates (gossip ~ 1/chi1, A²CiD² ~ 1/sqrt(chi1 chi2)) come from Lyapunov upper bounds; whether
"A²CiD² at r matches gossip at 2r" holds on a given graph is a question about the actual expected dynamics, which
are linear in the second moment and can be computed exactly for small graphs. This answers it without sampling
noise and cross-checks :mod:`host.acid.simulate`.

Model (``comm_model="edge"`` of the simulation): ``Z = (x, x~)`` stacked over the ``n`` workers (one coordinate of
the parameters; coordinates are independent); between events ``dZ/dt = M Z`` with ``M = eta [[-I, I], [I, -I]]``;
edge ``(i, j)`` fires at rate ``rate_com / degree`` and applies ``Z <- A_e Z``,
``A_e = [[I - u u^T / 2, 0], [-alpha~ u u^T, I]]``, ``u = e_i - e_j``. Gossip: ``Z = x``, ``A_e = I - u u^T / 2``.
Every map preserves the worker-mean of x and of x~ and acts on disagreements alone, so we work in an orthonormal
basis ``Q`` of the vectors orthogonal to ``1`` (size ``m = k (n - 1)``, k = 2 for A²CiD² and 1 for gossip). The
second moment ``S = E[Z Z^T]`` then obeys ``dS/dt = K(S)`` with
``K(S) = M S + S M^T + sum_e lambda_e (A_e S A_e^T - S)``, and the consensus distance is ``E (1/n)||P x||^2 =
tr(S_xx) / n``.

* :func:`consensus_decay_rate`: the asymptotic decay rate of the expected consensus distance without gradients:
  minus the largest real part of K's eigenvalues on symmetric matrices.
* :func:`drift_consensus`: the stationary expected consensus distance per coordinate when each worker's
  gradient adds a constant disagreement ``-lr * b_i`` per unit of time to x and x~ (``b`` centred, iid unit
  variance across workers): the mean ``mu`` solves ``K1 mu + d = 0`` (``K1 = M + sum_e lambda_e (A_e - I)``) and
  ``S`` solves ``K(S) + d mu^T + mu d^T = 0``. The steps are treated as a continuous drift (their granularity
  adds terms of order ``lr^2`` per step, the same for every algorithm).
Raises if the dynamics are not mean-square stable (then no stationary value exists).
Cost: ``m^2 x m^2`` dense matrices; meant for n up to about 16.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg

from host.acid.constants import acid_constants, edges, neighbors

__all__ = ["operators", "consensus_decay_rate", "drift_consensus"]


def _basis(n: int) -> np.ndarray:
    """Orthonormal basis (n x (n-1)) of the vectors orthogonal to the all-ones vector."""
    return scipy.linalg.null_space(np.ones((1, n)))


def operators(algo: str, topology: str, n: int, rate_com: float, constants_rate: float | None = None,
              constants: tuple[float, float] | None = None) -> tuple[np.ndarray, list[tuple[float, np.ndarray]]]:
    """``(M, [(lambda_e, A_e), ...])`` in the reduced (disagreement) coordinates. A²CiD²'s ``(eta, alpha~)`` are
    the paper's for ``constants_rate`` (default ``rate_com``), or ``constants`` if given (to explore them)."""
    if algo not in ("acid", "gossip"):
        raise ValueError(f"algo must be 'acid' or 'gossip', got {algo!r}")
    if not rate_com > 0:
        raise ValueError(f"rate_com must be > 0, got {rate_com!r}")
    neigh = neighbors(topology, n)
    degrees = {len(ns) for ns in neigh}
    if len(degrees) != 1:
        raise ValueError("the edge model needs a regular graph")
    lam = rate_com / degrees.pop()
    Q = _basis(n)
    I = np.eye(n)
    if algo == "acid":
        if constants is None:
            k = acid_constants(topology, n, constants_rate or rate_com)
            eta, alpha = k.eta, k.alpha_tilde
        else:
            eta, alpha = constants
        Qh = scipy.linalg.block_diag(Q, Q)
        M = Qh.T @ (eta * np.block([[-I, I], [I, -I]])) @ Qh
    else:
        Qh = Q
        M = np.zeros((n - 1, n - 1))
    ops = []
    for i, j in edges(neigh):
        u = np.zeros(n)
        u[i], u[j] = 1.0, -1.0
        U = np.outer(u, u)
        A = np.block([[I - U / 2, np.zeros((n, n))], [-alpha * U, I]]) if algo == "acid" else I - U / 2
        ops.append((lam, Qh.T @ A @ Qh))
    return M, ops


def _second_moment_operator(M: np.ndarray, ops: list[tuple[float, np.ndarray]]) -> np.ndarray:
    """K as a matrix on vec(S) (row-major vec: vec(A S B^T) = kron(A, B) vec(S))."""
    m = M.shape[0]
    Im = np.eye(m)
    K = np.kron(M, Im) + np.kron(Im, M)
    for lam, A in ops:
        K += lam * (np.kron(A, A) - np.eye(m * m))
    return K


def consensus_decay_rate(algo: str, topology: str, n: int, rate_com: float,
                         constants_rate: float | None = None, constants: tuple[float, float] | None = None) -> float:
    """Asymptotic rate kappa of E[consensus distance] ~ exp(-kappa t) without gradients (time in mean steps)."""
    M, ops = operators(algo, topology, n, rate_com, constants_rate, constants)
    m = M.shape[0]
    K = _second_moment_operator(M, ops)
    w, V = np.linalg.eig(K)
    best = -np.inf
    for k in range(len(w)):
        S = V[:, k].reshape(m, m)
        if np.linalg.norm(S - S.T) < np.linalg.norm(S + S.T):  # symmetric modes only (S is symmetric)
            best = max(best, w[k].real)
    return float(-best)


def drift_consensus(algo: str, topology: str, n: int, rate_com: float, lr: float = 1.0,
                    constants_rate: float | None = None, constants: tuple[float, float] | None = None) -> float:
    """Stationary E[consensus distance] per parameter coordinate under a constant heterogeneous drift (see the
    module docstring); proportional to ``lr^2``."""
    M, ops = operators(algo, topology, n, rate_com, constants_rate, constants)
    m = M.shape[0]
    K1 = M + sum(lam * (A - np.eye(m)) for lam, A in ops)
    # E[d d^T] for d = -lr b (per block, identical in x and x~), b centred iid unit variance: P in full
    # coordinates, the identity in the reduced ones
    blocks = m // (n - 1)
    DD = lr * lr * np.kron(np.ones((blocks, blocks)), np.eye(n - 1))
    K1inv = np.linalg.inv(K1)
    rhs = -(DD @ K1inv.T + K1inv @ DD)  # -(E[d mu^T] + E[mu d^T]), mu = -K1^{-1} d
    K = _second_moment_operator(M, ops)
    if np.linalg.eigvals(K).real.max() >= 0:
        raise ValueError(f"{algo} on {topology}({n}) at rate {rate_com} with these constants is not mean-square "
                         "stable: no stationary consensus distance")
    S = np.linalg.solve(K, -rhs.reshape(-1)).reshape(m, m)
    return float(np.trace(S[: n - 1, : n - 1]) / n)
