"""The project layout: packages import, the testbed does not shadow Mininet, set-up is idempotent."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable


def _run(code: str, cwd: Path) -> str:
    r = subprocess.run([PY, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


@pytest.mark.parametrize("cwd", [ROOT, Path("/")], ids=["from-checkout", "elsewhere"])
def test_real_mininet_not_shadowed(cwd: Path) -> None:
    """`import mininet.net` finds Debian's Mininet even with the checkout (and its mininet/ dir) on sys.path."""
    out = _run("import mininet.net, mininet; print(mininet.net.__file__); print(mininet.__file__)", cwd)
    net_file, pkg_file = out.splitlines()
    assert net_file.startswith("/usr/lib/python3/dist-packages/mininet/"), net_file
    assert pkg_file.startswith("/usr/lib/python3/dist-packages/mininet/"), pkg_file


def test_checkout_first_on_path_keeps_real_mininet_and_testbed() -> None:
    """With the checkout first on sys.path (as `python -m` does), the guard in mininet/__init__.py hands over to
    the real Mininet, and the testbed is still importable as `testbed`."""
    out = _run("import sys; sys.path.insert(0, '.'); import mininet.node; print(mininet.node.__file__)", ROOT)
    assert out.startswith("/usr/lib/python3/dist-packages/mininet/"), out
    out = _run("import mininet.node, testbed, os; print(os.path.realpath(testbed.__file__))", ROOT)
    assert out == str(ROOT / "mininet" / "__init__.py")


@pytest.mark.parametrize("pkg", ["host", "switch", "controller", "testbed", "torch", "finsy", "scapy"])
def test_packages_import(pkg: str) -> None:
    _run(f"import {pkg}", Path("/"))


@pytest.mark.slow
def test_setup_is_idempotent_and_fast() -> None:
    """A second `make setup` installs nothing: it must finish in seconds (the stamp is current)."""
    if os.environ.get("DLCP_IN_MAKE_SETUP"):
        pytest.fail("recursive make")  # pragma: no cover
    t0 = time.monotonic()
    r = subprocess.run(["make", "-s", "setup"], cwd=ROOT, capture_output=True, text=True, timeout=600,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr
    assert "installing" not in r.stdout + r.stderr, r.stdout + r.stderr
    assert time.monotonic() - t0 < 30
