"""``dlcp-switch`` on real interfaces: veth pairs into network namespaces made here, a finsy controller, UDP
across the daemon with the program's rewrites, pcaps, digests, PacketIn/PacketOut with real frames, priority
and rate set through the management service, link emulation, and faults (garbage frames, a controller killed
mid-stream, SIGTERM under traffic) -- nothing left behind."""
from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import finsy as fy
import pytest
from finsy import P4DigestEntry, P4PacketOut, P4TableAction, P4TableEntry, P4TableMatch
from scapy.all import IP, UDP, Ether, RawPcapReader, rdpcap

from switch.daemon.mgmt import MgmtClient

from switchd import CPU_PORT, ROOT, ROUTER, ROUTER_MAC, Daemon, Net, p4info_file, run, wait_ready

pytestmark = pytest.mark.slow
netns = pytest.mark.netns


@pytest.fixture(scope="module")
def net(root_required):
    with Net(2) as n:
        yield n
    assert n.leftovers() == []


@pytest.fixture(scope="module")
def p4info(tmp_path_factory) -> Path:
    return p4info_file(ROUTER, tmp_path_factory.mktemp("p4info"))


def options(p4info: Path, **kw) -> fy.SwitchOptions:
    return fy.SwitchOptions(p4info=p4info, p4blob=ROUTER.read_bytes(), device_id=0, **kw)


def route_entries(net: Net) -> list:
    """Routes to both hosts (dst MAC = the host, src MAC = the router, TTL - 1) and both hosts' MACs as known
    sources (no digests)."""
    out = []
    for i in net.hosts:
        out.append(P4TableEntry("routes", match=P4TableMatch(dstAddr=f"10.77.{i}.0/24"),
                                action=P4TableAction("set_nhop", dmac=net.mac(i), smac=ROUTER_MAC, port=i)))
    return out


def known_sources(net: Net) -> list:
    return [P4TableEntry("sources", match=P4TableMatch(srcAddr=net.mac(i)), action=P4TableAction("mark_known"))
            for i in net.hosts]


@netns
def test_udp_through_the_daemon_with_rewrites_pcaps_digest_packet_io(net, p4info, tmp_path):
    pcap_dir = tmp_path / "pcap"
    with Daemon(*net.port_args(), "--cpu-port", str(CPU_PORT), "--pcap", str(pcap_dir), str(ROUTER)) as d:
        async def go():
            async with fy.Switch("sw", d.addr, options(p4info)) as sw:
                await sw.insert(route_entries(net) + [P4TableEntry("sources", match=P4TableMatch(
                    srcAddr=net.mac(2)), action=P4TableAction("mark_known"))])
                await sw.insert([P4DigestEntry("learn_t", max_list_size=1)])

                rx = net.tool(2, "recv", "5000", 5, 20)
                wait_ready(rx)
                net.run_tool(1, "send", net.ip(2), 5000, 5, "hello")
                got = json.loads(rx.communicate(timeout=30)[0])
                assert sorted(p for _, p, _ in got) == [f"hello-{i}" for i in range(5)]
                assert {ttl for _, _, ttl in got} == {63}                  # TTL 64 decremented by the router

                # h1's MAC is not a known source: the controller learns it through a digest
                async def first_digest():
                    async for dl in sw.read_digests("learn_t"):
                        return dl
                dl = await asyncio.wait_for(first_digest(), 10)
                item = dl.data[0]
                assert item["src_mac"] == int(net.mac(1).replace(":", ""), 16) and item["port"] == 1

                # a real frame punted to the controller arrives as PacketIn with its ingress port
                async def first_packet():
                    async for pkt in sw.read_packets(eth_types={0x88B5}):
                        return pkt
                reader = asyncio.ensure_future(first_packet())
                await asyncio.sleep(0.1)
                punt = bytes.fromhex("ffffffffffff" + net.mac(1).replace(":", "") + "88b5") + b"punt" * 15
                net.run_tool(1, "raw", "eth0", punt.hex())
                pkt = await asyncio.wait_for(reader, 10)
                assert pkt.payload == punt and pkt["ingress_port"] == 1

                # PacketOut to port 2 leaves on h2's link
                out = bytes.fromhex(net.mac(2).replace(":", "") + ROUTER_MAC.replace(":", "") + "88b6") + b"o" * 50
                await sw.write([P4PacketOut(out, egress_port=2, _pad=0)])
                with MgmtClient(d.addr) as m:
                    for _ in range(100):
                        st = m.stats()
                        if st.ports[2].tx_packets >= 6:
                            break
                        await asyncio.sleep(0.05)
                assert st.ports[1].rx_packets >= 6 and st.ports[2].tx_packets >= 6
                assert st.ports[CPU_PORT].tx_packets >= 1 and st.ports[CPU_PORT].rx_packets >= 1
                assert st.packet_errors == 0
                return out

        out = run(go())
        assert d.stop() == 0, d.log()
    # pcaps: what came in on port 1 and what left on port 2, parsed by scapy (and tcpdump, which CI installs)
    files = {p.name for p in pcap_dir.iterdir()}
    assert {f"port1_{net.ifs[1]}_in.pcap", f"port2_{net.ifs[2]}_out.pcap"} <= files
    sent_in = [p for p in rdpcap(str(pcap_dir / f"port1_{net.ifs[1]}_in.pcap")) if UDP in p]
    sent_out = [p for p in rdpcap(str(pcap_dir / f"port2_{net.ifs[2]}_out.pcap")) if UDP in p]
    assert len(sent_in) == 5 and len(sent_out) == 5
    for a, b in zip(sent_in, sent_out):
        assert a[IP].ttl == 64 and b[IP].ttl == 63
        assert b[Ether].dst == net.mac(2) and b[Ether].src == ROUTER_MAC
        fixed = b[IP].copy()
        del fixed.chksum
        assert IP(bytes(fixed)).chksum == b[IP].chksum                 # the program recomputed the checksum
        assert bytes(a[UDP].payload) == bytes(b[UDP].payload)
    assert any(bytes(p) == out for p in rdpcap(str(pcap_dir / f"port2_{net.ifs[2]}_out.pcap")))
    if shutil.which("tcpdump"):
        cp = subprocess.run(["tcpdump", "-nr", str(pcap_dir / f"port2_{net.ifs[2]}_out.pcap")],
                            capture_output=True, text=True, timeout=30)
        assert cp.returncode == 0 and cp.stdout.count("UDP") == 5


def _order(net: Net, n: int) -> list[int]:
    """h1 sends n datagrams to port 5000 (priority 0) then n to port 5001 (priority 7); the dport of each
    datagram in the order h2 received them."""
    rx = net.tool(2, "recv", "5000,5001", 2 * n, 30)
    wait_ready(rx)
    net.run_tool(1, "burst", net.ip(2), 5000, n, 5001, n)
    got = json.loads(rx.communicate(timeout=40)[0])
    assert len(got) == 2 * n, got
    return [p for p, _, _ in got]


@netns
def test_priority_and_rate_from_management_change_departure_order(net, p4info):
    """The ACL puts UDP port 5001 in priority 7 (port 5000 stays in 0).  Unshaped, nothing queues and h2 gets the
    datagrams in sending order; with port 2's line rate set low through the management service, queues build and
    strict priority lets the high-priority datagrams overtake the queued low-priority ones.  A small queue depth
    then tail-drops (counted), and emulated loss drops everything (counted)."""
    n = 25
    with Daemon(*net.port_args(), "--cpu-port", str(CPU_PORT), str(ROUTER)) as d:
        async def setup():
            async with fy.Switch("sw", d.addr, options(p4info)) as sw:
                await sw.insert(route_entries(net) + known_sources(net) + [
                    P4TableEntry("acl", match=P4TableMatch(srcAddr=(net.ip(1), "255.255.255.255"),
                                                           dport=(5001, 5001)),
                                 action=P4TableAction("set_prio", prio=7), priority=10)])
        run(setup())
        with MgmtClient(d.addr) as m:
            m.set_queue(2, depth=2 * n + 10)
            fifo = _order(net, n)                   # no shaping: nothing queues, first come first served
            m.set_link(2, rate_bps=20_000)          # ~50-byte frames: one departure every ~20 ms
            prio = _order(net, n)
            st = m.stats()

            m.set_queue(2, 0, depth=3)              # a short low-priority queue tail-drops
            rx = net.tool(2, "recv", "5000", n, 3)
            wait_ready(rx)
            net.run_tool(1, "send", net.ip(2), 5000, n, "short")
            arrived = len(json.loads(rx.communicate(timeout=30)[0]))
            st_depth = m.stats()

            m.set_link(2, rate_bps=0, loss=1.0)     # emulated loss: nothing arrives, every drop counted
            rx = net.tool(2, "recv", "5000", 1, 2)
            wait_ready(rx)
            net.run_tool(1, "send", net.ip(2), 5000, 3, "lost")
            assert json.loads(rx.communicate(timeout=30)[0]) == []
            st_loss = m.stats()

    def low_before_last_high(order):
        last = max(i for i, p in enumerate(order) if p == 5001)
        return sum(1 for p in order[:last] if p == 5000)

    assert low_before_last_high(fifo) == n          # FIFO: every low-priority datagram went first
    assert low_before_last_high(prio) <= n // 2     # strict priority: the high ones overtook the queued low ones
    q0, q7 = st.ports[2].queues[0], st.ports[2].queues[7]
    assert q0.peak_depth > n // 2 and q0.capacity == 2 * n + 10 and st.ports[2].rate_bps == 20_000
    assert q0.enq_packets == q0.deq_packets == 2 * n and q7.enq_packets == q7.deq_packets == 2 * n
    full = st_depth.drops.get((2, 0, "queue_full"), 0)
    assert full > 0 and arrived + full == n and st_depth.ports[2].queues[0].capacity == 3
    assert st_loss.drops.get((2, 0, "emulated_loss")) == 3 and st_loss.ports[2].loss == 1.0


@netns
def test_link_delay_from_management(net, p4info):
    with Daemon(*net.port_args(), "--cpu-port", str(CPU_PORT), str(ROUTER)) as d:
        async def setup():
            async with fy.Switch("sw", d.addr, options(p4info)) as sw:
                await sw.insert(route_entries(net) + known_sources(net))
        run(setup())
        with MgmtClient(d.addr) as m:
            m.set_link(2, delay_us=300_000)
            rx = net.tool(2, "recv", "5000", 1, 20)
            wait_ready(rx)
            t0 = time.monotonic()
            net.run_tool(1, "send", net.ip(2), 5000, 1, "slow")
            got = json.loads(rx.communicate(timeout=30)[0])
            elapsed = time.monotonic() - t0
            assert [p for _, p, _ in got] == ["slow-0"]
            assert elapsed >= 0.3                     # held back by the emulated propagation delay
            assert m.stats().ports[2].delay_us == 300_000


# ---- faults -------------------------------------------------------------------------------------------------------
CONTROLLER = """
import asyncio, sys
import finsy as fy
from pathlib import Path
async def main():
    opts = fy.SwitchOptions(p4info=Path(sys.argv[2]), p4blob=Path(sys.argv[3]).read_bytes(), device_id=0,
                            initial_election_id=20)
    async with fy.Switch("killed", sys.argv[1], opts) as sw:
        print("primary" if sw.is_primary else "backup", flush=True)
        await asyncio.sleep(3600)
asyncio.run(main())
"""


@netns
def test_faults_garbage_killed_controller_sigterm_under_traffic(net, p4info, tmp_path):
    pcap_dir = tmp_path / "pcap"
    d = Daemon(*net.port_args(), "--cpu-port", str(CPU_PORT), "--pcap", str(pcap_dir), str(ROUTER))
    try:
        async def setup():
            async with fy.Switch("sw", d.addr, options(p4info)) as sw:
                await sw.insert(route_entries(net) + known_sources(net))
        run(setup())

        # random bytes on a port: the daemon stays up and keeps forwarding
        assert net.run_tool(1, "garbage", "eth0", 300, 7)["sent"] == 300
        rx = net.tool(2, "recv", "5000", 1, 20)
        wait_ready(rx)
        net.run_tool(1, "send", net.ip(2), 5000, 1, "after-garbage")
        assert [p for _, p, _ in json.loads(rx.communicate(timeout=30)[0])] == ["after-garbage-0"]
        with MgmtClient(d.addr) as m:
            assert m.stats().ports[1].rx_packets >= 301
        assert d.proc.poll() is None

        # interfaces reconfigured under the daemon (MTU change, down and up): the ports keep working
        for i in net.hosts:
            subprocess.run(["ip", "link", "set", net.ifs[i], "mtu", "9000"], check=True, timeout=30)
            subprocess.run(["ip", "link", "set", net.ifs[i], "down"], check=True, timeout=30)
            subprocess.run(["ip", "link", "set", net.ifs[i], "up"], check=True, timeout=30)
        rx = net.tool(2, "recv", "5000", 1, 20)
        wait_ready(rx)
        for _ in range(50):                     # the veth pair needs a moment to carry frames again
            net.run_tool(1, "send", net.ip(2), 5000, 1, "after-reconfig")
            if rx.poll() is not None:
                break
            time.sleep(0.1)
        assert [p for _, p, _ in json.loads(rx.communicate(timeout=30)[0])] == ["after-reconfig-0"]
        assert d.proc.poll() is None and "socket error" in d.log()      # the link-down error was seen, survived

        # a controller killed mid-stream loses primacy; the backup takes over and can write
        ctl = subprocess.Popen([sys.executable, "-c", CONTROLLER, d.addr, str(p4info), str(ROUTER)],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT)
        try:
            assert ctl.stdout.readline().strip() == "primary"

            async def takeover():
                async with fy.Switch("backup", d.addr, options(p4info, initial_election_id=10)) as sw:
                    assert not sw.is_primary
                    ctl.kill()
                    for _ in range(200):
                        if sw.is_primary:
                            break
                        await asyncio.sleep(0.05)
                    assert sw.is_primary
                    await sw.insert([P4TableEntry("routes", match=P4TableMatch(dstAddr="10.99.0.0/16"),
                                                  action=P4TableAction("to_cpu"))])
            run(takeover())
        finally:
            ctl.kill()
            ctl.wait(10)
        assert d.proc.poll() is None

        # SIGTERM under traffic: clean exit, pcaps complete and readable
        sink = net.tool(2, "sink", 5000, 2.0)
        wait_ready(sink)
        flood = net.tool(1, "flood", net.ip(2), 5000, 3, 200)
        time.sleep(1.5)
        assert d.stop() == 0, d.log()
        assert "dlcp-switch: stopped" in d.stdout_tail
        flood.communicate(timeout=30)
        received = json.loads(sink.communicate(timeout=60)[0])["n"]
        assert received > 0
        # every datagram h2 got is in the pcap (raw reader: the file is large, no dissection needed)
        frames = [f for f, _meta in RawPcapReader(str(pcap_dir / f"port2_{net.ifs[2]}_out.pcap"))]
        assert sum(1 for f in frames if f[12:14] == b"\x08\x00" and f[23] == 17) >= received
    finally:
        d.close()
    assert d.proc.returncode == 0
    # no daemon process left (it has no children), and the test's namespaces go away with the module fixture
    assert subprocess.run(["pgrep", "-f", f"grpc-server-addr 127.0.0.1:0 .*{net.ifs[1]}"],
                          capture_output=True).returncode == 1


# ---- the packet loop in-process (no interfaces) -------------------------------------------------------------------
def test_packet_error_is_logged_counted_and_dropped_and_the_loop_goes_on(caplog):
    """An exception while processing one packet: logged with the packet in hex, counted, the packet dropped;
    the next packet is forwarded.  Departures to a port without an interface are counted as drops."""
    from switch.daemon.main import PacketLoop
    from switch.daemon.device import Device, TmSettings
    from switch.daemon.p4rt.pipeline import build_pipeline

    dev = Device(0, settings=TmSettings(priority_queues=8), include_dirs=[str(ROUTER.parent)], ports=[1])
    dev.install(build_pipeline(dev, ROUTER.read_bytes()))
    sw = dev.pipeline.switch
    sw.insert_entry("I.routes", {"hdr.ipv4.dstAddr": ("10.0.0.0", 8)}, "I.set_nhop",
                    {"dmac": 1, "smac": 2, "port": 2})
    loop = PacketLoop(dev, {})
    good = bytes(Ether(src="02:00:00:00:00:01") / IP(dst="10.1.2.3") / UDP(dport=9) / b"ok")
    bad = bytes(Ether(src="02:00:00:00:00:01") / IP(dst="10.1.2.3") / UDP(dport=9) / b"BOOM-marker")
    real = sw._ingress_one

    def flaky(port, data):
        if b"BOOM-marker" in data:
            raise RuntimeError("injected fault")
        return real(port, data)

    sw._ingress_one = flaky
    with caplog.at_level("ERROR", logger="dlcp.switch"):
        loop.step([(1, bad), (1, good)])
    st = dev.stats()
    assert st.packet_errors == 1
    assert any("injected fault" in r.getMessage() and bad[:40].hex() in r.getMessage() for r in caplog.records)
    assert st.ports[1].rx_packets == 2
    assert st.ports[2].queues[0].deq_packets == 1          # the good one went through the pipeline...
    assert st.drops[(2, 0, "no_interface")] == 1            # ...to a port with no interface here
    loop.stop()


def test_command_line_errors_are_clear(tmp_path):
    """Bad input at start: exit status 1 and one line naming what is wrong; no traceback."""
    def start(*args):
        return subprocess.run([sys.executable, "-m", "switch.daemon", "--grpc-server-addr", "127.0.0.1:0", *args],
                              cwd=ROOT, capture_output=True, text=True, timeout=60)

    bad = tmp_path / "bad.p4"
    bad.write_text(ROUTER.read_text().replace("sm.egress_spec = port;", "sm.egress_spec = nosuchport;"))
    cases = [
        (["-i", "1-veth0"], "expected PORT@IFNAME"),
        (["-i", "1@dlcp-no-such-if0"], "no interface named 'dlcp-no-such-if0'"),
        (["--priority-queues", "9"], "--priority-queues 9"),
        (["--cpu-port", "600"], "--cpu-port 600"),
        (["--grpc-tls-cert", str(bad)], "--grpc-tls-key"),
        ([str(tmp_path / "missing.p4")], "missing.p4"),
        (["-I", str(ROUTER.parent), str(bad)], f"{bad}:"),
    ]
    for args, words in cases:
        cp = start(*args)
        assert cp.returncode == 1, (args, cp.stderr)
        assert words in cp.stderr and "Traceback" not in cp.stderr, (args, cp.stderr)
    line = next(i for i, ln in enumerate(bad.read_text().splitlines(), 1) if "nosuchport" in ln)
    assert f"{bad}:{line}:" in start("-I", str(ROUTER.parent), str(bad)).stderr
    with Daemon() as d:                                       # the address is taken
        cp = subprocess.run([sys.executable, "-m", "switch.daemon", "--grpc-server-addr", d.addr], cwd=ROOT,
                            capture_output=True, text=True, timeout=60)
        assert cp.returncode == 1 and f"cannot listen on {d.addr}" in cp.stderr
