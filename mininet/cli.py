"""``dlcp-testbed``: run testbed specs, compare results, run the demo.

    dlcp-testbed run SPEC.yaml [--out DIR] [--set key=value ...]
    dlcp-testbed compare A.json B.json [...]
    dlcp-testbed sweep SWEEP.yaml [--out DIR] [--seeds 1,2,...]
    dlcp-testbed merge --out DIR PART_DIR [PART_DIR ...] [--source SWEEP.yaml]
    dlcp-testbed demo [--out DIR] [--steps N] [--repetitions N] [--handicapped]
    dlcp-testbed clean
    dlcp-testbed hosts NET.yaml [--switch S] [--delete]

Exit codes: 0 success; 1 a run failed (the message says at which stage); 2 bad command line, spec or results
file (the message names the key and line); 130 interrupted (after teardown).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import yaml

from .compare import ResultError, load_result, print_comparison
from .spec import SpecError, load_spec

__all__ = ["main", "DEMO_SPEC"]

DEMO_SPEC = Path(__file__).resolve().parents[1] / "examples" / "testbed" / "demo.yaml"


def _overrides(pairs: list[str]) -> dict:
    out = {}
    for p in pairs:
        if "=" not in p:
            raise SpecError("--set", p, "expected key=value")
        k, v = p.split("=", 1)
        out[k.strip()] = yaml.safe_load(v)
    return out


def _console():
    from rich.console import Console

    return Console()


def cmd_run(args) -> int:
    from .run import run_spec

    spec = load_spec(args.spec, _overrides(args.set or []))
    console = _console()
    path = run_spec(spec, args.out, console=console)
    r = load_result(path)
    print_comparison([r], console)
    console.print(f"results: {path}")
    for p in r.get("plots", []):
        console.print(f"plot: {p}")
    return 0


def cmd_compare(args) -> int:
    runs = [load_result(p) for p in args.results]
    print_comparison(runs, _console())
    return 0


def cmd_sweep(args) -> int:
    from .sweep import load_sweep, run_sweep

    sweep = load_sweep(args.sweep)
    if args.seeds:
        try:
            seeds = [int(x) for x in args.seeds.split(",")]
        except ValueError:
            raise SpecError("--seeds", "", f"expected integers separated by commas, got {args.seeds!r}") from None
        sweep = sweep.part(seeds)  # to be joined with the other parts by `dlcp-testbed merge`
    console = _console()
    out = Path(args.out or f"/tmp/dlcp-sweep-{time.strftime('%Y%m%d-%H%M%S')}")
    console.print(f"sweep {args.sweep}: {len(sweep.cells)} cell(s) x {sweep.repetitions} repetition(s), "
                  f"interleaved; results in {out}")
    run_sweep(sweep, out, console=console, name=Path(args.sweep).stem)
    console.print((out / "report.md").read_text())
    console.print(f"report: {out / 'report.md'}  raw: {out / 'sweep.json'}")
    return 0


def cmd_merge(args) -> int:
    import json

    from .sweep import merge_sweeps, write_sweep

    parts = []
    for d in args.parts:
        path = Path(d) / "sweep.json" if Path(d).is_dir() else Path(d)
        try:
            parts.append((str(path.parent.resolve()), json.loads(path.read_text())))
        except (OSError, ValueError) as e:
            raise ResultError(f"{path}: cannot read a sweep.json: {e}") from None
    try:
        doc = merge_sweeps(parts, source=args.source)
    except ValueError as e:
        raise ResultError(str(e)) from None
    out = Path(args.out)
    write_sweep(doc, out)
    _console().print((out / "report.md").read_text())
    print(f"merged {len(parts)} part(s), {len(doc['runs'])} runs: {out / 'sweep.json'}")
    return 0


#: The fair baseline's host TCP (every host, both sides): DCTCP with ECN where the kernel lets a namespace pick
#: it, otherwise Reno with ECN (halves its window on a CE mark), and a 5 ms minimum RTO instead of 200 ms.
FAIR_TCP_PREFERENCE = ("dctcp", "reno")
#: DSCP for Gloo's TCP in the fair baseline: CS6, which the default DSCP map puts in queue 6, the highest queue
#: DLCP's data uses (DLCP's layers are spread over 1..6), so Gloo's traffic is never below DLCP's.
FAIR_JOB_DSCP = 48


def fair_tcp() -> dict:
    from .run import _available_congestion_control

    have = _available_congestion_control()
    cc = next((c for c in FAIR_TCP_PREFERENCE if c in have), None)
    if cc is None:
        raise SpecError("demo", "tcp.congestion_control", f"none of {', '.join(FAIR_TCP_PREFERENCE)} can be set in "
                                                          f"a namespace here (available: {', '.join(have)})")
    return {"congestion_control": cc, "ecn": True, "rto_min_ms": 5}


def demo_cells(handicapped: bool) -> tuple[dict[str, dict], dict]:
    """The demo's cells: fair Gloo and DLCP with the same host TCP (and the handicapped Gloo when asked)."""
    tcp = fair_tcp()
    cells = {"gloo-fair": {"algorithm": "ddp-gloo", "loss_bound": 0.0, "job_dscp": FAIR_JOB_DSCP, "tcp": tcp},
             "dlcp": {"tcp": tcp}}
    if handicapped:
        # the old baseline: Gloo's TCP in queue 0 with the background, the kernel's default TCP, no ECN
        cells = {"gloo-handicapped": {"algorithm": "ddp-gloo", "loss_bound": 0.0}, **cells}
    return cells, tcp


def cmd_demo(args) -> int:
    """The main job: the same 4-worker leaf-spine network with background TCP, DDP over Gloo with its traffic in
    DLCP's class and DCTCP/ECN (the fair baseline) against DLCP (DeAR + bounded loss + priorities + per-packet
    spraying), interleaved repetitions; prints each side's median with its interval."""
    from .sweep import make_sweep, run_sweep

    console = _console()
    out = Path(args.out or f"/tmp/dlcp-demo-{time.strftime('%Y%m%d-%H%M%S')}")
    cells, tcp = demo_cells(args.handicapped)
    common = {"steps": args.steps} if args.steps else {}
    sweep = make_sweep(Path(args.spec), cells, common, {}, args.repetitions,
                       [1 + r for r in range(args.repetitions)], "demo")
    dlcp = sweep.cells[-1].spec
    console.rule("[bold]dlcp demo[/]")
    console.print(f"spec {args.spec}: {dlcp.topology.kind}, {dlcp.workers} workers, {dlcp.model} on {dlcp.dataset}, "
                  f"{len(dlcp.background)} background flow(s), {dlcp.steps} steps; every host's TCP: "
                  f"{tcp['congestion_control']} + ECN, rto_min {tcp['rto_min_ms']} ms")
    console.print(f"fair baseline: Gloo's TCP marked DSCP {FAIR_JOB_DSCP} -> queue 6 (DLCP's data: queues 1-6); "
                  f"{args.repetitions} interleaved repetitions per side; results in {out}")
    doc = run_sweep(sweep, out, console=console, name="demo")
    print_demo(doc, console)
    console.print(f"report: {out / 'report.md'}  raw: {out / 'sweep.json'}")
    return 0


def print_demo(doc: dict, console) -> None:
    """Each side's median [interval] of the headline metrics, and DLCP's speed-up over each baseline's median."""
    from rich.markup import escape
    from rich.table import Table

    from .sweep import METRICS, TAIL_METRICS, format_stat

    cells = doc["cells"]
    labels = {"gloo-handicapped": "Gloo, handicapped (queue 0, default TCP)",
              "gloo-fair": "Gloo, fair (DLCP's class, ECN)", "dlcp": "DLCP"}
    t = Table(title=escape(f"dlcp demo: median [interval] over {doc['repetitions']} interleaved runs"))
    t.add_column("metric")
    for name in cells:
        t.add_column(labels.get(name, name))
    rows = {key: (label, scale, unit) for key, label, scale, unit in METRICS + TAIL_METRICS}  # the sweep's own
    for key in ("iter_p50_s", "iter_p90_s", "iter_p99_s", "coll_p50_s", "coll_p99_s", "rto_steps", "time_to_target_s",
                "final_accuracy", "zero_filled_fraction", "background_goodput_bps"):
        label, scale, unit = rows[key]
        t.add_row(label, *[escape(format_stat(cells[n].get(key), scale, unit)) for n in cells])
    t.add_row("target reached", *[f"{cells[n]['target_reached']}/{cells[n]['runs']}" for n in cells])
    console.print(t)
    for key, what in (("iter_p50_s", "iteration time (p50)"), ("iter_p99_s", "iteration time (p99)"),
                      ("time_to_target_s", "time to target")):
        d = (cells["dlcp"].get(key) or {}).get("median")
        for name in cells:
            b = (cells[name].get(key) or {}).get("median")
            if name != "dlcp" and b and d:
                console.print(f"DLCP {what} vs {labels.get(name, name)}: {b / d:.2f}x (ratio of medians)")


def cmd_clean(args) -> int:  # noqa: ARG001
    """Remove what runs that died left: their processes (by recorded pid and start time), interfaces and
    namespaces; switch interfaces and testbed namespaces no live run holds. Live runs are left alone."""
    import os

    from .guard import clean, live_records, state_dir

    if os.geteuid() != 0:
        print("dlcp-testbed: clean removes interfaces and namespaces and needs root", file=sys.stderr)
        return 2
    done = clean()
    for line in done:
        print(line)
    live = live_records()
    print(f"dlcp-testbed clean: {len(done)} thing(s) removed; {len(live)} live run(s) left alone"
          + "".join(f"\n  pid {r.pid}: {r.out_dir}" for r in live) + f" (state: {state_dir()})")
    return 0


def cmd_hosts(args) -> int:
    """The hosts of one switch of a network file as namespaces on veths ``veth<PORT>`` (testbed.hosts), or
    (--delete) remove them."""
    import os

    from .hosts import create_hosts, delete_hosts, plan_hosts
    from .netns import NetnsError

    if os.geteuid() != 0:
        print("dlcp-testbed: hosts creates namespaces and interfaces and needs root", file=sys.stderr)
        return 2
    try:
        switch, plans = plan_hosts(args.net, args.switch)
    except Exception as e:  # noqa: BLE001 - NetFileError, ValueError: the message names file, key and line
        print(f"dlcp-testbed: {e}", file=sys.stderr)
        return 2
    if args.delete:
        removed = delete_hosts(plans)
        print(f"dlcp-testbed hosts: removed {', '.join(removed) or 'nothing'}")
        return 0
    try:
        create_hosts(plans)
    except NetnsError as e:
        print(f"dlcp-testbed: {e}", file=sys.stderr)
        return 1
    ports = " ".join(f"-i {h.port}@{h.switch_if}" for h in plans)
    for h in plans:
        print(f"{h.name}: namespace {h.name}, eth0 {h.mac} {h.ip}, switch {switch} port {h.port} on {h.switch_if}")
    print(f"next: dlcp-switch {ports} --cpu-port 255 p4src/dlcp.p4 &   then: dlcpctl apply {args.net}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="dlcp-testbed", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run one spec")
    r.add_argument("spec")
    r.add_argument("--out", help="results directory (default: a new /tmp/dlcp-<name>-* directory)")
    r.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a top-level spec key")
    r.set_defaults(fn=cmd_run)
    c = sub.add_parser("compare", help="side-by-side table of results files")
    c.add_argument("results", nargs="+")
    c.set_defaults(fn=cmd_compare)
    w = sub.add_parser("sweep", help="a matrix of runs with repetitions: medians, intervals, report, plots")
    w.add_argument("sweep")
    w.add_argument("--out", help="results directory (default: a new /tmp/dlcp-sweep-* directory)")
    w.add_argument("--seeds", help="run only these seeds, one interleaved repetition each (comma-separated): one "
                                   "part of a sweep run in several sittings, joined by `dlcp-testbed merge`")
    w.set_defaults(fn=cmd_sweep)
    m = sub.add_parser("merge", help="join the parts of a sweep run in several sittings (sweep --seeds) into one")
    m.add_argument("parts", nargs="+", metavar="PART", help="a part's results directory (or its sweep.json)")
    m.add_argument("--out", required=True, help="directory for the merged sweep.json, report.md and plots")
    m.add_argument("--source", help="the sweep file to record as the source (default: the first part's)")
    m.set_defaults(fn=cmd_merge)
    d = sub.add_parser("demo", help="fair Gloo vs DLCP on the same congested leaf-spine network, repeated")
    d.add_argument("--spec", default=str(DEMO_SPEC))
    d.add_argument("--out")
    d.add_argument("--steps", type=int, help="override the spec's steps (quicker demo)")
    d.add_argument("--repetitions", type=int, default=3, help="interleaved runs per side (default 3)")
    d.add_argument("--handicapped", action="store_true",
                   help="also run the old baseline (Gloo in queue 0, kernel TCP), labelled as such")
    d.set_defaults(fn=cmd_demo)
    k = sub.add_parser("clean", help="remove what killed runs left: processes, interfaces, namespaces")
    k.set_defaults(fn=cmd_clean)
    h = sub.add_parser("hosts", help="the hosts of one switch of a network file as namespaces on veths, "
                                     "for a dlcp-switch started by hand (the README's quick-start)")
    h.add_argument("net", metavar="NET.yaml")
    h.add_argument("--switch", help="which switch (default: the file's only one)")
    h.add_argument("--delete", action="store_true", help="remove them")
    h.set_defaults(fn=cmd_hosts)
    args = ap.parse_args(argv)
    try:
        return args.fn(args)
    except (SpecError, ResultError) as e:
        print(f"dlcp-testbed: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("dlcp-testbed: interrupted (network torn down)", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001  (one clear line; the run's logs hold the details)
        from .run import RunError

        if isinstance(e, RunError):
            print(f"dlcp-testbed: run failed: {e}", file=sys.stderr)
            return 1
        raise


if __name__ == "__main__":
    sys.exit(main())
