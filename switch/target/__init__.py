"""The embedded v1model target: a compiled program run as BMv2 simple_switch runs it, on a simulated clock.

* :mod:`.v1model`: :class:`Switch` -- loads a P4 program through the front end and the back end, holds its
  tables and externs (addressed as P4Runtime addresses them), injects packets and collects what leaves
  (:class:`Departure`), in simple_switch's packet path.
* :mod:`.tm`: the traffic manager between ingress and egress (priority queues, rates, link delay and loss).

``switch.target.Switch`` is the target's public API (the tests, the benchmarks and the daemon's device use
it), so it is named here; :mod:`switch.daemon` puts it on real interfaces behind P4Runtime.
"""
from .v1model import Departure, Switch

__all__ = ["Departure", "Switch"]
