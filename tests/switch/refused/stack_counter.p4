/* A parser with a header stack (MPLS-like labels), lookahead, const entries of every match kind,
 * and a register-based packet counter per label. */
#include <core.p4>
#include <v1model.p4>

header eth_t { bit<48> dst; bit<48> src; bit<16> type; }
header label_t { bit<20> label; bit<3> tc; bit<1> bos; bit<8> ttl; }
header tag_t { bit<8> kind; bit<8> value; }

struct headers_t { eth_t eth; label_t[4] labels; tag_t tag; }
struct meta_t { bit<8> peek; bit<32> count; }

parser P(packet_in pkt, out headers_t h, inout meta_t m, inout standard_metadata_t sm) {
    state start {
        pkt.extract(h.eth);
        transition select(h.eth.type) { 0x8847: labels; 0x9000 &&& 0xF000: tagged; default: accept; }
    }
    state labels {
        pkt.extract(h.labels.next);
        transition select(h.labels.last.bos) { 1: after; default: labels; }
    }
    state after {
        m.peek = pkt.lookahead<bit<8>>();
        transition select(m.peek) { 0x00 .. 0x0F: tagged; default: accept; }
    }
    state tagged { pkt.extract(h.tag); transition accept; }
}
control V(inout headers_t h, inout meta_t m) { apply { } }
control I(inout headers_t h, inout meta_t m, inout standard_metadata_t sm) {
    register<bit<32>>(16) per_label;
    action fwd(bit<9> port) { sm.egress_spec = port; }
    action drop() { mark_to_drop(sm); }
    table classify {
        key = {
            h.tag.kind: exact;
            h.tag.value: ternary;
            h.eth.type: range;
            h.tag.isValid(): optional;
        }
        actions = { fwd; drop; }
        default_action = fwd(9);
        const entries = {
            (1, 0x10 &&& 0xF0, _, true): fwd(1);
            (1, _, 0x9000 .. 0x9FFF, _): fwd(2);
            (2, 0x05, _, _): drop();
        }
    }
    apply {
        if (h.labels[0].isValid()) {
            per_label.read(m.count, (bit<32>) h.labels[0].label[3:0]);
            per_label.write((bit<32>) h.labels[0].label[3:0], m.count + 1);
            h.labels[0].ttl = h.labels[0].ttl - 1;
            sm.egress_spec = 3;
        }
        if (h.tag.isValid()) {
            classify.apply();
        }
    }
}
control E(inout headers_t h, inout meta_t m, inout standard_metadata_t sm) { apply { } }
control C(inout headers_t h, inout meta_t m) { apply { } }
control D(packet_out pkt, in headers_t h) { apply { pkt.emit(h); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
