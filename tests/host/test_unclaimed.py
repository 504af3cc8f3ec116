"""The staging budget for unclaimed transfers (host.transport.unclaimed) on its own: what a first header may charge,
how a staging buffer grows within the budget and the claimed packets, and that every byte charged comes back. The
endpoint's use of it over real sockets is in test_endpoint.py and test_transport_hardening.py."""

from __future__ import annotations

import numpy as np

from host.transport.unclaimed import BOOK_BYTES, MAX_PAYLOAD, NO_STAGE, StagingBudget


def test_bookkeeping_is_admitted_only_within_the_budget() -> None:
    b = StagingBudget(10 * BOOK_BYTES)
    assert b.admits(10) and not b.admits(11)
    assert b.charge_book(4) == 4 * BOOK_BYTES and b.used == 4 * BOOK_BYTES
    assert b.admits(6) and not b.admits(7) and not b.exhausted
    b.charge_book(6)
    assert b.exhausted and not b.admits(1) and b.admits(0)
    b.release(None, 6 * BOOK_BYTES)
    assert b.used == 4 * BOOK_BYTES and not b.exhausted


def test_a_zero_budget_stages_nothing() -> None:
    b = StagingBudget(0)
    assert b.exhausted and not b.admits(1)
    assert b.grow(NO_STAGE, 100, 100, 1, 0) is NO_STAGE and b.used == 0


def test_full_size_packets_size_the_stage_for_the_whole_transfer() -> None:
    b = StagingBudget(1 << 20)
    s = b.grow(NO_STAGE, 1000, 1000, 8, 0)
    assert len(s) == 8000 and b.used == 8000 and s.dtype == np.uint8
    assert b.grow(s, 8000, 1000, 8, 0) is s and b.used == 8000  # already large enough: unchanged, nothing charged


def test_growth_keeps_the_staged_prefix_and_at_least_doubles() -> None:
    b = StagingBudget(1 << 20)
    s = b.grow(NO_STAGE, 100, 10, 1000, 0)  # short packets: sized by the packet at hand, not the whole transfer
    assert len(s) == 10_000
    s[:] = 7
    s2 = b.grow(s, 10_001, 10, 1000, keep=50)
    assert len(s2) == 20_000 and b.used == 20_000
    assert (s2[:50] == 7).all()  # only what the transfer has received is carried over


def test_growth_stops_at_the_budget_and_at_what_the_claimed_packets_carry() -> None:
    b = StagingBudget(5000)
    b.charge_book(10)
    s = b.grow(NO_STAGE, 9000, 9000, 2, 0)
    assert len(s) == 5000 - 10 * BOOK_BYTES and b.used == b.limit  # never past the budget
    assert b.grow(s, len(s) + 1, 9000, 2, len(s)) is s  # no room: unchanged (the caller drops what does not fit)
    big = StagingBudget(1 << 30)
    s = big.grow(NO_STAGE, 10 * MAX_PAYLOAD, MAX_PAYLOAD, 2, 0)
    assert len(s) == 2 * MAX_PAYLOAD  # two packets carry no more than this, whatever a header's offset says


def test_release_gives_back_stage_and_bookkeeping() -> None:
    b = StagingBudget(1 << 20)
    book = b.charge_book(100)
    s = b.grow(NO_STAGE, 5000, 5000, 100, 0)
    assert b.used == book + len(s)
    b.release(s, book)
    assert b.used == 0
