/* Shared by the conformance programs: a 4-byte header 'h_t' and V1Switch boilerplate pieces. */
#ifndef CONFORMANCE_COMMON
#define CONFORMANCE_COMMON
#include <core.p4>
#include <v1model.p4>

header h_t {
    bit<8> a;
    bit<8> b;
    bit<8> c;
    bit<8> d;
}

struct meta_t {
    bit<8> x;
}


#endif
