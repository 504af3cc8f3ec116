/* P4-16 14.2.1.2: one action bound to different arguments by the action lists of two tables of one control.  p4c
 * gives each table's binding an action of its own in the BMv2 JSON (both named as the action), P4Info lists the
 * action once, and a P4Runtime write of it into a table runs that table's binding; a table binding it as another
 * does shares that one.  The same for a top-level action.  Entries from the control plane (test_conformance.py's
 * ENTRIES) and from an initial entry. */
#include "common.p4"

struct H { h_t h; }

action put(out bit<8> y, bit<8> v) { y = v; }

parser P(packet_in pkt, out H hdr, inout meta_t meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.h); transition accept; }
}

control Ing(inout H hdr, inout meta_t meta, inout standard_metadata_t sm) {
    action add(inout bit<8> x, bit<8> v) { x = x + v; }
    // a == 1: b += 10 (control plane); otherwise b += 1
    table t1 {
        key = { hdr.h.a: exact; }
        actions = { add(hdr.h.b); NoAction; }
        default_action = add(hdr.h.b, 1);
    }
    // a == 1: c += 20 (control plane); otherwise c += 2
    table t2 {
        key = { hdr.h.a: exact; }
        actions = { add(hdr.h.c); NoAction; }
        default_action = add(hdr.h.c, 2);
    }
    // bound as t1 binds it: b == 0x0B: b += 0x30 (control plane)
    table t3 {
        key = { hdr.h.b: exact; }
        actions = { add(hdr.h.b); NoAction; }
        default_action = NoAction();
    }
    // the top-level put into d: a == 2: d = 0x42 (control plane); otherwise d = 7
    table t4 {
        key = { hdr.h.a: exact; }
        actions = { put(hdr.h.d); }
        default_action = put(hdr.h.d, 7);
    }
    // and into a: c == 0x16: a = 0x99
    table t5 {
        key = { hdr.h.c: exact; }
        actions = { put(hdr.h.a); NoAction; }
        entries = { 0x16 : put(hdr.h.a, 0x99); }
        default_action = NoAction();
    }
    apply {
        sm.egress_spec = 1;
        t1.apply();
        t2.apply();
        t3.apply();
        t4.apply();
        t5.apply();
    }
}

control Eg(inout H hdr, inout meta_t meta, inout standard_metadata_t sm) { apply { } }
control Vck(inout H hdr, inout meta_t meta) { apply { } }
control Cck(inout H hdr, inout meta_t meta) { apply { } }
control Dep(packet_out pkt, in H hdr) { apply { pkt.emit(hdr.h); } }
V1Switch(P(), Vck(), Ing(), Eg(), Cck(), Dep()) main;
