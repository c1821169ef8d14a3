/* prefix.c — the prefix cache's tree, hash index and LRU tiers (see prefix.h). Everything is
 * allocated at creation (nodes: one per full block), so registering a block in the decode loop
 * allocates nothing. */
#include "engine/prefix.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "base/assert.h"

#define ROOT_KEY 0x9e3779b97f4a7c15ull

typedef struct {
    uint64_t key;
    int32_t parent, child, next_sib, prev_sib, hnext;
    int32_t blk[2];
    int32_t uprev[2], unext[2];  /* LRU links of the node's units (unit = node * 2 + kind) */
    int8_t ulist[2];             /* -1: held by a sequence (or no block); 0, 1: that tier's list */
    uint8_t hot;
    int16_t ntok;
    int32_t tok[G4_KV_BLOCK];
} pnode;

struct g4_prefix {
    g4_kvalloc *a;
    pnode *n;
    int32_t cap, n_free;
    int32_t *free_nodes;
    int32_t *bucket;
    uint64_t mask;
    int32_t root_child;
    int32_t head[2], tail[2];
    int64_t evictable;
    int64_t live;
    uint64_t evicted;
};

int g4_prefix_create(g4_kvalloc *a, g4_prefix **out, g4_err *err) {
    g4_prefix *p = calloc(1, sizeof *p);
    if (!p) return g4_err_set(err, G4_ENOMEM, "out of memory");
    p->a = a;
    p->cap = (int32_t)a->nblk[G4_KV_FULL];
    uint64_t nb = 16;
    while (nb < 2 * (uint64_t)p->cap) nb *= 2;
    p->mask = nb - 1;
    p->n = malloc(sizeof(pnode) * (size_t)p->cap + 1);
    p->free_nodes = malloc(sizeof(int32_t) * (size_t)p->cap + 4);
    p->bucket = malloc(sizeof(int32_t) * nb);
    if (!p->n || !p->free_nodes || !p->bucket) {
        g4_prefix_free(p);
        return g4_err_set(err, G4_ENOMEM, "out of memory for the prefix cache");
    }
    memset(p->bucket, 0xff, sizeof(int32_t) * nb);
    for (int32_t i = 0; i < p->cap; i++) p->free_nodes[i] = p->cap - 1 - i;
    p->n_free = p->cap;
    p->root_child = -1;
    p->head[0] = p->head[1] = p->tail[0] = p->tail[1] = -1;
    *out = p;
    return G4_OK;
}

void g4_prefix_free(g4_prefix *p) {
    if (!p) return;
    free(p->n);
    free(p->free_nodes);
    free(p->bucket);
    free(p);
}

static uint64_t key_of(const g4_prefix *p, int32_t parent, const int32_t *tok, int ntok) {
    return XXH64(tok, sizeof(int32_t) * (size_t)ntok, parent < 0 ? ROOT_KEY : p->n[parent].key);
}

static int32_t *child_head(g4_prefix *p, int32_t parent) { return parent < 0 ? &p->root_child : &p->n[parent].child; }

static int32_t find(const g4_prefix *p, int32_t parent, const int32_t *tok, int ntok, uint64_t key) {
    for (int32_t i = p->bucket[key & p->mask]; i >= 0; i = p->n[i].hnext) {
        const pnode *x = &p->n[i];
        if (x->key == key && x->parent == parent && x->ntok == ntok && !memcmp(x->tok, tok, sizeof(int32_t) * (size_t)ntok)) return i;
    }
    return -1;
}

int64_t g4_prefix_match(const g4_prefix *p, const int32_t *tok, int64_t n, int32_t *chain, int32_t *part, int *part_len) {
    const int bs = G4_KV_BLOCK;
    int32_t parent = -1;
    int64_t k = 0;
    while ((k + 1) * bs <= n) {
        int32_t x = find(p, parent, tok + k * bs, bs, key_of(p, parent, tok + k * bs, bs));
        if (x < 0) break;
        chain[k++] = parent = x;
    }
    /* the child sharing the longest run of the next tokens (a sliding block preferred) */
    *part = -1;
    *part_len = 0;
    const int64_t rem = n - k * bs < bs ? n - k * bs : bs;
    for (int32_t c = parent < 0 ? p->root_child : p->n[parent].child; c >= 0; c = p->n[c].next_sib) {
        const pnode *x = &p->n[c];
        int l = 0;
        while (l < x->ntok && l < rem && x->tok[l] == tok[k * bs + l]) l++;
        if (l > *part_len || (l == *part_len && l > 0 && *part >= 0 && p->n[*part].blk[G4_KV_SLIDE] < 0 && x->blk[G4_KV_SLIDE] >= 0)) {
            *part = c;
            *part_len = l;
        }
    }
    return k;
}

int32_t g4_prefix_block(const g4_prefix *p, int32_t node, int kind) { return p->n[node].blk[kind]; }
int g4_prefix_ntok(const g4_prefix *p, int32_t node) { return p->n[node].ntok; }
void g4_prefix_tokens(const g4_prefix *p, int32_t node, int32_t *out) { memcpy(out, p->n[node].tok, sizeof(int32_t) * (size_t)p->n[node].ntok); }

/* ---- LRU lists ---------------------------------------------------------------------------- */

static void unlink_unit(g4_prefix *p, int32_t node, int kind) {
    pnode *x = &p->n[node];
    const int l = x->ulist[kind];
    if (l < 0) return;
    const int32_t pv = x->uprev[kind], nx = x->unext[kind];
    if (pv >= 0) p->n[pv / 2].unext[pv % 2] = nx; else p->head[l] = nx;
    if (nx >= 0) p->n[nx / 2].uprev[nx % 2] = pv; else p->tail[l] = pv;
    x->ulist[kind] = -1;
    p->evictable -= p->a->g->ng[kind];
}

static void link_tail(g4_prefix *p, int32_t node, int kind, int l) {
    pnode *x = &p->n[node];
    const int32_t u = node * 2 + kind;
    x->uprev[kind] = p->tail[l];
    x->unext[kind] = -1;
    if (p->tail[l] >= 0) p->n[p->tail[l] / 2].unext[p->tail[l] % 2] = u; else p->head[l] = u;
    p->tail[l] = u;
    x->ulist[kind] = (int8_t)l;
    p->evictable += p->a->g->ng[kind];
}

/* ---- registration and references ---------------------------------------------------------- */

int32_t g4_prefix_insert(g4_prefix *p, int32_t parent, const int32_t *tok, int ntok, const int32_t blk[2], int *dup) {
    const uint64_t key = key_of(p, parent, tok, ntok);
    int32_t x = find(p, parent, tok, ntok, key);
    *dup = x >= 0;
    if (x >= 0 || p->n_free == 0) return x;
    x = p->free_nodes[--p->n_free];
    pnode *q = &p->n[x];
    memset(q, 0, sizeof *q);
    q->key = key;
    q->parent = parent;
    q->child = -1;
    q->ntok = (int16_t)ntok;
    memcpy(q->tok, tok, sizeof(int32_t) * (size_t)ntok);
    q->hnext = p->bucket[key & p->mask];
    p->bucket[key & p->mask] = x;
    int32_t *h = child_head(p, parent);
    q->prev_sib = -1;
    q->next_sib = *h;
    if (*h >= 0) p->n[*h].prev_sib = x;
    *h = x;
    for (int k = 0; k < 2; k++) {
        q->blk[k] = blk[k];
        q->ulist[k] = -1;
        q->uprev[k] = q->unext[k] = -1;
        if (blk[k] >= 0) g4_kvalloc_ref(p->a, k, blk[k]);
    }
    p->live++;
    return x;
}

void g4_prefix_adopt(g4_prefix *p, int32_t node, int32_t blk) {
    p->n[node].blk[G4_KV_SLIDE] = blk;
    g4_kvalloc_ref(p->a, G4_KV_SLIDE, blk);
}

void g4_prefix_acquire(g4_prefix *p, int32_t node, int kind) {
    unlink_unit(p, node, kind);
    g4_kvalloc_ref(p->a, kind, p->n[node].blk[kind]);
}

void g4_prefix_release(g4_prefix *p, int32_t node, int kind, int tier) {
    pnode *x = &p->n[node];
    if (g4_kvalloc_unref(p->a, kind, x->blk[kind]) != 1 || x->ulist[kind] >= 0) return;
    link_tail(p, node, kind, kind == G4_KV_FULL || x->hot ? 1 : tier);
}

void g4_prefix_mark_hot(g4_prefix *p, int32_t node) {
    pnode *x = &p->n[node];
    x->hot = 1;
    if (x->ulist[G4_KV_SLIDE] == 0) {
        unlink_unit(p, node, G4_KV_SLIDE);
        link_tail(p, node, G4_KV_SLIDE, 1);
    }
}

/* ---- eviction ----------------------------------------------------------------------------- */

static void drop_node(g4_prefix *p, int32_t y) {
    pnode *x = &p->n[y];
    for (int k = 0; k < 2; k++) {
        if (x->blk[k] < 0) continue;
        unlink_unit(p, y, k);
        g4_kvalloc_unref(p->a, k, x->blk[k]); /* a sequence's own reference, if any, keeps it */
        x->blk[k] = -1;
    }
    int32_t *b = &p->bucket[x->key & p->mask];
    while (*b != y) {
        G4_ASSERT(*b >= 0, "prefix node %d is not in its hash bucket", y);
        b = &p->n[*b].hnext;
    }
    *b = x->hnext;
    if (x->prev_sib >= 0) p->n[x->prev_sib].next_sib = x->next_sib; else *child_head(p, x->parent) = x->next_sib;
    if (x->next_sib >= 0) p->n[x->next_sib].prev_sib = x->prev_sib;
    p->free_nodes[p->n_free++] = y;
    p->live--;
}

static void evict_subtree(g4_prefix *p, int32_t top) {
    int32_t y = top;
    for (;;) {
        while (p->n[y].child >= 0) y = p->n[y].child;
        const int32_t up = p->n[y].parent;
        const int last = y == top;
        drop_node(p, y);
        p->evicted++;
        if (last) return;
        y = up;
    }
}

static int evict_one(g4_prefix *p) {
    const int32_t u = p->head[0] >= 0 ? p->head[0] : p->head[1];
    if (u < 0) return 0;
    const int32_t node = u / 2;
    if (u % 2 == G4_KV_SLIDE) {
        unlink_unit(p, node, G4_KV_SLIDE);
        g4_kvalloc_unref(p->a, G4_KV_SLIDE, p->n[node].blk[G4_KV_SLIDE]);
        p->n[node].blk[G4_KV_SLIDE] = -1;
        p->evicted++;
    } else {
        evict_subtree(p, node);
    }
    return 1;
}

int g4_prefix_evict(g4_prefix *p, int64_t pages) {
    while (p->a->n_free < pages)
        if (!evict_one(p)) return -1;
    return 0;
}

void g4_prefix_clear(g4_prefix *p) {
    while (evict_one(p)) {}
}

int64_t g4_prefix_evictable_pages(const g4_prefix *p) { return p->evictable; }

void g4_prefix_get_stats(const g4_prefix *p, g4_prefix_stats *st) {
    st->nodes = p->live;
    st->evictable_pages = p->evictable;
    st->evicted_units = p->evicted;
}
