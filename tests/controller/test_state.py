"""Desired state and diffing: the entities a file asks for, and minimal updates against read-back state."""

from __future__ import annotations

import textwrap

import finsy as fy
import pytest
from finsy.proto import p4r

from controller import netfile, state, tm, topology
from controller.client import load_program
from controller.topology import MAX_GROUP_ID, NextHop, group_hash_id, router_mac

from .test_topology import LEAFSPINE


@pytest.fixture(scope="module")
def program():
    return load_program(netfile.DEFAULT_PROGRAM)


@pytest.fixture(scope="module")
def schema(program):
    return fy.P4Schema(program.p4info)


def net_of(extra: str = "") -> netfile.Network:
    return netfile.loads(textwrap.dedent(LEAFSPINE) + textwrap.dedent(extra))


def encoded(net, switch, schema):
    return [e.encode(schema) for e in state.desired_entities(net, switch)]


def plan(desired, actual, schema) -> state.Plan:
    return state.diff(desired, actual, managed_tables=[schema.tables[t].id for t in state.MANAGED_TABLES],
                      managed_registers=[schema.registers[r].id for r in state.MANAGED_REGISTERS],
                      ecmp_table=schema.tables["ecmp_nhop"].id)


def dicts(ents, schema, table, default: bool = False):
    """Rows of one table as plain data: its entries, or (``default``) its default action."""
    return [d for d in (state.entity_to_dict(state.canonical(e), schema) for e in ents)
            if d.get("table") == table and bool(d.get("default")) == default]


def test_routes_become_nhop_and_ecmp_entries(schema) -> None:
    net = net_of()
    ents = encoded(net, "leaf1", schema)
    lpm = {d["match"]["dst_addr"]: d for d in dicts(ents, schema, "ipv4_lpm")}
    assert lpm["10.0.1.1/32"]["action"] == "set_nhop"
    assert lpm["10.0.1.1/32"]["params"] == {"dmac": "00:00:00:00:01:01", "smac": net_mac(net, "leaf1", 1),
                                            "port": 1, "nhop_id": 1}
    gid = group_hash_id((NextHop(3, router_mac(net, "spine1", 1)), NextHop(4, router_mac(net, "spine2", 1))))
    assert 1 <= gid <= MAX_GROUP_ID
    assert lpm["10.0.2.1/32"] == {"table": "ipv4_lpm", "match": {"dst_addr": "10.0.2.1/32"}, "action": "set_ecmp",
                                  "params": {"group": gid, "size": 2}}
    members = dicts(ents, schema, "ecmp_nhop")
    assert [(m["match"], m["params"]["port"], m["params"]["dmac"]) for m in members] == [
        ({"ecmp_group": gid, "ecmp_index": 0}, 3, net_mac(net, "spine1", 1)),
        ({"ecmp_group": gid, "ecmp_index": 1}, 4, net_mac(net, "spine2", 1))]
    # the spines have one next hop per host: no groups
    assert dicts(encoded(net, "spine1", schema), schema, "ecmp_nhop") == []


def net_mac(net, s, p) -> str:
    return netfile.format_mac(net.switches[s].mac_base | p)


def test_priority_maps_and_defaults(schema) -> None:
    default = dicts(encoded(net_of(), "leaf1", schema), schema, "dlcp_priority")
    assert [(d["match"], d["priority"], d["action"]) for d in default] == [
        ({"msg_type": 1}, 2, "set_priority"), ({"msg_type": 2}, 2, "set_priority"),
        ({"msg_type": 3}, 2, "set_priority"), ({}, 1, "trust_dlcp_priority")]
    dscp = dicts(encoded(net_of(), "leaf1", schema), schema, "dscp_priority")
    assert {d["match"]["dscp"]: d["params"]["prio"] for d in dscp} == {p << 3: p for p in range(8)}
    for table in ("dlcp_priority", "dscp_priority"):  # no match: queue 0, the lowest (managed too)
        assert dicts(encoded(net_of(), "leaf1", schema), schema, table, default=True) == [
            {"table": table, "match": {}, "default": True, "action": "set_priority", "params": {"prio": 0}}]
    custom = dicts(encoded(net_of("""\
priorities:
  dlcp:
    - {msg_type: data, mag_class: [0, 1], layer: 0-9, queue: 1}
    - {priority: 5, queue: 5}
"""), "leaf1", schema), schema, "dlcp_priority")
    assert [(d["match"], d["priority"], d["params"]) for d in custom] == [
        ({"msg_type": 0, "mag_class": 0, "layer": "0..9"}, 2, {"prio": 1}),
        ({"msg_type": 0, "mag_class": 1, "layer": "0..9"}, 2, {"prio": 1}),
        ({"priority": 5}, 1, {"prio": 5})]


def test_thresholds_later_rules_override(schema) -> None:
    net = net_of("""\
thresholds:
  - {drop: 40, mark: 20}
  - {priority: 7, drop: 0}
  - {switch: leaf1, port: 3, priority: 0, mark: 5}
  - {switch: spine1, port: 9, priority: 2, drop: 3}
""")
    v = state.threshold_values(net, "leaf1")
    assert v[("drop_threshold", state.slot(1, 0))] == 40 and v[("mark_threshold", state.slot(1, 0))] == 20
    assert ("drop_threshold", state.slot(1, 7)) not in v and v[("mark_threshold", state.slot(1, 7))] == 20
    assert v[("mark_threshold", state.slot(3, 0))] == 5 and v[("drop_threshold", state.slot(3, 0))] == 40
    assert {i // 8 for (_, i) in v} == {1, 2, 3, 4}  # connected ports only
    assert state.threshold_values(net, "spine1")[("drop_threshold", state.slot(9, 2))] == 3  # named port


def test_class_thresholds_by_magnitude_class(schema) -> None:
    net = net_of("""\
class_thresholds:
  - {class: [0, 1], drop: 8}
  - {class: 2, drop: 16}
  - {switch: leaf1, class: 1, drop: 4}
  - {switch: spine1, class: 2, drop: 0}
""")
    classes = lambda s: {i: v for (r, i), v in state.threshold_values(net, s).items()  # noqa: E731
                         if r == "class_drop_threshold"}
    assert classes("leaf1") == {0: 8, 1: 4, 2: 16}  # the later rule for leaf1 wins
    assert classes("spine1") == {0: 8, 1: 8}       # 0: none (the queue's threshold alone)
    ents = [state.entity_to_dict(e, schema) for e in encoded(net, "leaf1", schema)]
    assert [e for e in ents if e.get("register") == "class_drop_threshold"] == [
        {"register": "class_drop_threshold", "index": c, "value": v} for c, v in ((0, 8), (1, 4), (2, 16))]


def test_lb_mode_register(schema) -> None:
    regs = lambda n, s: [state.entity_to_dict(e, schema) for e in encoded(n, s, schema)  # noqa: E731
                         if e.WhichOneof("entity") == "register_entry" and e.register_entry.register_id ==
                         schema.registers["lb_mode"].id]
    assert regs(net_of(), "leaf1") == []  # spray = 0 = the register's reset value
    assert regs(net_of("load_balancing: per-flow\n"), "leaf1") == [{"register": "lb_mode", "index": 0, "value": 1}]


def test_diff_idempotent_and_minimal(schema) -> None:
    net = net_of("thresholds:\n  - {drop: 40}\n")
    want = encoded(net, "leaf1", schema)
    first = plan(want, [], schema)
    defaults = sum(1 for e in want if e.WhichOneof("entity") == "table_entry" and e.table_entry.is_default_action)
    assert defaults == 2  # the priority maps' default actions: always there, so modified, never inserted
    assert first.inserts == sum(1 for e in want if e.WhichOneof("entity") == "table_entry") - defaults
    assert first.modifies == sum(1 for e in want if e.WhichOneof("entity") == "register_entry") + defaults
    # the switch returns what was written, with registers for every index (0 where unset)
    have = [u.entity for u in first.updates]
    zero = p4r.Entity(register_entry=p4r.RegisterEntry(register_id=schema.registers["drop_threshold"].id,
                                                       index=p4r.Index(index=4000), data={"bitstring": b"\0"}))
    assert len(plan(want, have + [zero], schema)) == 0
    # one threshold changed -> one MODIFY
    net2 = net_of("thresholds:\n  - {drop: 40}\n  - {switch: leaf1, port: 2, priority: 3, drop: 7}\n")
    p = plan(encoded(net2, "leaf1", schema), have, schema)
    assert [(u.type, state.describe_entity(u.entity, schema)) for u in p.updates] == [
        (p4r.Update.MODIFY, f"drop_threshold[{state.slot(2, 3)}] = 7")]


def test_diff_deletes_stale_and_resets_registers(schema) -> None:
    want = encoded(net_of(), "leaf1", schema)
    stale = fy.P4TableEntry("ipv4_lpm", match=fy.P4TableMatch(dst_addr="10.9.0.0/16"),
                            action=fy.P4TableAction("no_route")).encode(schema)
    reg = fy.P4RegisterEntry("mark_threshold", index=17, data=9).encode(schema)
    p = plan(want, want + [stale, reg], schema)
    assert [(u.type, state.describe_entity(u.entity, schema)) for u in p.updates] == [
        (p4r.Update.MODIFY, "mark_threshold[17] = 0"), (p4r.Update.DELETE, "ipv4_lpm dst_addr=10.9.0.0/16")]
    # unmanaged tables and registers are left alone
    other = fy.P4RegisterEntry("spray_position", index=3, data=5).encode(schema)
    assert len(plan(want, want + [other], schema)) == 0


def test_diff_orders_groups_around_routes(schema) -> None:
    spine_only = net_of()
    want = encoded(spine_only, "leaf1", schema)
    p = plan(want, [], schema)
    tables = [schema.tables[u.entity.table_entry.table_id].alias for u in p.updates if u.entity.HasField("table_entry")]
    assert tables.index("ecmp_nhop") < tables.index("ipv4_lpm")  # members exist before routes point at them
    back = plan([], want, schema)
    tables = [schema.tables[u.entity.table_entry.table_id].alias for u in back.updates]
    assert tables[-2:] == ["ecmp_nhop", "ecmp_nhop"]  # and go only after the routes are gone


def test_canonical_bytes_compare_equal(schema) -> None:
    e = fy.P4TableEntry("dscp_priority", match=fy.P4TableMatch(dscp=5),
                        action=fy.P4TableAction("set_priority", prio=1)).encode(schema)
    padded = p4r.Entity()
    padded.CopyFrom(e)
    padded.table_entry.match[0].exact.value = b"\0\x05"
    padded.table_entry.action.action.params[0].value = b"\0\0\x01"
    assert state.entity_key(state.canonical(padded)) == state.entity_key(state.canonical(e))
    assert len(plan([e], [padded], schema)) == 0


def test_group_ids_come_from_content_and_survive_topology_changes() -> None:
    net = net_of()
    g1 = topology.ecmp_groups(topology.compute_routes(net)["leaf1"])
    # another host and another spine-facing link elsewhere: leaf1's uplink group keeps its id
    more = netfile.loads(textwrap.dedent(LEAFSPINE).replace(
        "links:", '  h4: {ip: 10.0.2.2, mac: "00:00:00:00:02:02", attach: leaf2:2}\nlinks:'))
    assert topology.ecmp_groups(topology.compute_routes(more)["leaf1"]) == g1
    (nhs, gid), = g1.items()
    assert gid == group_hash_id(nhs)
    # an id that is taken (by a group still on the switch) moves the new set to the next free id
    assert topology.ecmp_groups(topology.compute_routes(net)["leaf1"], used={gid})[nhs] == gid % MAX_GROUP_ID + 1
    # a set the switch already holds keeps the id it has there
    assert topology.ecmp_groups(topology.compute_routes(net)["leaf1"], {nhs: 77}, {77})[nhs] == 77


def test_groups_read_back_from_the_switch(schema) -> None:
    net = net_of()
    routes = topology.compute_routes(net)["leaf1"]
    (nhs, _), = topology.ecmp_groups(routes).items()
    held = [e.encode(schema) for e in state.desired_entities(net, "leaf1", {nhs: 77})]
    assert state.groups_on_switch(net, "leaf1", held, schema) == ({nhs: 77}, {77})
    assert state.assign_groups(net, "leaf1", held, schema) == {nhs: 77}
    assert len(plan(encoded_with(net, held, schema), held, schema)) == 0  # kept: nothing to write
    # a partial group (member 1 missing) is not reused, and its id is not given to anything else
    partial = [e for e in held if not (e.table_entry.table_id == schema.tables["ecmp_nhop"].id
                                       and e.table_entry.match[1].exact.value in (b"\x01", b"\0\x01"))]
    assert state.groups_on_switch(net, "leaf1", partial, schema) == ({}, {77})
    new = state.assign_groups(net, "leaf1", partial, schema)[nhs]
    assert new != 77
    p = plan(encoded_with(net, partial, schema), partial, schema)
    # new members first, then the routes move over, then the partial group goes: one Write per phase
    kinds = [[(u.type, schema.tables[u.entity.table_entry.table_id].alias) for u in ph] for ph in p.phases]
    assert kinds == [[(p4r.Update.INSERT, "ecmp_nhop")] * 2, [(p4r.Update.MODIFY, "ipv4_lpm")],  # 10.0.2.1
                     [(p4r.Update.DELETE, "ecmp_nhop")]]


def encoded_with(net, actual, schema):
    groups = state.assign_groups(net, "leaf1", actual, schema)
    return [e.encode(schema) for e in state.desired_entities(net, "leaf1", groups)]


def test_low_first_target_gets_mirrored_queues(schema) -> None:
    """priority_order: low-first (queue 0 served first, as some BMv2 versions do): the file's queue q is written
    as N-1-q everywhere (maps, trusted priorities, default actions, threshold slots, traffic-manager queues)."""
    net = netfile.loads(textwrap.dedent(LEAFSPINE).replace(
        "leaf1: {address: 127.0.0.1:1}", "leaf1: {address: 127.0.0.1:1, priority_order: low-first, "
                                         "priority_queues: 4}") + textwrap.dedent("""\
        priorities:
          dlcp:
            - {msg_type: ack, queue: 3}
            - {msg_type: data, trust: true}
          dscp: {46: 3, 8: 1}
        thresholds:
          - {switch: leaf1, port: 1, priority: 3, drop: 10}
          - {switch: leaf1, port: 1, priority: 0, mark: 5}
        queues:
          - {switch: leaf1, port: 2, priority: 3, depth: 9}
        """))
    ents = encoded(net, "leaf1", schema)
    dlcp = dicts(ents, schema, "dlcp_priority")
    assert [(d["match"], d["params"]) for d in dlcp] == [
        ({"msg_type": 1}, {"prio": 0}),
        *[({"msg_type": 0, "priority": p}, {"prio": 3 - p}) for p in range(4)]]
    assert {d["match"]["dscp"]: d["params"]["prio"] for d in dicts(ents, schema, "dscp_priority")} == {46: 0, 8: 2}
    for table in ("dlcp_priority", "dscp_priority"):
        assert dicts(ents, schema, table, default=True)[0]["params"] == {"prio": 3}
    v = state.threshold_values(net, "leaf1")
    assert v == {("drop_threshold", state.slot(1, 0)): 10, ("mark_threshold", state.slot(1, 3)): 5}
    assert tm.desired_tm(net, "leaf1").queues == {(2, 0): tm.QueueSetting(9, None)}
    # the high-first leaves of the same file are unchanged
    assert state.threshold_values(net, "leaf2") == {}
    assert {d["match"]["dscp"]: d["params"]["prio"] for d in dicts(encoded(net, "leaf2", schema), schema,
                                                                   "dscp_priority")} == {46: 3, 8: 1}
