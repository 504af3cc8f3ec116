"""The full run of PyTorch's distributed test suite against gloo and dlcp (``make test-torch-suite``; about an
hour per backend on two cores, so not part of ``make test``, and named so that plain ``pytest tests`` does not
collect it). Writes both backends' outcomes to ``results/torch_suite.json`` (``make report`` renders them into
``docs/torch-suite.md``) and the same tables to ``build/torch-suite/summary.md``."""

from __future__ import annotations

import pytest

from .torch_suite import GLOO_SPECIFIC, ROOT, produced, regressions, run_suite, summarise, write_results


@pytest.mark.torch_suite
@pytest.mark.timeout(6 * 3600)
def test_every_test_passing_on_gloo_passes_on_dlcp() -> None:
    from host.backend_ext import load

    load()
    out = ROOT / "build" / "torch-suite"
    gloo = run_suite("gloo", out / "gloo.xml")
    dlcp = run_suite("dlcp", out / "dlcp.xml")
    junit = {"gloo": out / "gloo.xml", "dlcp": out / "dlcp.xml"}
    write_results(summarise(junit, command="make test-torch-suite", produced=produced(["gloo", "dlcp"], {})),
                  ROOT / "results" / "torch_suite.json", out)
    assert sum(o == "passed" for o in gloo.values()) > 100, "the reference run on gloo did not run"
    bad = regressions(gloo, dlcp)
    assert not bad, f"pass on gloo, not on dlcp (and not in GLOO_SPECIFIC): {bad}"
    stale = sorted(t for t in GLOO_SPECIFIC if gloo.get(t) != "passed" or dlcp.get(t) == "passed")
    assert not stale, f"GLOO_SPECIFIC lists tests that no longer differ: {stale}"
