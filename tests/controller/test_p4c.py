"""Targets that run p4c's output: a ``p4info:`` / ``device_config:`` pair in the network file, the BMv2 path
(``target: bmv2``: device config pushed as is, queues through simple_switch_CLI) and a target that serves queue
0 first (``priority_order: low-first``). Without BMv2 on this machine, the BMv2 path runs against our switch,
which speaks the same P4Runtime; the P4Info file is written from our front end in p4c's text format, and the
Thrift CLI, through which registers and queues go on BMv2 (its P4Runtime server has no register access), is a
stand-in that records the commands and keeps the registers."""

from __future__ import annotations

import asyncio
import os
import stat
import sys
import textwrap
import time
from pathlib import Path

import finsy as fy
import pytest
from finsy.p4schema import P4ConfigResponseType
from finsy.proto import p4i
from google.protobuf import text_format
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from controller import Network, netfile, state
from controller.client import inline_includes, load_program
from controller.errors import EXIT_CODES

from .conftest import dlcpctl, start_daemon
from .test_live import finsy_read


def p4c_output(tmp_path: Path) -> tuple[Path, Path]:
    """dlcp.p4's P4Info in p4c's text format and a device config (the inlined source our target takes where
    BMv2 takes p4c-bm2-ss's JSON)."""
    prog = load_program(netfile.DEFAULT_PROGRAM)
    info = tmp_path / "dlcp.p4info.txt"
    info.write_text(text_format.MessageToString(prog.p4info))
    config = tmp_path / "dlcp.json"
    config.write_bytes(inline_includes(netfile.DEFAULT_PROGRAM).encode())
    return info, config


def test_p4info_pair_validation(tmp_path: Path) -> None:
    info, config = p4c_output(tmp_path)
    base = "switches:\n  s1: {address: 127.0.0.1:1}\n"
    with pytest.raises(netfile.NetFileError, match=r":1: p4info: p4info and device_config go together .*"
                                                    r"device_config is missing"):
        netfile.loads(f"p4info: {info}\n" + base)
    with pytest.raises(netfile.NetFileError, match=r"p4info: give either program .* not both"):
        netfile.loads(f"program: {netfile.DEFAULT_PROGRAM}\np4info: {info}\ndevice_config: {config}\n" + base)
    with pytest.raises(netfile.NetFileError, match=r"switches\.s1\.priority_order: expected one of high-first, "
                                                    r"low-first, got 'up'"):
        netfile.loads("switches:\n  s1: {address: 127.0.0.1:1, priority_order: up}\n")
    net = netfile.loads(base.replace("}", f", p4info: {info}, device_config: {config}}}"))
    assert net.artifacts("s1") == (info, config)
    # a P4Info that is not one: exit 6 naming the file
    bad = tmp_path / "bad.p4info.txt"
    bad.write_text("tables { preamble { id: oops } }\n")
    (tmp_path / "n.yaml").write_text(f"p4info: {bad}\ndevice_config: {config}\n" + base)
    r = dlcpctl("apply", str(tmp_path / "n.yaml"))
    assert r.returncode == EXIT_CODES["program"] == 6, r.stderr
    assert f"{bad}: not a P4Info (text format)" in r.stderr, r.stderr
    # an empty file parses as an empty P4Info: refused; a program without tables or registers is a P4Info all the
    # same (p4c writes its pkg_info and actions: the conformance programs of make test-bmv2 have such)
    from controller.client import load_p4info_program
    from controller.errors import ProgramError

    empty = tmp_path / "empty.p4info.txt"
    empty.write_text("\n")
    with pytest.raises(ProgramError, match="an empty P4Info"):
        load_p4info_program(empty, None)
    tableless = tmp_path / "tableless.p4info.txt"
    tableless.write_text('pkg_info { arch: "v1model" }\nactions { preamble { id: 16800567 name: "NoAction" '
                         'alias: "NoAction" } }\n')
    assert not load_p4info_program(tableless, None).p4info.tables


@pytest.mark.slow
def test_bmv2_path_with_p4c_output_and_low_first_queues(tmp_path: Path, monkeypatch) -> None:
    info, config = p4c_output(tmp_path)
    log = tmp_path / "cli.txt"
    cli = tmp_path / "simple_switch_CLI"
    # BMv2's P4Runtime server has no register access: the controller reads and writes registers through the CLI,
    # so the stand-in keeps the registers (sizes from the P4Info) and answers register_read as BMv2's CLI does
    sizes = {r.preamble.name: r.size for r in text_format.Parse(info.read_text(), p4i.P4Info()).registers}
    cli.write_text(textwrap.dedent(f"""\
        #!{sys.executable}
        import json, sys
        from pathlib import Path
        state = Path({str(tmp_path / "registers.json")!r})
        regs = json.loads(state.read_text()) if state.exists() else {{}}
        with open({str(tmp_path / "args.txt")!r}, "a") as f:
            f.write(" ".join(sys.argv[1:]) + "\\n")
        with open({str(log)!r}, "a") as log:
            for line in sys.stdin:
                log.write(line)
                cmd = line.split()
                if cmd and cmd[0] == "register_write":
                    regs.setdefault(cmd[1], {{}})[cmd[2]] = int(cmd[3])
                elif cmd and cmd[0] == "register_read":
                    cells = [regs.get(cmd[1], {{}}).get(str(i), 0) for i in range({sizes!r}[cmd[1]])]
                    print(f"RuntimeCmd: {{cmd[1]}}= " + ", ".join(map(str, cells)))
        state.write_text(json.dumps(regs))
        """))
    cli.chmod(cli.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    d = start_daemon("s1", "--priority-queues", "4")
    try:
        (tmp_path / "n.yaml").write_text(textwrap.dedent(f"""\
            p4info: {info.name}
            device_config: {config.name}
            switches:
              s1: {{address: {d.address}, target: bmv2, thrift_port: 9191, priority_order: low-first,
                   priority_queues: 4, cpu_port: 255}}
            hosts:
              h1: {{ip: 10.0.0.1, mac: "00:00:0a:00:00:01", attach: s1:1}}
              h2: {{ip: 10.0.0.2, mac: "00:00:0a:00:00:02", attach: s1:2}}
            priorities:
              dscp: {{46: 3, 8: 1}}
            thresholds:
              - {{port: 1, priority: 3, drop: 10}}
            queues:
              - {{port: 2, priority: 3, depth: 9}}
            """))
        net = Network.from_file(tmp_path / "n.yaml")
        res = net.apply()
        assert res.switches["s1"].pipeline_pushed and not res.errors
        # the pipeline is p4c's pair, verbatim: the switch serves back the same P4Info and device config
        prog = net.program("s1")
        assert prog.path == info and prog.device_config == config.read_bytes()

        async def pipeline():
            async with fy.Switch("probe", d.address, fy.SwitchOptions(device_id=0, initial_election_id=2)) as sw:
                return await sw._get_pipeline_config_request(  # noqa: SLF001 - the raw reply is the point
                    response_type=P4ConfigResponseType.ALL)
        reply = asyncio.run(pipeline())
        assert reply.config.cookie.cookie == prog.cookie and reply.config.p4info == prog.p4info
        assert reply.config.p4_device_config == config.read_bytes()
        # queue numbers mirrored for a target that serves queue 0 first (4 queues: q -> 3 - q)
        dscp = {e.match["dscp"]: e.action.args["prio"] for e in finsy_read(d.address, fy.P4TableEntry("dscp_priority"))}
        assert dscp == {46: 0, 8: 2}
        # registers through BMv2's Thrift CLI, mirrored too (file queue 3 is the target's queue 0)
        cmds = log.read_text().splitlines()
        assert [c for c in cmds if c.startswith("register_write")] == [
            f"register_write drop_threshold {state.slot(1, 0)} 10"]
        # BMv2's queues through its Thrift CLI: every queue of every port, file values mirrored, others default
        assert "set_queue_depth 9 2 0" in cmds and "set_queue_depth 64 2 3" in cmds
        assert len([c for c in cmds if c.startswith("set_queue_depth")]) == 2 * 4
        assert set((tmp_path / "args.txt").read_text().splitlines()) == {"--thrift-port 9191"}
        # a packet in DSCP 46 (file queue 3, the most urgent) leaves in the target's queue 0
        before = finsy_read(d.address, fy.P4CounterEntry("port_forwarded", index=state.slot(2, 0)))[0].packet_count
        pkt = bytes(Ether(dst="02:00:00:00:00:01", src="00:00:0a:00:00:01")
                    / IP(src="10.0.0.1", dst="10.0.0.2", tos=46 << 2) / UDP(sport=1, dport=2) / b"ef")
        net.packet_out("s1", pkt)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            now = finsy_read(d.address, fy.P4CounterEntry("port_forwarded", index=state.slot(2, 0)))[0].packet_count
            if now > before:
                break
            time.sleep(0.05)
        assert now == before + 1
        # nothing left to write over P4Runtime (BMv2's queues are re-sent: it cannot report them)
        again = net.apply()
        assert again.writes == 0 and not again.switches["s1"].pipeline_pushed
    finally:
        d.stop()


def test_bmv2_traffic_manager_is_not_drift() -> None:
    """BMv2's queue settings cannot be read back: apply re-sends them, but diff and run report no drift for them."""
    from controller.api import SwitchApplyResult
    from controller.runner import drift_lines

    r = SwitchApplyResult("s2", updates=["~ drop_threshold[9] = 40"], tm_changes=["queue 1/0: depth=64 rate_pps=0"],
                          dry_run=True, tm_readable=False)
    assert drift_lines(r) == ["~ drop_threshold[9] = 40"]
    r.tm_readable = True
    assert drift_lines(r) == ["~ drop_threshold[9] = 40", "tm queue 1/0: depth=64 rate_pps=0"]
