"""dlcp.p4 under congestion: behind an egress rate limit, drop-eligible DLCP packets are dropped first (early in
ingress from the queue-depth estimate, and in egress from their own enq_qdepth), protected ECN-capable packets are
marked CE and delivered, the higher priority leaves first, and the switch's counters agree with what came out."""
from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass

from scapy.all import IP, Ether

from host import wire
from host.scapy_dlcp import DLCP

from .dlcp_switch import (
    DROP_EARLY_ELIGIBLE, ECN_MARKS, ELIGIBLE_DROPS, HOST_PORT, NHOP_PACKETS, PORT_FORWARDED, add_route, dlcp_packet,
    drop_counts, ipv4_checksum_ok, new_switch, packets, set_thresholds, slot, tcp_packet, trust_dlcp_priority,
)

OUT, NHOP = 2, 20
HI, LO = 6, 2
LINE_BPS = 1e9


@dataclass(frozen=True)
class Sent:
    seq: int
    prio: int
    eligible: bool
    at_ns: int
    size: int


@dataclass(frozen=True)
class Got:
    seq: int
    prio: int
    eligible: bool
    ce: bool
    start_ns: int      # when its transmission began (dequeue)
    index: int         # position in the departure order


def make_switch(*, drop: int, mark: int, capacity: int = 64):
    sw = new_switch()
    add_route(sw, "10.0.2.0", 24, OUT, NHOP)
    trust_dlcp_priority(sw)
    sw.tm.set_queue_depth(capacity)
    sw.tm.set_port(OUT, rate_bps=LINE_BPS)
    for prio in (HI, LO):
        set_thresholds(sw, OUT, prio, drop=drop, mark=mark)
    return sw


def send_burst(sw, kinds: list[tuple[int, bool]], gap_ns: int) -> list[Sent]:
    """Inject one DLCP packet per (priority, eligible), ``gap_ns`` apart (0: all at the same instant), then run
    until the switch is idle."""
    sent = []
    t0 = sw.now_ns
    for seq, (prio, eligible) in enumerate(kinds):
        frame = bytes(dlcp_packet("10.0.2.9", priority=prio, eligible=eligible, seq=seq, layer=prio, payload=100))
        at = t0 + seq * gap_ns
        sw.inject(HOST_PORT, frame, at_ns=at if gap_ns else None)   # 0: nothing leaves before the last arrives
        sent.append(Sent(seq, prio, eligible, at, len(frame)))
    sw.run()
    return sent


def received(sw) -> list[Got]:
    got = []
    for i, d in enumerate(sw.outputs):
        assert d.port == OUT
        assert ipv4_checksum_ok(d.data)
        pkt = Ether(d.data)
        h = pkt[DLCP]
        eligible = bool(int(h.flags) & wire.Flag.DROP_ELIGIBLE)
        ecn = pkt[IP].tos & 3
        if ecn != wire.ECN_CE:                        # unmarked packets keep what the host sent
            assert ecn == (wire.ECN_NOT_ECT if eligible else wire.ECN_ECT0)
        tx_ns = round(len(d.data) * 8 * 1e9 / LINE_BPS)
        got.append(Got(h.seq, h.priority, eligible, ecn == wire.ECN_CE, d.time_ns - tx_ns, i))
    return got


def check_counters_agree(sw, sent: list[Sent], got: list[Got]) -> None:
    """Every counter the controller reads matches what was sent and what came out."""
    sizes = {s.seq: s.size for s in sent}
    ingress_early = packets(sw, "DlcpIngress.ingress_drops", DROP_EARLY_ELIGIBLE)
    egress_dropped = sum(v for (port, _p, reason), v in sw.drops().items() if reason == "pipeline_drop"
                         and port == OUT)
    for prio in (HI, LO):
        s = slot(OUT, prio)
        out = [g for g in got if g.prio == prio]
        assert sw.counter_read(PORT_FORWARDED, s) == (len(out), sum(sizes[g.seq] for g in out))
        assert packets(sw, ECN_MARKS, s) == sum(g.ce for g in out)
        # what went in at this priority either came out, was dropped as eligible, or found the queue full
        sent_here = sum(1 for x in sent if x.prio == prio)
        tail_dropped = sw.drops().get((OUT, prio, "queue_full"), 0)
        assert sent_here == len(out) + packets(sw, ELIGIBLE_DROPS, s) + tail_dropped
        if not tail_dropped:
            eligible_sent = sum(1 for x in sent if x.prio == prio and x.eligible)
            assert packets(sw, ELIGIBLE_DROPS, s) == eligible_sent - sum(g.eligible for g in out)
    assert sum(packets(sw, ELIGIBLE_DROPS, slot(OUT, p)) for p in (HI, LO)) == ingress_early + egress_dropped
    assert drop_counts(sw) == [0, 0, 0, 0, ingress_early, 0, 0, 0]
    assert packets(sw, NHOP_PACKETS, NHOP) == len(sent)          # counted when routed, before any early drop
    queue_full = sum(v for (_port, _p, reason), v in sw.drops().items() if reason == "queue_full")
    assert len(got) + ingress_early + egress_dropped + queue_full == len(sent)


def check_strict_priority(sent: list[Sent], got: list[Got]) -> None:
    """No low-priority packet starts while a high-priority packet that had already arrived still waits."""
    arrived = {s.seq: s.at_ns for s in sent}
    for lo in (g for g in got if g.prio == LO):
        waiting = [h for h in got if h.prio == HI and arrived[h.seq] <= lo.start_ns and h.index > lo.index]
        assert not waiting, f"LO seq {lo.seq} left before HI seq {waiting[0].seq}"
    for prio in (HI, LO):
        seqs = [g.seq for g in got if g.prio == prio]
        assert seqs == sorted(seqs), "FIFO within a priority"


def test_burst_matches_the_threshold_rules_exactly():
    """All at once, so each packet's queue depth is known: eligible packets at or above the drop threshold are
    dropped in ingress, protected ones at or above the mark threshold are delivered with CE."""
    drop_at, mark_at = 10, 4
    sw = make_switch(drop=drop_at, mark=mark_at)
    rng = random.Random(5)
    kinds = [(rng.choice((HI, LO)), rng.random() < 0.5) for _ in range(80)]
    sent = send_burst(sw, kinds, gap_ns=0)
    got = received(sw)

    depth = Counter()
    expect_out, expect_ce, expect_early = [], set(), Counter()
    for s in sent:
        if s.eligible and depth[s.prio] >= drop_at:
            expect_early[s.prio] += 1
            continue
        expect_out.append(s)
        if not s.eligible and depth[s.prio] >= mark_at:
            expect_ce.add(s.seq)
        depth[s.prio] += 1
    expect_order = [s.seq for s in expect_out if s.prio == HI] + [s.seq for s in expect_out if s.prio == LO]
    assert [g.seq for g in got] == expect_order            # everything HI first, FIFO within a priority
    assert {g.seq for g in got if g.ce} == expect_ce
    assert all(not g.eligible for g in got if g.ce)
    assert expect_early[HI] > 0 and expect_early[LO] > 0 and len(expect_ce) > 0
    assert all(s.seq in {g.seq for g in got} for s in sent if not s.eligible)   # every protected packet arrives
    assert packets(sw, "DlcpIngress.ingress_drops", DROP_EARLY_ELIGIBLE) == sum(expect_early.values())
    for prio in (HI, LO):
        assert packets(sw, ELIGIBLE_DROPS, slot(OUT, prio)) == expect_early[prio]
    check_counters_agree(sw, sent, got)


def overload() -> list[tuple[int, bool]]:
    """Both priorities, protected and eligible interleaved, arriving 14 times faster than the line drains."""
    return [((HI, False), (HI, True), (LO, False), (LO, True))[i % 4] for i in range(64)]


def test_without_thresholds_protected_packets_are_lost():
    """The baseline the thresholds are for: the same overload with dropping and marking off tail-drops protected
    packets (eligible ones took their queue space) and marks nothing."""
    sw = make_switch(drop=0, mark=0, capacity=24)
    sent = send_burst(sw, overload(), gap_ns=100)
    got = received(sw)
    lost_protected = sum(1 for s in sent if not s.eligible) - sum(1 for g in got if not g.eligible)
    assert lost_protected > 0
    assert not any(g.ce for g in got)
    check_counters_agree(sw, sent, got)


def test_overload_drops_eligible_first_marks_protected_and_serves_high_priority_first():
    sw = make_switch(drop=6, mark=3, capacity=24)
    sent = send_burst(sw, overload(), gap_ns=100)
    got = received(sw)
    out = {g.seq for g in got}
    # every protected packet is delivered; only eligible ones are lost, and nothing is tail-dropped
    assert all(s.seq in out for s in sent if not s.eligible)
    assert not any(reason == "queue_full" for (_p, _q, reason) in sw.drops())
    for prio in (HI, LO):
        eligible_sent = sum(1 for s in sent if s.prio == prio and s.eligible)
        eligible_out = sum(1 for g in got if g.prio == prio and g.eligible)
        assert eligible_out < eligible_sent
        assert any(g.ce for g in got if g.prio == prio)                  # protected packets carry CE
    assert all(not g.eligible for g in got if g.ce)
    assert packets(sw, "DlcpIngress.ingress_drops", DROP_EARLY_ELIGIBLE) > 0
    check_strict_priority(sent, got)
    check_counters_agree(sw, sent, got)


def test_tightened_threshold_drops_queued_eligible_packets_in_egress(sw):
    """Egress checks each eligible packet's own enq_qdepth: packets queued before the controller lowered the drop
    threshold are dropped as they leave (here behind a queue rate limit, BMv2's set_queue_rate)."""
    prio = 4
    add_route(sw, "10.0.2.0", 24, OUT, NHOP)
    trust_dlcp_priority(sw)
    sw.tm.set_queue_rate(100_000, OUT, prio)          # 10 us per packet
    kinds = [(prio, i % 2 == 1) for i in range(30)]
    frames = [bytes(dlcp_packet("10.0.2.9", priority=p, eligible=e, seq=i, ecn=wire.ECN_NOT_ECT))
              for i, (p, e) in enumerate(kinds)]
    for f in frames:                                   # thresholds off: everything is queued
        sw.inject(HOST_PORT, f)
    first = sw.run(until_ns=0)                         # the head of the queue leaves at once
    set_thresholds(sw, OUT, prio, drop=6)
    rest = sw.run()
    out = [Ether(d.data)[DLCP].seq for d in first + rest]
    expect = [i for i, (_p, e) in enumerate(kinds) if not (e and i >= 6)]   # enq_qdepth of packet i is i
    assert out == expect
    assert packets(sw, ELIGIBLE_DROPS, slot(OUT, prio)) == len(kinds) - len(expect)
    assert packets(sw, "DlcpIngress.ingress_drops", DROP_EARLY_ELIGIBLE) == 0
    assert sw.drops() == {(OUT, prio, "pipeline_drop"): len(kinds) - len(expect)}
    assert packets(sw, PORT_FORWARDED, slot(OUT, prio)) == len(expect)
    times = [d.time_ns for d in first + rest]
    assert all(b - a >= 10_000 for a, b in zip(times, times[1:]))   # the queue rate held


def test_marking_rules(sw):
    """Above the mark threshold: ECT packets (DLCP or not, with or without IP options) become CE and are counted
    once; Not-ECT protected packets and packets already CE are left alone; below it nothing is marked."""
    prio = 3
    add_route(sw, "10.0.2.0", 24, OUT, NHOP)
    sw.insert_entry("DlcpIngress.dlcp_priority", {}, "DlcpIngress.set_priority", {"prio": prio}, priority=1)
    sw.insert_entry("DlcpIngress.dscp_priority", {"hdr.ipv4.dscp": 0}, "DlcpIngress.set_priority", {"prio": prio})
    set_thresholds(sw, OUT, prio, mark=3)
    frames = [
        dlcp_packet("10.0.2.9", seq=0), dlcp_packet("10.0.2.9", seq=1), dlcp_packet("10.0.2.9", seq=2),  # below
        dlcp_packet("10.0.2.9", seq=3),                                    # ECT(0): marked
        dlcp_packet("10.0.2.9", seq=4, ecn=1),                             # ECT(1): marked
        dlcp_packet("10.0.2.9", seq=5, ecn=wire.ECN_NOT_ECT),              # Not-ECT: left alone
        dlcp_packet("10.0.2.9", seq=6, ecn=wire.ECN_CE),                   # already CE: not counted again
        dlcp_packet("10.0.2.9", seq=7, options=b"\x01" * 8),               # options: marked, checksum valid
        tcp_packet("10.0.2.9", ecn=wire.ECN_ECT0),                         # non-DLCP ECT traffic: marked
        dlcp_packet("10.0.2.9", seq=9, eligible=True),                     # eligible (Not-ECT, no drop threshold)
    ]
    for f in frames:
        sw.inject(HOST_PORT, bytes(f))
    out = sw.run()
    assert len(out) == len(frames)
    ecn = [Ether(d.data)[IP].tos & 3 for d in out]
    assert ecn == [2, 2, 2, 3, 3, 0, 3, 3, 3, 0]
    assert all(ipv4_checksum_ok(d.data) for d in out)
    assert packets(sw, ECN_MARKS, slot(OUT, prio)) == 4
