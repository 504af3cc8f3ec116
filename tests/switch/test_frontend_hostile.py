"""The front end under hostile or broken programs (issue 35): the #if evaluator, #include confinement, located
errors for every unsupported construct, and a mutation fuzz campaign that no traceback or hang survives."""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from p4fuzz import campaign
from switch.errors import Loc, P4Error
from switch.frontend.ppexpr import evaluate, tokenize
from switch.target import Switch
from test_frontend import TEMPLATE

PROG = TEMPLATE.replace("BODY", "")
LOC = Loc("t.p4", 3, 1)


def compile_src(tmp_path, src: str, name: str = "prog.p4", **kw) -> Switch:
    f = tmp_path / name
    f.write_text(src)
    return Switch(str(f), **kw)


def compile_err(tmp_path, src: str, **kw) -> P4Error:
    with pytest.raises(P4Error) as ei:
        compile_src(tmp_path, src, **kw)
    return ei.value


def cond(text: str, macros: dict[str, str] | None = None) -> bool:
    macros = macros or {}
    return evaluate(text, lambda n: tokenize(macros[n], LOC) if n in macros else None, lambda n: n in macros, LOC)


# ---- #if ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text,value", [
    ("1", True), ("0", False), ("2 + 3 * 4 == 14", True), ("(2 + 3) * 4 == 20", True),
    ("7 / 2 == 3 && -7 / 2 == -3 && -7 % 3 == -1", True),          # C truncates toward zero
    ("1 << 3 == 8 && 256 >> 4 == 16 && -16 >> 2 == -4", True),
    ("~0 == -1 && !0 && !!5", True), ("5 & 3 ^ 1 | 8", True), ("(5 & 3 ^ 1 | 8) == 8", True),
    ("1 ? 2 : 3", True), ("0 ? 2 : 0", False), ("1 ? 0 : 1 / 0", False),  # unevaluated branch: no error
    ("0 && 1 / 0", False), ("1 || 1 / 0", True),
    ("-1 < 0", True), ("-1 < 0u", False),                            # usual arithmetic conversions
    ("0xFFFFFFFFFFFFFFFF == -1", True), ("0xFFFFFFFFFFFFFFFF > 0", True),  # too big for intmax_t: unsigned
    ("0x7FFFFFFFFFFFFFFF + 1 < 0", True),                            # 64-bit wrap
    ("1 << 64 == 0 && 1 << -1 == 0", True),
    ("010 == 8 && 0b101 == 5 && 'A' == 65 && '\\n' == 10", True),
    ("defined(A) && defined B && !defined C", True), ("A * 2 == 14 && B == 15", True), ("UNDEF == 0", True),
])
def test_if_expressions(text, value):
    assert cond(text, {"A": "7", "B": "(A * 2 + 1)"}) is value


@pytest.mark.parametrize("text,msg", [
    ("9**9**9**9", "unexpected '*'"), ("1 / 0", "division by zero"), ("5 % (2 - 2)", "remainder by zero"),
    ("", "missing expression"), ("1 +", "unexpected end"), ("(1", "expected ')'"), ("1 = 1", "unexpected '="),
    ('"str"', "unexpected"), ("99999999999999999999", "too large"), ("08", "octal"), ("defined(1)", "macro name"),
    ("(" * 2000 + "1" + ")" * 2000, "nested too deeply"),
    ("(" * 6000 + "1" + ")" * 6000, "longer than 10000 tokens"), ("SELF", ""),
])
def test_if_errors_are_located(tmp_path, text, msg):
    src = f"#define SELF SELF + 1 / 0\n#if {text}\n#endif\n" + PROG
    t0 = time.monotonic()
    e = compile_err(tmp_path, src)
    assert time.monotonic() - t0 < 5
    assert (e.loc.line, e.loc.col) == (2, 1) and e.loc.file.endswith("prog.p4")
    assert msg in e.message and e.message.startswith("#if")


def test_if_elif_else_select_the_right_branch(tmp_path):
    src = ("#define LEVEL 2\n#if LEVEL == 1\nbad one\n#elif LEVEL * 2 == 4 && defined(LEVEL)\n"
           "const bit<8> X = 5;\n#elif 1 / 0\nbad two\n#else\nbad three\n#endif\n") + PROG
    compile_src(tmp_path, src)


def test_macro_bomb_is_an_error_not_a_hang(tmp_path):
    defs = "".join(f"#define M{i} M{i + 1} M{i + 1}\n" for i in range(60))
    t0 = time.monotonic()
    e = compile_err(tmp_path, defs + "const bit<8> z = M0;\n" + PROG)
    assert "exceeds" in e.message and e.loc.line == 61
    e = compile_err(tmp_path, defs + "#if M0\n#endif\n" + PROG)
    assert "after macro expansion" in e.message and e.loc.line == 61
    assert time.monotonic() - t0 < 10


# ---- #include ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("inc", ['"/etc/passwd"', '"../../../../../../etc/passwd"', "<../../../../../etc/hostname>",
                                 '"sub/../../outside.p4"', '"link.p4"'])
def test_include_cannot_leave_the_program_directory(tmp_path, inc):
    secret = tmp_path / "outside.p4"
    secret.write_text("TOPSECRET\n")
    bundle = tmp_path / "bundle"
    (bundle / "sub").mkdir(parents=True)
    (bundle / "link.p4").symlink_to(secret)           # a symbolic link out of the bundle
    e = compile_err(bundle, f"#include {inc}\n" + PROG)
    assert (e.loc.line, e.loc.col) == (1, 1)
    assert "leaves the program's directory" in e.message
    assert "TOPSECRET" not in str(e) and "root" not in e.message.split(":")[0]


def test_include_inside_the_bundle_and_include_dirs_works(tmp_path):
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "consts.p4").write_text("const bit<8> FROM_LIB = 3;\n")
    other = tmp_path / "other"
    other.mkdir()
    (other / "more.p4").write_text("const bit<8> FROM_DIR = 4;\n")
    body = "        hdr.h.a = FROM_LIB + FROM_DIR;"
    src = '#include "lib/consts.p4"\n#include <more.p4>\n' + TEMPLATE.replace("BODY", body)
    compile_src(tmp_path, src, include_dirs=[str(other)])
    # the same file is out of reach without the include directory, and says so without reading it
    e = compile_err(tmp_path, src)
    assert "cannot find include file 'more.p4'" in e.message


def test_binary_include_is_a_located_error(tmp_path):
    (tmp_path / "blob.p4").write_bytes(b"\xff\xfe\x00garbage")
    e = compile_err(tmp_path, '#include "blob.p4"\n' + PROG)
    assert "not a UTF-8 text file" in e.message and e.loc.file.endswith("blob.p4")


# ---- unsupported and invalid constructs: located, never a traceback ------------------------------------------------
PARSER_STATE = "pkt.extract(hdr.h); transition accept;"


@pytest.mark.parametrize("stmt,msg", [
    ("return;", "'return' is not allowed in a parser"),
    ("exit;", "'exit' is not allowed in a parser"),
])
def test_return_and_exit_in_a_parser_state(tmp_path, stmt, msg):
    src = TEMPLATE.replace(PARSER_STATE, f"pkt.extract(hdr.h); {stmt} transition accept;").replace("BODY", "")
    e = compile_err(tmp_path, src)
    assert msg in e.message and (e.loc.line, e.loc.col) == (7, 39)


@pytest.mark.parametrize("decl,msg", [
    ("header w_t { bit<4097> x; bit<7> y; }", "exceeds this target's limit of 4096 bits"),
    ("header w_t { bit<99999999999999999999> x; }", "exceeds this target's limit"),
    ("const bit<8> K = 1 << 100000;", ""),
    ("const int K = (1 << 4000) * (1 << 4000) * (1 << 4000);", "constant value longer than"),
    ("const bit<8> K = 1" + "0" * 5000 + ";", "integer literal longer than"),
    ('const bit<8> K = "\\x";', "invalid escape sequence"),
    ("struct s_t { h_t[100000] st; }", "header stack size 100000 exceeds"),
    ("register<bit<32>>(0xFFFFFFF) big;", "register size 268435455 out of range"),
])
def test_oversized_declarations(tmp_path, decl, msg):
    src = TEMPLATE.replace("struct headers_t", decl + "\nstruct headers_t").replace("BODY", "")
    t0 = time.monotonic()
    try:
        compile_src(tmp_path, src)
        assert not msg, "expected an error"
    except P4Error as e:
        assert msg in e.message and e.loc.line == 4
    assert time.monotonic() - t0 < 5


def test_header_stack_next_outside_a_parser(tmp_path):
    src = TEMPLATE.replace("struct headers_t { h_t h; }", "struct headers_t { h_t h; h_t[2] st; }")
    e = compile_err(tmp_path, src.replace("BODY", "        hdr.st.next.a = 1;"))
    assert "header stack 'next' may only be used in a parser" in e.message and e.loc.line == 12


# ---- fuzz ---------------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_mutated_programs_never_escape_the_located_error():
    """A few seconds of mutants of every program in p4src/ and tests/switch/programs (DLCP_P4FUZZ_SECONDS for a
    longer run); each compiles or fails with a located P4Error."""
    seconds = float(os.environ.get("DLCP_P4FUZZ_SECONDS", "3"))
    r = campaign(seed=int(os.environ.get("DLCP_P4FUZZ_SEED", "35")), cases=100_000, seconds=seconds,
                 min_cases=100)
    assert r.tried >= 100
    assert r.located_errors > 0 and r.compiled > 0          # the mutants reach both outcomes
    assert not r.failures, "\n".join(r.failures[:5])


def _prog(body: str = "", decl: str = "", parser_stmt: str | None = None) -> str:
    s = TEMPLATE.replace("BODY", body).replace("struct meta_t", decl + "\nstruct meta_t")
    return s.replace(PARSER_STATE, parser_stmt) if parser_stmt else s


# constructs this target does not implement (docs/p4-subset.md), each a located diagnostic: (program, line, text);
# the ones it implements are in tests/switch/conformance
UNSUPPORTED = {
    "variadic macro": ("#define F(...) x\n" + PROG, 1, "unsupported: variadic macro"),
    "value_set of a struct": (_prog(parser_stmt="pkt.extract(hdr.h); transition accept; } value_set<meta_t>(4) vs; "
                                               "state x { transition accept;"), 8, "unsupported: value_set of meta_t"),
    "resubmit with data": (_prog(body="        resubmit({hdr.h.a});"), 13, "unsupported: resubmit with a data argument"),
    "clone3 with data": (_prog(body="        clone3(CloneType.I2E, 1, m);"), 13,
                         "unsupported: clone3 with a data argument"),
    "generic struct": (_prog(decl="struct g_t<T> { T x; }"), 5, "unsupported: generic struct"),
    "register of a struct": (_prog(decl="struct r_t { bit<8> a; }\nregister<r_t>(4) regs;"), 6,
                             "unsupported: register of r_t"),
    "apply in a parser": (_prog(parser_stmt="I.apply(); transition accept;"), 8,
                          "I cannot be applied here"),
}


@pytest.mark.parametrize("name", sorted(UNSUPPORTED))
def test_unsupported_constructs_are_located(tmp_path, name):
    src, line, text = UNSUPPORTED[name]
    e = compile_err(tmp_path, src)
    assert text in e.message
    assert e.loc.file.endswith("prog.p4") and e.loc.line == line and e.loc.col >= 1


@pytest.mark.parametrize("body", [
    "        " + "if (hdr.h.a == 1) { " * 150 + "hdr.h.a = 2;" + " }" * 150,       # Python's 100 indentation levels
    "        " + "if (hdr.h.a == 1) { " * 400 + "hdr.h.a = 2;" + " }" * 400,       # recursion in the generator
    "        hdr.h.a = " + " + ".join(["hdr.h.a"] * 300) + ";",                     # Python's 200 nested parentheses
    "        hdr.h.a = " + "(" * 3000 + "hdr.h.a" + ")" * 3000 + ";",               # recursion in the parser
], ids=["if150", "if400", "sum300", "parens3000"])
def test_deep_nesting_is_a_located_limit(tmp_path, body):
    e = compile_err(tmp_path, TEMPLATE.replace("BODY", body))
    assert "nested too deeply" in e.message or "nesting too deep" in e.message
    assert e.loc.file.endswith("prog.p4") and (e.loc.line, e.loc.col) == (1, 1)


SEMANTICS = Path(__file__).parent / "programs" / "bmv2_semantics.p4"


@pytest.mark.parametrize("old,new,line,text", [
    ("            3 : drop();", "            3 : drop();\n            1 : drop();", 57,
     "entry has the same key as the entry at"),
    ("        size = 16;", "        size = 2;", 56, "table in_port has 3 entries but its size is 2"),
])
def test_initial_entries_that_cannot_be_installed(tmp_path, old, new, line, text):
    e = compile_err(tmp_path, SEMANTICS.read_text().replace(old, new))
    assert text in e.message and e.loc.line == line


def test_declaration_cut_at_the_end_of_the_file(tmp_path):
    # a scan for a method name that runs into the end of the file
    e = compile_err(tmp_path, "extern ethernet_t {\n    bit<48> dst\n")
    assert e.loc.file.endswith("prog.p4") and e.loc.line >= 1


def test_a_type_used_as_a_value(tmp_path):
    e = compile_err(tmp_path, TEMPLATE.replace("BODY", "        hdr.h.b = (bit<16>)standard_metadata_t.enq_qdepth;"))
    assert "'standard_metadata_t' is a type, not a value" in e.message and (e.loc.line, e.loc.col) == (12, 28)


def test_a_method_is_not_a_value(tmp_path):
    body = "        hash(hdr.h.a, HashAlgorithm.crc16, 8w0, { hdr.h.b, hdr.h.isValid }, 8w255);"
    e = compile_err(tmp_path, TEMPLATE.replace("BODY", body))
    assert "'isValid' is a method: call it, isValid()" in e.message and e.loc.line == 12


def test_keyset_of_a_match_kind_name(tmp_path):
    src = TEMPLATE.replace("transition accept; }", "transition select(hdr.h.a) { 1: accept; ternary: accept; } }", 1)
    e = compile_err(tmp_path, src.replace("BODY", ""))
    assert "keyset value must be an integer constant" in e.message and e.loc.line == 7


@pytest.mark.parametrize("text,line,msg", [
    ("#if 1\n#else\n#elif 1\n#endif\n", 3, "#elif after #else"),
    ("#if 0\n#else\n#else\n#endif\n", 3, "#else after #else"),
    ("#endif\n", 1, "#endif without #if"),
    ("#if 1\n", 1, "missing #endif"),
    ("#ifdef\n#endif\n", 1, "#ifdef expects a macro name"),
])
def test_conditional_structure_errors(tmp_path, text, line, msg):
    e = compile_err(tmp_path, text + PROG)
    assert msg in e.message and e.loc.line >= line
