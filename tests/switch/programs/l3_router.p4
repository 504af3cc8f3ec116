/* L3 router with an ACL: LPM next hop, ternary ACL with priorities, TTL decrement,
 * IPv4 checksum verified and recomputed, a direct counter on the ACL, a port counter. */
#include <core.p4>
#include <v1model.p4>
#include "headers.p4"

struct metadata_t {
    bit<16> l4_src;
    bit<16> l4_dst;
}

struct headers_t {
    ethernet_t ethernet;
    ipv4_t     ipv4;
    udp_t      udp;
    tcp_t      tcp;
}

parser RouterParser(packet_in packet, out headers_t hdr, inout metadata_t meta,
                    inout standard_metadata_t standard_metadata) {
    state start {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.etherType) {
            ETHERTYPE_IPV4: parse_ipv4;
            default: accept;
        }
    }
    state parse_ipv4 {
        packet.extract(hdr.ipv4);
        verify(hdr.ipv4.ihl == 5, error.ParserInvalidArgument);
        transition select(hdr.ipv4.fragOffset, hdr.ipv4.protocol) {
            (0, IPPROTO_UDP): parse_udp;
            (0, IPPROTO_TCP): parse_tcp;
            default: accept;
        }
    }
    state parse_udp {
        packet.extract(hdr.udp);
        meta.l4_src = hdr.udp.srcPort;
        meta.l4_dst = hdr.udp.dstPort;
        transition accept;
    }
    state parse_tcp {
        packet.extract(hdr.tcp);
        meta.l4_src = hdr.tcp.srcPort;
        meta.l4_dst = hdr.tcp.dstPort;
        transition accept;
    }
}

control RouterVerify(inout headers_t hdr, inout metadata_t meta) {
    apply {
        verify_checksum(hdr.ipv4.isValid(),
            { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.dscp, hdr.ipv4.ecn, hdr.ipv4.totalLen,
              hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.fragOffset, hdr.ipv4.ttl,
              hdr.ipv4.protocol, hdr.ipv4.srcAddr, hdr.ipv4.dstAddr },
            hdr.ipv4.hdrChecksum, HashAlgorithm.csum16);
    }
}

control RouterIngress(inout headers_t hdr, inout metadata_t meta,
                      inout standard_metadata_t standard_metadata) {
    counter(64, CounterType.packets_and_bytes) port_rx;
    direct_counter(CounterType.packets) acl_hits;

    action drop() {
        mark_to_drop(standard_metadata);
    }
    action set_nhop(mac_addr_t dmac, mac_addr_t smac, bit<9> port) {
        hdr.ethernet.srcAddr = smac;
        hdr.ethernet.dstAddr = dmac;
        standard_metadata.egress_spec = port;
        hdr.ipv4.ttl = hdr.ipv4.ttl - 1;
    }
    table ipv4_lpm {
        key = { hdr.ipv4.dstAddr: lpm; }
        actions = { set_nhop; drop; NoAction; }
        size = 16384;             // bench/switch_pps.py installs 10,000 routes
        default_action = drop();
    }
    action acl_permit() { acl_hits.count(); }
    action acl_deny() { acl_hits.count(); mark_to_drop(standard_metadata); }
    action acl_set_prio(bit<3> prio) { acl_hits.count(); standard_metadata.priority = prio; }
    table acl {
        key = {
            hdr.ipv4.srcAddr: ternary;
            hdr.ipv4.dstAddr: ternary;
            hdr.ipv4.protocol: ternary;
            meta.l4_dst: range @name("dport");
        }
        actions = { acl_permit; acl_deny; acl_set_prio; }
        default_action = acl_permit();
        counters = acl_hits;
        size = 256;
    }
    apply {
        port_rx.count((bit<32>) standard_metadata.ingress_port);
        if (standard_metadata.parser_error != error.NoError || standard_metadata.checksum_error == 1) {
            drop();
            exit;
        }
        if (hdr.ipv4.isValid() && hdr.ipv4.ttl > 1) {
            ipv4_lpm.apply();
            acl.apply();
        } else {
            drop();
        }
    }
}

control RouterEgress(inout headers_t hdr, inout metadata_t meta,
                     inout standard_metadata_t standard_metadata) {
    apply { }
}

control RouterCompute(inout headers_t hdr, inout metadata_t meta) {
    apply {
        update_checksum(hdr.ipv4.isValid(),
            { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.dscp, hdr.ipv4.ecn, hdr.ipv4.totalLen,
              hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.fragOffset, hdr.ipv4.ttl,
              hdr.ipv4.protocol, hdr.ipv4.srcAddr, hdr.ipv4.dstAddr },
            hdr.ipv4.hdrChecksum, HashAlgorithm.csum16);
    }
}

control RouterDeparser(packet_out packet, in headers_t hdr) {
    apply {
        packet.emit(hdr.ethernet);
        packet.emit(hdr.ipv4);
        packet.emit(hdr.udp);
        packet.emit(hdr.tcp);
    }
}

V1Switch(RouterParser(), RouterVerify(), RouterIngress(), RouterEgress(), RouterCompute(),
         RouterDeparser()) main;
