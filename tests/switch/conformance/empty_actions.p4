/* P4-16 14.2.1.2 a table with an empty action list ('actions = { }'): p4c gives it NoAction as its default
 * action only (@defaultonly), so every lookup misses and the control plane can write no entry; the table can
 * still be applied for .hit/.miss and switch on .action_run. */
#include "common.p4"

struct H { h_t h; }

parser P(packet_in pkt, out H hdr, inout meta_t meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.h); transition accept; }
}

control Ing(inout H hdr, inout meta_t meta, inout standard_metadata_t sm) {
    table none { key = { hdr.h.a: exact; } actions = { } }
    table keyless { actions = { } }
    apply {
        sm.egress_spec = 1;
        if (none.apply().hit) {
            hdr.h.c = 1;
        } else {
            hdr.h.c = 2;
        }
        switch (keyless.apply().action_run) {
            NoAction: { hdr.h.d = hdr.h.b + 1; }
        }
    }
}

control Eg(inout H hdr, inout meta_t meta, inout standard_metadata_t sm) { apply { } }
control Vck(inout H hdr, inout meta_t meta) { apply { } }
control Cck(inout H hdr, inout meta_t meta) { apply { } }
control Dep(packet_out pkt, in H hdr) { apply { pkt.emit(hdr.h); } }
V1Switch(P(), Vck(), Ing(), Eg(), Cck(), Dep()) main;
