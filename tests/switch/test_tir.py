"""The typed IR between the checker and the code generator, and the storage analysis over it.

The checker's output is declared, frozen and located (every node has its source position, every expression its
type; nothing in it is a syntax-tree node); the code generator runs once per program and generates nothing that
reads storage the analysis (switch.midend.analysis.storage_facts) found unread; the analysis finds what a small program
does and does not read.  The import-graph side of the boundary is in tests/test_import_cycles.py.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from switch.midend import analysis, ir, tir
from switch.frontend import p4ast
from switch.frontend.check import load_ir
from switch.backend.codegen import Gen, NotFusable
from switch.errors import Loc, P4Error

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).parent
PROGRAMS = sorted([*(HERE / "programs").glob("*.p4"), *(HERE / "conformance").glob("*.p4"), ROOT / "p4src" / "dlcp.p4"])


def load(path: Path) -> ir.ProgramIR | None:
    """The program's IR, or None for an include-only file (no V1Switch main)."""
    try:
        return load_ir(str(path), [str(ROOT / "p4src" / "include")])
    except P4Error as e:
        if "no 'main' package" in str(e):
            return None
        raise


def bodies(p: ir.ProgramIR):
    """Every IR root of ``p``: action bodies, control applies, parser states, local declarations, table keys."""
    for a in p.actions:
        yield a.body
    for b in p.blocks.values():
        yield from b.inits
        yield from b.states
        if b.apply is not None:
            yield b.apply
    for t in p.tables:
        yield from (k.expr for k in t.keys + t.selector_keys)


def nodes(root):
    """Every IR node under ``root``: children, a call's receiver, a state's transition and select cases."""
    todo = [root]
    while todo:
        n = todo.pop()
        yield n
        todo += list(analysis.children(n))


def test_programs_are_found():
    names = {p.name for p in PROGRAMS}
    assert {"l3_router.p4", "dlcp.p4", "functions.p4", "header_union.p4"} <= names


@pytest.mark.parametrize("path", PROGRAMS, ids=lambda p: p.name)
def test_typed_ir_is_frozen_located_and_free_of_syntax_tree_nodes(path):
    p = load(path)
    if p is None:
        return
    count = 0
    for root in bodies(p):
        for n in nodes(root):
            count += 1
            assert dataclasses.is_dataclass(n) and type(n).__module__ == "switch.midend.tir", n
            assert isinstance(n.loc, Loc) and n.loc.line >= 1 and n.loc.col >= 1, n
            if isinstance(n, tir.Expr):
                assert isinstance(n.type, ir.Type), n
            for f in dataclasses.fields(n):
                v = getattr(n, f.name)
                for x in v if isinstance(v, tuple) else (v,):
                    assert not isinstance(x, p4ast.Node), (n, f.name)
            with pytest.raises(dataclasses.FrozenInstanceError):
                n.loc = None
    assert count > 10


@pytest.mark.parametrize("path", PROGRAMS, ids=lambda p: p.name)
def test_code_is_generated_in_one_run_that_reads_nothing_the_analysis_found_unread(path, monkeypatch):
    p = load(path)
    if p is None:
        return
    runs = []
    real = Gen.generate_fused

    def counted(self):
        runs.append(self)
        return real(self)
    monkeypatch.setattr(Gen, "generate_fused", counted)
    try:
        Gen(p).generate()
    except NotFusable as e:              # a construct the fused shape does not express, never a missed read
        assert "dead-storage" not in str(e)
        assert len(runs) <= 1
        return
    assert len(runs) == 1
    g = runs[0]
    assert g.facts is not None and not [a for a in g.read_anywhere if g.dead(a)]


SMALL_P4 = """#include <core.p4>
#include <v1model.p4>
header eth_t { bit<48> dst; bit<48> src; bit<16> type; }
header ip_t { bit<8> vihl; bit<8> tos; bit<16> len; bit<16> id; bit<16> frag; bit<8> ttl; bit<8> proto;
              bit<16> csum; bit<32> src; bit<32> dst; }
struct headers_t { eth_t eth; ip_t ip; }
struct meta_t { bit<8> unused; }
parser P(packet_in pkt, out headers_t h, inout meta_t m, inout standard_metadata_t sm) {
    state start { pkt.extract(h.eth); transition select(h.eth.type) { 0x800: ip; default: accept; } }
    state ip { pkt.extract(h.ip); transition accept; }
}
control V(inout headers_t h, inout meta_t m) {
    apply {
        verify_checksum(h.ip.isValid(), { h.ip.vihl, h.ip.tos, h.ip.len, h.ip.id, h.ip.frag, h.ip.ttl, h.ip.proto,
                        h.ip.src, h.ip.dst }, h.ip.csum, HashAlgorithm.csum16);
    }
}
control I(inout headers_t h, inout meta_t m, inout standard_metadata_t sm) {
    action fwd(bit<9> port) { sm.egress_spec = port; }
    table route { key = { h.ip.dst: lpm; } actions = { fwd; NoAction; } default_action = NoAction(); }
    apply { route.apply(); TTL_WRITE }
}
control E(inout headers_t h, inout meta_t m, inout standard_metadata_t sm) { apply { } }
control C(inout headers_t h, inout meta_t m) { apply { } }
control D(packet_out pkt, in headers_t h) { apply { pkt.emit(h.eth); pkt.emit(h.ip); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
"""


def small(tmp_path, ttl_write: str):
    path = tmp_path / "small.p4"
    path.write_text(SMALL_P4.replace("TTL_WRITE", ttl_write))
    p = load_ir(str(path))
    h = p.headers_type
    eth, ip = ("H", h.offset("eth")), ("H", h.offset("ip"))
    return p, analysis.storage_facts(p), eth, ip, h.ftype("ip")


def field(key, t, name):
    return (key[0], key[1] + t.offset(name))


def test_storage_facts_of_a_forwarder_that_writes_no_header(tmp_path):
    p, f, eth, ip, ipt = small(tmp_path, "")
    # both headers leave as received: the deparser reads only their validity and offset
    assert f.pristine == {eth, ip}
    assert {eth, ("off",) + eth, ip, ("off",) + ip} <= f.read
    # the checksum is summed over the received bytes; csum is the one field left out of the list
    (lst, omitted), = f.raw_csum.items()
    assert isinstance(lst, tir.List) and omitted == (ipt.index["csum"],)
    assert field(ip, ipt, "csum") in f.read                  # compared with the computed sum
    assert field(ip, ipt, "dst") in f.read                   # the route's key
    assert field(eth, p.headers_type.ftype("eth"), "type") in f.read     # the select key
    for name in ("src", "ttl", "id", "tos"):
        assert not f.is_read(field(ip, ipt, name)), name
    assert not f.is_read(field(eth, p.headers_type.ftype("eth"), "src"))
    assert "F_ingress" in Gen(p).generate()


def test_storage_facts_when_ingress_writes_a_field(tmp_path):
    p, f, eth, ip, ipt = small(tmp_path, "h.ip.ttl = h.ip.ttl - 1;")
    # ip is rewritten: emitted from its fields, every one of them read; the checksum in verify (before the
    # write) still sums the received bytes; eth stays as received
    assert f.pristine == {eth}
    assert all(f.is_read(field(ip, ipt, n)) for n, _ in ipt.fields)
    assert len(f.raw_csum) == 1
    assert not f.is_read(field(eth, p.headers_type.ftype("eth"), "src"))
    assert "F_ingress" in Gen(p).generate()
