"""Packets per second through the embedded P4 target, in-process on one core.

Programs:
* tests/switch/programs/l3_router.p4 (LPM routing + ternary/range ACL with a direct counter, IPv4
  checksum verify/update, port counter).  Traffic: UDP packets to 64 destinations over 16 routes and
  8 ACL entries, through parser, ingress, traffic manager, egress and deparser.
* p4src/dlcp.p4, the project's program (8 priority queues): the same UDP traffic with every fourth
  packet a DLCP datagram (UDP 19400) classified by the dlcp_priority table, the others by DSCP;
  LPM routes with set_nhop, per-next-hop and per-(port, priority) counters, register reads.

Candidate: the compiled target (generated Python code, memoised table lookups). dlcp.p4 is measured twice: the
20,000 packets as one batch (injected at one instant, all queued, then drained), and in batches of 256, each
drained before the next, which is how the daemon drives the target (64 frames per port per wake-up).
Baseline: the same forwarding written the naive way in Python with scapy (dissect, LPM by linear
scan, ACL by priority scan, rewrite, checksum by re-serialising) -- what a Python switch looks like
without a P4 compiler.

Daemon mode (root only; ``--daemon`` runs only it, ``--no-daemon`` skips it): ``dlcp-switch`` runs the L3
router on two veth ports into network namespaces, programmed over P4Runtime by finsy; one namespace floods UDP
(106-byte frames) for a few seconds and the other counts what arrives.  Candidate: datagrams/s received through
the daemon (AF_PACKET in and out, the packet thread, the target).  Baseline: the in-process figure of the same
program, so the ratio says what the real-interface path costs.
"""
from __future__ import annotations

import gc
import ipaddress
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scapy.all import IP, UDP, Ether, Raw  # noqa: E402

from switch.target import Switch  # noqa: E402

PROGRAM = str(ROOT / "tests/switch/programs/l3_router.p4")
DLCP_PROGRAM = str(ROOT / "p4src/dlcp.p4")
N = 20000


def make_packets(n: int) -> list[tuple[int, bytes]]:
    pk = [bytes(Ether(dst="00:00:00:00:00:01") / IP(src=f"192.168.0.{i % 250}", dst=f"10.{i % 16}.0.{i % 4 + 1}")
                / UDP(sport=1000 + i, dport=53 + i % 8) / Raw(b"x" * 64)) for i in range(64)]
    return [(1 + i % 4, pk[i % 64]) for i in range(n)]


def routes():
    return [(f"10.{i}.0.0", 16, i % 4 + 1) for i in range(16)]


def build_switch() -> Switch:
    sw = Switch(PROGRAM)
    sw.tm.set_queue_depth(N)        # a batch is injected at one instant: let it all queue
    for net, plen, port in routes():
        sw.insert_entry("RouterIngress.ipv4_lpm", {"hdr.ipv4.dstAddr": (net, plen)}, "RouterIngress.set_nhop",
                        {"dmac": port, "smac": 0xAA, "port": port})
    for i in range(8):
        sw.insert_entry("RouterIngress.acl", {"hdr.ipv4.srcAddr": (f"172.16.{i}.0", "255.255.255.0"),
                                               "dport": (i * 100, i * 100 + 50)}, "RouterIngress.acl_deny",
                        priority=10 + i)
    return sw


def candidate(packets, build=None):
    """Timed run of ``packets`` through a switch from ``build`` (default: the L3 router)."""
    sw = (build or build_switch)()

    def run():
        sw.outputs.clear()          # as the daemon does after every batch: departures do not pile up
        gc.collect()                # start from a clean heap, not the previous run's garbage
        t = time.perf_counter()
        out = sw.process_batch(packets)
        dt = time.perf_counter() - t
        assert len(out) == len(packets)
        return {"pps": len(packets) / dt}
    return run


def make_dlcp_packets(n: int) -> list[tuple[int, bytes]]:
    from host import wire
    pk = []
    for i in range(64):
        ip = IP(src=f"192.168.0.{i % 250}", dst=f"10.{i % 16}.0.{i % 4 + 1}", tos=(i % 8) << 2)
        if i % 4 == 0:
            hdr = wire.Header(priority=i % 8, layer=i, seq=0, total=1).pack()
            pk.append(bytes(Ether(dst="00:00:00:00:00:01") / ip / UDP(sport=1000 + i, dport=wire.UDP_PORT)
                            / Raw(hdr + b"x" * 28)))
        else:
            pk.append(bytes(Ether(dst="00:00:00:00:00:01") / ip / UDP(sport=1000 + i, dport=53 + i % 8)
                            / Raw(b"x" * 64)))
    return [(5 + i % 4, pk[i % 64]) for i in range(n)]


def build_dlcp_switch() -> Switch:
    sw = Switch(DLCP_PROGRAM, priority_queues=8)
    sw.tm.set_queue_depth(N)
    for net, plen, port in routes():
        sw.insert_entry("DlcpIngress.ipv4_lpm", {"meta.dst_addr": (net, plen)}, "DlcpIngress.set_nhop",
                        {"dmac": port, "smac": 0xAA, "port": port, "nhop_id": port})
    sw.insert_entry("DlcpIngress.dlcp_priority", {"hdr.dlcp.msg_type": (0, 0xF)},
                    "DlcpIngress.trust_dlcp_priority", priority=1)
    for d in range(8):
        sw.insert_entry("DlcpIngress.dscp_priority", {"hdr.ipv4.dscp": d}, "DlcpIngress.set_priority",
                        {"prio": d % 8})
    return sw


def dlcp_candidate(packets):
    return candidate(packets, build_dlcp_switch)


DAEMON_BATCH = 256  # the daemon hands the target what one wake-up read: 64 frames per port (RX_BUDGET), 4 ports


def batched_candidate(packets, build, batch: int = DAEMON_BATCH):
    """As :func:`candidate`, but in batches of ``batch`` packets, each drained before the next, as the daemon's loop
    drives the target; the 20,000-packet single batch above also measures holding 20,000 queued packet states."""
    sw = build()

    def run():
        gc.collect()
        t = time.perf_counter()
        n = 0
        for i in range(0, len(packets), batch):
            sw.outputs.clear()
            n += len(sw.process_batch(packets[i:i + batch]))
        dt = time.perf_counter() - t
        assert n == len(packets)
        return {"pps": len(packets) / dt}
    return run


def baseline(packets):
    rt = [(int(ipaddress.IPv4Address(n)), (0xFFFFFFFF << (32 - p)) & 0xFFFFFFFF, p, port) for n, p, port in routes()]
    rt.sort(key=lambda r: -r[2])
    acl = [(10 + i, int(ipaddress.IPv4Address(f"172.16.{i}.0")), 0xFFFFFF00, i * 100, i * 100 + 50) for i in range(8)]
    acl.sort(key=lambda a: -a[0])

    def forward(data: bytes):
        e = Ether(data)
        if IP not in e or e[IP].ttl <= 1:
            return None
        ip = e[IP]
        dst = int(ipaddress.IPv4Address(ip.dst))
        src = int(ipaddress.IPv4Address(ip.src))
        for net, mask, _, port in rt:
            if dst & mask == net:
                break
        else:
            return None
        dport = e[UDP].dport if UDP in e else 0
        for _, v, m, lo, hi in acl:
            if src & m == v and lo <= dport <= hi:
                return None
        e.dst = f"00:00:00:00:00:{port:02x}"
        e.src = "00:00:00:00:00:aa"
        ip.ttl -= 1
        ip.chksum = None
        return port, bytes(e)

    def run():
        n = len(packets) // 10
        gc.collect()
        t = time.perf_counter()
        out = [forward(d) for _, d in packets[:n]]
        dt = time.perf_counter() - t
        assert all(out)
        return {"pps": n / dt}
    return run


FLOOD_SECONDS = 3.0
PAYLOAD = 64                      # UDP payload bytes: 106-byte frames, as in make_packets


def daemon_case(rep, packets) -> None:
    """Start the namespaces and the daemon, program the routes, and compare flood throughput through the daemon
    with the in-process figure of the same program."""
    import asyncio
    import json
    sys.path.insert(0, str(ROOT / "tests/switch"))
    import finsy as fy
    from finsy import P4TableAction, P4TableEntry, P4TableMatch
    from switchd import ROUTER_MAC, Daemon, Net, p4info_file, wait_ready
    import tempfile

    with Net(2) as net, tempfile.TemporaryDirectory() as tmp:
        info = p4info_file(Path(PROGRAM), Path(tmp))
        with Daemon(*net.port_args(), "--queue-depth", "1024", PROGRAM) as d:
            async def program():
                opts = fy.SwitchOptions(p4info=info, p4blob=Path(PROGRAM).read_bytes(), device_id=0)
                async with fy.Switch("bench", d.addr, opts) as sw:
                    await sw.insert([P4TableEntry("ipv4_lpm", match=P4TableMatch(dstAddr=f"10.77.{i}.0/24"),
                                                  action=P4TableAction("set_nhop", dmac=net.mac(i), smac=ROUTER_MAC,
                                                                       port=i)) for i in net.hosts])
            asyncio.run(asyncio.wait_for(program(), 60))

            def through_daemon():
                sink = net.tool(2, "sink", 5000, 1.0)
                wait_ready(sink)
                flood = net.tool(1, "flood", net.ip(2), 5000, FLOOD_SECONDS, PAYLOAD)
                sent = json.loads(flood.communicate(timeout=60)[0])["sent"]
                got = json.loads(sink.communicate(timeout=60)[0])
                if not got["n"]:
                    raise RuntimeError(f"nothing crossed the daemon:\n{d.log()}")
                return {"pps": got["n"] / got["t"] if got["t"] else 0.0, "received": got["n"], "sent": sent}

            rep.compare("daemon: UDP 106 B between 2 namespaces", candidate=through_daemon,
                        baseline=candidate(packets), metric="pps", higher_is_better=True, repetitions=3, warmup=1,
                        candidate_name="dlcp-switch daemon", baseline_name="in-process target",
                        params={"program": "tests/switch/programs/l3_router.p4", "flood_seconds": FLOOD_SECONDS,
                                "frame_bytes": 106})


def profile(top: int = 15) -> None:
    """Where the time goes: one warm batch of each program under cProfile (top functions by own time),
    and the share of wall time spent in garbage collection in a batch without the profiler."""
    import cProfile
    import pstats
    for name, build, pk in (("l3 router", build_switch, make_packets(N)),
                            ("dlcp.p4", build_dlcp_switch, make_dlcp_packets(N))):
        sw = build()
        sw.process_batch(pk)
        sw.outputs.clear()
        gc_ns = [0, 0]

        def on_gc(phase, info, acc=gc_ns):
            if phase == "start":
                acc[1] = time.perf_counter_ns()
            else:
                acc[0] += time.perf_counter_ns() - acc[1]
        gc.collect()
        gc.callbacks.append(on_gc)
        t = time.perf_counter_ns()
        sw.process_batch(pk)
        total = time.perf_counter_ns() - t
        gc.callbacks.remove(on_gc)
        sw.outputs.clear()
        print(f"== {name}: {N / total * 1e9:,.0f} pps unprofiled, {100 * gc_ns[0] / total:.0f}% of it in gc")
        gc.collect()
        prof = cProfile.Profile()
        prof.enable()
        sw.process_batch(pk)
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(top)


def main() -> None:
    import argparse
    import os
    from harness import Report
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--daemon", action="store_true", help="only the daemon case")
    ap.add_argument("--no-daemon", action="store_true", help="skip the daemon case (it needs root)")
    ap.add_argument("--profile", action="store_true", help="only print a profile of each program (no report)")
    a = ap.parse_args()
    if a.profile:
        profile()
        return
    packets = make_packets(N)
    rep = Report("switch_pps", params={"program": "tests/switch/programs/l3_router.p4 and p4src/dlcp.p4", "packets": N,
                                       "routes": 16, "acl_entries": 8, "baseline": "scapy dissect+forward"})
    if not a.daemon:
        rep.compare("l3 router + ACL, UDP 106 B", candidate=candidate(packets), baseline=baseline(packets),
                    metric="pps", higher_is_better=True, repetitions=5, warmup=1)
        dpk = make_dlcp_packets(N)
        rep.compare("p4src/dlcp.p4, UDP + 1/4 DLCP", candidate=dlcp_candidate(dpk), baseline=baseline(dpk),
                    metric="pps", higher_is_better=True, repetitions=5, warmup=1,
                    params={"program": "p4src/dlcp.p4", "priority_queues": 8})
        rep.compare(f"p4src/dlcp.p4, batches of {DAEMON_BATCH} (as the daemon)",
                    candidate=batched_candidate(dpk, build_dlcp_switch), baseline=baseline(dpk),
                    metric="pps", higher_is_better=True, repetitions=5, warmup=1,
                    params={"program": "p4src/dlcp.p4", "priority_queues": 8, "batch": DAEMON_BATCH})
    if not a.no_daemon:
        if os.geteuid() != 0:
            raise SystemExit("switch_pps: the daemon case creates network namespaces and needs root "
                             "(use --no-daemon to skip it)")
        daemon_case(rep, packets)
    rep.write()


if __name__ == "__main__":
    main()
