/* bench_fastmath — the fast math mode's kernel cells next to the exact ones: bf16 matmul
 * T = 512 on 4096 x 5376 (bench_kernels' prefill shape) and T = 1 on 5376 x 21504, exact vs fast,
 * alternating, 1 and 2 threads (rows split in halves, each thread its own scratch). Prints
 * GFLOP/s (2 flops per multiply-add) by wall time and by thread CPU time, best of N rounds.
 * usage: bench_fastmath [isa] [rounds] */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/kernels.h"
#include "kernels/kernels_fast.h"

typedef struct {
    const g4_kernels *k;
    const g4_mat *W;
    const float *x;
    float *y;
    int T;
    int64_t r0, r1;
    void *scr;
    double cpu;
} job;

static double now(clockid_t c) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *work(void *p) {
    job *j = p;
    double c0 = now(CLOCK_THREAD_CPUTIME_ID);
    j->k->matmul(j->W, j->x, j->W->cols, j->T, j->y, j->W->rows, j->r0, j->r1, j->scr);
    j->cpu = now(CLOCK_THREAD_CPUTIME_ID) - c0;
    return NULL;
}

/* One call over all rows with nth threads; returns wall seconds, *cpu the slowest thread's. */
static double run(const g4_kernels *k, const g4_mat *W, const float *x, float *y, int T, int nth, void **scr, double *cpu) {
    job j[2];
    pthread_t th[2];
    double t0 = now(CLOCK_MONOTONIC);
    for (int i = 0; i < nth; i++) {
        j[i] = (job){k, W, x, y, T, W->rows * i / nth, W->rows * (i + 1) / nth, scr[i], 0};
        pthread_create(&th[i], NULL, work, &j[i]);
    }
    *cpu = 0;
    for (int i = 0; i < nth; i++) {
        pthread_join(th[i], NULL);
        if (j[i].cpu > *cpu) *cpu = j[i].cpu;
    }
    return now(CLOCK_MONOTONIC) - t0;
}

int main(int argc, char **argv) {
    const g4_kernels *base = argc > 1 ? g4_kernels_by_name(argv[1]) : g4_kernels_get();
    int rounds = argc > 2 ? atoi(argv[2]) : 4;
    if (!base || rounds < 1) { fprintf(stderr, "usage: bench_fastmath [scalar|avx2|avx512] [rounds]\n"); return 2; }
    const struct { int64_t R, K; int T; } cells[] = {{4096, 5376, 512}, {5376, 21504, 1}};
    for (int c = 0; c < 2; c++) {
        const int64_t R = cells[c].R, K = cells[c].K;
        const int T = cells[c].T;
        uint16_t *w = malloc((size_t)(R * K) * 2);
        float *x = malloc(sizeof(float) * (size_t)(K * T)), *y = malloc(sizeof(float) * (size_t)(R * T));
        for (int64_t i = 0; i < R * K; i++) w[i] = g4_f32_to_bf16((float)((i * 2654435761u) % 2001) / 1000.0f - 1.0f);
        for (int64_t i = 0; i < K * T; i++) x[i] = (float)((i * 40503u) % 1999) / 999.0f - 1.0f;
        g4_mat W = {.data = w, .dtype = G4_DT_BF16, .rows = R, .cols = K, .ld_bytes = K * 2};
        for (int nth = 1; nth <= 2; nth++) {
            double best[2] = {1e30, 1e30}, bcpu[2] = {1e30, 1e30};
            for (int r = 0; r < rounds; r++)
                for (int m = 0; m < 2; m++) { /* exact, fast, alternating */
                    const g4_kernels *k = g4_kernels_math(base, m);
                    void *scr[2];
                    for (int i = 0; i < nth; i++) scr[i] = malloc(k->matmul_scratch_bytes(&W, T));
                    double cpu, t = run(k, &W, x, y, T, nth, scr, &cpu);
                    if (t < best[m]) best[m] = t;
                    if (cpu < bcpu[m]) bcpu[m] = cpu;
                    for (int i = 0; i < nth; i++) free(scr[i]);
                }
            const double fl = 2.0 * (double)R * (double)K * T;
            printf("%s bf16 T=%d %lldx%lld %d thread%s: exact %.1f GFLOP/s (cpu %.1f), fast %.1f (cpu %.1f), fast/exact %.2f%s\n",
                   base->name, T, (long long)R, (long long)K, nth, nth > 1 ? "s" : "", fl / best[0] / 1e9, fl / bcpu[0] / 1e9,
                   fl / best[1] / 1e9, fl / bcpu[1] / 1e9, best[0] / best[1], T == 1 ? " (T=1: GB/s = GFLOP/s)" : "");
        }
        free(w), free(x), free(y);
    }
    return 0;
}
