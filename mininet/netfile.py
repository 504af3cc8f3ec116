"""From a testbed plan to programmed switches, through the controller library (no shelling out).

:func:`network_yaml` writes the plan as a ``dlcpctl`` network file (docs/controller.md), kept in the run
directory so an operator can re-apply or inspect it by hand (``dlcpctl show tables examples/...``).
:func:`program` applies it and fails with the controller's error (which switch, which entry) if anything is
rejected. :func:`switch_summary` folds every switch's counters into drops and ECN marks per priority, the numbers
the comparison table and plots show.

Priorities installed (the DLCP program's ``dlcp_priority`` and ``dscp_priority`` tables), with ``top`` =
``priority_queues - 1``:

* ``priority_mode: trust`` (default): DLCP control, ACK and NACK packets to ``top``; DLCP data at the priority the
  sender put in the header (1..6 by layer position, host.policy), capped at ``top - 1`` when the switches have
  fewer than 8 queues (so data never shares the control queue unless there is only one);
* ``priority_mode: layer-table``: the switch decides, not the sender: control to ``top``, data of magnitude
  classes 0-1 (the smallest gradients, the drop-eligible ones) to the lowest data queue, other data by layer
  index in pairs (layers 0-1 to ``top - 1``, 2-3 one lower, ..., the rest to the lowest data queue);
* ``priority_mode: single``: every DLCP packet in queue 0 with everything else (no prioritisation);
* everything else (Gloo's TCP, background iperf3) by DSCP through ``dscp_map`` (default: class selector CSp to
  queue p, capped at ``top``; unmarked traffic to queue 0). ``job_dscp`` marks the workers' TCP on the hosts.

Thresholds: ``thresholds.classes`` becomes the file's ``class_thresholds`` (a drop threshold per magnitude class,
so the smallest gradients are dropped first). A drop-eligible DLCP packet is dropped at ``3/4`` of the queue capacity, ECN-capable packets (DLCP's
protected ones, and TCP when the hosts enable ECN) are marked from ``1/4``; the control queue has neither.
``load_balancing`` is the program's ``lb_mode``: ``spray`` (DLCP packets round-robin over equal-cost next hops,
other traffic hashed per flow) or ``per-flow`` (everything hashed per flow).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from .spec import LinkSpec, RunSpec
from .topos import Plan

if TYPE_CHECKING:
    from controller.bmv2 import P4cOutput

__all__ = ["network_yaml", "program", "switch_summary"]


def _link_props(props: LinkSpec) -> dict[str, Any]:
    d: dict[str, Any] = {"rate": int(props.rate), "queue_depth": props.queue}
    if props.delay_us:
        d["delay"] = f"{props.delay_us}us"
    if props.loss:
        d["loss"] = props.loss
    return d


def _dlcp_rules(spec: RunSpec, top: int) -> list[dict[str, Any]]:
    """The ``priorities.dlcp`` rules of ``spec.priority_mode`` (first matching rule wins)."""
    control = {"msg_type": ["ack", "nack", "control"], "queue": top}
    if spec.priority_mode == "single" or top == 0:
        return [{"queue": 0}]
    data_top = max(1, top - 1) if top > 1 else 0
    data_low = min(1, data_top)
    if spec.priority_mode == "trust":
        if top == 7:
            return [control, {"trust": True}]
        return [control] + [{"priority": p, "queue": min(max(p, data_low), data_top)} for p in range(8)]
    rules = [control, {"msg_type": "data", "mag_class": [0, 1], "queue": data_low}]
    layer = 0
    for q in range(data_top, data_low, -1):
        rules.append({"msg_type": "data", "layer": f"{layer}-{layer + 1}", "queue": q})
        layer += 2
    rules.append({"queue": data_low})
    return rules


#: BMv2 switches listen for simple_switch_CLI on this port plus their device id (testbed.nodes.Bmv2Switch)
BMV2_THRIFT_BASE = 9090


def network_yaml(plan: Plan, spec: RunSpec, bmv2: "P4cOutput | None" = None) -> str:
    """The controller's network file for ``plan`` (YAML text). With ``switch: bmv2`` the switches run p4c's output
    of the program (``bmv2``: its JSON and P4Info, :func:`program` compiles them) and are reached on their Thrift
    ports for registers and queues."""
    if spec.switch == "bmv2" and bmv2 is None:
        raise ValueError("switch: bmv2 needs p4c's output of the program (testbed.netfile.program compiles it)")
    queue = spec.topology.link.queue
    th = spec.thresholds
    top = spec.priority_queues - 1
    dscp = spec.dscp_map if spec.dscp_map is not None else {p << 3: min(p, top) for p in range(8)}
    doc: dict[str, Any] = {
        "load_balancing": spec.load_balancing,
        "switches": {s.name: {"address": f"127.0.0.1:{s.grpc_port}", "device_id": s.device_id,
                              "target": spec.switch, "priority_queues": spec.priority_queues}
                     for s in plan.switches},
        **({"p4info": str(bmv2.p4info), "device_config": str(bmv2.json)} if bmv2 is not None else {}),
        "hosts": {h.name: {"ip": h.ip, "mac": h.mac, "attach": f"{h.switch}:{h.port}",
                           **_link_props(spec.topology.link)} for h in plan.hosts},
        "links": [{"between": [f"{ln.a}:{ln.a_port}", f"{ln.b}:{ln.b_port}"], **_link_props(ln.props)}
                  for ln in plan.links if ln.a_port],
        "priorities": {"dlcp": _dlcp_rules(spec, top), "dscp": dict(sorted(dscp.items()))},
        "thresholds": [{"drop": max(1, queue * 3 // 4) if th.drop is None else th.drop,
                        "mark": max(1, queue // 4) if th.mark is None else th.mark}]
        + ([{"priority": top, "drop": 0, "mark": 0}] if top > 0 and spec.priority_mode != "single" else []),
    }
    if spec.switch == "bmv2":
        for s in plan.switches:
            doc["switches"][s.name]["thrift_port"] = BMV2_THRIFT_BASE + s.device_id
    if th.classes:
        doc["class_thresholds"] = [{"class": c, "drop": v} for c, v in sorted(th.classes.items())]
    return "# Generated by dlcp-testbed from the run spec; apply by hand with `dlcpctl apply`.\n" + \
        yaml.safe_dump(doc, sort_keys=False)


def program(plan: Plan, spec: RunSpec, out_dir: Path):
    """Write ``network.yaml`` into ``out_dir``, apply it to the running switches, return the controller's
    :class:`controller.Network` (for counters later)."""
    from controller import Network

    bmv2 = None
    if spec.switch == "bmv2":  # BMv2 runs p4c's output; dlcp-switch compiles the source itself
        from controller.bmv2 import compile_p4c

        root = Path(__file__).resolve().parents[1]
        bmv2 = compile_p4c(root / "p4src" / "dlcp.p4", out_dir / "p4c", (root / "p4src" / "include",))
    path = out_dir / "network.yaml"
    path.write_text(network_yaml(plan, spec, bmv2))
    net = Network.from_file(path)
    result = net.apply()
    result.raise_for_errors()
    return net


def switch_summary(stats: dict[str, Any]) -> dict[str, Any]:
    """Fold ``Network.stats()`` (switch -> SwitchStats) into totals per priority over every switch and port:
    ``drops_by_priority`` (the traffic manager's drops of every reason: full queues, the program's drops
    (eligible early/egress drops among them), emulated loss; on BMv2, which does not report them, the program's
    eligible drops),
    ``eligible_drops_by_priority``, ``marks_by_priority``, ``forwarded_by_priority``; plus each switch's full
    counters under ``per_switch``."""
    drops: dict[str, int] = {}
    eligible: dict[str, int] = {}
    marks: dict[str, int] = {}
    fwd: dict[str, int] = {}
    per_switch = {}

    def add(d: dict[str, int], prio: int, n: int) -> None:
        if n:
            d[str(prio)] = d.get(str(prio), 0) + int(n)

    for name, st in stats.items():
        per_switch[name] = st.to_dict()
        for _port, prios in st.ports.items():
            for prio, c in prios.items():
                add(eligible, prio, c.eligible_drops)
                if st.tm is None:
                    add(drops, prio, c.eligible_drops)
                add(marks, prio, c.ecn_marks)
                add(fwd, prio, c.forwarded_packets)
        tm = st.tm
        if tm is not None:
            for (_port, prio, _reason), n in tm.drops.items():
                add(drops, prio, n)
    return {"drops_by_priority": drops, "eligible_drops_by_priority": eligible, "marks_by_priority": marks,
            "forwarded_by_priority": fwd, "per_switch": per_switch}
