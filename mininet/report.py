"""The tables in ``docs/`` and ``README.md`` that quote measurements, generated from the committed ``results/``.

    make report                                 # rewrite every generated table from its data
    python -m testbed.report --check            # exit 1 naming every table that no longer matches its data

Every figure a doc quotes from a benchmark or an evaluation run comes from a small JSON file under ``results/``
(which records the machine, the commit and the command that made it), never from a hand-typed table. A
generated table sits between two markers in its markdown file::

    <!-- begin generated: NAME (make report, from results/FILE.json) -->
    ...
    <!-- end generated: NAME -->

and is exactly what :data:`REGIONS` ``[NAME]`` renders from the file; editing it by hand makes ``--check`` (and
the test suite, ``tests/test_report.py``) fail. A few figures are computed, not measured (A²CiD²'s constants of a
graph): their region says ``computed by MODULE`` instead and is rendered by calling it, so they too follow the code. ``docs/evaluation.md`` is generated whole by
:mod:`testbed.evaluation`, with the sweeps named in its own header comment; this module only re-runs that.

To refresh a figure: re-run the command recorded in its JSON, take the new result into ``results/``
(``python -m testbed.report --take bench/results/NAME.json``: the benchmark harness's JSON with each repetition
cut to its metric, rounded to 4 significant digits, so that the committed file stays small), ``make report``.
Runs that are not benchmarks write their results file themselves (``make fuzz``: ``results/fuzz.json``;
``make test-torch-suite``: ``results/torch_suite.json``, through ``tests/host/torch_suite.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from .changes import predates  # (DEFAULT_CHANGES, the list it reads, is in mininet/changes.py)

__all__ = ["REGIONS", "Region", "dumps", "render_all", "stale", "main"]

ROOT = Path(__file__).resolve().parent.parent

Result = dict[str, Any]

BEGIN = re.compile(r"^<!-- begin generated: (?P<name>[\w-]+) .*-->$", re.M)


def _end(name: str) -> str:
    return f"<!-- end generated: {name} -->"


@dataclass(frozen=True)
class Region:
    """One generated table: where it lives, the results it is made from, and how."""

    name: str
    doc: str  #: markdown file, relative to the repository root
    sources: tuple[str, ...]  #: JSON files under results/, relative to the repository root
    render: Callable[..., str]  #: one parsed JSON document per source -> markdown (without the markers)
    #: for figures that are computed, not measured (no source): the module that computes them
    computed_by: str = ""

    def begin(self) -> str:
        origin = f"computed by {self.computed_by}" if self.computed_by else f"from {', '.join(self.sources)}"
        return f"<!-- begin generated: {self.name} (make report, {origin}) -->"


# --- shared pieces --------------------------------------------------------------------------------------------------


def provenance(result: Result) -> str:
    """Who made a result: the command, the commit and the machine, as one sentence; and, when the defaults have
    changed since in a way that concerns it, a sentence that says so."""
    machine = result.get("machine")
    command = result.get("command") or result.get("params", {}).get("command") or "an unrecorded command"
    commit = (machine or {}).get("commit") or result.get("commit", "?")
    if not machine:
        return f"Measured by `{command}` at commit `{commit[:12]}`."
    load = machine.get("loadavg") or [float("nan")]
    stale_note = "".join(f" **This result predates a change of defaults: {c}; its figures describe the old "
                         f"defaults.**" for c in predates(result))
    return (f"Measured by `{command}` at commit `{commit}` on {machine.get('cpus', '?')} x "
            f"{machine.get('cpu', '?')} (load {load[0]:.1f} at the end), {machine.get('time', '?')}." + stale_note)


def _cases(result: Result) -> dict[str, Result]:
    return {case["case"]: case for case in result["cases"]}


def _size(nbytes: int) -> str:
    return f"{nbytes >> 20} MiB" if nbytes >= 1 << 20 else f"{nbytes >> 10} KiB"


# --- renderers ------------------------------------------------------------------------------------------------------

def transport_table(result: Result) -> str:
    """``bench/transport.py``: goodput and CPU per MB moved, DLCP against the TCP stream, per case."""
    cases = _cases(result)
    rows = ["| case | dlcp goodput | TCP goodput | dlcp / TCP | CPU ms per MB, dlcp | CPU ms per MB, TCP |",
            "|---|---|---|---|---|---|"]
    for name, case in cases.items():
        if case["metric"] != "gbps":
            continue
        cpu = cases.get(name + " cpu")
        unit = " Gb/s"
        row = (f"| {name} | {case['median']['candidate']:.3f}{unit} | {case['median']['baseline']:.3f}{unit} | "
               f"{case['ratio']:.2f}x |")
        row += (f" {cpu['median']['candidate']:.2f} | {cpu['median']['baseline']:.2f} |" if cpu else " | |")
        rows.append(row)
    reps = result.get("params", {}).get("repetitions", "?")
    return "\n".join([provenance(result) + f" Medians of {reps} alternated repetitions.", "", *rows])


def _collective_cells(result: Result) -> dict[tuple[str, int, str, int], Result]:
    """Cases of ``bench/collectives.py`` by (network, world, op, bytes), ``ideal`` cases under network + " ideal"."""
    out = {}
    for case in result["cases"]:
        params = case["params"]
        net = params["network"] + (" ideal" if case["metric"] == "ideal_fraction" else "")
        out[(net, params["world"], params["op"], params["bytes"])] = case
    return out


def collectives_tables(result: Result) -> str:
    """``bench/collectives.py``: on loopback dlcp's speed over gloo's; on the shaped links the fraction of the
    ideal ring time each reaches; sizes from 1 MiB (below, a transfer's fixed cost is the whole call)."""
    cells = _collective_cells(result)
    ops = ("all_reduce", "reduce_scatter", "all_gather")
    sizes = sorted({k[3] for k in cells if k[3] >= 1 << 20})
    worlds = sorted({k[1] for k in cells})
    out = [provenance(result) + " Medians over each case's alternated calls; a call's time is its slowest rank's.",
           ""]
    loop = [(w, op) for w in worlds for op in ops if any(("loopback", w, op, s) in cells for s in sizes)]
    if loop:
        out += ["Loopback, dlcp's speed over gloo's (gloo's median time over dlcp's; above 1: dlcp faster):", "",
                "| loopback | " + " | ".join(_size(s) for s in sizes) + " |", "|---" * (len(sizes) + 1) + "|"]
        for w, op in loop:
            vals = [cells.get(("loopback", w, op, s)) for s in sizes]
            out.append(f"| {op.replace('_', '-')} P={w} | "
                       + " | ".join(f"{cell['speedup']:.2f}" if cell else "" for cell in vals) + " |")
        out.append("")
    shaped = sorted({k[0] for k in cells if k[0].endswith(" ideal")})
    for net in shaped:
        label = net[:-len(" ideal")]
        out += [f"{label} links, fraction of the ideal ring time, dlcp / gloo:", "",
                f"| {label} | " + " | ".join(_size(s) for s in sizes) + " |", "|---" * (len(sizes) + 1) + "|"]
        for w in worlds:
            for op in ops:
                vals = [cells.get((net, w, op, s)) for s in sizes]
                if any(vals):
                    out.append(f"| {op.replace('_', '-')} P={w} | " + " | ".join(
                        f"{cell['median']['candidate']:.3f} / {cell['median']['baseline']:.3f}" if cell else ""
                        for cell in vals) + " |")
        out.append("")
    return "\n".join(out).rstrip("\n")


def cpu_profile_table(result: Result) -> str:
    """``bench/cpu_profile.py``: per case, the all-reduce's time and CPU per call (both ranks) for dlcp and gloo,
    and how dlcp's CPU splits over its threads, with their wake-ups."""
    rows = ["| case | time, dlcp / gloo | CPU ms per call, dlcp / gloo | wake-ups per call, dlcp / gloo | "
            "dlcp's CPU ms by thread (wake-ups) | dlcp's datagrams out / in, ACKs sent |", "|---|---|---|---|---|---|"]
    for case in result["cases"]:
        p, med = case["params"], case["median"]
        split = ", ".join(f"{name} {t['cpu_ms']:.2f} ({t['wakeups']:.0f})"
                          for name, t in sorted(p["threads"]["dlcp"].items(), key=lambda kv: -kv[1]["cpu_ms"])
                          if t["cpu_ms"] >= 0.05)
        ev = p.get("dlcp_transport")  # (results made before the counters were recorded have none)
        events = f"{ev['tx_datagrams']:.0f} / {ev['rx_datagrams']:.0f}, {ev['acks_sent']:.0f}" if ev else "-"
        rows.append(f"| {case['case']} | {med['candidate'] * 1e3:.2f} / {med['baseline'] * 1e3:.2f} ms "
                    f"({case['ratio']:.2f}x) | {p['cpu_ms_dlcp']:.2f} / {p['cpu_ms_gloo']:.2f} "
                    f"({p['cpu_ms_dlcp'] / p['cpu_ms_gloo']:.2f}x) | {p['wakeups_dlcp']:.0f} / "
                    f"{p['wakeups_gloo']:.0f} | {split} | {events} |")
    reps = sorted({len(c["repetitions"]["candidate"]) for c in result["cases"]})
    return "\n".join([provenance(result) + f" Medians of {'-'.join(map(str, reps))} alternated calls; CPU and "
                      "wake-ups are means per call, summed over both ranks.", "", *rows])


def bounded_loss_table(result: Result) -> str:
    """``bench/bounded_loss.py``: the lossy all-reduce against the exact one that retransmits."""
    rows = ["| all-reduce | lossy p=1% | exact, retransmits | speed-up | zero-filled (median) | "
            "retransmitted packets per call (lossy / exact) |", "|---|---|---|---|---|---|"]
    for case in result["cases"]:
        params = case["params"]
        size = case["case"].rsplit("all-reduce ", 1)[-1]
        rows.append(f"| {size} | {case['median']['candidate'] * 1e3:.0f} ms | {case['median']['baseline'] * 1e3:.0f} ms"
                    f" | {case['speedup']:.2f}x | {params['zero_filled_fraction_median']:.2%} | "
                    f"{params['retransmitted_packets_lossy']:g} / {params['retransmitted_packets_exact']:g} |")
    return "\n".join([provenance(result), "", *rows])


def wire_table(result: Result) -> str:
    """``bench/wire.py``: header batches against one ``Header`` call per packet."""
    rows = ["| case | vectorised | one call per header | speed-up |", "|---|---|---|---|"]
    for case in result["cases"]:
        rows.append(f"| {case['case']} ({case['candidate_name']} vs {case['baseline_name']}) | "
                    f"{case['median']['candidate'] / 1e6:.2f} M headers/s | "
                    f"{case['median']['baseline'] / 1e3:.0f} k headers/s | {case['speedup']:.0f}x |")
    return "\n".join([provenance(result), "", *rows])


def demo_loss_table(result: Result) -> str:
    """``make demo``'s runs (``results/demo.json``): what bounded loss zero-filled, and the accuracy reached."""
    rows = ["| run | loss bound | zero-filled (of the reduced elements) | worst step | final accuracy | "
            "iteration time (p50) |", "|---|---|---|---|---|---|"]
    for name, run in result["runs"].items():
        summary = run["summary"]
        rows.append(f"| {name} | {summary['loss_bound']:g} | {summary['zero_filled_fraction']:.2%} | "
                    f"{summary['zero_filled_step_max']:.2%} | {summary['final_accuracy']:.3f} | "
                    f"{summary['iter_p50_s'] * 1e3:.0f} ms |")
    return "\n".join([provenance(result), "", *rows])


def keyed_tag_table(result: Result) -> str:
    """``bench/keyed_tag.py``: goodput and CPU per MB moved with the keyed tag against without, per case; and the
    hash alone against a copy of the same bytes."""
    cases = _cases(result)
    rows = ["| case | goodput, keyed / unkeyed | CPU ms per MB (both ends), keyed / unkeyed | the tag's CPU ms per MB |",
            "|---|---|---|---|"]
    for name, case in cases.items():
        med = case["median"]
        if case["metric"] == "gbps":
            cpu = cases.get(name + " cpu")
            row = f"| {name} | {med['candidate']:.2f} / {med['baseline']:.2f} Gb/s ({case['ratio']:.2f}x) |"
            if cpu:
                c, b = cpu["median"]["candidate"], cpu["median"]["baseline"]
                row += f" {c:.2f} / {b:.2f} | {c - b:.2f} |"
            else:
                row += " | |"
            rows.append(row)
        elif not name.endswith(" cpu"):
            rows.append(f"| {name} ({case['candidate_name']} / {case['baseline_name']}) | | "
                        f"{med['candidate']:.3f} / {med['baseline']:.3f} | {med['candidate']:.3f} |")
    reps = result.get("params", {}).get("repetitions", "?")
    return "\n".join([provenance(result) + f" Medians of {reps} alternated repetitions.", "", *rows])


def readme_summary(transport: Result, collectives: Result) -> str:
    """The README's headline figures: the transport against TCP and the all-reduce against gloo on 1 Gb/s links."""
    transport_cases = _cases(transport)
    lines = ["| measured (1 Gb/s tbf links, MTU 9000 unless said) | dlcp | baseline |", "|---|---|---|"]
    for name, label in (("p2p 1Gb/s tbf, MTU 9000", "transport, one flow"),
                        ("p2p 1Gb/s tbf, MTU 1500", "transport, one flow, MTU 1500"),
                        ("all-to-all 4 hosts 1Gb/s tbf, MTU 9000", "transport, 4-host all-to-all, per host")):
        if name in transport_cases:
            case = transport_cases[name]
            lines.append(f"| {label} | {case['median']['candidate']:.3f} Gb/s | TCP {case['median']['baseline']:.3f} Gb/s |")
    cells = _collective_cells(collectives)
    for (net, world, op, nbytes), cell in sorted(cells.items(), key=lambda kv: (kv[0][1], kv[0][3])):
        if net.endswith(" ideal") and op == "all_reduce" and nbytes in (16 << 20, 256 << 20):
            lines.append(f"| all-reduce, P={world}, {_size(nbytes)}: fraction of the ideal ring time | "
                         f"{cell['median']['candidate']:.3f} | gloo {cell['median']['baseline']:.3f} |")
    return "\n".join(lines + ["", f"Transport: {provenance(transport)} Collectives: {provenance(collectives)} "
                              "Full tables: [docs/transport.md](docs/transport.md), [docs/backend.md](docs/backend.md)."])


def fuzz_table(result: Result) -> str:
    """``make fuzz`` (tests/fuzz/run.py): inputs tried and broken properties per fuzz target."""
    rows = ["| target | inputs tried | an input is | crashes | hangs | corrupted results |",
            "|---|---:|---|---:|---:|---:|"]
    for name, t in result["targets"].items():
        rows.append(f"| {name} | {t['inputs']:,} | {t['unit']} | {t['crashes']} | {t['hangs']} | {t['corrupted']} |")
    tot = result["totals"]
    rows.append(f"| all | {tot['inputs']:,} | | {tot['crashes']} | {tot['hangs']} | {tot['corrupted']} |")
    modes = ["", "| transport mode | rounds (genuine transfers) | hostile datagrams | held back (forgeries) | "
                 "refused at the tag | malformed | refused by a receive check |", "|---|---:|---:|---:|---:|---:|---:|"]
    for mode, m in result["targets"].get("transport", {}).get("modes", {}).items():
        by = m["rejected_by_field"]
        modes.append(f"| {mode} | {m['rounds']:,} | {m['datagrams_sent']:,} | {m['filtered']:,} | "
                     f"{by.get('tag', 0):,} | {m['drops'].get('malformed', 0):,} | "
                     f"{sum(n for f, n in by.items() if f != 'tag'):,} |")
    return "\n".join([provenance(result) + f" {result['seconds_per_target']:g} s per target, seed {result['seed']}.",
                      "", *rows, *(modes if len(modes) > 3 else [])])


def _sweep_label(path: str, sweep: Result) -> str:
    """Which sweep a row comes from: its file, commit and start (the rest is in docs/evaluation.md)."""
    meta = sweep.get("metadata", {})
    dirty = " (sources modified)" if meta.get("git_dirty") else ""
    return f"`{Path(path).stem}` (`{meta.get('git_commit', '?')[:12]}`{dirty}, {meta.get('started', '?')})"


def _ms(stat: Result) -> str:
    return f"{stat['median'] * 1e3:.0f} ms [{stat['lo'] * 1e3:.0f}, {stat['hi'] * 1e3:.0f}]"


@dataclass(frozen=True)
class GoalResult:
    """One goal of ``testbed.evaluation.GOALS`` as one sweep measured it."""

    what: str
    method: str
    base: str
    goal: float
    path: str  #: the sweep's results file
    sweep: Result
    ratio: float  #: the baseline's median iteration time over the method's
    worst: float  #: the baseline's lowest over the method's highest
    verdict: str


def goal_results(paths: tuple[str, ...], sweeps: tuple[Result, ...], method_prefix: str = "") -> list[GoalResult]:
    """Every goal whose method starts with ``method_prefix``, in each sweep that ran both of its cells."""
    from .evaluation import GOALS, goal_verdict

    out = []
    for base, method, goal, what in GOALS:
        if not method.startswith(method_prefix):
            continue
        for path, sweep in zip(paths, sweeps):
            cells = sweep["cells"]
            if base in cells and method in cells:
                ratio, worst, verdict = goal_verdict(cells[base]["iter_p50_s"], cells[method]["iter_p50_s"], goal)
                if ratio is not None:
                    out.append(GoalResult(what, method, base, goal, path, sweep, ratio, worst, verdict))
    return out


def _goal_rows(method_prefix: str, paths: tuple[str, ...], sweeps: tuple[Result, ...]) -> list[str]:
    """One row per goal whose method starts with ``method_prefix``, per sweep that ran it: both cells' iteration
    times (median [interval]) and the speed-up against the goal."""
    rows = ["| setting | sweep | baseline, iteration p50 | method, iteration p50 | speed-up: medians "
            "(interval ends) | goal |", "|---|---|---|---|---|---|"]
    for g in goal_results(paths, sweeps, method_prefix):
        b, m = g.sweep["cells"][g.base]["iter_p50_s"], g.sweep["cells"][g.method]["iter_p50_s"]
        rows.append(f"| {g.what} (`{g.method}` vs `{g.base}`) | {_sweep_label(g.path, g.sweep)} | {_ms(b)} | "
                    f"{_ms(m)} | {g.ratio:.2f}x ({g.worst:.2f}x) | {g.goal}x: {g.verdict} |")
    return rows


def _intervals_note(method: str) -> str:
    return ("Each cell: the median iteration time of its runs and, in brackets, the interval from order statistics "
            "(docs/evaluation.md says how it is made); the speed-up at the interval ends is the baseline's lowest "
            f"over {method}'s highest.")


GOALS_SOURCES = ("results/evaluation/goals-1.json", "results/evaluation/goals-2.json",
                 "results/evaluation/goals-dlcp.json")


def dear_speedups(*sweeps: Result) -> str:
    """DeAR against DDP on the testbed (``dlcp-testbed sweep``; the goals sweeps, then the workloads sweep):
    iteration times and speed-ups, from the same sweep results as ``docs/evaluation.md``."""
    *goals, workloads = sweeps
    from .evaluation import goal_verdict

    rows = _goal_rows("dear", GOALS_SOURCES, tuple(goals))
    wpath = "results/evaluation/workloads.json"
    for name, cell in workloads["cells"].items():
        if not name.endswith("-ddp") or f"{name[:-4]}-dear" not in workloads["cells"]:
            continue
        dear = workloads["cells"][f"{name[:-4]}-dear"]
        ratio, worst, _ = goal_verdict(cell["iter_p50_s"], dear["iter_p50_s"], 1.3)
        if ratio is not None:
            rows.append(f"| {name[:-4]} workload, DeAR over DDP on Gloo, 4 workers, 20 Mb/s (`{name[:-4]}-dear` vs "
                        f"`{name}`) | {_sweep_label(wpath, workloads)} | {_ms(cell['iter_p50_s'])} | "
                        f"{_ms(dear['iter_p50_s'])} | {ratio:.2f}x ({worst:.2f}x) | - |")
    return "\n".join([_intervals_note("DeAR"), "", *rows])


def spardl_speedups(*sweeps: Result) -> str:
    """SparDL against top-k all-gather on the testbed (the goals sweeps): iteration times and speed-ups."""
    rows = _goal_rows("spardl", GOALS_SOURCES, sweeps)
    return "\n".join([_intervals_note("SparDL"), "", *rows])


def readme_goals(*sweeps: Result) -> str:
    """The README's verdicts on the DeAR and SparDL speed-up goals, one line per goal and sweep that ran it."""
    rows = ["| goal (testbed, compute emulated) | sweep | speed-up: medians (interval ends) | verdict |",
            "|---|---|---|---|"]
    rows += [f"| {g.what}: {g.goal}x | `{Path(g.path).stem}` | {g.ratio:.2f}x ({g.worst:.2f}x) | {g.verdict} |"
             for g in goal_results(GOALS_SOURCES, sweeps)]
    return "\n".join(rows + ["", "Tables and the sweeps' provenance: [docs/evaluation.md](docs/evaluation.md)."])


def gloo_reduce_scatter(result: Result) -> str:
    """``bench/collectives.py``: gloo's own reduce-scatter against its all-reduce and all-gather of the same size,
    on the shaped links (why DeAR runs its own ring reduce-scatter on gloo)."""
    cells = _collective_cells(result)
    nets = sorted({k[0] for k in cells if not k[0].endswith(" ideal") and k[0] != "loopback"})
    world, size = max(k[1] for k in cells), 4 << 20
    times = {op: cells.get((nets[0], world, op, size)) if nets else None
             for op in ("reduce_scatter", "all_reduce", "all_gather")}
    if not all(times.values()):
        raise ValueError(f"results/collectives.json: no shaped-link case of P={world}, {_size(size)} for every op")
    rs, ar, ag = (times[op]["median"]["baseline"] * 1e3 for op in ("reduce_scatter", "all_reduce", "all_gather"))
    return (f"gloo's `reduce_scatter` moves as many bytes as a whole all-reduce: on {nets[0]} links, P={world}, "
            f"{_size(size)}, its reduce-scatter takes {rs:.1f} ms and its all-reduce {ar:.1f} ms, while its "
            f"all-gather takes {ag:.1f} ms. {provenance(result)}")


def acid_constants_text() -> str:
    """A²CiD²'s constants (``host.acid.constants``) for the graphs the docs name: a ring of 8, and the exponential
    graph of 8 with our neighbour set against the authors' list (which counts ``i + 4`` twice)."""
    import math

    import numpy as np

    from host.acid.constants import acid_constants, chi1, chi2, edges, neighbors

    ring = acid_constants("ring", 8, 1.0)
    ours = acid_constants("exponential", 8, 1.0)
    # the authors' list: +2^k and -2^k for k < log2 n, duplicates kept; W_ij += 1/len(list)
    n = 8
    lists = [[(i + s * (1 << k)) % n for k in range(int(math.log2(n))) for s in (1, -1)] for i in range(n)]
    W = np.zeros((n, n))
    for i, ns in enumerate(lists):
        np.add.at(W[i], ns, 1.0 / len(ns))
    L = np.eye(n) - W
    c1, c2 = chi1(L), chi2(L, edges(neighbors("exponential", n)))
    theirs = (c1, c2, 0.5 / math.sqrt(c1 * c2), 0.5 * math.sqrt(c1 / c2))
    return "\n".join([
        f"Ring of 8 at rate 1: eta = {ring.eta:.4f}, alpha~ = {ring.alpha_tilde:.4f}.", "",
        "| neighbour set (exponential graph, n = 8, rate 1) | degree | chi1 | chi2 | eta | alpha~ |",
        "|---|---|---|---|---|---|",
        f"| ours (a set, each neighbour 1/{len(neighbors('exponential', n)[0])}) | "
        f"{len(neighbors('exponential', n)[0])} | {ours.chi1:.3g} | {ours.chi2:.3g} | {ours.eta:.3f} | "
        f"{ours.alpha_tilde:.3f} |",
        f"| the authors' (i+4 counted twice) | {len(lists[0])} entries | {theirs[0]:.3g} | {theirs[1]:.3g} | "
        f"{theirs[2]:.3f} | {theirs[3]:.3f} |"])


def _kpps(rate: float) -> str:
    """A packet rate in thousands: three figures above 10k, one decimal below (the scapy baselines)."""
    return f"{rate / 1e3:.0f}k" if rate >= 1e4 else f"{rate / 1e3:.1f}k"


def switch_tables_table(result: Result) -> str:
    """``bench/switch_tables.py``: the cost of an insert and the lookup rate, a large table against a small one."""
    rows = ["| case | large table | small table | large / small |", "|---|---|---|---|"]
    for case in result["cases"]:
        med, metric = case["median"], case["metric"]
        if metric == "us_per_insert":
            cells = [f"{med[role]:.1f} us per insert" for role in ("candidate", "baseline")]
        elif metric == "cpu_pps":
            cells = [f"{_kpps(med[role])} lookups per CPU second" for role in ("candidate", "baseline")]
        else:
            raise ValueError(f"results/switch_tables.json: case {case['case']!r} has metric {metric!r}, "
                             f"not us_per_insert or cpu_pps")
        rows.append(f"| {case['case']} | {cells[0]} | {cells[1]} | {case['ratio']:.2f}x |")
    return "\n".join([provenance(result), "", *rows])


def switch_pps_target_table(result: Result) -> str:
    """``bench/switch_pps.py``, in process: the target's packets per CPU second against the scapy baseline."""
    params = result.get("params", {})
    rows = [f"| case | dlcp target, packets per CPU second | {params.get('baseline', 'baseline')} | ratio |",
            "|---|---|---|---|"]
    for case in result["cases"]:
        if case["metric"] == "cpu_pps":
            rows.append(f"| {case['case']} | {_kpps(case['median']['candidate'])} | "
                        f"{_kpps(case['median']['baseline'])} | {case['ratio']:.0f}x |")
    return "\n".join([provenance(result), "", *rows])


def switch_pps_daemon_table(result: Result) -> str:
    """``bench/switch_pps.py --daemon``: packets per wall-clock second through the daemon against each baseline,
    the daemon's CPU per forwarded packet, and the rate that CPU bounds it to on a core of its own."""
    rows = ["| case: candidate vs baseline | packets per second | daemon CPU per packet | candidate / baseline |",
            "|---|---|---|---|"]
    cpu_us, floods = [], set()
    for case in result["cases"]:
        if case["metric"] != "pps":
            continue
        params, med = case["params"], case["median"]
        floods |= {len(runs) for runs in case["repetitions"].values()}
        us = [params.get(f"daemon_cpu_us_per_packet_{role}") for role in ("candidate", "baseline")]
        cpu_us += [u for u in us if u]
        cpu = " / ".join(f"{u:.1f} us" if u else "-" for u in us)
        rows.append(f"| {case['case']}: {case['candidate_name']} vs {case['baseline_name']} | "
                    f"{_kpps(med['candidate'])} / {_kpps(med['baseline'])} | {cpu} | {case['ratio']:.2f}x |")
    if not cpu_us:
        raise ValueError("results/switch_pps.json: no daemon case records daemon_cpu_us_per_packet_*")
    return "\n".join([
        f"The daemon's cases of the same run, medians of {'/'.join(map(str, sorted(floods)))} floods each (rates "
        f"are wall-clock, CPU per packet is the daemon's own):", "", *rows, "",
        f"On a core of its own, the daemon's lowest CPU per packet here ({min(cpu_us):.2f} us) bounds its rate to "
        f"about {_kpps(1e6 / min(cpu_us))} packets per second."])


def switch_pps_bmv2_table(result: Result) -> str:
    """``bench/switch_pps.py --bmv2``: the dlcp-switch daemon against BMv2 ``simple_switch_grpc`` on the same
    program, hosts, routes and flood, alternating in one run: packets per wall-clock second and each switch's own
    CPU time per forwarded packet."""
    rows = ["| program | dlcp-switch | BMv2 | dlcp-switch / BMv2 | CPU per packet, dlcp-switch / BMv2 |",
            "|---|---|---|---|---|"]
    floods, names = set(), set()
    for case in result["cases"]:
        params, med = case["params"], case["median"]
        floods |= {len(runs) for runs in case["repetitions"].values()}
        names.add(case["baseline_name"])
        us = [params[f"daemon_cpu_us_per_packet_{role}"] for role in ("candidate", "baseline")]
        rows.append(f"| `{params['program']}` | {_kpps(med['candidate'])} | {_kpps(med['baseline'])} | "
                    f"{case['ratio']:.1f}x | {us[0]:.1f} us / {us[1]:.0f} us ({us[1] / us[0]:.0f}x) |")
    return "\n".join([
        provenance(result), "",
        f"Against {', '.join(sorted(names))}, medians of {'/'.join(map(str, sorted(floods)))} floods each "
        f"(packets per wall-clock second; CPU per packet is each switch process's own):", "", *rows])


def torch_suite_table(result: Result) -> str:
    """``tests/host/torch_suite.py`` (``results/torch_suite.json``): PyTorch's ``DistributedTest`` suite on gloo and
    dlcp side by side -- every test that passed or failed on either backend, with the reason recorded for each
    that passed on gloo only; then how many the suite skipped on both, by its reason on dlcp."""
    tests: dict[str, Result] = result["tests"]
    backends = ("gloo", "dlcp")
    count = {(b, o): sum(t.get(b) == o for t in tests.values()) for b in backends for o in ("passed", "failed")}
    runs = result["runs"]
    lines = [f"Made by `{result['command']}` (world size {result['world_size']}, torch {result['torch']}, "
             f"{result['date']}): {len(tests)} tests, passed on gloo {count['gloo', 'passed']}, on dlcp "
             f"{count['dlcp', 'passed']}; failed on gloo {count['gloo', 'failed']}, on dlcp "
             f"{count['dlcp', 'failed']}. " + " ".join(
                 f"The {b} run started {runs[b]['started']} on {runs[b]['hostname']} and took "
                 f"{runs[b]['seconds'] / 60:.0f} min." for b in backends if b in runs) + " " + result["produced"],
             "", "| test | gloo | dlcp | why not passed on dlcp |", "|---|---|---|---|"]
    both: dict[str, int] = {}
    for name, t in sorted(tests.items()):
        if all(t.get(b, "skipped") == "skipped" for b in backends):
            reason = t.get("skip") or t.get("gloo_skip") or "no reason given"
            both[reason] = both.get(reason, 0) + 1
        else:
            lines.append(f"| {name} | {t.get('gloo', '-')} | {t.get('dlcp', '-')} | {t.get('exception', '')} |")
    lines += ["", f"Skipped on both ({sum(both.values())}), with the suite's reasons on dlcp:", ""]
    lines += [f"- {reason} ({n})" for reason, n in sorted(both.items(), key=lambda kv: -kv[1])]
    return "\n".join(lines)


#: Resource kinds of the Tofino summary (scripts/tofino_resources.py), in table order, with their column titles.
TOFINO_KINDS = (("sram", "SRAM blocks"), ("tcam", "TCAM blocks"), ("map_ram", "map RAMs"),
                ("stateful_alu", "stateful ALUs"), ("stats_alu", "statistics ALUs"), ("gateway", "gateways"),
                ("xbar_bytes", "match crossbar bytes"), ("vliw", "VLIW instructions"))


def tofino_resources_table(result: Result) -> str:
    """``scripts/tofino_resources.py``: what the twin takes of each Tofino, from p4c's Tofino back end, and where its
    tables sit."""
    head = "| target | MAU stages | " + " | ".join(title for _, title in TOFINO_KINDS) + " |"
    rows = [head, "|---|---|" + "---|" * len(TOFINO_KINDS)]
    for target, s in result["targets"].items():
        used, avail, share = s["used"], s["available"], s["share"]
        rows.append(f"| {target} (`--arch {s['arch']}`) | {s['stages_used']} of {s['stages_available']} | "
                    + " | ".join(f"{used[k]} of {avail[k]} ({100 * share[k]:.1f}%)" for k, _ in TOFINO_KINDS) + " |")
    lines = [f"Compiled by `{result['command']}` at commit `{result['commit']}` with {result['compiler']}, "
             f"{result['time']}.", "", *rows]
    for target, s in result["targets"].items():
        lines += ["", f"Tables per stage, {target}:", "", "| stage | tables | SRAM | TCAM | stateful ALUs |",
                  "|---|---|---|---|---|"]
        for st in s["stages"]:
            lines.append(f"| {st['stage']} | {', '.join(f'`{t}`' for t in st['tables'])} | {st['sram']} | "
                         f"{st['tcam']} | {st['stateful_alu']} |")
    return "\n".join(lines)


REGIONS: dict[str, Region] = {r.name: r for r in (
    Region("transport", "docs/transport.md", ("results/transport.json",), transport_table),
    Region("collectives", "docs/backend.md", ("results/collectives.json",), collectives_tables),
    Region("bounded-loss", "docs/bounded-loss.md", ("results/bounded_loss.json",), bounded_loss_table),
    Region("bounded-loss-demo", "docs/bounded-loss.md", ("results/demo.json",), demo_loss_table),
    Region("wire", "docs/wire-format.md", ("results/wire.json",), wire_table),
    Region("keyed-tag", "docs/transport.md", ("results/keyed_tag.json",), keyed_tag_table),
    Region("cpu-profile", "docs/backend.md", ("results/cpu_profile.json",), cpu_profile_table),
    Region("readme", "README.md", ("results/transport.json", "results/collectives.json"), readme_summary),
    Region("fuzz", "docs/fuzzing.md", ("results/fuzz.json",), fuzz_table),
    Region("dear-speedups", "docs/dear.md", (*GOALS_SOURCES, "results/evaluation/workloads.json"), dear_speedups),
    Region("dear-gloo-reduce-scatter", "docs/dear.md", ("results/collectives.json",), gloo_reduce_scatter),
    Region("spardl-speedups", "docs/spardl.md", GOALS_SOURCES, spardl_speedups),
    Region("readme-goals", "README.md", GOALS_SOURCES, readme_goals),
    Region("acid-constants", "docs/acid.md", (), acid_constants_text, computed_by="host.acid.constants"),
    Region("switch-tables", "docs/switch-target.md", ("results/switch_tables.json",), switch_tables_table),
    Region("switch-pps", "docs/switch-target.md", ("results/switch_pps.json",), switch_pps_target_table),
    Region("switch-pps-daemon", "docs/switch-target.md", ("results/switch_pps.json",), switch_pps_daemon_table),
    Region("switch-pps-bmv2", "docs/switch-target.md", ("results/switch_pps_bmv2.json",), switch_pps_bmv2_table),
    Region("torch-suite", "docs/torch-suite.md", ("results/torch_suite.json",), torch_suite_table),
    Region("tofino-resources", "docs/p4-tofino.md", ("results/tofino/resources.json",), tofino_resources_table),
)}

#: Documents generated whole by another module, which names its sources in its first lines.
WHOLE = {"docs/evaluation.md": "testbed.evaluation"}


# --- taking a benchmark result into results/ ----------------------------------------------------------------------

def _round(x: Any) -> Any:
    """``x`` with every float in it rounded to 4 significant digits (more than any run-to-run spread here)."""
    if isinstance(x, float):
        return float(f"{x:.4g}")
    if isinstance(x, dict):
        return {k: _round(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_round(v) for v in x]
    return x


def compact(result: Result) -> Result:
    """A ``bench/harness.py`` result as committed under ``results/``: every repetition kept, but only its metric;
    every float rounded to 4 significant digits; the text summary a benchmark keeps in its params dropped (the
    tables are made from the data)."""
    out = {k: v for k, v in result.items() if k != "cases"}
    out["params"] = {k: v for k, v in result.get("params", {}).items() if k != "summary"}
    out["cases"] = []
    for case in result["cases"]:
        metric = case["metric"]
        kept = {k: v for k, v in case.items() if k != "repetitions"}
        kept["repetitions"] = {role: [run[metric] for run in runs] for role, runs in case["repetitions"].items()}
        out["cases"].append(kept)
    return _round(out)


def take(path: Path, root: Path = ROOT) -> Path:
    """Copy the benchmark result at ``path`` into ``results/`` (compacted); returns the file written."""
    result = json.loads(path.read_text())
    for key in ("name", "command", "machine", "cases"):
        if key not in result:
            raise ValueError(f"{path}: not a benchmark result (no {key!r}; made by bench/harness.py?)")
    dst = root / "results" / f"{result['name']}.json"
    dst.write_text(dumps(compact(result), "cases"))
    return dst


def dumps(result: Result, key: str) -> str:
    """``result`` as committed under ``results/``: indented JSON, except that each item of ``result[key]`` (a list
    or a dict, the last key) is one line -- readable in a diff, a fraction of the size of one line per value."""
    head = {k: v for k, v in result.items() if k != key}
    items = result[key]
    if isinstance(items, dict):
        body = ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in items.items())
        opening, closing = "{", "}"
    else:
        body = ",\n".join("  " + json.dumps(item) for item in items)
        opening, closing = "[", "]"
    text = json.dumps(head, indent=1)
    text = (text[:-2] + ",\n" if head else "{\n")
    return text + f' {json.dumps(key)}: {opening}\n' + body + f"\n {closing}\n}}\n"


# --- applying them --------------------------------------------------------------------------------------------------

def _splice(text: str, region: Region, body: str, doc: str) -> str:
    """``text`` with the region's markers and everything between them replaced by the markers around ``body``."""
    m = re.search(rf"^<!-- begin generated: {re.escape(region.name)}( .*)?-->$", text, re.M)
    if not m:
        raise ValueError(f"{doc}: no '<!-- begin generated: {region.name} ...-->' marker")
    end = text.find(_end(region.name), m.end())
    if end < 0:
        raise ValueError(f"{doc}:{text.count(chr(10), 0, m.start()) + 1}: region {region.name!r} has no "
                         f"'{_end(region.name)}' marker")
    return text[:m.start()] + region.begin() + "\n" + body + "\n" + text[end:]


def _evaluation(root: Path, doc: str) -> str:
    """Re-run ``python -m testbed.evaluation`` with the sources the document's header names."""
    from . import evaluation

    text = (root / doc).read_text()
    m = re.search(r"<!-- Generated by `python -m testbed\.evaluation` from the sweeps' JSON \((?P<src>[^)]*)\)", text)
    if not m:
        raise ValueError(f"{doc}: no 'Generated by `python -m testbed.evaluation`' header naming its sources")
    argv = []
    for item in m.group("src").split(", "):
        key, _, path = item.partition(": ")
        argv += [f"--{key}", path]
    out = io.StringIO()
    # from the root, so that the sources are named in the header as they were given (relative paths)
    with contextlib.chdir(root), contextlib.redirect_stdout(out):
        evaluation.main(argv)
    return out.getvalue()


def render_all(root: Path = ROOT) -> dict[str, str]:
    """Every generated document's new text, by path relative to ``root`` (unchanged ones included)."""
    texts: dict[str, str] = {}
    for doc in WHOLE:
        texts[doc] = _evaluation(root, doc)
    for region in REGIONS.values():
        if region.doc not in texts:
            texts[region.doc] = (root / region.doc).read_text()
        data = [json.loads((root / s).read_text()) for s in region.sources]
        texts[region.doc] = _splice(texts[region.doc], region, region.render(*data), region.doc)
    for doc, text in texts.items():
        for m in BEGIN.finditer(text):
            if m.group("name") not in REGIONS:
                raise ValueError(f"{doc}:{text.count(chr(10), 0, m.start()) + 1}: generated region "
                                 f"{m.group('name')!r} has no renderer in testbed.report.REGIONS")
    return texts


def stale(root: Path = ROOT) -> list[str]:
    """The documents whose committed text differs from what their data renders."""
    return sorted(doc for doc, text in render_all(root).items() if (root / doc).read_text() != text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m testbed.report", description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if a generated table is stale")
    ap.add_argument("--root", type=Path, default=ROOT, help="repository root (default: this checkout)")
    ap.add_argument("--take", type=Path, action="append", default=[], metavar="RESULT.json",
                    help="first copy this benchmark result into results/ (compacted); repeatable")
    args = ap.parse_args(argv)
    try:
        for path in args.take:
            print(f"report: took {path} -> {take(path, args.root)}")
        texts = render_all(args.root)
    except (OSError, ValueError, KeyError) as e:
        print(f"report: {e}", file=sys.stderr)
        return 2
    changed = [doc for doc, text in texts.items() if (args.root / doc).read_text() != text]
    if args.check:
        for doc in changed:
            print(f"report: {doc} does not match its data in results/; run `make report`", file=sys.stderr)
        return 1 if changed else 0
    for doc in changed:
        (args.root / doc).write_text(texts[doc])
        print(f"report: rewrote {doc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
