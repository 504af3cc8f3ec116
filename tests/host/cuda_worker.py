"""Scenarios run by tests/host/cuda_suite.py (``make test-cuda``): the dlcp backend on CUDA tensors, against gloo's
CUDA path and host computations, in real processes sharing the machine's GPUs (rank r on GPU r % count)."""

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


if __name__ == "__main__":
    {"collectives": collectives, "ddp": ddp, "dear": dear}[sys.argv[1]]()
    exit_process()  # not interpreter finalization: see host/procexit.py
