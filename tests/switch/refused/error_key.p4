/* P4-16 7.1.4 / 14.2.1.1: a table keyed on an error value (standard_metadata.parser_error), with entries
 * written as error constants; the control plane gives the error's number (declaration order, core.p4's first:
 * NoError 0, PacketTooShort 1, NoMatch 2, StackOutOfBounds 3, HeaderTooShort 4, ...) as a 32-bit value. */
#include "common.p4"

struct H {
    h_t h;
    h_t[1] s;
}

parser P(packet_in pkt, out H hdr, inout meta_t meta, inout standard_metadata_t sm) {
    state start {
        pkt.extract(hdr.h);
        transition select(hdr.h.a) {
            0: accept;
            1: one;
            default: two;
        }
    }
    state one {
        pkt.extract(hdr.s.next);
        transition accept;
    }
    state two {
        pkt.extract(hdr.s.next);
        pkt.extract(hdr.s.next);         // a second element does not fit: StackOutOfBounds
        transition accept;
    }
}

control Ing(inout H hdr, inout meta_t meta, inout standard_metadata_t sm) {
    action mark(bit<8> v) { hdr.h.d = v; }
    table by_error {
        key = { sm.parser_error: exact; }
        actions = { mark; NoAction; }
        default_action = mark(0xFF);
        entries = {
            error.NoError: mark(0x11);
            error.PacketTooShort: mark(0x22);
        }
    }
    apply {
        by_error.apply();
        sm.egress_spec = 1;
    }
}

control Eg(inout H hdr, inout meta_t meta, inout standard_metadata_t sm) { apply { } }
control Vck(inout H hdr, inout meta_t meta) { apply { } }
control Cck(inout H hdr, inout meta_t meta) { apply { } }
control Dep(packet_out pkt, in H hdr) { apply { pkt.emit(hdr); } }

V1Switch(P(), Vck(), Ing(), Eg(), Cck(), Dep()) main;
