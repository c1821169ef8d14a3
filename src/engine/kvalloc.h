/* kvalloc.h — the leader's allocator of KV cache blocks: free pages and block ids, reference
 * counts (a block shared by sequences and the prefix cache is freed at zero), and the buffer of
 * kvpool ops (gemma4/kvpool.h) that carries its decisions to every rank's store ahead of the next
 * step. Knows pages and block ids, not sequences (kvseq.h) or prompts (prefix.h). */
#ifndef G4_ENGINE_KVALLOC_H
#define G4_ENGINE_KVALLOC_H

#include <stdint.h>

#include "base/error.h"
#include "gemma4/kvpool.h"

typedef int (*g4_kvops_flush_fn)(void *ctx, const int32_t *ops, int64_t n, g4_err *err);

typedef struct g4_kvalloc {
    const g4_kv_geom *g;
    int64_t n_pages, n_free;
    int32_t *free_pages;   /* stack: the lowest pages first, so the arena is touched front to back */
    int64_t nblk[2], n_free_ids[2];
    int32_t *free_ids[2];  /* stacks */
    int32_t *pages[2];     /* [nblk][ng] */
    int32_t *refs[2];      /* [nblk] holders: sequence tables and the prefix cache */
    int64_t used_blocks[2];
    /* ops for the ranks, sent ahead of the next step (or flushed when the buffer is full) */
    int32_t *ops;
    int64_t n_ops, cap_ops;
    g4_kvops_flush_fn flush;
    void *flush_ctx;
    int failed;            /* a flush failed: the ranks lost sync; the engine reports it */
} g4_kvalloc;

int g4_kvalloc_create(g4_kvalloc *a, const g4_kv_geom *g, int64_t n_pages, int64_t cap_ops, g4_kvops_flush_fn flush,
                      void *flush_ctx, g4_err *err);
void g4_kvalloc_free(g4_kvalloc *a);
/* Appends one op of n words (flushing first when the buffer is full). */
void g4_kvalloc_emit(g4_kvalloc *a, const int32_t *op, int n);
/* A new block of the kind with one reference, or -1 when its pages are not free. */
int32_t g4_kvalloc_block(g4_kvalloc *a, int kind);
void g4_kvalloc_ref(g4_kvalloc *a, int kind, int32_t blk);
/* Drops a reference; frees the block at zero. Returns the references left. */
int g4_kvalloc_unref(g4_kvalloc *a, int kind, int32_t blk);
static inline int64_t g4_kvalloc_free_blocks(const g4_kvalloc *a, int kind) {
    return a->g->ng[kind] ? a->n_free / a->g->ng[kind] : INT64_MAX / 4;
}

#endif
