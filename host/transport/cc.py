"""Congestion control: a DCTCP-style window per destination, with slow start, pacing and RTO backoff (pure).

The state machine sees only events (ACKed bytes with or without congestion marks, RTT samples, timeouts) and the
clock passed in, never sockets, so it is tested alone (``tests/host/test_cc.py``).

* **Marks.** A byte counts as marked when the ACK that covers it carries ECN-Echo (a switch set CE on the data).
  When ``delay_target`` is set, an ACK's bytes also count as marked when the *smallest* queueing-delay sample of
  the current observation window so far (two samples at least) exceeds ``delay_target``: a standing queue (CoDel's
  criterion, at the scale of one window). The queueing delay is the forward one-way delay over its minimum when
  the ACK carries the receiver's clock (LEDBAT's measurement; the transport's ACKs do), else ``rtt - min_rtt``.
  One-way matters when data flows both ways: an RTT also counts the queue the ACKs wait in behind the opposite
  direction's data, so the flow whose partner queues more was cut while its partner grew. The delay mark is the fallback for
  paths without ECN-marking queues (Linux tbf/pfifo only drop): a queue that builds raises every RTT long before
  it overflows, while a stall of a Python receiver or sender (GIL, scheduling, a garbage collection) raises only
  the samples taken during it and, judged one sample at a time, cut the window on an idle path. Random loss
  raises neither, so it never shrinks the window (MLT's point: loss of drop-eligible packets is expected and must
  not collapse the rate).
* **DCTCP.** Once per observation window (about one cwnd of ACKed bytes) ``alpha <- (1-g) alpha + g F`` with F the
  marked fraction; if anything was marked the window shrinks to ``cwnd (1 - alpha/2)`` and slow start ends.
* **ACKs delayed on the way back.** When data flows both ways over FIFO links, a flow's ACKs wait behind the
  opposite direction's data; the RTT then holds that queue too, and a window sized for the forward path (its base
  delay and queue) no longer keeps the path busy: each direction's cut lengthened the other's RTT, and they took
  turns starving. With the receiver's clock the sender knows the ACK delay (``rtt - min_rtt - forward queueing``),
  so :meth:`window` adds what the measured delivery rate puts in flight during it (``rate * ack_delay``, at most
  ``max_ack_stretch * cwnd``) and pacing follows the stretched window; ``cwnd`` itself still answers only to the
  forward queue. Two hosts sending to each other over tbf went from 0.79-0.88 to 0.85-0.95 Gb/s per direction.
* **One cut per round.** After a cut, the ACKs of the data that was in flight at it (about the old window) still
  show the queue the cut is draining; until they are in, delay samples are ignored, the window holds, and only
  ECN marks are counted (into alpha): TCP's CWR state. Without it, a delayed signal cut three or four times in a
  row, to a quarter of the window, on two hosts sending to each other.
* **FAST's delay law** (``fast_alpha``, opt-in: ``FAST_ALPHA`` = 256 KiB): once per observation window the
  window moves halfway (``fast_gamma``) towards ``cwnd * base / (base + q) + fast_alpha``, with ``base`` the min RTT
  and ``q`` the window's smallest forward queueing delay: of a window, ``cwnd * q / (base + q)`` bytes sit in
  queues, and FAST TCP (Jin, Wei, Low 2004) steers that to ``fast_alpha`` for every flow. Flows through one queue
  then keep the same bytes in it, so they get the same rate (``fast_alpha / q``) whatever their start, within a few
  windows, not the hundreds of rounds that additive increase and proportional cuts take. Delay marks only bound
  the queue (a standing queue over the target still cuts), and lost packets still count for nothing. It applies
  only with a delay signal (``delay_target`` set). Measured (docs/transport.md): in the 4-host all-to-all over
  1 Gb/s tbf links, where delay marks leave one flow per sender with a window several times its siblings' and
  each receiver waits for its slowest flow, it won 11 of 11 alternated scratch runs (0.85-0.92 against 0.79-0.89
  Gb/s) but not the two runs of ``bench/transport.py`` that followed (0.78-0.87 against 0.83-0.88); the P=4 ring
  all-reduce of 64 MiB, one flow per link, lost 5 of 5 (0.87-0.94 of the ideal against 0.96-0.97). So it is
  opt-in, not the default. ``fast_alpha`` is in bytes, as FAST's alpha is in packets: n flows at a
  link of rate C queue ``n * fast_alpha / C``; with many flows or slow links the delay target caps it.
* **Conservative growth on an empty queue** (without FAST). Out of slow start, a window whose smallest
  queueing-delay sample stays under ``probe_delay`` (1 ms) is below the path's capacity (the queue is empty), so it
  grows by ``css_growth`` (1/4) per ACKed byte, as RFC 9406's conservative slow start, instead of one MSS per RTT;
  once a queue stands, additive increase resumes. A flow that cut while its partner's data delayed its ACKs
  otherwise needed hundreds of RTTs to refill an idle link.
* **Slow start** doubles the window per RTT (cwnd += ACKed bytes) until the first mark or ``ssthresh``; then
  additive increase of one MSS per RTT. As Linux's HyStart, slow start also ends once the window's smallest RTT
  sample exceeds ``min_rtt + hystart_delay``; the window is then scaled by ``(min_rtt + hystart_delay) / rtt``,
  which leaves about ``hystart_delay`` of queue (BBR drains its start-up queue the same way). Doubling into a
  drop-tail queue (tbf) otherwise overshoots it by a whole window: hundreds of lost packets, or a 20 ms queue that
  delays the ACKs of the opposite direction's flow until its delay signal starves it.
* **Pacing**: the sender spreads a window over the smoothed RTT at ``pacing_gain`` (2 in slow start, 1.25 after).
* **Timeouts** (no feedback at all for ``rto``): ssthresh = cwnd/2, cwnd back to the initial window, rto doubles
  (up to ``rto_max``); the next ACK resets the backoff. As F-RTO/Eifel, a timeout is undone (window, threshold
  and rto restored) when the first ACK after it acknowledges data sent *before* it that was never resent: the
  path had delivered; the sender or receiver had only stalled (on a loaded host, a descheduled Python thread).
* **The first RTO of a new peer** comes from the peers already measured (:func:`seed_rto`, applied by
  :meth:`DctcpWindow.seed`), not from the fixed ``rto_init``: the median (the upper one of an even count) of their
  own RTOs, ``srtt + 4 rttvar`` clamped to ``rto_min..rto_max``, taken over the measured peers at the new peer's
  host when there are any, else over all of them. A collective's peers sit behind the same switch, so what the
  endpoint measured to one is the best guess for another; Linux seeds a new connection's RTO from its destination
  cache the same way (``tcp_init_metrics``). Why it matters: a lossy collective ends with a round of one-packet
  loss reports to peers the call itself never sent to (docs/bounded-loss.md); a lost packet there (or its ACK)
  has no later packet to reveal it, so only the RTO recovers it, and with ``rto_init`` (2.5 times the 20 ms floor
  every measured loopback or LAN peer has) and its doublings that cost up to hundreds of ms. The median, not the
  smallest, so that one peer whose samples a stall shrank or inflated does not decide; only the RTO is seeded,
  as Linux does: ``srtt`` stays unset, so pacing, the NACK wait and the delay signal use the peer's own samples
  only, and its first sample replaces the seed (RFC 6298). Without any measured peer ``rto_init`` stays.
* **A DONE is progress** (:meth:`DctcpWindow.on_done`): it ends a backoff as an ACK of new data does, and gives
  an RTT sample when nothing of the send was resent. A one-packet send is answered by DONE alone, so a peer that
  is only ever sent such messages (the loss reports) otherwise never had a sample, and every timeout towards it
  doubled an RTO that nothing reset.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

__all__ = ["CCParams", "DctcpWindow", "FAST_ALPHA", "params_for_mode", "seed_rto"]

FAST_ALPHA = 256 << 10  # bytes per flow for CCParams.fast_alpha: 2 ms of a 1 Gb/s link (see the module docstring)


@dataclass(frozen=True)
class CCParams:
    mss: int = 1436  # payload bytes per packet; the transport sets it from the MTU
    init_cwnd_pkts: int = 32
    min_cwnd_pkts: int = 2
    max_cwnd_bytes: int = 4 << 20
    g: float = 1.0 / 16  # DCTCP gain
    delay_target: float | None = 0.010  # standing queue over min RTT that marks; None = ECN marks only (see above)
    hystart_delay: float | None = 0.004  # slow start ends when the window's min RTT rises this much
    probe_delay: float | None = 0.001  # a window whose min queueing delay stays below this grows by css_growth
    css_growth: float = 0.25  # per ACKed byte, while the queue is empty (RFC 9406's conservative slow start)
    rto_min: float = 0.02  # Python scheduling stalls of several ms must not look like loss
    rto_max: float = 0.5
    rto_init: float = 0.05
    pacing_gain_ss: float = 2.0
    pacing_gain_ca: float = 1.25
    min_rtt_floor: float = 20e-6  # an RTT below this is clock noise
    ack_delay_comp: bool = True  # stretch the window over the ACK delay (see above)
    max_ack_stretch: float = 3.0  # the stretch is at most this times cwnd
    fast_alpha: float | None = None  # FAST: bytes each flow keeps queued (FAST_ALPHA; see above); None = delay marks
    fast_gamma: float = 0.5  # FAST: the step towards its target per observation window


def params_for_mode(mode: str, mss: int) -> CCParams | None:
    """The parameters of a named congestion-control mode (None: the defaults). ``"on"``: ECN and delay marks;
    ``"fast"``: the same with FAST's delay law; ``"ecn"``: ECN marks only (every switch marks, as the DLCP P4
    program does); ``"off"``: a fixed window large enough for any one transfer, no delay signal."""
    if mode == "off":
        return CCParams(mss=mss, init_cwnd_pkts=1 << 14, min_cwnd_pkts=1 << 14, max_cwnd_bytes=1 << 30,
                        delay_target=None)
    if mode == "ecn":
        return CCParams(mss=mss, delay_target=None)
    if mode == "fast":
        return CCParams(mss=mss, fast_alpha=FAST_ALPHA)
    if mode == "on":
        return None
    raise ValueError(f"congestion control mode {mode!r}: expected on, fast, ecn or off")


def seed_rto(host: str, measured: Iterable[tuple[str, float, float]], p: CCParams) -> float | None:
    """The initial RTO of a peer at ``host`` that has no RTT sample of its own, from the peers that have:
    ``measured`` holds their ``(host, srtt, rttvar)``. Each one's RTO is ``srtt + 4 rttvar`` clamped to
    ``p.rto_min..p.rto_max`` (RFC 6298, as :meth:`DctcpWindow.on_rtt`); the seed is the median of those at ``host``
    if any, else of all (the upper one of an even count: of two paths, the slower). None when no peer was measured
    (the caller keeps ``rto_init``). Why the median, and why only the RTO: the module's docstring."""
    known = [(h, s, v) for h, s, v in measured]
    for h, s, v in known:
        if not (s > 0 and v >= 0):  # (NaN fails both)
            raise ValueError(f"seed_rto: peer at {h!r} has srtt {s!r} and rttvar {v!r}: expected srtt > 0, "
                             f"rttvar >= 0")
    same = [(s, v) for h, s, v in known if h == host]
    pool = same or [(s, v) for _, s, v in known]
    if not pool:
        return None
    rtos = sorted(min(p.rto_max, max(p.rto_min, s + 4 * v)) for s, v in pool)
    return rtos[len(rtos) // 2]


@dataclass
class DctcpWindow:
    """Window/rate state for one destination. All times in seconds, sizes in bytes."""

    p: CCParams = field(default_factory=CCParams)
    cwnd: float = 0.0
    ssthresh: float = float("inf")
    alpha: float = 1.0  # DCTCP starts pessimistic: the first marked window halves
    srtt: float | None = None
    ack_delay: float = 0.0  # smoothed delay of ACKs on the way back: rtt - min_rtt - forward queueing delay
    rate: float = 0.0  # delivery rate (bytes/s ACKed), measured per observation window
    _win_start: float | None = None
    _rate_bytes: float = 0.0
    rttvar: float = 0.0
    min_rtt: float | None = None
    rto: float = 0.0
    backoff: int = 0
    _win_acked: float = 0.0
    _win_marked: float = 0.0
    _win_target: float = 0.0
    _win_min_q: float = float("inf")  # smallest queueing-delay sample in the current observation window
    _win_samples: int = 0
    _cwr: float = 0.0  # bytes still to be ACKed that were in flight at the last cut (TCP's CWR state)
    _cwr_acked: float = 0.0
    _cwr_marked: float = 0.0
    marks_seen: int = 0  # ACK events that carried a mark (ECN or delay)
    ecn_marks: int = 0
    delay_marks: int = 0
    cuts: int = 0
    fast_cuts: int = 0  # FAST's decreases
    timeouts: int = 0
    hystart_exits: int = 0
    spurious_timeouts: int = 0
    rto_seed: float | None = None  # the RTO taken from other peers before this one's first sample (seed())
    _undo: tuple[float, float, float, float] | None = None  # state before the last timeout, until the next ACK

    def __post_init__(self) -> None:
        if self.cwnd <= 0:
            self.cwnd = float(self.p.init_cwnd_pkts * self.p.mss)
        self.rto = self.p.rto_init
        self._win_target = self.cwnd

    @property
    def in_slow_start(self) -> bool:
        return self.cwnd < self.ssthresh

    def window(self) -> int:
        """Bytes that may be in flight: ``cwnd`` for the forward path, plus what the delivery rate puts in flight
        while ACKs are held up on the way back (behind the opposite direction's data)."""
        if not self.p.ack_delay_comp:
            return int(self.cwnd)
        return int(self.cwnd + min(self.rate * self.ack_delay, self.cwnd * self.p.max_ack_stretch))

    def pacing_rate(self) -> float:
        """Bytes per second the sender may emit (inf before the first RTT sample)."""
        if self.srtt is None:
            return float("inf")
        gain = self.p.pacing_gain_ss if self.in_slow_start else self.p.pacing_gain_ca
        return gain * self.window() / max(self.srtt, self.p.min_rtt_floor)

    def seed(self, rto: float) -> bool:
        """Take ``rto`` (:func:`seed_rto`'s, from the peers already measured) as this peer's RTO, and as the RTO a
        backoff returns to, while it has no RTT sample of its own and no backoff is running (a doubled RTO is
        never cut short). Whether it was taken."""
        if self.srtt is not None or self.backoff:
            return False
        self.rto_seed = self.rto = min(self.p.rto_max, max(self.p.rto_min, rto))
        return True

    def base_rto(self) -> float:
        """The RTO without backoff: ``srtt + 4 rttvar`` (clamped) once sampled, else the seed, else ``rto_init``."""
        if self.srtt is not None:
            return min(self.p.rto_max, max(self.p.rto_min, self.srtt + 4 * self.rttvar))
        return self.rto_seed if self.rto_seed is not None else self.p.rto_init

    def on_rtt(self, rtt: float) -> None:
        """RFC 6298 smoothing; min RTT for the delay mark."""
        rtt = max(rtt, self.p.min_rtt_floor)
        if self.srtt is None:
            self.srtt, self.rttvar = rtt, rtt / 2
        else:
            self.rttvar = 0.75 * self.rttvar + 0.25 * abs(self.srtt - rtt)
            self.srtt = 0.875 * self.srtt + 0.125 * rtt
        self.min_rtt = rtt if self.min_rtt is None else min(self.min_rtt, rtt)
        self.rto = self.base_rto()

    def on_ack(self, acked: int, *, ecn: bool = False, rtt: float | None = None,
               qdelay: float | None = None, now: float | None = None) -> None:
        """``acked`` bytes newly delivered; ``ecn``: the ACK echoed CE; ``rtt``: a sample (Karn-filtered); ``now``:
        the clock (for the delivery rate); ``qdelay``: the forward queueing delay of that sample, when the
        receiver's timestamp gives it (one-way delay over its minimum, as LEDBAT measures it). Without it the delay
        signal is ``rtt - min_rtt``, which also counts the queue the ACKs wait in on the way back, behind the
        opposite direction's data."""
        self.backoff = 0
        self._undo = None  # the first ACK after a timeout decides (undo_timeout is called before it)
        delay = False
        cwr = self._cwr > 0
        if rtt is not None:
            if self.min_rtt is not None and not cwr:  # judged against the min RTT before this sample
                q = qdelay if qdelay is not None else max(rtt, self.p.min_rtt_floor) - self.min_rtt
                self._win_min_q = min(self._win_min_q, q)
                self._win_samples += 1
                q_min = self._win_min_q
                delay = (self._win_samples >= 2 and self.p.delay_target is not None
                         and q_min > self.p.delay_target)
                if (self.in_slow_start and self._win_samples >= 2 and self.p.hystart_delay is not None
                        and q_min > self.p.hystart_delay):
                    # the queue this window already built is cwnd * q / (min_rtt + q): scale the window back so
                    # that about hystart_delay of it remains (slow start's last doubling overshoots)
                    keep = (self.min_rtt + self.p.hystart_delay) / (self.min_rtt + q_min)
                    self.cwnd = max(self.cwnd * keep, self.p.min_cwnd_pkts * self.p.mss)
                    self.ssthresh = self.cwnd
                    self._win_target = min(self._win_target, self.cwnd)
                    self.hystart_exits += 1
            self.on_rtt(rtt)
            if qdelay is not None:
                d = max(0.0, rtt - self.min_rtt - qdelay)
                self.ack_delay = 0.875 * self.ack_delay + 0.125 * d
        if now is not None and acked > 0:
            if self._win_start is None:
                self._win_start = now
            self._rate_bytes += acked
            if now - self._win_start >= max(self.srtt or 0.0, 1e-3):
                r = self._rate_bytes / (now - self._win_start)
                self.rate = r if not self.rate else 0.5 * self.rate + 0.5 * r
                self._win_start, self._rate_bytes = now, 0.0
        if acked <= 0:
            return
        if cwr:  # this data was sent before the last cut: its delay shows the queue the cut is draining
            self._cwr -= acked
            self._cwr_acked += acked
            if ecn:
                self.marks_seen += 1
                self.ecn_marks += 1
                self._cwr_marked += acked
            if self._cwr <= 0:  # the cut has taken effect: ECN marks meanwhile still inform alpha; judge afresh
                self.alpha = (1 - self.p.g) * self.alpha + self.p.g * self._cwr_marked / self._cwr_acked
                self._cwr = self._cwr_acked = self._cwr_marked = 0.0
                self._win_target = self.cwnd
            return
        marked = ecn or delay
        if marked:
            self.marks_seen += 1
            self.ecn_marks += int(ecn)
            self.delay_marks += int(delay and not ecn)
        self._win_acked += acked
        if marked:
            self._win_marked += acked
        if not self._win_marked:
            if self.in_slow_start:
                self.cwnd += acked
            elif self.p.fast_alpha is not None and self.p.delay_target is not None:
                pass  # FAST moves the window once per observation window (_end_window)
            elif (self.p.probe_delay is not None and self._win_samples >= 2
                  and self._win_min_q < self.p.probe_delay):
                self.cwnd += self.p.css_growth * acked  # the path keeps no queue: the window is below its capacity
            else:
                self.cwnd += self.p.mss * acked / self.cwnd
        if self._win_acked >= self._win_target:
            self._end_window()
        self._clamp()

    def _end_window(self) -> None:
        q_min, samples = self._win_min_q, self._win_samples
        self._win_min_q, self._win_samples = float("inf"), 0
        frac = self._win_marked / self._win_acked if self._win_acked else 0.0
        self.alpha = (1 - self.p.g) * self.alpha + self.p.g * frac
        if self._win_marked:
            self._cwr = self.cwnd  # what was in flight: the next window starts once it is ACKed
            self.cwnd = self.cwnd * (1 - self.alpha / 2)
            self.ssthresh = self.cwnd
            self.cuts += 1
        elif (self.p.fast_alpha is not None and self.p.delay_target is not None and not self.in_slow_start
              and samples >= 2 and self.min_rtt is not None):
            base = self.min_rtt
            target = self.cwnd * base / (base + q_min) + self.p.fast_alpha
            new = min(2 * self.cwnd, (1 - self.p.fast_gamma) * self.cwnd + self.p.fast_gamma * target)
            if new < self.cwnd:  # judge the smaller window by its own samples, not by the queue it drains
                self._cwr = self.cwnd
                self.fast_cuts += 1
            self.cwnd = new
        self._win_acked = self._win_marked = 0.0
        self._clamp()
        self._win_target = self.cwnd

    def on_timeout(self) -> None:
        """No feedback for ``rto``: restart from the initial window and back the timer off."""
        self.timeouts += 1
        if self._undo is None:  # back-to-back timeouts undo to the state before the first
            self._undo = (self.cwnd, self.ssthresh, self._win_target, self.rto)
        self.ssthresh = max(self.cwnd / 2, self.p.min_cwnd_pkts * self.p.mss)
        self.cwnd = float(min(self.p.init_cwnd_pkts * self.p.mss, self.ssthresh))
        self.backoff += 1
        self.rto = min(self.p.rto_max, self.rto * 2)
        self._win_acked = self._win_marked = 0.0
        self._win_min_q, self._win_samples = float("inf"), 0
        self._cwr = self._cwr_acked = self._cwr_marked = 0.0
        self._win_target = self.cwnd
        self._clamp()

    def on_done(self, rtt: float | None = None) -> None:
        """A send ended with the receiver's DONE, which answers its last packet (a one-packet send gets no ACK
        before it): progress, as an ACK of new data is, so a running backoff ends and the RTO returns to
        :meth:`base_rto`. ``rtt``: a sample when no packet of the send was resent (Karn). Without this, a peer sent
        only one-packet messages (a collective's loss reports) never had a sample of its own, and each timeout
        towards it doubled an RTO nothing reset, up to ``rto_max``, across calls."""
        self.backoff = 0
        if rtt is not None:
            self.on_rtt(rtt)
        self.rto = self.base_rto()

    def undo_timeout(self) -> bool:
        """The timeout just taken was spurious (called on the first ACK after it): restore the state before it."""
        if self._undo is None:
            return False
        self.cwnd, self.ssthresh, self._win_target, self.rto = self._undo
        self._undo = None
        self.spurious_timeouts += 1
        return True

    def _clamp(self) -> None:
        self.cwnd = float(min(max(self.cwnd, self.p.min_cwnd_pkts * self.p.mss), self.p.max_cwnd_bytes))

    def snapshot(self) -> dict[str, float | int | None]:
        return {"cwnd": int(self.cwnd), "window": self.window(), "ack_delay_us": round(self.ack_delay * 1e6, 1),
                "delivery_gbps": round(self.rate * 8e-9, 3),
                "ssthresh": None if self.ssthresh == float("inf") else int(self.ssthresh),
                "alpha": round(self.alpha, 4), "srtt_us": None if self.srtt is None else round(self.srtt * 1e6, 1),
                "min_rtt_us": None if self.min_rtt is None else round(self.min_rtt * 1e6, 1),
                "rto_ms": round(self.rto * 1e3, 3),
                "rto_seed_ms": None if self.rto_seed is None else round(self.rto_seed * 1e3, 3), "pacing_gbps": round(self.pacing_rate() * 8e-9, 3)
                if self.srtt else None, "ecn_marks": self.ecn_marks, "delay_marks": self.delay_marks,
                "cuts": self.cuts, "fast_cuts": self.fast_cuts, "timeouts": self.timeouts,
                "hystart_exits": self.hystart_exits, "spurious_timeouts": self.spurious_timeouts}
