/* kvpool.c — page geometry, the per-rank store and its ops (kvpool.h). */
#include "gemma4/kvpool.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "kernels/kernels.h"

static int64_t up64(int64_t x) { return (x + 63) / 64 * 64; }

int g4_kv_geom_make(const g4_config *cfg, const g4_tp_plan *plan, int dtype, g4_kv_geom *g, g4_err *err) {
    memset(g, 0, sizeof *g);
    const int L = cfg->n_layers;
    g->bs = G4_KV_BLOCK;
    g->dtype = dtype;
    g->n_layers = L;
    g->kind = calloc((size_t)L, 1);
    g->group = calloc((size_t)L, sizeof *g->group);
    g->off = calloc((size_t)L, sizeof *g->off);
    g->row = calloc((size_t)L, sizeof *g->row);
    g->head = calloc((size_t)L, sizeof *g->head);
    if (!g->kind || !g->group || !g->off || !g->row || !g->head) {
        g4_kv_geom_free(g);
        return g4_err_set(err, G4_ENOMEM, "out of memory");
    }
    for (int l = 0; l < L; l++) {
        const g4_layer_cfg *lc = &cfg->layers[l];
        const g4_dtype_traits *t = g4_dtype_info(dtype);
        if (!t || !t->kv || lc->head_dim % t->block) {
            int rc = g4_err_set(err, G4_EUNSUPPORTED, "--kv-dtype %s needs head dims that are multiples of %d (layer %d has %d)",
                                g4_dtype_name(dtype), t ? t->block : 1, l, lc->head_dim);
            g4_kv_geom_free(g);
            return rc;
        }
        g->kind[l] = lc->full ? G4_KV_FULL : G4_KV_SLIDE;
        if (!lc->full) g->window = lc->window;
        g->head[l] = (int64_t)g4_dtype_row_bytes(dtype, lc->head_dim);
        g->row[l] = g->head[l] * plan->layers[l].n_kv_local;
        if (up64(2 * g->bs * g->row[l]) > g->page_bytes) g->page_bytes = up64(2 * g->bs * g->row[l]);
    }
    /* pack each kind's layers into pages in layer order */
    for (int k = 0; k < 2; k++) {
        int64_t used = g->page_bytes; /* forces a first page */
        for (int l = 0; l < L; l++) {
            if (g->kind[l] != k) continue;
            const int64_t need = up64(2 * g->bs * g->row[l]);
            if (used + need > g->page_bytes) { g->ng[k]++; used = 0; }
            g->group[l] = g->ng[k] - 1;
            g->off[l] = used;
            used += need;
        }
    }
    return G4_OK;
}

void g4_kv_geom_free(g4_kv_geom *g) {
    free(g->kind);
    free(g->group);
    free(g->off);
    free(g->row);
    free(g->head);
    memset(g, 0, sizeof *g);
}

int64_t g4_kv_seq_pages(const g4_kv_geom *g, int64_t ctx, int batch) {
    const int64_t full = (ctx + g->bs - 1) / g->bs;
    int64_t slide = g->window > 0 ? ((int64_t)g->window - 1 + batch - 1) / g->bs + 2 : 0;
    if (slide > full) slide = full;
    return full * g->ng[G4_KV_FULL] + slide * g->ng[G4_KV_SLIDE];
}

/* ---- store -------------------------------------------------------------------------------- */

int g4_kvstore_create(g4_kvstore *s, const g4_config *cfg, const g4_tp_plan *plan, int dtype, int64_t n_pages,
                      int max_seqs, int64_t max_ctx, g4_err *err) {
    memset(s, 0, sizeof *s);
    int rc = g4_kv_geom_make(cfg, plan, dtype, &s->g, err);
    if (rc) return rc;
    s->n_pages = n_pages;
    s->max_seqs = max_seqs;
    s->tlen = (max_ctx + s->g.bs - 1) / s->g.bs;
    s->arena_bytes = (size_t)n_pages * (size_t)s->g.page_bytes;
    if (s->arena_bytes) {
        void *p = mmap(NULL, s->arena_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED) {
            g4_kvstore_free(s);
            return g4_err_set(err, G4_ENOMEM, "cannot map %zu bytes for the KV cache (--kv-budget-mb)", (size_t)n_pages * (size_t)s->g.page_bytes);
        }
        madvise(p, s->arena_bytes, MADV_HUGEPAGE);
        s->arena = p;
    }
    int ok = 1;
    for (int k = 0; k < 2; k++) {
        s->nblk[k] = s->g.ng[k] ? n_pages / s->g.ng[k] : 0;
        s->bpages[k] = malloc(sizeof(int32_t) * (size_t)(s->nblk[k] * s->g.ng[k]) + 4);
        s->tbl[k] = malloc(sizeof(int32_t) * (size_t)(s->tlen * max_seqs) + 4);
        ok = ok && s->bpages[k] && s->tbl[k];
        if (ok) memset(s->tbl[k], 0xff, sizeof(int32_t) * (size_t)(s->tlen * max_seqs));
    }
    s->cap = calloc((size_t)max_seqs, sizeof *s->cap);
    if (!ok || !s->cap) {
        g4_kvstore_free(s);
        return g4_err_set(err, G4_ENOMEM, "out of memory for the KV block tables");
    }
    return G4_OK;
}

void g4_kvstore_free(g4_kvstore *s) {
    if (s->arena) munmap(s->arena, s->arena_bytes);
    for (int k = 0; k < 2; k++) {
        free(s->bpages[k]);
        free(s->tbl[k]);
    }
    free(s->cap);
    g4_kv_geom_free(&s->g);
    memset(s, 0, sizeof *s);
}

static void reset_seq(g4_kvstore *s, int seq) {
    for (int k = 0; k < 2; k++) memset(s->tbl[k] + (int64_t)seq * s->tlen, 0xff, sizeof(int32_t) * (size_t)s->tlen);
}

static void copy_block(g4_kvstore *s, int kind, int32_t src, int32_t dst, int64_t npos) {
    const g4_kv_geom *g = &s->g;
    for (int l = 0; l < g->n_layers; l++) {
        if (g->kind[l] != kind) continue;
        /* K rows, then V rows (bs rows later) */
        memcpy(g4_kv_rows(s, l, dst, 0), g4_kv_rows(s, l, src, 0), (size_t)(npos * g->row[l]));
        memcpy(g4_kv_rows(s, l, dst, g->bs), g4_kv_rows(s, l, src, g->bs), (size_t)(npos * g->row[l]));
    }
}

int g4_kvstore_apply(g4_kvstore *s, const int32_t *ops, int64_t n, g4_err *err) {
    const g4_kv_geom *g = &s->g;
    int64_t i = 0;
#define NEED(w) do { if (i + (w) > n) goto bad; } while (0)
#define KIND_OK(k) ((k) >= 0 && (k) < 2 && g->ng[k] > 0)
#define BLK_OK(k, b) ((b) >= 0 && (b) < s->nblk[k])
#define SEQ_OK(q) ((q) >= 0 && (q) < s->max_seqs)
    while (i < n) {
        const int32_t *o = ops + i;
        switch (o[0]) {
        case G4_KVOP_BIND: {
            NEED(3);
            if (!KIND_OK(o[1]) || !BLK_OK(o[1], o[2])) goto bad;
            const int ng = g->ng[o[1]];
            NEED(3 + ng);
            for (int p = 0; p < ng; p++) {
                if (o[3 + p] < 0 || o[3 + p] >= s->n_pages) goto bad;
                s->bpages[o[1]][(int64_t)o[2] * ng + p] = o[3 + p];
            }
            i += 3 + ng;
            break;
        }
        case G4_KVOP_SET:
            NEED(5);
            if (!SEQ_OK(o[1]) || !KIND_OK(o[2]) || o[3] < 0 || o[3] >= s->tlen || (o[4] != -1 && !BLK_OK(o[2], o[4]))) goto bad;
            s->tbl[o[2]][(int64_t)o[1] * s->tlen + o[3]] = o[4];
            i += 5;
            break;
        case G4_KVOP_COPY:
            NEED(5);
            if (!KIND_OK(o[1]) || !BLK_OK(o[1], o[2]) || !BLK_OK(o[1], o[3]) || o[4] < 0 || o[4] > g->bs) goto bad;
            copy_block(s, o[1], o[2], o[3], o[4]);
            i += 5;
            break;
        case G4_KVOP_OPEN:
            NEED(3);
            if (!SEQ_OK(o[1]) || o[2] < 1 || o[2] > s->tlen * g->bs) goto bad;
            reset_seq(s, o[1]);
            s->cap[o[1]] = o[2];
            i += 3;
            break;
        case G4_KVOP_CLOSE:
            NEED(2);
            if (!SEQ_OK(o[1])) goto bad;
            reset_seq(s, o[1]);
            s->cap[o[1]] = 0;
            i += 2;
            break;
        default: goto bad;
        }
    }
    return G4_OK;
bad:
    return g4_err_set(err, G4_EINVAL, "malformed KV op %d at word %lld of %lld", (int)ops[i], (long long)i, (long long)n);
#undef NEED
#undef KIND_OK
#undef BLK_OK
#undef SEQ_OK
}
