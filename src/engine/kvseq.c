/* kvseq.c — the leader's per-sequence KV block tables and the prefix cache glue (kvseq.h). */
#include "engine/kvseq.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    int64_t cap, len;        /* cap 0: closed */
    int64_t slo;             /* sliding blocks below slo are released */
    int32_t *blk[2];         /* [tlen] */
    int32_t *node;           /* [tlen] the prefix-cache node of block j, -1 none */
    int32_t part[G4_KV_BLOCK];/* tokens of the block being filled: len % bs of them */
    int64_t pend;            /* prepare: tokens of this sequence in the batch */
    int64_t reg;             /* blocks below reg / bs are registered in the prefix cache (or skipped) */
    int tentative;           /* speculation: completed blocks wait for g4_kvmgr_truncate */
    int64_t slide_min;       /* filled from disk: no sliding block below this position */
    uint64_t stamp;
} kseq;

struct g4_kvmgr {
    const g4_kv_geom *g;
    g4_kvalloc a;
    g4_prefix *pc;           /* NULL: no prefix cache */
    int max_seqs, max_batch, bs;
    int64_t tlen, max_ctx;
    int64_t keep;            /* sliding positions kept below each window (speculation) */
    kseq *s;
    uint64_t stamp;
    int32_t *chain, *run;    /* lookup scratch, [tlen] */
    uint64_t queries, query_tokens, hit_tokens;
};

int g4_kvmgr_create(const g4_kv_geom *g, int64_t n_pages, int max_seqs, int64_t max_ctx, int max_batch, int prefix_cache,
                    g4_kvops_flush_fn flush, void *flush_ctx, g4_kvmgr **out, g4_err *err) {
    g4_kvmgr *m = calloc(1, sizeof *m);
    if (!m) return g4_err_set(err, G4_ENOMEM, "out of memory");
    m->g = g;
    m->bs = g->bs;
    m->max_seqs = max_seqs;
    m->max_batch = max_batch;
    m->max_ctx = max_ctx;
    m->tlen = (max_ctx + g->bs - 1) / g->bs;
    int rc = g4_kvalloc_create(&m->a, g, n_pages, G4_KV_OPS_CAP, flush, flush_ctx, err);
    if (rc) { free(m); return rc; }
    /* a node always holds a full-layer block: without full layers there is no cache */
    if (prefix_cache && g->ng[G4_KV_FULL] > 0 && (rc = g4_prefix_create(&m->a, &m->pc, err))) { g4_kvmgr_free(m); return rc; }
    m->s = calloc((size_t)max_seqs, sizeof *m->s);
    m->chain = malloc(sizeof(int32_t) * (size_t)m->tlen + 4);
    m->run = malloc(sizeof(int32_t) * (size_t)m->tlen + 4);
    int ok = m->s && m->chain && m->run;
    for (int i = 0; ok && i < max_seqs; i++) {
        kseq *q = &m->s[i];
        q->blk[0] = malloc(sizeof(int32_t) * (size_t)m->tlen + 4);
        q->blk[1] = malloc(sizeof(int32_t) * (size_t)m->tlen + 4);
        q->node = malloc(sizeof(int32_t) * (size_t)m->tlen + 4);
        ok = q->blk[0] && q->blk[1] && q->node;
        if (ok) {
            memset(q->blk[0], 0xff, sizeof(int32_t) * (size_t)m->tlen);
            memset(q->blk[1], 0xff, sizeof(int32_t) * (size_t)m->tlen);
            memset(q->node, 0xff, sizeof(int32_t) * (size_t)m->tlen);
        }
    }
    if (!ok) {
        g4_kvmgr_free(m);
        return g4_err_set(err, G4_ENOMEM, "out of memory for the KV block tables");
    }
    *out = m;
    return G4_OK;
}

void g4_kvmgr_free(g4_kvmgr *m) {
    if (!m) return;
    for (int i = 0; m->s && i < m->max_seqs; i++) {
        free(m->s[i].blk[0]);
        free(m->s[i].blk[1]);
        free(m->s[i].node);
    }
    free(m->s);
    free(m->chain);
    free(m->run);
    g4_prefix_free(m->pc);
    g4_kvalloc_free(&m->a);
    free(m);
}

/* First sliding block a query at position p reads. */
static int64_t first_slide(const g4_kvmgr *m, int64_t p) {
    const int64_t f = p - m->g->window + 1;
    return f > 0 ? f / m->bs : 0;
}

static int has_kind(const g4_kvmgr *m, int k) { return m->g->ng[k] > 0; }

static void set_entry(g4_kvmgr *m, int seq, int kind, int64_t j, int32_t blk) {
    m->s[seq].blk[kind][j] = blk;
    const int32_t op[5] = {G4_KVOP_SET, seq, kind, (int32_t)j, blk};
    g4_kvalloc_emit(&m->a, op, 5);
}

/* A new block for entry j (pages are known to be there, possibly after evicting). */
static int take_new(g4_kvmgr *m, int seq, int kind, int64_t j) {
    if (m->a.n_free < m->g->ng[kind] && (!m->pc || g4_prefix_evict(m->pc, m->g->ng[kind]))) return -1;
    const int32_t b = g4_kvalloc_block(&m->a, kind);
    if (b < 0) return -1;
    set_entry(m, seq, kind, j, b);
    return 0;
}

/* The sequence lets go of entry j: to the cache (its LRU tier) when a node holds the block. */
static void drop_entry(g4_kvmgr *m, int seq, int kind, int64_t j, int tier) {
    kseq *q = &m->s[seq];
    const int32_t b = q->blk[kind][j];
    if (b < 0) return;
    const int32_t x = q->node[j];
    if (m->pc && x >= 0 && g4_prefix_block(m->pc, x, kind) == b) g4_prefix_release(m->pc, x, kind, tier);
    else g4_kvalloc_unref(&m->a, kind, b);
    set_entry(m, seq, kind, j, -1);
}

void g4_kvmgr_open(g4_kvmgr *m, int seq, int64_t cap) {
    kseq *q = &m->s[seq];
    q->cap = cap;
    q->len = q->slo = q->reg = q->slide_min = 0;
    q->tentative = 0;
    const int32_t op[3] = {G4_KVOP_OPEN, seq, (int32_t)cap};
    g4_kvalloc_emit(&m->a, op, 3);
}

/* ---- prefix hits ---------------------------------------------------------------------------- */

/* The longest usable cached prefix of tok[0..n): chain[] and *src (the node of the block the
 * prefix ends inside, when it does). A prefix of P positions is usable when P < n (a token is
 * left to compute logits from) and every sliding block the next query reads, [P-W+1, P-1], is
 * still cached. */
static int64_t lookup(const g4_kvmgr *m, const int32_t *tok, int64_t n, int32_t *src) {
    *src = -1;
    if (!m->pc || n < 2) return 0;
    int32_t part;
    int plen;
    const int64_t k = g4_prefix_match(m->pc, tok, n, m->chain, &part, &plen);
    int64_t pmax = k * m->bs + (part >= 0 ? plen : 0);
    if (pmax > n - 1) pmax = n - 1;
    if (pmax <= 0) return 0;
#define NODE_AT(j) ((j) < k ? m->chain[j] : part)
    int64_t p = pmax;
    if (has_kind(m, G4_KV_SLIDE) && m->g->window > 0) {
        const int64_t top = (pmax - 1) / m->bs;
        for (int64_t j = 0; j <= top; j++)
            m->run[j] = g4_prefix_block(m->pc, NODE_AT(j), G4_KV_SLIDE) >= 0 ? (j ? m->run[j - 1] : 0) + 1 : 0;
        p = 0;
        for (int64_t jhi = top; jhi >= 0 && !p; jhi--) {
            const int64_t cand = (jhi + 1) * m->bs < pmax ? (jhi + 1) * m->bs : pmax;
            if (m->run[jhi] >= jhi - first_slide(m, cand) + 1) p = cand;
        }
    }
    if (p % m->bs) *src = NODE_AT(p / m->bs);
#undef NODE_AT
    return p;
}

int64_t g4_kvmgr_peek(const g4_kvmgr *m, const int32_t *tok, int64_t n, int64_t *taken) {
    int32_t src;
    const int64_t p = lookup(m, tok, n, &src), kf = p / m->bs;
    /* the hit's blocks that only the cache holds now stop being evictable */
    *taken = 0;
    for (int64_t j = 0; j < kf; j++) {
        for (int k = 0; k < 2; k++) {
            if (!has_kind(m, k) || (k == G4_KV_SLIDE && j < first_slide(m, p))) continue;
            const int32_t b = g4_prefix_block(m->pc, m->chain[j], k);
            if (b >= 0 && m->a.refs[k][b] == 1) *taken += m->g->ng[k];
        }
    }
    return p;
}

int64_t g4_kvmgr_open_cached(g4_kvmgr *m, int seq, int64_t cap, const int32_t *tok, int64_t n) {
    g4_kvmgr_open(m, seq, cap);
    if (!m->pc) return 0;
    m->queries++;
    m->query_tokens += (uint64_t)n;
    int32_t src;
    const int64_t p = lookup(m, tok, n, &src);
    if (p == 0) return 0;
    kseq *q = &m->s[seq];
    const int64_t kf = p / m->bs, r = p % m->bs;
    const int slide = has_kind(m, G4_KV_SLIDE);
    for (int64_t j = 0; j < kf; j++) {
        g4_prefix_acquire(m->pc, m->chain[j], G4_KV_FULL);
        set_entry(m, seq, G4_KV_FULL, j, g4_prefix_block(m->pc, m->chain[j], G4_KV_FULL));
        q->node[j] = m->chain[j];
    }
    q->slo = slide ? first_slide(m, p) : 0;
    for (int64_t j = q->slo; slide && j < kf; j++) {
        g4_prefix_acquire(m->pc, m->chain[j], G4_KV_SLIDE);
        g4_prefix_mark_hot(m->pc, m->chain[j]);
        set_entry(m, seq, G4_KV_SLIDE, j, g4_prefix_block(m->pc, m->chain[j], G4_KV_SLIDE));
    }
    q->len = q->reg = kf * m->bs;
    if (r) {
        /* copy-on-write: the first r positions of src's blocks into private ones (src is held
         * meanwhile, so making room cannot evict it) */
        int ok = 1;
        for (int k = 0; k < 2; k++)
            if (has_kind(m, k)) g4_prefix_acquire(m->pc, src, k);
        for (int k = 0; k < 2 && ok; k++) {
            if (!has_kind(m, k)) continue;
            ok = take_new(m, seq, k, kf) == 0;
            if (ok) {
                const int32_t op[5] = {G4_KVOP_COPY, k, g4_prefix_block(m->pc, src, k), q->blk[k][kf], (int32_t)r};
                g4_kvalloc_emit(&m->a, op, 5);
            }
        }
        if (slide) g4_prefix_mark_hot(m->pc, src);
        for (int k = 0; k < 2; k++)
            if (has_kind(m, k)) g4_prefix_release(m->pc, src, k, 1);
        if (!ok) {
            /* no room even for one block: no hit at all (a shorter one may need other windows) */
            for (int k = 0; k < 2; k++)
                if (has_kind(m, k)) drop_entry(m, seq, k, kf, 1);
            g4_kvmgr_close(m, seq);
            g4_kvmgr_open(m, seq, cap);
            return 0;
        }
        memcpy(q->part, tok + kf * m->bs, sizeof(int32_t) * (size_t)r);
        q->len = p;
    }
    m->hit_tokens += (uint64_t)p;
    return p;
}

/* ---- growth, registration, release ---------------------------------------------------------- */

int g4_kvmgr_prepare(g4_kvmgr *m, const g4_batch *b, g4_err *err) {
    m->stamp++;
    for (int t = 0; t < b->n; t++) {
        kseq *q = &m->s[b->seq[t]];
        if (q->stamp != m->stamp) { q->stamp = m->stamp; q->pend = 0; }
        if (b->pos[t] != q->len + q->pend)
            return g4_err_set(err, G4_EINVAL, "token %d: sequence %d is at position %lld, the batch gives %d (positions are appended in order)",
                              t, b->seq[t], (long long)(q->len + q->pend), b->pos[t]);
        q->pend++;
    }
    /* pages for the blocks the new positions fall in (the window below is held already) */
    int64_t need = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (int t = 0; t < b->n; t++) {
            kseq *q = &m->s[b->seq[t]];
            if (b->pos[t] != q->len) continue; /* one visit per sequence: its first token */
            const int64_t j0 = q->len / m->bs, j1 = (q->len + q->pend - 1) / m->bs;
            for (int k = 0; k < 2; k++) {
                if (!has_kind(m, k)) continue;
                for (int64_t j = j0; j <= j1; j++) {
                    if (q->blk[k][j] >= 0 || (k == G4_KV_SLIDE && j * m->bs < q->slide_min)) continue;
                    if (pass == 0) need += m->g->ng[k];
                    else if (take_new(m, b->seq[t], k, j)) return g4_err_set(err, G4_ENOMEM, "KV pool: allocation failed after the check");
                }
            }
        }
        if (pass == 0 && need > g4_kvmgr_avail_pages(m))
            return g4_err_set(err, G4_ENOMEM, "the KV cache is full: this step needs %lld pages, %lld are free or cached",
                              (long long)need, (long long)g4_kvmgr_avail_pages(m));
    }
    return G4_OK;
}

/* Block j of the sequence is complete: into the prefix cache, or onto the copy already there. */
static void complete(g4_kvmgr *m, int seq, int64_t j, int ntok) {
    kseq *q = &m->s[seq];
    const int32_t parent = j ? q->node[j - 1] : -1;
    if (!m->pc || (j && parent < 0)) return;
    /* filled from disk: below slide_min a sliding block (a copy-on-write one) holds no rows */
    const int32_t blk[2] = {j * m->bs < q->slide_min ? -1 : q->blk[G4_KV_SLIDE][j], q->blk[G4_KV_FULL][j]};
    int dup;
    const int32_t x = g4_prefix_insert(m->pc, parent, q->part, ntok, blk, &dup);
    if (x < 0) return;
    if (dup) {
        if (ntok < m->bs) return; /* a finished sequence's last block, cached already: ours is freed */
        for (int k = 0; k < 2; k++) {
            if (!has_kind(m, k) || blk[k] < 0) continue;
            const int32_t cb = g4_prefix_block(m->pc, x, k);
            if (cb == blk[k]) continue;
            if (cb < 0) { g4_prefix_adopt(m->pc, x, blk[k]); continue; }
            g4_kvalloc_unref(&m->a, k, blk[k]);
            g4_prefix_acquire(m->pc, x, k);
            set_entry(m, seq, k, j, cb);
        }
    }
    q->node[j] = x;
}

void g4_kvmgr_commit(g4_kvmgr *m, const g4_batch *b) {
    m->stamp++;
    for (int t = 0; t < b->n; t++) {
        kseq *q = &m->s[b->seq[t]];
        const int64_t p = b->pos[t];
        q->part[p % m->bs] = b->ids[t];
        q->len = p + 1;
        if (q->len % m->bs == 0 && !q->tentative) {
            complete(m, b->seq[t], p / m->bs, m->bs);
            q->reg = q->len;
        }
    }
    if (!has_kind(m, G4_KV_SLIDE)) return;
    for (int t = b->n - 1; t >= 0; t--) {
        kseq *q = &m->s[b->seq[t]];
        if (q->stamp == m->stamp) continue; /* once per sequence, at its last token */
        q->stamp = m->stamp;
        const int64_t lo = first_slide(m, q->len - m->keep);
        for (int64_t j = q->slo; j < lo; j++) drop_entry(m, b->seq[t], G4_KV_SLIDE, j, 0);
        if (lo > q->slo) q->slo = lo;
    }
}

void g4_kvmgr_close(g4_kvmgr *m, int seq) {
    kseq *q = &m->s[seq];
    if (!q->cap) return;
    const int64_t nb = (q->len + m->bs - 1) / m->bs;
    if (q->len % m->bs) complete(m, seq, q->len / m->bs, (int)(q->len % m->bs));
    /* the chain from its root, then the window at its end: tier 1, oldest first */
    for (int64_t j = 0; j < nb; j++) drop_entry(m, seq, G4_KV_FULL, j, 1);
    for (int64_t j = q->slo; j < nb; j++) drop_entry(m, seq, G4_KV_SLIDE, j, 1);
    for (int64_t j = 0; j < nb; j++) q->node[j] = -1;
    q->cap = q->len = q->slo = 0;
    const int32_t op[2] = {G4_KVOP_CLOSE, seq};
    g4_kvalloc_emit(&m->a, op, 2);
}

int64_t g4_kvmgr_len(const g4_kvmgr *m, int seq) { return m->s[seq].len; }

/* ---- speculation: keep, tentative steps, rollback ---------------------------------------------- */

void g4_kvmgr_set_keep(g4_kvmgr *m, int64_t keep) { m->keep = keep > 0 ? keep : 0; }
int64_t g4_kvmgr_keep(const g4_kvmgr *m) { return m->keep; }

void g4_kvmgr_set_tentative(g4_kvmgr *m, int seq, int on) { m->s[seq].tentative = on != 0; }

int g4_kvmgr_truncate(g4_kvmgr *m, int seq, int64_t len, const int32_t *tok, g4_err *err) {
    kseq *q = &m->s[seq];
    if (!q->cap) return g4_err_set(err, G4_EINVAL, "sequence %d is not open", seq);
    if (len > q->len || len < q->reg || len < q->len - m->keep)
        return g4_err_set(err, G4_EINVAL, "sequence %d: cannot roll back from %lld to %lld positions (at most %lld back, not below %lld)", seq,
                          (long long)q->len, (long long)len, (long long)m->keep, (long long)q->reg);
    const int bs = m->bs;
    /* blocks wholly at or past len: never registered (only tentative steps wrote them), freed */
    for (int64_t j = (len + bs - 1) / bs; j <= (q->len - 1) / bs && q->len > 0; j++)
        for (int k = 0; k < 2; k++)
            if (has_kind(m, k) && q->blk[k][j] >= 0) drop_entry(m, seq, k, j, 0);
    q->len = len;
    /* the blocks completed below len while tentative, in order (each needs its parent's node) */
    for (int64_t j = q->reg / bs; j < len / bs; j++) {
        memcpy(q->part, tok + j * bs, sizeof(int32_t) * (size_t)bs);
        complete(m, seq, j, bs);
    }
    q->reg = len / bs * bs;
    /* the block being filled: its first len % bs tokens (later ones are rewritten) */
    memcpy(q->part, tok + q->reg, sizeof(int32_t) * (size_t)(len - q->reg));
    return G4_OK;
}

int64_t g4_kvmgr_seq_tokens(const g4_kvmgr *m, int seq, int32_t *out) {
    const kseq *q = &m->s[seq];
    if (!q->cap || !m->pc) return 0;
    int64_t n = 0, j = 0;
    for (; j * m->bs < q->len && q->node[j] >= 0 && g4_prefix_ntok(m->pc, q->node[j]) == m->bs; j++, n += m->bs)
        g4_prefix_tokens(m->pc, q->node[j], out + n);
    /* the block being filled, when everything before it is known */
    if (n == q->reg && q->len > n && q->len - n < m->bs) {
        memcpy(out + n, q->part, sizeof(int32_t) * (size_t)(q->len - n));
        n = q->len;
    }
    return n;
}

int64_t g4_kvmgr_slide_from(const g4_kvmgr *m, int64_t P) {
    return has_kind(m, G4_KV_SLIDE) && m->g->window > 0 ? first_slide(m, P) * m->bs : P;
}

int64_t g4_kvmgr_attach_slides(g4_kvmgr *m, int seq, int64_t lo) {
    kseq *q = &m->s[seq];
    if (!m->pc || !has_kind(m, G4_KV_SLIDE) || m->g->window <= 0) return g4_kvmgr_slide_from(m, q->len);
    /* a prompt of lo tokens hits lo - 1 of them: its last token is computed, at position lo - 1 */
    const int64_t want = first_slide(m, lo > 1 ? lo - 1 : 0);
    for (int64_t j = q->slo - 1; j >= want; j--) {
        const int32_t x = q->node[j], b = x >= 0 ? g4_prefix_block(m->pc, x, G4_KV_SLIDE) : -1;
        if (b < 0) break;
        g4_prefix_acquire(m->pc, x, G4_KV_SLIDE);
        set_entry(m, seq, G4_KV_SLIDE, j, b);
        q->slo = j;
    }
    return q->slo * m->bs;
}

void g4_kvmgr_set_restore(g4_kvmgr *m, int seq, int64_t slide_min) { m->s[seq].slide_min = slide_min; }

void g4_kvmgr_unprepare(g4_kvmgr *m, int seq) {
    kseq *q = &m->s[seq];
    for (int64_t j = (q->len + m->bs - 1) / m->bs; j < m->tlen; j++)
        for (int k = 0; k < 2; k++)
            if (has_kind(m, k) && q->blk[k][j] >= 0) drop_entry(m, seq, k, j, 0);
}

int64_t g4_kvmgr_pages_to_grow(const g4_kvmgr *m, int64_t len, int64_t n) {
    const int64_t bs = m->bs, full = (len + n + bs - 1) / bs - (len + bs - 1) / bs;
    int64_t slide = m->g->window > 0 ? ((int64_t)m->g->window - 1 + m->keep + m->max_batch - 1) / bs + 2 : 0;
    if (slide > full + 1) slide = full + 1;
    return full * m->g->ng[G4_KV_FULL] + slide * m->g->ng[G4_KV_SLIDE];
}

int64_t g4_kvmgr_avail_pages(const g4_kvmgr *m) { return m->a.n_free + (m->pc ? g4_prefix_evictable_pages(m->pc) : 0); }

void g4_kvmgr_cache_clear(g4_kvmgr *m) {
    if (m->pc) g4_prefix_clear(m->pc);
}

const int32_t *g4_kvmgr_ops(const g4_kvmgr *m, int64_t *n) {
    *n = m->a.n_ops;
    return m->a.ops;
}
void g4_kvmgr_ops_clear(g4_kvmgr *m) { m->a.n_ops = 0; }
int g4_kvmgr_failed(const g4_kvmgr *m) { return m->a.failed; }

void g4_kvmgr_stats(const g4_kvmgr *m, g4_kv_stats *st) {
    memset(st, 0, sizeof *st);
    st->page_bytes = m->g->page_bytes;
    st->pages_total = m->a.n_pages;
    st->pages_free = m->a.n_free;
    st->pages_cached = m->pc ? g4_prefix_evictable_pages(m->pc) : 0;
    st->blocks_used[G4_KV_SLIDE] = m->a.used_blocks[G4_KV_SLIDE];
    st->blocks_used[G4_KV_FULL] = m->a.used_blocks[G4_KV_FULL];
    st->prefix_cache = m->pc != NULL;
    st->cache_queries = m->queries;
    st->cache_query_tokens = m->query_tokens;
    st->cache_hit_tokens = m->hit_tokens;
    if (m->pc) {
        g4_prefix_stats ps;
        g4_prefix_get_stats(m->pc, &ps);
        st->cache_nodes = ps.nodes;
        st->cache_evictions = ps.evicted_units;
    }
}
