/* Shared headers of the test programs. */
#ifndef _TEST_HEADERS_P4_
#define _TEST_HEADERS_P4_
#define ETHERTYPE_IPV4 0x0800
#define IPPROTO_TCP 6
#define IPPROTO_UDP 17

typedef bit<48> mac_addr_t;
typedef bit<32> ip4_addr_t;

header ethernet_t {
    mac_addr_t dstAddr;
    mac_addr_t srcAddr;
    bit<16>    etherType;
}

header ipv4_t {
    bit<4>     version;
    bit<4>     ihl;
    bit<6>     dscp;
    bit<2>     ecn;
    bit<16>    totalLen;
    bit<16>    identification;
    bit<3>     flags;
    bit<13>    fragOffset;
    bit<8>     ttl;
    bit<8>     protocol;
    bit<16>    hdrChecksum;
    ip4_addr_t srcAddr;
    ip4_addr_t dstAddr;
}

header udp_t {
    bit<16> srcPort;
    bit<16> dstPort;
    bit<16> length;
    bit<16> checksum;
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
#endif
