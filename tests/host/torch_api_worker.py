"""Scenarios run by tests/host/test_torch_api.py in real processes: PyTorch's newer APIs (functional collectives,
DeviceMesh, DTensor, FSDP2) on the dlcp backend against gloo in the same processes, and point-to-point and
life-cycle cases (receives posted before their sends, any-source receives, batches, coalescing, monitored
barrier, abort, destroying subgroups)."""

from __future__ import annotations

import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from host.procexit import exit_process


def _init() -> tuple[int, int, dist.ProcessGroup]:
    dist.init_process_group("dlcp")
    return dist.get_rank(), dist.get_world_size(), dist.new_group(backend="gloo")


def _data(shape, seed: int) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def _same_sum(a: torch.Tensor, b: torch.Tensor, what: str) -> None:
    """Reductions: a sum of two is the same bits in either order, so dlcp equals gloo exactly on 2 ranks; on more
    the two add in different orders (the ring's fixed order here, gloo's own there)."""
    if dist.get_world_size() == 2:
        assert torch.equal(a, b), f"{what}: dlcp differs from gloo"
    else:
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, msg=lambda m: f"{what}: {m}")


def registration_and_functional() -> None:
    """The group is torch's own ProcessGroup with a name; functional collectives give gloo's results."""
    import torch.distributed._functional_collectives as fc

    r, P, gloo = _init()
    pg = dist.group.WORLD
    assert type(pg) is dist.ProcessGroup, type(pg)
    be = pg._get_backend(torch.device("cpu"))
    assert pg.group_name and be.name() == "dlcp" and dist.get_backend(pg) == "dlcp", (pg.group_name, be.name())
    from host.backend import DlcpBackend, dlcp_backend
    assert isinstance(dlcp_backend(), DlcpBackend) and dlcp_backend().options.timeout > 0
    sub = dist.new_group([0, 1])
    if r < 2:
        assert sub.group_name != pg.group_name and dist.get_backend(sub) == "dlcp"

    x = _data((P * 6, 5), seed=r)
    w = dist.all_reduce(x.clone(), async_op=True)  # torch hands back dlcp's own work, with its loss report
    assert w.wait() and type(w).__name__ == "DlcpWork" and w.lost_ranges == [], (type(w), w.lost_ranges)
    for name, fn in (
        ("all_reduce", lambda g: fc.all_reduce(x, "sum", g)),
        ("all_reduce avg", lambda g: fc.all_reduce(x, "avg", g) if g is pg else fc.all_reduce(x, "sum", g) / P),
        ("all_gather_tensor", lambda g: fc.all_gather_tensor(x, 0, g)),
        ("reduce_scatter_tensor", lambda g: fc.reduce_scatter_tensor(x, "sum", 0, g)),
        ("all_to_all_single", lambda g: fc.all_to_all_single(x, None, None, g)),
        ("broadcast", lambda g: fc.broadcast(x, 1, g)),
        ("all_reduce_coalesced", lambda g: torch.cat(fc.all_reduce_coalesced([x, 2 * x], "max", g))),
    ):
        a, b = fn(pg), fn(gloo)
        a = a.wait() if hasattr(a, "wait") else a
        b = b.wait() if hasattr(b, "wait") else b
        _same_sum(a, b, name)
    # the dispatcher's ops by group name, as torch.compile'd code calls them
    y = torch.ops._c10d_functional.all_reduce(x, "sum", pg.group_name)
    y = torch.ops._c10d_functional.wait_tensor(y)
    _same_sum(y, fc.all_reduce(x, "sum", gloo), "_c10d_functional.all_reduce by name")
    print("ok", r)
    dist.destroy_process_group()


def mesh_and_dtensor() -> None:
    """init_device_mesh on the default backend is dlcp; DTensor ops on it equal the same ops on a gloo mesh."""
    from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    r, P, gloo = _init()
    mesh = init_device_mesh("cpu", (P,), mesh_dim_names=("dp",))
    assert dist.get_backend(mesh.get_group("dp")) == "dlcp"
    ref = DeviceMesh.from_group(gloo, "cpu")
    if P == 4:  # a 2-D mesh: its row and column groups are dlcp subgroups
        mesh2 = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        for d in ("dp", "tp"):
            g = mesh2.get_group(d)
            assert dist.get_backend(g) == "dlcp" and g.size() == 2
            t = torch.tensor([float(r)])
            dist.all_reduce(t, group=g)
            peers = dist.get_process_group_ranks(g)
            assert t.item() == float(sum(peers)), (d, peers, t)

    a = _data((P * 4, 6), seed=0)  # the same full tensors everywhere
    b = _data((6, 3), seed=1)
    results = []
    for m in (mesh, ref):
        da = distribute_tensor(a, m, [Shard(0)])
        db = distribute_tensor(b, m, [Replicate()])
        c = (da @ db).redistribute(m, [Replicate()]).to_local()  # all-gather
        s = da.sum(dim=0).full_tensor()  # partial sums: all-reduce
        cols = distribute_tensor(a, m, [Shard(1)]).redistribute(m, [Shard(0)]).to_local()  # all-to-all
        results.append((c, s, cols))
    (u, v, w), (x, y, z) = results
    assert torch.equal(u, x) and torch.equal(w, z), "DTensor data movement on dlcp differs from gloo"
    _same_sum(v, y, "DTensor partial sum")
    assert torch.allclose(results[0][0], a @ b, atol=1e-5) and torch.allclose(results[0][1], a.sum(0), atol=1e-5)
    print("ok", r)
    dist.destroy_process_group()


class _Model(torch.nn.Module):
    """A small transformer: embedding, two encoder layers, a head."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(50, 32)
        self.layers = torch.nn.ModuleList(
            torch.nn.TransformerEncoderLayer(32, 4, dim_feedforward=64, dropout=0.0, batch_first=True)
            for _ in range(2))
        self.head = torch.nn.Linear(32, 50)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.emb(x)
        for layer in self.layers:
            h = layer(h)
        return self.head(h)


def fsdp2() -> None:
    """fully_shard on a dlcp mesh and on a gloo mesh from the same weights and data: the same losses and weights
    after a few steps."""
    from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
    from torch.distributed.fsdp import fully_shard

    r, P, gloo = _init()
    runs = {}
    for name, mesh in (("dlcp", init_device_mesh("cpu", (P,))), ("gloo", DeviceMesh.from_group(gloo, "cpu"))):
        torch.manual_seed(0)
        model = _Model()
        for layer in model.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        g = torch.Generator().manual_seed(100 + r)
        losses = []
        x = torch.randint(0, 50, (4, 12), generator=g)  # one batch per rank, learnt over the steps
        for _ in range(4):
            loss = torch.nn.functional.cross_entropy(model(x).reshape(-1, 50), torch.roll(x, 1, 1).reshape(-1))
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.detach())
        weights = torch.cat([p.full_tensor().reshape(-1) for p in model.parameters()])
        runs[name] = (torch.stack(losses), weights)
    (la, wa), (lb, wb) = runs["dlcp"], runs["gloo"]
    assert torch.equal(la, lb), f"losses differ: dlcp {la.tolist()} gloo {lb.tolist()}"
    assert torch.equal(wa, wb), f"weights differ by up to {(wa - wb).abs().max().item()}"
    assert la[-1] < la[0], f"not training: {la.tolist()}"
    print("ok", r, "losses", [round(v, 4) for v in la.tolist()])
    dist.destroy_process_group()


def p2p() -> None:
    """Receives posted before their sends, any-source receives, batch_isend_irecv, coalesced collectives."""
    r, P, gloo = _init()
    nxt, prv = (r + 1) % P, (r - 1) % P
    # five irecv posted before the matching isend on both sides: no thread is tied up per receive
    bufs = [torch.empty(1000 + k) for k in range(5)]
    recvs = [dist.irecv(b, prv, tag=k) for k, b in enumerate(bufs)]
    time.sleep(0.2)
    sends = [dist.isend(torch.full((1000 + k,), float(10 * r + k)), nxt, tag=k) for k in range(5)]
    for w in recvs[::-1] + sends:
        w.wait()
    for k, b in enumerate(bufs):
        assert torch.equal(b, torch.full((1000 + k,), float(10 * prv + k))), k
    # more receives than a thread pool would have, in reverse tag order against the sends
    bufs = [torch.empty(10) for _ in range(12)]
    recvs = [dist.irecv(b, prv, tag=100 + k) for k, b in enumerate(bufs)]
    sends = [dist.isend(torch.full((10,), float(k)), nxt, tag=100 + k) for k in reversed(range(12))]
    for w in recvs + sends:
        w.wait()
    assert all(torch.equal(b, torch.full((10,), float(k))) for k, b in enumerate(bufs))

    # recv from any source: rank 0 collects one message from every other rank, in arrival order
    if r == 0:
        got = {}
        for _ in range(P - 1):
            t = torch.empty(3)
            src = dist.recv(t)
            got[src] = t[0].item()
        assert got == {s: float(s) for s in range(1, P)}, got
    else:
        dist.send(torch.full((3,), float(r)), 0)
    dist.barrier(group=gloo)  # each sender's second message only now: the any-source receives took one from each
    if r == 0:
        t = torch.empty(3)  # named-source recvs on the same tag take what the second any-source recv posted ahead
        for s in range(1, P):
            dist.recv(t, s)
            assert t[0].item() == 100.0 + s, (s, t)
    else:
        dist.send(torch.full((3,), 100.0 + r), 0)

    # batch_isend_irecv around the ring
    out = torch.empty(7)
    ops = [dist.P2POp(dist.isend, torch.full((7,), float(r)), nxt), dist.P2POp(dist.irecv, out, prv)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    assert torch.equal(out, torch.full((7,), float(prv)))

    # coalesced collectives: all_gather_coalesced, all_reduce_coalesced, the _coalescing_manager paths
    ins = [_data((k + 2,), seed=r * 10 + k) for k in range(4)]  # a[q][k]: rank q's input k
    a = [[torch.empty(k + 2) for k in range(4)] for _ in range(P)]
    b = [[torch.empty(k + 2) for k in range(4)] for _ in range(P)]
    dist.all_gather_coalesced(a, ins)
    dist.all_gather_coalesced(b, ins, group=gloo)
    for q in range(P):
        assert all(torch.equal(u, v) for u, v in zip(a[q], b[q])), f"all_gather_coalesced from rank {q}"
    assert all(torch.equal(u, v) for u, v in zip(a[r], ins)), "all_gather_coalesced: own inputs"
    from torch.distributed.distributed_c10d import _coalescing_manager
    xs = [_data((P * 3,), seed=r + k) for k in range(3)]
    ys = [x.clone() for x in xs]
    with _coalescing_manager(async_ops=True) as cm:
        for x in xs:
            dist.all_reduce(x)
    cm.wait()
    for y in ys:
        dist.all_reduce(y, group=gloo)
    for x, y in zip(xs, ys):
        _same_sum(x, y, "coalesced all_reduce")
    outs = [torch.empty(P * 3 * P) for _ in range(3)]
    with _coalescing_manager():
        for o, y in zip(outs, ys):
            dist.all_gather_into_tensor(o, y)
    ref = torch.empty(P * 3 * P)
    dist.all_gather_into_tensor(ref, ys[2], group=gloo)
    assert torch.equal(outs[2], ref), "coalesced all_gather_into_tensor"  # the same inputs: equal bits
    outs = [torch.empty(3) for _ in range(3)]
    with _coalescing_manager():
        for o, y in zip(outs, ys):
            dist.reduce_scatter_tensor(o, y)
    ref = torch.empty(3)
    dist.reduce_scatter_tensor(ref, ys[1], group=gloo)
    _same_sum(outs[1], ref, "coalesced reduce_scatter_tensor")
    with _coalescing_manager(device=torch.device("cpu"), async_ops=True) as cm:  # the start/end path
        zs = [x.clone() for x in xs]
        for z in zs:
            dist.all_reduce(z)
    cm.wait()
    for z, x in zip(zs, xs):
        torch.testing.assert_close(z, P * x, msg="coalescing block of all_reduce (start/end path)")
    from tests.host import backend_worker
    backend_worker._check_staged(r)
    print("ok", r)
    dist.destroy_process_group()


def lifecycle() -> None:
    """Subgroups destroyed one by one, a monitored barrier naming the rank that is late, abort."""
    r, P, gloo = _init()
    subs = [dist.new_group([0, 1]), dist.new_group(list(range(P)))]
    t = torch.ones(4)
    dist.all_reduce(t, group=subs[1])
    assert torch.equal(t, torch.full((4,), float(P)))
    dist.destroy_process_group(subs[1])
    if r < 2:
        dist.all_reduce(t, group=subs[0])
        assert torch.equal(t, torch.full((4,), 2.0 * P))
    dist.destroy_process_group(subs[0])
    again = dist.new_group(list(range(P)))  # groups keep working after others were destroyed
    dist.all_reduce(t, group=again)
    dist.barrier()

    pg = dist.group.WORLD
    pg.monitored_barrier(timeout=timedelta(seconds=10))  # everyone arrives
    late = P - 1
    if r == late:
        time.sleep(2.5)
    try:
        pg.monitored_barrier(timeout=timedelta(seconds=1), wait_all_ranks=True)
    except RuntimeError as e:
        assert r != late or "failed to pass monitoredBarrier" in str(e), e
        assert f"Rank {late} failed to pass monitoredBarrier in 1000 ms" in str(e), str(e)
        print("barrier error", r, str(e).splitlines()[0])
    else:
        raise AssertionError("the late rank was not named")
    dist.barrier(group=gloo)

    # abort does not wait for queued work: rank 1 never joins these all-reduces
    if r == 0:
        works = [dist.all_reduce(torch.ones(10), async_op=True) for _ in range(3)]
        t0 = time.monotonic()
        pg.abort()
        took = time.monotonic() - t0
        assert took < 5, f"abort waited {took:.1f}s"
        errors = []
        for w in works:
            try:
                w.wait()
            except Exception as e:  # noqa: BLE001 - the point
                errors.append(str(e))
        assert len(errors) == 3 and sum("aborted" in e for e in errors) >= 2, errors
        print("aborted", r, f"{took:.2f}s")
    dist.barrier(group=gloo)
    print("ok", r)


if __name__ == "__main__":
    torch.set_num_threads(1)
    if __import__("os").environ.get("DLCP_TEST_STAGE_HOST") == "1":  # (tests/host/backend_worker.py)
        from tests.host import backend_worker
        backend_worker.STAGED = backend_worker._stage_host_tensors()
    {"functional": registration_and_functional, "dtensor": mesh_and_dtensor, "fsdp2": fsdp2, "p2p": p2p,
     "lifecycle": lifecycle}[sys.argv[1]]()
    exit_process()  # not interpreter finalization: see host/procexit.py
