/* act.c — the int8 activation records of the q8_0 and q4_0 matmuls (kernels_internal.h): the
 * per-token quantizer every set's bits start from, and the records as the scalar and avx2 sets
 * read them (T records side by side; q4_0 adds each block's integer sum). Portable C, no ISA flags;
 * the avx512 set's vectorised quantizer (act_avx512.c) writes the same bytes. */
#include "kernels/kernels_internal.h"

#include <math.h>
#include <string.h>

void g4__q8_quantize_act(const float *x, int64_t K, void *dst) {
    int8_t *qs = dst;
    float *d = (float *)((char *)dst + g4__q8_act_qs_bytes(K));
    const int64_t nb = K / G4_Q8_BLOCK, nbp = g4__q8_act_nb_pad(K);
    for (int64_t b = 0; b < nb; b++) {
        const float *xb = x + b * G4_Q8_BLOCK;
        float amax = 0;
        for (int j = 0; j < G4_Q8_BLOCK; j++) {
            float a = fabsf(xb[j]);
            amax = a > amax ? a : amax;
        }
        const float db = amax / 127.0f, id = db != 0.0f ? 1.0f / db : 0.0f;
        d[b] = db;
        for (int j = 0; j < G4_Q8_BLOCK; j++) {
            float q = roundf(xb[j] * id);
            if (q != q) q = 0.0f; /* NaN in, 0 out (the int conversion would be undefined) */
            qs[b * G4_Q8_BLOCK + j] = (int8_t)(q > 127.0f ? 127.0f : q < -127.0f ? -127.0f : q);
        }
    }
    memset(qs + nb * G4_Q8_BLOCK, 0, (size_t)(g4__q8_act_qs_bytes(K) - nb * G4_Q8_BLOCK));
    for (int64_t b = nb; b < nbp; b++) d[b] = 0;
}

size_t g4__q8_act_bytes_plain(const g4_mat *W, int T) {
    return (size_t)T * (size_t)g4__q8_act_stride(W->cols);
}

void g4__q8_prepare_plain(const g4_mat *W, const float *x, int64_t ldx, int T, int t0, int t1, void *act) {
    const int64_t qstride = g4__q8_act_stride(W->cols);
    (void)T;
    for (int t = t0; t < t1; t++) g4__q8_quantize_act(x + t * ldx, W->cols, (char *)act + t * qstride);
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

void g4__q4_prepare_plain(const g4_mat *W, const float *x, int64_t ldx, int T, int t0, int t1, void *act) {
    const int64_t stride = g4__q4_act_stride(W->cols);
    (void)T;
    for (int t = t0; t < t1; t++) {
        char *rec = (char *)act + t * stride;
        g4__q8_quantize_act(x + t * ldx, W->cols, rec);
        g4__q4_block_sums(rec, W->cols);
    }
}
