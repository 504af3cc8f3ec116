"""Traffic-manager settings (queue depth and rate, link rate, delay and loss): not P4Runtime, so per target.

Reconciliation is full: every setting the file does not name is wanted at the switch's default (queues: the
depth and rate the switch falls back to; links: unlimited rate, no delay, no loss), so removing a setting from
the file and applying puts the default back.

* embedded ``dlcp-switch``: its management service (``switch.daemon.mgmt.MgmtClient``, same gRPC port as P4Runtime
  unless the switch sets ``mgmt_address``); queue and link settings and the queue defaults are read back from
  its statistics, and only what differs is written (a second apply writes nothing).
* BMv2 ``simple_switch_grpc``: ``simple_switch_CLI --thrift-port N`` (``set_queue_depth``, ``set_queue_rate``)
  when the binary is on PATH; otherwise :class:`~controller.errors.TrafficManagerError` naming it. BMv2 cannot
  report queue settings, so every queue of every connected port is written on each apply (the file's value or
  BMv2's default: 64 packets, rate 0 = unlimited). BMv2 has no link emulation (rate in bits/s, delay, loss) and
  no queue statistics: asking for them is an error that says so.

:func:`desired_tm` is the pure part: what a network file wants on one switch; :func:`tm_changes` compares it
with what a switch has.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from typing import Any, Protocol

from .bmv2 import BMV2_CLI, Bmv2CliError, run_cli
from .errors import SwitchUnreachable, TrafficManagerError
from .netfile import LinkProps, Network, SwitchSpec

__all__ = ["QueueSetting", "TmPlan", "TmState", "TmChange", "tm_changes", "read_tm", "desired_tm", "TrafficManager", "EmbeddedTM", "Bmv2TM", "open_tm",
           "apply_tm", "describe_plan", "BMV2_CLI"]



@dataclass(frozen=True)
class QueueSetting:
    depth: int | None = None
    rate_pps: float | None = None


#: BMv2 simple_switch's queue settings when nothing set them (its egress buffers hold 64 packets; rate 0 means
#: no rate limit in its queueing logic).
BMV2_DEFAULT_QUEUE = QueueSetting(64, 0.0)
#: Link settings of a port nothing set: unlimited rate, no delay, no loss.
DEFAULT_LINK = (0.0, 0, 0.0)


@dataclass
class TmPlan:
    """Wanted settings of one switch: link emulation per port, queue settings per (port, priority). Settings
    not given are wanted at the switch's default; ``ports`` and ``priority_queues`` say which queues a switch
    that cannot be read back (BMv2) gets written."""

    links: dict[int, LinkProps]
    queues: dict[tuple[int, int], QueueSetting]
    ports: tuple[int, ...] = ()
    priority_queues: int = 8


@dataclass(frozen=True)
class TmState:
    """What a switch's traffic manager has: (capacity, rate) per (port, priority), (rate_bps, delay_us, loss) per
    port, and the queue setting of queues nothing set."""

    queues: dict[tuple[int, int], tuple[int, float]]
    links: dict[int, tuple[float, int, float]]
    default: QueueSetting


@dataclass(frozen=True)
class TmChange:
    """One write to a traffic manager: a queue's depth and/or rate, or a port's link settings (None: unchanged)."""

    port: int
    priority: int | None = None  # None: a link change
    depth: int | None = None
    rate_pps: float | None = None
    link: LinkProps | None = None

    def line(self) -> str:
        if self.link is not None:
            return _link_line(self.port, self.link)
        return _queue_line(self.port, self.priority, self.depth, self.rate_pps)


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
    if spec.priority_order != "high-first":  # the file's queue q is the target's N-1-q (see state.target_queue)
        count = spec.priority_queues
        queues = {(p, count - 1 - q): v for (p, q), v in queues.items() if q < count}
    return TmPlan(links={p: v for p, v in sorted(links.items())}, queues=dict(sorted(queues.items())),
                  ports=tuple(sorted(ports)), priority_queues=spec.priority_queues)


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
        from switch.daemon.mgmt import MgmtClient

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
            # DEADLINE_EXCEEDED waited the whole timeout; UNAVAILABLE is answered at once (nothing listens)
            return SwitchUnreachable(self.spec.name, self.address, self.timeout if code == "DEADLINE_EXCEEDED" else None,
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

    def current(self) -> TmState:
        """The queue and link settings the switch has now, and its queue defaults."""
        try:
            stats, defaults = self.client.stats_and_defaults()
        except Exception as e:  # noqa: BLE001
            raise self._err("stats", e) from None
        if defaults is None:
            raise TrafficManagerError(f"switch {self.spec.name} management service at {self.address} does not "
                                      f"report its queue defaults (an older dlcp-switch): cannot restore settings "
                                      f"the file no longer names; update the switch")
        queues = {(port, prio): (q.capacity, q.rate_pps) for port, ps in stats.ports.items()
                  for prio, q in ps.queues.items()}
        links = {port: (ps.rate_bps or 0.0, ps.delay_us or 0, ps.loss or 0.0) for port, ps in stats.ports.items()}
        return TmState(queues, links, QueueSetting(defaults.depth, defaults.rate_pps))

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
        try:
            run_cli(self.spec.thrift_port, self.commands, self.timeout)
        except Bmv2CliError as e:
            raise TrafficManagerError(f"switch {self.spec.name}: {e}") from None
        self.commands.clear()

    def close(self) -> None:
        self.flush()


def open_tm(spec: SwitchSpec, timeout: float = 5.0) -> EmbeddedTM | Bmv2TM:
    return EmbeddedTM(spec, timeout) if spec.target == "embedded" else Bmv2TM(spec)


def _queue_line(port: int, prio: int, depth: int | None, rate: float | None) -> str:
    return (f"queue {port}/{prio}:" + (f" depth={depth}" if depth is not None else "")
            + (f" rate_pps={rate:g}" if rate is not None else ""))


def _link_line(port: int, props: LinkProps) -> str:
    return (f"link {port}:" + (f" rate={props.rate_bps:g}bps" if props.rate_bps is not None else "")
            + (f" delay={props.delay_us}us" if props.delay_us is not None else "")
            + (f" loss={props.loss:g}" if props.loss is not None else ""))


def describe_plan(plan: TmPlan) -> list[str]:
    """Every setting of a plan, one line each (``apply --dry-run``)."""
    return ([_queue_line(p, q, v.depth, v.rate_pps) for (p, q), v in plan.queues.items()]
            + [_link_line(p, lp) for p, lp in plan.links.items()])


def tm_changes(plan: TmPlan, current: TmState | None) -> list[TmChange]:
    """What to write so a traffic manager matches ``plan`` exactly (absent settings at the default).

    ``current`` is what the switch has (:meth:`EmbeddedTM.current`); None for a switch that cannot be read back
    (BMv2): then every queue of ``plan.ports`` is written with the file's value or BMv2's default, and the links
    the file sets (BMv2 refuses them)."""
    out: list[TmChange] = []
    if current is None:
        keys = {(p, q) for p in plan.ports for q in range(plan.priority_queues)} | set(plan.queues)
        for key in sorted(keys):
            want = plan.queues.get(key, QueueSetting())
            out.append(TmChange(key[0], key[1],
                                want.depth if want.depth is not None else BMV2_DEFAULT_QUEUE.depth,
                                want.rate_pps if want.rate_pps is not None else BMV2_DEFAULT_QUEUE.rate_pps))
        out += [TmChange(p, link=lp) for p, lp in plan.links.items()
                if lp.rate_bps is not None or lp.delay_us is not None or lp.loss is not None]
        return out
    default = current.default
    for key in sorted(set(current.queues) | set(plan.queues)):
        want = plan.queues.get(key, QueueSetting())
        want_depth = want.depth if want.depth is not None else default.depth
        want_rate = want.rate_pps if want.rate_pps is not None else default.rate_pps
        depth, rate = current.queues.get(key, (default.depth, default.rate_pps))
        if depth != want_depth or rate != want_rate:
            out.append(TmChange(key[0], key[1], want_depth if depth != want_depth else None,
                                want_rate if rate != want_rate else None))
    for port in sorted(set(current.links) | set(plan.links)):
        props = plan.links.get(port, LinkProps())
        want_l = (props.rate_bps if props.rate_bps is not None else DEFAULT_LINK[0],
                  props.delay_us if props.delay_us is not None else DEFAULT_LINK[1],
                  props.loss if props.loss is not None else DEFAULT_LINK[2])
        cur_l = current.links.get(port, DEFAULT_LINK)
        if want_l != cur_l:
            diff = [w if w != c else None for w, c in zip(want_l, cur_l)]
            out.append(TmChange(port, link=LinkProps(diff[0], diff[1], diff[2], None)))
    return out


def read_tm(tm: EmbeddedTM | Bmv2TM) -> TmState | None:
    """What the switch has (None: BMv2, which cannot say)."""
    return tm.current() if isinstance(tm, EmbeddedTM) else None


def apply_tm(plan: TmPlan, tm: EmbeddedTM | Bmv2TM) -> list[str]:
    """Make the switch's traffic manager match ``plan`` (settings it does not name back at their defaults);
    returns a line per write. An embedded switch is read first and only what differs is written."""
    changes = tm_changes(plan, read_tm(tm))
    for ch in changes:
        if ch.link is not None:
            tm.set_link(ch.port, rate_bps=ch.link.rate_bps, delay_us=ch.link.delay_us, loss=ch.link.loss)
        else:
            tm.set_queue(ch.port, ch.priority, depth=ch.depth, rate_pps=ch.rate_pps)
    if isinstance(tm, Bmv2TM):
        tm.flush()
    return [ch.line() for ch in changes]
