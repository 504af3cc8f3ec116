"""Route computation: pure functions from a validated :class:`~controller.netfile.Network` to next hops.

Every switch gets a /32 route per host. Its next hops are *all* neighbours on a shortest path (sum of link costs,
default 1 per link) towards the host's switch, one per parallel link, so equal-cost paths are used together
(ECMP). Hosts are never transit nodes. A next hop is identified by the egress port: a switch port connects to
exactly one host or link (the file validator enforces it), so (port, MAC of the device behind it) describes it.

Router MACs: port ``p`` of switch ``s`` has MAC ``s.mac_base | p`` (``02:dc:XX:XX:00:PP`` by default, see
``netfile.default_mac_base``). It is the source MAC of frames leaving that port and the destination MAC a
neighbouring switch uses for frames it sends to this one.
"""

from __future__ import annotations

import hashlib
import heapq
import ipaddress
from dataclasses import dataclass

from .netfile import Network

__all__ = ["NextHop", "Route", "router_mac", "distances_to", "shortest_next_hops", "compute_routes", "ecmp_groups",
           "adjacency", "group_hash_id", "MAX_GROUP_ID"]


@dataclass(frozen=True, order=True)
class NextHop:
    """Leave through ``port`` towards the device whose MAC is ``dmac``."""

    port: int
    dmac: int


@dataclass(frozen=True)
class Route:
    prefix: ipaddress.IPv4Network
    nexthops: tuple[NextHop, ...]  # sorted by port; more than one = an equal-cost group
    origin: str  # "host NAME" or "static"


def router_mac(net: Network, switch: str, port: int) -> int:
    """The MAC address of a switch port (see the module docstring)."""
    return net.switches[switch].mac_base | port


@dataclass(frozen=True)
class _Edge:
    port: int  # local egress port
    peer: str  # neighbouring switch
    peer_port: int
    cost: int


def adjacency(net: Network) -> dict[str, list[_Edge]]:
    """Switch graph: for each switch, its links as (egress port, neighbour, neighbour's port, cost)."""
    adj: dict[str, list[_Edge]] = {s: [] for s in net.switches}
    for ln in net.links:
        adj[ln.a[0]].append(_Edge(ln.a[1], ln.b[0], ln.b[1], ln.cost))
        adj[ln.b[0]].append(_Edge(ln.b[1], ln.a[0], ln.a[1], ln.cost))
    for edges in adj.values():
        edges.sort(key=lambda e: e.port)
    return adj


def distances_to(adj: dict[str, list[_Edge]], target: str) -> dict[str, int]:
    """Shortest-path cost from every switch that can reach ``target`` to it (Dijkstra; links are symmetric)."""
    dist = {target: 0}
    heap = [(0, target)]
    while heap:
        cost, switch = heapq.heappop(heap)
        if cost > dist.get(switch, cost):
            continue
        for e in adj[switch]:
            via = cost + e.cost
            if via < dist.get(e.peer, via + 1):
                dist[e.peer] = via
                heapq.heappush(heap, (via, e.peer))
    return dist


def shortest_next_hops(adj: dict[str, list[_Edge]], target: str) -> dict[str, tuple[_Edge, ...]]:
    """For every switch other than ``target`` that can reach it: all its links that lie on a shortest path."""
    dist = distances_to(adj, target)
    out = {}
    for s, d in dist.items():
        if s == target:
            continue
        out[s] = tuple(e for e in adj[s] if e.peer in dist and dist[e.peer] + e.cost == d)
    return out


def compute_routes(net: Network) -> dict[str, list[Route]]:
    """All routes of every switch: a /32 per reachable host, then the file's static routes; sorted by prefix."""
    adj = adjacency(net)
    routes: dict[str, list[Route]] = {s: [] for s in net.switches}
    by_switch: dict[str, dict[str, tuple[_Edge, ...]]] = {}
    for h in net.hosts.values():
        prefix = ipaddress.IPv4Network(f"{h.ip}/32")
        routes[h.switch].append(Route(prefix, (NextHop(h.port, h.mac),), f"host {h.name}"))
        if h.switch not in by_switch:
            by_switch[h.switch] = shortest_next_hops(adj, h.switch)
        for s, edges in by_switch[h.switch].items():
            nhs = tuple(sorted(NextHop(e.port, router_mac(net, e.peer, e.peer_port)) for e in edges))
            routes[s].append(Route(prefix, nhs, f"host {h.name}"))
    for r in net.routes:
        ports = net.ports_of(r.switch)
        nhs = []
        for nh in r.nexthops:
            nhs.append(NextHop(nh.port, nh.mac if nh.mac is not None else peer_mac(net, ports[nh.port])))
        routes[r.switch].append(Route(r.prefix, tuple(sorted(set(nhs))), "static"))
    for s in routes:
        routes[s].sort(key=lambda r: (int(r.prefix.network_address), r.prefix.prefixlen))
    return routes


def peer_mac(net: Network, attachment: tuple[str, object]) -> int:
    """MAC of the device on a connected port, from ``Network.ports_of`` values."""
    kind, what = attachment
    if kind == "host":
        return what.mac  # type: ignore[attr-defined]
    _, (peer_switch, peer_port) = what  # type: ignore[misc]
    return router_mac(net, peer_switch, peer_port)


#: Largest ECMP group id: dlcp.p4 keeps per-group state (``spray_position``) in a register of MAX_ECMP_GROUPS = 1024
#: entries, so ids are 1..1023 (0 is left unused: it reads like "no group" in dumps).
MAX_GROUP_ID = 1023


def group_hash_id(nexthops: tuple[NextHop, ...], max_id: int = MAX_GROUP_ID) -> int:
    """The preferred id of an equal-cost group, derived from its content (the sorted next hops): the same set
    gets the same id on every apply and on every switch, whatever else the network holds."""
    text = ",".join(f"{nh.port}@{nh.dmac:012x}" for nh in nexthops)
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") % max_id + 1


def ecmp_groups(routes: list[Route], existing: dict[tuple[NextHop, ...], int] | None = None,
                used: set[int] | frozenset[int] = frozenset(), max_id: int = MAX_GROUP_ID
                ) -> dict[tuple[NextHop, ...], int]:
    """Group ids for the distinct multi-next-hop sets of one switch. Routes sharing a set share a group.

    Ids are stable: a set the switch already holds as a complete group keeps that group's id (``existing``,
    read back from the switch); a new set gets :func:`group_hash_id`, or the next free id after it when that id
    is taken (by another set, or by any group still on the switch: ``used``), so a change never rewrites the
    members of a group that live routes point at. Sets are visited in sorted order, so the result does not
    depend on the order hosts are listed in."""
    existing = existing or {}
    sets = sorted({r.nexthops for r in routes if len(r.nexthops) > 1})
    out: dict[tuple[NextHop, ...], int] = {}
    taken = set(used)
    for nhs in sets:
        if nhs in existing:
            out[nhs] = existing[nhs]
            taken.add(existing[nhs])
    for nhs in sets:
        if nhs in out:
            continue
        gid = group_hash_id(nhs, max_id)
        for _ in range(max_id):
            if gid not in taken:
                break
            gid = gid % max_id + 1
        else:
            raise ValueError(f"more than {max_id} equal-cost groups on one switch")
        out[nhs] = gid
        taken.add(gid)
    return out
