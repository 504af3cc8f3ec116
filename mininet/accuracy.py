"""Accuracy under bounded loss: what zero-filling does to training, over enough seeds to tell (``python -m
testbed.accuracy``).

The question: with a loss bound ``p``, at most a fraction ``p`` of each lossy collective's elements may end
zero-filled; does training still reach what lossless training reaches, and from which bound on does it not? A
congested switch drops only some eligible packets, and how many depends on the queues; this study takes the worst
case the bound allows: **every** drop-eligible packet is dropped (``DLCP_DROP_ELIGIBLE=1``: each worker's socket
drops its eligible packets as it sends them, as a switch whose queue stays above the drop threshold would), so the
zero-filled fraction is as large as the policy lets it be. Everything else is the real stack: the testbed's worker
(:mod:`testbed.worker`: the model, the data shards, DDP with the dlcp comm hook, the transport on loopback), one
process per worker on this machine, packets cut for the testbed's MTU (1500). No switch is needed for this question, so none runs: the network only decides
how much is lost, and here that is fixed at the bound.

Design (paired): for each seed every cell (bound 0, the exact baseline, and each bound) trains from the same
initial model on the same shards in the same order; the statistic is the per-seed difference of final test
accuracy (and of the final training loss, which moves with smaller effects) to the exact run, its mean and a 95%
Student-t interval over the seeds. Runs never stop at a target accuracy (all take ``steps`` steps), the generated
datasets' test sets are large (20 000 samples: one sample is 0.005 points), and every run checks that the
replicas ended identical bit for bit (``replicas_identical``). Cells run interleaved (seed-major), so drifts of the
machine spread over all of them.

Workloads (:data:`WORKLOADS`): the MLP and the CNN on the synthetic CIFAR-like images and the transformer on the
generated text; the CNN's and the transformer's hyper-parameters are those of ``examples/testbed/workloads.yaml``,
the MLP's a smaller learning rate and larger batch than the testbed's demo (0.01, 64 per worker), with which its
training converges within the run: at the demo's 0.05 and 32 the MLP's test accuracy after 300 steps moved by
10 points between runs that differed in one dropped packet, so no number of seeds could bound the difference.

Where the policy's smallest packets hold exact zeros, zero-filling them changes nothing: a quarter of the CNN's
gradient is exactly zero (the rows of its hidden layer's dead ReLU units: 26.5% of 136,874 elements on a first
batch), so at a 5% bound it drops only zeros and trains bit for bit as the exact run does.

Only accuracy is measured here: the wall times are not the transport's (the dropping socket wrapper sends from
Python, without the C send lane, so lossy runs are slower than exact ones here, not on a switch).

Output in ``--out`` (default ``results/evaluation``): ``accuracy.json`` (every run's summary, the statistics,
version metadata) and ``accuracy-report.md`` (the table). ``--quick``: 2 seeds, fewer steps (a smoke test).
``--seeds`` is a count N (seeds 1..N) or a range FIRST-LAST, so that more seeds can be run later for a workload whose
interval is still too wide. ``--merge A.json B.json ...``: one document from studies run separately: other workloads
(in parallel, on the same seeds), or more seeds of a workload already there (its settings and bounds the same, none
of its seeds run twice).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from .run import summarise
from .spec import RunSpec, spec_to_json
from .sweep import metadata

__all__ = ["WORKLOADS", "BOUNDS", "run_local", "paired_stats", "run_study", "merge_studies", "study_stats",
           "workload_seeds", "parse_seeds", "report_markdown", "main"]

ROOT = Path(__file__).resolve().parents[1]

#: name -> the run spec's settings (see the module's docstring; no emulated compute: only accuracy is measured here)
WORKLOADS: dict[str, dict[str, Any]] = {
    "mlp": dict(model="mlp", dataset="synthetic-cifar", test_size=20000, hidden=256, lr=0.01, batch_size=64,
                steps=300),
    "cnn": dict(model="cnn", dataset="synthetic-cifar", test_size=20000, hidden=64, lr=0.02, steps=300),
    "transformer": dict(model="transformer", dataset="text", test_size=20000, hidden=64, optimizer="adam", lr=0.003,
                        steps=300),
}
#: the loss bounds of the study: the issue's 1%, 2% and 5%, then larger ones, to find where accuracy breaks
BOUNDS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.4)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_local(spec: RunSpec, *, drop_eligible: bool, workdir: Path, timeout: float = 900.0) -> list[dict[str, Any]]:
    """Run ``spec`` as ``spec.workers`` worker processes on this machine (loopback, torchrun's environment); with
    ``drop_eligible`` every drop-eligible packet is dropped as it is sent. Returns the workers' records in rank
    order; raises RuntimeError naming the rank and its last output when one fails or runs past ``timeout``."""
    workdir.mkdir(parents=True, exist_ok=True)
    spec_file = workdir / "spec.json"
    spec_file.write_text(spec_to_json(spec))
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()),
           "WORLD_SIZE": str(spec.workers), "OMP_NUM_THREADS": "1", "DLCP_DROP_ELIGIBLE": "1" if drop_eligible else "0",
           # packets as the testbed's links cut them (loopback's 64 KiB datagrams would make the loss granularity
           # 16 Ki float32 elements: a bound under one packet of a bucket loses nothing)
           "DLCP_MTU": str(spec.topology.mtu)}
    procs = [subprocess.Popen([sys.executable, "-m", "testbed.worker", str(spec_file), str(workdir / f"w{r}.json")],
                              cwd=ROOT, env={**env, "RANK": str(r)}, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
             for r in range(spec.workers)]
    deadline = time.monotonic() + timeout
    errors = []
    try:
        for r, p in enumerate(procs):
            try:
                _, err = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                errors.append(f"rank {r} still running after {timeout:.0f}s")
                continue
            if p.returncode != 0:
                errors.append(f"rank {r} exited {p.returncode}: {err.strip()[-1500:]}")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    if errors:
        raise RuntimeError(f"run {spec.name}: " + "; ".join(errors))
    return [json.loads((workdir / f"w{r}.json").read_text()) for r in range(spec.workers)]


def _t95(n: int) -> float:
    """The two-sided 95% Student-t quantile for n - 1 degrees of freedom."""
    from scipy.stats import t

    return float(t.ppf(0.975, n - 1))


def paired_stats(base: list[float], cell: list[float]) -> dict[str, Any]:
    """Mean of ``cell[i] - base[i]`` over the seeds and its 95% Student-t interval (None with fewer than 2)."""
    if len(base) != len(cell):
        raise ValueError(f"paired statistics need one value per seed on both sides, got {len(base)} and {len(cell)}")
    d = [c - b for b, c in zip(base, cell)]
    n = len(d)
    mean = sum(d) / n if n else None
    if n < 2:
        return {"n": n, "mean": mean, "lo": None, "hi": None, "sd": None}
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1))
    half = _t95(n) * sd / math.sqrt(n)
    return {"n": n, "mean": mean, "lo": mean - half, "hi": mean + half, "sd": sd}


def _cell_name(bound: float) -> str:
    return "exact" if bound == 0 else f"p={bound:g}"


def run_study(workloads: dict[str, dict[str, Any]], bounds: tuple[float, ...], seeds: list[int], *, workers: int,
              out: Path, steps: int | None = None, console=print) -> dict[str, Any]:
    """Every workload x (exact + ``bounds``) x seed, seed-major; returns (and writes) the study's document."""
    out.mkdir(parents=True, exist_ok=True)
    doc: dict[str, Any] = {"name": "accuracy", "workers": workers, "seeds": seeds, "bounds": list(bounds),
                           "drop": "every drop-eligible packet (DLCP_DROP_ELIGIBLE=1)",
                           "workloads": {k: dict(v, **({"steps": steps} if steps else {})) for k, v in workloads.items()},
                           "metadata": metadata(), "runs": []}
    cells = [0.0, *bounds]
    total = len(seeds) * len(workloads) * len(cells)
    with tempfile.TemporaryDirectory(prefix="dlcp-accuracy-") as tmp:
        for seed in seeds:
            for wname, settings in workloads.items():
                for bound in cells:
                    spec = RunSpec(name=f"{wname}-{_cell_name(bound)}-s{seed}", workers=workers,
                                   algorithm="dlcp-allreduce", loss_bound=bound, seed=seed,
                                   eval_every=10 ** 9, **settings)
                    if steps:
                        spec = replace(spec, steps=steps)
                    t0 = time.monotonic()
                    recs = run_local(spec, drop_eligible=bound > 0, workdir=Path(tmp) / spec.name)
                    summ = summarise(spec, recs, time.monotonic() - t0)
                    row = {"workload": wname, "bound": bound, "seed": seed,
                           **{k: summ[k] for k in ("final_accuracy", "final_loss", "zero_filled_fraction",
                                                   "zero_filled_step_max", "replicas_identical", "wall_s",
                                                   "iter_p50_s", "steps")}}
                    doc["runs"].append(row)
                    console(f"[{len(doc['runs'])}/{total}] {spec.name}: accuracy {row['final_accuracy']:.4f} "
                            f"loss {row['final_loss']:.4f} zero-filled {row['zero_filled_fraction']:.4f} "
                            f"identical {row['replicas_identical']} ({row['wall_s']:.0f}s)")
    doc["metadata"]["load_end"] = [round(x, 2) for x in os.getloadavg()]
    doc["stats"] = study_stats(doc)
    (out / "accuracy.json").write_text(json.dumps(doc, indent=1))
    (out / "accuracy-report.md").write_text(report_markdown(doc))
    return doc


def workload_seeds(doc: dict[str, Any]) -> dict[str, list[int]]:
    """Per workload of a study, the seeds its runs used (sorted): one list for all of them in a study run at once,
    more for a workload whose seeds were extended by a later part (:func:`merge_studies`)."""
    return {w: sorted({r["seed"] for r in doc["runs"] if r["workload"] == w}) for w in doc["workloads"]}


def _workload_bounds(doc: dict[str, Any], workload: str) -> list[float]:
    """The loss bounds ``workload``'s runs in ``doc`` used (its exact runs left out), sorted."""
    return sorted({r["bound"] for r in doc["runs"] if r["workload"] == workload and r["bound"] != 0})


def _parts(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """A study's parts (what ran in one sitting: workloads, bounds, seeds, metadata); a study run at once is one."""
    if doc.get("parts"):  # a merged study: its parts (older ones, written before parts named their seeds, ran on
        return [{"seeds": doc["seeds"], **p} for p in doc["parts"]]  # the study's seeds)
    return [{"workloads": list(doc.get("workloads") or doc["stats"]), "bounds": doc["bounds"], "seeds": doc["seeds"],
             "metadata": doc["metadata"]}]


def _settings_differ(a: dict[str, Any], b: dict[str, Any]) -> str:
    return ", ".join(f"{k} {a.get(k)!r} vs {b.get(k)!r}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k))


def merge_studies(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """One document from studies run separately: their runs together, the bounds' union, each part's workloads,
    bounds, seeds and metadata kept (``parts``, those of a merged study carried over), the statistics recomputed.

    A study may bring workloads not yet in the merge, run on the seeds every workload of the first study ran on
    (the same seeds, so the workloads stand side by side), or more seeds of a workload already there, with the
    same settings and the same bounds, so that its cells are one experiment over more seeds. Raises ValueError
    naming what differs when they cannot be one study: another worker count, new workloads on other seeds, a
    workload's settings or bounds, or a seed of a workload run twice."""
    if not docs:
        raise ValueError("nothing to merge")
    first = docs[0]
    first_seeds = workload_seeds(first)
    common = sorted(set.intersection(*(set(s) for s in first_seeds.values()))) if first_seeds else first["seeds"]
    have: dict[str, dict[str, Any]] = {}  # workload -> its settings, bounds, seeds (-> study index), first study
    for i, d in enumerate(docs, 1):
        if d["workers"] != first["workers"]:
            raise ValueError(f"studies with other seeds or worker counts cannot be merged: study {i} ran "
                             f"{d['workers']} workers, study 1 {first['workers']}")
        seeds = workload_seeds(d)
        for w, settings in d["workloads"].items():
            bounds = _workload_bounds(d, w)
            if w not in have:
                if i > 1 and seeds[w] != common:
                    raise ValueError(f"studies with other seeds or worker counts cannot be merged: study {i} "
                                     f"brings workload {w} on seeds {seeds[w]}, study 1's workloads ran on {common} "
                                     "(a workload joins on the same seeds; more seeds come for a workload already "
                                     "there)")
                have[w] = {"settings": settings, "bounds": bounds, "seeds": dict.fromkeys(seeds[w], i), "study": i}
                continue
            prev = have[w]
            again = [s for s in seeds[w] if s in prev["seeds"]]
            if again:
                raise ValueError(f"workload {w} seeds {again} are in two of the studies "
                                 f"({prev['seeds'][again[0]]} and {i}): a seed is run once")
            if settings != prev["settings"]:
                raise ValueError(f"workload {w}: study {i}'s settings differ from study {prev['study']}'s "
                                 f"({_settings_differ(settings, prev['settings'])}); more seeds must run the same "
                                 "workload")
            if bounds != prev["bounds"]:
                raise ValueError(f"workload {w}: study {i} ran bounds {bounds}, study {prev['study']} {prev['bounds']}; "
                                 "more seeds must run the same cells")
            prev["seeds"].update(dict.fromkeys(seeds[w], i))
    runs = [r for d in docs for r in d["runs"]]
    out = {**{k: v for k, v in first.items() if k not in ("stats", "runs", "workloads", "bounds", "metadata", "parts",
                                                           "seeds")},
           "workloads": {w: s for d in docs for w, s in d["workloads"].items()},
           "bounds": sorted({b for d in docs for b in d["bounds"]}),
           "seeds": sorted({r["seed"] for r in runs}),
           "runs": runs, "metadata": first["metadata"], "parts": [p for d in docs for p in _parts(d)]}
    out["stats"] = study_stats(out)
    return out


def study_stats(doc: dict[str, Any]) -> dict[str, Any]:
    """Per workload and bound: the mean accuracy, the zero-filled fraction, and the paired differences to the
    exact runs of the same seeds (accuracy in points, final loss); whether every run's replicas were identical."""
    out: dict[str, Any] = {}
    for wname in doc["workloads"]:
        runs = [r for r in doc["runs"] if r["workload"] == wname]
        exact = {r["seed"]: r for r in runs if r["bound"] == 0}
        per: dict[str, Any] = {}
        for bound in [0.0, *doc["bounds"]]:
            rs = sorted((r for r in runs if r["bound"] == bound and r["seed"] in exact), key=lambda r: r["seed"])
            if not rs:
                continue
            base = [exact[r["seed"]] for r in rs]
            per[_cell_name(bound)] = {
                "bound": bound, "runs": len(rs),
                "accuracy_mean": sum(r["final_accuracy"] for r in rs) / len(rs),
                "zero_filled_mean": sum(r["zero_filled_fraction"] for r in rs) / len(rs),
                "accuracy_diff_points": paired_stats([100 * b["final_accuracy"] for b in base],
                                                     [100 * r["final_accuracy"] for r in rs]),
                "loss_diff": paired_stats([b["final_loss"] for b in base], [r["final_loss"] for r in rs]),
                "replicas_identical": all(r["replicas_identical"] for r in rs)}
        out[wname] = per
    return out


def _interval(st: dict[str, Any], digits: int) -> str:
    if st["mean"] is None:
        return "-"
    if st["lo"] is None:
        return f"{st['mean']:+.{digits}f}"
    return f"{st['mean']:+.{digits}f} [{st['lo']:+.{digits}f}, {st['hi']:+.{digits}f}]"


def report_markdown(doc: dict[str, Any]) -> str:
    """The study's table: per workload and bound, zero-filled fraction, mean accuracy, and the paired
    differences to the exact runs with their 95% intervals."""
    def made(md: dict[str, Any]) -> str:
        return (f"commit `{md.get('git_commit', '')[:12]}`{' (dirty)' if md.get('git_dirty') else ''}, started "
                f"{md.get('started')}, load {md.get('load_start')} -> {md.get('load_end')}")

    def seeds_text(seeds: list[int]) -> str:
        return f"{seeds[0]}-{seeds[-1]}" if len(seeds) > 2 and seeds == list(range(seeds[0], seeds[-1] + 1)) \
            else ", ".join(map(str, seeds))

    parts = _parts(doc)
    per = workload_seeds(doc) if doc.get("runs") else {}
    if len({tuple(s) for s in per.values()}) > 1:  # a workload with more seeds than the others
        head = "Seeds per workload: " + ", ".join(f"{w} {seeds_text(s)}" for w, s in per.items())
    else:
        head = f"Seeds {doc['seeds']}"
    lines = [f"# Accuracy under bounded loss ({doc['workers']} workers, every eligible packet dropped)", "",
             head + "; " + "; ".join(f"{', '.join(p['workloads'])}"
                                     + (f" (seeds {seeds_text(p['seeds'])})" if len(parts) > 1 and p["seeds"] !=
                                        doc["seeds"] else "") + f": {made(p['metadata'])}" for p in parts)
             + ". Regenerate: `python -m testbed.accuracy` (mininet/accuracy.py says how).", "",
             "| workload | cell | zero-filled | accuracy | Δ accuracy, points [95%] | Δ final loss [95%] | replicas |",
             "|---|---|---|---|---|---|---|"]
    for wname, per in doc["stats"].items():
        for cname, st in per.items():
            lines.append(f"| {wname} | {cname} | {100 * st['zero_filled_mean']:.2f}% | "
                         f"{100 * st['accuracy_mean']:.2f}% | {_interval(st['accuracy_diff_points'], 2)} | "
                         f"{_interval(st['loss_diff'], 4)} | {'identical' if st['replicas_identical'] else 'DIFFER'} |")
    lines += ["", "Δ: the mean over seeds of (cell - exact run of the same seed); the interval is Student's t over "
              "the seeds. Zero-filled: the share of the lossy all-reduces' elements that ended zero-filled (rank "
              "0's count, the same on every rank)."]
    return "\n".join(lines) + "\n"


def parse_seeds(text: str) -> list[int]:
    """``--seeds``: ``N`` is seeds 1..N, ``FIRST-LAST`` those seeds (both included; seeds are positive). Raises
    ValueError naming the text when it is neither."""
    try:
        if "-" in text:
            first, last = (int(x) for x in text.split("-", 1))
        else:
            first, last = 1, int(text)
    except ValueError:
        raise ValueError(f"expected N (seeds 1..N) or FIRST-LAST, got {text!r}") from None
    if first < 1 or last < first:
        raise ValueError(f"expected seeds from 1 up, the last not before the first, got {text!r}")
    return list(range(first, last + 1))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m testbed.accuracy", description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated: " + ", ".join(WORKLOADS))
    ap.add_argument("--bounds", default=",".join(f"{b:g}" for b in BOUNDS), help="comma-separated loss bounds")
    ap.add_argument("--seeds", default="8", help="N: seeds 1..N (default 8); FIRST-LAST: those seeds, e.g. 9-16 to "
                    "add seeds to a study (then --merge)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--steps", type=int, default=None, help="override every workload's steps")
    ap.add_argument("--quick", action="store_true", help="2 seeds, 40 steps, bounds 0.05 (a smoke test)")
    ap.add_argument("--out", default=str(ROOT / "results" / "evaluation"))
    ap.add_argument("--merge", nargs="+", metavar="ACCURACY_JSON",
                    help="instead of running: merge studies of other workloads run separately into one")
    a = ap.parse_args(argv)
    if a.merge:
        try:
            doc = merge_studies([json.loads(Path(p).read_text()) for p in a.merge])
        except (OSError, ValueError, KeyError) as e:
            ap.error(f"--merge: {e}")
        out = Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "accuracy.json").write_text(json.dumps(doc, indent=1))
        (out / "accuracy-report.md").write_text(report_markdown(doc))
        return 0
    names = [w for w in a.workloads.split(",") if w]
    unknown = [w for w in names if w not in WORKLOADS]
    if unknown:
        ap.error(f"unknown workload(s) {', '.join(unknown)} (known: {', '.join(WORKLOADS)})")
    try:
        bounds = tuple(float(b) for b in a.bounds.split(",") if b)
    except ValueError:
        ap.error(f"--bounds must be comma-separated numbers, got {a.bounds!r}")
    if any(not 0 < b < 1 for b in bounds):
        ap.error(f"every loss bound must be in (0, 1), got {a.bounds}")
    try:
        seeds = parse_seeds(a.seeds)
    except ValueError as e:
        ap.error(f"--seeds: {e}")
    steps = a.steps
    if a.quick:
        seeds, steps, bounds = [1, 2], 40, (0.05,)
    run_study({w: WORKLOADS[w] for w in names}, bounds, seeds, workers=a.workers, out=Path(a.out), steps=steps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
