"""Side-by-side table of testbed runs (``dlcp-testbed compare A.json B.json ...``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["load_result", "comparison_rows", "print_comparison"]


class ResultError(ValueError):
    """A results file that is missing or is not a testbed results JSON."""


def load_result(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    try:
        r = json.loads(p.read_text())
    except OSError as e:
        raise ResultError(f"{p}: cannot read ({e.strerror})") from None
    except json.JSONDecodeError as e:
        raise ResultError(f"{p}:{e.lineno}: not JSON ({e.msg})") from None
    for key in ("spec", "summary", "workers"):
        if key not in r:
            raise ResultError(f"{p}: not a testbed results file (no {key!r} key)")
    return r


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v * 1000:.1f} ms"


def _s(v: float | None) -> str:
    return "not reached" if v is None else f"{v:.1f} s"


def _prios(d: dict[str, int]) -> str:
    items = [f"p{k}:{v}" for k, v in sorted(d.items(), key=lambda kv: int(kv[0])) if v]
    return " ".join(items) if items else "0"


def comparison_rows(runs: list[dict[str, Any]]) -> list[tuple[str, list[str]]]:
    """(metric, [value per run]) rows; the last columns' ratios are against the first run."""
    rows: list[tuple[str, list[str]]] = []
    s = [r["summary"] for r in runs]
    rows.append(("algorithm", [x["algorithm"] for x in s]))
    rows.append(("steps", [str(x["steps"]) for x in s]))
    rows.append(("iteration p50", [_ms(x["iter_p50_s"]) for x in s]))
    rows.append(("iteration p90", [_ms(x.get("iter_p90_s")) for x in s]))
    rows.append(("iteration p99", [_ms(x["iter_p99_s"]) for x in s]))
    rows.append(("collective call p50 / p99", [f"{_ms(x.get('coll_p50_s'))} / {_ms(x.get('coll_p99_s'))} "
                                               f"({x.get('coll_calls', 0)} calls)" for x in s]))
    rows.append(("steps that waited on an RTO", ["-" if x.get("rto_steps") is None else
                                                 f"{x['rto_steps']} of {x['iter_quantiles']['p50']['n']} measured"
                                                 for x in s]))
    rows.append(("training time", [_s(x["train_time_s"]) for x in s]))
    rows.append((f"time to target ({s[0].get('target_accuracy')})", [_s(x["time_to_target_s"]) for x in s]))
    rows.append(("final accuracy", [f"{x['final_accuracy']:.4f}" for x in s]))
    rows.append(("drops by priority", [_prios((r.get("switches") or {}).get("drops_by_priority", {}))
                                       for r in runs]))
    rows.append(("ECN marks by priority", [_prios((r.get("switches") or {}).get("marks_by_priority", {}))
                                           for r in runs]))
    rows.append(("zero-filled elements", [str(x.get("zero_filled_elements", 0)) for x in s]))
    rows.append(("zero-filled fraction (worst step / bound)",
                 [f"{x.get('zero_filled_fraction', 0.0):.4%} ({x.get('zero_filled_step_max', 0.0):.4%} / "
                  f"{x.get('loss_bound', 0.0):.2%})" for x in s]))
    if len(runs) > 1:
        base = s[0]
        for key, name in (("iter_p50_s", "p50 speed-up vs first"), ("train_time_s", "training speed-up vs first")):
            rows.append((name, ["1.00x"] + [f"{base[key] / x[key]:.2f}x" if x[key] else "-" for x in s[1:]]))
    return rows


def print_comparison(runs: list[dict[str, Any]], console=None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    t = Table(title="dlcp testbed comparison")
    t.add_column("metric")
    for r in runs:
        t.add_column(r["spec"]["name"])
    for name, vals in comparison_rows(runs):
        t.add_row(name, *vals)
    console.print(t)
