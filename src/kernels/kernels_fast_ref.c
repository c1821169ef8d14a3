/* kernels_fast_ref.c — the fast math mode's arithmetic in portable C (kernels_fast.h): the
 * emulation of one VDPBF16PS step, and the reference bf16 matmul built on it, which the scalar and
 * avx2 fast tables run and the avx512 version falls back to where the CPU lacks AVX512_BF16. */
#include "kernels/kernels_fast.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/kernels_internal.h"

/* Subnormals to zero, keeping the sign (the instruction's DAZ on inputs, FTZ on results). */
static inline float flush(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if (!(u & 0x7f800000u)) u &= 0x80000000u;
    memcpy(&f, &u, 4);
    return f;
}

/* The product of two bf16 is exact in double, and so is its sum with an fp32 wherever the
 * result can be finite, so one rounding to float is the instruction's single rounding. */
float g4_bf16dp_step(float acc, uint16_t w, uint16_t x) {
    double p = (double)flush(g4_bf16_to_f32(w)) * (double)flush(g4_bf16_to_f32(x));
    return flush((float)((double)flush(acc) + p));
}

static inline int64_t kpad(int64_t K) { return (K + 31) / 32 * 32; }

size_t g4__fast_scratch_bytes(const g4_mat *W, int T) {
    int tb = T < G4_FAST_TB ? T : G4_FAST_TB;
    return (size_t)(tb > 0 ? tb : 1) * (size_t)kpad(W->cols) * 2 + 64;
}

/* One fast dot over the zero-padded bf16 operands (kp a multiple of 32). */
static float fast_dot(const uint16_t *w, int64_t K, const uint16_t *xb, int64_t kp) {
    float acc[16] = {0};
    for (int64_t c = 0; c < kp; c += 32)
        for (int l = 0; l < 16; l++) {
            int64_t k = c + 2 * l;
            uint16_t w1 = k + 1 < K ? w[k + 1] : 0, w0 = k < K ? w[k] : 0;
            acc[l] = g4_bf16dp_step(g4_bf16dp_step(acc[l], w1, xb[k + 1]), w0, xb[k]);
        }
    float a[8], b[4];
    for (int i = 0; i < 8; i++) a[i] = acc[i] + acc[i + 8];
    for (int i = 0; i < 4; i++) b[i] = a[i] + a[i + 4];
    return (b[0] + b[2]) + (b[1] + b[3]);
}

size_t g4__fast_act_bytes(const g4_mat *W, int T) { return (size_t)(T > 0 ? T : 0) * (size_t)kpad(W->cols) * 2; }

void g4__fast_prepare_ref(const g4_mat *W, const float *x, int64_t ldx, int T, int t0, int t1, void *act) {
    const int64_t K = W->cols, kp = kpad(K);
    (void)T;
    for (int t = t0; t < t1; t++) {
        uint16_t *d = (uint16_t *)act + (int64_t)t * kp;
        const float *s = x + (int64_t)t * ldx;
        for (int64_t k = 0; k < kp; k++) d[k] = k < K ? g4_f32_to_bf16(s[k]) : 0;
    }
}

void g4__fast_prepared_ref(const g4_mat *W, const void *act, int T, float *y, int64_t ldy, int64_t r0, int64_t r1,
                           void *scratch) {
    (void)scratch;
    const int64_t K = W->cols, kp = kpad(K);
    for (int64_t r = r0; r < r1; r++) {
        const uint16_t *w = (const uint16_t *)((const char *)W->data + r * W->ld_bytes);
        for (int t = 0; t < T; t++) y[(int64_t)t * ldy + r] = fast_dot(w, K, (const uint16_t *)act + (int64_t)t * kp, kp);
    }
}

void g4__fast_matmul_bf16_ref(const g4_mat *W, const float *x, int64_t ldx, int T, float *y, int64_t ldy,
                              int64_t r0, int64_t r1, void *scratch) {
    if (T <= 0 || r1 <= r0) return;
    void *own = scratch ? NULL : malloc(g4__fast_scratch_bytes(W, T));
    uint16_t *xb = g4__align64(scratch ? scratch : own);
    for (int t0 = 0; t0 < T; t0 += G4_FAST_TB) {
        int nt = T - t0 < G4_FAST_TB ? T - t0 : G4_FAST_TB;
        g4__fast_prepare_ref(W, x + (int64_t)t0 * ldx, ldx, nt, 0, nt, xb);
        g4__fast_prepared_ref(W, xb, nt, y + (int64_t)t0 * ldy, ldy, r0, r1, NULL);
    }
    free(own);
}
