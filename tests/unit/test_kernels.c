/* Unit tests for src/kernels: every kernel of every kernel set this CPU runs against the scalar
 * reference (tolerances derived from the length of the sums), the scalar reference against
 * double precision, the bitwise invariance properties of DESIGN.md §4 (T tokens == T single
 * calls, any row split, any x alignment, attention independent of the key segmentation), exact
 * bf16/f16 conversions, q8_0 quantization, and the dispatch rules. q4_0 goes through the same
 * matmul tests (its quantizer has tests/unit/test_q4.c). */
#include "testutil.h"
#include "kernels/kernels.h"
#include "kernels/kernels_internal.h"

#include "kernels/probe.h"

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#define EPS FLT_EPSILON

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 11);
}
static float frand(void) { return (float)((double)rnd() / 2147483648.0 - 1.0); } /* [-1, 1) */

static void fill(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = frand();
}

static uint32_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float bitsf(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* The SIMD sets this CPU runs (not "scalar"). */
static int simd_sets(const g4_kernels **ks) {
    const char *names[3];
    int n = g4_kernels_available(names, 3), m = 0;
    for (int i = 0; i < n; i++)
        if (strcmp(names[i], "scalar") != 0) ks[m++] = g4_kernels_by_name(names[i]);
    return m;
}
/* All sets including scalar. */
static int all_sets(const g4_kernels **ks) {
    ks[0] = &g4_kernels_scalar;
    return 1 + simd_sets(ks + 1);
}

/* ---------------- dispatch ---------------- */

static void test_dispatch(void **state) {
    (void)state;
    /* First and only call of g4_kernels_get in this binary: the environment decides. */
    setenv("G4_ISA", "scalar", 1);
    assert_string_equal(g4_kernels_get()->name, "scalar");
    assert_ptr_equal(g4_kernels_get(), &g4_kernels_scalar);
    assert_null(g4_kernels_by_name("bogus"));
    assert_null(g4_kernels_by_name(NULL));
    const char *names[3];
    int n = g4_kernels_available(names, 3);
    assert_true(n >= 1);
    assert_string_equal(names[0], "scalar");
    for (int i = 0; i < n; i++) assert_string_equal(g4_kernels_by_name(names[i])->name, names[i]);
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
        assert_string_equal(names[n - 1], "avx512");
    else
        assert_null(g4_kernels_by_name("avx512"));
}

/* ---------------- conversions ---------------- */

static void test_bf16_conversions(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = g4_bf16_to_f32((uint16_t)h);
        assert_int_equal(fbits(f), h << 16);
        if (!isnan(f)) assert_int_equal(g4_f32_to_bf16(f), h);
        else assert_true(isnan(g4_bf16_to_f32(g4_f32_to_bf16(f))));
    }
    /* ties to even, carries, subnormals */
    assert_int_equal(g4_f32_to_bf16(bitsf(0x3f808000u)), 0x3f80);   /* tie, even below */
    assert_int_equal(g4_f32_to_bf16(bitsf(0x3f818000u)), 0x3f82);   /* tie, odd below -> up */
    assert_int_equal(g4_f32_to_bf16(bitsf(0x3f808001u)), 0x3f81);   /* above tie */
    assert_int_equal(g4_f32_to_bf16(bitsf(0x3f80ffffu)), 0x3f81);
    assert_int_equal(g4_f32_to_bf16(bitsf(0x00008000u)), 0x0000);   /* subnormal tie -> even */
    assert_int_equal(g4_f32_to_bf16(bitsf(0x00018000u)), 0x0002);
    assert_int_equal(g4_f32_to_bf16(bitsf(0x7f7fffffu)), 0x7f80);   /* FLT_MAX rounds to inf */
    assert_int_equal(g4_f32_to_bf16(bitsf(0x807fffffu)), 0x8080);   /* -subnormal up to -min normal */
    assert_true(isnan(g4_bf16_to_f32(g4_f32_to_bf16(bitsf(0x7f800001u))))); /* sNaN stays NaN */
}

static void test_f16_conversions(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = g4_f16_to_f32((uint16_t)h);
        uint32_t e = (h >> 10) & 31, m = h & 1023;
        if (e == 31 && m) { assert_true(isnan(f)); continue; }
        /* independent value check: (-1)^s * 2^(e-15) * (1 + m/1024), subnormal 2^-14 * m/1024 */
        double v = e == 0 ? ldexp((double)m, -24) : e == 31 ? INFINITY : ldexp(1024.0 + m, (int)e - 25);
        if (h & 0x8000) v = -v;
        assert_true((double)f == v);
        assert_int_equal(g4_f32_to_f16(f), h);
    }
    assert_int_equal(g4_f32_to_f16(1.0f + ldexpf(1, -11)), 0x3c00);       /* tie -> even */
    assert_int_equal(g4_f32_to_f16(1.0f + 3 * ldexpf(1, -11)), 0x3c02);   /* tie -> even (up) */
    assert_int_equal(g4_f32_to_f16(ldexpf(1, -25)), 0x0000);              /* subnormal tie -> 0 */
    assert_int_equal(g4_f32_to_f16(3 * ldexpf(1, -25)), 0x0002);          /* 1.5 ulp -> 2 */
    assert_int_equal(g4_f32_to_f16(ldexpf(1, -25) * 1.0001f), 0x0001);
    assert_int_equal(g4_f32_to_f16(ldexpf(1, -26)), 0x0000);
    assert_int_equal(g4_f32_to_f16(ldexpf(1023, -24) + ldexpf(1, -25)), 0x0400); /* to min normal */
    assert_int_equal(g4_f32_to_f16(65504.0f), 0x7bff);
    assert_int_equal(g4_f32_to_f16(65519.0f), 0x7bff);
    assert_int_equal(g4_f32_to_f16(65520.0f), 0x7c00);                    /* tie at max -> inf */
    assert_int_equal(g4_f32_to_f16(-1e10f), 0xfc00);
    assert_true(isnan(g4_f16_to_f32(g4_f32_to_f16(NAN))));
}

/* row_to_f32 of every set on every bf16/f16 bit pattern == the scalar conversion, bitwise. */
static void test_row_to_f32(void **state) {
    (void)state;
    const g4_kernels *ks[3];
    int nk = simd_sets(ks);
    uint16_t *h = malloc(65536 * 2);
    float *ref = malloc(65536 * 4), *got = malloc(65536 * 4);
    for (uint32_t i = 0; i < 65536; i++) h[i] = (uint16_t)i;
    for (int dt = G4_DT_BF16; dt <= G4_DT_F16; dt++) {
        g4_kernels_scalar.row_to_f32(ref, h, dt, 65536);
        for (int s = 0; s < nk; s++)
            for (int64_t n = 65536; n >= 65536 - 17; n -= 17) { /* odd lengths too */
                memset(got, 0xff, 65536 * 4);
                ks[s]->row_to_f32(got, h, dt, n);
                for (int64_t i = 0; i < n; i++) {
                    if (isnan(ref[i])) assert_true(isnan(got[i]));
                    else assert_int_equal(fbits(got[i]), fbits(ref[i]));
                }
                if (n < 65536) assert_int_equal(fbits(got[n]), 0xffffffffu);
            }
    }
    /* q8_0 dequantization */
    g4_block_q8_0 b[3];
    for (int i = 0; i < 3; i++) {
        b[i].d = g4_f32_to_f16(0.01f * (float)(i + 1));
        for (int j = 0; j < 32; j++) b[i].qs[j] = (int8_t)(rnd() % 255 - 127);
    }
    g4_kernels_scalar.row_to_f32(ref, b, G4_DT_Q8_0, 96);
    for (int i = 0; i < 96; i++)
        assert_true(ref[i] == g4_f16_to_f32(b[i / 32].d) * (float)b[i / 32].qs[i % 32]);
    for (int s = 0; s < nk; s++) {
        ks[s]->row_to_f32(got, b, G4_DT_Q8_0, 96);
        assert_memory_equal(got, ref, 96 * 4);
    }
    /* f32: a copy */
    fill(ref, 33);
    for (int s = 0; s < nk; s++) {
        ks[s]->row_to_f32(got, ref, G4_DT_F32, 33);
        assert_memory_equal(got, ref, 33 * 4);
    }
    free(h);
    free(ref);
    free(got);
}

/* ---------------- q8_0 quantization ---------------- */

static void test_quantize_q8_0(void **state) {
    (void)state;
    float x[64];
    g4_block_q8_0 y[2];
    for (int j = 0; j < 32; j++) x[j] = (float)(j - 16) + 0.5f; /* max |x| = 16.5 */
    x[5] = 127.0f;                                             /* now d = 1: q = roundf(x) */
    for (int j = 0; j < 32; j++) x[32 + j] = 0.0f;             /* all-zero block: d = 0, q = 0 */
    g4_quantize_row_q8_0(x, y, 64);
    assert_int_equal(y[0].d, g4_f32_to_f16(1.0f));
    assert_int_equal(y[0].qs[5], 127);
    assert_int_equal(y[0].qs[0], -16);  /* -15.5 -> -16 (half away from zero) */
    assert_int_equal(y[0].qs[18], 3);   /* 2.5 -> 3 */
    assert_int_equal(y[0].qs[13], -3);  /* -2.5 -> -3 */
    assert_int_equal(y[1].d, 0);
    for (int j = 0; j < 32; j++) assert_int_equal(y[1].qs[j], 0);
    /* random block: |x - d*q| <= d/2 and the max element maps to +-127 */
    for (int j = 0; j < 32; j++) x[j] = frand() * 3.0f;
    g4_quantize_row_q8_0(x, y, 32);
    float amax = 0;
    for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
    float d = amax / 127.0f;
    assert_int_equal(y[0].d, g4_f32_to_f16(d));
    int saw127 = 0;
    for (int j = 0; j < 32; j++) {
        assert_true(fabsf(x[j] - d * (float)y[0].qs[j]) <= d * 0.5f * (1 + 1e-5f));
        saw127 |= abs(y[0].qs[j]) == 127;
    }
    assert_true(saw127);
}

/* The activation quantizer (shared by every set) rounds exactly like roundf. */
static void test_quantize_act(void **state) {
    (void)state;
    const int64_t K = 64 * 32;
    float *x = malloc(K * 4);
    char *rec = malloc((size_t)g4__q8_act_stride(K) + 64);
    for (int rep = 0; rep < 20; rep++) {
        for (int64_t b = 0; b < K / 32; b++) {
            /* block max 127 -> d = 1 exactly, so q = roundf(x): ties, near-ties, negatives */
            x[b * 32] = (b & 1) ? 127.0f : -127.0f;
            for (int j = 1; j < 32; j++) {
                float v = (float)((int)(rnd() % 253) - 126);
                int kind = (int)(rnd() % 4);
                if (kind == 1) v += 0.5f;
                if (kind == 2) v += nextafterf(0.5f, 0.0f);
                if (kind == 3) v -= nextafterf(0.5f, 0.0f);
                x[b * 32 + j] = fmaxf(-127.0f, fminf(127.0f, v));
            }
        }
        if (rep >= 10) /* general blocks too */
            for (int64_t i = 0; i < K; i++) x[i] = frand() * (float)(1 + rep);
        if (rep == 19) { /* NaN and inf in, no undefined behaviour, NaN -> 0 */
            x[5] = NAN;
            x[40] = INFINITY;
        }
        g4__q8_quantize_act(x, K, rec);
        if (g4_kernels_by_name("avx512")) { /* the vectorised quantizer: the same bytes */
            char *rec2 = malloc((size_t)g4__q8_act_stride(K) + 64);
            memset(rec2, 0x55, (size_t)g4__q8_act_stride(K));
            g4__q8_quantize_act_avx512(x, K, rec2);
            assert_memory_equal(rec, rec2, (size_t)g4__q8_act_stride(K));
            free(rec2);
        }
        if (rep == 19) {
            assert_int_equal(((int8_t *)rec)[5], 0);
            break;
        }
        const int8_t *q = (const int8_t *)rec;
        const float *d = (const float *)(rec + g4__q8_act_qs_bytes(K));
        for (int64_t b = 0; b < K / 32; b++) {
            float amax = 0;
            for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[b * 32 + j]));
            float db = amax / 127.0f, id = db != 0 ? 1.0f / db : 0.0f;
            assert_true(d[b] == db);
            for (int j = 0; j < 32; j++) {
                float r = roundf(x[b * 32 + j] * id);
                int want = r > 127 ? 127 : r < -127 ? -127 : (int)r;
                if (q[b * 32 + j] != want) fail_msg("x=%.9g q=%d want %d", x[b * 32 + j], q[b * 32 + j], want);
            }
        }
    }
    free(x);
    free(rec);
}

/* ---------------- matmul ---------------- */

/* The block-quantized weight formats (activations quantized to int8 blocks too). */
static int is_q(int dt) { return dt == G4_DT_Q8_0 || dt == G4_DT_Q4_0; }

/* Exact integer dot of weight block b of a q8_0 / q4_0 row with int8 activations xq (the
 * block's 32 values), and the block's f16 weight scale as fp32. */
static long block_isum(int dt, const void *row, int64_t b, const int8_t *xq) {
    long is = 0;
    if (dt == G4_DT_Q8_0) {
        const g4_block_q8_0 *w = (const g4_block_q8_0 *)row + b;
        for (int j = 0; j < 32; j++) is += (long)w->qs[j] * xq[j];
    } else {
        const g4_block_q4_0 *w = (const g4_block_q4_0 *)row + b;
        for (int j = 0; j < 16; j++) is += (long)((w->qs[j] & 15) - 8) * xq[j] + (long)((w->qs[j] >> 4) - 8) * xq[j + 16];
    }
    return is;
}
static float block_dw(int dt, const void *row, int64_t b) {
    return g4_f16_to_f32(dt == G4_DT_Q8_0 ? ((const g4_block_q8_0 *)row)[b].d : ((const g4_block_q4_0 *)row)[b].d);
}

typedef struct {
    int dt;
    int64_t rows, cols, ld;
    void *data;
    float *deq; /* dequantized weights [rows][cols] */
} wmat;

static void wmat_make(wmat *m, int dt, int64_t rows, int64_t cols, int64_t pad_elems) {
    m->dt = dt;
    m->rows = rows;
    m->cols = cols;
    int64_t rowcols = cols + pad_elems;
    if (is_q(dt)) rowcols = (cols + pad_elems + 31) / 32 * 32;
    m->ld = (int64_t)g4_dtype_row_bytes(dt, rowcols);
    m->data = malloc((size_t)(m->ld * rows) + 64);
    m->deq = malloc((size_t)(rows * cols) * 4);
    float *tmp = malloc((size_t)rowcols * 4);
    for (int64_t r = 0; r < rows; r++) {
        fill(tmp, rowcols);
        char *dst = (char *)m->data + r * m->ld;
        switch (dt) {
        case G4_DT_F32: memcpy(dst, tmp, (size_t)rowcols * 4); break;
        case G4_DT_BF16:
            for (int64_t k = 0; k < rowcols; k++) ((uint16_t *)dst)[k] = g4_f32_to_bf16(tmp[k]);
            break;
        case G4_DT_F16:
            for (int64_t k = 0; k < rowcols; k++) ((uint16_t *)dst)[k] = g4_f32_to_f16(tmp[k]);
            break;
        case G4_DT_Q8_0: g4_quantize_row_q8_0(tmp, (g4_block_q8_0 *)dst, rowcols); break;
        default: g4_quantize_row_q4_0(tmp, (g4_block_q4_0 *)dst, rowcols); break;
        }
        g4_kernels_scalar.row_to_f32(m->deq + r * cols, dst, dt, cols);
    }
    free(tmp);
}
static void wmat_free(wmat *m) {
    free(m->data);
    free(m->deq);
}
static g4_mat wmat_view(const wmat *m) {
    g4_mat g = {.data = m->data, .dtype = m->dt, .rows = m->rows, .cols = m->cols, .ld_bytes = m->ld};
    return g;
}

static void run_mm(const g4_kernels *k, const g4_mat *W, const float *x, int64_t ldx, int T,
                   float *y, int64_t ldy, int64_t r0, int64_t r1) {
    size_t sb = k->matmul_scratch_bytes(W, T);
    void *scratch = sb ? malloc(sb) : NULL;
    k->matmul(W, x, ldx, T, y, ldy, r0, r1, scratch);
    free(scratch);
}

/* Row r of the block-quantized weights times x with the matmul's semantics, in double: the
 * exact block integers times (float)(d_w * d_x), summed in double; *abs_sum gets sum |terms|. */
static double quant_dot(const wmat *m, int64_t r, const float *x, double *abs_sum) {
    const void *row = (const char *)m->data + r * m->ld;
    char *rec = malloc((size_t)g4__q8_act_stride(m->cols) + 64);
    g4__q8_quantize_act(x, m->cols, rec);
    const float *xd = (const float *)(rec + g4__q8_act_qs_bytes(m->cols));
    double s = 0, a = 0;
    for (int64_t b = 0; b < m->cols / 32; b++) {
        double v = (double)block_isum(m->dt, row, b, (const int8_t *)rec + b * 32) * (double)(block_dw(m->dt, row, b) * xd[b]);
        s += v;
        a += fabs(v);
    }
    free(rec);
    if (abs_sum) *abs_sum = a;
    return s;
}

/* Error bound of one output: c * (number of sequential additions) * eps * sum |terms|.
 * For q8_0 / q4_0 the terms are the block values (exact int dot) * d_w * d_x of the quantized x. */
static double term_abs_sum(const wmat *m, int64_t r, const float *x) {
    double s = 0;
    if (!is_q(m->dt)) {
        for (int64_t k = 0; k < m->cols; k++) s += fabs((double)m->deq[r * m->cols + k] * x[k]);
        return s;
    }
    quant_dot(m, r, x, &s);
    return s;
}

static const int64_t Ks[] = {1, 7, 15, 16, 17, 31, 33, 100, 257, 1000, 4099};
static const int64_t Kq[] = {32, 64, 96, 160, 288, 1024, 4128};
static const int64_t Rs[] = {1, 3, 17, 65};
static const int Ts[] = {1, 2, 3, 5, 13};

/* The scalar reference against double precision (f32..f16: the dequantized dot; q8_0, q4_0: the
 * quantized semantics computed exactly). */
static void test_scalar_vs_double(void **state) {
    (void)state;
    for (int dt = 0; dt < G4_DT_COUNT; dt++) {
        int64_t K = is_q(dt) ? 1024 : 1000;
        wmat m;
        wmat_make(&m, dt, 9, K, 0);
        g4_mat W = wmat_view(&m);
        float x[1024], y[9];
        fill(x, K);
        run_mm(&g4_kernels_scalar, &W, x, K, 1, y, 0, 0, 9);
        for (int r = 0; r < 9; r++) {
            double ref = 0;
            if (!is_q(dt)) {
                for (int64_t k = 0; k < K; k++) ref += (double)m.deq[r * K + k] * x[k];
            } else {
                ref = quant_dot(&m, r, x, NULL);
                /* and the quantized dot is close to the fp32 one of the dequantized weights
                 * (activation quantization error only) */
                double f = 0, fa = 0;
                for (int64_t k = 0; k < K; k++) {
                    f += (double)m.deq[r * K + k] * x[k];
                    fa += fabs((double)m.deq[r * K + k] * x[k]);
                }
                assert_true(fabs(ref - f) <= 0.02 * fa);
            }
            double tol = 2.0 * (double)(K / 4 + 4) * EPS * term_abs_sum(&m, r, x);
            if (fabs(y[r] - ref) > tol) fail_msg("dt %d row %d: %g vs %g (tol %g)", dt, r, y[r], ref, tol);
        }
        wmat_free(&m);
    }
}

/* Every SIMD set against the scalar reference, all shapes. */
static void test_matmul_vs_scalar(void **state) {
    (void)state;
    const g4_kernels *ks[3];
    int nk = simd_sets(ks);
    for (int dt = 0; dt < G4_DT_COUNT; dt++) {
        const int64_t *kl = is_q(dt) ? Kq : Ks;
        int nkl = is_q(dt) ? (int)(sizeof Kq / sizeof *Kq) : (int)(sizeof Ks / sizeof *Ks);
        for (int ki = 0; ki < nkl; ki++)
            for (int ri = 0; ri < 4; ri++) {
                const int64_t K = kl[ki], R = Rs[ri];
                wmat m;
                wmat_make(&m, dt, R, K, ki % 3 == 1 ? 32 : 0); /* some with ld > row bytes */
                g4_mat W = wmat_view(&m);
                const int64_t ldx = K + 3;
                float *x = malloc((size_t)(13 * ldx) * 4);
                fill(x, 13 * ldx);
                float *yr = malloc((size_t)(13 * R) * 4), *ys = malloc((size_t)(13 * R) * 4);
                double *tol = malloc((size_t)(13 * R) * sizeof(double));
                for (int t = 0; t < 13; t++)
                    for (int64_t r = 0; r < R; r++)
                        tol[t * R + r] = 2.0 * (double)(K / (is_q(dt) ? 32 : 1) + 32) * EPS *
                                         term_abs_sum(&m, r, x + t * ldx) + 1e-30;
                for (int ti = 0; ti < 5; ti++) {
                    const int T = Ts[ti];
                    run_mm(&g4_kernels_scalar, &W, x, ldx, T, yr, R, 0, R);
                    for (int s = 0; s < nk; s++) {
                        run_mm(ks[s], &W, x, ldx, T, ys, R, 0, R);
                        for (int64_t i = 0; i < T * R; i++)
                            if (!(fabs((double)ys[i] - yr[i]) <= tol[i]))
                                fail_msg("%s %s K=%ld R=%ld T=%d out %ld: %.9g vs scalar %.9g (tol %g)",
                                         ks[s]->name, g4_dtype_name(dt), (long)K, (long)R, T, (long)i,
                                         ys[i], yr[i], tol[i]);
                    }
                }
                free(x);
                free(yr);
                free(ys);
                free(tol);
                wmat_free(&m);
            }
    }
}

/* Bitwise invariance of every set: T tokens == T single calls; any row split; x alignment;
 * with shapes that cross the tile / K-block / token-block boundaries. */
static void check_invariance(const g4_kernels *k, int dt, int64_t R, int64_t K, int T) {
    wmat m;
    wmat_make(&m, dt, R, K, 0);
    g4_mat W = wmat_view(&m);
    const int64_t ldx = K + 1;
    float *x = malloc((size_t)(T * ldx) * 4);
    fill(x, T * ldx);
    float *yb = malloc((size_t)(T * R) * 4), *y1 = malloc((size_t)(T * R) * 4);
    run_mm(k, &W, x, ldx, T, yb, R, 0, R);
    /* T single calls */
    for (int t = 0; t < T; t++) run_mm(k, &W, x + t * ldx, ldx, 1, y1 + t * R, R, 0, R);
    if (memcmp(yb, y1, (size_t)(T * R) * 4) != 0)
        fail_msg("%s %s R=%ld K=%ld T=%d: batch != single calls", k->name, g4_dtype_name(dt), (long)R, (long)K, T);
    /* row splits, for the batch and for one token */
    const int64_t cuts[] = {1, 2, 5, R / 2, R - 1};
    for (int c = 0; c < 5; c++) {
        int64_t a = cuts[c];
        if (a <= 0 || a >= R) continue;
        memset(y1, 0, (size_t)(T * R) * 4);
        run_mm(k, &W, x, ldx, T, y1, R, 0, a);
        run_mm(k, &W, x, ldx, T, y1, R, a, R);
        if (memcmp(yb, y1, (size_t)(T * R) * 4) != 0)
            fail_msg("%s %s R=%ld K=%ld T=%d: split at %ld differs", k->name, g4_dtype_name(dt), (long)R, (long)K, T, (long)a);
    }
    /* x at other alignments (offsets of 1..15 floats, and an odd ldx) */
    for (int off = 1; off < 16; off += 7) {
        const int64_t ld2 = K + 5;
        float *buf = malloc((size_t)(T * ld2 + off) * 4), *x2 = buf + off;
        for (int t = 0; t < T; t++) memcpy(x2 + t * ld2, x + t * ldx, (size_t)K * 4);
        run_mm(k, &W, x2, ld2, T, y1, R, 0, R);
        if (memcmp(yb, y1, (size_t)(T * R) * 4) != 0)
            fail_msg("%s %s R=%ld K=%ld T=%d: x offset %d differs", k->name, g4_dtype_name(dt), (long)R, (long)K, T, off);
        free(buf);
    }
    /* NULL scratch: the kernel allocates itself, same bits */
    k->matmul(&W, x, ldx, T, y1, R, 0, R, NULL);
    assert_memory_equal(yb, y1, (size_t)(T * R) * 4);
    free(x);
    free(yb);
    free(y1);
    wmat_free(&m);
}

static void test_matmul_invariance(void **state) {
    (void)state;
    const g4_kernels *ks[3];
    int nk = all_sets(ks);
    const int saved_l2 = g4__prefetch_l2;
    /* both prefetch hints of the one-token matvec (g4__prefetch_l2): separate instantiations */
    for (int l2 = 0; l2 < 2; l2++) {
        g4__prefetch_l2 = l2;
        for (int s = 0; s < nk; s++)
        for (int dt = 0; dt < G4_DT_COUNT; dt++) {
            int q = is_q(dt);
            check_invariance(ks[s], dt, 17, q ? 96 : 33, 13);   /* direct tiles */
            check_invariance(ks[s], dt, 65, q ? 1056 : 1037, 5);   /* a wider K, T = 5 */
            check_invariance(ks[s], dt, 70, q ? 640 : 600, 100);   /* avx2 direct tiles, avx512 tiled path */
            check_invariance(ks[s], dt, 29, q ? 544 : 531, 2);     /* T <= 3: 8-row direct tiles + rest */
            check_invariance(ks[s], dt, 29, q ? 544 : 531, 3);
            check_invariance(ks[s], dt, 29, q ? 544 : 531, 4);
            check_invariance(ks[s], dt, 70, q ? 1056 : 1037, 150); /* tiled path (T > 128): token, row blocks */
            if (q) check_invariance(ks[s], dt, 9, 7200, 140); /* 15 groups a row: q8_0's K chunks; two token blocks */
            else check_invariance(ks[s], dt, 9, 8213, 150); /* the tiled path's 8192-wide K blocks; 4 token blocks */
        }
    }
    g4__prefetch_l2 = saved_l2;
}

/* T > 128 takes the tiled (K-blocked) path in the SIMD sets: against scalar. */
static void test_matmul_large_T(void **state) {
    (void)state;
    const g4_kernels *ks[3];
    int nk = simd_sets(ks);
    for (int dt = 0; dt < G4_DT_COUNT; dt++) {
        const int64_t K = is_q(dt) ? 1056 : 1037, R = 37, ldx = K + 2;
        const int T = 150;
        wmat m;
        wmat_make(&m, dt, R, K, 0);
        g4_mat W = wmat_view(&m);
        float *x = malloc((size_t)(T * ldx) * 4), *yr = malloc((size_t)(T * R) * 4), *ys = malloc((size_t)(T * R) * 4);
        fill(x, T * ldx);
        run_mm(&g4_kernels_scalar, &W, x, ldx, T, yr, R, 0, R);
        for (int s = 0; s < nk; s++) {
            run_mm(ks[s], &W, x, ldx, T, ys, R, 0, R);
            for (int t = 0; t < T; t += 7)
                for (int64_t r = 0; r < R; r++) {
                    double tol = 2.0 * (double)(K / (is_q(dt) ? 32 : 1) + 32) * EPS *
                                 term_abs_sum(&m, r, x + t * ldx) + 1e-30;
                    if (!(fabs((double)ys[t * R + r] - yr[t * R + r]) <= tol))
                        fail_msg("%s %s T=%d t=%d r=%ld: %.9g vs %.9g", ks[s]->name, g4_dtype_name(dt), T, t,
                                 (long)r, ys[t * R + r], yr[t * R + r]);
                }
        }
        free(x);
        free(yr);
        free(ys);
        wmat_free(&m);
    }
}

/* avx512 q8_0 / q4_0: the VNNI and the AVX512-BW integer paths give the same bits. */
static void test_q8_vnni_paths(void **state) {
    (void)state;
    const g4_kernels *k = g4_kernels_by_name("avx512");
    if (!k || !g4__avx512_vnni) skip();
    const int64_t kq[] = {32, 64, 480, 512, 544, 1056, 5376};
    for (int ki = 0; ki < 56; ki++) {
        const int dt = ki < 28 ? G4_DT_Q8_0 : G4_DT_Q4_0;
        const int64_t K = kq[ki % 7], R = 7;
        const int T = (int[]){6, 1, 3, 2}[ki / 7 % 4]; /* q8_0: T <= 4 takes the T = 1 dot per token */
        wmat m;
        wmat_make(&m, dt, R, K, 0);
        g4_mat W = wmat_view(&m);
        float *x = malloc((size_t)(T * K) * 4), *y1 = malloc((size_t)(T * R) * 4), *y2 = malloc((size_t)(T * R) * 4);
        fill(x, T * K);
        x[3] = 0; /* a block with extreme values: one huge element, the rest quantize to 0 */
        for (int j = 32; j < 64 && j < K; j++) x[j] = j == 40 ? 1e6f : 1e-3f;
        run_mm(k, &W, x, K, T, y1, R, 0, R);
        g4__avx512_vnni = 0;
        run_mm(k, &W, x, K, T, y2, R, 0, R);
        g4__avx512_vnni = 1;
        if (memcmp(y1, y2, (size_t)(T * R) * 4) != 0)
            fail_msg("%s K=%ld T=%d: VNNI and BW paths differ", g4_dtype_name(dt), (long)K, T);
        /* the extreme levels: q8_0 -128 (not produced by the quantizer, but legal in a file),
         * q4_0 0 and 15 in one byte */
        if (dt == G4_DT_Q8_0) {
            ((g4_block_q8_0 *)m.data)[0].qs[0] = -128;
            ((g4_block_q8_0 *)m.data)[0].qs[31] = -128;
        } else {
            ((g4_block_q4_0 *)m.data)[0].qs[0] = 0xf0;
            ((g4_block_q4_0 *)m.data)[0].qs[15] = 0x0f;
        }
        run_mm(k, &W, x, K, T, y1, R, 0, R);
        g4__avx512_vnni = 0;
        run_mm(k, &W, x, K, T, y2, R, 0, R);
        g4__avx512_vnni = 1;
        assert_memory_equal(y1, y2, (size_t)(T * R) * 4);
        run_mm(&g4_kernels_scalar, &W, x, K, T, y2, R, 0, R);
        for (int t = 0; t < T; t++) /* row 0 holds the -128s: still close to the scalar result */
            assert_true(fabsf(y1[t * R] - y2[t * R]) <= 1e-4f * (fabsf(y2[t * R]) + 1.0f));
        free(x);
        free(y1);
        free(y2);
        wmat_free(&m);
    }
}

/* q8_0 / q4_0 activations prepared once (matmul_prepare) then used by calls over parts of the
 * rows (matmul_prepared) give exactly matmul's bits, for every set and path, T = 1 and T > 1. */
static void test_q8_prepared(void **state) {
    (void)state;
    const g4_kernels *ks[3];
    int nk = all_sets(ks);
    const int64_t kq[] = {32, 544, 1344, 5376};
    const int Ts[] = {1, 3, 6};
    for (int ds = 0; ds < 2 * nk; ds++) /* q8_0 then q4_0, each set */
        for (int vnni = 0; vnni <= 1; vnni++) {
            const int dt = ds < nk ? G4_DT_Q8_0 : G4_DT_Q4_0, s = ds % nk;
            if (strcmp(ks[s]->name, "avx512") != 0 && vnni) continue; /* the flag is avx512's */
            const int saved = g4__avx512_vnni;
            if (!strcmp(ks[s]->name, "avx512")) {
                if (vnni && !saved) continue;
                g4__avx512_vnni = vnni;
            }
            for (int ki = 0; ki < 4; ki++)
                for (int ti = 0; ti < 3; ti++) {
                    const int64_t K = kq[ki], R = 13;
                    const int T = Ts[ti];
                    wmat m;
                    wmat_make(&m, dt, R, K, 0);
                    g4_mat W = wmat_view(&m);
                    const int64_t ldx = K + 5; /* a token stride that is not the width */
                    float *x = malloc((size_t)(T * ldx) * 4), *y1 = malloc((size_t)(T * R) * 4),
                          *y2 = malloc((size_t)(T * R) * 4), *y3 = malloc((size_t)(T * R) * 4);
                    fill(x, T * ldx);
                    run_mm(ks[s], &W, x, ldx, T, y1, R, 0, R);
                    void *act = aligned_alloc(64, (ks[s]->matmul_act_bytes(&W, T) + 63) / 64 * 64);
                    void *scratch = malloc(ks[s]->matmul_scratch_bytes(&W, T));
                    ks[s]->matmul_prepare(&W, x, ldx, T, act);
                    memset(x, 0, (size_t)(T * ldx) * 4); /* the prepared calls must not read x */
                    /* each call writes its rows and nothing else */
                    const int64_t cuts[4] = {0, 5, 6, R};
                    for (int c = 0; c < 3; c++) {
                        for (int i = 0; i < T * R; i++) y2[i] = -7.0f;
                        ks[s]->matmul_prepared(&W, act, T, y2, R, cuts[c], cuts[c + 1], scratch);
                        for (int t = 0; t < T; t++)
                            for (int64_t r = 0; r < R; r++) {
                                const int in = r >= cuts[c] && r < cuts[c + 1];
                                if (!in && y2[t * R + r] != -7.0f)
                                    fail_msg("%s K=%ld T=%d: rows [%ld,%ld) wrote row %ld", ks[s]->name, (long)K, T,
                                             (long)cuts[c], (long)cuts[c + 1], (long)r);
                            }
                        for (int t = 0; t < T; t++)
                            for (int64_t r = cuts[c]; r < cuts[c + 1]; r++) y3[t * R + r] = y2[t * R + r];
                    }
                    memcpy(y2, y3, (size_t)(T * R) * 4);
                    if (memcmp(y1, y2, (size_t)(T * R) * 4) != 0)
                        fail_msg("%s %s vnni=%d K=%ld T=%d: prepared and plain matmul differ", ks[s]->name,
                                 g4_dtype_name(dt), vnni, (long)K, T);
                    free(act);
                    free(scratch);
                    free(x);
                    free(y1);
                    free(y2);
                    free(y3);
                    wmat_free(&m);
                }
            g4__avx512_vnni = saved;
        }
}

/* matmul_slices of q8_0 (the row-parallel decode's walk, avx512): bitwise matmul_prepared of
 * each column slice alone, on row ranges, VNNI on and off, slices of a whole group, less than a
 * group and a partial last group; rows outside the range untouched. */
static void test_q8_slices(void **state) {
    (void)state;
    const g4_kernels *k = g4_kernels_by_name("avx512");
    if (!k) skip();
    assert_non_null(k->matmul_slices);
    const int64_t slice_cols[] = {32, 512, 544, 1344}, R = 11;
    const int nslices[] = {3, 1, 8, 2};
    for (int ci = 0; ci < 4; ci++) {
        const int64_t sc = slice_cols[ci], K = sc * nslices[ci];
        const int ns = nslices[ci];
        wmat m;
        wmat_make(&m, G4_DT_Q8_0, R, K, 0);
        const g4_mat W = wmat_view(&m);
        g4_mat S0 = W;
        S0.cols = sc;
        float *x = malloc((size_t)K * 4), *y = malloc((size_t)(ns * R) * 4), *ys = malloc((size_t)(ns * R) * 4);
        fill(x, K);
        const size_t stride = (k->matmul_act_bytes(&S0, 1) + 63) / 64 * 64;
        char *act = aligned_alloc(64, stride * (size_t)ns);
        void *scratch = malloc(k->matmul_scratch_bytes(&S0, 1));
        const int saved = g4__avx512_vnni;
        for (int vnni = 0; vnni <= saved; vnni++) {
            g4__avx512_vnni = vnni; /* the records' layout depends on the path: prepared under it */
            for (int s = 0; s < ns; s++) k->matmul_prepare(&S0, x + s * sc, sc, 1, act + (size_t)s * stride);
            for (int s = 0; s < ns; s++) {
                g4_mat S = S0;
                S.data = (const uint8_t *)W.data + g4_dtype_row_bytes(G4_DT_Q8_0, s * sc);
                k->matmul_prepared(&S, act + (size_t)s * stride, 1, y + s * R, R, 0, R, scratch);
            }
            for (int i = 0; i < ns * R; i++) ys[i] = -7.0f;
            k->matmul_slices(&W, sc, ns, act, stride, ys, R, 2, 5);
            for (int i = 0; i < ns * R; i++)
                if ((i % R < 2 || i % R >= 5) && ys[i] != -7.0f) fail_msg("q8_0 slices of %ld: rows [2,5) wrote row %d", (long)sc, i % R);
            k->matmul_slices(&W, sc, ns, act, stride, ys, R, 0, 2);
            k->matmul_slices(&W, sc, ns, act, stride, ys, R, 5, R);
            if (memcmp(y, ys, (size_t)(ns * R) * 4))
                fail_msg("q8_0 slices of %ld x %d, vnni %d: bits differ from each slice alone", (long)sc, ns, vnni);
        }
        g4__avx512_vnni = saved;
        free(act);
        free(scratch);
        free(x);
        free(y);
        free(ys);
        wmat_free(&m);
    }
}

/* The canonical order of the avx512 float dot product (kernels_avx512.c): lane l sums
 * fmaf(w[k], x[k], acc) for k = l, l + 16, .. from +0, then ((lo256 + hi256) -> (lo128 + hi128)
 * -> (0 + 2, 1 + 3) -> sum). Written out in scalar code, independently of every kernel. */
static float canonical_dot16(const float *w, const float *x, int64_t K) {
    float acc[16] = {0};
    for (int64_t k = 0; k < K; k++) acc[k % 16] = fmaf(w[k], x[k], acc[k % 16]);
    float a[8], b[4];
    for (int l = 0; l < 8; l++) a[l] = acc[l] + acc[l + 8];
    for (int l = 0; l < 4; l++) b[l] = a[l] + a[l + 4];
    return (b[0] + b[2]) + (b[1] + b[3]);
}

/* Activations prepared by several matmul_prepare_tokens calls over disjoint token ranges (as the
 * forward pass's threads share one copy) give matmul_prepare's bits, and both the plain matmul's;
 * avx512's prepared bf16 (x as it is up to 32 tokens, the rows-in-lanes prefill beyond) also the
 * canonical order's, for widths that end in a partial 16-step and rows that end in a partial
 * 16-row half. */
static void test_prepare_tokens(void **state) {
    (void)state;
    const g4_kernels *ks[3];
    const int nk = all_sets(ks);
    const int dts[] = {G4_DT_Q8_0, G4_DT_Q4_0, G4_DT_BF16};
    const int64_t Ks[] = {5, 37, 256, 544, 1344};
    const int Ts[] = {1, 3, 33, 50, 101}; /* 50, 101: past one 48-token block */
    for (int s = 0; s < nk; s++)
        for (int di = 0; di < 3; di++)
            for (int ki = 0; ki < 5; ki++)
                for (int ti = 0; ti < 5; ti++) {
                    const int dt = dts[di], T = Ts[ti];
                    const int64_t K = is_q(dt) ? (Ks[ki] + 31) / 32 * 32 : Ks[ki], R = 40;
                    wmat m;
                    wmat_make(&m, dt, R, K, 0);
                    g4_mat W = wmat_view(&m);
                    const size_t ab = ks[s]->matmul_act_bytes(&W, T);
                    if (!ab) { /* no prepared form: only bf16 on scalar and avx2 */
                        if (is_q(dt) || !strcmp(ks[s]->name, "avx512")) fail_msg("%s %s: no prepared form", ks[s]->name, g4_dtype_name(dt));
                        wmat_free(&m);
                        continue;
                    }
                    const int64_t ldx = K + 3;
                    float *x = malloc((size_t)(T * ldx) * 4), *y1 = malloc((size_t)(T * R) * 4), *y2 = malloc((size_t)(T * R) * 4);
                    fill(x, T * ldx);
                    run_mm(ks[s], &W, x, ldx, T, y1, R, 0, R);
                    char *a1 = aligned_alloc(64, (ab + 63) / 64 * 64), *a2 = aligned_alloc(64, (ab + 63) / 64 * 64);
                    memset(a1, 0x5a, ab), memset(a2, 0xa5, ab); /* what a range leaves alone stays different */
                    ks[s]->matmul_prepare(&W, x, ldx, T, a1);
                    const int cuts[4] = {0, T / 3, T / 3 + (T > 1), T};
                    for (int c = 2; c >= 0; c--) ks[s]->matmul_prepare_tokens(&W, x, ldx, T, cuts[c], cuts[c + 1], a2);
                    void *scratch = malloc(ks[s]->matmul_scratch_bytes(&W, T) + 64);
                    for (int i = 0; i < T * R; i++) y2[i] = -7.0f;
                    ks[s]->matmul_prepared(&W, a2, T, y2, R, 0, 17, scratch); /* 17: a partial 16-row half */
                    ks[s]->matmul_prepared(&W, a2, T, y2, R, 17, R, scratch);
                    if (memcmp(y1, y2, (size_t)(T * R) * 4) != 0)
                        fail_msg("%s %s K=%ld T=%d: prepared in token ranges != plain matmul", ks[s]->name, g4_dtype_name(dt),
                                 (long)K, T);
                    for (int i = 0; i < T * R; i++) y2[i] = -7.0f;
                    ks[s]->matmul_prepared(&W, a1, T, y2, R, 0, R, scratch);
                    if (memcmp(y1, y2, (size_t)(T * R) * 4) != 0)
                        fail_msg("%s %s K=%ld T=%d: prepared != plain matmul", ks[s]->name, g4_dtype_name(dt), (long)K, T);
                    if (dt == G4_DT_BF16 && !strcmp(ks[s]->name, "avx512"))
                        for (int t = 0; t < T; t++)
                            for (int64_t r = 0; r < R; r++) {
                                const float want = canonical_dot16(m.deq + r * K, x + t * ldx, K);
                                if (memcmp(&want, &y2[t * R + r], 4) != 0)
                                    fail_msg("avx512 bf16 K=%ld T=%d row %ld token %d: %a, canonical %a", (long)K, T, (long)r, t,
                                             (double)y2[t * R + r], (double)want);
                            }
                    free(scratch);
                    free(a1), free(a2), free(x), free(y1), free(y2);
                    wmat_free(&m);
                }
}

/* avx512's exact bf16 prefill over calls of several row panels (matmul_call_rows: groups of
 * 32-row panels, one pass over the activations per group): calls that start and end inside a group, a panel or a 16-row half, several groups in
 * one call, short rows (all 16 classes per tile) and long ones, token counts past a block: the
 * plain matmul's bits. */
static void test_bf16_prefill_groups(void **state) {
    (void)state;
    const g4_kernels *ks[3];
    const int nk = all_sets(ks);
    for (int s = 0; s < nk; s++) {
        if (strcmp(ks[s]->name, "avx512") || !ks[s]->matmul_call_rows) continue;
        const int64_t Ks[] = {37, 1000, 5376};
        const int Ts[] = {33, 101};
        for (int ki = 0; ki < 3; ki++)
            for (int ti = 0; ti < 2; ti++) {
                const int64_t K = Ks[ki];
                const int T = Ts[ti];
                const int64_t R = 1100;
                wmat m;
                wmat_make(&m, G4_DT_BF16, R, K, 0);
                g4_mat W = wmat_view(&m);
                const int64_t cr = ks[s]->matmul_call_rows(&W, T);
                assert_true(cr >= 32 && cr % 32 == 0);
                float *x = malloc((size_t)(T * K) * 4), *y1 = malloc((size_t)(T * R) * 4), *y2 = malloc((size_t)(T * R) * 4);
                fill(x, T * K);
                run_mm(ks[s], &W, x, K, T, y1, R, 0, R);
                const size_t ab = ks[s]->matmul_act_bytes(&W, T);
                char *a = aligned_alloc(64, (ab + 63) / 64 * 64);
                ks[s]->matmul_prepare(&W, x, K, T, a);
                void *scratch = malloc(ks[s]->matmul_scratch_bytes(&W, T) + 64);
                const int64_t cuts[] = {0, 17, 40, cr + 8, 3 * cr + 1, R}; /* the last call: several groups */
                for (int i = 0; i < T * R; i++) y2[i] = -7.0f;
                for (int c = 0; c < 5; c++)
                    if (cuts[c] < cuts[c + 1]) ks[s]->matmul_prepared(&W, a, T, y2, R, cuts[c], cuts[c + 1] < R ? cuts[c + 1] : R, scratch);
                if (memcmp(y1, y2, (size_t)(T * R) * 4) != 0)
                    fail_msg("avx512 bf16 K=%ld T=%d (%ld rows a call): grouped prefill != plain matmul", (long)K, T, (long)cr);
                free(scratch), free(a), free(x), free(y1), free(y2);
                wmat_free(&m);
            }
    }
}

/* A column slice (a view into a wider matrix: data at the first column, the wide ld; for q8_0 /
 * q4_0 on 32-column boundaries, so q4_0 rows start at any 2-byte offset) gives the bits of the
 * same columns copied into a matrix of their own, every set, dtype and path. */
static void test_matmul_col_slices(void **state) {
    (void)state;
    const g4_kernels *ks[3];
    const int nk = all_sets(ks);
    const int Ts[] = {1, 2, 3, 5, 150};
    for (int s = 0; s < nk; s++)
        for (int dt = 0; dt < G4_DT_COUNT; dt++)
            for (int ti = 0; ti < 5; ti++) {
                const int64_t R = 21, K = 1088, c0 = is_q(dt) ? 96 : 37, Kc = is_q(dt) ? 544 : 531;
                const int T = Ts[ti];
                wmat m;
                wmat_make(&m, dt, R, K, 0);
                const size_t off = g4_dtype_row_bytes(dt, c0), rb = g4_dtype_row_bytes(dt, Kc);
                char *copy = malloc(rb * (size_t)R + 64);
                for (int64_t r = 0; r < R; r++) memcpy(copy + r * (int64_t)rb, (char *)m.data + r * m.ld + off, rb);
                g4_mat V = {.data = (char *)m.data + off, .dtype = dt, .rows = R, .cols = Kc, .ld_bytes = m.ld};
                g4_mat C = {.data = copy, .dtype = dt, .rows = R, .cols = Kc, .ld_bytes = (int64_t)rb};
                float *x = malloc((size_t)(T * Kc) * 4), *y1 = malloc((size_t)(T * R) * 4), *y2 = malloc((size_t)(T * R) * 4);
                fill(x, T * Kc);
                run_mm(ks[s], &V, x, Kc, T, y1, R, 0, R);
                run_mm(ks[s], &C, x, Kc, T, y2, R, 0, R);
                if (memcmp(y1, y2, (size_t)(T * R) * 4) != 0)
                    fail_msg("%s %s T=%d: column slice != its copy", ks[s]->name, g4_dtype_name(dt), T);
                free(copy);
                free(x);
                free(y1);
                free(y2);
                wmat_free(&m);
            }
}

/* Degenerate calls: an empty row range or no tokens writes nothing. */
static void test_matmul_empty(void **state) {
    (void)state;
    const g4_kernels *ks[3];
    int nk = all_sets(ks);
    for (int s = 0; s < nk; s++)
        for (int dt = 0; dt < G4_DT_COUNT; dt++) {
            wmat m;
            wmat_make(&m, dt, 5, 64, 0);
            g4_mat W = wmat_view(&m);
            float x[64 * 3], y[15];
            fill(x, 64 * 3);
            for (int i = 0; i < 15; i++) y[i] = 123.0f;
            run_mm(ks[s], &W, x, 64, 3, y, 5, 2, 2);
            run_mm(ks[s], &W, x, 64, 0, y, 5, 0, 5);
            for (int i = 0; i < 15; i++) assert_true(y[i] == 123.0f);
            wmat_free(&m);
        }
}

/* Different sets give (slightly) different bits, but the scalar set is a fixed function of K:
 * check a known output so a change of the reference order cannot go unnoticed. */
static void test_matmul_scalar_order(void **state) {
    (void)state;
    float w[5] = {1e8f, 1.0f, -1e8f, 1.0f, 1.0f}, x[5] = {1, 1, 1, 1, 1}, y;
    g4_mat W = {.data = w, .dtype = G4_DT_F32, .rows = 1, .cols = 5, .ld_bytes = 20};
    g4_kernels_scalar.matmul(&W, x, 5, 1, &y, 1, 0, 1, NULL);
    /* s0 = 1e8 + 1 (k=4) = 1e8 (rounded), s1 = 1, s2 = -1e8, s3 = 1: (1e8+1)+(-1e8+1) = 0 */
    assert_true(y == 0.0f);
}

/* ---------------- attention ---------------- */

/* Several query heads of one key/value head in one call: each head's bits are those of the
 * head alone, for every set, group size (below, at and above the avx512 tile of 4), odd head
 * dims, key counts around the 4-key tiles and 32-key blocks, and keys in two segments. */
static void test_attention_grouped(void **state) {
    (void)state;
    const g4_kernels *ks[3];
    int nks = all_sets(ks);
    const int64_t ds[] = {7, 64, 100, 256};
    const int64_t ns[] = {1, 3, 33, 70};
    const int nqs[] = {1, 2, 3, 4, 5, 8};
    for (int di = 0; di < 4; di++)
        for (int ni = 0; ni < 4; ni++) {
            const int64_t d = ds[di], n = ns[ni], stride = d + 1;
            float *kv = malloc((size_t)(2 * n * stride) * 4), *q = malloc((size_t)(8 * d) * 4);
            float *out = malloc((size_t)(9 * d) * 4), *one = malloc((size_t)d * 4), *sc = malloc((size_t)(8 * n) * 4);
            fill(kv, 2 * n * stride);
            fill(q, 8 * d);
            const int64_t cut = n / 2;
            g4_kv_seg segs[2] = {{kv, kv + n * stride, cut, stride},
                                 {kv + cut * stride, kv + n * stride + cut * stride, n - cut, stride}};
            for (int s = 0; s < nks; s++)
                for (int qi = 0; qi < 6; qi++) {
                    const int nq = nqs[qi];
                    for (int64_t i = 0; i < 9 * d; i++) out[i] = -7.0f;
                    ks[s]->attention(out, q, nq, d, segs, 2, sc);
                    for (int64_t i = (int64_t)nq * d; i < 9 * d; i++)
                        if (out[i] != -7.0f) fail_msg("%s attention nq=%d wrote past its heads", ks[s]->name, nq);
                    for (int h = 0; h < nq; h++) {
                        ks[s]->attention(one, q + h * d, 1, d, segs, 2, sc);
                        if (memcmp(one, out + h * d, (size_t)d * 4) != 0)
                            fail_msg("%s attention d=%ld n=%ld: head %d of %d differs from alone", ks[s]->name,
                                     (long)d, (long)n, h, nq);
                    }
                }
            free(kv);
            free(q);
            free(out);
            free(one);
            free(sc);
        }
}

static void attn_ref(double *out, const float *q, int64_t d, const float *k, const float *v,
                     int64_t n, int64_t stride) {
    double *s = malloc((size_t)n * sizeof(double)), mx = -INFINITY, sum = 0;
    for (int64_t j = 0; j < n; j++) {
        s[j] = 0;
        for (int64_t i = 0; i < d; i++) s[j] += (double)q[i] * k[j * stride + i];
        mx = fmax(mx, s[j]);
    }
    for (int64_t j = 0; j < n; j++) sum += (s[j] = exp(s[j] - mx));
    for (int64_t i = 0; i < d; i++) {
        out[i] = 0;
        for (int64_t j = 0; j < n; j++) out[i] += s[j] / sum * v[j * stride + i];
    }
    free(s);
}

static void test_attention(void **state) {
    (void)state;
    const g4_kernels *ks[3];
    int nk = all_sets(ks);
    const int64_t ds[] = {1, 7, 16, 33, 128, 256, 300};
    const int64_t ns[] = {1, 5, 40, 200};
    for (int di = 0; di < 7; di++)
        for (int ni = 0; ni < 4; ni++) {
            const int64_t d = ds[di], n = ns[ni], stride = d + 3;
            float *kv = malloc((size_t)(2 * n * stride) * 4), *q = malloc((size_t)d * 4);
            float *k = kv, *v = kv + n * stride;
            fill(kv, 2 * n * stride);
            fill(q, d);
            for (int64_t i = 0; i < d; i++) q[i] *= 3.0f / sqrtf((float)d) * 4; /* peaky softmax */
            double *ref = malloc((size_t)d * sizeof(double));
            attn_ref(ref, q, d, k, v, n, stride);
            float *out = malloc((size_t)d * 4), *out2 = malloc((size_t)d * 4), *sc = malloc((size_t)n * 4);
            for (int s = 0; s < nk; s++) {
                g4_kv_seg one = {k, v, n, stride};
                ks[s]->attention(out, q, 1, d, &one, 1, sc);
                for (int64_t i = 0; i < d; i++) {
                    /* scores carry d-term rounding (relative to sum |q k|, <= ~12 here), the
                     * weighted sum of n values of magnitude <= 1 carries n-term rounding. */
                    double tol = (8.0 * (double)(d + 16) * 12.0 + 4.0 * (double)(n + 16) + 64.0) * EPS;
                    if (!(fabs(out[i] - ref[i]) <= tol))
                        fail_msg("%s attention d=%ld n=%ld out[%ld] = %.9g vs %.9g", ks[s]->name,
                                 (long)d, (long)n, (long)i, out[i], ref[i]);
                }
                /* the same keys cut into segments (separate buffers, other strides): same bits */
                for (int cut = 0; cut < 4; cut++) {
                    g4_kv_seg segs[8];
                    float *bufs[8];
                    int ns_ = 0;
                    int64_t j0 = 0;
                    while (j0 < n) {
                        /* cut 3: empty segments between non-empty ones */
                        int64_t len = cut == 0 ? 1 : cut == 1 ? 16 : cut == 2 ? 1 + (int64_t)(rnd() % 37)
                                                                           : (ns_ % 2 ? 0 : 1 + (int64_t)(rnd() % 50));
                        if (ns_ == 7 || j0 + len > n) len = n - j0;
                        int64_t st = d + (int64_t)(rnd() % 5);
                        float *b = malloc((size_t)(2 * len * st + 1) * 4 + 4);
                        float *kb = b + 1, *vb = kb + len * st; /* odd alignment */
                        for (int64_t j = 0; j < len; j++) {
                            memcpy(kb + j * st, k + (j0 + j) * stride, (size_t)d * 4);
                            memcpy(vb + j * st, v + (j0 + j) * stride, (size_t)d * 4);
                        }
                        segs[ns_] = (g4_kv_seg){kb, vb, len, st};
                        bufs[ns_++] = b;
                        j0 += len;
                    }
                    ks[s]->attention(out2, q, 1, d, segs, ns_, sc);
                    if (memcmp(out, out2, (size_t)d * 4) != 0)
                        fail_msg("%s attention d=%ld n=%ld: %d segments differ from one", ks[s]->name,
                                 (long)d, (long)n, ns_);
                    for (int i = 0; i < ns_; i++) free(bufs[i]);
                }
            }
            free(kv);
            free(q);
            free(ref);
            free(out);
            free(out2);
            free(sc);
        }
}

/* ---------------- element-wise kernels ---------------- */

static const int64_t Ns[] = {1, 7, 15, 16, 17, 31, 33, 100, 257, 1000, 4099};

static void test_rmsnorm(void **state) {
    (void)state;
    const g4_kernels *ks[3];
    int nk = all_sets(ks);
    for (int ni = 0; ni < 11; ni++) {
        const int64_t n = Ns[ni];
        float *x = malloc((size_t)n * 4), *w = malloc((size_t)n * 4), *y = malloc((size_t)n * 4);
        fill(x, n);
        fill(w, n);
        double ss = 0;
        for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
        double inv = 1.0 / sqrt(ss / (double)n + 1e-6);
        for (int s = 0; s < nk; s++)
            for (int withw = 0; withw < 2; withw++) {
                ks[s]->rmsnorm(y, x, withw ? w : NULL, n, 1e-6f);
                for (int64_t i = 0; i < n; i++) {
                    double ref = x[i] * inv * (withw ? w[i] : 1.0);
                    double tol = ((double)n + 16) * EPS * fabs(ref) + 1e-30;
                    if (!(fabs(y[i] - ref) <= tol))
                        fail_msg("%s rmsnorm n=%ld [%ld] %.9g vs %.9g", ks[s]->name, (long)n, (long)i, y[i], ref);
                }
                /* in place */
                float *z = malloc((size_t)n * 4);
                memcpy(z, x, (size_t)n * 4);
                ks[s]->rmsnorm(z, z, withw ? w : NULL, n, 1e-6f);
                assert_memory_equal(z, y, (size_t)n * 4);
                free(z);
            }
        free(x);
        free(w);
        free(y);
    }
}

/* rope, add, scale: the same IEEE operations as the scalar set, so bitwise equal. */
static void test_exact_elementwise(void **state) {
    (void)state;
    const g4_kernels *ks[3];
    int nk = simd_sets(ks);
    const int64_t ds[] = {2, 6, 14, 32, 34, 64, 130, 256, 512};
    for (int di = 0; di < 9; di++) {
        const int64_t d = ds[di];
        float x[512], c[256], sn[256], r1[512], r2[512];
        fill(x, d);
        for (int64_t i = 0; i < d / 2; i++) {
            c[i] = cosf(0.37f * (float)i);
            sn[i] = sinf(0.37f * (float)i);
        }
        memcpy(r1, x, (size_t)d * 4);
        g4_kernels_scalar.rope(r1, c, sn, d);
        for (int s = 0; s < nk; s++) {
            memcpy(r2, x, (size_t)d * 4);
            ks[s]->rope(r2, c, sn, d);
            assert_memory_equal(r1, r2, (size_t)d * 4);
        }
        double a = x[0], b = x[d / 2];
        assert_true(fabs(r1[0] - (a * c[0] - b * sn[0])) < 1e-6);
    }
    for (int ni = 0; ni < 11; ni++) {
        const int64_t n = Ns[ni];
        float *a = malloc((size_t)n * 4), *b = malloc((size_t)n * 4);
        float *y1 = malloc((size_t)n * 4 + 4), *y2 = malloc((size_t)n * 4 + 4);
        fill(a, n);
        fill(b, n);
        g4_kernels_scalar.add(y1, a, b, n);
        for (int64_t i = 0; i < n; i++) assert_true(y1[i] == a[i] + b[i]);
        for (int s = 0; s < nk; s++) {
            y2[n] = 42.0f;
            ks[s]->add(y2, a, b, n);
            assert_memory_equal(y1, y2, (size_t)n * 4);
            assert_true(y2[n] == 42.0f); /* no write past the end */
        }
        g4_kernels_scalar.scale(y1, a, 0.3f, n);
        for (int s = 0; s < nk; s++) {
            ks[s]->scale(y2, a, 0.3f, n);
            assert_memory_equal(y1, y2, (size_t)n * 4);
            memcpy(y2, a, (size_t)n * 4);
            ks[s]->scale(y2, y2, 0.3f, n); /* in place */
            assert_memory_equal(y1, y2, (size_t)n * 4);
        }
        free(a);
        free(b);
        free(y1);
        free(y2);
    }
}

/* tanh through softcap(cap=1) and softcap(cap=30) against double precision: a few ulp. */
static void test_tanh_softcap(void **state) {
    (void)state;
    const g4_kernels *ks[3];
    int nk = all_sets(ks);
    enum { N = 4000 };
    static float x[N], y[N];
    for (int i = 0; i < N; i++) {
        double t = (double)i / N;
        x[i] = (float)((i & 1 ? -1 : 1) * (i < 1000 ? ldexp(1.0, -30 + (int)(30 * t * 4)) * (1 + t)
                                                     : 12.0 * t * t));
    }
    x[0] = 0.0f;
    x[2] = 0.625f;
    x[4] = nextafterf(0.625f, 0);
    x[6] = 9.5f;
    x[8] = 50.0f;
    x[10] = -100.0f;
    const float caps[] = {1.0f, 30.0f};
    for (int s = 0; s < nk; s++)
        for (int c = 0; c < 2; c++) {
            const float cap = caps[c];
            ks[s]->softcap(y, x, cap, N);
            double worst = 0;
            for (int i = 0; i < N; i++) {
                double ref = (double)cap * tanh((double)(x[i] / cap));
                double ulp = fmax(fabs(ref) * EPS, FLT_MIN);
                double e = fabs(y[i] - ref) / ulp;
                if (e > worst) worst = e;
                if (!(e <= 6.0))
                    fail_msg("%s softcap(%g) x=%.9g: %.9g vs %.9g (%.1f ulp)", ks[s]->name, cap, x[i], y[i], ref, e);
            }
            (void)worst;
        }
}

static void test_gelu_mul(void **state) {
    (void)state;
    const g4_kernels *ks[3];
    int nk = all_sets(ks);
    for (int ni = 0; ni < 11; ni++) {
        const int64_t n = Ns[ni];
        float *g = malloc((size_t)n * 4), *u = malloc((size_t)n * 4), *y = malloc((size_t)n * 4 + 4);
        for (int64_t i = 0; i < n; i++) {
            g[i] = frand() * 6.0f;
            u[i] = frand() * 2.0f;
        }
        for (int s = 0; s < nk; s++) {
            y[n] = 7.0f;
            ks[s]->gelu_mul(y, g, u, n);
            assert_true(y[n] == 7.0f);
            for (int64_t i = 0; i < n; i++) {
                double gi = g[i];
                double t = tanh(0.7978845608028654 * (gi + 0.044715 * gi * gi * gi));
                double ref = 0.5 * gi * (1.0 + t) * u[i];
                /* few-ulp tanh error scaled by |0.5 g u|, plus rounding of each product */
                double tol = 16.0 * EPS * fabs(0.5 * gi * u[i]) * (1.0 + fabs(t) + fabs(gi)) + 1e-30;
                if (!(fabs(y[i] - ref) <= tol))
                    fail_msg("%s gelu_mul g=%.9g: %.9g vs %.9g", ks[s]->name, g[i], y[i], ref);
            }
        }
        free(g);
        free(u);
        free(y);
    }
}

/* ---------------- probes ---------------- */

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void test_probes(void **state) {
    (void)state;
    cpu_set_t orig, one, after; /* taken before any probe runs */
    assert_int_equal(pthread_getaffinity_np(pthread_self(), sizeof orig, &orig), 0);
    /* the buffers: beyond the last-level cache by default, the size asked for otherwise */
    const size_t llc = g4_probe_llc_bytes(), dflt = g4_probe_stream_bytes(), mib = (size_t)1 << 20;
    assert_true(llc >= 64 * 1024 && dflt >= 256 * mib);
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    assert_true(dflt >= 4 * llc || dflt == (size_t)pages * (size_t)psz / 8);
    g4_bw_probe *p = g4_bw_probe_new(1, 96 * mib);
    assert_non_null(p);
    assert_true(g4_bw_probe_bytes(p) >= 96 * mib && g4_bw_probe_bytes(p) <= 96 * mib + 6 * mib);
    assert_true(g4_bw_probe_run(p, 1) > 0);
    g4_bw_probe_free(p);
    assert_true(g4_probe_bandwidth_gbs(2, 0) > 0 && g4_probe_read_gbs(2, 0) > 0); /* untimed: may reclaim page cache first */
    for (int th = 1; th <= 2; th++) {
        double t0 = mono_s(), bw = g4_probe_bandwidth_gbs(th, 256 * mib), t1 = mono_s();
        double fl = g4_probe_fma_gflops(th), t2 = mono_s();
        assert_true(bw > 0.1 && bw < 10000);
        assert_true(fl > 0.1 && fl < 100000);
        assert_true(t1 - t0 < 3.0); /* ~0.1 s on a quiet machine; slack for sanitizers and load */
        assert_true(t2 - t1 < 3.0);
    }
    double rd = g4_probe_read_gbs(2, 256 * mib);
    assert_true(rd > 0.1 && rd < 10000);
    /* a pinned caller (an engine thread) keeps its own CPU mask after a probe: pinned to its
     * last allowed CPU, which is not the CPU the probe pins its thread 0 to */
    if (CPU_COUNT(&orig) >= 2) {
        int last = 0;
        for (int c = 0; c < CPU_SETSIZE; c++)
            if (CPU_ISSET(c, &orig)) last = c;
        CPU_ZERO(&one);
        CPU_SET(last, &one);
        assert_int_equal(pthread_setaffinity_np(pthread_self(), sizeof one, &one), 0);
        assert_true(g4_probe_bandwidth_gbs(2, (size_t)64 << 20) > 0);
        assert_true(g4_probe_read_gbs(2, (size_t)64 << 20) > 0);
        assert_int_equal(pthread_getaffinity_np(pthread_self(), sizeof after, &after), 0);
        assert_true(CPU_EQUAL(&one, &after));
        assert_int_equal(pthread_setaffinity_np(pthread_self(), sizeof orig, &orig), 0);
    }
    assert_int_equal(pthread_getaffinity_np(pthread_self(), sizeof after, &after), 0);
    assert_true(CPU_EQUAL(&orig, &after)); /* and an unpinned caller is left unpinned */
    assert_true(g4_probe_bandwidth_gbs(0, 0) < 0);
    assert_true(g4_probe_fma_gflops_isa("bogus", 1) < 0);
    assert_true(g4_probe_fma_gflops_isa("scalar", 1) > 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dispatch),
        cmocka_unit_test(test_bf16_conversions),
        cmocka_unit_test(test_f16_conversions),
        cmocka_unit_test(test_row_to_f32),
        cmocka_unit_test(test_quantize_q8_0),
        cmocka_unit_test(test_quantize_act),
        cmocka_unit_test(test_scalar_vs_double),
        cmocka_unit_test(test_matmul_scalar_order),
        cmocka_unit_test(test_matmul_empty),
        cmocka_unit_test(test_q8_vnni_paths),
        cmocka_unit_test(test_q8_prepared),
        cmocka_unit_test(test_q8_slices),
        cmocka_unit_test(test_prepare_tokens),
        cmocka_unit_test(test_bf16_prefill_groups),
        cmocka_unit_test(test_matmul_col_slices),
        cmocka_unit_test(test_matmul_vs_scalar),
        cmocka_unit_test(test_matmul_invariance),
        cmocka_unit_test(test_matmul_large_T),
        cmocka_unit_test(test_attention),
        cmocka_unit_test(test_attention_grouped),
        cmocka_unit_test(test_rmsnorm),
        cmocka_unit_test(test_exact_elementwise),
        cmocka_unit_test(test_tanh_softcap),
        cmocka_unit_test(test_gelu_mul),
        cmocka_unit_test(test_probes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
