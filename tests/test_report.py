"""The tables the docs and the README quote are generated from the committed results (``make report``,
``testbed.report``): a table that no longer matches its data fails the suite."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from testbed import changes, report

ROOT = Path(__file__).resolve().parent.parent


def _copy_tree(dst: Path) -> Path:
    """The documents and results the report reads, copied so that a test can change them."""
    for doc in {r.doc for r in report.REGIONS.values()} | set(report.WHOLE):
        (dst / doc).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / doc, dst / doc)
    shutil.copytree(ROOT / "results", dst / "results")
    return dst


def test_every_committed_table_matches_its_data():
    assert report.stale() == [], "run `make report` and commit the docs it rewrites"


def test_a_hand_edited_figure_is_found(tmp_path):
    root = _copy_tree(tmp_path)
    doc = root / "docs/transport.md"
    text = doc.read_text()
    begin = text.index("<!-- begin generated: transport")
    edited = text[:begin] + text[begin:].replace(" Gb/s |", " Gb/s (typed) |", 1)
    assert edited != text
    doc.write_text(edited)
    assert report.stale(root) == ["docs/transport.md"]
    assert report.main(["--root", str(root)]) == 0  # make report puts the data's figure back
    assert doc.read_text() == text and report.stale(root) == []


def test_changed_data_makes_its_tables_stale(tmp_path):
    root = _copy_tree(tmp_path)
    src = root / "results/transport.json"
    data = json.loads(src.read_text())
    data["cases"][0]["median"]["candidate"] *= 0.5
    src.write_text(json.dumps(data))
    assert report.stale(root) == ["README.md", "docs/transport.md"]
    assert report.main(["--check", "--root", str(root)]) == 1


def _scaled(x, factors: list[float]):
    """``x`` with every float in it (a measurement, a load average) multiplied by the next of ``factors`` in turn,
    so that ratios of figures change too."""
    if isinstance(x, float):
        factors.append(factors.pop(0))
        return x * factors[-1]
    if isinstance(x, dict):
        return {k: _scaled(v, factors) for k, v in x.items()}
    if isinstance(x, list):
        return [_scaled(v, factors) for v in x]
    return x


def _regions_by_source() -> dict[str, set[str]]:
    """Every results file a generated document is made from -> those documents."""
    docs: dict[str, set[str]] = {}
    for region in report.REGIONS.values():
        for src in region.sources:
            docs.setdefault(src, set()).add(region.doc)
    for doc in report.WHOLE:
        text = (ROOT / doc).read_text()
        for src in sorted(set(re.findall(r"results/[\w/.-]+\.json", text.split("-->", 1)[0]))):
            docs.setdefault(src, set()).add(doc)
    return docs


@pytest.mark.parametrize("source", sorted(_regions_by_source()))
def test_every_results_file_change_makes_every_document_made_from_it_stale(tmp_path, source):
    root = _copy_tree(tmp_path)
    src = root / source
    src.write_text(json.dumps(_scaled(json.loads(src.read_text()), [0.37, 0.53, 0.71])))
    assert report.stale(root) == sorted(_regions_by_source()[source])
    assert report.main(["--check", "--root", str(root)]) == 1
    assert report.main(["--root", str(root)]) == 0 and report.stale(root) == []


@pytest.mark.parametrize("name", sorted(report.REGIONS))
def test_a_hand_edited_figure_in_any_region_is_found_and_put_back(tmp_path, name):
    region = report.REGIONS[name]
    root = _copy_tree(tmp_path)
    doc = root / region.doc
    text = doc.read_text()
    begin = text.index(region.begin())
    end = text.index(f"<!-- end generated: {name} -->", begin)
    body = text[begin + len(region.begin()):end]
    digit = re.search(r"\d", body)
    assert digit, f"region {name} quotes no figure"
    at = begin + len(region.begin()) + digit.start()
    doc.write_text(text[:at] + str((int(text[at]) + 1) % 10) + text[at + 1:])
    assert report.stale(root) == [region.doc]
    assert report.main(["--root", str(root)]) == 0
    assert doc.read_text() == text


def test_a_computed_region_names_its_module_not_a_results_file():
    region = report.REGIONS["acid-constants"]
    assert region.sources == () and region.begin().endswith("(make report, computed by host.acid.constants) -->")


def test_a_region_without_its_end_marker_is_named(tmp_path):
    root = _copy_tree(tmp_path)
    doc = root / "docs/backend.md"
    doc.write_text(doc.read_text().replace("<!-- end generated: collectives -->", ""))
    with pytest.raises(ValueError, match=r"docs/backend\.md:\d+: region 'collectives' has no"):
        report.render_all(root)
    assert report.main(["--check", "--root", str(root)]) == 2


def test_an_unknown_region_is_named(tmp_path):
    root = _copy_tree(tmp_path)
    doc = root / "docs/transport.md"
    doc.write_text(doc.read_text() + "\n<!-- begin generated: typed-by-hand (x) -->\n| 1 |\n"
                   "<!-- end generated: typed-by-hand -->\n")
    with pytest.raises(ValueError, match=r"docs/transport\.md:\d+: generated region 'typed-by-hand' has no renderer"):
        report.render_all(root)


def test_take_keeps_every_repetition_of_a_benchmark_result_but_only_its_metric(tmp_path):
    (tmp_path / "results").mkdir()
    raw = {"name": "demo_bench", "command": "python bench/demo_bench.py", "machine": {"commit": "abc1234"},
           "params": {"summary": ["a text table"], "size": 4},
           "cases": [{"case": "one", "metric": "gbps", "median": {"candidate": 0.987654321, "baseline": 1.0},
                      "repetitions": {"candidate": [{"gbps": 0.987654321, "cpu": 1.5}, {"gbps": 0.9}],
                                      "baseline": [{"gbps": 1.0}]}}]}
    src = tmp_path / "raw.json"
    src.write_text(json.dumps(raw))
    dst = report.take(src, tmp_path)
    assert dst == tmp_path / "results/demo_bench.json"
    got = json.loads(dst.read_text())
    assert got["command"] == raw["command"] and got["machine"] == raw["machine"]
    assert got["params"] == {"size": 4}
    assert got["cases"][0]["repetitions"] == {"candidate": [0.9877, 0.9], "baseline": [1.0]}
    assert got["cases"][0]["median"]["candidate"] == 0.9877
    src.write_text(json.dumps({"cases": []}))
    with pytest.raises(ValueError, match="not a benchmark result"):
        report.take(src, tmp_path)


def test_a_result_older_than_a_change_of_defaults_that_concerns_it_says_so(monkeypatch):
    """changes.DEFAULT_CHANGES: a result made before a change that names it carries, in its provenance, the change;
    a result made after it, or one the change does not concern, does not."""
    monkeypatch.setattr(changes, "DEFAULT_CHANGES", [("2026-06-01T00:00:00+0000", "the widget default", frozenset(
        {"collectives"}))])
    machine = {"commit": "abc", "cpus": 2, "cpu": "x", "loadavg": [1.0]}
    old = {"name": "collectives", "command": "c", "machine": {**machine, "time": "2026-05-31T23:59:59+0000"}}
    new = {"name": "collectives", "command": "c", "machine": {**machine, "time": "2026-06-01T00:00:01+0000"}}
    other = {"name": "wire", "command": "c", "machine": {**machine, "time": "2026-05-01T00:00:00+0000"}}
    assert "predates a change of defaults: the widget default (2026-06-01)" in report.provenance(old)
    assert "predates" not in report.provenance(new)
    assert "predates" not in report.provenance(other)
    assert report.predates(old) == ["the widget default (2026-06-01)"] and report.predates(new) == []
