/* The DLCP keyed tag: a universal hash of the payload (NH, two Toeplitz-shifted instances, as UMAC's) under a key
 * expanded from the job's, then SipHash-2-4 (_siphash.h) as a PRF over the header, the payload's length and that
 * hash. Both fast lanes include this file: _txlane writes the tag of every data packet it sends, _rxlane checks the
 * tag of every datagram it takes. host/wire.py holds the Python reference (wire.tag_schedule, wire.nh_hash,
 * wire.packet_tag); tests/host/test_txlane.py holds this one to it on every length.
 *
 *   schedule(K) = SipHash-2-4_K(le64(i)) for i = 0, 1, ...: words 0 and 1 are the PRF key K', the rest give the NH
 *                 key k[0..NH_KEY_WORDS) (two 32-bit words each, low half first)
 *   NH_t(p)     = sum over 32-byte blocks b of p (zero-padded), j = 0..3, of
 *                 ((m[8b+j] + k[8b+j+4t]) mod 2^32) * ((m[8b+j+4] + k[8b+j+4+4t]) mod 2^32)   (mod 2^64)
 *                 with m the payload's little-endian 32-bit words, for t = 0 and 1
 *   tag         = SipHash-2-4_K'(header[0, 40) || le64(len p) || le64(NH_0) || le64(NH_1)), big-endian in the header
 *
 * Why: the tag used to be SipHash-2-4 over every byte, about 1.5 cycles per byte, hashed once by the sender and once
 * by the receiver: it doubled the CPU of an all-reduce on loopback (docs/decisions.md). NH is one 32x32->64-bit
 * multiply and three adds per 8 bytes, two SSE2 multiplies per 16 bytes and instance here (AVX2, where the CPU
 * has it: the same per 32 bytes): about a tenth of SipHash's time per byte, so the tag runs at memory speed;
 * SipHash still covers every header byte, so the header needs no universal hash.
 *
 * Why it is still a MAC (the argument of UMAC and of "hash then PRF", Black et al. 1999, Shoup 1996): NH with
 * 32-bit words is 2^-32-almost-universal on equal-length inputs, and two instances under Toeplitz-shifted keys are
 * 2^-64-almost-universal; the PRF hides NH's outputs, so nothing about the NH key leaks from observed tags. A forger
 * who changes the header or the length gets a fresh PRF input (its tag is a guess, 2^-64); one who keeps an observed
 * header and length and changes the payload needs an NH collision under an unknown key (2^-64 per try, each failed
 * try dropped and counted). Genuine packets never share a PRF input with different payloads: a header (transfer,
 * seq) is sent again only as a retransmission of the same bytes.
 */
#ifndef DLCP_TAG_H
#define DLCP_TAG_H

#include "_siphash.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define DLCP_HEADER_BYTES 48
#define DLCP_TAG_COVERED 40            /* header bytes before the tag field */
#define NH_MAX_PAYLOAD 65536           /* >= the 65 459 bytes a datagram can carry after the header */
#define NH_KEY_WORDS (NH_MAX_PAYLOAD / 4 + 4)
#define TAG_SCHEDULE_LEN (SIP_KEY_LEN + 4 * NH_KEY_WORDS)

static inline void dlcp_put_le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++, v >>= 8)
        p[i] = (uint8_t)v;
}

static inline uint64_t sip24(const uint8_t key[SIP_KEY_LEN], const uint8_t *p, size_t n)
{
    SipState s;
    sip_init(&s, key);
    sip_update(&s, p, n);
    return sip_final(&s);
}

/* Fill ``out`` (TAG_SCHEDULE_LEN bytes): the PRF key, then the NH key as host-order 32-bit words. */
static inline void tag_schedule(const uint8_t key[SIP_KEY_LEN], uint8_t *out)
{
    uint8_t ctr[8];
    for (uint64_t i = 0; i < 2; i++) {
        dlcp_put_le64(ctr, i);
        dlcp_put_le64(out + 8 * i, sip24(key, ctr, 8));
    }
    uint32_t *k = (uint32_t *)(void *)(out + SIP_KEY_LEN);
    for (uint64_t j = 0; j < NH_KEY_WORDS / 2; j++) {
        dlcp_put_le64(ctr, j + 2);
        uint64_t v = sip24(key, ctr, 8);
        k[2 * j] = (uint32_t)v;
        k[2 * j + 1] = (uint32_t)(v >> 32);
    }
}

static inline uint32_t nh_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* One 32-byte block at word w of the key: both instances, portable. */
static inline void nh_block_scalar(const uint32_t *k, size_t w, const uint8_t *p, uint64_t *h0, uint64_t *h1)
{
    uint32_t m[8];
    for (int j = 0; j < 8; j++)
        m[j] = nh_le32(p + 4 * j);
    for (int j = 0; j < 4; j++) {
        *h0 += (uint64_t)(uint32_t)(m[j] + k[w + j]) * (uint32_t)(m[j + 4] + k[w + j + 4]);
        *h1 += (uint64_t)(uint32_t)(m[j] + k[w + j + 4]) * (uint32_t)(m[j + 4] + k[w + j + 8]);
    }
}

#if defined(__x86_64__) && defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define DLCP_NH_AVX2 1
#include <immintrin.h>

/* Two 128-bit loads as one 256-bit vector (low half from a, high half from b). */
#define NH_LOAD2(a, b) _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)(a))), \
                                               _mm_loadu_si128((const __m128i *)(const void *)(b)), 1)

/* The 64-byte pairs of blocks of p[0, full) with AVX2, added to *h0 and *h1; returns the bytes done (a multiple of
 * 64; the caller finishes the rest). Each 128-bit lane does what one iteration of the SSE2 loop below does, lane 0
 * for the pair's first block and lane 1 for its second; the sums are taken mod 2^64, so the order does not matter
 * and the hash is the same bits as the portable loops'. About twice the SSE2 loop's bytes per cycle: the tag was
 * 12% of a rank's CPU in a 16 MiB all-reduce on loopback. */
__attribute__((target("avx2"))) static size_t nh_pairs_avx2(const uint32_t *k, const uint8_t *p, size_t full,
                                                           uint64_t *h0, uint64_t *h1)
{
    __m256i a0 = _mm256_setzero_si256(), a1 = _mm256_setzero_si256();
    size_t b = 0;
    for (; b + 64 <= full; b += 64) {
        const uint32_t *kw = k + b / 4;
        __m256i mlo = NH_LOAD2(p + b, p + b + 32), mhi = NH_LOAD2(p + b + 16, p + b + 48);
        __m256i k0 = NH_LOAD2(kw, kw + 8), k1 = NH_LOAD2(kw + 4, kw + 12), k2 = NH_LOAD2(kw + 8, kw + 16);
        __m256i x = _mm256_add_epi32(mlo, k0), y = _mm256_add_epi32(mhi, k1);
        a0 = _mm256_add_epi64(a0, _mm256_mul_epu32(x, y));
        a0 = _mm256_add_epi64(a0, _mm256_mul_epu32(_mm256_srli_epi64(x, 32), _mm256_srli_epi64(y, 32)));
        x = _mm256_add_epi32(mlo, k1);
        y = _mm256_add_epi32(mhi, k2);
        a1 = _mm256_add_epi64(a1, _mm256_mul_epu32(x, y));
        a1 = _mm256_add_epi64(a1, _mm256_mul_epu32(_mm256_srli_epi64(x, 32), _mm256_srli_epi64(y, 32)));
    }
    uint64_t lanes[4];
    _mm256_storeu_si256((__m256i *)(void *)lanes, a0);
    *h0 += lanes[0] + lanes[1] + lanes[2] + lanes[3];
    _mm256_storeu_si256((__m256i *)(void *)lanes, a1);
    *h1 += lanes[0] + lanes[1] + lanes[2] + lanes[3];
    return b;
}

/* Whether this CPU runs nh_pairs_avx2 (asked once per process and module). */
static inline int dlcp_has_avx2(void)
{
    static int has = -1;
    if (has < 0)
        has = __builtin_cpu_supports("avx2") ? 1 : 0;
    return has;
}
#endif

/* NH_0 and NH_1 of the n bytes at p (n <= NH_MAX_PAYLOAD) under the NH key k. */
static inline void nh_hash2(const uint32_t *k, const uint8_t *p, size_t n, uint64_t *out0, uint64_t *out1)
{
    uint64_t h0 = 0, h1 = 0;
    size_t full = n & ~(size_t)31, b = 0;
#ifdef DLCP_NH_AVX2
    if (full >= 64 && dlcp_has_avx2())
        b = nh_pairs_avx2(k, p, full, &h0, &h1);
#endif
#if defined(__SSE2__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    __m128i a0 = _mm_setzero_si128(), a1 = _mm_setzero_si128();
    for (; b < full; b += 32) {
        const uint32_t *kw = k + b / 4;
        __m128i mlo = _mm_loadu_si128((const __m128i *)(const void *)(p + b));
        __m128i mhi = _mm_loadu_si128((const __m128i *)(const void *)(p + b + 16));
        __m128i k0 = _mm_loadu_si128((const __m128i *)(const void *)kw);
        __m128i k1 = _mm_loadu_si128((const __m128i *)(const void *)(kw + 4));
        __m128i k2 = _mm_loadu_si128((const __m128i *)(const void *)(kw + 8));
        __m128i x = _mm_add_epi32(mlo, k0), y = _mm_add_epi32(mhi, k1);    /* instance 0 */
        a0 = _mm_add_epi64(a0, _mm_mul_epu32(x, y));                          /* words 0*4, 2*6 */
        a0 = _mm_add_epi64(a0, _mm_mul_epu32(_mm_srli_epi64(x, 32), _mm_srli_epi64(y, 32)));  /* 1*5, 3*7 */
        x = _mm_add_epi32(mlo, k1);                                            /* instance 1: key shifted 4 */
        y = _mm_add_epi32(mhi, k2);
        a1 = _mm_add_epi64(a1, _mm_mul_epu32(x, y));
        a1 = _mm_add_epi64(a1, _mm_mul_epu32(_mm_srli_epi64(x, 32), _mm_srli_epi64(y, 32)));
    }
    uint64_t lanes[2];
    _mm_storeu_si128((__m128i *)(void *)lanes, a0);
    h0 += lanes[0] + lanes[1];
    _mm_storeu_si128((__m128i *)(void *)lanes, a1);
    h1 += lanes[0] + lanes[1];
#endif
    for (; b < full; b += 32)
        nh_block_scalar(k, b / 4, p + b, &h0, &h1);
    if (n > full) {  /* the last, partial block, zero-padded */
        uint8_t last[32] = {0};
        memcpy(last, p + full, n - full);
        nh_block_scalar(k, full / 4, last, &h0, &h1);
    }
    *out0 = h0;
    *out1 = h1;
}

/* The DLCP tag of a datagram whose header is at h (48 bytes, the tag in its last 8) and whose payload is the plen
 * bytes at p (not necessarily right after the header: the send lane's payload is in the tensor), under a
 * schedule from tag_schedule. */
static inline uint64_t dlcp_tag(const uint8_t *sched, const uint8_t *h, const uint8_t *p, size_t plen)
{
    uint8_t in[DLCP_TAG_COVERED + 24];
    uint64_t n0, n1;
    nh_hash2((const uint32_t *)(const void *)(sched + SIP_KEY_LEN), p, plen, &n0, &n1);
    memcpy(in, h, DLCP_TAG_COVERED);
    dlcp_put_le64(in + DLCP_TAG_COVERED, (uint64_t)plen);
    dlcp_put_le64(in + DLCP_TAG_COVERED + 8, n0);
    dlcp_put_le64(in + DLCP_TAG_COVERED + 16, n1);
    return sip24(sched, in, sizeof in);
}

static inline uint64_t dlcp_be64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = (v << 8) | p[i];
    return v;
}

static inline void dlcp_put_be64(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        p[i] = (uint8_t)v;
}

#endif /* DLCP_TAG_H */
