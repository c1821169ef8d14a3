/* act_avx512.c — the avx512 set's int8 activation records, shared by its q8_0 and q4_0 matmuls
 * (kernels_avx512.c, kernels_q4_avx512.c), which both include this file's declarations from
 * kernels_internal.h and nothing of each other's: the vectorised quantizer (the same bytes as
 * act.c's g4__q8_quantize_act: IEEE division, exact rounding) and whether their integer dots may
 * use VNNI, which decides how they lay the records out. Compiled with AVX-512 flags: nothing here
 * runs before kernels_dispatch.c has checked cpuid. */
#include "kernels/kernels_avx512.h"
#include "kernels/kernels_internal.h"

#include <immintrin.h>
#include <string.h>

/* Set by kernels_dispatch.c from cpuid (kernels_internal.h): AVX512-VNNI; float matvecs'
 * prefetch into L2. */
int g4__avx512_vnni = 0;
int g4__prefetch_l2 = 0;

/* roundf (half away from zero) of each lane; NaN -> 0; then clamped to [-127, 127]. */
AI __m512 round_q8(__m512 v) {
    __m512 t = _mm512_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    __m512 f = _mm512_sub_ps(v, t); /* exact */
    t = _mm512_mask_add_ps(t, _mm512_cmp_ps_mask(f, _mm512_set1_ps(0.5f), _CMP_GE_OQ), t, _mm512_set1_ps(1.0f));
    t = _mm512_mask_sub_ps(t, _mm512_cmp_ps_mask(f, _mm512_set1_ps(-0.5f), _CMP_LE_OQ), t, _mm512_set1_ps(1.0f));
    t = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(t, t, _CMP_ORD_Q), t);
    return _mm512_min_ps(_mm512_max_ps(t, _mm512_set1_ps(-127.0f)), _mm512_set1_ps(127.0f));
}

void g4__q8_quantize_act_avx512(const float *x, int64_t K, void *dst) {
    int8_t *qs = dst;
    float *d = (float *)((char *)dst + g4__q8_act_qs_bytes(K));
    const int64_t nb = K / G4_Q8_BLOCK, nbp = g4__q8_act_nb_pad(K);
    const __m512 absm = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
    for (int64_t b = 0; b < nb; b++) {
        __m512 v0 = _mm512_loadu_ps(x + b * 32), v1 = _mm512_loadu_ps(x + b * 32 + 16);
        /* max|x| ignoring NaN, like the scalar loop (a > amax is false for NaN) */
        __m512 a0 = _mm512_and_ps(v0, absm), a1 = _mm512_and_ps(v1, absm);
        a0 = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(a0, a0, _CMP_ORD_Q), a0);
        a1 = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(a1, a1, _CMP_ORD_Q), a1);
        const float amax = _mm512_reduce_max_ps(_mm512_max_ps(a0, a1));
        const float db = amax / 127.0f, id = db != 0.0f ? 1.0f / db : 0.0f;
        d[b] = db;
        const __m512 s = _mm512_set1_ps(id);
        __m512i q0 = _mm512_cvttps_epi32(round_q8(_mm512_mul_ps(v0, s)));
        __m512i q1 = _mm512_cvttps_epi32(round_q8(_mm512_mul_ps(v1, s)));
        _mm_storeu_si128((__m128i *)(qs + b * 32), _mm512_cvtepi32_epi8(q0));
        _mm_storeu_si128((__m128i *)(qs + b * 32 + 16), _mm512_cvtepi32_epi8(q1));
    }
    memset(qs + nb * G4_Q8_BLOCK, 0, (size_t)(g4__q8_act_qs_bytes(K) - nb * G4_Q8_BLOCK));
    for (int64_t b = nb; b < nbp; b++) d[b] = 0;
}
