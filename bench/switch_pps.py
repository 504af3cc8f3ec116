"""Packets per second through the embedded P4 target, in-process on one core.

Programs:
* tests/switch/programs/l3_router.p4 (LPM routing + ternary/range ACL with a direct counter, IPv4
  checksum verify/update, port counter).  Traffic: UDP packets to 64 destinations over 16 routes and
  8 ACL entries, through parser, ingress, traffic manager, egress and deparser.
* p4src/dlcp.p4, the project's program (8 priority queues): the same UDP traffic with every fourth
  packet a DLCP datagram (UDP 19400) classified by the dlcp_priority table, the others by DSCP;
  LPM routes with set_nhop, per-next-hop and per-(port, priority) counters, register reads.

Candidate: the compiled target (generated Python code; docs/switch-target.md).  Two ways of driving it:
* large batch: ``Switch.process_batch`` of 20,000 packets injected at one instant (all queued, then drained);
  it also measures holding 20,000 queued packet states.
* daemon batch (dlcp.p4): exactly the calls the switch daemon's packet loop makes (switch/daemon/main.py
  ``PacketLoop.step``): per wake-up up to RX_BUDGET = 64 frames from each of the 4 ports, 256 packets, each
  ``inject(port, data, t)`` (which first drains what is due, so a packet's egress runs before the next one's
  ingress), then ``run(t)`` and the departures taken out of ``Switch.outputs``.
Both report ``pps`` from wall time and ``cpu_pps`` from ``time.process_time`` (the machine is shared; CPU time
is the steadier figure, and the comparison metric here).
Baseline: the same forwarding written the naive way in Python with scapy (dissect, LPM by linear
scan, ACL by priority scan, rewrite, checksum by re-serialising) -- what a Python switch looks like
without a P4 compiler.

``--against DIR``: instead, the same cases with this tree's ``switch`` package against the one in DIR (another
checkout, e.g. ``git worktree add /tmp/old HEAD~1``), each measured in its own process, alternating, CPU time.

Daemon mode (root only; ``--daemon`` runs only it, ``--no-daemon`` skips it): ``dlcp-switch`` runs the L3
router on two veth ports into network namespaces, programmed over P4Runtime by finsy; h1 floods UDP (106-byte
frames, ``netns_tool.py flood``) for a few seconds and h2 counts what arrives (``pps``; with the daemon also its
CPU time per received packet, ``daemon_cpu_us_per_packet``, from /proc).  Three comparisons:
* the daemon against the kernel: the same hosts joined by Linux IPv4 forwarding in a router namespace
  (``switchd.Net(kernel_router=True)``), the same flood;
* batched port I/O (``switch.daemon._portio``: recvmmsg/sendmmsg) against per-frame ``recvfrom``/``send`` (a daemon
  started with ``DLCP_NATIVE=0``);
* 10,000 LPM routes (prefix lengths 24/28/30/32, installed over P4Runtime) against 10, the flood sent to as many
  destinations in turn, each hitting its own route.
The machine is shared and the sender, the sink and the daemon share its cores: wall pps swing with the load;
``daemon_cpu_us_per_packet`` is the steadier figure.
"""
from __future__ import annotations

import gc
import ipaddress
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
if os.environ.get("SWITCH_PPS_CODE"):            # --against: import switch from another checkout
    sys.path.insert(0, os.environ["SWITCH_PPS_CODE"])

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
    """Timed large batch: ``packets`` through a switch from ``build`` (default: the L3 router) in one
    ``process_batch``."""
    sw = (build or build_switch)()

    def run(collect: bool = True):
        sw.outputs.clear()          # as the daemon does after every batch: departures do not pile up
        if collect:
            gc.collect()            # start from a clean heap, not the previous run's garbage
        c, t = time.process_time(), time.perf_counter()
        out = sw.process_batch(packets)
        dt, dc = time.perf_counter() - t, time.process_time() - c
        assert len(out) == len(packets)
        return {"pps": len(packets) / dt, "cpu_pps": len(packets) / dc}
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


RX_BUDGET, PORTS = 64, 4
DAEMON_BATCH = RX_BUDGET * PORTS   # what one wake-up of the daemon hands the target (switch/daemon/main.py RX_BUDGET)


def daemon_candidate(packets, build, batch: int = DAEMON_BATCH):
    """Timed daemon batches: the calls of ``PacketLoop.step`` (switch/daemon/main.py) for ``batch`` received
    frames at a time -- ``inject(port, data, t)`` each (it drains what is due first), then ``run(t)``, then
    the departures taken out of ``outputs``; the clock moves on between wake-ups."""
    sw = build()

    def run(collect: bool = True):
        sw.outputs.clear()
        if collect:
            gc.collect()
        c, t0 = time.process_time(), time.perf_counter()
        n = 0
        t = sw.now_ns
        for i in range(0, len(packets), batch):
            t += 10_000 * batch                     # 10 us a packet: the wake-up after this batch
            for port, data in packets[i:i + batch]:
                sw.inject(port, data, t)
            sw.run(t)
            out = sw.outputs[:]
            sw.outputs.clear()
            n += len(out)
        dt, dc = time.perf_counter() - t0, time.process_time() - c
        assert n == len(packets), n
        return {"pps": len(packets) / dt, "cpu_pps": len(packets) / dc}
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
        c, t = time.process_time(), time.perf_counter()
        out = [forward(d) for _, d in packets[:n]]
        dt, dc = time.perf_counter() - t, time.process_time() - c
        assert all(out)
        return {"pps": n / dt, "cpu_pps": n / dc}
    return run


FLOOD_SECONDS = 2.0
PAYLOAD = 64                      # UDP payload bytes: 106-byte frames, as in make_packets
SCALE_ROUTES = 10_000
ANY_IP = "10.128.0.0/9"           # the sink's host accepts every address here (routes of the scale case)


def scale_routes(n: int) -> list[tuple[str, int]]:
    """``n`` distinct routes, prefix lengths 24, 28, 30 and 32 in turn: route k is 10.(128 + k // 256).(k % 256).0
    with its length, so the addresses 10.128.0.0 + 256 k (what the flood sends to) each hit their own route."""
    lens = (24, 28, 30, 32)
    return [(f"10.{128 + k // 256}.{k % 256}.0", lens[k % 4]) for k in range(n)]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` (all its threads) from /proc."""
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def flood_through(net, d, ndst: int):
    """One flood from h1 to h2 of ``net`` (a ``switchd.Net``; to ``ndst`` addresses in turn), counted by h2's sink;
    with a switch process ``d`` (``switchd.Daemon`` or ``tests.bmv2.twin.Bmv2``: ``proc`` and ``log()``), its CPU
    time per received packet."""
    from switchd import wait_ready

    def run():
        sink = net.tool(2, "sink", 5000, 1.0)
        wait_ready(sink)
        cpu0 = cpu_seconds(d.proc.pid) if d is not None else 0.0
        if ndst == 1:
            flood = net.tool(1, "flood", net.ip(2), 5000, FLOOD_SECONDS, PAYLOAD)
        else:
            flood = net.tool(1, "flood", "10.128.0.0", 5000, FLOOD_SECONDS, PAYLOAD, ndst, 256)
        sent = json.loads(flood.communicate(timeout=60)[0])["sent"]
        got = json.loads(sink.communicate(timeout=60)[0])
        if not got["n"]:
            raise RuntimeError("nothing crossed" + (f" the switch:\n{d.log()}" if d else " the kernel router"))
        m = {"pps": got["n"] / got["t"] if got["t"] else 0.0, "received": got["n"], "sent": sent}
        if d is not None:
            m["daemon_cpu_us_per_packet"] = (cpu_seconds(d.proc.pid) - cpu0) / got["n"] * 1e6
        return m
    return run


def cpu_per_packet(case: dict) -> None:
    """Keep the medians of the switches' CPU time per packet with the case (results/ keeps one metric per
    repetition)."""
    for role, runs in case["repetitions"].items():
        us = [r["daemon_cpu_us_per_packet"] for r in runs if "daemon_cpu_us_per_packet" in r]
        if us:
            case["params"][f"daemon_cpu_us_per_packet_{role}"] = statistics.median(us)


def daemon_case(rep) -> None:
    """The daemon between two namespaces against the kernel forwarding the same traffic, the daemon's batched
    port I/O against per-frame socket calls, and 10,000 routes against 10 (see the module docstring)."""
    import asyncio
    import contextlib
    import tempfile
    sys.path.insert(0, str(ROOT / "tests/switch"))
    import finsy as fy
    from finsy import P4TableAction, P4TableEntry, P4TableMatch
    from switchd import ROUTER_MAC, Daemon, Net, p4info_file, sh

    def program(d: Daemon, net: Net, info: Path, routes: list[tuple[str, int]]) -> None:
        async def push():
            opts = fy.SwitchOptions(p4info=info, p4blob=Path(PROGRAM).read_bytes(), device_id=0)
            async with fy.Switch("bench", d.addr, opts) as sw:
                entries = [P4TableEntry("ipv4_lpm", match=P4TableMatch(dstAddr=f"10.77.{i}.0/24"),
                                        action=P4TableAction("set_nhop", dmac=net.mac(i), smac=ROUTER_MAC, port=i))
                           for i in net.hosts]
                entries += [P4TableEntry("ipv4_lpm", match=P4TableMatch(dstAddr=f"{v}/{plen}"),
                                         action=P4TableAction("set_nhop", dmac=net.mac(2), smac=ROUTER_MAC, port=2))
                            for v, plen in routes]
                for i in range(0, len(entries), 1000):
                    await sw.insert(entries[i:i + 1000])
        asyncio.run(asyncio.wait_for(push(), 300))

    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        info = p4info_file(Path(PROGRAM), tmp)
        kernel = stack.enter_context(Net(2, tag="k", kernel_router=True))
        nets, daemons = {}, {}
        for name, env, routes in (("batched", {}, 10), ("per-frame", {"DLCP_NATIVE": "0"}, 10),
                                  ("scale", {}, SCALE_ROUTES)):
            net = nets[name] = stack.enter_context(Net(2, tag=name[0]))
            sh("ip", "netns", "exec", net.ns[2], "ip", "route", "add", "local", ANY_IP, "dev", "lo")
            d = daemons[name] = stack.enter_context(Daemon(*net.port_args(), "--queue-depth", "1024", PROGRAM,
                                                           env=env))
            program(d, net, info, scale_routes(routes))
        common = {"program": "tests/switch/programs/l3_router.p4", "flood_seconds": FLOOD_SECONDS,
                  "frame_bytes": PAYLOAD + 42, "sender": "netns_tool.py flood (Python, one core)"}
        cpu_per_packet(rep.compare("daemon vs kernel forwarding, 1 destination", candidate=flood_through(nets["batched"],
                    daemons["batched"], 1), baseline=flood_through(kernel, None, 1), metric="pps",
                    higher_is_better=True, repetitions=3, warmup=1, candidate_name="dlcp-switch daemon",
                    baseline_name="Linux IPv4 forwarding in a router namespace", params=common))
        cpu_per_packet(rep.compare("daemon: batched port I/O vs per-frame calls", candidate=flood_through(nets["batched"],
                    daemons["batched"], 1), baseline=flood_through(nets["per-frame"], daemons["per-frame"], 1),
                    metric="pps", higher_is_better=True, repetitions=3, warmup=1,
                    candidate_name="recvmmsg/sendmmsg (switch._portio)",
                    baseline_name="recvfrom/send per frame (DLCP_NATIVE=0)", params=common))
        cpu_per_packet(rep.compare(f"daemon: {SCALE_ROUTES:,} LPM routes vs 10", candidate=flood_through(nets["scale"],
                    daemons["scale"], SCALE_ROUTES), baseline=flood_through(nets["batched"], daemons["batched"], 10),
                    metric="pps", higher_is_better=True, repetitions=3, warmup=1,
                    candidate_name=f"{SCALE_ROUTES:,} routes, {SCALE_ROUTES:,} destinations",
                    baseline_name="10 routes, 10 destinations", params=dict(common, prefix_lengths=[24, 28, 30, 32])))


BMV2_PROGRAMS = {"l3": (PROGRAM, "tests/switch/programs/l3_router.p4"), "dlcp": (DLCP_PROGRAM, "p4src/dlcp.p4")}


def bmv2_case(rep) -> None:
    """dlcp-switch against BMv2 ``simple_switch_grpc`` (p4c-bm2-ss's JSON and P4Info) on the same program: the same
    hosts (``switchd.Net``), the same routes written over P4Runtime by ``dlcpctl``'s library, every queue 1,024
    packets deep (the management service; BMv2's Thrift CLI), the same flood, alternating in one run."""
    import asyncio
    import contextlib
    import tempfile
    sys.path.insert(0, str(ROOT / "tests/switch"))
    import finsy as fy
    from finsy import P4TableAction, P4TableEntry, P4TableMatch
    from switchd import ROUTER_MAC, Daemon, Net

    from controller.bmv2 import compile_p4c
    from controller.client import SwitchClient, load_p4info_program, load_program, writer_election_id
    from controller.netfile_model import SwitchSpec
    from controller.tm import open_tm
    from tests.bmv2.twin import Bmv2, missing_binaries

    missing = missing_binaries()
    if missing:
        raise SystemExit(f"switch_pps --bmv2: not on PATH: {', '.join(missing)} (source the P4 toolchain's "
                         f"p4tools.env; docs/development.md)")

    def program(spec: SwitchSpec, prog, net: Net, field: str, extra: dict) -> None:
        async def push():
            async with SwitchClient(spec, p4info=prog.p4info, election_id=writer_election_id(), timeout=30) as c:
                await c.ensure_pipeline(prog)
                entries = [P4TableEntry("ipv4_lpm", match=P4TableMatch({field: f"10.77.{i}.0/24"}),
                                        action=P4TableAction("set_nhop", dmac=net.mac(i), smac=ROUTER_MAC, port=i,
                                                             **{k: v(i) for k, v in extra.items()}))
                           for i in net.hosts]
                await c.write([fy.proto.p4r.Update(type=fy.proto.p4r.Update.INSERT, entity=e.encode(c.schema))
                               for e in entries])
        asyncio.run(asyncio.wait_for(push(), 120))
        tm = open_tm(spec)
        try:
            for port in net.hosts:
                tm.set_queue(port, None, depth=1024)
        finally:
            tm.close()

    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        for key, (path, label) in BMV2_PROGRAMS.items():
            dlcp = key == "dlcp"
            include = (Path(path).parent, ROOT / "p4src/include")
            out = compile_p4c(Path(path), tmp / key, include)
            field, extra = ("dst_addr", {"nhop_id": lambda i: i}) if dlcp else ("dstAddr", {})
            qargs = ["--priority-queues", "8"] if dlcp else ["--priority-queues", "1"]
            net_d = stack.enter_context(Net(2, tag=f"{key[0]}d"))
            d = stack.enter_context(Daemon(*net_d.port_args(), *qargs))
            program(SwitchSpec("dlcp-switch", d.addr), load_program(Path(path), include), net_d, field, extra)
            net_b = stack.enter_context(Net(2, tag=f"{key[0]}b"))
            b = Bmv2({i: net_b.ifs[i] for i in net_b.hosts}, priority_queues=8 if dlcp else 1, log_level=None)
            stack.callback(b.close)
            program(SwitchSpec("bmv2", b.addr, target="bmv2", thrift_port=b.thrift_port),
                    load_p4info_program(out.p4info, out.json), net_b, field, extra)
            version = subprocess.run(["simple_switch_grpc", "--version"], capture_output=True,
                                     text=True).stdout.strip()
            cpu_per_packet(rep.compare(
                f"{label}: dlcp-switch vs BMv2", candidate=flood_through(net_d, d, 1),
                baseline=flood_through(net_b, b, 1), metric="pps", higher_is_better=True, repetitions=5, warmup=1,
                candidate_name="dlcp-switch daemon", baseline_name=f"BMv2 simple_switch_grpc {version}",
                params={"program": label, "flood_seconds": FLOOD_SECONDS, "frame_bytes": PAYLOAD + 42,
                        "queue_depth": 1024, "priority_queues": 8 if dlcp else 1,
                        "sender": "netns_tool.py flood (Python, one core)",
                        "p4c": "p4c-bm2-ss (BMv2 JSON, P4Info)"}))


CASES = {
    "l3": ("l3 router + ACL, UDP 106 B, batch of 20,000", lambda: candidate(make_packets(N))),
    "dlcp": ("p4src/dlcp.p4, batch of 20,000", lambda: candidate(make_dlcp_packets(N), build_dlcp_switch)),
    "dlcp-daemon": (f"p4src/dlcp.p4, daemon batches of {DAEMON_BATCH}",
                    lambda: daemon_candidate(make_dlcp_packets(N), build_dlcp_switch)),
}


def profile(top: int = 15) -> None:
    """Where the time goes: one warm large batch of each program, and dlcp.p4 in daemon batches, under
    cProfile (top functions by own time), and the share of wall time spent in garbage collection in a run
    without the profiler."""
    import cProfile
    import pstats
    for name, make in (("l3 router, batch of 20,000", lambda: candidate(make_packets(N))),
                       ("dlcp.p4, batch of 20,000", lambda: candidate(make_dlcp_packets(N), build_dlcp_switch)),
                       (f"dlcp.p4, daemon batches of {DAEMON_BATCH}",
                        lambda: daemon_candidate(make_dlcp_packets(N), build_dlcp_switch))):
        run = make()
        run()
        gc_ns = [0, 0]

        def on_gc(phase, info, acc=gc_ns):
            if phase == "start":
                acc[1] = time.perf_counter_ns()
            else:
                acc[0] += time.perf_counter_ns() - acc[1]
        gc.collect()
        gc.callbacks.append(on_gc)
        t = time.perf_counter_ns()
        m = run(collect=False)
        total = time.perf_counter_ns() - t
        gc.callbacks.remove(on_gc)
        print(f"== {name}: {m['pps']:,.0f} pps ({m['cpu_pps']:,.0f} by CPU time) unprofiled, "
              f"{100 * gc_ns[0] / total:.0f}% of it in gc")
        gc.collect()
        prof = cProfile.Profile()
        prof.enable()
        run(collect=False)
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(top)


def measure(case: str, reps: int) -> dict:
    """Best of ``reps`` runs of ``case`` after a warm-up (for --against: one process per tree)."""
    run = CASES[case][1]()
    run()
    best = max((run() for _ in range(reps)), key=lambda m: m["cpu_pps"])
    return best


def against(rep, other: Path) -> None:
    """Each case with this tree's switch package and with the one in ``other``, alternating processes."""
    def in_tree(code: Path, case: str):
        def run():
            env = dict(os.environ, SWITCH_PPS_CODE=str(code))
            out = subprocess.run([sys.executable, __file__, "--measure", case], env=env, capture_output=True,
                                 text=True, timeout=600)
            if out.returncode:
                raise RuntimeError(f"{case} with {code}: {out.stderr[-2000:]}")
            return json.loads(out.stdout.splitlines()[-1])
        return run
    for case, (title, _) in CASES.items():
        rep.compare(title, candidate=in_tree(ROOT, case), baseline=in_tree(other, case), metric="cpu_pps",
                    higher_is_better=True, repetitions=3, warmup=0, candidate_name=str(ROOT),
                    baseline_name=str(other))


def main() -> None:
    import argparse
    from harness import Report
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--daemon", action="store_true", help="only the daemon case")
    ap.add_argument("--no-daemon", action="store_true", help="skip the daemon case (it needs root)")
    ap.add_argument("--bmv2", action="store_true",
                    help="only dlcp-switch against BMv2 simple_switch_grpc (root; the P4 toolchain on PATH)")
    ap.add_argument("--profile", action="store_true", help="only print a profile of each program (no report)")
    ap.add_argument("--against", type=Path, metavar="DIR",
                    help="compare this tree's switch package with the one in DIR (CPU time, in-process cases)")
    ap.add_argument("--measure", choices=sorted(CASES), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.measure:
        print(json.dumps(measure(a.measure, 3)))
        return
    if a.profile:
        profile()
        return
    if a.bmv2:
        if os.geteuid() != 0:
            raise SystemExit("switch_pps --bmv2 creates network namespaces and needs root")
        rep = Report("switch_pps_bmv2", params={"metric": "pps: UDP datagrams per second received through the "
                                                          "switch (wall clock)", "routes": 2})
        bmv2_case(rep)
        rep.write()
        return
    if a.against:
        rep = Report("switch_pps_against", params={"other": str(a.against), "packets": N})
        against(rep, a.against.resolve())
        rep.write()
        return
    packets = make_packets(N)
    rep = Report("switch_pps", params={"program": "tests/switch/programs/l3_router.p4 and p4src/dlcp.p4", "packets": N,
                                       "routes": 16, "acl_entries": 8, "baseline": "scapy dissect+forward",
                                       "metric": "cpu_pps: packets per CPU second (wall-time pps kept as pps)"})
    if not a.daemon:
        dpk = make_dlcp_packets(N)
        for case, (title, make) in CASES.items():
            pk = packets if case == "l3" else dpk
            params = {"batch": DAEMON_BATCH if case.endswith("daemon") else N}
            if case != "l3":
                params.update(program="p4src/dlcp.p4", priority_queues=8)
            rep.compare(title, candidate=make(), baseline=baseline(pk), metric="cpu_pps", higher_is_better=True,
                        repetitions=5, warmup=1, params=params)
    if not a.no_daemon:
        if os.geteuid() != 0:
            raise SystemExit("switch_pps: the daemon case creates network namespaces and needs root "
                             "(use --no-daemon to skip it)")
        daemon_case(rep)
    rep.write()
    for c in rep.cases:
        runs = c["repetitions"]["candidate"]
        line = f"{c['case'][:48]:48} candidate median: {statistics.median(r['pps'] for r in runs):10,.0f} pps wall, "
        if "cpu_pps" in runs[0]:
            line += f"{statistics.median(r['cpu_pps'] for r in runs):10,.0f} pps CPU time"
        else:
            line += (f"daemon CPU {c['params']['daemon_cpu_us_per_packet_candidate']:.2f} us/packet (baseline "
                     f"{c['params'].get('daemon_cpu_us_per_packet_baseline', float('nan')):.2f})")
        print(line)


if __name__ == "__main__":
    main()
