/* bench_comm.c — all-reduce latency and bandwidth by message size, per backend.
 *   build/bench/bench_comm [ranks]                      threads backend (default 2 ranks)
 *   mpirun -np 2 build/bench/bench_comm --mpi            MPI backend
 * Bandwidth is reported as the algorithm's bytes (the message size) per second, like the
 * "algbw" of nccl-tests. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tp/comm.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static const size_t sizes[] = {256, 4096, 21504, 65536, 262144, 1048576, 4194304, 16777216};
#define NSIZES (sizeof sizes / sizeof *sizes)
#define MAXF (16777216 / 4)

typedef struct { g4_comm *c; double t[NSIZES]; } arg_t;

static void run(g4_comm *c, double *t) {
    float *buf = malloc(MAXF * sizeof(float));
    for (size_t i = 0; i < MAXF; i++) buf[i] = (float)(i % 7);
    for (size_t s = 0; s < NSIZES; s++) {
        size_t n = sizes[s] / 4;
        int reps = sizes[s] <= 65536 ? 2000 : sizes[s] <= 1048576 ? 200 : 20;
        for (int w = 0; w < 3; w++) g4_comm_allreduce_sum(c, buf, n);
        g4_comm_barrier(c);
        double t0 = now_s();
        for (int r = 0; r < reps; r++) g4_comm_allreduce_sum(c, buf, n);
        g4_comm_barrier(c);
        t[s] = (now_s() - t0) / reps;
    }
    free(buf);
}

static void *thread_main(void *p) {
    arg_t *a = p;
    run(a->c, a->t);
    return NULL;
}

static void report(const char *backend, int ranks, const double *t) {
    printf("%s backend, %d ranks\n%12s %14s %14s\n", backend, ranks, "bytes", "latency us", "algbw GB/s");
    for (size_t s = 0; s < NSIZES; s++) printf("%12zu %14.2f %14.2f\n", sizes[s], t[s] * 1e6, (double)sizes[s] / t[s] / 1e9);
}

int main(int argc, char **argv) {
    g4_err err = {0};
    if (argc > 1 && !strcmp(argv[1], "--mpi")) {
        g4_comm *c;
        if (g4_comm_mpi_create(MAXF, &c, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
        double t[NSIZES];
        run(c, t);
        if (c->rank == 0) report("mpi", c->size, t);
        g4_comm_free(c);
        g4_comm_mpi_finalize();
        return 0;
    }
    int n = argc > 1 ? atoi(argv[1]) : 2;
    if (n < 1 || n > 64) { fprintf(stderr, "ranks must be 1..64\n"); return 2; }
    g4_comm *h[64];
    if (g4_comm_local_create(n, MAXF, h, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    pthread_t th[64];
    arg_t a[64];
    for (int r = 0; r < n; r++) { a[r].c = h[r]; pthread_create(&th[r], NULL, thread_main, &a[r]); }
    for (int r = 0; r < n; r++) pthread_join(th[r], NULL);
    report("threads", n, a[0].t);
    for (int r = 0; r < n; r++) g4_comm_free(h[r]);
    return 0;
}
