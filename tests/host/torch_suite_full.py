"""The full run of PyTorch's distributed test suite against gloo and dlcp (``make test-torch-suite``; about an
hour per backend on two cores, so not part of ``make test``, and named so that plain ``pytest tests`` does not
collect it). Writes the pass list side by side to ``build/torch-suite/summary.md``."""

from __future__ import annotations

import pytest

from .torch_suite import GLOO_SPECIFIC, ROOT, regressions, run_suite, table


@pytest.mark.torch_suite
@pytest.mark.timeout(6 * 3600)
def test_every_test_passing_on_gloo_passes_on_dlcp() -> None:
    from host.backend_ext import load

    load()
    out = ROOT / "build" / "torch-suite"
    gloo = run_suite("gloo", out / "gloo.xml")
    dlcp = run_suite("dlcp", out / "dlcp.xml")
    (out / "summary.md").write_text(table(gloo, dlcp, "make test-torch-suite"))
    assert sum(o == "passed" for o in gloo.values()) > 100, "the reference run on gloo did not run"
    bad = regressions(gloo, dlcp)
    assert not bad, f"pass on gloo, not on dlcp (and not in GLOO_SPECIFIC): {bad}"
    stale = sorted(t for t in GLOO_SPECIFIC if gloo.get(t) != "passed" or dlcp.get(t) == "passed")
    assert not stale, f"GLOO_SPECIFIC lists tests that no longer differ: {stale}"
