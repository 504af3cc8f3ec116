"""Suite-wide rules.

Under CI (``CI=true``) a skipped test is a failure: CI machines are root Debian hosts with everything `make setup`
installs, so a skip there means a test silently did not run, and that must not count as passing.
"""

from __future__ import annotations

import os

import pytest


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        return
    skipped = reporter.stats.get("skipped", [])
    if os.environ.get("CI") == "true" and skipped and session.exitstatus == 0:
        reporter.write_line(f"CI: {len(skipped)} test(s) skipped; under CI every test must run", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session")
def root_required() -> None:
    """For tests that create network namespaces: fail (not skip) when not root, saying why."""
    if os.geteuid() != 0:
        pytest.fail("this test creates network namespaces and needs root (run `make test` as root)")
