/* kvalloc.c — the leader's KV block allocator (kvalloc.h). */
#include "engine/kvalloc.h"

#include <stdlib.h>
#include <string.h>

#include "base/assert.h"

int g4_kvalloc_create(g4_kvalloc *a, const g4_kv_geom *g, int64_t n_pages, int64_t cap_ops, g4_kvops_flush_fn flush,
                      void *flush_ctx, g4_err *err) {
    memset(a, 0, sizeof *a);
    a->g = g;
    a->n_pages = a->n_free = n_pages;
    a->cap_ops = cap_ops;
    a->flush = flush;
    a->flush_ctx = flush_ctx;
    a->free_pages = malloc(sizeof(int32_t) * (size_t)n_pages + 4);
    a->ops = malloc(sizeof(int32_t) * (size_t)cap_ops + 4);
    int ok = a->free_pages && a->ops;
    for (int k = 0; k < 2 && ok; k++) {
        a->nblk[k] = a->n_free_ids[k] = g->ng[k] ? n_pages / g->ng[k] : 0;
        a->free_ids[k] = malloc(sizeof(int32_t) * (size_t)a->nblk[k] + 4);
        a->pages[k] = malloc(sizeof(int32_t) * (size_t)(a->nblk[k] * g->ng[k]) + 4);
        a->refs[k] = calloc((size_t)a->nblk[k] + 1, sizeof(int32_t));
        ok = a->free_ids[k] && a->pages[k] && a->refs[k];
        for (int64_t i = 0; ok && i < a->nblk[k]; i++) a->free_ids[k][i] = (int32_t)(a->nblk[k] - 1 - i);
    }
    if (!ok) {
        g4_kvalloc_free(a);
        return g4_err_set(err, G4_ENOMEM, "out of memory for the KV allocator");
    }
    for (int64_t i = 0; i < n_pages; i++) a->free_pages[i] = (int32_t)(n_pages - 1 - i);
    return G4_OK;
}

void g4_kvalloc_free(g4_kvalloc *a) {
    free(a->free_pages);
    free(a->ops);
    for (int k = 0; k < 2; k++) {
        free(a->free_ids[k]);
        free(a->pages[k]);
        free(a->refs[k]);
    }
    memset(a, 0, sizeof *a);
}

/* Room for n more words, flushing what is queued when the buffer is full. */
static int32_t *reserve(g4_kvalloc *a, int64_t n) {
    G4_ASSERT(n <= a->cap_ops, "a kv op of %lld words does not fit the buffer of %lld", (long long)n, (long long)a->cap_ops);
    if (a->n_ops + n > a->cap_ops) {
        g4_err err;
        if (a->flush(a->flush_ctx, a->ops, a->n_ops, &err)) a->failed = 1;
        a->n_ops = 0;
    }
    int32_t *w = a->ops + a->n_ops;
    a->n_ops += n;
    return w;
}

void g4_kvalloc_emit(g4_kvalloc *a, const int32_t *op, int n) { memcpy(reserve(a, n), op, sizeof(int32_t) * (size_t)n); }

int32_t g4_kvalloc_block(g4_kvalloc *a, int kind) {
    const int ng = a->g->ng[kind];
    if (a->n_free < ng || a->n_free_ids[kind] == 0) return -1;
    const int32_t b = a->free_ids[kind][--a->n_free_ids[kind]];
    int32_t *op = reserve(a, 3 + ng);
    op[0] = G4_KVOP_BIND;
    op[1] = kind;
    op[2] = b;
    for (int p = 0; p < ng; p++) op[3 + p] = a->pages[kind][(int64_t)b * ng + p] = a->free_pages[--a->n_free];
    a->refs[kind][b] = 1;
    a->used_blocks[kind]++;
    return b;
}

/* Only a held block (references > 0) can be shared or let go: anything else is a holder's
 * bookkeeping gone wrong, and freeing the block twice would hand its pages to two owners. */
static void check_held(const g4_kvalloc *a, int kind, int32_t blk) {
    G4_ASSERT(kind >= 0 && kind < 2 && blk >= 0 && blk < a->nblk[kind], "kv block %d of kind %d out of range", blk, kind);
    G4_ASSERT(a->refs[kind][blk] > 0, "kv block %d of kind %d is not held", blk, kind);
}

void g4_kvalloc_ref(g4_kvalloc *a, int kind, int32_t blk) {
    check_held(a, kind, blk);
    a->refs[kind][blk]++;
}

int g4_kvalloc_unref(g4_kvalloc *a, int kind, int32_t blk) {
    check_held(a, kind, blk);
    int left = --a->refs[kind][blk];
    if (left > 0) return left;
    const int ng = a->g->ng[kind];
    for (int p = ng - 1; p >= 0; p--) a->free_pages[a->n_free++] = a->pages[kind][(int64_t)blk * ng + p];
    a->free_ids[kind][a->n_free_ids[kind]++] = blk;
    a->used_blocks[kind]--;
    return 0;
}
