/* The DLCP header, as defined by host/wire.py (FIELDS) and docs/wire-format.md.
 * tests/test_wire.py checks that this declaration and the Python definition have the same field names, widths
 * and order, and the same constants. Change both together. */
#ifndef DLCP_HEADERS_P4
#define DLCP_HEADERS_P4

/* UDP destination port that identifies DLCP datagrams (host.wire.UDP_PORT). */
const bit<16> DLCP_UDP_PORT = 19400;
/* Header version (host.wire.VERSION). */
const bit<4>  DLCP_VERSION = 1;

/* msg_type values (host.wire.MsgType). */
const bit<4>  DLCP_MSG_DATA    = 0;
const bit<4>  DLCP_MSG_ACK     = 1;
const bit<4>  DLCP_MSG_NACK    = 2;
const bit<4>  DLCP_MSG_CONTROL = 3;

/* flags bits (host.wire.Flag). */
const bit<8>  DLCP_FLAG_DROP_ELIGIBLE = 0x01;
const bit<8>  DLCP_FLAG_ECN_ECHO      = 0x02;
const bit<8>  DLCP_FLAG_RETRANSMIT    = 0x04;
const bit<8>  DLCP_FLAG_LAST          = 0x08;

header dlcp_h {
    bit<4>  version;
    bit<4>  msg_type;
    bit<8>  flags;
    bit<3>  priority;
    bit<3>  mag_class;
    bit<2>  reserved;
    bit<8>  dtype;
    bit<16> layer;
    bit<16> rank;
    bit<32> job_id;
    bit<32> transfer_id;
    bit<32> eligible;
    bit<32> seq;
    bit<32> total;
    bit<32> offset;
    bit<16> count;
    bit<16> nonce;
    bit<32> transfer_hi;  /* high 32 bits of the 64-bit transfer id */
    bit<64> tag;      /* keyed MAC of the datagram (host/transport/_tag.h); the switch forwards it untouched */
}

#endif  /* DLCP_HEADERS_P4 */
