/* kernels_bf16_rl_avx512.c — the exact bf16 prefill of the avx512 set with 16 weight rows in the
 * lanes of a vector and each token's activation broadcast: the float counterpart of
 * kernels_rowlanes_avx512.h (whose transpose, tree and prefetch it uses).
 *
 * Why: the dot-product tile (4 rows x 6 tokens, rows and tokens met as whole vectors) loads 10
 * vectors per 24 FMAs; this Zen 5 host sustains ~1.1 512-bit loads a cycle, so it stopped near
 * 75-80 % of the FMA probe. Here a step of the 32-row x 6-token tile loads one vector (32 rows'
 * bf16 weights, two to a dword) and 6 broadcast floats for 12 FMAs.
 *
 * Bits: the canonical order (kernels_avx512.c): lane L of a row's accumulator sums
 * fma(w[k], x[k], acc) for k = L, L + 16, ... in increasing k from +0, then hsum16. Lane L is
 * "class" L here, swept on its own for 16 rows at once (the same fma in the same order), the 16
 * rows' sums parked, and after the 16 classes hsum16's tree adds the parked vectors lane by lane
 * (rl_tree). A class with no element in the last partial step skips it: the canonical masked step
 * adds fma(0, 0, acc) = acc there (acc starts at +0 and never becomes -0).
 *
 * Activations (prepared once per phase): class-major floats, act[(L * T + t) * S + s] = x[t][16 s +
 * L] (S steps a class: K / 16 rounded up to whole 16-step chunks, zeros past K). Weights: per
 * 32-row block a panel of dwords, panel[(L * S + s) * 16 + i] = bf16 w[r + i][16 s + L] |
 * bf16 w[r + 16 + i][16 s + L] << 16, so one load gives both 16-row halves (<< 16 and & 0xffff0000
 * widen them exactly).
 *
 * Loop (GEMM-style, the point of this file beside the tile): a call's rows in groups of P panels
 * (g4__bf16_rl_call_rows: the forward pass makes its chunks that large), each group unpacked
 * once, then token block -> class -> panel -> token tile -> step (short rows, S <= BR_WHOLE_S:
 * panel -> token tile with all 16 classes -> that tile's tree). One class of every panel of the
 * group (P x S x 64 bytes, ~256 KiB) stays in L2 while the token block's activations of that class
 * pass by, so the activations stream from L3 once per group, not once per 32 rows: with one panel
 * a call (the first try, 2026-12-07) every call read T x K x 4 bytes (2.75 MB at T = 128) for
 * 344 KB of weights and the engine gained nothing over the dot-product tile. */
#include "kernels/kernels_internal.h"
#include "kernels/kernels_rowlanes_avx512.h"

#include <immintrin.h>
#include <stdint.h>

#ifndef BR_NT
#define BR_NT 6 /* tokens per tile */
#endif
#ifndef BR_PANEL_PF
#define BR_PANEL_PF 1024 /* bytes ahead in each row while unpacking a panel (0: none) */
#endif
#ifndef BR_TB
#define BR_TB 48 /* tokens per block: its parked sums (P x 2 KiB a token); 12 / 24 / 96 no better */
#endif
#ifndef BR_GROUP_CLASS_BYTES
#define BR_GROUP_CLASS_BYTES (256 << 10) /* one class of a group's panels (128 / 512 KiB: no better) */
#endif
#ifndef BR_GROUP_MAX
#define BR_GROUP_MAX 16 /* panels a group at most (short rows) */
#endif
#ifndef BR_NEXT
#define BR_NEXT 1 /* prefetch the next group's rows during this one (0: not) */
#endif
#ifndef BR_WHOLE_S
#define BR_WHOLE_S 64 /* panels of at most this many steps a class take all 16 classes per tile call */
#endif

/* Steps of a class, padded to whole 16-step chunks (one 16 x 16 transpose each). */
static int64_t br_steps(int64_t K) { return (K + 255) / 256 * 16; }

size_t g4__bf16_rl_act_bytes(int64_t K, int T) { return (size_t)16 * (size_t)T * (size_t)br_steps(K) * sizeof(float); }

void g4__bf16_rl_prepare(const float *x, int64_t ldx, int64_t K, int T, int t0, int t1, float *act) {
    const int64_t S = br_steps(K);
    for (int t = t0; t < t1; t++)
        for (int64_t c = 0; c < S / 16; c++) {
            __m512i v[16];
            for (int j = 0; j < 16; j++) {
                const int64_t k = 256 * c + 16 * j, left = K - k;
                v[j] = left >= 16 ? _mm512_loadu_si512(x + t * ldx + k)
                       : left > 0 ? _mm512_maskz_loadu_epi32(tailmask(left), x + t * ldx + k)
                                  : _mm512_setzero_si512();
            }
            rl_transpose16(v); /* v[L] lane j = x[t][256 c + 16 j + L]: class L, step 16 c + j */
            for (int L = 0; L < 16; L++) _mm512_store_si512((__m512i *)(act + ((int64_t)L * T + t) * S + 16 * c), v[L]);
        }
}

/* Rows [r, re) (at most 32) into the panel; missing rows zero. */
static void br_panel(const g4_mat *W, int64_t r, int64_t re, int64_t S, uint32_t *panel) {
    const int64_t K = W->cols;
    for (int64_t s = 0; s * 16 < K; s++) {
        const int64_t k = 16 * s;
        const __mmask16 m = K - k >= 16 ? (__mmask16)0xffff : tailmask(K - k);
        __m512i v[16];
#if BR_PANEL_PF
        if ((s & 1) == 0)
            for (int i = 0; i < 32 && r + i < re; i++)
                _mm_prefetch((const char *)W->data + (r + i) * W->ld_bytes + 2 * k + BR_PANEL_PF, _MM_HINT_T0);
#endif
        for (int i = 0; i < 16; i++) {
            const uint16_t *lo = (const uint16_t *)((const char *)W->data + (r + i) * W->ld_bytes) + k;
            const uint16_t *hi = (const uint16_t *)((const char *)W->data + (r + 16 + i) * W->ld_bytes) + k;
            const __m512i a = r + i < re ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, lo)) : _mm512_setzero_si512();
            const __m512i b = r + 16 + i < re ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, hi)) : _mm512_setzero_si512();
            v[i] = _mm512_or_si512(a, _mm512_slli_epi32(b, 16));
        }
        rl_transpose16(v); /* v[L] lane i = rows r + i, r + 16 + i at k + L */
        for (int L = 0; L < 16; L++) _mm512_store_si512((__m512i *)(panel + (L * S + s) * 16), v[L]);
    }
}

/* MR (1, 2) x 16 rows x NT tokens (tokens t.. of act) for classes [l0, l1); the 16-row sums to
 * park + tt * 512 + L * 32 + rv * 16. */
AI void br_tile(const int MR, const int NT, const uint32_t *panel, const float *act, int64_t S, int64_t K, int T,
                int l0, int l1, int64_t t, float *park) {
    const __m512i himask = _mm512_set1_epi32((int)0xffff0000u);
    for (int L = l0; L < l1; L++) {
        const int64_t sl = K / 16 + (L < K % 16);
        const __m512i *p = (const __m512i *)(panel + L * S * 16);
        const float *x = act + ((int64_t)L * T + t) * S;
        __m512 acc[2][BR_NT];
#pragma GCC unroll 2
        for (int i = 0; i < MR; i++)
#pragma GCC unroll 12
            for (int tt = 0; tt < NT; tt++) acc[i][tt] = _mm512_setzero_ps();
        for (int64_t s = 0; s < sl; s++) {
            __m512i v = _mm512_load_si512(p + s);
            __asm__("" : "+v"(v)); /* one load for both halves (gcc would fold it into each) */
            const __m512 w0 = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
            const __m512 w1 = _mm512_castsi512_ps(_mm512_and_si512(v, himask));
#pragma GCC unroll 12
            for (int tt = 0; tt < NT; tt++) {
                const __m512 xb = _mm512_set1_ps(x[tt * S + s]);
                acc[0][tt] = _mm512_fmadd_ps(w0, xb, acc[0][tt]);
                if (MR == 2) acc[1][tt] = _mm512_fmadd_ps(w1, xb, acc[1][tt]);
            }
        }
#pragma GCC unroll 2
        for (int i = 0; i < MR; i++)
#pragma GCC unroll 12
            for (int tt = 0; tt < NT; tt++) _mm512_store_ps(park + tt * 512 + L * 32 + i * 16, acc[i][tt]);
    }
}

static void br_tile_any(int mr, int nt, const uint32_t *panel, const float *act, int64_t S, int64_t K, int T, int l0,
                        int l1, int64_t t, float *park) {
#define BRT(a, b)                                                                                                  \
    case a * 16 + b: br_tile(a, b, panel, act, S, K, T, l0, l1, t, park); break;
    switch (mr * 16 + nt) {
        BRT(1, 1) BRT(1, 2) BRT(1, 3) BRT(1, 4) BRT(1, 5) BRT(1, 6)
        BRT(2, 1) BRT(2, 2) BRT(2, 3) BRT(2, 4) BRT(2, 5) BRT(2, 6)
#if BR_NT > 6
        BRT(1, 7) BRT(1, 8) BRT(2, 7) BRT(2, 8)
#endif
#if BR_NT > 8
        BRT(1, 9) BRT(1, 10) BRT(1, 11) BRT(1, 12) BRT(2, 9) BRT(2, 10) BRT(2, 11) BRT(2, 12)
#endif
    default: break;
    }
#undef BRT
}

/* y rows [r, re) (at most 32) of n tokens (token t at y + t * ldy) from their parked class sums
 * (token t's at park + t * 512). */
static void br_trees(const float *park, int n, float *y, int64_t ldy, int64_t r, int64_t re) {
    for (int t = 0; t < n; t++)
        for (int rv = 0; rv < 2 && r + 16 * rv < re; rv++) {
            const int64_t row = r + 16 * rv, nr = re - row < 16 ? re - row : 16;
            _mm512_mask_storeu_ps(y + t * ldy + row, tailmask(nr), rl_tree(park + t * 512 + rv * 16));
        }
}

/* Panels per group: as many as keep one class of every panel (S * 64 bytes each) within
 * BR_GROUP_CLASS_BYTES (L2), at most BR_GROUP_MAX. */
static int64_t br_group_panels(int64_t S) {
    const int64_t p = (int64_t)BR_GROUP_CLASS_BYTES / (S * 64);
    return p < 1 ? 1 : p > BR_GROUP_MAX ? BR_GROUP_MAX : p;
}

int64_t g4__bf16_rl_call_rows(int64_t K) { return br_group_panels(br_steps(K)) * RL_ROWS; }

size_t g4__bf16_rl_scratch_bytes(int64_t K) {
    const int64_t S = br_steps(K), P = br_group_panels(S);
    return (size_t)(P * S * 1024) + (size_t)(P * BR_TB * 512) * sizeof(float) + 64;
}

void g4__bf16_rl_matmul(const g4_mat *W, const float *act, int T, float *y, int64_t ldy, int64_t r0, int64_t r1,
                        void *scratch) {
    const int64_t K = W->cols, S = br_steps(K), P = br_group_panels(S);
    uint32_t *panels = g4__align64(scratch);
    float *park = (float *)(panels + P * S * 256);
    /* short rows (o_proj's 512-column slices) take all 16 classes per tile call */
    const int whole = S <= BR_WHOLE_S;
    for (int64_t g = r0; g < r1; g += P * RL_ROWS) {
        const int64_t ge = g + P * RL_ROWS < r1 ? g + P * RL_ROWS : r1, np = (ge - g + RL_ROWS - 1) / RL_ROWS;
        for (int64_t p = 0; p < np; p++) {
            const int64_t r = g + p * RL_ROWS;
            br_panel(W, r, r + RL_ROWS < ge ? r + RL_ROWS : ge, S, panels + p * S * 256);
        }
        /* the next group's rows, a few lines per tile call over the whole group, so that its
         * unpack need not wait on memory (as L2 evicts them they wait in L3). After a call's last
         * group, the next call's first: of a column view of a wider matrix (ld past the row: a
         * row-parallel slice, whose next call is the next slice of the same rows) the same rows
         * K columns on, else the rows that follow the call (a thread's next chunk usually starts
         * there). A prefetch past the matrix is harmless: it never faults. */
        const int64_t grp = P * RL_ROWS;
        const char *nx_base = (const char *)W->data;
        int64_t nx_r = ge, nx_e = ge + grp < r1 ? ge + grp : r1;
        if (ge >= r1 && W->ld_bytes >= 4 * K) nx_base += 2 * K, nx_r = r0, nx_e = r0 + grp < r1 ? r0 + grp : r1;
        else if (ge >= r1) nx_r = r1, nx_e = r1 + grp < W->rows ? r1 + grp : W->rows;
        const int64_t calls = whole ? np * ((T + BR_NT - 1) / BR_NT) : ((T + BR_TB - 1) / BR_TB) * 16 * np * ((BR_TB + BR_NT - 1) / BR_NT);
        rl_next_rows nx = rl_next_rows_of(nx_base, W->ld_bytes, K * 2, nx_r, BR_NEXT ? nx_e : nx_r, calls);
        if (whole) { /* all 16 classes a tile call: each tile's tree right after it, its park in L1 */
            for (int64_t p = 0; p < np; p++) {
                const int64_t r = g + p * RL_ROWS, re = r + RL_ROWS < ge ? r + RL_ROWS : ge;
                for (int t = 0; t < T; t += BR_NT) {
                    const int nt = T - t < BR_NT ? T - t : BR_NT;
                    rl_prefetch_rows(&nx);
                    br_tile_any(re - r > 16 ? 2 : 1, nt, panels + p * S * 256, act, S, K, T, 0, 16, t, park);
                    br_trees(park, nt, y + t * ldy, ldy, r, re);
                }
            }
            continue;
        }
        for (int t0 = 0; t0 < T; t0 += BR_TB) {
            const int n = T - t0 < BR_TB ? T - t0 : BR_TB;
            /* a class of one panel (S * 64 bytes) stays in L1 for the block's token tiles, the
             * class of the group's panels in L2 for the block's ~n * S * 4 bytes of activations */
            for (int L = 0; L < 16; L++)
                for (int64_t p = 0; p < np; p++) {
                    const int64_t r = g + p * RL_ROWS, re = r + RL_ROWS < ge ? r + RL_ROWS : ge;
                    for (int t = 0; t < n; t += BR_NT) {
                        const int nt = n - t < BR_NT ? n - t : BR_NT;
                        rl_prefetch_rows(&nx);
                        br_tile_any(re - r > 16 ? 2 : 1, nt, panels + p * S * 256, act, S, K, T, L, L + 1, t0 + t,
                                    park + (p * BR_TB + t) * 512);
                    }
                }
            for (int64_t p = 0; p < np; p++) {
                const int64_t r = g + p * RL_ROWS, re = r + RL_ROWS < ge ? r + RL_ROWS : ge;
                br_trees(park + p * BR_TB * 512, n, y + t0 * ldy, ldy, r, re);
            }
        }
    }
}
