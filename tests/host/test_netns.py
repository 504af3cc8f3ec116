"""testbed.netns: namespaces, veths, bridge and tbf shaping are created, work, and are always removed."""

from __future__ import annotations

import subprocess
import sys

import pytest

from testbed.netns import Star, list_namespaces, run


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
