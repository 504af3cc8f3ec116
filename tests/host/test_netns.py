"""testbed.netns: namespaces, veths, bridge and tbf shaping are created, work, and are always removed."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from testbed.netns import (NetnsError, Star, add_namespace, add_veth, disable_ipv6, disable_offloads, in_namespace,
                           list_namespaces, run)


RECV = """
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("{ip}", 5555)); s.settimeout(5)
print("ready", flush=True)
data, addr = s.recvfrom(100); print(data.decode(), "from", addr[0])
"""
SEND = """
import socket
socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"hello", ("{ip}", 5555))
"""


@pytest.mark.netns
def test_star_connects_shapes_and_cleans_up(root_required):
    with Star(3, rate="100mbit", mtu=9000) as net:
        names = set(list_namespaces())
        assert {h.ns for h in net.hosts} | {net.sw} <= names
        # a UDP datagram from host 0 reaches host 2 through the bridge
        rx = net.popen(2, [sys.executable, "-c", RECV.format(ip=net.hosts[2].ip)], stdout=subprocess.PIPE,
                       text=True)
        assert rx.stdout.readline().strip() == "ready"
        run(*net.cmd(0, [sys.executable, "-c", SEND.format(ip=net.hosts[2].ip)]))
        out, _ = rx.communicate(timeout=10)
        assert out.strip() == f"hello from {net.hosts[0].ip}"
        assert "tbf" in net.qdisc_stats(1) and "rate 100Mbit" in net.qdisc_stats(1)
        mtu = run(*net.cmd(1, ["cat", "/sys/class/net/eth0/mtu"])).stdout.strip()
        assert mtu == "9000"
    assert not ({h.ns for h in net.hosts} | {net.sw}) & set(list_namespaces())


@pytest.mark.netns
def test_star_cleans_up_on_error(root_required):
    with pytest.raises(RuntimeError):
        with Star(2, rate=None) as net:
            raise RuntimeError("boom")
    assert net.sw not in list_namespaces()


@pytest.mark.netns
def test_the_primitives_join_two_namespaces_and_fail_naming_the_command(root_required):
    """add_namespace, add_veth, in_namespace, disable_offloads, disable_ipv6: what the other harnesses (the switch
    tests' hosts, the controller tests' veth pairs) are built from."""
    a, b = f"dlcpprim{os.getpid() % 100000}a", f"dlcpprim{os.getpid() % 100000}b"
    try:
        for ns in (a, b):
            add_namespace(ns)
            disable_ipv6(ns)
        add_veth("va", "vb", ns=a, peer_ns=b, mtu=4000)
        for ns, dev, ip in ((a, "va", "10.231.0.1"), (b, "vb", "10.231.0.2")):
            disable_offloads(dev, ns)
            run(*in_namespace(ns, "ip", "addr", "add", f"{ip}/24", "dev", dev))
            run(*in_namespace(ns, "ip", "link", "set", dev, "up"))
        assert run(*in_namespace(a, "cat", "/sys/class/net/va/mtu")).stdout.strip() == "4000"
        assert run(*in_namespace(b, "sysctl", "-n", "net.ipv6.conf.all.disable_ipv6")).stdout.strip() == "1"
        assert "tx-checksumming: off" in run(*in_namespace(a, "ethtool", "-k", "va")).stdout
        rx = subprocess.Popen(in_namespace(b, sys.executable, "-c", RECV.format(ip="10.231.0.2")),
                              stdout=subprocess.PIPE, text=True)
        assert rx.stdout.readline().strip() == "ready"
        run(*in_namespace(a, sys.executable, "-c", SEND.format(ip="10.231.0.2")))
        out, _ = rx.communicate(timeout=10)
        assert out.strip() == "hello from 10.231.0.1"
        with pytest.raises(NetnsError, match=r"ip netns add .*(exists|File exists)"):
            add_namespace(a)
    finally:
        for ns in (a, b):
            run("ip", "netns", "del", ns, check=False)
    assert not {a, b} & set(list_namespaces())
