/* P4-16 13.2/15.1: one parser instance applied in two states, with different arguments: each application
 * parses its own header with the same sub-parser. */
#include "common.p4"

struct H {
    h_t first;
    h_t second;
}

parser TagParser(packet_in pkt, out h_t h, in bit<8> tag) {
    state start {
        pkt.extract(h);
        h.d = tag;
        transition accept;
    }
}

parser P(packet_in pkt, out H hdr, inout meta_t meta, inout standard_metadata_t sm) {
    TagParser() tp;
    state start {
        tp.apply(pkt, hdr.first, 8w0xA1);
        transition select(hdr.first.a) {
            2: again;
            default: accept;
        }
    }
    state again {
        tp.apply(pkt, hdr.second, hdr.first.b);
        transition accept;
    }
}

control Ing(inout H hdr, inout meta_t meta, inout standard_metadata_t sm) {
    apply { sm.egress_spec = 1; }
}

control Eg(inout H hdr, inout meta_t meta, inout standard_metadata_t sm) { apply { } }
control Vck(inout H hdr, inout meta_t meta) { apply { } }
control Cck(inout H hdr, inout meta_t meta) { apply { } }
control Dep(packet_out pkt, in H hdr) { apply { pkt.emit(hdr); } }

V1Switch(P(), Vck(), Ing(), Eg(), Cck(), Dep()) main;
