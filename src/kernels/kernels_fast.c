/* kernels_fast.c — the fast math mode's names and tables (kernels_fast.h): each set's table with
 * the bf16 matmuls replaced by the reference (kernels_fast_ref.c) or the avx512 version
 * (kernels_fast_avx512.c), which both sit below this file. */
#include "kernels/kernels_fast.h"

#include <pthread.h>
#include <string.h>

int g4_math_from_name(const char *name) {
    if (!name || !strcmp(name, "exact")) return G4_MATH_EXACT;
    if (!strcmp(name, "fast")) return G4_MATH_FAST;
    return -1;
}

const char *g4_math_name(int math) { return math == G4_MATH_FAST ? "fast" : "exact"; }

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
        if (W->dtype == G4_DT_BF16) prep(W, x, ldx, T, 0, T, act);                                             \
        else g4_kernels_##set.matmul_prepare(W, x, ldx, T, act);                                         \
    }                                                                                                    \
    static void prepare_tokens_##set(const g4_mat *W, const float *x, int64_t ldx, int T, int t0, int t1, void *act) { \
        if (W->dtype == G4_DT_BF16) prep(W, x, ldx, T, t0, t1, act);                                     \
        else g4_kernels_##set.matmul_prepare_tokens(W, x, ldx, T, t0, t1, act);                          \
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
    fast_tables[i].matmul_prepare_tokens = prepare_tokens_##set; \
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
