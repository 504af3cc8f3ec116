"""The receiver's budget for unclaimed transfers: data that arrives before ``recv()``/``post_recv()`` is posted for it.

Such data waits in a per-transfer staging buffer (``InTransfer.stage`` in ``receiver.py``) until a receive is posted and
the bytes move into the caller's buffer. A sender, or a stranger, decides how much arrives, so the receiver bounds
what it holds: every staged byte, and the Reassembly bookkeeping a transfer's first header makes it keep
(:data:`BOOK_BYTES` per claimed packet), is charged to one budget (``Options.max_staged_bytes``). What the budget
cannot take is dropped and counted by the endpoint; nothing here fails a transfer. The endpoint calls these methods
under its lock; the budget has no lock of its own.
"""

from __future__ import annotations

import numpy as np

from host import wire

__all__ = ["BOOK_BYTES", "MAX_PAYLOAD", "NO_STAGE", "StagingBudget"]

#: An empty staging buffer: a transfer that has staged nothing yet (np.empty: a grown one is never zero-filled).
NO_STAGE = np.empty(0, np.uint8)
#: Bytes of Reassembly bookkeeping per packet (arrived: bool, offsets and counts: int64), charged to the staging
#: budget for a transfer nobody has posted a receive for.
BOOK_BYTES = 17
#: The most payload one DATA packet carries (the largest UDP payload less the header): a transfer of ``total``
#: packets ends at or below ``total * MAX_PAYLOAD`` bytes, which bounds a staged transfer's buffer.
MAX_PAYLOAD = 65507 - wire.HEADER_LEN


class StagingBudget:
    """The bytes held for unclaimed transfers (``used``) against a limit. ``used`` never passes ``limit`` through
    these methods: a transfer's bookkeeping is charged only after :meth:`admits` said yes, and :meth:`grow` sizes a
    buffer within what is left."""

    def __init__(self, limit: int):
        self.limit = int(limit)  # (0 or less: nothing is staged)
        self.used = 0

    @property
    def exhausted(self) -> bool:
        """No room left: packets of a transfer not seen before open nothing."""
        return self.used >= self.limit

    def admits(self, total: int) -> bool:
        """Whether a transfer whose first header claims ``total`` packets fits the budget's bookkeeping."""
        return self.used + total * BOOK_BYTES <= self.limit

    def charge_book(self, total: int) -> int:
        """Charge the bookkeeping of a transfer of ``total`` packets; returns the bytes charged (given back by
        :meth:`release`)."""
        book = total * BOOK_BYTES
        self.used += book
        return book

    def grow(self, stage: np.ndarray, top: int, full: int, total: int, keep: int) -> np.ndarray:
        """A staging buffer that holds bytes up to ``top``, or as close as the budget allows: ``stage`` itself when
        it is already that large or no larger one fits, else a new buffer holding ``stage[:keep]``, charged for
        what it adds. ``full``: the payload of the packets at hand, so full-size packets size the buffer for the
        whole transfer (``full * total``) at once; the buffer at least doubles, and never passes what ``total``
        packets can carry (:data:`MAX_PAYLOAD` each)."""
        have = len(stage)
        if top <= have:
            return stage
        limit = have + max(0, self.limit - self.used)  # never past the budget
        limit = min(limit, total * MAX_PAYLOAD)  # nor past what the claimed packets can carry
        size = min(max(top, 2 * have, full * total), limit)
        if size <= have:  # (what still does not fit is dropped by the caller, as over the budget)
            return stage
        new = np.empty(size, np.uint8)
        used = min(have, keep)
        new[:used] = stage[:used]
        self.used += size - have
        return new

    def release(self, stage: np.ndarray | None, book: int) -> None:
        """Give back a transfer's staging buffer and bookkeeping (on every path that ends its staging: moved into
        the posted buffer, a failed post, a failed or expired transfer)."""
        self.used -= (len(stage) if stage is not None else 0) + book
