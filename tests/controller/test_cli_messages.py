"""dlcpctl's messages and exit codes where a user first meets them: how long an unreachable switch was waited
for, a closed standard output (``dlcpctl diff | head -1``), and a threshold on a port the network file does not
use. Each runs the real command line against a real switch daemon (or a closed port)."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import textwrap
from pathlib import Path

import pytest

from controller.errors import EXIT_CODES

from .conftest import PY, ROOT, dlcpctl, start_daemon

pytestmark = pytest.mark.slow


def _net(address: str, connect_timeout: float = 5) -> str:
    return textwrap.dedent(f"""\
        connect_timeout: {connect_timeout}
        switches:
          s1: {{address: "{address}"}}
        hosts:
          h1: {{ip: 10.0.0.1, mac: "00:00:0a:00:00:01", attach: s1:1}}
          h2: {{ip: 10.0.0.2, mac: "00:00:0a:00:00:02", attach: s1:2}}
        """)


@pytest.fixture(scope="module")
def daemon():
    d = start_daemon("s1")
    yield d
    d.stop()


def test_unreachable_reports_the_whole_wait(tmp_path: Path) -> None:
    """A refused connection is retried for connect_timeout; the message says how long that was, not the time of
    the first refusal (it said "unreachable after 0.0 s" after waiting 2 s)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there
    (tmp_path / "n.yaml").write_text(_net(f"127.0.0.1:{port}", connect_timeout=2))
    for cmd in (["apply", str(tmp_path / "n.yaml")], ["diff", str(tmp_path / "n.yaml")],
                ["-n", str(tmp_path / "n.yaml"), "show", "tables"]):
        r = dlcpctl(*cmd)
        assert r.returncode == EXIT_CODES["unreachable"], (cmd, r.stderr)
        m = re.search(rf"switch s1 at 127\.0\.0\.1:{port} unreachable after ([0-9.]+) s: UNAVAILABLE", r.stderr)
        assert m, (cmd, r.stderr)
        assert 1.8 <= float(m.group(1)) <= 2.5, (cmd, r.stderr)


def test_diff_into_a_closed_pipe_keeps_its_exit_code(daemon, tmp_path: Path) -> None:
    """``dlcpctl diff | head -1``: the reader is gone; diff still exits 9 (the switch differs: it has no pipeline
    yet) and says on stderr that its output was cut (rich used to exit 1, saying nothing)."""
    net = tmp_path / "n.yaml"
    net.write_text(_net(daemon.address))
    for extra in ([], ["--json"]):
        read_end, write_end = os.pipe()
        os.close(read_end)  # a reader that has already gone: the first write fails with EPIPE
        try:
            r = subprocess.run([PY, "-m", "controller.cli", "diff", *extra, str(net)], cwd=ROOT, stdout=write_end,
                               stderr=subprocess.PIPE, text=True, timeout=120)
        finally:
            os.close(write_end)
        assert r.returncode == EXIT_CODES["drift"] == 9, (extra, r.returncode, r.stderr)
        assert "standard output was closed before everything was written (broken pipe)" in r.stderr, r.stderr
        assert "exits with its own status 9" in r.stderr
    # the same command with a reader: the same status, no such message
    r = dlcpctl("diff", str(net))
    assert r.returncode == 9 and "pipeline" in r.stdout and "broken pipe" not in r.stderr, r.stderr


def test_set_threshold_on_a_port_the_file_does_not_use(daemon, tmp_path: Path) -> None:
    """``set threshold --port 9`` where the file connects ports 1 and 2: an error naming the port, the switch and
    the file (it used to write the register, which the next apply silently reset)."""
    net = tmp_path / "n.yaml"
    net.write_text(_net(daemon.address))
    assert dlcpctl("apply", str(net)).returncode == 0
    r = dlcpctl("-n", str(net), "set", "threshold", "--port", "9", "--drop", "10")
    assert r.returncode == EXIT_CODES["usage"] == 2, r.stderr
    assert f"port 9 of switch s1 is not used by the network file in {net}" in r.stderr, r.stderr
    assert "ports with thresholds there: 1, 2, 255" not in r.stderr  # the file names no CPU port
    assert "ports with thresholds there: 1, 2)" in r.stderr, r.stderr
    r = dlcpctl("diff", str(net))
    assert r.returncode == 0, r.stdout  # nothing was written
    # a used port still works, and only differing slots are written
    r = dlcpctl("-n", str(net), "set", "threshold", "--port", "2", "--priority", "1", "--drop", "10")
    assert r.returncode == 0, r.stderr
    assert "s1: ~ drop_threshold[17] = 10" in r.stdout, r.stdout
