/* P4-16 1.2.4 for loops in controls, actions and functions: the three-part form (a declaration in init, a bound
 * from an action parameter, several updates), break, continue, and return from inside a loop in a function.
 * The range form (for (T x in lo .. hi)) is refused, as p4c's BMv2 back end refuses it: sum_to writes
 * 1 .. n as a three-part loop. */
#include "common.p4"

struct H { h_t h; }

// index of the first set bit of x counted from the least significant (8 if none); x is an 'in' parameter, so
// the loop shifts a local copy (P4-16 6.8: only out and inout parameters are writable)
bit<8> lowest_set(in bit<8> x) {
    bit<8> rest = x;
    for (bit<8> i = 0; i < 8; i = i + 1) {
        if (rest[0:0] == 1) {
            return i;
        }
        rest = rest >> 1;
    }
    return 8;
}

parser P(packet_in pkt, out H hdr, inout meta_t meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.h); transition accept; }
}

control Ing(inout H hdr, inout meta_t meta, inout standard_metadata_t sm) {
    action sum_to(bit<8> n) {
        bit<8> acc = 0;
        for (bit<8> i = 1; i <= n; i = i + 1) {
            acc = acc + i;
        }
        hdr.h.b = acc;
    }
    apply {
        sum_to(hdr.h.a);                                   // b = 1 + 2 + ... + a
        bit<8> odd = 0;
        bit<8> j;
        bit<8> k;
        for (j = 0, k = 10; j < hdr.h.a; j = j + 1, k = k - 1) {
            if (j[0:0] == 0) {
                continue;
            }
            if (j == 5) {
                break;
            }
            odd = odd + 1;                                 // odd j below min(a, 5)
        }
        hdr.h.c = odd + k;
        hdr.h.d = lowest_set(hdr.h.d);
        sm.egress_spec = 1;
    }
}

control Eg(inout H hdr, inout meta_t meta, inout standard_metadata_t sm) { apply { } }
control Vck(inout H hdr, inout meta_t meta) { apply { } }
control Cck(inout H hdr, inout meta_t meta) { apply { } }
control Dep(packet_out pkt, in H hdr) { apply { pkt.emit(hdr.h); } }

V1Switch(P(), Vck(), Ing(), Eg(), Cck(), Dep()) main;
