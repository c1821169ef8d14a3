/* fsa.c — NFA building, subset construction, trimming, reduction, intersection, complement
 * and embedding (see fsa.h). Every set-like thing (DFA states as NFA-state sets, product pairs,
 * row signatures, class columns) goes through one interning table of int sequences. */
#include "grammar/fsa.h"

#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- budget ------------------------------------------------------------------------------------ */

#define POLL_EVERY 16384      /* steps between looks at the clock and the cancel callback */

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* n more bytes: within max_bytes, and within the shared budget unless this compile holds nothing */
static int charge(g4_fsa_budget *b, size_t n) {
    if (!b) return 0;
    if (b->stop) return -1;
    if (b->max_bytes && b->bytes + n > b->max_bytes) { b->stop = G4_FSA_MEMORY; return -1; }
    if (b->shared) {
        size_t cur = atomic_fetch_add(b->shared, n) + n;
        if (cur > b->shared_max && cur > b->bytes + n) { /* others hold some of it */
            atomic_fetch_sub(b->shared, n);
            b->stop = G4_FSA_SHARED;
            return -1;
        }
    }
    b->bytes += n;
    if (b->bytes > b->peak) b->peak = b->bytes;
    return 0;
}

static void uncharge(g4_fsa_budget *b, size_t n) {
    if (!b) return;
    if (n > b->bytes) n = b->bytes;
    b->bytes -= n;
    if (b->shared) atomic_fetch_sub(b->shared, n);
}

void *g4_fsa_malloc(g4_fsa_budget *b, size_t n) {
    if (b && b->stop) return NULL;
    void *p = malloc(n ? n : 1);
    if (!p) { if (b) b->stop = G4_FSA_OOM; return NULL; }
    if (charge(b, malloc_usable_size(p))) { free(p); return NULL; }
    return p;
}

void *g4_fsa_calloc(g4_fsa_budget *b, size_t n, size_t size) {
    if (size && n > (size_t)-1 / size) { if (b) b->stop = G4_FSA_OOM; return NULL; }
    void *p = g4_fsa_malloc(b, n * size);
    if (p) memset(p, 0, n * size);
    return p;
}

void *g4_fsa_realloc(g4_fsa_budget *b, void *p, size_t n) {
    if (!p) return g4_fsa_malloc(b, n);
    if (b && b->stop) return NULL;
    size_t old = malloc_usable_size(p), held = n > old ? n : old;
    if (n > old && charge(b, n - old)) return NULL; /* the growth is charged before it is taken */
    void *q = realloc(p, n ? n : 1);
    if (!q) {
        if (n > old) uncharge(b, n - old);
        if (b) b->stop = G4_FSA_OOM;
        return NULL;
    }
    size_t now = malloc_usable_size(q); /* the allocator's rounding, without a limit check */
    if (b && now > held) { b->bytes += now - held; if (b->shared) atomic_fetch_add(b->shared, now - held); }
    else if (now < held) uncharge(b, held - now);
    return q;
}

void g4_fsa_free(g4_fsa_budget *b, void *p) {
    if (!p) return;
    uncharge(b, malloc_usable_size(p));
    free(p);
}

int g4_fsa_reserve(g4_fsa_budget *b, size_t n) { return charge(b, n); }

int g4_fsa_poll(g4_fsa_budget *b, uint64_t work) {
    if (!b) return 0;
    if (b->stop) return 1;
    b->work += work;
    if (b->max_work && b->work > b->max_work) { b->stop = G4_FSA_WORK; return 1; }
    if (b->work >= b->next_poll) {
        b->next_poll = b->work + POLL_EVERY;
        if (b->deadline > 0 && mono_s() > b->deadline) { b->stop = G4_FSA_TIME; return 1; }
        if (b->cancelled && b->cancelled(b->user)) { b->stop = G4_FSA_CANCELLED; return 1; }
    }
    return 0;
}

void g4_fsa_budget_release(g4_fsa_budget *b) {
    if (b && b->shared && b->bytes) atomic_fetch_sub(b->shared, b->bytes);
    if (b) b->bytes = 0;
}

int g4_fsa_budget_err(const g4_fsa_budget *b, g4_err *err) {
    switch (b ? b->stop : G4_FSA_OOM) {
    case G4_FSA_MEMORY:
        return g4_err_set(err, G4_EINVAL, "compiling it needs more than the %zu MiB of working memory one grammar may use (the grammar memory limit)",
                          b->max_bytes >> 20);
    case G4_FSA_WORK:
        return g4_err_set(err, G4_EINVAL, "compiling it takes more than the %llu steps one grammar may take (the grammar work limit)",
                          (unsigned long long)b->max_work);
    case G4_FSA_TIME: return g4_err_set(err, G4_EINVAL, "compiling it takes longer than the grammar time limit");
    case G4_FSA_SHARED:
        return g4_err_set(err, G4_EBUSY, "too many grammars are being compiled at once (their memory budget of %zu MiB is in use); retry shortly",
                          b->shared_max >> 20);
    case G4_FSA_CANCELLED: return g4_err_set(err, G4_ECANCELED, "the grammar compile was cancelled");
    default: return g4_err_set(err, G4_ENOMEM, "automaton: out of memory");
    }
}

#define FA_MALLOC(n) g4_fsa_malloc(B, (n))
#define FA_CALLOC(n, s) g4_fsa_calloc(B, (n), (s))
#define FA_REALLOC(p, n) g4_fsa_realloc(B, (p), (n))
#define FA_FREE(p) g4_fsa_free(B, (p))

/* ---- NFA --------------------------------------------------------------------------------- */

int g4_nfa_state(g4_nfa *a) {
    if (a->over || a->over_edges || a->oom) return -1;
    if (a->max_states && a->n >= a->max_states) { a->over = 1; return -1; }
    if (g4_fsa_poll(a->budget, 1)) { a->oom = 1; return -1; }
    return a->n++;
}

static void add_edge(g4_nfa *a, int from, int to, int lo, int hi, int call) {
    if (from < 0 || to < 0 || a->oom || a->over || a->over_edges) return;
    if (a->max_edges && a->ne >= a->max_edges) { a->over_edges = 1; return; }
    if (a->ne == a->cap) {
        size_t c = a->cap ? a->cap * 2 : 256;
        g4_nfa_edge *e = g4_fsa_realloc(a->budget, a->e, c * sizeof *e);
        if (!e) { a->oom = 1; return; }
        a->e = e;
        a->cap = c;
    }
    a->e[a->ne++] = (g4_nfa_edge){from, to, call, (int16_t)lo, (int16_t)hi};
}

void g4_nfa_sym(g4_nfa *a, int from, int to, int lo, int hi) { if (lo <= hi) add_edge(a, from, to, lo, hi, -1); }
void g4_nfa_eps(g4_nfa *a, int from, int to) { add_edge(a, from, to, -1, -1, -1); }
void g4_nfa_call(g4_nfa *a, int from, int to, int rule) { add_edge(a, from, to, -1, -1, rule); }

void g4_nfa_lit(g4_nfa *a, int from, int to, const char *s, size_t n) {
    if (n == 0) { g4_nfa_eps(a, from, to); return; }
    int cur = from;
    for (size_t i = 0; i < n; i++) {
        int nx = i + 1 == n ? to : g4_nfa_state(a);
        g4_nfa_sym(a, cur, nx, (unsigned char)s[i], (unsigned char)s[i]);
        cur = nx;
    }
}

void g4_nfa_free(g4_nfa *a) {
    g4_fsa_free(a->budget, a->e);
    memset(a, 0, sizeof *a);
}

void g4_nfa_truncate(g4_nfa *a, int n, size_t ne) {
    if (n < a->n) a->n = n;
    if (ne < a->ne) a->ne = ne;
    a->over = a->over_edges = 0;
}

void g4_dfa_free(g4_dfa *d) {
    g4_fsa_budget *B = d->budget;
    FA_FREE(d->next);
    FA_FREE(d->acc);
    FA_FREE(d->coff);
    FA_FREE(d->call);
    memset(d, 0, sizeof *d);
}

int g4_dfa_copy(const g4_dfa *a, g4_dfa *b, g4_err *err) {
    g4_fsa_budget *B = a->budget;
    memset(b, 0, sizeof *b);
    b->budget = B;
    if (a->n == 0) { memcpy(b->cls, a->cls, sizeof b->cls); b->ncls = a->ncls; return G4_OK; }
    *b = *a;
    size_t nk = (size_t)a->n * (size_t)a->ncls, nc = (size_t)a->coff[a->n];
    b->next = FA_MALLOC(nk * sizeof *b->next + 1);
    b->acc = FA_MALLOC((size_t)a->n);
    b->coff = FA_MALLOC(((size_t)a->n + 1) * sizeof *b->coff);
    b->call = FA_MALLOC(2 * nc * sizeof *b->call + 1);
    if (!b->next || !b->acc || !b->coff || !b->call || g4_fsa_poll(B, nk)) { g4_dfa_free(b); return g4_fsa_budget_err(B, err); }
    memcpy(b->next, a->next, nk * sizeof *b->next);
    memcpy(b->acc, a->acc, (size_t)a->n);
    memcpy(b->coff, a->coff, ((size_t)a->n + 1) * sizeof *b->coff);
    memcpy(b->call, a->call, 2 * nc * sizeof *b->call);
    return G4_OK;
}

/* ---- interning of int sequences ------------------------------------------------------------ */

typedef struct {
    int32_t *pool;
    size_t np, capp;
    size_t *off;
    int32_t *len;
    int n, cap;
    int32_t *tab;
    size_t tcap;              /* power of two */
    g4_fsa_budget *b;
} seqtab;

static uint64_t hash_seq(const int32_t *v, int n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t)n;
    for (int i = 0; i < n; i++) {
        h ^= (uint64_t)(uint32_t)v[i];
        h *= 0xBF58476D1CE4E5B9ull;
        h ^= h >> 29;
    }
    return h;
}

static void seqtab_free(seqtab *t) {
    g4_fsa_budget *B = t->b;
    FA_FREE(t->pool);
    FA_FREE(t->off);
    FA_FREE(t->len);
    FA_FREE(t->tab);
    memset(t, 0, sizeof *t);
    t->b = B;
}

static int seqtab_grow(seqtab *t) {
    g4_fsa_budget *B = t->b;
    size_t nc = t->tcap ? t->tcap * 2 : 1024;
    int32_t *nt = FA_MALLOC(nc * sizeof *nt);
    if (!nt || g4_fsa_poll(B, (uint64_t)t->n)) { FA_FREE(nt); return -1; }
    memset(nt, 0xff, nc * sizeof *nt);
    for (int i = 0; i < t->n; i++) {
        size_t h = (size_t)hash_seq(t->pool + t->off[i], t->len[i]) & (nc - 1);
        while (nt[h] >= 0) h = (h + 1) & (nc - 1);
        nt[h] = i;
    }
    FA_FREE(t->tab);
    t->tab = nt;
    t->tcap = nc;
    return 0;
}

/* The id of v[0..n) (added when new; *added says so). -1 on out of memory. */
static int seqtab_get(seqtab *t, const int32_t *v, int n, int *added) {
    g4_fsa_budget *B = t->b;
    if (added) *added = 0;
    if (g4_fsa_poll(B, (uint64_t)n + 1)) return -1;
    if ((size_t)(t->n + 1) * 2 > t->tcap && seqtab_grow(t)) return -1;
    size_t h = (size_t)hash_seq(v, n) & (t->tcap - 1);
    while (t->tab[h] >= 0) {
        int i = t->tab[h];
        if (t->len[i] == n && !memcmp(t->pool + t->off[i], v, (size_t)n * sizeof *v)) return i;
        h = (h + 1) & (t->tcap - 1);
    }
    if (t->n == t->cap) {
        int c = t->cap ? t->cap * 2 : 256;
        size_t *no = FA_REALLOC(t->off, (size_t)c * sizeof *no);
        if (!no) return -1;
        t->off = no;
        int32_t *nl = FA_REALLOC(t->len, (size_t)c * sizeof *nl);
        if (!nl) return -1;
        t->len = nl;
        t->cap = c;
    }
    if (t->np + (size_t)n > t->capp) {
        size_t c = t->capp ? t->capp * 2 : 4096;
        while (c < t->np + (size_t)n) c *= 2;
        int32_t *np = FA_REALLOC(t->pool, c * sizeof *np);
        if (!np) return -1;
        t->pool = np;
        t->capp = c;
    }
    memcpy(t->pool + t->np, v, (size_t)n * sizeof *v);
    t->off[t->n] = t->np;
    t->len[t->n] = n;
    t->np += (size_t)n;
    t->tab[h] = t->n;
    if (added) *added = 1;
    return t->n++;
}

/* ---- growable int arrays ------------------------------------------------------------------- */

typedef struct { int32_t *v; size_t n, cap; g4_fsa_budget *b; } ivec;

static int iv_push(ivec *a, int32_t x) {
    if (a->n == a->cap) {
        size_t c = a->cap ? a->cap * 2 : 64;
        int32_t *p = g4_fsa_realloc(a->b, a->v, c * sizeof *p);
        if (!p) return -1;
        a->v = p;
        a->cap = c;
    }
    a->v[a->n++] = x;
    return 0;
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static void iv_free(ivec *a) {
    g4_fsa_free(a->b, a->v);
    a->v = NULL;
    a->n = a->cap = 0;
}

static size_t sort_unique(int32_t *v, size_t n) {
    if (n < 2) return n;
    qsort(v, n, sizeof *v, cmp_i32);
    size_t k = 1;
    for (size_t i = 1; i < n; i++)
        if (v[i] != v[k - 1]) v[k++] = v[i];
    return k;
}

/* ---- class maps ------------------------------------------------------------------------------ */

/* Builds d->cls and d->next from per-state transition lists (lo, hi, target) in tr, with
 * tr_off[s]..tr_off[s+1] the triples of state s: elementary intervals between all boundaries,
 * then intervals with identical columns share a class. */
static int build_classes(g4_dfa *d, const int32_t *tr, const size_t *tr_off) {
    uint8_t bnd[G4_NSYM + 1] = {0};
    bnd[0] = 1;
    for (size_t k = 0; k < tr_off[d->n]; k++) {
        bnd[tr[3 * k]] = 1;
        bnd[tr[3 * k + 1] + 1] = 1;
    }
    int iv[G4_NSYM], nint = 0;
    for (int s = 0; s < G4_NSYM; s++) {
        if (bnd[s]) nint++;
        iv[s] = nint - 1;
    }
    g4_fsa_budget *B = d->budget;
    size_t n = (size_t)d->n;
    if (g4_fsa_poll(B, 2 * n * (size_t)nint)) return -1;
    int32_t *T = FA_MALLOC(n * (size_t)nint * sizeof *T + 1);
    int32_t *col = FA_MALLOC((n ? n : 1) * sizeof *col);
    if (!T || !col) { FA_FREE(T); FA_FREE(col); return -1; }
    memset(T, 0xff, n * (size_t)nint * sizeof *T);
    for (size_t s = 0; s < n; s++)
        for (size_t k = tr_off[s]; k < tr_off[s + 1]; k++)
            for (int j = iv[tr[3 * k]]; j <= iv[tr[3 * k + 1]]; j++) T[s * (size_t)nint + (size_t)j] = tr[3 * k + 2];
    seqtab cols = {.b = B};
    int cls_of[G4_NSYM + 1];
    for (int j = 0; j < nint; j++) {
        for (size_t s = 0; s < n; s++) col[s] = T[s * (size_t)nint + (size_t)j];
        int c = seqtab_get(&cols, col, (int)n, NULL);
        if (c < 0) { seqtab_free(&cols); FA_FREE(T); FA_FREE(col); return -1; }
        cls_of[j] = c;
    }
    d->ncls = cols.n;
    for (int s = 0; s < G4_NSYM; s++) d->cls[s] = (uint16_t)cls_of[iv[s]];
    d->next = FA_MALLOC((n ? n : 1) * (size_t)d->ncls * sizeof *d->next);
    if (!d->next) { seqtab_free(&cols); FA_FREE(T); FA_FREE(col); return -1; }
    for (int c = 0; c < d->ncls; c++)
        for (size_t s = 0; s < n; s++) d->next[s * (size_t)d->ncls + (size_t)c] = cols.pool[cols.off[c] + s];
    seqtab_free(&cols);
    FA_FREE(T);
    FA_FREE(col);
    return 0;
}

/* ---- subset construction --------------------------------------------------------------------- */

typedef struct {
    const g4_nfa *a;
    int32_t *off, *eidx;      /* CSR of edges by source */
    int32_t *mark;
    int stamp;
    ivec stack, tmp;
} closure_ctx;

/* The epsilon closure of seeds[0..n) as a sorted set in c->tmp. */
static int closure(closure_ctx *c, const int32_t *seeds, size_t n) {
    c->tmp.n = 0;
    c->stack.n = 0;
    c->stamp++;
    for (size_t i = 0; i < n; i++)
        if (c->mark[seeds[i]] != c->stamp) {
            c->mark[seeds[i]] = c->stamp;
            if (iv_push(&c->stack, seeds[i])) return -1;
        }
    while (c->stack.n) {
        int32_t x = c->stack.v[--c->stack.n];
        if (iv_push(&c->tmp, x)) return -1;
        for (int32_t k = c->off[x]; k < c->off[x + 1]; k++) {
            const g4_nfa_edge *e = &c->a->e[c->eidx[k]];
            if (e->call >= 0 || e->lo >= 0 || c->mark[e->to] == c->stamp) continue;
            c->mark[e->to] = c->stamp;
            if (iv_push(&c->stack, e->to)) return -1;
        }
    }
    /* sorted: a large set is read off the marks in order, a small one sorted */
    size_t k = c->tmp.n, cost = k;
    if (k * 16 >= (size_t)c->a->n) {
        size_t w = 0;
        for (int32_t x = 0; x < c->a->n; x++) if (c->mark[x] == c->stamp) c->tmp.v[w++] = x;
        cost += (size_t)c->a->n;
    } else {
        c->tmp.n = sort_unique(c->tmp.v, k);
        for (size_t m = k; m > 1; m >>= 1) cost += k;
    }
    return g4_fsa_poll(c->a->budget, 2 * cost + n) ? -1 : 0;
}

static int cmp_pair(const void *a, const void *b) {
    const int32_t *x = a, *y = b;
    if (x[0] != y[0]) return (x[0] > y[0]) - (x[0] < y[0]);
    return (x[1] > y[1]) - (x[1] < y[1]);
}

int g4_nfa_to_dfa(const g4_nfa *a, int start, int accept, int max_states, g4_dfa *out, g4_err *err) {
    g4_fsa_budget *B = a->budget;
    memset(out, 0, sizeof *out);
    out->budget = B;
    if (a->oom) return g4_fsa_budget_err(B, err);
    /* an NFA that went past its limits is incomplete: its language is not the one asked for */
    if (a->over) return g4_err_set(err, G4_EINVAL, "the automaton went past %d states while being built (the grammar NFA state limit)", a->max_states);
    if (a->over_edges)
        return g4_err_set(err, G4_EINVAL, "the automaton went past %zu transitions while being built (the grammar transition limit)", a->max_edges);
    closure_ctx c = {.a = a, .stack = {.b = B}, .tmp = {.b = B}};
    size_t n = (size_t)a->n;
    c.off = FA_CALLOC(n + 1, sizeof *c.off);
    c.eidx = FA_MALLOC((a->ne ? a->ne : 1) * sizeof *c.eidx);
    c.mark = FA_CALLOC(n ? n : 1, sizeof *c.mark);
    seqtab sets = {.b = B};
    ivec tr = {.b = B}, calls = {.b = B}, seeds = {.b = B}, syms = {.b = B}, pts = {.b = B}, cl = {.b = B}, act = {.b = B}, srt = {.b = B};
    size_t *tr_off = NULL, tr_cap = 0;
    int32_t *coff = NULL;
    uint8_t *acc = NULL;
    int rc = G4_ENOMEM;
    if (!c.off || !c.eidx || !c.mark || g4_fsa_poll(B, n + a->ne)) goto done;
    for (size_t k = 0; k < a->ne; k++) c.off[a->e[k].from + 1]++;
    for (size_t s = 0; s < n; s++) c.off[s + 1] += c.off[s];
    {
        int32_t *fill = FA_MALLOC((n + 1) * sizeof *fill);
        if (!fill) goto done;
        memcpy(fill, c.off, (n + 1) * sizeof *fill);
        for (size_t k = 0; k < a->ne; k++) c.eidx[fill[a->e[k].from]++] = (int32_t)k;
        FA_FREE(fill);
    }
    int32_t st = start;
    if (closure(&c, &st, 1) || seqtab_get(&sets, c.tmp.v, (int)c.tmp.n, NULL) < 0) goto done;
    for (int q = 0; q < sets.n; q++) {
        if (sets.n > max_states) {
            rc = g4_err_set(err, G4_EINVAL, "the automaton has more than %d states (the grammar state limit)", max_states);
            goto fail;
        }
        if ((size_t)q + 2 > tr_cap) {
            tr_cap = tr_cap ? tr_cap * 2 : 256;
            size_t *t1 = FA_REALLOC(tr_off, tr_cap * sizeof *t1);
            if (!t1) goto done;
            tr_off = t1;
            int32_t *t2 = FA_REALLOC(coff, tr_cap * sizeof *t2);
            if (!t2) goto done;
            coff = t2;
            uint8_t *t3 = FA_REALLOC(acc, tr_cap);
            if (!t3) goto done;
            acc = t3;
        }
        tr_off[q] = tr.n / 3;
        coff[q] = (int32_t)(calls.n / 2);
        const int32_t *set = sets.pool + sets.off[q];
        int len = sets.len[q];
        acc[q] = 0;
        syms.n = cl.n = pts.n = 0;
        uint8_t bnd[G4_NSYM + 1] = {0};
        for (int i = 0; i < len; i++) {
            if (set[i] == accept) acc[q] = 1;
            for (int32_t k = c.off[set[i]]; k < c.off[set[i] + 1]; k++) {
                const g4_nfa_edge *e = &a->e[c.eidx[k]];
                if (e->call >= 0) {
                    if (iv_push(&cl, e->call) || iv_push(&cl, e->to)) goto done;
                } else if (e->lo >= 0) {
                    if (iv_push(&syms, e->lo) || iv_push(&syms, e->hi) || iv_push(&syms, e->to)) goto done;
                    bnd[e->lo] = bnd[e->hi + 1] = 1;
                }
            }
        }
        for (int k = 0; k <= G4_NSYM; k++) /* the boundaries in order (symbols are few) */
            if (bnd[k]) { bnd[k] = 0; if (iv_push(&pts, k)) goto done; }
        /* a sweep over the elementary intervals between the points: the edges that cover the
         * current one are `act` (edges sorted by their low end join it, those ended leave it) */
        /* by their low end: a counting sort (G4_NSYM keys) */
        {
            size_t cnt[G4_NSYM + 1] = {0};
            for (size_t k = 0; k < syms.n; k += 3) cnt[syms.v[k] + 1]++;
            for (int k = 0; k < G4_NSYM; k++) cnt[k + 1] += cnt[k];
            srt.n = 0;
            for (size_t k = 0; k < syms.n; k++) if (iv_push(&srt, 0)) goto done;
            for (size_t k = 0; k < syms.n; k += 3) memcpy(srt.v + 3 * cnt[syms.v[k]]++, syms.v + k, 3 * sizeof *syms.v);
            ivec t = syms;
            syms = srt;
            srt = t;
        }
        size_t nx = 0, swept = 0;
        act.n = 0;
        int32_t last_t = -1, last_hi = -2;
        for (size_t i = 0; i + 1 < pts.n; i++) {
            int32_t p = pts.v[i];
            size_t w = 0;
            for (size_t k = 0; k < act.n; k++) if (syms.v[3 * (size_t)act.v[k] + 1] >= p) act.v[w++] = act.v[k];
            act.n = w;
            for (; nx < syms.n / 3 && syms.v[3 * nx] <= p; nx++)
                if (syms.v[3 * nx + 1] >= p && iv_push(&act, (int32_t)nx)) goto done;
            swept += act.n + 1;
            seeds.n = 0;
            for (size_t k = 0; k < act.n; k++) if (iv_push(&seeds, syms.v[3 * (size_t)act.v[k] + 2])) goto done;
            if (!seeds.n) continue;
            if (closure(&c, seeds.v, seeds.n)) goto done;
            int t = seqtab_get(&sets, c.tmp.v, (int)c.tmp.n, NULL);
            if (t < 0) goto done;
            if (t == last_t && last_hi == p - 1) {
                tr.v[tr.n - 2] = pts.v[i + 1] - 1; /* extend the previous range */
            } else if (iv_push(&tr, p) || iv_push(&tr, pts.v[i + 1] - 1) || iv_push(&tr, t)) {
                goto done;
            }
            last_t = t;
            last_hi = pts.v[i + 1] - 1;
        }
        if (g4_fsa_poll(B, (uint64_t)len + syms.n + swept + cl.n)) goto done;
        if (cl.n) {
            qsort(cl.v, cl.n / 2, 2 * sizeof *cl.v, cmp_pair);
            for (size_t i = 0; i < cl.n;) {
                size_t j = i;
                seeds.n = 0;
                while (j < cl.n && cl.v[j] == cl.v[i]) {
                    if (iv_push(&seeds, cl.v[j + 1])) goto done;
                    j += 2;
                }
                if (closure(&c, seeds.v, seeds.n)) goto done;
                int t = seqtab_get(&sets, c.tmp.v, (int)c.tmp.n, NULL);
                if (t < 0 || iv_push(&calls, cl.v[i]) || iv_push(&calls, t)) goto done;
                i = j;
            }
        }
    }
    out->n = sets.n;
    tr_off[out->n] = tr.n / 3;
    coff[out->n] = (int32_t)(calls.n / 2);
    /* the big scratch goes before the tables are built */
    seqtab_free(&sets);
    FA_FREE(c.off); FA_FREE(c.eidx); FA_FREE(c.mark);
    c.off = c.eidx = c.mark = NULL;
    if (build_classes(out, tr.v, tr_off)) goto done;
    out->acc = acc;
    acc = NULL;
    out->coff = coff;
    coff = NULL;
    out->call = calls.v;
    calls.v = NULL;
    rc = g4_dfa_trim(out, NULL, err);
    goto fail;
done:
    if (rc == G4_ENOMEM) rc = g4_fsa_budget_err(B, err);
fail:
    if (rc) g4_dfa_free(out);
    FA_FREE(c.off);
    FA_FREE(c.eidx);
    FA_FREE(c.mark);
    iv_free(&c.stack);
    iv_free(&c.tmp);
    seqtab_free(&sets);
    iv_free(&tr);
    iv_free(&calls);
    iv_free(&seeds);
    iv_free(&syms);
    iv_free(&pts);
    iv_free(&cl);
    iv_free(&act);
    iv_free(&srt);
    FA_FREE(tr_off);
    FA_FREE(coff);
    FA_FREE(acc);
    return rc;
}

/* ---- trimming and reduction ------------------------------------------------------------------ */

int g4_dfa_trim(g4_dfa *d, const uint8_t *keep, g4_err *err) {
    g4_fsa_budget *B = d->budget;
    size_t n = (size_t)d->n, K = (size_t)d->ncls;
    if (n == 0) return G4_OK;
    int32_t *ncall = d->coff[n] ? FA_MALLOC((size_t)d->coff[n] * 2 * sizeof *ncall) : NULL;
    int32_t *ncoff = FA_MALLOC((n + 1) * sizeof *ncoff);
    uint8_t *alive = FA_CALLOC(n, 1);
    int32_t *roff = FA_CALLOC(n + 1, sizeof *roff), *radj = NULL, *queue = FA_MALLOC(n * sizeof *queue);
    int32_t *cls = FA_MALLOC(n * sizeof *cls), *sig = FA_MALLOC((2 * K + 2 + 2 * (size_t)(d->coff[n] + 1)) * sizeof *sig);
    int32_t *newid = FA_MALLOC(n * sizeof *newid);
    seqtab tab = {.b = B};
    int rc = G4_ENOMEM;
    if ((d->coff[n] && !ncall) || !ncoff || !alive || !roff || !queue || !cls || !sig || !newid) goto out;
    if (g4_fsa_poll(B, 3 * n * K)) goto out;
    /* calls to rules that are not kept go first */
    size_t m = 0;
    for (size_t s = 0; s < n; s++) {
        ncoff[s] = (int32_t)m;
        for (int32_t k = d->coff[s]; k < d->coff[s + 1]; k++)
            if (!keep || keep[d->call[2 * k]]) { ncall[2 * m] = d->call[2 * k]; ncall[2 * m + 1] = d->call[2 * k + 1]; m++; }
    }
    ncoff[n] = (int32_t)m;
    FA_FREE(d->call);
    FA_FREE(d->coff);
    d->call = ncall;
    d->coff = ncoff;
    ncall = NULL;
    ncoff = NULL;
    /* reverse edges, then what reaches acceptance */
    size_t ne = 0;
    for (size_t s = 0; s < n; s++) {
        for (size_t c = 0; c < K; c++) if (d->next[s * K + c] >= 0) { roff[d->next[s * K + c] + 1]++; ne++; }
        for (int32_t k = d->coff[s]; k < d->coff[s + 1]; k++) { roff[d->call[2 * k + 1] + 1]++; ne++; }
    }
    for (size_t s = 0; s < n; s++) roff[s + 1] += roff[s];
    radj = FA_MALLOC((ne ? ne : 1) * sizeof *radj);
    if (!radj) goto out;
    {
        int32_t *fill = FA_MALLOC((n + 1) * sizeof *fill);
        if (!fill) goto out;
        memcpy(fill, roff, (n + 1) * sizeof *fill);
        for (size_t s = 0; s < n; s++) {
            for (size_t c = 0; c < K; c++) if (d->next[s * K + c] >= 0) radj[fill[d->next[s * K + c]]++] = (int32_t)s;
            for (int32_t k = d->coff[s]; k < d->coff[s + 1]; k++) radj[fill[d->call[2 * k + 1]]++] = (int32_t)s;
        }
        FA_FREE(fill);
    }
    size_t qh = 0, qt = 0;
    for (size_t s = 0; s < n; s++) if (d->acc[s]) { alive[s] = 1; queue[qt++] = (int32_t)s; }
    while (qh < qt) {
        int32_t x = queue[qh++];
        for (int32_t k = roff[x]; k < roff[x + 1]; k++) if (!alive[radj[k]]) { alive[radj[k]] = 1; queue[qt++] = radj[k]; }
    }
    if (!alive[0]) { /* the empty language */
        FA_FREE(d->next); FA_FREE(d->acc); FA_FREE(d->coff); FA_FREE(d->call);
        d->next = NULL; d->acc = NULL; d->coff = NULL; d->call = NULL;
        d->n = 0;
        rc = G4_OK;
        goto out;
    }
    for (size_t s = 0; s < n; s++)
        for (size_t c = 0; c < K; c++)
            if (d->next[s * K + c] >= 0 && !alive[d->next[s * K + c]]) d->next[s * K + c] = -1;
    {   /* calls into dead states go too */
        size_t w = 0;
        int32_t a0 = d->coff[0];
        for (size_t s = 0; s < n; s++) {
            int32_t a1 = d->coff[s + 1];
            d->coff[s] = (int32_t)w;
            for (int32_t k = a0; k < a1; k++)
                if (alive[d->call[2 * k + 1]]) { d->call[2 * w] = d->call[2 * k]; d->call[2 * w + 1] = d->call[2 * k + 1]; w++; }
            a0 = a1;
        }
        d->coff[n] = (int32_t)w;
    }
    /* reduction: a state whose signature (acceptance, the representatives of its targets) equals
     * one seen before is merged into that one. States are visited from the last reached back to
     * the start, so most targets are settled first; passes repeat until nothing merges (every
     * merge is sound, so stopping at the cap would be too). cls[s]: s's representative. */
    {
        int32_t *repof = FA_MALLOC(n * sizeof *repof);
        if (!repof) goto out;
        size_t nord = 0;
        for (size_t s = 0; s < n; s++) { cls[s] = (int32_t)s; newid[s] = 0; }
        queue[nord++] = 0;
        newid[0] = 1;
        for (size_t h = 0; h < nord; h++) { /* BFS order of the live states */
            int32_t x = queue[h];
            for (size_t c = 0; c < K; c++) {
                int32_t t = d->next[(size_t)x * K + c];
                if (t >= 0 && !newid[t]) { newid[t] = 1; queue[nord++] = t; }
            }
            for (int32_t j = d->coff[x]; j < d->coff[x + 1]; j++) {
                int32_t t = d->call[2 * j + 1];
                if (!newid[t]) { newid[t] = 1; queue[nord++] = t; }
            }
        }
        for (int pass = 0; pass < 64; pass++) {
            seqtab_free(&tab);
            if (g4_fsa_poll(B, nord * (K + 2))) { FA_FREE(repof); goto out; }
            int merged = 0;
            for (size_t i = nord; i-- > 0;) {
                int32_t s = queue[i];
                if (cls[s] != s) continue;
                size_t k = 0;
                sig[k++] = d->acc[s];
                for (size_t c = 0; c < K; c++) { /* sparse: (class, target) of the moves */
                    int32_t t = d->next[(size_t)s * K + c];
                    if (t < 0) continue;
                    while (cls[t] != t) t = cls[t];
                    sig[k++] = (int32_t)c;
                    sig[k++] = t;
                }
                sig[k++] = -1;
                for (int32_t j = d->coff[s]; j < d->coff[s + 1]; j++) {
                    int32_t t = d->call[2 * j + 1];
                    while (cls[t] != t) t = cls[t];
                    sig[k++] = d->call[2 * j];
                    sig[k++] = t;
                }
                int added, id = seqtab_get(&tab, sig, (int)k, &added);
                if (id < 0) { FA_FREE(repof); goto out; }
                if (added) repof[id] = s;
                else if (repof[id] != s) { cls[s] = repof[id]; merged++; }
            }
            if (!merged) break;
        }
        FA_FREE(repof);
        seqtab_free(&tab);
        for (size_t i = 0; i < nord; i++) { /* flatten to the final representatives */
            int32_t s = queue[i], r = s;
            while (cls[r] != r) r = cls[r];
            cls[s] = r;
        }
        /* renumber the representatives reachable from the start, in BFS order */
        int32_t *order = FA_MALLOC(n * sizeof *order);
        if (!order) goto out;
        for (size_t i = 0; i < n; i++) order[i] = -1;
        int nn = 0;
        qh = qt = 0;
        order[cls[0]] = nn++;
        queue[qt++] = cls[0];
        while (qh < qt) {
            int32_t x = queue[qh++];
            for (size_t c = 0; c < K; c++) {
                int32_t t = d->next[(size_t)x * K + c];
                if (t >= 0 && order[cls[t]] < 0) { order[cls[t]] = nn++; queue[qt++] = cls[t]; }
            }
            for (int32_t j = d->coff[x]; j < d->coff[x + 1]; j++) {
                int32_t t = d->call[2 * j + 1];
                if (order[cls[t]] < 0) { order[cls[t]] = nn++; queue[qt++] = cls[t]; }
            }
        }
        int32_t *nx = FA_MALLOC((size_t)nn * K * sizeof *nx + 1), *co = FA_MALLOC(((size_t)nn + 1) * sizeof *co);
        int32_t *ca = FA_MALLOC(((size_t)d->coff[n] * 2 + 1) * sizeof *ca);
        uint8_t *ac = FA_MALLOC((size_t)nn + 1);
        if (!nx || !co || !ca || !ac) { FA_FREE(nx); FA_FREE(co); FA_FREE(ca); FA_FREE(ac); FA_FREE(order); goto out; }
        size_t w = 0;
        for (int i = 0; i < nn; i++) {
            int32_t x = queue[i];
            ac[i] = d->acc[x];
            for (size_t c = 0; c < K; c++) { int32_t t = d->next[(size_t)x * K + c]; nx[(size_t)i * K + c] = t >= 0 ? order[cls[t]] : -1; }
            co[i] = (int32_t)w;
            for (int32_t j = d->coff[x]; j < d->coff[x + 1]; j++) { ca[2 * w] = d->call[2 * j]; ca[2 * w + 1] = order[cls[d->call[2 * j + 1]]]; w++; }
        }
        co[nn] = (int32_t)w;
        FA_FREE(d->next); FA_FREE(d->acc); FA_FREE(d->coff); FA_FREE(d->call);
        d->next = nx; d->acc = ac; d->coff = co; d->call = ca;
        d->n = nn;
        FA_FREE(order);
    }
    rc = G4_OK;
out:
    if (rc) rc = g4_fsa_budget_err(B, err);
    FA_FREE(ncall); FA_FREE(ncoff); FA_FREE(alive); FA_FREE(roff); FA_FREE(radj); FA_FREE(queue); FA_FREE(cls); FA_FREE(sig); FA_FREE(newid);
    seqtab_free(&tab);
    return rc;
}

/* ---- products -------------------------------------------------------------------------------- */

int g4_dfa_intersect(const g4_dfa *a, const g4_dfa *b, int max_states, g4_dfa *out, g4_err *err) {
    g4_fsa_budget *B = a->budget;
    memset(out, 0, sizeof *out);
    out->budget = B;
    if (a->n == 0 || b->n == 0) return G4_OK;
    /* classes of the product: pairs of classes that occur */
    seqtab pc = {.b = B}, pairs = {.b = B};
    int rc = G4_ENOMEM;
    ivec nx = {.b = B};
    uint8_t *acc = NULL;
    size_t acc_cap = 0;
    int32_t ca[G4_NSYM], cb[G4_NSYM];
    for (int s = 0; s < G4_NSYM; s++) {
        int32_t key[2] = {a->cls[s], b->cls[s]};
        int added, c = seqtab_get(&pc, key, 2, &added);
        if (c < 0) goto out;
        out->cls[s] = (uint16_t)c;
        ca[c] = key[0];
        cb[c] = key[1];
    }
    out->ncls = pc.n;
    size_t K = (size_t)pc.n;
    int32_t p0[2] = {0, 0};
    if (seqtab_get(&pairs, p0, 2, NULL) < 0) goto out;
    for (int q = 0; q < pairs.n; q++) {
        if (pairs.n > max_states) { rc = g4_err_set(err, G4_EINVAL, "the automaton has more than %d states (the grammar state limit)", max_states); goto fail; }
        if (g4_fsa_poll(B, K)) goto out;
        int32_t x = pairs.pool[pairs.off[q]], y = pairs.pool[pairs.off[q] + 1];
        if ((size_t)q >= acc_cap) {
            acc_cap = acc_cap ? acc_cap * 2 : 256;
            uint8_t *t = FA_REALLOC(acc, acc_cap);
            if (!t) goto out;
            acc = t;
        }
        acc[q] = a->acc[x] && b->acc[y];
        for (size_t c = 0; c < K; c++) {
            int32_t u = a->next[(size_t)x * (size_t)a->ncls + (size_t)ca[c]], v = b->next[(size_t)y * (size_t)b->ncls + (size_t)cb[c]];
            int32_t t = -1;
            if (u >= 0 && v >= 0) {
                int32_t pr[2] = {u, v};
                if ((t = seqtab_get(&pairs, pr, 2, NULL)) < 0) goto out;
            }
            if (iv_push(&nx, t)) goto out;
        }
    }
    out->n = pairs.n;
    out->next = nx.v;
    nx.v = NULL;
    out->acc = acc;
    acc = NULL;
    seqtab_free(&pairs);
    out->coff = FA_CALLOC((size_t)out->n + 1, sizeof *out->coff);
    out->call = FA_MALLOC(sizeof *out->call);
    if (!out->coff || !out->call) goto out;
    rc = g4_dfa_trim(out, NULL, err);
    goto fail;
out:
    if (rc == G4_ENOMEM) rc = g4_fsa_budget_err(B, err);
fail:
    if (rc) g4_dfa_free(out);
    seqtab_free(&pc);
    seqtab_free(&pairs);
    iv_free(&nx);
    FA_FREE(acc);
    return rc;
}

int g4_dfa_complement(const g4_dfa *a, g4_dfa *out, g4_err *err) {
    g4_fsa_budget *B = a->budget;
    memset(out, 0, sizeof *out);
    out->budget = B;
    /* classes: a's classes for the bytes, one more (never taken) for the special symbols */
    size_t Ka = a->n ? (size_t)a->ncls : 1, K = Ka + 1, n = (size_t)a->n + 1, sink = (size_t)a->n;
    out->ncls = (int)K;
    for (int s = 0; s < G4_NSYM; s++) out->cls[s] = s >= G4_SYM_SPECIAL ? (uint16_t)(K - 1) : a->n ? a->cls[s] : 0;
    out->n = (int)n;
    out->next = FA_MALLOC(n * K * sizeof *out->next);
    out->acc = FA_MALLOC(n);
    out->coff = FA_CALLOC(n + 1, sizeof *out->coff);
    out->call = FA_MALLOC(sizeof *out->call);
    if (!out->next || !out->acc || !out->coff || !out->call || g4_fsa_poll(B, n * K)) { g4_dfa_free(out); return g4_fsa_budget_err(B, err); }
    for (size_t s = 0; s < n; s++) {
        out->acc[s] = s == sink ? 1 : !a->acc[s];
        for (size_t c = 0; c < Ka; c++) {
            int32_t t = s == sink ? -1 : a->next[s * Ka + c];
            out->next[s * K + c] = t >= 0 ? t : (int32_t)sink;
        }
        out->next[s * K + K - 1] = -1;
    }
    return g4_dfa_trim(out, NULL, err);
}

/* ---- embedding --------------------------------------------------------------------------------- */

void g4_nfa_embed(g4_nfa *a, const g4_dfa *d, int from, int to) {
    if (d->n == 0 || from < 0 || to < 0) return;
    int base = a->n;
    for (int i = 0; i < d->n; i++)
        if (g4_nfa_state(a) < 0) return;
    /* runs of consecutive symbols of one class */
    int run_lo[G4_NSYM], run_hi[G4_NSYM], run_c[G4_NSYM], nr = 0;
    for (int s = 0; s < G4_NSYM; s++) {
        if (nr && run_c[nr - 1] == d->cls[s] && run_hi[nr - 1] == s - 1) { run_hi[nr - 1] = s; continue; }
        run_lo[nr] = run_hi[nr] = s;
        run_c[nr++] = d->cls[s];
    }
    g4_nfa_eps(a, from, base);
    for (int i = 0; i < d->n; i++) {
        for (int r = 0; r < nr; r++) {
            int32_t t = d->next[(size_t)i * (size_t)d->ncls + (size_t)run_c[r]];
            if (t >= 0) g4_nfa_sym(a, base + i, base + t, run_lo[r], run_hi[r]);
        }
        for (int32_t k = d->coff[i]; k < d->coff[i + 1]; k++) g4_nfa_call(a, base + i, base + d->call[2 * k + 1], d->call[2 * k]);
        if (d->acc[i]) g4_nfa_eps(a, base + i, to);
    }
}
