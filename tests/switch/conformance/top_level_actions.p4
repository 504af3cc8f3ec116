/* P4-16 14.1 actions declared at top level, outside any control: listed by tables of two controls and called
 * directly.  A table's action list binds their directional parameters (14.2.1.2), each control to its own
 * arguments (p4c's LocalizeAllActions gives each control a copy); directionless ones come from entries (and
 * from the control plane: test_conformance.py); one writes a top-level register.  P4Info and P4Runtime name
 * them without a control prefix (bump, put, to_port, nop), as p4c does. */
#include "common.p4"

struct H { h_t h; }

register<bit<8>>(4) last_put;

action bump(inout bit<8> x, bit<8> k) { x = x + k; }
action put(inout h_t hh, in bit<8> src, bit<8> k) {
    hh.c = src + k;
    last_put.write(0, hh.c);
}
action to_port(inout standard_metadata_t s, bit<9> p) { s.egress_spec = p; }
action nop() { }

parser P(packet_in pkt, out H hdr, inout meta_t meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.h); transition accept; }
}

control Ing(inout H hdr, inout meta_t meta, inout standard_metadata_t sm) {
    // a == 1: d += 3; a == 2: c = b + 9 (and last_put[0] = c)
    table t {
        key = { hdr.h.a: exact; }
        actions = { bump(hdr.h.d); put(hdr.h, hdr.h.b); nop; }
        entries = { 1 : bump(hdr.h.d, 3); 2 : put(hdr.h, hdr.h.b, 9); }
        default_action = nop();
    }
    // b == 1, 2: that port; otherwise port 7
    table fwd {
        key = { hdr.h.b: exact; }
        actions = { to_port(sm); }
        const entries = { 1 : to_port(sm, 1); 2 : to_port(sm, 2); }
        default_action = to_port(sm, 7);
    }
    apply {
        t.apply();
        fwd.apply();
        bump(hdr.h.b, 0x10);
    }
}

control Eg(inout H hdr, inout meta_t meta, inout standard_metadata_t sm) {
    // the same top-level bump, bound to a: a == 1: a += 100
    table e {
        key = { hdr.h.a: exact; }
        actions = { bump(hdr.h.a); nop; }
        entries = { 1 : bump(hdr.h.a, 100); }
        default_action = nop();
    }
    apply { e.apply(); }
}

control Vck(inout H hdr, inout meta_t meta) { apply { } }
control Cck(inout H hdr, inout meta_t meta) { apply { } }
control Dep(packet_out pkt, in H hdr) { apply { pkt.emit(hdr.h); } }
V1Switch(P(), Vck(), Ing(), Eg(), Cck(), Dep()) main;
