/* P4-16 8.9/8.11: == and != on headers (equal when both invalid, or both valid with equal fields) and on
 * structs (member by member). The result bits go into h.d: bit 0 first==second, bit 1 first!=third,
 * bit 2 pair struct equal, bit 3 two never-valid headers equal. */
#include "common.p4"

struct Pair {
    h_t x;
    h_t y;
}

struct H {
    h_t first;
    h_t second;
    h_t third;
    h_t unused1;
    h_t unused2;
}

parser P(packet_in pkt, out H hdr, inout meta_t meta, inout standard_metadata_t sm) {
    state start {
        pkt.extract(hdr.first);
        pkt.extract(hdr.second);
        transition select(hdr.first.a) {
            0: accept;
            default: third;
        }
    }
    state third {
        pkt.extract(hdr.third);
        transition accept;
    }
}

control Ing(inout H hdr, inout meta_t meta, inout standard_metadata_t sm) {
    apply {
        bit<8> r = 0;
        if (hdr.first == hdr.second) { r = r | 1; }
        if (hdr.first != hdr.third) { r = r | 2; }
        Pair p1 = { hdr.first, hdr.second };
        Pair p2 = { hdr.second, hdr.first };
        if (p1 == p2) { r = r | 4; }
        if (hdr.unused1 == hdr.unused2) { r = r | 8; }
        hdr.first.d = r;
        sm.egress_spec = 1;
    }
}

control Eg(inout H hdr, inout meta_t meta, inout standard_metadata_t sm) { apply { } }
control Vck(inout H hdr, inout meta_t meta) { apply { } }
control Cck(inout H hdr, inout meta_t meta) { apply { } }
control Dep(packet_out pkt, in H hdr) { apply { pkt.emit(hdr.first); } }

V1Switch(P(), Vck(), Ing(), Eg(), Cck(), Dep()) main;
