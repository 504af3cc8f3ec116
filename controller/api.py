"""The controller as a library: ``Network.from_file(path)``, ``.apply()``, ``.stats()`` and the imperative
operations the CLI exposes (thresholds, priority maps, queues, links, routes, packets).

Every method has an ``async`` form (``*_async``) for callers that run an event loop; the plain form runs it with
``asyncio.run``. Operations on several switches run concurrently, one P4Runtime session per switch, opened for
the operation and closed after it. Errors are :mod:`controller.errors` exceptions.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable, Iterable, TypeVar

import finsy as fy
from finsy.proto import p4d, p4r

from . import netfile, state, tm as tmmod
from .client import (Program, SwitchClient, load_p4info_program, load_program, send_packets,
                     writer_election_id)
from .errors import ControllerError, ProgramError, TrafficManagerError, UsageError
from .netfile import format_mac
from .topology import NextHop, Route, compute_routes, ecmp_groups, router_mac

__all__ = ["Network", "StatsSessions", "ApplyResult", "SwitchApplyResult", "SwitchStats", "PrioCounters", "INGRESS_DROP_REASONS"]

#: Reasons of dlcp.p4's ``ingress_drops`` counter, by index.
INGRESS_DROP_REASONS = ("parser_error", "bad_checksum", "ttl_expired", "no_route", "early_eligible", "hairpin")

T = TypeVar("T")


@dataclass
class SwitchApplyResult:
    switch: str
    pipeline_pushed: bool = False
    inserts: int = 0
    modifies: int = 0
    deletes: int = 0
    updates: list[str] = field(default_factory=list)  # each update, described
    tm_changes: list[str] = field(default_factory=list)
    dry_run: bool = False
    tm_readable: bool = True  # False: BMv2, whose queue settings cannot be read back (tm_changes = all of them)
    #: entries (per table) of tables apply does not manage that the pipeline push cleared (would clear)
    pipeline_clears: dict[str, int] = field(default_factory=dict)
    #: hosts whose frames arrive from another MAC than the file gives them (:meth:`Network.host_mac_mismatches`)
    host_macs: list[str] = field(default_factory=list)

    def pipeline_line(self) -> str | None:
        """What happened (would happen) to the pipeline, for people; None when the switch runs the program."""
        if not self.pipeline_pushed:
            return None
        verb = "would clear" if self.dry_run else "cleared"
        clears = "" if not self.pipeline_clears else (
            f"; replacing it {verb} {sum(self.pipeline_clears.values())} entries of tables dlcpctl does not "
            f"manage: " + ", ".join(f"{t} ({n})" for t, n in self.pipeline_clears.items()))
        return "pipeline: the switch runs another program (or none)" + clears

    @property
    def writes(self) -> int:
        return self.inserts + self.modifies + self.deletes


@dataclass
class ApplyResult:
    switches: dict[str, SwitchApplyResult] = field(default_factory=dict)
    errors: dict[str, ControllerError] = field(default_factory=dict)

    @property
    def writes(self) -> int:
        return sum(r.writes for r in self.switches.values())

    def raise_for_errors(self) -> None:
        for e in self.errors.values():
            raise e


@dataclass
class PrioCounters:
    forwarded_packets: int = 0
    forwarded_bytes: int = 0
    eligible_drops: int = 0
    ecn_marks: int = 0


@dataclass
class SwitchStats:
    """Counters of one switch: the P4 program's (per port and priority, per next hop, ingress drops by reason)
    and, on the embedded target, the traffic manager's (queues, drops by reason, P4Runtime write counts)."""

    switch: str
    time: float
    ports: dict[int, dict[int, PrioCounters]] = field(default_factory=dict)
    nhop_packets: dict[int, tuple[int, int]] = field(default_factory=dict)  # nhop_id (= port) -> (packets, bytes)
    ingress_drops: dict[str, int] = field(default_factory=dict)
    tm: Any = None  # switch.daemon.mgmt.SwitchStats (embedded) or None (BMv2)

    def to_dict(self) -> dict:
        out: dict[str, Any] = {
            "switch": self.switch, "time": self.time,
            "ports": {str(p): {str(q): asdict(c) for q, c in prios.items()} for p, prios in self.ports.items()},
            "nhop_packets": {str(k): {"packets": v[0], "bytes": v[1]} for k, v in self.nhop_packets.items()},
            "ingress_drops": dict(self.ingress_drops),
        }
        if self.tm is not None:
            out["tm"] = {
                "writes": self.tm.writes, "write_updates": self.tm.write_updates,
                "packet_errors": self.tm.packet_errors,
                "ports": {str(p): {"rx_packets": ps.rx_packets, "tx_packets": ps.tx_packets,
                                   "queues": {str(q): asdict(qs) for q, qs in ps.queues.items()}}
                          for p, ps in self.tm.ports.items()},
                "drops": [{"port": p, "priority": q, "reason": r, "count": n}
                          for (p, q, r), n in sorted(self.tm.drops.items())],
            }
        return out


def _row_key(row: dict) -> tuple:
    """Order of ``show tables`` rows: entry priority (high first), then match values (numbers numerically)."""
    vals = []
    for v in row["match"].values():
        parts = str(v).replace("/", ".").replace(":", ".").split(".")
        vals.append(tuple(int(p) if p.isdigit() else 0 for p in parts))
    return (-row.get("priority", 0), tuple(vals))


class Network:
    """A network file bound to its switches."""

    def __init__(self, spec: netfile.Network):
        self.spec = spec
        self._programs: dict[tuple, Program] = {}

    @classmethod
    def from_file(cls, path: str | Path) -> "Network":
        """Load and validate a network file (:class:`~controller.netfile.NetFileError` names key and line)."""
        return cls(netfile.load(path))

    @classmethod
    def from_text(cls, text: str, base: Path | None = None) -> "Network":
        return cls(netfile.loads(text, None, base))

    # -- pure views ----------------------------------------------------------------------------------------------
    @property
    def switches(self) -> list[str]:
        return list(self.spec.switches)

    def router_mac(self, switch: str, port: int) -> str:
        """The MAC of a switch port (hosts can use their port's as a gateway MAC)."""
        return format_mac(router_mac(self.spec, switch, port))

    def routes(self) -> dict[str, list[Route]]:
        return compute_routes(self.spec)

    def program(self, switch: str | None = None) -> Program:
        """The program for a switch: p4c's P4Info and device config when the file names them (``p4info`` /
        ``device_config``), else ``program`` compiled here (BMv2 switches push their ``bmv2_json`` as device
        config)."""
        p4info, config = self.spec.artifacts(switch) if switch else (self.spec.p4info, self.spec.device_config)
        if p4info is not None:
            key: tuple = ("p4c", p4info, config)
            if key not in self._programs:
                self._programs[key] = load_p4info_program(p4info, config)
            return self._programs[key]
        bmv2 = self.spec.switches[switch].bmv2_json if switch else None
        key = ("compile", bmv2)
        if key not in self._programs:
            self._programs[key] = load_program(self.spec.program, self.spec.include_dirs, bmv2)
        return self._programs[key]

    def select(self, switches: Iterable[str] | None) -> list[str]:
        """The named switches (all when ``None``); :class:`UsageError` naming an unknown one."""
        if switches is None:
            return list(self.spec.switches)
        out = list(switches)
        for s in out:
            if s not in self.spec.switches:
                raise UsageError(f"unknown switch {s!r}; the network has: {', '.join(self.spec.switches)}")
        return out

    def client(self, switch: str, *, writer: bool, p4info=None) -> SwitchClient:
        """A session to one switch (not yet open: ``async with``): a writer's election id makes it primary; a
        reader's session has no stream and takes part in no election (:class:`SwitchClient`)."""
        return SwitchClient(self.spec.switches[switch], p4info=p4info,
                            election_id=writer_election_id() if writer else None,
                            timeout=self.spec.connect_timeout)

    async def _each(self, switches: list[str], fn: Callable[[str], Awaitable[T]]) -> tuple[dict[str, T],
                                                                                         dict[str, ControllerError]]:
        results = await asyncio.gather(*(fn(s) for s in switches), return_exceptions=True)
        ok: dict[str, T] = {}
        errors: dict[str, ControllerError] = {}
        for s, r in zip(switches, results):
            if isinstance(r, ControllerError):
                errors[s] = r
            elif isinstance(r, BaseException):
                raise r
            else:
                ok[s] = r
        return ok, errors

    @staticmethod
    def _run(coro: Awaitable[T]) -> T:
        return asyncio.run(coro)  # type: ignore[arg-type]

    # -- apply ---------------------------------------------------------------------------------------------------
    def check_program(self, program: Program) -> None:
        """:class:`ProgramError` unless ``program`` has every table and register ``apply`` programs."""
        schema = program.schema
        missing = [f"table {t}" for t in state.MANAGED_TABLES if schema.tables.get(t) is None]
        missing += [f"register {r}" for r in state.MANAGED_REGISTERS if schema.registers.get(r) is None]
        if missing:
            raise ProgramError(f"{program.path} lacks what dlcpctl programs: {', '.join(missing)} "
                               f"(see docs/p4-program.md)")

    def desired(self, switch: str, actual: Iterable[p4r.Entity] | None = None) -> list[p4r.Entity]:
        """The desired P4Runtime entities of one switch (encoded with its program's P4Info). With ``actual``
        (what the switch holds) equal-cost groups keep the ids they have there (:func:`state.assign_groups`)."""
        program = self.program(switch)
        self.check_program(program)
        schema = fy.P4Schema(program.p4info)
        try:
            groups = None
            if actual is not None:
                groups = state.assign_groups(self.spec, switch, actual, schema)
            return [e.encode(schema) for e in state.desired_entities(self.spec, switch, groups)]
        except (ValueError, KeyError) as e:
            raise ProgramError(f"{program.path}: cannot encode the desired state of {switch}: {e}") from None

    async def read_managed(self, client: SwitchClient) -> list[p4r.Entity]:
        """Everything ``apply`` manages, as the switch has it."""
        schema = client.schema
        filters = [p4r.Entity(table_entry=p4r.TableEntry(table_id=schema.tables[t].id)) for t in state.MANAGED_TABLES]
        filters += [p4r.Entity(table_entry=p4r.TableEntry(table_id=schema.tables[t].id, is_default_action=True))
                    for t in state.PRIORITY_TABLES]
        filters += [p4r.Entity(register_entry=p4r.RegisterEntry(register_id=schema.registers[r].id))
                    for r in state.MANAGED_REGISTERS]
        return await client.read(filters)

    async def reconcile(self, client: SwitchClient, *, dry_run: bool = False, tm: bool = True) -> SwitchApplyResult:
        """Make one switch, on an open session ``c``, match the file: pipeline, tables and registers (written in
        dependency order, one Write per phase of :class:`state.Plan`), traffic manager. With ``dry_run`` nothing
        is written and the result lists the drift."""
        switch = client.spec.name
        program = self.program(switch)
        result = SwitchApplyResult(switch, dry_run=dry_run)
        result.pipeline_pushed = not await client.runs(program)
        if result.pipeline_pushed and program.loaded_by_switch:
            spec = client.spec
            raise ProgramError(f"switch {switch} ({spec.address}, target {spec.target}) does not run the program of "
                               f"{program.path}: a Tofino loads its pipeline from the compiler's output itself, and "
                               f"dlcpctl pushes one only when the switch's device_config names it")
        if result.pipeline_pushed:
            result.pipeline_clears = await client.entries_lost_by_push(program)
            if not dry_run:
                await client.ensure_pipeline(program)
        actual = [] if result.pipeline_pushed and dry_run else await self.read_managed(client)
        desired = self.desired(switch, actual)
        schema = program.schema
        plan = state.diff(desired, actual, managed_tables=[schema.tables[t].id for t in state.MANAGED_TABLES],
                          managed_registers=[schema.registers[r].id for r in state.MANAGED_REGISTERS],
                          ecmp_table=schema.tables["ecmp_nhop"].id)
        result.inserts, result.modifies, result.deletes = plan.inserts, plan.modifies, plan.deletes
        kinds = {p4r.Update.INSERT: "+", p4r.Update.MODIFY: "~", p4r.Update.DELETE: "-"}
        result.updates = [f"{kinds[u.type]} {state.describe_entity(u.entity, schema)}" for u in plan.updates]
        if not dry_run:
            for phase in plan.phases:  # separate Writes: a server may reorder the updates of one
                await client.write(phase)
        if tm:
            result.tm_changes = await asyncio.to_thread(self._tm_sync, switch, dry_run)
            result.tm_readable = self.spec.switches[switch].target == "embedded"
            if result.tm_readable:
                result.host_macs = self.host_mac_mismatches(switch, await asyncio.to_thread(self._tm_stats_sync,
                                                                                            switch))
        return result

    def host_mac_mismatches(self, switch: str, tm_stats) -> list[str]:
        """One line per host of ``switch`` whose frames arrive from another MAC than its ``mac:`` in the file.

        The switch sends frames to a host with the file's MAC as destination; a host whose interface has
        another MAC drops them in its kernel, silently, while the switch counts them as forwarded. The embedded
        switch reports the source MAC of the last frame on each port (``tm_stats``: its management statistics),
        so the mismatch shows as soon as the host has sent anything; before that nothing can be checked."""
        out = []
        for port, (kind, host) in self.spec.ports_of(switch).items():
            port_stats = tm_stats.ports.get(port)
            seen = getattr(port_stats, "last_src_mac", None)
            if kind != "host" or not seen or int(seen.replace(":", ""), 16) == host.mac:
                continue
            want = format_mac(host.mac)
            where = f" ({self.spec.source})" if self.spec.source is not None else ""
            out.append(f"host {host.name} at {switch}:{port} sends from {seen}, but the network file{where} says "
                       f"hosts.{host.name}.mac: {want}: frames to {host.name} leave with {want} and its kernel "
                       f"drops them; give the interface that MAC (ip link set DEV address {want}) or the file "
                       f"the interface's")
        return out

    async def _apply_switch(self, switch: str, dry_run: bool, tm: bool) -> SwitchApplyResult:
        # a dry run (diff) only reads: no election, so it never takes the primary role from a running controller
        async with self.client(switch, writer=not dry_run, p4info=self.program(switch).p4info) as client:
            return await self.reconcile(client, dry_run=dry_run, tm=tm)

    def _tm_sync(self, switch: str, dry_run: bool) -> list[str]:
        """Traffic-manager reconciliation of one switch (blocking: run in a thread)."""
        spec = self.spec.switches[switch]
        plan_tm = tmmod.desired_tm(self.spec, switch)
        if spec.target == "tofino":
            if plan_tm.links or plan_tm.queues:
                raise TrafficManagerError(
                    f"switch {spec.name} (target tofino): its traffic manager (queue depths and rates, strict "
                    f"priority, the red drop limit of eligible packets) is configured through the switch's SDE "
                    f"(BF Runtime tm tables), not by dlcpctl; remove rate, delay, loss, queue_depth and queues "
                    f"rules for its ports (docs/p4-tofino.md)")
            return []
        if spec.target == "bmv2" and not plan_tm.links and not plan_tm.queues and shutil.which(tmmod.BMV2_CLI) is None:
            return []  # nothing asked and no CLI to reset BMv2 with: leave its traffic manager alone
        if dry_run and spec.target == "bmv2":
            return [ch.line() for ch in tmmod.tm_changes(plan_tm, None)]
        manager = tmmod.open_tm(spec, self.spec.connect_timeout)
        try:
            if dry_run:
                return [ch.line() for ch in tmmod.tm_changes(plan_tm, tmmod.read_tm(manager))]
            return tmmod.apply_tm(plan_tm, manager)
        finally:
            if isinstance(manager, tmmod.Bmv2TM):
                manager.commands.clear()  # apply_tm flushed what it wrote; an error leaves nothing half-sent
            manager.close()

    async def apply_async(self, switches: Iterable[str] | None = None, *, dry_run: bool = False, tm: bool = True,
                          check: bool = True) -> ApplyResult:
        """Make the switches match the file: pipeline (when its cookie differs), routes with all equal-cost next
        hops, priority maps, thresholds, load-balancing mode, traffic-manager settings; stale entries removed.

        With ``check`` (default) the first error is raised after every switch has been tried; otherwise errors
        are returned in ``ApplyResult.errors``."""
        selected = self.select(switches)
        for s in selected:  # compile once, before any session: a program error is not a per-switch error
            self.check_program(self.program(s))
        ok, errors = await self._each(selected, lambda s: self._apply_switch(s, dry_run, tm))
        result = ApplyResult(ok, errors)
        if check:
            result.raise_for_errors()
        return result

    def apply(self, switches: Iterable[str] | None = None, *, dry_run: bool = False, tm: bool = True,
              check: bool = True) -> ApplyResult:
        return self._run(self.apply_async(switches, dry_run=dry_run, tm=tm, check=check))

    # -- reading -------------------------------------------------------------------------------------------------
    def _slots(self, switch: str) -> list[int]:
        ports = set(self.spec.ports_of(switch))
        cpu = self.spec.switches[switch].cpu_port
        if cpu is not None:
            ports.add(cpu)
        return sorted(ports)

    async def _stats_switch(self, switch: str, tm: bool) -> SwitchStats:
        async with self.client(switch, writer=False) as client:
            stats = await self.stats_on(client)
        if tm and self.spec.switches[switch].target == "embedded":
            stats.tm = await asyncio.to_thread(self._tm_stats_sync, switch)
        return stats

    async def stats_on(self, client: SwitchClient) -> SwitchStats:
        """The P4 counters of one switch over an open session."""
        switch = client.spec.name
        ports = self._slots(switch)
        stats = SwitchStats(switch, time.time())
        schema = client.schema
        entities: list[p4r.Entity] = []

        def counter(name: str, idx: int) -> None:
            if schema.counters.get(name) is not None:
                entities.append(p4r.Entity(counter_entry=p4r.CounterEntry(counter_id=schema.counters[name].id,
                                                                      index=p4r.Index(index=idx))))
        for p in ports:
            for q in range(state.NUM_PRIOS):
                for name in ("port_forwarded", "eligible_drops", "ecn_marks"):
                    counter(name, state.slot(p, q))
            counter("nhop_packets", p)
        if schema.counters.get("ingress_drops") is not None:
            entities.append(p4r.Entity(counter_entry=p4r.CounterEntry(counter_id=schema.counters["ingress_drops"].id)))
        for e in await client.read(entities):
            entry = e.counter_entry
            known = schema.counters.get(entry.counter_id)
            name = known.alias if known is not None else "?"
            idx, packets, octets = entry.index.index, entry.data.packet_count, entry.data.byte_count
            if name == "ingress_drops":
                reason = INGRESS_DROP_REASONS[idx] if idx < len(INGRESS_DROP_REASONS) else str(idx)
                if idx < len(INGRESS_DROP_REASONS) or packets:
                    stats.ingress_drops[reason] = packets
            elif name == "nhop_packets":
                stats.nhop_packets[idx] = (packets, octets)
            else:
                counters = stats.ports.setdefault(idx // state.NUM_PRIOS, {}).setdefault(idx % state.NUM_PRIOS,
                                                                                PrioCounters())
                if name == "port_forwarded":
                    counters.forwarded_packets, counters.forwarded_bytes = packets, octets
                elif name == "eligible_drops":
                    counters.eligible_drops = packets
                elif name == "ecn_marks":
                    counters.ecn_marks = packets
        return stats

    def stats_sessions(self, switches: Iterable[str] | None = None, *, tm: bool = True) -> "StatsSessions":
        """Sessions kept open for repeated :meth:`StatsSessions.read` calls (``watch``): one P4Runtime session and
        one management channel per switch for as long as the context lasts."""
        return StatsSessions(self, self.select(switches), tm)

    def _tm_stats_sync(self, switch: str):
        manager = tmmod.open_tm(self.spec.switches[switch], self.spec.connect_timeout)
        try:
            return manager.stats()
        finally:
            manager.close()

    async def stats_async(self, switches: Iterable[str] | None = None, *, tm: bool = True) -> dict[str, SwitchStats]:
        ok, errors = await self._each(self.select(switches), lambda s: self._stats_switch(s, tm))
        for e in errors.values():
            raise e
        return ok

    def stats(self, switches: Iterable[str] | None = None, *, tm: bool = True) -> dict[str, SwitchStats]:
        """Counters of every (or the given) switch; see :class:`SwitchStats`."""
        return self._run(self.stats_async(switches, tm=tm))

    async def _tables_switch(self, switch: str) -> dict:
        async with self.client(switch, writer=False) as client:
            schema = client.schema
            tables = sorted(schema.tables, key=lambda t: t.id)
            filters = [p4r.Entity(table_entry=p4r.TableEntry(table_id=t.id)) for t in tables]
            filters += [p4r.Entity(register_entry=p4r.RegisterEntry(register_id=schema.registers[r].id))
                        for r in state.MANAGED_REGISTERS if schema.registers.get(r) is not None]
            entities = await client.read(filters)
            out: dict[str, Any] = {"tables": {t.alias: [] for t in tables}, "registers": {}}
            for e in entities:
                row = state.entity_to_dict(state.canonical(e), schema)
                if "table" in row:
                    out["tables"].setdefault(row.pop("table"), []).append(row)
                elif "register" in row and row["value"]:
                    out["registers"].setdefault(row["register"], {})[str(row["index"])] = row["value"]
            for rows in out["tables"].values():
                rows.sort(key=_row_key)
            return out

    async def tables_async(self, switches: Iterable[str] | None = None) -> dict[str, dict]:
        ok, errors = await self._each(self.select(switches), self._tables_switch)
        for e in errors.values():
            raise e
        return ok

    def tables(self, switches: Iterable[str] | None = None) -> dict[str, dict]:
        """Table entries and non-zero managed registers of each switch, as plain data (``show tables``)."""
        return self._run(self.tables_async(switches))

    # -- imperative changes (until the next apply, which restores the file's state) ------------------------------
    async def _write_switch(self, switch: str,
                            build: Callable[[SwitchClient], Awaitable[list[p4r.Update]]]) -> list[str]:
        async with self.client(switch, writer=True) as client:
            updates = await build(client)
            await client.write(updates)
            kinds = {p4r.Update.INSERT: "+", p4r.Update.MODIFY: "~", p4r.Update.DELETE: "-"}
            return [f"{kinds[u.type]} {state.describe_entity(u.entity, client.schema)}" for u in updates]

    async def _write_many(self, switches: list[str], build) -> dict[str, list[str]]:
        ok, errors = await self._each(switches, lambda s: self._write_switch(s, build(s)))
        for e in errors.values():
            raise e
        return ok

    async def set_threshold_async(self, switches: Iterable[str] | None = None, ports: Iterable[int] | None = None,
                                  priorities: Iterable[int] | None = None, *, drop: int | None = None,
                                  mark: int | None = None) -> dict[str, list[str]]:
        """Write drop/mark thresholds (packets, 0 = off) of (port, priority) slots; ports default to every
        connected port of each switch, priorities to all 8. Only slots whose value differs are written."""
        if drop is None and mark is None:
            raise UsageError("set threshold needs --drop and/or --mark")
        for v in (drop, mark):
            if v is not None and not 0 <= v <= netfile.THRESHOLD_MAX:
                raise UsageError(f"threshold {v} out of range 0..{netfile.THRESHOLD_MAX}")
        prios = list(priorities) if priorities is not None else list(range(state.NUM_PRIOS))
        port_list = list(ports) if ports is not None else None
        selected = self.select(switches)
        if port_list is not None:
            self._check_threshold_ports(selected, port_list)

        def build(switch: str):
            async def updates_for(client: SwitchClient) -> list[p4r.Update]:
                schema = client.schema
                want: dict[tuple[int, int], int] = {}
                for p in (port_list if port_list is not None else list(self.spec.ports_of(switch))):
                    for q in prios:
                        for reg, v in (("drop_threshold", drop), ("mark_threshold", mark)):
                            if v is not None:  # the target's unit (cells on a Tofino), as apply writes it
                                want[(schema.registers[reg].id, state.slot(p, q))] = \
                                    v * self.spec.switches[switch].cells_per_packet
                have = {}
                filters = [p4r.Entity(register_entry=p4r.RegisterEntry(register_id=rid, index=p4r.Index(index=i)))
                           for rid, i in want]
                for e in await client.read(filters):
                    entry = e.register_entry
                    have[(entry.register_id, entry.index.index)] = int.from_bytes(entry.data.bitstring, "big")
                updates = []
                for (rid, i), v in sorted(want.items()):
                    if have.get((rid, i)) != v:
                        entity = p4r.Entity(register_entry=p4r.RegisterEntry(
                            register_id=rid, index=p4r.Index(index=i),
                            data=p4d.P4Data(bitstring=v.to_bytes(4, "big").lstrip(b"\0") or b"\0")))
                        updates.append(p4r.Update(type=p4r.Update.MODIFY, entity=entity))
                return updates
            return updates_for

        return await self._write_many(selected, build)

    def _check_threshold_ports(self, switches: list[str], ports: list[int]) -> None:
        """:class:`UsageError` for a port the network file does not use on a switch: a threshold written there
        acts on nothing the file describes, and the next ``apply`` resets it to 0 without a word."""
        where = f" in {self.spec.source}" if self.spec.source is not None else ""
        for switch in switches:
            known = state.threshold_ports(self.spec, switch)
            cpu = self.spec.switches[switch].cpu_port
            if cpu is not None:
                known.add(cpu)
            for port in ports:
                if port not in known:
                    used = ", ".join(map(str, sorted(known))) or "none"
                    raise UsageError(f"port {port} of switch {switch} is not used by the network file{where} "
                                     f"(ports with thresholds there: {used}); connect it in the file (a host or a "
                                     f"link) or name it in a thresholds rule")

    def set_threshold(self, *a, **kw) -> dict[str, list[str]]:
        return self._run(self.set_threshold_async(*a, **kw))

    async def set_priority_map_async(self, switches: Iterable[str] | None, kind: str, *, dscp: int | None = None,
                                     queue: int | None = None, trust: bool = False, msg_type: int | None = None,
                                     priority: int | None = None, mag_class: int | None = None,
                                     layer: tuple[int, int] | None = None, entry_priority: int | None = None,
                                     delete: bool = False) -> dict[str, list[str]]:
        """Insert, replace (same match) or delete one row of the DSCP or the DLCP priority map."""
        if kind == "dscp":
            if dscp is None or not 0 <= dscp <= 63:
                raise UsageError("set priority-map dscp needs a DSCP value 0..63")
            match = fy.P4TableMatch(dscp=dscp)
            table, prio = "dscp_priority", 0
        elif kind == "dlcp":
            match = fy.P4TableMatch()
            for k, v in (("msg_type", msg_type), ("priority", priority), ("mag_class", mag_class)):
                if v is not None:
                    match[k] = v
            if layer is not None and layer != (0, 0xFFFF):
                match["layer"] = f"{layer[0]}...{layer[1]}"
            table, prio = "dlcp_priority", entry_priority or 0
        else:
            raise UsageError(f"unknown priority map {kind!r} (dscp or dlcp)")
        if not delete:
            if trust == (queue is not None) or (trust and kind == "dscp"):
                raise UsageError("give exactly one of a queue or --trust (dlcp only)")
            if queue is not None and not 0 <= queue <= 7:
                raise UsageError(f"queue {queue} out of range 0..7")
            action = fy.P4TableAction("trust_dlcp_priority") if trust else fy.P4TableAction("set_priority",
                                                                                           prio=queue)

        def build(switch: str):
            async def updates_for(client: SwitchClient) -> list[p4r.Update]:
                table_id = client.schema.tables[table].id
                existing = await client.read([p4r.Entity(table_entry=p4r.TableEntry(table_id=table_id))])
                entry_prio = prio
                if kind == "dlcp" and not entry_prio:
                    entry_prio = max((e.table_entry.priority for e in existing), default=0) + 1
                entry = fy.P4TableEntry(table, match=match, priority=entry_prio, action=None if delete else action)
                encoded = state.canonical(entry.encode(client.schema))
                key = state.entity_key(encoded)
                found = any(state.entity_key(state.canonical(e)) == key for e in existing)
                if delete:
                    if not found:
                        # still send it: the switch's NOT_FOUND names the entry
                        pass
                    return [p4r.Update(type=p4r.Update.DELETE, entity=encoded)]
                return [p4r.Update(type=p4r.Update.MODIFY if found else p4r.Update.INSERT, entity=encoded)]
            return updates_for

        return await self._write_many(self.select(switches), build)

    def set_priority_map(self, *a, **kw) -> dict[str, list[str]]:
        return self._run(self.set_priority_map_async(*a, **kw))

    def set_queue(self, switches: Iterable[str] | None, port: int, priority: int | None = None, *,
                  depth: int | None = None, rate_pps: float | None = None) -> list[str]:
        """Queue capacity (packets) / rate (packets/s) through the target's traffic manager."""
        if depth is None and rate_pps is None:
            raise UsageError("set queue needs --depth and/or --rate-pps")
        out = []
        for s in self.select(switches):
            manager = tmmod.open_tm(self.spec.switches[s], self.spec.connect_timeout)
            try:
                manager.set_queue(port, priority, depth=depth, rate_pps=rate_pps)
            finally:
                manager.close()
            out.append(f"{s}: queue {port}/{'all' if priority is None else priority}"
                       + (f" depth={depth}" if depth is not None else "")
                       + (f" rate_pps={rate_pps:g}" if rate_pps is not None else ""))
        return out

    def set_link(self, switches: Iterable[str] | None, port: int, *, rate_bps: float | None = None,
                 delay_us: int | None = None, loss: float | None = None) -> list[str]:
        """Link rate (bits/s), delay (us) and loss (0..1) of a port through the target's traffic manager."""
        if rate_bps is None and delay_us is None and loss is None:
            raise UsageError("set link needs --rate, --delay and/or --loss")
        out = []
        for s in self.select(switches):
            manager = tmmod.open_tm(self.spec.switches[s], self.spec.connect_timeout)
            try:
                manager.set_link(port, rate_bps=rate_bps, delay_us=delay_us, loss=loss)
            finally:
                manager.close()
            out.append(f"{s}: link {port}" + (f" rate={rate_bps:g}bps" if rate_bps is not None else "")
                       + (f" delay={delay_us}us" if delay_us is not None else "")
                       + (f" loss={loss:g}" if loss is not None else ""))
        return out

    async def route_add_async(self, switch: str, prefix: str, via: list[tuple[int, int | None]]) -> list[str]:
        """Add a route: ``via`` is a list of (port, next-hop MAC or None for the device the file puts on that
        port). Several next hops form a new equal-cost group."""
        net = self._prefix(prefix)
        self.select([switch])
        connected = self.spec.ports_of(switch)
        hops = []
        for port, mac in via:
            if mac is None:
                if port not in connected:
                    raise UsageError(f"port {port} of {switch} connects to nothing in the network file; "
                                          f"give the next-hop MAC as PORT@MAC")
                from .topology import peer_mac
                mac = peer_mac(self.spec, connected[port])
            hops.append(NextHop(port, mac))
        hops = sorted(set(hops))
        if not hops:
            raise UsageError("route add needs at least one --via PORT[@MAC]")

        async def updates_for(client: SwitchClient) -> list[p4r.Update]:
            schema = client.schema
            groups: dict[tuple[NextHop, ...], int] = {}
            if len(hops) > 1:
                ecmp = schema.tables["ecmp_nhop"].id
                members = await client.read([p4r.Entity(table_entry=p4r.TableEntry(table_id=ecmp))])
                _, used = state.groups_on_switch(self.spec, switch, members, schema)
                # a new group, never one a live route uses: the content-derived id, or the next free one
                groups = ecmp_groups([Route(net, tuple(hops), "cli")], None, used, state.group_id_limit(schema))
            entities = state.route_entities(self.spec, switch, [Route(net, tuple(hops), "cli")], groups)
            return [p4r.Update(type=p4r.Update.INSERT, entity=state.canonical(e.encode(schema))) for e in entities]

        return await self._write_switch(switch, updates_for)

    def route_add(self, switch: str, prefix: str, via: list[tuple[int, int | None]]) -> list[str]:
        return self._run(self.route_add_async(switch, prefix, via))

    async def route_del_async(self, switch: str, prefix: str) -> list[str]:
        """Delete the route for ``prefix``, and its equal-cost group's members when no other route uses them."""
        net = self._prefix(prefix)
        self.select([switch])

        async def updates_for(client: SwitchClient) -> list[p4r.Update]:
            lpm, ecmp = client.schema.tables["ipv4_lpm"].id, client.schema.tables["ecmp_nhop"].id
            key_ent = state.canonical(fy.P4TableEntry("ipv4_lpm", match=fy.P4TableMatch(
                dst_addr=f"{net.network_address}/{net.prefixlen}")).encode(client.schema))
            key = state.entity_key(key_ent)
            routes = await client.read([p4r.Entity(table_entry=p4r.TableEntry(table_id=lpm))])
            target = next((state.canonical(e) for e in routes if state.entity_key(state.canonical(e)) == key), None)
            updates = [p4r.Update(type=p4r.Update.DELETE, entity=key_ent)]
            target_action = target.table_entry.action.action if target is not None else None
            if target_action is not None and client.schema.actions[target_action.action_id].alias == "set_ecmp":
                group = target_action.params[0].value
                others = [e for e in routes if state.entity_key(state.canonical(e)) != key
                          and e.table_entry.action.action.action_id == target_action.action_id
                          and state.canonical(e).table_entry.action.action.params[0].value == group]
                if not others:
                    members = await client.read([p4r.Entity(table_entry=p4r.TableEntry(table_id=ecmp))])
                    for member in map(state.canonical, members):
                        if member.table_entry.match[0].exact.value == group:
                            updates.append(p4r.Update(type=p4r.Update.DELETE, entity=state.entry_address(member)))
            return updates

        return await self._write_switch(switch, updates_for)

    def route_del(self, switch: str, prefix: str) -> list[str]:
        return self._run(self.route_del_async(switch, prefix))

    @staticmethod
    def _prefix(prefix: str) -> ipaddress.IPv4Network:
        try:
            return ipaddress.IPv4Network(prefix if "/" in prefix else prefix + "/32", strict=True)
        except ValueError as e:
            raise UsageError(f"invalid IPv4 prefix {prefix!r}: {e}") from None

    # -- packets -------------------------------------------------------------------------------------------------
    async def packet_out_async(self, switch: str, payloads: bytes | list[bytes],
                               metadata: dict[str, int] | None = None) -> None:
        self.select([switch])
        if isinstance(payloads, (bytes, bytearray)):
            payloads = [bytes(payloads)]
        await send_packets(self.spec.switches[switch], list(payloads), metadata, timeout=self.spec.connect_timeout)

    def packet_out(self, switch: str, payloads: bytes | list[bytes], metadata: dict[str, int] | None = None) -> None:
        """Send PacketOut messages (the switch injects each as if received on its CPU port); returns once the
        switch has taken them."""
        self._run(self.packet_out_async(switch, payloads, metadata))

    async def packet_in_async(self, switch: str, count: int, timeout: float,
                              on_packet: Callable[[fy.P4PacketIn], None] | None = None,
                              ready: Callable[[], None] | None = None) -> list[fy.P4PacketIn]:
        """Collect ``count`` PacketIns (0 = until ``timeout``); :class:`~controller.errors.PacketTimeout` when
        fewer arrive in ``timeout`` seconds. ``ready`` is called once the session listens."""
        from .errors import PacketTimeout

        self.select([switch])
        got: list[fy.P4PacketIn] = []
        async with self.client(switch, writer=True) as client:
            client.require_primary("PacketIn")

            async def collect() -> None:
                packets = client.packet_in()
                first = asyncio.ensure_future(packets.__anext__())
                await asyncio.sleep(0)  # the iterator has registered its queue once it waits
                if ready is not None:
                    ready()
                pkt = await first
                while True:
                    got.append(pkt)
                    if on_packet is not None:
                        on_packet(pkt)
                    if count and len(got) >= count:
                        return
                    pkt = await packets.__anext__()

            try:
                await asyncio.wait_for(collect(), timeout)
            except asyncio.TimeoutError:
                if count:
                    raise PacketTimeout(f"switch {switch}: {len(got)} of {count} PacketIn messages arrived within "
                                        f"{timeout:g} s") from None
        return got

    def packet_in(self, switch: str, count: int = 1, timeout: float = 10.0,
                  on_packet: Callable[[fy.P4PacketIn], None] | None = None) -> list[fy.P4PacketIn]:
        return self._run(self.packet_in_async(switch, count, timeout, on_packet))



class StatsSessions:
    """One read-only P4Runtime session (and, embedded target, one management channel) per switch, opened once
    and read many times (``dlcpctl watch``); use ``async with``. A failure closes everything and raises."""

    def __init__(self, net: Network, switches: list[str], tm: bool):
        self.net, self.switches, self.tm = net, switches, tm
        self._stack: contextlib.AsyncExitStack | None = None
        self._clients: dict[str, SwitchClient] = {}
        self._tms: dict[str, tmmod.EmbeddedTM] = {}

    async def __aenter__(self) -> "StatsSessions":
        self._stack = contextlib.AsyncExitStack()
        try:
            clients = [self.net.client(s, writer=False) for s in self.switches]
            opened = await asyncio.gather(*(self._stack.enter_async_context(c) for c in clients),
                                          return_exceptions=True)
            for outcome in opened:
                if isinstance(outcome, BaseException):
                    raise outcome
            self._clients = dict(zip(self.switches, clients))
            for s in self.switches:
                spec = self.net.spec.switches[s]
                if self.tm and spec.target == "embedded":
                    manager = tmmod.EmbeddedTM(spec, self.net.spec.connect_timeout)
                    self._stack.callback(manager.close)
                    self._tms[s] = manager
        except BaseException:
            await self._stack.aclose()
            raise
        return self

    async def __aexit__(self, *exc) -> None:
        if self._stack is not None:
            await self._stack.aclose()

    async def read(self) -> dict[str, SwitchStats]:
        """Counters of every switch now (P4 counters and traffic-manager statistics)."""
        stats = await asyncio.gather(*(self.net.stats_on(self._clients[s]) for s in self.switches))
        out = dict(zip(self.switches, stats))
        for s, manager in self._tms.items():
            out[s].tm = await asyncio.to_thread(manager.stats)
        return out
