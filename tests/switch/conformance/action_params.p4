/* P4-16 6.8/14.1/14.2.1.2: action parameters with directions. A table's action list binds an action's
 * directional parameters (in, inout); a directly called action with out/inout parameters copies its arguments
 * in and back (copy-in/copy-out); the control plane supplies only the directionless parameters. */
#include "common.p4"

struct H { h_t h; }

action bump(inout bit<8> x, in bit<8> by) {
    x = x + by;
}

parser P(packet_in pkt, out H hdr, inout meta_t meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.h); transition accept; }
}

control Ing(inout H hdr, inout meta_t meta, inout standard_metadata_t sm) {
    action set_b(inout bit<8> field, in bit<8> k, bit<8> v) {
        field = field + v + k;
    }
    action split(in bit<8> src, out bit<8> hi, out bit<8> lo) {
        hi = src >> 4;
        lo = src & 0xF;
        if (src == 0) {
            return;
        }
        hi = hi + 0x10;
    }
    table t {
        key = { hdr.h.a: exact; }
        actions = { set_b(hdr.h.b, 3); NoAction; }
        default_action = NoAction();
        entries = { 1: set_b(hdr.h.b, 3, 10); }
    }
    apply {
        t.apply();
        split(hdr.h.a, hdr.h.c, hdr.h.d);
        bump(hdr.h.d, 1);
        sm.egress_spec = 1;
    }
}

control Eg(inout H hdr, inout meta_t meta, inout standard_metadata_t sm) { apply { } }
control Vck(inout H hdr, inout meta_t meta) { apply { } }
control Cck(inout H hdr, inout meta_t meta) { apply { } }
control Dep(packet_out pkt, in H hdr) { apply { pkt.emit(hdr.h); } }

V1Switch(P(), Vck(), Ing(), Eg(), Cck(), Dep()) main;
