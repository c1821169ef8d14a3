/* Unit tests for the fast math mode (src/kernels/kernels_fast*.c): the VDPBF16PS step emulation
 * on vectors the hardware produced, every set's fast bf16 matmul against the scalar emulation
 * bit for bit (the avx512 one runs vdpbf16ps), the invariances per set (T tokens = T single
 * calls, row splits, token blocks, NULL scratch, strides, activations prepared once), the
 * accuracy against float64 of the bf16-rounded operands, and the exact mode unchanged (the exact table is the set itself; the fast
 * table's other dtypes and kernels are the set's own bits). */
#include "testutil.h"
#include "kernels/kernels.h"
#include "kernels/kernels_fast.h"
#include "kernels/kernels_internal.h"

#include <float.h>
#include <math.h>

/* splitmix64: the tests' inputs. */
static uint64_t seed = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) {
    uint64_t z = (seed += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (uint32_t)((z ^ (z >> 31)) >> 32);
}
static float frand(void) { return (float)(rnd() >> 8) / 8388608.0f - 1.0f; } /* [-1, 1) */

/* A bf16 of random sign and mantissa with exponent 127 +- range (subnormals and zero at 0). */
static uint16_t rbf(int range) {
    int e = 127 + (int)(rnd() % (unsigned)(2 * range + 1)) - range;
    if (e < 0) e = 0;
    if (e > 254) e = 254;
    return (uint16_t)(((rnd() & 1) << 15) | (e << 7) | (rnd() & 0x7f));
}

static float hexf(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Vectors from this CPU's vdpbf16ps (printed by a probe): products beyond the fp32 range stay
 * exact inside the step, and the odd element of a pair is added first. */
static void test_step_hardware_vectors(void **state) {
    (void)state;
    /* acc = -0x1.1d22dp-63; odd pair 0x1.cap+70 * -0x1.9p+64 (-inf after the add), even pair
     * 0x1.5ep+80 * 0x1.38p+57 (+huge): the hardware gave -inf (fp32 products would give NaN). */
    float a = g4_bf16dp_step(-0x1.1d22dp-63f, g4_f32_to_bf16(0x1.cap+70f), g4_f32_to_bf16(-0x1.9p+64f));
    a = g4_bf16dp_step(a, g4_f32_to_bf16(0x1.5ep+80f), g4_f32_to_bf16(0x1.38p+57f));
    assert_true(isinf(a) && a < 0);
    /* Subnormal inputs count as zero; a subnormal result is flushed, with its sign. */
    assert_true(g4_bf16dp_step(1.0f, 0x0001, 0x3f80) == 1.0f);
    float z = g4_bf16dp_step(-0.0f, g4_f32_to_bf16(-0x1p-70f), g4_f32_to_bf16(0x1p-60f));
    assert_true(z == 0.0f && signbit(z));
    /* The product's low bits decide the rounding: 1 + 2^-24 + 2^-31 rounds up. */
    float s = g4_bf16dp_step(1.0f, g4_f32_to_bf16(0x1p-24f), g4_f32_to_bf16(0x1.02p+0f));
    assert_true(s == 1.0f + 0x1p-23f);
    (void)hexf;
}

static void fill_bf16(uint16_t *w, int64_t n, int range) {
    for (int64_t i = 0; i < n; i++) w[i] = range ? rbf(range) : g4_f32_to_bf16(frand());
}

static const g4_kernels *fast_sets[3];
static int nfast;

static int setup(void **state) {
    (void)state;
    const char *names[3];
    int n = g4_kernels_available(names, 3);
    nfast = 0;
    for (int i = 0; i < n; i++) fast_sets[nfast++] = g4_kernels_math(g4_kernels_by_name(names[i]), G4_MATH_FAST);
    return 0;
}

static int bits_equal(const float *a, const float *b, size_t n) { return !memcmp(a, b, n * sizeof(float)); }

/* Every set's fast matmul (including the avx512 vdpbf16ps tiles) = the scalar emulation. */
static void test_sets_equal_emulation(void **state) {
    (void)state;
    static const int64_t Ks[] = {1, 2, 7, 31, 32, 33, 63, 100, 257, 1000, 4099};
    static const int Ts[] = {1, 2, 3, 5, 7, 13, 50, 101};
    static const int64_t Rs[] = {1, 3, 9, 17};
    const int saved_l2 = g4__prefetch_l2;
    /* both prefetch hints of the 8-row one- and two-token tiles (g4__prefetch_l2) */
    for (int l2 = 0; l2 < 2; l2++) {
    g4__prefetch_l2 = l2;
    for (int range = 0; range <= 127; range += 127) /* values in [-1, 1), then every exponent */
        for (size_t ki = 0; ki < sizeof Ks / sizeof *Ks; ki++)
            for (size_t ti = 0; ti < sizeof Ts / sizeof *Ts; ti++)
                for (size_t ri = 0; ri < sizeof Rs / sizeof *Rs; ri++) {
                    const int64_t K = Ks[ki], R = Rs[ri], ld = K + (ri & 1) * 5;
                    const int T = Ts[ti];
                    if (K * T * R > 400000) continue;
                    uint16_t *w = malloc((size_t)(R * ld) * 2);
                    float *x = malloc(sizeof(float) * (size_t)(K * T));
                    fill_bf16(w, R * ld, range);
                    for (int64_t i = 0; i < K * T; i++) x[i] = range ? g4_bf16_to_f32(rbf(range)) * (1.0f + frand() / 256) : frand();
                    g4_mat W = {.data = w, .dtype = G4_DT_BF16, .rows = R, .cols = K, .ld_bytes = ld * 2};
                    float *ref = malloc(sizeof(float) * (size_t)(R * T)), *got = malloc(sizeof(float) * (size_t)(R * T));
                    g4__fast_matmul_bf16_ref(&W, x, K, T, ref, R, 0, R, NULL);
                    for (int s = 0; s < nfast; s++) {
                        memset(got, 0xff, sizeof(float) * (size_t)(R * T));
                        fast_sets[s]->matmul(&W, x, K, T, got, R, 0, R, NULL);
                        if (!bits_equal(ref, got, (size_t)(R * T)))
                            fail_msg("%s fast != emulation: K %lld T %d R %lld range %d", fast_sets[s]->name,
                                     (long long)K, T, (long long)R, range);
                    }
                    free(w), free(x), free(ref), free(got);
                }
    }
    g4__prefetch_l2 = saved_l2;
}

/* Per set: T tokens in one call = each token alone; row ranges split anywhere; across token
 * blocks (T > G4_FAST_TB); x with a stride; scratch given or not. */
static void test_invariance_per_set(void **state) {
    (void)state;
    const int64_t K = 700, R = 21, ldx = K + 3;
    const int T = 2 * G4_FAST_TB + 5;
    uint16_t *w = malloc((size_t)(R * K) * 2);
    float *x = malloc(sizeof(float) * (size_t)(ldx * T));
    fill_bf16(w, R * K, 0);
    for (int64_t i = 0; i < ldx * T; i++) x[i] = frand() * 3;
    g4_mat W = {.data = w, .dtype = G4_DT_BF16, .rows = R, .cols = K, .ld_bytes = K * 2};
    float *all = malloc(sizeof(float) * (size_t)(R * T)), *one = malloc(sizeof(float) * (size_t)(R * T));
    for (int s = 0; s < nfast; s++) {
        const g4_kernels *k = fast_sets[s];
        void *scr = malloc(k->matmul_scratch_bytes(&W, T) + 1);
        k->matmul(&W, x, ldx, T, all, R, 0, R, (char *)scr + 1);
        for (int t = 0; t < T; t++) k->matmul(&W, x + t * ldx, ldx, 1, one + t * R, R, 0, R, NULL);
        if (!bits_equal(all, one, (size_t)(R * T))) fail_msg("%s: T tokens != single calls", k->name);
        for (int64_t a = 1; a < R; a += 4) {
            memset(one, 0, sizeof(float) * (size_t)(R * T));
            k->matmul(&W, x, ldx, T, one, R, 0, a, NULL);
            k->matmul(&W, x, ldx, T, one, R, a, R, scr);
            if (!bits_equal(all, one, (size_t)(R * T))) fail_msg("%s: row split at %lld differs", k->name, (long long)a);
        }
        for (int t0 = 0; t0 < T; t0 += 7) { /* batches of 7 tokens */
            int n = T - t0 < 7 ? T - t0 : 7;
            k->matmul(&W, x + t0 * ldx, ldx, n, one + t0 * R, R, 0, R, scr);
        }
        if (!bits_equal(all, one, (size_t)(R * T))) fail_msg("%s: batches of 7 differ", k->name);
        /* Prepared once, used by three row ranges (x cleared in between): the same bits. */
        void *act = malloc(k->matmul_act_bytes(&W, T));
        float *xc = malloc(sizeof(float) * (size_t)(ldx * T));
        memcpy(xc, x, sizeof(float) * (size_t)(ldx * T));
        k->matmul_prepare(&W, xc, ldx, T, act);
        memset(xc, 0, sizeof(float) * (size_t)(ldx * T));
        memset(one, 0, sizeof(float) * (size_t)(R * T));
        k->matmul_prepared(&W, act, T, one, R, 0, 5, scr);
        k->matmul_prepared(&W, act, T, one, R, 5, 13, scr);
        k->matmul_prepared(&W, act, T, one, R, 13, R, scr);
        if (!bits_equal(all, one, (size_t)(R * T))) fail_msg("%s: prepared calls differ from matmul", k->name);
        free(act), free(xc);
        free(scr);
    }
    free(w), free(x), free(all), free(one);
}

/* Fast results are close to float64 over the bf16-rounded operands (each step rounds once). */
static void test_accuracy_vs_double(void **state) {
    (void)state;
    const int64_t K = 5376, R = 5;
    uint16_t *w = malloc((size_t)(R * K) * 2);
    float *x = malloc(sizeof(float) * (size_t)K), y[5];
    fill_bf16(w, R * K, 0);
    for (int64_t i = 0; i < K; i++) x[i] = frand();
    g4_mat W = {.data = w, .dtype = G4_DT_BF16, .rows = R, .cols = K, .ld_bytes = K * 2};
    for (int s = 0; s < nfast; s++) {
        fast_sets[s]->matmul(&W, x, K, 1, y, 1, 0, R, NULL);
        for (int64_t r = 0; r < R; r++) {
            double d = 0, mag = 0;
            for (int64_t k = 0; k < K; k++) {
                double p = (double)g4_bf16_to_f32(w[r * K + k]) * g4_bf16_to_f32(g4_f32_to_bf16(x[k]));
                d += p, mag += fabs(p);
            }
            assert_true(fabs(y[r] - d) <= 2.0 * (K / 16 + 8) * FLT_EPSILON * mag);
        }
    }
    free(w), free(x);
}

/* The exact mode is the set itself; the fast table leaves every other dtype and kernel alone. */
static void test_exact_unchanged(void **state) {
    (void)state;
    assert_int_equal(g4_math_from_name("exact"), G4_MATH_EXACT);
    assert_int_equal(g4_math_from_name("fast"), G4_MATH_FAST);
    assert_int_equal(g4_math_from_name("quick"), -1);
    const char *names[3];
    int n = g4_kernels_available(names, 3);
    const int64_t K = 256, R = 7;
    const int T = 3;
    float *wf = malloc(sizeof(float) * (size_t)(R * K)), *x = malloc(sizeof(float) * (size_t)(K * T));
    for (int64_t i = 0; i < R * K; i++) wf[i] = frand();
    for (int64_t i = 0; i < K * T; i++) x[i] = frand();
    uint16_t *wb = malloc((size_t)(R * K) * 2);
    for (int64_t i = 0; i < R * K; i++) wb[i] = g4_f32_to_bf16(wf[i]);
    g4_block_q8_0 *wq = malloc(sizeof(g4_block_q8_0) * (size_t)(R * K / 32));
    for (int64_t r = 0; r < R; r++) g4_quantize_row_q8_0(wf + r * K, wq + r * K / 32, K);
    g4_mat mats[3] = {{.data = wf, .dtype = G4_DT_F32, .rows = R, .cols = K, .ld_bytes = K * 4},
                      {.data = wq, .dtype = G4_DT_Q8_0, .rows = R, .cols = K, .ld_bytes = K / 32 * 34},
                      {.data = wb, .dtype = G4_DT_BF16, .rows = R, .cols = K, .ld_bytes = K * 2}};
    float a[21], b[21];
    for (int i = 0; i < n; i++) {
        const g4_kernels *base = g4_kernels_by_name(names[i]);
        const g4_kernels *f = g4_kernels_math(base, G4_MATH_FAST);
        assert_ptr_equal(g4_kernels_math(base, G4_MATH_EXACT), base);
        assert_ptr_equal(g4_kernels_math(f, G4_MATH_EXACT), base);
        assert_int_equal(g4_kernels_math_of(base), G4_MATH_EXACT);
        assert_int_equal(g4_kernels_math_of(f), G4_MATH_FAST);
        assert_string_equal(f->name, base->name);
        assert_ptr_equal(f->attention, base->attention);
        assert_ptr_equal(f->rmsnorm, base->rmsnorm);
        void *act = malloc(base->matmul_act_bytes(&mats[1], T) + 64), *act2 = malloc(f->matmul_act_bytes(&mats[1], T) + 64);
        assert_int_equal(f->matmul_act_bytes(&mats[1], T), base->matmul_act_bytes(&mats[1], T));
        void *aa = (void *)(((uintptr_t)act + 63) & ~(uintptr_t)63), *ab = (void *)(((uintptr_t)act2 + 63) & ~(uintptr_t)63);
        void *scr = malloc(base->matmul_scratch_bytes(&mats[1], T));
        base->matmul_prepare(&mats[1], x, K, T, aa);
        f->matmul_prepare(&mats[1], x, K, T, ab);
        base->matmul_prepared(&mats[1], aa, T, a, R, 0, R, scr);
        f->matmul_prepared(&mats[1], ab, T, b, R, 0, R, scr);
        if (!bits_equal(a, b, (size_t)(R * T))) fail_msg("%s: fast table changed the prepared q8_0 matmul", base->name);
        free(act), free(act2), free(scr);
        for (int m = 0; m < 3; m++) {
            base->matmul(&mats[m], x, K, T, a, R, 0, R, NULL);
            f->matmul(&mats[m], x, K, T, b, R, 0, R, NULL);
            if (m < 2 && !bits_equal(a, b, (size_t)(R * T))) fail_msg("%s: fast table changed dtype %d", base->name, m);
            assert_true(f->matmul_scratch_bytes(&mats[m], T) >= (m < 2 ? base->matmul_scratch_bytes(&mats[m], T) : 1));
        }
        if (bits_equal(a, b, (size_t)(R * T))) fail_msg("%s: the fast bf16 matmul gave the exact bits", base->name);
    }
    free(wf), free(x), free(wb), free(wq);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_step_hardware_vectors),
        cmocka_unit_test(test_sets_equal_emulation),
        cmocka_unit_test(test_invariance_per_set),
        cmocka_unit_test(test_accuracy_vs_double),
        cmocka_unit_test(test_exact_unchanged),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
