"""The A²CiD² continuous momentum as pure tensor updates (in place, on flat float tensors).

Each worker keeps the parameters ``x`` (what it trains and communicates) and a companion ``xt`` (x~). Between events
they follow the linear ODE ``dx/dt = eta (xt - x)``, ``dxt/dt = eta (x - xt)``; ``x + xt`` is constant and ``x - xt``
decays as ``exp(-2 eta t)``, so over a time ``dt`` (in units of the mean gradient-step time)::

    x  <- a x + b xt,   xt <- b x + a xt,   a = (1 + e^{-2 eta dt}) / 2,   b = (1 - e^{-2 eta dt}) / 2.

Events (each preceded by mixing up to the event time):

* gradient step: the optimiser's update ``delta`` of x (:func:`sgd_momentum_delta`, momentum SGD) is applied to x
  and to xt alike;
* communication with a peer: ``xt += alpha~ (x_peer - x_sent)`` and ``x += (x_peer - x_sent) / 2``.

The communication update is written with the value ``x_sent`` this worker sent to the peer, not its current x: the
pair's exchange takes time, a local gradient step may land in between, and with this form the pair's sum of x (and
of xt) is preserved exactly whatever happened locally meanwhile (without concurrent steps it is the plain pairwise
average ``x <- (x + x_peer) / 2``). With ``eta = alpha~ = 0`` (no xt) this is plain asynchronous gossip.
"""

from __future__ import annotations

import math

import torch

__all__ = ["mix_coefficients", "mix_", "sgd_momentum_delta", "gradient_update_", "communication_update_"]


def mix_coefficients(eta: float, dt: float) -> tuple[float, float]:
    """``(a, b)`` of the closed-form mixing over ``dt`` (>= 0) time units."""
    if dt < 0:
        raise ValueError(f"mixing over a negative time dt={dt}")
    e = math.exp(-2.0 * eta * dt)
    return (1.0 + e) / 2.0, (1.0 - e) / 2.0


@torch.no_grad()
def mix_(x: torch.Tensor, xt: torch.Tensor, eta: float, dt: float) -> None:
    """Advance the pair (x, xt) by ``dt`` along the mixing ODE, in place."""
    a, b = mix_coefficients(eta, dt)
    if b == 0.0:
        return
    d = x - xt  # x - xt decays by (a - b); x + xt is unchanged
    x.sub_(d, alpha=b)
    xt.add_(d, alpha=b)


@torch.no_grad()
def sgd_momentum_delta(x: torch.Tensor, grad: torch.Tensor, buf: torch.Tensor | None, *, lr: float,
                       momentum: float = 0.0, weight_decay: float = 0.0) -> torch.Tensor:
    """The optimiser: heavy-ball SGD (PyTorch's ``SGD`` without dampening or Nesterov). Updates the momentum
    buffer ``buf`` in place (a zero buffer makes the first step plain SGD, as PyTorch does) and returns the step
    ``delta`` to add to x."""
    g = grad.add(x, alpha=weight_decay) if weight_decay else grad
    if momentum:
        if buf is None:
            raise ValueError("momentum SGD needs a momentum buffer")
        buf.mul_(momentum).add_(g)
        g = buf
    return g.mul(-lr)


@torch.no_grad()
def gradient_update_(x: torch.Tensor, xt: torch.Tensor | None, delta: torch.Tensor) -> None:
    """Apply the optimiser's step ``delta`` to x and (if present) the same step to xt."""
    x.add_(delta)
    if xt is not None:
        xt.add_(delta)


@torch.no_grad()
def communication_update_(x: torch.Tensor, xt: torch.Tensor | None, x_sent: torch.Tensor, x_peer: torch.Tensor,
                          alpha_tilde: float) -> None:
    """Pairwise averaging with a peer: ``xt += alpha~ (x_peer - x_sent)`` then ``x += (x_peer - x_sent) / 2``."""
    diff = x_peer - x_sent
    if xt is not None and alpha_tilde:
        xt.add_(diff, alpha=alpha_tilde)
    x.add_(diff, alpha=0.5)
