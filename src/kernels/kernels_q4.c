/* kernels_q4.c — the q4_0 weight format outside the matmul: the quantizer (llama.cpp's rule,
 * lossless on a 4-bit grid), the dequantizer, and the plain activation records the scalar and
 * avx2 q4_0 matmuls read (the q8_0 record plus one integer sum per block). Portable C, no ISA
 * flags. */
#include "kernels/kernels.h"
#include "kernels/kernels_internal.h"

#include <math.h>
#include <string.h>

static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* llama.cpp's level of v = x * id + 8.5f: (int8_t)v, at most 15. Finite inputs give v in
 * [0.5, 16.5]; the guards only keep NaN (-> 8, the zero level) and out-of-range values defined. */
static inline uint8_t llama_level(float v) {
    if (v != v) return 8;
    if (v <= 0.0f) return 0;
    if (v >= 15.0f) return 15;
    return (uint8_t)(int)v;
}

/* llama.cpp's quantize_row_q4_0_ref for one block: the element of largest |x| (the first one)
 * with its sign is max, d = max / -8, id = 1/d (from the fp32 d), q = min(15, (int8_t)(x*id + 8.5)). */
static void q4_block_llama(const float *x, uint16_t *dh, uint8_t *q) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < G4_Q4_BLOCK; j++)
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    const float d = max / -8, id = d != 0.0f ? 1.0f / d : 0.0f;
    *dh = g4_f32_to_f16(d);
    for (int j = 0; j < G4_Q4_BLOCK; j++) q[j] = llama_level(x[j] * id + 8.5f);
}

/* 1 when D * (q - 8) gives back every x bit for bit (zeros with their sign). */
static int q4_block_exact(const float *x, uint16_t dh, const uint8_t *q) {
    const float D = g4_f16_to_f32(dh);
    for (int j = 0; j < G4_Q4_BLOCK; j++)
        if (f32_bits(D * (float)(q[j] - 8)) != f32_bits(x[j])) return 0;
    return 1;
}

/* The levels of x on the grid of step D (fp32, nonzero, finite): 1 and q[] when every x / D is
 * an integer in -8..7, else 0 (most candidates fail on the first element). */
static int q4_block_levels(const float *x, float D, uint8_t *q) {
    for (int j = 0; j < G4_Q4_BLOCK; j++) {
        const float r = x[j] / D;
        if (!(r >= -8.0f && r <= 7.0f) || r != rintf(r)) return 0;
        q[j] = (uint8_t)((int)r + 8);
    }
    return 1;
}

/* One block: llama's result when it is exact; else the first grid that reproduces the block
 * exactly: step D = m / k for the element m of largest |x| and its level k = -8, 7, -7, .., 1, -1
 * (if the block is D * levels, m / k is D exactly for m's own level); else llama's result. */
static void q4_block(const float *x, g4_block_q4_0 *y) {
    uint8_t q[G4_Q4_BLOCK], c[G4_Q4_BLOCK];
    uint16_t dh;
    q4_block_llama(x, &dh, q);
    if (!q4_block_exact(x, dh, q)) {
        float amax = 0.0f, m = 0.0f;
        int zero = 1;
        for (int j = 0; j < G4_Q4_BLOCK; j++) {
            if (amax < fabsf(x[j])) {
                amax = fabsf(x[j]);
                m = x[j];
            }
            zero &= x[j] == 0.0f;
        }
        if (zero) { /* +-0 only (llama gives -0 everywhere): step +0, level 8 -> +0, 7 -> -0 */
            dh = 0;
            for (int j = 0; j < G4_Q4_BLOCK; j++) q[j] = signbit(x[j]) ? 7 : 8;
        } else if (isfinite(m)) {
            for (int i = 0; i < 15; i++) {
                const int k = i == 0 ? -8 : (i & 1) ? 8 - (i + 1) / 2 : -(8 - i / 2);
                const float D = m / (float)k;
                const uint16_t h = g4_f32_to_f16(D);
                if (g4_f16_to_f32(h) != D || !q4_block_levels(x, D, c) || !q4_block_exact(x, h, c)) continue;
                dh = h;
                memcpy(q, c, sizeof q);
                break;
            }
        }
    }
    y->d = dh;
    for (int j = 0; j < G4_Q4_BLOCK / 2; j++) y->qs[j] = (uint8_t)(q[j] | q[j + G4_Q4_BLOCK / 2] << 4);
}

void g4_quantize_row_q4_0(const float *x, g4_block_q4_0 *y, int64_t n) {
    for (int64_t b = 0; b < n / G4_Q4_BLOCK; b++) q4_block(x + b * G4_Q4_BLOCK, y + b);
}

void g4_dequantize_row_q4_0(const g4_block_q4_0 *x, float *y, int64_t n) {
    for (int64_t b = 0; b < n / G4_Q4_BLOCK; b++) {
        const float d = g4_f16_to_f32(x[b].d);
        for (int j = 0; j < G4_Q4_BLOCK / 2; j++) {
            y[b * 32 + j] = d * (float)((x[b].qs[j] & 15) - 8);
            y[b * 32 + j + 16] = d * (float)((x[b].qs[j] >> 4) - 8);
        }
    }
}

size_t g4__q4_act_bytes(const g4_mat *W, int T) {
    return (size_t)T * (size_t)g4__q4_act_stride(W->cols);
}

void g4__q4_block_sums(void *rec, int64_t K) {
    const int8_t *qs = rec;
    int32_t *s = g4__q4_act_sums(rec, K);
    for (int64_t b = 0; b < g4__q8_act_nb_pad(K); b++) {
        int32_t t = 0;
        for (int j = 0; j < G4_Q8_BLOCK; j++) t += qs[b * G4_Q8_BLOCK + j];
        s[b] = t;
    }
}

void g4__q4_prepare_plain(const g4_mat *W, const float *x, int64_t ldx, int T, void *act) {
    const int64_t stride = g4__q4_act_stride(W->cols);
    for (int t = 0; t < T; t++) {
        char *rec = (char *)act + t * stride;
        g4__q8_quantize_act(x + t * ldx, W->cols, rec);
        g4__q4_block_sums(rec, W->cols);
    }
}
