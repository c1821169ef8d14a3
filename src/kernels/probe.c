/* probe.c — machine probes used to put kernel speeds in context (bench/bench_kernels,
 * `g4tp bench`): a STREAM-triad-like bandwidth and the fp32 FMA peak of the chosen kernel set.
 * Owns only timing and threads; the FMA loops themselves live in the ISA files (they need the
 * ISA's compile flags). Knows nothing about models. */
#include "kernels/probe.h"
#include "kernels/kernels.h"
#include "kernels/kernels_internal.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define MAXT 64

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A team of n threads running fn(team, tid) once per pass; the caller is thread 0. Threads are
 * created per pass (tens of microseconds, against passes of milliseconds). */
typedef struct team team;
typedef void (*team_fn)(team *t, int tid);
struct team {
    int n;
    team_fn fn;
    /* triad */
    float *a, *b, *c;
    size_t len;
    /* fma */
    long iters;
    const char *isa;
    float sink[MAXT];
    double flops[MAXT];
};
typedef struct {
    team *t;
    int tid;
} worker_arg;

static void *worker(void *p) {
    worker_arg *w = p;
    w->t->fn(w->t, w->tid);
    return NULL;
}

/* Runs `passes` passes of fn on n threads; returns the best wall time, or -1. */
static double team_run(team *t, team_fn fn, int passes) {
    pthread_t th[MAXT];
    worker_arg args[MAXT];
    double best = -1;
    t->fn = fn;
    /* the helpers may run on any CPU: threads inherit their creator's mask, and the caller may be
     * an engine thread pinned to one core */
    pthread_attr_t attr;
    cpu_set_t all;
    CPU_ZERO(&all);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    for (long c = 0; c < ncpu && c < CPU_SETSIZE; c++) CPU_SET((int)c, &all);
    int have_attr = pthread_attr_init(&attr) == 0;
    if (have_attr && pthread_attr_setaffinity_np(&attr, sizeof all, &all) != 0) {
        pthread_attr_destroy(&attr);
        have_attr = 0;
    }
    for (int p = 0; p < passes; p++) {
        int started = 1, ok = 1;
        double t0 = now_s();
        for (int i = 1; i < t->n; i++) {
            args[i] = (worker_arg){t, i};
            if (pthread_create(&th[i], have_attr ? &attr : NULL, worker, &args[i]) != 0 &&
                pthread_create(&th[i], NULL, worker, &args[i]) != 0) { ok = 0; break; }
            started++;
        }
        fn(t, 0);
        for (int i = 1; i < started; i++) pthread_join(th[i], NULL);
        double dt = now_s() - t0;
        if (!ok) break;
        if (best < 0 || dt < best) best = dt;
    }
    if (have_attr) pthread_attr_destroy(&attr);
    return best;
}

static void slice(const team *t, int tid, size_t *lo, size_t *hi) {
    size_t per = (t->len / (size_t)t->n + 15) & ~(size_t)15;
    *lo = per * (size_t)tid;
    *hi = *lo + per < t->len ? *lo + per : t->len;
    if (*lo > t->len) *lo = t->len;
}

static void triad_init(team *t, int tid) {
    size_t lo, hi;
    slice(t, tid, &lo, &hi);
    for (size_t i = lo; i < hi; i++) {
        t->a[i] = 0.0f;
        t->b[i] = 1.0f;
        t->c[i] = 2.0f;
    }
}

static void triad(team *t, int tid) {
    size_t lo, hi;
    slice(t, tid, &lo, &hi);
    float *restrict a = t->a;
    const float *restrict b = t->b, *restrict c = t->c;
    for (size_t i = lo; i < hi; i++) a[i] = b[i] + 3.0f * c[i];
}

struct g4_bw_probe {
    team t;
};

g4_bw_probe *g4_bw_probe_new(int threads) {
    if (threads < 1 || threads > MAXT) return NULL;
    g4_bw_probe *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    team *t = &p->t;
    t->n = threads;
    t->len = (size_t)10 << 20; /* 10 Mi floats = 40 MiB per array, 120 MiB in all: beyond L3 */
    const size_t bytes = t->len * 4, huge = (size_t)2 << 20;
    t->a = aligned_alloc(huge, bytes);
    t->b = aligned_alloc(huge, bytes);
    t->c = aligned_alloc(huge, bytes);
    if (!t->a || !t->b || !t->c) { g4_bw_probe_free(p); return NULL; }
    /* transparent huge pages make the first touch cheap (the probe must stay < 1 s) */
    madvise(t->a, bytes, MADV_HUGEPAGE);
    madvise(t->b, bytes, MADV_HUGEPAGE);
    madvise(t->c, bytes, MADV_HUGEPAGE);
    if (team_run(t, triad_init, 1) <= 0) { g4_bw_probe_free(p); return NULL; }
    return p;
}

double g4_bw_probe_run(g4_bw_probe *p, int passes) {
    double best = p ? team_run(&p->t, triad, passes) : -1;
    return best > 0 ? 3.0 * 4.0 * (double)p->t.len / best * 1e-9 : -1;
}

void g4_bw_probe_free(g4_bw_probe *p) {
    if (!p) return;
    free(p->t.a);
    free(p->t.b);
    free(p->t.c);
    free(p);
}

double g4_probe_bandwidth_gbs(int threads) {
    g4_bw_probe *p = g4_bw_probe_new(threads);
    double gbs = g4_bw_probe_run(p, 8);
    g4_bw_probe_free(p);
    return gbs;
}

static void fma_pass(team *t, int tid) {
    const char *name = t->isa;
    if (strcmp(name, "avx512") == 0) t->flops[tid] = g4__fma_burn_avx512(t->iters, &t->sink[tid]);
    else if (strcmp(name, "avx2") == 0) t->flops[tid] = g4__fma_burn_avx2(t->iters, &t->sink[tid]);
    else { /* scalar: what the compiler makes of plain fp32 multiply-adds */
        float a[16];
        for (int i = 0; i < 16; i++) a[i] = (float)i;
        for (long it = 0; it < t->iters; it++)
            for (int i = 0; i < 16; i++) a[i] = a[i] * 0.999999f + 1e-7f;
        float s = 0;
        for (int i = 0; i < 16; i++) s += a[i];
        t->sink[tid] = s;
        t->flops[tid] = (double)t->iters * 16 * 2;
    }
}

double g4_probe_fma_gflops_isa(const char *isa, int threads) {
    if (threads < 1 || threads > MAXT || !g4_kernels_by_name(isa)) return -1;
    team t;
    memset(&t, 0, sizeof t);
    t.n = threads;
    t.isa = g4_kernels_by_name(isa)->name;
    t.iters = 2000000; /* avx512: 2e6 x 12 FMAs ~ 12M cycles at 2 FMA/cycle */
    if (strcmp(t.isa, "scalar") == 0) t.iters = 200000;
    double best = team_run(&t, fma_pass, 5);
    if (best <= 0) return -1;
    double flops = 0;
    for (int i = 0; i < threads; i++) flops += t.flops[i];
    return flops / best * 1e-9;
}

double g4_probe_fma_gflops(int threads) {
    return g4_probe_fma_gflops_isa(g4_kernels_get()->name, threads);
}
