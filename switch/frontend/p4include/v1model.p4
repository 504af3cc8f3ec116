/* v1model.p4 of the dlcp embedded P4 target.
 * Written for this project from the v1model architecture description (BMv2 simple_switch
 * documentation and the P4-16 specification appendix); names and signatures match the ones
 * programs use with p4c-bm2-ss.  V1MODEL_VERSION selects the register/counter index type as p4c does. */
#ifndef _V1_MODEL_P4_
#define _V1_MODEL_P4_

#include "core.p4"

#ifndef V1MODEL_VERSION
#define V1MODEL_VERSION 20180101
#endif

match_kind {
    range,
    optional,
    selector
}

const bit<32> __v1model_version = V1MODEL_VERSION;

typedef bit<9>  PortId_t;
typedef bit<48> EgressInstance_t;
typedef bit<16> MulticastGroup_t;
typedef bit<16> ReplicationId_t;

@metadata @name("standard_metadata")
struct standard_metadata_t {
    PortId_t ingress_port;
    PortId_t egress_spec;
    PortId_t egress_port;
    bit<32>  instance_type;
    bit<32>  packet_length;
    bit<32>  enq_timestamp;
    bit<19>  enq_qdepth;
    bit<32>  deq_timedelta;
    bit<19>  deq_qdepth;
    bit<48>  ingress_global_timestamp;
    bit<48>  egress_global_timestamp;
    bit<16>  mcast_grp;
    bit<16>  egress_rid;
    bit<1>   checksum_error;
    error    parser_error;
    bit<3>   priority;
}

enum CounterType {
    packets,
    bytes,
    packets_and_bytes
}

enum MeterType {
    packets,
    bytes
}

extern counter
#if V1MODEL_VERSION >= 20200408
<I>
#endif
{
#if V1MODEL_VERSION >= 20200408
    counter(bit<32> size, CounterType type);
    void count(in I index);
#else
    counter(bit<32> size, CounterType type);
    void count(in bit<32> index);
#endif
}

extern direct_counter {
    direct_counter(CounterType type);
    void count();
}

#define V1MODEL_METER_COLOR_GREEN  0
#define V1MODEL_METER_COLOR_YELLOW 1
#define V1MODEL_METER_COLOR_RED    2

extern meter
#if V1MODEL_VERSION >= 20200408
<I>
#endif
{
#if V1MODEL_VERSION >= 20200408
    meter(bit<32> size, MeterType type);
    void execute_meter<T>(in I index, out T result);
#else
    meter(bit<32> size, MeterType type);
    void execute_meter<T>(in bit<32> index, out T result);
#endif
}

extern direct_meter<T> {
    direct_meter(MeterType type);
    void read(out T result);
}

#if V1MODEL_VERSION >= 20200408
extern register<T, I>
#else
extern register<T>
#endif
{
    register(bit<32> size);
#if V1MODEL_VERSION >= 20200408
    void read(out T result, in I index);
    void write(in I index, in T value);
#else
    void read(out T result, in bit<32> index);
    void write(in bit<32> index, in T value);
#endif
}

extern action_profile {
    action_profile(bit<32> size);
}

extern void random<T>(out T result, in T lo, in T hi);

extern void digest<T>(in bit<32> receiver, in T data);

enum HashAlgorithm {
    crc32,
    crc32_custom,
    crc16,
    crc16_custom,
    random,
    identity,
    csum16,
    xor16
}

extern void mark_to_drop(inout standard_metadata_t standard_metadata);

extern void hash<O, T, D, M>(out O result, in HashAlgorithm algo, in T base, in D data, in M max);

extern action_selector {
    action_selector(HashAlgorithm algorithm, bit<32> size, bit<32> outputWidth);
}

enum CloneType {
    I2E,
    E2E
}

extern void verify_checksum<T, O>(in bool condition, in T data, in O checksum, HashAlgorithm algo);
extern void update_checksum<T, O>(in bool condition, in T data, inout O checksum, HashAlgorithm algo);
extern void verify_checksum_with_payload<T, O>(in bool condition, in T data, in O checksum, HashAlgorithm algo);
extern void update_checksum_with_payload<T, O>(in bool condition, in T data, inout O checksum, HashAlgorithm algo);

extern void resubmit<T>(in T data);
extern void resubmit_preserving_field_list(bit<8> index);
extern void recirculate<T>(in T data);
extern void recirculate_preserving_field_list(bit<8> index);
extern void clone(in CloneType type, in bit<32> session);
extern void clone3<T>(in CloneType type, in bit<32> session, in T data);
extern void clone_preserving_field_list(in CloneType type, in bit<32> session, bit<8> index);
extern void truncate(in bit<32> length);
extern void assert(in bool check);
extern void assume(in bool check);
extern void log_msg(string msg);
extern void log_msg<T>(string msg, in T data);

parser Parser<H, M>(packet_in b,
                    out H parsedHdr,
                    inout M meta,
                    inout standard_metadata_t standard_metadata);

control VerifyChecksum<H, M>(inout H hdr, inout M meta);

@pipeline
control Ingress<H, M>(inout H hdr, inout M meta, inout standard_metadata_t standard_metadata);

@pipeline
control Egress<H, M>(inout H hdr, inout M meta, inout standard_metadata_t standard_metadata);

control ComputeChecksum<H, M>(inout H hdr, inout M meta);

@deparser
control Deparser<H>(packet_out b, in H hdr);

package V1Switch<H, M>(Parser<H, M> p,
                       VerifyChecksum<H, M> vr,
                       Ingress<H, M> ig,
                       Egress<H, M> eg,
                       ComputeChecksum<H, M> ck,
                       Deparser<H> dep);

#endif
