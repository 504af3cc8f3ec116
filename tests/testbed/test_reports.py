"""Sweep statistics and the generated evaluation text: numbers come from the runs' summaries, verdicts only where
intervals separate."""

from testbed.evaluation import render
from testbed.sweep import cell_stats, report_markdown


def _summary(it: float, goodput: float, acc: float = 0.95) -> dict:
    return {"iter_p50_s": it, "time_to_target_s": 10 * it, "final_accuracy": acc, "zero_filled_fraction": 0.0,
            "background_goodput_bps": goodput, "cpu_use": 0.5}


def _doc(cells: dict[str, list[dict]]) -> dict:
    runs = [{"cell": c, "repetition": i, "seed": i, "results": f"{c}/{i}/results.json", "summary": s}
            for c, ss in cells.items() for i, s in enumerate(ss)]
    return {"name": "t", "repetitions": 3, "seeds": [1, 2, 3], "runs": runs,
            "metadata": {"git_commit": "0" * 40, "packages": {"torch": "x"}},
            "cells": {c: cell_stats(ss) for c, ss in cells.items()}}


def test_generated_verdicts_follow_the_intervals():
    doc = _doc({"gloo-fair": [_summary(0.5, 16e6), _summary(0.6, 17e6), _summary(0.55, 15e6)],
                "dlcp": [_summary(0.3, 10e6), _summary(0.35, 16.5e6), _summary(0.32, 11e6)],
                "dlcp-no-loss": [_summary(0.31, 9e6), _summary(0.352, 9e6), _summary(0.5, 9e6)]})
    text = render(doc, doc, {"demo": "d.json"})
    assert "| `dlcp` |" in text and "320 ms [300, 350] (75% CI)" in text  # median and [min, max] of 3 runs
    assert "dlcp vs gloo-fair, iteration time: ratio of medians 0.58, better." in text
    # goodput 11 [10, 16.5] vs 16 [15, 17]: the intervals overlap, so no verdict either way
    assert "dlcp vs gloo-fair, background goodput: ratio of medians 0.69, within the run-to-run spread" in text
    assert "dlcp-no-loss vs dlcp, iteration time: ratio of medians 1.10, within the run-to-run spread" in text
    assert "- nowhere in these runs." in text
    report = report_markdown(doc)
    assert "| dlcp | 3 | 320 ms [300, 350] (75% CI) |" in report and "| 1 | gloo-fair | 1 | 1 | 600.0 ms |" in report


def test_rate_cells_are_compared_at_the_same_setting():
    rates = _doc({"gloo-fair,topology.core.rate=10mbit": [_summary(1.0, 8e6)] * 3,
                  "dlcp,topology.core.rate=10mbit": [_summary(1.2, 5e6)] * 3,
                  "gloo-fair,topology.core.rate=50mbit": [_summary(0.3, 40e6)] * 3,
                  "dlcp,topology.core.rate=50mbit": [_summary(0.2, 40e6)] * 3})
    text = render(None, None, {"rates": "r.json"}, rates)
    assert "- dlcp vs gloo-fair at topology.core.rate=10mbit, iteration time: ratio of medians 1.20, **worse**." \
        in text
    assert "- dlcp vs gloo-fair at topology.core.rate=50mbit, iteration time: ratio of medians 0.67, better." in text
    where = text[text.index("## Where DLCP does not win"):]
    assert "Fair Gloo vs DLCP by link rate: dlcp vs gloo-fair at topology.core.rate=10mbit, iteration time" in where
    assert "background goodput: ratio of medians 0.62, **worse**" in where and "50mbit, iteration" not in where


def test_goal_verdicts_and_workload_ratios_come_from_the_cells():
    def s(it: float, compute: float = 0.2) -> dict:
        return {**_summary(it, 0.0), "compute_s": compute, "comm_compute_ratio": (it - compute) / compute}

    goals = _doc({"ddp-4": [s(0.60), s(0.62), s(0.58)], "dear-4": [s(0.42), s(0.44), s(0.40)],
                  "ddp-4-100mbit": [s(0.30), s(0.31), s(0.29)], "dear-4-100mbit": [s(0.28), s(0.30), s(0.27)],
                  "topk-ag-8": [s(0.78), s(0.80), s(0.70)], "spardl-8": [s(0.27), s(0.50), s(0.26)]})
    text = render(None, None, {"goals": "g.json"}, goals=goals)
    # 0.60 / 0.42 = 1.43 by the medians; 0.58 / 0.44 = 1.32 at the interval ends: above 1.3 both ways
    assert "(`dear-4` vs `ddp-4`, goal 1.3x): 1.43x by the medians, 1.32x at the interval ends: **reached**, even " \
           "at the interval ends; the baseline's exposed comm / compute 2.00, so overlap alone can give at most " \
           "1.50x." in text
    assert "(`dear-4-100mbit` vs `ddp-4-100mbit`, goal 1.3x): 1.07x by the medians, 0.97x at the interval ends: " \
           "**not reached**" in text
    assert "(`spardl-8` vs `topk-ag-8`, goal 1.5x): 2.89x by the medians, 1.40x at the interval ends: reached by " \
           "the medians, not at the interval ends" in text
    assert "DeAR's and SparDL's speed-up goals (`examples" not in text  # no longer listed as not covered
    work = _doc({"mlp-ddp": [s(0.6)] * 3, "mlp-dear": [s(0.4)] * 3, "cnn-ddp": [s(1.0)] * 3})
    text = render(None, None, {"workloads": "w.json"}, workloads=work)
    assert "- mlp: DDP's exposed comm / compute 2 [2, 2] (75% CI) (within 0.5x-3x); DeAR 1.50x over DDP" in text
    assert "- cnn: DDP's exposed comm / compute 4 [4, 4] (75% CI) (**outside** 0.5x-3x)." in text
    easy = _doc({"cnn-ddp": [{**s(0.5), "final_accuracy": 0.99}] * 3})
    assert "(accuracy saturates: this workload cannot tell methods apart by accuracy)" in render(
        None, None, {"workloads": "w.json"}, workloads=easy)


def test_ablation_by_load_compares_at_the_same_load_and_says_where_dlcp_does_not_win():
    cells = {}
    for flows, (fair, full, no_prio, no_loss) in {"0": (0.40, 0.30, 0.302, 0.30),
                                                   "4": (0.60, 0.70, 0.90, 0.69)}.items():
        for name, it in (("gloo-fair", fair), ("dlcp", full), ("dlcp-no-priorities", no_prio),
                         ("dlcp-no-loss", no_loss)):
            cells[f"{name},background.0.flows={flows}"] = [
                _summary(it * k, None if flows == "0" else 10e6) for k in (0.99, 1.0, 1.01)]
    doc = _doc(cells)
    text = render(None, None, {"ablation-load": "a.json"}, ablation_load=doc)
    section = text[text.index("## Ablation as a function of background load"):]
    # a table per metric, configurations by load, each entry with its ratio to fair Gloo at the same load
    assert "| cell | what | 0 flows | 4 flows |" in section
    assert "| `dlcp` | DLCP: DeAR + bounded loss + layer priorities + per-packet spraying | 300 ms [297, 303] " \
           "(75% CI) (0.75x) | 700 ms [693, 707] (75% CI) (1.17x) |" in section
    assert "- dlcp vs gloo-fair at 0 flows, iteration time: ratio of medians 0.75, better." in section
    assert "- dlcp vs gloo-fair at 4 flows, iteration time: ratio of medians 1.17, **worse**." in section
    assert "- dlcp-no-priorities vs dlcp at 4 flows, iteration time: ratio of medians 1.29, **worse**." in section
    assert "at 0 flows, background goodput" not in section  # no background, no goodput to compare
    where = section[section.index("Where DLCP does not win here"):]
    assert "dlcp vs gloo-fair at 4 flows, iteration time" in where
    assert "- dlcp vs gloo-fair at 0 flows, iteration time" not in where
    # removing priorities at 0 flows (0.31 vs 0.30: overlapping intervals) or the loss bound anywhere changes nothing
    assert "dlcp-no-priorities vs dlcp at 0 flows, iteration time (removing it did not make DLCP slower)" in where
    assert "dlcp-no-loss vs dlcp at 4 flows" in where and "dlcp-no-priorities vs dlcp at 4 flows" not in where
    # without priorities DLCP is slower than fair Gloo at 4 flows (0.9 vs 0.6); at 0 flows it still beats it
    assert "- dlcp-no-priorities vs gloo-fair at 4 flows, iteration time (without this mechanism DLCP is not " \
           "faster than fair Gloo): ratio of medians 1.50, **worse**." in where
    assert "dlcp-no-priorities vs gloo-fair at 0 flows" not in where
    final = text[text.index("## Where DLCP does not win, and"):]
    assert final.count("Ablation as a function of background load: dlcp vs gloo-fair at 4 flows, iteration time") == 1


def test_pressure_section_reports_tails_and_the_goals_from_the_cells():
    def run(p50, p99, rto, acc=0.9):
        return {**_summary(p50, 1e6, acc), "iter_p90_s": (p50 + p99) / 2, "iter_p99_s": p99, "coll_p50_s": p50 / 4,
                "coll_p90_s": p50 / 2, "coll_p99_s": p99 / 2, "rto_steps": rto}

    doc = _doc({"gloo-fair": [run(0.6, 1.2, 3), run(0.62, 1.3, 4), run(0.61, 1.25, 2)],
                "dlcp": [run(0.3, 0.4, 0), run(0.31, 0.42, 0), run(0.32, 0.45, 1)],
                "dlcp-no-loss": [run(0.31, 0.9, 2), run(0.3, 0.8, 3), run(0.33, 1.0, 2)]})
    doc["source"] = "examples/testbed/pressure/lossy-small.yaml"
    doc["base"] = "/x/examples/testbed/pressure/lossy.yaml"
    text = render(None, None, {"pressure": "p.json"}, pressure=[doc])
    assert "## Pressure regime `lossy`: does bounded loss cut the tail?" in text
    assert "| `dlcp` | 3.1 s [3, 3.2] (75% CI) | 365 ms [350, 385] (75% CI) | 420 ms [400, 450] (75% CI) |" in text
    assert "dlcp vs dlcp-no-loss, iteration time (p99): ratio of medians 0.47, better." in text
    assert "dlcp vs dlcp-no-loss, iteration time (p50): ratio of medians 1.00, within the run-to-run spread" in text
    assert "dlcp vs dlcp-no-loss, steps that waited on an RTO: ratio of medians 0.00, better." in text
    # p99 speed-up: 0.9 / 0.42; time to target (10 x p50): 6.1 / 3.1
    assert "bounded loss's p99 speed-up (DLCP without it over DLCP) 2.14x, goal 1.3x" in text
    assert "DLCP's time to accuracy over fair Gloo 1.97x, goal 1.84x" in text


def _paired_doc(cells: dict[str, list[tuple[float, float]]]) -> dict:
    """A pressure sweep whose runs have the given (p50, p99) per repetition, with the tails the tables read."""
    def run(p50, p99):
        return {**_summary(p50, 1e6), "iter_p90_s": p99, "iter_p99_s": p99, "coll_p50_s": p50 / 4,
                "coll_p90_s": p50 / 2, "coll_p99_s": p99 / 2, "rto_steps": 1, "zero_filled_fraction": 0.003,
                "rto_timeouts": round(10 * p99)}

    doc = _doc({c: [run(*v) for v in vs] for c, vs in cells.items()})
    doc["repetitions"], doc["seeds"] = len(next(iter(cells.values()))), list(range(1, 9))
    doc["source"] = "examples/testbed/pressure/incast-sweep.yaml"
    doc["base"] = "/x/examples/testbed/pressure/incast.yaml"
    return doc


def test_bounded_loss_speedup_is_paired_by_repetition_and_judged_by_its_interval():
    from testbed.evaluation import paired_speedup, speedup_verdict

    # repetition i: DLCP without bounded loss takes 1.5x DLCP's p99 (whatever the repetition's own speed) and the
    # same p50; unpaired, the cells' spread would hide the p99 difference
    base = [(0.3 + 0.05 * i, 0.5 + 0.2 * i) for i in range(8)]
    doc = _paired_doc({"gloo-fair": [(2 * a, 2 * b) for a, b in base], "dlcp": base,
                       "dlcp-no-loss": [(a * (1.02 if i % 2 else 0.98), 1.5 * b) for i, (a, b) in enumerate(base)]})
    p99 = paired_speedup(doc, "dlcp-no-loss", "dlcp", "iter_p99_s")
    assert (p99["n"], round(p99["value"], 6), round(p99["lo"], 6), round(p99["hi"], 6)) == (8, 1.5, 1.5, 1.5)
    assert speedup_verdict(p99) == "**faster**"
    p50 = paired_speedup(doc, "dlcp-no-loss", "dlcp", "iter_p50_s")
    assert (round(p50["lo"], 6), round(p50["hi"], 6)) == (0.98, 1.02) and speedup_verdict(p50).startswith("no resolved")
    assert p99["coverage"] > 0.99  # 8 pairs: [min, max] covers the median with 1 - 2/256
    text = render(None, None, {"pressure": "p.json"}, pressure=[doc])
    row = next(line for line in text.splitlines() if line.startswith("| `incast` |"))
    assert "| 8 | 1.00x [0.98, 1.02] (99% CI, 8 pairs) | 1.50x [1.50, 1.50] (99% CI, 8 pairs) | no resolved " \
           "difference / **faster** | 2.00x [2.00, 2.00] (99% CI, 8 pairs) |" in row
    assert "- iteration time (p99): 1.50x [1.50, 1.50] (99% CI, 8 pairs): **faster**." in text
    # timeouts 10 x p99: DLCP 5..19 (median 12), without bounded loss 8..28 (median 18)
    assert ("- retransmission timeouts per run (every rank): `dlcp` 12 [5, 19], `dlcp-no-loss` 18 [8, 28]; dlcp vs "
            "dlcp-no-loss, timeouts: ratio of medians 0.67, within the run-to-run spread") in text
    # 1.5x at both interval ends clears the 1.3x goal: the closing section does not list the regime
    assert "Pressure regime `incast`: bounded loss's p99 speed-up" not in text
    slow = _paired_doc({"dlcp": base, "dlcp-no-loss": [(a, 1.2 * b) for a, b in base]})
    assert ("- Pressure regime `incast`: bounded loss's p99 speed-up (DLCP without it over DLCP, paired) 1.20x "
            "[1.20, 1.20] (99% CI, 8 pairs): **faster**; issue 45's goal is 1.3x.") in render(
        None, None, {"pressure": "p.json"}, pressure=[slow])
    # a missing run leaves its repetition out of the pairs; 3 pairs give a verdict that says how weak it is
    three = _paired_doc({"dlcp": base[:3], "dlcp-no-loss": [(a, 0.5 * b) for a, b in base[:3]]})
    st = paired_speedup(three, "dlcp-no-loss", "dlcp", "iter_p99_s")
    assert st["n"] == 3 and speedup_verdict(st) == "**slower** (an interval of only 75% coverage)"
    three["runs"] = [r for r in three["runs"] if not (r["cell"] == "dlcp" and r["repetition"] == 1)]
    assert paired_speedup(three, "dlcp-no-loss", "dlcp", "iter_p99_s")["n"] == 2


def test_pressure_ablation_compares_each_part_with_full_dlcp():
    base = [(0.3 + 0.01 * i, 0.5 + 0.01 * i) for i in range(4)]
    doc = _paired_doc({"dlcp": base, "dlcp-class-thresholds": [(a / 1.1, b / 1.4) for a, b in base],
                       "dlcp-no-loss": [(a, b) for a, b in base]})
    doc["source"] = "examples/testbed/pressure/incast-ablation.yaml"
    text = render(None, None, {"pressure-ablation": "a.json"}, pressure_ablation=doc)
    assert "## Pressure regime `incast`: each part of value-aware dropping" in text
    assert ("- `dlcp-class-thresholds`: iteration time (p50) 1.10x [1.10, 1.10] (88% CI, 4 pairs), **faster** (an "
            "interval of only 88% coverage); iteration time (p99) 1.40x [1.40, 1.40]") in text
    assert "- `dlcp-no-loss`: iteration time (p50) 1.00x [1.00, 1.00] (88% CI, 4 pairs), no resolved difference" in text
    assert "that part is not varied here" in text and "dlcp-no-host-eligibility" not in text
    # a cell with the host's eligibility marking off: described, and the text says what it separates
    doc = _paired_doc({"dlcp": base, "dlcp-no-host-eligibility": base, "dlcp-no-loss": base})
    doc["source"] = "examples/testbed/pressure/incast-ablation.yaml"
    doc["cell_overrides"] = {"dlcp": {}, "dlcp-no-host-eligibility": {"host_eligibility": False},
                             "dlcp-no-loss": {"loss_bound": 0}}
    text = render(None, None, {"pressure-ablation": "a.json"}, pressure_ablation=doc)
    assert "`dlcp-no-host-eligibility` turns that marking off (nothing eligible)" in text
    assert "| `dlcp-no-host-eligibility` | DLCP with the host's eligibility marking off" in text
    assert "not varied here" not in text


def test_pressure_regime_reports_time_to_accuracy_and_accuracy_cost_paired():
    """Time to accuracy (DLCP's over fair Gloo's) and the accuracy cost of bounded loss (DLCP's final accuracy minus
    DLCP's without it, points) are paired by repetition, each with its interval, in the summary row and the
    regime's section; a cost whose interval lies within 0.5 points says so, one that reaches past it does not."""
    from testbed.evaluation import accuracy_cost_verdict, paired_difference, paired_speedup

    base = [(0.3 + 0.05 * i, 0.5 + 0.2 * i) for i in range(8)]
    doc = _paired_doc({"gloo-fair": [(2 * a, 2 * b) for a, b in base], "dlcp": base, "dlcp-no-loss": base})
    # time to target is 10 x p50 in _summary: fair Gloo's 2x DLCP's in every repetition; DLCP's accuracy 0.3 points
    # under the exact cell's in repetitions 0-3, level in 4-7
    for r in doc["runs"]:
        if r["cell"] == "dlcp":
            r["summary"]["final_accuracy"] = 0.95 - (0.003 if r["repetition"] < 4 else 0.0)
    cost = paired_difference(doc, "dlcp-no-loss", "dlcp", "final_accuracy", 100.0)
    assert (cost["n"], round(cost["lo"], 6), round(cost["hi"], 6)) == (8, -0.3, 0.0)
    assert accuracy_cost_verdict(cost).startswith("within 0.5 points")
    text = render(None, None, {"pressure": "p.json"}, pressure=[doc])
    row = next(line for line in text.splitlines() if line.startswith("| `incast` |"))
    assert "| 2.00x [2.00, 2.00] (99% CI, 8 pairs) | -0.15 points [-0.30, +0.00] (99% CI, 8 pairs) |" in row
    assert "- DLCP over fair Gloo, time to target: 2.00x [2.00, 2.00] (99% CI, 8 pairs): **faster**." in text
    assert ("- final accuracy, DLCP minus DLCP without bounded loss: -0.15 points [-0.30, +0.00] (99% CI, 8 pairs): "
            "within 0.5 points of training without it (the whole interval).") in text
    for r in doc["runs"]:
        if r["cell"] == "dlcp" and r["repetition"] == 7:
            r["summary"]["final_accuracy"] = 0.95 - 0.008
    wide = paired_difference(doc, "dlcp-no-loss", "dlcp", "final_accuracy", 100.0)
    assert accuracy_cost_verdict(wide) == "not resolved to 0.5 points (the interval is wider)"
    # a run that never reached the target leaves its repetition out of the time-to-accuracy pairs
    next(r for r in doc["runs"] if r["cell"] == "dlcp")["summary"]["time_to_target_s"] = None
    assert paired_speedup(doc, "gloo-fair", "dlcp", "time_to_target_s")["n"] == 7
    # a regime where DLCP asked for loss and lost nothing says so
    for r in doc["runs"]:
        r["summary"]["loss_bound"] = 0.02 if r["cell"] == "dlcp" else 0.0
        r["summary"]["zero_filled_elements"] = 0
    assert "No `dlcp` run zero-filled a single element here" in render(None, None, {"pressure": "p.json"},
                                                                        pressure=[doc])
    next(r for r in doc["runs"] if r["cell"] == "dlcp")["summary"]["zero_filled_elements"] = 12
    assert "No `dlcp` run zero-filled" not in render(None, None, {"pressure": "p.json"}, pressure=[doc])


def test_a_pressure_sweep_started_before_a_host_change_says_so(monkeypatch):
    """A pressure sweep any part of which started before a change that changes.DEFAULT_CHANGES says concerns the
    pressure regimes is marked in the summary and its section; one started after it is not."""
    from testbed import changes

    monkeypatch.setattr(changes, "DEFAULT_CHANGES", [("2026-06-01T00:00:00+0000", "the RTO seed", frozenset(
        {"pressure"}))])
    base = [(0.3, 0.5)] * 8
    old = _paired_doc({"dlcp": base, "dlcp-no-loss": base})
    old["metadata"]["started"] = "2026-06-01T00:00:10Z"
    old["parts"] = [{"seeds": [1], "metadata": {"started": "2026-05-31T23:00:00Z"}},
                    {"seeds": [2], "metadata": {"started": "2026-06-01T00:00:10Z"}}]
    text = render(None, None, {"pressure": "p.json"}, pressure=[old])
    assert "| `incast` (predates a host change, below) | 8 |" in text
    assert "**Run before a change of the host transport: the RTO seed (2026-06-01)." in text
    new = _paired_doc({"dlcp": base, "dlcp-no-loss": base})
    new["metadata"]["started"] = "2026-06-01T00:00:10Z"
    text = render(None, None, {"pressure": "p.json"}, pressure=[new])
    assert "predates" not in text and "Run before a change" not in text


def test_issue_goal_is_judged_per_regime_part_by_part_with_the_reason_from_its_data():
    """The summary says per regime whether issue 45's goal is reached (bounded loss's paired p99 speed-up >= 1.3x,
    DLCP's paired time to accuracy >= 1.84x fair Gloo's, accuracy cost within 0.5 points over >= 8 seeds), and for
    a part that falls short the figures that explain it; one closing line says where it is reached, or that it is
    nowhere."""
    from testbed.evaluation import issue_goal

    base = [(0.3 + 0.05 * i, 0.5 + 0.2 * i) for i in range(8)]
    # fair Gloo 2x DLCP's step (so 2x its time to target, 10 x p50), bounded loss 1.5x at p99
    good = _paired_doc({"gloo-fair": [(2 * a, 2 * b) for a, b in base], "dlcp": base,
                        "dlcp-no-loss": [(a, 1.5 * b) for a, b in base]})
    ok, line = issue_goal(good)
    assert ok == [True, True, True] and line.startswith("**reached**: bounded loss's p99 speed-up 1.50x")
    text = render(None, None, {"pressure": "p.json"}, pressure=[good])
    assert "- `incast`: **reached**: " in text and "Reached in `incast`." in text
    # bounded loss changes nothing; fair Gloo 1.5x per step: both speed-ups fall short, each with its reason
    flat = _paired_doc({"gloo-fair": [(1.5 * a, 1.5 * b) for a, b in base], "dlcp": base, "dlcp-no-loss": base})
    for r in flat["runs"]:
        r["summary"]["iter_mean_s"] = r["summary"]["iter_p50_s"]
        r["summary"]["loss_bound"] = 0.02 if r["cell"] == "dlcp" else 0.0
    flat["cells"] = {c: cell_stats([r["summary"] for r in flat["runs"] if r["cell"] == c])
                     for c in ("gloo-fair", "dlcp", "dlcp-no-loss")}
    ok, line = issue_goal(flat)
    assert ok == [False, False, True]
    assert ("bounded loss's p99 speed-up 1.00x [1.00, 1.00] (99% CI, 8 pairs), short of the 1.3x (DLCP zero-filled "
            "0.3% of its elements, of the 2% its bound allows, so what bounded loss could spare was small; 1 of its "
            "steps per run (median) still waited on a retransmission timeout, 1 without bounded loss") in line
    assert ("DLCP's time to accuracy over fair Gloo 1.50x [1.50, 1.50] (99% CI, 8 pairs), short of the 1.84x "
            "(DLCP's mean step is 1.50x fair Gloo's, itself under the goal") in line
    text = render(None, None, {"pressure": "p.json"}, pressure=[flat])
    assert "- `incast`: **not reached**: " in text
    assert "No regime reaches the goal; in none does bounded loss cut the p99 step time by 1.3x." in text
    assert "DLCP's time to accuracy reaches" not in text
    # steps 2x faster but time to accuracy only 1.5x: the reason is what the time to accuracy counts beyond them
    for r in flat["runs"]:
        if r["cell"] == "gloo-fair":
            r["summary"]["iter_mean_s"] *= 2 / 1.5
    ok, line = issue_goal(flat)
    assert ("short of the 1.84x (DLCP's mean measured step is 2.00x fair Gloo's; the time to accuracy, from the start "
            "of training, also counts the 2 warm-up steps and the evaluations") in line
    # fair Gloo 2x slower, bounded loss no help: the rest of the goal is reached, and the closing line says where
    fast = _paired_doc({"gloo-fair": [(2 * a, 2 * b) for a, b in base], "dlcp": base, "dlcp-no-loss": base})
    assert issue_goal(fast)[0] == [False, True, True]
    assert ("No regime reaches the goal; in none does bounded loss cut the p99 step time by 1.3x. DLCP's time to "
            "accuracy reaches 1.84x fair Gloo's, with the accuracy cost within 0.5 points, in `incast` (where bounded "
            "loss's own speed-up is 1.00x at p50 and 1.00x at p99).") in render(
        None, None, {"pressure": "p.json"}, pressure=[fast])
    # fewer than 8 seeds: the accuracy part is not shown, even with a zero difference
    three = _paired_doc({"gloo-fair": [(2 * a, 2 * b) for a, b in base[:3]], "dlcp": base[:3],
                         "dlcp-no-loss": [(a, 1.5 * b) for a, b in base[:3]]})
    ok, line = issue_goal(three)
    assert ok == [True, True, False] and "not shown within 0.5 points (fewer than 8 seeds)" in line


def test_a_count_that_is_zero_in_the_median_run_is_said_so_not_called_missing():
    """Steps that waited on a timeout are often 0 in the median run of both cells: the sentence says so (a ratio
    of 0 to 0 is no ratio, and it is not missing data); only a missing statistic is "no data"."""
    from testbed.evaluation import _compare

    zero, two = {"median": 0, "lo": 0, "hi": 1}, {"median": 2, "lo": 1, "hi": 3}
    assert _compare("x vs y", zero, zero, "steps", True) == "- x vs y, steps: 0 in both (medians)."
    assert _compare("x vs y", two, zero, "steps", True) == "- x vs y, steps: 2 against 0 (medians)."
    assert _compare("x vs y", {"median": None}, zero, "steps", True) == "- x vs y, steps: no data."
    assert _compare("x vs y", two, two, "steps", True).startswith("- x vs y, steps: ratio of medians 1.00")


def test_cpu_per_iteration_is_each_workers_training_loop_over_its_steps_and_absent_in_older_sweeps():
    """A run's ``cpu_per_iter_s``: the mean over workers of their training loop's CPU over their steps (set-up and
    tear-down left out); None when a worker did not record it. A table of sweeps made before the figure existed
    has no column for it, and the demo's comparisons name it only when both cells have it."""
    from testbed.run import _cpu_per_iter

    its = [{"dt": 0.3}] * 50
    assert _cpu_per_iter([{"loop_cpu_s": 1.5, "iterations": its}, {"loop_cpu_s": 2.5, "iterations": its}]) == 0.04
    assert _cpu_per_iter([{"loop_cpu_s": 1.5, "iterations": its}, {"cpu_s": 2.5, "iterations": its}]) is None
    old = _doc({"gloo-fair": [_summary(0.5, 16e6)] * 3, "dlcp": [_summary(0.3, 10e6)] * 3})
    text = render(old, old, {"demo": "d.json"})
    assert "CPU per iteration" not in text and "CPU use (cores)" in text
    new = _doc({"gloo-fair": [{**_summary(0.5, 16e6), "cpu_per_iter_s": 0.013}] * 3,
                "dlcp": [{**_summary(0.3, 10e6), "cpu_per_iter_s": 0.03}] * 3})
    text = render(new, new, {"demo": "d.json"})
    assert "| CPU per iteration (a worker's) |" in text and "30 ms [30, 30]" in text
    assert "dlcp vs gloo-fair, CPU per iteration: ratio of medians 2.31, **worse**." in text
