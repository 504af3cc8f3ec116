/* P4-16 12.8.3 lookahead<T>() of bit types, not advancing: bit<W> of widths that are not whole bytes, int<8>, a
 * typedef, a slice of one, one concatenated with another, in a select tuple, before and after an extract. */
#include "common.p4"

typedef bit<8> b8_t;

struct H { h_t h; }

parser P(packet_in pkt, out H hdr, inout meta_t meta, inout standard_metadata_t sm) {
    state start {
        meta.x = pkt.lookahead<bit<3>>() ++ pkt.lookahead<bit<5>>();   // both from the first bit: 0x45 -> 2, 8
        transition select(pkt.lookahead<bit<4>>(), pkt.lookahead<bit<16>>()[7:0]) {
            (4, _): v4;                     // first nibble 4
            (_, 0xFF): ff;                  // second byte 0xFF
            default: plain;
        }
    }
    state v4 {
        bit<4> ihl = pkt.lookahead<bit<8>>()[3:0];
        pkt.extract(hdr.h);
        hdr.h.d = (bit<8>) ihl;
        transition accept;
    }
    state ff {
        b8_t t = pkt.lookahead<b8_t>();
        pkt.extract(hdr.h);
        hdr.h.c = t + (bit<8>) pkt.lookahead<int<8>>();     // the first byte plus the one after h
        transition accept;
    }
    state plain {
        pkt.extract(hdr.h);
        hdr.h.c = pkt.lookahead<bit<40>>()[7:0];            // the fifth byte after h
        transition accept;
    }
}

control Ing(inout H hdr, inout meta_t meta, inout standard_metadata_t sm) {
    apply {
        sm.egress_spec = 1;
        hdr.h.b = meta.x;
    }
}

control Eg(inout H hdr, inout meta_t meta, inout standard_metadata_t sm) { apply { } }
control Vck(inout H hdr, inout meta_t meta) { apply { } }
control Cck(inout H hdr, inout meta_t meta) { apply { } }
control Dep(packet_out pkt, in H hdr) { apply { pkt.emit(hdr.h); } }
V1Switch(P(), Vck(), Ing(), Eg(), Cck(), Dep()) main;
