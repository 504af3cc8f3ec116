/* Test program of the switch daemon (tests/switch/test_p4runtime.py, test_daemon.py): an L3 router with every
 * P4Runtime entity kind -- LPM routes with a direct counter, a ternary/range ACL with priorities that also sets
 * the queue priority, ECMP through an action selector, an indexed counter, a meter, a register, a digest of
 * unknown sources (with a direct meter), multicast, and PacketIn/PacketOut through CPU_PORT with controller headers. */
#include <core.p4>
#include <v1model.p4>
#include "headers.p4"

#define CPU_PORT 255
#define ETHERTYPE_PUNT 0x88B5

@controller_header("packet_in")
header packet_in_t {
    bit<9> ingress_port;
    bit<7> _pad;
}

@controller_header("packet_out")
header packet_out_t {
    bit<9> egress_port;
    bit<7> _pad;
}

struct learn_t {
    bit<48> src_mac;
    bit<9>  port;
}

struct metadata_t {
    learn_t learn;
    bit<16> l4_src;
    bit<16> l4_dst;
    bit<1>  known;
}

struct headers_t {
    packet_out_t packet_out;
    packet_in_t  packet_in;
    ethernet_t   ethernet;
    ipv4_t       ipv4;
    udp_t        udp;
}

parser P(packet_in packet, out headers_t hdr, inout metadata_t meta, inout standard_metadata_t sm) {
    state start {
        transition select(sm.ingress_port) {
            CPU_PORT: parse_packet_out;
            default: parse_ethernet;
        }
    }
    state parse_packet_out {
        packet.extract(hdr.packet_out);
        transition parse_ethernet;
    }
    state parse_ethernet {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.etherType) {
            ETHERTYPE_IPV4: parse_ipv4;
            default: accept;
        }
    }
    state parse_ipv4 {
        packet.extract(hdr.ipv4);
        transition select(hdr.ipv4.fragOffset, hdr.ipv4.protocol) {
            (0, IPPROTO_UDP): parse_udp;
            default: accept;
        }
    }
    state parse_udp {
        packet.extract(hdr.udp);
        meta.l4_src = hdr.udp.srcPort;
        meta.l4_dst = hdr.udp.dstPort;
        transition accept;
    }
}

control V(inout headers_t hdr, inout metadata_t meta) {
    apply { }
}

control I(inout headers_t hdr, inout metadata_t meta, inout standard_metadata_t sm) {
    counter(64, CounterType.packets_and_bytes) port_rx;
    direct_counter(CounterType.packets_and_bytes) route_hits;
    meter(64, MeterType.packets) port_meter;
    register<bit<32>>(16) last_dst;
    action_selector(HashAlgorithm.crc16, 32w64, 32w16) ecmp_sel;

    action drop() { mark_to_drop(sm); }
    action set_nhop(mac_addr_t dmac, mac_addr_t smac, bit<9> port) {
        hdr.ethernet.srcAddr = smac;
        hdr.ethernet.dstAddr = dmac;
        sm.egress_spec = port;
        hdr.ipv4.ttl = hdr.ipv4.ttl - 1;
    }
    action to_cpu() {
        sm.egress_spec = CPU_PORT;
    }
    table routes {
        key = { hdr.ipv4.dstAddr: lpm; }
        actions = { set_nhop; to_cpu; drop; }
        default_action = drop();
        counters = route_hits;
        size = 1024;
    }
    action set_prio(bit<3> prio) { sm.priority = prio; }
    action deny() { mark_to_drop(sm); }
    action permit() { }
    table acl {
        key = {
            hdr.ipv4.srcAddr: ternary;
            hdr.ipv4.protocol: ternary;
            meta.l4_dst: range @name("dport");
        }
        actions = { set_prio; deny; permit; }
        default_action = permit();
        size = 256;
    }
    action ecmp_nhop(mac_addr_t dmac, bit<9> port) {
        hdr.ethernet.dstAddr = dmac;
        sm.egress_spec = port;
    }
    table ecmp {
        key = {
            hdr.ipv4.dstAddr: exact;
            hdr.ipv4.srcAddr: selector;
            meta.l4_src: selector;
        }
        actions = { ecmp_nhop; }
        implementation = ecmp_sel;
        size = 64;
    }
    action set_mcast(bit<16> grp) { sm.mcast_grp = grp; }
    table l2_flood {
        key = { hdr.ethernet.dstAddr: exact; }
        actions = { set_mcast; NoAction; }
        default_action = NoAction();
        size = 16;
    }
    direct_meter<bit<2>>(MeterType.packets) source_meter;
    action mark_known() {
        bit<2> c;
        source_meter.read(c);
        meta.known = 1;
    }
    table sources {
        key = { hdr.ethernet.srcAddr: exact; }
        actions = { mark_known; NoAction; }
        default_action = NoAction();
        meters = source_meter;
        size = 64;
    }

    apply {
        port_rx.count((bit<32>) sm.ingress_port & 63);
        if (hdr.packet_out.isValid()) {
            /* PacketOut: straight to the port the controller named (CPU_PORT loops back as a PacketIn). */
            sm.egress_spec = hdr.packet_out.egress_port;
            hdr.packet_out.setInvalid();
        } else {
            bit<2> color;
            port_meter.execute_meter<bit<2>>((bit<32>) sm.ingress_port, color);
            if (color == 2) {
                drop();
                exit;
            }
            /* learn unknown sources (before routing rewrites the MACs) */
            if (hdr.ethernet.isValid()) {
                sources.apply();
                if (meta.known == 0) {
                    meta.learn.src_mac = hdr.ethernet.srcAddr;
                    meta.learn.port = sm.ingress_port;
                    digest<learn_t>(1, meta.learn);
                }
            }
            if (hdr.ethernet.isValid() && hdr.ethernet.etherType == ETHERTYPE_PUNT) {
                to_cpu();
            } else if (hdr.ipv4.isValid()) {
                last_dst.write((bit<32>) sm.ingress_port & 15, hdr.ipv4.dstAddr);
                if (!ecmp.apply().hit) {
                    routes.apply();
                }
                acl.apply();
            } else if (hdr.ethernet.isValid()) {
                l2_flood.apply();
            } else {
                drop();
            }
        }
        if (sm.egress_spec == CPU_PORT) {
            hdr.packet_in.setValid();
            hdr.packet_in.ingress_port = sm.ingress_port;
            hdr.packet_in._pad = 0;
        }
    }
}

control E(inout headers_t hdr, inout metadata_t meta, inout standard_metadata_t sm) {
    apply { }
}

control C(inout headers_t hdr, inout metadata_t meta) {
    apply {
        update_checksum(hdr.ipv4.isValid(),
            { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.dscp, hdr.ipv4.ecn, hdr.ipv4.totalLen,
              hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.fragOffset, hdr.ipv4.ttl,
              hdr.ipv4.protocol, hdr.ipv4.srcAddr, hdr.ipv4.dstAddr },
            hdr.ipv4.hdrChecksum, HashAlgorithm.csum16);
    }
}

control D(packet_out packet, in headers_t hdr) {
    apply {
        packet.emit(hdr.packet_in);
        packet.emit(hdr.ethernet);
        packet.emit(hdr.ipv4);
        packet.emit(hdr.udp);
    }
}

V1Switch(P(), V(), I(), E(), C(), D()) main;
