"""The tables the docs and the README quote are generated from the committed results (``make report``,
``testbed.report``): a table that no longer matches its data fails the suite."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from testbed import report

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
