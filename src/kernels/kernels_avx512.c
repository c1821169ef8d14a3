/* kernels_avx512.c — the AVX-512 kernel set (avx512f/bw/vl/dq; VNNI for q8_0 only when the CPU
 * has it, chosen at run time with identical results). Compiled with AVX-512 flags, so nothing in
 * here may run before kernels_dispatch.c has checked cpuid.
 *
 * Canonical order of every dot product (matmul, attention scores, rmsnorm's sum of squares):
 * one 16-lane fp32 accumulator, lane l gets fma(w[k], x[k], acc) for k = l, l+16, l+32, ..
 * in increasing k (the last partial step masked: both operands 0 there), then the fixed
 * reduction ((lo256+hi256) -> (lo128+hi128) -> (0+2, 1+3) -> sum). The T=1 matvec (8 rows per
 * pass over x), the T>1 register tiles (4 rows x 6 tokens; on the tiled path K cut into
 * 8192-wide blocks whose partial 16-lane accumulators are parked in the scratch buffer) and
 * bf16/f16 weights converted to fp32 in registers (exact) all perform exactly those operations
 * per output element, so the bits
 * depend only on K — not on T, the row range or the addresses.
 * q8_0: block b's exact int32 dot goes to lane b mod 16 as fma((float)isum, d_w*d_x, acc); with
 * VNNI the integer dot is sum (x+128)*w - 128*sum w (dpbusd on a register-transposed group),
 * without it |w| * (x*sign w) (maddubs/madd + a reduction tree) — exact either way, so the two
 * paths give the same bits.
 * Knows nothing about Gemma or threads. */
#include "kernels/kernels.h"
#include "kernels/kernels_avx512.h"
#include "kernels/kernels_internal.h"
#include "kernels/kernels_rowlanes_avx512.h"

#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* 16 weights of dtype dt at element k of a row, as exact fp32. */
AI __m512 ldw(int dt, const void *row, int64_t k) {
    if (dt == G4_DT_F32) return _mm512_loadu_ps((const float *)row + k);
    __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)row + k));
    if (dt == G4_DT_BF16) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    return _mm512_cvtph_ps(h);
}
AI __m512 ldw_m(int dt, const void *row, int64_t k, __mmask16 m) {
    if (dt == G4_DT_F32) return _mm512_maskz_loadu_ps(m, (const float *)row + k);
    __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)row + k);
    if (dt == G4_DT_BF16) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    return _mm512_cvtph_ps(h);
}

/* ---- vector tanh (Cephes tanhf, a few ulp; exp16 in kernels_avx512.h) ---- */
AI __m512 tanh16(__m512 x) {
    const __m512 sign = _mm512_set1_ps(-0.0f);
    __m512 ax = _mm512_andnot_ps(sign, x);
    /* |x| < 0.625: odd polynomial */
    __m512 z = _mm512_mul_ps(x, x);
    __m512 p = _mm512_set1_ps(-5.70498872745E-3f);
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(2.06390887954E-2f));
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(-5.37397155531E-2f));
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(1.33314422036E-1f));
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(-3.33332819422E-1f));
    __m512 small = _mm512_fmadd_ps(_mm512_mul_ps(p, z), x, x);
    /* otherwise 1 - 2/(exp(2|x|)+1), sign restored */
    __m512 e = exp16(_mm512_add_ps(ax, ax));
    __m512 big = _mm512_sub_ps(_mm512_set1_ps(1.0f),
                               _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(e, _mm512_set1_ps(1.0f))));
    big = _mm512_or_ps(big, _mm512_and_ps(x, sign));
    __mmask16 is_small = _mm512_cmp_ps_mask(ax, _mm512_set1_ps(0.625f), _CMP_LT_OQ);
    return _mm512_mask_blend_ps(is_small, big, small);
}

/* ---- matmul: f32 / bf16 / f16 ---- */

/* The T = 1 matvec streams 8 rows at once; a prefetch 1 KiB ahead in each row keeps enough
 * reads in flight (the hardware prefetcher alone left a 2.8 GB bf16 matrix at 42-45 GB/s with 2
 * threads; with it 50-55 GB/s; 512 and 1536 bytes were slower: bench/README.md). The hint is
 * T0 (G4_MV_PF_HINT, also the q8_0 dot's): a bare-kernel loop had found NTA as fast, but whole
 * models that stream from memory (8 layers of the 31B, 3-11 GB a token) decoded 1.4-2.5x faster
 * with T0 than with NTA (bench/README.md, 2026-12-04). Prefetches never fault. */
#ifndef G4_MV_PF_HINT
#define G4_MV_PF_HINT _MM_HINT_T0
#endif
#ifndef G4_MV_PREFETCH
#define G4_MV_PREFETCH 1024
#endif
/* T = 1: NRW rows at a time against one x. */
AI void mv_rows_s(const int dt, const int l2, const int NRW, const char *w, int64_t ldw_b, const float *x,
                  int64_t K, float *y, int64_t ys) {
    __m512 acc[8];
#pragma GCC unroll 8
    for (int i = 0; i < NRW; i++) acc[i] = _mm512_setzero_ps();
    int64_t k = 0;
    const int64_t esz = dt == G4_DT_F32 ? 4 : 2;
    for (; k + 16 <= K; k += 16) {
        __m512 xv = _mm512_loadu_ps(x + k);
        if (((k * esz) & 63) == 0) /* once per 64-byte line of each row */
#pragma GCC unroll 8
            for (int i = 0; i < NRW; i++) {
                if (l2) _mm_prefetch(w + i * ldw_b + k * esz + G4_MV_PREFETCH, _MM_HINT_T1);
                else _mm_prefetch(w + i * ldw_b + k * esz + G4_MV_PREFETCH, G4_MV_PF_HINT);
            }
#pragma GCC unroll 8
        for (int i = 0; i < NRW; i++) acc[i] = _mm512_fmadd_ps(ldw(dt, w + i * ldw_b, k), xv, acc[i]);
    }
    if (k < K) {
        __mmask16 m = tailmask(K - k);
        __m512 xv = _mm512_maskz_loadu_ps(m, x + k);
#pragma GCC unroll 8
        for (int i = 0; i < NRW; i++)
            acc[i] = _mm512_fmadd_ps(ldw_m(dt, w + i * ldw_b, k, m), xv, acc[i]);
    }
#pragma GCC unroll 8
    for (int i = 0; i < NRW; i++) y[i * ys] = hsum16(acc[i]);
}
AI void mv_rows(const int dt, const int NRW, const char *w, int64_t ldw_b, const float *x, int64_t K, float *y) {
    mv_rows_s(dt, 0, NRW, w, ldw_b, x, K, y, 1);
}

/* Rows [r0, r1) as 8 runs of S consecutive rows, one row of each run per pass: every run is
 * one stream through consecutive rows (a row's end is the next row's start, where the prefetch
 * already runs), instead of 8 short streams restarted every 8 rows. Then the last < 8 rows. */
AI void matvec_dt(const int dt, const g4_mat *W, const float *x, float *y, int64_t r0, int64_t r1) {
    const char *base = W->data;
    const int64_t K = W->cols, ld = W->ld_bytes;
    const int64_t S = (r1 - r0) / 8; /* S = 1: plain 8-row passes */
    if (g4__prefetch_l2)
        for (int64_t p = 0; p < S; p++) mv_rows_s(dt, 1, 8, base + (r0 + p) * ld, S * ld, x, K, y + r0 + p, S);
    else
        for (int64_t p = 0; p < S; p++) mv_rows_s(dt, 0, 8, base + (r0 + p) * ld, S * ld, x, K, y + r0 + p, S);
    int64_t r = r0 + 8 * S;
    if (r + 4 <= r1) { mv_rows(dt, 4, base + r * ld, ld, x, K, y + r); r += 4; }
    if (r + 2 <= r1) { mv_rows(dt, 2, base + r * ld, ld, x, K, y + r); r += 2; }
    if (r < r1) mv_rows(dt, 1, base + r * ld, ld, x, K, y + r);
}

/* Blocking of the T > SMALL_T loop (kernels_tiled.h; tuning knobs): K block, token block, row
 * block. K blocks are wide: parking 24 accumulators per tile and K block cost more than reading
 * longer rows from L2 (the 31B's 5376- and 8192-wide matrices run in one block, down_proj's
 * 21504 in three). With the rows read in place and token tiles outside row tiles, 2026-12-06,
 * `bench_q4_tiles prefill 4096 5376 512 bf16`, one thread: 122-131 -> 167-174 GFLOP/s. */
#ifndef G4_AVX512_KC
#define G4_AVX512_KC 8192
#define G4_AVX512_TB 48
#define G4_AVX512_RB 32
#endif
#ifndef G4_SMALL_T
#define G4_SMALL_T 32 /* T <= this: direct tiles (measured crossover with the tiled path) */
#endif
enum { MR = 4, NR = 6, KC = G4_AVX512_KC, TB = G4_AVX512_TB, RB = G4_AVX512_RB, SMALL_T = G4_SMALL_T };

/* One register tile: mr rows of dtype dt (pointers at the K block's first element, converted in
 * registers: exact) x nr tokens over the n columns of the current K block. acc: 16 floats per
 * (token j, row i) at accb[(j*RB+i)*16], the partial sums parked between K blocks (first: start
 * from zero, last: reduce into y). */
AI void tile(const int dt, const int mr, const int nr, const char *const *w, const float *x, int64_t ldx,
             int64_t n, float *accb, int first, int last, float *y, int64_t ldy) {
    __m512 acc[MR][NR];
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 8
        for (int j = 0; j < nr; j++)
            acc[i][j] = first ? _mm512_setzero_ps() : _mm512_load_ps(accb + (j * RB + i) * 16);
    int64_t k = 0;
    for (; k + 16 <= n; k += 16) {
        __m512 wv[MR];
#pragma GCC unroll 8
        for (int i = 0; i < mr; i++) wv[i] = ldw(dt, w[i], k);
#pragma GCC unroll 8
        for (int j = 0; j < nr; j++) {
            __m512 xv = _mm512_loadu_ps(x + j * ldx + k);
#pragma GCC unroll 8
            for (int i = 0; i < mr; i++) acc[i][j] = _mm512_fmadd_ps(wv[i], xv, acc[i][j]);
        }
    }
    if (k < n) {
        __mmask16 m = tailmask(n - k);
        __m512 wv[MR];
#pragma GCC unroll 8
        for (int i = 0; i < mr; i++) wv[i] = ldw_m(dt, w[i], k, m);
#pragma GCC unroll 8
        for (int j = 0; j < nr; j++) {
            __m512 xv = _mm512_maskz_loadu_ps(m, x + j * ldx + k);
#pragma GCC unroll 8
            for (int i = 0; i < mr; i++) acc[i][j] = _mm512_fmadd_ps(wv[i], xv, acc[i][j]);
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 8
        for (int j = 0; j < nr; j++) {
            if (last) y[j * ldy + i] = hsum16(acc[i][j]);
            else _mm512_store_ps(accb + (j * RB + i) * 16, acc[i][j]);
        }
}

#define TILE_CASES(dt)                                                                                       \
    switch (mr * 8 + nr) {                                                                                   \
        TC(dt, 1, 1) TC(dt, 1, 2) TC(dt, 1, 3) TC(dt, 1, 4) TC(dt, 1, 5) TC(dt, 1, 6)                        \
        TC(dt, 2, 1) TC(dt, 2, 2) TC(dt, 2, 3) TC(dt, 2, 4) TC(dt, 2, 5) TC(dt, 2, 6)                        \
        TC(dt, 3, 1) TC(dt, 3, 2) TC(dt, 3, 3) TC(dt, 3, 4) TC(dt, 3, 5) TC(dt, 3, 6)                        \
        TC(dt, 4, 1) TC(dt, 4, 2) TC(dt, 4, 3) TC(dt, 4, 4) TC(dt, 4, 5) TC(dt, 4, 6)                        \
    default: break;                                                                                          \
    }

#define LANES 16
#include "kernels/kernels_tiled.h"

/* Small T (batched decode): mr rows x nr tokens straight from W (converted in registers) over
 * the whole K, accumulators never leave the registers. W is read from memory once per row
 * tile (with the matvec's prefetch ahead in each row: without it, T = 2..4 streamed at half the
 * T = 1 speed); further token tiles re-read it from L2. Same per-element order as everything
 * else. */
AI void tile_direct_s(const int dt, const int mr, const int nr, const char *w, int64_t ldw_b,
                      const float *x, int64_t ldx, int64_t K, float *y, int64_t ldy, int64_t ys) {
    __m512 acc[8][6];
    const int64_t esz = dt == G4_DT_F32 ? 4 : 2;
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 8
        for (int j = 0; j < nr; j++) acc[i][j] = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 16 <= K; k += 16) {
        __m512 wv[8];
        if (((k * esz) & 63) == 0)
#pragma GCC unroll 8
            for (int i = 0; i < mr; i++) _mm_prefetch(w + i * ldw_b + k * esz + G4_MV_PREFETCH, G4_MV_PF_HINT);
#pragma GCC unroll 8
        for (int i = 0; i < mr; i++) wv[i] = ldw(dt, w + i * ldw_b, k);
#pragma GCC unroll 8
        for (int j = 0; j < nr; j++) {
            __m512 xv = _mm512_loadu_ps(x + j * ldx + k);
#pragma GCC unroll 8
            for (int i = 0; i < mr; i++) acc[i][j] = _mm512_fmadd_ps(wv[i], xv, acc[i][j]);
        }
    }
    if (k < K) {
        __mmask16 m = tailmask(K - k);
        __m512 wv[8];
#pragma GCC unroll 8
        for (int i = 0; i < mr; i++) wv[i] = ldw_m(dt, w + i * ldw_b, k, m);
#pragma GCC unroll 8
        for (int j = 0; j < nr; j++) {
            __m512 xv = _mm512_maskz_loadu_ps(m, x + j * ldx + k);
#pragma GCC unroll 8
            for (int i = 0; i < mr; i++) acc[i][j] = _mm512_fmadd_ps(wv[i], xv, acc[i][j]);
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 8
        for (int j = 0; j < nr; j++) y[j * ldy + i * ys] = hsum16(acc[i][j]);
}
AI void tile_direct(const int dt, const int mr, const int nr, const char *w, int64_t ldw_b,
                    const float *x, int64_t ldx, int64_t K, float *y, int64_t ldy) {
    tile_direct_s(dt, mr, nr, w, ldw_b, x, ldx, K, y, ldy, 1);
}

/* T <= 3: 8 rows a tile (8 streams in flight, as the matvec; 8 x 3 accumulators fit the
 * registers); larger T: 4 rows x 6 tokens. */
AI void matmul_direct_dt(const int dt, const g4_mat *W, const float *x, int64_t ldx, int T, float *y,
                         int64_t ldy, int64_t r0, int64_t r1) {
    const char *base = W->data;
    const int64_t K = W->cols, ld = W->ld_bytes;
    /* T <= 3: 8 runs of S consecutive rows, one row of each per tile (long streams, as the
     * matvec; S = 1: plain 8-row tiles) */
    const int64_t S = T <= 3 ? (r1 - r0) / 8 : 0;
    for (int64_t p = 0; p < S; p++) {
        const char *w = base + (r0 + p) * ld;
        if (T == 3) tile_direct_s(dt, 8, 3, w, S * ld, x, ldx, K, y + r0 + p, ldy, S);
        else if (T == 2) tile_direct_s(dt, 8, 2, w, S * ld, x, ldx, K, y + r0 + p, ldy, S);
        else tile_direct_s(dt, 8, 1, w, S * ld, x, ldx, K, y + r0 + p, ldy, S);
    }
    int64_t r = r0 + 8 * S;
    for (; r + 4 <= r1; r += 4)
        for (int t = 0; t < T; t += 6) {
            const char *w = base + r * ld;
            const float *xt = x + t * ldx;
            float *yt = y + t * ldy + r;
            switch (T - t < 6 ? T - t : 6) {
            case 6: tile_direct(dt, 4, 6, w, ld, xt, ldx, K, yt, ldy); break;
            case 5: tile_direct(dt, 4, 5, w, ld, xt, ldx, K, yt, ldy); break;
            case 4: tile_direct(dt, 4, 4, w, ld, xt, ldx, K, yt, ldy); break;
            case 3: tile_direct(dt, 4, 3, w, ld, xt, ldx, K, yt, ldy); break;
            case 2: tile_direct(dt, 4, 2, w, ld, xt, ldx, K, yt, ldy); break;
            default: tile_direct(dt, 4, 1, w, ld, xt, ldx, K, yt, ldy); break;
            }
        }
    for (; r < r1; r++)
        for (int t = 0; t < T; t++) mv_rows(dt, 1, base + r * ld, ld, x + t * ldx, K, y + t * ldy + r);
}

/* ---- matmul: q8_0 ---- */

/* 8 pair-vectors (see q8_pair, block order lo = i + 4*(i/4), hi = lo + 4) -> lane L = block L. */
AI __m512i q8_reduce(__m512i p0, __m512i p1, __m512i p2, __m512i p3, __m512i p4, __m512i p5,
                     __m512i p6, __m512i p7) {
    __m512i q0 = _mm512_add_epi32(_mm512_unpacklo_epi32(p0, p1), _mm512_unpackhi_epi32(p0, p1));
    __m512i q1 = _mm512_add_epi32(_mm512_unpacklo_epi32(p2, p3), _mm512_unpackhi_epi32(p2, p3));
    __m512i q2 = _mm512_add_epi32(_mm512_unpacklo_epi32(p4, p5), _mm512_unpackhi_epi32(p4, p5));
    __m512i q3 = _mm512_add_epi32(_mm512_unpacklo_epi32(p6, p7), _mm512_unpackhi_epi32(p6, p7));
    __m512i r0 = _mm512_add_epi32(_mm512_unpacklo_epi64(q0, q1), _mm512_unpackhi_epi64(q0, q1));
    __m512i r1 = _mm512_add_epi32(_mm512_unpacklo_epi64(q2, q3), _mm512_unpackhi_epi64(q2, q3));
    return _mm512_add_epi32(_mm512_shuffle_i32x4(r0, r1, 0x88), _mm512_shuffle_i32x4(r0, r1, 0xDD));
}
#define Q8_REDUCE(p) q8_reduce(p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7])

AI __m512i ldpair(const int8_t *a, const int8_t *b) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)a)),
                              _mm256_loadu_si256((const __m256i *)b), 1);
}

/* f16 scales of 16 consecutive blocks as fp32 (scalar loads: gathers are slow on some cores) */
AI __m512 q8_scales(const g4_block_q8_0 *w) {
    uint16_t h[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) h[i] = w[i].d;
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)h));
}

/* The last nb % 16 blocks of a row, zero-padded to a whole group (zero weights, zero scales). */
static const g4_block_q8_0 *q8_tail(const g4_block_q8_0 *w, int64_t nb, g4_block_q8_0 *tmp) {
    const int64_t g = nb / 16 * 16;
    memset(tmp, 0, 16 * sizeof *tmp);
    memcpy(tmp, w + g, (size_t)(nb - g) * sizeof *tmp);
    return tmp;
}

/* AVX512-BW path (no VNNI): one row times one token with natural-order int8 activations
 * (zero-padded to whole groups in the scratch record). */
AI __m512 q8_group_bw(const g4_block_q8_0 *w, const int8_t *xq, const float *xd, __m512 acc) {
    const __m512i zero = _mm512_setzero_si512(), one16 = _mm512_set1_epi16(1);
    __m512i p[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) {
        const int lo = i + 4 * (i / 4), hi = lo + 4;
        __m512i wv = ldpair(w[lo].qs, w[hi].qs), xv = ldpair(xq + lo * 32, xq + hi * 32);
        __m512i aw = _mm512_abs_epi8(wv);                                       /* -128 -> 128 (u8) */
        __m512i sx = _mm512_mask_sub_epi8(xv, _mm512_movepi8_mask(wv), zero, xv); /* x * sign(w) */
        p[i] = _mm512_madd_epi16(_mm512_maddubs_epi16(aw, sx), one16); /* |x| <= 127: no saturation */
    }
    __m512 isum = _mm512_cvtepi32_ps(Q8_REDUCE(p));
    return _mm512_fmadd_ps(isum, _mm512_mul_ps(q8_scales(w), _mm512_loadu_ps(xd)), acc);
}

static float dot_q8_bw(const g4_block_q8_0 *w, const int8_t *xq, const float *xd, int64_t nb) {
    __m512 acc = _mm512_setzero_ps();
    int64_t g = 0;
    for (; g + 16 <= nb; g += 16) acc = q8_group_bw(w + g, xq + g * 32, xd + g, acc);
    if (g < nb) {
        g4_block_q8_0 tmp[16];
        acc = q8_group_bw(q8_tail(w, nb, tmp), xq + g * 32, xd + g, acc);
    }
    return hsum16(acc);
}

/* VNNI path. The 16 blocks of a group are transposed in registers (q8_wt) so that vector j,
 * lane L holds dword q8_dw[j] (4 int8) of block L; the activations are prepared once per token in
 * the same order as u8 (x+128 = x ^ 0x80). Then vpdpbusd accumulates each block's integer dot
 * directly in its lane: sum (x+128)*w - 128*sum w, both exact. */
static const int q8_dw[8] = {0, 4, 1, 5, 2, 6, 3, 7};

/* 16 blocks -> 8 vectors, lane L = block L, vector j = dword q8_dw[j] of each block. */
AI void q8_wt(const g4_block_q8_0 *w, __m512i *v) {
    __m512i P[8], A[4], B[4];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) {
        const int lo = i + 4 * (i / 4);
        P[i] = ldpair(w[lo].qs, w[lo + 4].qs);
    }
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        A[k] = _mm512_unpacklo_epi32(P[2 * k], P[2 * k + 1]);
        B[k] = _mm512_unpackhi_epi32(P[2 * k], P[2 * k + 1]);
    }
    /* chunk c of C/D/E/F: element 0/1/2/3 of chunk c of P0..P3 (primed: P4..P7) */
    __m512i C = _mm512_unpacklo_epi64(A[0], A[1]), D = _mm512_unpackhi_epi64(A[0], A[1]);
    __m512i E = _mm512_unpacklo_epi64(B[0], B[1]), F = _mm512_unpackhi_epi64(B[0], B[1]);
    __m512i C2 = _mm512_unpacklo_epi64(A[2], A[3]), D2 = _mm512_unpackhi_epi64(A[2], A[3]);
    __m512i E2 = _mm512_unpacklo_epi64(B[2], B[3]), F2 = _mm512_unpackhi_epi64(B[2], B[3]);
    v[0] = _mm512_shuffle_i32x4(C, C2, 0x88); /* dword 0 */
    v[1] = _mm512_shuffle_i32x4(C, C2, 0xDD); /* dword 4 */
    v[2] = _mm512_shuffle_i32x4(D, D2, 0x88); /* 1 */
    v[3] = _mm512_shuffle_i32x4(D, D2, 0xDD); /* 5 */
    v[4] = _mm512_shuffle_i32x4(E, E2, 0x88); /* 2 */
    v[5] = _mm512_shuffle_i32x4(E, E2, 0xDD); /* 6 */
    v[6] = _mm512_shuffle_i32x4(F, F2, 0x88); /* 3 */
    v[7] = _mm512_shuffle_i32x4(F, F2, 0xDD); /* 7 */
}

/* T <= Q8_ROW_T (decode) VNNI path: the activations stay signed, rearranged so that pair i (blocks
 * lo_i = i + 4*(i/4) and lo_i + 4) is one 64-byte load; |w| * (x * sign w) with vpdpbusd and one
 * reduction tree per group (the transpose above only pays when shared by several tokens). */
static void q8_prepare_pairs(char *rec, int64_t K) {
    const int64_t ngroups = g4__q8_act_nb_pad(K) / 16;
    int8_t tmp[512];
    for (int64_t g = 0; g < ngroups; g++) {
        int8_t *q = (int8_t *)rec + g * 512;
        memcpy(tmp, q, 512);
        for (int i = 0; i < 8; i++) {
            const int lo = i + 4 * (i / 4);
            memcpy(q + i * 64, tmp + lo * 32, 32);
            memcpy(q + i * 64 + 32, tmp + (lo + 4) * 32, 32);
        }
    }
}

/* One group of nb (16, or fewer at the end of a row) blocks. Blocks past nb count as zero
 * weights with zero scales, exactly as a zero-padded group, without reading past the row: a row
 * slice of 42 blocks (down_proj at TP 1) ends in such a partial group on every row, and copying
 * it into a padded buffer (q8_tail) cost more than the group itself. */
AI __m512 q8_group_t1_n(const g4_block_q8_0 *w, const int nb, const __m512i *xp, const float *xd, __m512 acc) {
    const __m512i zero = _mm512_setzero_si512();
    const __m256i zero8 = _mm256_setzero_si256();
    __m512i p[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) {
        const int lo = i + 4 * (i / 4);
        __m256i a = lo < nb ? _mm256_loadu_si256((const __m256i *)w[lo].qs) : zero8;
        __m256i b = lo + 4 < nb ? _mm256_loadu_si256((const __m256i *)w[lo + 4].qs) : zero8;
        __m512i wv = _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1), xv = _mm512_load_si512(xp + i);
        __m512i sx = _mm512_mask_sub_epi8(xv, _mm512_movepi8_mask(wv), zero, xv);
        p[i] = _mm512_dpbusd_epi32(zero, _mm512_abs_epi8(wv), sx);
    }
    __m512 isum = _mm512_cvtepi32_ps(Q8_REDUCE(p));
    __m512 dw;
    if (nb == 16) dw = q8_scales(w);
    else {
        uint16_t h[16];
        for (int i = 0; i < 16; i++) h[i] = i < nb ? w[i].d : 0;
        dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)h));
    }
    return _mm512_fmadd_ps(isum, _mm512_mul_ps(dw, _mm512_loadu_ps(xd)), acc);
}

/* The T = 1 q8_0 dot walks one row at a time: a single stream per thread, which the hardware
 * prefetcher alone left at ~29 / 49 GB/s (1 / 2 threads, 5376 x 21504); a prefetch 8 groups
 * (4352 bytes) ahead: 38 / 68-73 GB/s (3264-8704 bytes measured alike; hint G4_MV_PF_HINT). */
#ifndef G4_Q8_PREFETCH
#define G4_Q8_PREFETCH 4352
#endif
static float dot_q8_t1(const g4_block_q8_0 *w, const char *rec, int64_t qsb, int64_t nb) {
    const __m512i *xp = (const __m512i *)rec;
    const float *xd = (const float *)(rec + qsb);
    __m512 acc = _mm512_setzero_ps();
    int64_t g = 0;
    for (; g + 16 <= nb; g += 16) {
        const char *pf = (const char *)(w + g) + G4_Q8_PREFETCH;
#pragma GCC unroll 9
        for (int l = 0; l < 9; l++) _mm_prefetch(pf + 64 * l, G4_MV_PF_HINT); /* the 544-byte group 8 ahead */
        acc = q8_group_t1_n(w + g, 16, xp + g / 2, xd + g, acc);
    }
    if (g < nb) acc = q8_group_t1_n(w + g, (int)(nb - g), xp + g / 2, xd + g, acc);
    return hsum16(acc);
}

/* Prefill (T > Q8_ROW_T, VNNI): kernels_rowlanes_avx512.h, 16 rows in the lanes of a vector. Its
 * panel of rows [r, re) (at most 32; missing rows of a 16-row half zero, an absent half not
 * written): class L (block L of a group), group g at
 * (L * ng + g) * RL_PG_Q8: rows 16 rv + i in lane i of vector rv * 8 + j (dword q8_dw[j] of the
 * block, signed), d_w at 1024 + 64 rv, -128 sum w at 1152 + 64 rv (the integer sum starts there:
 * sum (x + 128) w - 128 sum w = sum x w, exact); each row's group transposed by q8_wt (lane =
 * block), then 16 rows at a time 16 x 16. A partial last group reads as zero blocks (q8_tail). */
static void q8_cm_panel(const g4_mat *W, int64_t r, int64_t re, char *panel) {
    const int64_t nb = W->cols / G4_Q8_BLOCK, ng = (nb + 15) / 16;
    const __m512i ones = _mm512_set1_epi8(1);
    for (int64_t g = 0; g < ng; g++)
        for (int rv = 0; rv < 2 && r + 16 * rv < re; rv++) {
            __m512i V[10][16];
            for (int i = 0; i < 16; i++) {
                const int64_t row = r + 16 * rv + i;
                if (row >= re) {
                    for (int j = 0; j < 10; j++) V[j][i] = _mm512_setzero_si512();
                    continue;
                }
                const g4_block_q8_0 *w = (const g4_block_q8_0 *)((const char *)W->data + row * W->ld_bytes) + 16 * g;
                g4_block_q8_0 tmp[16];
                if (nb - 16 * g < 16) w = q8_tail(w - 16 * g, nb, tmp);
                __m512i v[8];
                q8_wt(w, v);
                __m512i sw = _mm512_setzero_si512();
                for (int j = 0; j < 8; j++) {
                    V[j][i] = v[j];
                    sw = _mm512_dpbusd_epi32(sw, ones, v[j]);
                }
                V[8][i] = _mm512_castps_si512(q8_scales(w));
                V[9][i] = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sw, 7));
            }
            for (int j = 0; j < 10; j++) rl_transpose16(V[j]);
            for (int L = 0; L < 16; L++) {
                char *p = panel + (L * ng + g) * RL_PG_Q8;
                for (int j = 0; j < 8; j++) _mm512_store_si512((__m512i *)(p + rv * 512) + j, V[j][L]);
                _mm512_store_si512((__m512i *)(p + 1024) + rv, V[8][L]);
                _mm512_store_si512((__m512i *)(p + 1152) + rv, V[9][L]);
            }
        }
}

static const int32_t q8_cls[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

/* Up to this many tokens the VNNI path takes the T = 1 dot once per token and row (the row
 * stays in L1 after the first); beyond, the rows-in-lanes prefill. */
#ifndef Q8_ROW_T
#define Q8_ROW_T 4
#endif

static size_t q8_act_bytes(const g4_mat *W, int T) {
    return (size_t)T * (size_t)g4__q8_act_stride(W->cols);
}

/* Quantized, then arranged for the path matmul_q8_prepared takes for this T (VNNI: pairs for
 * T <= Q8_ROW_T, else class-major in blocks of RL_TB tokens, x + 128 as u8: dword q8_dw[j] of
 * block L of group g at x[L][g][j][token], d_x at d[L][g][token]). Quantizing a group of 512
 * values alone gives the bytes of quantizing the token (per-block scales, zero padding). */
static void q8_prepare(const g4_mat *W, const float *x, int64_t ldx, int T, int t0, int t1, void *act) {
    const int64_t K = W->cols, qstride = g4__q8_act_stride(K), ng = g4__q8_act_nb_pad(K) / 16;
    char *xq = act;
    if (!g4__avx512_vnni || T <= Q8_ROW_T) {
        for (int t = t0; t < t1; t++) {
            g4__q8_quantize_act_avx512(x + t * ldx, K, xq + t * qstride);
            if (g4__avx512_vnni) q8_prepare_pairs(xq + t * qstride, K);
        }
        return;
    }
    const __m512i lane8 = _mm512_slli_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0), 3);
    for (int t = t0; t < t1; t++) {
        const int b0 = t / RL_TB * RL_TB;
        const int64_t n = T - b0 < RL_TB ? T - b0 : RL_TB, tt = t - b0;
        const rl_block cb = rl_block_at(act, qstride, ng, b0, n);
        for (int64_t g = 0; g < ng; g++) {
            _Alignas(64) int8_t tmp[512 + 64];
            g4__q8_quantize_act_avx512(x + t * ldx + 512 * g, K - 512 * g < 512 ? K - 512 * g : 512, tmp);
            for (int j = 0; j < 8; j++) {
                const __m512i xv = _mm512_i32gather_epi32(_mm512_add_epi32(lane8, _mm512_set1_epi32(q8_dw[j])), (const void *)tmp, 4);
                _mm512_i32scatter_epi32((void *)cb.x, rl_x_index(ng, n, g, j, tt), _mm512_xor_si512(xv, _mm512_set1_epi8((char)0x80)), 4);
            }
            _mm512_i32scatter_ps((void *)cb.d, rl_d_index(ng, n, g, tt), _mm512_load_ps((const float *)(tmp + 512)), 4);
        }
    }
}

static void matmul_q8_prepared(const g4_mat *W, const void *act, int T, float *y, int64_t ldy,
                               int64_t r0, int64_t r1, void *scratch) {
    const int64_t K = W->cols, nb = K / G4_Q8_BLOCK, qstride = g4__q8_act_stride(K);
    const int64_t qsb = g4__q8_act_qs_bytes(K);
    const char *xq = act;
    if (g4__avx512_vnni && T <= Q8_ROW_T) { /* a row streams in for the first token, the others find it in L1 */
        for (int64_t r = r0; r < r1; r++)
            for (int t = 0; t < T; t++)
                y[t * ldy + r] = dot_q8_t1((const void *)((const char *)W->data + r * W->ld_bytes), xq + t * qstride, qsb, nb);
        return;
    }
    if (g4__avx512_vnni) {
        rl_prefill(1, 1, W, q8_cm_panel, q8_cls, act, qstride, T, y, ldy, r0, r1, scratch);
        return;
    }
    for (int64_t r = r0; r < r1; r++) {
        const g4_block_q8_0 *row = (const void *)((const char *)W->data + r * W->ld_bytes);
        for (int t = 0; t < T; t++) {
            const char *rec = xq + t * qstride;
            y[t * ldy + r] = dot_q8_bw(row, (const int8_t *)rec, (const float *)(rec + qsb), nb);
        }
    }
}

/* kernels.h matmul_slices for q8_0: each row through all its slices (one stream; the T = 1 dot's
 * prefetch runs on into the row's next slice), each slice's dot as matmul_q8_prepared's T = 1. */
static void q8_matmul_slices(const g4_mat *W, int64_t slice_cols, int nslices, const void *act, size_t act_stride, float *y,
                             int64_t ldy, int64_t r0, int64_t r1) {
    const int64_t nb = slice_cols / G4_Q8_BLOCK, qsb = g4__q8_act_qs_bytes(slice_cols);
    for (int64_t r = r0; r < r1; r++) {
        const g4_block_q8_0 *row = (const void *)((const char *)W->data + r * W->ld_bytes);
        for (int s = 0; s < nslices; s++) {
            const char *rec = (const char *)act + (size_t)s * act_stride;
            y[s * ldy + r] = g4__avx512_vnni ? dot_q8_t1(row + s * nb, rec, qsb, nb)
                                             : dot_q8_bw(row + s * nb, (const int8_t *)rec, (const float *)(rec + qsb), nb);
        }
    }
}

static void matmul_slices(const g4_mat *W, int64_t slice_cols, int nslices, const void *act, size_t act_stride, float *y,
                          int64_t ldy, int64_t r0, int64_t r1) {
    if (W->dtype == G4_DT_Q4_0) {
        g4__q4_matmul_slices_avx512(W, slice_cols, nslices, act, act_stride, y, ldy, r0, r1);
        return;
    }
    G4_ASSERT(W->dtype == G4_DT_Q8_0 && slice_cols > 0 && slice_cols % G4_Q8_BLOCK == 0 && nslices >= 1 &&
                  slice_cols * nslices <= W->cols,
              "matmul slices: %d slices of %lld columns of a %s matrix of %lld", nslices, (long long)slice_cols,
              g4_dtype_name(W->dtype), (long long)W->cols);
    q8_matmul_slices(W, slice_cols, nslices, act, act_stride, y, ldy, r0, r1);
}

static void matmul_q8(const g4_mat *W, const float *x, int64_t ldx, int T, float *y, int64_t ldy,
                      int64_t r0, int64_t r1, void *scratch) {
    char *xq = g4__align64(scratch);
    q8_prepare(W, x, ldx, T, 0, T, xq);
    matmul_q8_prepared(W, xq, T, y, ldy, r0, r1, xq + q8_act_bytes(W, T)); /* 64-aligned */
}

/* + the rows-in-lanes prefill's panel and parked sums for T > Q8_ROW_T */
static size_t q8_scratch_bytes(const g4_mat *W, int T) {
    return q8_act_bytes(W, T) + 64 + (T > Q8_ROW_T ? rl_scratch_bytes((W->cols / G4_Q8_BLOCK + 15) / 16, 1) : 0);
}

/* ---- matmul: bf16 prepared ---- */

/* Beyond this many tokens a prepared bf16 matmul takes the rows-in-lanes prefill
 * (kernels_bf16_rl_avx512.c); up to it the prepared copy is x as it is (row-major, ldx = K) and
 * the plain paths run on it. */
#ifndef BF16_RL_T
#define BF16_RL_T 32
#endif

static size_t bf16_act_bytes(const g4_mat *W, int T) {
    return T > BF16_RL_T ? g4__bf16_rl_act_bytes(W->cols, T) : (size_t)T * (size_t)W->cols * sizeof(float);
}

static void bf16_prepare(const g4_mat *W, const float *x, int64_t ldx, int T, int t0, int t1, void *act) {
    if (T > BF16_RL_T) g4__bf16_rl_prepare(x, ldx, W->cols, T, t0, t1, act);
    else
        for (int t = t0; t < t1; t++) memcpy((float *)act + t * W->cols, x + t * ldx, sizeof(float) * (size_t)W->cols);
}

static void matmul(const g4_mat *W, const float *x, int64_t ldx, int T, float *y, int64_t ldy, int64_t r0, int64_t r1,
                   void *scratch);

static void matmul_bf16_prepared(const g4_mat *W, const void *act, int T, float *y, int64_t ldy, int64_t r0,
                                 int64_t r1, void *scratch) {
    if (T > BF16_RL_T) {
        if (r1 > r0) g4__bf16_rl_matmul(W, act, T, y, ldy, r0, r1, scratch);
    } else matmul(W, act, W->cols, T, y, ldy, r0, r1, scratch);
}

/* the matmuls with their own entries (kernels_internal.h g4__qmm): q8_0 here, q4_0 in
 * kernels_q4_avx512.c; bf16's prepared form (its plain matmul is the float path below) */
static const g4__qmm qmm[G4_DT_COUNT] = {
    [G4_DT_Q8_0] = {matmul_q8, q8_scratch_bytes, q8_act_bytes, q8_prepare, matmul_q8_prepared},
    [G4_DT_Q4_0] = {g4__q4_matmul_avx512, g4__q4_scratch_bytes_avx512, g4__q4_act_bytes, g4__q4_prepare_avx512,
                    g4__q4_matmul_prepared_avx512},
    [G4_DT_BF16] = {NULL, NULL, bf16_act_bytes, bf16_prepare, matmul_bf16_prepared},
};

static size_t matmul_scratch_bytes(const g4_mat *W, int T) {
    if (qmm[W->dtype].matmul) return qmm[W->dtype].scratch_bytes(W, T);
    size_t s = T > SMALL_T ? f_scratch_bytes() : 0;
    if (W->dtype == G4_DT_BF16 && T > BF16_RL_T && g4__bf16_rl_scratch_bytes(W->cols) > s) s = g4__bf16_rl_scratch_bytes(W->cols);
    return s;
}

/* rows per call: the exact bf16 prefill's groups of panels; else 0 (the caller's default) */
static int64_t matmul_call_rows(const g4_mat *W, int T) {
    return W->dtype == G4_DT_BF16 && T > BF16_RL_T ? g4__bf16_rl_call_rows(W->cols) : 0;
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

AI float dot16(const float *a, const float *b, int64_t n) {
    __m512 acc = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 16 <= n; k += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + k), _mm512_loadu_ps(b + k), acc);
    if (k < n) {
        __mmask16 m = tailmask(n - k);
        acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + k), _mm512_maskz_loadu_ps(m, b + k), acc);
    }
    return hsum16(acc);
}

static void rmsnorm(float *y, const float *x, const float *w, int64_t n, float eps) {
    float ss = dot16(x, x, n);
    __m512 inv = _mm512_set1_ps(1.0f / sqrtf(ss / (float)n + eps));
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 v = _mm512_mul_ps(_mm512_loadu_ps(x + i), inv);
        if (w) v = _mm512_mul_ps(v, _mm512_loadu_ps(w + i));
        _mm512_storeu_ps(y + i, v);
    }
    if (i < n) {
        __mmask16 m = tailmask(n - i);
        __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), inv);
        if (w) v = _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, w + i));
        _mm512_mask_storeu_ps(y + i, m, v);
    }
}

static void rope(float *x, const float *c, const float *s, int64_t d) {
    const int64_t h = d / 2;
    for (int64_t i = 0; i < h; i += 16) {
        __mmask16 m = h - i >= 16 ? (__mmask16)0xffff : tailmask(h - i);
        __m512 a = _mm512_maskz_loadu_ps(m, x + i), b = _mm512_maskz_loadu_ps(m, x + i + h);
        __m512 cv = _mm512_maskz_loadu_ps(m, c + i), sv = _mm512_maskz_loadu_ps(m, s + i);
        _mm512_mask_storeu_ps(x + i, m, _mm512_sub_ps(_mm512_mul_ps(a, cv), _mm512_mul_ps(b, sv)));
        _mm512_mask_storeu_ps(x + i + h, m, _mm512_add_ps(_mm512_mul_ps(b, cv), _mm512_mul_ps(a, sv)));
    }
}

static void gelu_mul(float *out, const float *gate, const float *up, int64_t n) {
    const __m512 k0 = _mm512_set1_ps(0.7978845608028654f), k1 = _mm512_set1_ps(0.044715f);
    const __m512 half = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.0f);
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : tailmask(n - i);
        __m512 g = _mm512_maskz_loadu_ps(m, gate + i), u = _mm512_maskz_loadu_ps(m, up + i);
        __m512 g3 = _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(k1, g), g), g);
        __m512 t = tanh16(_mm512_mul_ps(k0, _mm512_add_ps(g, g3)));
        __m512 v = _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(half, g), _mm512_add_ps(one, t)), u);
        _mm512_mask_storeu_ps(out + i, m, v);
    }
}

static void softcap(float *y, const float *x, float cap, int64_t n) {
    const __m512 c = _mm512_set1_ps(cap);
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : tailmask(n - i);
        __m512 v = _mm512_maskz_loadu_ps(m, x + i);
        _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(c, tanh16(_mm512_div_ps(v, c))));
    }
}

static void add(float *y, const float *a, const float *b, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : tailmask(n - i);
        _mm512_mask_storeu_ps(y + i, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i)));
    }
}

static void scale(float *y, const float *x, float s, int64_t n) {
    const __m512 sv = _mm512_set1_ps(s);
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : tailmask(n - i);
        _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), sv));
    }
}

static void row_to_f32(float *dst, const void *src, int dt, int64_t n) {
    switch (dt) {
    case G4_DT_F32: memmove(dst, src, (size_t)n * 4); break;
    case G4_DT_BF16:
    case G4_DT_F16:
        for (int64_t i = 0; i < n; i += 16) {
            __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : tailmask(n - i);
            __m512 v = dt == G4_DT_BF16 ? ldw_m(G4_DT_BF16, src, i, m) : ldw_m(G4_DT_F16, src, i, m);
            _mm512_mask_storeu_ps(dst + i, m, v);
        }
        break;
    case G4_DT_Q8_0: {
        const g4_block_q8_0 *b = src;
        for (int64_t i = 0; i < n / G4_Q8_BLOCK; i++) {
            __m512 d = _mm512_set1_ps(g4_f16_to_f32(b[i].d));
            __m128i lo = _mm_loadu_si128((const __m128i *)b[i].qs);
            __m128i hi = _mm_loadu_si128((const __m128i *)(b[i].qs + 16));
            _mm512_storeu_ps(dst + i * 32, _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(lo))));
            _mm512_storeu_ps(dst + i * 32 + 16, _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(hi))));
        }
        break;
    }
    default: g4_dtype_info(dt)->to_f32(src, dst, n); break; /* the table's (q4_0: no faster here) */
    }
}

G4__QMM_ENTRY_POINTS(qmm)

const g4_kernels g4_kernels_avx512 = {
    .name = "avx512",
    .matmul = matmul,
    .matmul_scratch_bytes = matmul_scratch_bytes,
    .matmul_act_bytes = act_bytes_any,
    .matmul_prepare = prepare_any,
    .matmul_prepare_tokens = prepare_tokens_any,
    .matmul_prepared = prepared_any,
    .matmul_call_rows = matmul_call_rows,
    .matmul_slices = matmul_slices,
    .rmsnorm = rmsnorm,
    .rope = rope,
    .gelu_mul = gelu_mul,
    .attention = g4__attention_avx512,
    .attention_kv = g4__attention_kv_avx512,
    .attention_tokens = g4__attention_tokens_avx512,
    .add = add,
    .scale = scale,
    .softcap = softcap,
    .row_to_f32 = row_to_f32,
    .q4_0_layout = G4_Q4_GROUPED,
};

double g4__fma_burn_avx512(long iters, float *sink) {
    const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
    __m512 a0 = _mm512_set1_ps(0), a1 = _mm512_set1_ps(1), a2 = _mm512_set1_ps(2), a3 = _mm512_set1_ps(3);
    __m512 a4 = _mm512_set1_ps(4), a5 = _mm512_set1_ps(5), a6 = _mm512_set1_ps(6), a7 = _mm512_set1_ps(7);
    __m512 a8 = _mm512_set1_ps(8), a9 = _mm512_set1_ps(9), a10 = _mm512_set1_ps(10), a11 = _mm512_set1_ps(11);
    for (long it = 0; it < iters; it++) {
#define F(v) v = _mm512_fmadd_ps(v, m, c)
        F(a0); F(a1); F(a2); F(a3); F(a4); F(a5); F(a6); F(a7); F(a8); F(a9); F(a10); F(a11);
#undef F
    }
    __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                             _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
    s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)));
    *sink = hsum16(s);
    return (double)iters * 12 * 16 * 2;
}
