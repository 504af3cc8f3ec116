"""A second, standard P4Runtime client against dlcp-switch, and dlcpctl beside it.

p4runtime-shell 0.0.6 from PyPI (in its own virtual environment, build/p4runtime-shell, made by
scripts/p4runtime-shell-venv.sh, because it pins protobuf < 3.21) pushes dlcp.p4 the documented way (P4Info from
``python -m switch.compile``, the P4 source as the device config), writes routes, sends PacketOut out of a port
and routed, and receives PacketIn (tests/controller/p4runtime_shell_driver.py). While the shell is primary,
``dlcpctl diff`` and ``apply --dry-run`` read without taking part in the election, and recognise the pipeline the
shell pushed as their own program (by content: the shell sets no cookie). Then ``apply`` keeps that pipeline and
only reconciles the tables. A second test: replacing a pipeline that holds entries of tables dlcpctl does not
manage says so."""

from __future__ import annotations

import asyncio
import json
import queue
import subprocess
import threading
import time
from pathlib import Path

import finsy as fy
import pytest

from .conftest import PY, ROOT, dlcpctl, start_daemon
from .test_packets_tls import veth  # noqa: F401 - the fixture

pytestmark = pytest.mark.slow

VENV = ROOT / "build" / "p4runtime-shell"


@pytest.fixture(scope="module")
def shell_python() -> Path:
    """The p4runtime-shell environment's Python (built on first use: about 15 s from PyPI)."""
    r = subprocess.run(["bash", str(ROOT / "scripts" / "p4runtime-shell-venv.sh"), str(VENV)], cwd=ROOT,
                       capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        pytest.fail(f"cannot build the p4runtime-shell environment (scripts/p4runtime-shell-venv.sh):\n"
                    f"{r.stdout[-2000:]}{r.stderr[-3000:]}")
    return VENV / "bin" / "python"


def compiled_p4info(out_dir: Path) -> Path:
    r = subprocess.run([PY, "-m", "switch.compile", "p4src/dlcp.p4", "--out-dir", str(out_dir), "-I",
                        "p4src/include"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return out_dir / "dlcp.p4info.txtpb"


class Steps:
    """The driver's JSON lines, read by a thread (a select() on a buffered pipe misses lines already buffered)."""

    def __init__(self, proc: subprocess.Popen):
        self.proc = proc
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def next(self, timeout: float = 90.0) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Empty:
                break
            if line is None:
                break
            if line.startswith("{"):
                return json.loads(line)
        self.proc.kill()
        pytest.fail(f"the p4runtime-shell driver stopped: {self.proc.stderr.read()[-3000:]}")


@pytest.mark.netns
@pytest.mark.p4runtime_shell
def test_p4runtime_shell_drives_the_switch_beside_dlcpctl(shell_python, veth, tmp_path: Path) -> None:
    sw_side, host_side = veth
    daemon = start_daemon("s1", "-i", f"1@{sw_side}")
    proc = None
    try:
        p4info = compiled_p4info(tmp_path)
        proc = subprocess.Popen([str(shell_python), str(ROOT / "tests/controller/p4runtime_shell_driver.py"),
                                 "--addr", daemon.address, "--p4info", str(p4info), "--program",
                                 str(ROOT / "p4src/dlcp.p4"), "--host-if", host_side],
                                cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        steps = Steps(proc)
        # the shell's default device id, 1, against device 0: the error names both ways out
        step = steps.next()
        assert step["step"] == "device_id_1" and step["ok"] is False, step
        assert any("unknown device id 1 (this switch is device 0: use device id 0 in the client, or start "
                   "dlcp-switch with --device-id 1)" in m for m in step["messages"]), step
        assert steps.next()["step"] == "pipeline"
        assert steps.next() == {"step": "entries", "ipv4_lpm": 2}
        step = steps.next()
        assert step["step"] == "packet_out_direct" and step["got"] == step["sent"], step  # out of port 1 as is
        step = steps.next()
        got, sent = bytes.fromhex(step["got"] or ""), bytes.fromhex(step["sent"])
        assert step["step"] == "packet_out_routed" and got, step
        assert got[:12] == bytes.fromhex("02000000000a" "02dc00000001")  # the route's MACs
        assert got[22] == sent[22] - 1 and got[34:] == sent[34:]  # TTL - 1, UDP unchanged
        step = steps.next()
        assert step["step"] == "packet_in" and step["payload"], step
        assert b"p4sh-packet-in" in bytes.fromhex(step["payload"])
        assert step["metadata"] == {"1": 1, "2": 0}, step  # ingress_port 1, _pad 0
        assert steps.next()["step"] == "holding"

        # dlcpctl beside the shell, which is primary with election id 1
        net = tmp_path / "net.yaml"
        net.write_text(f"""\
switches:
  s1: {{address: "{daemon.address}", cpu_port: 255}}
hosts:
  h1: {{ip: 10.0.0.1, mac: "02:00:00:00:00:0a", attach: s1:1}}
  h2: {{ip: 10.0.0.2, mac: "02:00:00:00:00:0b", attach: s1:2}}
""")
        r = dlcpctl("diff", str(net))
        assert r.returncode == 9, r.stderr  # the shell's routes differ from the file...
        assert "pipeline" not in r.stdout, r.stdout  # ...but the program is the file's, pushed by the shell
        assert "s1: - ipv4_lpm dst_addr=10.9.9.9/32" in r.stdout, r.stdout
        r = dlcpctl("apply", "--dry-run", "--json", str(net))
        assert r.returncode == 0 and json.loads(r.stdout)["switches"]["s1"]["pipeline_pushed"] is False, r.stdout
        proc.stdin.close()
        step = steps.next()
        # neither read took part in the election: the switch told the shell nothing, and it still writes
        assert step == {"step": "done", "arbitration_updates": [], "write": True}, step
        assert proc.wait(30) == 0

        r = dlcpctl("apply", "--json", str(net))
        assert r.returncode == 0, r.stderr
        result = json.loads(r.stdout)["switches"]["s1"]
        assert result["pipeline_pushed"] is False  # the shell's entries are reconciled, not wiped by a push
        assert result["deletes"] == 2 and result["inserts"] >= 2, result  # 10.9.9.9 and 10.7.0.0/16 removed
        assert dlcpctl("diff", str(net)).returncode == 0
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(10)
        daemon.stop()


def test_replacing_a_pipeline_names_the_entries_it_clears(tmp_path: Path) -> None:
    """A switch running another program whose tables hold entries: apply (and diff before it) says how many
    entries of which tables the push clears; they are not dlcpctl's."""
    daemon = start_daemon("s1", "-I", str(ROOT / "tests/switch/programs"))
    try:
        other = ROOT / "tests/switch/programs/l3_router.p4"

        async def push_other_with_an_entry() -> None:
            from switch.frontend.check import load_ir
            from switch.backend.p4info import P4InfoBuilder

            info = P4InfoBuilder(load_ir(str(other), [], {})).build()
            opts = fy.SwitchOptions(p4info=info, p4blob=other.read_bytes(), device_id=0, initial_election_id=5)
            async with fy.Switch("other", daemon.address, opts) as sw:
                entry = fy.P4TableEntry("ipv4_lpm", match=fy.P4TableMatch(dstAddr="10.1.0.0/16"),
                                        action=fy.P4TableAction("drop"))
                await sw.insert([entry])

        table_name = "RouterIngress.ipv4_lpm"  # not dlcp.p4's DlcpIngress.ipv4_lpm: another program's table
        asyncio.run(push_other_with_an_entry())
        net = tmp_path / "net.yaml"
        net.write_text(f"""\
switches:
  s1: {{address: "{daemon.address}"}}
hosts:
  h1: {{ip: 10.0.0.1, mac: "02:00:00:00:00:0a", attach: s1:1}}
""")
        r = dlcpctl("diff", str(net))
        assert r.returncode == 9
        assert (f"s1: pipeline: the switch runs another program (or none); replacing it would clear 1 entries of "
                f"tables dlcpctl does not manage: {table_name} (1)") in r.stdout, r.stdout
        r = dlcpctl("apply", str(net))
        assert r.returncode == 0, r.stderr
        assert f"replacing it cleared 1 entries of tables dlcpctl does not manage: {table_name} (1)" in \
            r.stdout.replace("\n", " "), r.stdout
        r = dlcpctl("apply", "--json", str(net))
        assert json.loads(r.stdout)["switches"]["s1"]["pipeline_pushed"] is False
    finally:
        daemon.stop()
