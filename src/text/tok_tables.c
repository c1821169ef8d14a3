/* tok_tables.c — the tokenizer's data structures (tok_internal.h): growable buffers, the
 * string -> id and pair -> merge hash tables, and the added-token tries. Shared by the loader
 * (tokenizer.c, tok_merges.c) and the encoder and decoder (tok_encode.c, tok_decode.c), and
 * below all of them: it knows no JSON schema, no normalizer, no BPE. */
#include "text/tok_internal.h"
#include "text/tok_json.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

/* ---------------------------------------------------------------- buffers, maps */

int tk_buf_reserve(tk_buf *s, size_t extra) {
    if (s->cap - s->n >= extra + 1) return G4_OK;
    size_t nc = s->cap ? s->cap : 256;
    while (nc - s->n < extra + 1) nc *= 2;
    char *nb = realloc(s->b, nc);
    if (!nb) return G4_ENOMEM;
    s->b = nb;
    s->cap = nc;
    return G4_OK;
}

int tk_buf_put(tk_buf *s, const void *p, size_t n) {
    if (tk_buf_reserve(s, n)) return G4_ENOMEM;
    if (n) memcpy(s->b + s->n, p, n);
    s->n += n;
    s->b[s->n] = 0;
    return G4_OK;
}

int tk_grow(void **p, size_t *cap, size_t elem, size_t first) {
    size_t nc = *cap ? *cap * 2 : first;
    if (nc > SIZE_MAX / elem) return G4_ENOMEM;
    void *np;
    if (nc * elem < ((size_t)4 << 20)) {
        np = realloc(*p, nc * elem);
    } else {
        np = tj_big_alloc(nc * elem);
        if (np && *cap) memcpy(np, *p, *cap * elem);
        if (np) free(*p);
    }
    if (!np) return G4_ENOMEM;
    *p = np;
    *cap = nc;
    return G4_OK;
}

uint32_t tk_shash(const char *s, size_t len) { return (uint32_t)XXH3_64bits(s, len); }

/* Tables hold at most 7 entries per 10 slots (linear probing stays short); sized once from the
 * JSON array lengths, so loading never rehashes. */
static void *table_alloc(size_t expect, size_t slot, size_t *cap) {
    size_t c = 16;
    while (c * 7 < (expect + 1) * 10) c *= 2;
    void *p = tj_big_alloc(c * slot);
    if (p) memset(p, 0, c * slot);
    *cap = p ? c : 0;
    return p;
}

int tk_strmap_init(tk_strmap *m, size_t expect) {
    m->n = 0;
    return (m->slots = table_alloc(expect, sizeof *m->slots, &m->cap)) ? G4_OK : G4_ENOMEM;
}

static int strmap_grow(const g4_tokenizer *t, tk_strmap *m) {
    tk_strmap nm;
    if (tk_strmap_init(&nm, m->cap)) return G4_ENOMEM;
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->slots[i].idp1) continue;
        size_t j = m->slots[i].hash & (nm.cap - 1);
        while (nm.slots[j].idp1) j = (j + 1) & (nm.cap - 1);
        nm.slots[j] = m->slots[i];
    }
    nm.n = m->n;
    (void)t;
    free(m->slots);
    *m = nm;
    return G4_OK;
}

/* Inserts or overwrites (HashMap semantics: the last insert of a key wins). */
int tk_strmap_put(const g4_tokenizer *t, tk_strmap *m, uint32_t off, uint32_t len, int32_t id) {
    if ((m->n + 1) * 10 > m->cap * 7 && strmap_grow(t, m)) return G4_ENOMEM;
    const char *s = tk_str(t, off);
    uint32_t h = tk_shash(s, len);
    size_t j = h & (m->cap - 1);
    while (m->slots[j].idp1) {
        tk_sslot *e = &m->slots[j];
        if (e->hash == h && e->len == len && !memcmp(tk_str(t, e->off), s, len)) { e->idp1 = id + 1; return G4_OK; }
        j = (j + 1) & (m->cap - 1);
    }
    m->slots[j] = (tk_sslot){ off, len, id + 1, h };
    m->n++;
    return G4_OK;
}

int32_t tk_strmap_get(const g4_tokenizer *t, const tk_strmap *m, const char *s, size_t len) {
    return tk_strmap_get_h(t, m, s, len, tk_shash(s, len));
}

int32_t tk_strmap_get_h(const g4_tokenizer *t, const tk_strmap *m, const char *s, size_t len, uint32_t h) {
    if (!m->cap) return -1;
    size_t j = h & (m->cap - 1);
    while (m->slots[j].idp1) {
        const tk_sslot *e = &m->slots[j];
        if (e->hash == h && e->len == len && !memcmp(tk_str(t, e->off), s, len)) return e->idp1 - 1;
        j = (j + 1) & (m->cap - 1);
    }
    return -1;
}

int tk_mergemap_init(tk_mergemap *m, size_t expect) {
    m->n = 0;
    return (m->slots = table_alloc(expect, sizeof *m->slots, &m->cap)) ? G4_OK : G4_ENOMEM;
}

int tk_mergemap_put(tk_mergemap *m, uint64_t key, uint32_t rank, int32_t new_id) {
    if ((m->n + 1) * 10 > m->cap * 7) {
        tk_mergemap nm;
        if (tk_mergemap_init(&nm, m->cap)) return G4_ENOMEM;
        for (size_t i = 0; i < m->cap; i++) {
            if (!m->slots[i].keyp1) continue;
            size_t j = tk_mhash(m->slots[i].keyp1 - 1) & (nm.cap - 1);
            while (nm.slots[j].keyp1) j = (j + 1) & (nm.cap - 1);
            nm.slots[j] = m->slots[i];
        }
        nm.n = m->n;
        free(m->slots);
        *m = nm;
    }
    size_t j = tk_mhash(key) & (m->cap - 1);
    while (m->slots[j].keyp1) {
        if (m->slots[j].keyp1 == key + 1) { m->slots[j].rank = rank; m->slots[j].new_id = new_id; return G4_OK; }
        j = (j + 1) & (m->cap - 1);
    }
    m->slots[j] = (tk_mslot){ key + 1, rank, new_id };
    m->n++;
    return G4_OK;
}

int tk_mergemap_get(const tk_mergemap *m, uint64_t key, uint32_t *rank, int32_t *new_id) {
    if (!m->cap) return 0;
    size_t j = tk_mhash(key) & (m->cap - 1);
    while (m->slots[j].keyp1) {
        if (m->slots[j].keyp1 == key + 1) {
            if (rank) *rank = m->slots[j].rank;
            if (new_id) *new_id = m->slots[j].new_id;
            return 1;
        }
        j = (j + 1) & (m->cap - 1);
    }
    return 0;
}

/* ---------------------------------------------------------------- tries */

int tk_trie_init(tk_trie *tr) {
    memset(tr, 0, sizeof *tr);
    tr->term = malloc(sizeof *tr->term);
    if (!tr->term) return G4_ENOMEM;
    tr->term[0] = -1;
    tr->n_nodes = 1;
    return tk_mergemap_init(&tr->edges, 64);
}

void tk_trie_free(tk_trie *tr) {
    free(tr->term);
    free(tr->edges.slots);
}

/* Adds s as pattern `idx`; an equal earlier pattern keeps the match (aho-corasick picks the
 * lowest pattern among equal matches). */
int tk_trie_add(tk_trie *tr, const char *s, size_t len, int32_t idx) {
    size_t node = 0;
    for (size_t i = 0; i < len; i++) {
        uint64_t key = ((uint64_t)node << 8) | (unsigned char)s[i];
        int32_t child;
        if (!tk_mergemap_get(&tr->edges, key, NULL, &child)) {
            int32_t *nt = realloc(tr->term, (tr->n_nodes + 1) * sizeof *nt);
            if (!nt) return G4_ENOMEM;
            tr->term = nt;
            child = (int32_t)tr->n_nodes++;
            tr->term[child] = -1;
            if (tk_mergemap_put(&tr->edges, key, 0, child)) return G4_ENOMEM;
        }
        node = (size_t)child;
    }
    if (len && tr->term[node] < 0) tr->term[node] = idx;
    return G4_OK;
}

int tk_trie_longest(const g4_tokenizer *t, const tk_trie *tr, const char *s, size_t len, size_t *mlen) {
    (void)t;
    size_t node = 0;
    int32_t best = -1;
    for (size_t i = 0; i < len; i++) {
        int32_t child;
        if (!tk_mergemap_get(&tr->edges, ((uint64_t)node << 8) | (unsigned char)s[i], NULL, &child)) break;
        node = (size_t)child;
        if (tr->term[node] >= 0) { best = tr->term[node]; *mlen = i + 1; }
    }
    return best;
}
