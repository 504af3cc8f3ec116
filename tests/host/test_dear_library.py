"""DeAR and SparDL as libraries: the compressor contract across re-plans (residuals tied to parameter ranges), the
state a checkpoint carries, buffers synchronised per forward, unused parameters, a collective-safe flush().

In-process: SparDLState's regrouping and state_dict, the tuner's state round trip, the autograd-graph walk.
Real processes (tests/host/dear_lib_worker.py, gloo): the wrapper's behaviour, see that module's docstring."""

from __future__ import annotations

import pytest
import torch

from host.dear.compressor import GroupLayout, ParamSlot
from host.dear.tuner import BayesTuner
from host.dear.wrapper import _reachable_params
from host.spardl.api import SparDLState

from .dist_run import check, launch

WORKER = "tests.host.dear_lib_worker"


def _per_param(state: SparDLState) -> dict[str, list[float]]:
    return {k: v.tolist() for k, v in sorted(state.residuals_by_param().items())}


def _fake_round(state: SparDLState, key, layout, n: int, residual: torch.Tensor) -> None:
    """What a SparDL call does to the state: take the key's input buffers, leave ``residual`` as the new one."""
    state.buffers_for(key, torch.zeros(n), layout)
    state.residuals[key] = residual.clone()


def test_residuals_follow_their_parameters_across_a_regrouping() -> None:
    st = SparDLState()
    a, b, c = ("a", 0, 2), ("b", 2, 3), ("c", 0, 1)
    _fake_round(st, 0, (a, b), 6, torch.tensor([1., 2., 3., 4., 5., 9.]))  # 6: padded; padding holds 9
    _fake_round(st, 1, (c,), 2, torch.tensor([7., 0.]))
    before = _per_param(st)
    assert before == {"a": [1., 2.], "b": [3., 4., 5.], "c": [7.]}
    # the plan changes: group 0 = c then a, group 1 = b
    new0 = (("c", 0, 1), ("a", 1, 2))
    res0, addend = st.buffers_for(0, torch.ones(4), new0)
    assert addend is not None and res0.tolist() == [7., 1., 2., 0.]
    st.residuals[0] = res0
    assert st.layouts[0] == new0 and 1 not in st.layouts  # group 1's residual was released into pieces
    res1, _ = st.buffers_for(1, torch.ones(4), (("b", 0, 3),))
    assert res1.tolist() == [3., 4., 5., 0.]
    st.residuals[1] = res1
    assert _per_param(st) == before  # nothing dropped, nothing moved to another parameter
    # an unchanged layout keeps the residual buffer itself (no copy)
    buf, _ = st.buffers_for(1, torch.ones(4), (("b", 0, 3),))
    assert buf is res1


def test_sparse_state_dict_is_per_parameter_and_survives_another_plan() -> None:
    st = SparDLState()
    _fake_round(st, 0, (("a", 0, 2), ("b", 2, 1)), 4, torch.tensor([1., 2., 3., 0.]))
    sd = st.state_dict()
    assert {k: v.tolist() for k, v in sd["residuals"].items()} == {"a": [1., 2.], "b": [3.]}
    st2 = SparDLState()
    st2.load_state_dict(sd)
    r, addend = st2.buffers_for(5, torch.zeros(4), (("b", 0, 1), ("a", 1, 2)))
    assert addend is not None and r.tolist() == [3., 1., 2., 0.]
    # without a layout (the old key-only use) the state behaves as before: the residual of the same key
    st3 = SparDLState()
    st3.residuals["k"] = torch.tensor([1., 1.])
    assert st3.buffers_for("k", torch.zeros(2))[0].tolist() == [1., 1.]


def test_group_layout_key_names_parameter_ranges() -> None:
    lay = GroupLayout(0, (ParamSlot("fc.weight", 0, 6), ParamSlot("fc.bias", 6, 2)), 8)
    assert lay.key == (("fc.weight", 0, 6), ("fc.bias", 6, 2))
    assert GroupLayout(3, lay.params, 10).key == lay.key  # index and padding do not change what it holds


def test_tuner_state_round_trip_gives_the_same_next_point() -> None:
    def key(x: float) -> int:
        return int(x)

    t = BayesTuner(0, 8, n_init=2, x0=3, seed=4)
    for _ in range(3):
        x = t.ask(key)
        t.tell(x, (x - 5) ** 2 + 1, key=key(x))
    t2 = BayesTuner(0, 1, n_init=1, seed=0)
    t2.load_state_dict(t.state_dict())
    assert t2.xs == t.xs and t2.ys == t.ys
    assert t2.ask(key) == t.ask(key)


def test_reachable_params_walks_the_autograd_graph() -> None:
    used, unused = torch.nn.Linear(3, 3), torch.nn.Linear(3, 3)
    x = torch.randn(2, 3)
    h = used(x)
    for _ in range(30):  # a DAG: each node feeds two (the walk must not blow up)
        h = h + torch.tanh(h)
    unused(x)
    found = _reachable_params({"out": [h], "aux": (1, "x")})
    assert found == {id(p) for p in used.parameters()}
    assert _reachable_params(used.weight) == {id(used.weight)}  # a leaf output counts itself


@pytest.mark.slow
def test_dear_and_spardl_library_contract_in_real_processes() -> None:
    """BatchNorm buffers == DDP's; unused parameters no longer hold back lower groups (== DDP with
    find_unused_parameters); checkpoint/resume == uninterrupted (dense + tuner, DeAR + SparDL, DDP + SparDL hook);
    conservation across DeAR re-plans and DDP's bucket rebuild; flush() raises within its timeout."""
    names = "buffers,unused,resume,conserve,flush-timeout"
    out = check(launch(WORKER, names, 2, timeout=200))
    for r, o in enumerate(out):
        for name in names.split(","):
            if name != "flush-timeout" or r == 0:
                assert f"ok {name} {r}" in o, o
    assert "flush error after" in out[0], out[0]


def test_optimizer_step_instead_of_dear_step_fails_at_the_call() -> None:
    """Issue 46: ``opt.step()`` (or ``scaler.step(opt)``) in place of ``dear.step()`` used to surface one backward
    later as "gradient of fc2.bias arrived after fusion group 0 was already sent". Now it fails at the call, naming
    ``dear.step()``, before any parameter changes; the run then goes on equal to DDP, and ``close()`` makes the
    optimizer plain again (2 real processes over gloo)."""
    out = check(launch(WORKER, "mistake", 2, timeout=200))
    for r, o in enumerate(out):
        assert f"ok mistake {r}" in o, o


@pytest.mark.slow
def test_dear_with_autocast_and_grad_scaler_matches_ddp() -> None:
    """#33 item 5: DeAR under ``torch.autocast`` (CPU, bf16) with ``dear.step(scaler)`` behaves as DDP with
    ``scaler.step(optimizer)``: the same parameters and loss scale at every step, and an inf gradient on one rank
    skips the step on both ranks (parameters, optimizer step count unchanged; the scale halved). A bf16 model's
    gradients stay bf16 through DeAR's buffers and collectives (no float32 round trip) and match DDP's."""
    out = check(launch(WORKER, "amp,bf16", 2, timeout=200))
    for r, o in enumerate(out):
        assert f"ok amp {r}" in o and f"ok bf16 {r}" in o, o
