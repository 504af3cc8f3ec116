"""The pipelined ring of host.collectives: segmented transfers, receives posted ahead, forward-as-soon-as-reduced.

The network is a strict in-process link (threads) that behaves like the transport where it matters: a send's data
is read from the sender's buffer only when the receiver takes it (the handle completes then), so a region
overwritten before its send completed is caught; every (sender, receiver, transfer id) may be used once; receives
are delayed at random to shuffle interleavings. Small segment limits force many segments per chunk. The same
algorithms also run over real DLCP endpoints here, and against gloo in tests/host/test_backend.py.
"""

from __future__ import annotations

import queue
import random
import threading
import time

import pytest
import torch

from host.collectives import (Collectives, EndpointLink, RecvReport, ReduceOp, allreduce_by_doubling, chunk_bounds,
                              ring_plan, ring_segment_count)

from .memlink import DeferredRecv, assert_loss_only_where_reported, run_ranks, run_threads


class _Pending:
    def __init__(self, data: torch.Tensor):
        self.data, self.snapshot = data, data.clone()
        self.taken = threading.Event()

    def wait(self, timeout=None):
        if not self.taken.wait(timeout or 30):
            raise TimeoutError("send not received")
        return None

    def done(self) -> bool:
        return self.taken.is_set()


class StrictNet:
    def __init__(self, size: int, seed: int = 0, dead: frozenset[int] = frozenset()):
        self.size, self.dead = size, dead
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.boxes: dict[tuple[int, int, int], queue.Queue] = {}
        self.used: set[tuple[int, int, int]] = set()
        self.sends: list[tuple[int, int, int, int, float, int]] = []  # src, dst, tid, layer, bound, numel

    def box(self, key):
        with self.lock:
            return self.boxes.setdefault(key, queue.Queue())


class StrictLink:
    def __init__(self, net: StrictNet, rank: int):
        self.net, self.rank = net, rank

    def isend(self, peer, data, transfer_id, *, layer=0, loss_bound=0.0):
        assert data.is_contiguous() and data.dim() == 1 and data.numel() > 0
        key = (self.rank, peer, transfer_id)
        with self.net.lock:
            assert key not in self.net.used, f"transfer id {transfer_id:#x} reused from {self.rank} to {peer}"
            self.net.used.add(key)
            self.net.sends.append((self.rank, peer, transfer_id, layer, loss_bound, data.numel()))
        if self.rank in self.net.dead:
            raise ConnectionError(f"rank {self.rank} is dead")
        pend = _Pending(data)
        self.net.box(key).put(pend)
        return pend

    def irecv(self, peer, out, transfer_id, *, loss_bound=0.0, timeout=None):
        return DeferredRecv(lambda: self.recv(peer, out, transfer_id, loss_bound=loss_bound, timeout=timeout), out)

    def packet_elems(self, itemsize: int) -> int:
        return 64

    def recv(self, peer, out, transfer_id, *, loss_bound=0.0, timeout=None):
        with self.net.lock:
            delay = self.net.rng.random() * 0.002
        time.sleep(delay)
        try:
            pend = self.net.box((peer, self.rank, transfer_id)).get(timeout=timeout or 30)
        except queue.Empty:
            raise TimeoutError(f"rank {self.rank}: nothing from {peer} for transfer {transfer_id:#x}") from None
        assert pend.data.numel() == out.numel() and pend.data.dtype == out.dtype, (transfer_id, pend.data.shape,
                                                                                   out.shape)
        assert torch.equal(pend.data, pend.snapshot), \
            f"rank {peer} changed the buffer of transfer {transfer_id:#x} before its send completed"
        out.copy_(pend.data)
        pend.taken.set()
        return RecvReport()


def run_strict(size: int, fn, *, seed: int = 0, dead: frozenset[int] = frozenset()):
    """Run ``fn(rank, link)`` on ``size`` threads over one StrictNet: (results, {rank: error}, net)."""
    net = StrictNet(size, seed, dead)
    results, errors = run_threads(size, lambda r: fn(r, StrictLink(net, r)))
    return results, errors, net


def segmented(c: Collectives, *, seg_min: int = 64, per_chunk: int = 5, depth: int = 2) -> Collectives:
    """Force the ring (not recursive doubling) and many small segments (the production limits would give one
    segment for test-sized tensors)."""
    c.RING_SEGMENT_MIN, c.RING_SEGMENT_MAX, c.RING_SEGMENTS_PER_CHUNK, c.RING_DEPTH = seg_min, 1 << 30, per_chunk, depth
    c.SMALL_ALLREDUCE_BYTES, c.ALLREDUCE_LATENCY_S = 0, 0.0  # no latency: the cost model always picks the ring
    return c


def _inputs(size, n, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        return [torch.randn(n, generator=g).to(dtype) for _ in range(size)]
    return [torch.randint(-3, 4, (n,), generator=g).to(dtype) for _ in range(size)]


def _divided_first(xs: list[torch.Tensor], op: ReduceOp) -> tuple[list[torch.Tensor], ReduceOp]:
    """fp16 AVG is the SUM of the inputs each divided by the group size (host.collectives); others as given."""
    if op is ReduceOp.AVG and xs[0].dtype == torch.float16:
        return [x / len(xs) for x in xs], ReduceOp.SUM
    return xs, op


def documented_order(xs: list[torch.Tensor], op: ReduceOp) -> torch.Tensor:
    """The documented summation order, computed directly: chunk c is reduced along the ring starting at rank
    c+1, each hop computing ``received op local``; AVG divides the sum by the group size once (fp16: each input
    first)."""
    xs, op = _divided_first(xs, op)
    P = len(xs)
    bounds = chunk_bounds(xs[0].numel(), P)
    out = torch.empty_like(xs[0])
    for c in range(P):
        a, b = bounds[c], bounds[c + 1]
        acc = xs[(c + 1) % P][a:b].clone()
        for h in range(2, P + 1):
            local = xs[(c + h) % P][a:b].clone()
            if op in (ReduceOp.SUM, ReduceOp.AVG):
                acc = local.add_(acc)
            elif op is ReduceOp.PRODUCT:
                acc = local.mul_(acc)
            elif op is ReduceOp.MIN:
                acc = torch.minimum(local, acc)
            else:
                acc = torch.maximum(local, acc)
        if op is ReduceOp.AVG:
            acc.div_(P)
        out[a:b] = acc
    return out


def hypercube_order(xs: list[torch.Tensor], op: ReduceOp) -> torch.Tensor:
    """Halving-doubling's documented order, computed directly: chunk c is a tree over the hypercube, pairs at
    distance P/2 combined first, then P/4, .., 1; the result is the value at rank c; AVG divides once (fp16: each
    input first)."""
    xs, op = _divided_first(xs, op)
    P = len(xs)
    bounds = chunk_bounds(xs[0].numel(), P)
    out = torch.empty_like(xs[0])
    fn = {ReduceOp.SUM: torch.add, ReduceOp.AVG: torch.add, ReduceOp.PRODUCT: torch.mul, ReduceOp.MIN: torch.minimum,
          ReduceOp.MAX: torch.maximum}[op]
    for c in range(P):
        a, b = bounds[c], bounds[c + 1]
        vals = [x[a:b] for x in xs]
        d = P // 2
        while d:
            vals = [fn(vals[i], vals[i ^ d]) for i in range(P)]
            d //= 2
        out[a:b] = vals[c] / P if op is ReduceOp.AVG else vals[c]
    return out


# --- the pure parts ---------------------------------------------------------------------------------------------

def test_segment_count_rule() -> None:
    kw = dict(min_bytes=256 << 10, max_bytes=4 << 20, per_chunk=8)
    assert ring_segment_count(0, **kw) == 1
    assert ring_segment_count(100 << 10, **kw) == 1  # below the minimum segment: not cut
    assert ring_segment_count(1 << 20, **kw) == 4  # 256 KiB segments
    assert ring_segment_count(8 << 20, **kw) == 8  # 1 MiB segments
    assert ring_segment_count(128 << 20, **kw) == 32  # capped at 4 MiB
    assert ring_segment_count((8 << 20) + 1, **kw) == 8  # 1 MiB + 1 byte segments, the last one shorter
    # the production limits: a 64 MiB fp32 all-reduce on 4 ranks cuts its 16 MiB chunks in 4; 4 MiB on 2: not cut
    c = Collectives(None, [0, 1, 2, 3], 0)
    assert c.ring_plan(chunk_bounds(16 << 20, 4), 4, reduce=True, gather=True).segments == 4
    assert Collectives(None, [0, 1], 0).ring_plan(chunk_bounds(1 << 20, 2), 4, reduce=True, gather=True).segments == 1
    # 16 MiB on 4 ranks: 4 MiB chunks in two 2 MiB segments over a network; one transfer per chunk on one host,
    # up to 32 MiB chunks (a 512 MiB fp32 all-reduce on 4 ranks: 128 MiB chunks, four 32 MiB segments)
    assert c.ring_plan(chunk_bounds(4 << 20, 4), 4, reduce=True, gather=True).segments == 2
    local = Collectives(None, [0, 1, 2, 3], 0, local=True)
    assert local.ring_plan(chunk_bounds(4 << 20, 4), 4, reduce=True, gather=True).segments == 1
    assert local.ring_plan(chunk_bounds(16 << 20, 4), 4, reduce=True, gather=True).segments == 1
    assert local.ring_plan(chunk_bounds(32 << 20, 4), 4, reduce=True, gather=True).segments == 1
    assert local.ring_plan(chunk_bounds(128 << 20, 4), 4, reduce=True, gather=True).segments == 4


def test_a_group_is_local_only_when_every_member_has_a_loopback_address() -> None:
    from host.backend import _all_loopback
    lo = {0: ("127.0.0.1", 1), 1: ("127.0.0.2", 1), 2: ("10.0.0.3", 1), 3: ("::1", 1), 4: ("localhost", 1)}
    assert _all_loopback(lo, [0, 1]) and _all_loopback(lo, [0, 3])
    assert not _all_loopback(lo, [0, 2]) and not _all_loopback(lo, [0, 4])  # a host name is not known local


def test_allreduce_algorithm_cost_model() -> None:
    kw = dict(latency=0.003, link_bps=1e9, reduce_bytes_per_s=1.5e9)
    assert allreduce_by_doubling(1 << 20, 2, **kw) and not allreduce_by_doubling(8 << 20, 2, **kw)
    assert allreduce_by_doubling(2 << 20, 4, **kw) and not allreduce_by_doubling(3 << 20, 4, **kw)
    assert allreduce_by_doubling(128 << 10, 3, **kw) and not allreduce_by_doubling(512 << 10, 3, **kw)
    for size in range(2, 9):  # without a fixed cost per transfer the ring always wins (it moves fewer bytes)
        assert not allreduce_by_doubling(1 << 20, size, **{**kw, "latency": 0.0})
    # what Collectives does with it: an 8 MiB tensor takes the ring on 4 ranks, 1 MiB recursive doubling
    sends = {}
    for n in (1 << 18, 1 << 21):
        _, errors, net = run_strict(4, lambda r, link: Collectives(link, [0, 1, 2, 3], r).allreduce(torch.ones(n)))
        assert not errors, errors
        sends[n] = {s[1] for s in net.sends if s[0] == 0}  # rank 0's peers
    assert sends[1 << 18] == {1, 2} and sends[1 << 21] == {1}  # doubling partners; ring: the right neighbour


@pytest.mark.parametrize("size", [2, 3, 4, 5, 6])
@pytest.mark.parametrize("n", [5, 37, 1000])
def test_plans_match_across_the_link(size: int, n: int) -> None:
    """Message j that rank r sends is message j that rank r+1 receives, with the same element range; a step's
    received region is what the next step forwards; a guarded write waits for the send that read the region."""
    bounds = chunk_bounds(n, size)
    for reduce, gather in ((True, False), (False, True), (True, True)):
        plans = [ring_plan(r, size, bounds, 4, reduce=reduce, gather=gather) for r in range(size)]
        for r, pl in enumerate(plans):
            nxt = plans[(r + 1) % size]
            assert pl.messages == nxt.messages == (size - 1) * 4 * (reduce + gather)
            for g, (sc, _, red) in enumerate(pl.steps):
                assert nxt.steps[g][1] == sc and nxt.steps[g][2] == red
                for k in range(pl.segments):
                    assert pl.region(sc, k) == nxt.region(sc, k)
            for g, (_, rc, _) in enumerate(pl.steps):
                if pl.guard[g] is not None:
                    assert pl.steps[pl.guard[g]][0] == rc and pl.guard[g] < g
                else:
                    assert all(pl.steps[h][0] != rc for h in range(g))
            if reduce and gather:  # all-reduce: chunk r-1-t was sent at reduce step t, overwritten at gather step t
                assert pl.guard[size - 1:] == tuple(range(size - 1))


# --- the algorithms over the strict link --------------------------------------------------------------------------

CASES = [(op, dt) for op in (ReduceOp.SUM, ReduceOp.AVG, ReduceOp.MAX, ReduceOp.PRODUCT)
         for dt in (torch.float32, torch.float16, torch.bfloat16, torch.int32)
         if not (op is ReduceOp.AVG and not dt.is_floating_point)]


@pytest.mark.parametrize("size", [2, 3, 4, 5])
@pytest.mark.parametrize("op,dtype", CASES)
def test_allreduce_bits_follow_the_documented_order(size: int, op: ReduceOp, dtype: torch.dtype) -> None:
    n = 3001  # uneven chunks and segments
    xs = _inputs(size, n, dtype, seed=size * 10 + len(op.value))
    if op is ReduceOp.PRODUCT:
        xs = [x.clamp(-1.5, 1.5) for x in xs]

    def body(r, link):
        t = xs[r].clone()
        segmented(Collectives(link, list(range(size)), r)).allreduce(t, op)
        return t

    res, errors, net = run_strict(size, body, seed=size)
    assert not errors, errors
    want = documented_order(xs, op)
    assert len({s[2] for s in net.sends}) > 2 * (size - 1), "not segmented: the test would prove nothing"
    for t in res:
        assert torch.equal(t, want), "differs from the documented summation order"


@pytest.mark.parametrize("size", [2, 3, 4])
def test_pipelined_equals_step_by_step(size: int) -> None:
    """Segmenting and posting ahead change nothing in the bits (vs one segment per chunk, no receive threads)."""
    xs = _inputs(size, 20_000, torch.float32, seed=7)

    def body(r, link, **kw):
        t = xs[r].clone()
        segmented(Collectives(link, list(range(size)), r), **kw).allreduce(t, ReduceOp.SUM)
        return t

    piped, e1, n1 = run_strict(size, body)
    plain, e2, n2 = run_strict(size, lambda r, link: body(r, link, seg_min=1 << 30, depth=0))
    assert not e1 and not e2
    assert len(n1.sends) > len(n2.sends) == 2 * (size - 1) * size
    for a, b in zip(piped, plain):
        assert torch.equal(a, b)


@pytest.mark.parametrize("size,local", [(2, False), (3, False), (4, False), (4, True), (8, True)])
@pytest.mark.parametrize("op", [ReduceOp.SUM, ReduceOp.AVG, ReduceOp.MIN, ReduceOp.PRODUCT])
def test_inputs_read_in_place_without_a_working_copy(size: int, local: bool, op: ReduceOp) -> None:
    """reduce_scatter, all_gather and reduce read the caller's input where it lies (no working copy): the input
    is never written (the strict link also fails a send whose buffer changes before it is taken), the results are
    the documented order's bits, and the layouts that need care still work: one flat input whose chunks are the
    inputs, an output that is its own chunk of that input (reduce_scatter_tensor in place), a non-contiguous
    output, and all_gather from a separate input tensor. ``local``: a one-host group of 4 or 8, whose
    reduce-scatter halves and whose all-gather doubles (reduce keeps the ring)."""
    n = 997
    xs = [x.clamp(-1.5, 1.5) for x in _inputs(size, n, torch.float32, seed=41)]
    want = (hypercube_order if local else documented_order)(xs, op)
    bounds = chunk_bounds(n, size)

    def body(r, link):
        c = segmented(Collectives(link, list(range(size)), r, local=local), per_chunk=3)
        a, b = bounds[r], bounds[r + 1]
        flat = xs[r].clone()
        parts = [flat[bounds[i]:bounds[i + 1]] for i in range(size)]  # laid end to end: read in place
        out = torch.empty(b - a)
        c.reduce_scatter(out, parts, op)
        unchanged = torch.equal(flat, xs[r])
        strided = torch.empty(2 * (b - a))[::2]  # a non-contiguous output
        c.reduce_scatter(strided, parts, op)
        aliased = xs[r].clone()  # the output is the rank's own chunk of the input
        c.reduce_scatter(aliased[a:b], [aliased[bounds[i]:bounds[i + 1]] for i in range(size)], op)
        gathered = torch.empty(n)
        mine = out.clone()
        c.all_gather([gathered[bounds[i]:bounds[i + 1]] for i in range(size)], mine)  # from a separate tensor
        unchanged = unchanged and torch.equal(mine, out)
        t = xs[r].clone()
        c.reduce(t, 0, op if op is not ReduceOp.AVG else ReduceOp.SUM)
        return out, strided.clone(), aliased[a:b].clone(), gathered, t, unchanged

    res, errors, _ = run_strict(size, body, seed=5)
    assert not errors, errors
    red = documented_order(xs, op if op is not ReduceOp.AVG else ReduceOp.SUM)
    for r, (out, strided, aliased, gathered, t, unchanged) in enumerate(res):
        own = want[bounds[r]:bounds[r + 1]]
        assert torch.equal(out, own) and torch.equal(strided, own) and torch.equal(aliased, own)
        assert torch.equal(gathered, want)
        assert unchanged, f"rank {r}'s input was written"
        if r == 0:
            torch.testing.assert_close(t, red)
        else:
            assert torch.equal(t, xs[r]), f"reduce wrote non-root rank {r}'s tensor"


@pytest.mark.parametrize("size", [2, 3, 5])
def test_reduce_scatter_all_gather_and_reduce_segmented(size: int) -> None:
    sizes = [40 + 23 * i for i in range(size)]  # uneven shares
    xs = [[torch.randn(s, generator=torch.Generator().manual_seed(10 * r + i)) for i, s in enumerate(sizes)]
          for r in range(size)]
    full = [torch.randn(999, generator=torch.Generator().manual_seed(100 + r)) for r in range(size)]

    def body(r, link):
        c = segmented(Collectives(link, list(range(size)), r), per_chunk=4)
        out = torch.empty(sizes[r])
        c.reduce_scatter(out, xs[r], ReduceOp.SUM)
        gathered = [torch.empty(s) for s in sizes]
        c.all_gather(gathered, out)
        reds = []
        for root in range(size):
            t = full[r].clone()
            c.reduce(t, root, ReduceOp.SUM)
            reds.append(t)
        tiny = torch.full((2,), float(r + 1))  # fewer elements than ranks: empty chunks, no transfer for them
        c.reduce(tiny, 0, ReduceOp.MAX)
        return out, gathered, reds, tiny

    res, errors, _ = run_strict(size, body, seed=3)
    assert not errors, errors
    for r, (out, gathered, _, _) in enumerate(res):
        torch.testing.assert_close(out, sum(xs[q][r] for q in range(size)))
        for i in range(size):
            assert torch.equal(gathered[i], res[i][0])
    for root in range(size):
        torch.testing.assert_close(res[root][2][root], sum(full))
    assert torch.equal(res[0][3], torch.full((2,), float(size)))


def test_many_messages_per_call_take_several_sequence_numbers() -> None:
    """More than 256 messages in one call, then more calls: every transfer id stays unique per (sender,
    receiver) (the strict link asserts it) and every call gives the right result."""
    size, n = 3, 6000

    def body(r, link):
        c = segmented(Collectives(link, list(range(size)), r), seg_min=16, per_chunk=200)
        outs = []
        for i in range(4):
            t = torch.full((n,), float(r + i))
            c.allreduce(t)  # 2 * (P - 1) * 200 = 800 messages
            s = torch.full((7,), float(r))
            c.allreduce(s)  # recursive doubling
            c.broadcast(s, 1)
            outs.append((t, s))
        return outs

    res, errors, net = run_strict(size, body)
    assert not errors, errors
    assert max(s[2] & 0xFF for s in net.sends) == 255  # the step field was used up: several sequence numbers
    for outs in res:
        for i, (t, s) in enumerate(outs):
            assert torch.equal(t, torch.full((n,), float(sum(range(size)) + size * i)))
            assert torch.equal(s, torch.full((7,), float(sum(range(size)))))


def test_every_segment_carries_the_layer_and_the_budget_goes_to_reduce_steps_in_whole_packets() -> None:
    """Data segments carry the layer; only reduce-scatter steps may lose (the all-gather steps that copy results
    are exact); the allowances are whole packets (64 elements on this link) and sum to at most floor(p * n); the
    loss reports exchanged at the end are int64 and exact."""
    size, p, n = 4, 0.06, 8000

    def body(r, link):
        t = torch.randn(n)
        segmented(Collectives(link, list(range(size)), r)).allreduce(t, layer=9, loss_bound=p)
        return t

    _, errors, net = run_strict(size, body)
    assert not errors, errors
    data = [s for s in net.sends if s[3] == 9]
    reports = [s for s in net.sends if s[3] != 9]
    assert len(data) > 2 * (size - 1) * size and reports and all(s[4] == 0 for s in reports)
    lossy = [s for s in data if s[4] > 0]
    allowances = [round(s[4] * s[5]) for s in lossy]
    assert lossy and all(a % 64 == 0 and a > 0 for a in allowances)
    assert sum(allowances) <= int(p * n) and sum(allowances) > int(p * n) - 64 * len(data)
    # the last (size - 1) ring steps of every rank are the all-gather: their bounds are all 0
    per_rank = {r: [s for s in data if s[0] == r] for r in range(size)}
    for r, sends in per_rank.items():
        half = len(sends) // 2
        assert all(s[4] == 0 for s in sends[half:]), r


@pytest.mark.parametrize("size", [2, 3, 4])
def test_bounded_loss_only_at_reported_elements_segmented(size: int) -> None:
    n, p = 50_000, 0.05
    xs = [torch.rand(n, generator=torch.Generator().manual_seed(r)) + 1 for r in range(size)]

    def body(r, link):
        t = xs[r].clone()
        c = segmented(Collectives(link, list(range(size)), r), seg_min=4096, per_chunk=6)
        return t, c.allreduce(t, ReduceOp.SUM, loss_bound=p).merged()

    res = run_ranks(size, body, loss=True, seed=size)
    assert_loss_only_where_reported(res, sum(xs), p)


def test_avg_on_integers_is_refused_before_any_transfer() -> None:
    def body(r, link):
        segmented(Collectives(link, [0, 1], r)).allreduce(torch.ones(5000, dtype=torch.int32), ReduceOp.AVG)

    _, errors, net = run_strict(2, body)
    assert set(errors) == {0, 1} and all(isinstance(e, TypeError) for e in errors.values())
    assert net.sends == []


def test_a_dead_peer_fails_the_ring_within_the_timeout_and_leaves_no_thread() -> None:
    size = 3

    def body(r, link):
        c = segmented(Collectives(link, list(range(size)), r, timeout=1.0))
        c.allreduce(torch.randn(6000))

    t0 = time.monotonic()
    _, errors, _ = run_strict(size, body, dead=frozenset({1}))
    assert time.monotonic() - t0 < 10
    assert set(errors) == {0, 1, 2}  # 1 died; 2 never hears from it; 0 never hears from 2
    assert isinstance(errors[1], ConnectionError)
    assert all(isinstance(errors[r], TimeoutError) for r in (0, 2))
    time.sleep(0.1)
    assert not [t for t in threading.enumerate() if t.name.startswith("dlcp-ring-post")]


# --- halving-doubling (one host, power-of-two groups) ------------------------------------------------------------

def halving_doubling(c: Collectives) -> Collectives:
    """Force halving-doubling: a one-host group, doubling never chosen (no latency), any size up to the limit."""
    c.local = True
    c.SMALL_ALLREDUCE_BYTES, c.ALLREDUCE_LATENCY_S = 0, 0.0
    return c


@pytest.mark.parametrize("size", [4, 8])
@pytest.mark.parametrize("op,dtype", CASES)
def test_halving_doubling_bits_follow_the_documented_order(size: int, op: ReduceOp, dtype: torch.dtype) -> None:
    """Every rank ends with the bits of the hypercube order, in 2 log2(P) transfers per rank, each transfer id
    used once and no buffer changed before its send completed (the strict link checks both)."""
    n = 3001  # uneven chunks
    xs = _inputs(size, n, dtype, seed=size * 10 + len(op.value))
    if op is ReduceOp.PRODUCT:
        xs = [x.clamp(-1.5, 1.5) for x in xs]

    def body(r, link):
        t = xs[r].clone()
        halving_doubling(Collectives(link, list(range(size)), r)).allreduce(t, op, layer=5, loss_bound=0.0)
        return t

    res, errors, net = run_strict(size, body, seed=size)
    assert not errors, errors
    assert len(net.sends) == size * 2 * (size.bit_length() - 1)
    assert {(s[3], s[4]) for s in net.sends} == {(5, 0.0)}
    want = hypercube_order(xs, op)
    if op is ReduceOp.SUM and dtype.is_floating_point:
        assert not torch.equal(want, documented_order(xs, op)), "the ring's order gives the same bits: no evidence"
    for t in res:
        assert torch.equal(t, want), "differs from the documented hypercube order"


@pytest.mark.parametrize("size,local,nbytes,expect", [
    (4, True, 1 << 20, ("halving+doubling", "halving", "doubling")),
    (8, True, 64 << 20, ("halving+doubling", "halving", "doubling")),
    (4, True, (64 << 20) + 32, ("ring", "ring", "doubling")),  # above HALVING_MAX_LOCAL: all-gather still doubles
    (4, False, 1 << 20, ("ring", "ring", "ring")), (3, True, 1 << 20, ("ring", "ring", "ring")),
    (6, True, 1 << 20, ("ring", "ring", "ring")), (2, True, 1 << 20, ("ring", "ring", "ring"))])
def test_hypercube_only_for_one_host_power_of_two_groups(size, local, nbytes, expect) -> None:
    """Which algorithm all-reduce (beyond doubling's range), reduce-scatter and all-gather run: halving and
    doubling need one host and a power of two of at least 4 (at 2 they are the ring), halving at most
    HALVING_MAX_LOCAL bytes of input; HYPERCUBE_LOCAL off gives the ring everywhere."""
    def run(c):
        calls = []
        c._halving_reduce_scatter = lambda buf, bounds, *a: (calls.append("halving"), buf[bounds[0]:bounds[1]])[1]
        c._doubling_all_gather = lambda *a: calls.append("doubling")
        c._run_ring = lambda *a, **k: calls.append("ring")
        c.SMALL_ALLREDUCE_BYTES, c.ALLREDUCE_LATENCY_S = 0, 0.0
        n = nbytes // 4
        c.allreduce(torch.empty(n))
        ar = "+".join(calls)
        calls.clear()
        c.reduce_scatter(torch.empty(n // size), list(torch.empty(n // size * size).chunk(size)), ReduceOp.SUM)
        rs = "+".join(calls)
        calls.clear()
        c.all_gather(list(torch.empty(n // size * size).chunk(size)), torch.empty(n // size))
        return ar, rs, "+".join(calls)

    assert run(Collectives(None, list(range(size)), 0, local=local)) == expect
    off = Collectives(None, list(range(size)), 0, local=local)
    off.HYPERCUBE_LOCAL = False
    assert run(off) == ("ring", "ring", "ring")


@pytest.mark.parametrize("size", [4, 8])
def test_bounded_loss_only_at_reported_elements_halving_doubling(size: int) -> None:
    n, p = 50_000, 0.05
    xs = [torch.rand(n, generator=torch.Generator().manual_seed(r)) + 1 for r in range(size)]

    def body(r, link):
        t = xs[r].clone()
        return t, halving_doubling(Collectives(link, list(range(size)), r)).allreduce(t, loss_bound=p).merged()

    res = run_ranks(size, body, loss=True, seed=size)
    assert_loss_only_where_reported(res, sum(xs), p)


@pytest.mark.parametrize("size", [4, 8])
def test_bounded_loss_only_at_reported_elements_halving_and_doubling_alone(size: int) -> None:
    """Reduce-scatter by halving under loss: each rank's chunk differs from the exact one only inside the union of
    the ranks' reported ranges (in the coordinates of the concatenated inputs), which every rank reports alike and
    which stays within the bound. All-gather by doubling on the same lossy link is exact."""
    n, p = 40_000, 0.05
    bounds = chunk_bounds(n, size)
    xs = [torch.rand(n, generator=torch.Generator().manual_seed(r)) + 1 for r in range(size)]
    exact = sum(xs)

    def rs(r, link):
        c = Collectives(link, list(range(size)), r, local=True)
        out = torch.empty(bounds[r + 1] - bounds[r])
        lost = c.reduce_scatter(out, [xs[r][bounds[i]:bounds[i + 1]] for i in range(size)], ReduceOp.SUM,
                                loss_bound=p).merged()
        whole = exact.clone()
        whole[bounds[r]:bounds[r + 1]] = out  # the other chunks are not this rank's result
        return whole, lost

    def ag(r, link):
        c = Collectives(link, list(range(size)), r, local=True)
        gathered = torch.empty(n)
        lost = c.all_gather([gathered[bounds[i]:bounds[i + 1]] for i in range(size)],
                            exact[bounds[r]:bounds[r + 1]].clone()).merged()
        return gathered, lost

    res = run_ranks(size, rs, loss=True, seed=size)
    assert_loss_only_where_reported(res, exact, p)
    assert all(lost == res[0][1] for _, lost in res)  # every rank reports the same union
    # an all-gather copies results: exact on a lossy link (it never asks for loss), every rank the same bits
    for gathered, lost in run_ranks(size, ag, loss=True, seed=size + 1):
        assert lost == [] and torch.equal(gathered, exact)


# --- over the real transport ----------------------------------------------------------------------------------------

def test_pipelined_allreduce_over_dlcp_endpoints(make_endpoints) -> None:
    """Three real endpoints on loopback, segments of 64 KiB: bits identical on every rank and in the documented
    order; a reduce-scatter and an all-gather follow on the same endpoints."""
    size, n = 3, 300_000
    eps = make_endpoints(size)
    xs = _inputs(size, n, torch.float32, seed=11)

    def body(r):
        c = Collectives(EndpointLink(eps[r]), list(range(size)), r, timeout=30)
        c.RING_SEGMENT_MIN, c.RING_SEGMENTS_PER_CHUNK = 64 << 10, 8
        t = xs[r].clone()
        c.allreduce(t)
        m = n // size
        out = torch.empty(m)
        c.reduce_scatter(out, list(xs[r][: m * size].chunk(size)), ReduceOp.SUM)
        full = [torch.empty(m) for _ in range(size)]
        c.all_gather(full, out)
        return t, out, torch.cat(full)

    results, errors = run_threads(size, body)
    assert not errors, errors
    assert eps[0].stats()["transfers_received"] > 4 * (size - 1)  # segmented
    want = documented_order(xs, ReduceOp.SUM)
    m = (n // size) * size
    for t, _, gathered in results:
        assert torch.equal(t, want)
        assert torch.equal(gathered, results[0][2])
        torch.testing.assert_close(gathered, sum(x[:m] for x in xs))


def test_a_failed_ring_over_dlcp_endpoints_leaves_no_receive_posted(make_endpoints) -> None:
    """Rank 1 never joins: ranks 0 and 2 fail within the timeout, their poster threads are gone, and none of the
    receives the threads had posted ahead is still writing into the caller's buffers."""
    size, n = 3, 120_000
    eps = make_endpoints(size)

    def body(r):
        if r == 1:
            return None
        c = Collectives(EndpointLink(eps[r]), list(range(size)), r, timeout=1.0)
        c.RING_SEGMENT_MIN, c.RING_SEGMENTS_PER_CHUNK = 16 << 10, 6
        c.allreduce(torch.randn(n))

    t0 = time.monotonic()
    _, errors = run_threads(size, body)
    assert time.monotonic() - t0 < 10
    assert set(errors) == {0, 2}
    assert all("timed out" in str(e) for e in errors.values()), errors
    time.sleep(0.1)
    assert not [t for t in threading.enumerate() if t.name.startswith("dlcp-ring-post")]
    for r in (0, 2):
        posted = [key for key, inc in eps[r]._receiver.incoming.items() if inc.posted]
        assert posted == [], f"rank {r}: receives {posted} still posted after the call failed"


@pytest.mark.parametrize("contiguous", [True, False])
def test_all_gather_into_slices_of_one_tensor_gathers_in_place(contiguous: bool) -> None:
    """Outputs that are consecutive slices of one tensor (all_gather_into_tensor) are filled in place; any other
    outputs (here: every other row of a matrix) get the same result by copying."""
    size, m = 3, 2000

    def body(r, link):
        c = segmented(Collectives(link, list(range(size)), r))
        if contiguous:
            whole = torch.full((size * m,), -1.0)
            outs = list(whole.split(m))
        else:
            whole = torch.full((2 * size, m), -1.0)
            outs = [whole[2 * i] for i in range(size)]
        c.all_gather(outs, torch.full((m,), float(r)))
        return whole

    res, errors, _ = run_strict(size, body)
    assert not errors, errors
    for whole in res:
        if contiguous:
            assert torch.equal(whole, torch.arange(size).float().repeat_interleave(m))
        else:
            assert torch.equal(whole[0::2], torch.arange(size).float()[:, None].expand(size, m))
            assert (whole[1::2] == -1).all()


# --- through the backend, against gloo ------------------------------------------------------------------------------

def _ring_vs_gloo() -> None:
    """Scenario (one process per rank): dlcp's pipelined ring all-reduce / reduce-scatter / all-gather against gloo
    in the same processes, with segments small enough to cut every chunk; prints one line per check."""
    import torch.distributed as dist

    from host.backend import transport_stats

    torch.set_num_threads(1)
    # the processes share one host: the group is local, so its ring cuts chunks by the _LOCAL limit; the
    # hypercube algorithms are off until their own check at the end
    Collectives.RING_SEGMENT_MIN_LOCAL, Collectives.RING_SEGMENTS_PER_CHUNK = 256 << 10, 4
    Collectives.HYPERCUBE_LOCAL = False
    dist.init_process_group("dlcp")
    gloo = dist.new_group(backend="gloo")
    r, P = dist.get_rank(), dist.get_world_size()
    g = torch.Generator().manual_seed(r)
    n = 1_500_001  # 6 MB of fp32: beyond doubling (cost model), uneven chunks, each cut into 4 segments
    for dtype, op in ((torch.float32, dist.ReduceOp.SUM), (torch.float32, dist.ReduceOp.AVG),
                      (torch.bfloat16, dist.ReduceOp.SUM)):
        x = torch.randn(n, generator=g).to(dtype)
        mine, ref = x.clone(), x.clone()
        before = transport_stats()["transfers_sent"]
        dist.all_reduce(mine, op=op)
        assert transport_stats()["transfers_sent"] - before > 2 * (P - 1), "the ring did not cut its chunks"
        dist.all_reduce(ref, op=op, group=gloo)
        tol = 1e-5 if dtype == torch.float32 else 5e-2
        torch.testing.assert_close(mine.float(), ref.float(), rtol=tol, atol=tol * P)
        everyone = torch.empty(P * n, dtype=dtype)
        dist.all_gather_into_tensor(everyone, mine, group=gloo)
        assert all(torch.equal(everyone[q * n:(q + 1) * n], mine) for q in range(P)), "ranks differ"
        print(f"all_reduce {dtype} {op} ok", flush=True)
    m = 700_001
    x = torch.randn(P * m, generator=g)
    out, ref = torch.empty(m), torch.empty(m)
    dist.reduce_scatter_tensor(out, x, group=None)
    dist.reduce_scatter_tensor(ref, x, group=gloo)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5 * P)
    full, full_ref = torch.empty(P * m), torch.empty(P * m)
    dist.all_gather_into_tensor(full, out)
    dist.all_gather_into_tensor(full_ref, out, group=gloo)
    assert torch.equal(full, full_ref)
    print("reduce_scatter all_gather ok", flush=True)
    if P in (4, 8):  # halving and doubling, each counted by its transfers
        Collectives.HYPERCUBE_LOCAL = True
        log2 = P.bit_length() - 1

        def counted(fn, transfers):
            before = transport_stats()["transfers_sent"]
            fn()
            assert transport_stats()["transfers_sent"] - before == transfers, "not the hypercube algorithm"

        x = torch.randn(n, generator=g)
        mine, ref = x.clone(), x.clone()
        counted(lambda: dist.all_reduce(mine), 2 * log2)
        dist.all_reduce(ref, group=gloo)
        torch.testing.assert_close(mine, ref, rtol=1e-5, atol=1e-5 * P)
        everyone = torch.empty(P * n)
        dist.all_gather_into_tensor(everyone, mine, group=gloo)
        assert all(torch.equal(everyone[q * n:(q + 1) * n], mine) for q in range(P)), "ranks differ"
        x = torch.randn(P * m, generator=g)
        out, ref = torch.empty(m), torch.empty(m)
        counted(lambda: dist.reduce_scatter_tensor(out, x), log2)
        dist.reduce_scatter_tensor(ref, x, group=gloo)
        torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5 * P)
        counted(lambda: dist.all_gather_into_tensor(full, out), log2)
        dist.all_gather_into_tensor(full_ref, out, group=gloo)
        assert torch.equal(full, full_ref)
        print("hypercube ok", flush=True)
    dist.barrier(group=gloo)
    dist.destroy_process_group()


@pytest.mark.slow
@pytest.mark.parametrize("size", [3, 4])
def test_pipelined_ring_through_the_backend_matches_gloo(size: int) -> None:
    from .dist_run import check, launch

    outs = check(launch("tests.host.test_collectives_pipeline", "ring-vs-gloo", size, timeout=240))
    for out in outs:
        assert out.count(" ok") == (5 if size == 4 else 4), out


if __name__ == "__main__":
    import sys

    {"ring-vs-gloo": _ring_vs_gloo}[sys.argv[1]]()
