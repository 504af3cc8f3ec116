"""Programs p4c refuses are refused here too, at the same place and for the same reason (issue 44).

Each ``*.p4`` in this folder is a program the embedded target once accepted although p4c's front end (or its
BMv2 back end, ``p4c-bm2-ss``) refuses it; the feature it was written for lives on, in a form p4c accepts, in the
program of the same name under ``tests/switch/conformance/`` or ``tests/switch/programs/``.  ``REFUSED`` gives,
for each, where the error must point, words of our message, and p4c's own message (from p4c's sources) that it
must mean the same as.  The other tests here pin each rule's edges: what p4c still accepts must compile.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from switch.errors import P4Error
from switch.target import Switch

HERE = Path(__file__).parent
CONFORMANCE = HERE.parent / "conformance"

# file -> (line, column, words of our message, p4c's message for the same construct)
REFUSED: dict[str, tuple[int, int, str, str]] = {
    "for_loops.p4": (13, 9, "cannot assign to 'x', an 'in' parameter of function lowest_set",
                     "Expression x cannot be the target of an assignment"),
    "for_nested_return.p4": (13, 9, "cannot assign to 'lo', an 'in' parameter of function find",
                             "Expression lo cannot be the target of an assignment"),
    "functions.p4": (41, 18, "the argument for directionless parameter 'x' of function max3 must be a "
                             "compile-time constant",
                     "argument used for directionless parameter 'x' must be a compile-time constant"),
    "switch_values.p4": (28, 17, "switch on an error value is refused by p4c",
                         "sm.parser_error: 'switch' type can't be error"),
    "arith.p4": (63, 50, "'/' by a value not known at compile time is refused by p4c",
                 "h.inp.a / h.inp.b: could not evaluate expression at compilation time"),
    "error_key.p4": (38, 13, "an error constant as a table entry key is refused by p4c's BMv2 back end",
                     "error.NoError: unsupported exact key expression"),
    "subcontrol_shared.p4": (36, 9, "table Ing.inc.t is applied at",
                             "Program can not be implemented on this target since it contains a path from table "
                             "Ing.inc.t back to itself"),
    "bmv2_semantics.p4": (30, 9, "a field of a header stack's 'next' element is refused by p4c's BMv2 back end",
                          "h.labels.next uninitialized: next field read"),
    "stack_counter.p4": (43, 35, "a bool literal as the entry key of an optional field is refused",
                         "true: unsupported optional key expression"),
}


def test_every_program_here_has_its_expectation():
    assert sorted(p.name for p in HERE.glob("*.p4")) == sorted(REFUSED)


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refused_where_p4c_refuses(name):
    line, col, words, _p4c = REFUSED[name]
    with pytest.raises(P4Error) as ei:
        Switch(str(HERE / name), include_dirs=[str(CONFORMANCE)])
    e = ei.value
    assert (e.loc.file, e.loc.line, e.loc.col) == (str(HERE / name), line, col), str(e)
    assert words in e.message


PROLOGUE = '#include "common.p4"\nstruct H { h_t h; }\n'
EPILOGUE = """
parser P(packet_in pkt, out H hdr, inout meta_t meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.h); transition accept; }
}
control Eg(inout H hdr, inout meta_t meta, inout standard_metadata_t sm) { apply { } }
control Vck(inout H hdr, inout meta_t meta) { apply { } }
control Cck(inout H hdr, inout meta_t meta) { apply { } }
control Dep(packet_out pkt, in H hdr) { apply { pkt.emit(hdr.h); } }
V1Switch(P(), Vck(), Ing(), Eg(), Cck(), Dep()) main;
"""


def program(tmp_path: Path, body: str, decls: str = "", locals_: str = "") -> str:
    f = tmp_path / "prog.p4"
    f.write_text(PROLOGUE + decls + "\ncontrol Ing(inout H hdr, inout meta_t meta, inout standard_metadata_t sm) {\n"
                 + locals_ + "\n    apply {\n" + body + "\n        sm.egress_spec = 1;\n    }\n}\n" + EPILOGUE)
    return str(f)


def refused(path: str) -> P4Error:
    with pytest.raises(P4Error) as ei:
        Switch(path, include_dirs=[str(CONFORMANCE)])
    return ei.value


def run(path: str, *data: int) -> bytes:
    sw = Switch(path, include_dirs=[str(CONFORMANCE)])
    (out,) = sw.send(0, bytes(data))
    return out.data


# line 3 of a generated program is the first line of ``decls``, line 7 the first of ``body`` (no
# ``locals_``); a binary operator's error points at the operator.  (decls, body, line, col, words); make
# test-bmv2 checks that p4c refuses each at the same line (tests/bmv2/test_p4c_refusals.py)
EDGES: list[tuple[str, str, int, int, str]] = [
    # an in parameter passed on as out/inout: p4c "Read-only value used for out/inout parameter"
    ("void g(inout bit<8> y) { y = 1; }\nvoid f(in bit<8> x) { g(x); }", "        f(hdr.h.a);", 4, 25,
     "cannot assign to 'x', an 'in' parameter of function f"),
    # setValid on an in header parameter: p4c "must be a left-value"
    ("void f(in h_t x) { x.setValid(); }", "        f(hdr.h);", 3, 20,
     "target of setValid() must be writable, not 'x', an 'in' parameter of function f"),
    # a directionless parameter is read-only too
    ("bit<8> f(bit<8> k) { k = 2; return k; }", "        hdr.h.a = f(1);", 3, 22,
     "cannot assign to 'k', a parameter without direction of function f"),
    # a sub-control's in parameter (p4c type-checks the control on its own)
    ("control S(inout h_t h, in bit<8> d) { apply { d = 1; h.a = d; } }", "        S.apply(hdr.h, hdr.h.b);", 3, 47,
     "cannot assign to 'd', an 'in' parameter of control S"),
    # an in parameter that is a path argument, substituted in place
    ("control S(in h_t h) { apply { h.a = 1; } }", "        S.apply(hdr.h);", 3, 31,
     "cannot assign to 'h', an 'in' parameter of control S"),
    # a for-in loop: p4c-bm2-ss "BMV2 does not support for-in loops" (the three-part form is taken)
    ("", "        for (bit<8> i in 1 .. hdr.h.a) {\n            hdr.h.b = hdr.h.b + i;\n        }", 7, 9,
     "a for-in loop (for (T x in lo .. hi)) is refused by p4c's BMv2 back end"),
    ("", "        hdr.h.a = hdr.h.b % hdr.h.c;", 7, 27, "'%' by a value not known at compile time"),
    ("", "        hdr.h.a = hdr.h.b / 0;", 7, 29, "division by zero"),
    ("", "        int<8> s = (int<8>)hdr.h.b;\n        hdr.h.a = (bit<8>)(s / 2);", 8, 30,
     "'/' is not defined on signed values"),
]


@pytest.mark.parametrize("decls, body, line, col, words", EDGES)
def test_refusal_edges(tmp_path, decls, body, line, col, words):
    e = refused(program(tmp_path, body, decls))
    assert (e.loc.line, e.loc.col) == (line, col), str(e)
    assert words in e.message


# Writes to an action's 'in' or directionless parameter, refused by p4c's type checker (typeCheckExpr.cpp) wherever
# the action's parameters come from: a table's action list binding an 'in' parameter (the inliner makes it a local
# that copies the argument in), the control plane (directionless), a direct call, a top-level action bound by a
# table.  (decls, locals_, body, line, col, words, p4c's message); line 5 is the first line of ``locals_`` (line 3
# of ``decls``, a line of its own even when empty)
ACTION_WRITES: list[tuple[str, str, str, int, int, str, str]] = [
    ("", "    action set(in bit<8> v) { v = 3; hdr.h.d = v; }\n"
         "    table t { key = { hdr.h.a: exact; } actions = { set(hdr.h.b); } }", "        t.apply();", 5, 31,
     "cannot assign to 'v', an 'in' parameter of action set", "Expression v cannot be the target of an assignment"),
    ("", "    action set(bit<8> v) { v = 3; hdr.h.d = v; }\n"
         "    table t { key = { hdr.h.a: exact; } actions = { set; } }", "        t.apply();", 5, 28,
     "cannot assign to 'v', a parameter without direction of action set",
     "Expression v cannot be the target of an assignment"),
    ("", "    action set(in bit<8> v) { v = 3; hdr.h.d = v; }", "        set(hdr.h.b);", 5, 31,
     "cannot assign to 'v', an 'in' parameter of action set", "Expression v cannot be the target of an assignment"),
    ("action set(in bit<8> v, inout bit<8> w) { v[3:0] = 1; w = v; }",
     "    table t { key = { hdr.h.a: exact; } actions = { set(hdr.h.b, hdr.h.d); } }", "        t.apply();", 3, 43,
     "cannot assign to 'v', an 'in' parameter of action set",
     "Expression v[3:0] cannot be the target of an assignment"),
    ("void g(inout bit<8> y) { y = y + 1; }", "    action set(in bit<8> v) { g(v); hdr.h.d = v; }\n"
     "    table t { key = { hdr.h.a: exact; } actions = { set(hdr.h.b); } }", "        t.apply();", 5, 33,
     "cannot assign to 'v', an 'in' parameter of action set", "Read-only value used for out/inout parameter 'y'"),
]


@pytest.mark.parametrize("decls, locals_, body, line, col, words, _p4c", ACTION_WRITES)
def test_action_parameters_are_read_only(tmp_path, decls, locals_, body, line, col, words, _p4c):
    e = refused(program(tmp_path, body, decls, locals_))
    assert (e.loc.line, e.loc.col) == (line, col), str(e)
    assert words in e.message


def test_a_bound_in_parameter_is_read(tmp_path):
    """What p4c accepts beside ACTION_WRITES: a bound 'in' parameter read, copied into a local that is written."""
    locals_ = ("    action set(in bit<8> v, bit<8> k) { bit<8> w = v; w = w + k; hdr.h.d = w; }\n"
               "    table t { key = { hdr.h.a: exact; } actions = { set(hdr.h.b); } default_action = set(hdr.h.b, 5); }")
    assert run(program(tmp_path, "        t.apply();", locals_=locals_), 1, 2, 0, 0) == bytes([1, 2, 0, 7])


def prio_table(entries: str, props: str = "", kind: str = "ternary", const: bool = False) -> str:
    """``locals_`` for :func:`program`: table t on hdr.h.a (line 6; its key line 7, ``props`` from line 9, then
    ``entries =`` and the entries, one a line)."""
    return ("    action set(bit<8> v) { hdr.h.d = v; }\n    table t {\n"
            f"        key = {{ hdr.h.a: {kind}; }}\n        actions = {{ set; }}\n" + props
            + f"        {'const ' if const else ''}entries = {{\n" + entries + "        }\n    }")


# priority= in initial entries as p4c's EntryPriorities (frontends/p4/entryPriorities.cpp) and its grammar take
# it (docs/p4-subset.md, 14.2.1.4); (locals_, line, col, words, p4c's message), the table applied in the body
PRIORITY_REFUSALS: list[tuple[str, int, int, str, str]] = [
    (prio_table("            1 &&& 1 : set(1);\n            priority=3: 2 &&& 2 : set(2);\n"), 10, 13,
     "the first entry must have a priority", "entry must have a priority"),
    (prio_table("            priority=3: 1 : set(1);\n", kind="exact"), 7, 17,
     "key match types need no priorities", "key match type does not require priorities, but some are specified"),
    (prio_table("            priority=3: 1 &&& 1 : set(1);\n", const=True), 10, 22,
     "a table with const entries cannot have priorities", "Table with 'const' entries cannot have priorities"),
    (prio_table("            priority=0: 1 &&& 1 : set(1);\n"), 6, 11,
     "overflow in the entries' priority computation", "t Overflow in priority computation"),
    (prio_table("            priority=1: 1 &&& 1 : set(1);\n", "        priority_delta = -1;\n"), 9, 26,
     "priority_delta must be a positive value", "-1 must be a positive value"),
    (prio_table("            priority=1: 1 &&& 1 : set(1);\n", "        largest_priority_wins = 1;\n"), 9, 33,
     "largest_priority_wins must be a boolean expression", "largest_priority_wins must be a boolean expression"),
    (prio_table("            priority=2147483648: 1 &&& 1 : set(1);\n"), 10, 22,
     "entry priority 2147483648 is too large for p4c",
     "2147483648: this implementation does not support bitstrings this large"),
]


@pytest.mark.parametrize("locals_, line, col, words, _p4c", PRIORITY_REFUSALS)
def test_entry_priorities_as_p4c(tmp_path, locals_, line, col, words, _p4c):
    e = refused(program(tmp_path, "        t.apply();", locals_=locals_))
    assert (e.loc.line, e.loc.col) == (line, col), str(e)
    assert words in e.message


def test_many_entries_sorted_by_priority(tmp_path):
    """Up to 16 entries, p4c's std::sort is an insertion sort and keeps equal priorities in the order written (as
    entry_priority_initial.p4 shows on BMv2); beyond, an out-of-order list with equal priorities is refused, one
    without is sorted (the highest priority first: a = 1 matches every entry, and the one of priority 17 wins)."""
    rows = "".join(f"            priority={p}: {i} &&& 0 : set({i});\n" for i, p in enumerate(range(1, 18)))
    assert run(program(tmp_path, "        t.apply();", locals_=prio_table(rows)), 1, 0, 0, 0) == bytes([1, 0, 0, 16])
    tied = rows.replace("priority=17:", "priority=16:")
    e = refused(program(tmp_path, "        t.apply();", locals_=prio_table(tied)))
    assert (e.loc.line, e.loc.col) == (6, 11) and "equal entry priorities among more than 16 entries" in e.message


def test_for_in_is_refused_after_the_front_end_rules(tmp_path):
    """p4c's front end runs before its back end: for_loops.p4 here is refused first for its write to an 'in'
    parameter (line 13, REFUSED); once that is legal, for the for-in loop of its action (line 25)."""
    src = (HERE / "for_loops.p4").read_text()
    assert src.count("bit<8> lowest_set(in bit<8> x)") == 1
    f = tmp_path / "for_loops.p4"
    f.write_text(src.replace("bit<8> lowest_set(in bit<8> x)", "bit<8> lowest_set(inout bit<8> x)"))
    e = refused(str(f))
    assert (e.loc.file, e.loc.line, e.loc.col) == (str(f), 25, 9), str(e)
    assert "for-in loop" in e.message and "BMV2 does not support for-in loops" in e.message


# p4c's type checker (typeCheckExpr.cpp) makes hs.next a left-value and hs.last not, although P4-16 6.7 lists
# both among the l-values; p4c: "Expression h.labels.last.v cannot be the target of an assignment", "must be
# applied to a left-value", "Read-only value used for out/inout parameter 'hdr'".  (statement, col, words),
# each put at line 30 of tests/switch/programs/bmv2_semantics.p4 by ``last_write``
LAST_WRITES: list[tuple[str, int, str]] = [
    ("h.labels.last.v = 0xEE;", 9, "left-hand side is not assignable: a header stack's 'last' element is read-only"),
    ("h.labels.last.v[3:0] = 1;", 9, "left-hand side is not assignable: a header stack's 'last' element"),
    ("h.labels.last = h.labels[0];", 9, "left-hand side is not assignable: a header stack's 'last' element"),
    ("h.labels.last.setValid();", 9, "target of setValid() is not assignable: a header stack's 'last' element"),
    ("pkt.extract(h.labels.last);", 21, "argument for 'out hdr' is not assignable: a header stack's 'last'"),
]


def last_write(tmp_path: Path, stmt: str) -> str:
    """bmv2_semantics.p4 with ``stmt`` in place of line 30's write to labels[1] (in the parser's marker state)."""
    lines = (HERE.parent / "programs" / "bmv2_semantics.p4").read_text().splitlines(keepends=True)
    assert lines[29] == "        h.labels[1].v = 0xEE;\n"
    lines[29] = "        " + stmt + "\n"
    f = tmp_path / "last.p4"
    f.write_text("".join(lines))
    return str(f)


@pytest.mark.parametrize("stmt, col, words", LAST_WRITES)
def test_stack_last_is_not_an_lvalue(tmp_path, stmt, col, words):
    f = last_write(tmp_path, stmt)
    e = refused(f)
    assert (e.loc.file, e.loc.line, e.loc.col) == (f, 30, col), str(e)
    assert words in e.message


def test_what_p4c_accepts_still_compiles(tmp_path):
    """The legal neighbours of each rule: a directionless function parameter given a constant (or a list of
    constants), division by a
    power of two and on constants, a dividend of 0, an in parameter read and copied into a local."""
    decls = ("bit<8> scale(in bit<8> x, bit<8> k) { bit<8> y = x; y = y * k; return y; }\n"
             "struct pair_t { bit<8> p; bit<8> q; }\nbit<8> second(pair_t v) { return v.q; }\n"
             "const bit<8> K = 3;")
    body = ("        hdr.h.b = scale(hdr.h.a, K + 1) + second({7, 0});\n"
            "        hdr.h.c = hdr.h.a / 4 + hdr.h.a % 2 + 8w0 / hdr.h.d;\n"
            "        hdr.h.d = 8w100 / 7;")
    assert run(program(tmp_path, body, decls), 13, 0, 0, 5) == bytes([13, 52, 3 + 1 + 0, 14])


def test_one_table_applied_where_the_successor_is_the_same(tmp_path):
    """BMv2 takes a table applied in both branches of an if (one successor); an apply after another is refused at
    the later one as p4c refuses it (a path from the table back to itself), and so are applies in exclusive
    branches with different statements after (multiple successors), as p4c-bm2-ss 1.2.5.16 says for each."""
    locals_ = ("    action set(bit<8> v) { hdr.h.d = v; }\n"
               "    table t { key = { hdr.h.a: exact; } actions = { set; NoAction; } default_action = set(7); }")
    ok = program(tmp_path, "        if (hdr.h.b == 1) {\n            t.apply();\n        } else {\n"
                           "            t.apply();\n        }", locals_=locals_)
    assert run(ok, 1, 1, 0, 0) == bytes([1, 1, 0, 7])
    e = refused(program(tmp_path, "        t.apply();\n        hdr.h.c = 1;\n        t.apply();", locals_=locals_))
    assert (e.loc.line, e.loc.col) == (10, 9), str(e)
    assert "table Ing.t is applied at" in e.message and "after its apply at" in e.message
    assert "contains a path from table Ing.t back to itself" in e.message
    # both branches of an if, then once more after it: the third apply follows the first
    e = refused(program(tmp_path, "        if (hdr.h.b == 1) {\n            t.apply();\n        } else {\n"
                                  "            t.apply();\n        }\n        hdr.h.c = 2;\n        t.apply();",
                        locals_=locals_))
    assert (e.loc.line, e.loc.col) == (14, 9), str(e)
    assert "back to itself" in e.message
    # exclusive branches (of an if, of a switch) with different statements after the apply
    e = refused(program(tmp_path, "        if (hdr.h.b == 1) {\n            t.apply();\n            hdr.h.c = 1;\n"
                                  "        } else {\n            t.apply();\n        }", locals_=locals_))
    assert (e.loc.line, e.loc.col) == (12, 13), str(e)
    assert "with different statements after each" in e.message and "table Ing.t has multiple successors" in e.message
    e = refused(program(tmp_path, "        switch (hdr.h.b) {\n            1: { t.apply(); }\n"
                                  "            2: { t.apply(); hdr.h.c = 3; }\n        }", locals_=locals_))
    assert (e.loc.line, e.loc.col) == (10, 18), str(e)
    assert "table Ing.t has multiple successors" in e.message


def test_entry_keys_bmv2_can_hold(tmp_path):
    """A bool literal is a valid entry key for exact and ternary keys (BMv2 writes 1/0); an error constant is not,
    in any match kind."""
    locals_ = ("    action set(bit<8> v) { hdr.h.d = v; }\n"
               "    table t {\n        key = { hdr.h.isValid(): exact; hdr.h.a: ternary; }\n"
               "        actions = { set; }\n        default_action = set(7);\n"
               "        const entries = { (true, 1): set(9); }\n    }")
    assert run(program(tmp_path, "        t.apply();", locals_=locals_), 1, 0, 0, 0) == bytes([1, 0, 0, 9])
    bad = locals_.replace("hdr.h.a: ternary", "sm.parser_error: ternary").replace("(true, 1)", "(true, error.NoMatch)")
    e = refused(program(tmp_path, "        t.apply();", locals_=bad))
    assert (e.loc.line, e.loc.col) == (10, 34), str(e)
    assert "an error constant as a table entry key" in e.message and "ternary" in e.message
