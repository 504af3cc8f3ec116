/* P4-16 1.2.4 compound assignment (12.1): 'a op= b' is 'a = a op b' with 'a' evaluated once, for every operator
 * (+= -= *= /= %= &= |= ^= <<= >>= |+|= |-|=), with the binary operator's typing rules: wrap-around arithmetic,
 * shifts by a run-time amount (>= the width gives 0), saturation, bit<W> and int<W>; on header fields, a slice,
 * metadata in the parser, a local, an action's inout parameter and a for loop's update (in an action: BMv2 runs
 * loops in action bodies), and an action's data from a table entry. */
#include "common.p4"

header r_t {
    bit<8> add;     // a += b
    bit<8> sub;     // a -= b
    bit<8> mul;     // a *= b
    bit<8> bits;    // a &= b; |= 0x01; ^= 0x80
    bit<8> shl;     // a <<= c
    bit<8> shr;     // a >>= c
    bit<8> sadd;    // a |+|= b
    bit<8> ssub;    // a |-|= b
    bit<8> ssig;    // (int<8>) a |-|= 100, then += (int<8>) b
    bit<8> loop;    // sum_to(c): 1 + 2 + ... + c
    bit<8> tbl;     // a += the table's k (a == 1: 5, a == 2: 7, else the default's 1)
    bit<8> divmod;  // a %= 16; /= 2
    bit<8> prs;     // the parser's meta.x = a; ^= 0x0F; <<= 1
}

struct H { h_t h; r_t r; }

parser P(packet_in pkt, out H hdr, inout meta_t meta, inout standard_metadata_t sm) {
    state start {
        pkt.extract(hdr.h);
        pkt.extract(hdr.r);
        meta.x = hdr.h.a;
        meta.x ^= 0x0F;
        meta.x <<= 1;
        transition accept;
    }
}

control Ing(inout H hdr, inout meta_t meta, inout standard_metadata_t sm) {
    action sum_to(inout bit<8> acc, bit<8> n) {
        acc = 0;
        for (bit<8> i = 1; i <= n; i += 1) {
            acc += i;
        }
    }
    action add_k(bit<8> k) { hdr.r.tbl += k; }
    table t {
        key = { hdr.h.a: exact; }
        actions = { add_k; }
        const entries = { 1 : add_k(5); 2 : add_k(7); }
        default_action = add_k(1);
    }
    apply {
        sm.egress_spec = 1;
        bit<8> a = hdr.h.a;
        hdr.r.add = a;   hdr.r.add += hdr.h.b;
        hdr.r.sub = a;   hdr.r.sub -= hdr.h.b;
        hdr.r.mul = a;   hdr.r.mul *= hdr.h.b;
        hdr.r.bits = a;  hdr.r.bits &= hdr.h.b;  hdr.r.bits |= 0x01;  hdr.r.bits ^= 0x80;
        hdr.r.shl = a;   hdr.r.shl <<= hdr.h.c;
        hdr.r.shr = a;   hdr.r.shr >>= hdr.h.c;
        hdr.r.sadd = a;  hdr.r.sadd |+|= hdr.h.b;
        hdr.r.ssub = a;  hdr.r.ssub |-|= hdr.h.b;
        int<8> s = (int<8>) a;
        s |-|= 100;
        s += (int<8>) hdr.h.b;
        hdr.r.ssig = (bit<8>) s;
        sum_to(hdr.r.loop, hdr.h.c);
        hdr.r.tbl = a;
        t.apply();
        a %= 16;
        a /= 2;
        hdr.r.divmod = a;
        hdr.r.prs = meta.x;
        hdr.h.d[3:0] += 1;          // a slice: wraps within its 4 bits
    }
}

control Eg(inout H hdr, inout meta_t meta, inout standard_metadata_t sm) { apply { } }
control Vck(inout H hdr, inout meta_t meta) { apply { } }
control Cck(inout H hdr, inout meta_t meta) { apply { } }
control Dep(packet_out pkt, in H hdr) { apply { pkt.emit(hdr.h); pkt.emit(hdr.r); } }
V1Switch(P(), Vck(), Ing(), Eg(), Cck(), Dep()) main;
