"""``dlcp-testbed``: run testbed specs, compare results, run the demo.

    dlcp-testbed run SPEC.yaml [--out DIR] [--set key=value ...]
    dlcp-testbed compare A.json B.json [...]
    dlcp-testbed demo [--out DIR] [--steps N]

Exit codes: 0 success; 1 a run failed (the message says at which stage); 2 bad command line, spec or results
file (the message names the key and line); 130 interrupted (after teardown).
"""

from __future__ import annotations

import argparse
import json
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


def cmd_demo(args) -> int:
    """The main job: the same 4-worker leaf-spine network with background TCP, first DDP over Gloo, then DLCP
    (DeAR + bounded loss + priorities + per-packet spraying); prints the comparison and the plots' paths."""
    from .plots import plot_runs
    from .run import run_spec

    console = _console()
    out = Path(args.out or f"/tmp/dlcp-demo-{time.strftime('%Y%m%d-%H%M%S')}")
    out.mkdir(parents=True, exist_ok=True)
    extra = {"steps": args.steps} if args.steps else {}
    base = load_spec(args.spec, {"name": "gloo-ddp", "algorithm": "ddp-gloo", "loss_bound": 0.0, **extra})
    dlcp = load_spec(args.spec, {**extra})
    console.rule("[bold]dlcp demo[/]")
    console.print(f"spec {args.spec}: {dlcp.topology.kind}, {dlcp.workers} workers, {dlcp.model} on {dlcp.dataset}, "
                  f"{len(dlcp.background)} background flow(s); results in {out}")
    runs = []
    for spec in (base, dlcp):
        console.rule(f"run: {spec.name} ({spec.algorithm})")
        runs.append(load_result(run_spec(spec, out / spec.name, console=console)))
    console.rule("comparison")
    print_comparison(runs, console)
    plots = plot_runs(runs, out, prefix="compare_")
    (out / "comparison.json").write_text(json.dumps([r["summary"] for r in runs], indent=1))
    for p in plots:
        console.print(f"plot: {p}")
    console.print(f"results: {out / base.name / 'results.json'} {out / dlcp.name / 'results.json'}")
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
    d = sub.add_parser("demo", help="DDP over Gloo vs DLCP on the same congested leaf-spine network")
    d.add_argument("--spec", default=str(DEMO_SPEC))
    d.add_argument("--out")
    d.add_argument("--steps", type=int, help="override the spec's steps (quicker demo)")
    d.set_defaults(fn=cmd_demo)
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
