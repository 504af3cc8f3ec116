/* Arithmetic edge cases: operands come in a header, results go back out in another. */
#include <core.p4>
#include <v1model.p4>

header in_t {
    bit<8> a;
    bit<8> b;
    int<8> sa;
    int<8> sb;
}

header out_t {
    bit<8>  add;
    bit<8>  sub;
    bit<8>  mul;
    bit<8>  shl;
    bit<8>  shr;
    bit<8>  sat_add;
    bit<8>  sat_sub;
    int<8>  ssat_add;
    int<8>  ssat_sub;
    int<8>  sshr;
    bit<16> concat;
    bit<4>  slice;
    bit<16> widen;
    int<16> swiden;
    bit<8>  neg;
    bit<8>  inv;
    bit<8>  div;
    bit<8>  mod;
    bit<8>  big_shift;
    bit<8>  sliced_assign;
    bit<8>  cmp_signed;
    bit<4>  pad;
}

struct headers_t { in_t inp; out_t res; }
struct meta_t { bit<8> unused; }

parser P(packet_in pkt, out headers_t h, inout meta_t m, inout standard_metadata_t sm) {
    state start { pkt.extract(h.inp); transition accept; }
}
control V(inout headers_t h, inout meta_t m) { apply { } }
control I(inout headers_t h, inout meta_t m, inout standard_metadata_t sm) {
    apply {
        h.res.setValid();
        h.res.add = h.inp.a + h.inp.b;
        h.res.sub = h.inp.a - h.inp.b;
        h.res.mul = h.inp.a * h.inp.b;
        h.res.shl = h.inp.a << h.inp.b;
        h.res.shr = h.inp.a >> h.inp.b;
        h.res.sat_add = h.inp.a |+| h.inp.b;
        h.res.sat_sub = h.inp.a |-| h.inp.b;
        h.res.ssat_add = h.inp.sa |+| h.inp.sb;
        h.res.ssat_sub = h.inp.sa |-| h.inp.sb;
        h.res.sshr = h.inp.sa >> 2;
        h.res.concat = h.inp.a ++ h.inp.b;
        h.res.slice = h.inp.a[6:3];
        h.res.widen = (bit<16>) h.inp.a;
        h.res.swiden = (int<16>) h.inp.sa;
        h.res.neg = -h.inp.a;
        h.res.inv = ~h.inp.a;
        h.res.div = h.inp.a / 8 + 8w200 / 7;    // p4c: / and % only by powers of two or on constants
        h.res.mod = h.inp.a % 16 + 8w100 % 7;
        h.res.big_shift = h.inp.a << 8w9;
        h.res.sliced_assign = h.inp.a;
        h.res.sliced_assign[3:0] = h.inp.b[7:4];
        h.res.cmp_signed = (h.inp.sa < h.inp.sb) ? 8w1 : 8w0;
        sm.egress_spec = 1;
    }
}
control E(inout headers_t h, inout meta_t m, inout standard_metadata_t sm) { apply { } }
control C(inout headers_t h, inout meta_t m) { apply { } }
control D(packet_out pkt, in headers_t h) { apply { pkt.emit(h); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
