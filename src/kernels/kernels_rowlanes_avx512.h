/* kernels_rowlanes_avx512.h — the prefill (T > 4) of the avx512 q8_0 and q4_0 matmuls with 16
 * weight rows in the lanes of a vector and each token's activation dword broadcast, written once
 * for both (an inline template included by kernels_avx512.c and kernels_q4_avx512.c, which are
 * compiled with AVX-512 flags; nothing else may include it).
 *
 * Why: on this Zen 5 host one thread sustains ~1.1 512-bit loads a cycle; the earlier tiles
 * (each lane a block, rows x tokens of whole vectors: 6-8 vector loads per 8-16 vpdpbusd) were
 * load-bound at ~48-52 % of the int8 probe. A step of the 2 x 16-row x 6-token tile here loads 2
 * weight vectors and 6 broadcast dwords for 12 vpdpbusd (the loop alone: ~75 % of the probe).
 *
 * The bits stay those of each dtype's lane order: lane L of a row's 16-lane accumulator sums block
 * cls[L] of every group of 16 blocks (q8_0: L; q4_0: blk(L)), per group acc = fma(float(isum),
 * d_w * d_x, acc) in group order, then hsum16. Here lane L is "class" L, a sweep of its own: the
 * tile walks block cls[L] of each group for 16 rows at once (the same integers, the same float
 * operations in the same order), parks the 16 rows' sums, and after the 16 classes hsum16's tree
 * adds the parked vectors lane by lane. A class whose block is past the row's end skips the last
 * group (the lane order's zero block leaves the sum as it is: fma(0, 0, acc) = acc, never -0).
 *
 * Activations (the sets' matmul_prepare for T > 4): class-major, in blocks of RL_TB tokens, the
 * same bytes per token as the per-token records: int32 x[L][g][j][n] (dword j of block cls[L] of
 * group g, n = the block's tokens side by side), float d[L][g][n], and for q4_0 int32 s[L][g][n]
 * (the integer sum's start: -8 sum x). Weights: the caller unpacks RL_ROWS rows at a time into a
 * panel, per class and group pg bytes: [rv 0..1][step j 0..7] vectors of 16 rows' dwords (rows
 * 16 rv + lane; the unsigned operand for q4_0's levels, the signed one for q8_0), then d_w [rv]
 * at 1024, then (q8_0) the integer sum's start [rv] at 1152 (-128 sum w, for x + 128 as u8).
 * Loop: row block -> token block -> class -> token tile -> group -> step. */
#ifndef G4_KERNELS_ROWLANES_AVX512_H
#define G4_KERNELS_ROWLANES_AVX512_H

#include "kernels/kernels_avx512.h"

#include <immintrin.h>
#include <stdint.h>

#ifndef RL_TB
#define RL_TB 48
#endif
#ifndef RL_NEXT_CALL
#define RL_NEXT_CALL 1 /* after a call's last row block, prefetch the rows that follow it */
#endif
#ifndef RL_WHOLE_NG
#define RL_WHOLE_NG 2
#endif
enum { RL_NT = 6, RL_ROWS = 32, RL_PG_Q4 = 1152, RL_PG_Q8 = 1280 };

/* 16 x 16 dwords: m[i] lane L -> m[L] lane i. */
AI void rl_transpose16(__m512i *m) {
    __m512i t[16];
#pragma GCC unroll 8
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(m[i], m[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(m[i], m[i + 1]);
    }
#pragma GCC unroll 4
    for (int i = 0; i < 16; i += 4) {
        m[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        m[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        m[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        m[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    /* m[4a + b], 128-bit lane c, element d = input 4a + d's dword 4c + b: a 4 x 4 transpose of
     * 128-bit lanes over m[b], m[4 + b], m[8 + b], m[12 + b] for each b */
#pragma GCC unroll 4
    for (int b = 0; b < 4; b++) {
        t[2 * b] = _mm512_shuffle_i32x4(m[b], m[b + 4], 0x88);
        t[2 * b + 1] = _mm512_shuffle_i32x4(m[b], m[b + 4], 0xdd);
        t[2 * b + 8] = _mm512_shuffle_i32x4(m[b + 8], m[b + 12], 0x88);
        t[2 * b + 9] = _mm512_shuffle_i32x4(m[b + 8], m[b + 12], 0xdd);
    }
#pragma GCC unroll 4
    for (int b = 0; b < 4; b++) {
        m[b] = _mm512_shuffle_i32x4(t[2 * b], t[2 * b + 8], 0x88);
        m[b + 8] = _mm512_shuffle_i32x4(t[2 * b], t[2 * b + 8], 0xdd);
        m[b + 4] = _mm512_shuffle_i32x4(t[2 * b + 1], t[2 * b + 9], 0x88);
        m[b + 12] = _mm512_shuffle_i32x4(t[2 * b + 1], t[2 * b + 9], 0xdd);
    }
}

/* acc + sum over the 4 bytes of each dword of u (u8) * s (s8), exact: vpdpbusd, or without VNNI
 * maddubs and madd (no saturation for q4_0's true levels, pairs of at most 2 * 15 * 127, nor for
 * u = 1; the q4_0 file's decode paths use it too). */
AI __m512i rl_dp(const int vnni, __m512i acc, __m512i u, __m512i s) {
    if (vnni) return _mm512_dpbusd_epi32(acc, u, s);
    return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), _mm512_set1_epi16(1)));
}

/* The class-major activations of the token block at t0 (n tokens; records of `stride` bytes,
 * ng groups a token). */
typedef struct {
    const int32_t *x;
    const float *d;
    const int32_t *s;
} rl_block;

AI rl_block rl_block_at(const void *act, int64_t stride, int64_t ng, int t0, int64_t n) {
    const char *base = (const char *)act + t0 * stride;
    rl_block b = {(const int32_t *)base, (const float *)(base + n * ng * 512),
                  (const int32_t *)(base + n * ng * 512 + n * ng * 64)};
    return b;
}

/* What the tiles of one row block and token block share. */
typedef struct {
    const char *panel;
    const int32_t *cls;
    int64_t nb, ng, n; /* blocks and groups of a row, tokens of the block */
    rl_block blk;
} rl_job;

/* MR (1, 2) x 16 rows x NT tokens (from token t of the block) for classes [l0, l1), each over
 * its groups; the 16-row sums to park + tt * 512 + L * 32 + rv * 16. */
AI void rl_tile(const int q8, const int vnni, const int MR, const int NT, const rl_job *jb, int l0, int l1, int64_t t,
                float *park) {
    const int pg = q8 ? RL_PG_Q8 : RL_PG_Q4;
    const int64_t n = jb->n, ng = jb->ng;
    for (int L = l0; L < l1; L++) {
        const int64_t ngl = jb->nb / 16 + (jb->cls[L] < jb->nb % 16);
        const char *p = jb->panel + L * ng * pg;
        const int32_t *x = jb->blk.x + L * ng * 8 * n + t, *s = q8 ? NULL : jb->blk.s + L * ng * n + t;
        const float *d = jb->blk.d + L * ng * n + t;
        __m512 f[2][RL_NT];
#pragma GCC unroll 2
        for (int i = 0; i < MR; i++)
#pragma GCC unroll 6
            for (int tt = 0; tt < NT; tt++) f[i][tt] = _mm512_setzero_ps();
        for (int64_t g = 0; g < ngl; g++, p += pg) {
            __m512i ia[2][RL_NT];
            if (q8) {
#pragma GCC unroll 2
                for (int i = 0; i < MR; i++) {
                    const __m512i st = _mm512_load_si512((const __m512i *)(p + 1152) + i);
#pragma GCC unroll 6
                    for (int tt = 0; tt < NT; tt++) ia[i][tt] = st;
                }
            } else
#pragma GCC unroll 6
                for (int tt = 0; tt < NT; tt++) {
                    const __m512i st = _mm512_set1_epi32(s[g * n + tt]);
#pragma GCC unroll 2
                    for (int i = 0; i < MR; i++) ia[i][tt] = st;
                }
#pragma GCC unroll 8
            for (int j = 0; j < 8; j++) {
                __m512i w[2];
#pragma GCC unroll 2
                for (int i = 0; i < MR; i++) {
                    w[i] = _mm512_load_si512((const __m512i *)(p + i * 512) + j);
                    __asm__("" : "+v"(w[i])); /* one load per vector, not one per use (gcc folds it) */
                }
#pragma GCC unroll 6
                for (int tt = 0; tt < NT; tt++) {
                    const __m512i xb = _mm512_set1_epi32(x[(g * 8 + j) * n + tt]);
#pragma GCC unroll 2
                    for (int i = 0; i < MR; i++)
                        ia[i][tt] = q8 ? rl_dp(1, ia[i][tt], xb, w[i]) : rl_dp(vnni, ia[i][tt], w[i], xb);
                }
            }
#pragma GCC unroll 2
            for (int i = 0; i < MR; i++) {
                const __m512 dw = _mm512_load_ps((const float *)(p + 1024) + 16 * i);
#pragma GCC unroll 6
                for (int tt = 0; tt < NT; tt++)
                    f[i][tt] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia[i][tt]),
                                               _mm512_mul_ps(dw, _mm512_set1_ps(d[g * n + tt])), f[i][tt]);
            }
        }
#pragma GCC unroll 2
        for (int i = 0; i < MR; i++)
#pragma GCC unroll 6
            for (int tt = 0; tt < NT; tt++) _mm512_store_ps(park + tt * 512 + L * 32 + i * 16, f[i][tt]);
    }
}

/* The tile of each shape, compiled with constant arguments (q8_0 only with VNNI). */
static inline void rl_tile_any(const int q8, const int vnni, int mr, int nt, const rl_job *jb, int l0, int l1, int64_t t,
                               float *park) {
#define RLT(a, b)                                                                                                  \
    case a * 8 + b:                                                                                                \
        if (q8) rl_tile(1, 1, a, b, jb, l0, l1, t, park);                                                          \
        else if (vnni) rl_tile(0, 1, a, b, jb, l0, l1, t, park);                                                   \
        else rl_tile(0, 0, a, b, jb, l0, l1, t, park);                                                             \
        break;
    switch (mr * 8 + nt) {
        RLT(1, 1) RLT(1, 2) RLT(1, 3) RLT(1, 4) RLT(1, 5) RLT(1, 6)
        RLT(2, 1) RLT(2, 2) RLT(2, 3) RLT(2, 4) RLT(2, 5) RLT(2, 6)
    default: break;
    }
#undef RLT
}

/* hsum16's tree over the 16 parked class vectors (class L in lane L's place), lane by lane. */
AI __m512 rl_tree(const float *park) {
    __m512 a[8], b[4];
#pragma GCC unroll 8
    for (int L = 0; L < 8; L++) a[L] = _mm512_add_ps(_mm512_load_ps(park + L * 32), _mm512_load_ps(park + (L + 8) * 32));
#pragma GCC unroll 4
    for (int L = 0; L < 4; L++) b[L] = _mm512_add_ps(a[L], a[L + 4]);
    return _mm512_add_ps(_mm512_add_ps(b[0], b[2]), _mm512_add_ps(b[1], b[3]));
}

/* The sums of n tokens' parked classes (token t at park + t * 512) into rows [r, re) of y (token
 * t at y + t * ldy). */
AI void rl_store_sums(const float *park, float *y, int64_t ldy, int64_t n, int64_t r, int64_t re) {
    for (int64_t t = 0; t < n; t++)
        for (int rv = 0; rv < 2 && r + 16 * rv < re; rv++) {
            const int64_t row = r + 16 * rv, nr = re - row < 16 ? re - row : 16;
            _mm512_mask_storeu_ps(y + t * ldy + row, tailmask(nr), rl_tree(park + t * 512 + rv * 16));
        }
}

/* Scratch: the panel of RL_ROWS rows for ng groups, the parked class sums of a token block. */
static inline size_t rl_scratch_bytes(int64_t ng, int q8) {
    return (size_t)(16 * ng * (q8 ? RL_PG_Q8 : RL_PG_Q4)) + (size_t)RL_TB * 16 * 32 * sizeof(float) + 64;
}

/* Element index of token tt's value for class L, group g (and step j) in a block of n tokens. */
AI __m512i rl_x_index(int64_t ng, int64_t n, int64_t g, int j, int64_t tt) {
    const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    return _mm512_add_epi32(_mm512_mullo_epi32(lane, _mm512_set1_epi32((int)(ng * 8 * n))),
                            _mm512_set1_epi32((int)((g * 8 + j) * n + tt)));
}
AI __m512i rl_d_index(int64_t ng, int64_t n, int64_t g, int64_t tt) {
    const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    return _mm512_add_epi32(_mm512_mullo_epi32(lane, _mm512_set1_epi32((int)(ng * n))), _mm512_set1_epi32((int)(g * n + tt)));
}

/* The lines of rows [r, r1) (the next row block), prefetched a few per tile while this block's
 * tiles run (unprefetched, the panel's unpack waited on memory for ~1/3 of its time), spread
 * over `tiles` calls of rl_prefetch_rows. */
typedef struct {
    const char *row; /* the row being prefetched, its next line, the rows left after it */
    int64_t ld, lines, line, rows_left, per;
} rl_next_rows;

AI rl_next_rows rl_next_rows_of(const char *data, int64_t ld, int64_t row_bytes, int64_t r, int64_t r1, int64_t tiles) {
    const int64_t rows = r >= r1 ? 0 : r1 - r;
    rl_next_rows nr = {data + r * ld, ld, (row_bytes + 63) / 64, 0, rows, 0};
    nr.per = tiles > 0 ? (rows * nr.lines + tiles - 1) / tiles : 0;
    return nr;
}

AI void rl_prefetch_rows(rl_next_rows *nr) {
    for (int64_t e = 0; e < nr->per && nr->rows_left > 0; e++) {
        _mm_prefetch(nr->row + 64 * nr->line, _MM_HINT_T0);
        if (++nr->line == nr->lines) {
            nr->line = 0;
            nr->row += nr->ld;
            nr->rows_left--;
        }
    }
}

/* Rows [r0, r1) x T tokens: panel(W, r, re, panel) unpacks rows [r, re) (missing rows of a
 * 16-row half zero; a half with no rows need not be written: MR = 1 never reads it),
 * cls[L] is class L's block in a group, nb the blocks of a row. */
typedef void (*rl_panel_fn)(const g4_mat *W, int64_t r, int64_t re, char *panel);

AI void rl_prefill(const int q8, const int vnni, const g4_mat *W, rl_panel_fn panel_of, const int32_t *cls,
                   const void *act, int64_t stride, int T, float *y, int64_t ldy, int64_t r0, int64_t r1,
                   void *scratch) {
    const int64_t nb = W->cols / 32, ng = (nb + 15) / 16, pg = q8 ? RL_PG_Q8 : RL_PG_Q4;
    char *panel = g4__align64(scratch);
    float *park = (float *)(panel + 16 * ng * pg);
    /* classes outside token tiles: a class's panel slice (ng * pg bytes) stays in L1 for all the
     * block's tiles; when the whole panel is small (at most RL_WHOLE_NG groups a class: o_proj's
     * 512-column int8 slices; down_proj's 1344 have 3), one call per tile takes all 16 classes, and the tile's tokens are summed and stored at once
     * (their parked sums, 12 KB, still in L1: a token block's 96 KB were read back from L2) */
    const int whole = ng <= RL_WHOLE_NG;
    const int64_t tiles = (whole ? 1 : 16) * (T / RL_TB * (RL_TB / RL_NT) + (T % RL_TB + RL_NT - 1) / RL_NT);
    const int64_t row_bytes = (int64_t)g4_dtype_row_bytes(W->dtype, W->cols);
    for (int64_t r = r0; r < r1; r += RL_ROWS) {
        const int64_t re = r + RL_ROWS < r1 ? r + RL_ROWS : r1;
        const int mr = re - r > 16 ? 2 : 1;
        panel_of(W, r, re, panel);
        /* the next row block: this call's, or after its last the rows that follow r1 (the
         * thread's next chunk usually starts there; the engine's q8_0 chunks are 2 row blocks) */
        const int64_t nxt_end = re < r1 || !RL_NEXT_CALL ? (re + RL_ROWS < r1 ? re + RL_ROWS : r1)
                                                        : (r1 + RL_ROWS < W->rows ? r1 + RL_ROWS : W->rows);
        rl_next_rows pf = rl_next_rows_of((const char *)W->data, W->ld_bytes, row_bytes, re, nxt_end, tiles);
        for (int t0 = 0; t0 < T; t0 += RL_TB) {
            const int64_t n = T - t0 < RL_TB ? T - t0 : RL_TB;
            const rl_job jb = {panel, cls, nb, ng, n, rl_block_at(act, stride, ng, t0, n)};
            for (int L = 0; L < 16; L += whole ? 16 : 1)
                for (int64_t t = 0; t < n; t += RL_NT) {
                    const int nt = n - t < RL_NT ? (int)(n - t) : RL_NT;
                    rl_prefetch_rows(&pf);
                    if (L + (whole ? 15 : 0) == 15) /* the output lines, for writing, a class sweep before the stores */
                        for (int tt = 0; tt < nt; tt++)
                            for (int rv = 0; rv < mr; rv++) _mm_prefetch((const char *)(y + (t0 + t + tt) * ldy + r + 16 * rv), _MM_HINT_ET0);
                    rl_tile_any(q8, vnni, mr, nt, &jb, L, whole ? 16 : L + 1, t, whole ? park : park + t * 512);
                    if (whole) rl_store_sums(park, y + (t0 + t) * ldy, ldy, nt, r, re);
                }
            if (!whole) rl_store_sums(park, y + t0 * ldy, ldy, n, r, re);
        }
    }
}

#endif
