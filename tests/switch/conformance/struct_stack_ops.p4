/* P4-16 8.13 structure-valued expressions {f = v} (any field order, nested), and 8.18 header stack
 * push_front / pop_front (elements shift, the vacated ones become invalid, nextIndex follows). */
#include "common.p4"

header one_t {
    bit<8> v;
}

struct Pair {
    h_t x;
    bit<8> y;
}

struct H {
    h_t h;
    one_t[3] st;
}

parser P(packet_in pkt, out H hdr, inout meta_t meta, inout standard_metadata_t sm) {
    state start {
        pkt.extract(hdr.h);
        pkt.extract(hdr.st.next);
        pkt.extract(hdr.st.next);
        transition accept;
    }
}

control Ing(inout H hdr, inout meta_t meta, inout standard_metadata_t sm) {
    apply {
        Pair p = { y = hdr.h.a, x = { d = 4, c = 3, b = 2, a = 1 } };
        if (hdr.h.b == 1) {
            hdr.st.push_front(1);
            hdr.st[0].setValid();
            hdr.st[0].v = 0xAA;
        } else if (hdr.h.b == 2) {
            hdr.st.pop_front(1);
        } else if (hdr.h.b == 3) {
            hdr.h = p.x;
            hdr.h.d = p.y;
        }
        sm.egress_spec = 1;
    }
}

control Eg(inout H hdr, inout meta_t meta, inout standard_metadata_t sm) { apply { } }
control Vck(inout H hdr, inout meta_t meta) { apply { } }
control Cck(inout H hdr, inout meta_t meta) { apply { } }
control Dep(packet_out pkt, in H hdr) { apply { pkt.emit(hdr); } }

V1Switch(P(), Vck(), Ing(), Eg(), Cck(), Dep()) main;
