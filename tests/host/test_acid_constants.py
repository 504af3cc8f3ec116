"""A²CiD² graph constants against values computed independently here (dense eigendecomposition, closed forms)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from host.acid.constants import acid_constants, chi1, edges, laplacian, neighbors


def _adjacency(kind: str, n: int) -> np.ndarray:
    """The graph written out by hand, independently of ``neighbors``."""
    A = np.zeros((n, n))
    for i in range(n):
        if kind == "ring":
            offs = [1, n - 1]
        elif kind == "exponential":
            offs = [1, 2, 4, n - 1, n - 2, n - 4]
        else:
            offs = list(range(1, n))
        for o in offs:
            A[i, (i + o) % n] = 1.0
    return A


def _reference(kind: str, n: int, rate: float) -> tuple[float, float, float, float]:
    """chi1, chi2, eta, alpha~ by a dense symmetric eigendecomposition of L = rate (I - D^-1 A)."""
    A = _adjacency(kind, n)
    L = rate * (np.eye(n) - A / A.sum(axis=1, keepdims=True))
    lam, V = np.linalg.eigh(L)
    assert abs(lam[0]) < 1e-9 and lam[1] > 1e-9
    pinv = sum(np.outer(V[:, k], V[:, k]) / lam[k] for k in range(1, n))
    c1 = 1.0 / lam[1]
    c2 = 0.0
    for i in range(n):
        for j in range(n):
            if A[i, j]:
                e = np.zeros(n)
                e[i], e[j] = 1.0, -1.0
                c2 = max(c2, 0.5 * e @ pinv @ e)
    return c1, c2, 1.0 / (2.0 * math.sqrt(c1 * c2)), 0.5 * math.sqrt(c1 / c2)


@pytest.mark.parametrize("kind,n,rate", [("ring", 4, 1.0), ("ring", 8, 1.0), ("exponential", 8, 1.0),
                                         ("ring", 8, 2.5), ("exponential", 8, 0.5), ("complete", 6, 1.0)])
def test_constants_match_dense_eigendecomposition(kind, n, rate):
    k = acid_constants(kind, n, rate)
    c1, c2, eta, alpha = _reference(kind, n, rate)
    assert k.chi1 == pytest.approx(c1, rel=1e-9)
    assert k.chi2 == pytest.approx(c2, rel=1e-9)
    assert k.eta == pytest.approx(eta, rel=1e-9)
    assert k.alpha_tilde == pytest.approx(alpha, rel=1e-9)


@pytest.mark.parametrize("n", [4, 8, 16])
def test_ring_closed_form(n):
    """Ring: lambda_2 = r (1 - cos(2 pi / n)); an edge of a ring with conductance r/2 has resistance
    (2/r)(n-1)/n, so chi2 = (n-1)/(n r)."""
    r = 1.0
    k = acid_constants("ring", n, r)
    assert k.chi1 == pytest.approx(1.0 / (r * (1 - math.cos(2 * math.pi / n))), rel=1e-9)
    assert k.chi2 == pytest.approx((n - 1) / (n * r), rel=1e-9)
    # the known values the issue names
    if n == 4:
        assert (k.eta, k.alpha_tilde) == pytest.approx((1 / math.sqrt(3), 1 / math.sqrt(3)), rel=1e-9)


def test_complete_graph_gives_no_momentum_advantage():
    k = acid_constants("complete", 8, 1.0)
    assert k.chi1 == pytest.approx(k.chi2, rel=1e-9)
    assert k.alpha_tilde == pytest.approx(0.5, rel=1e-9)


def test_constants_scale_with_rate():
    a, b = acid_constants("ring", 8, 1.0), acid_constants("ring", 8, 2.0)
    assert b.eta == pytest.approx(2 * a.eta, rel=1e-9)  # chi's halve: eta doubles, alpha~ stays
    assert b.alpha_tilde == pytest.approx(a.alpha_tilde, rel=1e-9)


def test_neighbor_lists():
    assert neighbors("ring", 4) == [[1, 3], [0, 2], [1, 3], [0, 2]]
    assert neighbors("ring", 2) == [[1], [0]]
    assert neighbors("exponential", 8)[0] == [1, 2, 4, 6, 7]
    assert neighbors("complete", 3) == [[1, 2], [0, 2], [0, 1]]
    assert edges(neighbors("ring", 4)) == [(0, 1), (0, 3), (1, 2), (2, 3)]
    assert len(edges(neighbors("exponential", 8))) == 8 * 5 // 2


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="unknown graph topology 'star'"):
        neighbors("star", 4)
    with pytest.raises(ValueError, match="at least 2 workers"):
        neighbors("ring", 1)
    with pytest.raises(ValueError, match="rate_com must be > 0"):
        laplacian(neighbors("ring", 4), 0.0)
    with pytest.raises(ValueError, match="not symmetric"):
        edges([[1], []])
    with pytest.raises(ValueError, match="disconnected"):
        chi1(laplacian([[1], [0], [3], [2]], 1.0))
    with pytest.raises(ValueError, match="not regular"):
        laplacian([[1, 2], [0], [0]], 1.0)
