"""Fixtures for the dlcp.p4 tests: a fresh embedded switch per test (the program is compiled once)."""
from __future__ import annotations

import pytest

from switch.target import Switch

from .dlcp_switch import new_switch


@pytest.fixture
def sw() -> Switch:
    """dlcp.p4 on the embedded target, 8 priority queues, no entries (what a controller starts from)."""
    return new_switch()
