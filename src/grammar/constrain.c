/* constrain.c — grammar tables, the vocabulary trie and the matcher (see constrain.h).
 *
 * A configuration is a small set of stacks; a stack is its top (a DFA state) and a parent id
 * naming the frames below, interned per matcher as (return state, parent). One symbol moves a
 * stack by the top rule's DFA, by calls (push the return state, enter the callee) and, where the
 * top may end, by returns (pop). Most tops can neither call nor return: then a step is one
 * table lookup, which is what the trie walk does nearly always. */
#include "grammar/constrain.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { F_ACC = 1, F_CALLS = 2 };

struct g4_grammar {
    atomic_int refs;
    int n_rules, n, ncls;
    uint16_t cls[G4_NSYM];
    int32_t *next;            /* [n * ncls] */
    uint8_t *flags;
    int32_t *coff, *call;     /* calls (rule, target) of each state, targets global */
    int32_t *rstart;          /* first state of each rule */
    int n_special;
    char *special[G4_SYM_NSPECIAL];
    /* mask cache of context-free states (LRU), under mu */
    pthread_mutex_t mu;
    uint64_t **cache;
    int32_t *prev, *nxt;
    int head, tail, n_cached;
    size_t words;
};

/* ---- grammar ------------------------------------------------------------------------------------ */

/* Can rule r reach acceptance with calls to productive rules only? */
static int productive(const g4_dfa *d, const uint8_t *prod, int32_t *queue, uint8_t *seen) {
    if (d->n == 0) return 0;
    memset(seen, 0, (size_t)d->n);
    int qh = 0, qt = 0;
    queue[qt++] = 0;
    seen[0] = 1;
    while (qh < qt) {
        int s = queue[qh++];
        if (d->acc[s]) return 1;
        for (int c = 0; c < d->ncls; c++) {
            int32_t t = d->next[(size_t)s * (size_t)d->ncls + (size_t)c];
            if (t >= 0 && !seen[t]) { seen[t] = 1; queue[qt++] = t; }
        }
        for (int32_t k = d->coff[s]; k < d->coff[s + 1]; k++) {
            int32_t t = d->call[2 * k + 1];
            if (prod[d->call[2 * k]] && !seen[t]) { seen[t] = 1; queue[qt++] = t; }
        }
    }
    return 0;
}

static void grammar_free(g4_grammar *g) {
    if (!g) return;
    free(g->next); free(g->flags); free(g->coff); free(g->call); free(g->rstart);
    for (int k = 0; k < g->n_special; k++) free(g->special[k]);
    if (g->cache) for (int s = 0; s < g->n; s++) free(g->cache[s]);
    free(g->cache); free(g->prev); free(g->nxt);
    pthread_mutex_destroy(&g->mu);
    free(g);
}

void g4_grammar_retain(g4_grammar *g) { if (g) atomic_fetch_add(&g->refs, 1); }
void g4_grammar_release(g4_grammar *g) { if (g && atomic_fetch_sub(&g->refs, 1) == 1) grammar_free(g); }
int g4_grammar_n_states(const g4_grammar *g) { return g->n; }
int g4_grammar_n_special(const g4_grammar *g) { return g->n_special; }
const char *g4_grammar_special(const g4_grammar *g, int k) { return k >= 0 && k < g->n_special ? g->special[k] : NULL; }

/* rule -> rules its start may call without consuming anything: a cycle is left recursion */
static int left_cycle(const g4_dfa *r, int n, int at, uint8_t *mark) {
    if (mark[at] == 1) return 1;
    if (mark[at] == 2 || r[at].n == 0) return 0;
    mark[at] = 1;
    for (int32_t k = r[at].coff[0]; k < r[at].coff[1]; k++)
        if (left_cycle(r, n, r[at].call[2 * k], mark)) return 1;
    mark[at] = 2;
    return 0;
}

int g4_grammar_build(const g4_dfa *rules, int n_rules, const char *const *specials, int n_specials, int max_states,
                     g4_fsa_budget *budget, g4_grammar **out, g4_err *err) {
    *out = NULL;
    if (max_states <= 0 || max_states > G4_GRAMMAR_MAX_STATES) max_states = G4_GRAMMAR_MAX_STATES;
    if (n_rules < 1 || n_rules > G4_GRAMMAR_MAX_RULES)
        return g4_err_set(err, G4_EINVAL, "a grammar needs 1 to %d rules (got %d)", G4_GRAMMAR_MAX_RULES, n_rules);
    if (n_specials < 0 || n_specials > G4_SYM_NSPECIAL)
        return g4_err_set(err, G4_EINVAL, "a grammar names at most %d special tokens", G4_SYM_NSPECIAL);
    int rc = G4_ENOMEM, maxn = 1;
    for (int r = 0; r < n_rules; r++) if (rules[r].n > maxn) maxn = rules[r].n;
    g4_dfa *R = calloc((size_t)n_rules, sizeof *R);
    uint8_t *prod = calloc((size_t)n_rules, 1), *seen = malloc((size_t)maxn), *mark = calloc((size_t)n_rules, 1);
    int32_t *queue = malloc((size_t)maxn * sizeof *queue);
    g4_grammar *g = calloc(1, sizeof *g);
    if (!R || !prod || !seen || !mark || !queue || !g) goto fail;
    atomic_store(&g->refs, 1);
    pthread_mutex_init(&g->mu, NULL);
    g->head = g->tail = -1;
    for (int r = 0; r < n_rules; r++)
        if (left_cycle(rules, n_rules, r, mark)) { rc = g4_err_set(err, G4_EINVAL, "the schema is left-recursive (a $ref that refers back to itself before any text)"); goto fail; }
    for (int changed = 1; changed;) {
        changed = 0;
        for (int r = 0; r < n_rules; r++)
            if (!prod[r] && productive(&rules[r], prod, queue, seen)) { prod[r] = 1; changed = 1; }
    }
    if (!prod[0]) { rc = g4_err_set(err, G4_EINVAL, "the schema accepts no value (a required recursion without an end, or an empty choice)"); goto fail; }
    size_t total = 0;
    for (int r = 0; r < n_rules; r++) {
        if (!prod[r]) continue;
        g4_dfa src = rules[r];
        src.budget = budget;
        if ((rc = g4_dfa_copy(&src, &R[r], err)) || (rc = g4_dfa_trim(&R[r], prod, err))) goto fail;
        rc = G4_ENOMEM;
        if (r > 0 && R[r].acc[0]) { rc = g4_err_set(err, G4_EINVAL, "grammar rule %d accepts the empty string", r); goto fail; }
        total += (size_t)R[r].n;
    }
    if (total > (size_t)max_states) {
        rc = g4_err_set(err, G4_EINVAL, "the schema compiles to %zu automaton states, more than the limit of %d (the grammar state limit)", total, max_states);
        goto fail;
    }
    /* one class map for all rules: symbols whose class is the same in every rule */
    {
        int32_t *key = malloc((size_t)n_rules * sizeof *key);
        int nk = 0, rep[G4_NSYM];
        if (!key) goto fail;
        for (int s = 0; s < G4_NSYM; s++) {
            int found = -1;
            for (int k = 0; k < nk && found < 0; k++) {
                int same = 1;
                for (int r = 0; r < n_rules && same; r++) if (R[r].n && R[r].cls[s] != R[r].cls[rep[k]]) same = 0;
                if (same) found = k;
            }
            if (found < 0) { rep[nk] = s; found = nk++; }
            g->cls[s] = (uint16_t)found;
        }
        free(key);
        g->ncls = nk;
        g->n = (int)total;
        g->n_rules = n_rules;
        size_t K = (size_t)nk, ncall = 0;
        for (int r = 0; r < n_rules; r++) if (R[r].n) ncall += (size_t)R[r].coff[R[r].n];
        /* the tables outlive the compile; its budget counts them as long as it runs */
        size_t table_bytes = total * (K * sizeof *g->next + 1 + sizeof *g->coff + sizeof *g->cache + 2 * sizeof *g->prev) + 2 * ncall * sizeof *g->call;
        if (g4_fsa_reserve(budget, table_bytes) || g4_fsa_poll(budget, total * K)) { rc = g4_fsa_budget_err(budget, err); goto fail; }
        g->next = malloc(total * K * sizeof *g->next + 1);
        g->flags = calloc(total + 1, 1);
        g->coff = malloc((total + 1) * sizeof *g->coff);
        g->call = malloc(2 * ncall * sizeof *g->call + 1);
        g->rstart = malloc((size_t)n_rules * sizeof *g->rstart);
        g->cache = calloc(total + 1, sizeof *g->cache);
        g->prev = malloc((total + 1) * sizeof *g->prev);
        g->nxt = malloc((total + 1) * sizeof *g->nxt);
        if (!g->next || !g->flags || !g->coff || !g->call || !g->rstart || !g->cache || !g->prev || !g->nxt) goto fail;
        int base = 0;
        size_t w = 0;
        for (int r = 0; r < n_rules; r++) {
            g->rstart[r] = R[r].n ? base : -1;
            base += R[r].n;
        }
        for (int r = 0; r < n_rules; r++) {
            const g4_dfa *d = &R[r];
            for (int i = 0; i < d->n; i++) {
                size_t s = (size_t)(g->rstart[r] + i);
                for (size_t c = 0; c < K; c++) {
                    int32_t t = d->next[(size_t)i * (size_t)d->ncls + d->cls[rep[c]]];
                    g->next[s * K + c] = t >= 0 ? g->rstart[r] + t : -1;
                }
                g->flags[s] = (uint8_t)((d->acc[i] ? F_ACC : 0) | (d->coff[i + 1] > d->coff[i] ? F_CALLS : 0));
                g->coff[s] = (int32_t)w;
                for (int32_t k = d->coff[i]; k < d->coff[i + 1]; k++) {
                    g->call[2 * w] = d->call[2 * k];
                    g->call[2 * w + 1] = g->rstart[r] + d->call[2 * k + 1];
                    w++;
                }
            }
        }
        g->coff[total] = (int32_t)w;
    }
    for (int k = 0; k < n_specials; k++) {
        if (!(g->special[k] = strdup(specials[k]))) goto fail;
        g->n_special = k + 1;
    }
    rc = G4_OK;
    *out = g;
    g = NULL;
fail:
    if (rc == G4_ENOMEM && (!err || !err->msg[0])) g4_err_set(err, G4_ENOMEM, "grammar: out of memory");
    if (R) for (int r = 0; r < n_rules; r++) g4_dfa_free(&R[r]);
    free(R); free(prod); free(seen); free(mark); free(queue);
    grammar_free(g);
    return rc;
}

/* ---- vocabulary ------------------------------------------------------------------------------- */

struct g4_vocab {
    int n_ids, max_len;
    char *bytes;
    uint32_t *boff, *blen;    /* per id; blen 0: no bytes */
    /* the trie in preorder */
    int n_nodes;
    uint8_t *nbyte;
    uint16_t *ndepth;
    int32_t *nend, *ntok0, *ntok1;
    int32_t *sorted;          /* ids with bytes, sorted by them */
    int n_sorted;
    /* special tokens: id and text, for the grammar's named specials */
    int32_t *spec_ids;
    char **spec_text;
    int n_spec;
};

static const g4_vocab *sort_vocab;
static int cmp_tok(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    const g4_vocab *v = sort_vocab;
    uint32_t lx = v->blen[x], ly = v->blen[y], l = lx < ly ? lx : ly;
    int c = memcmp(v->bytes + v->boff[x], v->bytes + v->boff[y], l);
    if (c) return c;
    if (lx != ly) return lx < ly ? -1 : 1;
    return (x > y) - (x < y);
}

static int byte_piece(const char *p, size_t n) {
    if (n != 6 || memcmp(p, "<0x", 3) || p[5] != '>') return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = p[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

void g4_vocab_free(g4_vocab *v) {
    if (!v) return;
    free(v->bytes); free(v->boff); free(v->blen);
    free(v->nbyte); free(v->ndepth); free(v->nend); free(v->ntok0); free(v->ntok1); free(v->sorted);
    for (int i = 0; i < v->n_spec; i++) free(v->spec_text[i]);
    free(v->spec_ids);
    free(v->spec_text);
    free(v);
}

int g4_vocab_n_ids(const g4_vocab *v) { return v->n_ids; }

const char *g4_vocab_bytes(const g4_vocab *v, int32_t id, size_t *len) {
    if (id < 0 || id >= v->n_ids || !v->blen[id]) return NULL;
    if (len) *len = v->blen[id];
    return v->bytes + v->boff[id];
}

int g4_vocab_create(const g4_tokenizer *tok, int n_ids, g4_vocab **out, g4_err *err) {
    *out = NULL;
    int nt = g4_tokenizer_vocab_size(tok);
    if (n_ids < nt) n_ids = nt;
    g4_vocab *v = calloc(1, sizeof *v);
    if (!v) return g4_err_set(err, G4_ENOMEM, "vocabulary index: out of memory");
    v->n_ids = n_ids;
    v->boff = calloc((size_t)n_ids, sizeof *v->boff);
    v->blen = calloc((size_t)n_ids, sizeof *v->blen);
    v->sorted = malloc((size_t)n_ids * sizeof *v->sorted);
    size_t cap = 1 << 20, used = 0;
    v->bytes = malloc(cap);
    int rc = G4_ENOMEM;
    if (!v->boff || !v->blen || !v->sorted || !v->bytes) goto fail;
    for (int32_t id = 0; id < nt; id++) {
        size_t pl;
        const char *piece = g4_tokenizer_piece(tok, id, &pl);
        if (!piece) continue;
        if (g4_tokenizer_is_special(tok, id)) {
            if (v->n_spec % 64 == 0) {
                int32_t *a = realloc(v->spec_ids, ((size_t)v->n_spec + 64) * sizeof *a);
                if (a) v->spec_ids = a;
                char **t = realloc(v->spec_text, ((size_t)v->n_spec + 64) * sizeof *t);
                if (t) v->spec_text = t;
                if (!a || !t) goto fail;
            }
            if (!(v->spec_text[v->n_spec] = malloc(pl + 1))) goto fail;
            memcpy(v->spec_text[v->n_spec], piece, pl);
            v->spec_text[v->n_spec][pl] = 0;
            v->spec_ids[v->n_spec++] = id;
            continue;
        }
        char *text = NULL, one;
        size_t tl = 0;
        if ((rc = g4_tokenizer_decode(tok, &id, 1, 0, &text, &tl, err))) goto fail;
        const char *b = text;
        int bp = byte_piece(piece, pl);
        if (bp >= 0 && !(tl == pl && !memcmp(text, piece, pl))) { one = (char)bp; b = &one; tl = 1; }
        if (tl && tl < 0xFFFF) {
            if (used + tl > cap) {
                while (used + tl > cap) cap *= 2;
                char *nb = realloc(v->bytes, cap);
                if (!nb) { free(text); rc = G4_ENOMEM; goto fail; }
                v->bytes = nb;
            }
            memcpy(v->bytes + used, b, tl);
            v->boff[id] = (uint32_t)used;
            v->blen[id] = (uint32_t)tl;
            used += tl;
            v->sorted[v->n_sorted++] = id;
            if ((int)tl > v->max_len) v->max_len = (int)tl;
        }
        free(text);
    }
    /* qsort has no context argument: the sort runs under one lock */
    static pthread_mutex_t sort_mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&sort_mu);
    sort_vocab = v;
    qsort(v->sorted, (size_t)v->n_sorted, sizeof *v->sorted, cmp_tok);
    pthread_mutex_unlock(&sort_mu);
    /* preorder trie: one node per distinct prefix */
    size_t ncap = (size_t)v->n_sorted * 2 + 16;
    v->nbyte = malloc(ncap);
    v->ndepth = malloc(ncap * sizeof *v->ndepth);
    v->nend = malloc(ncap * sizeof *v->nend);
    v->ntok0 = malloc(ncap * sizeof *v->ntok0);
    v->ntok1 = malloc(ncap * sizeof *v->ntok1);
    int32_t *path = malloc(((size_t)v->max_len + 1) * sizeof *path);
    if (!v->nbyte || !v->ndepth || !v->nend || !v->ntok0 || !v->ntok1 || !path) { free(path); goto fail; }
    int depth = 0;
    const char *prev = NULL;
    size_t prevl = 0;
    for (int i = 0; i < v->n_sorted; i++) {
        int32_t id = v->sorted[i];
        const char *b = v->bytes + v->boff[id];
        size_t l = v->blen[id], lcp = 0;
        while (prev && lcp < l && lcp < prevl && b[lcp] == prev[lcp]) lcp++;
        while ((size_t)depth > lcp) v->nend[path[--depth]] = v->n_nodes;
        if (prev && lcp == l && l == prevl) { v->ntok1[path[depth - 1]] = i + 1; continue; } /* same bytes */
        for (size_t d = lcp; d < l; d++) {
            if ((size_t)v->n_nodes == ncap) {
                ncap *= 2;
                uint8_t *a1 = realloc(v->nbyte, ncap);
                if (a1) v->nbyte = a1;
                uint16_t *a2 = realloc(v->ndepth, ncap * sizeof *a2);
                if (a2) v->ndepth = a2;
                int32_t *a3 = realloc(v->nend, ncap * sizeof *a3);
                if (a3) v->nend = a3;
                int32_t *a4 = realloc(v->ntok0, ncap * sizeof *a4);
                if (a4) v->ntok0 = a4;
                int32_t *a5 = realloc(v->ntok1, ncap * sizeof *a5);
                if (a5) v->ntok1 = a5;
                if (!a1 || !a2 || !a3 || !a4 || !a5) { free(path); goto fail; }
            }
            int k = v->n_nodes++;
            v->nbyte[k] = (uint8_t)b[d];
            v->ndepth[k] = (uint16_t)(d + 1);
            v->ntok0[k] = v->ntok1[k] = 0;
            path[depth++] = k;
        }
        v->ntok0[path[depth - 1]] = i;
        v->ntok1[path[depth - 1]] = i + 1;
        prev = b;
        prevl = l;
    }
    while (depth > 0) v->nend[path[--depth]] = v->n_nodes;
    free(path);
    *out = v;
    return G4_OK;
fail:
    if (rc == G4_ENOMEM) g4_err_set(err, G4_ENOMEM, "vocabulary index: out of memory");
    g4_vocab_free(v);
    return rc;
}

/* ---- matcher ------------------------------------------------------------------------------------ */

#define CF_MAX 32
typedef struct { int n; int32_t s[CF_MAX], p[CF_MAX]; } cfg;

typedef struct { cfg key; uint64_t *mask; uint64_t used; } mentry;

struct g4_matcher {
    g4_grammar *g;
    const g4_vocab *v;
    int32_t stops[16];
    int n_stop;
    int32_t spec_id[G4_SYM_NSPECIAL];
    cfg cur;
    int done;
    /* interned frames below the top: (return state, parent) */
    int32_t *ns, *np;
    int nn, ncap;
    int32_t *htab;
    size_t hcap;
    /* walking */
    cfg *lv;
    int32_t walk_root;
    int walk_dep, overflow, rdepth;
    uint64_t *out;
    size_t words;
    mentry *mc;
    int nmc;
    uint64_t clock;
    g4_matcher_stats st;
};

static int32_t intern(g4_matcher *m, int32_t s, int32_t p) {
    if ((size_t)(m->nn + 1) * 2 > m->hcap) {
        size_t nc = m->hcap ? m->hcap * 2 : 1024;
        int32_t *t = malloc(nc * sizeof *t);
        if (!t) { m->overflow = 1; return -1; }
        memset(t, 0xff, nc * sizeof *t);
        for (int i = 0; i < m->nn; i++) {
            size_t h = ((uint64_t)(uint32_t)m->ns[i] * 0x9E3779B97F4A7C15ull ^ (uint64_t)(uint32_t)m->np[i] * 0xBF58476D1CE4E5B9ull) & (nc - 1);
            while (t[h] >= 0) h = (h + 1) & (nc - 1);
            t[h] = i;
        }
        free(m->htab);
        m->htab = t;
        m->hcap = nc;
    }
    size_t h = ((uint64_t)(uint32_t)s * 0x9E3779B97F4A7C15ull ^ (uint64_t)(uint32_t)p * 0xBF58476D1CE4E5B9ull) & (m->hcap - 1);
    while (m->htab[h] >= 0) {
        int i = m->htab[h];
        if (m->ns[i] == s && m->np[i] == p) return i;
        h = (h + 1) & (m->hcap - 1);
    }
    if (m->nn == m->ncap) {
        int c = m->ncap ? m->ncap * 2 : 256;
        int32_t *a = realloc(m->ns, (size_t)c * sizeof *a);
        if (!a) { m->overflow = 1; return -1; }
        m->ns = a;
        int32_t *b = realloc(m->np, (size_t)c * sizeof *b);
        if (!b) { m->overflow = 1; return -1; }
        m->np = b;
        m->ncap = c;
    }
    m->ns[m->nn] = s;
    m->np[m->nn] = p;
    m->htab[h] = m->nn;
    return m->nn++;
}

static void cfg_add(g4_matcher *m, cfg *c, int32_t s, int32_t p) {
    for (int i = 0; i < c->n; i++) if (c->s[i] == s && c->p[i] == p) return;
    if (c->n == CF_MAX) { m->overflow = 1; return; }
    c->s[c->n] = s;
    c->p[c->n++] = p;
}

/* All the ways stack (s, p) can take symbol x: a move, a call, a return. */
static void expand(g4_matcher *m, int32_t s, int32_t p, int x, cfg *out) {
    const g4_grammar *g = m->g;
    if (++m->rdepth > 512) { m->overflow = 1; m->rdepth--; return; }
    int32_t t = g->next[(size_t)s * (size_t)g->ncls + g->cls[x]];
    if (t >= 0) cfg_add(m, out, t, p);
    uint8_t f = g->flags[s];
    if (f & F_CALLS)
        for (int32_t k = g->coff[s]; k < g->coff[s + 1]; k++) {
            int32_t q = intern(m, g->call[2 * k + 1], p);
            if (q >= 0) expand(m, g->rstart[g->call[2 * k]], q, x, out);
        }
    if ((f & F_ACC) && p >= 0) {
        if (p == m->walk_root) m->walk_dep = 1;
        expand(m, m->ns[p], m->np[p], x, out);
    }
    m->rdepth--;
}

static inline int step(g4_matcher *m, const cfg *in, int x, cfg *out) {
    const g4_grammar *g = m->g;
    if (in->n == 1) {
        int32_t s = in->s[0], p = in->p[0];
        uint8_t f = g->flags[s];
        if (!(f & F_CALLS) && (!(f & F_ACC) || p < 0)) {
            int32_t t = g->next[(size_t)s * (size_t)g->ncls + g->cls[x]];
            if (t < 0) return 0;
            out->n = 1;
            out->s[0] = t;
            out->p[0] = p;
            return 1;
        }
    }
    out->n = 0;
    for (int i = 0; i < in->n; i++) expand(m, in->s[i], in->p[i], x, out);
    return out->n;
}

static int stack_ends(const g4_matcher *m, int32_t s, int32_t p) {
    for (;;) {
        if (!(m->g->flags[s] & F_ACC)) return 0;
        if (p < 0) return 1;
        s = m->ns[p];
        p = m->np[p];
    }
}

int g4_matcher_can_end(const g4_matcher *m) {
    if (m->done) return 0;
    for (int i = 0; i < m->cur.n; i++) if (stack_ends(m, m->cur.s[i], m->cur.p[i])) return 1;
    return 0;
}

int g4_matcher_done(const g4_matcher *m) { return m->done; }

void g4_matcher_free(g4_matcher *m) {
    if (!m) return;
    g4_grammar_release(m->g);
    free(m->ns); free(m->np); free(m->htab); free(m->lv); free(m->out);
    for (int i = 0; i < m->nmc; i++) free(m->mc[i].mask);
    free(m->mc);
    free(m);
}

int g4_matcher_create(g4_grammar *g, const g4_vocab *v, const int32_t *stop_ids, int n_stop, g4_matcher **out, g4_err *err) {
    *out = NULL;
    g4_matcher *m = calloc(1, sizeof *m);
    if (!m) return g4_err_set(err, G4_ENOMEM, "matcher: out of memory");
    g4_grammar_retain(g);
    m->g = g;
    m->v = v;
    for (int i = 0; i < n_stop && m->n_stop < 16; i++)
        if (stop_ids[i] >= 0 && stop_ids[i] < v->n_ids) m->stops[m->n_stop++] = stop_ids[i];
    m->words = ((size_t)v->n_ids + 63) / 64;
    m->lv = malloc(((size_t)v->max_len + 2) * sizeof *m->lv);
    m->out = malloc(m->words * sizeof *m->out);
    m->mc = calloc(G4_MASK_CACHE_MATCHER, sizeof *m->mc);
    if (!m->lv || !m->out || !m->mc) { g4_matcher_free(m); return g4_err_set(err, G4_ENOMEM, "matcher: out of memory"); }
    for (int k = 0; k < g->n_special; k++) {
        m->spec_id[k] = -1;
        for (int i = 0; i < v->n_spec && m->spec_id[k] < 0; i++)
            if (!strcmp(v->spec_text[i], g->special[k])) m->spec_id[k] = v->spec_ids[i];
        if (m->spec_id[k] < 0) {
            int rc = g4_err_set(err, G4_ENOTFOUND, "the tokenizer has no special token %s, which the output format needs", g->special[k]);
            g4_matcher_free(m);
            return rc;
        }
    }
    m->cur.n = 1;
    m->cur.s[0] = g->rstart[0];
    m->cur.p[0] = -1;
    m->walk_root = -2;
    *out = m;
    return G4_OK;
}

/* ---- masks ---------------------------------------------------------------------------------- */

static int cfg_eq(const cfg *a, const cfg *b) {
    return a->n == b->n && !memcmp(a->s, b->s, (size_t)a->n * sizeof *a->s) && !memcmp(a->p, b->p, (size_t)a->n * sizeof *a->p);
}

static void cfg_sort(cfg *c) {
    for (int i = 1; i < c->n; i++) {
        int32_t s = c->s[i], p = c->p[i];
        int j = i;
        while (j > 0 && (c->s[j - 1] > s || (c->s[j - 1] == s && c->p[j - 1] > p))) { c->s[j] = c->s[j - 1]; c->p[j] = c->p[j - 1]; j--; }
        c->s[j] = s;
        c->p[j] = p;
    }
}

static int gcache_get(g4_grammar *g, int32_t s, size_t words, uint64_t *dst) {
    int hit = 0;
    pthread_mutex_lock(&g->mu);
    if (g->words == words && g->cache[s]) {
        memcpy(dst, g->cache[s], words * sizeof *dst);
        if (g->head != s) { /* to the front of the LRU list */
            if (g->prev[s] >= 0) g->nxt[g->prev[s]] = g->nxt[s];
            if (g->nxt[s] >= 0) g->prev[g->nxt[s]] = g->prev[s];
            if (g->tail == s) g->tail = g->prev[s];
            g->prev[s] = -1;
            g->nxt[s] = g->head;
            if (g->head >= 0) g->prev[g->head] = s;
            g->head = s;
        }
        hit = 1;
    }
    pthread_mutex_unlock(&g->mu);
    return hit;
}

static void gcache_put(g4_grammar *g, int32_t s, const uint64_t *mask, size_t words) {
    pthread_mutex_lock(&g->mu);
    if (!g->words) g->words = words;
    if (g->words == words && !g->cache[s]) {
        uint64_t *b = NULL;
        if (g->n_cached >= G4_MASK_CACHE_GRAMMAR && g->tail >= 0) { /* reuse the least recent */
            int t = g->tail;
            b = g->cache[t];
            g->cache[t] = NULL;
            g->tail = g->prev[t];
            if (g->tail >= 0) g->nxt[g->tail] = -1; else g->head = -1;
            g->n_cached--;
        }
        if (!b) b = malloc(words * sizeof *b);
        if (b) {
            memcpy(b, mask, words * sizeof *b);
            g->cache[s] = b;
            g->prev[s] = -1;
            g->nxt[s] = g->head;
            if (g->head >= 0) g->prev[g->head] = s;
            g->head = s;
            if (g->tail < 0) g->tail = s;
            g->n_cached++;
        }
    }
    pthread_mutex_unlock(&g->mu);
}

static void walk(g4_matcher *m, uint64_t *bits) {
    const g4_vocab *v = m->v;
    memset(bits, 0, m->words * sizeof *bits);
    m->walk_root = m->cur.n == 1 ? m->cur.p[0] : -2;
    m->walk_dep = 0;
    m->lv[0] = m->cur;
    for (int i = 0; i < v->n_nodes;) {
        int d = v->ndepth[i];
        if (!step(m, &m->lv[d - 1], v->nbyte[i], &m->lv[d])) { i = v->nend[i]; continue; }
        for (int t = v->ntok0[i]; t < v->ntok1[i]; t++) {
            int32_t id = v->sorted[t];
            bits[id >> 6] |= 1ull << (id & 63);
        }
        i++;
    }
    cfg tmp;
    for (int k = 0; k < m->g->n_special; k++)
        if (step(m, &m->cur, G4_SYM_SPECIAL + k, &tmp)) bits[m->spec_id[k] >> 6] |= 1ull << (m->spec_id[k] & 63);
    m->walk_root = -2;
}

const uint64_t *g4_matcher_mask(g4_matcher *m, g4_err *err) {
    m->st.masks++;
    if (m->done) { /* ended (a stop id was taken, e.g. under ignore_eos): stop ids only */
        if (!m->n_stop) { g4_err_set(err, G4_EINVAL, "the constrained output has already ended"); return NULL; }
        memset(m->out, 0, m->words * sizeof *m->out);
        for (int i = 0; i < m->n_stop; i++) m->out[m->stops[i] >> 6] |= 1ull << (m->stops[i] & 63);
        return m->out;
    }
    int found = 0;
    if (m->cur.n == 1 && gcache_get(m->g, m->cur.s[0], m->words, m->out)) { found = 1; m->st.grammar_hits++; }
    for (int i = 0; i < m->nmc && !found; i++)
        if (cfg_eq(&m->mc[i].key, &m->cur)) {
            memcpy(m->out, m->mc[i].mask, m->words * sizeof *m->out);
            m->mc[i].used = ++m->clock;
            found = 1;
            m->st.matcher_hits++;
        }
    if (!found) {
        m->overflow = 0;
        walk(m, m->out);
        m->st.walks++;
        if (m->overflow) {
            g4_err_set(err, G4_EUNSUPPORTED, "the output grammar is too ambiguous here (more than %d parses at once)", CF_MAX);
            return NULL;
        }
        if (m->cur.n == 1 && !m->walk_dep) {
            gcache_put(m->g, m->cur.s[0], m->out, m->words);
        } else {
            int k = m->nmc;
            if (k == G4_MASK_CACHE_MATCHER) {
                k = 0;
                for (int i = 1; i < m->nmc; i++) if (m->mc[i].used < m->mc[k].used) k = i;
            } else if ((m->mc[k].mask = malloc(m->words * sizeof *m->out))) {
                m->nmc++;
            } else {
                k = -1;
            }
            if (k >= 0) {
                m->mc[k].key = m->cur;
                m->mc[k].used = ++m->clock;
                memcpy(m->mc[k].mask, m->out, m->words * sizeof *m->out);
            }
        }
    }
    if (g4_matcher_can_end(m))
        for (int i = 0; i < m->n_stop; i++) m->out[m->stops[i] >> 6] |= 1ull << (m->stops[i] & 63);
    uint64_t any = 0;
    for (size_t w = 0; w < m->words && !any; w++) any |= m->out[w];
    if (!any) {
        g4_err_set(err, G4_EUNSUPPORTED, "no token of the vocabulary can continue the constrained output here");
        return NULL;
    }
    return m->out;
}

static int advance(g4_matcher *m, const int *sym, size_t n, g4_err *err) {
    cfg a = m->cur, b;
    m->overflow = 0;
    for (size_t i = 0; i < n; i++) {
        if (!step(m, &a, sym[i], &b) || m->overflow)
            return g4_err_set(err, G4_EINVAL, m->overflow ? "the output grammar is too ambiguous here" : "the constraint does not allow this token (at byte %zu)", i);
        a = b;
    }
    cfg_sort(&a);
    m->cur = a;
    return G4_OK;
}

int g4_matcher_accept_bytes(g4_matcher *m, const char *s, size_t n, g4_err *err) {
    if (m->done) return g4_err_set(err, G4_EINVAL, "the constrained output has already ended");
    int sym[256];
    for (size_t off = 0; off < n;) {
        size_t k = n - off < 256 ? n - off : 256;
        for (size_t i = 0; i < k; i++) sym[i] = (unsigned char)s[off + i];
        int rc = advance(m, sym, k, err);
        if (rc) return rc;
        off += k;
    }
    return G4_OK;
}

int g4_matcher_accept(g4_matcher *m, int32_t id, g4_err *err) {
    for (int i = 0; i < m->n_stop; i++)
        if (m->stops[i] == id) {
            if (!m->done && !g4_matcher_can_end(m)) return g4_err_set(err, G4_EINVAL, "the constraint does not allow the stop token %d here", id);
            m->done = 1;
            return G4_OK;
        }
    if (m->done) return g4_err_set(err, G4_EINVAL, "the constrained output has ended: only a stop token may follow");
    for (int k = 0; k < m->g->n_special; k++)
        if (m->spec_id[k] == id) {
            int x = G4_SYM_SPECIAL + k;
            return advance(m, &x, 1, err);
        }
    size_t len;
    const char *b = g4_vocab_bytes(m->v, id, &len);
    if (!b) return g4_err_set(err, G4_EINVAL, "the constraint does not allow token %d (it has no text)", id);
    return g4_matcher_accept_bytes(m, b, len, err);
}

void g4_matcher_get_stats(const g4_matcher *m, g4_matcher_stats *st) { *st = m->st; }
