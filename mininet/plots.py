"""PNG plots of testbed runs (matplotlib, no display): iteration-time CDF, accuracy over time, drops and ECN marks
per priority. Each plot overlays every run given, so one call on [baseline, dlcp] draws the comparison."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .steps import step_times

__all__ = ["plot_runs"]


def _label(r: dict[str, Any]) -> str:
    return f"{r['spec']['name']} ({r['spec']['algorithm']})"


def _per_step(r: dict[str, Any]) -> list[float]:
    """Slowest worker's time per step, without the warm-up steps (as the summary)."""
    return step_times(r["workers"])


def plot_runs(runs: list[dict[str, Any]], out_dir: str | Path, prefix: str = "") -> list[Path]:
    """Write the three plots for ``runs`` into ``out_dir``; returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    paths = []

    def finish(fig, ax, title: str, xlabel: str, ylabel: str, path: Path, grid: bool = True,
               legend_size: float | None = None) -> Path:
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        if grid:
            ax.grid(alpha=0.3)
        ax.legend(fontsize=legend_size)
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)
        return path

    fig, ax = plt.subplots(figsize=(6, 4))
    for r in runs:
        xs = sorted(t * 1000 for t in _per_step(r))
        if xs:
            ax.step(xs, [(i + 1) / len(xs) for i in range(len(xs))], where="post", label=_label(r))
    paths.append(finish(fig, ax, "Iteration time", "iteration time (ms, slowest worker)", "CDF",
                        out / f"{prefix}iteration_cdf.png"))

    fig, ax = plt.subplots(figsize=(6, 4))
    for r in runs:
        ev = r["workers"][0]["evals"]
        ax.plot([e["t"] for e in ev], [e["accuracy"] for e in ev], marker="o", ms=3, label=_label(r))
    target = runs[0]["spec"].get("target_accuracy") if runs else None
    if target:
        ax.axhline(target, color="grey", ls="--", lw=1, label="target")
    paths.append(finish(fig, ax, "Accuracy over time", "time (s)", "test accuracy", out / f"{prefix}accuracy.png"))

    fig, ax = plt.subplots(figsize=(7, 4))
    prios = list(range(8))
    width = 0.8 / max(1, 2 * len(runs))
    for k, r in enumerate(runs):
        sw = r.get("switches") or {}
        drops = sw.get("drops_by_priority", {})
        marks = sw.get("marks_by_priority", {})
        base = k * 2 * width
        ax.bar([p + base for p in prios], [drops.get(str(p), 0) for p in prios], width, label=f"drops: {_label(r)}")
        ax.bar([p + base + width for p in prios], [marks.get(str(p), 0) for p in prios], width,
               label=f"ECN marks: {_label(r)}", hatch="//")
    ax.set_xticks([p + 0.4 - width for p in prios], [str(p) for p in prios])
    paths.append(finish(fig, ax, "Drops and ECN marks per priority, all switches", "priority (queue)", "packets",
                        out / f"{prefix}drops_marks.png", grid=False, legend_size=7))
    return paths
