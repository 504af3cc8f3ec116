"""Receiver arrival state alone, and a property test of the whole bounded-loss rule with simulated delivery."""

from __future__ import annotations

import contextlib

import numpy as np
from hypothesis import given, settings, strategies as st

from host.policy import LayerMagnitudePolicy
from host.transport.chunking import chunk_elems, plan_packets
from host.transport.reassembly import Reassembly, merge_ranges
from host.wire import DType


def test_merge_ranges():
    m = merge_ranges(np.array([10, 0, 5, 30]), np.array([20, 5, 8, 31]))
    assert m.tolist() == [[0, 8], [10, 20], [30, 31]]
    assert merge_ranges(np.array([]), np.array([])).shape == (0, 2)


def test_needed_and_satisfied_follow_the_eligible_count():
    r = Reassembly(6, 2)  # seqs 0-1 eligible (sent first), 2-5 protected; every header says so
    assert r.add(2, 0, 10, 40) and not r.add(2, 0, 10, 40)
    assert r.needed().tolist() == [] and not r.satisfied()  # eligible 0-1 are never asked for
    r.add(4, 80, 10, 40)
    assert r.needed().tolist() == [3] and not r.satisfied()  # 5 may not have been sent yet
    r.add(5, 200, 10, 40)
    assert r.needed().tolist() == [3] and r.last_seen and r.ack_base() == 3
    r.add(3, 120, 10, 40)
    # every protected packet is in: satisfied at once, both eligible packets lost (no wait for them)
    assert r.satisfied() and not r.complete and r.needed().size == 0 and r.ack_base() == 6
    assert r.lost_ranges(60, 4) == [(10, 20), (40, 50)]


def test_first_eligible_packet_lost_is_not_requested():
    r = Reassembly(5, 2)
    r.add(1, 0, 10, 40)  # eligible seq 0 never arrives
    assert r.cum == 0 and r.ack_base() == 0  # nothing protected yet: the ACK starts at the hole
    for s in (2, 3, 4):
        r.add(s, 40 * s, 10, 40)
    assert r.satisfied() and r.needed().size == 0 and r.ack_base() == 5 and r.cum == 0


def test_receiver_bound_requests_eligible_packets():
    r = Reassembly(4, 1)
    r.add(1, 0, 10, 40)
    r.add(2, 40, 10, 40)
    r.add(3, 80, 10, 40)
    assert r.satisfied() and r.needed().size == 0
    assert not r.satisfied(0.0, 40) and r.needed(0.0, 40).tolist() == [0]
    assert r.satisfied(0.25, 40)
    assert r.lost_ranges(40, 4) == [(30, 40)]


def test_a_pause_mid_transfer_requests_no_eligible_packet():
    """The sender pauses after half its packets, the first (eligible) one lost: the receiver's bound equals the
    sender's, so nothing eligible is needed; the protected packets still to come are not counted as lost."""
    r = Reassembly(10, 2)  # 10 packets of 10 elements, seqs 0-1 eligible
    for s in range(1, 5):
        r.add(s, 40 * s, 10, 40)
    assert r.needed(0.1, 100).size == 0 and r.needed().size == 0 and not r.satisfied(0.1, 100)
    assert r.needed(0.0, 100).tolist() == [0]  # a receiver that wants everything asks for it at once
    for s in range(5, 10):
        r.add(s, 40 * s, 10, 40)
    assert r.satisfied(0.1, 100) and r.needed(0.1, 100).size == 0


def test_a_transfer_keeps_one_protected_packet():
    import pytest
    with pytest.raises(ValueError, match="protected"):
        Reassembly(3, 3)


@settings(max_examples=150, deadline=None)
@given(n=st.integers(1, 5000), mtu=st.sampled_from([576, 1500, 9000]), p=st.sampled_from([0.0, 0.02, 0.1, 0.3]),
       dt=st.sampled_from([DType.FLOAT32, DType.FLOAT16]), loss=st.floats(0, 1), seed=st.integers(0, 1000))
def test_bounded_loss_rule(n, mtu, p, dt, loss, seed):
    """Protected packets always delivered (retransmitted), eligible ones lost at random: once satisfied, the
    zero-filled fraction is <= p, only eligible packets are missing and the lost ranges are exactly theirs."""
    rng = np.random.default_rng(seed)
    vals = rng.standard_normal(n).astype(np.float32)
    isz = dt.itemsize
    chunk = chunk_elems(mtu, isz)
    npk = max(1, -(-n // chunk))
    counts = np.minimum(chunk, n - np.arange(npk) * chunk)
    cls = LayerMagnitudePolicy().classify(vals, counts, layer=0, loss_bound=p)
    plan = plan_packets(nelems=n, dtype=dt, mtu=mtu, classes=cls)
    n_elig = int(plan.eligible.sum())
    assert np.all(plan.eligible[:n_elig]) and not plan.eligible[n_elig:].any()
    r = Reassembly(plan.total, n_elig)
    dropped = plan.eligible & (rng.random(plan.total) < loss)
    for s in rng.permutation(plan.total):
        if not dropped[s]:
            r.add(int(s), int(plan.offsets[s]), int(plan.lengths[s] // isz), int(plan.lengths[s]))
    if not r.last_seen:  # the LAST packet was dropped: the sender's timeout probe resends it (here: it arrives)
        s = plan.total - 1
        r.add(s, int(plan.offsets[s]), int(plan.lengths[s] // isz), int(plan.lengths[s]))
        dropped[s] = False
    needed = r.needed()
    # needed = exactly the missing protected seqs (the LAST packet is in, so all were sent); the sender
    # retransmits them (here: successfully); no eligible seq is ever requested
    assert set(np.flatnonzero(~plan.eligible & dropped).tolist()) == set(needed.tolist())
    for s in needed:
        r.add(int(s), int(plan.offsets[s]), int(plan.lengths[s] // isz), int(plan.lengths[s]))
        dropped[s] = False
    assert r.satisfied() and r.needed().size == 0
    lost = r.lost_ranges(n, isz)
    expect = merge_ranges(plan.offsets[dropped] // isz, (plan.offsets[dropped] + plan.lengths[dropped]) // isz)
    assert lost == [tuple(x) for x in expect.tolist()]
    assert np.all(plan.eligible[dropped])
    assert sum(b - a for a, b in lost) <= p * n + 1e-9


def assert_same_state(a: Reassembly, b: Reassembly) -> None:
    """Two Reassembly objects recorded the same arrivals: every field and array agrees."""
    for f in ("cum", "pcum", "npackets", "nelems", "max_count", "last_seen", "max_end", "max_seq"):
        assert getattr(a, f) == getattr(b, f), f
    for f in ("arrived", "offsets", "counts"):
        assert np.array_equal(getattr(a, f), getattr(b, f)), f


@contextlib.contextmanager
def small_batch(k: int):
    """``reassembly.SMALL_BATCH`` set to ``k`` (0: add_many() writes arrays or slices for any batch)."""
    from host.transport import reassembly
    old = reassembly.SMALL_BATCH
    reassembly.SMALL_BATCH = k
    try:
        yield
    finally:
        reassembly.SMALL_BATCH = old


@settings(max_examples=60, deadline=None)
@given(total=st.integers(1, 300), data=st.data())
def test_add_many_is_the_same_as_adding_one_at_a_time(total, data):
    """The receive path records a few packets with add() and many with add_many() (index arrays for seqs out of
    order): both must leave the same state."""
    order = data.draw(st.permutations(range(total)))
    cut = data.draw(st.integers(0, total))
    e = data.draw(st.integers(0, total - 1))
    one, many = Reassembly(total, e), Reassembly(total, e)
    for s in order[:cut]:
        one.add(s, s * 40, 10, 40)
    sizes = data.draw(st.lists(st.integers(1, 40), min_size=1, max_size=20))
    i = 0
    with small_batch(data.draw(st.sampled_from([0, 16]))):
        for k in sizes:  # a prefix of order[:cut] in batches, the rest one at a time
            part = order[i:min(i + k, cut)]
            many.add_many(part, [s * 40 for s in part], [10] * len(part), [40] * len(part))
            i += len(part)
    for s in order[i:cut]:
        many.add(s, s * 40, 10, 40)
    assert_same_state(one, many)


@settings(max_examples=60, deadline=None)
@given(total=st.integers(1, 300), data=st.data())
def test_add_many_of_a_run_is_the_same_as_adding_one_at_a_time(total, data):
    """The receive path records a run of packets that arrived in seq order with add_many() (as slices): the same
    state as add() one at a time, whatever arrived before (the cumulative point may sit before, inside or after
    the run)."""
    before = data.draw(st.lists(st.integers(0, total - 1), unique=True, max_size=total))
    lo = data.draw(st.integers(0, total - 1))
    run = [s for s in range(lo, data.draw(st.integers(lo + 1, total))) if s not in set(before)]
    cut = next((i for i in range(1, len(run)) if run[i] != run[i - 1] + 1), len(run))
    run = run[:cut]  # consecutive and new
    e = data.draw(st.integers(0, total - 1))
    size = data.draw(st.sampled_from([(10, 40), (3, 6), (250, 1000)]))
    one, rng = Reassembly(total, e), Reassembly(total, e)
    for r in (one, rng):
        for s in before:
            r.add(s, s * size[1], size[0], size[1])
    for s in run:
        one.add(s, s * size[1], size[0], size[1])
    if run:
        with small_batch(0):
            rng.add_many(run, [s * size[1] for s in run], [size[0]] * len(run), [size[1]] * len(run))
    assert_same_state(one, rng)


@settings(max_examples=100, deadline=None)
@given(total=st.integers(1, 24), data=st.data())
def test_lost_ranges_of_small_transfers_equal_the_array_path(total, data):
    """Up to SMALL_TRANSFER packets the loss report is computed on Python lists: the same ranges as the arrays
    give, for any subset arrived, empty packets and a short last packet included."""
    from host.transport import reassembly
    chunk = data.draw(st.integers(1, 50))
    n = data.draw(st.integers(max(0, (total - 1) * chunk), total * chunk))
    got = data.draw(st.lists(st.booleans(), min_size=total, max_size=total))
    r = Reassembly(total)
    for s in range(total):
        if got[s]:
            r.add(s, s * chunk * 4, max(0, min(chunk, n - s * chunk)), 4 * chunk)
    small = r.lost_ranges(n, 4)
    old = reassembly.SMALL_TRANSFER
    reassembly.SMALL_TRANSFER = 0
    try:
        assert small == r.lost_ranges(n, 4)
    finally:
        reassembly.SMALL_TRANSFER = old


@settings(max_examples=100, deadline=None)
@given(total=st.integers(17, 60), data=st.data())
def test_the_loss_report_of_a_complete_transfer_equals_the_merge(total, data):
    """A complete transfer's report takes a shortcut when its packets tile the tensor in seq order; it must equal
    the general merge for that layout, for the eligible-first order the sender uses with a loss bound, and for
    packets that overlap or leave gaps (a sender that breaks the layout)."""
    chunk = data.draw(st.integers(1, 40))
    n = data.draw(st.integers((total - 1) * chunk + 1, total * chunk))
    counts = [max(0, min(chunk, n - i * chunk)) for i in range(total)]
    order = list(range(total))
    layout = data.draw(st.sampled_from(["tiled", "eligible-first", "broken"]))
    if layout == "eligible-first":
        elig = data.draw(st.lists(st.booleans(), min_size=total, max_size=total))
        order = sorted(order, key=lambda i: not elig[i])
    offsets = [i * chunk * 4 for i in order]
    if layout == "broken":
        k = data.draw(st.integers(1, total - 1))
        offsets[k] = data.draw(st.integers(0, n - 1)) * 4
    r = Reassembly(total)
    for seq, pos in enumerate(order):
        r.add(seq, offsets[seq], counts[pos], counts[pos] * 4)
    assert r.complete
    assert r.lost_ranges(n, 4) == r._lost_by_merge(n, 4)
    if layout != "broken":
        assert r.lost_ranges(n, 4) == []
