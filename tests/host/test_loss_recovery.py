"""Loss recovery cannot wedge: the real sender and receiver stages on a simulated link and clock
(``tests/host/losssim.py``).

The stall these guard against (seen with DeAR at P=5 under 5% loss plus 100 ms blackouts): a window full of
packets lost in a blackout, which no ACK frees; a retransmission queued for a hole the receiver keeps NACKing,
which the full window never lets out; and every NACK restarting the retransmission timer, so the timeout never
fired. Recovery now rests on forward progress: the RTO fires an RTO after the last packet newly ACKed whatever
NACKs arrive, retransmissions go before new data, and a NACKed packet keeps its place in the window until it is
resent.
"""

from __future__ import annotations

import random

import numpy as np
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from host.transport.api import Options
from host.transport.cc import CCParams
from tests.host.losssim import SimLink, transfer

RTO_MAX = CCParams().rto_max


def test_a_window_full_of_blackout_losses_recovers_while_nacks_keep_arriving():
    """The deterministic replay of the stall: srtt 50 ms; transfer A (40 packets) arrives except seq 5, transfer B
    (300 packets) loses its first window in a 150 ms blackout, so the window is full of packets no ACK will free
    while A's receiver NACKs seq 5 every 2..100 ms. Before the fix A never completed (0 packets sent in 10 s after
    the blackout, 0 timeouts); now the timeout fires an RTO after the last progress, A's retransmission goes first,
    and both complete within a few RTTs of the blackout's end."""
    a, b = transfer(1, 40, seed=1), transfer(2, 300, seed=2)
    blackout = 0.15

    def loss(t, kind, info):
        if kind != "data":
            return False  # ACK, NACK and DONE always arrive
        tid, seq, retx = info
        return t < blackout and not (tid == 1 and seq != 5 and not retx)  # A's first pass arrives but seq 5

    sim = SimLink([a, b], loss, srtt=0.05)
    sim.run(12.0)
    sim.check_results()
    assert sim.nacks, "the receiver NACKed seq 5 (the scenario is the stall's)"
    assert sim.sc.c["rto_timeouts"] >= 1
    assert a.done_at < blackout + 0.2 and b.done_at < blackout + 1.0, (a.done_at, b.done_at)
    # a NACKed packet is resent within the NACK gap (srtt/2) of the NACK, or by the timeout
    first_nack = min(t for t, tid, seqs in sim.nacks if tid == 1 and 5 in seqs)
    resent = [t for t in sim.sent_at[(1, 5)] if t >= first_nack]
    assert resent and resent[0] <= first_nack + 0.2


def test_a_nack_for_a_packet_just_resent_is_deferred_not_dropped():
    """A NACK that crosses a retransmission (it arrives sooner than srtt/2 after the packet was resent) is not
    resent at once, but it is not forgotten either: the packet keeps its place in the window and is resent when the
    wait ends, even if the receiver never NACKs it again (its NACKs back off to 100 ms, here they are all lost after
    the first)."""
    a = transfer(1, 60, seed=3)
    seen_nack = []

    def loss(t, kind, info):
        if kind == "ctl":
            if info[0] == 2:  # NACK: the first arrives, the rest are lost
                seen_nack.append(t)
                return len(seen_nack) > 1
            return False
        tid, seq, retx = info
        return seq == 20 and len([1 for _ in sim.sent_at.get((1, 20), [])]) <= 2  # the first two copies lost

    sim = SimLink([a], loss, srtt=0.08, delay=0.04)
    sim.run(10.0)
    sim.check_results()
    assert a.done_at < 2.0, a.done_at
    assert len(sim.sent_at[(1, 20)]) >= 3


@st.composite
def scenarios(draw):
    """A transfer mix (1-5 transfers of 1-1000 packets, exact or with a 5% bound, started within 0.3 s), 1-3 total
    blackouts (both directions, 20-400 ms; the first within 0.2 s, while the transfers run), random loss of data
    (0-20%) and of control messages (0-10%) between them, a one-way delay of 0.1-25 ms and an initial RTT estimate
    (none, or 1-200 ms)."""
    n = draw(st.integers(1, 5))
    mix = [(draw(st.integers(1, 1000)), draw(st.sampled_from([0.0, 0.0, 0.05])), draw(st.floats(0, 0.3)))
           for _ in range(n)]
    nb = draw(st.integers(1, 3))
    blackouts, t = [], 0.0
    for i in range(nb):
        t += draw(st.floats(0.0, 0.2 if i == 0 else 0.5))
        length = draw(st.floats(0.02, 0.4))
        blackouts.append((t, t + length))
        t += length + 1.3  # (each blackout's grace window, below, stays clean)
    return dict(mix=mix, blackouts=blackouts, p_data=draw(st.floats(0, 0.2)), p_ctl=draw(st.floats(0, 0.1)),
                delay=draw(st.floats(0.0001, 0.025)), srtt=draw(st.sampled_from([None, 0.001, 0.02, 0.2])),
                seed=draw(st.integers(0, 2 ** 31)))


GRACE = 1.2  # after each blackout the link stays clean this long; progress must come within it


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_progress_after_every_blackout(sc):
    """Property, on the real sender and receiver: whatever the blackouts, losses and transfer mix, every transfer
    completes with its data intact (zero-filled only where reported, within its bound), nobody times out, and after
    every blackout that leaves work pending the receiver gets a new packet (or a send completes) within
    ``GRACE`` s, well under the peer timeout. Random loss stops for ``GRACE`` after each blackout so the bound is
    exact: the worst case is one backed-off RTO (at most ``rto_max``, 0.5 s) and a round trip."""
    rng = random.Random(sc["seed"])
    transfers = [transfer(i + 1, n, loss_bound=p, start=s, seed=sc["seed"] + i)
                 for i, (n, p, s) in enumerate(sc["mix"])]
    blackouts = sc["blackouts"]

    def loss(t, kind, info):
        for a, b in blackouts:
            if a <= t < b:
                return True
            if b <= t < b + GRACE:
                return False
        return rng.random() < (sc["p_data"] if kind == "data" else sc["p_ctl"])

    sim = SimLink(transfers, loss, delay=sc["delay"], srtt=sc["srtt"], options=Options(peer_timeout=10.0))
    sim.run(60.0)
    sim.check_results()
    assert sim.sc.c["peer_timeouts"] == 0 and sim.rc.c["peer_timeouts"] == 0
    done = sorted(t.done_at for t in transfers)
    events = np.array(sorted(sim.delivered + done))
    for a, b in blackouts:
        if any(d > b for d in done):  # work was pending when the blackout ended
            event("a blackout left work pending")
            after = events[events >= b]
            assert after.size and after[0] <= b + GRACE, (a, b, after[:3], sc)
    # a NACKed protected packet is resent (or ACKed, or its transfer done) within the NACK gap plus one backed-off
    # timeout
    for t, tid, seqs in sim.nacks:
        tr = next(x for x in transfers if x.tid == tid)
        for s in seqs:
            if any(a <= t < b + 0.05 for a, b in blackouts):
                continue  # (a NACK received in a blackout: its resend may be lost, the timeout covers it)
            by = t + 1.5 * RTO_MAX + 0.05
            later = [u for u in sim.sent_at[(tid, s)] if u >= t]
            assert (later and later[0] <= by) or tr.done_at <= by or sim.arrived_at.get((tid, s), by) < by, \
                (t, tid, s, later[:2], tr.done_at)
