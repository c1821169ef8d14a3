/* kernels_scalar.c — the portable reference kernels: always built, used on CPUs without AVX2,
 * forced with G4_ISA=scalar, and the oracle the SIMD kernels are tested against.
 * Order of the dot product: 4 running sums over k = 0,4,8.. / 1,5,9.. / …, combined as
 * (s0+s1)+(s2+s3); the same for every row, batch size and thread split.
 * q8_0 weights (llama.cpp semantics): each token's activations are quantized per 32-block to
 * int8 (g4__q8_quantize_act, into the scratch buffer); per block the integer dot product is
 * exact, times (d_w * d_x) in fp32, summed over blocks with 4 running sums (blocks 0,4,8.. /
 * 1,5,9.. / ..) combined as (s0+s1)+(s2+s3). The SIMD sets compute the same block values and
 * differ only in the order of that float sum. q4_0: the same with the block value
 * (float)(sum q_w x - 8 sum x) * (d_w * d_x). */
#include "kernels/kernels.h"
#include "kernels/kernels_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The dtype table's conversion (dtype.c): the reference the other sets' row_to_f32 meet. */
static void row_to_f32(float *dst, const void *src, int dt, int64_t n) { g4_dtype_info(dt)->to_f32(src, dst, n); }

/* Upcast one weight element; the matmul inner loop is written per dtype for speed. */
static inline float dot_f32(const float *w, const float *x, int64_t n) {
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int64_t k = 0;
    for (; k + 4 <= n; k += 4) {
        s0 += w[k] * x[k];
        s1 += w[k + 1] * x[k + 1];
        s2 += w[k + 2] * x[k + 2];
        s3 += w[k + 3] * x[k + 3];
    }
    for (; k < n; k++) s0 += w[k] * x[k];
    return (s0 + s1) + (s2 + s3);
}

static inline float dot_bf16(const uint16_t *w, const float *x, int64_t n) {
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int64_t k = 0;
    for (; k + 4 <= n; k += 4) {
        s0 += g4_bf16_to_f32(w[k]) * x[k];
        s1 += g4_bf16_to_f32(w[k + 1]) * x[k + 1];
        s2 += g4_bf16_to_f32(w[k + 2]) * x[k + 2];
        s3 += g4_bf16_to_f32(w[k + 3]) * x[k + 3];
    }
    for (; k < n; k++) s0 += g4_bf16_to_f32(w[k]) * x[k];
    return (s0 + s1) + (s2 + s3);
}

static inline float dot_f16(const uint16_t *w, const float *x, int64_t n) {
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int64_t k = 0;
    for (; k + 4 <= n; k += 4) {
        s0 += g4_f16_to_f32(w[k]) * x[k];
        s1 += g4_f16_to_f32(w[k + 1]) * x[k + 1];
        s2 += g4_f16_to_f32(w[k + 2]) * x[k + 2];
        s3 += g4_f16_to_f32(w[k + 3]) * x[k + 3];
    }
    for (; k < n; k++) s0 += g4_f16_to_f32(w[k]) * x[k];
    return (s0 + s1) + (s2 + s3);
}

/* q8_0 weights times one quantized token (see the file comment). */
static inline float dot_q8(const g4_block_q8_0 *w, const int8_t *xq, const float *xd, int64_t n) {
    float s[4] = {0, 0, 0, 0};
    for (int64_t b = 0; b < n / G4_Q8_BLOCK; b++) {
        const int8_t *xb = xq + b * G4_Q8_BLOCK;
        int32_t isum = 0;
        for (int j = 0; j < G4_Q8_BLOCK; j++) isum += (int32_t)w[b].qs[j] * (int32_t)xb[j];
        const float d = g4_f16_to_f32(w[b].d) * xd[b];
        s[b & 3] += (float)isum * d;
    }
    return (s[0] + s[1]) + (s[2] + s[3]);
}

/* q4_0 weights times one quantized token: sum (q-8) x = sum q x - 8 sum x per block. */
static inline float dot_q4(const g4_block_q4_0 *w, const int8_t *xq, const float *xd, const int32_t *xs,
                           int64_t n) {
    float s[4] = {0, 0, 0, 0};
    for (int64_t b = 0; b < n / G4_Q4_BLOCK; b++) {
        const int8_t *xb = xq + b * G4_Q4_BLOCK;
        int32_t isum = 0;
        for (int j = 0; j < G4_Q4_BLOCK / 2; j++)
            isum += (int32_t)(w[b].qs[j] & 15) * xb[j] + (int32_t)(w[b].qs[j] >> 4) * xb[j + 16];
        isum -= 8 * xs[b];
        const float d = g4_f16_to_f32(w[b].d) * xd[b];
        s[b & 3] += (float)isum * d;
    }
    return (s[0] + s[1]) + (s[2] + s[3]);
}

/* q8_0 (q4 = 0) or q4_0 rows [r0, r1) times T prepared tokens */
static inline void prepared_dt(int q4, const g4_mat *W, const void *act, int T, float *y, int64_t ldy, int64_t r0, int64_t r1) {
    const int64_t n = W->cols, qstride = q4 ? g4__q4_act_stride(n) : g4__q8_act_stride(n), qsb = g4__q8_act_qs_bytes(n);
    for (int64_t r = r0; r < r1; r++) {
        const void *row = (const char *)W->data + r * W->ld_bytes;
        for (int t = 0; t < T; t++) {
            const char *rec = (const char *)act + t * qstride;
            const float *xd = (const float *)(rec + qsb);
            y[t * ldy + r] = q4 ? dot_q4(row, (const int8_t *)rec, xd, g4__q4_act_sums((void *)rec, n), n)
                                : dot_q8(row, (const int8_t *)rec, xd, n);
        }
    }
}
static void prepared_q8(const g4_mat *W, const void *act, int T, float *y, int64_t ldy, int64_t r0, int64_t r1, void *scratch) {
    prepared_dt(0, W, act, T, y, ldy, r0, r1);
}
static void prepared_q4(const g4_mat *W, const void *act, int T, float *y, int64_t ldy, int64_t r0, int64_t r1, void *scratch) {
    prepared_dt(1, W, act, T, y, ldy, r0, r1);
}

static size_t q_scratch_bytes(const g4_mat *W, int T);
static void matmul_q(const g4_mat *W, const float *x, int64_t ldx, int T, float *y, int64_t ldy, int64_t r0, int64_t r1,
                     void *scratch);

/* the quantized dtypes' matmuls (kernels_internal.h g4__qmm), plain activation records */
static const g4__qmm qmm[G4_DT_COUNT] = {
    [G4_DT_Q8_0] = {matmul_q, q_scratch_bytes, g4__q8_act_bytes_plain, g4__q8_prepare_plain, prepared_q8},
    [G4_DT_Q4_0] = {matmul_q, q_scratch_bytes, g4__q4_act_bytes, g4__q4_prepare_plain, prepared_q4},
};

static size_t q_scratch_bytes(const g4_mat *W, int T) { return qmm[W->dtype].act_bytes(W, T) + 64; }

/* a quantized matmul: its activations prepared into the scratch, then the prepared product */
static void matmul_q(const g4_mat *W, const float *x, int64_t ldx, int T, float *y, int64_t ldy, int64_t r0, int64_t r1,
                     void *scratch) {
    void *owned = NULL;
    if (!scratch) scratch = owned = malloc(q_scratch_bytes(W, T));
    if (!scratch) return; /* out of memory: nothing sensible to compute */
    char *xq = g4__align64(scratch);
    qmm[W->dtype].prepare(W, x, ldx, T, 0, T, xq);
    qmm[W->dtype].prepared(W, xq, T, y, ldy, r0, r1, NULL);
    free(owned);
}

static size_t matmul_scratch_bytes(const g4_mat *W, int T) { return qmm[W->dtype].matmul ? qmm[W->dtype].scratch_bytes(W, T) : 0; }

static void matmul(const g4_mat *W, const float *x, int64_t ldx, int T, float *y, int64_t ldy,
                   int64_t r0, int64_t r1, void *scratch) {
    const int64_t n = W->cols;
    if (qmm[W->dtype].matmul) {
        qmm[W->dtype].matmul(W, x, ldx, T, y, ldy, r0, r1, scratch);
        return;
    }
    for (int64_t r = r0; r < r1; r++) {
        const void *row = (const char *)W->data + r * W->ld_bytes;
        for (int t = 0; t < T; t++) {
            const float *xt = x + t * ldx;
            float v;
            switch (W->dtype) {
            case G4_DT_F32: v = dot_f32(row, xt, n); break;
            case G4_DT_BF16: v = dot_bf16(row, xt, n); break;
            default: v = dot_f16(row, xt, n); break;
            }
            y[t * ldy + r] = v;
        }
    }
}

static void rmsnorm(float *y, const float *x, const float *w, int64_t n, float eps) {
    float ss = dot_f32(x, x, n);
    float inv = 1.0f / sqrtf(ss / (float)n + eps);
    if (w)
        for (int64_t i = 0; i < n; i++) y[i] = x[i] * inv * w[i];
    else
        for (int64_t i = 0; i < n; i++) y[i] = x[i] * inv;
}

static void rope(float *x, const float *c, const float *s, int64_t d) {
    int64_t h = d / 2;
    for (int64_t i = 0; i < h; i++) {
        float a = x[i], b = x[i + h];
        x[i] = a * c[i] - b * s[i];
        x[i + h] = b * c[i] + a * s[i];
    }
}

static void gelu_mul(float *out, const float *gate, const float *up, int64_t n) {
    const float k0 = 0.7978845608028654f, k1 = 0.044715f;
    for (int64_t i = 0; i < n; i++) {
        float g = gate[i];
        out[i] = 0.5f * g * (1.0f + tanhf(k0 * (g + k1 * g * g * g))) * up[i];
    }
}

static void attention1(float *out, const float *q, int64_t d, const g4_kv_seg *segs, int nseg,
                       float *scores) {
    int64_t nk = 0;
    float mx = -INFINITY;
    for (int s = 0; s < nseg; s++)
        for (int64_t j = 0; j < segs[s].n; j++) {
            float v = dot_f32(segs[s].k + j * segs[s].stride, q, d);
            scores[nk++] = v;
            if (v > mx) mx = v;
        }
    float sum = 0;
    for (int64_t j = 0; j < nk; j++) {
        scores[j] = expf(scores[j] - mx);
        sum += scores[j];
    }
    float inv = 1.0f / sum;
    for (int64_t i = 0; i < d; i++) out[i] = 0;
    nk = 0;
    for (int s = 0; s < nseg; s++)
        for (int64_t j = 0; j < segs[s].n; j++) {
            float p = scores[nk++] * inv;
            const float *v = segs[s].v + j * segs[s].stride;
            for (int64_t i = 0; i < d; i++) out[i] += p * v[i];
        }
}

static void add(float *y, const float *a, const float *b, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = a[i] + b[i];
}

static void scale(float *y, const float *x, float s, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * s;
}

static void softcap(float *y, const float *x, float cap, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = cap * tanhf(x[i] / cap);
}

/* one head after the other (the avx512 set shares the key and value reads between heads) */
static void attention(float *out, const float *q, int nq, int64_t d, const g4_kv_seg *segs, int nseg,
                      float *scores) {
    for (int h = 0; h < nq; h++) attention1(out + h * d, q + h * d, d, segs, nseg, scores);
}

/* bf16 / q8_0 rows: each dequantized into the tile, then attention1's arithmetic. */
static void attention_kv(float *out, const float *q, int nq, int64_t d, const g4_kvq_seg *segs, int nseg, int dt,
                         float *scratch) {
    int64_t nk = 0;
    for (int s = 0; s < nseg; s++) nk += segs[s].n;
    float *scores = scratch, *row = scratch + nk;
    for (int h = 0; h < nq; h++) {
        const float *qh = q + h * d;
        float *o = out + h * d, mx = -INFINITY;
        int64_t j0 = 0;
        for (int s = 0; s < nseg; s++)
            for (int64_t j = 0; j < segs[s].n; j++) {
                row_to_f32(row, (const char *)segs[s].k + j * segs[s].stride, dt, d);
                const float v = dot_f32(row, qh, d);
                scores[j0++] = v;
                if (v > mx) mx = v;
            }
        float sum = 0;
        for (int64_t j = 0; j < nk; j++) {
            scores[j] = expf(scores[j] - mx);
            sum += scores[j];
        }
        const float inv = 1.0f / sum;
        for (int64_t i = 0; i < d; i++) o[i] = 0;
        j0 = 0;
        for (int s = 0; s < nseg; s++)
            for (int64_t j = 0; j < segs[s].n; j++) {
                const float p = scores[j0++] * inv;
                row_to_f32(row, (const char *)segs[s].v + j * segs[s].stride, dt, d);
                for (int64_t i = 0; i < d; i++) o[i] += p * row[i];
            }
    }
}

G4__QMM_ENTRY_POINTS(qmm)


const g4_kernels g4_kernels_scalar = {
    .name = "scalar",
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
