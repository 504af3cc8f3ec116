/* Fields that are not byte-aligned, span byte and word boundaries, are wider than 64 bits, signed or
 * bool; a csum16 checksum over a field list that is not a whole number of 16-bit words; a register
 * and a counter indexed by a packet field that can be out of range; idx == 7 multicasts to group 1, and
 * egress writes each copy's egress_rid into ridx.  tests/switch/test_fastpath.py
 * runs it through the fast generated code and the reference code and compares. */
#include <core.p4>
#include <v1model.p4>

header eth_t { bit<48> dst; bit<48> src; bit<16> type; }

header odd_t {
    bit<4>  a;
    bit<12> b;      /* crosses a byte boundary */
    bit<20> c;
    bit<12> d;
    bit<72> wide;   /* wider than 64 bits */
    int<12> sgn;
    bool    flag;
    bit<3>  idx;
    bit<16> csum;
    bit<48> mac;
    bit<8>  ridx;   /* register/counter index: 0..255 against a size of 4 */
}

struct headers_t { eth_t eth; odd_t odd; }
struct meta_t { bit<8> unused; }

parser P(packet_in pkt, out headers_t h, inout meta_t m, inout standard_metadata_t sm) {
    state start {
        pkt.extract(h.eth);
        transition select(h.eth.type) { 0x88B6: odd; default: accept; }
    }
    state odd { pkt.extract(h.odd); transition accept; }
}

control V(inout headers_t h, inout meta_t m) {
    apply {
        verify_checksum(h.odd.isValid(), { h.odd.a, h.odd.b, h.odd.c, h.odd.sgn, h.odd.flag, h.odd.idx },
                        h.odd.csum, HashAlgorithm.csum16);
    }
}

control I(inout headers_t h, inout meta_t m, inout standard_metadata_t sm) {
    register<bit<32>>(4) reg;
    counter(4, CounterType.packets_and_bytes) cnt;
    apply {
        sm.egress_spec = 1;
        if (sm.checksum_error == 1) {
            h.eth.type = 0xBAD0;
        }
        if (h.odd.isValid()) {
            bit<32> r;
            reg.read(r, (bit<32>)h.odd.ridx);
            reg.write((bit<32>)h.odd.ridx, r + 1);
            cnt.count((bit<32>)h.odd.ridx);
            h.odd.b = h.odd.b + 1;
            h.odd.wide = h.odd.wide + 1;
            h.odd.sgn = h.odd.sgn - 1;
            h.odd.flag = !h.odd.flag;
            h.odd.mac = h.odd.mac + (bit<48>)r;
            if (h.odd.idx == 7) {
                sm.mcast_grp = 1;
            }
        }
    }
}

control E(inout headers_t h, inout meta_t m, inout standard_metadata_t sm) {
    apply {
        if (sm.instance_type == 5) {
            h.odd.ridx = (bit<8>)sm.egress_rid;
        }
    }
}

control C(inout headers_t h, inout meta_t m) {
    apply {
        update_checksum(h.odd.isValid(), { h.odd.a, h.odd.b, h.odd.c, h.odd.sgn, h.odd.flag, h.odd.idx },
                        h.odd.csum, HashAlgorithm.csum16);
    }
}

control D(packet_out pkt, in headers_t h) { apply { pkt.emit(h.eth); pkt.emit(h.odd); } }

V1Switch(P(), V(), I(), E(), C(), D()) main;
