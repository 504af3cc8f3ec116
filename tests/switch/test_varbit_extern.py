"""varbit headers (two-argument extract, emit, isValid, assignment, equality, checksums, BMv2's
parser errors) and top-level extern instances shared by ingress and egress."""
from pathlib import Path

import pytest

from switch.frontend.check import load_ir
from switch.errors import P4Error
from switch.backend.p4info import P4InfoBuilder
from switch.backend.runtime import csum16
from switch.target import Switch

PROGRAMS = Path(__file__).parent / "programs"
ETH = bytes(6) + bytes.fromhex("020000000099") + b"\x88\xb5"


def opts_packet(nbits: int, data: bytes, rest: bytes = b"\x33") -> bytes:
    # eth | len (nbits, csum=0) | opts (kind=0x11, data, tail=0x22) | trailer
    return ETH + bytes([nbits]) + b"\0\0" + b"\x11" + data + b"\x22" + rest


@pytest.fixture
def sw():
    return Switch(str(PROGRAMS / "varbit_shared.p4"))


@pytest.mark.parametrize("data", [b"", b"\xab\xcd", bytes(range(1, 9))])
def test_varbit_extract_emit_and_checksum(sw, data):
    out = sw.send(1, opts_packet(len(data) * 8, data))
    assert len(out) == 1 and out[0].port == 1
    d = out[0].data
    body = b"\x11" + data + b"\x22"
    csum = csum16(body)
    expected_len = bytes([len(data) * 8]) + csum.to_bytes(2, "big")
    assert d[14:17] == expected_len
    assert d[17:17 + len(body)] == body                      # fields around the varbit kept in place
    rest = d[17 + len(body):]
    if len(data) == 2:
        # ingress copied the header (varbit included), changed its kind, and compared the varbits
        assert rest == b"\xee" + data + b"\x22" + b"\x77"
    else:
        assert rest == b"\x33"


@pytest.mark.parametrize("nbits,data,port", [
    (12, b"\xab\xcd", 2),             # not a multiple of 8: ParserInvalidArgument
    (72, bytes(9), 3),                # longer than varbit<64>: HeaderTooShort
    (32, b"\x01", 4),                 # more than the packet holds: PacketTooShort
])
def test_varbit_parser_errors_reach_ingress(sw, nbits, data, port):
    pkt = opts_packet(nbits, data, rest=b"")
    out = sw.send(1, pkt)
    assert sw.parser_errors == 1
    assert [o.port for o in out] == [port]           # BMv2: the packet is not dropped, ingress sees the error
    d = out[0].data
    assert d[14:17] == pkt[14:17]                    # len header was extracted and is re-emitted unchanged
    assert d[17:] == pkt[17:]                        # opts is invalid: its bytes travel as payload


def test_varbit_error_order_like_bmv2(sw):
    # 76 bits: both not a multiple of 8 and too long -> BMv2 reports ParserInvalidArgument first
    assert [o.port for o in sw.send(1, opts_packet(76, bytes(10)))] == [2]
    # 72 bits with a too short packet: BMv2 checks the packet length before the maximum
    assert [o.port for o in sw.send(1, opts_packet(72, b"\x01", rest=b""))] == [4]


def test_top_level_externs_shared_by_ingress_and_egress(sw):
    for i in range(3):
        out = sw.send(1, ETH + b"payload")
        # egress reads what ingress wrote into the shared register
        assert int.from_bytes(out[0].data[6:12], "big") == i + 1
    assert sw.register_read("shared_reg", 0) == 3
    assert sw.counter_read("shared_cnt", 0)[0] == 3
    assert sw.counter_read("shared_cnt", 1)[0] == 3
    info = P4InfoBuilder(sw.ir).build()
    assert [r.preamble.name for r in info.registers] == ["shared_reg"]
    assert [c.preamble.name for c in info.counters] == ["shared_cnt"]
    assert info.registers[0].size == 4 and info.registers[0].type_spec.bitstring.bit.bitwidth == 32


BASE = """#include <core.p4>
#include <v1model.p4>
header v_t { bit<8> a; varbit<32> o; }
header f_t { bit<8> a; }
struct headers_t { v_t v; f_t f; }
struct meta_t { bit<32> x; }
TOP
parser P(packet_in pkt, out headers_t hdr, inout meta_t m, inout standard_metadata_t sm) {
    state start { EXTRACT transition accept; }
}
control V(inout headers_t hdr, inout meta_t m) { apply { } }
control I(inout headers_t hdr, inout meta_t m, inout standard_metadata_t sm) { apply { BODY } }
control E(inout headers_t hdr, inout meta_t m, inout standard_metadata_t sm) { apply { } }
control C(inout headers_t hdr, inout meta_t m) { apply { } }
control D(packet_out pkt, in headers_t hdr) { apply { pkt.emit(hdr.v); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
"""


def err(tmp_path, top="", extract="pkt.extract(hdr.v, 8);", body="", header=None):
    src = BASE.replace("TOP", top).replace("EXTRACT", extract).replace("BODY", body)
    if header:
        src = src.replace("header f_t { bit<8> a; }", header)
    p = tmp_path / "bad.p4"
    p.write_text(src)
    with pytest.raises(P4Error) as ei:
        load_ir(str(p))
    return ei.value


def test_base_program_compiles(tmp_path):
    p = tmp_path / "ok.p4"
    p.write_text(BASE.replace("TOP", "").replace("EXTRACT", "pkt.extract(hdr.v, 8);").replace("BODY", ""))
    load_ir(str(p))


@pytest.mark.parametrize("kw,anchor,msg", [
    # anchor: the text the error must point at (its first occurrence on the error's line)
    (dict(extract="pkt.extract(hdr.v);"), "pkt.extract", "header v_t has a varbit field: extract it with a size"),
    (dict(extract="pkt.extract(hdr.f, 8);"), "pkt.extract", "extract with a size needs a header with a varbit field"),
    (dict(extract="pkt.extract(hdr.v, 8w8);"), "8w8", "width mismatch: cannot assign bit<8> to bit<32>"),
    (dict(body="hdr.v.o = hdr.v.o + hdr.v.o;"), "+ hdr", "'+' needs integer operands, not varbit<32>"),
    (dict(body="m.x = (bit<32>)hdr.v.o;"), "(bit<32>)", "cannot cast varbit<32> to bit<32>"),
    (dict(body="hdr.v.o = 5;"), "5;", "cannot assign an integer to a value of type varbit<32>"),
    (dict(header="header f_t { varbit<8> a; varbit<8> b; }"), "b; }", "header f_t has more than one varbit field"),
    (dict(header="header f_t { varbit<12> a; }"), "a; }", "maximum width of 12 bits, not a multiple of 8"),
])
def test_varbit_misuse_positioned_errors(tmp_path, kw, anchor, msg):
    e = err(tmp_path, **kw)
    assert msg in e.message
    line = (tmp_path / "bad.p4").read_text().splitlines()[e.loc.line - 1]
    assert anchor in line, str(e)
    assert e.loc.col == line.index(anchor) + 1, str(e)


def test_top_level_non_extern_instantiation_is_positioned(tmp_path):
    e = err(tmp_path, top="control X(inout meta_t m) { apply { } }\nX() x;")
    assert "unsupported: top-level instantiation" in e.message and (e.loc.line, e.loc.col) == (8, 5)


def test_top_level_extern_name_clash(tmp_path):
    e = err(tmp_path, top="counter(4, CounterType.packets) c;\nregister<bit<8>>(4) c;")
    assert "'c' is already declared" in e.message and (e.loc.line, e.loc.col) == (8, 21)
