"""Desired switch state as P4Runtime entities, and the minimal updates that turn read-back state into it.

:func:`desired_entities` turns one switch of a :class:`~controller.netfile.Network` into finsy entities for the
tables and registers of ``p4src/dlcp.p4`` (names as in ``docs/p4-program.md``):

* ``ipv4_lpm``: a /32 per host (and each static route) -> ``set_nhop(dmac, smac, port, nhop_id)`` for one next
  hop, ``set_ecmp(group, size)`` for several; ``ecmp_nhop`` (group, index 0..size-1) -> ``set_nhop``.
  ``nhop_id`` is the egress port, so the ``nhop_packets`` counter counts packets per next-hop port.
* ``dlcp_priority``: one ternary/range entry per rule of the DLCP priority map (first rule = highest entry
  priority); ``dscp_priority``: one exact entry per DSCP.
* registers ``drop_threshold``/``mark_threshold`` at index ``port * 8 + priority``, ``class_drop_threshold`` at
  index magnitude class (0..7) and ``lb_mode[0]``.

:func:`diff` compares canonical forms (P4Runtime's shortest byte strings, match fields by id) of the desired
entities and of what the switch returned, and yields INSERT/MODIFY/DELETE updates only for what differs, so a
second apply of the same file writes nothing. Register indexes the file does not set are wanted at 0, and the
priority maps' default actions at the lowest queue. The updates come as a :class:`Plan` of dependency phases,
each meant for a Write of its own (a server may reorder the updates inside one).

ECMP group ids are stable (:func:`assign_groups`): a next-hop set the switch already holds as a complete group
keeps its id there; a new set gets an id derived from its content (:func:`topology.group_hash_id`), never one
still in use. Queue numbers are the file's ("higher = more urgent"); :func:`target_queue` mirrors them for a
target that serves queue 0 first (``priority_order: low-first``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

import finsy as fy
from finsy.proto import p4r

from .netfile import LB_MODES, Network, SwitchSpec, ThresholdRule
from .topology import MAX_GROUP_ID, NextHop, Route, compute_routes, ecmp_groups, router_mac

__all__ = ["MANAGED_TABLES", "MANAGED_REGISTERS", "PRIORITY_TABLES", "NUM_PRIOS", "slot", "target_queue", "desired_entities", "threshold_values",
           "canonical", "entity_key", "diff", "Plan", "groups_on_switch", "assign_groups", "group_id_limit", "describe_entity", "route_entities",
           "entity_to_dict", "format_value"]

MANAGED_TABLES = ("ipv4_lpm", "ecmp_nhop", "dlcp_priority", "dscp_priority")
MANAGED_REGISTERS = ("drop_threshold", "mark_threshold", "class_drop_threshold", "lb_mode")
#: Tables whose default action the controller manages too (``set_priority`` of the lowest queue).
PRIORITY_TABLES = ("dlcp_priority", "dscp_priority")
NUM_PRIOS = 8  # the program's (port, priority) index is port * 8 + priority


def slot(port: int, prio: int) -> int:
    """Register/counter index of a (port, priority) pair in dlcp.p4."""
    return port * NUM_PRIOS + prio


def target_queue(spec: SwitchSpec, queue: int) -> int | None:
    """The queue number the switch gets for the file's ``queue`` (file: higher = more urgent). A ``low-first``
    target (queue 0 served first, as in some BMv2 versions) gets N-1-queue of its N priority queues; None when
    that does not exist there."""
    if spec.priority_order == "high-first":
        return queue
    reversed_queue = spec.priority_queues - 1 - queue
    return reversed_queue if reversed_queue >= 0 else None


# ---- desired state ----------------------------------------------------------------------------------------------


def _nhop_action(net: Network, switch: str, nh: NextHop) -> fy.P4TableAction:
    return fy.P4TableAction("set_nhop", dmac=nh.dmac, smac=router_mac(net, switch, nh.port), port=nh.port,
                            nhop_id=nh.port)


def route_entities(net: Network, switch: str, routes: list[Route],
                   groups: dict[tuple[NextHop, ...], int]) -> list[fy.P4TableEntry]:
    """``ipv4_lpm`` entries for ``routes`` and ``ecmp_nhop`` members for ``groups``."""
    out = []
    for nhs, gid in sorted(groups.items(), key=lambda kv: kv[1]):
        for i, nh in enumerate(nhs):
            out.append(fy.P4TableEntry("ecmp_nhop", match=fy.P4TableMatch(ecmp_group=gid, ecmp_index=i),
                                       action=_nhop_action(net, switch, nh)))
    for r in routes:
        match = fy.P4TableMatch(dst_addr=f"{r.prefix.network_address}/{r.prefix.prefixlen}")
        if len(r.nexthops) == 1:
            action = _nhop_action(net, switch, r.nexthops[0])
        else:
            action = fy.P4TableAction("set_ecmp", group=groups[r.nexthops], size=len(r.nexthops))
        out.append(fy.P4TableEntry("ipv4_lpm", match=match, action=action))
    return out


def threshold_ports(net: Network, switch: str) -> set[int]:
    """The ports of a switch whose thresholds the file sets: every connected port and every port a threshold rule
    for the switch names (``apply`` resets the thresholds of every other port to 0)."""
    ports = set(net.ports_of(switch))
    for r in net.thresholds:
        if r.ports and _selects(r.switches, switch):
            ports.update(r.ports)
    return ports


def threshold_values(net: Network, switch: str) -> dict[tuple[str, int], int]:
    """Non-zero register values {(register, index): value} of the drop/mark thresholds of one switch, and of its
    per magnitude class drop thresholds (index: the class).

    Slots covered: every priority of every connected port, plus any (port, priority) a rule names explicitly.
    Rules apply in file order, later ones overriding earlier ones, field by field. Values are in the target's unit:
    the file's packets, times ``cells_per_packet`` on a Tofino (whose queue depths count cells)."""
    ports = threshold_ports(net, switch)
    values: dict[tuple[str, int], int] = {}
    spec = net.switches[switch]
    for port in sorted(ports):
        for prio in range(NUM_PRIOS):
            tq = target_queue(spec, prio)
            if tq is None:
                continue
            drop = mark = 0
            for r in net.thresholds:
                if _rule_matches(r, switch, port, prio):
                    drop = r.drop if r.drop is not None else drop
                    mark = r.mark if r.mark is not None else mark
            if drop:
                values[("drop_threshold", slot(port, tq))] = drop * spec.cells_per_packet
            if mark:
                values[("mark_threshold", slot(port, tq))] = mark * spec.cells_per_packet
    by_class: dict[int, int] = {}
    for rule in net.class_thresholds:
        if _selects(rule.switches, switch):
            for c in rule.classes:
                by_class[c] = rule.drop
    for c, drop in by_class.items():
        if drop:
            values[("class_drop_threshold", c)] = drop * spec.cells_per_packet
    return values


def _selects(selected: tuple | None, value: object) -> bool:
    return selected is None or value in selected


def _rule_matches(rule: ThresholdRule, switch: str, port: int, prio: int) -> bool:
    return _selects(rule.switches, switch) and _selects(rule.ports, port) and _selects(rule.priorities, prio)


def desired_entities(net: Network, switch: str,
                     groups: dict[tuple[NextHop, ...], int] | None = None) -> list[fy.P4Entity]:
    """Everything ``apply`` wants on one switch (tables and non-zero registers), as finsy entities.

    ``groups`` are the ECMP group ids to use (:func:`assign_groups`, which keeps the ids the switch holds);
    without them every group gets its content-derived id."""
    routes = compute_routes(net)[switch]
    if groups is None:
        groups = ecmp_groups(routes)
    out: list[fy.P4Entity] = list(route_entities(net, switch, routes, groups))
    spec = net.switches[switch]
    lowest = target_queue(spec, 0) or 0

    def set_prio(q: int) -> fy.P4TableAction:
        switch_queue = target_queue(spec, q)
        return fy.P4TableAction("set_priority", prio=lowest if switch_queue is None else switch_queue)

    nranks = max((r.rank for r in net.dlcp_rules), default=-1) + 1
    for r in net.dlcp_rules:
        match = fy.P4TableMatch()
        if r.msg_type is not None:
            match["msg_type"] = r.msg_type
        if r.mag_class is not None:
            match["mag_class"] = r.mag_class
        if r.layer is not None and r.layer != (0, 0xFFFF):  # the full range is "don't care" (omitted on read)
            match["layer"] = f"{r.layer[0]}...{r.layer[1]}"
        if r.queue is None and spec.priority_order != "high-first":
            # trust on a low-first target: the sender's priority p means queue N-1-p there, one entry per p
            for p in ([r.priority] if r.priority is not None else range(spec.priority_queues)):
                with_prio = fy.P4TableMatch(match, priority=p)
                out.append(fy.P4TableEntry("dlcp_priority", match=with_prio, action=set_prio(p),
                                           priority=nranks - r.rank))
            continue
        if r.priority is not None:
            match["priority"] = r.priority
        action = fy.P4TableAction("trust_dlcp_priority") if r.queue is None else set_prio(r.queue)
        out.append(fy.P4TableEntry("dlcp_priority", match=match, action=action, priority=nranks - r.rank))
    for dscp, q in sorted(net.dscp_map.items()):
        out.append(fy.P4TableEntry("dscp_priority", match=fy.P4TableMatch(dscp=dscp), action=set_prio(q)))
    for table in PRIORITY_TABLES:  # what matches no row: the lowest queue, whichever number that is there
        out.append(fy.P4TableEntry(table, action=fy.P4TableAction("set_priority", prio=lowest),
                                   is_default_action=True))
    for (reg, idx), v in sorted(threshold_values(net, switch).items()):
        out.append(fy.P4RegisterEntry(reg, index=idx, data=v))
    lb_mode = LB_MODES[net.switches[switch].lb_mode]
    if lb_mode:
        out.append(fy.P4RegisterEntry("lb_mode", index=0, data=lb_mode))
    return out


def groups_on_switch(net: Network, switch: str, actual: Iterable[p4r.Entity],
                     schema: fy.P4Schema) -> tuple[dict[tuple[NextHop, ...], int], set[int]]:
    """The complete ECMP groups a switch holds, as {next-hop set: group id}, and every group id in use.

    A group counts as complete when its members are exactly indexes 0..n-1 and each is the ``set_nhop`` this
    controller writes for its next hop; partial or foreign groups are only "in use" (a new group never takes
    their id, and the diff deletes them once no route needs them)."""
    ecmp = schema.tables["ecmp_nhop"]
    table = ecmp.id
    fields = {f.alias: f.id for f in ecmp.match_fields}
    members: dict[int, dict[int, p4r.Entity]] = {}
    for e in actual:
        if e.WhichOneof("entity") != "table_entry" or e.table_entry.table_id != table \
                or e.table_entry.is_default_action:
            continue
        entry = canonical(e)
        match = {f.field_id: int.from_bytes(f.exact.value, "big") for f in entry.table_entry.match}
        members.setdefault(match.get(fields["ecmp_group"], 0), {})[match.get(fields["ecmp_index"], 0)] = entry
    existing: dict[tuple[NextHop, ...], int] = {}
    for gid in sorted(members):
        by_index = members[gid]
        if set(by_index) != set(range(len(by_index))) or len(by_index) < 2:
            continue
        hops = []
        for i in range(len(by_index)):
            act = by_index[i].table_entry.action.action
            action = schema.actions.get(act.action_id)
            if action is None or action.alias != "set_nhop":
                break
            vals = {action.params[p.param_id].name: int.from_bytes(p.value, "big") for p in act.params
                    if action.params.get(p.param_id) is not None}
            hops.append(NextHop(vals.get("port", -1), vals.get("dmac", -1)))
        else:
            key = tuple(hops)
            if key == tuple(sorted(set(key))) and key not in existing:
                want = [canonical(m.encode(schema)) for m in route_entities(net, switch, [], {key: gid})]
                if all(w.SerializeToString(deterministic=True) == by_index[i].SerializeToString(deterministic=True)
                       for i, w in enumerate(want)):
                    existing[key] = gid
    return existing, set(members)


def group_id_limit(schema: fy.P4Schema) -> int:
    """Largest usable ECMP group id of a program: below the size of its per-group ``spray_position`` register
    when it has one (dlcp.p4: 1024 entries), else what ``set_ecmp``'s ``group`` parameter can hold."""
    spray = schema.registers.get("spray_position")
    if spray is not None and spray.size > 1:
        return spray.size - 1
    set_ecmp = schema.actions.get("set_ecmp")
    if set_ecmp is not None:
        group = set_ecmp.params.get("group")
        return (1 << (group.bitwidth if group is not None else 16)) - 1
    return MAX_GROUP_ID


def assign_groups(net: Network, switch: str, actual: Iterable[p4r.Entity], schema: fy.P4Schema,
                  max_id: int = MAX_GROUP_ID) -> dict[tuple[NextHop, ...], int]:
    """ECMP group ids for the desired routes of one switch, keeping the ids of groups already on it."""
    existing, used = groups_on_switch(net, switch, actual, schema)
    return ecmp_groups(compute_routes(net)[switch], existing, used, min(max_id, group_id_limit(schema)))


# ---- canonical forms and diffing ---------------------------------------------------------------------------------


def _strip(data: bytes) -> bytes:
    """P4Runtime's canonical byte string: no leading zero bytes, at least one byte."""
    stripped = data.lstrip(b"\0")
    return stripped if stripped else b"\0"


def canonical(e: p4r.Entity) -> p4r.Entity:
    """A copy of ``e`` with byte strings in canonical form and match fields ordered by field id."""
    copy = p4r.Entity()
    copy.CopyFrom(e)
    kind = copy.WhichOneof("entity")
    if kind == "table_entry":
        entry = copy.table_entry
        fields = sorted(entry.match, key=lambda f: f.field_id)
        for f in fields:
            match_type = f.WhichOneof("field_match_type")
            if match_type == "exact":
                f.exact.value = _strip(f.exact.value)
            elif match_type == "lpm":
                f.lpm.value = _strip(f.lpm.value)
            elif match_type == "ternary":
                f.ternary.value = _strip(f.ternary.value)
                f.ternary.mask = _strip(f.ternary.mask)
            elif match_type == "range":
                f.range.low = _strip(f.range.low)
                f.range.high = _strip(f.range.high)
            elif match_type == "optional":
                f.optional.value = _strip(f.optional.value)
        del entry.match[:]
        entry.match.extend(fields)
        if entry.action.HasField("action"):
            for p in entry.action.action.params:
                p.value = _strip(p.value)
            params = sorted(entry.action.action.params, key=lambda p: p.param_id)
            del entry.action.action.params[:]
            entry.action.action.params.extend(params)
        entry.ClearField("counter_data")
        entry.ClearField("meter_counter_data")
        entry.ClearField("time_since_last_hit")
    elif kind == "register_entry":
        data = copy.register_entry.data
        if data.WhichOneof("data") == "bitstring":
            data.bitstring = _strip(data.bitstring)
    return copy


def entity_key(e: p4r.Entity) -> tuple:
    """Identity of an entity (what INSERT/DELETE address): table + match + priority, or register + index."""
    kind = e.WhichOneof("entity")
    if kind == "table_entry":
        entry = e.table_entry
        if entry.is_default_action:
            return ("default", entry.table_id)
        match = tuple(f.SerializeToString(deterministic=True) for f in entry.match)
        return ("table", entry.table_id, match, entry.priority)
    if kind == "register_entry":
        return ("register", e.register_entry.register_id, e.register_entry.index.index)
    raise ValueError(f"unmanaged entity kind {kind!r}")


def entry_address(e: p4r.Entity) -> p4r.Entity:
    """Table entry ``e`` reduced to what addresses it (table, match, priority): what a DELETE carries."""
    address = p4r.Entity()
    address.table_entry.table_id = e.table_entry.table_id
    address.table_entry.match.extend(e.table_entry.match)
    address.table_entry.priority = e.table_entry.priority
    return address


def _value(e: p4r.Entity) -> bytes:
    kind = e.WhichOneof("entity")
    if kind == "table_entry":
        return e.table_entry.action.SerializeToString(deterministic=True)
    return e.register_entry.data.SerializeToString(deterministic=True)


@dataclass
class Plan:
    """Updates for one switch in dependency order, as phases that go to the switch in separate Write calls.

    P4Runtime lets a server apply the updates of one WriteRequest in any order, so an update that needs another
    in place must be in a later Write: (1) ECMP members inserted or changed, (2) every other insert and modify
    (routes then point at complete groups), (3) deletes of routes and other entries, (4) deletes of ECMP members
    (no route uses them any more). Within a phase no update depends on another."""

    phases: list[list[p4r.Update]] = field(default_factory=list)

    @property
    def updates(self) -> list[p4r.Update]:
        return [u for ph in self.phases for u in ph]

    def count(self, kind: int) -> int:
        return sum(1 for u in self.updates if u.type == kind)

    @property
    def inserts(self) -> int:
        return self.count(p4r.Update.INSERT)

    @property
    def modifies(self) -> int:
        return self.count(p4r.Update.MODIFY)

    @property
    def deletes(self) -> int:
        return self.count(p4r.Update.DELETE)

    def __len__(self) -> int:
        return sum(len(ph) for ph in self.phases)


def diff(desired: Iterable[p4r.Entity], actual: Iterable[p4r.Entity], *, managed_tables: Iterable[int],
         managed_registers: Iterable[int], ecmp_table: int | None = None) -> Plan:
    """Minimal updates that make ``actual`` (read back from a switch) equal ``desired``.

    Table entries of ``managed_tables`` that are not desired are deleted; register indexes of
    ``managed_registers`` that are not desired are reset to 0 (only if they are not 0 already)."""
    managed_tables = set(managed_tables)
    managed_registers = set(managed_registers)
    want = {}
    for e in desired:
        canon = canonical(e)
        key = entity_key(canon)
        if key in want:
            raise ValueError(f"desired state holds the same entity twice: {key}")
        want[key] = canon
    have: dict[tuple, p4r.Entity] = {}
    for e in actual:
        kind = e.WhichOneof("entity")
        if kind == "register_entry":
            # fast path (thousands per switch): compare a zero value without building a canonical copy
            register = e.register_entry
            if register.register_id not in managed_registers:
                continue
            key = ("register", register.register_id, register.index.index)
            if key not in want and not register.data.bitstring.strip(b"\0"):
                continue  # not wanted and already 0: nothing to do, nothing to keep
            have[key] = canonical(e)
        elif kind == "table_entry":
            if e.table_entry.table_id not in managed_tables:
                continue
            canon = canonical(e)
            key = entity_key(canon)
            if key[0] == "default" and key not in want:
                continue  # a default action the file does not manage
            have[key] = canon

    inserts: list[p4r.Update] = []
    modifies: list[p4r.Update] = []
    deletes: list[p4r.Update] = []
    for key, wanted in want.items():
        held = have.get(key)
        if held is None:
            if key[0] in ("register", "default"):
                modifies.append(p4r.Update(type=p4r.Update.MODIFY, entity=wanted))
            else:
                inserts.append(p4r.Update(type=p4r.Update.INSERT, entity=wanted))
        elif _value(held) != _value(wanted):
            modifies.append(p4r.Update(type=p4r.Update.MODIFY, entity=wanted))
    for key, held in have.items():
        if key in want:
            continue
        if key[0] == "register":
            if held.register_entry.data.bitstring.strip(b"\0"):
                zeroed = p4r.Entity()
                zeroed.register_entry.register_id = held.register_entry.register_id
                zeroed.register_entry.index.index = held.register_entry.index.index
                zeroed.register_entry.data.bitstring = b"\0"
                modifies.append(p4r.Update(type=p4r.Update.MODIFY, entity=zeroed))
        else:
            deletes.append(p4r.Update(type=p4r.Update.DELETE, entity=entry_address(held)))

    def is_ecmp(u: p4r.Update) -> bool:
        return ecmp_table is not None and u.entity.WhichOneof("entity") == "table_entry" \
            and u.entity.table_entry.table_id == ecmp_table

    phases = [[u for u in inserts + modifies if is_ecmp(u)], [u for u in inserts + modifies if not is_ecmp(u)],
              [u for u in deletes if not is_ecmp(u)], [u for u in deletes if is_ecmp(u)]]
    return Plan([ph for ph in phases if ph])


def format_value(name: str, width: int, data: bytes) -> str | int:
    """A field or parameter value for people: MACs for 48-bit values, dotted quads for 32-bit ``*addr``."""
    value = int.from_bytes(data, "big")
    if width == 48:
        return ":".join(f"{b:02x}" for b in value.to_bytes(6, "big"))
    if width == 32 and name.lower().endswith("addr"):
        return ".".join(str(b) for b in value.to_bytes(4, "big"))
    return value


def entity_to_dict(e: p4r.Entity, schema: fy.P4Schema) -> dict:
    """A table or register entry as plain JSON-able data (``show --json``), named by the program's ``schema``
    (ids it does not know are shown as numbers)."""
    kind = e.WhichOneof("entity")
    if kind == "table_entry":
        entry = e.table_entry
        table = schema.tables.get(entry.table_id)
        tname = table.alias if table is not None else str(entry.table_id)
        match: dict[str, object] = {}
        for f in sorted(entry.match, key=lambda f: f.field_id):
            field = table.match_fields.get(f.field_id) if table is not None else None
            fname, width = (field.alias, field.bitwidth) if field is not None else (str(f.field_id), 0)
            match_type = f.WhichOneof("field_match_type")
            if match_type == "exact":
                match[fname] = format_value(fname, width, f.exact.value)
            elif match_type == "lpm":
                match[fname] = f"{format_value(fname, width, f.lpm.value)}/{f.lpm.prefix_len}"
            elif match_type == "ternary":
                val, mask = format_value(fname, width, f.ternary.value), int.from_bytes(f.ternary.mask, "big")
                match[fname] = val if mask == (1 << width) - 1 else f"{val}&&&{mask:#x}"
            elif match_type == "range":
                match[fname] = f"{int.from_bytes(f.range.low, 'big')}..{int.from_bytes(f.range.high, 'big')}"
            elif match_type == "optional":
                match[fname] = format_value(fname, width, f.optional.value)
        out: dict[str, object] = {"table": tname, "match": match}
        if entry.priority:
            out["priority"] = entry.priority
        if entry.is_default_action:
            out["default"] = True
        if entry.action.HasField("action"):
            act = schema.actions.get(entry.action.action.action_id)
            out["action"] = act.alias if act is not None else str(entry.action.action.action_id)
            params = {}
            for p in entry.action.action.params:
                param = act.params.get(p.param_id) if act is not None else None
                pname, width = (param.name, param.bitwidth) if param is not None else (str(p.param_id), 0)
                params[pname] = format_value(pname, width, p.value)
            out["params"] = params
        return out
    if kind == "register_entry":
        entry = e.register_entry
        reg = schema.registers.get(entry.register_id)
        rname = reg.alias if reg is not None else str(entry.register_id)
        return {"register": rname, "index": entry.index.index, "value": int.from_bytes(entry.data.bitstring, "big")}
    if kind == "counter_entry":
        entry = e.counter_entry
        ctr = schema.counters.get(entry.counter_id)
        cname = ctr.alias if ctr is not None else str(entry.counter_id)
        return {"counter": cname, "index": entry.index.index, "packets": entry.data.packet_count,
                "bytes": entry.data.byte_count}
    return {"entity": kind}


def describe_entity(e: p4r.Entity, schema: fy.P4Schema) -> str:
    """One line naming an entity the way an operator reads it, e.g. ``ipv4_lpm dst_addr=10.0.0.1/32 ->
    set_nhop(dmac=..., port=1, ...)`` or ``drop_threshold[17] = 32``."""
    fields = entity_to_dict(e, schema)
    if "table" in fields:
        line = fields["table"] + " " + (" ".join(f"{k}={v}" for k, v in fields["match"].items()) or "(any)")
        if fields.get("priority"):
            line += f" entry_priority={fields['priority']}"
        if "action" in fields:
            line += f" -> {fields['action']}(" + ", ".join(f"{k}={v}" for k, v in fields["params"].items()) + ")"
        return line
    if "register" in fields:
        return f"{fields['register']}[{fields['index']}] = {fields['value']}"
    if "counter" in fields:
        return f"{fields['counter']}[{fields['index']}]"
    return str(fields)
