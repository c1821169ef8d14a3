/* bench_q4_tiles — the compute side of the q4_0 / q8_0 matmuls that the int8 peak and the
 * row-parallel decode depend on, one thread, CPU time (which leaves out preemption, so the figures
 * hold on a shared host; alternate builds to compare), against this machine's int8 dot-product
 * probe (g4_probe_int8_gops, 1 thread) measured in the same run:
 *   prefill R K T [q4|q8]  the prepared matmul of T tokens over an R x K matrix (grouped q4_0 as
 *                          the avx512 set reads it), GOP/s (2 per product) and % of the probe;
 *   slices R SC NS         q4_matmul_slices over R rows of NS column slices of SC columns each
 *                          (grouped per slice, as the row-parallel decode reads o_proj/down_proj),
 *                          weight GB/s per thread and cycles per slice at 3.37 GHz.
 * Each prints a hash of its output bits (equal hashes across builds: the same bits).
 * Usage: bench_q4_tiles prefill 10752 5376 128 | bench_q4_tiles slices 64 1344 8 (avx512 only) */
#include "kernels/kernels.h"
#include "kernels/probe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static unsigned hash_bits(const float *y, int64_t n) {
    unsigned h = 0;
    for (int64_t i = 0; i < n; i++) {
        unsigned u;
        memcpy(&u, &y[i], 4);
        h = h * 31 + u;
    }
    return h;
}

static void fill(float *x, int64_t n) {
    uint32_t s = 7;
    for (int64_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = (float)(s >> 8) / 16777216.0f - 0.5f;
    }
}

static int prefill(const g4_kernels *k, int64_t R, int64_t K, int T, int q8) {
    const int dt = q8 ? G4_DT_Q8_0 : G4_DT_Q4_0;
    const size_t rb = g4_dtype_row_bytes(dt, K);
    char *w = malloc((size_t)R * rb);
    float *x = malloc(sizeof(float) * (size_t)T * (size_t)K), *y = malloc(sizeof(float) * (size_t)T * (size_t)R);
    if (!w || !x || !y) return 1;
    fill(x, (int64_t)T * K);
    for (int64_t r = 0; r < R; r++) {
        if (q8) g4_quantize_row_q8_0(x + (r % T) * K, (void *)(w + r * rb), K);
        else g4_quantize_row_q4_0(x + (r % T) * K, (void *)(w + r * rb), K);
    }
    g4_mat W = {.data = w, .dtype = dt, .rows = R, .cols = K, .ld_bytes = (int64_t)rb};
    if (!q8 && g4_q4_0_layout_for(k) == G4_Q4_GROUPED) {
        for (int64_t r = 0; r < R; r++) g4_q4_0_group_row(w + r * rb, K / 32);
        W.layout = G4_Q4_GROUPED;
        W.layout_cols = K;
    }
    void *act = aligned_alloc(64, (k->matmul_act_bytes(&W, T) + 63) / 64 * 64), *scratch = malloc(k->matmul_scratch_bytes(&W, T));
    if (!act || !scratch) return 1;
    k->matmul_prepare(&W, x, K, T, act);
    double best = 1e30;
    for (int it = 0; it < 25; it++) {
        const double t0 = cpu_s();
        k->matmul_prepared(&W, act, T, y, R, 0, R, scratch);
        const double t = cpu_s() - t0;
        if (t < best) best = t;
    }
    const double gops = 2.0 * (double)R * (double)K * T / best * 1e-9, peak = g4_probe_int8_gops(1);
    printf("%s prefill %ldx%ld T=%d: %.1f GOP/s = %.1f %% of the int8 probe (%.0f GOP/s, 1 thread); bits %08x\n",
           q8 ? "q8_0" : "q4_0", (long)R, (long)K, T, gops, 100 * gops / peak, peak, hash_bits(y, (int64_t)T * R));
    free(w), free(x), free(y), free(act), free(scratch);
    return 0;
}

static int slices(const g4_kernels *k, int64_t R, int64_t SC, int NS) {
    if (!k->q4_matmul_slices) return fprintf(stderr, "bench_q4_tiles: set %s has no q4_matmul_slices\n", k->name), 2;
    const int64_t K = SC * NS, snb = SC / 32;
    const size_t rb = g4_dtype_row_bytes(G4_DT_Q4_0, K);
    char *w = malloc((size_t)R * rb);
    float *x = malloc(sizeof(float) * (size_t)K), *y = malloc(sizeof(float) * (size_t)R * (size_t)NS);
    if (!w || !x || !y) return 1;
    fill(x, K);
    for (int64_t r = 0; r < R; r++) {
        g4_quantize_row_q4_0(x, (void *)(w + r * rb), K);
        for (int s = 0; s < NS; s++) g4_q4_0_group_row(w + r * rb + (size_t)s * (size_t)snb * sizeof(g4_block_q4_0), snb);
    }
    g4_mat W = {.data = w, .dtype = G4_DT_Q4_0, .rows = R, .cols = K, .ld_bytes = (int64_t)rb, .layout = G4_Q4_GROUPED, .layout_cols = SC};
    g4_mat S = W;
    S.cols = SC;
    const size_t ab = (k->matmul_act_bytes(&S, 1) + 63) / 64 * 64;
    char *act = aligned_alloc(64, ab * (size_t)NS);
    if (!act) return 1;
    for (int s = 0; s < NS; s++) k->matmul_prepare(&S, x + s * SC, SC, 1, act + (size_t)s * ab);
    double best = 1e30;
    for (int rep = 0; rep < 5; rep++) {
        const double t0 = cpu_s();
        for (int it = 0; it < 200; it++) k->q4_matmul_slices(&W, SC, NS, act, ab, y, R, 0, R);
        const double t = (cpu_s() - t0) / 200;
        if (t < best) best = t;
    }
    printf("q4_0 slices %ld rows x %d slices of %ld columns: %.1f GB/s of weights (%.1f cycles a slice at 3.37 GHz); bits %08x\n",
           (long)R, NS, (long)SC, (double)R * (double)rb / best * 1e-9, best * 3.37e9 / (double)(R * NS), hash_bits(y, R * NS));
    free(w), free(x), free(y), free(act);
    return 0;
}

int main(int argc, char **argv) {
    const g4_kernels *k = g4_kernels_by_name("avx512");
    const int pre = argc >= 5 && !strcmp(argv[1], "prefill"), sl = argc == 5 && !strcmp(argv[1], "slices");
    const long long a = argc >= 5 ? atoll(argv[2]) : 0, b = argc >= 5 ? atoll(argv[3]) : 0, c = argc >= 5 ? atoll(argv[4]) : 0;
    if ((!pre && !sl) || a <= 0 || b <= 0 || b % 32 || c <= 0 || c > 4096 ||
        (pre && argc == 6 && strcmp(argv[5], "q4") && strcmp(argv[5], "q8")) || argc > 6) {
        fprintf(stderr, "usage: bench_q4_tiles prefill ROWS COLS T [q4|q8] | slices ROWS SLICE_COLS NSLICES (COLS a multiple of 32)\n");
        return 2;
    }
    if (!k) {
        fprintf(stderr, "bench_q4_tiles: this CPU does not run the avx512 set\n");
        return 2;
    }
    return pre ? prefill(k, a, b, (int)c, argc == 6 && !strcmp(argv[5], "q8")) : slices(k, a, b, (int)c);
}
