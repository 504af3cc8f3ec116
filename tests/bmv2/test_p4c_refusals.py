"""Every P4 program in ``tests/`` and ``p4src/`` compiles with p4c or is a test of a refusal, and every refusal the
embedded front end makes for p4c's sake, p4c makes too, at the same line (issue 44; docs/p4-subset.md, "Refused as
p4c refuses").

* A program (a ``.p4`` file that instantiates ``main``) outside ``tests/switch/refused/`` must pass ``p4test``
  (p4c's front and mid end) and ``p4c-bm2-ss`` (its BMv2 back end).  ``p4src/tofino/`` is for the Tofino back
  end (tests/tofino), and files without ``main`` are included by others.
* Each program in ``tests/switch/refused/`` must be refused by one of them, with p4c's message that
  ``test_refused.REFUSED`` records and at its line (where p4c points elsewhere, ``P4C_LINE`` says where and why).
* Each generated refusal case of ``test_refused`` (``EDGES``, ``LAST_WRITES``, ``ACTION_WRITES``,
  ``PRIORITY_REFUSALS``) must be refused by p4c at the line where the embedded front end puts its error (the last
  two with p4c's recorded message).
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.switch.refused.test_refused import (ACTION_WRITES, CONFORMANCE, EDGES, HERE, LAST_WRITES,
                                               PRIORITY_REFUSALS, REFUSED, last_write, program)

from .conftest import _require
from .twin import ROOT

pytestmark = pytest.mark.bmv2

MAIN = re.compile(r"\)\s*main\s*;")
PROGRAMS = sorted(p for top in ("tests", "p4src") for p in (ROOT / top).rglob("*.p4")
                  if MAIN.search(p.read_text()) and "tofino" not in p.relative_to(ROOT).parts)
# p4c points at the table's declaration (line 11), the embedded front end at the second apply of its instance
P4C_LINE = {"subcontrol_shared.p4": 11}


@pytest.fixture(scope="module")
def p4c_front_and_back() -> None:
    _require(("p4test", "p4c-bm2-ss"))


def p4c(tool: str, path: Path | str, tmp: Path) -> subprocess.CompletedProcess:
    """``tool`` on ``path`` with the includes the embedded target is given (the program's folder, p4src/include,
    the conformance programs' common.p4)."""
    args = [tool, "-I", str(ROOT / "p4src" / "include"), "-I", str(CONFORMANCE), str(path)]
    if tool == "p4c-bm2-ss":
        args[1:1] = ["-o", str(tmp / "out.json")]
    return subprocess.run(args, capture_output=True, text=True, timeout=120)


def test_the_programs_are_found():
    names = {p.relative_to(ROOT).as_posix() for p in PROGRAMS}
    assert "p4src/dlcp.p4" in names and "tests/switch/conformance/for_loops.p4" in names
    assert {p.name for p in PROGRAMS if p.parent == HERE} == set(REFUSED)


@pytest.mark.parametrize("path", [p for p in PROGRAMS if p.parent != HERE], ids=lambda p: str(p.relative_to(ROOT)))
def test_compiles_with_p4c(p4c_front_and_back, tmp_path, path: Path):
    for tool in ("p4test", "p4c-bm2-ss"):
        done = p4c(tool, path, tmp_path)
        assert done.returncode == 0, f"{tool} refuses {path.relative_to(ROOT)}:\n{done.stderr[-3000:]}"


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_p4c_refuses_the_refused_programs(p4c_front_and_back, tmp_path, name: str):
    line, _col, _words, message = REFUSED[name]
    outputs = [p4c(tool, HERE / name, tmp_path) for tool in ("p4test", "p4c-bm2-ss")]
    assert any(o.returncode != 0 for o in outputs), f"p4c accepts {name}"
    said = "".join(o.stderr + o.stdout for o in outputs)
    assert message in said, f"p4c's message for {name} is not {message!r}:\n{said[-3000:]}"
    assert f"{name}({P4C_LINE.get(name, line)})" in said, said[-3000:]


@pytest.mark.parametrize("decls, body, line, col, words", EDGES, ids=[w for *_, w in EDGES])
def test_p4c_refuses_the_edges(p4c_front_and_back, tmp_path, decls, body, line, col, words):
    done = p4c("p4c-bm2-ss", program(tmp_path, body, decls), tmp_path)
    assert done.returncode != 0, f"p4c-bm2-ss accepts what the embedded front end refuses ({words})"
    assert f"prog.p4({line})" in done.stderr, done.stderr[-3000:]


@pytest.mark.parametrize("stmt, col, words", LAST_WRITES, ids=[s for s, *_ in LAST_WRITES])
def test_p4c_refuses_writes_through_last(p4c_front_and_back, tmp_path, stmt, col, words):
    done = p4c("p4test", last_write(tmp_path, stmt), tmp_path)
    assert done.returncode != 0, f"p4test accepts {stmt}"
    assert "last.p4(30)" in done.stderr, done.stderr[-3000:]


@pytest.mark.parametrize("decls, locals_, body, line, col, words, message", ACTION_WRITES,
                         ids=[f"{i}-{m[:30]}" for i, (*_, m) in enumerate(ACTION_WRITES)])
def test_p4c_refuses_writes_to_action_parameters(p4c_front_and_back, tmp_path, decls, locals_, body, line, col,
                                                words, message):
    done = p4c("p4test", program(tmp_path, body, decls, locals_), tmp_path)
    assert done.returncode != 0, f"p4test accepts {words}"
    assert message in done.stderr and f"prog.p4({line})" in done.stderr, done.stderr[-3000:]


@pytest.mark.parametrize("locals_, line, col, words, message", PRIORITY_REFUSALS,
                         ids=[w for *_, w, _m in PRIORITY_REFUSALS])
def test_p4c_refuses_the_entry_priorities(p4c_front_and_back, tmp_path, locals_, line, col, words, message):
    done = p4c("p4c-bm2-ss", program(tmp_path, "        t.apply();", locals_=locals_), tmp_path)
    assert done.returncode != 0, f"p4c-bm2-ss accepts {words}"
    assert message in done.stderr and f"prog.p4({line})" in done.stderr, done.stderr[-3000:]
