/* P4-16 10.2 functions: return values in expressions, early return, in/out/inout copy-in/copy-out,
 * a function calling a function. */
#include "common.p4"

struct H { h_t h; }

bit<8> max8(in bit<8> x, in bit<8> y) {
    if (x > y) {
        return x;
    }
    return y;
}

bit<8> max3(bit<8> x, bit<8> y, bit<8> z) {
    return max8(max8(x, y), z);
}

void swap(inout bit<8> x, inout bit<8> y) {
    bit<8> t = x;
    x = y;
    y = t;
}

void classify(in bit<8> v, out bit<8> cls) {
    if (v == 0) {
        cls = 0;
        return;
    }
    cls = (v < 128) ? 8w1 : 8w2;
}

parser P(packet_in pkt, out H hdr, inout meta_t meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.h); transition accept; }
}

control Ing(inout H hdr, inout meta_t meta, inout standard_metadata_t sm) {
    apply {
        hdr.h.c = max8(hdr.h.a, hdr.h.b) + 1;
        swap(hdr.h.a, hdr.h.b);
        classify(hdr.h.c, hdr.h.d);
        if (max3(hdr.h.a, hdr.h.b, hdr.h.c) == 255) {
            sm.egress_spec = 2;
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
