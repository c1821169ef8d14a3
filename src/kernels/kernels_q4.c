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
 * [0.5, 16.5]; the clamps only keep NaN (-> 8, the zero level) and out-of-range values defined. */
static inline uint8_t llama_level(float v) {
    v = v == v ? v : 8.5f;
    v = v < 0.0f ? 0.0f : v > 15.0f ? 15.0f : v;
    return (uint8_t)(int)v;
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

/* The first grid that gives the block back exactly, if any: step D = m / k for the element m of
 * largest |x| (index im) and its level k = -8, 7, -7, .., 1, -1 (if the block is D * levels, m / k
 * is D exactly for m's own level). A probe element besides m is tested first with a product
 * (x_p * k / m must be an integer; off by far less than the 1e-3 tolerance on the grid): it
 * rejects almost every candidate of a block off the grid before the exact tests. */
static int q4_block_grid(const float *x, float m, int im, uint16_t *dh, uint8_t *q) {
    int p = -1;
    for (int j = 0; j < G4_Q4_BLOCK && p < 0; j++)
        if (j != im && x[j] != 0.0f) p = j;
    const float inv = 1.0f / m;
    for (int i = 0; i < 15; i++) {
        const int k = i == 0 ? -8 : (i & 1) ? 8 - (i + 1) / 2 : -(8 - i / 2);
        if (p >= 0) {
            const float r = x[p] * (float)k * inv;
            if (!(fabsf(r - rintf(r)) <= 1e-3f)) continue;
        }
        const float D = m / (float)k;
        const uint16_t h = g4_f32_to_f16(D);
        if (g4_f16_to_f32(h) != D || !q4_block_levels(x, D, q) || !q4_block_exact(x, h, q)) continue;
        *dh = h;
        return 1;
    }
    return 0;
}

/* One block: llama.cpp's quantize_row_q4_0_ref (the element of largest |x|, the first one, with
 * its sign is max; d = max / -8; id = 1/d from the fp32 d; q = min(15, (int8_t)(x*id + 8.5))) when
 * it gives the block back exactly; else the first exact grid (q4_block_grid); an all-zero block
 * step +0 (llama's -0 turns +0 into -0: level 8 -> +0, 7 -> -0); else llama's result. */
static void q4_block(const float *x, g4_block_q4_0 *y) {
    uint8_t q[G4_Q4_BLOCK], c[G4_Q4_BLOCK];
    float amax = 0.0f, max = 0.0f;
    int im = 0, zero = 1;
    for (int j = 0; j < G4_Q4_BLOCK; j++) {
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
            im = j;
        }
        zero &= x[j] == 0.0f;
    }
    const float d = max / -8, id = d != 0.0f ? 1.0f / d : 0.0f;
    uint16_t dh = g4_f32_to_f16(d), h;
    for (int j = 0; j < G4_Q4_BLOCK; j++) q[j] = llama_level(x[j] * id + 8.5f);
    if (!q4_block_exact(x, dh, q)) {
        if (zero) {
            dh = 0;
            for (int j = 0; j < G4_Q4_BLOCK; j++) q[j] = signbit(x[j]) ? 7 : 8;
        } else if (isfinite(max) && q4_block_grid(x, max, im, &h, c)) {
            dh = h;
            memcpy(q, c, sizeof q);
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

/* The grouped layout (kernels.h): blk(L) is the lane order of the avx512 loop. */
static int grp_blk(int L) { return 4 * (L % 4) + L / 4; }

void g4_q4_0_group_row(void *row, int64_t nb) {
    uint8_t *p = row;
    for (int64_t g = 0; g < nb / 16; g++, p += 16 * sizeof(g4_block_q4_0)) {
        g4_block_q4_0 b[16];
        memcpy(b, p, sizeof b);
        for (int L = 0; L < 16; L++) {
            const g4_block_q4_0 *s = &b[grp_blk(L)];
            memcpy(p + 2 * L, &s->d, 2);
            for (int j = 0; j < 4; j++) memcpy(p + 32 + 64 * j + 4 * L, s->qs + 4 * j, 4);
        }
    }
}

void g4_q4_0_ungroup_row(void *row, int64_t nb) {
    uint8_t *p = row;
    for (int64_t g = 0; g < nb / 16; g++, p += 16 * sizeof(g4_block_q4_0)) {
        uint8_t q[16 * sizeof(g4_block_q4_0)];
        g4_block_q4_0 b[16];
        memcpy(q, p, sizeof q);
        for (int L = 0; L < 16; L++) {
            g4_block_q4_0 *s = &b[grp_blk(L)];
            memcpy(&s->d, q + 2 * L, 2);
            for (int j = 0; j < 4; j++) memcpy(s->qs + 4 * j, q + 32 + 64 * j + 4 * L, 4);
        }
        memcpy(p, b, sizeof b);
    }
}

void g4_mat_lookup_row(const g4_kernels *K, const g4_mat *W, int64_t r, float *dst) {
    const uint8_t *src = (const uint8_t *)W->data + r * W->ld_bytes;
    if (W->dtype != G4_DT_Q4_0 || W->layout != G4_Q4_GROUPED) {
        K->row_to_f32(dst, src, W->dtype, W->cols);
        return;
    }
    const int64_t seg = W->layout_cols > 0 ? W->layout_cols : W->cols, sb = seg / G4_Q4_BLOCK;
    for (int64_t c = 0; c < W->cols; c += seg)
        for (int64_t g = 0; g < sb; g += 16) { /* a group back to blocks, 288 bytes on the stack */
            uint8_t q[16 * sizeof(g4_block_q4_0)];
            const int64_t n = sb - g < 16 ? sb - g : 16, b0 = c / G4_Q4_BLOCK + g;
            memcpy(q, src + (size_t)b0 * sizeof(g4_block_q4_0), (size_t)n * sizeof(g4_block_q4_0));
            if (n == 16) g4_q4_0_ungroup_row(q, 16);
            K->row_to_f32(dst + b0 * G4_Q4_BLOCK, q, G4_DT_Q4_0, n * G4_Q4_BLOCK);
        }
}

int g4_q4_0_layout_for(const g4_kernels *k) { return k ? k->q4_0_layout : 0; }
