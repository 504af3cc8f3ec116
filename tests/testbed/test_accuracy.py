"""The accuracy study (testbed.accuracy): its paired statistics alone, and one small study on the real stack (worker
processes on loopback, every eligible packet dropped): the lossy run zero-fills within its bound, the exact one
nothing, replicas stay identical, and the report and JSON come out."""

from __future__ import annotations

import json
import math

import pytest

from testbed.accuracy import paired_stats, report_markdown, run_study, study_stats


def test_paired_stats_is_the_mean_difference_with_a_student_t_interval() -> None:
    st = paired_stats([1.0, 2.0, 3.0, 4.0], [1.5, 2.0, 3.5, 5.0])
    d = [0.5, 0.0, 0.5, 1.0]
    mean = sum(d) / 4
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / 3)
    half = 3.182446 * sd / 2  # t(0.975, 3) = 3.1824
    assert st["n"] == 4 and st["mean"] == pytest.approx(mean)
    assert st["lo"] == pytest.approx(mean - half, rel=1e-5) and st["hi"] == pytest.approx(mean + half, rel=1e-5)
    one = paired_stats([1.0], [3.0])
    assert one["mean"] == 2.0 and one["lo"] is None and one["hi"] is None
    with pytest.raises(ValueError, match="one value per seed"):
        paired_stats([1.0, 2.0], [1.0])


def test_stats_pair_each_cell_with_the_exact_run_of_its_seed() -> None:
    runs = [{"workload": "w", "bound": b, "seed": s, "final_accuracy": acc, "final_loss": loss,
             "zero_filled_fraction": zf, "replicas_identical": True}
            for (b, s, acc, loss, zf) in [(0.0, 1, 0.80, 0.5, 0.0), (0.0, 2, 0.70, 0.6, 0.0),
                                          (0.05, 1, 0.78, 0.55, 0.03), (0.05, 2, 0.69, 0.62, 0.02)]]
    doc = {"workloads": {"w": {}}, "bounds": [0.05], "runs": runs, "workers": 2, "seeds": [1, 2],
           "metadata": {"git_commit": "abc", "git_dirty": False}}
    st = study_stats(doc)["w"]
    assert st["exact"]["accuracy_diff_points"]["mean"] == 0.0
    lossy = st["p=0.05"]
    assert lossy["accuracy_diff_points"]["mean"] == pytest.approx(-1.5)  # (-2 + -1) / 2 points
    assert lossy["loss_diff"]["mean"] == pytest.approx(0.035)
    assert lossy["zero_filled_mean"] == pytest.approx(0.025)
    doc["stats"] = {"w": st}
    md = report_markdown(doc)
    assert "| w | p=0.05 | 2.50% | 73.50% | -1.50 [" in md and "identical" in md


@pytest.mark.slow
def test_a_small_study_on_the_real_stack(tmp_path) -> None:
    work = {"mlp": dict(model="mlp", dataset="synthetic-cifar", test_size=1000, hidden=64, lr=0.05, steps=12)}
    lines: list[str] = []
    doc = run_study(work, (0.05,), [1], workers=2, out=tmp_path, console=lines.append)
    assert len(doc["runs"]) == 2 and len(lines) == 2, lines
    exact, lossy = sorted(doc["runs"], key=lambda r: r["bound"])
    assert exact["zero_filled_fraction"] == 0.0
    assert 0.0 < lossy["zero_filled_fraction"] <= 0.05 and lossy["zero_filled_step_max"] <= 0.05, lossy
    assert exact["replicas_identical"] is True and lossy["replicas_identical"] is True
    assert exact["steps"] == lossy["steps"] == 12
    saved = json.loads((tmp_path / "accuracy.json").read_text())
    assert saved["stats"]["mlp"]["p=0.05"]["runs"] == 1
    assert "| mlp | p=0.05 |" in (tmp_path / "accuracy-report.md").read_text()


def test_evaluation_renders_the_study_with_a_verdict_per_bound() -> None:
    from testbed.evaluation import accuracy_section, accuracy_verdict

    def cell(bound, lo, hi, mean, zf=0.01):
        return {"bound": bound, "runs": 8, "accuracy_mean": 0.9, "zero_filled_mean": zf, "replicas_identical": True,
                "accuracy_diff_points": {"n": 8, "mean": mean, "lo": lo, "hi": hi, "sd": 0.1},
                "loss_diff": {"n": 8, "mean": 0.0, "lo": -0.01, "hi": 0.01, "sd": 0.01}}

    assert accuracy_verdict(cell(0.01, -0.3, 0.4, 0.05)) == "unchanged within +-0.5 points"
    assert accuracy_verdict(cell(0.2, -3.0, -1.0, -2.0)) == "**lower** by 2.00 points"
    assert accuracy_verdict(cell(0.05, -0.9, 0.2, -0.3)).startswith("not resolved")
    same = cell(0.05, 0.0, 0.0, 0.0)
    same["accuracy_diff_points"]["sd"] = same["loss_diff"]["sd"] = 0.0
    same["loss_diff"].update(mean=0.0, lo=0.0, hi=0.0)
    assert accuracy_verdict(same).startswith("identical to the exact runs on every seed")
    doc = {"workers": 2, "seeds": list(range(1, 9)), "bounds": [0.01, 0.2],
           "metadata": {"git_commit": "abc", "started": "t", "load_start": [1], "load_end": [1]},
           "stats": {"mlp": {"exact": cell(0.0, 0.0, 0.0, 0.0, 0.0), "p=0.01": cell(0.01, -0.3, 0.4, 0.05),
                             "p=0.2": cell(0.2, -3.0, -1.0, -2.0)}}}
    text = "\n".join(accuracy_section(doc))
    assert "- mlp at p=0.01 (1.00% zero-filled): unchanged within +-0.5 points." in text
    assert "- mlp: accuracy first drops at p=0.2." in text
    assert "| mlp | p=0.2 |" in text and "every run's replicas ended identical" in text


def test_studies_of_other_workloads_merge_into_one() -> None:
    from testbed.accuracy import merge_studies

    def study(w, bounds, seeds=(1, 2)):
        runs = [{"workload": w, "bound": b, "seed": s, "final_accuracy": 0.9 - b, "final_loss": 0.1 + b,
                 "zero_filled_fraction": b / 2, "replicas_identical": True} for s in seeds for b in (0.0, *bounds)]
        return {"name": "accuracy", "workers": 2, "seeds": list(seeds), "bounds": list(bounds),
                "workloads": {w: {}}, "metadata": {"git_commit": w}, "runs": runs}

    doc = merge_studies([study("mlp", [0.01, 0.2]), study("cnn", [0.05])])
    assert doc["bounds"] == [0.01, 0.05, 0.2] and list(doc["workloads"]) == ["mlp", "cnn"]
    assert set(doc["stats"]["mlp"]) == {"exact", "p=0.01", "p=0.2"} and set(doc["stats"]["cnn"]) == {"exact", "p=0.05"}
    assert doc["stats"]["cnn"]["p=0.05"]["accuracy_diff_points"]["mean"] == pytest.approx(-5.0)
    assert [p["metadata"]["git_commit"] for p in doc["parts"]] == ["mlp", "cnn"]
    with pytest.raises(ValueError, match="other seeds"):
        merge_studies([study("mlp", [0.01]), study("cnn", [0.05], seeds=(1, 2, 3))])
    with pytest.raises(ValueError, match="in two of the studies"):
        merge_studies([study("mlp", [0.01]), study("mlp", [0.05])])


def _study(w, bounds, seeds=(1, 2), workers=2, settings=None, acc=lambda b, s: 0.9 - b):
    runs = [{"workload": w, "bound": b, "seed": s, "final_accuracy": acc(b, s), "final_loss": 0.1 + b,
             "zero_filled_fraction": b / 2, "replicas_identical": True} for s in seeds for b in (0.0, *bounds)]
    return {"name": "accuracy", "workers": workers, "seeds": list(seeds), "bounds": list(bounds),
            "workloads": {w: dict(settings or {"steps": 300})}, "metadata": {"git_commit": f"{w}{seeds[0]}"},
            "runs": runs}


def test_more_seeds_of_a_workload_merge_into_its_cells_and_the_pages_say_how_many() -> None:
    from testbed.accuracy import merge_studies, workload_seeds
    from testbed.evaluation import accuracy_section

    # the committed shape: a merged study (mlp and transformer on seeds 1-2), then transformer seeds 3-4 added
    first = merge_studies([_study("mlp", [0.01]), _study("transformer", [0.01, 0.02])])
    more = _study("transformer", [0.01, 0.02], seeds=(3, 4), acc=lambda b, s: 0.9 - b - 0.01 * s)
    doc = merge_studies([first, more])
    assert workload_seeds(doc) == {"mlp": [1, 2], "transformer": [1, 2, 3, 4]} and doc["seeds"] == [1, 2, 3, 4]
    st = doc["stats"]["transformer"]["p=0.02"]
    assert st["runs"] == 4 and st["accuracy_diff_points"]["n"] == 4
    assert st["accuracy_diff_points"]["mean"] == pytest.approx(-2.0)  # each seed against its own exact run
    assert doc["stats"]["mlp"]["p=0.01"]["runs"] == 2
    assert [(p["workloads"], p["seeds"]) for p in doc["parts"]] == [
        (["mlp"], [1, 2]), (["transformer"], [1, 2]), (["transformer"], [3, 4])]
    md = report_markdown(doc)
    assert md.splitlines()[2].startswith("Seeds per workload: mlp 1, 2, transformer 1-4; mlp (seeds 1, 2): commit `mlp1`")
    assert "transformer (seeds 3, 4): commit `transformer3`" in md
    text = "\n".join(accuracy_section({**doc, "metadata": {**doc["metadata"], "started": "t"}}))
    assert "seeds per cell: mlp 2, transformer 4, 2 workers;" in text


def test_a_merge_refuses_a_seed_twice_and_names_what_differs() -> None:
    from testbed.accuracy import merge_studies

    base = _study("transformer", [0.01, 0.02], seeds=(1, 2))
    with pytest.raises(ValueError, match=r"workload transformer seeds \[2\] are in two of the studies \(1 and 2\)"):
        merge_studies([base, _study("transformer", [0.01, 0.02], seeds=(2, 3))])
    with pytest.raises(ValueError, match=r"seeds \[4\] are in two of the studies \(2 and 3\)"):
        merge_studies([base, *(_study("transformer", [0.01, 0.02], seeds=s) for s in ((3, 4), (4, 5)))])
    with pytest.raises(ValueError, match=r"settings differ from study 1's \(lr 0\.01 vs 0\.003, steps 200 vs 300\)"):
        merge_studies([_study("transformer", [0.01, 0.02], settings={"steps": 300, "lr": 0.003}),
                       _study("transformer", [0.01, 0.02], seeds=(3,), settings={"steps": 200, "lr": 0.01})])
    with pytest.raises(ValueError, match=r"study 2 ran bounds \[0\.01\], study 1 \[0\.01, 0\.02\]"):
        merge_studies([base, _study("transformer", [0.01], seeds=(3, 4))])
    with pytest.raises(ValueError, match="study 2 ran 4 workers, study 1 2"):
        merge_studies([base, _study("transformer", [0.01, 0.02], seeds=(3, 4), workers=4)])
    with pytest.raises(ValueError, match=r"brings workload mlp on seeds \[3, 4\], study 1's workloads ran on \[1, 2\]"):
        merge_studies([base, _study("mlp", [0.01], seeds=(3, 4))])


def test_seeds_are_a_count_or_a_range_and_bad_ones_are_named(capsys) -> None:
    from testbed.accuracy import main, parse_seeds

    assert parse_seeds("8") == list(range(1, 9)) and parse_seeds("9-16") == list(range(9, 17))
    assert parse_seeds("3-3") == [3]
    for bad in ("0", "5-2", "x", "1-y", "-3"):
        with pytest.raises(ValueError, match=repr(bad).replace("-", r"\-")):
            parse_seeds(bad)
    with pytest.raises(SystemExit) as e:
        main(["--seeds", "16-9"])
    assert e.value.code == 2 and "--seeds: expected seeds from 1 up" in capsys.readouterr().err


def test_merge_on_the_command_line_writes_the_study_or_names_the_clash(tmp_path, capsys) -> None:
    from testbed.accuracy import main

    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(_study("transformer", [0.01], seeds=(1, 2))))
    b.write_text(json.dumps(_study("transformer", [0.01], seeds=(3, 4))))
    assert main(["--merge", str(a), str(b), "--out", str(tmp_path / "m")]) == 0
    doc = json.loads((tmp_path / "m" / "accuracy.json").read_text())
    assert doc["stats"]["transformer"]["p=0.01"]["runs"] == 4
    assert "| transformer | p=0.01 |" in (tmp_path / "m" / "accuracy-report.md").read_text()
    with pytest.raises(SystemExit) as e:
        main(["--merge", str(a), str(a), "--out", str(tmp_path / "n")])
    assert e.value.code == 2 and "seeds [1, 2] are in two of the studies" in capsys.readouterr().err
    assert not (tmp_path / "n").exists()


@pytest.mark.slow
@pytest.mark.long  # (make test runs a study on the real stack in test_a_small_study_on_the_real_stack)
def test_seeds_added_later_on_the_real_stack_merge_with_the_first_ones(tmp_path) -> None:
    work = {"mlp": dict(model="mlp", dataset="synthetic-cifar", test_size=1000, hidden=64, lr=0.05, steps=8)}
    run_study(work, (0.05,), [1], workers=2, out=tmp_path / "first", console=lambda _l: None)
    run_study(work, (0.05,), [2], workers=2, out=tmp_path / "more", console=lambda _l: None)
    from testbed.accuracy import main

    assert main(["--merge", str(tmp_path / "first" / "accuracy.json"), str(tmp_path / "more" / "accuracy.json"),
                 "--out", str(tmp_path / "merged")]) == 0
    doc = json.loads((tmp_path / "merged" / "accuracy.json").read_text())
    st = doc["stats"]["mlp"]["p=0.05"]
    assert doc["seeds"] == [1, 2] and st["runs"] == 2 and st["accuracy_diff_points"]["lo"] is not None
    assert all(r["replicas_identical"] for r in doc["runs"]) and len(doc["parts"]) == 2
