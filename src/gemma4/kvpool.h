/* kvpool.h — the paged KV cache of one rank: its geometry, its store and the ops that change it.
 *
 * Positions are cut into blocks of G4_KV_BLOCK, anchored at absolute positions (block j holds
 * positions j*BS .. j*BS+BS-1). A block of one layer kind (sliding or full) holds those
 * positions' keys and values for every layer of that kind, this rank's KV heads only. Memory
 * is one arena of equal pages; a page holds the K and V rows of BS positions for as many layers
 * of one kind as fit (the largest layer fills a page: on the 31B one sliding layer or two full
 * ones), and a block of a kind is ng[kind] pages, not necessarily adjacent. So the two kinds
 * draw from one budget in any mix: long contexts use full blocks, many short sequences sliding
 * ones, and no split has to be guessed up front.
 *
 * Every rank has a store (arena, the pages of each block, each sequence's block table), changed
 * only by ops (int32 words) that the leader sends ahead of each step, so block tables are the
 * same on every rank. The leader decides them (engine/kvalloc.h: free pages and block ids,
 * reference counts). The forward pass reads block tables; it never allocates and knows nothing
 * of prefixes. */
#ifndef G4_GEMMA4_KVPOOL_H
#define G4_GEMMA4_KVPOOL_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "kernels/kernels.h"
#include "model/config.h"
#include "model/split.h"

#define G4_KV_BLOCK 16
#define G4_KV_OPS_CAP (1 << 16) /* words of ops sent with one command at most */

enum { G4_KV_SLIDE = 0, G4_KV_FULL = 1 };

typedef struct g4_kv_geom {
    int bs;                /* positions per block (G4_KV_BLOCK) */
    int dtype;             /* element type of the cache (G4_DT_F32, BF16, Q8_0) */
    int n_layers;
    int window;            /* sliding window W; 0 when there are no sliding layers */
    int64_t page_bytes;
    int ng[2];             /* pages per block of each kind; 0: no layer of that kind */
    int8_t *kind;          /* [n_layers] */
    int *group;            /* [n_layers] which page of the block holds the layer */
    int64_t *off;          /* [n_layers] byte offset of its K rows in the page; V rows follow bs rows later */
    int64_t *row;          /* [n_layers] bytes per position: n_kv_local heads */
    int64_t *head;         /* [n_layers] bytes per head and position */
} g4_kv_geom;

/* The geometry of this rank's cache (the same on every rank: KV heads per rank do not vary). */
int g4_kv_geom_make(const g4_config *cfg, const g4_tp_plan *plan, int dtype, g4_kv_geom *g, g4_err *err);
void g4_kv_geom_free(g4_kv_geom *g);
/* Pages a sequence holds at most while a step writes `batch` positions, at `ctx` positions. */
int64_t g4_kv_seq_pages(const g4_kv_geom *g, int64_t ctx, int batch);

/* ---- ops: [code, args...] ---------------------------------------------------------------- */
enum {
    G4_KVOP_BIND = 1,  /* kind blk page[ng]   the pages of block blk */
    G4_KVOP_SET,       /* seq kind j blk       table entry (blk -1: none) */
    G4_KVOP_COPY,      /* kind src dst npos    positions [0, npos) of every layer of the kind */
    G4_KVOP_OPEN,      /* seq cap              an empty table; positions 0..cap-1 allowed */
    G4_KVOP_CLOSE,     /* seq                  no table */
};

/* ---- one rank's store --------------------------------------------------------------------- */
typedef struct g4_kvstore {
    g4_kv_geom g;
    int64_t n_pages;
    uint8_t *arena;        /* [n_pages][page_bytes], an anonymous mapping touched as used */
    size_t arena_bytes;
    int64_t nblk[2];       /* block ids of each kind: n_pages / ng */
    int32_t *bpages[2];    /* [nblk][ng] */
    int max_seqs;
    int64_t tlen;          /* table entries per sequence: ceil(max_ctx / bs) */
    int32_t *tbl[2];       /* [max_seqs][tlen] block of each position block, -1 none */
    int64_t *cap;          /* [max_seqs] positions allowed; 0: closed */
} g4_kvstore;

int g4_kvstore_create(g4_kvstore *s, const g4_config *cfg, const g4_tp_plan *plan, int dtype, int64_t n_pages,
                      int max_seqs, int64_t max_ctx, g4_err *err);
void g4_kvstore_free(g4_kvstore *s);
/* Applies n words of ops in order; G4_EINVAL (nothing more applied) on a malformed op. */
int g4_kvstore_apply(g4_kvstore *s, const int32_t *ops, int64_t n, g4_err *err);

/* Layer l's K rows (V rows: + bs * row) of block blk, for position index i in the block. */
static inline uint8_t *g4_kv_rows(const g4_kvstore *s, int l, int32_t blk, int64_t i) {
    const g4_kv_geom *g = &s->g;
    const int k = g->kind[l];
    const int64_t page = s->bpages[k][(int64_t)blk * g->ng[k] + g->group[l]];
    return s->arena + page * g->page_bytes + g->off[l] + i * g->row[l];
}
static inline int32_t g4_kv_block(const g4_kvstore *s, int seq, int kind, int64_t j) {
    return s->tbl[kind][(int64_t)seq * s->tlen + j];
}
/* Positions [first, last] of layer l's keys and values of sequence seq, KV head kvh (local), as
 * attention segments in position order, one per block: g4_kv_seg (stride in floats) for an f32
 * cache, g4_kvq_seg (stride in bytes) for the others. Returns how many. */
static inline int g4_kv_segments(const g4_kvstore *s, int l, int seq, int64_t first, int64_t last, int kvh, void *out) {
    const int bs = s->g.bs, kind = s->g.kind[l], f32 = s->g.dtype == G4_DT_F32;
    const int64_t hoff = kvh * s->g.head[l], row = s->g.row[l];
    int nseg = 0;
    for (int64_t j = first / bs; j <= last / bs; j++, nseg++) {
        const int64_t i0 = j == first / bs ? first % bs : 0, i1 = j == last / bs ? last % bs : bs - 1;
        const int32_t blk = g4_kv_block(s, seq, kind, j);
        const uint8_t *k = g4_kv_rows(s, l, blk, i0) + hoff, *v = g4_kv_rows(s, l, blk, bs + i0) + hoff;
        if (f32) ((g4_kv_seg *)out)[nseg] = (g4_kv_seg){(const float *)k, (const float *)v, i1 - i0 + 1, row / (int64_t)sizeof(float)};
        else ((g4_kvq_seg *)out)[nseg] = (g4_kvq_seg){k, v, i1 - i0 + 1, row};
    }
    return nseg;
}

#endif
