/* Varbit headers (two-argument extract with fixed fields around the varbit, emit, isValid, assignment,
 * equality, checksum over a varbit) and top-level extern instances shared by ingress and egress. */
#include <core.p4>
#include <v1model.p4>

header eth_t { bit<48> dst; bit<48> src; bit<16> type; }
header len_t { bit<8> nbits; bit<16> csum; }
header opts_t { bit<8> kind; varbit<64> data; bit<8> tail; }
header trailer_t { bit<8> v; }

struct headers_t { eth_t eth; len_t len; opts_t opts; opts_t copy; trailer_t trailer; }
struct meta_t { bit<32> seen; bit<32> eg; }

/* Top-level instances: P4Info names them without a control prefix. */
register<bit<32>>(4) shared_reg;
counter(4, CounterType.packets) shared_cnt;

parser P(packet_in pkt, out headers_t h, inout meta_t m, inout standard_metadata_t sm) {
    state start {
        pkt.extract(h.eth);
        transition select(h.eth.type) { 0x88B5: opts; default: accept; }
    }
    state opts {
        pkt.extract(h.len);
        pkt.extract(h.opts, (bit<32>)h.len.nbits);
        pkt.extract(h.trailer);
        transition accept;
    }
}
control V(inout headers_t h, inout meta_t m) { apply { } }
control I(inout headers_t h, inout meta_t m, inout standard_metadata_t sm) {
    apply {
        shared_reg.read(m.seen, 0);
        shared_reg.write(0, m.seen + 1);
        shared_cnt.count(0);
        if (sm.parser_error == error.ParserInvalidArgument) {
            sm.egress_spec = 2;
        } else if (sm.parser_error == error.HeaderTooShort) {
            sm.egress_spec = 3;
        } else if (sm.parser_error == error.PacketTooShort) {
            sm.egress_spec = 4;
        } else {
            sm.egress_spec = 1;
        }
        if (h.opts.isValid() && h.len.nbits == 16) {
            h.copy = h.opts;          /* header assignment copies the varbit */
            h.copy.kind = 0xEE;
            if (h.copy.data == h.opts.data) {
                h.trailer.v = 0x77;
            }
        }
    }
}
control E(inout headers_t h, inout meta_t m, inout standard_metadata_t sm) {
    apply {
        shared_reg.read(m.eg, 0);
        shared_cnt.count(1);
        h.eth.src = (bit<48>)m.eg;
    }
}
control C(inout headers_t h, inout meta_t m) {
    apply {
        update_checksum(h.opts.isValid(), { h.opts.kind, h.opts.data, h.opts.tail }, h.len.csum,
                        HashAlgorithm.csum16);
    }
}
control D(packet_out pkt, in headers_t h) {
    apply {
        pkt.emit(h.eth);
        pkt.emit(h.len);
        pkt.emit(h.opts);
        pkt.emit(h.copy);
        pkt.emit(h.trailer);
    }
}
V1Switch(P(), V(), I(), E(), C(), D()) main;
