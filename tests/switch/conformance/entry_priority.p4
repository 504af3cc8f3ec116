/* P4-16 14.2.1.4 entries of tables whose keys need priorities, in BMv2's order: p4c-bm2-ss gives each const
 * entry its @priority(n) or else its position (1, 2, ...), and BMv2 picks the lowest of the matching entries, the
 * earlier of equal ones; LPM tables take the longest prefix whatever the entries' @priority (p4c's
 * table-entries-priority-bmv2.p4 and BMv2's lookup_structures.cpp). */
#include "common.p4"

header r_t {
    bit<8> tern;    // t_tern's result
    bit<8> rng;     // t_range's
    bit<8> lpm;     // t_lpm's
}

struct H { h_t h; r_t r; }

parser P(packet_in pkt, out H hdr, inout meta_t meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.h); pkt.extract(hdr.r); transition accept; }
}

control Ing(inout H hdr, inout meta_t meta, inout standard_metadata_t sm) {
    action tern(bit<8> v) { hdr.r.tern = v; }
    action rng(bit<8> v) { hdr.r.rng = v; }
    action set_lpm(bit<8> v) { hdr.r.lpm = v; }
    table t_tern {
        key = { hdr.h.a: ternary; }
        actions = { tern; NoAction; }
        const entries = {
            0x10 &&& 0xF0 : tern(1) @priority(3);
            0x11 &&& 0xFF : tern(2);                    // position 2
            0x01 &&& 0x0F : tern(3) @priority(1);
            0x22 &&& 0xFF : tern(4) @priority(5);
            0x20 &&& 0xF0 : tern(5);                    // position 5: equal to the one before, which wins
        }
        default_action = NoAction();
    }
    table t_range {
        key = { hdr.h.b: range; }
        actions = { rng; NoAction; }
        const entries = {
            0 .. 100 : rng(1);                          // position 1
            50 .. 200 : rng(2) @priority(0);
            150 .. 255 : rng(3);                        // position 3
        }
        default_action = NoAction();
    }
    table t_lpm {
        key = { hdr.h.a: lpm; }
        actions = { set_lpm; NoAction; }
        const entries = {
            0x00 &&& 0xC0 : set_lpm(1) @priority(1);
            0x20 &&& 0xF0 : set_lpm(2) @priority(9);
            0x22 : set_lpm(3) @priority(100);
        }
        default_action = NoAction();
    }
    apply {
        sm.egress_spec = 1;
        t_tern.apply();
        t_range.apply();
        t_lpm.apply();
    }
}

control Eg(inout H hdr, inout meta_t meta, inout standard_metadata_t sm) { apply { } }
control Vck(inout H hdr, inout meta_t meta) { apply { } }
control Cck(inout H hdr, inout meta_t meta) { apply { } }
control Dep(packet_out pkt, in H hdr) { apply { pkt.emit(hdr.h); pkt.emit(hdr.r); } }
V1Switch(P(), Vck(), Ing(), Eg(), Cck(), Dep()) main;
