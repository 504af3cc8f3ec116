"""A²CiD² on a ring of 8 worker processes: consensus distance and training loss against wall time for plain
asynchronous gossip at rate r, gossip at 2r and A²CiD² at r (plus synchronous all-reduce SGD), in one run.

Goal (the paper's claim): A²CiD² at r is at least as good as gossip at 2r. Every repetition runs the four
configurations back to back (rotating their order); the comparisons then replay those runs into the harness, so
each case's candidate and baseline come from the same repetitions. Workers pad each gradient step to
``STEP_SECONDS`` (an emulated accelerator: 8 workers share this machine's few cores). Writes
``results/acid.json`` and ``results/acid.png`` (the curves). ``DLCP_BENCH_QUICK=1``: fewer, shorter runs.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from harness import RESULTS, Report

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from host.acid.config import RunConfig  # noqa: E402
from host.acid.launch import launch, worker_log_tails  # noqa: E402
from host.acid.problem import ProblemSpec  # noqa: E402

QUICK = os.environ.get("DLCP_BENCH_QUICK") == "1"
WORLD = 8
RATE = 1.0
STEPS = 120 if QUICK else 250
STEP_SECONDS = 0.04
REPS = 2 if QUICK else 3
LOSS_TARGET = 0.1
CONFIGS = {  # label -> (algo, rate)
    "gossip@r": ("gossip", RATE),
    "gossip@2r": ("gossip", 2 * RATE),
    "acid@r": ("acid", RATE),
    "allreduce": ("allreduce", RATE),
}


def run_one(label: str, rep: int) -> dict:
    algo, rate = CONFIGS[label]
    cfg = RunConfig(algo=algo, topology="ring", world=WORLD, rate_com=rate, steps=STEPS, step_seconds=STEP_SECONDS,
                    lr=0.05, momentum=0.9, log_interval=0.2, exchange_timeout=5.0, max_seconds=300.0,
                    seed=rep, problem=ProblemSpec(seed=rep))
    res = launch(cfg)
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
        "comms_per_step": res["comms"] / res["steps"],
        "mean_exchange_ms": 1e3 * sum((r["mean_exchange_seconds"] or 0) for r in res["reports"].values()) / WORLD,
        "series": [{k: x.get(k) for k in ("t", "steps", "consensus", "loss")} for x in s],
    }
    print(f"{label:10} rep {rep}: consensus {m['mean_consensus']:.4g} (2nd half {m['mean_consensus_2nd_half']:.4g})"
          f" loss {m['mean_loss']:.4f} final {m['final_loss']:.4f} comms/step {m['comms_per_step']:.2f} "
          f"train {m['train_seconds']:.1f}s", flush=True)
    return m


def plot(runs: dict[str, list[dict]], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.5))
    colors = {"gossip@r": "tab:blue", "gossip@2r": "tab:orange", "acid@r": "tab:green", "allreduce": "tab:gray"}
    for label, rs in runs.items():
        for i, m in enumerate(rs):
            t = [x["t"] for x in m["series"]]
            kw = dict(color=colors[label], alpha=0.9 if i == 0 else 0.35, label=label if i == 0 else None)
            if label != "allreduce":
                a.semilogy(t, [x["consensus"] for x in m["series"]], **kw)
            b.semilogy(t, [x["loss"] for x in m["series"]], **kw)
    a.set(xlabel="wall time (s)", ylabel="consensus distance (1/n) sum ||x_i - xbar||^2",
          title=f"ring of {WORLD}, rate r={RATE} per gradient step")
    b.set(xlabel="wall time (s)", ylabel="training loss of the averaged model", title="loss")
    for ax in (a, b):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    runs: dict[str, list[dict]] = {k: [] for k in CONFIGS}
    order = list(CONFIGS)
    for rep in range(REPS):
        for label in order[rep % len(order):] + order[:rep % len(order)]:
            runs[label].append(run_one(label, rep))

    def replay(label: str):
        it = iter(runs[label])
        return lambda: next(it)

    params = {"world": WORLD, "topology": "ring", "rate": RATE, "steps_per_worker": STEPS,
              "step_seconds": STEP_SECONDS, "repetitions": REPS, "loss_target": LOSS_TARGET}
    rep = Report("acid", params)
    for case, cand, base, metric in (
            ("consensus, A2CiD2@r vs gossip@2r", "acid@r", "gossip@2r", "mean_consensus"),
            ("consensus (2nd half), A2CiD2@r vs gossip@2r", "acid@r", "gossip@2r", "mean_consensus_2nd_half"),
            ("consensus, A2CiD2@r vs gossip@r", "acid@r", "gossip@r", "mean_consensus"),
            ("loss over the run, A2CiD2@r vs gossip@2r", "acid@r", "gossip@2r", "mean_loss"),
            ("loss over the run, A2CiD2@r vs gossip@r", "acid@r", "gossip@r", "mean_loss"),
            ("final loss, A2CiD2@r vs gossip@2r", "acid@r", "gossip@2r", "final_loss"),
            ("final loss, A2CiD2@r vs all-reduce SGD", "acid@r", "allreduce", "final_loss"),
            ("training time, A2CiD2@r vs all-reduce SGD", "acid@r", "allreduce", "train_seconds"),
            (f"time to loss {LOSS_TARGET}, A2CiD2@r vs all-reduce", "acid@r", "allreduce", "time_to_loss")):
        rep.compare(case, candidate=replay(cand), baseline=replay(base), metric=metric, higher_is_better=False,
                    repetitions=REPS, warmup=0, candidate_name=cand, baseline_name=base)
    for c in rep.cases:  # the curves are in the PNG and the per-run records below; keep the cases compact
        for role in ("candidate", "baseline"):
            c["repetitions"][role] = [{k: v for k, v in m.items() if k != "series"} for m in c["repetitions"][role]]
    path = rep.write()
    png = Path(os.environ.get("DLCP_BENCH_RESULTS", RESULTS)) / "acid.png"
    plot(runs, png)
    data = json.loads(path.read_text())
    data["runs"] = runs
    data["summary"] = {label: {k: sorted(m[k] for m in rs)[len(rs) // 2] for k in
                               ("mean_consensus", "mean_consensus_2nd_half", "mean_loss", "final_loss",
                                "comms_per_step", "train_seconds", "mean_exchange_ms")}
                       for label, rs in runs.items()}
    path.write_text(json.dumps(data, indent=1, default=float) + "\n")
    print(f"-> {png}")
    for label, s in data["summary"].items():
        print(f"{label:10} " + " ".join(f"{k}={v:.4g}" for k, v in s.items()))


if __name__ == "__main__":
    t0 = time.time()
    main()
    print(f"{time.time() - t0:.0f}s")
