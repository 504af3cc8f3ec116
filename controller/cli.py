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


class Output(Console):
    """rich's Console for dlcpctl's standard output, where a reader that goes away (``dlcpctl diff | head -1``)
    does not end the command: rich would exit with status 1 and say nothing, which reads as an internal error and
    hides the command's real result (``diff``: 9 when a switch differs). Here the rest of the output is
    discarded, the command runs to its end and exits with its own status, and ``main`` says on stderr that the
    output was cut."""

    closed = False

    def on_broken_pipe(self) -> None:
        """Called by rich when a write fails with EPIPE: point stdout at /dev/null so nothing else fails."""
        self.closed = True
        self.quiet = True
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, sys.stdout.fileno())
        finally:
            os.close(devnull)

    def text(self, line: str) -> None:
        """One plain line (JSON, event lines) as is: no markup, highlighting or wrapping."""
        if self.closed:
            return
        try:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()
        except BrokenPipeError:
            self.on_broken_pipe()


def _net_option(parser: argparse.ArgumentParser, top: bool = False) -> None:
    parser.add_argument("-n", "--net", metavar="FILE", default=None if top else argparse.SUPPRESS,
                        help="network file (default: $DLCP_NET)")


def _switch_option(parser: argparse.ArgumentParser, many: bool = True) -> None:
    if many:
        parser.add_argument("-s", "--switch", action="append", metavar="S",
                            help="switch name (repeatable; default: all)")
    else:
        parser.add_argument("-s", "--switch", metavar="S", help="switch name (default: the only switch)")


def _file_command(sub: argparse._SubParsersAction, name: str, summary: str) -> argparse.ArgumentParser:
    """A command on the whole network file (apply, diff, run): the file as a positional argument too."""
    cmd = _switch_command(sub, name, summary)
    cmd.add_argument("file", nargs="?", metavar="NET", help="network file")
    return cmd


def _switch_command(parent: argparse._SubParsersAction, name: str, summary: str) -> argparse.ArgumentParser:
    """A command on some switches of the network file: ``-n`` and ``-s`` (repeatable)."""
    cmd = parent.add_parser(name, help=summary)
    _net_option(cmd)
    _switch_option(cmd)
    return cmd


def _typed(fn, what: str):
    def parse(text: str):
        try:
            return fn(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(f"invalid {what}: {e}") from None
    parse.__name__ = what
    return parse


def _layer(text: str) -> tuple[int, int]:
    lo, _, hi = text.partition("-")
    lo_i, hi_i = int(lo), int(hi or lo)
    if not 0 <= lo_i <= hi_i <= 0xFFFF:
        raise ValueError(f"{text!r} is not LO-HI within 0..65535")
    return lo_i, hi_i


def _msg_type(text: str) -> int:
    from .netfile import MSG_TYPES

    if text.lower() in MSG_TYPES:
        return MSG_TYPES[text.lower()]
    value = int(text)
    if not 0 <= value <= 15:
        raise ValueError(f"{text!r} is not data|ack|nack|control|0..15")
    return value


def _via(text: str) -> tuple[int, int | None]:
    port, _, mac = text.partition("@")
    return int(port), parse_mac(mac) if mac else None


def _prio(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 7:
        raise ValueError(f"{value} is not 0..7")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dlcpctl", description="Declarative P4Runtime controller for DLCP switches.")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more output (-vv: finsy debug logs)")
    _net_option(parser, top=True)
    sub = parser.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    cmd = _file_command(sub, "apply", "make the switches match the network file")
    cmd.add_argument("--dry-run", action="store_true", help="show what would change, write nothing")
    cmd.add_argument("--no-tm", action="store_true", help="leave traffic-manager settings alone")
    cmd.add_argument("--json", action="store_true", help="print the result as JSON")

    cmd = _file_command(sub, "diff", "print how the switches differ from the network file (writes nothing)")
    cmd.add_argument("--no-tm", action="store_true", help="leave traffic-manager settings out")
    cmd.add_argument("--json", action="store_true", help="print the drift as JSON")

    cmd = _file_command(sub, "run", "keep the switches matching the network file (long-running controller)")
    cmd.add_argument("--drift-interval", type=float, default=10.0,
                     help="seconds between drift checks of each switch (0: never; default 10)")
    cmd.add_argument("--poll", type=float, default=0.5, help="seconds between checks of the file (default 0.5)")
    cmd.add_argument("--retry", type=float, default=0.1,
                     help="seconds between reconnection attempts to a switch that is down (default 0.1)")
    cmd.add_argument("--no-tm", action="store_true", help="leave traffic-manager settings alone")

    cmd = sub.add_parser("show", help="show switch state")
    cmd.add_argument("what", choices=("tables", "counters", "queues", "drops"))
    _net_option(cmd)
    _switch_option(cmd)
    cmd.add_argument("--json", action="store_true", help="machine-readable output")

    cmd = _switch_command(sub, "watch", "live per-port, per-priority rates, drops and marks")
    cmd.add_argument("--interval", type=float, default=1.0, help="seconds between frames (default 1)")
    group = cmd.add_mutually_exclusive_group()
    group.add_argument("--once", action="store_true", help="render one frame and exit")
    group.add_argument("--frames", type=int, default=0, help="render N frames and exit (default: until Ctrl-C)")

    cmd = sub.add_parser("set", help="change one setting on the switches now (the next apply restores the file)")
    set_what = cmd.add_subparsers(dest="what", required=True, metavar="WHAT")
    sub_cmd = _switch_command(set_what, "threshold", "drop/mark thresholds (packets, 0 = off) per port and priority")
    sub_cmd.add_argument("--port", type=int, action="append", help="port (repeatable; default: every connected port)")
    sub_cmd.add_argument("--priority", type=_typed(_prio, "priority"), action="append",
                         help="priority 0..7 (repeatable; default: all)")
    sub_cmd.add_argument("--drop", type=int, help="drop threshold in packets")
    sub_cmd.add_argument("--mark", type=int, help="ECN marking threshold in packets")

    sub_cmd = set_what.add_parser("priority-map", help="one row of the DSCP or the DLCP priority map")
    sub_cmd.add_argument("map", choices=("dscp", "dlcp"))
    sub_cmd.add_argument("dscp", nargs="?", type=int, help="dscp: the DSCP value")
    sub_cmd.add_argument("queue_pos", nargs="?", type=_typed(_prio, "queue"), metavar="QUEUE", help="dscp: the queue")
    _net_option(sub_cmd)
    _switch_option(sub_cmd)
    sub_cmd.add_argument("--queue", type=_typed(_prio, "queue"), help="queue (dlcp)")
    sub_cmd.add_argument("--trust", action="store_true", help="dlcp: use the sender's DLCP priority")
    sub_cmd.add_argument("--delete", action="store_true", help="remove the row")
    sub_cmd.add_argument("--msg-type", type=_typed(_msg_type, "msg type"), help="data|ack|nack|control")
    sub_cmd.add_argument("--priority", type=_typed(_prio, "priority"), help="DLCP priority field")
    sub_cmd.add_argument("--mag-class", type=_typed(_prio, "magnitude class"), help="DLCP magnitude class 0..7")
    sub_cmd.add_argument("--layer", type=_typed(_layer, "layer range"), help="layer range LO-HI")
    sub_cmd.add_argument("--entry-priority", type=int, help="dlcp: P4Runtime entry priority (default: above all rows)")

    sub_cmd = _switch_command(set_what, "queue", "queue capacity and rate (traffic manager)")
    sub_cmd.add_argument("--port", type=int, required=True)
    sub_cmd.add_argument("--priority", type=_typed(_prio, "priority"), help="default: every priority of the port")
    sub_cmd.add_argument("--depth", type=int, help="capacity in packets")
    sub_cmd.add_argument("--rate-pps", type=float, help="packets per second (0 = unlimited)")

    sub_cmd = _switch_command(set_what, "link", "link rate, delay, loss of a port (embedded target)")
    sub_cmd.add_argument("--port", type=int, required=True)
    sub_cmd.add_argument("--rate", type=_typed(parse_rate, "rate"), help="e.g. 100Mbit")
    sub_cmd.add_argument("--delay", type=_typed(parse_delay, "delay"), help="e.g. 200us, 1ms")
    sub_cmd.add_argument("--loss", type=_typed(parse_loss, "loss"), help="e.g. 0.01 or 1%%")

    cmd = sub.add_parser("route", help="add or delete a route now (the next apply restores the file)")
    route_ops = cmd.add_subparsers(dest="op", required=True, metavar="OP")
    sub_cmd = route_ops.add_parser("add", help="add a route; several --via make an equal-cost group")
    sub_cmd.add_argument("prefix", help="IPv4 prefix, e.g. 10.9.0.0/16 (a bare address is a /32)")
    _net_option(sub_cmd)
    _switch_option(sub_cmd, many=False)
    sub_cmd.add_argument("--via", type=_typed(_via, "next hop"), action="append", required=True,
                         help="PORT or PORT@MAC (repeatable)")
    sub_cmd = route_ops.add_parser("del", help="delete a route")
    sub_cmd.add_argument("prefix")
    _net_option(sub_cmd)
    _switch_option(sub_cmd, many=False)

    cmd = sub.add_parser("packet-out", help="send a packet from the controller into a switch")
    _net_option(cmd)
    _switch_option(cmd, many=False)
    group = cmd.add_mutually_exclusive_group(required=True)
    group.add_argument("--hex", help="frame bytes as hex")
    group.add_argument("--file", type=Path, help="file holding the raw frame")
    cmd.add_argument("--meta", action="append", default=[], metavar="NAME=VALUE",
                     help="packet_out controller header field (if the program has one)")
    cmd.add_argument("--repeat", type=int, default=1, help="send the packet N times (default 1)")

    cmd = sub.add_parser("packet-in", help="print packets the switch sends to the controller")
    _net_option(cmd)
    _switch_option(cmd, many=False)
    cmd.add_argument("--count", type=int, default=1, help="stop after N packets (0: until --timeout)")
    cmd.add_argument("--timeout", type=float, default=10.0, help="seconds to wait (default 10)")
    cmd.add_argument("--json", action="store_true", help="one JSON object per packet")
    return parser


def _net_path(args: argparse.Namespace) -> str:
    path = getattr(args, "file", None) or args.net or os.environ.get("DLCP_NET")
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
        for switch, switch_lines in lines.items():
            if not switch_lines:
                console.print(f"{switch}: nothing to change", markup=False)
            for line in switch_lines:
                console.print(f"{switch}: {line}", markup=False)
    else:
        for line in lines:
            console.print(line, markup=False)


def _run(args: argparse.Namespace, console: "Output") -> int:
    from .api import Network
    from . import render

    if args.cmd == "run":
        return _run_controller(args, console)
    net = Network.from_file(_net_path(args))
    if args.cmd == "apply":
        result = net.apply(args.switch, dry_run=args.dry_run, tm=not args.no_tm, check=False)
        if args.json:
            console.text(json.dumps({
                "switches": {n: {"pipeline_pushed": r.pipeline_pushed, "pipeline_clears": r.pipeline_clears,
                                 "host_macs": r.host_macs, "inserts": r.inserts, "modifies": r.modifies,
                                 "deletes": r.deletes, "updates": r.updates, "tm_changes": r.tm_changes,
                                 "dry_run": r.dry_run} for n, r in result.switches.items()},
                "errors": {n: str(e) for n, e in result.errors.items()}}, indent=2))
        else:
            console.print(render.apply_table(result, verbose=args.verbose > 0 or args.dry_run))
        for n, e in result.errors.items():
            print(f"dlcpctl: {e}", file=sys.stderr)
        mismatches = [line for r in result.switches.values() for line in r.host_macs]
        for line in mismatches:  # applied, but the file is wrong about a host: fail loudly
            print(f"dlcpctl: invalid network file: {line}", file=sys.stderr)
        if result.errors:
            return next(iter(result.errors.values())).exit_code
        return EXIT_CODES["netfile"] if mismatches else 0

    if args.cmd == "diff":
        result = net.apply(args.switch, dry_run=True, tm=not args.no_tm, check=False)
        from .runner import drift_lines

        drift = {n: drift_lines(r) for n, r in result.switches.items()}
        if args.json:
            console.text(json.dumps({"drift": drift, "errors": {n: str(e) for n, e in result.errors.items()}}, indent=2))
        else:
            for n, lines in drift.items():
                if not lines:
                    console.print(f"{n}: in sync", markup=False)
                for line in lines:
                    console.print(f"{n}: {line}", markup=False)
        for n, e in result.errors.items():
            print(f"dlcpctl: {e}", file=sys.stderr)
        if result.errors:
            return next(iter(result.errors.values())).exit_code
        return EXIT_CODES["drift"] if any(drift.values()) else 0

    if args.cmd == "show":
        if args.what == "tables":
            data = net.tables(args.switch)
            if args.json:
                console.text(json.dumps(data, indent=2))
            else:
                console.print(render.tables_view(data))
            return 0
        stats = net.stats(args.switch, tm=args.what in ("queues", "drops"))
        if args.json:
            out: dict[str, Any] = {}
            for switch, st in stats.items():
                fields = st.to_dict()
                if args.what == "counters":
                    out[switch] = {k: fields[k] for k in ("ports", "nhop_packets", "ingress_drops")}
                elif args.what == "queues":
                    out[switch] = {"ports": fields.get("tm", {}).get("ports")} if st.tm is not None else {"ports": None}
                else:
                    out[switch] = {"eligible": {p: {q: c["eligible_drops"] for q, c in prios.items()
                                                    if c["eligible_drops"]} for p, prios in fields["ports"].items()},
                                   "ingress": fields["ingress_drops"],
                                   "tm": fields["tm"]["drops"] if st.tm is not None else None}
            console.text(json.dumps(out, indent=2))
        else:
            view = {"counters": render.counters_view, "queues": render.queues_view, "drops": render.drops_view}
            console.print(view[args.what](stats))
        return 0

    if args.cmd == "watch":
        return _watch(net, args, console)

    if args.cmd == "set":
        if args.what == "threshold":
            _print_lines(console, net.set_threshold(args.switch, args.port, args.priority, drop=args.drop,
                                                    mark=args.mark))
        elif args.what == "priority-map":
            if args.map == "dscp":
                queue = args.queue if args.queue is not None else args.queue_pos
                _print_lines(console, net.set_priority_map(args.switch, "dscp", dscp=args.dscp, queue=queue,
                                                           delete=args.delete))
            else:
                if args.dscp is not None:
                    raise UsageError("set priority-map dlcp takes options, not positional values")
                _print_lines(console, net.set_priority_map(
                    args.switch, "dlcp", queue=args.queue, trust=args.trust, msg_type=args.msg_type,
                    priority=args.priority, mag_class=args.mag_class, layer=args.layer,
                    entry_priority=args.entry_priority, delete=args.delete))
        elif args.what == "queue":
            _print_lines(console, net.set_queue(args.switch, args.port, args.priority, depth=args.depth,
                                                rate_pps=args.rate_pps))
        elif args.what == "link":
            _print_lines(console, net.set_link(args.switch, args.port, rate_bps=args.rate, delay_us=args.delay,
                                               loss=args.loss))
        return 0

    if args.cmd == "route":
        switch = _one_switch(net, args.switch)
        if args.op == "add":
            _print_lines(console, {switch: net.route_add(switch, args.prefix, args.via)})
        else:
            _print_lines(console, {switch: net.route_del(switch, args.prefix)})
        return 0

    if args.cmd == "packet-out":
        switch = _one_switch(net, args.switch)
        try:
            payload = bytes.fromhex(args.hex) if args.hex is not None else args.file.read_bytes()
        except (ValueError, OSError) as e:
            raise UsageError(f"cannot read the packet: {e}") from None
        meta = {}
        for m in args.meta:
            name, _, value = m.partition("=")
            try:
                meta[name] = int(value, 0)
            except ValueError:
                raise UsageError(f"--meta {m!r}: expected NAME=INTEGER") from None
        if args.repeat < 1:
            raise UsageError("--repeat must be at least 1")
        net.packet_out(switch, [payload] * args.repeat, meta or None)
        console.print(f"{switch}: sent {args.repeat} x {len(payload)} bytes", markup=False)
        return 0

    if args.cmd == "packet-in":
        switch = _one_switch(net, args.switch)

        def show(pkt) -> None:
            if args.json:
                console.text(json.dumps({"switch": switch, "time": time.time(), "payload": pkt.payload.hex(),
                                  "metadata": {k: int(v) if isinstance(v, int) else str(v)
                                               for k, v in pkt.metadata.items()}}))
            else:
                console.print(f"{switch}: {len(pkt.payload)} bytes {_summary(pkt.payload)}", markup=False)
                console.print(f"  {pkt.payload.hex()}", markup=False)
        net.packet_in(switch, args.count, args.timeout, on_packet=show)
        return 0
    raise UsageError(f"unknown command {args.cmd!r}")


def _summary(frame: bytes) -> str:
    try:
        from scapy.layers.l2 import Ether

        return Ether(frame).summary()
    except Exception:  # noqa: BLE001 - a summary is a nicety
        return ""


def _run_controller(args: argparse.Namespace, console: "Output") -> int:
    """``dlcpctl run``: until SIGINT/SIGTERM; one line per event on stdout."""
    import signal

    from .runner import RunOptions, Runner

    for name in ("drift_interval", "poll", "retry"):
        if getattr(args, name) < 0 or (name != "drift_interval" and getattr(args, name) == 0):
            raise UsageError(f"--{name.replace('_', '-')} must be positive")
    options = RunOptions(args.drift_interval, args.poll, args.retry, not args.no_tm)
    runner = Runner(_net_path(args), args.switch, options,
                    report=console.text)

    async def main_loop() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, runner.stop)
        await runner.run()

    asyncio.run(main_loop())
    return 0


def _watch(net, args: argparse.Namespace, console: Console) -> int:
    from . import render

    if args.interval <= 0:
        raise UsageError("--interval must be positive")
    frames = 1 if args.once else args.frames

    async def loop() -> None:
        async with net.stats_sessions(args.switch) as sessions:  # one connection per switch for every frame
            await frames_loop(sessions)

    async def frames_loop(sessions) -> None:
        prev = await sessions.read()
        count = 0
        live = None
        if console.is_terminal:
            from rich.live import Live

            live = Live(render.watch_frame(prev, prev, 0), console=console, refresh_per_second=4)
            live.start()
        try:
            while not frames or count < frames:
                await asyncio.sleep(args.interval)
                now = await sessions.read()
                count += 1
                frame = render.watch_frame(prev, now, count)
                if live is not None:
                    live.update(frame)
                else:
                    console.print(frame)
                prev = now
        finally:
            if live is not None:
                live.stop()

    try:
        asyncio.run(loop())
    except KeyboardInterrupt:
        pass
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("finsy").setLevel(logging.DEBUG if args.verbose >= 2 else logging.CRITICAL + 1)
    console = Output(highlight=False)
    try:
        code = _run(args, console)
        if console.closed:
            print(f"dlcpctl: standard output was closed before everything was written (broken pipe); the command "
                  f"ran to its end and exits with its own status {code}", file=sys.stderr)
        return code
    except NetFileError as e:
        print(f"dlcpctl: invalid network file: {e}", file=sys.stderr)
        return EXIT_CODES["netfile"]
    except ControllerError as e:
        print(f"dlcpctl: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # noqa: BLE001 - last resort: say it is args bug
        if args.verbose:
            traceback.print_exc()
        print(f"dlcpctl: internal error: {type(e).__name__}: {e} (run with -v for the traceback)", file=sys.stderr)
        return EXIT_CODES["internal"]


if __name__ == "__main__":
    sys.exit(main())
