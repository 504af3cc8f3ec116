/* Hash ECMP with an action selector, a hash() extern and a meter. */
#include <core.p4>
#include <v1model.p4>
#include "headers.p4"

struct headers_t { ethernet_t ethernet; ipv4_t ipv4; udp_t udp; }
struct meta_t { bit<16> h16; bit<32> h32; bit<2> color; }

parser P(packet_in pkt, out headers_t h, inout meta_t m, inout standard_metadata_t sm) {
    state start {
        pkt.extract(h.ethernet);
        transition select(h.ethernet.etherType) { ETHERTYPE_IPV4: ipv4; default: accept; }
    }
    state ipv4 {
        pkt.extract(h.ipv4);
        transition select(h.ipv4.protocol) { IPPROTO_UDP: udp; default: accept; }
    }
    state udp { pkt.extract(h.udp); transition accept; }
}
control V(inout headers_t h, inout meta_t m) { apply { } }
control I(inout headers_t h, inout meta_t m, inout standard_metadata_t sm) {
    action_selector(HashAlgorithm.crc16, 32w64, 32w16) ecmp_sel;
    meter(16, MeterType.packets) port_meter;
    action set_port(bit<9> port) { sm.egress_spec = port; }
    action drop() { mark_to_drop(sm); }
    table ecmp {
        key = {
            h.ipv4.dstAddr: lpm;
            h.ipv4.srcAddr: selector;
            h.udp.srcPort: selector;
        }
        actions = { set_port; drop; }
        implementation = ecmp_sel;
        size = 64;
    }
    apply {
        hash(m.h16, HashAlgorithm.crc16, 16w0, { h.ipv4.srcAddr, h.ipv4.dstAddr }, 32w65536);
        hash(m.h32, HashAlgorithm.crc32, 32w0, { h.ipv4.srcAddr, h.ipv4.dstAddr }, 32w0);
        h.ipv4.identification = m.h16;
        h.udp.checksum = m.h32[15:0];
        ecmp.apply();
        port_meter.execute_meter<bit<2>>((bit<32>) sm.ingress_port, m.color);
        h.ipv4.dscp = (bit<6>) m.color;
        if (m.color == V1MODEL_METER_COLOR_RED) { drop(); }
    }
}
control E(inout headers_t h, inout meta_t m, inout standard_metadata_t sm) { apply { } }
control C(inout headers_t h, inout meta_t m) { apply { } }
control D(packet_out pkt, in headers_t h) { apply { pkt.emit(h.ethernet); pkt.emit(h.ipv4); pkt.emit(h.udp); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
