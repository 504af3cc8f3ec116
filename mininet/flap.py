"""A flapping path: the degraded spine's links (``topology.degraded`` with ``flap_ms``) switched between their
degraded and normal settings every ``flap_ms`` for the whole run, through the controller's traffic-manager calls
(:func:`controller.tm.open_tm`'s ``set_link`` on both ends of every link, each switch's connection opened once
and kept for the run, so a change costs a few calls rather than a connection per call).

Why: under per-packet spraying one slow or lossy path delays or loses a share of every transfer's packets; a path
that comes and goes is the case where a sender's estimate of the path is always stale, and where protected packets
lost in a bad period make a step wait for a retransmission. The run records every change (``path_changes`` in its
results: when, which state, how long the controller took), and a change that fails is recorded with its error
rather than stopping the run.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from .spec import LinkSpec
from .topos import PlanLink

__all__ = ["PathFlapper"]


class PathFlapper:
    """Alternates ``links`` (degraded at start, as programmed) between normal and degraded every ``flap_ms``."""

    def __init__(self, network: Any, links: list[PlanLink], flap_ms: float):
        self.network = network
        self.links = [ln for ln in links if ln.normal is not None]
        self.period_s = flap_ms / 1000.0
        self.changes: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="path-flapper")
        self._t0 = 0.0
        self._managers: dict[str, Any] = {}  # switch -> its traffic-manager connection

    def start(self) -> "PathFlapper":
        self._t0 = time.monotonic()
        self._thread.start()
        return self

    def _manager(self, switch: str) -> Any:
        m = self._managers.get(switch)
        if m is None:
            from controller.tm import open_tm

            spec = self.network.spec
            m = self._managers[switch] = open_tm(spec.switches[switch], spec.connect_timeout)
        return m

    def _apply(self, normal: bool) -> None:
        start = time.monotonic()
        error = None
        try:
            for ln in self.links:
                props: LinkSpec = ln.normal if normal else ln.props
                for sw, port in ((ln.a, ln.a_port), (ln.b, ln.b_port)):
                    self._manager(sw).set_link(port, rate_bps=props.rate, delay_us=props.delay_us,
                                               loss=props.loss)
        except Exception as e:  # noqa: BLE001 - recorded; the run goes on with the path as it is
            error = f"{type(e).__name__}: {e}"
        self.changes.append({"t": start - self._t0, "state": "normal" if normal else "degraded",
                             "took_s": time.monotonic() - start, **({"error": error} if error else {})})

    def _run(self) -> None:
        normal = False
        while not self._stop.wait(self.period_s):
            normal = not normal
            self._apply(normal)

    def stop(self) -> list[dict[str, Any]]:
        """Stop flapping (the path stays as it is) and return the changes made."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        for m in self._managers.values():
            m.close()
        self._managers.clear()
        return self.changes
