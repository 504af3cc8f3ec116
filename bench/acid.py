"""A²CiD² on a ring of 8 worker processes: consensus distance and training loss against wall time for plain
asynchronous gossip at rate r, gossip at 2r and A²CiD² at r (plus synchronous all-reduce SGD), in one run.

Goal (the paper's claim): A²CiD² at r is at least as good as gossip at 2r. Every repetition runs the four
configurations back to back (rotating their order); the comparisons then replay those runs into the harness, so
each case's candidate and baseline come from the same repetitions. Workers pad each gradient step to
``STEP_SECONDS`` (an emulated accelerator: 8 workers share this machine's few cores), so every configuration makes
gradient steps at the same rate and the runs' ticks are at matching wall times and step counts.

Besides the real processes, the same comparisons on an ideal machine (``host.acid.simulate``: same problem,
constants, update functions, pairing rule, rates and step budget; no processes), to separate the algorithm from
systems effects, and for larger rings (16, 32, 64 workers), where the paper's acceleration is larger; and the
exact expected dynamics of the paper's model (``host.acid.analysis``) for rings of 8 to 16: asymptotic decay rate
of the consensus distance, and its stationary value under a constant gradient disagreement.

Writes ``results/acid.json`` and ``results/acid.png``. ``DLCP_BENCH_QUICK=1``: fewer, shorter runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

from harness import RESULTS, Report

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from host.acid.analysis import consensus_decay_rate, drift_consensus  # noqa: E402
from host.acid.config import RunConfig  # noqa: E402
from host.acid.constants import acid_constants  # noqa: E402
from host.acid.launch import launch, worker_log_tails  # noqa: E402
from host.acid.problem import ProblemSpec  # noqa: E402
from host.acid.simulate import MLPOracle, SimConfig, simulate  # noqa: E402

QUICK = os.environ.get("DLCP_BENCH_QUICK") == "1"
WORLD = 8
RATE = 1.0
STEPS = 120 if QUICK else 250
STEP_SECONDS = 0.04
REPS = 2 if QUICK else 3
LOSS_TARGET = 0.1
LR, MOMENTUM, LOG_INTERVAL = 0.05, 0.9, 0.2
SIM_REPS = 3 if QUICK else 6  # simulated ring of 8 (seeds)
SWEEP = (8, 16, 32) if QUICK else (8, 16, 32, 64)  # simulated ring sizes
SWEEP_SEEDS = 1 if QUICK else 2
EXACT = (8, 12) if QUICK else (8, 12, 16)  # exact analysis of the paper's model
CONFIGS = {  # label -> (algo, rate)
    "gossip@r": ("gossip", RATE),
    "gossip@2r": ("gossip", 2 * RATE),
    "acid@r": ("acid", RATE),
    "allreduce": ("allreduce", RATE),
}


def run_one(label: str, rep: int) -> dict:
    algo, rate = CONFIGS[label]
    cfg = RunConfig(algo=algo, topology="ring", world=WORLD, rate_com=rate, steps=STEPS, step_seconds=STEP_SECONDS,
                    lr=LR, momentum=MOMENTUM, log_interval=LOG_INTERVAL, exchange_timeout=5.0, budget="total",
                    seed=rep, problem=ProblemSpec(seed=rep))
    res = launch(cfg, timeout=600)
    if res["error"]:
        raise RuntimeError(f"{label} rep {rep}: {res['error']}\n{worker_log_tails(res)}")
    s = res["series"]
    half = s[len(s) // 2:]
    reached = [x["t"] for x in s if x.get("loss") is not None and x["loss"] <= LOSS_TARGET]
    m = {
        "label": label, "rep": rep, "mean_consensus": sum(x["consensus"] for x in s) / len(s),
        "mean_consensus_2nd_half": sum(x["consensus"] for x in half) / len(half),
        "mean_loss": sum(x["loss"] for x in s) / len(s), "final_loss": res["final"]["loss"],
        "final_acc": res["final"]["acc"], "train_seconds": res["train_seconds"],
        "time_to_loss": reached[0] if reached else float("inf"), "steps": res["steps"],
        "steps_per_worker_second": res["steps"] / WORLD / res["train_seconds"],
        "comms_per_step": res["comms"] / res["steps"],
        "mean_exchange_ms": 1e3 * sum((r["mean_exchange_seconds"] or 0) for r in res["reports"].values()) / WORLD,
        "series": [{k: x.get(k) for k in ("t", "steps", "consensus", "loss")} for x in s],
    }
    print(f"{label:10} rep {rep}: consensus {m['mean_consensus']:.4g} (2nd half {m['mean_consensus_2nd_half']:.4g})"
          f" loss {m['mean_loss']:.4f} final {m['final_loss']:.4f} comms/step {m['comms_per_step']:.2f} "
          f"train {m['train_seconds']:.1f}s", flush=True)
    return m


SIM_CONFIGS = {label: v for label, v in CONFIGS.items() if label != "allreduce"}
_ORACLES: dict[tuple[int, int], MLPOracle] = {}


def sim_one(label: str, world: int, seed: int) -> dict:
    """One simulated run of ``label`` on a ring of ``world``: the real runs' problem, step budget, rates, optimiser
    and pairing rule, on an ideal machine (instant exchanges, no contention); records every log interval."""
    algo, rate = SIM_CONFIGS[label]
    key = (world, seed)
    if key not in _ORACLES:
        _ORACLES.clear()
        _ORACLES[key] = MLPOracle(ProblemSpec(seed=seed), world, seed=seed)
    cfg = SimConfig(algo=algo, topology="ring", world=world, rate_com=rate, steps=STEPS, lr=LR, momentum=MOMENTUM,
                    comm_model="pairing", grad_timing="periodic", record_every=LOG_INTERVAL / STEP_SECONDS,
                    seed=seed)
    r = simulate(cfg, _ORACLES[key])
    m = {"label": label, "world": world, "seed": seed, "mean_consensus": r.mean_consensus,
         "mean_consensus_2nd_half": r.mean_consensus_2nd_half, "mean_loss": r.mean_loss,
         "final_loss": r.final["loss"], "comms_per_step": r.comms_per_step, "lapsed": r.lapsed,
         "series": [{"t": t * STEP_SECONDS, "steps": t, "consensus": c, "loss": lo}
                    for t, c, lo in zip(r.times, r.consensus, r.loss)]}
    print(f"sim ring({world}) {label:10} seed {seed}: consensus {m['mean_consensus']:.4g} "
          f"(2nd half {m['mean_consensus_2nd_half']:.4g}) loss {m['mean_loss']:.4f} final {m['final_loss']:.4f} "
          f"comms/step {m['comms_per_step']:.2f}", flush=True)
    return m


def exact_rows() -> list[dict]:
    """The paper's model solved exactly (``host.acid.analysis``): per ring size, decay rates and stationary drift
    consensus of gossip@r, gossip@2r and A²CiD²@r, and A²CiD²'s constants."""
    rows = []
    for n in EXACT:
        k = acid_constants("ring", n, RATE)
        row = {"world": n, "chi1": k.chi1, "chi2": k.chi2, "eta": k.eta, "alpha_tilde": k.alpha_tilde}
        for label, (algo, rate) in SIM_CONFIGS.items():
            row[f"decay_rate {label}"] = consensus_decay_rate(algo, "ring", n, rate)
            row[f"drift_consensus {label}"] = drift_consensus(algo, "ring", n, rate)
        row["decay speedup acid@r vs gossip@2r"] = row["decay_rate acid@r"] / row["decay_rate gossip@2r"]
        row["drift speedup acid@r vs gossip@2r"] = row["drift_consensus gossip@2r"] / row["drift_consensus acid@r"]
        row["drift speedup acid@r vs gossip@r"] = row["drift_consensus gossip@r"] / row["drift_consensus acid@r"]
        print(f"exact ring({n}): eta {k.eta:.4f} alpha~ {k.alpha_tilde:.3f}; decay rate gossip@r "
              f"{row['decay_rate gossip@r']:.4f} gossip@2r {row['decay_rate gossip@2r']:.4f} acid@r "
              f"{row['decay_rate acid@r']:.4f}; acid@r vs gossip@2r: decay "
              f"{row['decay speedup acid@r vs gossip@2r']:.3f}x"
              f", drift consensus {row['drift speedup acid@r vs gossip@2r']:.3f}x", flush=True)
        rows.append(row)
    return rows


def plot(runs: dict[str, list[dict]], sims: dict[int, dict[str, list[dict]]], exact: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker
    fig, ((a, b), (c, d)) = plt.subplots(2, 2, figsize=(13, 9))
    colors = {"gossip@r": "tab:blue", "gossip@2r": "tab:orange", "acid@r": "tab:green", "allreduce": "tab:gray"}
    for label, rs in runs.items():
        for i, m in enumerate(rs):
            t = [x["t"] for x in m["series"]]
            kw = dict(color=colors[label], alpha=0.9 if i == 0 else 0.35, label=label if i == 0 else None)
            if label != "allreduce":
                a.semilogy(t, [x["consensus"] for x in m["series"]], **kw)
            b.semilogy(t, [x["loss"] for x in m["series"]], **kw)
    for label, rs in sims[WORLD].items():
        for i, m in enumerate(rs):
            kw = dict(color=colors[label], alpha=0.9 if i == 0 else 0.3, label=label if i == 0 else None)
            c.semilogy([x["t"] for x in m["series"]], [x["consensus"] for x in m["series"]], **kw)
    a.set(xlabel="wall time (s)", ylabel="consensus distance (1/n) sum ||x_i - xbar||^2",
          title=f"real processes: ring of {WORLD}, r={RATE} comm/step/worker")
    b.set(xlabel="wall time (s)", ylabel="training loss of the averaged model", title="real processes: loss")
    c.set(xlabel=f"time (s, {STEP_SECONDS * 1e3:.0f} ms steps)", ylabel="consensus distance",
          title=f"simulated (ideal machine): ring of {WORLD}, same problem and rates")
    ns = sorted(sims)

    def med(n: int, label: str, key: str) -> float:
        return statistics.median(m[key] for m in sims[n][label])

    for key, style, name in (("mean_consensus_2nd_half", "o-", "sim: consensus, 2nd half"),
                             ("mean_consensus", "s--", "sim: consensus, whole run"),
                             ("mean_loss", "^-", "sim: loss of the average, whole run")):
        d.plot(ns, [med(n, "gossip@2r", key) / med(n, "acid@r", key) for n in ns], style, label=name)
    d.plot([r["world"] for r in exact], [r["decay speedup acid@r vs gossip@2r"] for r in exact], "kx:",
           label="exact: decay rate of consensus")
    d.plot([r["world"] for r in exact], [r["drift speedup acid@r vs gossip@2r"] for r in exact], "k+-.",
           label="exact: stationary consensus (drift)")
    d.axhline(1.0, color="red", lw=1)
    d.set(xscale="log", yscale="log", xlabel="ring size n", ylabel="A2CiD2@r better than gossip@2r by (x)",
          title="A2CiD2@r vs gossip@2r against ring size (> 1: claim holds)")
    d.set_xticks(ns, [str(n) for n in ns])
    d.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    d.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    d.set_yticks([0.5, 1, 2, 4], ["0.5", "1", "2", "4"])
    for ax in (a, b, c, d):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def replay(ms: list[dict]):
    it = iter(ms)
    return lambda: next(it)


def main() -> None:
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    torch.set_num_threads(1)
    started = time.time()
    runs: dict[str, list[dict]] = {k: [] for k in CONFIGS}
    order = list(CONFIGS)
    for rep in range(REPS):
        for label in order[rep % len(order):] + order[:rep % len(order)]:
            runs[label].append(run_one(label, rep))
    sims: dict[int, dict[str, list[dict]]] = {}
    for n in SWEEP:
        sims[n] = {label: [] for label in SIM_CONFIGS}
        for seed in range(SIM_REPS if n == WORLD else SWEEP_SEEDS):
            for label in SIM_CONFIGS:
                sims[n][label].append(sim_one(label, n, seed))
    exact = exact_rows()

    params = {"world": WORLD, "topology": "ring", "rate": RATE, "steps_per_worker": STEPS,
              "step_seconds": STEP_SECONDS, "repetitions": REPS, "loss_target": LOSS_TARGET, "lr": LR,
              "momentum": MOMENTUM, "sim_repetitions": SIM_REPS, "sweep": list(SWEEP), "sweep_seeds": SWEEP_SEEDS,
              "exact": list(EXACT)}
    rep = Report("acid", params)
    rep.started = started  # the report's "seconds": the whole benchmark, runs included
    for case, cand, base, metric in (
            ("consensus, A2CiD2@r vs gossip@2r", "acid@r", "gossip@2r", "mean_consensus"),
            ("consensus (2nd half), A2CiD2@r vs gossip@2r", "acid@r", "gossip@2r", "mean_consensus_2nd_half"),
            ("consensus, A2CiD2@r vs gossip@r", "acid@r", "gossip@r", "mean_consensus"),
            ("consensus (2nd half), A2CiD2@r vs gossip@r", "acid@r", "gossip@r", "mean_consensus_2nd_half"),
            ("loss over the run, A2CiD2@r vs gossip@2r", "acid@r", "gossip@2r", "mean_loss"),
            ("loss over the run, A2CiD2@r vs gossip@r", "acid@r", "gossip@r", "mean_loss"),
            ("final loss, A2CiD2@r vs gossip@2r", "acid@r", "gossip@2r", "final_loss"),
            ("final loss, A2CiD2@r vs all-reduce SGD", "acid@r", "allreduce", "final_loss"),
            ("training time, A2CiD2@r vs all-reduce SGD", "acid@r", "allreduce", "train_seconds"),
            (f"time to loss {LOSS_TARGET}, A2CiD2@r vs all-reduce", "acid@r", "allreduce", "time_to_loss")):
        rep.compare(case, candidate=replay(runs[cand]), baseline=replay(runs[base]), metric=metric,
                    higher_is_better=False, repetitions=REPS, warmup=0, candidate_name=cand, baseline_name=base,
                    params={"kind": "real processes", "world": WORLD})
    for n in SWEEP:
        k = len(sims[n]["acid@r"])
        cases = [("consensus (2nd half)", "gossip@2r", "mean_consensus_2nd_half"),
                 ("loss over the run", "gossip@2r", "mean_loss")]
        if n == WORLD:
            cases = [("consensus", "gossip@2r", "mean_consensus"), *cases, ("consensus", "gossip@r", "mean_consensus"),
                     ("consensus (2nd half)", "gossip@r", "mean_consensus_2nd_half"),
                     ("loss over the run", "gossip@r", "mean_loss"), ("final loss", "gossip@2r", "final_loss")]
        for what, base, metric in cases:
            rep.compare(f"simulated ring({n}): {what}, A2CiD2@r vs {base}", candidate=replay(sims[n]["acid@r"]),
                        baseline=replay(sims[n][base]), metric=metric, higher_is_better=False, repetitions=k,
                        warmup=0, candidate_name="acid@r", baseline_name=base,
                        params={"kind": "simulated", "world": n})
    for c in rep.cases:  # the curves are in the PNG and the per-run records below; keep the cases compact
        for role in ("candidate", "baseline"):
            c["repetitions"][role] = [{k: v for k, v in m.items() if k != "series"} for m in c["repetitions"][role]]
    path = rep.write()
    png = Path(os.environ.get("DLCP_BENCH_RESULTS", RESULTS)) / "acid.png"
    plot(runs, sims, exact, png)
    data = json.loads(path.read_text())
    data["runs"] = runs
    data["simulated"] = {str(n): v for n, v in sims.items()}
    data["exact"] = exact
    data["summary"] = {label: {k: statistics.median(m[k] for m in rs) for k in
                               ("mean_consensus", "mean_consensus_2nd_half", "mean_loss", "final_loss",
                                "comms_per_step", "train_seconds", "steps_per_worker_second", "mean_exchange_ms")}
                       for label, rs in runs.items()}
    data["summary_simulated"] = {str(n): {label: {k: statistics.median(m[k] for m in rs) for k in
                                                  ("mean_consensus", "mean_consensus_2nd_half", "mean_loss",
                                                   "final_loss", "comms_per_step")}
                                          for label, rs in v.items()} for n, v in sims.items()}
    path.write_text(json.dumps(data, indent=1, default=float) + "\n")
    print(f"-> {png}")
    for label, s in data["summary"].items():
        print(f"{label:10} " + " ".join(f"{k}={v:.4g}" for k, v in s.items()))


if __name__ == "__main__":
    t0 = time.time()
    main()
    print(f"{time.time() - t0:.0f}s")
