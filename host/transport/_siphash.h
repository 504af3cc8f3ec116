/* SipHash-2-4 (Aumasson and Bernstein, "SipHash: a fast short-input PRF", 2012), written from the paper: the PRF of
 * the DLCP keyed tag (_tag.h, which both fast lanes include) and of the derivation of its key schedule.
 * host/wire.py holds the Python reference (wire.siphash24); tests/host/test_txlane.py checks this one against it
 * and the paper's vectors.
 *
 * Why SipHash-2-4: a keyed PRF built for short inputs, with no table or special instruction (plain 64-bit adds,
 * rotates and xors, so it is the same on every host and needs no library). The tag hashes only 64 bytes with it
 * per datagram (the payload goes through NH first, _tag.h), so its cost per byte does not matter.
 */
#ifndef DLCP_SIPHASH_H
#define DLCP_SIPHASH_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define SIP_KEY_LEN 16

typedef struct {
    uint64_t v0, v1, v2, v3;
    uint64_t tail;   /* bytes not yet hashed (fewer than 8), little-endian */
    unsigned ntail;  /* how many */
    uint64_t len;    /* bytes seen, for the final block */
} SipState;

static inline uint64_t sip_rotl(uint64_t x, unsigned b)
{
    return (x << b) | (x >> (64 - b));
}

static inline uint64_t sip_le64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

#define SIP_ROUND(s)                                                                                           \
    do {                                                                                                       \
        (s)->v0 += (s)->v1; (s)->v1 = sip_rotl((s)->v1, 13); (s)->v1 ^= (s)->v0; (s)->v0 = sip_rotl((s)->v0, 32); \
        (s)->v2 += (s)->v3; (s)->v3 = sip_rotl((s)->v3, 16); (s)->v3 ^= (s)->v2;                                \
        (s)->v0 += (s)->v3; (s)->v3 = sip_rotl((s)->v3, 21); (s)->v3 ^= (s)->v0;                                \
        (s)->v2 += (s)->v1; (s)->v1 = sip_rotl((s)->v1, 17); (s)->v1 ^= (s)->v2; (s)->v2 = sip_rotl((s)->v2, 32); \
    } while (0)

static inline void sip_init(SipState *s, const uint8_t key[SIP_KEY_LEN])
{
    uint64_t k0 = sip_le64(key), k1 = sip_le64(key + 8);
    s->v0 = k0 ^ 0x736f6d6570736575ULL;
    s->v1 = k1 ^ 0x646f72616e646f6dULL;
    s->v2 = k0 ^ 0x6c7967656e657261ULL;
    s->v3 = k1 ^ 0x7465646279746573ULL;
    s->tail = 0;
    s->ntail = 0;
    s->len = 0;
}

static inline void sip_word(SipState *s, uint64_t m)
{
    s->v3 ^= m;
    SIP_ROUND(s);
    SIP_ROUND(s);
    s->v0 ^= m;
}

static inline void sip_update(SipState *s, const uint8_t *p, size_t n)
{
    s->len += n;
    while (s->ntail && n) {  /* complete the pending word first */
        s->tail |= (uint64_t)*p++ << (8 * s->ntail);
        n--;
        if (++s->ntail == 8) {
            sip_word(s, s->tail);
            s->tail = 0;
            s->ntail = 0;
        }
    }
    /* the state in locals: the compiler keeps it in registers across the loop */
    uint64_t v0 = s->v0, v1 = s->v1, v2 = s->v2, v3 = s->v3;
    for (; n >= 8; p += 8, n -= 8) {
        uint64_t m = sip_le64(p);
        v3 ^= m;
        for (int r = 0; r < 2; r++) {
            v0 += v1; v1 = sip_rotl(v1, 13); v1 ^= v0; v0 = sip_rotl(v0, 32);
            v2 += v3; v3 = sip_rotl(v3, 16); v3 ^= v2;
            v0 += v3; v3 = sip_rotl(v3, 21); v3 ^= v0;
            v2 += v1; v1 = sip_rotl(v1, 17); v1 ^= v2; v2 = sip_rotl(v2, 32);
        }
        v0 ^= m;
    }
    s->v0 = v0; s->v1 = v1; s->v2 = v2; s->v3 = v3;
    for (; n; n--, p++)
        s->tail |= (uint64_t)*p << (8 * s->ntail++);
}

static inline uint64_t sip_final(SipState *s)
{
    sip_word(s, s->tail | ((s->len & 0xff) << 56));
    s->v2 ^= 0xff;
    SIP_ROUND(s);
    SIP_ROUND(s);
    SIP_ROUND(s);
    SIP_ROUND(s);
    return s->v0 ^ s->v1 ^ s->v2 ^ s->v3;
}

#endif /* DLCP_SIPHASH_H */
