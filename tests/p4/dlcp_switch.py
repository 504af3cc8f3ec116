"""Test helpers for p4src/dlcp.p4 on the embedded target.

What a controller would do (routes, equal-cost groups, priority maps, thresholds, load-balancing mode), written
with the names docs/p4-program.md gives, plus scapy builders for the packets the tests send and small checks on
what comes out. The program is compiled once per test session; every test gets its own switch.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from scapy.all import ARP, IP, TCP, UDP, Ether, Raw
from scapy.packet import Packet

from host import wire
from host.scapy_dlcp import DLCP  # importing binds DLCP to UDP port wire.UDP_PORT for dissection
from switch.frontend.check import load_ir
from switch.target import Departure, Switch

DLCP_P4 = Path(__file__).resolve().parents[2] / "p4src" / "dlcp.p4"
NUM_PRIOS = 8

# Names as they appear in the P4Info.
IPV4_LPM = "DlcpIngress.ipv4_lpm"
ECMP_NHOP = "DlcpIngress.ecmp_nhop"
DLCP_PRIORITY = "DlcpIngress.dlcp_priority"
DSCP_PRIORITY = "DlcpIngress.dscp_priority"
SET_NHOP = "DlcpIngress.set_nhop"
SET_ECMP = "DlcpIngress.set_ecmp"
SET_PRIORITY = "DlcpIngress.set_priority"
TRUST_DLCP_PRIORITY = "DlcpIngress.trust_dlcp_priority"
INGRESS_DROPS = "DlcpIngress.ingress_drops"
NHOP_PACKETS = "DlcpIngress.nhop_packets"
PORT_FORWARDED = "DlcpEgress.port_forwarded"
ECN_MARKS = "DlcpEgress.ecn_marks"
ELIGIBLE_DROPS = "eligible_drops"

# ingress_drops indexes (DROP_* in dlcp.p4).
DROP_PARSER_ERROR, DROP_BAD_CHECKSUM, DROP_TTL_EXPIRED, DROP_NO_ROUTE, DROP_EARLY_ELIGIBLE, DROP_HAIRPIN = range(6)
DROP_REASONS = 8  # size of ingress_drops

HOST_PORT = 1          # where test traffic enters
SRC_MAC, DST_MAC = "02:00:00:00:00:01", "02:00:00:00:00:fe"   # what senders put in the frame


@functools.cache
def _program():
    return load_ir(str(DLCP_P4), None)


def new_switch(**kw) -> Switch:
    """A fresh switch running dlcp.p4 with 8 priority queues (BMv2 ``--priority-queues 8``)."""
    return Switch(_program(), priority_queues=NUM_PRIOS, **kw)


def slot(port: int, prio: int) -> int:
    """Index of a (port, priority) pair in the per-queue registers and counters."""
    return port * NUM_PRIOS + prio


def nhop_mac(nhop_id: int) -> str:
    """The next-hop MAC the tests install for ``nhop_id`` (so the rewrite names the next hop)."""
    return f"0a:00:00:00:{nhop_id >> 8:02x}:{nhop_id & 0xff:02x}"


def router_mac(port: int) -> str:
    return f"0e:00:00:00:00:{port:02x}"


# ---- controller-style set-up -----------------------------------------------------------------------------

def add_route(sw: Switch, prefix: str, plen: int, port: int, nhop_id: int) -> None:
    sw.insert_entry(IPV4_LPM, {"meta.dst_addr": (prefix, plen)}, SET_NHOP,
                    {"dmac": nhop_mac(nhop_id), "smac": router_mac(port), "port": port, "nhop_id": nhop_id})


@dataclass(frozen=True)
class Member:
    port: int
    nhop_id: int


def add_ecmp_route(sw: Switch, prefix: str, plen: int, group: int, members: list[Member]) -> None:
    """An equal-cost route: ipv4_lpm -> set_ecmp(group, size), ecmp_nhop (group, index) -> set_nhop."""
    sw.insert_entry(IPV4_LPM, {"meta.dst_addr": (prefix, plen)}, SET_ECMP, {"group": group, "size": len(members)})
    for i, m in enumerate(members):
        sw.insert_entry(ECMP_NHOP, {"meta.ecmp_group": group, "meta.ecmp_index": i}, SET_NHOP,
                        {"dmac": nhop_mac(m.nhop_id), "smac": router_mac(m.port), "port": m.port,
                         "nhop_id": m.nhop_id})


def set_thresholds(sw: Switch, port: int, prio: int, *, drop: int = 0, mark: int = 0) -> None:
    """Drop and ECN-mark thresholds of one (port, priority) queue, in packets (0 = off)."""
    sw.register_write("drop_threshold", slot(port, prio), drop)
    sw.register_write("mark_threshold", slot(port, prio), mark)


def packets(sw: Switch, counter: str, index: int) -> int:
    return sw.counter_read(counter, index)[0]


def drop_counts(sw: Switch) -> list[int]:
    return [packets(sw, INGRESS_DROPS, i) for i in range(DROP_REASONS)]


# ---- packets ---------------------------------------------------------------------------------------------

def dlcp_packet(dst: str, *, src: str = "10.0.0.1", sport: int = 40000, priority: int = 0, mag_class: int = 0,
                layer: int = 0, msg_type: int = wire.MsgType.DATA, eligible: bool = False, seq: int = 0,
                ecn: int | None = None, dscp: int = 0, ttl: int = 64, payload: int = 64,
                options: bytes | None = None) -> Packet:
    """A DLCP datagram. Protected packets are ECT(0), eligible ones Not-ECT, as the host transport sends them,
    unless ``ecn`` says otherwise."""
    if ecn is None:
        ecn = wire.ECN_NOT_ECT if eligible else wire.ECN_ECT0
    flags = int(wire.Flag.DROP_ELIGIBLE) if eligible else 0
    ip = IP(src=src, dst=dst, ttl=ttl, tos=(dscp << 2) | ecn)
    if options is not None:
        ip.options = options
    return (Ether(src=SRC_MAC, dst=DST_MAC) / ip / UDP(sport=sport, dport=wire.UDP_PORT)
            / DLCP(msg_type=int(msg_type), flags=flags, priority=priority, mag_class=mag_class, layer=layer,
                   seq=seq, total=1 << 20, count=payload // 4,
                   eligible=seq + 1 if eligible else 0)  # (the transfer's eligible seqs are those below it)
            / Raw(bytes(payload)))


def tcp_packet(dst: str, *, src: str = "10.0.0.1", sport: int = 5001, dport: int = 80, dscp: int = 0,
               ecn: int = 0, ttl: int = 64, payload: int = 64) -> Packet:
    return (Ether(src=SRC_MAC, dst=DST_MAC) / IP(src=src, dst=dst, ttl=ttl, tos=(dscp << 2) | ecn)
            / TCP(sport=sport, dport=dport, flags="A") / Raw(bytes(payload)))


def udp_packet(dst: str, *, src: str = "10.0.0.1", sport: int = 5001, dport: int = 9000, dscp: int = 0,
               ttl: int = 64, payload: bytes = bytes(32), options: bytes | None = None) -> Packet:
    ip = IP(src=src, dst=dst, ttl=ttl, tos=dscp << 2)
    if options is not None:
        ip.options = options
    return Ether(src=SRC_MAC, dst=DST_MAC) / ip / UDP(sport=sport, dport=dport) / Raw(payload)


def arp_packet(target: str, *, op: int = 1, sender: str = "10.0.0.1") -> Packet:
    return Ether(src=SRC_MAC, dst="ff:ff:ff:ff:ff:ff") / ARP(op=op, hwsrc=SRC_MAC, psrc=sender, pdst=target)


# ---- checks on what came out -----------------------------------------------------------------------------

def ipv4_checksum_ok(frame: bytes) -> bool:
    """RFC 1071: the ones' complement sum of every 16-bit word of the IPv4 header, checksum included, is 0xFFFF."""
    ihl = frame[14] & 0x0F
    hdr = frame[14:14 + 4 * ihl]
    total = sum(int.from_bytes(hdr[i:i + 2], "big") for i in range(0, len(hdr), 2))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return total == 0xFFFF


def send_one(sw: Switch, frame: Packet | bytes, port: int = HOST_PORT) -> list[Departure]:
    """Inject one frame now and run until idle; what left."""
    return sw.send(port, bytes(frame))


def forwarded(sw: Switch, frame: Packet | bytes, port: int = HOST_PORT) -> Departure:
    out = send_one(sw, frame, port)
    assert len(out) == 1, f"expected one packet out, got {len(out)}; ingress drops {drop_counts(sw)}, {sw.drops()}"
    return out[0]


def dropped(sw: Switch, frame: Packet | bytes, reason: int, port: int = HOST_PORT) -> None:
    """The frame is dropped in ingress and counted under ``reason`` (and only there)."""
    before = drop_counts(sw)
    out = send_one(sw, frame, port)
    assert out == [], f"expected a drop, {len(out)} packet(s) left on ports {[d.port for d in out]}"
    after = drop_counts(sw)
    delta = [a - b for a, b in zip(after, before)]
    expected = [0] * DROP_REASONS
    expected[reason] = 1
    assert delta == expected, f"ingress_drops changed by {delta}, expected one drop with reason {reason}"


def trust_dlcp_priority(sw: Switch, entry_priority: int = 1) -> None:
    """A catch-all dlcp_priority entry: every DLCP packet is queued by the priority its sender wrote."""
    sw.insert_entry(DLCP_PRIORITY, {}, TRUST_DLCP_PRIORITY, {}, priority=entry_priority)


_SEQ_OFFSET = sum(f.bits for f in wire.FIELDS[:[f.name for f in wire.FIELDS].index("seq")]) // 8


def dlcp_flow(dst: str, n: int, **kw) -> list[bytes]:
    """``n`` packets of one DLCP flow, seq 0..n-1: built once with scapy (UDP checksum 0, i.e. none, as IPv4
    allows), then only the seq field differs, which keeps long flows fast to make."""
    template = dlcp_packet(dst, **kw)
    template[UDP].chksum = 0
    raw = bytearray(bytes(template))
    at = len(raw) - len(template[DLCP]) + _SEQ_OFFSET
    frames = []
    for seq in range(n):
        raw[at:at + 4] = seq.to_bytes(4, "big")
        frames.append(bytes(raw))
    return frames
