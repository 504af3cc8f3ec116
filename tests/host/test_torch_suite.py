"""PyTorch's distributed test suite on dlcp: a representative subset here (part of ``make test``); the full run
against dlcp and gloo side by side is ``make test-torch-suite`` (``tests/host/torch_suite_full.py``)."""

from __future__ import annotations

import pytest

from .torch_suite import run_suite

#: One test of each kind the backend once failed, plus the plainest collective: each passes on gloo (`make
#: test-torch-suite` writes the whole pass list to build/torch-suite/summary.md).
SUBSET = ["test_all_reduce_sum", "test_all_gather_coalesced_simple", "test_send_recv_any_source",
          "test_destroy_group", "test_irecv", "test_ddp_create_graph"]


@pytest.mark.slow
def test_representative_subset_passes_on_dlcp(tmp_path) -> None:
    from host.backend_ext import load

    load()  # built once here, not by each spawned rank
    res = run_suite("dlcp", tmp_path / "dlcp.xml", select=" or ".join(SUBSET), timeout=900)
    ran = {t: o for t, o in res.items() if t in SUBSET}
    assert sorted(ran) == sorted(SUBSET), f"not run: {sorted(set(SUBSET) - set(ran))}"
    assert all(o == "passed" for o in ran.values()), ran
