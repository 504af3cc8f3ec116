"""The continuous momentum's updates: closed-form mixing against a numerical ODE solution, the optimiser step, and
mean preservation of the pairwise communication update."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.integrate import solve_ivp

from host.acid.mixing import (communication_update_, gradient_update_, mix_, mix_coefficients,
                              sgd_momentum_delta)


@pytest.mark.parametrize("eta", [0.05, 0.2893, 1.0, 3.0])
@pytest.mark.parametrize("dt", [0.0, 0.1, 1.0, 4.5])
def test_closed_form_mixing_matches_ode_solution(eta, dt):
    rng = np.random.default_rng(int(eta * 100 + dt * 10))
    x0, xt0 = rng.normal(size=7), rng.normal(size=7)

    def rhs(_t, y):
        x, xt = y[:7], y[7:]
        return np.concatenate([eta * (xt - x), eta * (x - xt)])

    if dt > 0:
        sol = solve_ivp(rhs, (0.0, dt), np.concatenate([x0, xt0]), method="DOP853", rtol=1e-11, atol=1e-12)
        ref_x, ref_xt = sol.y[:7, -1], sol.y[7:, -1]
    else:
        ref_x, ref_xt = x0, xt0
    x, xt = torch.tensor(x0), torch.tensor(xt0)
    mix_(x, xt, eta, dt)
    np.testing.assert_allclose(x.numpy(), ref_x, rtol=1e-8, atol=1e-9)
    np.testing.assert_allclose(xt.numpy(), ref_xt, rtol=1e-8, atol=1e-9)


def test_mixing_composes_and_conserves_the_sum():
    x, xt = torch.randn(50, dtype=torch.float64), torch.randn(50, dtype=torch.float64)
    s0 = (x + xt).clone()
    y, yt = x.clone(), xt.clone()
    mix_(x, xt, 0.7, 0.3)
    mix_(x, xt, 0.7, 0.9)
    mix_(y, yt, 0.7, 1.2)  # the flow property: mixing over 0.3 then 0.9 equals mixing over 1.2
    torch.testing.assert_close(x, y)
    torch.testing.assert_close(xt, yt)
    torch.testing.assert_close(x + xt, s0)
    a, b = mix_coefficients(0.7, 1e6)
    assert (a, b) == pytest.approx((0.5, 0.5))  # long enough: x and xt meet at their mean
    with pytest.raises(ValueError, match="negative time"):
        mix_coefficients(0.7, -1.0)


def test_sgd_momentum_delta_follows_heavy_ball():
    x = torch.tensor([1.0, -2.0])
    buf = torch.zeros(2)
    g1, g2 = torch.tensor([0.5, 1.0]), torch.tensor([-1.0, 2.0])
    d1 = sgd_momentum_delta(x, g1, buf, lr=0.1, momentum=0.9, weight_decay=0.01)
    v1 = g1 + 0.01 * x
    torch.testing.assert_close(d1, -0.1 * v1)
    x2 = x + d1
    d2 = sgd_momentum_delta(x2, g2, buf, lr=0.1, momentum=0.9, weight_decay=0.01)
    torch.testing.assert_close(d2, -0.1 * (0.9 * v1 + g2 + 0.01 * x2))
    torch.testing.assert_close(sgd_momentum_delta(x, g1, None, lr=0.5), -0.5 * g1)
    with pytest.raises(ValueError, match="momentum buffer"):
        sgd_momentum_delta(x, g1, None, lr=0.1, momentum=0.9)


@pytest.mark.parametrize("alpha", [0.0, 0.5, 0.9877])
def test_pairwise_exchange_preserves_the_mean(alpha):
    """Both sides of an exchange apply the update with what they sent and received: the pair's sums of x and of
    x~ are unchanged, and without concurrent steps x becomes the plain pairwise average."""
    g = torch.Generator().manual_seed(3)
    xi, xj = torch.randn(100, generator=g, dtype=torch.float64), torch.randn(100, generator=g, dtype=torch.float64)
    ti, tj = torch.randn(100, generator=g, dtype=torch.float64), torch.randn(100, generator=g, dtype=torch.float64)
    sx, st = xi + xj, ti + tj
    si, sj = xi.clone(), xj.clone()  # what each sends
    communication_update_(xi, ti, si, sj, alpha)
    communication_update_(xj, tj, sj, si, alpha)
    torch.testing.assert_close(xi + xj, sx)
    torch.testing.assert_close(ti + tj, st)
    torch.testing.assert_close(xi, sx / 2)
    torch.testing.assert_close(xj, sx / 2)


def test_exchange_with_a_concurrent_gradient_step_keeps_the_step():
    """A gradient step landing between sending and applying the exchange is neither lost nor halved."""
    xi, xj = torch.randn(10, dtype=torch.float64), torch.randn(10, dtype=torch.float64)
    ti, tj = xi.clone(), xj.clone()
    si, sj = xi.clone(), xj.clone()
    delta = torch.randn(10, dtype=torch.float64)
    gradient_update_(xi, ti, delta)  # local step on i after it sent si
    total = xi + xj
    communication_update_(xi, ti, si, sj, 0.9)
    communication_update_(xj, tj, sj, si, 0.9)
    torch.testing.assert_close(xi + xj, total)
    torch.testing.assert_close(xi, (si + sj) / 2 + delta)


def test_gossip_over_a_ring_preserves_the_global_mean_and_converges():
    """Randomised pairwise exchanges with mixing (A²CiD² on a ring of 8, no gradients): the mean of x + x~ stays,
    and the models reach consensus."""
    from host.acid.constants import acid_constants, neighbors
    n, k = 8, acid_constants("ring", 8, 1.0)
    rng = np.random.default_rng(0)
    x = [torch.randn(5, dtype=torch.float64) for _ in range(n)]
    xt = [v.clone() for v in x]
    mean0 = torch.stack(x).mean(0)
    neigh = neighbors("ring", n)
    for _ in range(400):
        i = int(rng.integers(n))
        j = int(rng.choice(neigh[i]))
        for r in (i, j):
            mix_(x[r], xt[r], k.eta, float(rng.exponential(0.5)))
        si, sj = x[i].clone(), x[j].clone()
        communication_update_(x[i], xt[i], si, sj, k.alpha_tilde)
        communication_update_(x[j], xt[j], sj, si, k.alpha_tilde)
    torch.testing.assert_close((torch.stack(x).mean(0) + torch.stack(xt).mean(0)) / 2, mean0)
    spread = max(float((v - torch.stack(x).mean(0)).norm()) for v in x)
    assert spread < 1e-3
