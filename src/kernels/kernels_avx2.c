/* kernels_avx2.c — the AVX2 kernel set (avx2 + fma + f16c). Compiled with those flags, so
 * nothing in here may run before kernels_dispatch.c has checked cpuid.
 *
 * Canonical order of every dot product (matmul, attention scores, rmsnorm's sum of squares):
 * one 8-lane fp32 accumulator, lane l gets fma(w[k], x[k], acc) for k = l, l+8, l+16, .. in
 * increasing k (the last partial step padded with zeros on both sides), then the fixed reduction
 * ((lo128+hi128) -> (0+2, 1+3) -> sum). The T=1 matvec (8 rows per pass over x) and the T>1
 * register tiles (3 rows x 4 tokens; on the tiled path K cut into 8192-wide blocks whose partial
 * accumulators are parked in the scratch buffer; bf16/f16 converted in registers) perform exactly those
 * operations per output element, so the bits depend only on K.
 * q8_0: block b's exact int32 dot goes to lane b mod 8 as fma((float)isum, d_w*d_x, acc).
 * Knows nothing about Gemma or threads. */
#include "kernels/kernels.h"
#include "kernels/kernels_internal.h"

#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define AI static inline __attribute__((always_inline))

static const int32_t mask_tab[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
/* Lanes [0, n) set, n in 0..8. */
AI __m256i tailmask(int64_t n) { return _mm256_loadu_si256((const __m256i *)(mask_tab + 8 - n)); }

AI float hsum8(__m256 v) {
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    b = _mm_add_ps(b, _mm_movehl_ps(b, b));
    b = _mm_add_ss(b, _mm_movehdup_ps(b));
    return _mm_cvtss_f32(b);
}

AI __m256 cvt_h(int dt, __m128i h) {
    if (dt == G4_DT_BF16) return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    return _mm256_cvtph_ps(h);
}
/* 8 weights of dtype dt at element k of a row, as exact fp32. */
AI __m256 ldw(int dt, const void *row, int64_t k) {
    if (dt == G4_DT_F32) return _mm256_loadu_ps((const float *)row + k);
    return cvt_h(dt, _mm_loadu_si128((const __m128i *)((const uint16_t *)row + k)));
}
/* The first n (< 8) weights, the rest zero. */
AI __m256 ldw_part(int dt, const void *row, int64_t k, int64_t n) {
    if (dt == G4_DT_F32) return _mm256_maskload_ps((const float *)row + k, tailmask(n));
    uint16_t tmp[8] = {0};
    memcpy(tmp, (const uint16_t *)row + k, (size_t)n * 2);
    return cvt_h(dt, _mm_loadu_si128((const __m128i *)tmp));
}
AI __m256 ldx_part(const float *x, int64_t n) { return _mm256_maskload_ps(x, tailmask(n)); }
AI void st_part(float *y, __m256 v, int64_t n) { _mm256_maskstore_ps(y, tailmask(n), v); }

/* ---- vector exp / tanh (Cephes expf/tanhf, a few ulp) ---- */
AI __m256 exp8(__m256 x) {
    x = _mm256_min_ps(x, _mm256_set1_ps(89.0f));
    x = _mm256_max_ps(x, _mm256_set1_ps(-104.0f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500E-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507E-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073E-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894E-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459E-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201E-1f));
    __m256 y = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    /* y * 2^n as y * 2^n1 * 2^n2 (n1 = n>>1) so subnormal results and 2^128 are reached. */
    __m256i ni = _mm256_cvtps_epi32(n);
    __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
    __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, _mm256_set1_epi32(127)), 23));
    __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, _mm256_set1_epi32(127)), 23));
    return _mm256_mul_ps(_mm256_mul_ps(y, s1), s2);
}

AI __m256 tanh8(__m256 x) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 ax = _mm256_andnot_ps(sign, x);
    __m256 z = _mm256_mul_ps(x, x);
    __m256 p = _mm256_set1_ps(-5.70498872745E-3f);
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(2.06390887954E-2f));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-5.37397155531E-2f));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(1.33314422036E-1f));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-3.33332819422E-1f));
    __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(p, z), x, x);
    __m256 e = exp8(_mm256_add_ps(ax, ax));
    __m256 big = _mm256_sub_ps(_mm256_set1_ps(1.0f),
                               _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, _mm256_set1_ps(1.0f))));
    big = _mm256_or_ps(big, _mm256_and_ps(x, sign));
    return _mm256_blendv_ps(big, small, _mm256_cmp_ps(ax, _mm256_set1_ps(0.625f), _CMP_LT_OQ));
}

/* ---- matmul: f32 / bf16 / f16 ---- */

/* A prefetch 1 KiB ahead in each of the 8 rows, with the hint of kernels_avx512.c (measured
 * there: into all cache levels, _MM_HINT_T0). Prefetches never fault. */
#ifndef G4_MV_PF_HINT
#define G4_MV_PF_HINT _MM_HINT_T0
#endif
#ifndef G4_MV_PREFETCH
#define G4_MV_PREFETCH 1024
#endif
AI void mv_rows_s(const int dt, const int NRW, const char *w, int64_t ldw_b, const float *x,
                  int64_t K, float *y, int64_t ys) {
    __m256 acc[8];
#pragma GCC unroll 8
    for (int i = 0; i < NRW; i++) acc[i] = _mm256_setzero_ps();
    int64_t k = 0;
    const int64_t esz = dt == G4_DT_F32 ? 4 : 2;
    for (; k + 8 <= K; k += 8) {
        __m256 xv = _mm256_loadu_ps(x + k);
        if (((k * esz) & 63) == 0) /* once per 64-byte line of each row */
#pragma GCC unroll 8
            for (int i = 0; i < NRW; i++) _mm_prefetch(w + i * ldw_b + k * esz + G4_MV_PREFETCH, G4_MV_PF_HINT);
#pragma GCC unroll 8
        for (int i = 0; i < NRW; i++) acc[i] = _mm256_fmadd_ps(ldw(dt, w + i * ldw_b, k), xv, acc[i]);
    }
    if (k < K) {
        __m256 xv = ldx_part(x + k, K - k);
#pragma GCC unroll 8
        for (int i = 0; i < NRW; i++)
            acc[i] = _mm256_fmadd_ps(ldw_part(dt, w + i * ldw_b, k, K - k), xv, acc[i]);
    }
#pragma GCC unroll 8
    for (int i = 0; i < NRW; i++) y[i * ys] = hsum8(acc[i]);
}
AI void mv_rows(const int dt, const int NRW, const char *w, int64_t ldw_b, const float *x, int64_t K, float *y) {
    mv_rows_s(dt, NRW, w, ldw_b, x, K, y, 1);
}

/* 8 runs of S consecutive rows, one row of each per pass (8 long streams), as in
 * kernels_avx512.c; then the last < 8 rows. */
AI void matvec_dt(const int dt, const g4_mat *W, const float *x, float *y, int64_t r0, int64_t r1) {
    const char *base = W->data;
    const int64_t K = W->cols, ld = W->ld_bytes;
    const int64_t S = (r1 - r0) / 8; /* S = 1: plain 8-row passes */
    for (int64_t p = 0; p < S; p++) mv_rows_s(dt, 8, base + (r0 + p) * ld, S * ld, x, K, y + r0 + p, S);
    int64_t r = r0 + 8 * S;
    if (r + 4 <= r1) { mv_rows(dt, 4, base + r * ld, ld, x, K, y + r); r += 4; }
    if (r + 2 <= r1) { mv_rows(dt, 2, base + r * ld, ld, x, K, y + r); r += 2; }
    if (r < r1) mv_rows(dt, 1, base + r * ld, ld, x, K, y + r);
}

#ifndef G4_SMALL_T
#define G4_SMALL_T 128 /* T <= this: direct tiles (measured crossover with the tiled path) */
#endif
#ifndef G4_AVX2_KC /* K block: one for the 31B's 5376- and 8192-wide rows (parking cost more, kernels_tiled.h) */
#define G4_AVX2_KC 8192
#endif
enum { MR = 3, NR = 4, KC = G4_AVX2_KC, TB = 48, RB = 30, SMALL_T = G4_SMALL_T };

/* One register tile: mr rows of dtype dt (read in place, converted in registers) x nr tokens
 * over the n columns of the current K block, partial sums parked in accb between blocks. */
AI void tile(const int dt, const int mr, const int nr, const char *const *w, const float *x, int64_t ldx,
             int64_t n, float *accb, int first, int last, float *y, int64_t ldy) {
    __m256 acc[MR][NR];
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 8
        for (int j = 0; j < nr; j++)
            acc[i][j] = first ? _mm256_setzero_ps() : _mm256_load_ps(accb + (j * RB + i) * 8);
    int64_t k = 0;
    for (; k + 8 <= n; k += 8) {
        __m256 wv[MR];
#pragma GCC unroll 8
        for (int i = 0; i < mr; i++) wv[i] = ldw(dt, w[i], k);
#pragma GCC unroll 8
        for (int j = 0; j < nr; j++) {
            __m256 xv = _mm256_loadu_ps(x + j * ldx + k);
#pragma GCC unroll 8
            for (int i = 0; i < mr; i++) acc[i][j] = _mm256_fmadd_ps(wv[i], xv, acc[i][j]);
        }
    }
    if (k < n) {
        __m256 wv[MR];
#pragma GCC unroll 8
        for (int i = 0; i < mr; i++) wv[i] = ldw_part(dt, w[i], k, n - k);
#pragma GCC unroll 8
        for (int j = 0; j < nr; j++) {
            __m256 xv = ldx_part(x + j * ldx + k, n - k);
#pragma GCC unroll 8
            for (int i = 0; i < mr; i++) acc[i][j] = _mm256_fmadd_ps(wv[i], xv, acc[i][j]);
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 8
        for (int j = 0; j < nr; j++) {
            if (last) y[j * ldy + i] = hsum8(acc[i][j]);
            else _mm256_store_ps(accb + (j * RB + i) * 8, acc[i][j]);
        }
}

#define TILE_CASES(dt)                                                                             \
    switch (mr * 8 + nr) {                                                                         \
        TC(dt, 1, 1) TC(dt, 1, 2) TC(dt, 1, 3) TC(dt, 1, 4)                                        \
        TC(dt, 2, 1) TC(dt, 2, 2) TC(dt, 2, 3) TC(dt, 2, 4)                                        \
        TC(dt, 3, 1) TC(dt, 3, 2) TC(dt, 3, 3) TC(dt, 3, 4)                                        \
    default: break;                                                                                \
    }

#define LANES 8
#include "kernels/kernels_tiled.h"

/* Small T (batched decode): mr rows x nr tokens straight from W (converted in registers) over
 * the whole K, accumulators in registers throughout, the matvec's prefetch ahead in each row;
 * the nr token vectors are loaded first, then one weight vector at a time (16 registers: 6 x 2
 * or 3 x 4 accumulators). Same per-element order as the rest. */
AI void tile_direct(const int dt, const int mr, const int nr, const char *w, int64_t ldw_b,
                    const float *x, int64_t ldx, int64_t K, float *y, int64_t ldy) {
    __m256 acc[6][4];
    const int64_t esz = dt == G4_DT_F32 ? 4 : 2;
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 8
        for (int j = 0; j < nr; j++) acc[i][j] = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 8 <= K; k += 8) {
        __m256 xv[4];
        if (((k * esz) & 63) == 0)
#pragma GCC unroll 8
            for (int i = 0; i < mr; i++) _mm_prefetch(w + i * ldw_b + k * esz + G4_MV_PREFETCH, G4_MV_PF_HINT);
#pragma GCC unroll 8
        for (int j = 0; j < nr; j++) xv[j] = _mm256_loadu_ps(x + j * ldx + k);
#pragma GCC unroll 8
        for (int i = 0; i < mr; i++) {
            const __m256 wv = ldw(dt, w + i * ldw_b, k);
#pragma GCC unroll 8
            for (int j = 0; j < nr; j++) acc[i][j] = _mm256_fmadd_ps(wv, xv[j], acc[i][j]);
        }
    }
    if (k < K) {
        __m256 xv[4];
#pragma GCC unroll 8
        for (int j = 0; j < nr; j++) xv[j] = ldx_part(x + j * ldx + k, K - k);
#pragma GCC unroll 8
        for (int i = 0; i < mr; i++) {
            const __m256 wv = ldw_part(dt, w + i * ldw_b, k, K - k);
#pragma GCC unroll 8
            for (int j = 0; j < nr; j++) acc[i][j] = _mm256_fmadd_ps(wv, xv[j], acc[i][j]);
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 8
        for (int j = 0; j < nr; j++) y[j * ldy + i] = hsum8(acc[i][j]);
}

/* T = 2: 6 rows a tile (more rows streaming at once); otherwise 3 rows x up to 4 tokens. */
AI void matmul_direct_dt(const int dt, const g4_mat *W, const float *x, int64_t ldx, int T, float *y,
                         int64_t ldy, int64_t r0, int64_t r1) {
    const char *base = W->data;
    const int64_t K = W->cols, ld = W->ld_bytes;
    int64_t r = r0;
    if (T == 2)
        for (; r + 6 <= r1; r += 6) tile_direct(dt, 6, 2, base + r * ld, ld, x, ldx, K, y + r, ldy);
    for (; r + 3 <= r1; r += 3)
        for (int t = 0; t < T; t += 4) {
            const char *w = base + r * ld;
            const float *xt = x + t * ldx;
            float *yt = y + t * ldy + r;
            switch (T - t < 4 ? T - t : 4) {
            case 4: tile_direct(dt, 3, 4, w, ld, xt, ldx, K, yt, ldy); break;
            case 3: tile_direct(dt, 3, 3, w, ld, xt, ldx, K, yt, ldy); break;
            case 2: tile_direct(dt, 3, 2, w, ld, xt, ldx, K, yt, ldy); break;
            default: tile_direct(dt, 3, 1, w, ld, xt, ldx, K, yt, ldy); break;
            }
        }
    for (; r < r1; r++)
        for (int t = 0; t < T; t++) mv_rows(dt, 1, base + r * ld, ld, x + t * ldx, K, y + t * ldy + r);
}

/* ---- matmul: q8_0 ---- */

/* One block: 8 int32 partial sums of w.x (exact; maddubs cannot saturate for |x| <= 127). */
AI __m256i q8_blk(const int8_t *w8, const int8_t *x8) {
    __m256i w = _mm256_loadu_si256((const __m256i *)w8), x = _mm256_loadu_si256((const __m256i *)x8);
    __m256i d16 = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
    return _mm256_madd_epi16(d16, _mm256_set1_epi16(1));
}

/* Lane i = the sum of the 8 int32 lanes of p[i] (exact). */
AI __m256i sum_lanes8(const __m256i *p) {
    __m256i h01 = _mm256_hadd_epi32(p[0], p[1]), h23 = _mm256_hadd_epi32(p[2], p[3]);
    __m256i h45 = _mm256_hadd_epi32(p[4], p[5]), h67 = _mm256_hadd_epi32(p[6], p[7]);
    __m256i a = _mm256_hadd_epi32(h01, h23), b = _mm256_hadd_epi32(h45, h67);
    return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
}

AI float dot_q8(const g4_block_q8_0 *w, const int8_t *xq, const float *xd, int64_t nb) {
    __m256 acc = _mm256_setzero_ps();
    for (int64_t g = 0; g < nb; g += 8) {
        const int64_t nin = nb - g < 8 ? nb - g : 8;
        __m256i p[8];
        uint16_t dwh[8] = {0};
        for (int i = 0; i < 8; i++) {
            if (i < nin) {
                p[i] = q8_blk(w[g + i].qs, xq + (g + i) * 32);
                dwh[i] = w[g + i].d;
            } else p[i] = _mm256_setzero_si256();
        }
        const __m256i s = sum_lanes8(p);
        __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)dwh));
        __m256 d = _mm256_mul_ps(dw, _mm256_loadu_ps(xd + g));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), d, acc);
    }
    return hsum8(acc);
}

static void matmul_q8_prepared(const g4_mat *W, const void *act, int T, float *y, int64_t ldy,
                               int64_t r0, int64_t r1, void *scratch) {
    const int64_t K = W->cols, nb = K / G4_Q8_BLOCK, qstride = g4__q8_act_stride(K);
    const int64_t qsb = g4__q8_act_qs_bytes(K);
    for (int64_t r = r0; r < r1; r++) {
        const g4_block_q8_0 *row = (const void *)((const char *)W->data + r * W->ld_bytes);
        for (int t = 0; t < T; t++) {
            const char *rec = (const char *)act + t * qstride;
            y[t * ldy + r] = dot_q8(row, (const int8_t *)rec, (const float *)(rec + qsb), nb);
        }
    }
}

static void matmul_q8(const g4_mat *W, const float *x, int64_t ldx, int T, float *y, int64_t ldy,
                      int64_t r0, int64_t r1, void *scratch) {
    char *xq = g4__align64(scratch);
    g4__q8_prepare_plain(W, x, ldx, T, 0, T, xq);
    matmul_q8_prepared(W, xq, T, y, ldy, r0, r1, NULL);
}

/* ---- matmul: q4_0 ---- */

/* A block's 32 levels (u8 0..15) in element order: low nibbles (elements 0..15), then high. */
AI __m256i q4_unpack(const uint8_t *qs) {
    const __m128i q = _mm_loadu_si128((const __m128i *)qs);
    const __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(q), _mm_srli_epi16(q, 4), 1);
    return _mm256_and_si256(v, _mm256_set1_epi8(15));
}

/* 8 int32 partial sums of levels * x (exact: maddubs cannot saturate, 2 * 15 * 127 < 2^15). */
AI __m256i q4_blk(__m256i lv, const int8_t *x8) {
    const __m256i d16 = _mm256_maddubs_epi16(lv, _mm256_loadu_si256((const __m256i *)x8));
    return _mm256_madd_epi16(d16, _mm256_set1_epi16(1));
}

/* The f16 scales of the first nin (1..8) blocks at w as fp32 (zeros after): a dword gather at the
 * 18-byte stride (the scale is the low half), then the low halves packed. Building them through a
 * stack array stalled on store forwarding every group. */
AI __m256 q4_scales8(const g4_block_q4_0 *w, int nin) {
    const __m256i off = _mm256_setr_epi32(0, 18, 36, 54, 72, 90, 108, 126);
    const __m256i g = nin == 8 ? _mm256_i32gather_epi32((const int *)(const void *)w, off, 1)
                               : _mm256_mask_i32gather_epi32(_mm256_setzero_si256(), (const int *)(const void *)w, off,
                                                             tailmask(nin), 1);
    const __m256i lo = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1, 0, 1, 4, 5, 8, 9, 12,
                                        13, -1, -1, -1, -1, -1, -1, -1, -1);
    const __m256i h = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(g, lo), 0x08);
    return _mm256_cvtph_ps(_mm256_castsi256_si128(h));
}

/* One row times NT (1, 2) tokens, groups of 8 blocks (fewer at the end: zero sums and scales),
 * each block unpacked once for the NT tokens. Block g + i in lane i gets
 * (float)(sum q x - 8 sum x) * (d_w * d_x). A prefetch 8 groups ahead keeps the single stream
 * going (as the avx512 q8_0 dot, with its hint). */
#ifndef G4_Q4_PREFETCH2
#define G4_Q4_PREFETCH2 1152
#endif
AI void q4_row(const int NT, const g4_block_q4_0 *w, int64_t nb, const char *const *rec, int64_t K, float *const *out) {
    const int64_t qsb = g4__q8_act_qs_bytes(K);
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t g = 0; g < nb; g += 8) {
        const int nin = nb - g < 8 ? (int)(nb - g) : 8;
        const char *pf = (const char *)(w + g) + G4_Q4_PREFETCH2;
        _mm_prefetch(pf, G4_MV_PF_HINT);
        _mm_prefetch(pf + 64, G4_MV_PF_HINT);
        _mm_prefetch(pf + 128, G4_MV_PF_HINT);
        __m256i p[2][8];
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) {
            if (i < nin) {
                const __m256i lv = q4_unpack(w[g + i].qs);
#pragma GCC unroll 2
                for (int t = 0; t < NT; t++) p[t][i] = q4_blk(lv, (const int8_t *)rec[t] + (g + i) * 32);
            } else
#pragma GCC unroll 2
                for (int t = 0; t < NT; t++) p[t][i] = _mm256_setzero_si256();
        }
        const __m256 dw = q4_scales8(w + g, nin);
#pragma GCC unroll 2
        for (int t = 0; t < NT; t++) {
            const __m256i s8 = _mm256_slli_epi32(_mm256_loadu_si256((const __m256i *)(g4__q4_act_sums((void *)rec[t], K) + g)), 3);
            const __m256i isum = _mm256_sub_epi32(sum_lanes8(p[t]), s8);
            const __m256 d = _mm256_mul_ps(dw, _mm256_loadu_ps((const float *)(rec[t] + qsb) + g));
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), d, acc[t]);
        }
    }
#pragma GCC unroll 2
    for (int t = 0; t < NT; t++) *out[t] = hsum8(acc[t]);
}

/* Rows one after the other (one stream), tokens in pairs. */
static void matmul_q4_prepared(const g4_mat *W, const void *act, int T, float *y, int64_t ldy,
                               int64_t r0, int64_t r1, void *scratch) {
    const int64_t K = W->cols, nb = K / G4_Q4_BLOCK, stride = g4__q4_act_stride(K);
    for (int64_t r = r0; r < r1; r++) {
        const g4_block_q4_0 *row = (const void *)((const char *)W->data + r * W->ld_bytes);
        for (int t = 0; t < T; t += 2) {
            const char *rec[2] = {(const char *)act + t * stride, (const char *)act + (t + 1) * stride};
            float *out[2] = {y + t * ldy + r, y + (t + 1) * ldy + r};
            if (t + 1 < T) q4_row(2, row, nb, rec, K, out);
            else q4_row(1, row, nb, rec, K, out);
        }
    }
}

static void matmul_q4(const g4_mat *W, const float *x, int64_t ldx, int T, float *y, int64_t ldy,
                      int64_t r0, int64_t r1, void *scratch) {
    char *xq = g4__align64(scratch);
    const size_t ab = g4__q4_act_bytes(W, T);
    g4__q4_prepare_plain(W, x, ldx, T, 0, T, xq);
    matmul_q4_prepared(W, xq, T, y, ldy, r0, r1, xq + ab);
}

static size_t q8_scratch_bytes(const g4_mat *W, int T) { return (size_t)T * (size_t)g4__q8_act_stride(W->cols) + 64; }
static size_t q4_scratch_bytes(const g4_mat *W, int T) { return g4__q4_act_bytes(W, T) + 64; }

/* the quantized dtypes' matmuls (kernels_internal.h g4__qmm), plain activation records */
static const g4__qmm qmm[G4_DT_COUNT] = {
    [G4_DT_Q8_0] = {matmul_q8, q8_scratch_bytes, g4__q8_act_bytes_plain, g4__q8_prepare_plain, matmul_q8_prepared},
    [G4_DT_Q4_0] = {matmul_q4, q4_scratch_bytes, g4__q4_act_bytes, g4__q4_prepare_plain, matmul_q4_prepared},
};

static size_t matmul_scratch_bytes(const g4_mat *W, int T) {
    if (qmm[W->dtype].matmul) return qmm[W->dtype].scratch_bytes(W, T);
    return T > SMALL_T ? f_scratch_bytes() : 0;
}

static void matmul(const g4_mat *W, const float *x, int64_t ldx, int T, float *y, int64_t ldy,
                   int64_t r0, int64_t r1, void *scratch) {
    if (r1 <= r0 || T <= 0) return;
    void *owned = NULL;
    size_t need = matmul_scratch_bytes(W, T);
    if (need && !scratch) {
        if (!(scratch = owned = malloc(need))) return;
    }
    if (qmm[W->dtype].matmul) qmm[W->dtype].matmul(W, x, ldx, T, y, ldy, r0, r1, scratch);
    else {
        if (T == 1) {
            if (W->dtype == G4_DT_F32) matvec_dt(G4_DT_F32, W, x, y, r0, r1);
            else if (W->dtype == G4_DT_BF16) matvec_dt(G4_DT_BF16, W, x, y, r0, r1);
            else matvec_dt(G4_DT_F16, W, x, y, r0, r1);
        } else if (T <= SMALL_T) {
            if (W->dtype == G4_DT_F32) matmul_direct_dt(G4_DT_F32, W, x, ldx, T, y, ldy, r0, r1);
            else if (W->dtype == G4_DT_BF16) matmul_direct_dt(G4_DT_BF16, W, x, ldx, T, y, ldy, r0, r1);
            else matmul_direct_dt(G4_DT_F16, W, x, ldx, T, y, ldy, r0, r1);
        } else matmul_tiled(W, x, ldx, T, y, ldy, r0, r1, scratch);
    }
    free(owned);
}

/* ---- the rest ---- */

AI float dot8(const float *a, const float *b, int64_t n) {
    __m256 acc = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 8 <= n; k += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + k), _mm256_loadu_ps(b + k), acc);
    if (k < n) acc = _mm256_fmadd_ps(ldx_part(a + k, n - k), ldx_part(b + k, n - k), acc);
    return hsum8(acc);
}

static void rmsnorm(float *y, const float *x, const float *w, int64_t n, float eps) {
    float ss = dot8(x, x, n);
    __m256 inv = _mm256_set1_ps(1.0f / sqrtf(ss / (float)n + eps));
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), inv);
        if (w) v = _mm256_mul_ps(v, _mm256_loadu_ps(w + i));
        _mm256_storeu_ps(y + i, v);
    }
    if (i < n) {
        __m256 v = _mm256_mul_ps(ldx_part(x + i, n - i), inv);
        if (w) v = _mm256_mul_ps(v, ldx_part(w + i, n - i));
        st_part(y + i, v, n - i);
    }
}

static void rope(float *x, const float *c, const float *s, int64_t d) {
    const int64_t h = d / 2;
    for (int64_t i = 0; i < h; i += 8) {
        const int64_t m = h - i < 8 ? h - i : 8;
        __m256 a = ldx_part(x + i, m), b = ldx_part(x + i + h, m);
        __m256 cv = ldx_part(c + i, m), sv = ldx_part(s + i, m);
        st_part(x + i, _mm256_sub_ps(_mm256_mul_ps(a, cv), _mm256_mul_ps(b, sv)), m);
        st_part(x + i + h, _mm256_add_ps(_mm256_mul_ps(b, cv), _mm256_mul_ps(a, sv)), m);
    }
}

static void gelu_mul(float *out, const float *gate, const float *up, int64_t n) {
    const __m256 k0 = _mm256_set1_ps(0.7978845608028654f), k1 = _mm256_set1_ps(0.044715f);
    const __m256 half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f);
    for (int64_t i = 0; i < n; i += 8) {
        const int64_t m = n - i < 8 ? n - i : 8;
        __m256 g = ldx_part(gate + i, m), u = ldx_part(up + i, m);
        __m256 g3 = _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(k1, g), g), g);
        __m256 t = tanh8(_mm256_mul_ps(k0, _mm256_add_ps(g, g3)));
        st_part(out + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(half, g), _mm256_add_ps(one, t)), u), m);
    }
}

static void softcap(float *y, const float *x, float cap, int64_t n) {
    const __m256 c = _mm256_set1_ps(cap);
    for (int64_t i = 0; i < n; i += 8) {
        const int64_t m = n - i < 8 ? n - i : 8;
        st_part(y + i, _mm256_mul_ps(c, tanh8(_mm256_div_ps(ldx_part(x + i, m), c))), m);
    }
}

static void add(float *y, const float *a, const float *b, int64_t n) {
    for (int64_t i = 0; i < n; i += 8) {
        const int64_t m = n - i < 8 ? n - i : 8;
        st_part(y + i, _mm256_add_ps(ldx_part(a + i, m), ldx_part(b + i, m)), m);
    }
}

static void scale(float *y, const float *x, float s, int64_t n) {
    const __m256 sv = _mm256_set1_ps(s);
    for (int64_t i = 0; i < n; i += 8) {
        const int64_t m = n - i < 8 ? n - i : 8;
        st_part(y + i, _mm256_mul_ps(ldx_part(x + i, m), sv), m);
    }
}

static void row_to_f32(float *dst, const void *src, int dt, int64_t n) {
    switch (dt) {
    case G4_DT_F32: memmove(dst, src, (size_t)n * 4); break;
    case G4_DT_BF16:
    case G4_DT_F16:
        for (int64_t i = 0; i < n; i += 8) {
            const int64_t m = n - i < 8 ? n - i : 8;
            __m256 v = dt == G4_DT_BF16 ? ldw_part(G4_DT_BF16, src, i, m) : ldw_part(G4_DT_F16, src, i, m);
            st_part(dst + i, v, m);
        }
        break;
    case G4_DT_Q8_0: {
        const g4_block_q8_0 *b = src;
        for (int64_t i = 0; i < n / G4_Q8_BLOCK; i++) {
            __m256 d = _mm256_set1_ps(g4_f16_to_f32(b[i].d));
            for (int j = 0; j < 4; j++) {
                __m128i q = _mm_loadl_epi64((const __m128i *)(b[i].qs + 8 * j));
                _mm256_storeu_ps(dst + i * 32 + 8 * j, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q))));
            }
        }
        break;
    }
    default: g4_dtype_info(dt)->to_f32(src, dst, n); break; /* the table's (q4_0: no faster here) */
    }
}

enum { AKB = 32 };

/* out[0..d) += p[b] * v[b][0..d) for b = 0..nb-1 in order, 64 floats of d at a time. */
static void attn_block(float *out, int64_t d, const float *const *v, const float *p, int nb) {
    int64_t i0 = 0;
    for (; i0 + 64 <= d; i0 += 64) {
        __m256 acc[8];
        for (int c = 0; c < 8; c++) acc[c] = _mm256_loadu_ps(out + i0 + 8 * c);
        for (int b = 0; b < nb; b++) {
            const __m256 pb = _mm256_set1_ps(p[b]);
            for (int c = 0; c < 8; c++) acc[c] = _mm256_fmadd_ps(pb, _mm256_loadu_ps(v[b] + i0 + 8 * c), acc[c]);
        }
        for (int c = 0; c < 8; c++) _mm256_storeu_ps(out + i0 + 8 * c, acc[c]);
    }
    for (; i0 < d; i0 += 8) {
        const int64_t m = d - i0 < 8 ? d - i0 : 8;
        __m256 acc = ldx_part(out + i0, m);
        for (int b = 0; b < nb; b++) acc = _mm256_fmadd_ps(_mm256_set1_ps(p[b]), ldx_part(v[b] + i0, m), acc);
        st_part(out + i0, acc, m);
    }
}

/* Softmax of nk scores in place: max, exp, sum (8 lanes), scale. */
static void softmax8(float *scores, int64_t nk) {
    float mx = -INFINITY;
    for (int64_t j = 0; j < nk; j++) mx = scores[j] > mx ? scores[j] : mx;
    const __m256 mxv = _mm256_set1_ps(mx);
    __m256 sv = _mm256_setzero_ps();
    for (int64_t j = 0; j < nk; j += 8) {
        const int64_t m = nk - j < 8 ? nk - j : 8;
        __m256 e = _mm256_and_ps(exp8(_mm256_sub_ps(ldx_part(scores + j, m), mxv)),
                                 _mm256_castsi256_ps(tailmask(m)));
        st_part(scores + j, e, m);
        sv = _mm256_add_ps(sv, e);
    }
    const float inv = 1.0f / hsum8(sv);
    for (int64_t j = 0; j < nk; j++) scores[j] *= inv;
}

static void attention1(float *out, const float *q, int64_t d, const g4_kv_seg *segs, int nseg,
                       float *scores) {
    int64_t nk = 0;
    for (int s = 0; s < nseg; s++) {
        const float *k = segs[s].k;
        const int64_t st = segs[s].stride, n = segs[s].n;
        int64_t j = 0;
        for (; j + 4 <= n; j += 4, nk += 4) mv_rows(G4_DT_F32, 4, (const char *)(k + j * st), st * 4, q, d, scores + nk);
        for (; j < n; j++) scores[nk++] = dot8(k + j * st, q, d);
    }
    if (nk == 0) {
        memset(out, 0, (size_t)d * sizeof(float));
        return;
    }
    softmax8(scores, nk);
    /* keys in blocks of AKB, slice accumulators parked in out between blocks (order unchanged) */
    memset(out, 0, (size_t)d * sizeof(float));
    const float *vp[AKB];
    int nb = 0;
    int64_t j0 = 0;
    for (int s = 0; s < nseg; s++)
        for (int64_t j = 0; j < segs[s].n; j++) {
            vp[nb++] = segs[s].v + j * segs[s].stride;
            if (nb == AKB) {
                attn_block(out, d, vp, scores + j0, nb);
                j0 += nb;
                nb = 0;
            }
        }
    if (nb) attn_block(out, d, vp, scores + j0, nb);
}

/* one head after the other (the avx512 set shares the key and value reads between heads) */
static void attention(float *out, const float *q, int nq, int64_t d, const g4_kv_seg *segs, int nseg,
                      float *scores) {
    for (int h = 0; h < nq; h++) attention1(out + h * d, q + h * d, d, segs, nseg, scores);
}

/* bf16 / q8_0 rows: dequantized into L1 tiles once for all heads, then attention1's
 * arithmetic on them (4-row tiles from each segment's start, one row at a time for the rest;
 * values in blocks: the order over keys is unchanged), so the bits are attention's. */
static void attention_kv(float *out, const float *q, int nq, int64_t d, const g4_kvq_seg *segs, int nseg, int dt,
                         float *scratch) {
    int64_t nk = 0;
    for (int s = 0; s < nseg; s++) nk += segs[s].n;
    if (nk == 0) {
        memset(out, 0, (size_t)nq * (size_t)d * sizeof(float));
        return;
    }
    float *tile = scratch + (size_t)nq * (size_t)nk;
    int64_t j0 = 0;
    for (int s = 0; s < nseg; s++) {
        const char *k = segs[s].k;
        const int64_t st = segs[s].stride, n = segs[s].n;
        for (int64_t j = 0; j < n; j += 4) {
            const int kr = n - j < 4 ? (int)(n - j) : 4;
            for (int r = 0; r < kr; r++) row_to_f32(tile + r * d, k + (j + r) * st, dt, d);
            for (int h = 0; h < nq; h++) {
                float *sc = scratch + (size_t)h * (size_t)nk + j0 + j;
                if (kr == 4) mv_rows(G4_DT_F32, 4, (const char *)tile, d * 4, q + h * d, d, sc);
                else
                    for (int r = 0; r < kr; r++) sc[r] = dot8(tile + r * d, q + h * d, d);
            }
        }
        j0 += n;
    }
    for (int h = 0; h < nq; h++) softmax8(scratch + (size_t)h * (size_t)nk, nk);
    memset(out, 0, (size_t)nq * (size_t)d * sizeof(float));
    const float *vp[G4_ATTN_KV_TILE];
    int nb = 0;
    j0 = 0;
    for (int s = 0; s < nseg; s++)
        for (int64_t j = 0; j < segs[s].n; j++) {
            row_to_f32(tile + nb * d, (const char *)segs[s].v + j * segs[s].stride, dt, d);
            vp[nb] = tile + nb * d;
            if (++nb == G4_ATTN_KV_TILE) {
                for (int h = 0; h < nq; h++) attn_block(out + h * d, d, vp, scratch + (size_t)h * (size_t)nk + j0, nb);
                j0 += nb;
                nb = 0;
            }
        }
    for (int h = 0; nb && h < nq; h++) attn_block(out + h * d, d, vp, scratch + (size_t)h * (size_t)nk + j0, nb);
}

G4__QMM_ENTRY_POINTS(qmm)

const g4_kernels g4_kernels_avx2 = {
    .name = "avx2",
    .matmul = matmul,
    .matmul_scratch_bytes = matmul_scratch_bytes,
    .matmul_act_bytes = act_bytes_any,
    .matmul_prepare = prepare_any,
    .matmul_prepare_tokens = prepare_tokens_any,
    .matmul_prepared = prepared_any,
    .rmsnorm = rmsnorm,
    .rope = rope,
    .gelu_mul = gelu_mul,
    .attention = attention,
    .attention_kv = attention_kv,
    .add = add,
    .scale = scale,
    .softcap = softcap,
    .row_to_f32 = row_to_f32,
};

double g4__fma_burn_avx2(long iters, float *sink) {
    const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
    __m256 a0 = _mm256_set1_ps(0), a1 = _mm256_set1_ps(1), a2 = _mm256_set1_ps(2), a3 = _mm256_set1_ps(3);
    __m256 a4 = _mm256_set1_ps(4), a5 = _mm256_set1_ps(5), a6 = _mm256_set1_ps(6), a7 = _mm256_set1_ps(7);
    __m256 a8 = _mm256_set1_ps(8), a9 = _mm256_set1_ps(9), a10 = _mm256_set1_ps(10), a11 = _mm256_set1_ps(11);
    for (long it = 0; it < iters; it++) {
#define F(v) v = _mm256_fmadd_ps(v, m, c)
        F(a0); F(a1); F(a2); F(a3); F(a4); F(a5); F(a6); F(a7); F(a8); F(a9); F(a10); F(a11);
#undef F
    }
    __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                             _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
    s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11)));
    *sink = hsum8(s);
    return (double)iters * 12 * 8 * 2;
}
