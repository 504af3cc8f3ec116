"""Testbed topologies: star, dumbbell and leaf-spine, planned once and then built in Mininet.

A :class:`Plan` is the whole network as data (switches with their P4Runtime ports and device ids, hosts with IP,
MAC and attachment, links with explicit port numbers and their emulated properties). The same plan builds the
Mininet topology (:meth:`Plan.topo`) and the controller's network description (:mod:`testbed.netfile`), so the
port numbers the controller routes on are the ones Mininet wired.

Addressing: worker hosts ``h1..hN`` are ``10.0.0.1..N``, background hosts ``b1..bM`` are ``10.0.0.101..``, all
in 10.0.0.0/24 with static ARP entries for each other (the switches route each /32, rewriting MACs per hop).
A degraded path (``topology.degraded``): a leaf-spine's links to one spine get its settings (rate, delay, loss)
instead of the core's, which the link keeps as ``normal`` for flapping (:mod:`testbed.flap`).
Placement: workers (and background hosts) alternate between the two sides of a dumbbell or the two leaves of a
leaf-spine, so ring neighbours talk across the core and background traffic competes with them there.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from .spec import LinkSpec, TopologySpec

__all__ = ["Plan", "PlanSwitch", "PlanHost", "PlanLink", "plan"]


@dataclass
class PlanSwitch:
    name: str
    device_id: int
    grpc_port: int


@dataclass
class PlanHost:
    name: str
    ip: str
    mac: str
    switch: str
    port: int


@dataclass
class PlanLink:
    a: str
    a_port: int     # 0 for a host end (hosts have one interface, eth0)
    b: str
    b_port: int
    props: LinkSpec
    #: a degraded path's link (``topology.degraded``): ``props`` are its degraded settings, these its normal ones
    normal: LinkSpec | None = None


@dataclass
class Plan:
    kind: str
    switches: list[PlanSwitch] = field(default_factory=list)
    hosts: list[PlanHost] = field(default_factory=list)
    links: list[PlanLink] = field(default_factory=list)

    def host(self, name: str) -> PlanHost:
        for h in self.hosts:
            if h.name == name:
                return h
        raise KeyError(f"no host {name!r} in the {self.kind} plan")

    def topo(self, switch_cls, switch_opts: dict | None = None, mtu: int = 1500):
        """The Mininet ``Topo`` of this plan (imported here so planning works without Mininet)."""
        from mininet.topo import Topo

        plan = self

        class _Topo(Topo):
            def build(self):
                for s in plan.switches:
                    self.addSwitch(s.name, cls=switch_cls, grpc_port=s.grpc_port, device_id=s.device_id,
                                   mtu=mtu, **(switch_opts or {}))
                for h in plan.hosts:
                    self.addHost(h.name, ip=f"{h.ip}/24", mac=h.mac, mtu=mtu)
                for ln in plan.links:
                    kw = {}
                    if ln.a_port:
                        kw["port1"] = ln.a_port
                    if ln.b_port:
                        kw["port2"] = ln.b_port
                    self.addLink(ln.a, ln.b, **kw)

        return _Topo()


def plan(t: TopologySpec, grpc_base_port: int = 9559) -> Plan:
    """Lay out topology ``t``: names, addresses, ports."""
    p = Plan(t.kind)
    core = t.core or t.link
    if t.kind == "star":
        names = ["s1"]
    elif t.kind == "dumbbell":
        names = ["s1", "s2"]
    elif t.kind == "leaf-spine":
        names = ["leaf1", "leaf2", "spine1", "spine2"]
    else:
        raise ValueError(f"unknown topology kind {t.kind!r}")
    for i, n in enumerate(names):
        p.switches.append(PlanSwitch(n, i, grpc_base_port + i))
    edge = names if t.kind != "leaf-spine" else names[:2]
    next_port = {n: 1 for n in names}

    def attach(host: str, ip: str, mac: str, k: int) -> None:
        sw = edge[k % len(edge)]
        port = next_port[sw]
        next_port[sw] += 1
        p.hosts.append(PlanHost(host, ip, mac, sw, port))
        p.links.append(PlanLink(host, 0, sw, port, t.link))

    for i in range(t.hosts):
        attach(f"h{i + 1}", f"10.0.0.{i + 1}", f"00:00:00:00:00:{i + 1:02x}", i)
    for i in range(t.background_hosts):
        attach(f"b{i + 1}", f"10.0.0.{101 + i}", f"00:00:00:00:01:{i + 1:02x}", i)

    def core_link(a: str, b: str) -> None:
        pa, pb = next_port[a], next_port[b]
        next_port[a] += 1
        next_port[b] += 1
        d = t.degraded
        if d is not None and d.spine in (a, b):
            slow = replace(core, rate=core.rate if d.rate is None else d.rate,
                           delay_us=core.delay_us if d.delay_us is None else d.delay_us,
                           loss=core.loss if d.loss is None else d.loss)
            p.links.append(PlanLink(a, pa, b, pb, slow, normal=core))
        else:
            p.links.append(PlanLink(a, pa, b, pb, core))

    if t.kind == "dumbbell":
        core_link("s1", "s2")
    elif t.kind == "leaf-spine":
        for leaf in ("leaf1", "leaf2"):
            for spine in ("spine1", "spine2"):
                core_link(leaf, spine)
    return p
