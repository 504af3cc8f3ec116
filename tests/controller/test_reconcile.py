"""Full reconciliation against live ``dlcp-switch`` daemons: every kind of setting removed from the file goes
back to the switch's default; a switch that applies each Write batch last to first still converges; a topology
change under live traffic misroutes no packet."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import finsy as fy
import pytest
from finsy.proto import p4r
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from controller import Network, state
from controller.client import SwitchClient, writer_election_id
from switch.daemon.mgmt import MgmtClient

from .conftest import start_daemon
from .test_live import finsy_read
from .test_packets_tls import raw_socket, veth  # noqa: F401 - veth is a fixture

pytestmark = pytest.mark.slow

BASE = """\
connect_timeout: 10
switches:
  s1: {{address: {s1}}}
  s2: {{address: {s2}}}
hosts:
  h1: {{ip: 10.0.0.1, mac: "00:00:0a:00:00:01", attach: s1:1{host}}}
  h2: {{ip: 10.0.0.2, mac: "00:00:0a:00:00:02", attach: s2:1}}
links:
  - {{between: [s1:2, s2:2]{link}}}
  - {{between: [s1:3, s2:3]}}
"""

#: One file fragment per kind of setting: (name, host link keys, s1:2-s2:2 link keys, appended top-level text).
SETTINGS = [
    ("thresholds", "", "", "thresholds:\n  - {drop: 40, mark: 20}\n"),
    ("dlcp priority map", "", "", "priorities:\n  dlcp:\n    - {priority: 5, queue: 5}\n"),
    ("dscp priority map", "", "", "priorities:\n  dscp: {46: 7}\n"),
    ("static route", "", "", "routes:\n  - {switch: s1, prefix: 10.9.0.0/16, via: [2, 3]}\n"),
    ("load balancing", "", "", "load_balancing: per-flow\n"),
    ("link rate, delay, loss", ", rate: 10Mbit, delay: 1ms, loss: 1%", "", ""),
    ("link queue depth", "", ", queue_depth: 20", ""),
    ("queue depth and rate", "", "", "queues:\n  - {switch: s1, port: 2, priority: 3, depth: 7, rate_pps: 500}\n"),
]


@pytest.fixture(scope="module")
def pair():
    """s1 runs with a non-default queue depth (50), so "the default" must come from the switch."""
    ds = [start_daemon("s1", "--queue-depth", "50"), start_daemon("s2")]
    try:
        yield {d.name: d for d in ds}
    finally:
        for d in ds:
            d.stop()


def write_net(path: Path, daemons, host: str = "", link: str = "", extra: str = "") -> Path:
    path.write_text(BASE.format(s1=daemons["s1"].address, s2=daemons["s2"].address, host=host, link=link) + extra)
    return path


def snapshot(daemons) -> dict:
    """Everything a file can set, as the switches have it: tables, managed registers, and the queue and link
    settings that differ from the switch's defaults (``default_queue``: what a queue nothing set has)."""
    out = {}
    for n, d in daemons.items():
        ents = finsy_read(d.address, fy.P4TableEntry())
        regs = [e for r in state.MANAGED_REGISTERS for e in finsy_read(d.address, fy.P4RegisterEntry(r)) if e.data]
        with MgmtClient(d.address) as m:
            st = m.stats()
        default = (st.ports[255].queues[0].capacity, st.ports[255].queues[0].rate_pps)  # the CPU port: never set
        queues = {(p, q): (qs.capacity, qs.rate_pps) for p, ps in st.ports.items() for q, qs in ps.queues.items()}
        links = {p: (ps.rate_bps or 0.0, ps.delay_us or 0, ps.loss or 0.0) for p, ps in st.ports.items()}
        out[n] = {
            "tables": sorted(repr(e) for e in ents),
            "registers": sorted((e.register_id, e.index, e.data) for e in regs),
            "default_queue": default,
            "queues": {k: v for k, v in queues.items() if v != default},
            "links": {k: v for k, v in links.items() if v != (0.0, 0, 0.0)},
        }
    return out


def _diff_in_process(net: Path, capsys, monkeypatch) -> tuple[int, str]:
    """``dlcpctl -n NET diff`` through the CLI's own entry point (``controller.cli.main``) in this process: its exit
    status and standard output. (The subprocess is ``dlcpctl``'s subject in test_cli_messages.py; here, run for
    every setting twice, its interpreter start was half the test's time.)"""
    from controller.cli import main

    monkeypatch.setenv("COLUMNS", "200")
    capsys.readouterr()
    code = main(["-n", str(net), "diff"])
    return code, capsys.readouterr().out


def test_removing_each_setting_restores_the_default(pair, tmp_path, capsys, monkeypatch) -> None:
    base = write_net(tmp_path / "base.yaml", pair)
    assert Network.from_file(base).apply().switches["s1"].pipeline_pushed
    defaults = snapshot(pair)
    # the switches' own defaults: s1 was started with --queue-depth 50, s2 with the daemon's 64; links unset
    assert defaults["s1"]["default_queue"] == (50, 0.0) and defaults["s2"]["default_queue"] == (64, 0.0)
    assert all(not defaults[n]["queues"] and not defaults[n]["links"] for n in defaults)
    for name, host, link, extra in SETTINGS:
        with_it = write_net(tmp_path / "with.yaml", pair, host, link, extra)
        res = Network.from_file(with_it).apply()
        assert res.writes or any(r.tm_changes for r in res.switches.values()), name
        assert snapshot(pair) != defaults, f"{name}: the setting changed nothing on the switches"
        code, out = _diff_in_process(base, capsys, monkeypatch)  # the drift is reported, and nothing is written
        assert code == 9 and "s1:" in out, (name, out)
        back = Network.from_file(base).apply()
        assert snapshot(pair) == defaults, f"{name}: not back to the default after it left the file"
        assert back.writes or any(r.tm_changes for r in back.switches.values()), name
        again = Network.from_file(base).apply()
        assert again.writes == 0 and all(not r.tm_changes for r in again.switches.values()), name
        code, out = _diff_in_process(base, capsys, monkeypatch)
        assert code == 0 and "in sync" in out, (name, out)


LEAF = """\
connect_timeout: 10
switches:
  s1: {{address: {s1}}}
  s2: {{address: 127.0.0.1:1}}
hosts:
  h1: {{ip: 10.0.0.1, mac: "00:00:0a:00:00:01", attach: s1:1}}
  h2: {{ip: 10.0.0.2, mac: "00:00:0a:00:00:02", attach: s2:1}}
{more_hosts}links:
  - {{between: [s1:2, s2:2]}}
  - {{between: [s1:3, s2:3]}}
{more_links}"""


def leaf_net(address: str, step: int) -> str:
    """Topologies that move h2 between equal-cost groups: 2 uplinks, 3 uplinks, 3 uplinks and another host."""
    return LEAF.format(s1=address,
                       more_links="  - {between: [s1:4, s2:4]}\n" if step % 3 else "",
                       more_hosts='  h3: {ip: 10.0.0.3, mac: "00:00:0a:00:00:03", attach: s2:5}\n'
                       if step % 3 == 2 else "")


@pytest.fixture(scope="module")
def reversing():
    """A switch in the test mode that applies the updates of every Write last to first."""
    d = start_daemon("s1", env={"DLCP_SWITCH_TEST_REVERSE_WRITES": "1"})
    try:
        yield d
    finally:
        d.stop()


def test_reversing_switch_really_reverses(reversing) -> None:
    """INSERT then MODIFY of one entry in one Write: applied last to first, the MODIFY finds nothing."""
    net = Network.from_text(leaf_net(reversing.address, 0))
    net.apply(["s1"], tm=False)

    async def go() -> str:
        async with SwitchClient(net.spec.switches["s1"], election_id=writer_election_id()) as c:
            ent = fy.P4TableEntry("dscp_priority", match=fy.P4TableMatch(dscp=63),
                                  action=fy.P4TableAction("set_priority", prio=1)).encode(c.schema)
            try:
                await c.write([p4r.Update(type=p4r.Update.INSERT, entity=ent),
                               p4r.Update(type=p4r.Update.MODIFY, entity=ent)])
            except Exception as e:  # noqa: BLE001 - the message is what is checked
                return str(e)
            return ""
    assert "MODIFY dscp_priority dscp=63" in asyncio.run(go())
    net.apply(["s1"], tm=False)


def test_reordered_batches_converge(reversing) -> None:
    for step in range(4):
        net = Network.from_text(leaf_net(reversing.address, step))
        res = net.apply(["s1"], tm=False)
        assert not res.errors
        again = net.apply(["s1"], dry_run=True, tm=False)
        assert again.writes == 0, (step, again.switches["s1"].updates)


@pytest.mark.netns
def test_topology_change_under_traffic_misroutes_nothing(veth) -> None:
    """Host h1 (a veth on port 1 of a switch that applies each Write last to first) streams packets to h2, many
    flows, while s1's uplinks to h2 change six times (2, 3, 3 + another host, 2, ... equal-cost ports): every
    packet the switch received leaves on one of h2's uplinks, none is dropped for want of a route or a group
    member. Only the order of the Writes keeps the path whole; the order inside one is the server's."""
    sw_side, host_side = veth
    d = start_daemon("s1", "-i", f"1@{sw_side}", env={"DLCP_SWITCH_TEST_REVERSE_WRITES": "1"})
    try:
        address = d.address
        Network.from_text(leaf_net(address, 0)).apply(["s1"], tm=False)
        frames = [bytes(Ether(dst="02:00:00:00:00:01", src="00:00:0a:00:00:01") / IP(src="10.0.0.1", dst="10.0.0.2")
                        / UDP(sport=1000 + i, dport=2000) / b"flow") for i in range(32)]

        def counters() -> dict:
            """Routing decisions (nhop_packets: per next-hop port, counted in ingress as the route is taken, so
            queueing does not blur them), ingress drops by reason, frames the switch received on port 1."""
            fwd = {e.index: e.packet_count for e in finsy_read(address, fy.P4CounterEntry("nhop_packets"))
                   if e.packet_count}
            drops = {e.index: e.packet_count for e in finsy_read(address, fy.P4CounterEntry("ingress_drops"))}
            with MgmtClient(address) as m:
                rx = m.stats().ports[1].rx_packets if 1 in m.stats().ports else 0
            return {"fwd": fwd, "drops": drops, "rx": rx}

        def delta(a: dict, b: dict) -> dict:
            return {k: v - a.get(k, 0) for k, v in b.items() if v - a.get(k, 0)}

        before = counters()
        stop = threading.Event()
        sock = raw_socket(host_side)

        def traffic() -> None:
            while not stop.is_set():
                for f in frames:
                    sock.send(f)
                time.sleep(0.002)

        t = threading.Thread(target=traffic)
        t.start()
        try:
            for step in range(1, 7):
                time.sleep(0.15)
                res = Network.from_text(leaf_net(address, step)).apply(["s1"], tm=False)
                assert res.writes > 0
        finally:
            stop.set()
            t.join(30)
            sock.close()
        deadline = time.monotonic() + 30
        while True:
            after = counters()
            rx, fwd, drops = after["rx"] - before["rx"], delta(before["fwd"], after["fwd"]), \
                delta(before["drops"], after["drops"])
            if sum(fwd.values()) + sum(drops.values()) >= rx or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert rx > 500, rx
        assert drops == {}, f"dropped in ingress (reason index: packets): {drops}"
        assert set(fwd) <= {2, 3, 4} and sum(fwd.values()) == rx, (fwd, rx)
        assert fwd.get(4), "the third uplink never carried traffic: the change did not happen under traffic"
    finally:
        d.stop()
