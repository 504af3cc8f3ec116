"""Shared helpers for the embedded P4 target tests."""
from pathlib import Path

import pytest

PROGRAMS = Path(__file__).parent / "programs"


@pytest.fixture
def prog_path():
    return lambda name: str(PROGRAMS / name)
