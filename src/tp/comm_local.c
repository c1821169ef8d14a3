/* comm_local.c — ranks as threads of one process. Collectives meet at a spin-then-sleep
 * barrier; allreduce: every rank publishes its buffer, each rank sums its share of the elements
 * across ranks in the fixed tree order into a shared result, then every rank copies the result
 * back. A failed rank sets a flag that wakes everyone with G4_ECOMM. */
#include "tp/comm.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/threadpool.h"

typedef struct world {
    int n;
    size_t max_floats;
    float *result;               /* [max_floats] */
    void *volatile *ptrs;        /* [n] published buffers */
    atomic_int arrived;
    atomic_long phase;
    atomic_int failed;
    char why[256];
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_int refs;
    g4_comm *handles;
} world;

static int barrier(g4_comm *c) {
    world *w = c->impl;
    if (atomic_load(&w->failed)) return G4_ECOMM;
    long ph = atomic_load(&w->phase);
    if (atomic_fetch_add(&w->arrived, 1) == w->n - 1) {
        atomic_store(&w->arrived, 0);
        pthread_mutex_lock(&w->mu);
        atomic_fetch_add(&w->phase, 1);
        pthread_cond_broadcast(&w->cv);
        pthread_mutex_unlock(&w->mu);
    } else {
        int spins = 0;
        while (atomic_load(&w->phase) == ph && !atomic_load(&w->failed)) {
            if (++spins < g4_spin_budget()) {
#if defined(__x86_64__)
                __builtin_ia32_pause();
#endif
                continue;
            }
            pthread_mutex_lock(&w->mu);
            while (atomic_load(&w->phase) == ph && !atomic_load(&w->failed)) pthread_cond_wait(&w->cv, &w->mu);
            pthread_mutex_unlock(&w->mu);
        }
    }
    return atomic_load(&w->failed) ? G4_ECOMM : G4_OK;
}

#define TREE_CHUNK 512

/* out[0..len) = the pairwise tree over ranks of src[r][off..off+len), the order of
 * g4_tree_sum ((r0+r1)+(r2+r3))+…, written as whole-chunk vector loops; tmp: one chunk per level. */
static void tree_sum(const float *const *src, int n, size_t off, size_t len, float *out, float (*tmp)[TREE_CHUNK]) {
    if (n == 1) {
        memcpy(out, src[0] + off, len * sizeof(float));
        return;
    }
    if (n == 2) {
        const float *x = src[0] + off, *y = src[1] + off;
        for (size_t i = 0; i < len; i++) out[i] = x[i] + y[i];
        return;
    }
    tree_sum(src, n / 2, off, len, out, tmp + 1);
    tree_sum(src + n / 2, n / 2, off, len, tmp[0], tmp + 1);
    for (size_t i = 0; i < len; i++) out[i] = out[i] + tmp[0][i];
}

static int allreduce_sum(g4_comm *c, float *buf, size_t n) {
    world *w = c->impl;
    if (w->n == 1) return G4_OK;
    if (n > w->max_floats) {
        char why[128];
        snprintf(why, sizeof why, "allreduce of %zu floats exceeds the reserved %zu", n, w->max_floats);
        c->ops->fail(c, why);
        return G4_ECOMM;
    }
    w->ptrs[c->rank] = buf;
    int rc = barrier(c);
    if (rc) return rc;
    size_t a = n * (size_t)c->rank / (size_t)w->n, b = n * (size_t)(c->rank + 1) / (size_t)w->n;
    const float *src[64];
    for (int r = 0; r < w->n; r++) src[r] = w->ptrs[r];
    for (size_t off = a; off < b; off += TREE_CHUNK) {
        size_t len = b - off < TREE_CHUNK ? b - off : TREE_CHUNK;
        float tmp[7][TREE_CHUNK];
        tree_sum(src, w->n, off, len, w->result + off, tmp);
    }
    if ((rc = barrier(c))) return rc;
    memcpy(buf, w->result, n * sizeof(float));
    return barrier(c); /* nobody may write result (next call) before all have copied */
}

static int broadcast(g4_comm *c, void *buf, size_t bytes, int root) {
    world *w = c->impl;
    if (w->n == 1) return G4_OK;
    if (c->rank == root) w->ptrs[root] = buf;
    int rc = barrier(c);
    if (rc) return rc;
    if (c->rank != root) memcpy(buf, w->ptrs[root], bytes);
    return barrier(c);
}

static int gather(g4_comm *c, const void *send, size_t bytes, void *recv, int root) {
    world *w = c->impl;
    if (w->n == 1) { if (recv != send) memmove(recv, send, bytes); return G4_OK; }
    w->ptrs[c->rank] = (void *)send;
    int rc = barrier(c);
    if (rc) return rc;
    if (c->rank == root)
        for (int r = 0; r < w->n; r++) memcpy((char *)recv + (size_t)r * bytes, w->ptrs[r], bytes);
    return barrier(c);
}

static void fail(g4_comm *c, const char *why) {
    world *w = c->impl;
    pthread_mutex_lock(&w->mu);
    if (!atomic_load(&w->failed)) snprintf(w->why, sizeof w->why, "rank %d failed: %s", c->rank, why);
    atomic_store(&w->failed, 1);
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static const char *failure(g4_comm *c) {
    world *w = c->impl;
    return atomic_load(&w->failed) ? w->why : NULL;
}

static void comm_free(g4_comm *c) {
    world *w = c->impl;
    if (atomic_fetch_sub(&w->refs, 1) == 1) {
        free(w->result);
        free((void *)w->ptrs);
        pthread_mutex_destroy(&w->mu);
        pthread_cond_destroy(&w->cv);
        free(w->handles);
        free(w);
    }
}

static const g4_comm_ops local_ops = {allreduce_sum, broadcast, gather, barrier, fail, failure, comm_free};

int g4_comm_local_create(int n, size_t max_floats, g4_comm **handles, g4_err *err) {
    if (n < 1 || n > 64) return g4_err_set(err, G4_EINVAL, "local group size %d out of range", n);
    world *w = calloc(1, sizeof *w);
    if (!w) return g4_err_set(err, G4_ENOMEM, "out of memory");
    w->n = n;
    w->max_floats = max_floats;
    w->result = n > 1 ? malloc(max_floats * sizeof(float) + 1) : NULL;
    w->ptrs = calloc((size_t)n, sizeof(void *));
    w->handles = calloc((size_t)n, sizeof(g4_comm));
    if ((n > 1 && !w->result) || !w->ptrs || !w->handles) {
        free(w->result); free((void *)w->ptrs); free(w->handles); free(w);
        return g4_err_set(err, G4_ENOMEM, "out of memory for the communicator");
    }
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    atomic_store(&w->refs, n);
    for (int r = 0; r < n; r++) {
        g4_comm *c = &w->handles[r];
        c->rank = r;
        c->size = n;
        c->ops = &local_ops;
        c->impl = w;
        snprintf(c->backend, sizeof c->backend, "local");
        handles[r] = c;
    }
    return G4_OK;
}
