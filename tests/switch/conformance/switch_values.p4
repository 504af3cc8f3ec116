/* P4-16 12.7: switch on a bit<W> value (labels that fall through to the next block, default), on a
 * serializable enum and on a plain enum.  (Not on an error: the specification lists it, p4c refuses it; see
 * tests/switch/refused/switch_values.p4.) */
#include "common.p4"

struct H { h_t h; }

enum bit<8> Kind { SMALL = 1, LARGE = 2 }
enum Outcome { PARSED, FAILED }

parser P(packet_in pkt, out H hdr, inout meta_t meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.h); transition accept; }
}

control Ing(inout H hdr, inout meta_t meta, inout standard_metadata_t sm) {
    apply {
        sm.egress_spec = 1;
        switch (hdr.h.a) {
            0: { hdr.h.c = 10; }
            1:
            2: { hdr.h.c = 20; }
            8w3 + 1: { hdr.h.c = 40; }
            default: { hdr.h.c = 99; }
        }
        Kind k = (Kind) hdr.h.b;
        switch (k) {
            Kind.SMALL: { hdr.h.d = 0x51; }
            Kind.LARGE: { hdr.h.d = 0x52; }
        }
        Outcome o = Outcome.PARSED;
        if (sm.parser_error != error.NoError) {
            o = Outcome.FAILED;
        }
        switch (o) {
            Outcome.PARSED: { sm.egress_spec = 2; }
        }
    }
}

control Eg(inout H hdr, inout meta_t meta, inout standard_metadata_t sm) { apply { } }
control Vck(inout H hdr, inout meta_t meta) { apply { } }
control Cck(inout H hdr, inout meta_t meta) { apply { } }
control Dep(packet_out pkt, in H hdr) { apply { pkt.emit(hdr.h); } }

V1Switch(P(), Vck(), Ing(), Eg(), Cck(), Dep()) main;
