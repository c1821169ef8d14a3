/* attention_avx512.c — the AVX-512 attention kernels: one token's query heads over their keys
 * (attention, attention_kv) and a tile of tokens that share keys (attention_tokens). Compiled
 * with AVX-512 flags; reached only through the avx512 table (kernels_avx512.c).
 *
 * Every (query row, key) score is the canonical dot (one 16-lane accumulator over d in order,
 * masked tail, hsum16), every row's softmax runs over that row's own keys from its first, and
 * every output element is fma(p_j, v_j[i], acc) over the row's keys in order from +0 — however
 * many heads or tokens share a pass over the keys. So the bits never depend on the tiling. */
#include "kernels/kernels.h"
#include "kernels/kernels_avx512.h"
#include "kernels/kernels_internal.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#ifndef G4_MV_PREFETCH
#define G4_MV_PREFETCH 1024
#endif

enum { AKB = 32 };

/* 16 elements of a row from element x, widened to f32 (q8_0: x a multiple of 16, within a block) */
AI __m512 kv_ld(const int DT, const char *row, int64_t x) {
    if (DT == G4_DT_BF16)
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(row + 2 * x))), 16));
    if (DT == G4_DT_Q8_0) {
        const g4_block_q8_0 *b = (const g4_block_q8_0 *)row + x / G4_Q8_BLOCK;
        const __m512 q = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b->qs + x % G4_Q8_BLOCK))));
        return _mm512_mul_ps(_mm512_set1_ps(_cvtsh_ss(b->d)), q);
    }
    return _mm512_loadu_ps((const float *)row + x);
}
/* the same for the m lanes of a tail (q8_0 rows have none: d is a multiple of 32) */
AI __m512 kv_ld_m(const int DT, const char *row, int64_t x, __mmask16 m) {
    if (DT == G4_DT_BF16)
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, row + 2 * x)), 16));
    return _mm512_maskz_loadu_ps(m, (const float *)row + x);
}
/* bytes per element, for the prefetch distance (q8_0: about one) */
#define KV_ES(DT) ((DT) == G4_DT_F32 ? 4 : (DT) == G4_DT_BF16 ? 2 : 1)

/* Softmax of one head's nk scores in place: max, exp, sum, scale. */
static void softmax_scores(float *scores, int64_t nk) {
    __m512 mv = _mm512_set1_ps(-INFINITY);
    for (int64_t j = 0; j < nk; j += 16) {
        __mmask16 m = nk - j >= 16 ? (__mmask16)0xffff : tailmask(nk - j);
        mv = _mm512_mask_max_ps(mv, m, mv, _mm512_maskz_loadu_ps(m, scores + j));
    }
    const __m512 mx = _mm512_set1_ps(_mm512_reduce_max_ps(mv));
    __m512 sv = _mm512_setzero_ps();
    for (int64_t j = 0; j < nk; j += 16) {
        __mmask16 m = nk - j >= 16 ? (__mmask16)0xffff : tailmask(nk - j);
        __m512 e = _mm512_maskz_mov_ps(m, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, scores + j), mx)));
        _mm512_mask_storeu_ps(scores + j, m, e);
        sv = _mm512_add_ps(sv, e);
    }
    const float inv = 1.0f / hsum16(sv);
    for (int64_t j = 0; j < nk; j++) scores[j] *= inv;
}

/* One segment's rows: f32 segments count their stride in floats, the others in bytes. */
AI void seg_rows(const int DT, const void *segs, int s, const char **k, const char **v, int64_t *n, int64_t *st) {
    if (DT == G4_DT_F32) {
        const g4_kv_seg *g = (const g4_kv_seg *)segs + s;
        *k = (const char *)g->k, *v = (const char *)g->v, *n = g->n, *st = g->stride * (int64_t)sizeof(float);
    } else {
        const g4_kvq_seg *g = (const g4_kvq_seg *)segs + s;
        *k = g->k, *v = g->v, *n = g->n, *st = g->stride;
    }
}

/* Query rows per register tile: 8 rows x 2 keys of scores (4 x 4 for up to 4 rows), 8 rows x 32
 * columns of outputs (4 x 64). */
enum { TR = 8 };

/* The key and value rows of keys [u0, u1) (u1 - u0 <= AKB), walking the segments with a cursor
 * (*s, *base: the segment holding key *base.. onwards). */
AI void key_rows(const int DT, const void *segs, int nseg, int *s, int64_t *base, int64_t u0, int64_t u1,
                 const char **kp, const char **vp) {
    for (int64_t u = u0; u < u1; u++) {
        const char *k, *v;
        int64_t n, st;
        seg_rows(DT, segs, *s, &k, &v, &n, &st);
        while (u - *base >= n) {
            G4_ASSERT(*s + 1 < nseg, "key %lld past the segments", (long long)u);
            *base += n;
            ++*s;
            seg_rows(DT, segs, *s, &k, &v, &n, &st);
        }
        kp[u - u0] = k + (u - *base) * st;
        vp[u - u0] = v + (u - *base) * st;
    }
}

/* Scores of R query rows (q[r]) against KR keys (k[j]) to s[r*ns + j], KR * R <= 16: one
 * 16-lane accumulator per pair over d in order, masked tail, hsum16 — the canonical dot. */
AI void qk_rows(const int KR, const int R, const int DT, const char *const *k, const float *const *q, int64_t d,
                float *s, int64_t ns) {
    __m512 acc[4][TR];
#pragma GCC unroll 4
    for (int j = 0; j < KR; j++)
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) acc[j][r] = _mm512_setzero_ps();
    int64_t x = 0;
    for (; x + 16 <= d; x += 16) {
        __m512 kv[4];
        if (KR > 1 && ((x * KV_ES(DT)) & 63) == 0)
#pragma GCC unroll 4
            for (int j = 0; j < KR; j++) _mm_prefetch(k[j] + x * KV_ES(DT) + G4_MV_PREFETCH, _MM_HINT_T0);
#pragma GCC unroll 4
        for (int j = 0; j < KR; j++) kv[j] = kv_ld(DT, k[j], x);
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            const __m512 qv = _mm512_loadu_ps(q[r] + x);
#pragma GCC unroll 4
            for (int j = 0; j < KR; j++) acc[j][r] = _mm512_fmadd_ps(kv[j], qv, acc[j][r]);
        }
    }
    if (x < d) {
        const __mmask16 m = tailmask(d - x);
        __m512 kv[4];
#pragma GCC unroll 4
        for (int j = 0; j < KR; j++) kv[j] = kv_ld_m(DT, k[j], x, m);
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            const __m512 qv = _mm512_maskz_loadu_ps(m, q[r] + x);
#pragma GCC unroll 4
            for (int j = 0; j < KR; j++) acc[j][r] = _mm512_fmadd_ps(kv[j], qv, acc[j][r]);
        }
    }
#pragma GCC unroll 4
    for (int j = 0; j < KR; j++)
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) s[r * ns + j] = hsum16(acc[j][r]);
}

/* out[r][i] += sum over the nb keys of p[r][b] * v[b][i], b in order, the accumulators parked in
 * out between calls: 32-wide slices of d (64-wide for R <= 4), then 16-wide masked ones. */
AI void pv_rows(const int R, const int DT, float *const *out, int64_t d, const char *const *v, const float *const *p,
                int nb) {
    enum { C = 4 };
    const int nc = R <= 4 ? 4 : 2;
    int64_t i0 = 0;
    for (; i0 + 16 * nc <= d; i0 += 16 * nc) {
        __m512 acc[TR][C];
#pragma GCC unroll 8
        for (int r = 0; r < R; r++)
#pragma GCC unroll 4
            for (int c = 0; c < nc; c++) acc[r][c] = _mm512_loadu_ps(out[r] + i0 + 16 * c);
        for (int b = 0; b < nb; b++) {
            __m512 vv[C];
#pragma GCC unroll 4
            for (int c = 0; c < nc; c++) vv[c] = kv_ld(DT, v[b], i0 + 16 * c);
#pragma GCC unroll 8
            for (int r = 0; r < R; r++) {
                const __m512 pb = _mm512_set1_ps(p[r][b]);
#pragma GCC unroll 4
                for (int c = 0; c < nc; c++) acc[r][c] = _mm512_fmadd_ps(pb, vv[c], acc[r][c]);
            }
        }
#pragma GCC unroll 8
        for (int r = 0; r < R; r++)
#pragma GCC unroll 4
            for (int c = 0; c < nc; c++) _mm512_storeu_ps(out[r] + i0 + 16 * c, acc[r][c]);
    }
    for (; i0 < d; i0 += 16) {
        const __mmask16 m = d - i0 >= 16 ? (__mmask16)0xffff : tailmask(d - i0);
        __m512 acc[TR];
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) acc[r] = _mm512_maskz_loadu_ps(m, out[r] + i0);
        for (int b = 0; b < nb; b++) {
            const __m512 vv = d - i0 >= 16 ? kv_ld(DT, v[b], i0) : kv_ld_m(DT, v[b], i0, m);
#pragma GCC unroll 8
            for (int r = 0; r < R; r++) acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(p[r][b]), vv, acc[r]);
        }
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) _mm512_mask_storeu_ps(out[r] + i0, m, acc[r]);
    }
}

/* The rows' scores for keys [a, e) of a block whose rows are kp (key u at kp[u - u0]). */
AI void qk_span(const int R, const int DT, const char *const *kp, int64_t u0, int64_t a, int64_t e,
                const float *const *q, int64_t d, float *s, int64_t ns) {
    const int KR = R <= 4 ? 4 : 2;
    int64_t u = a;
    for (; u + KR <= e; u += KR) qk_rows(KR, R, DT, kp + (u - u0), q, d, s + u, ns);
    for (; u < e; u++) qk_rows(1, R, DT, kp + (u - u0), q, d, s + u, ns);
}

AI void qk_chunk(const int DT, int R, const char *const *kp, int64_t u0, int64_t a, int64_t e, const float *const *q,
                 int64_t d, float *s, int64_t ns) {
    switch (R) {
    case 8: qk_span(8, DT, kp, u0, a, e, q, d, s, ns); break;
    case 7: qk_span(7, DT, kp, u0, a, e, q, d, s, ns); break;
    case 6: qk_span(6, DT, kp, u0, a, e, q, d, s, ns); break;
    case 5: qk_span(5, DT, kp, u0, a, e, q, d, s, ns); break;
    case 4: qk_span(4, DT, kp, u0, a, e, q, d, s, ns); break;
    case 3: qk_span(3, DT, kp, u0, a, e, q, d, s, ns); break;
    case 2: qk_span(2, DT, kp, u0, a, e, q, d, s, ns); break;
    default: qk_span(1, DT, kp, u0, a, e, q, d, s, ns); break;
    }
}

AI void pv_chunk(const int DT, int R, float *const *out, int64_t d, const char *const *v, const float *const *p, int nb) {
    switch (R) {
    case 8: pv_rows(8, DT, out, d, v, p, nb); break;
    case 7: pv_rows(7, DT, out, d, v, p, nb); break;
    case 6: pv_rows(6, DT, out, d, v, p, nb); break;
    case 5: pv_rows(5, DT, out, d, v, p, nb); break;
    case 4: pv_rows(4, DT, out, d, v, p, nb); break;
    case 3: pv_rows(3, DT, out, d, v, p, nb); break;
    case 2: pv_rows(2, DT, out, d, v, p, nb); break;
    default: pv_rows(1, DT, out, d, v, p, nb); break;
    }
}

/* Row r's values for keys [a, e) of the block at u0, alone. */
AI void pv_one(const int DT, float *out, int64_t d, const char *const *vp, int64_t u0, const float *srow, int64_t a,
               int64_t e) {
    if (a >= e) return;
    const float *p = srow + a;
    pv_rows(1, DT, &out, d, vp + (a - u0), &p, (int)(e - a));
}

/* R query rows (qrow[r], out to orow[r]), row r reading keys [a_[r], b_[r]) (b_ >= a_) of the
 * segments' keys: scores of blocks of AKB keys for every chunk of TR rows, each row's softmax,
 * then the values block by block, each row's keys in order. */
AI void attention_rows_dt(const int DT, int R, float *const *orow, const float *const *qrow, const int64_t *a_,
                          const int64_t *b_, int64_t d, const void *segs, int nseg, float *scratch) {
    int64_t nU = 0;
    for (int r = 0; r < R; r++) {
        if (b_[r] > nU) nU = b_[r];
        memset(orow[r], 0, (size_t)d * sizeof(float));
    }
    float *sc = scratch; /* row r's score of key u at sc[r * nU + u] */
    const char *kp[AKB], *vp[AKB];
    int s = 0;
    int64_t base = 0;
    for (int64_t u0 = 0; u0 < nU; u0 += AKB) { /* scores: a block of keys for every row */
        const int64_t u1 = u0 + AKB < nU ? u0 + AKB : nU;
        key_rows(DT, segs, nseg, &s, &base, u0, u1, kp, vp);
        for (int c = 0; c < R; c += TR) {
            const int rc = R - c < TR ? R - c : TR;
            int64_t lo = a_[c], hi = b_[c];
            for (int r = c + 1; r < c + rc; r++) lo = a_[r] < lo ? a_[r] : lo, hi = b_[r] > hi ? b_[r] : hi;
            const int64_t a = lo > u0 ? lo : u0, e = hi < u1 ? hi : u1;
            if (a < e) qk_chunk(DT, rc, kp, u0, a, e, qrow + c, d, sc + (int64_t)c * nU, nU);
        }
    }
    for (int r = 0; r < R; r++)
        if (b_[r] > a_[r]) softmax_scores(sc + r * nU + a_[r], b_[r] - a_[r]);
    s = 0, base = 0;
    for (int64_t u0 = 0; u0 < nU; u0 += AKB) { /* values: each row's keys in order */
        const int64_t u1 = u0 + AKB < nU ? u0 + AKB : nU;
        key_rows(DT, segs, nseg, &s, &base, u0, u1, kp, vp);
        for (int c = 0; c < R; c += TR) {
            const int rc = R - c < TR ? R - c : TR;
            int64_t lo = a_[c], hi = b_[c]; /* the keys every row of the chunk reads */
            for (int r = c + 1; r < c + rc; r++) lo = a_[r] > lo ? a_[r] : lo, hi = b_[r] < hi ? b_[r] : hi;
            const int64_t cs = lo > u0 ? lo : u0, ce = hi < u1 ? hi : u1;
            if (cs >= ce) {
                for (int r = c; r < c + rc; r++)
                    pv_one(DT, orow[r], d, vp, u0, sc + r * nU, a_[r] > u0 ? a_[r] : u0, b_[r] < u1 ? b_[r] : u1);
                continue;
            }
            for (int r = c; r < c + rc; r++) /* a row's keys before the shared run, then the run */
                pv_one(DT, orow[r], d, vp, u0, sc + r * nU, a_[r] > u0 ? a_[r] : u0, cs);
            const float *p[TR];
            for (int r = 0; r < rc; r++) p[r] = sc + (int64_t)(c + r) * nU + cs;
            pv_chunk(DT, rc, orow + c, d, vp + (cs - u0), p, (int)(ce - cs));
            for (int r = c; r < c + rc; r++) /* and its keys after it */
                pv_one(DT, orow[r], d, vp, u0, sc + r * nU, ce, b_[r] < u1 ? b_[r] : u1);
        }
    }
}

AI void attention_tokens_dt(const int DT, float *out, int64_t ldo, const float *q, int64_t ldq, int nt, int nq,
                            int64_t d, const void *segs, int nseg, const int64_t *k0, const int64_t *k1, float *scratch) {
    const int R = nt * nq;
    G4_ASSERT(R >= 1 && R <= G4_ATTN_ROWS_MAX, "%d rows", R);
    float *orow[G4_ATTN_ROWS_MAX];
    const float *qrow[G4_ATTN_ROWS_MAX];
    int64_t a_[G4_ATTN_ROWS_MAX], b_[G4_ATTN_ROWS_MAX];
    for (int r = 0; r < R; r++) {
        const int t = r / nq, h = r % nq;
        orow[r] = out + t * ldo + h * d;
        qrow[r] = q + t * ldq + h * d;
        a_[r] = k0[t], b_[r] = k1[t] > k0[t] ? k1[t] : k0[t];
    }
    attention_rows_dt(DT, R, orow, qrow, a_, b_, d, segs, nseg, scratch);
}

/* One token's nq heads over all the segments' keys: rows of up to 64 heads at a time. */
AI void attention_dt(const int DT, float *out, const float *q, int nq, int64_t d, const void *segs, int nseg,
                     float *scratch) {
    int64_t nk = 0;
    for (int s = 0; s < nseg; s++) nk += DT == G4_DT_F32 ? ((const g4_kv_seg *)segs)[s].n : ((const g4_kvq_seg *)segs)[s].n;
    float *orow[G4_ATTN_ROWS_MAX];
    const float *qrow[G4_ATTN_ROWS_MAX];
    int64_t a_[G4_ATTN_ROWS_MAX], b_[G4_ATTN_ROWS_MAX];
    for (int h0 = 0; h0 < nq; h0 += G4_ATTN_ROWS_MAX) {
        const int R = nq - h0 < G4_ATTN_ROWS_MAX ? nq - h0 : G4_ATTN_ROWS_MAX;
        for (int r = 0; r < R; r++) orow[r] = out + (h0 + r) * d, qrow[r] = q + (h0 + r) * d, a_[r] = 0, b_[r] = nk;
        attention_rows_dt(DT, R, orow, qrow, a_, b_, d, segs, nseg, scratch);
    }
}

void g4__attention_avx512(float *out, const float *q, int nq, int64_t d, const g4_kv_seg *segs, int nseg,
                          float *scores) {
    attention_dt(G4_DT_F32, out, q, nq, d, segs, nseg, scores);
}

void g4__attention_kv_avx512(float *out, const float *q, int nq, int64_t d, const g4_kvq_seg *segs, int nseg,
                             int dt, float *scratch) {
    if (dt == G4_DT_BF16) attention_dt(G4_DT_BF16, out, q, nq, d, segs, nseg, scratch);
    else attention_dt(G4_DT_Q8_0, out, q, nq, d, segs, nseg, scratch);
}

void g4__attention_tokens_avx512(float *out, int64_t ldo, const float *q, int64_t ldq, int nt, int nq, int64_t d,
                                 const void *segs, int nseg, int dt, const int64_t *k0, const int64_t *k1,
                                 float *scratch) {
    if (dt == G4_DT_F32) attention_tokens_dt(G4_DT_F32, out, ldo, q, ldq, nt, nq, d, segs, nseg, k0, k1, scratch);
    else if (dt == G4_DT_BF16) attention_tokens_dt(G4_DT_BF16, out, ldo, q, ldq, nt, nq, d, segs, nseg, k0, k1, scratch);
    else attention_tokens_dt(G4_DT_Q8_0, out, ldo, q, ldq, nt, nq, d, segs, nseg, k0, k1, scratch);
}
