"""Mutated DLCP packets into a live switch: ``dlcp-switch`` (a subprocess) running p4src/dlcp.p4 between two
network namespaces joined to it by veth pairs, programmed over P4Runtime as a controller does (routes, an
equal-cost group DLCP packets are sprayed over, trusted DLCP priorities, drop and mark thresholds), its port to
host 2 drained at a bounded rate so that queues build.

Each batch ``b`` of seed ``s`` (always the same frames for the same ``(s, b)``): host 1 sends, through an
AF_PACKET socket, frames built from genuine DLCP datagrams addressed to host 2 (or to no route), the DLCP part
mutated by ``tests/fuzz/mutate.py`` (bit flips, every header field at its boundaries, truncation, extension,
splices) and/or the outer headers mutated (bit flips anywhere, an IPv4/UDP/Ethernet field set to a boundary value,
the frame cut or extended; the IPv4 checksum usually recomputed so the DLCP parser is reached, sometimes not), some
frames duplicated, in shuffled order. Then host 1 sends genuine DLCP datagrams through its UDP socket.

Oracle, every batch: the daemon is alive and counts no packet error (an exception in packet processing), every
genuine datagram reaches host 2 unchanged (the switch keeps forwarding), and the counters are sane: readable over
P4Runtime, never decreasing, and the program's drop counters, the traffic manager's drops and the forwarded
packets account for every frame the ports received (nothing counted twice or invented).

``python -m tests.fuzz.switch_fuzz --seconds 60`` runs a longer campaign and prints the counts.
"""
from __future__ import annotations

import queue
import random
import socket
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from finsy.proto import p4r

from host import wire
from host.wire import DType, Flag, Header, MsgType

from tests.fuzz.mutate import mutate
from tests.fuzz.p4rt_fuzz import INCLUDE, PROGRAM, Corpus, _bits, _Client

__all__ = ["Result", "campaign", "frame", "main"]

ROOT = Path(__file__).resolve().parents[2]
AGENT = Path(__file__).parent / "ns_agent.py"
CPU_PORT = 255
ROUTER_MAC = "02:00:00:00:00:fe"
_IP_FIELDS = (  # (byte offset, struct format, name) in the IPv4 header
    (0, "B", "version_ihl"), (1, "B", "tos"), (2, "H", "total_length"), (4, "H", "id"), (6, "H", "flags_frag"),
    (8, "B", "ttl"), (9, "B", "protocol"), (10, "H", "checksum"), (12, "I", "src"), (16, "I", "dst"))
_UDP_FIELDS = ((0, "H", "sport"), (2, "H", "dport"), (4, "H", "length"), (6, "H", "checksum"))


def _csum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def _mac(m: str) -> bytes:
    return bytes.fromhex(m.replace(":", ""))


def frame(src_mac: str, src_ip: str, dst_ip: str, payload: bytes, *, sport: int = 40000,
          dport: int = wire.UDP_PORT, ttl: int = 64, tos: int = 0) -> bytearray:
    """An Ethernet/IPv4/UDP frame to the router's MAC with correct lengths and checksums."""
    udp_len = 8 + len(payload)
    ip = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, tos, 20 + udp_len, 0, 0, ttl, 17, 0, socket.inet_aton(src_ip),
                               socket.inet_aton(dst_ip)))
    struct.pack_into("!H", ip, 10, _csum(bytes(ip)))
    udp = bytearray(struct.pack("!HHHH", sport, dport, udp_len, 0))
    pseudo = ip[12:20] + struct.pack("!BBH", 0, 17, udp_len)
    struct.pack_into("!H", udp, 6, _csum(bytes(pseudo + udp + payload)) or 0xFFFF)
    return bytearray(_mac(ROUTER_MAC) + _mac(src_mac) + b"\x08\x00") + ip + udp + payload


def _outer(f: bytearray, rng: random.Random) -> tuple[bytearray, str]:
    """One mutation of the frame's Ethernet/IPv4/UDP part."""
    k = rng.randrange(6)
    if k == 0:
        for _ in range(rng.randint(1, 6)):
            i = rng.randrange(min(len(f), 14 + 20 + 8 + wire.HEADER_LEN))
            f[i] ^= 1 << rng.randrange(8)
        return f, "outer_bitflip"
    if k == 1:
        off, fmt, name = rng.choice(_IP_FIELDS)
        top = (1 << (8 * struct.calcsize(fmt))) - 1
        v = rng.choice((0, 1, top, top - 1, 0x40 if name == "version_ihl" else 0x4F, rng.randint(0, top)))
        struct.pack_into("!" + fmt, f, 14 + off, v)
        if name != "checksum" and rng.random() < 0.7:  # usually valid again, so the parser goes on
            struct.pack_into("!H", f, 24, 0)
            ihl = (f[14] & 0xF) * 4
            if 20 <= ihl <= len(f) - 14:
                struct.pack_into("!H", f, 24, _csum(bytes(f[14: 14 + ihl])))
        return f, "ip_" + name
    if k == 2:
        off, fmt, name = rng.choice(_UDP_FIELDS)
        top = (1 << (8 * struct.calcsize(fmt))) - 1
        struct.pack_into("!" + fmt, f, 34 + off, rng.choice((0, 1, top, wire.UDP_PORT, rng.randint(0, top))))
        return f, "udp_" + name
    if k == 3:
        struct.pack_into("!H", f, 12, rng.choice((0x0806, 0x86DD, 0x8100, 0x88CC, 0x0000, 0xFFFF)))
        return f, "ethertype"
    if k == 4:
        return f[: rng.randint(14, max(14, len(f) - 1))], "frame_truncate"
    return f + rng.randbytes(rng.randint(1, 200)), "frame_extend"


def genuine_dlcp(rng: random.Random, *, tid: int, seq: int, total: int, eligible: bool = True) -> bytes:
    """A well-formed DLCP datagram of a variety of kinds (data in each dtype, feedback, control); a data packet
    is drop-eligible only where ``eligible`` allows."""
    mt = rng.choice((MsgType.DATA, MsgType.DATA, MsgType.DATA, MsgType.ACK, MsgType.NACK, MsgType.CONTROL))
    if mt == MsgType.DATA:
        dt = rng.choice(list(DType))
        count = rng.randint(0, 64)
        payload = rng.randbytes(count * dt.itemsize)
        elig = rng.randrange(total) if eligible else 0
        flags = Flag.DROP_ELIGIBLE if seq < elig else Flag.NONE
        h = Header(msg_type=mt, flags=flags | (Flag.LAST if seq == total - 1 else Flag.NONE),
                   priority=rng.randrange(8), mag_class=rng.randrange(8), dtype=dt, layer=rng.randrange(100),
                   rank=rng.randrange(4), job_id=7, transfer_id=tid, eligible=elig, seq=seq, total=total,
                   offset=seq * 64 * dt.itemsize, count=count, nonce=0x1234)
    elif mt == MsgType.CONTROL:
        payload = struct.pack("!BI", rng.randint(1, 4), rng.getrandbits(32))
        h = Header(msg_type=mt, priority=7, rank=rng.randrange(4), job_id=7, transfer_id=tid, seq=0, total=1,
                   count=len(payload), nonce=0x1234)
    else:
        count = rng.randint(1, 128)
        payload = rng.randbytes((count + 7) // 8)
        h = Header(msg_type=mt, priority=7, rank=rng.randrange(4), job_id=7, transfer_id=tid, seq=seq,
                   total=total, count=count, nonce=0x1234)
    return h.pack() + payload


@dataclass
class Result:
    """Counts of one campaign and every broken property."""

    seed: int = 0
    batches: int = 0
    frames_sent: int = 0  # hostile frames that left host 1
    frames_refused: int = 0  # frames the sending kernel refused (too short or long for the link)
    genuine_sent: int = 0
    genuine_delivered: int = 0
    mutants_delivered: int = 0  # hostile frames that reached host 2's DLCP socket (well-formed after mutation)
    crashes: int = 0
    hangs: int = 0  # genuine datagrams not delivered (the switch stopped forwarding)
    counter_errors: int = 0
    operators: dict[str, int] = field(default_factory=dict)
    ingress_drops: dict[str, int] = field(default_factory=dict)  # by reason (dlcp.p4's DROP_*)
    eligible_drops: int = 0  # drop-eligible frames the thresholds dropped (in ingress or egress)
    switch_drops: dict[str, int] = field(default_factory=dict)  # the daemon's drops by reason (management stats)
    port_rx: int = 0
    forwarded: int = 0
    unaccounted: int = 0  # frames received that no counter shows (0 when the counters add up)
    failures: list[str] = field(default_factory=list)


_DROP_REASONS = ("parser_error", "bad_checksum", "ttl_expired", "no_route", "early_eligible", "hairpin", "6", "7")


class _Agent:
    """``ns_agent.py`` in a namespace: line-oriented, one process for a whole campaign."""

    def __init__(self, ns: str, *args: str):
        self.p = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, str(AGENT), *args],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  bufsize=1)
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for line in self.p.stdout:
            self.lines.put(line.strip())
        self.lines.put("")

    def send(self, datas: list[bytes], timeout: float = 30.0) -> tuple[int, int]:
        """Send ``datas`` (one per line) and wait for the barrier: (sent, refused)."""
        self.p.stdin.write("".join(d.hex() + "\n" for d in datas) + "\n")
        self.p.stdin.flush()
        line = self.lines.get(timeout=timeout)
        _ok, sent, refused = line.split()
        return int(sent), int(refused)

    def close(self) -> None:
        if self.p.poll() is None:
            try:
                self.p.stdin.close()
                self.p.wait(10)
            except (OSError, subprocess.TimeoutExpired):
                self.p.kill()
                self.p.wait(10)


def _counters(c: _Client, names: tuple[str, ...]) -> dict[str, dict[int, int]]:
    """Packet counts of the named indirect counters, by index (a wildcard Read over P4Runtime)."""
    ids = {x.preamble.id: x.preamble.name for x in c.corpus.info.counters if x.preamble.name in names}
    req = p4r.ReadRequest(device_id=0)
    for cid in ids:
        req.entities.add().counter_entry.counter_id = cid
    out: dict[str, dict[int, int]] = {n: {} for n in ids.values()}
    for resp in c.stub.Read(req, timeout=c.deadline):
        for e in resp.entities:
            out[ids[e.counter_entry.counter_id]][e.counter_entry.index.index] = e.counter_entry.data.packet_count
    return out


def _program(c: _Client, net) -> None:
    """What a controller installs, over P4Runtime: host 1's route (10.77.1.0/24 to port 1); host 2's through an
    equal-cost group of two next hops on port 2 (DLCP packets sprayed over them, the program's default load
    balancing); the DLCP priority trusted for data packets, so hostile frames spread over every queue; and on
    port 2, drop and ECN-mark thresholds of a few packets, so drop-eligible frames meet the early drop."""
    info = c.corpus.info
    tables = {t.preamble.name.rsplit(".", 1)[-1]: t for t in info.tables}
    actions = {a.preamble.name.rsplit(".", 1)[-1]: a for a in info.actions}
    req = p4r.WriteRequest(device_id=0, election_id=p4r.Uint128(high=0, low=c.election))

    def entry(table: str, action: str, **params: int) -> p4r.TableEntry:
        u = req.updates.add(type=p4r.Update.INSERT)
        e = u.entity.table_entry
        e.table_id = tables[table].preamble.id
        a = actions[action]
        e.action.action.action_id = a.preamble.id
        for prm in a.params:
            e.action.action.params.add(param_id=prm.id, value=_bits(params[prm.name], prm.bitwidth))
        return e

    def nhop(i: int, nhop_id: int) -> dict[str, int]:
        return {"dmac": int(net.mac(i).replace(":", ""), 16), "smac": int(ROUTER_MAC.replace(":", ""), 16),
                "port": i, "nhop_id": nhop_id}

    lpm = tables["ipv4_lpm"].match_fields[0].id
    for i, action, params in ((1, "set_nhop", nhop(1, 1)), (2, "set_ecmp", {"group": 1, "size": 2})):
        m = entry("ipv4_lpm", action, **params).match.add(field_id=lpm)
        m.lpm.value = socket.inet_aton(f"10.77.{i}.0")
        m.lpm.prefix_len = 24
    group, index = (f.id for f in tables["ecmp_nhop"].match_fields)
    for k in range(2):
        e = entry("ecmp_nhop", "set_nhop", **nhop(2, 2 + k))
        e.match.add(field_id=group).exact.value = _bits(1, 16)
        e.match.add(field_id=index).exact.value = _bits(k, 16)
    prio = entry("dlcp_priority", "trust_dlcp_priority")
    prio.priority = 10
    mt = next(f for f in tables["dlcp_priority"].match_fields if f.name.endswith("msg_type"))
    prio.match.add(field_id=mt.id).ternary.value = _bits(0, 4)
    prio.match[0].ternary.mask = _bits(0xF, 4)
    regs = {r.preamble.name: r for r in info.registers}
    for name, value in (("drop_threshold", 3), ("mark_threshold", 1)):
        for q in range(8):
            u = req.updates.add(type=p4r.Update.MODIFY)
            u.entity.register_entry.register_id = regs[name].preamble.id
            u.entity.register_entry.index.index = 2 * 8 + q  # (port 2, priority q), as dlcp.p4 numbers slots
            u.entity.register_entry.data.bitstring = _bits(value, 19)
    c.stub.Write(req, timeout=c.deadline)


def _drained(mgmt, timeout: float, port: int, received: int) -> None:
    """Wait (at most ``timeout``) until switch port ``port`` has received ``received`` frames and every queue is
    empty: a frame host 1 has sent may still wait in the daemon's socket, unread, behind an empty queue."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = mgmt.stats()
        if st.ports[port].rx_packets >= received and \
                all(q.depth == 0 for p in st.ports.values() for q in p.queues.values()):
            return
        time.sleep(0.02)


def _account(res: Result, st, cnt: dict[str, dict[int, int]], last: dict[str, int], where: str) -> int:
    """Check the counters against the last reading and against each other; record them in ``res``; returns the
    frames received that no counter shows yet (in flight, or lost without a count)."""
    drops = cnt["DlcpIngress.ingress_drops"]
    # eligible packets dropped in egress (the early drop in ingress is one of the ingress drops as well)
    egress_drops = sum(cnt["eligible_drops"].values()) - drops.get(_DROP_REASONS.index("early_eligible"), 0)
    by_reason: dict[str, int] = {}
    for (_port, _prio, why), n in st.drops.items():
        by_reason[why] = by_reason.get(why, 0) + n
    port_rx = sum(p.rx_packets for n, p in st.ports.items() if n != CPU_PORT)
    fwd = sum(cnt["DlcpEgress.port_forwarded"].values())
    now = {"rx": port_rx, "drops": sum(drops.values()) + egress_drops, "fwd": fwd}
    if any(now[k] < last.get(k, 0) for k in now):
        res.counter_errors += 1
        res.failures.append(f"{where}: a counter went down: {last} -> {now}")
    last.update(now)
    # every drop the program counts is a pipeline drop for the daemon, and the other way round
    if by_reason.get("pipeline_drop", 0) != now["drops"]:
        res.counter_errors += 1
        res.failures.append(f"{where}: the program counted {now['drops']} drops, the daemon "
                            f"{by_reason.get('pipeline_drop', 0)} pipeline drops")
    other = sum(n for why, n in by_reason.items() if why != "pipeline_drop")
    unaccounted = port_rx - (now["drops"] + fwd + other)
    if unaccounted < 0:
        res.counter_errors += 1
        res.failures.append(f"{where}: the counters show more packets ({now['drops']} dropped by the program, "
                            f"{other} by the switch, {fwd} forwarded) than the ports received ({port_rx})")
    res.ingress_drops = {_DROP_REASONS[i]: n for i, n in sorted(drops.items()) if n}
    res.eligible_drops = sum(cnt["eligible_drops"].values())
    res.switch_drops = by_reason
    res.port_rx, res.forwarded, res.unaccounted = port_rx, fwd, unaccounted
    return unaccounted


def campaign(seed: int, seconds: float, *, min_batches: int = 1, max_batches: int = 10**9,
             frames_per_batch: int = 150, genuine_per_batch: int = 10, deliver_timeout: float = 15.0,
             queue_rate: float = 5000.0) -> Result:
    """Batches ``0, 1, ...`` of ``seed`` for ``seconds`` (at least ``min_batches``)."""
    sys.path.insert(0, str(ROOT / "tests" / "switch"))
    from switch.daemon.mgmt import MgmtClient
    from switch.backend.p4info import P4InfoBuilder
    from switch.target import Switch
    from switchd import Daemon, Net  # the switch tests' helpers: a real daemon, namespaces with veths

    info = P4InfoBuilder(Switch(str(PROGRAM), include_dirs=[str(INCLUDE)]).ir).build()
    res = Result(seed=seed)
    net = Net(2)
    daemon = client = None
    agents: list[_Agent] = []
    try:
        daemon = Daemon(*net.port_args(), "--cpu-port", str(CPU_PORT), "-I", str(INCLUDE), "--log-level", "error",
                        str(PROGRAM))
        client = _Client(daemon.addr, Corpus(info, PROGRAM.read_bytes()), 30.0)
        _program(client, net)
        mgmt = MgmtClient(daemon.addr)
        # port 2's queues drain at a bounded rate, so a batch builds queues: thresholds, marks and full queues act
        mgmt.set_queue(2, rate_pps=queue_rate)
        inj = _Agent(net.ns[1], "inject", "eth0")
        good = _Agent(net.ns[1], "udp", net.ip(2), str(wire.UDP_PORT))
        rx = _Agent(net.ns[2], "recv", str(wire.UDP_PORT))
        agents += [inj, good, rx]
        if rx.lines.get(timeout=20) != "ready":
            raise RuntimeError("the receiving agent did not start")
        names = ("DlcpIngress.ingress_drops", "DlcpEgress.port_forwarded", "eligible_drops")
        last = {"rx": 0, "drops": 0, "fwd": 0}
        pool: list[bytes] = []
        end = time.monotonic() + seconds
        b = 0
        while b < max_batches and (b < min_batches or time.monotonic() < end):
            rng = random.Random(f"{seed}:{b}")
            where = f"batch {seed}:{b}"
            frames: list[bytes] = []
            for k in range(frames_per_batch):
                total = rng.choice((1, 2, 5, 100, (1 << 32) - 1))
                d = genuine_dlcp(rng, tid=b, seq=rng.randrange(min(total, 1000)), total=total)
                pool.append(d)
                ops: list[str] = []
                if rng.random() < 0.8:
                    d, ops = mutate(d, rng, pool[-50:])
                dst = net.ip(2) if rng.random() < 0.9 else rng.choice(("10.77.1.1", "10.99.0.1", "255.255.255.255"))
                f = frame(net.mac(1), net.ip(1), dst, d, sport=rng.choice((40000, wire.UDP_PORT)),
                          ttl=rng.choice((64, 64, 64, 1, 0, 255)), tos=rng.choice((0, 2, 3, 0xB8)))
                if not ops or rng.random() < 0.4:
                    f, op = _outer(f, rng)
                    ops.append(op)
                for op in ops:
                    res.operators[op] = res.operators.get(op, 0) + 1
                for _ in range(rng.choice((1, 1, 1, 1, 2, 3))):  # duplication
                    frames.append(bytes(f))
            del pool[:-200]
            rng.shuffle(frames)  # reordering
            sent, refused = inj.send(frames)
            res.frames_sent += sent
            res.frames_refused += refused
            # (a genuine datagram behind a full queue would be dropped there)
            _drained(mgmt, deliver_timeout, 1, res.frames_sent + res.genuine_sent)
            # then genuine traffic through host 1's own UDP socket: every datagram must come out at host 2
            want = {genuine_dlcp(random.Random(f"{seed}:{b}:g{k}"), tid=1 << 20 | b, seq=k,
                                 total=genuine_per_batch, eligible=False) for k in range(genuine_per_batch)}
            good.send(sorted(want))
            res.genuine_sent += len(want)
            got: set[bytes] = set()
            deadline = time.monotonic() + deliver_timeout
            while got != want and time.monotonic() < deadline:
                try:
                    line = rx.lines.get(timeout=max(0.01, deadline - time.monotonic()))
                except queue.Empty:
                    break
                d = bytes.fromhex(line) if line else b""
                if d in want:
                    got.add(d)
                else:
                    res.mutants_delivered += 1
            res.genuine_delivered += len(got)
            if got != want:
                res.hangs += 1
                res.failures.append(f"{where}: {len(want) - len(got)} of {len(want)} genuine datagrams did not "
                                    f"arrive within {deliver_timeout} s")
            st = mgmt.stats()
            _account(res, st, _counters(client, names), last, where)
            if st.packet_errors or daemon.proc.poll() is not None:
                res.crashes += 1
                res.failures.append(f"{where}: packet errors {st.packet_errors}, daemon exit "
                                    f"{daemon.proc.poll()}:\n{daemon.log()[-2000:]}")
                break
            res.batches += 1
            b += 1
        # once the last frames have left (ICMP errors from host 2 included), the counters add up exactly
        time.sleep(1.0)
        if _account(res, mgmt.stats(), _counters(client, names), last, "the end") != 0:
            res.counter_errors += 1
            res.failures.append(f"the end: {res.unaccounted} frames received that no counter shows (ingress drops "
                                f"{res.ingress_drops}, switch drops {res.switch_drops}, forwarded {res.forwarded})")
    finally:
        for a in agents:
            a.close()
        if client is not None:
            client.close()
        if daemon is not None:
            rc = daemon.stop()
            if rc != 0:
                res.crashes += 1
                res.failures.append(f"the daemon exited {rc} on SIGTERM:\n{daemon.log()[-2000:]}")
            daemon.close()
        net.close()
        left = net.leftovers()
        if left:
            res.failures.append(f"namespaces or interfaces left behind: {left}")
    return res


def main() -> int:
    from tests.fuzz.run import campaign_main
    return campaign_main(__doc__, campaign, lambda r: not r.failures)


if __name__ == "__main__":
    sys.exit(main())
