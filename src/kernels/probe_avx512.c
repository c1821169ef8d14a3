/* probe_avx512.c — the burn loops of the AVX-512 dot-product probes (probe.h): int8 VNNI
 * (vpdpbusd: the q8_0/q4_0 prefill's instruction) and bf16 (vdpbf16ps: fast math's). Kept apart
 * from the kernels so that the probes measure the instruction alone; called only after the
 * cpuid check (kernels_dispatch.c). */
#include <immintrin.h>

#include "kernels/kernels_internal.h"

/* 12 independent accumulator chains, enough to cover the instruction's latency on both ports. */
double g4__vnni_burn_avx512(long iters, float *sink) {
    /* products of 0: the accumulators never overflow (the instruction's cost does not depend on
     * the values) */
    const __m512i a = _mm512_set1_epi8(3), b = _mm512_setzero_si512();
    __m512i c[12];
    for (int i = 0; i < 12; i++) c[i] = _mm512_set1_epi32(i);
    for (long it = 0; it < iters; it++) {
        c[0] = _mm512_dpbusd_epi32(c[0], a, b); c[1] = _mm512_dpbusd_epi32(c[1], a, b);
        c[2] = _mm512_dpbusd_epi32(c[2], a, b); c[3] = _mm512_dpbusd_epi32(c[3], a, b);
        c[4] = _mm512_dpbusd_epi32(c[4], a, b); c[5] = _mm512_dpbusd_epi32(c[5], a, b);
        c[6] = _mm512_dpbusd_epi32(c[6], a, b); c[7] = _mm512_dpbusd_epi32(c[7], a, b);
        c[8] = _mm512_dpbusd_epi32(c[8], a, b); c[9] = _mm512_dpbusd_epi32(c[9], a, b);
        c[10] = _mm512_dpbusd_epi32(c[10], a, b); c[11] = _mm512_dpbusd_epi32(c[11], a, b);
    }
    __m512i s = c[0];
    for (int i = 1; i < 12; i++) s = _mm512_xor_si512(s, c[i]);
    *sink = (float)_mm512_reduce_or_epi32(s);
    return (double)iters * 12 * 64 * 2; /* 64 byte products per instruction, multiply + add */
}

double g4__bf16_burn_avx512(long iters, float *sink) {
    const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x3f7f);
    __m512 c[12];
    for (int i = 0; i < 12; i++) c[i] = _mm512_set1_ps((float)i);
    for (long it = 0; it < iters; it++) {
        c[0] = _mm512_dpbf16_ps(c[0], a, b); c[1] = _mm512_dpbf16_ps(c[1], a, b);
        c[2] = _mm512_dpbf16_ps(c[2], a, b); c[3] = _mm512_dpbf16_ps(c[3], a, b);
        c[4] = _mm512_dpbf16_ps(c[4], a, b); c[5] = _mm512_dpbf16_ps(c[5], a, b);
        c[6] = _mm512_dpbf16_ps(c[6], a, b); c[7] = _mm512_dpbf16_ps(c[7], a, b);
        c[8] = _mm512_dpbf16_ps(c[8], a, b); c[9] = _mm512_dpbf16_ps(c[9], a, b);
        c[10] = _mm512_dpbf16_ps(c[10], a, b); c[11] = _mm512_dpbf16_ps(c[11], a, b);
    }
    __m512 s = c[0];
    for (int i = 1; i < 12; i++) s = _mm512_add_ps(s, c[i]);
    *sink = _mm512_reduce_add_ps(s);
    return (double)iters * 12 * 32 * 2; /* 32 bf16 products per instruction, multiply + add */
}
