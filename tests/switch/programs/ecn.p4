/* ECN marking from enq_qdepth in egress, priority from DSCP in ingress, and queue depth
 * published to a register that ingress reads (drop-before-enqueue pattern). */
#include <core.p4>
#include <v1model.p4>
#include "headers.p4"

const bit<19> ECN_THRESHOLD = 4;

struct headers_t { ethernet_t ethernet; ipv4_t ipv4; }
struct meta_t { bit<32> qdepth_seen; }

parser P(packet_in pkt, out headers_t h, inout meta_t m, inout standard_metadata_t sm) {
    state start {
        pkt.extract(h.ethernet);
        transition select(h.ethernet.etherType) { 0x0800: ipv4; default: accept; }
    }
    state ipv4 { pkt.extract(h.ipv4); transition accept; }
}
control V(inout headers_t h, inout meta_t m) { apply { } }
control I(inout headers_t h, inout meta_t m, inout standard_metadata_t sm) {
    apply {
        sm.egress_spec = 2;
        if (h.ipv4.isValid()) {
            sm.priority = (bit<3>) h.ipv4.dscp[2:0];
        }
    }
}
control E(inout headers_t h, inout meta_t m, inout standard_metadata_t sm) {
    register<bit<32>>(8) qdepth;
    apply {
        qdepth.write((bit<32>) sm.egress_port, (bit<32>) sm.deq_qdepth);
        if (h.ipv4.isValid() && h.ipv4.ecn != 0 && sm.enq_qdepth >= ECN_THRESHOLD) {
            h.ipv4.ecn = 3;
        }
        h.ipv4.identification = (bit<16>) sm.enq_qdepth;
    }
}
control C(inout headers_t h, inout meta_t m) { apply { } }
control D(packet_out pkt, in headers_t h) { apply { pkt.emit(h.ethernet); pkt.emit(h.ipv4); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
