/* threadpool.h — a fixed team of threads for one rank, created once.
 *
 * g4_pool_run(pool, fn, ctx) runs fn(ctx, i, n) on every thread of the team (the caller is
 * thread 0) and returns when all are done. Work is split by the callee from (i, n) — a static
 * split, so the arithmetic never depends on timing. The run path takes no locks in the common
 * case (workers spin briefly on a generation counter, then sleep) and allocates nothing. */
#ifndef G4_BASE_THREADPOOL_H
#define G4_BASE_THREADPOOL_H

#include "base/error.h"

typedef struct g4_pool g4_pool;
typedef void (*g4_pool_fn)(void *ctx, int ith, int nth);

/* n_threads >= 1. cpus: optional list of n_threads CPU ids to pin to (NULL: no pinning); the
 * thread calling g4_pool_run is thread 0, pinned to cpus[0] from its first run on (not at
 * create, so threads the opener starts later do not inherit it); g4_pool_free, called from that
 * thread, gives it its old mask back. */
int g4_pool_create(int n_threads, const int *cpus, g4_pool **out, g4_err *err);
void g4_pool_free(g4_pool *p);
int g4_pool_size(const g4_pool *p);
void g4_pool_run(g4_pool *p, g4_pool_fn fn, void *ctx);
/* The same without pinning the caller: for setup work done by a thread (an engine's opener)
 * that is not the one that will run the pool later. */
void g4_pool_run_unpinned(g4_pool *p, g4_pool_fn fn, void *ctx);

/* Splits [0, n) into nth near-equal contiguous parts; part ith is [*a, *b). */
static inline void g4_split_range(long n, int ith, int nth, long *a, long *b) {
    long base = n / nth, extra = n % nth;
    *a = ith * base + (ith < extra ? ith : extra);
    *b = *a + base + (ith < extra ? 1 : 0);
}

/* How many times a waiting thread spins before it sleeps (small when oversubscribed). */
int g4_spin_budget(void);

/* Threads created by all pools so far (a test asserts the decode loop creates none). */
long g4_pool_threads_created(void);

#endif
