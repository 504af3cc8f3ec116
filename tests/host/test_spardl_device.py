"""SparDL's device handling, checked on the host (CI has no GPU; ``make test-cuda`` runs SparDL on CUDA tensors).

What a host can check honestly, and what each test here does:

* **The device code path computes what the host path computes.** Device tensors take other code than host ones:
  the exact selection by ``torch.topk`` with the position rule for ties instead of numpy's threshold method,
  torch indexing instead of numpy views, and every message's entries staged through ``host.staging.Staged``.
  :func:`test_device_code_path_on_host_equals_host_path` runs whole SparDL programs with host tensors forced down
  that path (the numpy fast paths and the threshold method switched off, staging switched on for host memory) and
  requires the same bits as the normal host run, with many ties. What it cannot check: CUDA's kernels and streams.
* **Every tensor SparDL allocates follows the input's device** (or is a host wire buffer).
  :func:`test_allocations_follow_the_input_device` runs SparDL, the baselines and the residual bookkeeping with
  ``meta`` as the default device: any allocation that does not name its device becomes a meta tensor and fails
  or shows up in the outputs' devices. (The ``meta`` device itself cannot run SparDL: selection has data-dependent
  sizes, which meta tensors do not have.) This is also what a user who called ``torch.set_default_device("cuda")``
  needs.
"""

from __future__ import annotations

import pytest
import torch

from host import sparse_wire as sw
from host.spardl import SparDLState, select, sparse_allreduce, sparse_ops
from host.spardl import device as dv
from host.spardl.baselines import gtopk, topk_allgather
from host.spardl.exchange import run_simulated
from host.spardl.program import Plan, decode_message, encode_message, spardl
from host.staging import DeviceStreams, Staged


def _inputs(P: int, n: int, dtype: torch.dtype, seed: int) -> list[torch.Tensor]:
    """Gradients with many exact ties (quarter steps) and a random part."""
    g = torch.Generator().manual_seed(seed)
    return [(torch.randint(-40, 41, (n,), generator=g) / 4 + (torch.rand(n, generator=g) < 0.3)
             * torch.randn(n, generator=g)).to(dtype) for _ in range(P)]


def _run(P: int, d: int, density: float, grads: list[torch.Tensor], residuals: list[torch.Tensor]) -> list:
    """One SparDL all-reduce of ``grads`` with error feedback from ``residuals`` (fused, as the library does)."""
    plan = Plan.make(grads[0].numel(), P, d, density, grads[0].dtype)
    return run_simulated([spardl(plan, r, residuals[r].clone(), plan.new_h(r).h, own_input=True,
                                 addend=grads[r].clone()) for r in range(P)])


def _same(a: list, b: list) -> None:
    for x, y in zip(a, b):
        assert torch.equal(x.result, y.result) and torch.equal(x.residual, y.residual)
        assert torch.equal(x.selected, y.selected) and x.union == y.union and x.bytes_sent == y.bytes_sent


@pytest.mark.parametrize("P,d", [(4, 1), (4, 2), (3, 1), (6, 3)])
def test_device_code_path_on_host_equals_host_path(monkeypatch, P: int, d: int) -> None:
    n = (1 << 15) * P + 13  # blocks large enough for the host's threshold method
    for dtype in (torch.float32, torch.float64):
        grads = _inputs(P, n, dtype, 10 * P + d)
        residuals = [g.flip(0) / 3 for g in grads]
        want = _run(P, d, 0.01, grads, residuals)
        with monkeypatch.context() as m:
            copies = {"in": 0, "out": 0}

            class Counted(Staged):
                def copy_in(self) -> None:
                    copies["in"] += 1
                    super().copy_in()

                def copy_out(self) -> None:
                    copies["out"] += 1
                    super().copy_out()
            m.setattr(select, "numpy_ok", lambda x: False)  # the path device tensors take
            m.setattr(sparse_ops, "numpy_ok", lambda x: False)
            m.setattr(select, "sample_threshold", lambda *a, **k: None)  # exact selection, as on a device
            m.setattr(dv, "_staging", lambda device: DeviceStreams(device))  # every message staged
            m.setattr(dv, "Staged", Counted)
            got = _run(P, d, 0.01, grads, residuals)
        _same(want, got)
        assert copies["in"] > 0 and copies["out"] > 0


def test_device_selection_rule_equals_host_rule() -> None:
    """The device selection (torch.topk for the k-th largest magnitude, then ties by position, NaN as the largest)
    picks exactly the positions numpy's does, ties and NaN included; torch.topk's own choice among ties is not
    specified, which is why SparDL does not use its indices."""
    g = torch.Generator().manual_seed(21)
    for x in (torch.randint(-3, 4, (5000,), generator=g).float(), torch.randn(3000, generator=g),
              torch.tensor([1.0, float("nan"), -1.0, 1.0, float("inf"), 0.0, float("nan"), -1.0])):
        for k in range(0, x.numel() + 2, max(1, x.numel() // 37)):
            host = select.exact_topk(x, k)
            device_rule = (torch.nonzero(select._top_mask_torch(select._magnitudes(x), k)).squeeze(1)
                           if 0 < k < x.numel() else host)
            assert torch.equal(host, device_rule), k
            assert torch.equal(select.exact_topk(x.to(torch.bfloat16), k),
                               select.exact_topk(x.to(torch.bfloat16).clone(), k))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_allocations_follow_the_input_device(dtype) -> None:
    P, n = 4, 40_000
    grads = _inputs(P, n, dtype, 5)
    zeros = [torch.zeros(n, dtype=dtype) for _ in range(P)]
    for d in (1, 2):
        want = _run(P, d, 0.02, grads, zeros)
        with torch.device("meta"):
            got = _run(P, d, 0.02, grads, zeros)
        assert all(o.result.device.type == "cpu" and o.residual.device.type == "cpu"
                   and o.selected.device.type == "cpu" for o in got)
        _same(want, got)
    for fn in (gtopk, topk_allgather):
        want = run_simulated([fn(r, P, g.clone(), 0.02) for r, g in enumerate(grads)])
        with torch.device("meta"):
            got = run_simulated([fn(r, P, g.clone(), 0.02) for r, g in enumerate(grads)])
        _same(want, got)
    # the residual bookkeeping: regrouping a loaded per-parameter residual into a key's new layout
    st = SparDLState()
    st.load_state_dict({"residuals": {"a": torch.ones(3, dtype=dtype), "b": torch.full((5,), 2.0, dtype=dtype)}})
    flat = torch.arange(8, dtype=dtype)
    with torch.device("meta"):
        r, addend = st.buffers_for("k", flat, (("a", 0, 3), ("b", 3, 5)))
    assert r.device.type == "cpu" and torch.equal(r, torch.tensor([1, 1, 1, 2, 2, 2, 2, 2], dtype=dtype))
    assert addend is not None and torch.equal(addend, flat)


def test_staging_round_trip_copies_through_host_stand_ins(monkeypatch) -> None:
    """to_host/to_device with staging on (host memory as the 'device', as host.staging's tests do): new tensors
    with the same contents, independent of the originals, empty ones included; and the wire messages built from
    them decode to the same segments on the 'device'."""
    monkeypatch.setattr(dv, "_staging", lambda device: DeviceStreams(device))
    idx, vals, empty = torch.tensor([3, 7, 9]), torch.tensor([0.5, -1.0, 2.0]), torch.empty(0)
    h_idx, h_vals, h_empty = dv.to_host([idx, vals, empty])
    assert torch.equal(h_idx, idx) and torch.equal(h_vals, vals) and h_empty.numel() == 0
    idx[0] = 4
    assert h_idx[0] == 3  # a copy, not the original
    d_idx, d_vals = dv.to_device([h_idx, h_vals], torch.device("cpu"))
    assert torch.equal(d_idx, h_idx) and d_idx is not h_idx and torch.equal(d_vals, h_vals)
    specs = [sw.SegmentSpec(0, 10, 4), sw.SegmentSpec(1, 300, 2)]
    segs = [sw.Segment(0, d_idx, d_vals), sw.Segment(1, torch.empty(0, dtype=torch.int64), torch.empty(0))]
    got = decode_message(encode_message(specs, segs, torch.float32), specs, torch.float32, torch.device("cpu"))
    assert [s.tag for s in got] == [0, 1]
    assert torch.equal(got[0].indices, d_idx) and torch.equal(got[0].values, d_vals) and got[1].indices.numel() == 0


def test_unsupported_devices_and_device_tensors_on_the_wire_are_refused() -> None:
    with pytest.raises(ValueError, match="meta"):
        sparse_allreduce(torch.zeros(10, device="meta"), 0.1)
    spec = [sw.SegmentSpec(0, 10, 2)]
    with pytest.raises(ValueError, match="host tensors"):
        sw.encode(spec, [sw.Segment(0, torch.zeros(1, dtype=torch.int64, device="meta"),
                                    torch.zeros(1, device="meta"))], torch.float32)
    with pytest.raises(sw.SparseWireError, match="host tensor"):
        sw.decode(torch.zeros(sw.message_bytes(spec, 4), dtype=torch.uint8, device="meta"), spec, torch.float32)
    plan = Plan.make(100, 2, 1, 0.1, torch.float32)
    with pytest.raises(ValueError, match="addend on meta"):
        next(spardl(plan, 0, torch.zeros(100), 10, addend=torch.zeros(100, device="meta")))
