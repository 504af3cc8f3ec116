"""One rank of a loss scenario (tests/host/test_loss_scenarios.py, tests/host/loss_soak.py), run in a network
namespace whose links drop DLCP datagrams (tests/host/nftloss.py). Every rank checks its own results against a
float64 reference it computes itself (each rank can regenerate every rank's input), ends the job as user scripts
do (``barrier(); destroy_process_group()``), and prints one JSON line: what it found, the digests the test
compares across ranks, its transport counters, or the fatal error (then it exits 1).

``python -m tests.host.loss_scenario_worker SCENARIO`` with SCENARIO one of

* ``colls``: lossy SUM and AVG all-reduces and a lossy reduce-scatter (bound ``LOSS_P``), exact MIN, MAX and
  integer SUM, an all-gather and a broadcast inside a loss scope (exact), ``LOSS_ROUNDS`` times over
  ``LOSS_SIZES`` elements of fp32 and bf16;
* ``dear``: ``LOSS_STEPS`` DeAR steps of an MLP with loss bound ``LOSS_P`` (flushed every ``LOSS_FLUSH_EVERY``
  steps, 0: only at the end), a parameter digest after each flush;
* ``tiny``: ``LOSS_STEPS`` small exact all-reduces: the point is the job's end.

Per call the checks are: an exact call equals the reference bit for bit; a lossy call's elements outside its
``lost_ranges`` match the reference (within rounding of the summation order), its ``lost_ranges`` cover at most
``floor(p * n)`` elements, and each reduce-scatter shard at most ``floor(p * k)`` of its ``k``.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch import nn

import host.backend as hb  # registers "dlcp"
from host.backend import loss_bound_scope
from host.procexit import exit_process


def rtol(dtype: torch.dtype, size: int) -> float:
    """Summation-order rounding allowed between a rank's result and the float64 reference (relative): half an ulp
    per step of the sum, the average's division and the result's own rounding. A lost contribution (inputs are in
    [1, 2), so at least 1 in a sum below 2 * size) is at least 1 / (2 * size) of the element, well above it."""
    return (size + 1) * (2 ** -8 if dtype == torch.bfloat16 else 2 ** -24)


def digest(*tensors: torch.Tensor) -> str:
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:16]


def make_input(rank: int, case: int, n: int, dtype: torch.dtype, kind: str = "pos") -> torch.Tensor:
    """Rank ``rank``'s input of case ``case``: in [1, 2) ("pos", so a lost contribution shows), in [-1.5, -0.5)
    ("neg", so MAX of a zero-filled contribution would show) or integers."""
    g = torch.Generator().manual_seed(1009 * case + rank)
    if not dtype.is_floating_point:
        return torch.randint(-1000, 1000, (n,), generator=g, dtype=dtype)
    x = torch.rand(n, generator=g, dtype=torch.float64)
    return (x + 1.0 if kind == "pos" else x - 1.5).to(dtype)


def lost_mask(lost: list[tuple[int, int]], n: int) -> torch.Tensor:
    m = torch.zeros(n, dtype=torch.bool)
    for a, b in lost:
        m[a:b] = True
    return m


class Checker:
    """Runs the calls of ``colls`` and records, per call, its digest and what was wrong with it."""

    def __init__(self, p: float) -> None:
        self.rank, self.size, self.p = dist.get_rank(), dist.get_world_size(), p
        self.case = 0
        self.calls: list[dict] = []
        self.t0 = time.monotonic()  # (each call's time: from the previous record)

    def inputs(self, n: int, dtype: torch.dtype, kind: str = "pos") -> list[torch.Tensor]:
        self.case += 1
        return [make_input(q, self.case, n, dtype, kind) for q in range(self.size)]

    def record(self, name: str, out: torch.Tensor, ref: torch.Tensor, *, exact: bool,
               lost: list[tuple[int, int]], shards: int = 0) -> None:
        """``out`` against ``ref`` (both over the call's ``n`` elements); ``shards`` > 0: a reduce-scatter whose
        ``n`` elements are that many output shards."""
        n = out.numel()
        o, r = out.to(torch.float64).view(-1), ref.to(torch.float64).view(-1)
        bad = o != r if exact else (o - r).abs() > rtol(out.dtype, self.size) * r.abs()
        covered = lost_mask(lost, n)
        errors = []
        if exact and (lost or bad.any()):
            errors.append(f"exact call differs in {int(bad.sum())} elements, lost {lost}")
        if not exact:
            if (bad & ~covered).any():
                errors.append(f"{int((bad & ~covered).sum())} elements differ outside lost_ranges")
            if int(covered.sum()) > int(self.p * n):
                errors.append(f"lost {int(covered.sum())} of {n} elements, bound {int(self.p * n)}")
            for c in range(shards):
                k = n // shards
                own = int(covered[c * k:(c + 1) * k].sum())
                if own > int(self.p * k):
                    errors.append(f"shard {c} lost {own} of {k}, bound {int(self.p * k)}")
        now = time.monotonic()
        self.calls.append({"call": name, "digest": digest(out), "exact": exact, "zero_filled": int(covered.sum()),
                           "seconds": round(now - self.t0, 3), "errors": errors})
        self.t0 = now


def colls() -> dict:
    p = float(os.environ.get("LOSS_P", "0.05"))
    sizes = [int(s) for s in os.environ.get("LOSS_SIZES", "1001,200003").split(",")]
    rounds = int(os.environ.get("LOSS_ROUNDS", "1"))
    c = Checker(p)
    r, size = c.rank, c.size
    for _ in range(rounds):
        for n in sizes:
            for dt in (torch.float32, torch.bfloat16):
                for op in (dist.ReduceOp.SUM, dist.ReduceOp.AVG):
                    xs = c.inputs(n, dt)
                    ref = torch.stack([x.to(torch.float64) for x in xs]).sum(0)
                    ref = ref / size if op == dist.ReduceOp.AVG else ref
                    t = xs[r].clone()
                    with loss_bound_scope(p):
                        w = dist.all_reduce(t, op=op, async_op=True)
                    w.wait()
                    c.record(f"all_reduce {op} {dt} {n}", t, ref, exact=False, lost=w.lost_ranges)
                k = max(1, n // size)
                xs = c.inputs(k * size, dt)
                out = torch.empty(k, dtype=dt)
                with loss_bound_scope(p):
                    w = dist.reduce_scatter_tensor(out, xs[r].clone(), async_op=True)
                w.wait()
                whole = torch.empty(k * size, dtype=dt)
                dist.all_gather_into_tensor(whole, out)  # (exact: every rank checks every shard)
                ref = torch.stack([x.to(torch.float64) for x in xs]).sum(0)
                c.record(f"reduce_scatter {dt} {k * size}", whole, ref, exact=False, lost=w.lost_ranges,
                         shards=size)
                for op, kind in ((dist.ReduceOp.MIN, "neg"), (dist.ReduceOp.MAX, "neg")):
                    xs = c.inputs(n, dt, kind)
                    t = xs[r].clone()
                    w = dist.all_reduce(t, op=op, async_op=True)
                    w.wait()
                    ref = torch.stack(xs).amin(0) if op == dist.ReduceOp.MIN else torch.stack(xs).amax(0)
                    c.record(f"all_reduce {op} {dt} {n}", t, ref, exact=True, lost=w.lost_ranges)
                xs = c.inputs(n, dt)
                whole = torch.empty(n * size, dtype=dt)
                with loss_bound_scope(p):  # (gathers take no loss bound: exact inside a scope too)
                    w = dist.all_gather_into_tensor(whole, xs[r].clone(), async_op=True)
                w.wait()
                c.record(f"all_gather {dt} {n}", whole, torch.cat(xs), exact=True, lost=w.lost_ranges)
                xs = c.inputs(n, dt)
                t = xs[r].clone()
                with loss_bound_scope(p):
                    w = dist.broadcast(t, src=size - 1, async_op=True)
                w.wait()
                c.record(f"broadcast {dt} {n}", t, xs[size - 1], exact=True, lost=w.lost_ranges)
            xs = c.inputs(n, torch.int64)
            t = xs[r].clone()
            w = dist.all_reduce(t, async_op=True)
            w.wait()
            c.record(f"all_reduce SUM int64 {n}", t, torch.stack(xs).sum(0), exact=True, lost=w.lost_ranges)
    return {"calls": c.calls, "digests": [x["digest"] for x in c.calls]}


def dear() -> dict:
    from host.dear import DeAR

    p = float(os.environ.get("LOSS_P", "0.05"))
    steps = int(os.environ.get("LOSS_STEPS", "10"))
    flush_every = int(os.environ.get("LOSS_FLUSH_EVERY", "1"))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    d = DeAR(model, opt, loss_bound=p, fusion=256 << 10)
    g = torch.Generator().manual_seed(100 + dist.get_rank())
    digests, errors, zero_filled = [], [], 0
    for s in range(steps):
        x, y = torch.randn(32, 256, generator=g), torch.randint(0, 10, (32,), generator=g)
        opt.zero_grad()
        nn.functional.cross_entropy(d(x), y).backward()
        d.step()
        st = d.loss_stats.take()
        zero_filled += st["zero_filled"]
        if st["zero_filled"] > int(p * st["elements"]):
            errors.append(f"step {s}: lost {st['zero_filled']} of {st['elements']} elements, bound {p}")
        if flush_every and (s + 1) % flush_every == 0:
            d.flush()
            digests.append(digest(*model.parameters()))
    d.flush()
    digests.append(digest(*model.parameters()))
    d.close()
    return {"digests": digests, "zero_filled": zero_filled, "calls": [{"call": "dear", "errors": errors}]}


def tiny() -> dict:
    size = dist.get_world_size()
    steps = int(os.environ.get("LOSS_STEPS", "5"))
    t = torch.ones(1000)
    for _ in range(steps):
        dist.all_reduce(t)
    ok = torch.equal(t, torch.full((1000,), float(size) ** steps))
    return {"digests": [digest(t)], "calls": [{"call": "tiny", "errors": [] if ok else [f"result {t[:3]}"]}]}


#: The transport counters reported (every rank's, summed by the test where it asserts one happened).
COUNTERS = ("retransmissions", "duplicates", "rto_timeouts", "tail_probes", "nacks_sent", "zero_filled_elements",
            "refused", "peer_timeouts")

if __name__ == "__main__":
    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    t0 = time.monotonic()
    try:
        dist.init_process_group("dlcp")
        result = {"rank": rank, **{"colls": colls, "dear": dear, "tiny": tiny}[sys.argv[1]]()}
        stats = hb.transport_stats()
        result["dead"] = {str(k): v for k, v in stats.get("dead_peers", {}).items()}
        result["transport"] = {k: stats.get(k) for k in COUNTERS}
        dist.barrier()
        dist.destroy_process_group()
    except BaseException as e:  # noqa: BLE001 - reported, and the exit status says it failed
        print(json.dumps({"rank": rank, "fatal": f"{type(e).__name__}: {e}"[:2000]}), flush=True)
        exit_process(1)
    result["wall_s"] = round(time.monotonic() - t0, 2)
    print(json.dumps(result), flush=True)
    exit_process(0)
