"""Receiver bookkeeping of one transfer: which packets arrived, when it may complete, what was lost (pure).

The bytes themselves are written by the receiver (``receiver.py``, or the C receive lane); this class tracks arrival
per seq and answers three questions. Arrivals are recorded one way, whatever their shape: :meth:`Reassembly.add`
for one packet, :meth:`Reassembly.add_many` for a receive batch (as slices for a run in seq order, as index arrays
otherwise), :meth:`Reassembly.add_counted` for what the C lane wrote itself; all three end in the one update of the
totals and the cumulative points.
Every header of a transfer says how many of its packets are drop-eligible, ``e``: they are seqs ``0..e-1`` and
leave first, the protected ones are ``e..total-1`` and leave last, the last of them flagged LAST (``chunking.py``).

* :meth:`needed` - the missing packets the receiver must ask for (NACK): protected holes below the highest seq that
  arrived (later seqs may not have been sent yet; the sender's timeout probe sends its highest unACKed seq, which
  uncovers a lost tail). An eligible packet is never asked for, except where the receiver imposes a smaller loss
  bound ``p`` than the sender's: then missing eligible packets are added (lowest seq first) until ``(1 - p)`` of
  the elements would be present, counting every protected packet not in yet as coming (they are delivered
  reliably, so a sender that pauses mid-transfer is not asked for eligible packets the receiver will not need).
* :meth:`satisfied` - every protected packet has arrived (and the receiver's bound holds). The endpoint completes
  at once: whatever eligible packet is still missing was sent before the last protected one and is counted lost.
* :meth:`lost_ranges` - element ranges never received: the complement of the received packets' ranges in
  ``[0, n)``, merged. Exact, without knowing the positions of the missing packets.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["Reassembly", "merge_ranges", "SMALL_TRANSFER", "SMALL_BATCH"]

#: Packets up to which :meth:`Reassembly.lost_ranges` works on Python lists (same result as the array path).
SMALL_TRANSFER = 16
#: Packets from which :meth:`Reassembly.add_many` writes arrays in one numpy call (fewer: one :meth:`add` each).
SMALL_BATCH = 16


class Reassembly:
    """Arrival state of a transfer of ``total`` packets."""

    __slots__ = ("total", "eligible", "arrived", "offsets", "counts", "cum", "pcum", "npackets", "nelems",
                 "max_count", "last_seen", "max_end", "max_seq")

    def __init__(self, total: int, eligible: int = 0):
        if not 0 <= eligible < max(total, 1):
            raise ValueError(f"{eligible} eligible packets of {total}: at least one must be protected")
        self.total = total
        self.eligible = eligible  # seqs below this are drop-eligible, the rest protected
        self.arrived = np.zeros(total, dtype=bool)
        self.offsets = np.zeros(total, dtype=np.int64)  # byte offset of each arrived seq
        self.counts = np.zeros(total, dtype=np.int64)  # elements of each arrived seq
        self.cum = 0  # every seq below this has arrived
        self.pcum = eligible  # every protected seq below this has arrived (pcum == total: all of them)
        self.npackets = 0
        self.nelems = 0
        self.max_count = 0
        self.last_seen = False  # seq total-1 (the sender's last first-pass packet) arrived
        self.max_end = 0  # largest offset+bytes seen
        self.max_seq = -1  # highest seq arrived: beyond it packets may simply not have been sent yet

    # --- recording arrivals: add() for one packet, add_many() for a receive batch, add_counted() for the C lane.
    # Each writes the per-seq arrays its own way and then goes through _account() (the totals) and _advance() (the
    # cumulative points), the one place each is updated.

    def add(self, seq: int, offset: int, count: int, nbytes: int) -> bool:
        """Record the arrival of packet ``seq`` (``count`` elements, ``nbytes`` payload bytes at byte ``offset``);
        False if it is a duplicate (nothing changes)."""
        if self.arrived[seq]:
            return False
        self.arrived[seq] = True
        self.offsets[seq] = offset
        self.counts[seq] = count
        self._account(1, count, count, offset + nbytes, seq)
        if seq == self.cum or seq == self.pcum:  # (elsewhere it joins no run that starts at either)
            self._advance()
        return True

    def add_many(self, seqs: list[int], offsets: list[int], counts: list[int], nbytes: list[int]) -> None:
        """Record the arrivals of distinct seqs none of which has arrived yet (Python lists, one entry a packet;
        the caller filters duplicates): one at a time for fewer than :data:`SMALL_BATCH` (numpy per call costs more
        than Python for a handful), as slices for a run of consecutive seqs (the common case: packets in order),
        else as index arrays. The same state as :meth:`add` one at a time, whichever way."""
        k = len(seqs)
        if k < SMALL_BATCH or not k:
            for seq, offset, count, n in zip(seqs, offsets, counts, nbytes):
                self.add(seq, offset, count, n)
            return
        s0 = seqs[0]
        end = max(map(int.__add__, offsets, nbytes))
        if seqs[-1] - s0 == k - 1 and seqs == list(range(s0, s0 + k)):
            s1 = s0 + k
            self.arrived[s0: s1] = True
            self.offsets[s0: s1] = offsets
            self.counts[s0: s1] = counts
            if s0 <= self.cum < s1:  # (the run itself moves cum to its end: no walk over it)
                self.cum = s1
            self._account(k, sum(counts), max(counts), end, s1 - 1)
            self._advance()
        else:
            idx = np.array(seqs, np.int64)
            cnt = np.array(counts, np.int64)
            self.arrived[idx] = True
            self.offsets[idx] = offsets
            self.counts[idx] = cnt
            self._account(k, int(cnt.sum()), int(cnt.max()), end, max(seqs))
            self._advance()

    def add_counted(self, fresh: int, nelems: int, max_count: int, max_end: int, max_seq: int, cum: int) -> None:
        """Record ``fresh`` arrivals whose entries in ``arrived``, ``offsets`` and ``counts`` the receive fast lane
        (``host/transport/_rxlane.c``) has already written; the arguments are its totals over them (``nelems``
        elements, the largest count, the largest offset + bytes, the highest seq) and the new ``cum`` it found
        walking ``arrived``."""
        self.cum = cum
        self._account(fresh, nelems, max_count, max_end, max_seq)
        self._advance()

    def _account(self, fresh: int, nelems: int, max_count: int, max_end: int, max_seq: int) -> None:
        """After ``fresh`` new arrivals were written into the per-seq arrays: the totals (``nelems`` elements, the
        largest count, the largest offset + bytes, the highest seq among them)."""
        self.npackets += fresh
        self.nelems += nelems
        if max_count > self.max_count:
            self.max_count = max_count
        if max_end > self.max_end:
            self.max_end = max_end
        if max_seq > self.max_seq:
            self.max_seq = max_seq
            if max_seq == self.total - 1:
                self.last_seen = True

    def _advance(self) -> None:
        """After arrivals: move ``cum`` and ``pcum`` over the runs of arrived seqs that start at them."""
        self._advance_cum()
        if self.pcum < self.total and self.arrived[self.pcum]:
            self._advance_pcum()

    def _advance_cum(self) -> None:
        """Move ``cum`` over the run of arrived seqs that starts at it (a numpy window at a time: filling a hole
        can join a long run), and ``pcum`` with it where it was behind."""
        arrived, cum, total = self.arrived, self.cum, self.total
        if cum + 1 < total and arrived[cum] and not arrived[cum + 1]:  # in-order arrival: one step, no numpy call
            cum += 1
        else:
            cum = _run_end(arrived, cum)
        self.cum = cum
        if cum > self.pcum:
            self.pcum = cum

    def _advance_pcum(self) -> None:
        """Move ``pcum`` over the run of arrived protected seqs that starts at it."""
        self.pcum = _run_end(self.arrived, max(self.pcum, self.cum))

    @property
    def complete(self) -> bool:
        """Every packet arrived."""
        return self.npackets == self.total

    def needed(self, loss_bound: float | None = None, n: int | None = None) -> np.ndarray:
        """Seqs to request: protected holes below the highest seq that arrived, plus eligible ones to meet the
        receiver's bound."""
        lo = self.pcum
        head = np.flatnonzero(~self.arrived[lo: self.max_seq + 1]) + lo if self.max_seq >= lo else \
            np.zeros(0, np.int64)
        if loss_bound is None or n is None:
            return head
        per = max(self.max_count, 1)
        # the protected packets still missing will come (by retransmission if need be): about ``per`` elements each
        protected_in = self.npackets - int(np.count_nonzero(self.arrived[: self.eligible]))
        deficit = self._deficit(loss_bound, n) - per * (self.total - self.eligible - protected_in)
        if deficit <= 0:
            return head
        extra_n = -(-deficit // per)  # packets likely needed (the short packet may need one more round)
        tail = np.flatnonzero(~self.arrived[: self.eligible])[:extra_n]
        return np.concatenate([tail, head])

    def _deficit(self, loss_bound: float, n: int) -> int:
        return math.ceil((1.0 - loss_bound) * n - 1e-9) - self.nelems

    def satisfied(self, loss_bound: float | None = None, n: int | None = None) -> bool:
        """All protected packets have arrived (the receiver's bound too, when given)."""
        if self.pcum < self.total:
            return False
        return loss_bound is None or n is None or self._deficit(loss_bound, n) <= 0

    def ack_base(self) -> int:
        """Where an ACK's bitmap starts: every seq below it is acknowledged. Past the eligible seqs once a protected
        one has arrived: an eligible hole is never filled on request, so the sender may stop tracking it."""
        return self.pcum if self.max_seq >= self.eligible else self.cum

    def received_ranges(self, itemsize: int) -> np.ndarray:
        """(k, 2) int64 element ranges [start, stop) received, sorted and merged."""
        idx = np.flatnonzero(self.arrived & (self.counts > 0))
        starts = self.offsets[idx] // itemsize
        return merge_ranges(starts, starts + self.counts[idx])

    def lost_ranges(self, n: int, itemsize: int) -> list[tuple[int, int]]:
        """Element ranges of ``[0, n)`` never received (merged, sorted)."""
        if self.total <= SMALL_TRANSFER:  # the same walk in Python: a dozen numpy calls cost more for a few packets
            got = sorted((o // itemsize, o // itemsize + c) for a, o, c in
                         zip(self.arrived.tolist(), self.offsets.tolist(), self.counts.tolist()) if a and c > 0)
            lost, pos = [], 0
            for a, b in got:
                if a > pos:
                    lost.append((pos, a))
                pos = max(pos, b)
            if pos < n:
                lost.append((pos, n))
            return lost
        if self.complete:
            # every packet arrived: in seq order the sender's packets tile the tensor from 0 (a reliable transfer's
            # seq order is position order), which one comparison confirms; the general merge is for the rest
            offs, cnts = self.offsets, self.counts
            if offs[0] == 0 and np.array_equal(offs[1:], offs[:-1] + cnts[:-1] * itemsize):
                end = int(offs[-1]) // itemsize + int(cnts[-1])
                return [(end, n)] if end < n else []
        return self._lost_by_merge(n, itemsize)

    def _lost_by_merge(self, n: int, itemsize: int) -> list[tuple[int, int]]:
        got = self.received_ranges(itemsize)
        if got.size == 0:
            return [(0, n)] if n else []
        bounds = np.concatenate(([0], got.reshape(-1), [n]))
        gaps = bounds.reshape(-1, 2)
        gaps = gaps[gaps[:, 1] > gaps[:, 0]]
        return [(int(a), int(b)) for a, b in gaps]


def _run_end(arrived: np.ndarray, start: int) -> int:
    """The first seq at or after ``start`` that has not arrived (``len(arrived)``: none), a numpy window at a time
    (filling a hole can join a long run)."""
    pos, total = start, len(arrived)
    while pos < total and arrived[pos]:
        win = arrived[pos: pos + 4096]
        k = int(np.argmin(win))
        if win[k]:
            pos += len(win)
        else:
            return pos + k
    return pos


def merge_ranges(starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
    """Sort [start, stop) ranges and merge touching/overlapping ones; returns a (k, 2) int64 array."""
    if len(starts) == 0:
        return np.zeros((0, 2), dtype=np.int64)
    order = np.argsort(starts, kind="stable")
    s = np.asarray(starts, np.int64)[order]
    e = np.asarray(stops, np.int64)[order]
    run_end = np.maximum.accumulate(e)
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > run_end[:-1]
    first = np.flatnonzero(new)
    last = np.concatenate((first[1:] - 1, [len(s) - 1]))
    return np.stack([s[first], run_end[last]], axis=1)
