/* P4-16 14.2.1.4 initial entries (`entries`, not const) with `priority=`, in BMv2's order: p4c's EntryPriorities
 * gives an entry without priority= the previous entry's priority minus priority_delta (default 1; plus with
 * largest_priority_wins = false), and sorts entries out of priority order by priority, the winner first (equal ones
 * in the order written); p4c-bm2-ss then ignores the values and gives each entry its @priority or its position in
 * that order (1, 2, ...), and BMv2 picks the lowest.  Without priority= the order is the order written. */
#include "common.p4"

header r_t {
    bit<8> t1;      // t1's result
    bit<8> t2;      // t2's
    bit<8> t3;      // t3's
}

struct H { h_t h; r_t r; }

parser P(packet_in pkt, out H hdr, inout meta_t meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.h); pkt.extract(hdr.r); transition accept; }
}

control Ing(inout H hdr, inout meta_t meta, inout standard_metadata_t sm) {
    action set1(bit<8> v) { hdr.r.t1 = v; }
    action set2(bit<8> v) { hdr.r.t2 = v; }
    action set3(bit<8> v) { hdr.r.t3 = v; }
    table t1 {                                      // the largest priority wins, delta 1
        key = { hdr.h.a: ternary; }
        actions = { set1; NoAction; }
        entries = {
            priority=100: 0x10 &&& 0xF0 : set1(1);
            0x31 &&& 0xFF : set1(2);                // 99
            priority=50: 0x01 &&& 0x0F : set1(3);
            priority=200: 0x80 &&& 0x80 : set1(4);  // out of order: the entries are sorted
            0x41 &&& 0xFF : set1(5);                // 199, written before the next: wins the tie
            priority=199: 0x41 &&& 0x41 : set1(6);
            0x05 &&& 0x07 : set1(7);                // 198
        }
        default_action = NoAction();
    }
    table t2 {                                      // the smallest priority wins, delta 10
        key = { hdr.h.b: range; }
        actions = { set2; NoAction; }
        largest_priority_wins = false;
        priority_delta = 10;
        entries = {
            priority=5: 0 .. 100 : set2(1);
            50 .. 200 : set2(2);                    // 15
            priority=1: 150 .. 255 : set2(3);       // out of order: sorted
            90 .. 110 : set2(4);                    // 11
            priority=(300): 240 .. 250 : set2(5) @priority(0);     // last, but BMv2 takes @priority
        }
        default_action = NoAction();
    }
    table t3 {                                      // no priority=: the order written
        key = { hdr.h.c: optional; }
        actions = { set3; NoAction; }
        largest_priority_wins = false;
        entries = {
            1 : set3(1);
            _ : set3(2);
        }
        default_action = NoAction();
    }
    apply {
        sm.egress_spec = 1;
        t1.apply();
        t2.apply();
        t3.apply();
    }
}

control Eg(inout H hdr, inout meta_t meta, inout standard_metadata_t sm) { apply { } }
control Vck(inout H hdr, inout meta_t meta) { apply { } }
control Cck(inout H hdr, inout meta_t meta) { apply { } }
control Dep(packet_out pkt, in H hdr) { apply { pkt.emit(hdr.h); pkt.emit(hdr.r); } }
V1Switch(P(), Vck(), Ing(), Eg(), Cck(), Dep()) main;
