/* bench_kernels — per kernel set: matvec (T=1, decode) GB/s on a bf16, a q8_0 and a q4_0
 * 5376x21504 matrix with 1 and 2 threads as a fraction of the STREAM-triad and read-only probes,
 * q4_0 also on a 131072x5376 matrix (396 MB, past the caches) at T = 1..4 (batched decode), and
 * matmul (T=512, prefill) GFLOP/s as a fraction of the FMA-peak probe (int8 ops counted as flops).
 * Threads split the output rows, as the engine does. Usage: bench_kernels [isa ...]   (default:
 * every set this CPU runs) */
#include "kernels/kernels.h"
#include "kernels/probe.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct {
    const g4_kernels *k;
    const g4_mat *W;
    const float *x;
    int T;
    float *y;
    int64_t r0, r1;
    void *scratch;
    size_t scratch_bytes;
} job;

static void *run_job(void *p) {
    job *j = p;
    /* each thread allocates its own scratch (as the engine does): two threads' scratch
     * allocated back to back by one thread slowed both by ~30 % on the development VM */
    if (j->scratch_bytes && !j->scratch) j->scratch = malloc(j->scratch_bytes);
    j->k->matmul(j->W, j->x, j->W->cols, j->T, j->y, j->W->rows, j->r0, j->r1, j->scratch);
    return NULL;
}

/* Best time of `reps` calls, rows split over `threads` threads (row blocks multiple of 16). */
static double time_mm(const g4_kernels *k, const g4_mat *W, const float *x, int T, float *y,
                      int threads, int reps) {
    job jobs[8];
    pthread_t th[8];
    int64_t per = (W->rows / threads + 15) / 16 * 16;
    for (int i = 0; i < threads; i++) {
        int64_t r0 = per * i, r1 = r0 + per < W->rows ? r0 + per : W->rows;
        jobs[i] = (job){k, W, x, T, y, r0 < W->rows ? r0 : W->rows, r1, NULL, k->matmul_scratch_bytes(W, T)};
    }
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        for (int i = 1; i < threads; i++) pthread_create(&th[i], NULL, run_job, &jobs[i]);
        run_job(&jobs[0]);
        for (int i = 1; i < threads; i++) pthread_join(th[i], NULL);
        double dt = now_s() - t0;
        if (dt < best) best = dt;
    }
    for (int i = 0; i < threads; i++) free(jobs[i].scratch);
    return best;
}

int main(int argc, char **argv) {
    const char *names[3];
    int n = 0;
    if (argc > 1) {
        for (int i = 1; i < argc && n < 3; i++) {
            if (!g4_kernels_by_name(argv[i])) {
                fprintf(stderr, "bench_kernels: kernel set '%s' unknown or not supported here\n", argv[i]);
                return 2;
            }
            names[n++] = argv[i];
        }
    } else n = g4_kernels_available(names, 3);

    double bw[3], rd[3];
    for (int t = 1; t <= 2; t++) bw[t] = g4_probe_bandwidth_gbs(t, 0);
    for (int t = 1; t <= 2; t++) rd[t] = g4_probe_read_gbs(t, 0);
    printf("probe: STREAM triad %.1f GB/s (1 thread), %.1f GB/s (2 threads); read-only stream %.1f / %.1f GB/s\n",
           bw[1], bw[2], rd[1], rd[2]);

    /* decode: W [5376][21504] (rows x cols), x one token */
    const int64_t R = 5376, K = 21504;
    uint16_t *wb = malloc((size_t)(R * K) * 2);
    g4_block_q8_0 *wq = malloc((size_t)(R * K / 32) * sizeof(g4_block_q8_0));
    g4_block_q4_0 *w4 = malloc((size_t)(R * K / 32) * sizeof(g4_block_q4_0));
    /* the large q4_0 matrix: 131072 rows of 5376, 64 distinct rows repeated */
    const int64_t RL = 131072, KL = 5376, rbl = (int64_t)g4_dtype_row_bytes(G4_DT_Q4_0, KL);
    char *w4l = malloc((size_t)(RL * rbl));
    float *x = malloc((size_t)(512 * K) * 4), *y = malloc((size_t)(512 * R) * 4);
    float *tmp = malloc((size_t)K * 4);
    if (!wb || !wq || !w4 || !w4l || !x || !y || !tmp) {
        fprintf(stderr, "bench_kernels: out of memory\n");
        return 1;
    }
    uint32_t s = 1;
    for (int64_t i = 0; i < 512 * K; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = (float)(s >> 8) / 16777216.0f - 0.5f;
    }
    for (int64_t r = 0; r < R; r++) {
        for (int64_t c = 0; c < K; c++) {
            s = s * 1664525u + 1013904223u;
            tmp[c] = ((float)(s >> 8) / 16777216.0f - 0.5f) * 0.05f;
            wb[r * K + c] = g4_f32_to_bf16(tmp[c]);
        }
        g4_quantize_row_q8_0(tmp, wq + r * (K / 32), K);
        g4_quantize_row_q4_0(tmp, w4 + r * (K / 32), K);
    }
    for (int64_t r = 0; r < RL; r++)
        if (r < 64) g4_quantize_row_q4_0(x + r * KL, (g4_block_q4_0 *)(w4l + r * rbl), KL); /* any values */
        else memcpy(w4l + r * rbl, w4l + (r % 64) * rbl, (size_t)rbl);
    g4_mat Wb = {.data = wb, .dtype = G4_DT_BF16, .rows = R, .cols = K, .ld_bytes = K * 2};
    g4_mat Wq = {.data = wq, .dtype = G4_DT_Q8_0, .rows = R, .cols = K, .ld_bytes = (int64_t)g4_dtype_row_bytes(G4_DT_Q8_0, K)};
    g4_mat W4 = {.data = w4, .dtype = G4_DT_Q4_0, .rows = R, .cols = K, .ld_bytes = (int64_t)g4_dtype_row_bytes(G4_DT_Q4_0, K)};
    g4_mat W4l = {.data = w4l, .dtype = G4_DT_Q4_0, .rows = RL, .cols = KL, .ld_bytes = rbl};
    /* the same matrix in the grouped layout (kernels.h) that the avx512 set reads */
    char *w4g = malloc((size_t)(RL * rbl));
    if (!w4g) {
        fprintf(stderr, "bench_kernels: out of memory\n");
        return 1;
    }
    memcpy(w4g, w4l, (size_t)(RL * rbl));
    for (int64_t r = 0; r < RL; r++) g4_q4_0_group_row(w4g + r * rbl, KL / 32, 1);
    g4_mat W4g = W4l;
    W4g.data = w4g;
    W4g.layout = G4_Q4_GROUPED;
    W4g.q4_tail = 1;

    for (int i = 0; i < n; i++) {
        const g4_kernels *k = g4_kernels_by_name(names[i]);
        double peak[3];
        for (int t = 1; t <= 2; t++) peak[t] = g4_probe_fma_gflops_isa(k->name, t);
        printf("probe: %s fp32 FMA peak %.1f GFLOP/s (1 thread), %.1f GFLOP/s (2 threads)\n", k->name,
               peak[1], peak[2]);
        for (int th = 1; th <= 2; th++) {
            double tb = time_mm(k, &Wb, x, 1, y, th, 8);
            double gb = (double)(R * K * 2) / tb * 1e-9;
            double tq = time_mm(k, &Wq, x, 1, y, th, 8);
            double gq = (double)(R * K / 32 * 34) / tq * 1e-9;
            double t4 = time_mm(k, &W4, x, 1, y, th, 8);
            double g4 = (double)(R * K / 32 * 18) / t4 * 1e-9;
            printf("%-7s matvec T=1  %d thr: bf16 %6.2f ms %6.1f GB/s = %3.0f%% of triad, %3.0f%% of read | "
                   "q8_0 %6.2f ms %6.1f GB/s = %3.0f%%, %3.0f%% | q4_0 %6.2f ms %6.1f GB/s = %3.0f%%, %3.0f%%\n",
                   k->name, th, tb * 1e3, gb, 100 * gb / bw[th], 100 * gb / rd[th], tq * 1e3, gq,
                   100 * gq / bw[th], 100 * gq / rd[th], t4 * 1e3, g4, 100 * g4 / bw[th], 100 * g4 / rd[th]);
        }
        /* q4_0 decode past the caches, T = 1..4 tokens (batched decode); GB/s of weights */
        for (int th = 1; th <= 2 && strcmp(k->name, "scalar"); th++) /* (scalar: too slow) */
            for (int grouped = 0; grouped <= (g4_q4_0_layout_for(k) == G4_Q4_GROUPED); grouped++) {
                printf("%-7s q4_0%s %ldx%ld %d thr:", k->name, grouped ? " grouped" : "", (long)RL, (long)KL, th);
                for (int T = 1; T <= 4; T++) {
                    double t = time_mm(k, grouped ? &W4g : &W4l, x, T, y, th, 3);
                    double g = (double)(RL * rbl) / t * 1e-9;
                    printf(" T=%d %5.1f GB/s = %3.0f%% of read%s", T, g, 100 * g / rd[th], T < 4 ? " |" : "\n");
                }
            }
        /* prefill: T = 512 tokens on a [4096][5376] slice (scalar: 256 rows, it is slow) */
        g4_mat Wp = {.data = wb, .dtype = G4_DT_BF16, .rows = strcmp(k->name, "scalar") ? 4096 : 256, .cols = 5376,
                     .ld_bytes = 5376 * 2};
        g4_mat Wpq = {.data = wq, .dtype = G4_DT_Q8_0, .rows = Wp.rows, .cols = 5376,
                      .ld_bytes = (int64_t)g4_dtype_row_bytes(G4_DT_Q8_0, 5376)};
        g4_mat Wp4 = {.data = w4, .dtype = G4_DT_Q4_0, .rows = Wp.rows, .cols = 5376,
                      .ld_bytes = (int64_t)g4_dtype_row_bytes(G4_DT_Q4_0, 5376)};
        for (int th = 1; th <= 2; th++) {
            double flops = 2.0 * (double)Wp.rows * 5376 * 512;
            double tp = time_mm(k, &Wp, x, 512, y, th, 2);
            double tpq = time_mm(k, &Wpq, x, 512, y, th, 2);
            double tp4 = time_mm(k, &Wp4, x, 512, y, th, 2);
            printf("%-7s matmul T=512 %d thr (%ldx5376): bf16 %7.1f GFLOP/s = %3.0f%% of FMA peak | q8_0 %7.1f GFLOP/s = %3.0f%%"
                   " | q4_0 %7.1f GFLOP/s = %3.0f%%\n",
                   k->name, th, (long)Wp.rows, flops / tp * 1e-9, 100 * flops / tp * 1e-9 / peak[th],
                   flops / tpq * 1e-9, 100 * flops / tpq * 1e-9 / peak[th], flops / tp4 * 1e-9,
                   100 * flops / tp4 * 1e-9 / peak[th]);
        }
    }
    free(wb);
    free(wq);
    free(w4);
    free(w4l);
    free(w4g);
    free(x);
    free(y);
    free(tmp);
    return 0;
}
