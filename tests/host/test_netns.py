"""testbed.netns: namespaces, veths, bridge and tbf shaping are created, work, and are always removed."""

from __future__ import annotations

import pytest

from testbed.netns import Star, list_namespaces, run


@pytest.mark.netns
def test_star_connects_shapes_and_cleans_up(root_required):
    with Star(3, rate="100mbit", mtu=9000) as net:
        names = set(list_namespaces())
        assert {h.ns for h in net.hosts} | {net.sw} <= names
        cp = run(*net.cmd(0, ["ping", "-c", "1", "-W", "2", net.hosts[2].ip]), check=False)
        assert cp.returncode == 0, cp.stdout + cp.stderr
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
