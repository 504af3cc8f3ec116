"""A sweep run in parts (``dlcp-testbed sweep --seeds``) and joined (``dlcp-testbed merge``): the merged statistics
are those of every run together, and parts that did not run the same sweep are refused by name."""

import json
from pathlib import Path

import pytest

from testbed.cli import main
from testbed.sweep import cell_stats, load_sweep, merge_sweeps

ROOT = Path(__file__).resolve().parents[2]
OVERRIDES = {"gloo-fair": {"algorithm": "ddp-gloo"}, "dlcp": {}}


def _part(seeds: list[int], its: dict[str, list[float]], load: list[float]) -> dict:
    runs = [{"cell": c, "repetition": i, "seed": s, "results": f"{i:03d}-{c}/results.json",
             "summary": {"iter_p50_s": its[c][i], "iter_p99_s": 2 * its[c][i], "final_accuracy": 0.9}}
            for i, s in enumerate(seeds) for c in its]
    return {"name": "x", "source": "examples/testbed/pressure/incast-sweep.yaml", "base": "/b/incast.yaml",
            "repetitions": len(seeds), "seeds": seeds, "cell_overrides": OVERRIDES,
            "metadata": {"git_commit": "a" * 40, "load_start": load, "load_end": [x + 1 for x in load],
                         "started": f"t{seeds[0]}", "packages": {"torch": "x"}},
            "runs": runs, "cells": {c: cell_stats([r["summary"] for r in runs if r["cell"] == c]) for c in its}}


def test_merged_statistics_are_over_every_part(tmp_path):
    a = _part([1, 2, 3], {"gloo-fair": [0.5, 0.6, 0.7], "dlcp": [0.30, 0.31, 0.32]}, [1.0, 1.0, 1.0])
    b = _part([4, 5], {"gloo-fair": [0.8, 0.4], "dlcp": [0.29, 0.40]}, [5.0, 5.0, 5.0])
    for name, doc in (("a", a), ("b", b)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "sweep.json").write_text(json.dumps(doc))
    rc = main(["merge", "--out", str(tmp_path / "m"), str(tmp_path / "a"), str(tmp_path / "b" / "sweep.json"),
               "--source", "examples/testbed/pressure/incast-sweep.yaml"])
    assert rc == 0
    m = json.loads((tmp_path / "m" / "sweep.json").read_text())
    assert m["seeds"] == [1, 2, 3, 4, 5] and m["repetitions"] == 5 and len(m["runs"]) == 10
    assert m["cells"]["gloo-fair"]["iter_p50_s"]["median"] == pytest.approx(0.6)  # of 0.4 .. 0.8
    assert m["cells"]["dlcp"]["iter_p99_s"]["median"] == pytest.approx(0.62)
    assert m["cells"]["dlcp"]["runs"] == 5
    assert m["runs"][6]["results"] == f"{tmp_path / 'b'}/000-gloo-fair/results.json"
    assert [r["repetition"] for r in m["runs"]] == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]
    assert m["metadata"]["load_start"] == [1.0] * 3 and m["metadata"]["load_end"] == [6.0] * 3
    assert [p["metadata"]["started"] for p in m["parts"]] == ["t1", "t4"] and m["parts"][1]["seeds"] == [4, 5]
    assert "| dlcp | 5 | 310 ms [290, 400]" in (tmp_path / "m" / "report.md").read_text()


def test_parts_of_different_sweeps_are_refused():
    a = _part([1], {"gloo-fair": [0.5], "dlcp": [0.3]}, [1.0] * 3)
    other = {**_part([2], {"gloo-fair": [0.5], "dlcp": [0.3]}, [1.0] * 3),
             "cell_overrides": {**OVERRIDES, "dlcp": {"loss_bound": 0}}}
    with pytest.raises(ValueError, match="p2: its cells or their overrides differ from p1's"):
        merge_sweeps([("p1", a), ("p2", other)])
    with pytest.raises(ValueError, match="p2: base spec"):
        merge_sweeps([("p1", a), ("p2", {**a, "base": "/b/lossy.yaml"})])
    failed = {**a, "failed": {"run": 0, "error": "boom"}}
    with pytest.raises(ValueError, match="p2: the part is incomplete .run 0 failed: boom"):
        merge_sweeps([("p1", a), ("p2", failed)])


def test_a_part_runs_one_repetition_per_seed_given():
    sweep = load_sweep(ROOT / "examples" / "testbed" / "pressure" / "incast-sweep.yaml")
    part = sweep.part([6, 7])
    assert [(r, s, c.name) for r, s, c in part.order()] == [
        (0, 6, "gloo-fair"), (0, 6, "dlcp"), (0, 6, "dlcp-no-loss"),
        (1, 7, "gloo-fair"), (1, 7, "dlcp"), (1, 7, "dlcp-no-loss")]
    assert sweep.repetitions == 8  # the sweep itself is unchanged
    assert main(["sweep", str(ROOT / "examples" / "testbed" / "pressure" / "incast-sweep.yaml"),
                 "--seeds", "1,x"]) == 2
