/* P4-16 1.2.4: return from inside nested for loops in a function ends both loops and the function. */
#include "common.p4"
struct H { h_t h; }
// first index i in 0..3 with (x >> i) & 1 == 1 and i >= lo, searching rows of 4; nested loops, return inside
bit<8> find(in bit<8> x, in bit<8> lo) {
    bit<8> rows = 0;
    for (bit<8> r = 0; r < 2; r = r + 1) {
        for (bit<8> i = 0; i < 4; i = i + 1) {
            bit<8> k = r * 4 + i;
            if (k >= lo && ((x >> k) & 1) == 1) {
                return k;
            }
        }
        rows = rows + 1;                  // after the inner loop: skipped by a return from inside it
    }
    return 0xFF;
}
parser P(packet_in pkt, out H hdr, inout meta_t meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.h); transition accept; }
}
control Ing(inout H hdr, inout meta_t meta, inout standard_metadata_t sm) {
    apply { hdr.h.c = find(hdr.h.a, hdr.h.b); sm.egress_spec = 1; }
}
control Eg(inout H hdr, inout meta_t meta, inout standard_metadata_t sm) { apply { } }
control Vck(inout H hdr, inout meta_t meta) { apply { } }
control Cck(inout H hdr, inout meta_t meta) { apply { } }
control Dep(packet_out pkt, in H hdr) { apply { pkt.emit(hdr.h); } }
V1Switch(P(), Vck(), Ing(), Eg(), Cck(), Dep()) main;
