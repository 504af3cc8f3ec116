"""Drops that follow gradient value: with a drop threshold per magnitude class (``class_drop_threshold``), a queue
that fills drops the eligible packets of the smallest classes first and the larger ones only as it fills further;
protected packets are never dropped by it; a class without a threshold, or with one above its queue's, keeps the
queue's. Every counter agrees with what came out."""
from __future__ import annotations

from scapy.all import Ether

from host.scapy_dlcp import DLCP

from .dlcp_switch import (
    DROP_EARLY_ELIGIBLE, ELIGIBLE_DROPS, HOST_PORT, PORT_FORWARDED, add_route, dlcp_packet, new_switch, packets,
    set_thresholds, slot, trust_dlcp_priority,
)

OUT, NHOP, PRIO = 2, 20, 3
QUEUE_DROP = 40
#: class -> its drop threshold (0: none, the queue's applies; 50 is above the queue's 40, so 40 applies)
CLASS_DROP = {0: 8, 1: 16, 2: 24, 3: 50, 4: 0}


def make_switch():
    sw = new_switch()
    add_route(sw, "10.0.2.0", 24, OUT, NHOP)
    trust_dlcp_priority(sw)
    sw.tm.set_queue_depth(64)
    sw.tm.set_port(OUT, rate_bps=1e9)
    set_thresholds(sw, OUT, PRIO, drop=QUEUE_DROP, mark=0)
    for c, v in CLASS_DROP.items():
        sw.register_write("class_drop_threshold", c, v)
    return sw


def expected_admitted(kinds: list[tuple[int, bool]]) -> list[bool]:
    """The rule, on a queue that only fills (every packet arrives before any leaves): a packet is dropped when it
    is eligible and the queue holds at least the smaller of its queue's and its class's thresholds (where set)."""
    depth, out = 0, []
    for cls, eligible in kinds:
        limits = [t for t in (QUEUE_DROP, CLASS_DROP[cls]) if t]
        if eligible and limits and depth >= min(limits):
            out.append(False)
        else:
            depth += 1
            out.append(True)
    return out


def test_a_filling_queue_drops_the_smallest_classes_first():
    sw = make_switch()
    # 100 packets cycling over classes 0..4, every sixth protected: enough to fill the queue past every threshold
    kinds = [(seq % 5, seq % 6 != 5) for seq in range(100)]
    for seq, (cls, eligible) in enumerate(kinds):
        frame = dlcp_packet("10.0.2.9", priority=PRIO, mag_class=cls, eligible=eligible, seq=seq, payload=100)
        sw.inject(HOST_PORT, bytes(frame))  # all arrive before anything leaves: the queue only fills
    sw.run()
    got = [Ether(d.data)[DLCP] for d in sw.outputs]
    want = [seq for seq, ok in enumerate(expected_admitted(kinds)) if ok]
    assert [int(h.seq) for h in got] == want
    # protected packets all came through, whatever their class
    assert all(seq in want for seq, (_c, eligible) in enumerate(kinds) if not eligible)
    # the smallest class lost its packets first, then the next: the first drop of each class comes in class order,
    # and the share of each class's eligible packets that came through grows with the class
    first_drop = {}
    share = {}
    for cls in CLASS_DROP:
        seqs = [s for s, (c, e) in enumerate(kinds) if c == cls and e]
        dropped = [s for s in seqs if s not in want]
        first_drop[cls] = min(dropped) if dropped else None
        share[cls] = 1 - len(dropped) / len(seqs)
    assert first_drop[0] < first_drop[1] < first_drop[2] < first_drop[3]
    assert share[0] < share[1] < share[2] < share[3]
    # class 3's own threshold (50) is above its queue's: the queue's 40 holds for it, as for class 4 (none)
    assert first_drop[3] is not None and first_drop[4] is not None
    # every drop was the program's early eligible drop, counted per queue and per reason
    dropped = len(kinds) - len(want)
    assert packets(sw, ELIGIBLE_DROPS, slot(OUT, PRIO)) == dropped
    assert packets(sw, "DlcpIngress.ingress_drops", DROP_EARLY_ELIGIBLE) == dropped
    assert sw.counter_read(PORT_FORWARDED, slot(OUT, PRIO))[0] == len(want)


def test_without_class_thresholds_every_class_is_dropped_at_the_queues_threshold():
    sw = make_switch()
    for c in CLASS_DROP:
        sw.register_write("class_drop_threshold", c, 0)
    for seq in range(60):
        sw.inject(HOST_PORT, bytes(dlcp_packet("10.0.2.9", priority=PRIO, mag_class=seq % 5, eligible=True,
                                               seq=seq, payload=100)))
    sw.run()
    assert [int(Ether(d.data)[DLCP].seq) for d in sw.outputs] == list(range(QUEUE_DROP))


def test_a_class_threshold_acts_where_the_queue_has_none(sw):
    """Class thresholds alone (the queue's drop threshold 0) still drop that class, and only eligible packets."""
    add_route(sw, "10.0.2.0", 24, OUT, NHOP)
    trust_dlcp_priority(sw)
    sw.tm.set_port(OUT, rate_bps=1e9)
    sw.register_write("class_drop_threshold", 1, 4)
    kinds = [(seq % 2, True) for seq in range(20)] + [(1, False)] * 4
    for seq, (cls, eligible) in enumerate(kinds):
        sw.inject(HOST_PORT, bytes(dlcp_packet("10.0.2.9", priority=PRIO, mag_class=cls, eligible=eligible,
                                               seq=seq, payload=100)))
    sw.run()
    got = [int(Ether(d.data)[DLCP].seq) for d in sw.outputs]
    # class 0 (no threshold anywhere) all through; class 1 eligible: the two admitted while the queue held < 4
    assert [s for s in got if kinds[s][0] == 0] == list(range(0, 20, 2))
    assert [s for s in got if kinds[s][0] == 1 and kinds[s][1]] == [1, 3]
    assert [s for s in got if not kinds[s][1]] == [20, 21, 22, 23]
