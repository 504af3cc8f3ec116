/* P4-16 8.20 header unions: extracting or validating one member invalidates the others; isValid() on the
 * union is true when any member is valid; assigning a valid header to a member does the same; the deparser
 * emits the valid member. */
#include "common.p4"

header two_t {
    bit<16> v;
}

header_union u_t {
    h_t four;
    two_t two;
}

struct H {
    h_t h;
    u_t u;
}

parser P(packet_in pkt, out H hdr, inout meta_t meta, inout standard_metadata_t sm) {
    state start {
        pkt.extract(hdr.h);
        transition select(hdr.h.a) {
            4: four;
            2: two;
            default: accept;
        }
    }
    state four {
        pkt.extract(hdr.u.four);
        transition accept;
    }
    state two {
        pkt.extract(hdr.u.two);
        transition accept;
    }
}

control Ing(inout H hdr, inout meta_t meta, inout standard_metadata_t sm) {
    apply {
        hdr.h.d = hdr.u.isValid() ? 8w1 : 8w0;
        if (hdr.h.b == 1 && hdr.u.four.isValid()) {
            hdr.u.two.setValid();              // four becomes invalid
            hdr.u.two.v = 0xBEEF;
        } else if (hdr.h.b == 2 && hdr.u.two.isValid()) {
            hdr.u.four = hdr.h;                // a valid header assigned: two becomes invalid
        }
        if (hdr.u.four.isValid()) { hdr.h.c = 4; }
        if (hdr.u.two.isValid()) { hdr.h.c = hdr.h.c + 2; }
        sm.egress_spec = 1;
    }
}

control Eg(inout H hdr, inout meta_t meta, inout standard_metadata_t sm) { apply { } }
control Vck(inout H hdr, inout meta_t meta) { apply { } }
control Cck(inout H hdr, inout meta_t meta) { apply { } }
control Dep(packet_out pkt, in H hdr) { apply { pkt.emit(hdr); } }

V1Switch(P(), Vck(), Ing(), Eg(), Cck(), Dep()) main;
