"""Regression tests of three deviations from BMv2 simple_switch (issue 36), each through every code path the
target generates (fused, list-mode fast, plain reference) and, for table entries, through P4Runtime:

* ``standard_metadata.egress_spec`` is 0 when egress starts (BMv2's egress thread clears it; ``egress_port``
  holds the port), and ``mark_to_drop`` in egress drops;
* ``hs.next`` past the end of a header stack (and ``hs.last`` of an empty one) is the parser error
  StackOutOfBounds: the parser stops, nothing is written into the header after the stack, and ingress runs with
  ``parser_error`` set (BMv2 does not drop on a parser error; the program decides);
* non-const ``entries = {...}`` are ordinary entries: a controller reads them (``is_const`` false) and modifies
  or deletes them; ``const entries`` stay read-only.
"""
from __future__ import annotations

import pytest
from finsy import P4TableAction, P4TableEntry, P4TableMatch
from finsy.p4client import P4ClientError
from finsy.proto import rpc_code

from p4rt_local import connect, local_server
from switch.errors import P4Error
from switch.target import Switch
from switchd import PROGRAMS, run

PROGRAM = PROGRAMS / "bmv2_semantics.p4"
MODES = [dict(fuse=True, fast_paths=True), dict(fuse=False, fast_paths=True), dict(fuse=False, fast_paths=False)]
MODE_IDS = ["fused", "fast", "reference"]

EGRESS_SPEC = """#include <core.p4>
#include <v1model.p4>
header eth_t { bit<48> dst; bit<48> src; bit<16> type; }
struct headers_t { eth_t eth; }
struct meta_t { bit<8> x; }
parser P(packet_in pkt, out headers_t h, inout meta_t m, inout standard_metadata_t sm) {
    state start { pkt.extract(h.eth); transition accept; }
}
control V(inout headers_t h, inout meta_t m) { apply { } }
control I(inout headers_t h, inout meta_t m, inout standard_metadata_t sm) {
    apply { sm.egress_spec = (bit<9>)h.eth.type[3:0]; }
}
control E(inout headers_t h, inout meta_t m, inout standard_metadata_t sm) {
    apply {
        h.eth.src = (bit<48>)sm.egress_spec;
        h.eth.dst = (bit<48>)sm.egress_port;
        if (h.eth.type[15:8] == 0xE0) { mark_to_drop(sm); }
    }
}
control C(inout headers_t h, inout meta_t m) { apply { } }
control D(packet_out pkt, in headers_t h) { apply { pkt.emit(h.eth); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
"""


def frame(ethertype: int, rest: bytes = b"") -> bytes:
    return bytes(12) + ethertype.to_bytes(2, "big") + rest


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_egress_spec_is_zero_in_egress(tmp_path, mode):
    f = tmp_path / "egress_spec.p4"
    f.write_text(EGRESS_SPEC)
    sw = Switch(str(f), **mode)
    assert sw.fused == mode["fuse"]
    out = sw.send(0, frame(0x0003, b"payload"))
    assert [o.port for o in out] == [3]
    d = out[0].data
    assert int.from_bytes(d[6:12], "big") == 0, "egress read the ingress egress_spec (BMv2 clears it)"
    assert int.from_bytes(d[0:6], "big") == 3 and d[14:] == b"payload"
    # egress_spec set to 511 by mark_to_drop in egress drops the packet there
    assert sw.send(0, frame(0xE005)) == []
    assert sw.drop_total("pipeline_drop") == 1


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_egress_of_the_regression_program(mode):
    sw = Switch(str(PROGRAM), **mode)
    out = sw.send(1, frame(0x0800, b"x"))
    assert [(o.port, o.data) for o in out] == [(2, (2).to_bytes(6, "big") + bytes(6) + b"\x08\x00x")]
    assert sw.send(1, frame(0xE0E0)) == []


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_stack_next_past_the_end_is_stack_out_of_bounds(mode):
    sw = Switch(str(PROGRAM), **mode)
    oob = sw.ir.errors.members["StackOutOfBounds"]
    # two labels, the second with v == 0: the marker state extracts into labels.next with nextIndex == 2
    kept = sw.send(1, frame(0x8848, bytes([5, 0]) + b"rest"))
    assert sw.parser_errors == 1
    assert len(kept) == 1
    d = kept[0].data
    # ingress saw the error (0xDEAD), both labels are as received, the tag after the stack was NOT written (it
    # is not emitted: still invalid) and the payload follows the labels unchanged
    assert d[12:14] == b"\xde\xad" and d[14:16] == bytes([5, 0]) and d[16:] == b"rest"
    assert oob > 0
    # the same packet with EtherType 0x8847: the program drops packets with a parser error
    assert sw.send(1, frame(0x8847, bytes([5, 0]) + b"rest")) == []
    assert sw.parser_errors == 2 and sw.drop_total("pipeline_drop") == 1
    # one label that ends the stack (v == 0): the marker state extracts "r" into labels[1], inside the stack, and
    # overwrites it with the marker through labels[1]: no error
    ok = sw.send(1, frame(0x8847, bytes([0]) + b"rest"))
    assert sw.parser_errors == 2
    assert [o.data[12:] for o in ok] == [b"\x88\x47" + bytes([0, 0xEE]) + b"est"]


def test_stack_last_of_an_empty_stack_is_stack_out_of_bounds(tmp_path):
    src = PROGRAM.read_text().replace(
        "transition select(h.eth.type) { 0x8847: labels; 0x8848: labels_keep; default: accept; }",
        "transition select(h.eth.type) { 0x8847: labels; 0x8848: labels_keep; 0x8849: empty; default: accept; }"
    ).replace("    state labels_keep {",
              "    state empty { transition select(h.labels.last.v) { default: accept; } }\n    state labels_keep {")
    f = tmp_path / "last.p4"
    f.write_text(src)
    sw = Switch(str(f))
    assert sw.send(1, frame(0x8849, b"zz")) == []          # parser error -> the program drops it
    assert sw.parser_errors == 1


def test_stack_next_is_only_for_parsers(tmp_path):
    src = PROGRAM.read_text().replace("in_port.apply();", "h.labels.next.v = 1; in_port.apply();")
    f = tmp_path / "ctl.p4"
    f.write_text(src)
    with pytest.raises(P4Error) as ei:
        Switch(str(f))
    assert "header stack 'next' may only be used in a parser" in ei.value.message
    assert ei.value.loc.file == str(f) and ei.value.loc.line > 1 and ei.value.loc.col > 1


def test_initial_entries_with_the_switch_api():
    sw = Switch(str(PROGRAM))
    assert [o.port for o in sw.send(1, frame(0x0800))] == [2]
    assert len(sw.entries("I.in_port")) == 3
    sw.modify_entry("I.in_port", {"sm.ingress_port": 1}, "I.fwd", {"port": 5})
    assert [o.port for o in sw.send(1, frame(0x0800))] == [5]
    sw.delete_entry("I.in_port", {"sm.ingress_port": 2})
    assert sw.send(2, frame(0x0800)) == []                # default action: drop


def _entry_by_port(entries: list, port: int):
    for e in entries:
        if e.match["ingress_port"] == port:
            return e
    raise AssertionError(f"no entry for port {port} in {entries}")


def test_initial_entries_through_p4runtime(tmp_path):
    """A finsy controller pushes the program, reads the initial entries (not const), modifies and deletes them,
    and packets follow; the const table refuses writes."""
    with local_server() as (dev, addr, _svc):
        async def go():
            async with connect(addr, PROGRAM, tmp_path) as sw:
                got = [e async for e in sw.read(P4TableEntry("in_port"))]
                assert len(got) == 3 and not any(e.is_const for e in got)
                assert _entry_by_port(got, 1).action == P4TableAction("fwd", port=2)
                assert _entry_by_port(got, 3).action == P4TableAction("drop")
                fixed = [e async for e in sw.read(P4TableEntry("fixed"))]
                assert len(fixed) == 1 and fixed[0].is_const

                with dev.lock:
                    assert [o.port for o in dev.pipeline.switch.send(1, frame(0x0800))] == [2]
                await sw.modify([P4TableEntry("in_port", match=P4TableMatch({"sm.ingress_port": 1}),
                                              action=P4TableAction("fwd", port=6))])
                await sw.delete([P4TableEntry("in_port", match=P4TableMatch({"sm.ingress_port": 2}))])
                with dev.lock:
                    s = dev.pipeline.switch
                    assert [o.port for o in s.send(1, frame(0x0800))] == [6]
                    assert s.send(2, frame(0x0800)) == []
                with pytest.raises(P4ClientError) as ei:         # still there: a duplicate
                    await sw.insert([P4TableEntry("in_port", match=P4TableMatch({"sm.ingress_port": 3}),
                                                  action=P4TableAction("fwd", port=1))])
                assert ei.value.details[0].canonical_code == rpc_code.ALREADY_EXISTS
                await sw.insert([P4TableEntry("in_port", match=P4TableMatch({"sm.ingress_port": 2}),
                                              action=P4TableAction("fwd", port=4))])
                got = {e.match["ingress_port"]: e.action async for e in sw.read(P4TableEntry("in_port"))}
                assert got == {1: P4TableAction("fwd", port=6), 2: P4TableAction("fwd", port=4),
                               3: P4TableAction("drop")}
                with pytest.raises(P4ClientError) as ei:
                    await sw.delete([P4TableEntry("fixed", match=P4TableMatch({"h.eth.type": 0x0BAD}))])
                assert ei.value.details[0].canonical_code == rpc_code.PERMISSION_DENIED
        run(go())
