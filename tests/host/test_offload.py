"""UDP segmentation offload on the send path and GRO batches on the receive path: same data, same wire, and a clean
fallback where the kernel refuses GSO."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from host.transport import Options
from host.transport.faults import LossySocket
from host.transport.transmit import GSO_MAX_SEGS
from testbed.netns import Star, run
from tests.host.conftest import run_on_hosts

ROOT = Path(__file__).resolve().parents[2]


def _transfer(eps, n: int, loss_bound: float = 0.0) -> tuple[np.ndarray, np.ndarray, object]:
    a, b = eps
    x = np.random.default_rng(3).standard_normal(n).astype(np.float32)
    h = a.send(1, x, transfer_id=5, loss_bound=loss_bound)
    out = np.empty(n, np.float32)
    res = b.recv(0, 5, out=out, timeout=20)
    h.wait(20)
    return x, out, res


def test_gso_and_gro_on_loopback_deliver_identical_data(make_endpoints):
    eps = make_endpoints(2, Options(mtu=1500))
    x, out, res = _transfer(eps, 1 << 20)
    assert np.array_equal(x, out) and res.report.zero_filled == 0
    tx, rx = eps[0].stats(), eps[1].stats()
    assert tx["tx_gso_sends"] > 0  # loopback takes GSO sends
    assert rx["rx_gro_buffers"] > 0  # and, with UDP_GRO on the socket, hands them back whole
    # every datagram is still an ordinary DLCP packet: the receiver counts each segment once (the sender may have
    # resent a few after a timeout on a loaded host)
    assert rx["rx_data_packets"] == res.stats["packets"] <= tx["tx_data_packets"]


def test_offload_off_sends_one_datagram_per_sendmsg(make_endpoints):
    eps = make_endpoints(2, Options(mtu=1500, offload=False))
    x, out, _ = _transfer(eps, 200_000)
    assert np.array_equal(x, out)
    assert eps[0].stats()["tx_gso_sends"] == 0 and eps[1].stats()["rx_gro_buffers"] == 0


def test_fault_injection_sees_every_datagram(make_endpoints):
    """A socket wrapper turns GSO off: its loss decisions are per datagram, so the bounded-loss contract holds."""
    per = {0: Options(mtu=1500, socket_wrapper=lambda s: LossySocket(s, loss_eligible=0.2, seed=4)),
           1: Options(mtu=1500)}
    eps = make_endpoints(2, per_rank=per)
    x, out, res = _transfer(eps, 300_000, loss_bound=0.05)
    assert eps[0].stats()["tx_gso_sends"] == 0
    assert 0 < res.report.zero_filled <= 0.05 * x.size
    kept = np.ones(x.size, bool)
    for a, b in res.report.lost_ranges:
        assert not out[a:b].any()
        kept[a:b] = False
    assert np.array_equal(out[kept], x[kept])


PEER = """
import json, sys
import numpy as np
sys.path.insert(0, {root!r})
from host.transport import Endpoint, Options
from host.transport.cc import CCParams
rank, addrs = int(sys.argv[1]), sys.argv[2].split(",")
ep = Endpoint(rank, dict(enumerate(addrs)), 9, 9, Options(peer_timeout=10, {options}))
print("ready", flush=True)
sys.stdin.readline()  # both bound: what is sent before the receiver's socket exists would be lost
x = np.arange({n}, dtype=np.float32)
if rank == 0:
    ep.send(1, x, transfer_id=1).wait(30)
else:
    out = np.empty_like(x)
    ep.recv(0, 1, out=out, timeout=30)
    assert np.array_equal(out, x), "data differs"
print(json.dumps(ep.stats()), flush=True)
ep.close()
"""


def _run_pair(net: Star, options: str, n: int = 400_000) -> tuple[dict, dict]:
    """Host 0 sends ``n`` float32 (1.6 MB by default) to host 1, both with ``Options(peer_timeout=10, <options>)``
    (Python source), started together once both are bound; their final stats (receiver, sender)."""
    addrs = ",".join(h.ip for h in net.hosts)
    out = run_on_hosts(net, PEER.format(root=str(ROOT), options=options, n=n), {1: ["1", addrs], 0: ["0", addrs]},
                       timeout=60)
    return out[1], out[0]


@pytest.mark.netns
def test_refused_gso_falls_back_to_one_datagram_per_sendmsg(root_required):
    """The kernel refuses UDP_SEGMENT when a segment exceeds the route's MTU (here: the endpoint told 9000, the
    link 1500). The endpoint must turn GSO off, resend that run one datagram at a time (the kernel fragments them,
    as it does every datagram larger than the path) and deliver everything."""
    with Star(2, rate=None, mtu=1500) as net:
        rx, tx = _run_pair(net, "mtu=9000")
    assert tx["tx_gso_sends"] == 0 and tx["send_errors"] == 0
    assert tx["tx_data_packets"] >= rx["rx_data_packets"] > 0


SNIFF = """
import json, socket, struct, sys, time
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
s.setsockopt(socket.SOL_SOCKET, 33, 64 << 20)  # SO_RCVBUFFORCE: keep every frame
s.bind(("p0", 0x0003)); s.settimeout(0.5)
print("ready", flush=True)
def csum(b):
    if len(b) % 2: b += b"\\0"
    t = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while t >> 16: t = (t & 0xFFFF) + (t >> 16)
    return t
lens, bad, n, end = [], 0, 0, time.monotonic() + 30
while time.monotonic() < end:
    try:
        f, meta = s.recvfrom(70000)
    except socket.timeout:
        if n: break
        continue
    if meta[2] == socket.PACKET_OUTGOING or f[23] != 17:
        continue
    ihl = (f[14] & 15) * 4
    udp = f[14 + ihl:]
    n += 1
    lens.append(len(f))
    pseudo = f[26:34] + struct.pack("!BBH", 0, 17, len(udp))
    if struct.unpack("!H", udp[6:8])[0] and csum(pseudo + udp) != 0xFFFF:
        bad += 1
print(json.dumps({"frames": n, "max_len": max(lens or [0]), "bad_checksums": bad}), flush=True)
"""


@pytest.mark.netns
def test_offload_free_interface_puts_only_plain_datagrams_on_the_wire(root_required):
    """On an interface with offloads off (the testbed's hosts: raw-socket switches must see whole frames with whole
    checksums) a GSO send is cut by the kernel before the link, or refused and resent one datagram at a time:
    either way a raw socket on the far end of the veth sees only MTU-sized frames with correct UDP checksums."""
    with Star(2, rate=None, mtu=1500) as net:
        run(*net.cmd(0, ["ethtool", "-K", "eth0", "rx", "off", "tx", "off", "sg", "off", "tso", "off", "gso", "off",
                         "gro", "off"]))
        sniff = subprocess.Popen(["ip", "netns", "exec", net.sw, sys.executable, "-c", SNIFF],
                                 stdout=subprocess.PIPE, text=True)
        assert sniff.stdout.readline().strip() == "ready"
        rx, tx = _run_pair(net, "mtu=1500")
        wire = json.loads(sniff.communicate(timeout=60)[0].strip().splitlines()[-1])
        assert tx["tx_data_packets"] >= rx["rx_data_packets"] > 0 and tx["send_errors"] == 0  # (+ resends)
        assert wire["frames"] >= rx["rx_data_packets"]
        assert wire["max_len"] <= 1500 + 14 and wire["bad_checksums"] == 0


def _host_egress_drops(net: Star, i: int) -> int:
    """Packets host i's own egress shaper dropped (the first qdisc of ``qdisc_stats``: the host side)."""
    return int(re.findall(r"dropped (\d+)", net.qdisc_stats(i))[0])


@pytest.mark.netns
@pytest.mark.parametrize("send_buf", [32 << 20, None])
def test_the_send_buffer_keeps_a_window_from_overflowing_the_host_queue(root_required, send_buf):
    """A window larger than the host's egress queue: with a 32 MiB send buffer the burst lands in the tbf queue and
    whole GSO runs are dropped there (then retransmitted); with the default send buffer (Options.send_buf) the
    socket makes the sender wait instead, as TCP Small Queues does, and nothing is dropped or resent."""
    # a first window of ~9 MB: far more than the host's 1 Gb/s tbf queue (20 ms, 2.5 MB) holds; its last packets
    # leave ~70 ms after the first, so the first timeout waits longer than that
    size = send_buf if send_buf is not None else Options().send_buf
    options = (f"mtu=9000, send_buf={size}, "
               "cc=CCParams(mss=8964, init_cwnd_pkts=1000, max_cwnd_bytes=16 << 20, rto_init=0.5)")
    with Star(2, rate="1gbit", mtu=9000) as net:
        rx, tx = _run_pair(net, options, n=4 << 20)
        drops = _host_egress_drops(net, 0)
    assert rx["transfers_received"] == 1  # (and the receiver checked every element)
    if send_buf is None:
        assert tx["tx_buffer_full"] > 0  # the socket refused bursts, and their packets went out later, intact
        assert drops == 0 and tx["retransmissions"] == 0, (drops, tx["retransmissions"])
    else:
        assert drops > 0 and tx["retransmissions"] > 0, (drops, tx["retransmissions"])


class _RefusingSocket:
    """A send path that now and then refuses a datagram as a full send buffer does (BlockingIOError, nothing sent)
    and drops some data packets outright; it counts what reaches the real socket."""

    def __init__(self, sock, refuse_every: int, drop_every: int):
        self.sock, self.refuse_every, self.drop_every = sock, refuse_every, drop_every
        self.calls = self.data_sent = self.data_dropped = self.refused = 0

    def sendmsg(self, buffers, ancdata=(), flags=0, address=None):
        self.calls += 1
        if self.calls % self.refuse_every == 0:
            self.refused += 1
            raise BlockingIOError(11, "Resource temporarily unavailable")
        if bytes(buffers[0][:1])[0] & 0x0F == 0:  # a DATA packet (message type 0)
            if self.calls % self.drop_every == 0:
                self.data_dropped += 1
                return sum(len(b) for b in buffers)
            self.data_sent += 1
        return self.sock.sendmsg(buffers, ancdata, flags, address)

    def __getattr__(self, name):
        return getattr(self.sock, name)


def test_refused_sends_go_out_later_and_are_counted_once(make_endpoints):
    """Bursts cut short by a full send buffer (with losses and retransmissions around them, ACKs and DONEs refused
    too): the refused tail is sent later, the data arrives whole, and the counters match what reached the wire."""
    wrappers = []

    def wrap(sock):
        wrappers.append(_RefusingSocket(sock, refuse_every=7, drop_every=23))
        return wrappers[-1]

    per = {0: Options(mtu=1500, socket_wrapper=wrap, peer_timeout=20),
           1: Options(mtu=1500, socket_wrapper=lambda s: _RefusingSocket(s, refuse_every=5, drop_every=10**9))}
    eps = make_endpoints(2, per_rank=per)
    x, out, res = _transfer(eps, 500_000)
    assert np.array_equal(x, out) and res.report.zero_filled == 0
    w, tx = wrappers[0], eps[0].stats()
    assert w.refused > 0 and w.data_dropped > 0 and tx["tx_buffer_full"] > 0
    assert tx["tx_data_packets"] == w.data_sent + w.data_dropped  # counted once each, when it reached the wire
    assert tx["tx_data_packets"] == res.stats["packets"] + tx["retransmissions"]
    assert tx["retransmissions"] >= w.data_dropped
    assert eps[1].stats()["send_errors"] == 0  # the receiver's refused ACKs/DONEs waited, none was lost


FANOUT = """
import json, sys, threading, time
import numpy as np
from pyroute2 import IPRoute
sys.path.insert(0, {root!r})
from host.transport import Endpoint, Options
from host.transport.cc import CCParams
rank, addrs, dsts = int(sys.argv[1]), sys.argv[2].split(","), [int(d) for d in sys.argv[3].split(",") if d]
# a first window of ~9 MB per peer: the host's queue is bounded by the send buffer alone, not by a window
ep = Endpoint(rank, dict(enumerate(addrs)), 9, 9, Options(peer_timeout=10, mtu=9000,
              cc=CCParams(mss=8964, init_cwnd_pkts=1000, max_cwnd_bytes=16 << 20, rto_init=0.5)))
x = np.arange(4 << 20, dtype=np.float32)  # 16 MiB to each peer
print("ready", flush=True)
sys.stdin.readline()
if dsts:
    ipr = IPRoute()
    idx = ipr.link_lookup(ifname="eth0")[0]
    samples, stop = [], threading.Event()

    def sample():  # this host's egress shaper (tbf): bytes queued, every ~millisecond
        while not stop.is_set():
            for m in ipr.get_qdiscs(index=idx):
                if m.get_attr("TCA_KIND") == "tbf":
                    samples.append((time.monotonic(), m.get_attr("TCA_STATS2").get_attr("TCA_STATS_QUEUE")["backlog"]))
            time.sleep(0.001)

    threading.Thread(target=sample, daemon=True).start()
    hs = [ep.send(d, x, transfer_id=1) for d in dsts]
    started = time.monotonic()
    # when the first transfer ended, by the endpoint's own clock (time.monotonic() at completion): a polling loop
    # here can be scheduled late and would count samples taken after the other flow had the link to itself
    first_done = min(h.wait(30)["ended"] for h in hs)
    stop.set()
    # from 30 ms after the last send() (the queue it found has drained by then) until a transfer ended
    backlog = [b for t, b in samples if started + 0.03 <= t < first_done]
    print(json.dumps({{"samples": len(backlog), "max_backlog": max(backlog, default=-1)}}), flush=True)
else:
    out = np.empty_like(x)
    ep.recv(0, 1, out=out, timeout=30)
    assert np.array_equal(out, x), "data differs"
    print("{{}}", flush=True)
ep.close()
"""


@pytest.mark.netns
@pytest.mark.parametrize("peers", [1, 2])
def test_the_host_queue_is_kept_shallow_while_sending_to_several_peers(root_required, peers):
    """Sending to one peer, the host's own queue may hold up to the send buffer (Options.send_buf), which rides out
    the I/O thread's scheduling gaps; sending to two or more at once it is held to Options.send_buf_shared, so the
    flows' RTTs are not inflated by a queue the host built itself and the I/O thread's round-robin over peers, not
    a deep FIFO, decides each flow's share of the link. Windows here are far larger than either buffer."""
    opts = Options()
    with Star(peers + 1, rate="1gbit", mtu=9000) as net:
        addrs = ",".join(h.ip for h in net.hosts)
        dsts = ",".join(str(d) for d in range(1, peers + 1))
        res = run_on_hosts(net, FANOUT.format(root=str(ROOT)), {i: [str(i), addrs, "" if i else dsts]
                                                                for i in range(peers + 1)})[0]
    assert res["samples"] >= 10, res  # a 16 MiB transfer lasts ~135 ms or more at 1 Gb/s
    # the kernel allows twice the SO_SNDBUF value, counted in buffer sizes (at least the bytes queued); the send
    # that crosses it is still taken (a GSO send: up to 64 KiB), and ACKs go out through the same queue. Without
    # the shared limit two peers queued ~2 MB here, as one does.
    if peers == 1:
        assert res["max_backlog"] > opts.send_buf, res
    else:
        assert 0 < res["max_backlog"] <= 2 * opts.send_buf_shared + (128 << 10), res


TWICE = """
import json, sys
import numpy as np
sys.path.insert(0, {root!r})
from host.transport import Endpoint, Options
from host.transport.cc import CCParams
rank, addrs = int(sys.argv[1]), sys.argv[2].split(",")
ep = Endpoint(rank, dict(enumerate(addrs)), 9, 9, Options(peer_timeout=10, {options}))
print("ready", flush=True)
sys.stdin.readline()
x = np.arange({n}, dtype=np.float32)
seen = []
for tid in range(1, {count} + 1):
    if rank == 0:
        ep.send(1, x, transfer_id=tid).wait(30)
    else:
        out = np.empty_like(x)
        ep.recv(0, tid, out=out, timeout=30)
        assert np.array_equal(out, x), "data differs"
    seen.append(ep.stats())
print(json.dumps(seen), flush=True)
ep.close()
"""


def _overflow_the_host_queue(rate: str, n: int, count: int) -> dict[int, list[dict]]:
    """Rank 0 sends ``count`` transfers of ``n`` float32 to rank 1 through tbf links at ``rate`` with a 32 MiB send
    buffer and a ~9 MB first window, far more than the host's tbf queue holds; each rank's stats after each."""
    options = ("mtu=9000, send_buf=32 << 20, "
               "cc=CCParams(mss=8964, init_cwnd_pkts=1000, max_cwnd_bytes=16 << 20, rto_init=0.5)")
    with Star(2, rate=rate, mtu=9000) as net:
        addrs = ",".join(h.ip for h in net.hosts)
        return run_on_hosts(net, TWICE.format(root=str(ROOT), options=options, n=n, count=count),
                            {1: ["1", addrs], 0: ["0", addrs]}, timeout=120)


@pytest.mark.netns
def test_drops_in_the_host_queue_leave_gso_on(root_required):
    """A window larger than the host's tbf queue (a 32 MiB send buffer lets it reach the queue): the qdisc drops
    whole GSO runs, and with IP_RECVERR the kernel reports each drop to the sender as ENOBUFS. That is congestion
    (the packets count as lost and are resent), not a refused offload: the second transfer still goes out in GSO
    runs. (Taken for a refusal, the first drop had turned GSO off for the endpoint's life: on the demo's 20 Mb/s
    links every later packet then cost a send call and a wake-up of its own.)"""
    out = _overflow_the_host_queue("1gbit", 4 << 20, 2)
    first, second = out[0]
    assert first["tx_local_drops"] > 0 and first["retransmissions"] > 0, first  # the queue overflowed
    assert first["send_errors"] == second["send_errors"] == 0  # a drop in a queue is no send error
    assert second["tx_gso_sends"] > first["tx_gso_sends"], (first, second)  # GSO still on for the second
    assert out[1][1]["transfers_received"] == 2


@pytest.mark.netns
def test_a_drop_in_the_host_queue_caps_the_send_buffer_below_it(root_required):
    """The same overflow: the first transfer's bursts overflow the host's tbf queue (a 32 MiB send buffer, far
    deeper than the queue). The first drop caps the send buffer below the depth the queue had then
    (PacketSocket.learn_queue_drop), so the later transfers wait for room in the buffer, as TCP's Small Queues make
    a TCP sender wait, instead of overflowing the queue again: no more drops, nothing resent. (Without the cap every
    transfer whose window opens past the queue loses whole GSO runs: at 1 Gb/s, 12,583 packets were resent in the
    first 16 MiB transfer alone.)"""
    # (300 Mb/s: a queue of ~1 MB, which a 9 MB first window overflows even from a sender slowed by a busy CPU)
    out = _overflow_the_host_queue("300mbit", 8 << 20, 3)
    last = out[0][-1]
    drops, resent = last["tx_local_drops"], last["retransmissions"]
    print("local drops", [s["tx_local_drops"] for s in out[0]], "retransmissions", [s["retransmissions"] for s in out[0]])
    assert drops > 0, last  # the queue overflowed
    # once or twice (the I/O thread and the caller both send; a second drop may be under way before the first is
    # learned), not again: what was resent is the dropped GSO runs and a few tail packets, against thousands of
    # resent packets in the first transfer alone without the cap
    assert drops <= 2, last
    assert resent <= drops * GSO_MAX_SEGS + 8, last
    assert last["send_errors"] == 0
    assert out[1][2]["transfers_received"] == 3


def _paced_link(options: str) -> dict[int, list[dict]]:
    """Rank 0 sends four 256 KiB transfers to rank 1 over 20 Mb/s links whose tbf burst is two packets, so datagrams
    arrive one at a time (as the testbed's switches emulate a link); each rank's stats after each transfer."""
    with Star(2, rate="20mbit", mtu=1500, tbf_burst="3kb") as net:
        addrs = ",".join(h.ip for h in net.hosts)
        return run_on_hosts(net, TWICE.format(root=str(ROOT), options=options, n=64 << 10, count=4),
                            {1: ["1", addrs], 0: ["0", addrs]}, timeout=120)


@pytest.mark.netns
def test_holds_take_datagrams_of_a_slow_link_in_batches(root_required):
    """On a slow link datagrams come one per wake-up: without the holds the receiver wakes, and ACKs, for nearly
    every one (so the sender wakes for nearly every ACK). With the receive hold (``rx_hold``) the receiver sleeps
    through arrivals and takes several per pass, and with the ACK hold (``ack_hold``, ``ack_min``) it ACKs every
    few packets: the defaults, since the packets come more than ``hold_gap`` apart; the transfers complete with
    the same data (the script checks it) in about the same time."""
    plain = _paced_link("mtu=1500, ack_hold=0.0, rx_hold=0.0")
    held = _paced_link("mtu=1500")
    rx0, rx1 = plain[1][-1], held[1][-1]
    data = rx0["rx_data_packets"]
    assert data == rx1["rx_data_packets"] >= 4 * 180  # (four transfers of ~182 packets: nothing lost)
    print("plain: wakes", rx0["io_wakes_socket"], "acks", rx0["acks_sent"], "| held: wakes", rx1["io_wakes_socket"],
          "holds", rx1["io_rx_holds"], "acks", rx1["acks_sent"], "| of", data, "packets")
    assert rx0["io_wakes_socket"] > data // 2 and rx0["acks_sent"] > data // 2  # the regime: one at a time
    assert rx0["io_rx_holds"] == 0
    assert rx1["io_rx_holds"] > 0 and rx1["io_wakes_socket"] < data // 4
    assert rx1["acks_sent"] < data // 3
