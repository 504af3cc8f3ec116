/* P4-16 6.8.1/6.8.2: named arguments (in any order) and parameters with default values, for functions,
 * actions, sub-controls, constructors and externs. */
#include "common.p4"

struct H { h_t h; }

bit<8> scale(in bit<8> x, in bit<8> mul = 2, in bit<8> add = 1) {
    return x * mul + add;
}

control Tag(inout h_t h, in bit<8> v = 0x33)(bit<8> k = 0x40) {
    apply { h.d = v + k; }
}

parser P(packet_in pkt, out H hdr, inout meta_t meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.h); transition accept; }
}

control Ing(inout H hdr, inout meta_t meta, inout standard_metadata_t sm) {
    Tag() tag;
    action set_c(bit<8> v, bit<8> w = 5) {
        hdr.h.c = v - w;
    }
    apply {
        hdr.h.b = scale(add = 7, x = hdr.h.a);        // a * 2 + 7
        set_c(w = 1, v = hdr.h.a);                     // a - 1
        tag.apply(h = hdr.h);                          // 0x33 + 0x40
        if (hdr.h.a == 0) {
            mark_to_drop(standard_metadata = sm);
        } else {
            sm.egress_spec = 1;
        }
    }
}

control Eg(inout H hdr, inout meta_t meta, inout standard_metadata_t sm) { apply { } }
control Vck(inout H hdr, inout meta_t meta) { apply { } }
control Cck(inout H hdr, inout meta_t meta) { apply { } }
control Dep(packet_out pkt, in H hdr) { apply { pkt.emit(hdr.h); } }

V1Switch(P(), Vck(), Ing(), Eg(), Cck(), Dep()) main;
