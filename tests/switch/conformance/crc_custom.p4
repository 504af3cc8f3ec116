/* v1model HashAlgorithm.crc16_custom / crc32_custom (BMv2 simple_switch): every place that names one is a
 * calculation of its own, whose polynomial, initial remainder, final xor value and reflections the operator
 * sets at run time (BMv2: set_crc16_parameters / set_crc32_parameters; defaults: the crc16 / crc32 CRCs).
 * Calculations, in source order: the action selector 'sel' (crc32_custom over m.data, calc_0); then over
 * m.data (9 bytes) into the 12 bytes of o: two hash() calls with crc32_custom (calc_1, calc_2), one with
 * crc16_custom (calc_3), and update_checksum with crc16_custom (calc_4) when h.a == 2.  Table 'pick' (h.b
 * exact) sends the packet to the port of the selected group member (BMv2: member hash % group size). */
#include "common.p4"

header msg_t { bit<72> data; }
header out_t {
    bit<32> c32a;
    bit<32> c32b;
    bit<16> c16a;
    bit<16> c16b;
}
struct H { h_t h; msg_t m; out_t o; }

parser P(packet_in pkt, out H hdr, inout meta_t meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.h); pkt.extract(hdr.m); pkt.extract(hdr.o); transition accept; }
}
control Vck(inout H hdr, inout meta_t meta) { apply { } }
control Ing(inout H hdr, inout meta_t meta, inout standard_metadata_t sm) {
    action_selector(HashAlgorithm.crc32_custom, 32w16, 32w32) sel;
    action set_port(bit<9> port) { sm.egress_spec = port; }
    table pick {
        key = { hdr.h.b: exact; hdr.m.data: selector; }
        actions = { set_port; NoAction; }
        implementation = sel;
        size = 16;
    }
    apply {
        sm.egress_spec = 1;
        hash(hdr.o.c32a, HashAlgorithm.crc32_custom, 32w0, { hdr.m.data }, 33w0x100000000);
        hash(hdr.o.c32b, HashAlgorithm.crc32_custom, 32w0, { hdr.m.data }, 33w0x100000000);
        hash(hdr.o.c16a, HashAlgorithm.crc16_custom, 16w0, { hdr.m.data }, 17w0x10000);
        pick.apply();
    }
}
control Eg(inout H hdr, inout meta_t meta, inout standard_metadata_t sm) { apply { } }
control Cck(inout H hdr, inout meta_t meta) {
    apply {
        update_checksum(hdr.h.a == 2, { hdr.m.data }, hdr.o.c16b, HashAlgorithm.crc16_custom);
    }
}
control Dep(packet_out pkt, in H hdr) { apply { pkt.emit(hdr.h); pkt.emit(hdr.m); pkt.emit(hdr.o); } }
V1Switch(P(), Vck(), Ing(), Eg(), Cck(), Dep()) main;
