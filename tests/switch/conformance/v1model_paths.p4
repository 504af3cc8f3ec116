/* v1model packet paths as BMv2 simple_switch runs them (simple_switch.cpp, ingress_thread/egress_thread):
 * resubmit (the packet as received, through ingress again, instance_type 6, @field_list metadata kept),
 * recirculate (the deparsed packet back to ingress, instance_type 4), clone I2E (the packet as received,
 * parsed again, to the clone session's port, instance_type 1), clone E2E (the headers as egress left them,
 * instance_type 2) and truncate. The first byte of h selects what the packet asks for. A resubmitted or
 * recirculated packet has its instance type (6, 4) in ingress only: BMv2 sets instance_type to NORMAL (0) when a
 * unicast packet leaves ingress for its queue, so egress sees 0 (written to b as 0xE0 | instance_type) and
 * recirculates a packet only when ingress has not marked it (c == 0), else it would recirculate for ever. */
#include "common.p4"

struct H { h_t h; }

struct M {
    @field_list(1)
    bit<8> kept;
    bit<8> lost;
}

parser P(packet_in pkt, out H hdr, inout M meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.h); transition accept; }
}

control Ing(inout H hdr, inout M meta, inout standard_metadata_t sm) {
    apply {
        sm.egress_spec = 1;
        if (sm.instance_type == 0) {
            meta.kept = 0x4B;
            meta.lost = 0x4C;
            if (hdr.h.a == 1) {
                resubmit_preserving_field_list(1);
            } else if (hdr.h.a == 3) {
                hdr.h.b = 0x33;                       // the I2E clone carries the packet as received
                clone(CloneType.I2E, 5);
            } else if (hdr.h.a == 5) {
                truncate(2);
            }
        } else {
            // resubmitted (6) or recirculated (4): instance type in c, preserved metadata in d
            hdr.h.c = (bit<8>)sm.instance_type;
            hdr.h.d = meta.kept | meta.lost;
            sm.egress_spec = 2;
        }
    }
}

control Eg(inout H hdr, inout M meta, inout standard_metadata_t sm) {
    apply {
        if (sm.instance_type == 1 || sm.instance_type == 2) {
            hdr.h.c = (bit<8>)sm.instance_type;       // the clones
        } else if (hdr.h.c != 0) {
            hdr.h.b = 0xE0 | (bit<8>)sm.instance_type;   // resubmitted or recirculated: NORMAL again in egress
        } else if (sm.instance_type == 0 && hdr.h.a == 2) {
            meta.kept = 0x4B;
            meta.lost = 0x4C;
            recirculate_preserving_field_list(1);
        } else if (sm.instance_type == 0 && hdr.h.a == 4) {
            hdr.h.d = 0x44;
            clone_preserving_field_list(CloneType.E2E, 5, 1);
            mark_to_drop(sm);                         // the original goes nowhere, the clone still does
        }
    }
}

control Vck(inout H hdr, inout M meta) { apply { } }
control Cck(inout H hdr, inout M meta) { apply { } }
control Dep(packet_out pkt, in H hdr) { apply { pkt.emit(hdr.h); } }

V1Switch(P(), Vck(), Ing(), Eg(), Cck(), Dep()) main;
