"""The torch suite's results file (``results/torch_suite.json``): made from the JUnit files pytest writes, the same
by ``make test-torch-suite`` and by ``python -m tests.host.torch_suite``, and rendered by ``make report``."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from testbed import report

from .torch_suite import GLOO_SPECIFIC, ROOT, summarise, write_results

#: A stand-in for PyTorch's suite: outcomes that depend on BACKEND as the real suite's do. Its skips are test
#: data, not skipped tests of ours: the file is written to a temporary directory and run by a pytest of its own
#: (see _junit), because the converter under test must record PyTorch's skip reasons (CUDA-only tests,
#: backend-gated ones) as the real suite reports them. Nothing in this module is skipped.
SUITE = '''
import os
import pytest

BACKEND = os.environ["BACKEND"]


def test_all_reduce_sum():
    pass


def test_get_future():
    if BACKEND != "gloo":
        pytest.skip("get_future is only supported on mpi, nccl and gloo")


def test_all_gather_complex():
    assert BACKEND == "gloo"


def test_broken_fixture(request):
    if BACKEND == "dlcp":
        raise RuntimeError("set-up failed")


@pytest.mark.skip(reason="Need at least 2 CUDA devices")
def test_cuda_only():
    pass


def test_needs_world_size_4():
    pytest.skip("Test requires backend %s to be one of {'gloo'}" % BACKEND if BACKEND == "dlcp"
                else "Skipped due to small world size.")
'''


def _junit(tmp_path: Path, backend: str, *, extra: str = "") -> Path:
    """Run the stand-in suite with pytest for ``backend``; its JUnit file."""
    suite = tmp_path / "suite" / "stand_in_suite.py"
    suite.parent.mkdir(exist_ok=True)
    suite.write_text(SUITE + extra)
    junit = tmp_path / f"{backend}.xml"
    env = {k: v for k, v in os.environ.items() if k != "CI"} | {"BACKEND": backend}
    subprocess.run([sys.executable, "-m", "pytest", str(suite), "-q", "-p", "no:cacheprovider", "-o", "addopts=",
                    f"--junitxml={junit}", "--rootdir", str(suite.parent)], env=env, cwd=suite.parent,
                   capture_output=True, timeout=120)
    assert junit.is_file()
    return junit


@pytest.fixture(scope="module")
def junit(tmp_path_factory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("junit")
    return {"gloo": _junit(tmp, "gloo", extra="\ndef test_only_on_gloo():\n    pass\n"), "dlcp": _junit(tmp, "dlcp")}


def test_summary_holds_each_tests_outcome_reasons_and_the_runs(junit):
    assert "test_get_future" in GLOO_SPECIFIC  # the stand-in borrows a real exception
    got = summarise(junit, command="make test-torch-suite", produced="Both backends run by this command.")
    assert got["tests"] == {
        "test_all_gather_complex": {"gloo": "passed", "dlcp": "failed"},
        "test_all_reduce_sum": {"gloo": "passed", "dlcp": "passed"},
        "test_broken_fixture": {"gloo": "passed", "dlcp": "failed"},
        "test_cuda_only": {"gloo": "skipped", "dlcp": "skipped", "skip": "Need at least 2 CUDA devices"},
        "test_get_future": {"gloo": "passed", "dlcp": "skipped",
                            "skip": "get_future is only supported on mpi, nccl and gloo",
                            "exception": GLOO_SPECIFIC["test_get_future"]},
        "test_needs_world_size_4": {"gloo": "skipped", "dlcp": "skipped",
                                    "skip": "Test requires backend dlcp to be one of {'gloo'}",
                                    "gloo_skip": "Skipped due to small world size."},
        "test_only_on_gloo": {"gloo": "passed"},
    }
    assert got["command"] == "make test-torch-suite" and got["produced"] == "Both backends run by this command."
    assert got["torch"] == importlib.metadata.version("torch") and got["world_size"] == 3
    assert set(got["runs"]) == {"gloo", "dlcp"}
    for run in got["runs"].values():
        assert run["seconds"] >= 0 and run["hostname"] and run["started"][:10] <= got["date"]
    assert got["date"] == max(run["started"] for run in got["runs"].values())[:10]


def test_written_results_render_the_pass_list(junit, tmp_path):
    summary = summarise(junit, command="make test-torch-suite", produced="Both backends run by this command.")
    write_results(summary, tmp_path / "results" / "torch_suite.json", tmp_path / "build")
    text = (tmp_path / "results" / "torch_suite.json").read_text()
    assert json.loads(text) == summary
    assert sum(line.startswith('  "test_') for line in text.splitlines()) == len(summary["tests"])  # one line each
    tables = (tmp_path / "build" / "summary.md").read_text()
    assert tables == report.torch_suite_table(summary) + "\n"
    assert tables.startswith(f"Made by `make test-torch-suite` (world size 3, torch {summary['torch']}, "
                             f"{summary['date']}): 7 tests, passed on gloo 5, on dlcp 1; failed on gloo 0, on dlcp 2.")
    rows = [line for line in tables.splitlines() if line.startswith("| test_")]
    assert rows == ["| test_all_gather_complex | passed | failed |  |",
                    "| test_all_reduce_sum | passed | passed |  |",
                    "| test_broken_fixture | passed | failed |  |",
                    f"| test_get_future | passed | skipped | {GLOO_SPECIFIC['test_get_future']} |",
                    "| test_only_on_gloo | passed | - |  |"]
    assert tables.endswith("Skipped on both (2), with the suite's reasons on dlcp:\n\n"
                           "- Need at least 2 CUDA devices (1)\n"
                           "- Test requires backend dlcp to be one of {'gloo'} (1)\n")


def test_the_command_line_writes_the_same_results_from_earlier_runs(junit, tmp_path):
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "tests.host.torch_suite", "--backend", "gloo", "--backend", "dlcp",
           "--from-junit", f"gloo={junit['gloo']}", "--from-junit", f"dlcp={junit['dlcp']}", "--out", str(out),
           "--results", str(tmp_path / "torch_suite.json"), "--note", "A test's stand-in suite."]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr  # three tests pass on gloo only and are not in GLOO_SPECIFIC
    assert "regressions: ['test_all_gather_complex', 'test_broken_fixture', 'test_only_on_gloo']" in proc.stdout
    got = json.loads((tmp_path / "torch_suite.json").read_text())
    expected = summarise(junit, command=" ".join(["python -m tests.host.torch_suite", *cmd[3:-2]]),
                         produced=f"gloo's outcomes read from {junit['gloo']} (an earlier run's JUnit file). "
                                  f"dlcp's outcomes read from {junit['dlcp']} (an earlier run's JUnit file). "
                                  "A test's stand-in suite.")
    assert got == expected
    assert (out / "summary.md").read_text() == report.torch_suite_table(got) + "\n"


def test_a_file_that_is_not_pytests_junit_is_named(tmp_path, junit):
    bad = tmp_path / "dlcp.xml"
    bad.write_text("<testsuites><testsuite name='x'>")
    with pytest.raises(ValueError, match=r"dlcp\.xml: not a JUnit XML file"):
        summarise({"gloo": junit["gloo"], "dlcp": bad}, command="c", produced="p")
    bad.write_text("<testsuites><testsuite name='x'/></testsuites>")
    with pytest.raises(ValueError, match=r"dlcp\.xml: no <testsuite timestamp=\.\.\. time=\.\.\.>"):
        summarise({"gloo": junit["gloo"], "dlcp": bad}, command="c", produced="p")
    with pytest.raises(ValueError, match=r"no JUnit file for \['dlcp'\]"):
        summarise({"gloo": junit["gloo"]}, command="c", produced="p")
