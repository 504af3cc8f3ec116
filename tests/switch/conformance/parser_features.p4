/* P4-16 12.8.3 lookahead of a header type (assigned whole, and one field read) without advancing;
 * P4-16 8.18 assignment of a header stack to a stack of the same type; P4-16 7.1.2 / v1model log_msg. */
#include "common.p4"

struct H {
    h_t peek;
    h_t h;
    h_t[2] s1;
    h_t[2] s2;
}

parser P(packet_in pkt, out H hdr, inout meta_t meta, inout standard_metadata_t sm) {
    state start {
        hdr.peek = pkt.lookahead<h_t>();
        meta.x = pkt.lookahead<h_t>().b;
        pkt.extract(hdr.h);
        transition select(hdr.h.a) {
            2: two;
            default: one;
        }
    }
    state two {
        pkt.extract(hdr.s1.next);
        transition one;
    }
    state one {
        pkt.extract(hdr.s1.next);
        transition accept;
    }
}

control Ing(inout H hdr, inout meta_t meta, inout standard_metadata_t sm) {
    apply {
        log_msg("a={} b={}", {hdr.h.a, hdr.h.b});
        hdr.s2 = hdr.s1;
        hdr.s1[0].setInvalid();
        hdr.s1[1].setInvalid();
        hdr.peek.d = meta.x;
        sm.egress_spec = 1;
    }
}

control Eg(inout H hdr, inout meta_t meta, inout standard_metadata_t sm) { apply { } }
control Vck(inout H hdr, inout meta_t meta) { apply { } }
control Cck(inout H hdr, inout meta_t meta) { apply { } }
control Dep(packet_out pkt, in H hdr) { apply { pkt.emit(hdr); } }

V1Switch(P(), Vck(), Ing(), Eg(), Cck(), Dep()) main;
