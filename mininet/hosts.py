"""``dlcp-testbed hosts NET.yaml``: the hosts of one switch of a network file as network namespaces, so a
``dlcp-switch`` started by hand has something to forward for (the README's quick-start).

For every host attached to the switch: namespace NAME (the host's name) holding ``eth0`` with the file's MAC and
IP, a veth peer ``veth<PORT>`` in the root namespace for ``dlcp-switch -i PORT@veth<PORT>``; offloads and IPv6
off on both ends (docs/switch-daemon.md); a /32 route and a permanent neighbour entry for every other host of the
switch, towards the router MAC of the host's switch port (the switch answers no ARP). The MAC matters: the switch
sends frames to a host with the file's MAC, and a host whose interface has another one drops them, which
``dlcpctl`` reports once the host has sent a frame (docs/controller.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .netns import (NetnsError, add_namespace, add_veth, disable_ipv6, disable_offloads, list_namespaces, run,
                    static_arp)

__all__ = ["HostPlan", "plan_hosts", "create_hosts", "delete_hosts"]


@dataclass(frozen=True)
class HostPlan:
    """One host of the switch: its namespace (= its name), address, MAC, switch port and interface names."""

    name: str
    ip: str
    mac: str
    port: int
    switch_if: str            # root namespace end, for ``dlcp-switch -i PORT@switch_if``
    gateway_mac: str          # the router MAC of its switch port (destination of everything it sends)


def plan_hosts(path: str | Path, switch: str | None = None) -> tuple[str, list[HostPlan]]:
    """The switch (the file's only one unless named) and the plan of its hosts; ValueError naming what is wrong."""
    from controller import Network

    net = Network.from_file(path)
    if switch is None:
        if len(net.switches) != 1:
            raise ValueError(f"{path} has {len(net.switches)} switches ({', '.join(net.switches)}): name one "
                             f"with --switch")
        switch = net.switches[0]
    elif switch not in net.switches:
        raise ValueError(f"{path} has no switch {switch!r} (it has {', '.join(net.switches)})")
    from controller.netfile import format_mac

    plans = []
    for port, (kind, host) in net.spec.ports_of(switch).items():
        if kind == "host":
            plans.append(HostPlan(host.name, str(host.ip), format_mac(host.mac), port, f"veth{port}",
                                  net.router_mac(switch, port)))
    if not plans:
        raise ValueError(f"{path}: no host is attached to switch {switch}")
    return switch, plans


def create_hosts(plans: list[HostPlan]) -> None:
    """Create every host of ``plans``; NetnsError naming a namespace or interface that is already there."""
    existing = set(list_namespaces())
    for h in plans:
        if h.name in existing:
            raise NetnsError(f"namespace {h.name} already exists (remove the hosts with `dlcp-testbed hosts "
                             f"--delete FILE`, or `ip netns del {h.name}`)")
        if run("ip", "link", "show", h.switch_if, check=False).returncode == 0:
            raise NetnsError(f"interface {h.switch_if} already exists (`ip link del {h.switch_if}`)")
    done: list[HostPlan] = []
    try:
        for h in plans:
            add_namespace(h.name)
            done.append(h)
            add_veth("eth0", h.switch_if, ns=h.name)
            run("ip", "-n", h.name, "link", "set", "eth0", "address", h.mac)
            for dev, ns in (("eth0", h.name), (h.switch_if, None)):
                disable_offloads(dev, ns)
            disable_ipv6(h.name)
            disable_ipv6(dev=h.switch_if)
            run("ip", "-n", h.name, "addr", "add", f"{h.ip}/32", "dev", "eth0")
            run("ip", "-n", h.name, "link", "set", "eth0", "up")
            run("ip", "link", "set", h.switch_if, "up")
            for other in plans:
                if other is not h:
                    run("ip", "-n", h.name, "route", "replace", f"{other.ip}/32", "dev", "eth0")
                    run("ip", "-n", h.name, *static_arp(other.ip, h.gateway_mac, "eth0")[1:])
    except BaseException:
        delete_hosts(done)
        raise


def delete_hosts(plans: list[HostPlan]) -> list[str]:
    """Remove the hosts' namespaces (which removes their veth pairs); the names removed."""
    present = set(list_namespaces())
    removed = []
    for h in plans:
        if h.name in present:
            run("ip", "netns", "del", h.name)
            removed.append(h.name)
    return removed
