"""Traffic-manager plans, the BMv2 path, command-line parsing and rendering (no switch needed)."""

from __future__ import annotations

import os
import stat
import textwrap
import time
from pathlib import Path

import pytest
from rich.console import Console

from controller import netfile, render, tm
from controller.api import ApplyResult, PrioCounters, SwitchApplyResult, SwitchStats
from controller.cli import build_parser, main
from controller.errors import EXIT_CODES, SwitchUnreachable, TrafficManagerError

NET = """\
switches:
  s1: {address: 127.0.0.1:1, priority_queues: 4}
  s2: {address: 127.0.0.1:2, target: bmv2, thrift_port: 9191}
hosts:
  h1: {ip: 10.0.0.1, mac: "00:00:00:00:00:01", attach: s1:1, rate: 10Mbit, delay: 1ms, queue_depth: 20}
  h2: {ip: 10.0.0.2, mac: "00:00:00:00:00:02", attach: s2:1, queue_depth: 30}
links:
  - {between: [s1:2, s2:2], loss: 1%}
queues:
  - {switch: s1, priority: 3, rate_pps: 500}
  - {switch: s1, port: 1, priority: 0, depth: 5}
"""


def net() -> netfile.Network:
    return netfile.loads(NET)


def test_desired_tm() -> None:
    p = tm.desired_tm(net(), "s1")
    assert p.links == {1: netfile.LinkProps(10e6, 1000, None, None), 2: netfile.LinkProps(None, None, 0.01, None)}
    assert p.queues[(1, 0)] == tm.QueueSetting(5, None)  # the later, more specific rule wins
    assert p.queues[(1, 1)] == tm.QueueSetting(20, None)  # the host link's queue depth, every priority
    assert p.queues[(1, 3)] == tm.QueueSetting(20, 500) and p.queues[(2, 3)] == tm.QueueSetting(None, 500)
    assert (1, 4) not in p.queues  # s1 runs 4 priority queues
    assert tm.describe_plan(p)[-1] == "link 2: loss=0.01"


def test_bmv2_without_cli_names_the_binary(monkeypatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(TrafficManagerError, match=r"switch s2 \(target bmv2\): simple_switch_CLI is not on PATH"):
        tm.open_tm(net().switches["s2"])


def test_bmv2_cli_commands(tmp_path: Path, monkeypatch) -> None:
    """The commands sent to simple_switch_CLI (a recording stand-in on PATH: the real one needs BMv2)."""
    log = tmp_path / "stdin.txt"
    cli = tmp_path / "simple_switch_CLI"
    cli.write_text(f"#!/bin/sh\necho \"$@\" > {tmp_path / 'args.txt'}\ncat > {log}\necho 'RuntimeCmd: '\n")
    cli.chmod(cli.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    t = tm.open_tm(net().switches["s2"])
    plan = tm.desired_tm(net(), "s2")
    with pytest.raises(TrafficManagerError, match="s2 .target bmv2. port 2: BMv2 has no link loss emulation"):
        tm.apply_tm(plan, t)  # the link s1:2-s2:2 has loss: refused before anything is sent
    assert not log.exists()
    t = tm.open_tm(net().switches["s2"])
    # BMv2 cannot be read back: every queue of every connected port is written, the file's value or BMv2's
    # default (64 packets, no rate limit), so a setting dropped from the file goes back to the default
    assert plan.ports == (1, 2)
    assert tm.apply_tm(tm.TmPlan(links={}, queues=plan.queues, ports=plan.ports), t) == \
        [f"queue 1/{q}: depth=30 rate_pps=0" for q in range(8)] + [f"queue 2/{q}: depth=64 rate_pps=0" for q in range(8)]
    assert log.read_text().splitlines() == [ln for p, d in ((1, 30), (2, 64)) for q in range(8)
                                            for ln in (f"set_queue_depth {d} {p} {q}", f"set_queue_rate 0 {p} {q}")]
    assert (tmp_path / "args.txt").read_text().split() == ["--thrift-port", "9191"]
    with pytest.raises(TrafficManagerError, match="no queue statistics"):
        t.stats()


def test_management_service_down_is_unreachable() -> None:
    spec = netfile.SwitchSpec("s9", "127.0.0.1:1")
    t = tm.open_tm(spec, timeout=1.0)
    with pytest.raises(SwitchUnreachable, match=r"switch s9 at 127.0.0.1:1 unreachable"):
        t.set_queue(1, 0, depth=3)
    t.close()


def test_parser() -> None:
    p = build_parser()
    a = p.parse_args(["-n", "x.yaml", "show", "queues", "--json", "-s", "s1", "-s", "s2"])
    assert (a.net, a.what, a.json, a.switch) == ("x.yaml", "queues", True, ["s1", "s2"])
    a = p.parse_args(["set", "link", "--port", "3", "--rate", "1Gbit", "--delay", "2ms", "--loss", "0.5%", "-n", "y"])
    assert (a.port, a.rate, a.delay, a.loss, a.net) == (3, 1e9, 2000, pytest.approx(0.005), "y")
    a = p.parse_args(["route", "add", "10.1.0.0/16", "--via", "2", "--via", "3@02:00:00:00:00:03", "-s", "s1"])
    assert a.via == [(2, None), (3, 0x020000000003)]
    a = p.parse_args(["set", "priority-map", "dlcp", "--msg-type", "ack", "--layer", "3-7", "--queue", "6"])
    assert (a.msg_type, a.layer, a.queue) == (1, (3, 7), 6)
    a = p.parse_args(["apply", "net.yaml", "--dry-run"])
    assert (a.file, a.dry_run) == ("net.yaml", True)
    a = p.parse_args(["run", "net.yaml", "--drift-interval", "0", "--poll", "1", "-s", "s1"])
    assert (a.file, a.drift_interval, a.poll, a.retry, a.switch) == ("net.yaml", 0.0, 1.0, 0.1, ["s1"])
    a = p.parse_args(["-n", "net.yaml", "diff", "--json", "--no-tm"])
    assert (a.net, a.json, a.no_tm) == ("net.yaml", True, True)


@pytest.mark.parametrize("argv", [["show", "everything"], ["set", "threshold", "--priority", "9"],
                                  ["set", "link", "--port", "1", "--rate", "fast"],
                                  ["watch", "--once", "--frames", "2"]])
def test_usage_errors_exit_2(argv, capsys) -> None:
    with pytest.raises(SystemExit) as ei:
        main(argv)
    assert ei.value.code == EXIT_CODES["usage"] == 2


def test_invalid_file_in_process(tmp_path: Path, capsys) -> None:
    (tmp_path / "n.yaml").write_text("switches:\n  s1: {address: 127.0.0.1:1, target: netfpga}\n")
    assert main(["apply", str(tmp_path / "n.yaml")]) == 3
    assert "n.yaml:2: switches.s1.target: expected one of embedded, bmv2, tofino, got 'netfpga'" in capsys.readouterr().err
    for cmd in (["diff"], ["run"]):  # run exits at once too: a controller needs a valid file to start from
        assert main([*cmd, str(tmp_path / "n.yaml")]) == 3
        assert "switches.s1.target" in capsys.readouterr().err
    assert main(["run", str(tmp_path / "n.yaml"), "--retry", "0"]) == 2
    assert "--retry must be positive" in capsys.readouterr().err


def text(renderable) -> str:
    c = Console(width=200, record=True, file=open(os.devnull, "w"))
    c.print(renderable)
    return c.export_text()


def stats(t: float, pkts: int, drops: int, marks: int) -> SwitchStats:
    return SwitchStats("s1", t, ports={3: {1: PrioCounters(pkts, pkts * 1000, drops, marks)}},
                       nhop_packets={3: (pkts, pkts * 1000)}, ingress_drops={"no_route": 2})


def test_watch_frame_rates() -> None:
    prev, cur = stats(100.0, 1000, 10, 5), stats(102.0, 3000, 50, 25)
    r = render.rates(prev, cur)[(3, 1)]
    assert r == {"pps": 1000.0, "bps": 8e6, "drops_ps": 20.0, "marks_ps": 10.0}
    out = text(render.watch_frame({"s1": prev}, {"s1": cur}, 7))
    assert "s1  (frame 7, over 2.00 s)" in out
    assert "│    3 │    1 │   1000 │   8.00 │      20 │      10 │          50 │          25 │" in out


def test_show_views() -> None:
    st = {"s1": stats(time.time(), 4, 1, 2)}
    c = text(render.counters_view(st))
    assert "│    3 │    1 │              4 │            4000 │              1 │         2 │" in c
    assert "ingress drop: no_route" in c
    d = text(render.drops_view(st))
    assert "P4 (bounded loss)" in d and "eligible" in d and "no_route" in d
    assert "no queue statistics" in text(render.queues_view(st))
    res = ApplyResult({"s1": SwitchApplyResult("s1", True, 3, 1, 0, ["+ a", "+ b", "+ c", "~ d"], ["link 1: x"])},
                      {"s2": SwitchUnreachable("s2", "127.0.0.1:9", 1.0, "down")})
    a = text(render.apply_table(res, verbose=True))
    assert "pushed" in a and "SwitchUnreachable" in a and "s1: ~ d" in a and "s1: tm link 1: x" in a
    tables = {"s1": {"tables": {"ipv4_lpm": [{"match": {"dst_addr": "10.0.0.1/32"}, "action": "set_nhop",
                                              "params": {"port": 1}}]},
                     "registers": {"drop_threshold": {"17": 40}}}}
    t = text(render.tables_view(tables))
    assert "dst_addr=10.0.0.1/32" in t and "set_nhop(port=1)" in t and "2/1" in t
    assert textwrap.dedent(t)


def test_bmv2_registers_go_through_the_cli(tmp_path: Path, monkeypatch) -> None:
    """BMv2's P4Runtime server has no register access: the client reads and writes registers through
    simple_switch_CLI (a recording stand-in here: it answers register_read with 0, 5, 0, ... for every register)
    and hands them back as P4Runtime entities, so apply and set-threshold work the same on both targets."""
    import asyncio

    from finsy.proto import p4d, p4r

    from controller.client import SwitchClient, load_program
    from controller.netfile_model import SwitchSpec

    log = tmp_path / "stdin.txt"
    cli = tmp_path / "simple_switch_CLI"
    cli.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        tee -a {log} | while read cmd name rest; do
          [ "$cmd" = register_read ] && echo "RuntimeCmd: $name= 0, 5, 0, 7"
        done
        exit 0
        """))
    cli.chmod(cli.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    root = Path(__file__).resolve().parents[2]
    program = load_program(root / "p4src/dlcp.p4", [root / "p4src/include"])
    client = SwitchClient(SwitchSpec("b1", "127.0.0.1:1", target="bmv2", thrift_port=9191), p4info=program.p4info)
    rid = client.schema.registers["drop_threshold"].id
    got = asyncio.run(client.read([p4r.Entity(register_entry=p4r.RegisterEntry(register_id=rid,
                                                                                 index=p4r.Index(index=1)))]))
    assert [(e.register_entry.register_id, e.register_entry.index.index, e.register_entry.data.bitstring)
            for e in got] == [(rid, 1, b"\x05")]
    whole = client._bmv2_registers([p4r.Entity(register_entry=p4r.RegisterEntry(register_id=rid))])
    assert [int.from_bytes(e.register_entry.data.bitstring, "big") for e in whole] == [0, 5, 0, 7]
    client._bmv2_register_write([p4r.Update(type=p4r.Update.MODIFY, entity=p4r.Entity(
        register_entry=p4r.RegisterEntry(register_id=rid, index=p4r.Index(index=9),
                                         data=p4d.P4Data(bitstring=b"\x01\x00"))))])
    assert log.read_text().splitlines() == ["register_read drop_threshold", "register_read drop_threshold",
                                            "register_write drop_threshold 9 256"]


def test_bmv2_cli_errors_are_words(tmp_path: Path, monkeypatch) -> None:
    """run_cli fails on the CLI's error answers (it exits 0 after them), not on a name that holds "error"
    (error_key.p4's table Ing.by_error; a stand-in CLI that answers each line with what the real one prints)."""
    from controller.bmv2 import Bmv2CliError, run_cli

    cli = tmp_path / "simple_switch_CLI"
    cli.write_text(textwrap.dedent("""\
        #!/bin/sh
        while read cmd table rest; do
          case "$table" in
            Ing.by_error) echo "RuntimeCmd: Adding entry to exact match table $table"
                          echo "Entry has been added with handle 0";;
            bad) echo "RuntimeCmd: Invalid table operation (BAD_MATCH_KEY)";;
            *) echo "RuntimeCmd: Error: Invalid table name ($table)";;
          esac
        done
        exit 0
        """))
    cli.chmod(cli.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert "handle 0" in run_cli(9191, ["table_add Ing.by_error Ing.mark 1 => 34"])
    with pytest.raises(Bmv2CliError, match="BAD_MATCH_KEY"):
        run_cli(9191, ["table_add bad Ing.mark 1 => 34"])
    with pytest.raises(Bmv2CliError, match="Invalid table name"):
        run_cli(9191, ["table_add nothere Ing.mark 1 => 34"])
