"""Suite-wide rules.

Under CI (``CI=true``) a skipped test is a failure: CI machines are root Debian hosts with everything `make setup`
installs, so a skip there means a test silently did not run, and that must not count as passing.

``--cpu-load N`` runs the tests beside N busy processes per CPU core (``tests/cpu_load.py``; ``make test-loaded``).
"""

from __future__ import annotations

import os

import pytest

from tests.cpu_load import CpuLoad, cores

_LOAD = pytest.StashKey[CpuLoad]()  # the session's busy processes (--cpu-load)


#: Markers whose tests run only when ``-m`` names them: ``long`` (``make test-long``; the suite's 15-minute budget,
#: docs/development.md, keeps them out of ``make test``, which runs a shorter test of the same machinery for each)
#: and ``bmv2`` (``make test-bmv2``; the real P4 toolchain, tests/bmv2/conftest.py).
OPT_IN = ("long", "bmv2")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    markexpr = config.option.markexpr or ""
    for name in OPT_IN:
        if name in markexpr:
            continue
        out = [i for i in items if i.get_closest_marker(name) is not None]
        if out:
            config.hook.pytest_deselected(items=out)
            items[:] = [i for i in items if i.get_closest_marker(name) is None]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--cpu-load", type=int, default=0, metavar="N",
                     help="run the tests beside N busy processes per CPU core (default 0: none); make test-loaded")


def pytest_configure(config: pytest.Config) -> None:
    load = CpuLoad(config.getoption("--cpu-load"))
    config.stash[_LOAD] = load
    load.start()


def pytest_unconfigure(config: pytest.Config) -> None:
    load = config.stash.get(_LOAD, None)
    if load is not None:
        load.stop()


def pytest_report_header(config: pytest.Config) -> str | None:
    load = config.stash.get(_LOAD, None)
    if load is None or not load.count:
        return None
    return f"cpu load: {load.count} busy processes beside the tests ({load.per_core} per core, {cores()} cores)"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        return
    load = session.config.stash.get(_LOAD, None)
    if load is not None and load.alive() < load.count:
        reporter.write_line(f"--cpu-load: only {load.alive()} of {load.count} busy processes lasted the whole run, "
                            "so the tests did not run under the load asked for", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    skipped = reporter.stats.get("skipped", [])
    if os.environ.get("CI") == "true" and skipped and session.exitstatus == 0:
        reporter.write_line(f"CI: {len(skipped)} test(s) skipped; under CI every test must run", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session")
def root_required() -> None:
    """For tests that create network namespaces: fail (not skip) when not root, saying why."""
    if os.geteuid() != 0:
        pytest.fail("this test creates network namespaces and needs root (run `make test` as root)")
