"""Sweeps: a matrix of testbed runs with repetitions, summarised with medians and confidence intervals.

``dlcp-testbed sweep SWEEP.yaml [--out DIR]`` reads a sweep file::

    base: demo.yaml                 # the run spec every cell starts from (relative to this file)
    set: {steps: 60}                # overrides for every cell (dotted keys reach nested ones: topology.link.rate)
    cells:                          # named cells, each a set of overrides (default: one cell, "base")
      gloo-fair: {algorithm: ddp-gloo, loss_bound: 0, job_dscp: 48}
      dlcp: {}
    matrix:                         # optional: the cartesian product over these keys, crossed with the cells
      topology.link.rate: [10mbit, 20mbit]
    repetitions: 3                  # runs per cell
    seeds: [1, 2, 3]                # repetition r runs with seeds[r % len(seeds)]

Every cell's spec is loaded (and so validated) before anything runs. Runs are interleaved: repetition 0 of every
cell, then repetition 1 of every cell, ... (ABAB, not AAAA BBBB), so a slow drift of the machine (another job,
thermal throttling) spreads over all cells instead of biasing one; within a repetition all cells share its seed.

Per cell, each metric's median and a distribution-free confidence interval for the median (order statistics of
the binomial: the widest interval [x_(k), x_(n+1-k)] whose coverage is at least 95%; with fewer than 6 runs no
such interval exists, and the report gives [min, max] with its actual coverage, e.g. 75% for 3 runs). The
metrics come from each run's ``results.json`` summary: iteration time (p50 of the run), time to target, final
accuracy, zero-filled fraction, background goodput (iperf3's JSON) and CPU use; and the tails
(:data:`TAIL_METRICS`, :mod:`testbed.tails`): the run's p90/p99 step time, its collective calls' p50/p90/p99
completion time and the steps that waited on a retransmission timeout.

Output in DIR: ``sweep.json`` (every run's summary, the statistics, version metadata: git commit, package
versions, CPU, load), ``report.md`` (the table), ``sweep_<metric>.png`` (medians with their intervals as error
bars), and each run's own directory.

A sweep too long for one sitting runs in parts: ``dlcp-testbed sweep SWEEP.yaml --seeds 1,2`` runs one interleaved
repetition per seed given (the file's cells, its ``seeds`` and ``repetitions`` replaced), and ``dlcp-testbed merge
--out DIR PART...`` (:func:`merge_sweeps`) joins the parts' runs into one ``sweep.json`` with the statistics over
all of them, after checking that the parts ran the same cells with the same overrides on the same base; each
part's metadata (commit, load at its start and end, time) is kept in ``parts``.
"""

from __future__ import annotations

import itertools
import json
import os
import platform
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

from .spec import RunSpec, SpecError, load_spec
from .tails import quantile_ci

__all__ = ["Sweep", "Cell", "load_sweep", "make_sweep", "run_sweep", "median_ci", "cell_stats", "report_markdown",
           "format_stat", "plot_sweep", "METRICS", "TAIL_METRICS", "metadata", "merge_sweeps", "write_sweep"]

#: (summary key, label, unit scale, unit) of the metrics a sweep summarises.
METRICS: tuple[tuple[str, str, float, str], ...] = (
    ("iter_p50_s", "iteration time (p50)", 1000.0, "ms"),
    ("comm_compute_ratio", "exposed comm / compute", 1.0, ""),
    ("time_to_target_s", "time to target", 1.0, "s"),
    ("final_accuracy", "final accuracy", 1.0, ""),
    ("zero_filled_fraction", "zero-filled fraction", 100.0, "%"),
    ("background_goodput_bps", "background goodput", 1e-6, "Mb/s"),
    ("cpu_use", "CPU use (cores)", 1.0, ""),
    ("cpu_per_iter_s", "CPU per iteration (a worker's)", 1000.0, "ms"),
)
#: The tails (testbed.tails): per run its p90/p99 step time, the quantiles of its collective calls' completion
#: times and how many steps waited on a retransmission timeout; a sweep gives each the median over runs with the
#: same interval as METRICS. Reported in a table of their own (report.md, the demo), beside time to target.
TAIL_METRICS: tuple[tuple[str, str, float, str], ...] = (
    ("iter_p90_s", "iteration time (p90)", 1000.0, "ms"),
    ("iter_p99_s", "iteration time (p99)", 1000.0, "ms"),
    ("coll_p50_s", "collective call (p50)", 1000.0, "ms"),
    ("coll_p90_s", "collective call (p90)", 1000.0, "ms"),
    ("coll_p99_s", "collective call (p99)", 1000.0, "ms"),
    ("rto_steps", "steps that waited on an RTO", 1.0, ""),
)


@dataclass
class Cell:
    name: str
    overrides: dict[str, Any]
    spec: RunSpec


@dataclass
class Sweep:
    base: Path
    cells: list[Cell]
    repetitions: int = 3
    seeds: list[int] = field(default_factory=lambda: [1])
    source: str = "<sweep>"

    def order(self) -> list[tuple[int, int, Cell]]:
        """(repetition, seed, cell) in run order: interleaved, every cell once per repetition."""
        return [(r, self.seeds[r % len(self.seeds)], c) for r in range(self.repetitions) for c in self.cells]

    def part(self, seeds: list[int]) -> "Sweep":
        """The part of this sweep that runs one interleaved repetition per seed of ``seeds`` (``sweep --seeds``);
        the parts' results are joined by :func:`merge_sweeps`."""
        if not seeds:
            raise SpecError(self.source, "seeds", "a part needs at least one seed")
        return Sweep(self.base, self.cells, len(seeds), list(seeds), self.source)


def _cell_name(parts: list[str]) -> str:
    return ",".join(p for p in parts if p) or "base"


def make_sweep(base: Path, cells: dict[str, dict[str, Any]], common: dict[str, Any], matrix: dict[str, list],
               repetitions: int, seeds: list[int], source: str = "<sweep>") -> Sweep:
    """Build and validate every cell (cells x matrix product); a bad override is a SpecError naming the cell."""
    keys = list(matrix)
    combos = list(itertools.product(*(matrix[k] for k in keys))) if keys else [()]
    out = []
    for cname, over in (cells or {"base": {}}).items():
        for combo in combos:
            mo = dict(zip(keys, combo))
            name = _cell_name([cname if cells else ""] + [f"{k}={v}" for k, v in mo.items()])
            merged = {**common, **over, **mo}
            try:
                spec = load_spec(base, {**merged, "name": name.replace(",", "_").replace("=", "-")})
            except SpecError as e:
                raise SpecError(source, f"cells.{cname}", f"{e}") from None
            out.append(Cell(name, merged, spec))
    if repetitions < 1:
        raise SpecError(source, "repetitions", "must be >= 1")
    if not seeds:
        raise SpecError(source, "seeds", "needs at least one seed")
    return Sweep(base, out, repetitions, list(seeds), source)


def load_sweep(path: str | Path) -> Sweep:
    """Read and validate a sweep file (see the module docstring)."""
    p = Path(path)
    try:
        doc = yaml.safe_load(p.read_text())
    except OSError as e:
        raise SpecError(str(p), "", f"cannot read: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise SpecError(str(p), "", f"not valid YAML: {e}") from None
    if not isinstance(doc, dict):
        raise SpecError(str(p), "", "a sweep is a mapping of keys to values")
    known = {"base", "set", "cells", "matrix", "repetitions", "seeds"}
    for k in doc:
        if k not in known:
            raise SpecError(str(p), str(k), f"unknown key (known: {', '.join(sorted(known))})")
    if "base" not in doc:
        raise SpecError(str(p), "base", "missing: the run spec every cell starts from")
    base = (p.parent / str(doc["base"])).resolve()
    for key, kind in (("set", dict), ("cells", dict), ("matrix", dict), ("seeds", list)):
        if key in doc and not isinstance(doc[key], kind):
            raise SpecError(str(p), key, f"expected a {'mapping' if kind is dict else 'list'}")
    for name, over in (doc.get("cells") or {}).items():
        if not isinstance(over, dict):
            raise SpecError(str(p), f"cells.{name}", "expected a mapping of overrides ({} for the base as is)")
    for k, vals in (doc.get("matrix") or {}).items():
        if not isinstance(vals, list) or not vals:
            raise SpecError(str(p), f"matrix.{k}", "expected a non-empty list of values")
    reps = doc.get("repetitions", 3)
    if isinstance(reps, bool) or not isinstance(reps, int):
        raise SpecError(str(p), "repetitions", f"expected an integer, got {reps!r}")
    seeds = doc.get("seeds", [1])
    if any(isinstance(s, bool) or not isinstance(s, int) for s in seeds):
        raise SpecError(str(p), "seeds", f"expected integers, got {seeds!r}")
    return make_sweep(base, doc.get("cells") or {}, doc.get("set") or {}, doc.get("matrix") or {}, reps, seeds,
                      str(p))


# -- statistics ---------------------------------------------------------------------------------------------------

def median_ci(values: list[float], confidence: float = 0.95) -> dict[str, Any]:
    """Median and a distribution-free confidence interval for it: [x_(k), x_(n+1-k)] (1-based order statistics)
    with the largest k whose coverage 1 - 2 P(Binomial(n, 1/2) < k) is at least ``confidence``; when even k = 1
    falls short (n < 6 at 95%), [min, max] and its coverage. ``n`` counts the values given (None left out). This
    is :func:`testbed.tails.quantile_ci` at q = 1/2, whose two tails are then equal."""
    st = quantile_ci(values, 0.5, confidence)
    return {"n": st["n"], "median": st["value"], "lo": st["lo"], "hi": st["hi"], "coverage": st["coverage"]}


def cell_stats(summaries: list[dict[str, Any]]) -> dict[str, Any]:
    """Per metric, :func:`median_ci` of the runs' values; plus how many runs reached the target."""
    out: dict[str, Any] = {key: median_ci([s.get(key) for s in summaries]) for key, *_ in METRICS + TAIL_METRICS}
    out["runs"] = len(summaries)
    out["target_reached"] = sum(1 for s in summaries if s.get("time_to_target_s") is not None)
    return out


def format_stat(st: dict[str, Any], scale: float, unit: str, digits: int = 3) -> str:
    """``median unit [lo, hi]`` of a :func:`median_ci` result scaled for display, with the interval's coverage
    when it is below 95%; ``-`` without values."""
    if not st or st.get("median") is None:
        return "-"

    def f(v: float) -> str:
        return f"{v * scale:.{digits}g}"

    u = f" {unit}" if unit and unit != "%" else unit
    ci = f"[{f(st['lo'])}, {f(st['hi'])}]"
    cov = "" if st["coverage"] >= 0.95 else f" ({st['coverage']:.0%} CI)"
    return f"{f(st['median'])}{u} {ci}{cov}"


def report_markdown(doc: dict[str, Any]) -> str:
    """The sweep's Markdown report from its ``sweep.json`` document."""
    meta = doc["metadata"]
    lines = [f"# Sweep {doc.get('name', '')}".rstrip(), "",
             f"{doc['repetitions']} repetition(s) per cell, interleaved; seeds {doc['seeds']}. Each cell: median "
             f"[95% confidence interval of the median; with fewer than 6 runs, [min, max] and its coverage].", "",
             f"git {meta.get('git_commit', '?')[:12]}{' (dirty)' if meta.get('git_dirty') else ''}, "
             f"python {meta.get('python')}, torch {meta.get('packages', {}).get('torch')}, "
             f"{meta.get('cpu_count')} x {meta.get('cpu_model')}, load {meta.get('load_start')} -> "
             f"{meta.get('load_end')}", ""]
    head = ["cell", "runs"] + [f"{label}" for _key, label, _s, _u in METRICS] + ["target reached"]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "---|" * len(head))
    for name, st in doc["cells"].items():
        row = [name, str(st["runs"])] + [format_stat(st.get(key), scale, unit) for key, _l, scale, unit in METRICS]
        row.append(f"{st['target_reached']}/{st['runs']}")
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", "Tails (per run: p90/p99 of its step times, quantiles of every collective call's completion time "
                  "on every rank, steps that waited on a retransmission timeout on any rank; here the median over "
                  "runs and its interval):", ""]
    tail = [("time_to_target_s", "time to target", 1.0, "s")] + list(TAIL_METRICS)
    lines.append("| cell | " + " | ".join(label for _k, label, _s, _u in tail) + " |")
    lines.append("|" + "---|" * (len(tail) + 1))
    for name, st in doc["cells"].items():
        lines.append(f"| {name} | " + " | ".join(format_stat(st.get(key), scale, unit)
                                                 for key, _l, scale, unit in tail) + " |")
    if doc.get("failed"):
        f = doc["failed"]
        lines += ["", f"**Incomplete**: run {f['run']} ({f['cell']}, repetition {f['repetition']}, seed {f['seed']}) "
                      f"failed and stopped the sweep: {f['error']}"]
    lines += ["", "Runs, in the order they ran:", "", "| # | cell | repetition | seed | iteration p50 | results |",
              "|---|---|---|---|---|---|"]
    for i, r in enumerate(doc["runs"]):
        it = r["summary"].get("iter_p50_s")
        lines.append(f"| {i} | {r['cell']} | {r['repetition']} | {r['seed']} | "
                     f"{'-' if it is None else f'{it * 1000:.1f} ms'} | {r['results']} |")
    return "\n".join(lines) + "\n"


def plot_sweep(doc: dict[str, Any], out: Path) -> list[Path]:
    """One PNG per metric: each cell's median with its interval as error bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    names = list(doc["cells"])
    for key, label, scale, unit in METRICS + TAIL_METRICS:
        sts = [doc["cells"][n].get(key) or {"median": None} for n in names]
        if all(s["median"] is None for s in sts):
            continue
        med = [(s["median"] or 0.0) * scale for s in sts]
        lo = [max(0.0, m - (s["lo"] or 0.0) * scale) if s["median"] is not None else 0.0 for m, s in zip(med, sts)]
        hi = [max(0.0, (s["hi"] or 0.0) * scale - m) if s["median"] is not None else 0.0 for m, s in zip(med, sts)]
        fig, ax = plt.subplots(figsize=(max(4.0, 1.3 * len(names)), 3.5))
        ax.bar(range(len(names)), med, yerr=[lo, hi], capsize=5, color="#4c72b0")
        ax.set_xticks(range(len(names)), names, rotation=20, ha="right", fontsize=8)
        ax.set_ylabel(f"{label} ({unit})" if unit else label)
        ax.set_title(f"{label}: median, interval over {doc['repetitions']} runs")
        fig.tight_layout()
        p = out / f"sweep_{key}.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        paths.append(p)
    return paths


# -- metadata -----------------------------------------------------------------------------------------------------

def _git(*args: str) -> str:
    root = Path(__file__).resolve().parents[1]
    r = subprocess.run(["git", *args], capture_output=True, text=True, cwd=root)
    return r.stdout.strip() if r.returncode == 0 else ""


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def metadata() -> dict[str, Any]:
    """What produced these numbers: commit, package versions, CPU, kernel, load."""
    from importlib import metadata as md

    pkgs = {}
    for name in ("dlcp", "torch", "numpy", "finsy", "grpcio"):
        try:
            pkgs[name] = md.version(name)
        except md.PackageNotFoundError:
            pkgs[name] = None
    cpu = ""
    try:
        cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                    if ln.startswith("model name")), "")
    except OSError:
        pass
    return {"git_commit": _git("rev-parse", "HEAD"), "git_dirty": bool(_git("status", "--porcelain", "--",
                                                                                 "mininet", "host", "switch",
                                                                                 "controller", "p4src")),
            "python": platform.python_version(), "packages": pkgs, "kernel": platform.release(),
            "cpu_model": cpu, "cpu_count": os.cpu_count(), "load_start": _load(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


# -- running ------------------------------------------------------------------------------------------------------

def write_sweep(doc: dict[str, Any], out: Path) -> None:
    """Write ``doc`` (its statistics already computed) into ``out``: sweep.json, report.md and the plots."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "sweep.json").write_text(json.dumps(doc, indent=1, default=str))
    (out / "report.md").write_text(report_markdown(doc))
    if doc["runs"]:
        doc["plots"] = [str(p) for p in plot_sweep(doc, out)]
        (out / "sweep.json").write_text(json.dumps(doc, indent=1, default=str))


def merge_sweeps(parts: list[tuple[str, dict[str, Any]]], source: str | None = None) -> dict[str, Any]:
    """One sweep document from the parts of a sweep run in several sittings: ``parts`` is (where each part's
    results are, its ``sweep.json`` document) in the order they ran. The parts must have the same base spec and the
    same cells with the same overrides (a ValueError names the first part that differs) and none may have failed.
    Runs keep their order (each part's after the previous part's) and their results path, prefixed with the part's
    location; their repetitions are numbered on (a second part's first is the first part's count); ``repetitions`` and ``seeds`` are the parts' together; the statistics are recomputed over every run.
    ``metadata`` is the first part's, with the last part's ``load_end``; ``parts`` lists each part's location,
    seeds and metadata. ``source``: the sweep file to name as the source (default: the first part's)."""
    if not parts:
        raise ValueError("merge: no sweep to merge")
    first_where, first = parts[0]
    for where, doc in parts:
        if doc.get("failed"):
            raise ValueError(f"merge: {where}: the part is incomplete (run {doc['failed']['run']} failed: "
                             f"{doc['failed']['error']})")
        if doc.get("base") != first.get("base"):
            raise ValueError(f"merge: {where}: base spec {doc.get('base')!r} is not {first_where}'s "
                             f"{first.get('base')!r}")
        if doc.get("cell_overrides") != first.get("cell_overrides"):
            raise ValueError(f"merge: {where}: its cells or their overrides differ from {first_where}'s "
                             f"({sorted(doc.get('cell_overrides') or {})} vs {sorted(first.get('cell_overrides') or {})})")
    runs, offset = [], 0
    for where, doc in parts:  # repetitions numbered on across the parts, so (repetition, cell) stays a key
        runs += [{**r, "repetition": r["repetition"] + offset, "results": f"{where}/{r['results']}"}
                 for r in doc["runs"]]
        offset += doc["repetitions"]
    meta = {**first["metadata"], "load_end": parts[-1][1]["metadata"].get("load_end")}
    merged: dict[str, Any] = {
        "name": first.get("name", ""), "source": source or first.get("source"), "base": first.get("base"),
        "repetitions": sum(d["repetitions"] for _w, d in parts), "seeds": [s for _w, d in parts for s in d["seeds"]],
        "cell_overrides": first.get("cell_overrides"), "metadata": meta,
        "parts": [{"results": where, "seeds": d["seeds"], "repetitions": d["repetitions"],
                   "source": d.get("source"), "metadata": d["metadata"]} for where, d in parts],
        "runs": runs, "cells": {}}
    for cell in first["cells"]:
        merged["cells"][cell] = cell_stats([r["summary"] for r in runs if r["cell"] == cell])
    return merged


def run_sweep(sweep: Sweep, out: Path, *, console=None, name: str = "",
              on_run: Callable[[int, int, dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Run every cell ``sweep.repetitions`` times in interleaved order; write sweep.json, report.md and plots into
    ``out``; return the sweep document. A failed run stops the sweep (its RunError propagates) after writing what
    ran so far."""
    from .compare import load_result
    from .run import run_spec

    out.mkdir(parents=True, exist_ok=True)
    doc: dict[str, Any] = {"name": name, "source": sweep.source, "base": str(sweep.base),
                           "repetitions": sweep.repetitions, "seeds": sweep.seeds,
                           "cell_overrides": {c.name: c.overrides for c in sweep.cells}, "metadata": metadata(),
                           "runs": [], "cells": {}}
    order = sweep.order()
    try:
        for i, (rep, seed, cell) in enumerate(order):
            spec = load_spec(sweep.base, {**cell.overrides, "seed": seed, "name": f"{cell.spec.name}-r{rep}"})
            if console is not None:
                console.rule(f"run {i + 1}/{len(order)}: {cell.name}, repetition {rep}, seed {seed}")
            rdir = out / f"{i:03d}-{spec.name}"
            try:
                res = load_result(run_spec(spec, rdir, console=console, plots=False))
            except Exception as e:
                doc["failed"] = {"cell": cell.name, "repetition": rep, "seed": seed, "run": i,
                                 "results": str(rdir.relative_to(out)), "error": str(e)}
                raise
            doc["runs"].append({"cell": cell.name, "repetition": rep, "seed": seed,
                                "results": str(rdir.relative_to(out) / "results.json"),
                                "summary": res["summary"]})
            if on_run is not None:
                on_run(i, len(order), doc["runs"][-1])
    finally:
        doc["metadata"]["load_end"] = _load()
        for cell in sweep.cells:
            doc["cells"][cell.name] = cell_stats([r["summary"] for r in doc["runs"] if r["cell"] == cell.name])
        write_sweep(doc, out)
    return doc
