/* kernels_fast_avx512.c — the fast math mode's bf16 matmul on VDPBF16PS (kernels_fast.h gives
 * the arithmetic; this file computes exactly it). The activations of a block of G4_FAST_TB tokens
 * are rounded to bf16 once per call into the scratch (zero-padded to 32 columns); the weights
 * are bf16 already, so a 64-byte load of a row is one operand: no unpacking. Tiles of 4 rows x 6
 * tokens (24 accumulators, 4 + 6 loads per 24 instructions of 32 products each) for prefill;
 * 8 rows x T for T <= 2 (decode: 8 row streams, prefetched 1 KiB ahead like the exact matvec).
 * Every tile performs the same per-lane sequence, so the bits depend on K only. */
#include <stdlib.h>

#include "kernels/kernels_avx512.h"
#include "kernels/kernels_fast.h"
#include "kernels/kernels_internal.h"

static inline int64_t kpad(int64_t K) { return (K + 31) / 32 * 32; }

/* 16 floats to bf16 as g4_f32_to_bf16 (RNE, NaN kept quiet). */
AI __m256i to_bf16(__m512 v) {
    const __m512i u = _mm512_castps_si512(v);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                 _mm512_set1_epi32(0x7f800000));
    __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff),
                                                     _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1))));
    r = _mm512_srli_epi32(r, 16);
    r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
    return _mm512_cvtepi32_epi16(r);
}

static void round_tokens(uint16_t *xb, int64_t kp, const float *x, int64_t ldx, int64_t K, int nt) {
    for (int t = 0; t < nt; t++) {
        const float *s = x + (int64_t)t * ldx;
        uint16_t *d = xb + (int64_t)t * kp;
        for (int64_t k = 0; k < kp; k += 16) {
            int64_t n = K - k;
            __m512 v = n >= 16 ? _mm512_loadu_ps(s + k) : n > 0 ? _mm512_maskz_loadu_ps(tailmask(n), s + k) : _mm512_setzero_ps();
            _mm256_store_si256((__m256i *)(d + k), to_bf16(v));
        }
    }
}

/* NR rows x NT tokens over the whole K; w: row r's first byte, ldw: bytes between rows. The
 * loops are unrolled by the pragmas so that the accumulators live in registers. */
#define UNROLL _Pragma("GCC unroll 8")
#ifndef G4_FAST_PF_HINT
#define G4_FAST_PF_HINT _MM_HINT_T0 /* as the exact matvec's (kernels_avx512.c) */
#endif
AI void tile(const int NR, const int NT, const int PF, const char *w, int64_t ldw, const uint16_t *xb, int64_t kp,
             int64_t K, float *y, int64_t ldy) {
    __m512 acc[8][6];
    UNROLL for (int i = 0; i < NR; i++)
        UNROLL for (int j = 0; j < NT; j++) acc[i][j] = _mm512_setzero_ps();
    const int64_t kf = K / 32 * 32;
    for (int64_t k = 0; k <= kf; k += 32) {
        if (k == kf && kf == K) break;
        const __mmask32 m = k < kf ? ~(__mmask32)0 : (__mmask32)((1ull << (K - kf)) - 1);
        __m512i wv[8];
        UNROLL for (int i = 0; i < NR; i++) {
            wv[i] = k < kf ? _mm512_loadu_si512(w + i * ldw + k * 2) : _mm512_maskz_loadu_epi16(m, w + i * ldw + k * 2);
            if (PF == 2) _mm_prefetch(w + i * ldw + k * 2 + 1024, _MM_HINT_T1); /* g4__prefetch_l2 */
            else if (PF) _mm_prefetch(w + i * ldw + k * 2 + 1024, G4_FAST_PF_HINT);
        }
        UNROLL for (int j = 0; j < NT; j++) {
            const __m512i xv = _mm512_load_si512(xb + j * kp + k);
            UNROLL for (int i = 0; i < NR; i++) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], (__m512bh)wv[i], (__m512bh)xv);
        }
    }
    UNROLL for (int j = 0; j < NT; j++)
        UNROLL for (int i = 0; i < NR; i++) y[j * ldy + i] = hsum16(acc[i][j]);
}

typedef void (*tile_fn)(const char *, int64_t, const uint16_t *, int64_t, int64_t, float *, int64_t);
#define TILE(nr, nt, pf)                                                                                    \
    static void tile_##nr##_##nt(const char *w, int64_t ldw, const uint16_t *xb, int64_t kp, int64_t K, float *y, \
                                 int64_t ldy) { tile(nr, nt, pf, w, ldw, xb, kp, K, y, ldy); }
#define TILES(nr) TILE(nr, 1, 0) TILE(nr, 2, 0) TILE(nr, 3, 0) TILE(nr, 4, 0) TILE(nr, 5, 0) TILE(nr, 6, 0)
TILES(1) TILES(2) TILES(3) TILES(4)
TILE(8, 1, 1) TILE(8, 2, 1)
static void tile_8_1_l2(const char *w, int64_t ldw, const uint16_t *xb, int64_t kp, int64_t K, float *y, int64_t ldy) {
    tile(8, 1, 2, w, ldw, xb, kp, K, y, ldy);
}
static void tile_8_2_l2(const char *w, int64_t ldw, const uint16_t *xb, int64_t kp, int64_t K, float *y, int64_t ldy) {
    tile(8, 2, 2, w, ldw, xb, kp, K, y, ldy);
}
#define ROW(nr) {tile_##nr##_1, tile_##nr##_2, tile_##nr##_3, tile_##nr##_4, tile_##nr##_5, tile_##nr##_6}
static const tile_fn tiles[4][6] = {ROW(1), ROW(2), ROW(3), ROW(4)};

void g4__fast_prepare_avx512(const g4_mat *W, const float *x, int64_t ldx, int T, int t0, int t1, void *act) {
    (void)T;
    round_tokens((uint16_t *)act + (int64_t)t0 * kpad(W->cols), kpad(W->cols), x + (int64_t)t0 * ldx, ldx, W->cols, t1 - t0);
}

/* Row tiles over a block of nt <= G4_FAST_TB prepared tokens. */
static void rows_block(const g4_mat *W, const uint16_t *xb, int nt, float *yb, int64_t ldy, int64_t r0, int64_t r1) {
    const int64_t K = W->cols, kp = kpad(K), ldw = W->ld_bytes;
    const char *base = (const char *)W->data;
    int64_t r = r0;
    if (nt <= 2) {
        const tile_fn t8 = g4__prefetch_l2 ? (nt == 1 ? tile_8_1_l2 : tile_8_2_l2) : (nt == 1 ? tile_8_1 : tile_8_2);
        for (; r + 8 <= r1; r += 8) t8(base + r * ldw, ldw, xb, kp, K, yb + r, ldy);
    }
    /* token tiles outside row tiles: a token tile stays in L1 while the rows pass (from L2);
     * 2-layer 31B widths, 512 tokens, TP 1 x 2: 208-218 -> 221-230 tok/s, alternating */
    const int64_t rs = r;
    for (int t = 0; t < nt; t += 6) {
        const int n = nt - t < 6 ? nt - t : 6;
        for (r = rs; r < r1; r += 4) {
            const int nr = r1 - r < 4 ? (int)(r1 - r) : 4;
            tiles[nr - 1][n - 1](base + r * ldw, ldw, xb + (int64_t)t * kp, kp, K, yb + (int64_t)t * ldy + r, ldy);
        }
    }
}

void g4__fast_prepared_avx512(const g4_mat *W, const void *act, int T, float *y, int64_t ldy, int64_t r0, int64_t r1,
                              void *scratch) {
    if (T <= 0 || r1 <= r0) return;
    if (!__builtin_cpu_supports("avx512bf16")) {
        g4__fast_prepared_ref(W, act, T, y, ldy, r0, r1, scratch);
        return;
    }
    const int64_t kp = kpad(W->cols);
    for (int t0 = 0; t0 < T; t0 += G4_FAST_TB) /* a block's tokens stay in L2 while the rows pass */
        rows_block(W, (const uint16_t *)act + (int64_t)t0 * kp, T - t0 < G4_FAST_TB ? T - t0 : G4_FAST_TB,
                   y + (int64_t)t0 * ldy, ldy, r0, r1);
}

void g4__fast_matmul_bf16_avx512(const g4_mat *W, const float *x, int64_t ldx, int T, float *y, int64_t ldy,
                                 int64_t r0, int64_t r1, void *scratch) {
    if (T <= 0 || r1 <= r0) return;
    if (!__builtin_cpu_supports("avx512bf16")) {
        g4__fast_matmul_bf16_ref(W, x, ldx, T, y, ldy, r0, r1, scratch);
        return;
    }
    void *own = scratch ? NULL : malloc(g4__fast_scratch_bytes(W, T));
    uint16_t *xb = g4__align64(scratch ? scratch : own);
    for (int t0 = 0; t0 < T; t0 += G4_FAST_TB) {
        const int nt = T - t0 < G4_FAST_TB ? T - t0 : G4_FAST_TB;
        round_tokens(xb, kpad(W->cols), x + (int64_t)t0 * ldx, ldx, W->cols, nt);
        rows_block(W, xb, nt, y + (int64_t)t0 * ldy, ldy, r0, r1);
    }
    free(own);
}
