"""``dlcpctl``: the command line of the controller (see docs/controller.md for commands and exit codes).

The network file comes from ``-n/--net FILE`` (before or after the command), the ``DLCP_NET`` environment
variable, or, for ``apply``, the positional argument. Errors print one message naming what failed and exit with
the code documented in :data:`controller.errors.EXIT_CODES`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Sequence

from rich.console import Console

from .errors import EXIT_CODES, ControllerError, UsageError
from .netfile import NetFileError, parse_delay, parse_loss, parse_mac, parse_rate

__all__ = ["main", "build_parser"]


def _net_option(p: argparse.ArgumentParser, top: bool = False) -> None:
    p.add_argument("-n", "--net", metavar="FILE", default=None if top else argparse.SUPPRESS,
                   help="network file (default: $DLCP_NET)")


def _switch_option(p: argparse.ArgumentParser, many: bool = True) -> None:
    if many:
        p.add_argument("-s", "--switch", action="append", metavar="S", help="switch name (repeatable; default: all)")
    else:
        p.add_argument("-s", "--switch", metavar="S", help="switch name (default: the only switch)")


def _typed(fn, what: str):
    def conv(v: str):
        try:
            return fn(v)
        except ValueError as e:
            raise argparse.ArgumentTypeError(f"invalid {what}: {e}") from None
    conv.__name__ = what
    return conv


def _layer(v: str) -> tuple[int, int]:
    lo, _, hi = v.partition("-")
    lo_i, hi_i = int(lo), int(hi or lo)
    if not 0 <= lo_i <= hi_i <= 0xFFFF:
        raise ValueError(f"{v!r} is not LO-HI within 0..65535")
    return lo_i, hi_i


def _msg_type(v: str) -> int:
    from .netfile import MSG_TYPES

    if v.lower() in MSG_TYPES:
        return MSG_TYPES[v.lower()]
    n = int(v)
    if not 0 <= n <= 15:
        raise ValueError(f"{v!r} is not data|ack|nack|control|0..15")
    return n


def _via(v: str) -> tuple[int, int | None]:
    port, _, mac = v.partition("@")
    return int(port), parse_mac(mac) if mac else None


def _prio(v: str) -> int:
    n = int(v)
    if not 0 <= n <= 7:
        raise ValueError(f"{n} is not 0..7")
    return n


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="dlcpctl", description="Declarative P4Runtime controller for DLCP switches.")
    ap.add_argument("-v", "--verbose", action="count", default=0, help="more output (-vv: finsy debug logs)")
    _net_option(ap, top=True)
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    p = sub.add_parser("apply", help="make the switches match the network file")
    p.add_argument("file", nargs="?", metavar="NET", help="network file")
    _net_option(p)
    _switch_option(p)
    p.add_argument("--dry-run", action="store_true", help="show what would change, write nothing")
    p.add_argument("--no-tm", action="store_true", help="leave traffic-manager settings alone")
    p.add_argument("--json", action="store_true", help="print the result as JSON")

    p = sub.add_parser("diff", help="print how the switches differ from the network file (writes nothing)")
    p.add_argument("file", nargs="?", metavar="NET", help="network file")
    _net_option(p)
    _switch_option(p)
    p.add_argument("--no-tm", action="store_true", help="leave traffic-manager settings out")
    p.add_argument("--json", action="store_true", help="print the drift as JSON")

    p = sub.add_parser("run", help="keep the switches matching the network file (long-running controller)")
    p.add_argument("file", nargs="?", metavar="NET", help="network file")
    _net_option(p)
    _switch_option(p)
    p.add_argument("--drift-interval", type=float, default=10.0,
                   help="seconds between drift checks of each switch (0: never; default 10)")
    p.add_argument("--poll", type=float, default=0.5, help="seconds between checks of the file (default 0.5)")
    p.add_argument("--retry", type=float, default=0.1,
                   help="seconds between reconnection attempts to a switch that is down (default 0.1)")
    p.add_argument("--no-tm", action="store_true", help="leave traffic-manager settings alone")

    p = sub.add_parser("show", help="show switch state")
    p.add_argument("what", choices=("tables", "counters", "queues", "drops"))
    _net_option(p)
    _switch_option(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")

    p = sub.add_parser("watch", help="live per-port, per-priority rates, drops and marks")
    _net_option(p)
    _switch_option(p)
    p.add_argument("--interval", type=float, default=1.0, help="seconds between frames (default 1)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--once", action="store_true", help="render one frame and exit")
    g.add_argument("--frames", type=int, default=0, help="render N frames and exit (default: until Ctrl-C)")

    p = sub.add_parser("set", help="change one setting on the switches now (the next apply restores the file)")
    sset = p.add_subparsers(dest="what", required=True, metavar="WHAT")
    q = sset.add_parser("threshold", help="drop/mark thresholds (packets, 0 = off) per port and priority")
    _net_option(q)
    _switch_option(q)
    q.add_argument("--port", type=int, action="append", help="port (repeatable; default: every connected port)")
    q.add_argument("--priority", type=_typed(_prio, "priority"), action="append",
                   help="priority 0..7 (repeatable; default: all)")
    q.add_argument("--drop", type=int, help="drop threshold in packets")
    q.add_argument("--mark", type=int, help="ECN marking threshold in packets")

    q = sset.add_parser("priority-map", help="one row of the DSCP or the DLCP priority map")
    q.add_argument("map", choices=("dscp", "dlcp"))
    q.add_argument("dscp", nargs="?", type=int, help="dscp: the DSCP value")
    q.add_argument("queue_pos", nargs="?", type=_typed(_prio, "queue"), metavar="QUEUE", help="dscp: the queue")
    _net_option(q)
    _switch_option(q)
    q.add_argument("--queue", type=_typed(_prio, "queue"), help="queue (dlcp)")
    q.add_argument("--trust", action="store_true", help="dlcp: use the sender's DLCP priority")
    q.add_argument("--delete", action="store_true", help="remove the row")
    q.add_argument("--msg-type", type=_typed(_msg_type, "msg type"), help="data|ack|nack|control")
    q.add_argument("--priority", type=_typed(_prio, "priority"), help="DLCP priority field")
    q.add_argument("--mag-class", type=_typed(_prio, "magnitude class"), help="DLCP magnitude class 0..7")
    q.add_argument("--layer", type=_typed(_layer, "layer range"), help="layer range LO-HI")
    q.add_argument("--entry-priority", type=int, help="dlcp: P4Runtime entry priority (default: above all rows)")

    q = sset.add_parser("queue", help="queue capacity and rate (traffic manager)")
    _net_option(q)
    _switch_option(q)
    q.add_argument("--port", type=int, required=True)
    q.add_argument("--priority", type=_typed(_prio, "priority"), help="default: every priority of the port")
    q.add_argument("--depth", type=int, help="capacity in packets")
    q.add_argument("--rate-pps", type=float, help="packets per second (0 = unlimited)")

    q = sset.add_parser("link", help="link rate, delay, loss of a port (embedded target)")
    _net_option(q)
    _switch_option(q)
    q.add_argument("--port", type=int, required=True)
    q.add_argument("--rate", type=_typed(parse_rate, "rate"), help="e.g. 100Mbit")
    q.add_argument("--delay", type=_typed(parse_delay, "delay"), help="e.g. 200us, 1ms")
    q.add_argument("--loss", type=_typed(parse_loss, "loss"), help="e.g. 0.01 or 1%%")

    p = sub.add_parser("route", help="add or delete a route now (the next apply restores the file)")
    sr = p.add_subparsers(dest="op", required=True, metavar="OP")
    q = sr.add_parser("add", help="add a route; several --via make an equal-cost group")
    q.add_argument("prefix", help="IPv4 prefix, e.g. 10.9.0.0/16 (a bare address is a /32)")
    _net_option(q)
    _switch_option(q, many=False)
    q.add_argument("--via", type=_typed(_via, "next hop"), action="append", required=True,
                   help="PORT or PORT@MAC (repeatable)")
    q = sr.add_parser("del", help="delete a route")
    q.add_argument("prefix")
    _net_option(q)
    _switch_option(q, many=False)

    p = sub.add_parser("packet-out", help="send a packet from the controller into a switch")
    _net_option(p)
    _switch_option(p, many=False)
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--hex", help="frame bytes as hex")
    g.add_argument("--file", type=Path, help="file holding the raw frame")
    p.add_argument("--meta", action="append", default=[], metavar="NAME=VALUE",
                   help="packet_out controller header field (if the program has one)")
    p.add_argument("--repeat", type=int, default=1, help="send the packet N times (default 1)")

    p = sub.add_parser("packet-in", help="print packets the switch sends to the controller")
    _net_option(p)
    _switch_option(p, many=False)
    p.add_argument("--count", type=int, default=1, help="stop after N packets (0: until --timeout)")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds to wait (default 10)")
    p.add_argument("--json", action="store_true", help="one JSON object per packet")
    return ap


def _net_path(a: argparse.Namespace) -> str:
    path = getattr(a, "file", None) or a.net or os.environ.get("DLCP_NET")
    if not path:
        raise UsageError("no network file: pass -n FILE (or set DLCP_NET)")
    return path


def _one_switch(net, name: str | None) -> str:
    if name:
        return name
    if len(net.switches) == 1:
        return net.switches[0]
    raise UsageError(f"which switch? pass --switch (the network has: {', '.join(net.switches)})")


def _print_lines(console: Console, lines: dict[str, list[str]] | list[str]) -> None:
    if isinstance(lines, dict):
        for sw, ls in lines.items():
            if not ls:
                console.print(f"{sw}: nothing to change", markup=False)
            for ln in ls:
                console.print(f"{sw}: {ln}", markup=False)
    else:
        for ln in lines:
            console.print(ln, markup=False)


def _run(a: argparse.Namespace, console: Console) -> int:
    from .api import Network
    from . import render

    if a.cmd == "run":
        return _run_controller(a)
    net = Network.from_file(_net_path(a))
    if a.cmd == "apply":
        result = net.apply(a.switch, dry_run=a.dry_run, tm=not a.no_tm, check=False)
        if a.json:
            print(json.dumps({
                "switches": {n: {"pipeline_pushed": r.pipeline_pushed, "inserts": r.inserts, "modifies": r.modifies,
                                 "deletes": r.deletes, "updates": r.updates, "tm_changes": r.tm_changes,
                                 "dry_run": r.dry_run} for n, r in result.switches.items()},
                "errors": {n: str(e) for n, e in result.errors.items()}}, indent=2))
        else:
            console.print(render.apply_table(result, verbose=a.verbose > 0 or a.dry_run))
        for n, e in result.errors.items():
            print(f"dlcpctl: {e}", file=sys.stderr)
        return next((e.exit_code for e in result.errors.values()), 0)

    if a.cmd == "diff":
        result = net.apply(a.switch, dry_run=True, tm=not a.no_tm, check=False)
        from .runner import drift_lines

        drift = {n: drift_lines(r) for n, r in result.switches.items()}
        if a.json:
            print(json.dumps({"drift": drift, "errors": {n: str(e) for n, e in result.errors.items()}}, indent=2))
        else:
            for n, lines in drift.items():
                if not lines:
                    console.print(f"{n}: in sync", markup=False)
                for ln in lines:
                    console.print(f"{n}: {ln}", markup=False)
        for n, e in result.errors.items():
            print(f"dlcpctl: {e}", file=sys.stderr)
        if result.errors:
            return next(iter(result.errors.values())).exit_code
        return EXIT_CODES["drift"] if any(drift.values()) else 0

    if a.cmd == "show":
        if a.what == "tables":
            data = net.tables(a.switch)
            if a.json:
                print(json.dumps(data, indent=2))
            else:
                console.print(render.tables_view(data))
            return 0
        stats = net.stats(a.switch, tm=a.what in ("queues", "drops"))
        if a.json:
            out: dict[str, Any] = {}
            for sw, st in stats.items():
                d = st.to_dict()
                if a.what == "counters":
                    out[sw] = {k: d[k] for k in ("ports", "nhop_packets", "ingress_drops")}
                elif a.what == "queues":
                    out[sw] = {"ports": d.get("tm", {}).get("ports")} if st.tm is not None else {"ports": None}
                else:
                    out[sw] = {"eligible": {p: {q: c["eligible_drops"] for q, c in prios.items()
                                                if c["eligible_drops"]} for p, prios in d["ports"].items()},
                               "ingress": d["ingress_drops"],
                               "tm": d["tm"]["drops"] if st.tm is not None else None}
            print(json.dumps(out, indent=2))
        else:
            view = {"counters": render.counters_view, "queues": render.queues_view, "drops": render.drops_view}
            console.print(view[a.what](stats))
        return 0

    if a.cmd == "watch":
        return _watch(net, a, console)

    if a.cmd == "set":
        if a.what == "threshold":
            _print_lines(console, net.set_threshold(a.switch, a.port, a.priority, drop=a.drop, mark=a.mark))
        elif a.what == "priority-map":
            if a.map == "dscp":
                queue = a.queue if a.queue is not None else a.queue_pos
                _print_lines(console, net.set_priority_map(a.switch, "dscp", dscp=a.dscp, queue=queue,
                                                           delete=a.delete))
            else:
                if a.dscp is not None:
                    raise UsageError("set priority-map dlcp takes options, not positional values")
                _print_lines(console, net.set_priority_map(
                    a.switch, "dlcp", queue=a.queue, trust=a.trust, msg_type=a.msg_type, priority=a.priority,
                    mag_class=a.mag_class, layer=a.layer, entry_priority=a.entry_priority, delete=a.delete))
        elif a.what == "queue":
            _print_lines(console, net.set_queue(a.switch, a.port, a.priority, depth=a.depth, rate_pps=a.rate_pps))
        elif a.what == "link":
            _print_lines(console, net.set_link(a.switch, a.port, rate_bps=a.rate, delay_us=a.delay, loss=a.loss))
        return 0

    if a.cmd == "route":
        sw = _one_switch(net, a.switch)
        if a.op == "add":
            _print_lines(console, {sw: net.route_add(sw, a.prefix, a.via)})
        else:
            _print_lines(console, {sw: net.route_del(sw, a.prefix)})
        return 0

    if a.cmd == "packet-out":
        sw = _one_switch(net, a.switch)
        try:
            payload = bytes.fromhex(a.hex) if a.hex is not None else a.file.read_bytes()
        except (ValueError, OSError) as e:
            raise UsageError(f"cannot read the packet: {e}") from None
        meta = {}
        for m in a.meta:
            k, _, v = m.partition("=")
            try:
                meta[k] = int(v, 0)
            except ValueError:
                raise UsageError(f"--meta {m!r}: expected NAME=INTEGER") from None
        if a.repeat < 1:
            raise UsageError("--repeat must be at least 1")
        net.packet_out(sw, [payload] * a.repeat, meta or None)
        console.print(f"{sw}: sent {a.repeat} x {len(payload)} bytes", markup=False)
        return 0

    if a.cmd == "packet-in":
        sw = _one_switch(net, a.switch)

        def show(pkt) -> None:
            if a.json:
                print(json.dumps({"switch": sw, "time": time.time(), "payload": pkt.payload.hex(),
                                  "metadata": {k: int(v) if isinstance(v, int) else str(v)
                                               for k, v in pkt.metadata.items()}}), flush=True)
            else:
                console.print(f"{sw}: {len(pkt.payload)} bytes {_summary(pkt.payload)}", markup=False)
                console.print(f"  {pkt.payload.hex()}", markup=False)
        net.packet_in(sw, a.count, a.timeout, on_packet=show)
        return 0
    raise UsageError(f"unknown command {a.cmd!r}")


def _summary(frame: bytes) -> str:
    try:
        from scapy.layers.l2 import Ether

        return Ether(frame).summary()
    except Exception:  # noqa: BLE001 - a summary is a nicety
        return ""


def _run_controller(a: argparse.Namespace) -> int:
    """``dlcpctl run``: until SIGINT/SIGTERM; one line per event on stdout."""
    import signal

    from .runner import RunOptions, Runner

    for name in ("drift_interval", "poll", "retry"):
        if getattr(a, name) < 0 or (name != "drift_interval" and getattr(a, name) == 0):
            raise UsageError(f"--{name.replace('_', '-')} must be positive")
    runner = Runner(_net_path(a), a.switch, RunOptions(a.drift_interval, a.poll, a.retry, not a.no_tm),
                    report=lambda line: print(line, flush=True))

    async def main_loop() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, runner.stop)
        await runner.run()

    asyncio.run(main_loop())
    return 0


def _watch(net, a: argparse.Namespace, console: Console) -> int:
    from . import render

    if a.interval <= 0:
        raise UsageError("--interval must be positive")
    frames = 1 if a.once else a.frames

    async def loop() -> None:
        async with net.stats_sessions(a.switch) as sessions:  # one connection per switch for every frame
            await frames_loop(sessions)

    async def frames_loop(sessions) -> None:
        prev = await sessions.read()
        n = 0
        live = None
        if console.is_terminal:
            from rich.live import Live

            live = Live(render.watch_frame(prev, prev, 0), console=console, refresh_per_second=4)
            live.start()
        try:
            while not frames or n < frames:
                await asyncio.sleep(a.interval)
                cur = await sessions.read()
                n += 1
                frame = render.watch_frame(prev, cur, n)
                if live is not None:
                    live.update(frame)
                else:
                    console.print(frame)
                prev = cur
        finally:
            if live is not None:
                live.stop()

    try:
        asyncio.run(loop())
    except KeyboardInterrupt:
        pass
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("finsy").setLevel(logging.DEBUG if a.verbose >= 2 else logging.CRITICAL + 1)
    console = Console(highlight=False)
    try:
        return _run(a, console)
    except NetFileError as e:
        print(f"dlcpctl: invalid network file: {e}", file=sys.stderr)
        return EXIT_CODES["netfile"]
    except ControllerError as e:
        print(f"dlcpctl: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # output piped into e.g. `head`, which exited
        sys.stderr.close()
        return 0
    except Exception as e:  # noqa: BLE001 - last resort: say it is a bug
        if a.verbose:
            traceback.print_exc()
        print(f"dlcpctl: internal error: {type(e).__name__}: {e} (run with -v for the traceback)", file=sys.stderr)
        return EXIT_CODES["internal"]


if __name__ == "__main__":
    sys.exit(main())
