/* probe.c — machine probes used to put kernel speeds in context (bench/bench_kernels,
 * `g4tp bench`): a STREAM-triad-like bandwidth and the fp32 FMA peak of the chosen kernel set.
 * Owns only timing and threads; the FMA loops themselves live in the ISA files (they need the
 * ISA's compile flags). Knows nothing about models. */
#include "kernels/probe.h"
#include "kernels/kernels.h"
#include "kernels/kernels_internal.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
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
    /* fma and dot products */
    long iters;
    const char *isa;
    int dot;                /* 1 int8 VNNI, 2 bf16 */
    /* regions */
    const g4_mem_region *reg;
    int n_reg;
    size_t reg_total;
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

/* The CPUs a team may use: the caller's own mask when it has a CPU for every thread (a cpuset or
 * taskset is respected), else (the caller is an engine thread pinned to one core) every online
 * CPU. */
static void team_cpus(int n, const cpu_set_t *caller, int have_caller, cpu_set_t *out) {
    if (have_caller && CPU_COUNT(caller) >= n) {
        *out = *caller;
        return;
    }
    CPU_ZERO(out);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    for (long c = 0; c < ncpu && c < CPU_SETSIZE; c++) CPU_SET((int)c, out);
    if (have_caller) CPU_OR(out, out, caller);
}

/* Thread i's CPU: the i-th CPU of the set (wrapping). Pinned, the team cannot end up two threads
 * to a core: left to the scheduler, a helper created by a pinned caller often starts on the
 * caller's core and stays there for a short probe. */
static int team_cpu(const cpu_set_t *set, int i) {
    const int n = CPU_COUNT(set);
    int k = n > 0 ? i % n : 0;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, set) && k-- == 0) return c;
    return 0;
}

/* Creates a helper pinned to `cpu`, else confined to `set`; never with the caller's own mask,
 * which is one CPU while the probe runs. */
static int create_helper(pthread_t *th, worker_arg *arg, int cpu, const cpu_set_t *set) {
    for (int attempt = 0; attempt < 2; attempt++) {
        pthread_attr_t attr;
        if (pthread_attr_init(&attr) != 0) break;
        cpu_set_t m;
        CPU_ZERO(&m);
        CPU_SET(cpu, &m);
        int rc = pthread_attr_setaffinity_np(&attr, sizeof m, attempt == 0 ? &m : set);
        if (rc == 0) rc = pthread_create(th, &attr, worker, arg);
        pthread_attr_destroy(&attr);
        if (rc == 0) return 0;
    }
    return pthread_create(th, NULL, worker, arg);
}

/* Runs `passes` passes of fn on n threads; returns the best wall time, or -1. The caller is
 * thread 0, pinned to its CPU for the probe and given its own mask back after. */
static double team_run(team *t, team_fn fn, int passes) {
    pthread_t th[MAXT];
    worker_arg args[MAXT];
    double best = -1;
    t->fn = fn;
    cpu_set_t saved, set, one;
    const int have_saved = pthread_getaffinity_np(pthread_self(), sizeof saved, &saved) == 0;
    team_cpus(t->n, &saved, have_saved, &set);
    CPU_ZERO(&one);
    CPU_SET(team_cpu(&set, 0), &one);
    if (have_saved) pthread_setaffinity_np(pthread_self(), sizeof one, &one); /* may fail: fine */
    for (int p = 0; p < passes; p++) {
        int started = 1, ok = 1;
        double t0 = now_s();
        for (int i = 1; i < t->n; i++) {
            args[i] = (worker_arg){t, i};
            if (create_helper(&th[i], &args[i], team_cpu(&set, i), &set) != 0) { ok = 0; break; }
            started++;
        }
        fn(t, 0);
        for (int i = 1; i < started; i++) pthread_join(th[i], NULL);
        double dt = now_s() - t0;
        if (!ok) break;
        if (best < 0 || dt < best) best = dt;
    }
    if (have_saved) pthread_setaffinity_np(pthread_self(), sizeof saved, &saved);
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

/* Read-only stream: every line of a read once, nothing written. 16-byte vectors (no ISA flags in
 * this file) and four independent accumulators, so the loop issues loads, not a chain. */
typedef unsigned long long u64x2 __attribute__((vector_size(16), may_alias));
static void read_pass(team *t, int tid) {
    size_t lo, hi;
    slice(t, tid, &lo, &hi);
    u64x2 s0 = {0, 0}, s1 = s0, s2 = s0, s3 = s0;
    const u64x2 *v = (const u64x2 *)(t->a + lo); /* lo is a multiple of 16 floats */
    const size_t n = (hi - lo) / 4;
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 ^= v[i];
        s1 ^= v[i + 1];
        s2 ^= v[i + 2];
        s3 ^= v[i + 3];
    }
    for (; i < n; i++) s0 ^= v[i];
    u64x2 s = s0 ^ s1 ^ s2 ^ s3;
    t->sink[tid] = (float)(s[0] ^ s[1]);
}

static void read_init(team *t, int tid) {
    size_t lo, hi;
    slice(t, tid, &lo, &hi);
    for (size_t i = lo; i < hi; i++) t->a[i] = (float)(i & 1023);
}

/* The last-level cache's size: the largest cache level sysfs lists for cpu0, else glibc's L3
 * figure, else 32 MiB. The development VM's L3 is 480 MiB: a 120 MiB triad ran from it. */
size_t g4_probe_llc_bytes(void) {
    size_t best = 0;
    int best_level = 0;
    for (int i = 0; i < 16; i++) {
        char path[96], buf[32];
        int level = 0;
        unsigned long long kb = 0;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
        FILE *f = fopen(path, "r");
        if (!f) break;
        if (fgets(buf, sizeof buf, f)) level = atoi(buf);
        fclose(f);
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        if (!(f = fopen(path, "r"))) continue;
        if (fgets(buf, sizeof buf, f)) {
            char *end;
            kb = strtoull(buf, &end, 10);
            if (*end == 'M') kb <<= 10;
        }
        fclose(f);
        if (level > best_level || (level == best_level && kb * 1024 > best)) { best_level = level; best = (size_t)kb * 1024; }
    }
#ifdef _SC_LEVEL3_CACHE_SIZE
    if (!best) {
        long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
        if (l3 > 0) best = (size_t)l3;
    }
#endif
    return best ? best : (size_t)32 << 20;
}

size_t g4_probe_stream_bytes(void) {
    size_t b = 4 * g4_probe_llc_bytes();
    const long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    const size_t cap = pages > 0 && psz > 0 ? (size_t)pages * (size_t)psz / 8 : (size_t)1 << 30;
    if (b < ((size_t)256 << 20)) b = (size_t)256 << 20;
    return b < cap ? b : cap;
}

/* Passes for a buffer of `bytes`: best of up to 8, fewer for big buffers (~4 GiB streamed in all),
 * so a probe stays around a second. */
static int passes_for(size_t bytes, int most) {
    size_t p = ((size_t)4 << 30) / (bytes ? bytes : 1);
    return p < 2 ? 2 : p > (size_t)most ? most : (int)p;
}

static size_t probe_bytes(size_t bytes) {
    if (!bytes) bytes = g4_probe_stream_bytes();
    return bytes < ((size_t)1 << 20) ? (size_t)1 << 20 : bytes;
}

struct g4_bw_probe {
    team t;
};

g4_bw_probe *g4_bw_probe_new(int threads, size_t bytes) {
    if (threads < 1 || threads > MAXT) return NULL;
    g4_bw_probe *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    team *t = &p->t;
    t->n = threads;
    const size_t huge = (size_t)2 << 20, arr = (probe_bytes(bytes) / 3 + huge - 1) & ~(huge - 1);
    t->len = arr / 4;
    t->a = aligned_alloc(huge, arr);
    t->b = aligned_alloc(huge, arr);
    t->c = aligned_alloc(huge, arr);
    if (!t->a || !t->b || !t->c) { g4_bw_probe_free(p); return NULL; }
    /* transparent huge pages make the first touch cheap */
    madvise(t->a, arr, MADV_HUGEPAGE);
    madvise(t->b, arr, MADV_HUGEPAGE);
    madvise(t->c, arr, MADV_HUGEPAGE);
    if (team_run(t, triad_init, 1) <= 0) { g4_bw_probe_free(p); return NULL; }
    return p;
}

size_t g4_bw_probe_bytes(const g4_bw_probe *p) { return p ? 3 * 4 * p->t.len : 0; }

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

double g4_probe_bandwidth_gbs(int threads, size_t bytes) {
    g4_bw_probe *p = g4_bw_probe_new(threads, bytes);
    double gbs = g4_bw_probe_run(p, passes_for(g4_bw_probe_bytes(p), 8));
    g4_bw_probe_free(p);
    return gbs;
}

double g4_probe_read_gbs(int threads, size_t bytes) {
    if (threads < 1 || threads > MAXT) return -1;
    team t;
    memset(&t, 0, sizeof t);
    t.n = threads;
    const size_t huge = (size_t)2 << 20, total = (probe_bytes(bytes) + huge - 1) & ~(huge - 1);
    t.len = total / 4;
    if (!(t.a = aligned_alloc(huge, total))) return -1;
    madvise(t.a, total, MADV_HUGEPAGE);
    double best = team_run(&t, read_init, 1) > 0 ? team_run(&t, read_pass, passes_for(total, 6)) : -1;
    free(t.a);
    return best > 0 ? 4.0 * (double)t.len / best * 1e-9 : -1;
}

/* XOR of bytes [a, b) of one contiguous run. */
static uint64_t read_run(const unsigned char *p, const unsigned char *e) {
    u64x2 s0 = {0, 0}, s1 = s0, s2 = s0, s3 = s0;
    uint64_t tail = 0;
    while (p < e && ((uintptr_t)p & 15)) tail ^= *p++;
    const u64x2 *v = (const u64x2 *)p;
    const size_t n = (size_t)(e - p) / 16;
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 ^= v[i];
        s1 ^= v[i + 1];
        s2 ^= v[i + 2];
        s3 ^= v[i + 3];
    }
    for (; i < n; i++) s0 ^= v[i];
    for (p += n * 16; p < e; p++) tail ^= *p;
    u64x2 s = s0 ^ s1 ^ s2 ^ s3;
    return s[0] ^ s[1] ^ tail;
}

/* Bytes [lo, hi) of the regions' rows laid end to end. */
static uint64_t read_bytes(const team *t, size_t lo, size_t hi) {
    uint64_t x = 0;
    size_t base = 0;
    for (int r = 0; r < t->n_reg && base < hi; r++) {
        const g4_mem_region *g = &t->reg[r];
        const size_t tot = g->n * g->rows;
        if (lo < base + tot)
            for (size_t row = lo > base ? (lo - base) / g->n : 0; row < g->rows && base + row * g->n < hi; row++) {
                const size_t r0 = base + row * g->n, a = lo > r0 ? lo - r0 : 0, b = hi - r0 < g->n ? hi - r0 : g->n;
                const unsigned char *p = (const unsigned char *)g->p + row * g->stride;
                x ^= read_run(p + a, p + b);
            }
        base += tot;
    }
    return x;
}

static void regions_pass(team *t, int tid) {
    const size_t per = (t->reg_total / (size_t)t->n + 4095) & ~(size_t)4095;
    const size_t lo = per * (size_t)tid, hi = lo + per < t->reg_total ? lo + per : t->reg_total;
    t->sink[tid] = lo < hi ? (float)read_bytes(t, lo, hi) : 0;
}

double g4_probe_read_regions_gbs(int threads, const g4_mem_region *r, int n_regions, int passes) {
    if (threads < 1 || threads > MAXT || n_regions < 1 || passes < 1) return -1;
    team t;
    memset(&t, 0, sizeof t);
    t.n = threads;
    t.reg = r;
    t.n_reg = n_regions;
    for (int i = 0; i < n_regions; i++) t.reg_total += r[i].n * r[i].rows;
    if (!t.reg_total) return -1;
    const double best = team_run(&t, regions_pass, passes);
    return best > 0 ? (double)t.reg_total / best * 1e-9 : -1;
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

/* The dot-product probes (avx512 only). */
static void dot_pass(team *t, int tid) {
    t->flops[tid] = t->dot == 1 ? g4__vnni_burn_avx512(t->iters, &t->sink[tid]) : g4__bf16_burn_avx512(t->iters, &t->sink[tid]);
}

static double dot_peak(int dot, int threads) {
    if (threads < 1 || threads > MAXT || !g4_kernels_by_name("avx512")) return -1;
    __builtin_cpu_init();
    if (dot == 1 ? !__builtin_cpu_supports("avx512vnni") : !__builtin_cpu_supports("avx512bf16")) return -1;
    team t;
    memset(&t, 0, sizeof t);
    t.dot = dot;
    t.n = threads;
    t.iters = 2000000;
    double best = team_run(&t, dot_pass, 5);
    if (best <= 0) return -1;
    double ops = 0;
    for (int i = 0; i < threads; i++) ops += t.flops[i];
    return ops / best * 1e-9;
}

double g4_probe_int8_gops(int threads) { return dot_peak(1, threads); }
double g4_probe_bf16_gflops(int threads) { return dot_peak(2, threads); }

double g4_probe_fma_gflops(int threads) {
    return g4_probe_fma_gflops_isa(g4_kernels_get()->name, threads);
}
