"""The README's quick-start, run as it is written: its shell block (between the ``quick-start`` markers) as one
bash script, in the repository, with ``.venv/bin`` on PATH, as root with real namespaces, veths, dlcp-switch on
:9559 and dlcpctl. Then what a user meets when a host's MAC is not the one in the network file: ``diff`` and
``apply`` name the host, both MACs and the file (it used to be a silent blackhole)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.netns import list_namespaces, run

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

pytestmark = [pytest.mark.slow, pytest.mark.netns]


def quickstart_block() -> str:
    text = (ROOT / "README.md").read_text()
    m = re.search(r"<!-- quick-start: begin -->\n```sh\n(.*?)```\n<!-- quick-start: end -->", text, re.S)
    assert m, "README.md has no quick-start block between its markers"
    return m.group(1)


def _env() -> dict[str, str]:
    return dict(os.environ, PATH=f"{BIN}:{os.environ.get('PATH', '')}", COLUMNS="200", OMP_NUM_THREADS="1")


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@pytest.fixture
def clean_hosts(root_required):
    """The quick-start's names must be free, and are removed whatever happens."""
    taken = [n for n in ("h1", "h2") if n in list_namespaces()]
    if taken:
        pytest.fail(f"namespaces {taken} exist already (dlcp-testbed hosts --delete examples/one-switch.yaml)")
    yield
    for ns in ("h1", "h2"):
        run("ip", "netns", "del", ns, check=False)


def test_readme_quickstart_runs_as_written(clean_hosts) -> None:
    block = quickstart_block()
    assert "dlcp-switch -i 1@veth1 -i 2@veth2" in block and "dlcpctl apply examples/one-switch.yaml" in block
    assert _free(9559), "port 9559 (the quick-start switch's) is in use"
    script = "set -euo pipefail\n" + block
    r = subprocess.run(["bash", "-c", script], cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=240)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    assert "listening on 127.0.0.1:9559" in out, out[-4000:]
    assert re.search(r"3 packets transmitted, 3 received, 0% packet loss", out), out[-4000:]
    assert re.search(r"s1\s.*unchanged", out), out  # dlcpctl saw the switch's start program as its own
    assert "removed h1, h2" in out
    assert not {"h1", "h2"} & set(list_namespaces())
    assert _free(9559)  # `kill %1` stopped the switch


def test_a_host_mac_other_than_the_files_is_reported(clean_hosts, tmp_path: Path) -> None:
    """h2's interface gets another MAC: h1's pings die at h2's kernel; once h2 sends a frame, diff (exit 9) and
    apply (exit 3) name the host, the MAC it sends from, the file's and the file."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    net = tmp_path / "one-switch.yaml"
    net.write_text((ROOT / "examples/one-switch.yaml").read_text().replace("127.0.0.1:9559", f"127.0.0.1:{port}"))
    env = _env()
    r = subprocess.run([str(BIN / "dlcp-testbed"), "hosts", str(net)], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    daemon = subprocess.Popen([str(BIN / "dlcp-switch"), "-i", "1@veth1", "-i", "2@veth2", "--cpu-port", "255",
                               "--grpc-server-addr", f"127.0.0.1:{port}", "p4src/dlcp.p4"], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        def dlcpctl(*args: str) -> subprocess.CompletedProcess:
            return subprocess.run([str(BIN / "dlcpctl"), *args], cwd=ROOT, env=env, capture_output=True, text=True,
                                  timeout=120)

        assert dlcpctl("apply", str(net)).returncode == 0
        ping = ["ip", "netns", "exec", "h1", "ping", "-c", "1", "-W", "2", "10.0.0.2"]
        assert subprocess.run(ping, capture_output=True, timeout=30).returncode == 0
        assert dlcpctl("diff", str(net)).returncode == 0  # h1 and h2 have sent: their MACs are the file's

        run("ip", "-n", "h2", "link", "set", "eth0", "address", "02:00:0a:00:00:99")
        assert subprocess.run(ping, capture_output=True, timeout=30).returncode != 0  # the blackhole
        subprocess.run(["ip", "netns", "exec", "h2", "ping", "-c", "1", "-W", "1", "10.0.0.1"], capture_output=True,
                       timeout=30)  # h2 sends a frame from its new MAC
        message = (f"host h2 at s1:2 sends from 02:00:0a:00:00:99, but the network file ({net}) says "
                   f"hosts.h2.mac: 02:00:0a:00:00:02")
        r = dlcpctl("diff", str(net))
        assert r.returncode == 9 and message in r.stdout, r.stdout + r.stderr
        r = dlcpctl("apply", str(net))
        assert r.returncode == 3, r.stderr
        assert f"dlcpctl: invalid network file: {message}" in r.stderr, r.stderr

        run("ip", "-n", "h2", "link", "set", "eth0", "address", "02:00:0a:00:00:02")  # fixed: works again
        assert subprocess.run(ping, capture_output=True, timeout=30).returncode == 0
        assert dlcpctl("apply", str(net)).returncode == 0
    finally:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(15)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait(5)
        subprocess.run([str(BIN / "dlcp-testbed"), "hosts", "--delete", str(net)], cwd=ROOT, env=env,
                       capture_output=True, timeout=60)
