"""dlcp.p4 queue selection: the controller's dlcp_priority table maps (message type, DLCP priority, magnitude class,
layer range) to standard_metadata.priority, dscp_priority maps DSCP for everything else, and the default is best
effort (0). The queue a packet went through is read back the way a controller sees it: the port_forwarded counter
of (egress port, priority), and the strict-priority order in which a backlog leaves."""
from __future__ import annotations

import pytest
from scapy.all import Ether

from host import wire
from host.scapy_dlcp import DLCP

from .dlcp_switch import (
    DLCP_PRIORITY, DSCP_PRIORITY, PORT_FORWARDED, SET_PRIORITY, TRUST_DLCP_PRIORITY, add_route, arp_packet,
    dlcp_packet, forwarded, packets, slot, tcp_packet, udp_packet,
)

OUT = 3
ANY_LAYER = (0, 0xFFFF)


def queue_of(sw, frame) -> int:
    """Send one frame; the priority of the queue it left from, by the port_forwarded counters."""
    before = [packets(sw, PORT_FORWARDED, slot(OUT, p)) for p in range(8)]
    out = forwarded(sw, frame)
    assert out.port == OUT
    after = [packets(sw, PORT_FORWARDED, slot(OUT, p)) for p in range(8)]
    used = [p for p in range(8) if after[p] != before[p]]
    assert len(used) == 1 and after[used[0]] == before[used[0]] + 1, (before, after)
    return used[0]


@pytest.fixture
def routed(sw):
    add_route(sw, "10.0.1.0", 24, OUT, 7)
    add_route(sw, "10.0.0.0", 24, 1, 8)
    return sw


def install_dlcp_policy(sw) -> None:
    """A policy in the spirit of DLCP: front layers first, large magnitudes above small ones, control traffic
    (ACK/NACK/CONTROL) highest; otherwise trust what the sender wrote."""
    def entry(prio_or_trust, entry_priority, msg_type=None, priority=None, mag=None, layer=ANY_LAYER):
        match = {"hdr.dlcp.layer": layer}
        if msg_type is not None:
            match["hdr.dlcp.msg_type"] = msg_type
        if priority is not None:
            match["hdr.dlcp.priority"] = priority
        if mag is not None:
            match["hdr.dlcp.mag_class"] = mag
        if prio_or_trust == "trust":
            sw.insert_entry(DLCP_PRIORITY, match, TRUST_DLCP_PRIORITY, {}, priority=entry_priority)
        else:
            sw.insert_entry(DLCP_PRIORITY, match, SET_PRIORITY, {"prio": prio_or_trust}, priority=entry_priority)

    data = (int(wire.MsgType.DATA), 0xF)
    for control in (wire.MsgType.ACK, wire.MsgType.NACK, wire.MsgType.CONTROL):
        entry(7, 100, msg_type=(int(control), 0xF))
    entry(6, 90, msg_type=data, mag=(0b100, 0b100), layer=(0, 9))  # front layers, magnitude class 4..7
    entry(5, 80, msg_type=data, layer=(0, 9))                      # front layers, small magnitudes
    entry(3, 70, msg_type=data, layer=(10, 99))                    # middle layers
    entry("trust", 60, msg_type=data, priority=(0b100, 0b100), layer=(100, 0xFFFF))  # back layers: sender's 4..7
    # anything else (back layers with sender priority 0..3): no entry, default set_priority(0)


def test_dlcp_fields_choose_the_queue(routed):
    sw = routed
    install_dlcp_policy(sw)
    cases = [
        # (msg_type, sender priority, magnitude class, layer) -> queue
        ((wire.MsgType.DATA, 0, 7, 0), 6),
        ((wire.MsgType.DATA, 0, 4, 9), 6),
        ((wire.MsgType.DATA, 0, 3, 9), 5),
        ((wire.MsgType.DATA, 7, 0, 0), 5),
        ((wire.MsgType.DATA, 0, 7, 10), 3),
        ((wire.MsgType.DATA, 7, 7, 99), 3),
        ((wire.MsgType.DATA, 4, 0, 100), 4),
        ((wire.MsgType.DATA, 6, 0, 65535), 6),
        ((wire.MsgType.DATA, 3, 7, 100), 0),     # no entry: best effort
        ((wire.MsgType.DATA, 0, 0, 5000), 0),
        ((wire.MsgType.ACK, 0, 0, 500), 7),
        ((wire.MsgType.NACK, 0, 0, 5), 7),
        ((wire.MsgType.CONTROL, 0, 0, 0), 7),
    ]
    for (msg_type, prio, mag, layer), queue in cases:
        frame = dlcp_packet("10.0.1.9", msg_type=msg_type, priority=prio, mag_class=mag, layer=layer)
        assert queue_of(sw, frame) == queue, (msg_type, prio, mag, layer)


def test_overlapping_entries_resolve_by_entry_priority(routed):
    sw = routed
    sw.insert_entry(DLCP_PRIORITY, {"hdr.dlcp.layer": (0, 100)}, SET_PRIORITY, {"prio": 2}, priority=10)
    sw.insert_entry(DLCP_PRIORITY, {"hdr.dlcp.layer": (50, 60)}, SET_PRIORITY, {"prio": 4}, priority=20)
    assert queue_of(sw, dlcp_packet("10.0.1.9", layer=55)) == 4
    assert queue_of(sw, dlcp_packet("10.0.1.9", layer=61)) == 2
    sw.modify_entry(DLCP_PRIORITY, {"hdr.dlcp.layer": (50, 60)}, SET_PRIORITY, {"prio": 1}, priority=20)
    assert queue_of(sw, dlcp_packet("10.0.1.9", layer=55)) == 1
    sw.delete_entry(DLCP_PRIORITY, {"hdr.dlcp.layer": (50, 60)}, priority=20)
    assert queue_of(sw, dlcp_packet("10.0.1.9", layer=55)) == 2


def test_dscp_chooses_the_queue_for_other_traffic(routed):
    sw = routed
    for dscp, prio in [(46, 5), (wire.dscp_for_priority(3), 3), (10, 1)]:
        sw.insert_entry(DSCP_PRIORITY, {"hdr.ipv4.dscp": dscp}, SET_PRIORITY, {"prio": prio})
    assert queue_of(sw, tcp_packet("10.0.1.9", dscp=46)) == 5
    assert queue_of(sw, udp_packet("10.0.1.9", dscp=24)) == 3
    assert queue_of(sw, tcp_packet("10.0.1.9", dscp=10, ecn=2)) == 1
    assert queue_of(sw, tcp_packet("10.0.1.9", dscp=0)) == 0       # unmapped: best effort
    assert queue_of(sw, udp_packet("10.0.1.9", dscp=63)) == 0
    assert queue_of(sw, arp_packet("10.0.1.9")) == 0               # ARP: best effort
    # DLCP is classified by its own header, never by DSCP: with no dlcp_priority entry it is best effort
    assert queue_of(sw, dlcp_packet("10.0.1.9", dscp=46, priority=6)) == 0
    sw.insert_entry(DLCP_PRIORITY, {}, TRUST_DLCP_PRIORITY, {}, priority=1)
    assert queue_of(sw, dlcp_packet("10.0.1.9", dscp=46, priority=6)) == 6
    assert queue_of(sw, dlcp_packet("10.0.1.9", dscp=46, priority=2)) == 2


def test_backlog_leaves_in_strict_priority_order(routed):
    """Queued together, packets leave highest priority first, FIFO within a priority."""
    sw = routed
    sw.insert_entry(DLCP_PRIORITY, {}, TRUST_DLCP_PRIORITY, {}, priority=1)
    sw.insert_entry(DSCP_PRIORITY, {"hdr.ipv4.dscp": 46}, SET_PRIORITY, {"prio": 7})
    sw.tm.set_port(OUT, rate_bps=1e9)
    prios = [0, 3, 1, 7, 3, 0, 5, 1, 7, 5]
    for i, p in enumerate(prios):
        sw.inject(1, bytes(dlcp_packet("10.0.1.9", priority=p, seq=i)))
    sw.inject(1, bytes(tcp_packet("10.0.1.9", dscp=46)))
    out = sw.run()
    order = []
    for d in out:
        pkt = Ether(d.data)
        order.append((pkt[DLCP].priority, pkt[DLCP].seq) if DLCP in pkt else (7, 99))
    expected = sorted(((p, i) for i, p in enumerate(prios)), key=lambda x: -x[0])
    expected.insert(2, (7, 99))   # the DSCP-46 TCP packet joins queue 7 after the two DLCP priority-7 packets
    assert order == expected
