"""The controller against three live ``dlcp-switch`` daemons: apply, idempotent re-apply, one-key changes,
show/--json against an independent read of the switches, watch, imperative commands, and every failure case
with its exit code."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import re
import socket
import textwrap
import time
from pathlib import Path

import finsy as fy
import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from controller import Network, state
from controller.errors import EXIT_CODES
from controller.topology import NextHop, group_hash_id, router_mac
from switch.daemon.mgmt import MgmtClient

from .conftest import ROOT, dlcpctl

pytestmark = pytest.mark.slow

NET = """\
connect_timeout: 10
switches:
  s1: {{address: {s1}}}
  s2: {{address: {s2}}}
  s3: {{address: {s3}}}
hosts:
  h1: {{ip: 10.0.0.1, mac: "00:00:0a:00:00:01", attach: s1:1}}
  h2: {{ip: 10.0.0.2, mac: "00:00:0a:00:00:02", attach: s2:1}}
  h3: {{ip: 10.0.0.3, mac: "00:00:0a:00:00:03", attach: s3:1}}
links:
  - {{between: [s1:2, s2:2], rate: 1Gbit, queue_depth: 100}}
  - {{between: [s1:3, s2:3], rate: 1Gbit, queue_depth: 100}}
  - {{between: [s2:4, s3:2], delay: 50us}}
thresholds:
  - {{drop: 40, mark: 20}}
  - {{priority: 7, drop: 0}}
"""


@pytest.fixture(scope="module")
def netpath(daemons, tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("net") / "net.yaml"
    p.write_text(NET.format(**{n: d.address for n, d in daemons.items()}))
    return p


def mgmt_stats(daemons) -> dict:
    out = {}
    for n, d in daemons.items():
        with MgmtClient(d.address) as m:
            out[n] = m.stats()
    return out


def finsy_read(address: str, *entities) -> list:
    """Read with finsy directly (independent of the controller's read path)."""
    async def go():
        async with fy.Switch("probe", address, fy.SwitchOptions(device_id=0, initial_election_id=2)) as sw:
            return [e async for e in sw.read(list(entities))]
    return asyncio.run(go())


def lpm_key(e) -> tuple[str, int]:
    """(address, prefix length) of an ipv4_lpm entry as finsy decodes it."""
    v = e.match["dst_addr"]
    addr, plen = v if isinstance(v, tuple) else (v, 32)
    return str(ipaddress.IPv4Address(int(addr))), int(plen)


def frame(dst: str, dscp: int = 0, payload: bytes = b"dlcpctl-test") -> bytes:
    return bytes(Ether(dst="02:00:00:00:00:01", src="00:00:0a:00:00:09") / IP(src="10.0.0.9", dst=dst, tos=dscp << 2)
                 / UDP(sport=1000, dport=2000) / payload)


def test_apply_installs_and_reapply_writes_nothing(daemons, netpath) -> None:
    net = Network.from_file(netpath)
    res = net.apply()
    assert set(res.switches) == {"s1", "s2", "s3"} and not res.errors
    assert all(r.pipeline_pushed for r in res.switches.values())
    # what the switches hold, read independently with finsy
    s1 = finsy_read(daemons["s1"].address, fy.P4TableEntry())
    assert len([e for e in s1 if e.table_id == "ipv4_lpm"]) == 3
    assert len([e for e in s1 if e.table_id == "ecmp_nhop"]) == 2
    by_ip = {lpm_key(e)[0]: e.action for e in s1 if e.table_id == "ipv4_lpm"}
    assert by_ip["10.0.0.1"].name == "set_nhop" and by_ip["10.0.0.1"].args["port"] == 1
    uplinks = tuple(NextHop(p, router_mac(net.spec, "s2", p)) for p in (2, 3))
    assert by_ip["10.0.0.2"].name == "set_ecmp"
    assert by_ip["10.0.0.2"].args == {"group": group_hash_id(uplinks), "size": 2}  # id from the group's content
    assert by_ip["10.0.0.3"].args == by_ip["10.0.0.2"].args  # h2 and h3 share the group
    members = sorted((e.match["ecmp_index"], e.action.args["port"]) for e in s1 if e.table_id == "ecmp_nhop")
    assert members == [(0, 2), (1, 3)]
    s3 = finsy_read(daemons["s3"].address, fy.P4TableEntry("ipv4_lpm"))
    assert sorted(e.action.args["port"] for e in s3) == [1, 2, 2]
    regs = finsy_read(daemons["s2"].address, fy.P4RegisterEntry("drop_threshold"))
    nonzero = {e.index: e.data for e in regs if e.data}
    assert nonzero[state.slot(4, 0)] == 40 and state.slot(4, 7) not in nonzero and len(nonzero) == 4 * 7
    # traffic manager: the links' queue depth on both ends
    st = mgmt_stats(daemons)
    assert all(st["s1"].ports[p].queues[q].capacity == 100 for p in (2, 3) for q in range(8))

    before = mgmt_stats(daemons)
    again = net.apply()
    assert again.writes == 0 and not any(r.pipeline_pushed for r in again.switches.values())
    after = mgmt_stats(daemons)
    for n in daemons:
        assert after[n].write_updates == before[n].write_updates, n
        assert after[n].writes == before[n].writes, n  # not even an empty Write RPC
    # queue and link settings are read back and compared: nothing to write
    assert all(not r.tm_changes for r in again.switches.values())


def test_one_key_change_is_one_update(daemons, netpath, tmp_path) -> None:
    Network.from_file(netpath).apply()
    changed = tmp_path / "changed.yaml"
    changed.write_text(netpath.read_text() + "  - {switch: s2, port: 4, priority: 3, mark: 7}\n")
    before = mgmt_stats(daemons)
    r = dlcpctl("apply", str(changed), "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["switches"]["s2"]["updates"] == [f"~ mark_threshold[{state.slot(4, 3)}] = 7"]
    assert all(not out["switches"][n]["updates"] for n in ("s1", "s3"))
    after = mgmt_stats(daemons)
    assert {n: after[n].write_updates - before[n].write_updates for n in daemons} == {"s1": 0, "s2": 1, "s3": 0}
    back = Network.from_file(netpath).apply()  # and back: one update again
    assert back.writes == 1 and back.switches["s2"].modifies == 1


def test_imperative_changes_and_apply_restores(daemons, netpath) -> None:
    n = ["-n", str(netpath)]
    Network.from_file(netpath).apply()
    r = dlcpctl(*n, "route", "add", "10.8.0.0/16", "--via", "2", "--via", "3", "-s", "s1")
    assert r.returncode == 0, r.stderr
    uplinks = tuple(NextHop(p, router_mac(Network.from_file(netpath).spec, "s2", p)) for p in (2, 3))
    # the same next hops as the file's group, but a new group: never one that live routes use
    assert f"+ ipv4_lpm dst_addr=10.8.0.0/16 -> set_ecmp(group={group_hash_id(uplinks) + 1}, size=2)" in r.stdout
    r = dlcpctl(*n, "set", "threshold", "-s", "s3", "--port", "1", "--priority", "0", "--drop", "9")
    assert r.returncode == 0 and f"~ drop_threshold[{state.slot(1, 0)}] = 9" in r.stdout, r.stderr
    r = dlcpctl(*n, "set", "priority-map", "dscp", "10", "3", "-s", "s2")
    assert r.returncode == 0 and "+ dscp_priority dscp=10 -> set_priority(prio=3)" in r.stdout, r.stderr
    r = dlcpctl(*n, "set", "queue", "-s", "s1", "--port", "2", "--priority", "1", "--depth", "17")
    assert r.returncode == 0, r.stderr
    assert mgmt_stats(daemons)["s1"].ports[2].queues[1].capacity == 17
    res = Network.from_file(netpath).apply()
    assert (res.switches["s1"].deletes, res.switches["s3"].modifies, res.switches["s2"].deletes) == (3, 1, 1)
    assert "queue 2/1: depth=100" in res.switches["s1"].tm_changes
    assert Network.from_file(netpath).apply().writes == 0
    r = dlcpctl(*n, "route", "del", "10.0.0.3", "-s", "s1")
    assert r.returncode == 0 and "- ipv4_lpm dst_addr=10.0.0.3/32" in r.stdout  # group still used by 10.0.0.2
    r = dlcpctl(*n, "route", "add", "10.9.0.0/16", "--via", "2", "--via", "3", "-s", "s1")
    assert r.returncode == 0, r.stderr
    r = dlcpctl(*n, "route", "del", "10.9.0.0/16", "-s", "s1")  # its group is its own: the members go too
    assert r.returncode == 0 and "- ipv4_lpm dst_addr=10.9.0.0/16" in r.stdout, r.stderr
    assert sum(": - ecmp_nhop " in line for line in r.stdout.splitlines()) == 2, r.stdout
    assert Network.from_file(netpath).apply().switches["s1"].deletes == 0  # nothing of the group was left


def test_show_json_matches_switch_state(daemons, netpath) -> None:
    net = Network.from_file(netpath)
    net.apply()
    r = dlcpctl("-n", str(netpath), "show", "tables", "--json", "-s", "s1", "-s", "s2")
    assert r.returncode == 0, r.stderr
    shown = json.loads(r.stdout)
    assert set(shown) == {"s1", "s2"}
    for sw in ("s1", "s2"):
        direct = finsy_read(daemons[sw].address, fy.P4TableEntry())
        counts: dict[str, int] = {}
        for e in direct:
            counts[e.table_id] = counts.get(e.table_id, 0) + 1
        assert {t: len(rows) for t, rows in shown[sw]["tables"].items() if rows} == counts
        lpm = {row["match"]["dst_addr"]: row for row in shown[sw]["tables"]["ipv4_lpm"]}
        for e in direct:
            if e.table_id == "ipv4_lpm":
                ip, plen = lpm_key(e)
                row = lpm[f"{ip}/{plen}"]
                assert row["action"] == e.action.name
                assert {k: v for k, v in row["params"].items() if isinstance(v, int)} == \
                    {k: int(v) for k, v in e.action.args.items() if k not in ("dmac", "smac")}
        regs = {e.index: e.data for e in finsy_read(daemons[sw].address, fy.P4RegisterEntry("mark_threshold"))
                if e.data}
        assert {int(k): v for k, v in shown[sw]["registers"]["mark_threshold"].items()} == regs

    # counters: packets injected with PacketOut are routed, queued by DSCP, counted per (port, priority)
    n_pkts = 5
    before = finsy_read(daemons["s3"].address, fy.P4CounterEntry("port_forwarded", index=state.slot(1, 2)))[0]
    r = dlcpctl("-n", str(netpath), "packet-out", "-s", "s3", "--repeat", str(n_pkts), "--hex",
                frame("10.0.0.3", dscp=16).hex())  # CS2 -> queue 2 (default DSCP map), out of port 1
    assert r.returncode == 0 and f"s3: sent {n_pkts} x" in r.stdout, r.stderr
    slot = state.slot(1, 2)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        c = finsy_read(daemons["s3"].address, fy.P4CounterEntry("port_forwarded", index=slot))[0]
        if c.packet_count >= before.packet_count + n_pkts:
            break
        time.sleep(0.1)
    r = dlcpctl("-n", str(netpath), "show", "counters", "--json", "-s", "s3")
    assert r.returncode == 0, r.stderr
    shown = json.loads(r.stdout)["s3"]
    assert shown["ports"]["1"]["2"]["forwarded_packets"] == c.packet_count == before.packet_count + n_pkts
    assert shown["ports"]["1"]["2"]["forwarded_bytes"] == c.byte_count
    assert shown["nhop_packets"]["1"]["packets"] == c.packet_count
    r = dlcpctl("-n", str(netpath), "show", "queues", "--json", "-s", "s1")
    assert r.returncode == 0, r.stderr
    q = json.loads(r.stdout)["s1"]["ports"]
    assert q["2"]["queues"]["5"]["capacity"] == 100 and q["3"]["queues"]["0"]["capacity"] == 100
    r = dlcpctl("-n", str(netpath), "show", "drops", "--json", "-s", "s3")
    assert r.returncode == 0, r.stderr
    tm_drops = json.loads(r.stdout)["s3"]["tm"]
    st = mgmt_stats({"s3": daemons["s3"]})["s3"]
    assert tm_drops == [{"port": p, "priority": q, "reason": why, "count": k} for (p, q, why), k in
                        sorted(st.drops.items())]
    assert any(d["reason"] == "no_interface" and d["port"] == 1 for d in tm_drops)  # no interface on port 1
    # the human tables render the same numbers
    r = dlcpctl("-n", str(netpath), "show", "counters", "-s", "s3")
    row = rf"│\s+1 │\s+2 │\s+{c.packet_count} │\s+{c.byte_count} │"
    assert r.returncode == 0 and re.search(row, r.stdout), r.stdout


def test_watch_renders_one_frame_non_interactively(daemons, netpath) -> None:
    Network.from_file(netpath).apply()
    Network.from_file(netpath).packet_out("s3", frame("10.0.0.3", dscp=8))
    r = dlcpctl("-n", str(netpath), "watch", "--once", "--interval", "0.2", "-s", "s3")
    assert r.returncode == 0, r.stderr
    assert "s3  (frame 1, over" in r.stdout and "pkts/s" in r.stdout and "marks/s" in r.stdout
    assert "\x1b[" not in r.stdout  # not a terminal: plain text, no cursor movement
    assert re.search(r"│\s+1 │\s+[12] │", r.stdout), r.stdout  # the port that carried traffic
    r = dlcpctl("-n", str(netpath), "watch", "--frames", "2", "--interval", "0.1", "-s", "s1")
    assert r.returncode == 0 and "frame 2" in r.stdout, r.stderr


# ---- failures ------------------------------------------------------------------------------------------------


def one_switch(address: str, extra: str = "") -> str:
    return textwrap.dedent(f"""\
        connect_timeout: 1
        switches:
          s1: {{address: {address}}}
        hosts:
          h1: {{ip: 10.0.0.1, mac: "00:00:0a:00:00:01", attach: s1:1}}
        """) + extra


def test_unreachable_switch_refused(tmp_path) -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    (tmp_path / "n.yaml").write_text(one_switch(f"127.0.0.1:{port}"))
    r = dlcpctl("apply", str(tmp_path / "n.yaml"))
    assert r.returncode == EXIT_CODES["unreachable"] == 4
    assert f"switch s1 at 127.0.0.1:{port} unreachable after" in r.stderr, r.stderr


def test_unreachable_switch_silent(tmp_path) -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)  # accepts TCP in the kernel, never speaks HTTP/2
    try:
        port = s.getsockname()[1]
        (tmp_path / "n.yaml").write_text(one_switch(f"127.0.0.1:{port}"))
        for cmd in (["apply", str(tmp_path / "n.yaml")], ["-n", str(tmp_path / "n.yaml"), "show", "counters"]):
            r = dlcpctl(*cmd)
            assert r.returncode == 4, r.stderr
            m = re.search(rf"switch s1 at 127.0.0.1:{port} unreachable after ([0-9.]+) s: no P4Runtime answer "
                          rf"within 1 s", r.stderr)
            assert m and float(m.group(1)) >= 1.0, r.stderr
    finally:
        s.close()


def test_rejected_entries_name_entry_and_error(daemons, netpath) -> None:
    Network.from_file(netpath).apply()
    r = dlcpctl("-n", str(netpath), "route", "add", "10.0.0.2", "--via", "1", "-s", "s1")
    assert r.returncode == EXIT_CODES["rejected"] == 5
    assert "switch s1 at " + daemons["s1"].address + " rejected 1 of 1 updates" in r.stderr
    assert "INSERT ipv4_lpm dst_addr=10.0.0.2/32 -> set_nhop(" in r.stderr and "ALREADY_EXISTS" in r.stderr
    r = dlcpctl("-n", str(netpath), "route", "del", "10.7.7.0/24", "-s", "s2")
    assert r.returncode == 5 and "DELETE ipv4_lpm dst_addr=10.7.7.0/24: NOT_FOUND" in r.stderr, r.stderr
    r = dlcpctl("-n", str(netpath), "set", "queue", "-s", "s1", "--port", "1", "--depth", "0")
    assert r.returncode == EXIT_CODES["tm"] == 7 and "INVALID_ARGUMENT" in r.stderr and "depth" in r.stderr
    r = dlcpctl("-n", str(netpath), "packet-in", "-s", "s2", "--count", "1", "--timeout", "0.5")
    assert r.returncode == EXIT_CODES["timeout"] == 8
    assert "switch s2: 0 of 1 PacketIn messages arrived within 0.5 s" in r.stderr, r.stderr


def test_apply_reports_table_full(daemons, tmp_path) -> None:
    """A program whose ipv4_lpm holds 4 entries: the fifth route is rejected (RESOURCE_EXHAUSTED), named."""
    src = (ROOT / "p4src" / "dlcp.p4").read_text()
    small, n = re.subn(r"(table ipv4_lpm \{.*?size = )4096;", r"\g<1>4;", src, count=1, flags=re.S)
    assert n == 1
    (tmp_path / "small.p4").write_text(small)
    routes = "".join(f"  - {{switch: s1, prefix: 10.{i}.0.0/16, via: 1}}\n" for i in range(1, 5))
    extra = f"program: small.p4\ninclude: [{ROOT / 'p4src'}]\nroutes:\n" + routes
    (tmp_path / "n.yaml").write_text(one_switch(daemons["s1"].address, extra))
    r = dlcpctl("apply", str(tmp_path / "n.yaml"))
    assert r.returncode == 5, r.stderr
    assert "rejected 1 of" in r.stderr and "RESOURCE_EXHAUSTED" in r.stderr
    assert re.search(r"INSERT ipv4_lpm dst_addr=10\.\d\.0\.0/16 -> set_nhop\(.*\): RESOURCE_EXHAUSTED", r.stderr)


def test_invalid_file_exit_code(tmp_path) -> None:
    (tmp_path / "bad.yaml").write_text(one_switch("127.0.0.1:1").replace("attach: s1:1", "attach: s1:1, vlan: 3"))
    r = dlcpctl("apply", str(tmp_path / "bad.yaml"))
    assert r.returncode == EXIT_CODES["netfile"] == 3
    assert f"{tmp_path / 'bad.yaml'}:5: hosts.h1.vlan: unknown key 'vlan'" in r.stderr, r.stderr
    r = dlcpctl("show", "tables")
    assert r.returncode == 2 and "no network file" in r.stderr
    r = dlcpctl("-n", str(tmp_path / "bad.yaml"), "show", "everything")
    assert r.returncode == 2  # usage


def test_program_error(tmp_path) -> None:
    (tmp_path / "broken.p4").write_text("#include <core.p4>\ncontrol C() { apply { x = ; } }\n")
    (tmp_path / "n.yaml").write_text(one_switch("127.0.0.1:1", "program: broken.p4\n"))
    r = dlcpctl("apply", str(tmp_path / "n.yaml"))
    assert r.returncode == EXIT_CODES["program"] == 6, r.stderr
    assert "the P4 program does not compile" in r.stderr and "broken.p4:2:" in r.stderr, r.stderr
