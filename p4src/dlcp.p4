/* dlcp.p4: the switch half of DLCP (v1model; BMv2 simple_switch_grpc and the embedded target).
 *
 * - Parses Ethernet, ARP, IPv4 (options kept, as a varbit), TCP, UDP and DLCP (UDP destination DLCP_UDP_PORT).
 * - Routes IPv4 by longest prefix to a next hop or to an equal-cost group. DLCP packets are sprayed over the
 *   group's members round-robin (a per-group register), other traffic is hashed per flow on the 5-tuple.
 *   ARP is passed through towards its target protocol address along the same routes, unmodified.
 * - Chooses the queue (standard_metadata.priority, 0 lowest) from the DLCP fields, or from DSCP for other traffic.
 * - Bounded loss: per (port, priority) drop and mark thresholds (registers the controller writes, 0 = off), and
 *   per magnitude class drop thresholds (class_drop_threshold: lower classes, smaller gradients, dropped first). A
 *   drop-eligible DLCP data packet is dropped when the queue depth is at or above its drop threshold: early in
 *   ingress, before it takes queue space, from an estimate of the depth (the exact depth egress last published
 *   plus what ingress sent to the queue since), and again in egress from its own enq_qdepth. Any other
 *   ECN-capable packet at or above the mark threshold gets CE.
 * - Never sends a packet back out of the port it came in on.
 * - Counts forwarded packets/bytes, eligible drops and ECN marks per (port, priority), packets per next hop, and
 *   ingress drops per reason.
 * - Talks to a P4Runtime controller through the CPU port (CPU_PORT, 255 unless -DCPU_PORT=N; the switch runs
 *   with --cpu-port CPU_PORT), with the standard @controller_header("packet_out") / ("packet_in") headers: a
 *   PacketOut enters ingress on the CPU port behind its packet_out header and is either routed like any other
 *   frame (do_forwarding = 1) or sent out of packet_out.egress_port as it is; a frame routed to the CPU port
 *   leaves with a packet_in header saying on which port it arrived.
 * - Malformed input is dropped in ingress and counted (ingress_drops[DROP_PARSER_ERROR]): as in BMv2, a parser
 *   error does not drop the packet by itself; ingress runs with standard_metadata.parser_error set. That covers a
 *   frame shorter than Ethernet, a truncated IPv4 header or options, IHL < 5, IP version != 4, and a UDP datagram
 *   to DLCP_UDP_PORT whose payload is shorter than the 48-byte DLCP header (PacketTooShort while extracting
 *   hdr.dlcp): such a datagram is not DLCP and no DLCP receiver would accept it, so it is not forwarded as plain
 *   UDP either.
 * docs/p4-program.md describes every table, action, register and counter for controllers.
 */
#include <core.p4>
#include <v1model.p4>
#include "include/dlcp_headers.p4"

const bit<16> ETHERTYPE_IPV4 = 0x0800;
const bit<16> ETHERTYPE_ARP  = 0x0806;
const bit<8>  PROTO_TCP = 6;
const bit<8>  PROTO_UDP = 17;
const bit<2>  ECN_NOT_ECT = 0;
const bit<2>  ECN_CE = 3;
const bit<8>  LB_SPRAY = 0;
const bit<8>  LB_PER_FLOW = 1;

/* Queues per port (BMv2 --priority-queues 8); index of a (port, priority) pair is port * 8 + priority. */
#define NUM_PRIOS 8
#define NUM_MAG_CLASSES 8
#define PORT_PRIO_SLOTS 4096
#define MAX_NHOPS 1024
#define MAX_ECMP_GROUPS 1024

/* The switch's CPU port (BMv2 simple_switch_grpc --cpu-port, dlcp-switch --cpu-port). 255 is the common choice of
 * v1model programs and tools; a switch with another CPU port compiles this program with -DCPU_PORT=N. */
#ifndef CPU_PORT
#define CPU_PORT 255
#endif

/* Reasons counted in ingress_drops. */
const bit<32> DROP_PARSER_ERROR = 0;
const bit<32> DROP_BAD_CHECKSUM = 1;
const bit<32> DROP_TTL_EXPIRED  = 2;
const bit<32> DROP_NO_ROUTE     = 3;
const bit<32> DROP_EARLY_ELIGIBLE = 4;
const bit<32> DROP_HAIRPIN      = 5;

typedef bit<48> mac_t;
typedef bit<32> ip4_t;
typedef bit<9>  port_t;

header ethernet_t {
    mac_t   dstAddr;
    mac_t   srcAddr;
    bit<16> etherType;
}

header arp_t {
    bit<16> htype;
    bit<16> ptype;
    bit<8>  hlen;
    bit<8>  plen;
    bit<16> oper;
    mac_t   sha;
    ip4_t   spa;
    mac_t   tha;
    ip4_t   tpa;
}

header ipv4_t {
    bit<4>  version;
    bit<4>  ihl;
    bit<6>  dscp;
    bit<2>  ecn;
    bit<16> totalLen;
    bit<16> identification;
    bit<3>  flags;
    bit<13> fragOffset;
    bit<8>  ttl;
    bit<8>  protocol;
    bit<16> hdrChecksum;
    ip4_t   srcAddr;
    ip4_t   dstAddr;
}

/* IPv4 options, (ihl - 5) 32-bit words, carried through untouched. */
header ipv4_options_t {
    varbit<320> options;
}

header tcp_t {
    bit<16> srcPort;
    bit<16> dstPort;
    bit<32> seqNo;
    bit<32> ackNo;
    bit<4>  dataOffset;
    bit<4>  res;
    bit<8>  flags;
    bit<16> window;
    bit<16> checksum;
    bit<16> urgentPtr;
}

header udp_t {
    bit<16> srcPort;
    bit<16> dstPort;
    bit<16> length;
    bit<16> checksum;
}

/* PacketOut metadata, in front of the frame a controller sends (v1model/BMv2 convention: the target prepends it
 * and the frame enters ingress on the CPU port). do_forwarding = 1: route the frame as if it had arrived on the
 * CPU port (dlcpctl packet-out); 0: send it out of egress_port as it is (no routing, no rewrites, queue 0). */
@controller_header("packet_out")
header packet_out_h {
    port_t  egress_port;
    bit<1>  do_forwarding;
    bit<6>  _pad;
}

/* PacketIn metadata, in front of a frame that leaves on the CPU port; the target strips it into the PacketIn's
 * metadata. ingress_port: the port the frame arrived on (CPU_PORT for a routed PacketOut). */
@controller_header("packet_in")
header packet_in_h {
    port_t  ingress_port;
    bit<7>  _pad;
}

struct headers_t {
    packet_out_h   packet_out;
    packet_in_h    packet_in;
    ethernet_t     ethernet;
    arp_t          arp;
    ipv4_t         ipv4;
    ipv4_options_t ipv4_options;
    tcp_t          tcp;
    udp_t          udp;
    dlcp_h         dlcp;
}

struct metadata_t {
    ip4_t   dst_addr;     /* routing key: IPv4 destination, or ARP target protocol address */
    bit<16> l4_sport;
    bit<16> l4_dport;
    bit<3>  prio;         /* chosen queue, kept for egress */
    bit<16> ecmp_group;
    bit<16> ecmp_size;    /* 0: not an ECMP route */
    bit<16> ecmp_index;
    mac_t   nhop_dmac;
    mac_t   nhop_smac;
    bit<16> nhop_id;
    bit<1>  routed;
}

error { IPv4HeaderTooShort, IPv4BadVersion }

/* Shared by ingress (early drop) and egress (drop/mark): written by the controller, 0 disables. */
register<bit<19>>(PORT_PRIO_SLOTS) drop_threshold;
register<bit<19>>(PORT_PRIO_SLOTS) mark_threshold;
/* Drops that follow gradient value: a drop threshold per magnitude class (index hdr.dlcp.mag_class, 0 smallest
 * .. 7 largest), written by the controller, 0 = none. An eligible packet's threshold is the smaller of its queue's
 * drop_threshold and its class's, where set: with lower thresholds for lower classes, a filling queue drops the
 * smallest gradients first and the larger ones only as it fills further. */
register<bit<19>>(NUM_MAG_CLASSES) class_drop_threshold;
/* Eligible DLCP packets dropped, per (port, priority), early in ingress or in egress. */
counter(PORT_PRIO_SLOTS, CounterType.packets) eligible_drops;
/* Load-balancing mode over equal-cost groups, index 0, written by the controller:
 * 0 (default) = spray DLCP packets per packet, hash other traffic per flow; 1 = hash everything per flow. */
register<bit<8>>(1) lb_mode;
/* Estimated depth of each (port, priority) queue, in packets, for early drops in ingress: egress writes the
 * exact depth it sees as a packet leaves (deq_qdepth); ingress adds one for every packet it sends to the queue
 * in between. Exact while nothing else changes the queue; one too high per tail drop until the next dequeue. */
register<bit<19>>(PORT_PRIO_SLOTS) queue_depth;

parser DlcpParser(packet_in packet, out headers_t hdr, inout metadata_t meta,
                  inout standard_metadata_t standard_metadata) {
    state start {
        transition select(standard_metadata.ingress_port) {
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
            ETHERTYPE_ARP: parse_arp;
            default: accept;
        }
    }

    state parse_arp {
        packet.extract(hdr.arp);
        meta.dst_addr = hdr.arp.tpa;
        transition accept;
    }

    state parse_ipv4 {
        packet.extract(hdr.ipv4);
        verify(hdr.ipv4.version == 4, error.IPv4BadVersion);
        verify(hdr.ipv4.ihl >= 5, error.IPv4HeaderTooShort);
        meta.dst_addr = hdr.ipv4.dstAddr;
        transition select(hdr.ipv4.ihl) {
            5: parse_l4;
            default: parse_ipv4_options;
        }
    }

    state parse_ipv4_options {
        packet.extract(hdr.ipv4_options, (bit<32>)(((bit<16>)hdr.ipv4.ihl - 5) * 32));
        transition parse_l4;
    }

    state parse_l4 {
        /* Only first fragments carry the L4 header. */
        transition select(hdr.ipv4.fragOffset, hdr.ipv4.protocol) {
            (0, PROTO_TCP): parse_tcp;
            (0, PROTO_UDP): parse_udp;
            default: accept;
        }
    }

    state parse_tcp {
        packet.extract(hdr.tcp);
        meta.l4_sport = hdr.tcp.srcPort;
        meta.l4_dport = hdr.tcp.dstPort;
        transition accept;
    }

    state parse_udp {
        packet.extract(hdr.udp);
        meta.l4_sport = hdr.udp.srcPort;
        meta.l4_dport = hdr.udp.dstPort;
        transition select(hdr.udp.dstPort) {
            DLCP_UDP_PORT: parse_dlcp;
            default: accept;
        }
    }

    state parse_dlcp {
        /* A payload shorter than the header: error.PacketTooShort, dropped in ingress (see the top comment). */
        packet.extract(hdr.dlcp);
        transition accept;
    }
}

/* The IPv4 header checksum covers the options: two calculations, without and with the options header (BMv2
 * computes field lists with varbit fields; only the one whose condition holds runs). */
control DlcpVerifyChecksum(inout headers_t hdr, inout metadata_t meta) {
    apply {
        verify_checksum(hdr.ipv4.isValid() && hdr.ipv4.ihl == 5,
            { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.dscp, hdr.ipv4.ecn, hdr.ipv4.totalLen,
              hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.fragOffset, hdr.ipv4.ttl, hdr.ipv4.protocol,
              hdr.ipv4.srcAddr, hdr.ipv4.dstAddr },
            hdr.ipv4.hdrChecksum, HashAlgorithm.csum16);
        verify_checksum(hdr.ipv4.isValid() && hdr.ipv4_options.isValid(),
            { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.dscp, hdr.ipv4.ecn, hdr.ipv4.totalLen,
              hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.fragOffset, hdr.ipv4.ttl, hdr.ipv4.protocol,
              hdr.ipv4.srcAddr, hdr.ipv4.dstAddr, hdr.ipv4_options.options },
            hdr.ipv4.hdrChecksum, HashAlgorithm.csum16);
    }
}

control DlcpIngress(inout headers_t hdr, inout metadata_t meta, inout standard_metadata_t standard_metadata) {
    counter(8, CounterType.packets) ingress_drops;
    counter(MAX_NHOPS, CounterType.packets_and_bytes) nhop_packets;
    /* Round-robin position per ECMP group, for spraying DLCP packets. */
    register<bit<32>>(MAX_ECMP_GROUPS) spray_position;

    action drop_with(bit<32> reason) {
        ingress_drops.count(reason);
        mark_to_drop(standard_metadata);
    }

    action set_nhop(mac_t dmac, mac_t smac, port_t port, bit<16> nhop_id) {
        standard_metadata.egress_spec = port;
        meta.nhop_dmac = dmac;
        meta.nhop_smac = smac;
        meta.nhop_id = nhop_id;
        meta.routed = 1;
    }

    action set_ecmp(bit<16> group, bit<16> size) {
        meta.ecmp_group = group;
        meta.ecmp_size = size;
    }

    action no_route() {
        meta.routed = 0;
    }

    table ipv4_lpm {
        key = { meta.dst_addr: lpm; }
        actions = { set_nhop; set_ecmp; no_route; }
        default_action = no_route();
        size = 4096;
    }

    /* Members of an equal-cost group, by index 0 .. size-1. */
    table ecmp_nhop {
        key = {
            meta.ecmp_group: exact;
            meta.ecmp_index: exact;
        }
        actions = { set_nhop; no_route; }
        default_action = no_route();
        size = 4096;
    }

    action set_priority(bit<3> prio) {
        standard_metadata.priority = prio;
        meta.prio = prio;
    }

    /* Use the priority the sender wrote in the DLCP header. */
    action trust_dlcp_priority() {
        standard_metadata.priority = hdr.dlcp.priority;
        meta.prio = hdr.dlcp.priority;
    }

    table dlcp_priority {
        key = {
            hdr.dlcp.msg_type: ternary;
            hdr.dlcp.priority: ternary;
            hdr.dlcp.mag_class: ternary;
            hdr.dlcp.layer: range;
        }
        actions = { set_priority; trust_dlcp_priority; }
        default_action = set_priority(0);
        size = 256;
    }

    table dscp_priority {
        key = { hdr.ipv4.dscp: exact; }
        actions = { set_priority; }
        default_action = set_priority(0);
        size = 64;
    }

    apply {
        mark_to_drop(standard_metadata);  /* nothing leaves unless a route says where */
        if (hdr.packet_out.isValid()) {
            bool direct = hdr.packet_out.do_forwarding == 0;
            port_t out_port = hdr.packet_out.egress_port;
            hdr.packet_out.setInvalid();
            if (direct) {
                /* A controller's frame for one port: out as it is, whatever it holds. */
                standard_metadata.egress_spec = out_port;
                return;
            }
        }
        if (standard_metadata.parser_error != error.NoError) {
            drop_with(DROP_PARSER_ERROR);
            return;
        }
        if (standard_metadata.checksum_error == 1) {
            drop_with(DROP_BAD_CHECKSUM);
            return;
        }
        if (!hdr.ipv4.isValid() && !hdr.arp.isValid()) {
            drop_with(DROP_NO_ROUTE);
            return;
        }
        if (hdr.ipv4.isValid() && hdr.ipv4.ttl <= 1) {
            drop_with(DROP_TTL_EXPIRED);
            return;
        }

        ipv4_lpm.apply();
        if (meta.ecmp_size != 0) {
            bit<8> mode;
            lb_mode.read(mode, 0);
            if (hdr.dlcp.isValid() && mode == LB_SPRAY) {
                /* Per-packet spraying: the receiver places payloads by offset, so reordering is harmless. */
                bit<32> position;
                spray_position.read(position, (bit<32>)meta.ecmp_group);
                spray_position.write((bit<32>)meta.ecmp_group, position + 1);
                hash(meta.ecmp_index, HashAlgorithm.identity, (bit<16>)0, { position }, meta.ecmp_size);
            } else {
                /* Per-flow: a TCP flow stays on one path. CRC-32 of the 5-tuple, then its upper 16 bits modulo the
                 * group size: a CRC is linear, and its low bits alone (what hash(..., size) keeps) leave members
                 * unused when flows differ only in a few low bits, e.g. consecutive source ports under crc16. */
                bit<32> flow_hash;
                hash(flow_hash, HashAlgorithm.crc32, (bit<32>)0,
                     { meta.dst_addr, hdr.ipv4.srcAddr, hdr.ipv4.protocol, meta.l4_sport, meta.l4_dport },
                     (bit<33>)0x100000000);
                hash(meta.ecmp_index, HashAlgorithm.identity, (bit<16>)0, { flow_hash[31:16] }, meta.ecmp_size);
            }
            ecmp_nhop.apply();
        }
        if (meta.routed == 0) {
            drop_with(DROP_NO_ROUTE);
            return;
        }
        /* Never back out of the port it came in on (hosts hang off one port each; this also keeps passed-through
         * ARP from being reflected). */
        if (standard_metadata.egress_spec == standard_metadata.ingress_port) {
            drop_with(DROP_HAIRPIN);
            return;
        }
        nhop_packets.count((bit<32>)meta.nhop_id);

        if (hdr.dlcp.isValid()) {
            dlcp_priority.apply();
        } else if (hdr.ipv4.isValid()) {
            dscp_priority.apply();
        }

        if (hdr.ipv4.isValid()) {
            hdr.ethernet.dstAddr = meta.nhop_dmac;
            hdr.ethernet.srcAddr = meta.nhop_smac;
            hdr.ipv4.ttl = hdr.ipv4.ttl - 1;
        }

        /* Early drop of eligible packets, before they take queue space, from the queue's estimated depth. */
        bit<32> slot = ((bit<32>)standard_metadata.egress_spec << 3) | (bit<32>)meta.prio;
        bit<19> depth;
        queue_depth.read(depth, slot);
        if (hdr.dlcp.isValid() && hdr.dlcp.msg_type == DLCP_MSG_DATA
                && (hdr.dlcp.flags & DLCP_FLAG_DROP_ELIGIBLE) != 0) {
            bit<19> threshold;
            drop_threshold.read(threshold, slot);
            bit<19> class_at;
            class_drop_threshold.read(class_at, (bit<32>)hdr.dlcp.mag_class);
            if (class_at != 0 && (threshold == 0 || class_at < threshold)) {
                threshold = class_at;
            }
            if (threshold != 0 && depth >= threshold) {
                eligible_drops.count(slot);
                drop_with(DROP_EARLY_ELIGIBLE);
                return;
            }
        }
        /* The packet goes to the queue: count it in the estimate until egress next publishes the exact depth.
         * Without this, a queue that strict priority starves (never dequeued, so never published) would look
         * empty to ingress and fill up with eligible packets. */
        if (depth != 0x7ffff) {
            queue_depth.write(slot, depth + 1);
        }
    }
}

control DlcpEgress(inout headers_t hdr, inout metadata_t meta, inout standard_metadata_t standard_metadata) {
    counter(PORT_PRIO_SLOTS, CounterType.packets_and_bytes) port_forwarded;
    counter(PORT_PRIO_SLOTS, CounterType.packets) ecn_marks;

    apply {
        if (standard_metadata.egress_port == CPU_PORT) {
            /* To the controller: the target turns this header into the PacketIn's metadata. */
            hdr.packet_in.setValid();
            hdr.packet_in.ingress_port = standard_metadata.ingress_port;
            hdr.packet_in._pad = 0;
        }
        bit<32> slot = ((bit<32>)standard_metadata.egress_port << 3) | (bit<32>)meta.prio;
        queue_depth.write(slot, standard_metadata.deq_qdepth);
        bit<19> drop_at;
        bit<19> mark_at;
        drop_threshold.read(drop_at, slot);
        mark_threshold.read(mark_at, slot);

        if (hdr.dlcp.isValid() && hdr.dlcp.msg_type == DLCP_MSG_DATA
                && (hdr.dlcp.flags & DLCP_FLAG_DROP_ELIGIBLE) != 0) {
            bit<19> class_at;
            class_drop_threshold.read(class_at, (bit<32>)hdr.dlcp.mag_class);
            if (class_at != 0 && (drop_at == 0 || class_at < drop_at)) {
                drop_at = class_at;
            }
            if (drop_at != 0 && standard_metadata.enq_qdepth >= drop_at) {
                eligible_drops.count(slot);
                mark_to_drop(standard_metadata);
                return;
            }
        } else if (hdr.ipv4.isValid() && hdr.ipv4.ecn != ECN_NOT_ECT && hdr.ipv4.ecn != ECN_CE
                   && mark_at != 0 && standard_metadata.enq_qdepth >= mark_at) {
            hdr.ipv4.ecn = ECN_CE;
            ecn_marks.count(slot);
        }
        port_forwarded.count(slot);
    }
}

control DlcpComputeChecksum(inout headers_t hdr, inout metadata_t meta) {
    apply {
        update_checksum(hdr.ipv4.isValid() && hdr.ipv4.ihl == 5,
            { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.dscp, hdr.ipv4.ecn, hdr.ipv4.totalLen,
              hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.fragOffset, hdr.ipv4.ttl, hdr.ipv4.protocol,
              hdr.ipv4.srcAddr, hdr.ipv4.dstAddr },
            hdr.ipv4.hdrChecksum, HashAlgorithm.csum16);
        update_checksum(hdr.ipv4.isValid() && hdr.ipv4_options.isValid(),
            { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.dscp, hdr.ipv4.ecn, hdr.ipv4.totalLen,
              hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.fragOffset, hdr.ipv4.ttl, hdr.ipv4.protocol,
              hdr.ipv4.srcAddr, hdr.ipv4.dstAddr, hdr.ipv4_options.options },
            hdr.ipv4.hdrChecksum, HashAlgorithm.csum16);
    }
}

control DlcpDeparser(packet_out packet, in headers_t hdr) {
    apply {
        packet.emit(hdr.packet_in);
        packet.emit(hdr.ethernet);
        packet.emit(hdr.arp);
        packet.emit(hdr.ipv4);
        packet.emit(hdr.ipv4_options);
        packet.emit(hdr.tcp);
        packet.emit(hdr.udp);
        packet.emit(hdr.dlcp);
    }
}

V1Switch(DlcpParser(), DlcpVerifyChecksum(), DlcpIngress(), DlcpEgress(), DlcpComputeChecksum(),
         DlcpDeparser()) main;
