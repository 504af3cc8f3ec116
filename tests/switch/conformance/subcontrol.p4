/* P4-16 14.3/15.1: a control instantiated inside another with a constructor parameter, applied with a
 * path argument and a computed 'in' argument; its table is named Ing.rw.t in P4Info; 'return' in its apply
 * body ends only its own body; a control without constructor parameters applied directly by its type name. */
#include "common.p4"

struct H { h_t h; }

control Rewrite(inout h_t h, in bit<8> delta)(bit<8> base) {
    action add(bit<8> v) {
        h.b = h.b + v + base;
    }
    table t {
        key = { h.a: exact; }
        actions = { add; NoAction; }
        default_action = NoAction();
        entries = { 1: add(10); }
    }
    apply {
        if (h.a == 0) {
            h.c = 0xEE;
            return;
        }
        t.apply();
        h.c = delta;
    }
}

control Bump(inout h_t h) {
    apply { h.d = h.d + 1; }
}

parser P(packet_in pkt, out H hdr, inout meta_t meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.h); transition accept; }
}

control Ing(inout H hdr, inout meta_t meta, inout standard_metadata_t sm) {
    Rewrite(8w100) rw;
    apply {
        rw.apply(hdr.h, hdr.h.d + 1);
        hdr.h.d = 0x77;
        Bump.apply(hdr.h);                 // direct type invocation (P4-16 15.1)
        sm.egress_spec = 1;
    }
}

control Eg(inout H hdr, inout meta_t meta, inout standard_metadata_t sm) { apply { } }
control Vck(inout H hdr, inout meta_t meta) { apply { } }
control Cck(inout H hdr, inout meta_t meta) { apply { } }
control Dep(packet_out pkt, in H hdr) { apply { pkt.emit(hdr.h); } }

V1Switch(P(), Vck(), Ing(), Eg(), Cck(), Dep()) main;
