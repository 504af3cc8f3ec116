"""Front end: valid programs compile; invalid ones give the right message at the right position."""
import subprocess
import sys
from pathlib import Path

import pytest

from switch.frontend.check import load_ir
from switch.errors import P4Error

PROGRAMS = Path(__file__).parent / "programs"

VALID = ["l3_router.p4", "ecn.p4", "ecmp.p4", "stack_counter.p4", "arith.p4"]

TEMPLATE = """#include <core.p4>
#include <v1model.p4>
header h_t { bit<8> a; bit<16> b; }
struct headers_t { h_t h; }
struct meta_t { bit<8> x; }
parser P(packet_in pkt, out headers_t hdr, inout meta_t m, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.h); transition accept; }
}
control V(inout headers_t hdr, inout meta_t m) { apply { } }
control I(inout headers_t hdr, inout meta_t m, inout standard_metadata_t sm) {
    apply {
BODY
    }
}
control E(inout headers_t hdr, inout meta_t m, inout standard_metadata_t sm) { apply { } }
control C(inout headers_t hdr, inout meta_t m) { apply { } }
control D(packet_out pkt, in headers_t hdr) { apply { pkt.emit(hdr.h); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
"""
BODY_LINE = 12  # line of BODY in TEMPLATE


@pytest.mark.parametrize("name", VALID)
def test_valid_programs_compile(name):
    p = load_ir(str(PROGRAMS / name))
    assert set(p.blocks) == {"parser", "verify", "ingress", "egress", "compute", "deparser"}


def compile_err(tmp_path, src: str) -> P4Error:
    f = tmp_path / "bad.p4"
    f.write_text(src)
    with pytest.raises(P4Error) as ei:
        load_ir(str(f))
    return ei.value


@pytest.mark.parametrize("body,col,msg", [
    ("        hdr.h.a = nosuch;", 19, "unknown name 'nosuch'"),
    ("        hdr.h.a = hdr.h.b;", 19, "width mismatch: cannot assign bit<16> to bit<8>"),
    ("        hdr.h.b = hdr.h.a + hdr.h.b;", 27, "width mismatch in '+': bit<8> and bit<16>"),
    ("        hdr.h.zz = 1;", 15, "header h_t has no field 'zz'"),
    ("        if (hdr.h.a) { }", 13, "if condition must be bool, not bit<8>"),
    ("        hdr.h.a = 8w256;", 19, "value 256 does not fit in bit<8>"),
    ("        hdr.h.a = hdr.h.a[8:1];", 19, "slice [8:1] out of range for bit<8>"),
    ("        resubmit({hdr.h.a});", 18, "unsupported: resubmit with a data argument"),
])
def test_error_messages(tmp_path, body, col, msg):
    e = compile_err(tmp_path, TEMPLATE.replace("BODY", body))
    assert msg in e.message
    assert (e.loc.line, e.loc.col) == (BODY_LINE, col)
    assert str(e).startswith(f"{tmp_path / 'bad.p4'}:{BODY_LINE}:{col}: ")


def test_assignment_to_in_parameter(tmp_path):
    src = TEMPLATE.replace("control D(packet_out pkt, in headers_t hdr) { apply { pkt.emit(hdr.h); } }",
                           "control D(packet_out pkt, in headers_t hdr) { apply { hdr.h.a = 1; } }")
    e = compile_err(tmp_path, src.replace("BODY", ""))
    assert "cannot assign to 'hdr': it is an 'in' parameter" in e.message
    assert e.loc.line == 17 and e.loc.col == 55


def test_missing_state(tmp_path):
    src = TEMPLATE.replace("transition accept; }", "transition parse_more; }", 1).replace("BODY", "")
    e = compile_err(tmp_path, src)
    assert "no parser state named 'parse_more'" in e.message
    assert (e.loc.line, e.loc.col) == (7, 50)


def test_syntax_error_position(tmp_path):
    e = compile_err(tmp_path, TEMPLATE.replace("BODY", "        hdr.h.a = ;"))
    assert "expected an expression, found ';'" in e.message
    assert (e.loc.line, e.loc.col) == (BODY_LINE, 19)


def test_unsupported_construct(tmp_path):
    src = "#define F(...) x\n" + TEMPLATE.replace("BODY", "")
    e = compile_err(tmp_path, src)
    where = f"{tmp_path / 'bad.p4'}:1:1"
    assert str(e) == f"{where}: unsupported: variadic macro at {where}"


def test_error_inside_included_file_points_there(tmp_path):
    (tmp_path / "inc.p4").write_text("header x_t {\n  bit<8> a;\n  bit<7> b;\n}\n")
    src = TEMPLATE.replace("header h_t", '#include "inc.p4"\nheader h_t').replace("BODY", "")
    e = compile_err(tmp_path, src)
    assert "x_t is 15 bits long" in e.message and e.loc.file.endswith("inc.p4") and e.loc.line == 1


def test_preprocessor_define_and_ifdef(tmp_path):
    body = "#define VAL 7\n#ifdef VAL\n        hdr.h.a = VAL;\n#else\n        hdr.h.a = nosuch;\n#endif"
    f = tmp_path / "ok.p4"
    f.write_text(TEMPLATE.replace("BODY", body))
    load_ir(str(f))


def test_compile_cli(tmp_path):
    out = tmp_path / "x.p4info.txtpb"
    r = subprocess.run([sys.executable, "-m", "switch.compile", str(PROGRAMS / "l3_router.p4"), "--p4info", str(out)],
                       capture_output=True, text=True, cwd=Path(__file__).parents[2])
    assert r.returncode == 0, r.stderr
    assert out.read_text().startswith("# proto-file: p4/config/v1/p4info.proto")
    bad = tmp_path / "bad.p4"
    bad.write_text(TEMPLATE.replace("BODY", "        hdr.h.a = nosuch;"))
    r = subprocess.run([sys.executable, "-m", "switch.compile", str(bad), "--p4info", str(out)],
                       capture_output=True, text=True, cwd=Path(__file__).parents[2])
    assert r.returncode == 1
    assert r.stderr.strip() == f"{bad}:{BODY_LINE}:19: unknown name 'nosuch'"
    assert "Traceback" not in r.stderr
