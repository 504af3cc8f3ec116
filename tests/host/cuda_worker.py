"""Scenarios run by tests/host/cuda_suite.py (``make test-cuda``): the dlcp backend on CUDA tensors, against gloo's
CUDA path and host computations, and SparDL on CUDA tensors against the same on host tensors, in real processes
sharing the machine's GPUs (rank r on GPU r % count)."""

from __future__ import annotations

import sys

import torch
import torch.distributed as dist

from host.procexit import exit_process


def _device() -> torch.device:
    d = torch.device("cuda", dist.get_rank() % torch.cuda.device_count())
    torch.cuda.set_device(d)
    return d


def _inputs(n: int, dtype: torch.dtype, P: int) -> list[torch.Tensor]:
    """Every rank's input, known on every rank (host tensors), so results can be checked locally."""
    return [torch.randn(n, generator=torch.Generator().manual_seed(1000 * q + n)).to(dtype) for q in range(P)]


def collectives() -> None:
    """Every collective on CUDA tensors: the same results as on host tensors (dlcp) and as gloo's CUDA path,
    results on the tensors' device, with producers and consumers on the caller's (non-default) stream."""
    dist.init_process_group("dlcp")
    r, P = dist.get_rank(), dist.get_world_size()
    dev = _device()
    gloo = dist.new_group(backend="gloo")
    side = torch.cuda.Stream(dev)
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        for n in (1000, 1_000_000):
            xs = _inputs(n, dtype, P)
            host = xs[r].clone()
            dist.all_reduce(host)  # the reference: the same algorithm on host tensors
            with torch.cuda.stream(side):  # produced, reduced and consumed on a non-default stream
                x = (xs[r].to(dev, non_blocking=True) * 2) / 2  # kernels queued right before the call
                w = dist.all_reduce(x, async_op=True)
                w.wait()
                y = x * 1  # a kernel after wait(): must see the result
            side.synchronize()
            assert y.device == dev and torch.equal(y.cpu(), host), f"all_reduce {dtype} n={n}"
            if dtype == torch.float32:  # gloo's CUDA path (its dtype support varies by build)
                g = xs[r].to(dev)
                dist.all_reduce(g, group=gloo)
                torch.testing.assert_close(g.cpu(), host, rtol=1e-5, atol=1e-5 * P)
            # back-to-back async operations on one tensor see each other's results, as on host tensors
            z = xs[r].to(dev)
            w1 = dist.all_reduce(z, async_op=True)
            w2 = dist.all_reduce(z, op=dist.ReduceOp.MAX, async_op=True)
            w1.wait()
            w2.wait()
            hz = xs[r].clone()
            dist.all_reduce(hz)
            dist.all_reduce(hz, op=dist.ReduceOp.MAX)
            assert torch.equal(z.cpu(), hz), f"back-to-back all_reduces {dtype} n={n}"

    n = 4096
    xs = _inputs(n * P, torch.float32, P)
    out = torch.empty(n, device=dev)
    dist.reduce_scatter_tensor(out, xs[r].to(dev))
    ref = torch.empty(n)
    dist.reduce_scatter_tensor(ref, xs[r].clone())
    assert torch.equal(out.cpu(), ref), "reduce_scatter_tensor"
    full = torch.empty(n * P, device=dev)
    dist.all_gather_into_tensor(full, xs[r][:n].to(dev))
    assert torch.equal(full.cpu(), torch.cat([x[:n] for x in xs])), "all_gather_into_tensor"
    parts = [torch.empty(n, device=dev) for _ in range(P)]
    dist.all_gather(parts, xs[r][:n].to(dev))
    assert all(torch.equal(p.cpu(), x[:n]) for p, x in zip(parts, xs)), "all_gather"
    for root in range(P):
        b = xs[r][:n].to(dev)
        dist.broadcast(b, src=root)
        assert torch.equal(b.cpu(), xs[root][:n]), f"broadcast from {root}"
        t = xs[r][:n].to(dev)
        dist.reduce(t, dst=root)
        if r == root:
            href = xs[r][:n].clone()
            dist.reduce(href, dst=root)
            assert torch.equal(t.cpu(), href), f"reduce to {root}"
        else:
            dist.reduce(xs[r][:n].clone(), dst=root)
        gl = [torch.empty(n, device=dev) for _ in range(P)] if r == root else None
        dist.gather(xs[r][:n].to(dev), gl, dst=root)
        if r == root:
            assert all(torch.equal(p.cpu(), x[:n]) for p, x in zip(gl, xs)), f"gather to {root}"
        s_out = torch.empty(n, device=dev)
        dist.scatter(s_out, [x[:n].to(dev) for x in xs] if r == root else None, src=root)
        assert torch.equal(s_out.cpu(), xs[r][:n]), f"scatter from {root}"
    a2a_in = torch.arange(P * 4, dtype=torch.float32, device=dev) + 100 * r
    a2a_out = torch.empty(P * 4, device=dev)
    dist.all_to_all_single(a2a_out, a2a_in)
    expect = torch.cat([torch.arange(4.0) + 4 * r + 100 * q for q in range(P)])
    assert torch.equal(a2a_out.cpu(), expect), "all_to_all_single"

    # point to point: a ring of sends and receives, posted in either order
    src, dst = (r - 1) % P, (r + 1) % P
    got = torch.empty(n, device=dev)
    reqs = [dist.irecv(got, src), dist.isend(xs[r][:n].to(dev), dst)]
    for q in reqs:
        q.wait()
    assert torch.equal(got.cpu(), xs[src][:n]), "isend/irecv"
    ops = [dist.P2POp(dist.isend, xs[r][:n].to(dev), dst), dist.P2POp(dist.irecv, got, src)]
    for q in dist.batch_isend_irecv(ops):
        q.wait()
    assert torch.equal(got.cpu(), xs[src][:n]), "batch_isend_irecv"

    # a work's future completes with the device tensors, its consumers ordered after the copies back
    f = dist.all_reduce(torch.ones(n, device=dev), async_op=True).get_future()
    v = f.then(lambda fut: fut.value()[0] * 2).wait()
    assert v.device == dev and torch.equal(v.cpu(), torch.full((n,), 2.0 * P)), "future"
    dist.barrier()
    print("ok", r)
    dist.destroy_process_group()


def ddp() -> None:
    """DDP on CUDA (device_ids) over dlcp and over gloo's CUDA path, from the same weights and data: the same
    weights after a few steps."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("dlcp")
    r = dist.get_rank()
    dev = _device()
    gloo = dist.new_group(backend="gloo")
    torch.manual_seed(0)
    base = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    results = {}
    for name, group in (("dlcp", None), ("gloo", gloo)):
        model = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
        model.load_state_dict(base.state_dict())
        model.to(dev)
        ddp_model = DDP(model, device_ids=[dev], process_group=group)
        opt = torch.optim.SGD(ddp_model.parameters(), lr=0.1)
        g = torch.Generator().manual_seed(100 + r)
        for _ in range(4):
            x, y = torch.randn(16, 20, generator=g).to(dev), torch.randint(0, 4, (16,), generator=g).to(dev)
            opt.zero_grad()
            torch.nn.functional.cross_entropy(ddp_model(x), y).backward()
            opt.step()
        results[name] = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).cpu()
    torch.testing.assert_close(results["dlcp"], results["gloo"], rtol=1e-5, atol=1e-6)
    print("ok", r)
    dist.destroy_process_group()


def dear() -> None:
    """DeAR over dlcp with the model on the GPU: its fusion buffers on the parameters' device (the collectives
    stage them), the same weights as DDP over gloo's CUDA path after a few steps."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    from host.dear import DeAR
    from host.dear.fusion import CommModel

    dist.init_process_group("dlcp")
    r = dist.get_rank()
    dev = _device()
    gloo = dist.new_group(backend="gloo")

    def mlp() -> torch.nn.Module:
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(12, 24), torch.nn.ReLU(), torch.nn.Linear(24, 24),
                                   torch.nn.ReLU(), torch.nn.Linear(24, 4)).to(dev)

    g = torch.Generator().manual_seed(100 + r)
    data = [(torch.randn(16, 12, generator=g).to(dev), torch.randint(0, 4, (16,), generator=g).to(dev))
            for _ in range(5)]
    model, ref = mlp(), mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    d = DeAR(model, opt, fusion="layers", comm_model=CommModel(1e-4, 1e-9, 1e-4, 1e-9))
    ddp_model = DDP(ref, device_ids=[dev], process_group=gloo)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for x, y in data:
        opt.zero_grad()
        torch.nn.functional.cross_entropy(d(x), y).backward()
        d.step()
        ref_opt.zero_grad()
        torch.nn.functional.cross_entropy(ddp_model(x), y).backward()
        ref_opt.step()
    d.flush()
    assert d._groups and all(grp.flat.device == dev for grp in d._groups), "DeAR's buffers: not on the GPU"
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).cpu()
    want = torch.cat([p.detach().reshape(-1) for p in ref.parameters()]).cpu()
    torch.testing.assert_close(flat, want, rtol=1e-5, atol=1e-6)
    d.close()
    print("ok", r)
    dist.destroy_process_group()


def spardl() -> None:
    """SparDL's sparse_allreduce on CUDA tensors against the same calls on host tensors: with error feedback over
    a few iterations, 1 and P teams, float32 and bfloat16, small and large (the host takes its threshold method,
    the GPU the exact torch.topk) - the same selection, result and residuals; results, selection and residuals
    on the GPU; inputs produced and results consumed on a non-default stream."""
    from host.spardl import SparDLState, sparse_allreduce

    dist.init_process_group("dlcp")
    r, P = dist.get_rank(), dist.get_world_size()
    dev = _device()
    side = torch.cuda.Stream(dev)
    for dtype in (torch.float32, torch.bfloat16):
        for n in (3000, 1_000_000):
            for teams in (1, P):
                on_gpu, on_host = SparDLState(), SparDLState()
                for it in range(3):
                    xs = _inputs(n + it, dtype, P)[r][:n]
                    host = xs.clone()
                    ref = sparse_allreduce(host, 0.01, teams, state=on_host, key="g")
                    with torch.cuda.stream(side):
                        x = (xs.to(dev, non_blocking=True) * 2) / 2  # kernels queued right before the call
                        got = sparse_allreduce(x, 0.01, teams, state=on_gpu, key="g")
                        y = x * 1  # a kernel after the call: must see the result
                    side.synchronize()
                    what = f"sparse_allreduce {dtype} n={n} teams={teams} iteration {it}"
                    assert got.tensor is x and y.device == dev, what
                    assert got.selected.device == dev and got.residual.device == dev, what
                    assert on_gpu.residuals["g"].device == dev, what
                    assert torch.equal(got.selected.cpu(), ref.selected), what
                    torch.testing.assert_close(y.cpu(), host, rtol=1e-6, atol=0, msg=what)
                    torch.testing.assert_close(got.residual.cpu(), ref.residual, rtol=1e-6, atol=0, msg=what)
                    assert got.bytes_sent == ref.bytes_sent and got.h == ref.h, what
    avg = _inputs(4096, torch.float32, P)[r].to(dev)
    want = _inputs(4096, torch.float32, P)[r]
    sparse_allreduce(avg, 0.05, average=True)
    sparse_allreduce(want, 0.05, average=True)
    torch.testing.assert_close(avg.cpu(), want, rtol=1e-6, atol=0)
    dist.barrier()
    print("ok", r)
    dist.destroy_process_group()


def _train_ddp(model: torch.nn.Module, dev: torch.device, hook_state, data) -> tuple[torch.Tensor, set]:
    """A few SGD steps of DDP with the SparDL hook on ``dev``; the weights and the devices of the hook futures'
    values."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    from host.spardl import spardl_hook

    seen: set = set()

    def hook(state, bucket):
        def record(f):
            seen.add((f.value().device, bucket.buffer().device))
            return f.value()
        return spardl_hook(state, bucket).then(record)

    model.to(dev)
    ddp_model = DDP(model, device_ids=[dev] if dev.type == "cuda" else None, bucket_cap_mb=0.001)
    ddp_model.register_comm_hook(hook_state, hook)
    opt = torch.optim.SGD(ddp_model.parameters(), lr=0.1)
    for x, y in data:
        opt.zero_grad()
        torch.nn.functional.cross_entropy(ddp_model(x.to(dev)), y.to(dev)).backward()
        opt.step()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).cpu(), seen


def spardl_ddp() -> None:
    """DDP on the GPU with the SparDL comm hook against the same on the host, from the same weights and data
    (float64, so that the GPU's and the host's matmuls, which differ in the last bits, cannot change which
    entries are selected): the same weights; the hook's futures hold the bucket on the bucket's device;
    residuals on the GPU."""
    from host.spardl import SparDLHookState

    dist.init_process_group("dlcp")
    r, P = dist.get_rank(), dist.get_world_size()
    dev = _device()
    torch.manual_seed(0)
    base = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4)).double()
    g = torch.Generator().manual_seed(100 + r)
    data = [(torch.randn(16, 20, generator=g, dtype=torch.float64), torch.randint(0, 4, (16,), generator=g))
            for _ in range(6)]
    results = []
    for where in (dev, torch.device("cpu")):
        model = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4)).double()
        model.load_state_dict(base.state_dict())
        model.to(where)
        state = SparDLHookState(0.05, teams=P if P % 2 == 0 else 1, dense_iterations=1, model=model)
        weights, seen = _train_ddp(model, where, state, data)
        results.append(weights)
        assert seen == {(where, where)}, f"hook future values on {seen}, buckets on {where}"
        assert state.state.residuals and all(t.device == where for t in state.state.residuals.values())
        assert all(t.device == where for t in state.state_dict()["sparse"]["residuals"].values())
        state.close()
    torch.testing.assert_close(results[0], results[1], rtol=1e-9, atol=1e-12)
    print("ok", r)
    dist.destroy_process_group()


def spardl_dear() -> None:
    """DeAR with SparDLCompressor on the GPU against the same on the host (float64, as spardl_ddp): the same
    weights after a few steps; the compressor's residuals on the GPU."""
    from host.dear import DeAR
    from host.dear.fusion import CommModel
    from host.spardl import SparDLCompressor

    dist.init_process_group("dlcp")
    r = dist.get_rank()
    dev = _device()
    g = torch.Generator().manual_seed(100 + r)
    data = [(torch.randn(16, 12, generator=g, dtype=torch.float64), torch.randint(0, 4, (16,), generator=g))
            for _ in range(5)]
    out = []
    for where in (dev, torch.device("cpu")):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(12, 24), torch.nn.ReLU(), torch.nn.Linear(24, 4)).double()
        model.to(where)
        comp = SparDLCompressor(0.1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        d = DeAR(model, opt, fusion="layers", comm_model=CommModel(1e-4, 1e-9, 1e-4, 1e-9), compressor=comp)
        for x, y in data:
            opt.zero_grad()
            torch.nn.functional.cross_entropy(d(x.to(where)), y.to(where)).backward()
            d.step()
        d.flush()
        res = comp.residuals_by_param()
        assert res and all(t.device == where for t in res.values()), {t.device for t in res.values()}
        out.append(torch.cat([p.detach().reshape(-1) for p in model.parameters()]).cpu())
        d.close()
        comp.close()
    torch.testing.assert_close(out[0], out[1], rtol=1e-9, atol=1e-12)
    print("ok", r)
    dist.destroy_process_group()


if __name__ == "__main__":
    {"collectives": collectives, "ddp": ddp, "dear": dear, "spardl": spardl, "spardl_ddp": spardl_ddp,
     "spardl_dear": spardl_dear}[sys.argv[1]]()
    exit_process()  # not interpreter finalization: see host/procexit.py
