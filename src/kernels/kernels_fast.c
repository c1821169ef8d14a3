/* kernels_fast.c — the fast math mode's reference (the emulation of VDPBF16PS) and the fast
 * tables (kernels_fast.h). */
#include "kernels/kernels_fast.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels_internal.h"

int g4_math_from_name(const char *name) {
    if (!name || !strcmp(name, "exact")) return G4_MATH_EXACT;
    if (!strcmp(name, "fast")) return G4_MATH_FAST;
    return -1;
}

const char *g4_math_name(int math) { return math == G4_MATH_FAST ? "fast" : "exact"; }

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

void g4__fast_prepare_ref(const g4_mat *W, const float *x, int64_t ldx, int T, void *act) {
    const int64_t K = W->cols, kp = kpad(K);
    for (int t = 0; t < T; t++) {
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
        g4__fast_prepare_ref(W, x + (int64_t)t0 * ldx, ldx, nt, xb);
        g4__fast_prepared_ref(W, xb, nt, y + (int64_t)t0 * ldy, ldy, r0, r1, NULL);
    }
    free(own);
}

/* The fast tables: copies of the sets with the bf16 matmul replaced. */
#define FAST_WRAPPERS(set, mm, prep, prepd)                                                              \
    static void matmul_##set(const g4_mat *W, const float *x, int64_t ldx, int T, float *y, int64_t ldy, \
                             int64_t r0, int64_t r1, void *scratch) {                                    \
        if (W->dtype == G4_DT_BF16) mm(W, x, ldx, T, y, ldy, r0, r1, scratch);                           \
        else g4_kernels_##set.matmul(W, x, ldx, T, y, ldy, r0, r1, scratch);                             \
    }                                                                                                    \
    static size_t scratch_##set(const g4_mat *W, int T) {                                                \
        return W->dtype == G4_DT_BF16 ? g4__fast_scratch_bytes(W, T) : g4_kernels_##set.matmul_scratch_bytes(W, T); \
    }                                                                                                    \
    static size_t act_bytes_##set(const g4_mat *W, int T) {                                              \
        return W->dtype == G4_DT_BF16 ? g4__fast_act_bytes(W, T) : g4_kernels_##set.matmul_act_bytes(W, T); \
    }                                                                                                    \
    static void prepare_##set(const g4_mat *W, const float *x, int64_t ldx, int T, void *act) {          \
        if (W->dtype == G4_DT_BF16) prep(W, x, ldx, T, act);                                             \
        else g4_kernels_##set.matmul_prepare(W, x, ldx, T, act);                                         \
    }                                                                                                    \
    static void prepared_##set(const g4_mat *W, const void *act, int T, float *y, int64_t ldy, int64_t r0, \
                               int64_t r1, void *scratch) {                                              \
        if (W->dtype == G4_DT_BF16) prepd(W, act, T, y, ldy, r0, r1, scratch);                           \
        else g4_kernels_##set.matmul_prepared(W, act, T, y, ldy, r0, r1, scratch);                       \
    }
FAST_WRAPPERS(scalar, g4__fast_matmul_bf16_ref, g4__fast_prepare_ref, g4__fast_prepared_ref)
FAST_WRAPPERS(avx2, g4__fast_matmul_bf16_ref, g4__fast_prepare_ref, g4__fast_prepared_ref)
FAST_WRAPPERS(avx512, g4__fast_matmul_bf16_avx512, g4__fast_prepare_avx512, g4__fast_prepared_avx512)

static g4_kernels fast_tables[3];
static pthread_once_t fast_once = PTHREAD_ONCE_INIT;

#define FAST_TABLE(i, set)                                    \
    fast_tables[i] = g4_kernels_##set;                        \
    fast_tables[i].matmul = matmul_##set;                     \
    fast_tables[i].matmul_scratch_bytes = scratch_##set;      \
    fast_tables[i].matmul_act_bytes = act_bytes_##set;        \
    fast_tables[i].matmul_prepare = prepare_##set;            \
    fast_tables[i].matmul_prepared = prepared_##set;
static void fast_init(void) {
    FAST_TABLE(0, scalar)
    FAST_TABLE(1, avx2)
    FAST_TABLE(2, avx512)
}

const g4_kernels *g4_kernels_math(const g4_kernels *base, int math) {
    if (!base) return NULL;
    pthread_once(&fast_once, fast_init);
    if (base >= fast_tables && base < fast_tables + 3) base = base == fast_tables ? &g4_kernels_scalar
                                                         : base == fast_tables + 1 ? &g4_kernels_avx2
                                                                                   : &g4_kernels_avx512;
    if (math != G4_MATH_FAST) return base;
    if (base == &g4_kernels_scalar) return &fast_tables[0];
    if (base == &g4_kernels_avx2) return &fast_tables[1];
    if (base == &g4_kernels_avx512) return &fast_tables[2];
    return NULL;
}

int g4_kernels_math_of(const g4_kernels *k) {
    pthread_once(&fast_once, fast_init);
    return k >= fast_tables && k < fast_tables + 3 ? G4_MATH_FAST : G4_MATH_EXACT;
}
