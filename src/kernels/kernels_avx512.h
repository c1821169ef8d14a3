/* kernels_avx512.h — inline helpers shared by the AVX-512 kernel files (kernels_avx512.c,
 * kernels_q4_avx512.c), which are the only files compiled with AVX-512 flags that include it:
 * the canonical 16-lane reduction and the tail mask. */
#ifndef G4_KERNELS_AVX512_H
#define G4_KERNELS_AVX512_H

#include <immintrin.h>
#include <stdint.h>

#define AI static inline __attribute__((always_inline))

/* The fixed reduction of every avx512 dot: (lo256+hi256) -> (lo128+hi128) -> (0+2, 1+3) -> sum. */
AI float hsum16(__m512 v) {
    __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    b = _mm_add_ps(b, _mm_movehl_ps(b, b));
    b = _mm_add_ss(b, _mm_movehdup_ps(b));
    return _mm_cvtss_f32(b);
}

/* Vector exp (Cephes expf, a few ulp): the softmax and tanh. */
AI __m512 exp16(__m512 x) {
    x = _mm512_min_ps(x, _mm512_set1_ps(89.0f));
    x = _mm512_max_ps(x, _mm512_set1_ps(-104.0f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500E-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507E-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073E-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894E-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459E-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201E-1f));
    __m512 y = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(y, n); /* exact scaling, subnormals and overflow handled */
}

AI __mmask16 tailmask(int64_t n) { return (__mmask16)((1u << n) - 1u); }

#endif
