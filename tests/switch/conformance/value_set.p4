/* P4-16 13.6 value sets: a select case naming a value_set matches when the key is one of the members the
 * control plane wrote (P4Runtime ValueSetEntry, MODIFY replaces the members); an empty set matches nothing. */
#include "common.p4"

struct H {
    h_t h;
    h_t extra;
}

parser P(packet_in pkt, out H hdr, inout meta_t meta, inout standard_metadata_t sm) {
    value_set<bit<8>>(4) special;
    state start {
        pkt.extract(hdr.h);
        transition select(hdr.h.a) {
            1: accept;
            special: more;
            default: accept;
        }
    }
    state more {
        pkt.extract(hdr.extra);
        transition accept;
    }
}

control Ing(inout H hdr, inout meta_t meta, inout standard_metadata_t sm) {
    apply {
        hdr.h.d = hdr.extra.isValid() ? 8w1 : 8w0;
        sm.egress_spec = 1;
    }
}

control Eg(inout H hdr, inout meta_t meta, inout standard_metadata_t sm) { apply { } }
control Vck(inout H hdr, inout meta_t meta) { apply { } }
control Cck(inout H hdr, inout meta_t meta) { apply { } }
control Dep(packet_out pkt, in H hdr) { apply { pkt.emit(hdr.h); } }

V1Switch(P(), Vck(), Ing(), Eg(), Cck(), Dep()) main;
