"""p4src/dlcp.p4 on BMv2 and on dlcp-switch, programmed with what ``dlcpctl apply`` writes for the same network file,
fed the same frames: every output frame (bytes and port), then every counter and register, must be equal.

What is compared exactly is what the program makes deterministic: one frame at a time through idle queues
(forwarding, rewrites, TTL, checksums, IPv4 options, drop reasons, priorities as the (port, queue) counters
show them), per-packet spraying (a register-driven round robin) and per-flow hashing (CRC-32 of the 5-tuple),
and eligible drops from a queue-depth estimate the test writes.  A real standing queue (ECN marks and egress
eligible drops from ``enq_qdepth``) depends on when each switch's threads or timer serve the queue: there the test
compares what does not depend on timing (every protected packet delivered and unchanged apart from the CE mark,
marks only on ECN-capable packets, drops only of eligible ones, counters consistent with the frames) and the
number of marks and drops within a tolerance (docs/switch-target.md, "Against BMv2")."""
from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from scapy.all import IP, UDP, Ether

from controller.api import Network
from controller.state import desired_entities, slot
from host import wire
from host.scapy_dlcp import DLCP
from tests.p4.dlcp_switch import arp_packet, dlcp_flow, dlcp_packet, tcp_packet, udp_packet

from .conftest import tally
from .twin import ROOT, Pair

pytestmark = pytest.mark.bmv2

DLCP_P4 = ROOT / "p4src" / "dlcp.p4"
INCLUDE = (ROOT / "p4src" / "include",)
# s1 with hosts h1, h2 on ports 1, 2 and two equal-cost links (ports 3, 4) to s2, behind which h3 lives: dlcpctl
# writes /32 routes to h1, h2 and an ECMP group over ports 3 and 4 for h3.
NETWORK = """
switches:
  s1: {address: "127.0.0.1:1", cpu_port: 255}
  s2: {address: "127.0.0.1:2"}
hosts:
  h1: {ip: 10.0.0.1, mac: "02:00:0a:00:00:01", attach: "s1:1"}
  h2: {ip: 10.0.0.2, mac: "02:00:0a:00:00:02", attach: "s1:2"}
  h3: {ip: 10.0.0.3, mac: "02:00:0a:00:00:03", attach: "s2:3"}
links:
  - {between: ["s1:3", "s2:1"]}
  - {between: ["s1:4", "s2:2"]}
thresholds:
  - {drop: 32, mark: 16}
"""
H1, H2, H3 = "10.0.0.1", "10.0.0.2", "10.0.0.3"


def entities(load_balancing: str = "spray") -> list:
    text = NETWORK + f"load_balancing: {load_balancing}\n"
    return desired_entities(Network.from_text(text, ROOT).spec, "s1")


async def same_outputs(pair: Pair, group: str, cases: list[tuple[str, int, bytes]]) -> list[str]:
    """Each frame through both switches; the differences (also counted in the session's tally)."""
    t = tally(group)
    before = len(t.differences)
    for what, port, frame in cases:
        got = await asyncio.to_thread(pair.exchange, port, frame)
        t.compare(f"{what} (in on port {port})", got["bmv2"], got["dlcp-switch"])
    return t.differences[before:]


async def same_state(pair: Pair, group: str) -> list[str]:
    """Every counter cell and register cell on both; the differences."""
    t = tally(group)
    before = len(t.differences)
    counters = await pair.counters()
    for name in counters["dlcp-switch"]:
        t.compare(f"counter {name}", counters["bmv2"].get(name), counters["dlcp-switch"][name])
    regs = await pair.registers()
    for name in regs["dlcp-switch"]:
        t.compare(f"register {name}", regs["bmv2"].get(name), regs["dlcp-switch"][name])
    return t.differences[before:]


def run(coro, timeout: float = 240.0):
    return asyncio.run(asyncio.wait_for(coro, timeout))


def forwarding_cases() -> list[tuple[str, int, bytes]]:
    c: list[tuple[str, int, bytes]] = []
    for prio in range(8):
        c.append((f"DLCP data priority {prio}", 1, bytes(dlcp_packet(H2, priority=prio, layer=prio))))
    for mt in wire.MsgType:
        c.append((f"DLCP {mt.name}", 2, bytes(dlcp_packet(H1, msg_type=int(mt)))))
    c.append(("DLCP eligible, idle queue", 1, bytes(dlcp_packet(H2, eligible=True, mag_class=3))))
    for dscp in (0, 8, 10, 46, 56):
        c.append((f"UDP dscp {dscp}", 1, bytes(udp_packet(H2, dscp=dscp))))
    for ecn in range(4):
        c.append((f"TCP ecn {ecn}", 2, bytes(tcp_packet(H1, ecn=ecn))))
    c.append(("TTL 2 (forwarded with 1)", 1, bytes(udp_packet(H2, ttl=2))))
    c.append(("TTL 1 (expired)", 1, bytes(udp_packet(H2, ttl=1))))
    c.append(("TTL 0", 1, bytes(udp_packet(H2, ttl=0))))
    c.append(("no route", 1, bytes(udp_packet("10.9.9.9"))))
    c.append(("hairpin", 1, bytes(udp_packet(H1))))
    bad = Ether(bytes(udp_packet(H2)))
    bad[IP].chksum = 0x1234
    c.append(("bad IPv4 checksum", 1, bytes(bad)))
    c.append(("IPv4 options (NOP x4)", 1, bytes(udp_packet(H2, options=b"\x01\x01\x01\x01"))))
    c.append(("IPv4 options (RR)", 1, bytes(udp_packet(H2, options=b"\x07\x07\x04" + bytes(4) + b"\x00"))))
    c.append(("ARP request", 1, bytes(arp_packet(H2))))
    c.append(("ARP reply", 2, bytes(arp_packet(H1, op=2, sender=H2))))
    c.append(("IPv6 ethertype", 1, bytes(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:fe", type=0x86DD))
                                     + bytes(40)))
    full = bytes(dlcp_packet(H2, payload=64))
    c.append(("DLCP header cut short", 1, full[:14 + 20 + 8 + 20]))
    c.append(("IPv4 header cut short", 1, full[:14 + 12]))
    c.append(("UDP to the DLCP port, no payload", 1, bytes(Ether(src="02:00:00:00:00:01")
                                                            / IP(src=H1, dst=H2) / UDP(sport=1, dport=wire.UDP_PORT))))
    c.append(("runt frame (14 bytes)", 1, full[:14]))
    return c


def test_forwarding_priorities_and_drop_reasons(twin, tmp_path: Path):
    async def go():
        async with twin.session(DLCP_P4, tmp_path, INCLUDE) as pair:
            await pair.apply(entities())
            diffs = await same_outputs(pair, "dlcp.p4", forwarding_cases())
            diffs += await same_state(pair, "dlcp.p4")
            return diffs
    assert run(go()) == []


def test_spraying_and_per_flow_hashing(twin, tmp_path: Path):
    """DLCP data to h3 is sprayed over ports 3 and 4 in turn (spray_position register); TCP and UDP flows take the
    path their 5-tuple's CRC-32 picks; with load_balancing per-flow DLCP is hashed too."""
    async def go():
        diffs = []
        for mode in ("spray", "per-flow"):
            async with twin.session(DLCP_P4, tmp_path, INCLUDE) as pair:
                await pair.apply(entities(mode))
                cases = [(f"{mode}: DLCP seq {i}", 1, f) for i, f in enumerate(dlcp_flow(H3, 6))]
                cases += [(f"{mode}: DLCP sport {s}", 2, bytes(dlcp_packet(H3, sport=s))) for s in range(40000, 40008)]
                cases += [(f"{mode}: TCP sport {s}", 1, bytes(tcp_packet(H3, sport=s))) for s in range(5000, 5012)]
                cases += [(f"{mode}: UDP src {i}", 2, bytes(udp_packet(H3, src=f"10.1.{i}.{7 * i}"))) for i in range(8)]
                diffs += await same_outputs(pair, "dlcp.p4 spraying", cases)
                diffs += await same_state(pair, "dlcp.p4 spraying")
        return diffs
    assert run(go()) == []


def test_eligible_drops_from_the_depth_estimate(twin, tmp_path: Path):
    """An eligible DLCP data packet is dropped in ingress when its queue's estimated depth (queue_depth register,
    written here as egress would after a burst) reaches its threshold (drop_threshold, or its class's in
    class_drop_threshold when lower); protected packets of the same queue still pass and egress then publishes
    the real depth again."""
    async def go():
        async with twin.session(DLCP_P4, tmp_path, INCLUDE) as pair:
            await pair.apply(entities())
            await pair.register_write([("queue_depth", slot(2, 3), 40), ("queue_depth", slot(2, 5), 20),
                                       ("class_drop_threshold", 2, 10)])
            cases = [
                ("eligible, depth 40 >= 32", 1, bytes(dlcp_packet(H2, priority=3, eligible=True, seq=1))),
                ("eligible class 2, depth 20 >= class threshold 10", 1,
                 bytes(dlcp_packet(H2, priority=5, eligible=True, mag_class=2, seq=2))),
                ("eligible class 1, depth 20 < 32", 1,
                 bytes(dlcp_packet(H2, priority=5, eligible=True, mag_class=1, seq=3))),
                ("protected, depth 40", 1, bytes(dlcp_packet(H2, priority=3, seq=4))),
                ("eligible after egress published depth 0", 1, bytes(dlcp_packet(H2, priority=3, eligible=True,
                                                                                 seq=5))),
                ("eligible NACK (not data): never eligible", 1,
                 bytes(dlcp_packet(H2, priority=3, eligible=True, msg_type=wire.MsgType.NACK))),
            ]
            diffs = await same_outputs(pair, "dlcp.p4 eligible drops", cases)
            diffs += await same_state(pair, "dlcp.p4 eligible drops")
            return diffs
    assert run(go()) == []


def test_standing_queue_marks_and_drops(twin, tmp_path: Path):
    """A burst into a queue served at 200 packets/s: both switches deliver every protected packet (CE-marked from
    the mark threshold on when ECN-capable), drop only eligible ones, and mark and drop about as many (the
    depth each packet sees depends on when each switch serves the queue; see the module docstring)."""
    n = 48

    async def go():
        async with twin.session(DLCP_P4, tmp_path, INCLUDE) as pair:
            await pair.apply(entities())
            await asyncio.to_thread(pair.set_queue, 2, 2, depth=64, rate_pps=200)
            frames = []
            for i in range(n):
                frames.append(bytes(dlcp_packet(H2, priority=2, seq=i, eligible=(i % 3 == 2))))
            got = await asyncio.to_thread(pair.burst, 1, frames, quiet=1.0, timeout=30.0)
            counters = await pair.counters()
            return got, counters
    got, counters = run(go())
    t = tally("dlcp.p4 standing queue")
    summary = {}
    for side, out in got.items():
        protected_in = {i for i in range(n) if i % 3 != 2}
        seqs, marked = [], 0
        for port, data in out:
            assert port == 2, f"{side}: frame out of port {port}"
            pkt = Ether(data)
            seqs.append(pkt[DLCP].seq)
            marked += pkt[IP].tos & 3 == 3
        eligible_lost = {i for i in range(n) if i % 3 == 2} - set(seqs)
        assert protected_in <= set(seqs), f"{side}: protected packets lost: {sorted(protected_in - set(seqs))}"
        c = counters[side]
        drops = c["eligible_drops"].get(slot(2, 2), (0, 0))[1]
        assert drops == len(eligible_lost), f"{side}: eligible_drops {drops}, lost {len(eligible_lost)}"
        assert c["DlcpEgress.ecn_marks"].get(slot(2, 2), (0, 0))[1] == marked
        summary[side] = (marked, len(eligible_lost))
    t.compare("every protected packet delivered on both", True, True)
    (bm, bd), (om, od) = summary["bmv2"], summary["dlcp-switch"]
    t.notes.append(f"{n}-packet burst at 200 packets/s, mark threshold 16, drop threshold 32: ECN marks bmv2 {bm}, "
                   f"dlcp-switch {om}; eligible drops bmv2 {bd}, dlcp-switch {od}")
    t.compare(f"ECN marks within 3 (bmv2 {bm}, dlcp-switch {om})", True, abs(bm - om) <= 3)
    t.compare(f"eligible drops within 3 (bmv2 {bd}, dlcp-switch {od})", True, abs(bd - od) <= 3)
    assert abs(bm - om) <= 3 and abs(bd - od) <= 3, summary
    assert bm > 0 and om > 0, f"no queue built up: {summary}"
