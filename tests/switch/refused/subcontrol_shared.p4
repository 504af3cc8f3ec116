/* P4-16 15.1: one control instance applied at two places with different arguments: its table (keyed on a
 * parameter) and its constructor argument are shared, each apply copies its own arguments in and back. */
#include "common.p4"

struct H { h_t h; }

control Inc(inout bit<8> x, in bit<8> by)(bit<8> base) {
    action add(bit<8> v) {
        x = x + v + base;
    }
    table t {
        key = { by: exact; }
        actions = { add; NoAction; }
        default_action = NoAction();
        entries = {
            1: add(10);
            2: add(20);
        }
    }
    apply {
        if (by == 0) {
            return;
        }
        t.apply();
    }
}

parser P(packet_in pkt, out H hdr, inout meta_t meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.h); transition accept; }
}

control Ing(inout H hdr, inout meta_t meta, inout standard_metadata_t sm) {
    Inc(8w1) inc;
    apply {
        inc.apply(hdr.h.b, hdr.h.a);
        inc.apply(hdr.h.c, hdr.h.a + 1);
        sm.egress_spec = 1;
    }
}

control Eg(inout H hdr, inout meta_t meta, inout standard_metadata_t sm) { apply { } }
control Vck(inout H hdr, inout meta_t meta) { apply { } }
control Cck(inout H hdr, inout meta_t meta) { apply { } }
control Dep(packet_out pkt, in H hdr) { apply { pkt.emit(hdr.h); } }

V1Switch(P(), Vck(), Ing(), Eg(), Cck(), Dep()) main;
