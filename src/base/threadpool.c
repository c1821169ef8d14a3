/* threadpool.c — see threadpool.h. Workers wait on a generation counter: spin for a short
 * while (decode issues many small parallel regions per token), then block on a condition
 * variable so idle ranks do not burn the CPU. */
#include "base/threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct g4_pool {
    int n;
    pthread_t *threads;
    int *cpus;
    g4_pool_fn fn;
    void *ctx;
    atomic_long gen;        /* bumped to start a run */
    atomic_int remaining;   /* workers still running the current run */
    atomic_int stop;
    pthread_mutex_t mu;
    pthread_cond_t cv_start, cv_done;
    atomic_int sleepers;
    int counted;            /* added to threads_live */
    /* Thread 0 is whichever thread calls g4_pool_run; it is pinned to cpus[0] on its first run
     * (not at create: the thread that opens an engine goes on to start server threads, which
     * would inherit the pin) and gets its old mask back at g4_pool_free. */
    int caller_pinned;
    pthread_t caller;
    cpu_set_t caller_mask;
};

static atomic_long threads_created;
static atomic_int threads_live; /* threads of all pools, callers included */
long g4_pool_threads_created(void) { return atomic_load(&threads_created); }

/* Spinning only pays when every waiting thread has a core; oversubscribed (e.g. TP 8 on 2
 * cores), waiters sleep almost at once so the threads doing work get the CPU. */
int g4_spin_budget(void) {
    static int ncpu;
    if (!ncpu) ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN);
    return atomic_load(&threads_live) > ncpu ? 50 : 20000;
}

typedef struct { g4_pool *p; int i; } worker_arg;

static void pin(int cpu) {
    if (cpu < 0) return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}


static void *worker(void *arg) {
    worker_arg wa = *(worker_arg *)arg;
    free(arg);
    g4_pool *p = wa.p;
    if (p->cpus) pin(p->cpus[wa.i]);
    long seen = 0;
    for (;;) {
        long g;
        int spins = 0;
        while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen && !atomic_load(&p->stop)) {
            if (++spins < g4_spin_budget()) {
#if defined(__x86_64__)
                __builtin_ia32_pause();
#endif
                continue;
            }
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->sleepers, 1);
            while (atomic_load(&p->gen) == seen && !atomic_load(&p->stop)) pthread_cond_wait(&p->cv_start, &p->mu);
            atomic_fetch_sub(&p->sleepers, 1);
            pthread_mutex_unlock(&p->mu);
            spins = 0;
        }
        if (atomic_load(&p->stop)) return NULL;
        seen = g;
        p->fn(p->ctx, wa.i, p->n);
        if (atomic_fetch_sub_explicit(&p->remaining, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->cv_done);
            pthread_mutex_unlock(&p->mu);
        }
    }
}

int g4_pool_create(int n, const int *cpus, g4_pool **out, g4_err *err) {
    if (n < 1) return g4_err_set(err, G4_EINVAL, "thread count must be >= 1 (got %d)", n);
    g4_pool *p = calloc(1, sizeof *p);
    if (!p) return g4_err_set(err, G4_ENOMEM, "out of memory");
    p->n = n;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv_start, NULL);
    pthread_cond_init(&p->cv_done, NULL);
    if (cpus) {
        p->cpus = malloc(sizeof(int) * (size_t)n);
        memcpy(p->cpus, cpus, sizeof(int) * (size_t)n);
    }
    p->threads = calloc((size_t)n, sizeof *p->threads);
    for (int i = 1; i < n; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        wa->p = p;
        wa->i = i;
        if (pthread_create(&p->threads[i], NULL, worker, wa) != 0) {
            free(wa);
            p->n = i;
            g4_pool_free(p);
            return g4_err_set(err, G4_ENOMEM, "cannot create thread %d of %d", i, n);
        }
        atomic_fetch_add(&threads_created, 1);
    }
    atomic_fetch_add(&threads_live, n);
    p->counted = 1;
    *out = p;
    return G4_OK;
}

int g4_pool_size(const g4_pool *p) { return p->n; }

static void pin_caller(g4_pool *p) {
    pthread_t self = pthread_self();
    if (p->caller_pinned && pthread_equal(p->caller, self)) return;
    /* a new caller (e.g. a scheduler thread after the opener): pin it; the old one keeps its pin
     * (it may have exited, so its mask cannot be restored from here) */
    p->caller_pinned = pthread_getaffinity_np(self, sizeof p->caller_mask, &p->caller_mask) == 0;
    p->caller = self;
    if (p->caller_pinned) pin(p->cpus[0]);
}

static void run_team(g4_pool *p, g4_pool_fn fn, void *ctx);

void g4_pool_run(g4_pool *p, g4_pool_fn fn, void *ctx) {
    if (p->cpus) pin_caller(p);
    run_team(p, fn, ctx);
}

void g4_pool_run_unpinned(g4_pool *p, g4_pool_fn fn, void *ctx) { run_team(p, fn, ctx); }

static void run_team(g4_pool *p, g4_pool_fn fn, void *ctx) {
    if (p->n == 1) { fn(ctx, 0, 1); return; }
    p->fn = fn;
    p->ctx = ctx;
    atomic_store(&p->remaining, p->n - 1);
    atomic_fetch_add(&p->gen, 1); /* seq_cst: pairs with the sleepers check */
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv_start);
        pthread_mutex_unlock(&p->mu);
    }
    fn(ctx, 0, p->n);
    int spins = 0;
    while (atomic_load_explicit(&p->remaining, memory_order_acquire) > 0) {
        if (++spins < g4_spin_budget()) {
#if defined(__x86_64__)
            __builtin_ia32_pause();
#endif
            continue;
        }
        pthread_mutex_lock(&p->mu);
        while (atomic_load(&p->remaining) > 0) pthread_cond_wait(&p->cv_done, &p->mu);
        pthread_mutex_unlock(&p->mu);
    }
}

void g4_pool_free(g4_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, 1);
    pthread_cond_broadcast(&p->cv_start);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n; i++) pthread_join(p->threads[i], NULL);
    if (p->caller_pinned && pthread_equal(p->caller, pthread_self()))
        pthread_setaffinity_np(p->caller, sizeof p->caller_mask, &p->caller_mask);
    if (p->counted) atomic_fetch_sub(&threads_live, p->n);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv_start);
    pthread_cond_destroy(&p->cv_done);
    free(p->threads);
    free(p->cpus);
    free(p);
}
