/* P4-16 13.2/15.1: a parser instantiated inside a parser with a constructor parameter; the caller's state
 * goes on after the sub-parser accepts; an error in the sub-parser ends the whole parse
 * (v1model: ingress runs with parser_error set, P4-16 13.7). */
#include "common.p4"

struct H {
    h_t first;
    h_t second;
    h_t third;
}

parser Inner(packet_in pkt, out h_t h, in bit<8> tag)(bit<8> marker) {
    state start {
        pkt.extract(h);
        h.c = tag;
        verify(h.a == marker, error.ParserInvalidArgument);
        transition accept;
    }
}

parser P(packet_in pkt, out H hdr, inout meta_t meta, inout standard_metadata_t sm) {
    Inner(8w0x42) inner;
    state start {
        pkt.extract(hdr.first);
        inner.apply(pkt, hdr.second, hdr.first.a);
        meta.x = 0x99;
        transition select(hdr.second.b) {
            1: more;
            default: accept;
        }
    }
    state more {
        pkt.extract(hdr.third);
        transition accept;
    }
}

control Ing(inout H hdr, inout meta_t meta, inout standard_metadata_t sm) {
    apply {
        if (sm.parser_error != error.NoError) {
            hdr.first.d = 0xEE;
            sm.egress_spec = 2;
        } else {
            hdr.first.d = meta.x;
            sm.egress_spec = 1;
        }
    }
}

control Eg(inout H hdr, inout meta_t meta, inout standard_metadata_t sm) { apply { } }
control Vck(inout H hdr, inout meta_t meta) { apply { } }
control Cck(inout H hdr, inout meta_t meta) { apply { } }
control Dep(packet_out pkt, in H hdr) { apply { pkt.emit(hdr); } }

V1Switch(P(), Vck(), Ing(), Eg(), Cck(), Dep()) main;
