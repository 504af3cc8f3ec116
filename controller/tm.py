"""Traffic-manager settings (queue depth and rate, link rate, delay and loss): not P4Runtime, so per target.

* embedded ``dlcp-switch``: its management service (``switch.mgmt.MgmtClient``, same gRPC port as P4Runtime
  unless the switch sets ``mgmt_address``); queue settings are read back from its statistics, so an unchanged
  queue is not written again.
* BMv2 ``simple_switch_grpc``: ``simple_switch_CLI --thrift-port N`` (``set_queue_depth``, ``set_queue_rate``)
  when the binary is on PATH; otherwise :class:`~controller.errors.TrafficManagerError` naming it. BMv2 has no
  link emulation (rate in bits/s, delay, loss) and no queue statistics: asking for them is an error that says so.

:func:`desired_tm` is the pure part: what a network file wants on one switch.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from typing import Any, Protocol

from .errors import SwitchUnreachable, TrafficManagerError
from .netfile import LinkProps, Network, SwitchSpec

__all__ = ["QueueSetting", "TmPlan", "desired_tm", "TrafficManager", "EmbeddedTM", "Bmv2TM", "open_tm",
           "apply_tm", "describe_plan", "BMV2_CLI"]

BMV2_CLI = "simple_switch_CLI"


@dataclass(frozen=True)
class QueueSetting:
    depth: int | None = None
    rate_pps: float | None = None


@dataclass
class TmPlan:
    """Wanted settings of one switch: link emulation per port, queue settings per (port, priority)."""

    links: dict[int, LinkProps]
    queues: dict[tuple[int, int], QueueSetting]


def desired_tm(net: Network, switch: str) -> TmPlan:
    """Link settings of every connected port of ``switch`` and queue settings (a link's ``queue_depth`` for every
    priority of its ports, then the ``queues`` rules in file order, later ones overriding earlier ones)."""
    spec = net.switches[switch]
    links: dict[int, LinkProps] = {}
    queues: dict[tuple[int, int], QueueSetting] = {}
    for port, (kind, what) in net.ports_of(switch).items():
        props = what.link if kind == "host" else what[0].props
        if not props.is_empty():
            links[port] = LinkProps(props.rate_bps, props.delay_us, props.loss, None)
        if props.queue_depth is not None:
            for prio in range(spec.priority_queues):
                queues[(port, prio)] = QueueSetting(props.queue_depth, None)
    ports = set(net.ports_of(switch))
    for r in net.queues:
        if r.switches is not None and switch not in r.switches:
            continue
        for port in sorted(set(r.ports) if r.ports is not None else ports):
            for prio in (r.priorities if r.priorities is not None else range(spec.priority_queues)):
                old = queues.get((port, prio), QueueSetting())
                queues[(port, prio)] = QueueSetting(r.depth if r.depth is not None else old.depth,
                                                    r.rate_pps if r.rate_pps is not None else old.rate_pps)
    return TmPlan(links={p: v for p, v in sorted(links.items())}, queues=dict(sorted(queues.items())))


class TrafficManager(Protocol):
    def set_queue(self, port: int, priority: int | None = None, *, depth: int | None = None,
                  rate_pps: float | None = None) -> None: ...

    def set_link(self, port: int, *, rate_bps: float | None = None, delay_us: int | None = None,
                 loss: float | None = None) -> None: ...

    def stats(self) -> Any: ...

    def close(self) -> None: ...


class EmbeddedTM:
    """The embedded switch's management service."""

    def __init__(self, spec: SwitchSpec, timeout: float = 5.0):
        from switch.mgmt import MgmtClient

        self.spec = spec
        self.timeout = timeout
        self.address = spec.mgmt_address or spec.address
        root = spec.tls.ca.read_bytes() if spec.tls is not None and spec.tls.ca is not None else None
        try:
            self.client = MgmtClient(self.address, device_id=spec.device_id, root_certificates=root, timeout=timeout)
        except Exception as e:  # noqa: BLE001 - whatever the transport raises, say where
            raise self._err("connect", e) from None

    def _err(self, what: str, e: Exception) -> Exception:
        code = getattr(getattr(e, "code", None), "name", "")
        if code in ("UNAVAILABLE", "DEADLINE_EXCEEDED"):
            return SwitchUnreachable(self.spec.name, self.address, self.timeout if code == "DEADLINE_EXCEEDED" else 0.0,
                                     f"management service: {e}")
        return TrafficManagerError(f"switch {self.spec.name} management service at {self.address}: {what} "
                                   f"failed: {e}")

    def set_queue(self, port, priority=None, *, depth=None, rate_pps=None) -> None:
        try:
            self.client.set_queue(port, priority, depth=depth, rate_pps=rate_pps)
        except Exception as e:  # noqa: BLE001
            raise self._err(f"set_queue(port={port}, priority={priority})", e) from None

    def set_link(self, port, *, rate_bps=None, delay_us=None, loss=None) -> None:
        try:
            self.client.set_link(port, rate_bps=rate_bps, delay_us=delay_us, loss=loss)
        except Exception as e:  # noqa: BLE001
            raise self._err(f"set_link(port={port})", e) from None

    def stats(self):
        try:
            return self.client.stats()
        except Exception as e:  # noqa: BLE001
            raise self._err("stats", e) from None

    def close(self) -> None:
        self.client.close()


class Bmv2TM:
    """BMv2's Thrift CLI. Commands are collected and run in one ``simple_switch_CLI`` call by :meth:`flush`."""

    def __init__(self, spec: SwitchSpec, timeout: float = 10.0):
        self.spec = spec
        self.timeout = timeout
        self.cli = shutil.which(BMV2_CLI)
        if self.cli is None:
            raise TrafficManagerError(
                f"switch {spec.name} (target bmv2): {BMV2_CLI} is not on PATH; BMv2 queue settings go through "
                f"its Thrift CLI, which comes with BMv2 (behavioral-model). Install it or remove the queue "
                f"settings for this switch.")
        self.commands: list[str] = []

    def set_queue(self, port, priority=None, *, depth=None, rate_pps=None) -> None:
        where = f"{port}" + (f" {priority}" if priority is not None else "")
        if depth is not None:
            self.commands.append(f"set_queue_depth {int(depth)} {where}")
        if rate_pps is not None:
            self.commands.append(f"set_queue_rate {int(round(rate_pps))} {where}")

    def set_link(self, port, *, rate_bps=None, delay_us=None, loss=None) -> None:
        asked = [n for n, v in (("rate", rate_bps), ("delay", delay_us), ("loss", loss)) if v is not None]
        if asked:
            raise TrafficManagerError(
                f"switch {self.spec.name} (target bmv2) port {port}: BMv2 has no link {', '.join(asked)} "
                f"emulation; shape the link outside the switch (e.g. Mininet TCLink) or use queue rate_pps")

    def stats(self):
        raise TrafficManagerError(f"switch {self.spec.name} (target bmv2): BMv2 reports no queue statistics "
                                  f"through {BMV2_CLI}")

    def flush(self) -> None:
        if not self.commands:
            return
        script = "\n".join(self.commands) + "\n"
        try:
            r = subprocess.run([self.cli, "--thrift-port", str(self.spec.thrift_port)], input=script,
                               capture_output=True, text=True, timeout=self.timeout)
        except subprocess.TimeoutExpired:
            raise TrafficManagerError(f"switch {self.spec.name}: {BMV2_CLI} --thrift-port {self.spec.thrift_port} "
                                      f"did not finish within {self.timeout:g} s") from None
        bad = [ln for ln in (r.stdout + r.stderr).splitlines() if "error" in ln.lower() or "invalid" in ln.lower()]
        if r.returncode != 0 or bad:
            raise TrafficManagerError(f"switch {self.spec.name}: {BMV2_CLI} --thrift-port {self.spec.thrift_port} "
                                      f"failed (exit {r.returncode}): {'; '.join(bad) or r.stderr.strip()}")
        self.commands.clear()

    def close(self) -> None:
        self.flush()


def open_tm(spec: SwitchSpec, timeout: float = 5.0) -> EmbeddedTM | Bmv2TM:
    return EmbeddedTM(spec, timeout) if spec.target == "embedded" else Bmv2TM(spec)


def _queue_line(port: int, prio: int, depth: int | None, rate: float | None) -> str:
    return (f"queue {port}/{prio}:" + (f" depth={depth}" if depth is not None else "")
            + (f" rate_pps={rate:g}" if rate is not None else ""))


def _link_line(port: int, lp: LinkProps) -> str:
    return (f"link {port}:" + (f" rate={lp.rate_bps:g}bps" if lp.rate_bps is not None else "")
            + (f" delay={lp.delay_us}us" if lp.delay_us is not None else "")
            + (f" loss={lp.loss:g}" if lp.loss is not None else ""))


def describe_plan(plan: TmPlan) -> list[str]:
    """Every setting of a plan, one line each (``apply --dry-run``)."""
    return ([_queue_line(p, q, v.depth, v.rate_pps) for (p, q), v in plan.queues.items()]
            + [_link_line(p, lp) for p, lp in plan.links.items()])


def apply_tm(plan: TmPlan, tm: EmbeddedTM | Bmv2TM) -> list[str]:
    """Make the switch's traffic manager match ``plan``; returns a line per setting written.

    Queue settings the switch reports as already in place are skipped. Link settings cannot be read back from
    the management service, so they are (idempotently) re-sent and reported as ``link`` lines."""
    changes: list[str] = []
    current: dict[tuple[int, int], tuple[int, float]] = {}
    if isinstance(tm, EmbeddedTM) and plan.queues:
        st = tm.stats()
        for port, ps in st.ports.items():
            for prio, q in ps.queues.items():
                current[(port, prio)] = (q.capacity, q.rate_pps)
    for (port, prio), q in plan.queues.items():
        cur = current.get((port, prio))
        depth = q.depth if q.depth is not None and (cur is None or cur[0] != q.depth) else None
        rate = q.rate_pps if q.rate_pps is not None and (cur is None or cur[1] != q.rate_pps) else None
        if depth is None and rate is None:
            continue
        tm.set_queue(port, prio, depth=depth, rate_pps=rate)
        changes.append(_queue_line(port, prio, depth, rate))
    for port, lp in plan.links.items():
        if lp.rate_bps is None and lp.delay_us is None and lp.loss is None:
            continue
        tm.set_link(port, rate_bps=lp.rate_bps, delay_us=lp.delay_us, loss=lp.loss)
        changes.append(_link_line(port, lp))
    if isinstance(tm, Bmv2TM):
        tm.flush()
    return changes
