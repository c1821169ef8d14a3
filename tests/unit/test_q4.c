/* Unit tests for the q4_0 format (src/kernels/kernels_q4.c and the q4_0 matmuls): the block
 * layout and dtype table, the quantizer (llama.cpp's rule, byte for byte, off the grid; lossless
 * on a 4-bit grid, with the grid's own scale and levels where they are unique), non-finite
 * inputs, the dequantizer against every set's row_to_f32, and every set's q4_0 matmul against a
 * float64 reference of dequantized weights times quantized activations. The invariance tests
 * (T, row splits, column slices, prepared calls, VNNI on/off) run for q4_0 in test_kernels.c. */
#include "testutil.h"
#include "kernels/kernels.h"
#include "kernels/kernels_internal.h"

#include <float.h>
#include <math.h>
#include <stddef.h>
#include <sys/mman.h>
#include <unistd.h>

static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static uint32_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 11);
}
static float frand(void) { return (float)((double)rnd() / 2147483648.0 - 1.0); } /* [-1, 1) */

static uint32_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static int level(const g4_block_q4_0 *b, int j) { return j < 16 ? b->qs[j] & 15 : b->qs[j - 16] >> 4; }

/* llama.cpp's quantize_row_q4_0_ref for one block, written out plainly (finite inputs). */
static void llama_q4_0(const float *x, g4_block_q4_0 *y) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < 32; j++) {
        const float v = x[j];
        if (amax < fabsf(v)) {
            amax = fabsf(v);
            max = v;
        }
    }
    const float d = max / -8;
    const float id = d ? 1.0f / d : 0.0f;
    y->d = g4_f32_to_f16(d);
    for (int j = 0; j < 16; ++j) {
        const float x0 = x[0 + j] * id;
        const float x1 = x[16 + j] * id;
        const int a = (int8_t)(x0 + 8.5f), b = (int8_t)(x1 + 8.5f);
        const uint8_t xi0 = (uint8_t)(a < 15 ? a : 15);
        const uint8_t xi1 = (uint8_t)(b < 15 ? b : 15);
        y->qs[j] = xi0;
        y->qs[j] |= xi1 << 4;
    }
}

static void test_q4_layout(void **state) {
    (void)state;
    assert_int_equal(sizeof(g4_block_q4_0), 18);
    assert_int_equal(offsetof(g4_block_q4_0, qs), 2);
    assert_int_equal(G4_DT_Q4_0, 4);
    assert_true(G4_DT_Q4_0 < G4_DT_COUNT);
    assert_string_equal(g4_dtype_name(G4_DT_Q4_0), "q4_0");
    assert_int_equal(g4_dtype_from_name("q4_0"), G4_DT_Q4_0);
    assert_int_equal(g4_dtype_from_name("q4_1"), -1);
    assert_int_equal(g4_dtype_row_bytes(G4_DT_Q4_0, 5376), 5376 / 32 * 18);
    assert_int_equal(g4_dtype_row_bytes(G4_DT_Q4_0, 32), 18);
}

/* Random f16 step: any sign, exponents from subnormal to large. */
static uint16_t rand_step(void) {
    const uint16_t sign = (uint16_t)((rnd() & 1) << 15);
    if (rnd() % 16 == 0) return (uint16_t)(sign | (1 + rnd() % 1023)); /* subnormal */
    return (uint16_t)(sign | (1 + rnd() % 30) << 10 | (rnd() % 1024));
}

/* Levels of one test block, by kind: full range, no -8, small levels only, no zero level, one
 * level, zero plus one other level, non-negative levels only. */
static void rand_levels(int kind, uint8_t *q) {
    const int one = (int)(rnd() % 16), other = (int)(rnd() % 16);
    for (int j = 0; j < 32; j++) {
        int v;
        switch (kind) {
        case 0: v = (int)(rnd() % 16); break;
        case 1: v = 1 + (int)(rnd() % 15); break;
        case 2: v = 8 + (int)(rnd() % 5) - 2; break;
        case 3: v = (int)(rnd() % 15); v += v >= 8; break;
        case 4: v = one; break;
        case 5: v = rnd() % 2 ? 8 : other; break;
        default: v = 8 + (int)(rnd() % 8); break;
        }
        q[j] = (uint8_t)v;
    }
}

/* How many (f16 step, levels) give back the nonzero block x exactly: any such step is v / k for
 * the block's first nonzero value v and its level k, so trying the 15 k is exhaustive. */
static int grid_solutions(const float *x) {
    int j0 = 0;
    while (x[j0] == 0.0f) j0++;
    int n = 0;
    for (int k = -8; k <= 7; k++) {
        if (!k) continue;
        const float D = x[j0] / (float)k;
        const uint16_t h = g4_f32_to_f16(D);
        if (g4_f16_to_f32(h) != D) continue;
        int ok = 1;
        for (int j = 0; j < 32 && ok; j++) {
            const double r = (double)x[j] / (double)D;
            ok = r == floor(r) && r >= -8 && r <= 7 && fbits(D * (float)(int)r) == fbits(x[j]);
        }
        n += ok;
    }
    return n;
}

/* Values exactly on a 4-bit grid come back bit for bit, and with their own step and levels
 * where those are the only ones. */
static void test_q4_grid_roundtrip(void **state) {
    (void)state;
    enum { NB = 4096 };
    float *x = malloc(NB * 32 * 4), *back = malloc(NB * 32 * 4);
    uint16_t *h = malloc(NB * 2);
    uint8_t *lv = malloc(NB * 32);
    g4_block_q4_0 *y = malloc(NB * sizeof *y);
    for (int b = 0; b < NB; b++) {
        const int kind = b % 8;
        h[b] = kind == 7 ? (uint16_t)(rnd() % 2 ? 0x8000 : 0) : rand_step(); /* kind 7: step +-0 */
        rand_levels(kind == 7 ? 0 : kind, lv + b * 32);
        const float D = g4_f16_to_f32(h[b]);
        for (int j = 0; j < 32; j++) x[b * 32 + j] = D * (float)(lv[b * 32 + j] - 8);
    }
    g4_quantize_row_q4_0(x, y, NB * 32);
    g4_dequantize_row_q4_0(y, back, NB * 32);
    int unique = 0, zero = 0;
    for (int b = 0; b < NB; b++) {
        for (int j = 0; j < 32; j++)
            if (fbits(back[b * 32 + j]) != fbits(x[b * 32 + j]))
                fail_msg("block %d (kind %d, step 0x%04x) element %d: %.9g came back as %.9g (d 0x%04x)", b, b % 8,
                         h[b], j, x[b * 32 + j], back[b * 32 + j], y[b].d);
        int nonzero = 0;
        for (int j = 0; j < 32; j++) nonzero |= x[b * 32 + j] != 0.0f;
        if (!nonzero) { zero++; continue; }
        if (grid_solutions(x + b * 32) != 1) continue;
        unique++;
        assert_int_equal(y[b].d, h[b]);
        for (int j = 0; j < 32; j++) assert_int_equal(level(&y[b], j), lv[b * 32 + j]);
    }
    print_message("q4_0 grid: %d blocks, %d unambiguous, %d all zero\n", NB, unique, zero);
    assert_true(unique > NB / 3 && zero >= NB / 8);
    free(x);
    free(back);
    free(h);
    free(lv);
    free(y);
}

/* Off the grid the quantizer is llama.cpp's, byte for byte: random blocks of several magnitudes,
 * and grid blocks with one value one ulp off. */
static void test_q4_off_grid(void **state) {
    (void)state;
    enum { NB = 4096 };
    float *x = malloc(NB * 32 * 4), *back = malloc(NB * 32 * 4);
    g4_block_q4_0 *y = malloc(NB * sizeof *y), ref;
    for (int b = 0; b < NB; b++) {
        const float scale = ldexpf(1.0f, (int)(rnd() % 40) - 30);
        if (b % 4 == 3) { /* a grid block with one value nudged */
            uint8_t lv[32];
            rand_levels(0, lv);
            const float D = g4_f16_to_f32(rand_step());
            for (int j = 0; j < 32; j++) x[b * 32 + j] = D * (float)(lv[j] - 8);
            const int j = (int)(rnd() % 32);
            x[b * 32 + j] = nextafterf(x[b * 32 + j], rnd() % 2 ? INFINITY : -INFINITY);
        } else
            for (int j = 0; j < 32; j++) x[b * 32 + j] = frand() * scale;
    }
    g4_quantize_row_q4_0(x, y, NB * 32);
    g4_dequantize_row_q4_0(y, back, NB * 32);
    double err = 0;
    for (int b = 0; b < NB; b++) {
        llama_q4_0(x + b * 32, &ref);
        if (memcmp(&ref, &y[b], sizeof ref) != 0) fail_msg("block %d: not llama.cpp's quantization", b);
        const float d = fabsf(g4_f16_to_f32(ref.d));
        if (d < ldexpf(1.0f, -14)) continue; /* a subnormal f16 step is coarser than llama's fp32 d */
        for (int j = 0; j < 32; j++) { /* the ordinary error: half a step, one step at the clamp */
            const double e = fabs((double)back[b * 32 + j] - x[b * 32 + j]);
            if (!(e <= 1.01 * d)) fail_msg("block %d element %d: error %g, step %g", b, j, e, d);
            err += e;
        }
    }
    print_message("q4_0 off the grid: llama.cpp's bytes for %d blocks\n", NB);
    assert_true(err > 0);
    free(x);
    free(back);
    free(y);
}

/* NaN and inf inputs: no undefined behaviour (the sanitizer build checks the conversions), NaN
 * at the zero level, finite neighbours still quantized. */
static void test_q4_nonfinite(void **state) {
    (void)state;
    float x[96];
    g4_block_q4_0 y[3];
    for (int j = 0; j < 96; j++) x[j] = frand();
    x[3] = NAN;
    x[40] = INFINITY;
    for (int j = 64; j < 96; j++) x[j] = NAN;
    g4_quantize_row_q4_0(x, y, 96);
    assert_int_equal(level(&y[0], 3), 8);
    g4_block_q4_0 ref;
    float x0[32];
    memcpy(x0, x, sizeof x0);
    x0[3] = 0.0f; /* a NaN is ignored by the max: the rest of the block is llama's */
    llama_q4_0(x0, &ref);
    assert_int_equal(y[0].d, ref.d);
    for (int j = 0; j < 32; j++)
        if (j != 3) assert_int_equal(level(&y[0], j), level(&ref, j));
    for (int j = 0; j < 32; j++) assert_int_equal(level(&y[2], j), 8);
}

/* g4_dequantize_row_q4_0 is d * (q - 8) and every set's row_to_f32 gives the same bits, on
 * every level and on scales of every kind (subnormal, negative, inf, NaN). */
static void test_q4_dequantize(void **state) {
    (void)state;
    enum { NB = 64 };
    g4_block_q4_0 b[NB];
    for (int i = 0; i < NB; i++) {
        b[i].d = i == 0 ? 0x7c00 : i == 1 ? 0xfe00 : i == 2 ? 0x8000 : rand_step();
        for (int j = 0; j < 16; j++) b[i].qs[j] = (uint8_t)(i == 3 ? (uint32_t)j * 17 : rnd());
    }
    float ref[NB * 32], got[NB * 32 + 1];
    g4_dequantize_row_q4_0(b, ref, NB * 32);
    for (int i = 0; i < NB; i++)
        for (int j = 0; j < 32; j++)
            assert_int_equal(fbits(ref[i * 32 + j]), fbits(g4_f16_to_f32(b[i].d) * (float)(level(&b[i], j) - 8)));
    const char *names[3];
    const int n = g4_kernels_available(names, 3);
    for (int s = 0; s < n; s++) {
        got[NB * 32] = 42.0f;
        g4_kernels_by_name(names[s])->row_to_f32(got, b, G4_DT_Q4_0, NB * 32);
        for (int i = 0; i < NB * 32; i++)
            if (fbits(got[i]) != fbits(ref[i])) fail_msg("%s row_to_f32 element %d", names[s], i);
        assert_true(got[NB * 32] == 42.0f);
    }
}

/* Every set's q4_0 matmul against float64: the dequantized weights times the dequantized int8
 * activations (what the integer semantics compute), within a bound from the block count. */
static void test_q4_matmul_vs_double(void **state) {
    (void)state;
    const char *names[3];
    const int n = g4_kernels_available(names, 3);
    const int64_t Ks[] = {32, 96, 512, 544, 1056, 5376};
    const int Ts[] = {1, 2, 3, 4, 5, 9, 40};
    for (int ki = 0; ki < 6; ki++) {
        const int64_t K = Ks[ki], R = 11, nb = K / 32;
        const int T = Ts[(ki + 3) % 7] > Ts[ki] ? Ts[(ki + 3) % 7] : Ts[ki];
        g4_block_q4_0 *w = malloc((size_t)(R * nb) * sizeof *w);
        float *x = malloc((size_t)(T * K) * 4), *wd = malloc((size_t)(R * K) * 4), *y = malloc((size_t)(T * R) * 4);
        for (int64_t i = 0; i < R * K; i++) wd[i] = frand();
        for (int64_t r = 0; r < R; r++) g4_quantize_row_q4_0(wd + r * K, w + r * nb, K);
        g4_dequantize_row_q4_0(w, wd, R * K);
        for (int64_t i = 0; i < T * K; i++) x[i] = frand() * (i % 7 == 0 ? 10.0f : 1.0f);
        char *rec = malloc((size_t)g4__q8_act_stride(K));
        double *ref = malloc((size_t)(T * R) * sizeof(double)), *mag = malloc((size_t)(T * R) * sizeof(double));
        for (int t = 0; t < T; t++) {
            g4__q8_quantize_act(x + t * K, K, rec);
            const float *xd = (const float *)(rec + g4__q8_act_qs_bytes(K));
            for (int64_t r = 0; r < R; r++) {
                double s = 0, a = 0;
                for (int64_t k = 0; k < K; k++) {
                    const double v = (double)wd[r * K + k] * ((double)((int8_t *)rec)[k] * xd[k / 32]);
                    s += v;
                    a += fabs(v);
                }
                ref[t * R + r] = s;
                mag[t * R + r] = a;
            }
        }
        g4_mat W = {.data = w, .dtype = G4_DT_Q4_0, .rows = R, .cols = K, .ld_bytes = (int64_t)(nb * sizeof *w)};
        for (int s = 0; s < n; s++) {
            const g4_kernels *k = g4_kernels_by_name(names[s]);
            k->matmul(&W, x, K, T, y, R, 0, R, NULL);
            for (int i = 0; i < T * R; i++)
                if (!(fabs(y[i] - ref[i]) <= 4.0 * (double)(nb + 8) * FLT_EPSILON * mag[i] + 1e-30))
                    fail_msg("%s K=%ld T=%d out %d: %.9g vs %.9g", names[s], (long)K, T, i, y[i], ref[i]);
        }
        free(w);
        free(x);
        free(wd);
        free(y);
        free(rec);
        free(ref);
        free(mag);
    }
}

/* The prefill path's blocking (tokens in blocks, groups in chunks whose partial sums are parked
 * between chunks, row tiles of 4) gives each output the bits of the one-token call, for every
 * set, with widths past one chunk (13+ groups, a partial last group) and token counts past one
 * block; on avx512 with VNNI on and off. */
static void test_q4_prefill_blocking(void **state) {
    (void)state;
    const char *names[3];
    const int n = g4_kernels_available(names, 3);
    const int64_t Ks[] = {6688, 13312}, R = 9;
    const int T = 203;
    for (int ki = 0; ki < 2; ki++)
        for (int s = 0; s < n; s++)
            for (int vnni = 0; vnni <= 1; vnni++) {
                const g4_kernels *k = g4_kernels_by_name(names[s]);
                const int avx512 = strcmp(names[s], "avx512") == 0, saved = g4__avx512_vnni;
                if (vnni && (!avx512 || !saved)) continue;
                if (avx512) g4__avx512_vnni = vnni;
                const int64_t K = Ks[ki], nb = K / 32;
                g4_block_q4_0 *w = malloc((size_t)(R * nb) * sizeof *w);
                float *x = malloc((size_t)(T * K) * 4), *y = malloc((size_t)(T * R) * 4), *y1 = malloc((size_t)R * 4);
                for (int64_t i = 0; i < T * K; i++) x[i] = frand();
                for (int64_t r = 0; r < R; r++) g4_quantize_row_q4_0(x + r * K, w + r * nb, K);
                g4_mat W = {.data = w, .dtype = G4_DT_Q4_0, .rows = R, .cols = K, .ld_bytes = (int64_t)(nb * sizeof *w)};
                k->matmul(&W, x, K, T, y, R, 0, R, NULL);
                for (int t = 0; t < T; t += 7) {
                    k->matmul(&W, x + t * K, K, 1, y1, R, 0, R, NULL);
                    if (memcmp(y1, y + t * R, (size_t)R * 4) != 0)
                        fail_msg("%s vnni=%d K=%ld: token %d of %d != the one-token call", names[s], vnni, (long)K, t, T);
                }
                if (avx512) g4__avx512_vnni = saved;
                free(w);
                free(x);
                free(y);
                free(y1);
            }
}

/* The grouped layout (kernels.h, G4_Q4_GROUPED): g4_q4_0_group_row puts every byte where the
 * layout says (scales of blk(L) as word L, level bytes 4j..4j+3 of blk(L) at 32 + 64 j + 4 L), leaves
 * a row's partial last group as blocks or (tail) puts its n blocks' scales as words 0..n-1 and
 * level bytes 4j..4j+3 of block b at 2n + 4nj + 4b, and g4_q4_0_ungroup_row gives the row back;
 * the avx512 matmul on the grouped matrix gives the bits of the plain one for every T (decode
 * and the prefill path), row range, VNNI on and off, both decode prefetch hints (g4__prefetch_l2:
 * separate instantiations), and on column slices grouped as their own rows, with and without tails. */
static void test_q4_grouped(void **state) {
    (void)state;
    assert_int_equal(g4_q4_0_layout_for(&g4_kernels_scalar), 0);
    const g4_kernels *k = g4_kernels_by_name("avx512");
    if (k) assert_int_equal(g4_q4_0_layout_for(k), G4_Q4_GROUPED);
    const int64_t Ks[] = {32, 320, 512, 544, 960, 1056, 5376, 13312}, R = 7;
    for (int ki = 0; ki < 16; ki++) { /* each K without and with tails */
        const int tail = ki & 1;
        const int64_t K = Ks[ki / 2], nb = K / 32, rb = nb * 18;
        const int T = 9;
        uint8_t *w = malloc((size_t)(R * rb)), *wg = malloc((size_t)(R * rb));
        float *x = malloc((size_t)(T * K) * 4), *y = malloc((size_t)(T * R) * 4), *yg = malloc((size_t)(T * R) * 4);
        for (int64_t i = 0; i < T * K; i++) x[i] = frand();
        for (int64_t r = 0; r < R; r++) g4_quantize_row_q4_0(x + (r % T) * K, (g4_block_q4_0 *)(w + r * rb), K);
        memcpy(wg, w, (size_t)(R * rb));
        for (int64_t r = 0; r < R; r++) g4_q4_0_group_row(wg + r * rb, nb, tail);
        for (int64_t r = 0; r < R; r++) {
            const g4_block_q4_0 *b = (const g4_block_q4_0 *)(w + r * rb);
            const uint8_t *o = wg + r * rb;
            for (int64_t g = 0; g < nb / 16; g++)
                for (int L = 0; L < 16; L++) {
                    const g4_block_q4_0 *s = &b[16 * g + 4 * (L % 4) + L / 4];
                    assert_memory_equal(o + 288 * g + 2 * L, &s->d, 2);
                    for (int j = 0; j < 16; j++) assert_int_equal(o[288 * g + 32 + 64 * (j / 4) + 4 * L + j % 4], s->qs[j]);
                }
            const int64_t n = nb % 16;
            if (!tail) assert_memory_equal(o + 288 * (nb / 16), w + r * rb + 288 * (nb / 16), (size_t)(18 * n + 0));
            else
                for (int64_t c = 0; c < n; c++) {
                    const g4_block_q4_0 *s = &b[16 * (nb / 16) + c];
                    const uint8_t *t0 = o + 288 * (nb / 16);
                    assert_memory_equal(t0 + 2 * c, &s->d, 2);
                    for (int j = 0; j < 16; j++) assert_int_equal(t0[2 * n + 4 * n * (j / 4) + 4 * c + j % 4], s->qs[j]);
                }
        }
        { /* the lookup of a grouped row (the tied embedding) = the blocks' floats */
            g4_mat Wl = {.data = wg, .dtype = G4_DT_Q4_0, .rows = R, .cols = K, .ld_bytes = rb, .layout = G4_Q4_GROUPED, .q4_tail = tail};
            float *a = malloc((size_t)K * 4), *b = malloc((size_t)K * 4);
            for (int64_t r = 0; r < R; r++) {
                g4_mat_lookup_row(&g4_kernels_scalar, &Wl, r, a);
                g4_kernels_scalar.row_to_f32(b, w + r * rb, G4_DT_Q4_0, K);
                if (memcmp(a, b, (size_t)K * 4)) fail_msg("lookup of grouped K=%ld tail %d row %ld differs", (long)K, tail, (long)r);
            }
            free(a);
            free(b);
        }
        if (k) {
            g4_mat W = {.data = w, .dtype = G4_DT_Q4_0, .rows = R, .cols = K, .ld_bytes = rb}, Wg = W;
            Wg.data = wg;
            Wg.layout = G4_Q4_GROUPED;
            Wg.q4_tail = tail;
            const int saved = g4__avx512_vnni, saved_l2 = g4__prefetch_l2;
            for (int vl = 0; vl < 2 * (saved + 1); vl++) { /* VNNI off / on x both prefetch hints */
                const int vnni = vl / 2;
                g4__avx512_vnni = vnni;
                for (int t = 1; t <= T; t += (t < 5 ? 1 : 4)) {
                    memset(yg, 0, (size_t)(T * R) * 4);
                    g4__prefetch_l2 = 0; /* the reference: blocks, hint T0 */
                    k->matmul(&W, x, K, t, y, R, 0, R, NULL);
                    g4__prefetch_l2 = vl % 2;
                    k->matmul(&Wg, x, K, t, yg, R, 1, R, NULL);
                    k->matmul(&Wg, x, K, t, yg, R, 0, 1, NULL);
                    for (int i = 0; i < t; i++)
                        if (memcmp(y + i * R, yg + i * R, (size_t)R * 4))
                            fail_msg("grouped K=%ld tail %d T=%d vnni=%d l2=%d token %d: bits differ from the blocks", (long)K, tail,
                                     t, vnni, g4__prefetch_l2, i);
                }
            }
            g4__avx512_vnni = saved;
            g4__prefetch_l2 = saved_l2;
            if (nb >= 2) { /* two column slices [0, c) and [c, K), each grouped as a row */
                const int64_t c = (nb / 2) * 32, cb = c / 32 * 18;
                memcpy(wg, w, (size_t)(R * rb));
                for (int64_t r = 0; r < R; r++) {
                    g4_q4_0_group_row(wg + r * rb, c / 32, tail);
                    g4_q4_0_group_row(wg + r * rb + cb, nb - c / 32, tail);
                }
                for (int h = 0; h < 2; h++) {
                    const int64_t off = h ? cb : 0, cols = h ? K - c : c;
                    g4_mat S = {.data = w + off, .dtype = G4_DT_Q4_0, .rows = R, .cols = cols, .ld_bytes = rb}, Sg = S;
                    Sg.data = wg + off;
                    Sg.layout = G4_Q4_GROUPED;
                    Sg.q4_tail = tail;
                    k->matmul(&S, x + (h ? c : 0), K, 3, y, R, 0, R, NULL);
                    k->matmul(&Sg, x + (h ? c : 0), K, 3, yg, R, 0, R, NULL);
                    if (memcmp(y, yg, (size_t)(3 * R) * 4)) fail_msg("grouped slice %d of K=%ld: bits differ", h, (long)K);
                }
                for (int64_t r = 0; r < R; r++) {
                    g4_q4_0_ungroup_row(wg + r * rb, c / 32, tail);
                    g4_q4_0_ungroup_row(wg + r * rb + cb, nb - c / 32, tail);
                }
                assert_memory_equal(wg, w, (size_t)(R * rb));
            }
        }
        memcpy(wg, w, (size_t)(R * rb));
        for (int64_t r = 0; r < R; r++) {
            g4_q4_0_group_row(wg + r * rb, nb, tail);
            g4_q4_0_ungroup_row(wg + r * rb, nb, tail);
        }
        assert_memory_equal(wg, w, (size_t)(R * rb));
        free(w);
        free(wg);
        free(x);
        free(y);
        free(yg);
    }
}

/* matmul_slices of q4_0 (the row-parallel decode's walk): bitwise matmul_prepared of each slice alone,
 * grouped per slice (partial groups as blocks or in the tail layout) or in llama.cpp's blocks,
 * VNNI on and off, both prefetch hints (g4__prefetch_l2), on a row range. */
static void test_q4_slices(void **state) {
    (void)state;
    const g4_kernels *k = g4_kernels_by_name("avx512");
    if (!k) skip();
    assert_non_null(k->matmul_slices);
    const int64_t slice_cols[] = {32, 544, 1024, 1344}, R = 11;
    const int nslices[] = {1, 3, 8, 2};
    for (int ci = 0; ci < 4; ci++) {
        const int64_t sc = slice_cols[ci], snb = sc / 32, K = sc * nslices[ci], nb = K / 32, rb = nb * 18;
        const int ns = nslices[ci];
        uint8_t *w = malloc((size_t)(R * rb));
        float *x = malloc((size_t)K * 4), *y = malloc((size_t)(ns * R) * 4), *ys = malloc((size_t)(ns * R) * 4);
        for (int64_t i = 0; i < K; i++) x[i] = frand();
        float *row = malloc((size_t)K * 4);
        for (int64_t r = 0; r < R; r++) {
            for (int64_t i = 0; i < K; i++) row[i] = frand();
            g4_quantize_row_q4_0(row, (g4_block_q4_0 *)(w + r * rb), K);
        }
        for (int lay = 0; lay <= 2; lay++) {
            const int grouped = lay > 0, tail = lay == 2;
            if (grouped)
                for (int64_t r = 0; r < R; r++)
                    for (int s = 0; s < ns; s++) {
                        if (tail) g4_q4_0_ungroup_row(w + r * rb + s * snb * 18, snb, 0); /* blocks again */
                        g4_q4_0_group_row(w + r * rb + s * snb * 18, snb, tail);
                    }
            g4_mat W = {.data = w, .dtype = G4_DT_Q4_0, .rows = R, .cols = K, .ld_bytes = rb,
                        .layout = grouped ? G4_Q4_GROUPED : 0, .layout_cols = grouped ? sc : 0, .q4_tail = tail};
            g4_mat S0 = W;
            S0.cols = sc;
            const size_t stride = k->matmul_act_bytes(&S0, 1);
            char *act = aligned_alloc(64, (stride * (size_t)ns + 63) / 64 * 64);
            void *scratch = malloc(k->matmul_scratch_bytes(&S0, 1));
            for (int s = 0; s < ns; s++) k->matmul_prepare(&S0, x + s * sc, sc, 1, act + (size_t)s * stride);
            const int saved = g4__avx512_vnni, saved_l2 = g4__prefetch_l2;
            for (int vl = 0; vl < 2 * (saved + 1); vl++) { /* VNNI off / on x both prefetch hints */
                const int vnni = vl / 2;
                g4__avx512_vnni = vnni;
                g4__prefetch_l2 = 0;
                memset(y, 0, (size_t)(ns * R) * 4);
                memset(ys, 0xff, (size_t)(ns * R) * 4);
                for (int s = 0; s < ns; s++) {
                    g4_mat S = S0;
                    S.data = w + s * snb * 18;
                    k->matmul_prepared(&S, act + (size_t)s * stride, 1, y + s * R, R, 0, R, scratch);
                }
                g4__prefetch_l2 = vl % 2;
                k->matmul_slices(&W, sc, ns, act, stride, ys, R, 0, 4);
                k->matmul_slices(&W, sc, ns, act, stride, ys, R, 4, R);
                if (memcmp(y, ys, (size_t)(ns * R) * 4))
                    fail_msg("slices of %ld x %d, grouped %d tail %d, vnni %d, l2 %d: bits differ from each slice alone", (long)sc,
                             ns, grouped, tail, vnni, vl % 2);
            }
            g4__avx512_vnni = saved;
            g4__prefetch_l2 = saved_l2;
            free(act);
            free(scratch);
        }
        free(w);
        free(x);
        free(row);
        free(y);
        free(ys);
    }
}

/* The avx512 q4_0 paths read a row only within its own bytes, whatever its last group holds
 * (1..16 blocks; whole quads of 4 blocks are read unmasked, the rest masked): each row is followed
 * by 0xff bytes (NaN scales, if read) and the last one by an unmapped page, and every T and layout
 * gives the bits of the same rows packed tight with zeros after them. */
static void test_q4_row_end(void **state) {
    (void)state;
    const g4_kernels *k = g4_kernels_by_name("avx512");
    if (!k) skip();
    const size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    const int R = 5, T = 9, ts[] = {1, 2, 3, 4, 9};
    for (int64_t nb = 1; nb <= 36; nb++) {
        const int64_t K = nb * 32, rb = nb * 18, ld = rb + 64;
        const size_t bytes = (size_t)((R - 1) * ld + rb), span = (bytes + pg - 1) / pg * pg;
        uint8_t *map = mmap(NULL, span + pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        assert_true(map != MAP_FAILED);
        assert_int_equal(mprotect(map + span, pg, PROT_NONE), 0);
        memset(map, 0xff, span);
        uint8_t *w = map + span - bytes, *tight = calloc((size_t)(R * rb) + 4096, 1);
        float *x = malloc((size_t)(T * K) * 4), *y = malloc((size_t)(T * R) * 4), *yt = malloc((size_t)(T * R) * 4);
        for (int64_t i = 0; i < T * K; i++) x[i] = frand();
        for (int r = 0; r < R; r++) g4_quantize_row_q4_0(x + ((r + 3) % T) * K, (g4_block_q4_0 *)(tight + r * rb), K);
        for (int lay = 0; lay <= 2; lay++) {
            const int grouped = lay > 0, tail = lay == 2;
            for (int r = 0; r < R; r++) {
                if (tail) g4_q4_0_ungroup_row(tight + r * rb, nb, 0); /* blocks again */
                if (grouped) g4_q4_0_group_row(tight + r * rb, nb, tail);
                memcpy(w + r * ld, tight + r * rb, (size_t)rb);
            }
            g4_mat W = {.data = w, .dtype = G4_DT_Q4_0, .rows = R, .cols = K, .ld_bytes = ld,
                        .layout = grouped ? G4_Q4_GROUPED : 0, .q4_tail = tail},
                   Wt = W;
            Wt.data = tight;
            Wt.ld_bytes = rb;
            const int saved = g4__avx512_vnni;
            for (int vnni = 0; vnni <= saved; vnni++) {
                g4__avx512_vnni = vnni;
                for (int ti = 0; ti < 5; ti++) {
                    k->matmul(&Wt, x, K, ts[ti], yt, R, 0, R, NULL);
                    k->matmul(&W, x, K, ts[ti], y, R, 0, R, NULL);
                    for (int i = 0; i < ts[ti] * R; i++)
                        if (fbits(y[i]) != fbits(yt[i]) || !isfinite(y[i]))
                            fail_msg("%ld blocks, grouped %d tail %d, vnni %d, T=%d: output %d is %g, packed tight %g", (long)nb,
                                     grouped, tail, vnni, ts[ti], i, y[i], yt[i]);
                }
            }
            g4__avx512_vnni = saved;
        }
        munmap(map, span + pg);
        free(tight);
        free(x);
        free(y);
        free(yt);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_q4_layout),
        cmocka_unit_test(test_q4_grid_roundtrip),
        cmocka_unit_test(test_q4_off_grid),
        cmocka_unit_test(test_q4_nonfinite),
        cmocka_unit_test(test_q4_dequantize),
        cmocka_unit_test(test_q4_matmul_vs_double),
        cmocka_unit_test(test_q4_prefill_blocking),
        cmocka_unit_test(test_q4_grouped),
        cmocka_unit_test(test_q4_slices),
        cmocka_unit_test(test_q4_row_end),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
