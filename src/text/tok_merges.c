/* tok_merges.c — turning the BPE model's "merges" list into the (left id, right id) -> (rank,
 * merged id) table at load.
 *
 * The real Gemma file has ~515k merges; each needs three vocab lookups (left, right, and the
 * concatenation) in a 262k-entry hash table, and one insert into a 515k-entry table. Done one by
 * one that is ~1.5M cache (and TLB) misses in a row, the largest share of the load time. So:
 *   - lookups are batched: for BATCH merges, all hashes are computed and their slots prefetched,
 *     then the strings the matching slots point at are prefetched, then the lookups run — the
 *     misses of a batch overlap instead of queueing;
 *   - the lookups of a big list run on two threads (the vocab is read-only by then), each
 *     filling its half of an array of (left, right, merged) ids;
 *   - the inserts then run in file order on one thread (a repeated pair keeps the later rank,
 *     like HF's HashMap), again prefetching a batch of slots ahead.
 * The first bad merge (wrong shape, or a piece outside the vocab) is reported by index, whichever
 * thread met it. Knows the tokenizer's tables (tok_internal.h) and the JSON values, nothing of
 * encoding. */
#include "text/tok_internal.h"
#include "text/tok_json.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

enum { BATCH = 32, PARALLEL_MIN = 65536 };

typedef struct { int32_t a, b, n; } tk_triple;

typedef struct {
    const g4_tokenizer *t;
    const tj_val *items;
    uint32_t lo, hi;  /* merges [lo, hi) */
    tk_triple *out;
    uint32_t bad;     /* first failing index, UINT32_MAX if none */
    int nomem;
} tk_mjob;

/* The two pieces of a merge: "a b" or ["a", "b"]. 0 when the shape is wrong. */
static int merge_parts(const tj_val *m, const char **a, size_t *al, const char **b, size_t *bl) {
    if (m->type == TJ_STR) {
        const char *sp = memchr(m->u.s, ' ', m->n);
        if (!sp) return 0;
        *a = m->u.s;
        *al = (size_t)(sp - m->u.s);
        *b = sp + 1;
        *bl = m->n - *al - 1;
        return 1;
    }
    if (m->type == TJ_ARR && m->n == 2 && m->u.items[0].type == TJ_STR && m->u.items[1].type == TJ_STR) {
        *a = m->u.items[0].u.s;
        *al = m->u.items[0].n;
        *b = m->u.items[1].u.s;
        *bl = m->u.items[1].n;
        return 1;
    }
    return 0;
}

/* Length of the continuing-subword prefix to drop from the right piece (HF: b[prefix_len..]). */
static size_t prefix_skip(const g4_tokenizer *t, const char *b, size_t bl) {
    return t->has_prefix && bl >= t->prefix_len && !memcmp(b, tk_str(t, t->prefix_off), t->prefix_len)
           ? t->prefix_len : 0;
}

typedef struct { const char *s; size_t len; uint32_t h; } tk_probe;

/* Step 1 of a lookup: hash and prefetch the home slot. */
static void probe_hash(const tk_strmap *m, tk_probe *p) {
    p->h = tk_shash(p->s, p->len);
    __builtin_prefetch(&m->slots[p->h & (m->cap - 1)]);
}

/* Step 2: prefetch the string of the first slot whose hash matches (almost always the one). */
static void probe_touch(const g4_tokenizer *t, const tk_strmap *m, const tk_probe *p) {
    for (size_t j = p->h & (m->cap - 1); m->slots[j].idp1; j = (j + 1) & (m->cap - 1))
        if (m->slots[j].hash == p->h) { __builtin_prefetch(tk_str(t, m->slots[j].off)); return; }
}

static void *resolve_range(void *arg) {
    tk_mjob *j = arg;
    const g4_tokenizer *t = j->t;
    const tk_strmap *v = &t->vocab;
    tk_probe pr[3 * BATCH];
    tk_buf cat = { 0 }; /* the merged strings of a batch */
    size_t cat_off[BATCH];
    for (uint32_t base = j->lo; base < j->hi && j->bad == UINT32_MAX; base += BATCH) {
        uint32_t n = j->hi - base < BATCH ? j->hi - base : BATCH;
        cat.n = 0;
        for (uint32_t k = 0; k < n; k++) {
            const char *a, *b;
            size_t al, bl;
            if (!merge_parts(&j->items[base + k], &a, &al, &b, &bl)) { n = k; j->bad = base + k; break; }
            size_t skip = prefix_skip(t, b, bl);
            cat_off[k] = cat.n;
            if (tk_buf_put(&cat, a, al) || tk_buf_put(&cat, b + skip, bl - skip)) { j->nomem = 1; free(cat.b); return NULL; }
            pr[3 * k] = (tk_probe){ a, al, 0 };
            pr[3 * k + 1] = (tk_probe){ b, bl, 0 };
            pr[3 * k + 2].len = al + bl - skip;
        }
        for (uint32_t k = 0; k < n; k++) pr[3 * k + 2].s = cat.b + cat_off[k]; /* cat may have moved */
        for (uint32_t k = 0; k < 3 * n; k++) probe_hash(v, &pr[k]);
        for (uint32_t k = 0; k < 3 * n; k++) probe_touch(t, v, &pr[k]);
        for (uint32_t k = 0; k < n; k++) {
            tk_triple *o = &j->out[base + k];
            o->a = tk_strmap_get_h(t, v, pr[3 * k].s, pr[3 * k].len, pr[3 * k].h);
            o->b = tk_strmap_get_h(t, v, pr[3 * k + 1].s, pr[3 * k + 1].len, pr[3 * k + 1].h);
            o->n = tk_strmap_get_h(t, v, pr[3 * k + 2].s, pr[3 * k + 2].len, pr[3 * k + 2].h);
            if (o->a < 0 || o->b < 0 || o->n < 0) { j->bad = base + k; break; }
        }
    }
    free(cat.b);
    return NULL;
}

/* The message for the bad merge i (recomputed the simple way). */
static int bad_merge(const g4_tokenizer *t, const tj_val *m, uint32_t i, g4_err *err) {
    const char *a, *b;
    size_t al, bl;
    if (!merge_parts(m, &a, &al, &b, &bl)) {
        if (m->type == TJ_STR)
            return g4_err_set(err, G4_EFORMAT, "tokenizer.json: model.merges[%u] \"%.60s\" has no space", i, m->u.s);
        return g4_err_set(err, G4_EFORMAT, "tokenizer.json: model.merges[%u] must be \"a b\" or [\"a\", \"b\"] (found %s)",
                          i, tj_type_name(m));
    }
    size_t skip = prefix_skip(t, b, bl);
    tk_buf cat = { 0 };
    if (tk_buf_put(&cat, a, al) || tk_buf_put(&cat, b + skip, bl - skip)) {
        free(cat.b);
        return g4_err_set(err, G4_ENOMEM, "tokenizer.json: out of memory");
    }
    const char *bad = cat.b;
    size_t badl = cat.n;
    if (tk_strmap_get(t, &t->vocab, a, al) < 0) { bad = a; badl = al; }
    else if (tk_strmap_get(t, &t->vocab, b, bl) < 0) { bad = b; badl = bl; }
    int shown = (int)(badl > 60 ? 60 : badl);
    int rc = g4_err_set(err, G4_EFORMAT, "tokenizer.json: model.merges[%u] uses \"%.*s\", which is not in the vocab",
                        i, shown, bad);
    free(cat.b);
    return rc;
}

int tk_load_merges(g4_tokenizer *t, const tj_val *merges, g4_err *err) {
    size_t n = merges ? merges->n : 0;
    if (tk_mergemap_init(&t->merges, n)) return g4_err_set(err, G4_ENOMEM, "tokenizer.json: out of memory");
    if (!n) return G4_OK;
    tk_triple *res = tj_big_alloc(n * sizeof *res);
    if (!res) return g4_err_set(err, G4_ENOMEM, "tokenizer.json: out of memory");
    uint32_t half = n >= PARALLEL_MIN ? (uint32_t)(n / 2) : (uint32_t)n;
    tk_mjob jobs[2] = {
        { t, merges->u.items, 0, half, res, UINT32_MAX, 0 },
        { t, merges->u.items, half, (uint32_t)n, res, UINT32_MAX, 0 },
    };
    pthread_t th;
    int threaded = half < n && pthread_create(&th, NULL, resolve_range, &jobs[1]) == 0;
    resolve_range(&jobs[0]);
    if (threaded) pthread_join(th, NULL);
    else if (half < n) resolve_range(&jobs[1]);
    int rc = G4_OK;
    if (jobs[0].nomem || jobs[1].nomem) {
        rc = g4_err_set(err, G4_ENOMEM, "tokenizer.json: out of memory");
    } else if (jobs[0].bad != UINT32_MAX || jobs[1].bad != UINT32_MAX) {
        uint32_t i = jobs[0].bad != UINT32_MAX ? jobs[0].bad : jobs[1].bad;
        rc = bad_merge(t, &merges->u.items[i], i, err);
    } else {
        /* inserts in file order, the home slots of the next batch prefetched */
        tk_mergemap *mm = &t->merges;
        for (size_t base = 0; base < n && !rc; base += BATCH) {
            size_t e = n - base < BATCH ? n : base + BATCH;
            for (size_t i = base; i < e; i++)
                __builtin_prefetch(&mm->slots[tk_mhash(tk_pair_key(res[i].a, res[i].b)) & (mm->cap - 1)], 1);
            for (size_t i = base; i < e && !rc; i++)
                if (tk_mergemap_put(mm, tk_pair_key(res[i].a, res[i].b), (uint32_t)i, res[i].n))
                    rc = g4_err_set(err, G4_ENOMEM, "tokenizer.json: out of memory");
        }
    }
    free(res);
    return rc;
}
