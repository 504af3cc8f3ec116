"""The DCTCP-style window alone."""

from __future__ import annotations

import math
import random

import pytest

from host.transport.cc import FAST_ALPHA, CCParams, DctcpWindow, seed_rto

MSS = 1000


def params(**kw) -> CCParams:
    return CCParams(mss=MSS, init_cwnd_pkts=10, max_cwnd_bytes=10_000_000, **kw)


def run_rtts(cc: DctcpWindow, rtts: int, mark_frac: float = 0.0, rtt: float = 1e-3, loss: float = 0.0,
             seed: int = 0) -> None:
    """Each RTT: a window of packets is sent; lost ones are never ACKed, a fraction of the rest come back marked."""
    rnd = random.Random(seed)
    for _ in range(rtts):
        pkts = max(1, int(cc.window() // MSS))
        for i in range(pkts):
            if rnd.random() < loss:
                continue
            cc.on_ack(MSS, ecn=rnd.random() < mark_frac, rtt=rtt)


def test_slow_start_doubles_per_rtt():
    cc = DctcpWindow(params(delay_target=None))
    w0 = cc.window()
    run_rtts(cc, 3)
    assert cc.in_slow_start and cc.window() == 8 * w0


def test_marks_end_slow_start_and_cut_by_alpha():
    cc = DctcpWindow(params(delay_target=None))
    run_rtts(cc, 5)
    before = cc.window()
    run_rtts(cc, 1, mark_frac=1.0)
    assert not cc.in_slow_start and cc.window() < before and cc.cuts >= 1
    # persistent light marking settles: alpha tracks the marked fraction, the window stays well above minimum
    run_rtts(cc, 200, mark_frac=0.05, seed=1)
    assert 0.0 < cc.alpha < 0.3 and cc.window() > 10 * MSS


def test_random_loss_without_marks_does_not_collapse():
    cc = DctcpWindow(params(delay_target=None))
    run_rtts(cc, 30, loss=0.05, seed=2)
    assert cc.window() >= 1_000_000 and cc.cuts == 0


def test_delay_marks_when_rtt_grows():
    cc = DctcpWindow(params(delay_target=0.002))
    run_rtts(cc, 4, rtt=0.0005)
    assert cc.delay_marks == 0
    w = cc.window()
    run_rtts(cc, 2, rtt=0.004)
    assert cc.delay_marks > 0 and cc.window() < w


def test_a_stall_is_not_a_standing_queue():
    """A few late ACKs (a stalled Python receiver) in otherwise fast windows never mark; a queue that holds every
    sample of a window up does."""
    cc = DctcpWindow(params(delay_target=0.002))
    run_rtts(cc, 4, rtt=0.0005)
    for _ in range(20):
        pkts = int(cc.window() // MSS)
        for i in range(pkts):
            cc.on_ack(MSS, rtt=0.02 if i % 7 == 0 else 0.0005)
    assert cc.delay_marks == 0 and cc.cuts == 0 and cc.in_slow_start
    w = cc.window()
    run_rtts(cc, 1, rtt=0.01)
    run_rtts(cc, 1, rtt=0.01)
    assert cc.delay_marks >= 1 and cc.cuts >= 1 and cc.window() < 2 * w


def test_hystart_ends_slow_start_on_rising_rtt_without_a_cut():
    cc = DctcpWindow(params(delay_target=0.010, hystart_delay=0.004))
    run_rtts(cc, 3, rtt=0.001)
    assert cc.in_slow_start
    w = cc.window()
    run_rtts(cc, 1, rtt=0.006)  # a queue of 5 ms: above the HyStart threshold, below the delay mark
    # slow start ends without a DCTCP cut; the window keeps (1 + 4) / 6 of what it had then
    assert not cc.in_slow_start and cc.hystart_exits == 1 and cc.cuts == 0 and 0.8 * w <= cc.window() < 2 * w
    w = cc.window()
    run_rtts(cc, 5, rtt=0.006)
    assert cc.window() < 1.2 * w  # additive increase now, not doubling
    off = DctcpWindow(params(delay_target=0.010, hystart_delay=None))
    run_rtts(off, 3, rtt=0.001)
    run_rtts(off, 1, rtt=0.006)
    assert off.in_slow_start


def test_one_way_queueing_delay_decides_over_the_rtt():
    """With the receiver's timestamps, a long RTT whose excess is on the way back (ACKs behind the opposite
    direction's data) is not a queue of ours; a forward queue is."""
    cc = DctcpWindow(params(delay_target=0.010, hystart_delay=0.004))
    run_rtts(cc, 2, rtt=0.001)
    for _ in range(6):
        for _ in range(int(cc.window() // MSS)):
            cc.on_ack(MSS, rtt=0.030, qdelay=0.0005)
    assert cc.delay_marks == 0 and cc.hystart_exits == 0 and cc.in_slow_start
    for _ in range(2):
        for _ in range(int(cc.window() // MSS)):
            cc.on_ack(MSS, rtt=0.030, qdelay=0.015)
    assert cc.hystart_exits == 1 and cc.delay_marks > 0


def test_timeout_backs_off_and_ack_resets():
    cc = DctcpWindow(params())
    run_rtts(cc, 5)
    cc.on_rtt(0.001)
    rto = cc.rto
    cc.on_timeout()
    assert cc.window() == 10 * MSS  # back to the initial window
    cc.on_timeout()
    assert cc.window() == 5 * MSS  # a second timeout in a row halves again (ssthresh)
    assert cc.rto == min(cc.p.rto_max, rto * 4) and cc.timeouts == 2
    assert cc.backoff == 2
    cc.on_ack(MSS, rtt=0.001)
    assert cc.backoff == 0 and cc.rto == cc.p.rto_min  # srtt + 4 rttvar of 1 ms samples is below the floor


def test_spurious_timeout_is_undone_by_the_first_ack_only():
    cc = DctcpWindow(params())
    run_rtts(cc, 6, rtt=0.001)
    before = (cc.window(), cc.ssthresh, cc.rto)
    cc.on_timeout()
    cc.on_timeout()  # back-to-back: undo goes to the state before the first
    assert cc.window() < before[0]
    assert cc.undo_timeout() and (cc.window(), cc.ssthresh, cc.rto) == before and cc.spurious_timeouts == 1
    assert not cc.undo_timeout()  # nothing left to undo
    cc.on_timeout()
    cc.on_ack(MSS, rtt=0.001)  # the first ACK after a timeout was not judged spurious: the timeout stands
    assert not cc.undo_timeout() and cc.window() < before[0]


def test_seed_rto_is_the_median_rto_of_the_measured_peers_at_the_same_host_first():
    p = params(rto_min=0.02, rto_max=0.5, rto_init=0.3)
    assert seed_rto("10.0.0.9", [], p) is None  # nothing measured: the caller keeps rto_init
    # one peer: its own RTO, srtt + 4 rttvar
    assert math.isclose(seed_rto("10.0.0.9", [("10.0.0.2", 0.010, 0.005)], p), 0.030)
    # clamped to rto_min..rto_max, as a measured peer's own RTO is
    assert seed_rto("10.0.0.9", [("10.0.0.2", 100e-6, 50e-6)], p) == 0.02
    assert seed_rto("10.0.0.9", [("10.0.0.2", 0.3, 0.1)], p) == 0.5
    # the median, so one peer stalled into a huge (or tiny) RTT does not decide; of an even count the upper one
    three = [("10.0.0.2", 0.010, 0.0), ("10.0.0.3", 0.400, 0.0), ("10.0.0.4", 0.030, 0.0)]
    assert math.isclose(seed_rto("10.0.0.9", three, p), 0.030)
    assert math.isclose(seed_rto("10.0.0.9", three[:1] + three[2:], p), 0.030)
    # a measured peer at the new peer's own host (address) is the closest guess: it alone decides
    assert math.isclose(seed_rto("10.0.0.3", three, p), 0.400)
    # order does not matter; measured peers may come as a generator
    assert seed_rto("10.0.0.9", iter(reversed(three)), p) == seed_rto("10.0.0.9", three, p)


@pytest.mark.parametrize("srtt, rttvar", [(0.0, 0.001), (-0.01, 0.001), (0.01, -0.001), (math.nan, 0.0),
                                          (0.01, math.nan)])
def test_seed_rto_rejects_a_peer_with_an_impossible_estimate(srtt, rttvar):
    with pytest.raises(ValueError, match="10.0.0.2"):
        seed_rto("10.0.0.9", [("10.0.0.2", srtt, rttvar)], params())


def test_a_seeded_rto_holds_until_the_first_sample_and_is_what_a_backoff_returns_to():
    p = params(rto_min=0.02, rto_max=0.5, rto_init=0.3)
    cc = DctcpWindow(p)
    assert cc.rto == 0.3 and cc.base_rto() == 0.3
    assert cc.seed(0.001) and cc.rto == 0.02 == cc.rto_seed  # clamped like any RTO
    assert cc.seed(0.04) and cc.rto == 0.04 == cc.base_rto()
    assert cc.srtt is None and cc.pacing_rate() == float("inf")  # only the RTO is seeded, not srtt
    cc.on_timeout()
    assert cc.rto == 0.08  # backs off from the seed, not from rto_init
    assert not cc.seed(0.02) and cc.rto == 0.08  # a running backoff is never cut short by a seed
    assert cc.base_rto() == 0.04  # what the next progress returns to (sender._progress)
    cc.on_ack(MSS)  # (an ACK of a retransmission: no sample)
    cc.rto = cc.base_rto()
    assert cc.rto == 0.04
    cc.on_ack(MSS, rtt=0.002)  # the first sample of its own replaces the seed (RFC 6298)
    assert cc.rto == 0.02 and cc.base_rto() == 0.02
    assert not cc.seed(0.3) and cc.rto == 0.02  # a measured peer takes no seed


def test_a_done_ends_a_backoff_and_gives_a_sample_only_when_offered():
    p = params(rto_min=0.02, rto_max=0.5, rto_init=0.1)
    cc = DctcpWindow(p)
    cc.on_timeout()
    cc.on_timeout()
    assert cc.rto == 0.4 and cc.backoff == 2
    cc.on_done()  # (the send had a retransmission: no sample) the backoff ends all the same
    assert cc.backoff == 0 and cc.rto == 0.1 and cc.srtt is None
    cc.on_timeout()
    assert cc.rto == 0.2  # the next timeout doubles from the base again, not from 0.4
    cc.on_done(0.003)
    assert cc.srtt == 0.003 and cc.min_rtt == 0.003 and cc.rto == 0.02 and cc.backoff == 0


def test_pacing_rate_follows_window():
    cc = DctcpWindow(params())
    assert cc.pacing_rate() == float("inf")
    cc.on_ack(MSS, rtt=0.001)
    assert abs(cc.pacing_rate() - cc.p.pacing_gain_ss * cc.cwnd / cc.srtt) < 1e-6


def test_one_cut_per_round_of_data_in_flight():
    """After a cut, the ACKs of data sent before it still show the queue the cut is draining: they must not cut
    again (TCP's CWR state). A queue that persists once that data is ACKed cuts again."""
    cc = DctcpWindow(params(delay_target=0.002, hystart_delay=None))
    run_rtts(cc, 4, rtt=0.0005)
    w = cc.window()
    for _ in range(int(w // MSS)):  # one window with a standing queue: one cut
        cc.on_ack(MSS, rtt=0.005)
    assert cc.cuts == 1
    w1 = cc.window()
    for _ in range(int(w // MSS)):  # the data in flight at the cut (the old window): still queued, no cut
        cc.on_ack(MSS, rtt=0.005)
    assert cc.cuts == 1 and cc.window() == w1  # and no growth meanwhile
    for _ in range(2 * int(w1 // MSS)):  # data sent after the cut still meets a queue: cut again
        cc.on_ack(MSS, rtt=0.005)
    assert cc.cuts == 2


def test_an_empty_queue_grows_the_window_faster_than_additive():
    """Out of slow start, a window whose queueing delay stays under probe_delay is below the path's capacity:
    it grows by css_growth per ACKed byte (RFC 9406's conservative slow start), not one MSS per RTT; a queue
    above it brings back additive increase."""
    def after(q: float, probe: float | None) -> float:
        cc = DctcpWindow(params(delay_target=0.010, hystart_delay=0.004, probe_delay=probe))
        run_rtts(cc, 3, rtt=0.001)
        run_rtts(cc, 1, rtt=0.006)  # HyStart ends slow start
        w = cc.window()
        for _ in range(3):
            for _ in range(int(cc.window() // MSS)):
                cc.on_ack(MSS, rtt=0.001 + q, qdelay=q)
        return cc.window() / w

    assert after(0.0002, 0.001) > 1.8  # 1.25^3
    assert after(0.003, 0.001) < 1.1
    assert after(0.0002, None) < 1.1


def test_window_stretches_over_ack_delay_only():
    """ACKs delayed on the way back (RTT far above min RTT + forward queueing) add about rate * ack_delay to the
    window; cwnd, which answers to the forward queue, is the same as without the stretch; ACKs that are not
    delayed add nothing; the stretch is bounded."""
    def run(rtt: float, qdelay: float, comp: bool) -> DctcpWindow:
        cc = DctcpWindow(params(delay_target=0.010, hystart_delay=0.004, ack_delay_comp=comp))
        now = 0.0
        cc.on_ack(MSS, rtt=0.001, qdelay=0.0, now=now)  # min RTT 1 ms
        for _ in range(2000):  # 100 MB/s delivered
            now += MSS / 100e6
            cc.on_ack(MSS, rtt=rtt, qdelay=qdelay, now=now)
        return cc

    delayed, plain = run(0.011, 0.0005, True), run(0.011, 0.0005, False)
    assert delayed.cwnd == plain.cwnd and plain.window() == int(plain.cwnd)
    assert abs(delayed.rate - 100e6) < 5e6 and 0.008 < delayed.ack_delay < 0.0096
    extra = delayed.window() - delayed.cwnd
    assert 0.85 * 100e6 * 0.0095 < extra <= delayed.cwnd * delayed.p.max_ack_stretch
    assert delayed.pacing_rate() > plain.pacing_rate()
    direct = run(0.0015, 0.0005, True)  # the whole RTT excess is forward queueing: nothing to stretch
    assert direct.window() - direct.cwnd < 0.05 * direct.cwnd
    capped = DctcpWindow(params(max_ack_stretch=0.5))
    capped.rate, capped.ack_delay = 1e9, 1.0
    assert capped.window() == int(1.5 * capped.cwnd)


def _shared_queue(flows: list[DctcpWindow], rounds: int, *, base: float = 200e-6, link: float = 125e6,
                  dt: float = 100e-6) -> list[tuple[float, list[float]]]:
    """A fluid FIFO queue at ``link`` bytes/s shared by ``flows`` (one-way delay ``base``, no ECN): every ``dt``
    each flow delivers its share of the link in proportion to the bytes it keeps in flight (FIFO), and the ACKs
    carry the queue's delay. Returns (queueing delay, windows) every round of ``dt``."""
    out = []
    now = 0.0
    for f in flows:  # the first packets find the queue empty: the min RTT
        f.on_ack(f.p.mss, rtt=base, qdelay=0.0, now=now)
    for _ in range(rounds):
        inflight = [f.window() for f in flows]
        bdp = link * base
        q = max(0.0, (sum(inflight) - bdp) / link)
        for f, w in zip(flows, inflight):
            rate = min(link, w / (base + q)) if sum(inflight) <= bdp else link * w / sum(inflight)
            f.on_ack(int(rate * dt), rtt=base + q, qdelay=q, now=now)
        now += dt
        out.append((q, [f.cwnd for f in flows]))
    return out


def test_fast_flows_through_one_queue_converge_to_equal_windows():
    """FAST: flows that start with very unequal windows through one FIFO queue end with equal ones (so equal
    rates) within 3000 rounds of 100 us, each keeping about fast_alpha queued; delay marks alone leave them unequal
    over the same time."""
    def run(**kw) -> list[float]:
        flows = [DctcpWindow(CCParams(mss=8936, init_cwnd_pkts=n, max_cwnd_bytes=8 << 20, **kw))
                 for n in (4, 40, 250)]
        for f in flows:
            f.ssthresh = f.cwnd  # out of slow start: the law alone
        trace = _shared_queue(flows, 3000)
        return trace[-1]

    q, w = run(fast_alpha=FAST_ALPHA)
    assert max(w) / min(w) < 1.1
    assert abs(q * 125e6 - 3 * FAST_ALPHA) < 0.25 * 3 * FAST_ALPHA  # the queue holds fast_alpha per flow
    _, w_marks = run()
    assert max(w_marks) / min(w_marks) > 1.5


def test_fast_keeps_its_target_queue_and_is_bounded_by_the_delay_target():
    """One flow settles with about fast_alpha queued; with many flows, the delay target still caps the queue."""
    one = DctcpWindow(CCParams(mss=8936, fast_alpha=FAST_ALPHA))
    one.ssthresh = one.cwnd
    q, _ = _shared_queue([one], 3000)[-1]
    assert 0.5 * one.p.fast_alpha <= q * 125e6 <= 1.5 * one.p.fast_alpha
    # 12 * 256 KiB would be 25 ms of queue at 1 Gb/s
    many = [DctcpWindow(CCParams(mss=8936, fast_alpha=FAST_ALPHA)) for _ in range(12)]
    for f in many:
        f.ssthresh = f.cwnd
    trace = _shared_queue(many, 6000)
    assert max(q for q, _ in trace[-1000:]) < 2 * many[0].p.delay_target
    assert sum(f.cuts for f in many) > 0
