"""Static ARP (``testbed.netns.static_arp``): the switches answer no ARP, so every testbed host is given every
other host's MAC as a permanent neighbour entry, in real Mininet hosts; a bad entry is an error naming the host."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from testbed.netns import static_arp
from testbed import run as testbed_run
from testbed.run import RunError

pytestmark = pytest.mark.netns


def test_the_entry_is_permanent_and_replaces():
    assert static_arp("10.0.0.2", "02:00:00:00:00:02", "eth0") == [
        "ip", "neigh", "replace", "10.0.0.2", "lladdr", "02:00:00:00:00:02", "dev", "eth0", "nud", "permanent"]


def test_every_mininet_host_gets_every_other_hosts_mac(root_required):
    from mininet.net import Mininet

    from testbed.nodes import DlcpHost

    tag = f"a{os.getpid() % 100000}"  # interface names stay under 16 characters; parallel runs do not collide
    hosts = [SimpleNamespace(name=f"{tag}h{i}", ip=f"10.37.0.{i}", mac=f"02:37:00:00:00:0{i}") for i in (1, 2, 3)]
    net = Mininet(topo=None, host=DlcpHost, controller=None, autoSetMacs=False, autoStaticArp=False, build=False)
    nodes = [net.addHost(h.name, ip=f"{h.ip}/24", mac=h.mac) for h in hosts]
    bridge = net.addHost(f"{tag}br")  # a namespace joining the three: entries only, no traffic is sent
    for n in nodes:
        net.addLink(n, bridge)
    net.build()
    try:
        tb = testbed_run.Testbed.__new__(testbed_run.Testbed)  # only what _static_arp reads: the network and the plan's hosts
        tb.net, tb.plan = net, SimpleNamespace(hosts=hosts)
        net.hosts = nodes
        tb._static_arp()
        for node, me in zip(nodes, hosts):
            table = node.cmd("ip neigh show")
            for other in hosts:
                line = f"{other.ip} dev {node.defaultIntf().name} lladdr {other.mac} PERMANENT"
                assert (line in table) == (other is not me), table
        hosts[2].mac = "not-a-mac"
        with pytest.raises(RunError, match=rf"host {tag}h1: `ip neigh replace 10\.37\.0\.3 lladdr not-a-mac"):
            tb._static_arp()
    finally:
        net.stop()
