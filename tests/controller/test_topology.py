"""Route computation: host routes, all equal-cost next hops, costs, parallel links, static routes, groups."""

from __future__ import annotations

import ipaddress
import textwrap

from controller import netfile
from controller.topology import (NextHop, adjacency, compute_routes, distances_to, ecmp_groups, group_hash_id,
                                 router_mac)

LEAFSPINE = """\
switches:
  leaf1: {address: 127.0.0.1:1}
  leaf2: {address: 127.0.0.1:2}
  spine1: {address: 127.0.0.1:3}
  spine2: {address: 127.0.0.1:4}
hosts:
  h1: {ip: 10.0.1.1, mac: "00:00:00:00:01:01", attach: leaf1:1}
  h2: {ip: 10.0.1.2, mac: "00:00:00:00:01:02", attach: leaf1:2}
  h3: {ip: 10.0.2.1, mac: "00:00:00:00:02:01", attach: leaf2:1}
links:
  - {between: [leaf1:3, spine1:1]}
  - {between: [leaf1:4, spine2:1]}
  - {between: [leaf2:3, spine1:2]}
  - {between: [leaf2:4, spine2:2]}
"""


def net_of(text: str) -> netfile.Network:
    return netfile.loads(textwrap.dedent(text))


def by_prefix(routes) -> dict[str, tuple[NextHop, ...]]:
    return {str(r.prefix): r.nexthops for r in routes}


def test_leaf_spine_uses_both_spines() -> None:
    net = net_of(LEAFSPINE)
    r = compute_routes(net)
    leaf1 = by_prefix(r["leaf1"])
    assert leaf1["10.0.1.1/32"] == (NextHop(1, 0x0101),)  # local host: its own MAC
    # remote host: both uplinks, each towards the spine port's router MAC
    assert leaf1["10.0.2.1/32"] == (NextHop(3, router_mac(net, "spine1", 1)), NextHop(4, router_mac(net, "spine2", 1)))
    spine1 = by_prefix(r["spine1"])
    assert spine1["10.0.2.1/32"] == (NextHop(2, router_mac(net, "leaf2", 3)),)
    assert spine1["10.0.1.2/32"] == (NextHop(1, router_mac(net, "leaf1", 3)),)
    assert all(len(r[s]) == 3 for s in net.switches)  # every switch routes every host


def test_groups_are_shared_and_independent_of_host_order() -> None:
    net = net_of(LEAFSPINE)
    g = ecmp_groups(compute_routes(net)["leaf2"])
    assert list(g.values()) == [group_hash_id(next(iter(g)))]  # h1 and h2 share leaf2's one uplink group
    lines = LEAFSPINE.splitlines()
    h = [i for i, ln in enumerate(lines) if ln.startswith("  h")]
    reordered = lines[:h[0]] + [lines[h[2]], lines[h[0]], lines[h[1]]] + lines[h[2] + 1:]
    net2 = net_of("\n".join(reordered) + "\n")
    assert ecmp_groups(compute_routes(net2)["leaf2"]) == g
    assert compute_routes(net2) == compute_routes(net)


def test_costs_and_parallel_links() -> None:
    net = net_of("""\
switches:
  a: {address: 127.0.0.1:1}
  b: {address: 127.0.0.1:2}
  c: {address: 127.0.0.1:3}
hosts:
  hc: {ip: 10.0.0.3, mac: "00:00:00:00:00:03", attach: c:1}
links:
  - {between: [a:1, b:1]}
  - {between: [a:2, b:2]}
  - {between: [b:3, c:2]}
  - {between: [a:3, c:3], cost: 5}
""")
    adj = adjacency(net)
    assert distances_to(adj, "c") == {"c": 0, "b": 1, "a": 2}
    r = by_prefix(compute_routes(net)["a"])
    # a -> c directly costs 5; via b costs 2, over either of the two parallel a-b links
    assert [nh.port for nh in r["10.0.0.3/32"]] == [1, 2]
    net.links[3] = netfile.LinkSpec(("a", 3), ("c", 3), cost=2)  # now equal: three next hops
    assert [nh.port for nh in by_prefix(compute_routes(net)["a"])["10.0.0.3/32"]] == [1, 2, 3]


def test_disconnected_switch_gets_no_route() -> None:
    net = net_of("""\
switches:
  a: {address: 127.0.0.1:1}
  b: {address: 127.0.0.1:2}
hosts:
  ha: {ip: 10.0.0.1, mac: "00:00:00:00:00:01", attach: a:1}
""")
    r = compute_routes(net)
    assert [str(x.prefix) for x in r["a"]] == ["10.0.0.1/32"] and r["b"] == []


def test_static_routes() -> None:
    net = net_of(LEAFSPINE + """\
routes:
  - {switch: leaf1, prefix: 192.168.0.0/16, via: [3, 4]}
  - {switch: leaf1, prefix: 172.16.0.0/12, via: {port: 9, mac: "02:00:00:00:00:09"}}
""")
    r = by_prefix(compute_routes(net)["leaf1"])
    assert r["192.168.0.0/16"] == r["10.0.2.1/32"]
    assert r["172.16.0.0/12"] == (NextHop(9, 0x020000000009),)
    assert ipaddress.IPv4Network("172.16.0.0/12") in {x.prefix for x in compute_routes(net)["leaf1"]}
