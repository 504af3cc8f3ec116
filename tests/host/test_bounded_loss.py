"""Bounded loss end to end: identical replicas, loss only where asked for, exact completion, a budget that works at
every group size, and accounting (docs/bounded-loss.md).

The collective algorithms run over the lossy in-memory link (whole packets dropped at random, as a switch drops
eligible packets) and over the real transport with its socket dropping every eligible packet; the backend and the
DDP hook run in real processes.
"""

from __future__ import annotations

import json
import time

import pytest
import torch
from hypothesis import given, settings, strategies as st

from host.collectives import Collectives, LossStats, Outcome, ReduceOp, check_loss, loss_allowances
from host.transport.chunking import chunk_elems
from host.transport.api import Options
from host.transport.faults import LossySocket
from host.wire import Flag

from .dist_run import check, launch
from .memlink import MemNetwork, run_threads

# --- the budget alone ------------------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(sizes=st.lists(st.integers(0, 5000), min_size=1, max_size=60), budget=st.integers(0, 20000),
       pkt=st.integers(1, 600), start=st.integers(0, 1000))
def test_allowances_are_whole_packets_within_the_budget(sizes, budget, pkt, start):
    got = loss_allowances(sizes, budget, pkt, start)
    assert len(got) == len(sizes) and sum(got) <= budget
    for a, n in zip(got, sizes):
        assert a % pkt == 0 and (a == 0 or a + pkt <= n)  # every transfer keeps a protected packet
    # nothing left unspent that some transfer could still have taken
    if budget - sum(got) >= pkt:
        assert all(a + 2 * pkt > n for a, n in zip(got, sizes))


def test_allowances_rotate_with_the_start():
    assert loss_allowances([1000] * 4, 100, 100, start=0) == [100, 0, 0, 0]
    assert loss_allowances([1000] * 4, 100, 100, start=6) == [0, 0, 100, 0]
    assert loss_allowances([1000] * 4, 500, 100, start=3) == [100, 100, 100, 200]


def test_loss_is_refused_where_zero_is_not_the_identity():
    f, i = torch.zeros(4), torch.zeros(4, dtype=torch.int64)
    check_loss(ReduceOp.SUM, f, 0.01)
    check_loss(ReduceOp.AVG, f, 0.01)
    for op in (ReduceOp.MIN, ReduceOp.MAX, ReduceOp.PRODUCT):
        check_loss(op, f, 0.0)
        with pytest.raises(ValueError, match=f"only to SUM/AVG.*{op.name}"):
            check_loss(op, f, 0.01)
    with pytest.raises(ValueError, match="int64"):
        check_loss(ReduceOp.SUM, i, 0.01)


# --- collectives over the lossy in-memory link ------------------------------------------------------------------

def _run(size: int, n: int, p: float, *, local: bool, loss: bool, op=ReduceOp.SUM, seed: int = 0,
         packet: int = 64, reduce_scatter: bool = False):
    """Every rank's (result, reported union) of one all-reduce (or reduce-scatter, as the whole flat buffer with
    this rank's chunk filled in) of ``rand + 1`` inputs."""
    xs = [torch.rand(n, generator=torch.Generator().manual_seed(seed * 100 + r)) + 1 for r in range(size)]
    net = MemNetwork(size, loss=loss, seed=seed, packet=packet)

    def body(r):
        c = Collectives(net.link(r), list(range(size)), r, local=local)
        if reduce_scatter:
            from host.collectives import chunk_bounds
            b = chunk_bounds(n, size)
            out = torch.zeros(b[r + 1] - b[r])
            o = c.reduce_scatter(out, [xs[r][b[i]:b[i + 1]] for i in range(size)], op, loss_bound=p)
            return out, o
        t = xs[r].clone()
        return t, c.allreduce(t, op, loss_bound=p)

    res, errors = run_threads(size, body)
    assert not errors, errors
    return res


ALGOS = [(P, local) for P in range(2, 9) for local in (False, True) if not local or P in (4, 8)]


@pytest.mark.parametrize("size,local", ALGOS, ids=[f"P{P}-{'hypercube' if loc else 'ring'}" for P, loc in ALGOS])
@pytest.mark.parametrize("n", [256, 20_000, 300_000])
def test_lossy_allreduce_leaves_identical_replicas(size, local, n):
    """All ranks end with the same bits; the reported union (the same on every rank) is exactly where the result
    differs from the lossless run of the same algorithm; it stays within the bound; loss really happened where the
    budget buys a packet. 256 elements (1 KB) is below the budget's first packet and takes recursive doubling."""
    p = 0.02
    lossy = _run(size, n, p, local=local, loss=True, seed=size)
    exact = _run(size, n, p, local=local, loss=False, seed=size)[0][0]
    first, union = lossy[0][0], lossy[0][1]
    for t, o in lossy:
        assert torch.equal(t.view(torch.int32), first.view(torch.int32))  # bit for bit
        assert o.lost == union.lost and o.elements == n
    covered = torch.zeros(n, dtype=torch.bool)
    for a, b in union.lost:
        covered[a:b] = True
    assert torch.equal(covered, first != exact)
    assert union.zero_filled <= p * n
    if p * n >= 64 * 2:  # at least one packet's worth to spend somewhere
        assert union.zero_filled > 0, "the lossy link lost nothing: the test would prove nothing"


@pytest.mark.slow
@pytest.mark.parametrize("size,local", [(3, False), (8, True)], ids=["P3-segmented-ring", "P8-hypercube"])
def test_lossy_allreduce_of_64_mb(size, local):
    """64 MB: the pipelined ring cuts each chunk into segments (P=3), halving-doubling takes it whole (P=8)."""
    n, p = 16 << 20, 0.001
    lossy = _run(size, n, p, local=local, loss=True, seed=11, packet=2241)
    exact = _run(size, n, p, local=local, loss=False, seed=11, packet=2241)[0][0]
    first, union = lossy[0]
    assert all(torch.equal(t, first) and o.lost == union.lost for t, o in lossy)
    covered = torch.zeros(n, dtype=torch.bool)
    for a, b in union.lost:
        covered[a:b] = True
    assert torch.equal(covered, first != exact) and 0 < union.zero_filled <= p * n


@pytest.mark.parametrize("size", [3, 5, 8])
def test_lossy_reduce_scatter_reports_the_same_union_everywhere(size):
    n, p = 60_000, 0.03
    lossy = _run(size, n, p, local=False, loss=True, seed=7, reduce_scatter=True)
    exact = _run(size, n, p, local=False, loss=False, seed=7, reduce_scatter=True)
    union = lossy[0][1]
    assert union.zero_filled > 0 and union.zero_filled <= p * n
    from host.collectives import chunk_bounds
    b = chunk_bounds(n, size)
    for r, ((t, o), (e, _)) in enumerate(zip(lossy, exact)):
        assert o.lost == union.lost
        covered = torch.zeros(n, dtype=torch.bool)
        for a, z in union.lost:
            covered[a:z] = True
        assert torch.equal(covered[b[r]:b[r + 1]], t != e)


def test_exact_calls_never_lose_on_a_lossy_link():
    """No loss bound: nothing is lost whatever the link does (the in-memory link loses only what a call allows)."""
    res = _run(4, 50_000, 0.0, local=False, loss=True)
    exact = _run(4, 50_000, 0.0, local=False, loss=False)[0][0]
    assert all(torch.equal(t, exact) and o.lost == [] for t, o in res)


def test_a_bigger_group_keeps_the_whole_budget():
    """P=8, p=1%, 4 MB at both MTUs' packet sizes: the call's budget buys whole packets (the per-hop share
    p/(2(P-1)) of a segment would not buy one), and they are lost."""
    for packet in (chunk_elems(1500, 4), chunk_elems(9000, 4)):  # fp32 elements per packet at MTU 1500 and 9000
        res = _run(8, 1 << 20, 0.01, local=False, loss=True, packet=packet, seed=3)
        o = res[0][1]
        assert 0 < o.zero_filled <= 0.01 * (1 << 20) and o.zero_filled % packet == 0


# --- the real transport: completion without retransmission, P=8 with every eligible packet dropped -------------

def _drop_eligible_seqs(seqs):
    """A drop rule for LossySocket: eligible DATA packets whose seq is in ``seqs`` (None: every eligible one)."""
    def drop(header: bytes) -> bool:
        if header[0] & 0x0F or not header[1] & int(Flag.DROP_ELIGIBLE):
            return False
        return seqs is None or int.from_bytes(header[20:24], "big") in seqs
    return drop


def _pause_at(seq: int, seconds: float, rule):
    """A drop rule that applies ``rule`` and, at the first DATA packet ``seq``, holds the sending thread for
    ``seconds`` (a sender that stalls mid-transfer, as one does on a loaded host)."""
    paused = []

    def drop(header: bytes) -> bool:
        if not paused and not header[0] & 0x0F and int.from_bytes(header[20:24], "big") == seq:
            paused.append(seq)
            time.sleep(seconds)
        return rule(header)
    return drop


@pytest.mark.parametrize("which", ["first", "all"])
def test_lost_eligible_packets_complete_without_retransmission(make_endpoints, which):
    """The receiver knows from the header which packets are protected and completes when they are in: a lost
    first eligible packet, or every eligible packet lost, costs no NACK, retransmission or timeout, even when the
    sender pauses mid-transfer for longer than the receiver's NACK wait (the data still to come is not lost)."""
    rule = _drop_eligible_seqs({0} if which == "first" else None)
    opts = Options(mtu=1500, socket_wrapper=lambda s: LossySocket(s, drop_fn=_pause_at(140, 0.03, rule)))
    a, b = make_endpoints(2, opts)
    x = torch.rand(100_000) + 1  # 281 packets
    h = a.send(1, x, transfer_id=9, loss_bound=0.05)
    res = b.recv(0, 9, out=torch.empty_like(x), timeout=20, loss_bound=0.05)
    sent = h.wait(20)
    lost = res.report.zero_filled
    assert sent["eligible_packets"] > 1 and lost > 0 and lost <= 0.05 * x.numel()
    if which == "first":
        assert len(res.report.lost_ranges) == 1 and lost <= chunk_elems(1500, 4)  # one packet
    else:
        assert lost >= chunk_elems(1500, 4) * (sent["eligible_packets"] - 1)  # all of them (one may be the short last packet)
    sa, sb = a.stats(), b.stats()
    assert sa["retransmissions"] == 0 and sa["rto_timeouts"] == 0 and sb["nacks_sent"] == 0
    kept = torch.ones(x.numel(), dtype=torch.bool)
    for lo, hi in res.report.lost_ranges:
        kept[lo:hi] = False
    assert torch.equal(res.data[kept], x[kept]) and not res.data[~kept].any()


@pytest.mark.slow
@pytest.mark.parametrize("mtu", [1500, 9000])
def test_p8_allreduce_over_the_transport_zero_fills_packets(make_endpoints, mtu):
    """P=8 ranks on loopback, every drop-eligible packet dropped by the sender's socket: a 4 MB all-reduce with
    p=1% loses packets, stays within the bound, and every rank holds the same bits and the same report."""
    from host.collectives import EndpointLink
    size, n, p = 8, 1 << 20, 0.01
    opts = Options(mtu=mtu, socket_wrapper=lambda s: LossySocket(s, loss_eligible=1.0, loss_protected=0.0))
    eps = make_endpoints(size, opts)
    xs = [torch.rand(n, generator=torch.Generator().manual_seed(r)) + 1 for r in range(size)]

    def body(r):
        t = xs[r].clone()
        return t, Collectives(EndpointLink(eps[r]), list(range(size)), r, timeout=60).allreduce(t, loss_bound=p)

    res, errors = run_threads(size, body)
    assert not errors, errors
    first, union = res[0]
    assert 0 < union.zero_filled <= p * n
    for t, o in res:
        assert torch.equal(t, first) and o.lost == union.lost
    covered = torch.zeros(n, dtype=torch.bool)
    for a, b in union.lost:
        covered[a:b] = True
    exact = sum(xs)
    assert torch.allclose(first[~covered], exact[~covered], rtol=1e-5) and not torch.allclose(
        first[covered], exact[covered], rtol=1e-5)


def test_loss_stats_take_per_step():
    s = LossStats()
    s.record(Outcome(lost=[(0, 10), (5, 20)], elements=100), True)
    s.record(Outcome(elements=50), False)
    assert s.take() == {"calls": 2, "lossy_calls": 1, "elements": 150, "zero_filled": 20, "fraction": 20 / 150}
    assert s.take()["calls"] == 0 and s.total["zero_filled"] == 20


# --- the backend and the DDP hook in real processes ------------------------------------------------------------

ENV = {"DLCP_LOSS_BOUND": "0.05", "DLCP_DROP_ELIGIBLE": "1.0", "DLCP_MTU": "1500"}


@pytest.mark.slow
def test_ddp_hook_under_forced_loss_keeps_parameters_identical() -> None:
    """DDP with the dlcp hook for 50 steps while every eligible packet is dropped: after every step every rank
    holds the same parameters bit for bit; loss happened and each step stayed within the bound."""
    out = check(launch("tests.host.loss_worker", "ddp", 3, env=ENV, timeout=280))
    reports = [json.loads(o.strip().splitlines()[-1]) for o in out]
    assert all(r["steps"] == 50 for r in reports)
    assert len({tuple(r["digests"]) for r in reports}) == 1  # identical after every step
    assert reports[0]["zero_filled"] > 0 and reports[0]["max_fraction"] <= 0.05


@pytest.mark.slow
def test_exact_ops_stay_exact_with_a_loss_bound_in_the_environment() -> None:
    """DLCP_LOSS_BOUND set and every eligible packet dropped: MIN/MAX/PRODUCT and integer all-reduces are exact;
    asking for loss on them raises at the call; a plain float SUM is exact; one inside loss_bound_scope(None)
    loses and reports the same union on every rank."""
    out = check(launch("tests.host.loss_worker", "ops", 3, env=ENV, timeout=200))
    reports = [json.loads(o.strip().splitlines()[-1]) for o in out]
    assert all(r["exact"] and r["refused"] == 4 for r in reports)
    assert reports[0]["lossy_zero_filled"] > 0 and len({tuple(map(tuple, r["lossy_ranges"])) for r in reports}) == 1


@pytest.mark.slow
def test_the_no_eligible_policy_loses_nothing_where_the_default_loses() -> None:
    """DLCP_POLICY=no-eligible (the host's eligibility marking off, a testbed ablation): with every eligible packet
    dropped, the same scoped lossy SUM that zero-fills under the default policy (the test above) zero-fills
    nothing, and the exact calls stay exact."""
    out = check(launch("tests.host.loss_worker", "ops", 2, env={**ENV, "DLCP_POLICY": "no-eligible"}, timeout=200))
    reports = [json.loads(o.strip().splitlines()[-1]) for o in out]
    assert all(r["exact"] and r["refused"] == 4 for r in reports)
    assert [r["lossy_zero_filled"] for r in reports] == [0, 0] and all(r["lossy_ranges"] == [] for r in reports)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("size,n,packet", [(4, 1_000_000, 712), (4, 300_000, 64), (5, 200_003, 256)])
def test_lossy_reduce_scatter_keeps_every_rank_shard_within_the_bound(size, n, packet, seed):
    """A reduce-scatter's ranks keep different chunks, so the bound holds per output shard: each rank's chunk has
    at most ``floor(p * its elements)`` zero-filled or biased (each chunk's own budget, spent only on the
    messages that carry it), and the call as a whole stays within ``floor(p * n)``. The in-memory link loses as
    much as each transfer's bound allows, the worst a network can do."""
    from host.collectives import chunk_bounds
    p = 0.05
    lossy = _run(size, n, p, local=False, loss=True, seed=seed, packet=packet, reduce_scatter=True)
    exact = _run(size, n, p, local=False, loss=False, seed=seed, packet=packet, reduce_scatter=True)
    union = lossy[0][1]
    b = chunk_bounds(n, size)
    covered = torch.zeros(n, dtype=torch.bool)
    for a, z in union.lost:
        covered[a:z] = True
    assert 0 < union.zero_filled <= int(p * n)
    for r, ((t, _), (e, _)) in enumerate(zip(lossy, exact)):
        shard = covered[b[r]:b[r + 1]]
        assert torch.equal(shard, t != e)
        assert int(shard.sum()) <= int(p * (b[r + 1] - b[r]) + 1e-9), (r, int(shard.sum()), b[r + 1] - b[r])


def test_reduce_scatter_over_the_transport_keeps_the_small_shard_within_the_bound(make_endpoints):
    """P=4 on one host, rank 0's shard of the gradient much smaller in magnitude than the rest, every drop-eligible
    packet dropped by the senders' sockets (the network's worst). The policy makes the smallest packets of a
    message eligible, so where a message spans several shards (recursive halving, which one-host groups of 4 use)
    its loss all lands on the smallest shard: rank 0's took twice the least of the others'. A lossy reduce-scatter
    takes the ring with a budget per chunk instead, and every rank's shard stays within the bound, the loss spread
    evenly."""
    from host.collectives import EndpointLink, chunk_bounds
    size, n, p = 4, 1 << 20, 0.05
    opts = Options(socket_wrapper=lambda s: LossySocket(s, loss_eligible=1.0, loss_protected=0.0))
    eps = make_endpoints(size, opts)
    b = chunk_bounds(n, size)
    xs = []
    for r in range(size):
        x = torch.rand(n, generator=torch.Generator().manual_seed(r)) + 1
        x[b[0]:b[1]] *= 0.01  # rank 0's shard: the smallest values
        xs.append(x)

    def body(r):
        out = torch.empty(b[r + 1] - b[r])
        c = Collectives(EndpointLink(eps[r]), list(range(size)), r, timeout=60, local=True)
        return out, c.reduce_scatter(out, [xs[r][b[i]:b[i + 1]] for i in range(size)], ReduceOp.SUM, loss_bound=p)

    res, errors = run_threads(size, body)
    assert not errors, errors
    union = res[0][1]
    covered = torch.zeros(n, dtype=torch.bool)
    for a, z in union.lost:
        covered[a:z] = True
    exact = sum(xs)
    assert 0 < union.zero_filled <= int(p * n)
    lost = []
    for r, (out, o) in enumerate(res):
        shard = covered[b[r]:b[r + 1]]
        assert o.lost == union.lost
        assert int(shard.sum()) <= int(p * (b[r + 1] - b[r])), (r, int(shard.sum()) / (b[r + 1] - b[r]))
        assert torch.allclose(out[~shard], exact[b[r]:b[r + 1]][~shard], rtol=1e-5)
        lost.append(int(shard.sum()))
    assert max(lost) <= 1.5 * min(lost), lost  # (spread over the shards, not concentrated on the smallest)
