/* kernels_q4_avx512.c — the q4_0 matmul of the avx512 set (kernels_avx512.c dispatches here).
 * Compiled with AVX-512 flags: nothing in here may run before kernels_dispatch.c has checked
 * cpuid. VNNI (vpdpbusd) when g4__avx512_vnni, else vpmaddubsw/vpmaddwd: the same integers.
 *
 * Order: the blocks of a row go in groups of 16; block value (float)(sum (q-8) x) * (d_w * d_x)
 * of block blk(L) of each group is fma'd into lane L of one 16-lane accumulator, group after
 * group, then hsum16. blk(L) = 4 (L mod 4) + L / 4 (a 4 x 4 transpose): the lane order the
 * in-register weight transpose produces. Every path (T = 1, few tokens, the rows-in-lanes path of
 * prefill, VNNI or not, prepared or not) computes exactly these integers and float operations, so
 * the bits depend only on K.
 *
 * Weights (18-byte blocks) are read in quads of 4 blocks (72 bytes, loads that stay inside the
 * quad), the 64 level bytes gathered by one vpermt2d, and the 4 quads transposed (8 unpacks) so
 * that vector j, lane L holds level bytes 4j..4j+3 of block blk(L): their low nibbles are elements
 * 4j..4j+3, their high nibbles 16+4j..19+4j. The activations are prepared once per token in the
 * matching order (vector v, lane L = int8 elements 4v..4v+3 of block blk(L)), with d_x and
 * -8 sum x per block in lane order: sum (q-8) x = sum q x - 8 sum x, q unsigned for vpdpbusd. */
#include "kernels/kernels.h"
#include "kernels/kernels_avx512.h"
#include "kernels/kernels_internal.h"
#include "kernels/kernels_rowlanes_avx512.h"

#include <stdlib.h>
#include <string.h>

/* blk(L) of the file comment */
static const int32_t q4_blk[16] = {0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15};

/* vpermt2d index: from A = quad bytes [8, 72) and B = quad bytes [2, 66), where the level bytes of
 * blocks 1, 3 (bytes 20.., 56..) and 0, 2 (bytes 2.., 38..) start on dword boundaries: output
 * 128-lane c = the 16 level bytes of block c of the quad. */
static const int32_t q4_qs_idx[16] = {16, 17, 18, 19, 3, 4, 5, 6, 25, 26, 27, 28, 12, 13, 14, 15};
/* The f16 scales of the 4 quads to words L = 4c + q (block 4q + c: word 9c of quad q's bytes
 * [0, 64)): quads 0, 1 to words 4c, 4c+1; quads 2, 3 to words 4c+2, 4c+3 (vpermt2w, blended). */
static const int16_t q4_d01_idx[32] = {0, 32, 0, 0, 9, 41, 0, 0, 18, 50, 0, 0, 27, 59, 0, 0};
static const int16_t q4_d23_idx[32] = {0, 0, 0, 32, 0, 0, 9, 41, 0, 0, 18, 50, 0, 0, 27, 59};

/* First n (0..64) bytes. */
AI __mmask64 bytemask(int n) { return n >= 64 ? ~(__mmask64)0 : n <= 0 ? 0 : ((__mmask64)1 << n) - 1; }

/* The levels and scales of one group of nbg (16, or fewer at the end of a row) blocks: V[j] (lane L
 * = level bytes 4j..4j+3 of block blk(L), both nibbles), and d_w in lane order. Blocks past nbg
 * read as zero bytes (masked loads, never past the row): their activations and sums are zero,
 * their scale 0. Costs, from L1, per group: 31 cycles (vpermt2w for the levels: 36; no scales
 * at all: 25). */
AI void q4_load_group(const g4_block_q4_0 *w, const int nbg, __m512i *V, __m512 *dw) {
    const char *p = (const char *)w;
    const __m512i qi = _mm512_loadu_si512(q4_qs_idx);
    __m512i A[4], P[4];
#pragma GCC unroll 4
    for (int q = 0; q < 4; q++) {
        const char *b = p + 72 * q;
        if (nbg == 16 || nbg >= 4 * q + 4) { /* a whole quad: its 72 bytes are all in the row */
            A[q] = _mm512_loadu_si512(b);
            P[q] = _mm512_permutex2var_epi32(_mm512_loadu_si512(b + 8), qi, _mm512_loadu_si512(b + 2));
        } else if (nbg <= 4 * q) { /* past the row's end */
            A[q] = P[q] = _mm512_setzero_si512();
        } else {
            const int nv = nbg - 4 * q < 0 ? 0 : nbg - 4 * q > 4 ? 4 : nbg - 4 * q, n = 18 * nv;
            A[q] = _mm512_maskz_loadu_epi8(bytemask(n), b);
            P[q] = _mm512_permutex2var_epi32(_mm512_maskz_loadu_epi8(bytemask(n - 8), b + 8), qi,
                                             _mm512_maskz_loadu_epi8(bytemask(n - 2), b + 2));
        }
    }
    const __m512i a = _mm512_unpacklo_epi32(P[0], P[1]), b = _mm512_unpackhi_epi32(P[0], P[1]);
    const __m512i c = _mm512_unpacklo_epi32(P[2], P[3]), d = _mm512_unpackhi_epi32(P[2], P[3]);
    V[0] = _mm512_unpacklo_epi64(a, c);
    V[1] = _mm512_unpackhi_epi64(a, c);
    V[2] = _mm512_unpacklo_epi64(b, d);
    V[3] = _mm512_unpackhi_epi64(b, d);
    const __m512i d01 = _mm512_permutex2var_epi16(A[0], _mm512_loadu_si512(q4_d01_idx), A[1]);
    const __m512i d23 = _mm512_permutex2var_epi16(A[2], _mm512_loadu_si512(q4_d23_idx), A[3]);
    *dw = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_mask_blend_epi16(0xCCCC, d01, d23)));
}

/* The same V and dw from a full group in the grouped layout (kernels.h): the scales are one
 * 32-byte load, the level vectors already in lane order. */
AI void q4_load_grouped(const g4_block_q4_0 *w, __m512i *V, __m512 *dw) {
    const char *p = (const char *)w;
    *dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) V[j] = _mm512_loadu_si512(p + 32 + 64 * j);
}

/* The same V and dw from a partial group of n (1..15) blocks in the grouped tail layout
 * (kernels.h): per vector one masked load of the n blocks' dwords in block order and one lane
 * permutation to blk(L); lanes past n zero, as q4_load_group's. */
AI void q4_load_tail(const g4_block_q4_0 *w, const int n, __m512i *V, __m512 *dw) {
    const char *p = (const char *)w;
    const __mmask16 m = (__mmask16)((1u << n) - 1);
    const __m512i bi = _mm512_loadu_si512(q4_blk);
    *dw = _mm512_permutexvar_ps(bi, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p)));
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) V[j] = _mm512_permutexvar_epi32(bi, _mm512_maskz_loadu_epi32(m, p + 2 * n + 4 * n * j));
}

/* A partial group of n blocks: the tail layout (tail) or blocks. */
AI void q4_load_partial(const int tail, const g4_block_q4_0 *w, const int n, __m512i *V, __m512 *dw) {
    if (tail) q4_load_tail(w, n, V, dw);
    else q4_load_group(w, n, V, dw);
}

/* Full group g of a row in either layout. */
AI void q4_load_full(const int grouped, const g4_block_q4_0 *w, __m512i *V, __m512 *dw) {
    if (grouped) q4_load_grouped(w, V, dw);
    else q4_load_group(w, 16, V, dw);
}

/* The 8 weight vectors of a group in the order of the activation vectors: true levels 0..15
 * (W[j] low nibbles, W[j+4] high nibbles). With VNNI the high ones stay 16 * level (one and
 * instead of a shift and an and; their sum is shifted back, exactly). */
AI void q4_levels(const int vnni, const __m512i *V, __m512i *W) {
    const __m512i lo = _mm512_set1_epi8(0x0f), hi = _mm512_set1_epi8((char)0xf0);
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        W[j] = _mm512_and_si512(V[j], lo);
        W[j + 4] = vnni ? _mm512_and_si512(V[j], hi) : _mm512_and_si512(_mm512_srli_epi16(V[j], 4), lo);
    }
}

/* One token's record: act vectors at x (8 x 64 bytes a group), then d_x and -8 sum x in lane order. */
typedef struct {
    const __m512i *x;
    const float *d;
    const int32_t *s;
} q4_rec;

AI q4_rec q4_record(const void *act, int64_t stride, int t, int64_t K) {
    const char *rec = (const char *)act + t * stride;
    q4_rec r = {(const __m512i *)rec, (const float *)(rec + g4__q8_act_qs_bytes(K)),
                g4__q4_act_sums((void *)rec, K)};
    return r;
}

/* Group g of one token: acc + (float)(sum (q-8) x) * (d_w * d_x), lane by lane. Four integer
 * chains of two (one chain of four per half left the loop waiting on vpdpbusd latency: 35 instead
 * of 25 cycles a group from L1). */
AI __m512 q4_token(const int vnni, const __m512i *W, __m512 dw, const q4_rec *r, int64_t g, __m512 acc) {
    const __m512i *x = r->x + 8 * g;
    const __m512i z = _mm512_setzero_si512();
    __m512i a0 = _mm512_loadu_si512(r->s + 16 * g), a1 = z, b0 = z, b1 = z;
    a0 = rl_dp(vnni, a0, W[0], _mm512_load_si512(x + 0));
    b0 = rl_dp(vnni, b0, W[1], _mm512_load_si512(x + 1));
    a1 = rl_dp(vnni, a1, W[4], _mm512_load_si512(x + 4));
    b1 = rl_dp(vnni, b1, W[5], _mm512_load_si512(x + 5));
    a0 = rl_dp(vnni, a0, W[2], _mm512_load_si512(x + 2));
    b0 = rl_dp(vnni, b0, W[3], _mm512_load_si512(x + 3));
    a1 = rl_dp(vnni, a1, W[6], _mm512_load_si512(x + 6));
    b1 = rl_dp(vnni, b1, W[7], _mm512_load_si512(x + 7));
    a0 = _mm512_add_epi32(a0, b0);
    a1 = _mm512_add_epi32(a1, b1); /* VNNI: 16 * the high half's sum (q4_levels) */
    const __m512i isum = _mm512_add_epi32(a0, vnni ? _mm512_srai_epi32(a1, 4) : a1);
    const __m512 d = _mm512_mul_ps(dw, _mm512_loadu_ps(r->d + 16 * g));
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), d, acc);
}

/* Decode (T <= Q4_ROW_T): one row straight from memory, its weights unpacked once per group for
 * the NT tokens. A prefetch G4_Q4_PREFETCH bytes ahead keeps the row's single stream (and, past
 * its end, the next row's) in flight, as the q8_0 T = 1 dot does; hint T0, as there (NTA: the
 * 60-layer 31B decoded at 0.37-0.39 tok/s, T0 0.48-0.50, alternating runs, 2026-12-04). With
 * g4__prefetch_l2 (l2: AMD family 19h) hint T1 G4_Q4_PREFETCH_L2 bytes ahead instead: on a Zen 4
 * EPYC in the minutes memory ran fast the T0 stream held ~80 % of the bare read, T1 at 6912 ~90 %
 * (T1 at 2304 no better than T0; docs/kernels.md "Prefetch hint by CPU"). */
#ifndef G4_Q4_PREFETCH
#define G4_Q4_PREFETCH 2304
#endif
#ifndef G4_Q4_PREFETCH_L2
#define G4_Q4_PREFETCH_L2 6912
#endif
#ifndef G4_Q4_PF_HINT
#define G4_Q4_PF_HINT _MM_HINT_T0
#endif
/* The line at p, l2 ? G4_Q4_PREFETCH_L2 bytes ahead into L2 : G4_Q4_PREFETCH into L1. */
AI void q4_prefetch(const int l2, const char *p) {
    if (l2) _mm_prefetch(p + G4_Q4_PREFETCH_L2, _MM_HINT_T1);
    else _mm_prefetch(p + G4_Q4_PREFETCH, G4_Q4_PF_HINT);
}
#ifndef Q4_ROW_T
#define Q4_ROW_T 4
#endif
/* The lines of a row's partial last group [w, e), as far ahead as the full groups'
 * (a row-parallel slice of down_proj, 42 blocks, ends in 10: a fifth of its bytes, which only
 * the hardware prefetcher fetched ahead before). */
AI void q4_prefetch_tail(const int l2, const g4_block_q4_0 *w, const g4_block_q4_0 *e) {
    const char *p = (const char *)w, *pe = (const char *)e;
    for (; p < pe + 63; p += 64) q4_prefetch(l2, p);
}

AI void q4_row_direct(const int vnni, const int grouped, const int tail, const int l2, const int NT, const g4_block_q4_0 *w,
                      int64_t nb, const q4_rec *r, float *const *out) {
    __m512 acc[Q4_ROW_T];
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) acc[t] = _mm512_setzero_ps();
    int64_t g = 0;
    __m512i V[4], W[8];
    __m512 dw;
    for (; g < nb / 16; g++) {
        const char *pf = (const char *)(w + 16 * g);
#pragma GCC unroll 5
        for (int l = 0; l < 5; l++) q4_prefetch(l2, pf + 64 * l);
        q4_load_full(grouped, w + 16 * g, V, &dw);
        q4_levels(vnni, V, W);
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) acc[t] = q4_token(vnni, W, dw, r + t, g, acc[t]);
    }
    if (16 * g < nb) {
        q4_prefetch_tail(l2, w + 16 * g, w + nb);
        q4_load_partial(tail, w + 16 * g, (int)(nb - 16 * g), V, &dw);
        q4_levels(vnni, V, W);
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) acc[t] = q4_token(vnni, W, dw, r + t, g, acc[t]);
    }
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) *out[t] = hsum16(acc[t]);
}

/* Group g of one token for two rows at once (grouped layout, T >= 2): each activation vector is
 * loaded once for both rows. True levels in both halves (W from q4_levels(0, ..)), so one integer
 * chain per row: the same integers as q4_token, then the same float operations per lane. */
AI void q4_token2(const int vnni, const __m512i *W0, const __m512i *W1, __m512 dw0, __m512 dw1, const q4_rec *r,
                  int64_t g, __m512 *acc0, __m512 *acc1) {
    const __m512i *x = r->x + 8 * g;
    const __m512i s = _mm512_loadu_si512(r->s + 16 * g);
    __m512i a0 = s, a1 = s;
#pragma GCC unroll 8
    for (int v = 0; v < 8; v++) {
        const __m512i xv = _mm512_load_si512(x + v);
        a0 = rl_dp(vnni, a0, W0[v], xv);
        a1 = rl_dp(vnni, a1, W1[v], xv);
    }
    const __m512 dx = _mm512_loadu_ps(r->d + 16 * g);
    *acc0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a0), _mm512_mul_ps(dw0, dx), *acc0);
    *acc1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a1), _mm512_mul_ps(dw1, dx), *acc1);
}

/* Two rows of a grouped matrix for NT (2..4) tokens: the full groups two rows at a time, a
 * partial last group row by row (its tail layout or blocks). */
AI void q4_rows2_grouped(const int vnni, const int tail, const int l2, const int NT, const g4_block_q4_0 *w0,
                         const g4_block_q4_0 *w1, int64_t nb, const q4_rec *r, float *const *out0, float *const *out1) {
    __m512 acc0[Q4_ROW_T], acc1[Q4_ROW_T];
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) acc0[t] = acc1[t] = _mm512_setzero_ps();
    int64_t g = 0;
    __m512i V[4], W0[8], W1[8];
    __m512 dw0, dw1;
    for (; g < nb / 16; g++) {
        const char *p0 = (const char *)(w0 + 16 * g), *p1 = (const char *)(w1 + 16 * g);
#pragma GCC unroll 5
        for (int l = 0; l < 5; l++) {
            q4_prefetch(l2, p0 + 64 * l);
            q4_prefetch(l2, p1 + 64 * l);
        }
        q4_load_grouped(w0 + 16 * g, V, &dw0);
        q4_levels(0, V, W0);
        q4_load_grouped(w1 + 16 * g, V, &dw1);
        q4_levels(0, V, W1);
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) q4_token2(vnni, W0, W1, dw0, dw1, r + t, g, &acc0[t], &acc1[t]);
    }
    if (16 * g < nb) {
        q4_prefetch_tail(l2, w0 + 16 * g, w0 + nb);
        q4_prefetch_tail(l2, w1 + 16 * g, w1 + nb);
        q4_load_partial(tail, w0 + 16 * g, (int)(nb - 16 * g), V, &dw0);
        q4_levels(vnni, V, W0);
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) acc0[t] = q4_token(vnni, W0, dw0, r + t, g, acc0[t]);
        q4_load_partial(tail, w1 + 16 * g, (int)(nb - 16 * g), V, &dw1);
        q4_levels(vnni, V, W1);
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) acc1[t] = q4_token(vnni, W1, dw1, r + t, g, acc1[t]);
    }
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) {
        *out0[t] = hsum16(acc0[t]);
        *out1[t] = hsum16(acc1[t]);
    }
}

/* Prefill (T > Q4_ROW_T): kernels_rowlanes_avx512.h, 16 rows in the lanes of a vector. Its panel
 * of rows [r, r1) (at most 32; missing rows of a 16-row half zero, an absent half not written):
 * class L, group g at (L * ng + g) * RL_PG_Q4:
 * rows 16 rv + i in lane i of vector rv * 8 + j (dword j of block blk(L): j < 4 the low nibbles of
 * level bytes 4j.., j >= 4 the high nibbles of 4(j-4)..: true levels), then d_w of rows 16 rv + i
 * at 1024 + 64 rv; the rows' levels and scales in lane order (q4_load_*), transposed 16 x 16. */
static void q4_cm_panel(const g4_mat *W, int64_t r, int64_t r1, char *panel) {
    const int64_t nb = W->cols / G4_Q4_BLOCK, ng = (nb + 15) / 16;
    const int grouped = W->layout == G4_Q4_GROUPED, tail = grouped && W->q4_tail;
    const __m512i lo = _mm512_set1_epi8(0x0f);
    for (int64_t g = 0; g < ng; g++) {
        const int nbg = nb - 16 * g < 16 ? (int)(nb - 16 * g) : 16;
        for (int rv = 0; rv < 2 && r + 16 * rv < r1; rv++) {
            __m512i V[5][16];
            for (int i = 0; i < 16; i++) {
                const int64_t row = r + 16 * rv + i;
                __m512 dw = _mm512_setzero_ps();
                if (row < r1) {
                    const g4_block_q4_0 *w = (const void *)((const char *)W->data + row * W->ld_bytes);
                    __m512i v[4];
                    if (nbg == 16) q4_load_full(grouped, w + 16 * g, v, &dw);
                    else q4_load_partial(tail, w + 16 * g, nbg, v, &dw);
                    for (int j = 0; j < 4; j++) V[j][i] = v[j];
                } else
                    for (int j = 0; j < 4; j++) V[j][i] = _mm512_setzero_si512();
                V[4][i] = _mm512_castps_si512(dw);
            }
            for (int j = 0; j < 5; j++) rl_transpose16(V[j]);
            for (int L = 0; L < 16; L++) {
                char *p = panel + (L * ng + g) * RL_PG_Q4;
                for (int j = 0; j < 4; j++) {
                    _mm512_store_si512((__m512i *)(p + rv * 512) + j, _mm512_and_si512(V[j][L], lo));
                    _mm512_store_si512((__m512i *)(p + rv * 512) + j + 4,
                                       _mm512_and_si512(_mm512_srli_epi16(V[j][L], 4), lo));
                }
                _mm512_store_si512((__m512i *)(p + 1024) + rv, V[4][L]);
            }
        }
    }
}

static void q4_prefill(const int vnni, const g4_mat *W, const void *act, int T, float *y, int64_t ldy, int64_t r0,
                       int64_t r1, void *scratch) {
    rl_prefill(0, vnni, W, q4_cm_panel, q4_blk, act, g4__q4_act_stride(W->cols), T, y, ldy, r0, r1, scratch);
}

size_t g4__q4_scratch_bytes_avx512(const g4_mat *W, int T) {
    return g4__q4_act_bytes(W, T) + 64 + (T > Q4_ROW_T ? rl_scratch_bytes((W->cols / G4_Q4_BLOCK + 15) / 16, 0) : 0);
}

/* Quantizes (g4__q8_quantize_act_avx512, natural order) and rearranges the records: T <= Q4_ROW_T
 * per token (vector v of a group, lane L = dword v of block blk(L); d_x and -8 sum x in lane
 * order), else class-major in blocks of RL_TB tokens (kernels_rowlanes_avx512.h). Quantizing a
 * group of 512 values alone gives the bytes of quantizing the token (per-block scales, zero
 * padding). */
void g4__q4_prepare_avx512(const g4_mat *W, const float *x, int64_t ldx, int T, int t0, int t1, void *act) {
    const int64_t K = W->cols, stride = g4__q4_act_stride(K), ng = g4__q8_act_nb_pad(K) / 16;
    const __m512i blk = _mm512_loadu_si512(q4_blk), ones = _mm512_set1_epi8(1);
    const int cm = T > Q4_ROW_T;
    for (int t = t0; t < t1; t++) {
        const int b0 = cm ? t / RL_TB * RL_TB : t;
        const int64_t n = cm ? (T - b0 < RL_TB ? T - b0 : RL_TB) : 1, tt = t - b0;
        char *rec = (char *)act + b0 * stride;
        const rl_block cb = rl_block_at(act, stride, ng, b0, n);
        for (int64_t g = 0; g < ng; g++) {
            _Alignas(64) int8_t tmp[512 + 64];
            g4__q8_quantize_act_avx512(x + t * ldx + 512 * g, K - 512 * g < 512 ? K - 512 * g : 512, tmp);
            __m512i sum = _mm512_setzero_si512();
            const __m512 d = _mm512_permutexvar_ps(blk, _mm512_load_ps((const float *)(tmp + 512)));
            for (int v = 0; v < 8; v++) {
                const __m512i idx = _mm512_add_epi32(_mm512_slli_epi32(blk, 3), _mm512_set1_epi32(v));
                const __m512i xv = _mm512_i32gather_epi32(idx, (const void *)tmp, 4);
                sum = rl_dp(0, sum, ones, xv); /* 1 * x (u8 * s8): the block sums, in lane order */
                if (cm) _mm512_i32scatter_epi32((void *)cb.x, rl_x_index(ng, n, g, v, tt), xv, 4);
                else _mm512_store_si512((__m512i *)(rec + g * 512) + v, xv);
            }
            const __m512i s = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sum, 3));
            if (cm) {
                _mm512_i32scatter_epi32((void *)cb.s, rl_d_index(ng, n, g, tt), s, 4);
                _mm512_i32scatter_ps((void *)cb.d, rl_d_index(ng, n, g, tt), d, 4);
            } else {
                _mm512_storeu_si512(g4__q4_act_sums(rec, K) + 16 * g, s);
                _mm512_storeu_ps((float *)(rec + g4__q8_act_qs_bytes(K)) + 16 * g, d);
            }
        }
    }
}

/* Decode, T <= Q4_ROW_T tokens. */
AI void q4_decode_dt(const int vnni, const int grouped, const int l2, const g4_mat *W, const void *act, int T, float *y,
                     int64_t ldy, int64_t r0, int64_t r1) {
    const int64_t K = W->cols, nb = K / G4_Q4_BLOCK, stride = g4__q4_act_stride(K);
    const int tail = grouped && W->q4_tail;
    q4_rec rec[Q4_ROW_T > 4 ? Q4_ROW_T : 4];
    float *out[Q4_ROW_T > 4 ? Q4_ROW_T : 4];
    for (int t = 0; t < T; t++) rec[t] = q4_record(act, stride, t, K);
    int64_t r = r0;
#ifndef G4_Q4_NO_ROWS2
    for (; grouped && T >= 2 && r + 1 < r1; r += 2) {
        const g4_block_q4_0 *w0 = (const void *)((const char *)W->data + r * W->ld_bytes),
                            *w1 = (const void *)((const char *)W->data + (r + 1) * W->ld_bytes);
        float *out1[4];
        for (int t = 0; t < T; t++) {
            out[t] = y + t * ldy + r;
            out1[t] = out[t] + 1;
        }
        switch (T) {
        case 4: q4_rows2_grouped(vnni, tail, l2, 4, w0, w1, nb, rec, out, out1); break;
        case 3: q4_rows2_grouped(vnni, tail, l2, 3, w0, w1, nb, rec, out, out1); break;
        default: q4_rows2_grouped(vnni, tail, l2, 2, w0, w1, nb, rec, out, out1); break;
        }
    }
#endif
    for (; r < r1; r++) {
        const g4_block_q4_0 *row = (const void *)((const char *)W->data + r * W->ld_bytes);
        for (int t = 0; t < T; t++) out[t] = y + t * ldy + r;
        switch (T) {
        case 4: q4_row_direct(vnni, grouped, tail, l2, 4, row, nb, rec, out); break;
        case 3: q4_row_direct(vnni, grouped, tail, l2, 3, row, nb, rec, out); break;
        case 2: q4_row_direct(vnni, grouped, tail, l2, 2, row, nb, rec, out); break;
        default: q4_row_direct(vnni, grouped, tail, l2, 1, row, nb, rec, out); break;
        }
    }
}

void g4__q4_matmul_prepared_avx512(const g4_mat *W, const void *act, int T, float *y, int64_t ldy, int64_t r0,
                                   int64_t r1, void *scratch) {
    if (r1 <= r0 || T <= 0) return;
    const int grouped = W->layout == G4_Q4_GROUPED;
    if (T > Q4_ROW_T) {
        if (g4__avx512_vnni) q4_prefill(1, W, act, T, y, ldy, r0, r1, scratch);
        else q4_prefill(0, W, act, T, y, ldy, r0, r1, scratch);
    } else if (g4__prefetch_l2 && g4__avx512_vnni && grouped) q4_decode_dt(1, 1, 1, W, act, T, y, ldy, r0, r1);
    else if (g4__avx512_vnni && grouped) q4_decode_dt(1, 1, 0, W, act, T, y, ldy, r0, r1);
    else if (g4__avx512_vnni) q4_decode_dt(1, 0, g4__prefetch_l2, W, act, T, y, ldy, r0, r1);
    else if (grouped) q4_decode_dt(0, 1, g4__prefetch_l2, W, act, T, y, ldy, r0, r1);
    else q4_decode_dt(0, 0, g4__prefetch_l2, W, act, T, y, ldy, r0, r1);
}

/* Rows [r0, r1) through all their slices: slice s of row r is the nb blocks at byte
 * s * nb * 18 of the row (grouped per slice), its activation record at act + s*act_stride. */
AI void q4_slices_dt(const int vnni, const int grouped, const int l2, const g4_mat *W, int64_t nb, int nslices,
                     const void *act, size_t act_stride, float *y, int64_t ldy, int64_t r0, int64_t r1) {
    const int64_t cols = nb * G4_Q4_BLOCK, stride = g4__q4_act_stride(cols);
    const int tail = grouped && W->q4_tail;
    for (int64_t r = r0; r < r1; r++) {
        const g4_block_q4_0 *row = (const void *)((const char *)W->data + r * W->ld_bytes);
        for (int s = 0; s < nslices; s++) {
            const q4_rec rec = q4_record((const char *)act + (size_t)s * act_stride, stride, 0, cols);
            float *out = y + s * ldy + r;
            q4_row_direct(vnni, grouped, tail, l2, 1, row + s * nb, nb, &rec, &out);
        }
    }
}

void g4__q4_matmul_slices_avx512(const g4_mat *W, int64_t slice_cols, int nslices, const void *act, size_t act_stride,
                                 float *y, int64_t ldy, int64_t r0, int64_t r1) {
    const int grouped = W->layout == G4_Q4_GROUPED;
    G4_ASSERT(W->dtype == G4_DT_Q4_0 && slice_cols > 0 && slice_cols % G4_Q4_BLOCK == 0 && nslices >= 1 &&
                  slice_cols * nslices <= W->cols && (!grouped || W->layout_cols == slice_cols ||
                                                      (nslices == 1 && (!W->layout_cols || W->layout_cols == W->cols))),
              "q4 slices: %lld slices of %lld columns of a %s matrix of %lld (grouped by %lld)", (long long)nslices,
              (long long)slice_cols, g4_dtype_name(W->dtype), (long long)W->cols, (long long)W->layout_cols);
    if (r1 <= r0) return;
    const int64_t nb = slice_cols / G4_Q4_BLOCK;
    if (g4__prefetch_l2 && g4__avx512_vnni && grouped) q4_slices_dt(1, 1, 1, W, nb, nslices, act, act_stride, y, ldy, r0, r1);
    else if (g4__avx512_vnni && grouped) q4_slices_dt(1, 1, 0, W, nb, nslices, act, act_stride, y, ldy, r0, r1);
    else if (g4__avx512_vnni) q4_slices_dt(1, 0, g4__prefetch_l2, W, nb, nslices, act, act_stride, y, ldy, r0, r1);
    else if (grouped) q4_slices_dt(0, 1, g4__prefetch_l2, W, nb, nslices, act, act_stride, y, ldy, r0, r1);
    else q4_slices_dt(0, 0, g4__prefetch_l2, W, nb, nslices, act, act_stride, y, ldy, r0, r1);
}

void g4__q4_matmul_avx512(const g4_mat *W, const float *x, int64_t ldx, int T, float *y, int64_t ldy, int64_t r0,
                          int64_t r1, void *scratch) {
    char *act = g4__align64(scratch);
    g4__q4_prepare_avx512(W, x, ldx, T, 0, T, act);
    g4__q4_matmul_prepared_avx512(W, act, T, y, ldy, r0, r1, act + g4__q4_act_bytes(W, T)); /* 64-aligned */
}
