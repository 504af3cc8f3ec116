"""Collective algorithms (host.collectives) against a direct computation, for every group size 1..6.

The network here is tests/host/memlink.py (threads); the algorithms are the production code. Over the real
transport and against gloo: tests/host/test_backend.py.
"""

from __future__ import annotations

import pytest
import torch

from host.collectives import Collectives, ReduceOp, chunk_bounds, ring_reduce_scatter_schedule

from .memlink import assert_loss_only_where_reported, run_ranks

SIZES = [1, 2, 3, 4, 5, 6]
DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int64, torch.float64]


def _inputs(size: int, n: int, dtype: torch.dtype, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        return [torch.randn(n, generator=g).to(dtype) for _ in range(size)]
    return [torch.randint(-5, 6, (n,), generator=g).to(dtype) for _ in range(size)]


def _reference(xs: list[torch.Tensor], op: ReduceOp) -> torch.Tensor:
    acc = xs[0].double().clone()
    for x in xs[1:]:
        x = x.double()
        acc = {ReduceOp.SUM: acc + x, ReduceOp.AVG: acc + x, ReduceOp.PRODUCT: acc * x,
               ReduceOp.MIN: torch.minimum(acc, x), ReduceOp.MAX: torch.maximum(acc, x)}[op]
    return acc / len(xs) if op is ReduceOp.AVG else acc


def _tol(dtype):
    return {torch.float16: 5e-2, torch.bfloat16: 2e-1}.get(dtype, 1e-5)


def test_chunk_bounds_and_schedule() -> None:
    assert chunk_bounds(10, 3) == [0, 4, 7, 10]
    assert chunk_bounds(2, 4) == [0, 1, 2, 2, 2]
    for P in range(2, 7):
        for r in range(P):
            sched = ring_reduce_scatter_schedule(r, P)
            assert sched[-1][1] == r  # the last chunk received is the rank's own
            # what r sends at step s is what r+1 receives at step s
            nxt = ring_reduce_scatter_schedule((r + 1) % P, P)
            assert all(sched[s][0] == nxt[s][1] for s in range(P - 1))


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("n", [1, 7, 1000, 40_000])  # recursive doubling and ring paths
@pytest.mark.parametrize("op", list(ReduceOp))
def test_allreduce_exact_and_identical(size: int, n: int, op: ReduceOp) -> None:
    dtype = torch.float32
    xs = _inputs(size, n, dtype, seed=size * 100 + n)
    if op is ReduceOp.PRODUCT:
        xs = [x.clamp(-2, 2) for x in xs]
    out = run_ranks(size, lambda r, link: _allreduce(r, link, size, xs[r].clone(), op))
    ref = _reference(xs, op)
    for t in out:
        torch.testing.assert_close(t.double(), ref, rtol=1e-4, atol=1e-4)
        assert torch.equal(t, out[0]), "ranks disagree bit for bit"


def _allreduce(r, link, size, t, op):
    Collectives(link, list(range(size)), r).allreduce(t, op)
    return t


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("size", [3, 4])
def test_allreduce_dtypes(dtype: torch.dtype, size: int) -> None:
    for n in (5, 50_000):
        xs = _inputs(size, n, dtype, seed=n)
        out = run_ranks(size, lambda r, link: _allreduce(r, link, size, xs[r].clone(), ReduceOp.SUM))
        ref = _reference(xs, ReduceOp.SUM)
        for t in out:
            assert t.dtype == dtype
            torch.testing.assert_close(t.double(), ref, rtol=_tol(dtype), atol=_tol(dtype) * size)
            assert torch.equal(t, out[0])


def test_avg_on_integers_is_refused() -> None:
    with pytest.raises(TypeError, match="AVG needs a floating-point"):
        run_ranks(2, lambda r, link: _allreduce(r, link, 2, torch.ones(4, dtype=torch.int32), ReduceOp.AVG))


@pytest.mark.parametrize("size", SIZES)
def test_reduce_scatter_and_all_gather_uneven(size: int) -> None:
    sizes = [3 + 2 * i for i in range(size)]
    xs = [[torch.randn(s, generator=torch.Generator().manual_seed(10 * r + i)) for i, s in enumerate(sizes)]
          for r in range(size)]

    def body(r, link):
        c = Collectives(link, list(range(size)), r)
        out = torch.empty(sizes[r])
        c.reduce_scatter(out, xs[r], ReduceOp.SUM)
        gathered = [torch.empty(s) for s in sizes]
        c.all_gather(gathered, out)
        return out, gathered

    res = run_ranks(size, body)
    for r, (out, gathered) in enumerate(res):
        ref = sum(xs[q][r] for q in range(size))
        torch.testing.assert_close(out, ref)
        for i in range(size):
            assert torch.equal(gathered[i], res[i][0])


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("n", [10, 300_000])  # tree and pipelined chain
def test_broadcast_reduce_from_every_root(size: int, n: int) -> None:
    xs = _inputs(size, n, torch.float32, seed=n)
    for root in range(size):
        def body(r, link):
            c = Collectives(link, list(range(size)), r)
            b = xs[r].clone()
            c.broadcast(b, root)
            red = xs[r].clone()
            c.reduce(red, root, ReduceOp.MAX)
            return b, red
        res = run_ranks(size, body)
        for b, _ in res:
            assert torch.equal(b, xs[root])
        torch.testing.assert_close(res[root][1], _reference(xs, ReduceOp.MAX).float())


@pytest.mark.parametrize("size", [1, 2, 3, 5])
def test_gather_scatter_all_to_all(size: int) -> None:
    def body(r, link):
        c = Collectives(link, list(range(size)), r)
        mine = torch.full((r + 1, 2), float(r))
        outs = [torch.empty(i + 1, 2) for i in range(size)] if r == 0 else None
        c.gather(outs, mine, 0)
        sc_out = torch.empty(3)
        c.scatter(sc_out, [torch.full((3,), 10.0 + i) for i in range(size)] if r == size - 1 else None, size - 1)
        a2a_in = [torch.full((i + 1,), 100.0 * r + i) for i in range(size)]
        a2a_out = [torch.empty(r + 1) for _ in range(size)]
        c.all_to_all(a2a_out, a2a_in)
        c.barrier()
        return outs, sc_out, a2a_out

    res = run_ranks(size, body)
    for i, g in enumerate(res[0][0]):
        assert torch.equal(g, torch.full((i + 1, 2), float(i)))
    for r, (_, sc, a2a) in enumerate(res):
        assert torch.equal(sc, torch.full((3,), 10.0 + r))
        for j in range(size):
            assert torch.equal(a2a[j], torch.full((r + 1,), 100.0 * j + r))


def test_point_to_point_in_order_per_tag() -> None:
    def body(r, link):
        c = Collectives(link, [0, 1], r)
        if r == 0:
            for k in range(3):
                c.send(torch.full((4,), float(k)), 1, tag=7)
            c.send(torch.full((2,), -1.0), 1, tag=8)
            return None
        t8 = torch.empty(2)
        c.recv(t8, 0, tag=8)  # tags are matched independently of order across tags
        got = []
        for _ in range(3):
            t = torch.empty(4)
            c.recv(t, 0, tag=7)
            got.append(t[0].item())
        return got, t8

    res = run_ranks(2, body)
    assert res[1][0] == [0.0, 1.0, 2.0] and torch.equal(res[1][1], torch.full((2,), -1.0))


def test_subgroup_ranks_and_transfer_ids_are_disjoint() -> None:
    """Two groups over the same links never confuse transfers (group tag in the transfer id)."""
    def body(r, link):
        world = Collectives(link, [0, 1, 2, 3], r, group_tag=0)
        sub = Collectives(link, [1, 3], r, group_tag=1) if r in (1, 3) else None
        t = torch.full((5,), float(r))
        world.allreduce(t)
        s = torch.full((5,), float(r))
        if sub:
            sub.allreduce(s)
        return t, s

    res = run_ranks(4, body)
    for t, _ in res:
        assert torch.equal(t, torch.full((5,), 6.0))
    assert torch.equal(res[1][1], torch.full((5,), 4.0)) and torch.equal(res[3][1], torch.full((5,), 4.0))


@pytest.mark.parametrize("size", [2, 3, 4])
def test_bounded_loss_only_at_reported_elements(size: int) -> None:
    """With losses, the result differs from the exact one only inside the union of the ranks' reported ranges,
    and that union covers at most the loss bound of the tensor."""
    n, p = 50_000, 0.05
    xs = [torch.rand(n, generator=torch.Generator().manual_seed(r)) + 1 for r in range(size)]

    def body(r, link):
        t = xs[r].clone()
        o = Collectives(link, list(range(size)), r).allreduce(t, ReduceOp.SUM, loss_bound=p)
        return t, o.merged()

    res = run_ranks(size, body, loss=True, seed=size)
    assert_loss_only_where_reported(res, sum(xs), p)


def test_scratch_buffers_are_reused_and_never_leak_into_results() -> None:
    """Reduce-scatter's working copy and the ring's receive slots come from per-thread buffers that outlive the
    call (fresh pages cost a first-touch fault each): a second call of the same or a smaller size reuses them,
    results and inputs are as if fresh buffers were used, and another dtype or a larger size still works."""
    size = 3
    sizes = [200_000, 150_000, 250_000]

    def body(r, link):
        c = Collectives(link, list(range(size)), r)
        c.RING_SEGMENT_MIN = 64 << 10  # several segments per chunk, so the ring uses its receive slots
        seen, outs = [], []
        for rnd, (dtype, scale) in enumerate([(torch.float32, 1), (torch.float32, 1), (torch.float64, 1),
                                               (torch.float32, 2)]):
            xs = [torch.full((s * scale,), float(10 * r + i + rnd), dtype=dtype) for i, s in enumerate(sizes)]
            before = [x.clone() for x in xs]
            out = torch.empty(sizes[r] * scale, dtype=dtype)
            c.reduce_scatter(out, xs, ReduceOp.SUM)
            assert all(torch.equal(x, b) for x, b in zip(xs, before))  # the inputs are untouched
            outs.append(out)
            seen.append({k: v.data_ptr() for k, v in c._tls.bufs.items()})
        return outs, seen

    res = run_ranks(size, body)
    for r, (outs, seen) in enumerate(res):
        for rnd, out in enumerate(outs):
            expect = sum(10 * q + r + rnd for q in range(size))
            assert torch.equal(out, torch.full_like(out, float(expect)))
        assert {"work", "slot0"} <= seen[0].keys()
        assert seen[1] == seen[0]  # the same size again: no new buffer
        assert seen[3]["work"] == seen[2]["work"]  # twice the float32 elements = the float64 bytes: reused


@pytest.mark.parametrize("size", [3, 4])
def test_recursive_doubling_receives_into_a_reused_buffer(size: int) -> None:
    """Recursive doubling receives each partner's tensor into the per-thread scratch buffer, not a fresh tensor
    per call (on this VM fresh pages made receiving 1 MiB cost ~600 us more of the I/O thread's time): the same
    buffer serves a second call, and what an earlier, larger call left there never reaches a result."""
    def body(r, link):
        c = Collectives(link, list(range(size)), r)
        outs, ptrs = [], []
        for n, dtype, base in ((5000, torch.float32, 1.0), (5000, torch.float32, 2.0), (1200, torch.float64, 3.0),
                               (7, torch.int32, 4)):
            t = torch.full((n,), base * (r + 1), dtype=dtype)
            c.allreduce(t, ReduceOp.SUM)
            outs.append(t)
            ptrs.append(c._tls.bufs["doubling"].data_ptr())
        return outs, ptrs

    total = sum(range(1, size + 1))
    for outs, ptrs in run_ranks(size, body):
        for t, base in zip(outs, (1.0, 2.0, 3.0, 4)):
            assert torch.equal(t, torch.full_like(t, base * total))
        assert len(set(ptrs)) == 1
