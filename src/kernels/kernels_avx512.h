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

AI __mmask16 tailmask(int64_t n) { return (__mmask16)((1u << n) - 1u); }

#endif
