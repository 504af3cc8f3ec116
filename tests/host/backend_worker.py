"""Scenarios run by tests/host/test_backend.py in real processes: every collective on the dlcp backend against
gloo in the same processes (a gloo subgroup over all ranks), DDP, failures."""

from __future__ import annotations

import os
import sys
import threading
import time

import torch
import torch.distributed as dist

from host.procexit import exit_process

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int64]
STAGED: dict[str, int] | None = None  # copies made by host.staging when DLCP_TEST_STAGE_HOST=1


def _stage_host_tensors() -> dict[str, int]:
    """Make every dlcp operation stage its CPU tensors the way it stages CUDA ones (``host.staging`` with plain
    copies for streams): the routing, every operation's host stand-ins and its copies in and out all run. Returns
    the counts of copies in and out, which the scenarios check are not zero."""
    import host.backend as hb

    counts = {"copy_in": 0, "copy_out": 0}

    class Counting(hb.Staged):
        def copy_in(self) -> None:
            counts["copy_in"] += 1
            super().copy_in()

        def copy_out(self) -> None:
            counts["copy_out"] += 1
            super().copy_out()

    hb.Staged = Counting
    hb._on_device = lambda t: True
    return counts


def _check_staged(r: int) -> None:
    if STAGED is not None:
        assert STAGED["copy_in"] > 10 and STAGED["copy_out"] > 10, STAGED
        print("staged", r, STAGED["copy_in"], STAGED["copy_out"])


def _data(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g).to(dtype)
    return torch.randint(-9, 10, shape, generator=g).to(dtype)


def _same(a: torch.Tensor, b: torch.Tensor, what: str) -> None:
    if a.dtype.is_floating_point and a.dtype != torch.float32:
        torch.testing.assert_close(a.float(), b.float(), rtol=2e-2, atol=2e-2 * dist.get_world_size(),
                                   msg=lambda m: f"{what}: {m}")
    else:
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, msg=lambda m: f"{what}: {m}")


def collectives(async_op: bool) -> None:
    dist.init_process_group("dlcp")
    r, P = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo")
    assert dist.get_backend() == "dlcp"

    def both(fn, *tensors_list):
        """Run fn(group, *tensors) on dlcp and on gloo copies; return both results."""
        a = [t.clone() for t in tensors_list]
        b = [t.clone() for t in tensors_list]
        w = fn(None, *a)
        if async_op and w is not None:
            w.wait()
        fn(gloo, *b)
        return a, b

    for dtype in DTYPES:
        for n in (1, 33, 100_000):
            x = _data((n,), dtype, seed=r * 7 + n)
            ops = [dist.ReduceOp.SUM, dist.ReduceOp.MIN, dist.ReduceOp.MAX]
            if n < 1000:
                ops.append(dist.ReduceOp.PRODUCT)
            for op in ops:
                a, b = both(lambda g, t: dist.all_reduce(t, op=op, group=g, async_op=async_op and g is None), x)
                _same(a[0], b[0], f"all_reduce {dtype} n={n} {op}")
            if dtype.is_floating_point:  # gloo has no AVG: compare with SUM / P
                a = x.clone()
                dist.all_reduce(a, op=dist.ReduceOp.AVG)
                s = x.clone()
                dist.all_reduce(s, group=gloo)
                _same(a, s / P, f"all_reduce AVG {dtype}")
    # bit-identical results on every rank
    y = _data((50_000,), torch.float32, seed=r)
    dist.all_reduce(y)
    ys = [torch.empty_like(y) for _ in range(P)]
    dist.all_gather(ys, y, group=gloo)
    assert all(torch.equal(ys[0], z) for z in ys), "ranks disagree bit for bit"

    x = _data((6, 5), torch.float32, seed=r)
    a, b = [torch.empty(6, 5) for _ in range(P)], [torch.empty(6, 5) for _ in range(P)]
    w = dist.all_gather(a, x, async_op=async_op)
    if async_op:
        w.wait()
    dist.all_gather(b, x, group=gloo)
    for u, v in zip(a, b):
        _same(u, v, "all_gather")
    a, b = torch.empty(P * 30), torch.empty(P * 30)
    dist.all_gather_single(a, x.reshape(-1))
    dist.all_gather_single(b, x.reshape(-1), group=gloo)
    _same(a, b, "all_gather_single")

    ins = [_data((4, 3), torch.float32, seed=r * 10 + i) for i in range(P)]
    a, b = torch.empty(4, 3), torch.empty(4, 3)
    dist.reduce_scatter(a, [t.clone() for t in ins])
    dist.reduce_scatter(b, [t.clone() for t in ins], group=gloo)
    _same(a, b, "reduce_scatter")
    big = _data((P * 20_000,), torch.float32, seed=r)
    a, b = torch.empty(20_000), torch.empty(20_000)
    dist.reduce_scatter_single(a, big.clone())
    dist.reduce_scatter_single(b, big.clone(), group=gloo)
    _same(a, b, "reduce_scatter_single")

    for root in range(P):
        for n in (7, 400_000):
            x = _data((n,), torch.float32, seed=r + 100 * root)
            a, b = both(lambda g, t: dist.broadcast(t, src=root, group=g), x)
            _same(a[0], b[0], f"broadcast root={root} n={n}")
        x = _data((1000,), torch.float32, seed=r + root)
        a, b = both(lambda g, t: dist.reduce(t, dst=root, op=dist.ReduceOp.SUM, group=g), x)
        if r == root:
            _same(a[0], b[0], f"reduce root={root}")
        x = _data((3, 2), torch.float32, seed=r)
        ga = [torch.empty(3, 2) for _ in range(P)] if r == root else None
        gb = [torch.empty(3, 2) for _ in range(P)] if r == root else None
        dist.gather(x, ga, dst=root)
        dist.gather(x, gb, dst=root, group=gloo)
        if r == root:
            for u, v in zip(ga, gb):
                _same(u, v, "gather")
        sl = [_data((5,), torch.float32, seed=i) for i in range(P)] if r == root else None
        sa, sb = torch.empty(5), torch.empty(5)
        dist.scatter(sa, sl, src=root)
        dist.scatter(sb, sl, src=root, group=gloo)
        _same(sa, sb, "scatter")

    ins = [_data((2, 2), torch.float32, seed=r * 10 + i) for i in range(P)]  # gloo wants equal sizes
    oa = [torch.empty(2, 2) for _ in range(P)]
    ob = [torch.empty(2, 2) for _ in range(P)]
    dist.all_to_all(oa, ins)
    dist.all_to_all(ob, ins, group=gloo)
    for u, v in zip(oa, ob):
        _same(u, v, "all_to_all")
    x = _data((P * 4, 3), torch.float32, seed=r)
    a, b = torch.empty(P * 4, 3), torch.empty(P * 4, 3)
    dist.all_to_all_single(a, x)
    dist.all_to_all_single(b, x, group=gloo)
    _same(a, b, "all_to_all_single")

    # coalesced
    ts = [_data((k + 3,), torch.float32, seed=r + k) for k in range(3)]
    ca = [t.clone() for t in ts]
    cb = [t.clone() for t in ts]
    dist.all_reduce_coalesced(ca)
    for t in cb:
        dist.all_reduce(t, group=gloo)
    for u, v in zip(ca, cb):
        _same(u, v, "all_reduce_coalesced")

    # send/recv around the ring
    x = torch.full((10,), float(r))
    y = torch.empty(10)
    if r % 2 == 0:
        dist.send(x, (r + 1) % P)
        dist.recv(y, (r - 1) % P)
    else:
        dist.recv(y, (r - 1) % P)
        dist.send(x, (r + 1) % P)
    assert torch.equal(y, torch.full((10,), float((r - 1) % P)))
    reqs = [dist.isend(torch.full((3,), r * 1.0), (r + 1) % P), dist.irecv(y[:3], (r - 1) % P)]
    for q in reqs:
        q.wait()
    assert torch.equal(y[:3], torch.full((3,), float((r - 1) % P)))

    # a subgroup of the even ranks
    evens = list(range(0, P, 2))
    sub = dist.new_group(evens, backend="dlcp")
    if r in evens:
        t = torch.ones(8)
        dist.all_reduce(t, group=sub)
        assert torch.equal(t, torch.full((8,), float(len(evens)))), t
    dist.barrier()
    _check_staged(r)
    print("ok", r)
    dist.destroy_process_group()


def ddp() -> None:
    """DDP on dlcp and on gloo from the same initial weights and data: same weights after K steps."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("dlcp")
    r = dist.get_rank()
    gloo = dist.new_group(backend="gloo")
    torch.manual_seed(0)
    base = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(),
                               torch.nn.Linear(64, 4))
    results = {}
    for name, group, kw in (("dlcp", None, {}), ("gloo", gloo, {}),
                            ("dlcp-view", None, {"gradient_as_bucket_view": True, "bucket_cap_mb": 0.01}),
                            ("dlcp-static", None, {"static_graph": True}),
                            ("dlcp-unused", None, {"find_unused_parameters": True}),
                            ("dlcp-hook", None, {"bucket_cap_mb": 0.005})):
        model = torch.nn.Sequential(*[type(m)(*([m.in_features, m.out_features] if hasattr(m, "in_features")
                                                 else [])) for m in base])
        model.load_state_dict(base.state_dict())
        ddp_model = DDP(model, process_group=group, **kw)
        if name == "dlcp-hook":
            from host.hooks import DlcpHookState, dlcp_allreduce_hook
            state = DlcpHookState.for_model(ddp_model)
            ddp_model.register_comm_hook(state, dlcp_allreduce_hook)
        opt = torch.optim.SGD(ddp_model.parameters(), lr=0.1)
        g = torch.Generator().manual_seed(100 + r)
        for step in range(6):
            x, y = torch.randn(16, 20, generator=g), torch.randint(0, 4, (16,), generator=g)
            if step == 2:
                with ddp_model.no_sync():  # accumulate locally, synchronise on the next step
                    torch.nn.functional.cross_entropy(ddp_model(x), y).backward()
                continue
            opt.zero_grad(set_to_none=False) if step != 3 else None
            torch.nn.functional.cross_entropy(ddp_model(x), y).backward()
            opt.step()
            if step == 3:
                opt.zero_grad()
        results[name] = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        if name == "dlcp-hook":  # several buckets, tagged front layers first
            assert sorted(set(state.positions.values())) == [0, 1, 2], state.positions
    for name, w in results.items():
        torch.testing.assert_close(w, results["gloo"], rtol=1e-5, atol=1e-6, msg=lambda m: f"{name}: {m}")
    _check_staged(r)
    print("ok", r)
    dist.destroy_process_group()


def coexist() -> None:
    """One rank of one of two jobs that run at once on this host with default settings (no DLCP_PORT/DLCP_ADDR):
    once every rank of both jobs has bound its socket (a file each in COEXIST_DIR), all-reduces and all-gathers of
    several sizes, each against gloo's bits, and DDP steps against gloo's weights, bit for bit (two ranks: a sum
    of two is the same in either order). Prints the address and port it bound."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    from host.backend import dlcp_backend

    dist.init_process_group("dlcp")
    r, P = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo")
    host, port = dlcp_backend()._endpoint.local_addr
    print("bound", r, f"{host}:{port}", flush=True)
    mark = os.path.join(os.environ["COEXIST_DIR"], f"{os.environ['COEXIST_JOB']}-{r}")
    with open(mark, "w") as f:
        f.write(f"{host}:{port}")
    deadline = time.monotonic() + 60
    while len(os.listdir(os.environ["COEXIST_DIR"])) < int(os.environ["COEXIST_RANKS"]):
        assert time.monotonic() < deadline, "the other job never bound its sockets"
        time.sleep(0.02)
    for rep in range(3):
        for n in (1000, 100_000, 1_000_000):
            x = _data((n,), torch.float32, seed=1000 * rep + 10 * r + n % 7)
            a, b = x.clone(), x.clone()
            dist.all_reduce(a)
            dist.all_reduce(b, group=gloo)
            assert torch.equal(a, b), f"all_reduce n={n}"
            ga, gb = torch.empty(P * n), torch.empty(P * n)
            dist.all_gather_into_tensor(ga, x)
            dist.all_gather_into_tensor(gb, x, group=gloo)
            assert torch.equal(ga, gb), f"all_gather n={n}"
    torch.manual_seed(0)
    base = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    weights = {}
    for name, group in (("dlcp", None), ("gloo", gloo)):
        model = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
        model.load_state_dict(base.state_dict())
        ddp_model = DDP(model, process_group=group)
        opt = torch.optim.SGD(ddp_model.parameters(), lr=0.1)
        g = torch.Generator().manual_seed(100 + r)
        for _ in range(5):
            x, y = torch.randn(16, 20, generator=g), torch.randint(0, 4, (16,), generator=g)
            opt.zero_grad()
            torch.nn.functional.cross_entropy(ddp_model(x), y).backward()
            opt.step()
        weights[name] = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    assert torch.equal(weights["dlcp"], weights["gloo"]), "DDP weights differ from gloo's"
    print("ok", r, flush=True)
    dist.destroy_process_group()


def debug_detail() -> None:
    """Under TORCH_DISTRIBUTED_DEBUG=DETAIL (torch wraps the backend in its ProcessGroupWrapper): collectives run
    and match gloo, ``dlcp_backend()`` finds the backend inside the wrapper (default group and a subgroup), and the
    wrapper's own check still works: mismatched collectives on the ranks are an error."""
    from host.backend import DlcpBackend, dlcp_backend

    assert os.environ.get("TORCH_DISTRIBUTED_DEBUG") == "DETAIL"
    dist.init_process_group("dlcp")
    r, P = dist.get_rank(), dist.get_world_size()
    wrapper = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu"))
    assert type(wrapper).__name__ == "_ProcessGroupWrapper", type(wrapper)  # (else this tests nothing)
    gloo = dist.new_group(backend="gloo")
    b = dlcp_backend()
    assert isinstance(b, DlcpBackend) and b.options.timeout > 0, b
    sub = dist.new_group([0, 1])
    assert isinstance(dlcp_backend(sub), DlcpBackend) and dlcp_backend(sub) is not b
    x = _data((10_000,), torch.float32, seed=r)
    a, c = x.clone(), x.clone()
    dist.all_reduce(a)
    dist.all_reduce(c, group=gloo)
    assert torch.equal(a, c), "all_reduce under DETAIL"
    assert b.transport_stats()["tx_bytes"] > 0
    try:  # the wrapper compares the ranks' calls before running one: all-reduce on one rank, broadcast on others
        if r == 0:
            dist.all_reduce(torch.ones(4))
        else:
            dist.broadcast(torch.ones(4), src=0)
    except RuntimeError as e:
        assert "collective" in str(e).lower() or "mismatch" in str(e).lower(), e
        print("mismatch caught", r, flush=True)
    print("ok", r, flush=True)
    dist.destroy_process_group()


def abort_tells() -> None:
    """Rank 0 aborts the default group while rank 1 waits on a receive from it (peer_timeout 60 s, so only a
    notice can end that wait soon): rank 1's receive fails at once, naming rank 0 and its abort."""
    os.environ["DLCP_PEER_TIMEOUT"] = "60"
    dist.init_process_group("dlcp")
    r = dist.get_rank()
    dist.barrier()
    if r == 0:
        time.sleep(0.5)  # rank 1's receive is posted
        dist.group.WORLD.abort()
        print("aborted 0", flush=True)
        return
    t0 = time.monotonic()
    try:
        dist.recv(torch.empty(10), src=0)
    except Exception as e:  # noqa: BLE001 - the point
        took = time.monotonic() - t0
        assert took < 20, f"the receive failed only after {took:.1f}s: {e}"
        assert "rank 0 aborted: its dlcp process group was aborted" in str(e), e
        print(f"recv failed after {took:.1f}s: {e}".splitlines()[0], flush=True)
    else:
        raise AssertionError("the receive from the aborted rank completed")
    print("ok", r, flush=True)


def runner() -> None:
    """Who runs a collective (host.backend._Runner): a synchronous call runs on its caller's thread; an
    asynchronous one on the group's worker, done while the caller sleeps; a synchronous call behind an asynchronous
    one waits for it and keeps the order; a call queued for a waiter (asyncOp False) that nobody waits for
    completes when polled. Every result is the exact sum."""
    from host import backend
    from host.collectives import Collectives

    ran_on: list[str] = []
    plain = Collectives.allreduce

    def recording(self, *args, **kwargs):
        ran_on.append(threading.current_thread().name)
        return plain(self, *args, **kwargs)

    Collectives.allreduce = recording
    dist.init_process_group("dlcp")
    r, P = dist.get_rank(), dist.get_world_size()
    want = sum(range(1, P + 1))
    for _ in range(5):
        t = torch.full((1000,), float(r + 1))
        dist.all_reduce(t)
        assert torch.equal(t, torch.full((1000,), float(want))), t[:3]
    assert ran_on == ["MainThread"] * 5, ran_on
    ran_on.clear()
    a = torch.full((300_000,), float(r + 1))
    w = dist.all_reduce(a, async_op=True)
    b = torch.full((1000,), float(r + 1))
    dist.all_reduce(b)  # behind a: runs after it
    assert w.is_completed() and torch.equal(a, torch.full_like(a, float(want))) and torch.equal(b, torch.full_like(
        b, float(want)))
    assert ran_on[0].startswith("dlcp-pg"), ran_on
    ran_on.clear()
    w = dist.all_reduce(a, async_op=True)
    time.sleep(0.5)
    assert w.is_completed(), "an asynchronous call was left for a waiter"
    w.wait()
    assert ran_on[0].startswith("dlcp-pg"), ran_on
    opts = dist.AllreduceOptions()
    opts.asyncOp = False  # queued for a waiter; polled instead
    c = torch.full((1000,), float(r + 1))
    work = backend.dlcp_backend().allreduce([c], opts)
    deadline = time.monotonic() + 30
    while not work.is_completed():
        assert time.monotonic() < deadline, "a polled work queued for a waiter never ran"
        time.sleep(0.001)
    assert torch.equal(c, torch.full_like(c, float(want))), c[:3]
    print("ok", r, flush=True)
    dist.destroy_process_group()


def dead_peer() -> None:
    """Rank 1 dies after rendezvous; rank 0's all-reduce must fail on wait() within the timeout."""
    os.environ.setdefault("DLCP_TIMEOUT", "5")
    os.environ.setdefault("DLCP_PEER_TIMEOUT", "2")
    dist.init_process_group("dlcp")
    r = dist.get_rank()
    dist.barrier()
    if r == 1:
        os._exit(0)
    time.sleep(0.5)
    t0 = time.monotonic()
    w = dist.all_reduce(torch.ones(100_000), async_op=True)
    try:
        w.wait()
    except Exception as e:  # noqa: BLE001 - the point of the scenario
        dt = time.monotonic() - t0
        assert dt < 15, f"error took {dt:.1f}s"
        print(f"error after {dt:.1f}s: {type(e).__name__}: {e}")
        os._exit(0)
    print("no error", file=sys.stderr)
    os._exit(1)


#: Unit roundoff (half an ulp at 1) of the half-precision types: 8 and 11 significant bits.
UNIT_ROUNDOFF = {torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11}


def _within_rounding(got: torch.Tensor, exact: torch.Tensor, abs_sum: torch.Tensor, steps: int, what: str) -> None:
    """``got`` is within ``steps`` roundings of the exact result: ``|got - exact| <= steps * u * sum(|x_i|)`` per
    element (the error of a sum evaluated by ``steps`` rounded additions of representable inputs)."""
    u = UNIT_ROUNDOFF[got.dtype]
    err = (got.double() - exact).abs()
    bound = steps * u * abs_sum * (1 + 1e-6) + 2.0 ** -24  # (+ fp16's smallest subnormal, for sums near zero)
    bad = err > bound
    assert not bad.any(), (f"{what}: {int(bad.sum())} elements beyond {steps} roundings, worst "
                           f"{float((err - bound).max()):.3g} over the bound")


def half() -> None:
    """bf16 and fp16 collectives: results against gloo (bit for bit at 2 ranks, where each sum is one rounding)
    and a float64 reference (within ``P - 1`` roundings per element, the bound the module docstring of
    host.collectives states); 2-byte elements on the wire, half float32's bytes (the transport's tx_bytes)."""
    from host.backend import transport_stats

    dist.init_process_group("dlcp")
    r, P = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo")
    for dtype in (torch.bfloat16, torch.float16):
        for n in (1000, 3_000_000):  # recursive doubling; the ring (above the cost model's doubling range)
            xs = [_data((n,), dtype, seed=1000 * q + n) for q in range(P)]  # every rank's input, on every rank
            exact = sum(x.double() for x in xs)
            abs_sum = sum(x.double().abs() for x in xs)
            a, b = xs[r].clone(), xs[r].clone()
            dist.all_reduce(a)
            dist.all_reduce(b, group=gloo)
            assert a.dtype == dtype
            for got, who in ((a, "dlcp"), (b, "gloo")):
                _within_rounding(got, exact, abs_sum, P - 1, f"{who} all_reduce SUM {dtype} n={n}")
            if P == 2:
                assert torch.equal(a, b), f"all_reduce SUM {dtype} n={n}: not gloo's bits"
            avg = xs[r].clone()
            dist.all_reduce(avg, op=dist.ReduceOp.AVG)
            _within_rounding(avg, exact / P, abs_sum / P, P + 1, f"all_reduce AVG {dtype} n={n}")
            for op in (dist.ReduceOp.MAX, dist.ReduceOp.MIN):  # exact: the same bits as gloo's
                a, b = xs[r].clone(), xs[r].clone()
                dist.all_reduce(a, op=op)
                dist.all_reduce(b, op=op, group=gloo)
                assert torch.equal(a, b), f"all_reduce {op} {dtype} n={n}"
            m = n // P * P  # reduce-scatter and all-gather of the first m elements
            out_a, out_b = torch.empty(m // P, dtype=dtype), torch.empty(m // P, dtype=dtype)
            dist.reduce_scatter_single(out_a, xs[r][:m].clone())
            dist.reduce_scatter_single(out_b, xs[r][:m].clone(), group=gloo)
            mine = slice(r * (m // P), (r + 1) * (m // P))
            for got, who in ((out_a, "dlcp"), (out_b, "gloo")):
                _within_rounding(got, exact[:m][mine], abs_sum[:m][mine], P - 1,
                                 f"{who} reduce_scatter_single {dtype} n={n}")
            if P == 2:
                assert torch.equal(out_a, out_b), f"reduce_scatter_single {dtype} n={n}: not gloo's bits"
            g_a, g_b = torch.empty(m, dtype=dtype), torch.empty(m, dtype=dtype)
            dist.all_gather_single(g_a, xs[r][mine].clone())
            dist.all_gather_single(g_b, xs[r][mine].clone(), group=gloo)
            every = torch.cat([x[q * (m // P):(q + 1) * (m // P)] for q, x in enumerate(xs)])
            assert torch.equal(g_a, g_b) and torch.equal(g_a, every), \
                f"all_gather_single {dtype} n={n}"
    # fp16 AVG divides first: an average representable in fp16 whose sum is not (65504) comes out finite
    big = torch.full((5000,), 40000.0, dtype=torch.float16)
    dist.all_reduce(big, op=dist.ReduceOp.AVG)
    assert torch.equal(big, torch.full((5000,), 40000.0, dtype=torch.float16)), big[:4]
    big = torch.full((P * 5000,), 40000.0, dtype=torch.float16)
    part = torch.empty(5000, dtype=torch.float16)
    dist.reduce_scatter_single(part, big, op=dist.ReduceOp.AVG)
    assert torch.equal(part, torch.full((5000,), 40000.0, dtype=torch.float16)), part[:4]
    assert torch.equal(big, torch.full((P * 5000,), 40000.0, dtype=torch.float16)), "reduce_scatter changed its input"
    # bytes on the wire: the same collective of the same element count, per dtype (one algorithm for all: below the
    # cost model's ring threshold, above the small-message one)
    n = 200_000
    sent = {}
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        t = _data((n,), dtype, seed=r)
        dist.barrier()
        before = transport_stats()["tx_bytes"]
        dist.all_reduce(t)
        dist.all_reduce(t, op=dist.ReduceOp.AVG)
        g = torch.empty(P * n, dtype=dtype)
        dist.all_gather_single(g, t)
        dist.reduce_scatter_single(t, g)
        sent[dtype] = transport_stats()["tx_bytes"] - before
    for dtype in (torch.bfloat16, torch.float16):
        ratio = sent[dtype] / sent[torch.float32]
        assert 0.49 < ratio < 0.51, f"{dtype}: {sent[dtype]} bytes sent against float32's {sent[torch.float32]}"
    sys.stdout.write(f"tx_bytes {r} " + " ".join(f"{str(d).split('.')[-1]}={v}" for d, v in sent.items()) + "\n")
    print("ok", r)
    dist.destroy_process_group()


if __name__ == "__main__":
    torch.set_num_threads(1)
    if os.environ.get("DLCP_TEST_STAGE_HOST") == "1":
        STAGED = _stage_host_tensors()
    {"collectives": lambda: collectives(False), "collectives-async": lambda: collectives(True), "ddp": ddp,
     "dead-peer": dead_peer, "half": half, "coexist": coexist,
     "debug-detail": debug_detail, "abort-tells": abort_tells, "runner": runner}[sys.argv[1]]()
    exit_process()  # not interpreter finalization: see host/procexit.py
