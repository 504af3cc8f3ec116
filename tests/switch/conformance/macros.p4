/* P4-16 6.2 / C preprocessor: function-like macros with parameters, nested uses, # (stringify) and
 * ## (paste), a macro with no parameters. */
#include "common.p4"
#define MAX(a, b) ((a) > (b) ? (a) : (b))
#define SET(field, v) hdr.h.field = v
#define NAME(x) #x
#define CAT(a, b) a ## b
#define TWICE(x) (x + x)
#define EMPTY() 7
struct H { h_t h; }
parser P(packet_in pkt, out H hdr, inout meta_t meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.h); transition accept; }
}
control Ing(inout H hdr, inout meta_t meta, inout standard_metadata_t sm) {
    apply {
        bit<8> CAT(my, var) = TWICE(hdr.h.a);
        SET(c, MAX(hdr.h.a, hdr.h.b));
        SET(d, myvar + EMPTY());
        log_msg(NAME(hello world));
        sm.egress_spec = 1;
    }
}
control Eg(inout H hdr, inout meta_t meta, inout standard_metadata_t sm) { apply { } }
control Vck(inout H hdr, inout meta_t meta) { apply { } }
control Cck(inout H hdr, inout meta_t meta) { apply { } }
control Dep(packet_out pkt, in H hdr) { apply { pkt.emit(hdr.h); } }
V1Switch(P(), Vck(), Ing(), Eg(), Cck(), Dep()) main;
