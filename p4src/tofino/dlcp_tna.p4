/* dlcp_tna.p4: the Tofino twin of p4src/dlcp.p4, one source for both chips: Tofino 1 (p4c-barefoot --target tofino
 * --arch tna: tna.p4) and Tofino 2 (--target tofino2 --arch t2na: t2na.p4), chosen by __TARGET_TOFINO__, which the
 * compiler's --target sets. Compiled by p4c's open Tofino back end (scripts/build-tofino-backend.sh,
 * scripts/tofino_resources.py); docs/p4-tofino.md says where and why it differs from dlcp.p4.
 *
 * The same as dlcp.p4:
 * - headers (dlcp_h from include/dlcp_headers.p4; the others declared as in dlcp.p4: tests/test_wire.py checks
 *   both) and parse graph: Ethernet -> ARP | IPv4 [-> options] -> TCP | UDP [-> DLCP on UDP port 19400], packet_out
 *   on CPU_PORT, a truncated DLCP header or IPv4 header dropped in ingress as a parser error;
 * - tables, actions, keys and their P4Runtime names (DlcpIngress.ipv4_lpm, ecmp_nhop, dlcp_priority, dscp_priority;
 *   set_nhop, set_ecmp, no_route, set_priority, trust_dlcp_priority), the controller headers, the registers the
 *   controller writes (drop_threshold, mark_threshold, class_drop_threshold, lb_mode) and the counters
 *   (ingress_drops, nhop_packets, eligible_drops, port_forwarded, ecn_marks), indexed the same way;
 * - forwarding: LPM to a next hop or an equal-cost group, MAC rewrite, TTL - 1, IPv4 checksum (options included),
 *   no hairpin; DLCP sprayed per packet round-robin, other traffic hashed per flow (CRC-32 of the 5-tuple, upper
 *   16 bits); the queue from the DLCP fields or DSCP; eligible DLCP data dropped and other ECT packets CE-marked
 *   when their queue depth at enqueue is at or above the (port, queue) or magnitude-class threshold.
 * Different, because TNA makes it so (docs/p4-tofino.md):
 * - the queue is ig_tm_md.qid; strict priority between a port's queues is TM configuration;
 * - queue depths (eg_intr_md.enq_qdepth) are in TM cells, not packets, and are seen in egress only: the
 *   thresholds hold cells, and there is no ingress estimate (queue_depth register): the early drop of eligible
 *   packets is the TM's, by colour: eligible DLCP data is queued RED, and a queue's red drop limit drops it at
 *   admission before it takes buffer;
 * - the thresholds and eligible_drops live in DlcpEgress, the only gress that uses them (the early drops are the
 *   TM's, counted by the TM);
 * - no run-time modulo: a sprayed group's round-robin position wraps inside its RegisterAction, and the per-flow
 *   member is chosen by the const table flow_index (groups of up to 16 members);
 * - registers are 8, 16 or 32 bits wide (bit<32> thresholds, bit<16> spray positions);
 * - ingress metadata reaches egress only in a bridged header (ingress port, queue).
 */
#include <core.p4>
#if __TARGET_TOFINO__ == 2
#include <t2na.p4>
#else
#include <tna.p4>
#endif
#include "../include/dlcp_headers.p4"

const bit<16> ETHERTYPE_IPV4 = 0x0800;
const bit<16> ETHERTYPE_ARP  = 0x0806;
const bit<8>  PROTO_TCP = 6;
const bit<8>  PROTO_UDP = 17;
const bit<2>  ECN_NOT_ECT = 0;
const bit<2>  ECN_CE = 3;
const bit<8>  LB_SPRAY = 0;

#define NUM_PRIOS 8
#define NUM_MAG_CLASSES 8
#define PORT_PRIO_SLOTS 4096
#define MAX_NHOPS 1024
#define MAX_ECMP_GROUPS 1024

/* The switch's PCIe CPU port (the SDE's bf_pcie_cpu_port_get(): 64 on a 2-pipe Tofino 1, 192 on a 4-pipe one, 0
 * on Tofino 2); a switch with another CPU port compiles this program with -DCPU_PORT=N. */
#ifndef CPU_PORT
#if __TARGET_TOFINO__ == 2
#define CPU_PORT 0
#else
#define CPU_PORT 64
#endif
#endif

/* Reasons counted in ingress_drops (as in dlcp.p4; reason 4, the early drop of eligible packets, is the TM's here). */
const bit<3> DROP_PARSER_ERROR = 0;
const bit<3> DROP_BAD_CHECKSUM = 1;
const bit<3> DROP_TTL_EXPIRED  = 2;
const bit<3> DROP_NO_ROUTE     = 3;
const bit<3> DROP_HAIRPIN      = 5;

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

/* IPv4 options, (ihl - 5) 32-bit words, carried through untouched (the back end turns the varbit into one parser
 * state per length). */
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

/* PacketOut metadata, in front of a frame the controller sends (as in dlcp.p4). */
@controller_header("packet_out")
header packet_out_h {
    port_t  egress_port;
    bit<1>  do_forwarding;
    bit<6>  _pad;
}

/* PacketIn metadata, in front of a frame that leaves on the CPU port (as in dlcp.p4). */
@controller_header("packet_in")
header packet_in_h {
    port_t  ingress_port;
    @padding bit<7> _pad;
}

/* What egress needs from ingress (TNA passes no metadata between the gresses): the port the frame came in on (for
 * packet_in) and its queue (for the per-(port, queue) thresholds and counters). Emitted first by the ingress
 * deparser, extracted first by the egress parser, never sent on a wire. */
header bridge_h {
    @padding bit<7> _pad0;
    port_t  ingress_port;
    @padding bit<5> _pad1;
    bit<3>  prio;
}

struct headers_t {
    bridge_h       bridge;
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

@pa_auto_init_metadata
struct metadata_t {
    ip4_t   dst_addr;     /* routing key: IPv4 destination, or ARP target protocol address */
    bit<16> l4_sport;
    bit<16> l4_dport;
    bit<3>  prio;         /* chosen queue, bridged to egress */
    bit<16> ecmp_group;
    bit<16> ecmp_size;    /* 0: not an ECMP route */
    bit<16> ecmp_last;    /* ecmp_size - 1: where a group's round-robin position wraps */
    bit<16> ecmp_index;
    bit<32> flow_hash;
    mac_t   nhop_dmac;
    mac_t   nhop_smac;
    bit<16> nhop_id;
    bit<1>  routed;
    bit<1>  checksum_err;
    bit<1>  drop;         /* ingress: drop at the end of ingress, counted in ingress_drops[drop_reason] */
    bit<3>  drop_reason;
    bit<1>  queue_hit;    /* egress: queue depth at or above the (port, queue) threshold */
    bit<1>  class_hit;    /* egress: queue depth at or above the magnitude class's threshold */
}

/* Ethernet onwards, the same graph in both gresses. The IPv4 header checksum (options included) is verified here;
 * ingress drops a packet whose checksum is wrong. IHL < 5 ends parsing after the IPv4 header (ingress drops the
 * packet as a parser error, as dlcp.p4's verify() does). */
parser DlcpHeaderParser(packet_in pkt, inout headers_t hdr, inout metadata_t meta) {
    Checksum() ipv4_checksum;

    state start {
        pkt.extract(hdr.ethernet);
        transition select(hdr.ethernet.etherType) {
            ETHERTYPE_IPV4: parse_ipv4;
            ETHERTYPE_ARP: parse_arp;
            default: accept;
        }
    }

    state parse_arp {
        pkt.extract(hdr.arp);
        meta.dst_addr = hdr.arp.tpa;
        transition accept;
    }

    state parse_ipv4 {
        pkt.extract(hdr.ipv4);
        ipv4_checksum.add(hdr.ipv4);
        meta.dst_addr = hdr.ipv4.dstAddr;
        transition select(hdr.ipv4.ihl) {
            5: parse_ipv4_no_options;
            0 &&& 0xc: accept;   /* 0..3 */
            4: accept;
            default: parse_ipv4_options;
        }
    }

    state parse_ipv4_no_options {
        meta.checksum_err = (bit<1>)ipv4_checksum.verify();
        transition parse_l4;
    }

    state parse_ipv4_options {
        pkt.extract(hdr.ipv4_options, (bit<32>)(((bit<16>)hdr.ipv4.ihl - 5) * 32));
        ipv4_checksum.add({ hdr.ipv4_options.options });
        meta.checksum_err = (bit<1>)ipv4_checksum.verify();
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
        pkt.extract(hdr.tcp);
        meta.l4_sport = hdr.tcp.srcPort;
        meta.l4_dport = hdr.tcp.dstPort;
        transition accept;
    }

    state parse_udp {
        pkt.extract(hdr.udp);
        meta.l4_sport = hdr.udp.srcPort;
        meta.l4_dport = hdr.udp.dstPort;
        transition select(hdr.udp.dstPort) {
            DLCP_UDP_PORT: parse_dlcp;
            default: accept;
        }
    }

    state parse_dlcp {
        /* A payload shorter than the header is a parser error (PARSER_ERROR_PARTIAL_HDR), dropped in ingress. */
        pkt.extract(hdr.dlcp);
        transition accept;
    }
}

parser DlcpIngressParser(packet_in pkt, out headers_t hdr, out metadata_t meta,
                         out ingress_intrinsic_metadata_t ig_intr_md) {
    DlcpHeaderParser() headers;

    state start {
        pkt.extract(ig_intr_md);
        pkt.advance(PORT_METADATA_SIZE);
        transition select(ig_intr_md.ingress_port) {
            CPU_PORT: parse_packet_out;
            default: parse_headers;
        }
    }

    state parse_packet_out {
        pkt.extract(hdr.packet_out);
        transition parse_headers;
    }

    state parse_headers {
        headers.apply(pkt, hdr, meta);
        transition accept;
    }
}

control DlcpIngress(inout headers_t hdr, inout metadata_t meta,
                    in ingress_intrinsic_metadata_t ig_intr_md,
                    in ingress_intrinsic_metadata_from_parser_t ig_prsr_md,
                    inout ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md,
                    inout ingress_intrinsic_metadata_for_tm_t ig_tm_md) {
    Counter<bit<32>, bit<3>>(8, CounterType_t.PACKETS) ingress_drops;
    Counter<bit<32>, bit<10>>(MAX_NHOPS, CounterType_t.PACKETS_AND_BYTES) nhop_packets;

    /* Load-balancing mode, index 0, written by the controller: 0 (default) sprays DLCP per packet and hashes other
     * traffic per flow; anything else hashes everything per flow. */
    Register<bit<8>, bit<1>>(1) lb_mode;
    RegisterAction<bit<8>, bit<1>, bit<8>>(lb_mode) read_lb_mode = {
        void apply(inout bit<8> value, out bit<8> rv) {
            rv = value;
        }
    };

    /* Round-robin position of each ECMP group, for spraying DLCP packets: the RegisterAction advances it and wraps
     * it at the group's size, so the position is the member index (no modulo needed). A position beyond a group
     * that shrank wraps to 0 at once. */
    Register<bit<16>, bit<10>>(MAX_ECMP_GROUPS) spray_position;
    RegisterAction<bit<16>, bit<10>, bit<16>>(spray_position) spray_next = {
        void apply(inout bit<16> value, out bit<16> index) {
            if (value >= meta.ecmp_last) {
                value = 0;
            } else {
                value = value + 1;
            }
            index = value;
        }
    };

    Hash<bit<32>>(HashAlgorithm_t.CRC32) flow_crc;

    action drop_with(bit<3> reason) {
        meta.drop = 1;
        meta.drop_reason = reason;
    }

    action set_nhop(mac_t dmac, mac_t smac, port_t port, bit<16> nhop_id) {
        ig_tm_md.ucast_egress_port = port;
        meta.nhop_dmac = dmac;
        meta.nhop_smac = smac;
        meta.nhop_id = nhop_id;
        meta.routed = 1;
    }

    action set_ecmp(bit<16> group, bit<16> size) {
        meta.ecmp_group = group;
        meta.ecmp_size = size;
        meta.ecmp_last = size - 1;
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

    /* Per-flow member: the upper 16 bits of the flow's CRC-32, h, pick member floor(h * size / 65536), one range of
     * h per member (Tofino has no run-time modulo or multiplication). Const entries for groups of 1..16 members
     * (flow_index_entries.p4, generated by gen_flow_index.py); a larger group's flows all take member 0. */
    action set_flow_index(bit<16> index) {
        meta.ecmp_index = index;
    }

    table flow_index {
        key = {
            meta.ecmp_size: exact;
            meta.flow_hash[31:16]: range;
        }
        actions = { set_flow_index; }
        default_action = set_flow_index(0);
        size = 160;
        const entries = {
#include "flow_index_entries.p4"
        }
    }

    /* The queue is set once, from meta.prio, after the priority tables (ig_tm_md.qid = meta.prio below): copying a
     * DLCP header field straight into qid ties the header's PHV packing to the intrinsic metadata's. */
    action set_priority(bit<3> prio) {
        meta.prio = prio;
    }

    /* Use the priority the sender wrote in the DLCP header. */
    action trust_dlcp_priority() {
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
        bool direct = false;
        if (hdr.packet_out.isValid()) {
            if (hdr.packet_out.do_forwarding == 0) {
                /* A controller's frame for one port: out as it is, whatever it holds, from queue 0. */
                direct = true;
                ig_tm_md.ucast_egress_port = hdr.packet_out.egress_port;
                meta.prio = 0;
            }
            hdr.packet_out.setInvalid();
        }
        if (!direct) {
            if (ig_prsr_md.parser_err != 0
                    || (hdr.ipv4.isValid() && (hdr.ipv4.version != 4 || hdr.ipv4.ihl < 5))) {
                drop_with(DROP_PARSER_ERROR);
            } else if (meta.checksum_err == 1) {
                drop_with(DROP_BAD_CHECKSUM);
            } else if (!hdr.ipv4.isValid() && !hdr.arp.isValid()) {
                drop_with(DROP_NO_ROUTE);
            } else if (hdr.ipv4.isValid() && hdr.ipv4.ttl <= 1) {
                drop_with(DROP_TTL_EXPIRED);
            } else {
                ipv4_lpm.apply();
                if (meta.ecmp_size != 0) {
                    bit<8> mode = read_lb_mode.execute(0);
                    if (hdr.dlcp.isValid() && mode == LB_SPRAY) {
                        /* Per-packet spraying: the receiver places payloads by offset, so reordering is harmless. */
                        meta.ecmp_index = spray_next.execute((bit<10>)meta.ecmp_group);
                    } else {
                        /* Per flow: a TCP flow stays on one path. */
                        meta.flow_hash = flow_crc.get({ meta.dst_addr, hdr.ipv4.srcAddr, hdr.ipv4.protocol,
                                                        meta.l4_sport, meta.l4_dport });
                        flow_index.apply();
                    }
                    ecmp_nhop.apply();
                }
                if (meta.routed == 0) {
                    drop_with(DROP_NO_ROUTE);
                } else if (ig_tm_md.ucast_egress_port == ig_intr_md.ingress_port) {
                    /* Never back out of the port it came in on. */
                    drop_with(DROP_HAIRPIN);
                } else {
                    nhop_packets.count((bit<10>)meta.nhop_id);
                    if (hdr.dlcp.isValid()) {
                        dlcp_priority.apply();
                        if (hdr.dlcp.msg_type == DLCP_MSG_DATA
                                && (hdr.dlcp.flags & DLCP_FLAG_DROP_ELIGIBLE) != 0) {
                            /* Eligible: queued RED, so the queue's red drop limit (TM configuration) drops it at
                             * admission, before it takes buffer; egress checks the exact thresholds. */
                            ig_tm_md.packet_color = (bit<2>)(bit<8>)MeterColor_t.RED;
                        }
                    } else if (hdr.ipv4.isValid()) {
                        dscp_priority.apply();
                    }
                    if (hdr.ipv4.isValid()) {
                        hdr.ethernet.dstAddr = meta.nhop_dmac;
                        hdr.ethernet.srcAddr = meta.nhop_smac;
                        hdr.ipv4.ttl = hdr.ipv4.ttl - 1;
                    }
                }
            }
        }
        ig_tm_md.qid = (QueueId_t)meta.prio;
        if (meta.drop == 1) {
            ingress_drops.count(meta.drop_reason);
            ig_dprsr_md.drop_ctl = 1;
        } else {
            hdr.bridge.setValid();
            hdr.bridge.ingress_port = ig_intr_md.ingress_port;
            hdr.bridge.prio = meta.prio;
        }
    }
}

control DlcpIngressDeparser(packet_out pkt, inout headers_t hdr, in metadata_t meta,
                            in ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md) {
    apply {
        pkt.emit(hdr.bridge);
        pkt.emit(hdr.ethernet);
        pkt.emit(hdr.arp);
        pkt.emit(hdr.ipv4);
        pkt.emit(hdr.ipv4_options);
        pkt.emit(hdr.tcp);
        pkt.emit(hdr.udp);
        pkt.emit(hdr.dlcp);
    }
}

parser DlcpEgressParser(packet_in pkt, out headers_t hdr, out metadata_t meta,
                        out egress_intrinsic_metadata_t eg_intr_md) {
    DlcpHeaderParser() headers;

    state start {
        pkt.extract(eg_intr_md);
        pkt.extract(hdr.bridge);
        headers.apply(pkt, hdr, meta);
        transition accept;
    }
}

control DlcpEgress(inout headers_t hdr, inout metadata_t meta,
                   in egress_intrinsic_metadata_t eg_intr_md,
                   in egress_intrinsic_metadata_from_parser_t eg_prsr_md,
                   inout egress_intrinsic_metadata_for_deparser_t eg_dprsr_md,
                   inout egress_intrinsic_metadata_for_output_port_t eg_oport_md) {
    Counter<bit<32>, bit<12>>(PORT_PRIO_SLOTS, CounterType_t.PACKETS_AND_BYTES) port_forwarded;
    Counter<bit<32>, bit<12>>(PORT_PRIO_SLOTS, CounterType_t.PACKETS) ecn_marks;
    Counter<bit<32>, bit<12>>(PORT_PRIO_SLOTS, CounterType_t.PACKETS) eligible_drops;

    /* Thresholds in TM cells (eg_intr_md.enq_qdepth's unit), written by the controller, 0 = off; index: slot =
     * egress port * 8 + queue. Each RegisterAction answers whether the packet's enqueue depth is at or above the
     * threshold, so one stateful ALU does the compare. An eligible packet is dropped when its depth reaches its
     * queue's threshold or its magnitude class's (the smaller of the two where both are set, as in dlcp.p4). */
    Register<bit<32>, bit<12>>(PORT_PRIO_SLOTS) drop_threshold;
    Register<bit<32>, bit<12>>(PORT_PRIO_SLOTS) mark_threshold;
    Register<bit<32>, bit<3>>(NUM_MAG_CLASSES) class_drop_threshold;

    RegisterAction<bit<32>, bit<12>, bit<1>>(drop_threshold) queue_drop_hit = {
        void apply(inout bit<32> value, out bit<1> hit) {
            if (value != 0 && value <= (bit<32>)eg_intr_md.enq_qdepth) {
                hit = 1;
            } else {
                hit = 0;
            }
        }
    };
    RegisterAction<bit<32>, bit<3>, bit<1>>(class_drop_threshold) class_drop_hit = {
        void apply(inout bit<32> value, out bit<1> hit) {
            if (value != 0 && value <= (bit<32>)eg_intr_md.enq_qdepth) {
                hit = 1;
            } else {
                hit = 0;
            }
        }
    };
    RegisterAction<bit<32>, bit<12>, bit<1>>(mark_threshold) mark_hit = {
        void apply(inout bit<32> value, out bit<1> hit) {
            if (value != 0 && value <= (bit<32>)eg_intr_md.enq_qdepth) {
                hit = 1;
            } else {
                hit = 0;
            }
        }
    };

    apply {
        bit<12> slot = eg_intr_md.egress_port ++ hdr.bridge.prio;
        if (eg_intr_md.egress_port == CPU_PORT) {
            /* To the controller: the target turns this header into the PacketIn's metadata. */
            hdr.packet_in.setValid();
            hdr.packet_in.ingress_port = hdr.bridge.ingress_port;
        }
        bool dropped = false;
        if (hdr.dlcp.isValid() && hdr.dlcp.msg_type == DLCP_MSG_DATA
                && (hdr.dlcp.flags & DLCP_FLAG_DROP_ELIGIBLE) != 0) {
            meta.queue_hit = queue_drop_hit.execute(slot);
            meta.class_hit = class_drop_hit.execute(hdr.dlcp.mag_class);
            if (meta.queue_hit == 1 || meta.class_hit == 1) {
                dropped = true;
                eligible_drops.count(slot);
            }
        } else if (hdr.ipv4.isValid() && hdr.ipv4.ecn != ECN_NOT_ECT && hdr.ipv4.ecn != ECN_CE) {
            if (mark_hit.execute(slot) == 1) {
                hdr.ipv4.ecn = ECN_CE;
                ecn_marks.count(slot);
            }
        }
        /* drop_ctl is set in an action of its own, not beside the eligible_drops count: a counter indexed by
         * slot needs the hash distribution unit, which only a table's hit path reaches, and a keyless table that
         * also needs action data runs on the miss path. Tofino 2's PHV allocation puts `dropped` and drop_ctl in
         * one mocha container, where the two constants together (0b1001) exceed what an instruction can hold
         * (-4..7 on Tofino 2, -8..7 on Tofino 1) and would become action data (docs/p4-tofino.md). */
        if (dropped) {
            eg_dprsr_md.drop_ctl = 1;
        } else {
            port_forwarded.count(slot);
        }
    }
}

control DlcpEgressDeparser(packet_out pkt, inout headers_t hdr, in metadata_t meta,
                           in egress_intrinsic_metadata_for_deparser_t eg_dprsr_md) {
    Checksum() ipv4_checksum;

    apply {
        /* After the TTL decrement (ingress) and any ECN mark (egress); the options count only when present. */
        hdr.ipv4.hdrChecksum = ipv4_checksum.update({
            hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.dscp, hdr.ipv4.ecn, hdr.ipv4.totalLen,
            hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.fragOffset, hdr.ipv4.ttl, hdr.ipv4.protocol,
            hdr.ipv4.srcAddr, hdr.ipv4.dstAddr, hdr.ipv4_options.options });
        pkt.emit(hdr.packet_in);
        pkt.emit(hdr.ethernet);
        pkt.emit(hdr.arp);
        pkt.emit(hdr.ipv4);
        pkt.emit(hdr.ipv4_options);
        pkt.emit(hdr.tcp);
        pkt.emit(hdr.udp);
        pkt.emit(hdr.dlcp);
    }
}

Pipeline(DlcpIngressParser(), DlcpIngress(), DlcpIngressDeparser(),
         DlcpEgressParser(), DlcpEgress(), DlcpEgressDeparser()) pipe;

Switch(pipe) main;
