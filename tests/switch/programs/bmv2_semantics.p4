/* Regression program for three places where BMv2 simple_switch semantics must hold (issue 36):
 *  - egress_spec is 0 when egress starts (egress copies egress_spec and egress_port into the Ethernet addresses;
 *    EtherType 0xE0E0 is dropped in egress with mark_to_drop);
 *  - hs.next past the end of a header stack is StackOutOfBounds, never a write into the header after the stack:
 *    after two labels the parser extracts into labels.next, then overwrites labels[1] (p4c: labels.last is read-only);
 *    ingress drops packets with a parser error (0x8847) or keeps them and marks them 0xDEAD (0x8848);
 *  - non-const `entries` (in_port) are ordinary entries a controller reads, modifies and deletes; `const entries`
 *    (fixed) are read-only. */
#include <core.p4>
#include <v1model.p4>

header eth_t { bit<48> dst; bit<48> src; bit<16> type; }
header label_t { bit<8> v; }
header tag_t { bit<8> t; }
struct headers_t { eth_t eth; label_t[2] labels; tag_t tag; }
struct meta_t { bit<8> unused; }

parser P(packet_in pkt, out headers_t h, inout meta_t m, inout standard_metadata_t sm) {
    state start {
        pkt.extract(h.eth);
        transition select(h.eth.type) { 0x8847: labels; 0x8848: labels_keep; default: accept; }
    }
    state labels {
        pkt.extract(h.labels.next);
        transition select(h.labels.last.v) { 0: marker; default: labels; }
    }
    state marker {
        /* after two labels nextIndex == 2 == size: StackOutOfBounds, h.tag stays invalid */
        pkt.extract(h.labels.next);
        h.labels[1].v = 0xEE;
        transition accept;
    }
    state labels_keep {
        pkt.extract(h.labels.next);
        transition select(h.labels.last.v) { 0: marker_keep; default: labels_keep; }
    }
    state marker_keep {
        pkt.extract(h.labels.next);
        h.labels[1].v = 0xEE;
        transition accept;
    }
}

control V(inout headers_t h, inout meta_t m) { apply { } }

control I(inout headers_t h, inout meta_t m, inout standard_metadata_t sm) {
    action fwd(bit<9> port) { sm.egress_spec = port; }
    action drop() { mark_to_drop(sm); }
    table in_port {
        key = { sm.ingress_port: exact; }
        actions = { fwd; drop; }
        default_action = drop();
        entries = {
            1 : fwd(2);
            2 : fwd(1);
            3 : drop();
        }
        size = 16;
    }
    table fixed {
        key = { h.eth.type: exact; }
        actions = { fwd; drop; NoAction; }
        default_action = NoAction();
        const entries = {
            0x0BAD : drop();
        }
    }
    apply {
        in_port.apply();
        fixed.apply();
        if (sm.parser_error != error.NoError) {
            if (h.eth.type == 0x8848) {
                h.eth.type = 0xDEAD;          /* keep it, to show which error and what the headers hold */
            } else {
                mark_to_drop(sm);
            }
        }
    }
}

control E(inout headers_t h, inout meta_t m, inout standard_metadata_t sm) {
    apply {
        h.eth.src = (bit<48>)sm.egress_spec;
        h.eth.dst = (bit<48>)sm.egress_port;
        if (h.eth.type == 0xE0E0) {
            mark_to_drop(sm);                  /* a drop in egress: egress_spec = 511 */
        }
    }
}

control C(inout headers_t h, inout meta_t m) { apply { } }

control D(packet_out pkt, in headers_t h) {
    apply { pkt.emit(h.eth); pkt.emit(h.labels); pkt.emit(h.tag); }
}

V1Switch(P(), V(), I(), E(), C(), D()) main;
