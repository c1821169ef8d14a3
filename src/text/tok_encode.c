/* tok_encode.c — text to ids, step for step like HF tokenizers' Tokenizer::encode.
 *
 * Owns the encode pipeline over a list of pieces (byte ranges of one work buffer, each either
 * already a token or still text):
 *   1. added tokens with normalized=false are matched on the raw text (leftmost-longest over a
 *      byte trie, then HF's single_word / lstrip / rstrip rules, overlaps included);
 *   2. every remaining piece is normalized on its own, then added tokens with normalized=true
 *      are matched on the normalized text;
 *   3. the Split pre-tokenizers cut the remaining pieces;
 *   4. BPE merges each remaining piece: one symbol per character (vocab id, else its <0xNN>
 *      byte tokens, else unk, fused or not), then a min-heap of (rank, position) merges over a
 *      doubly linked symbol list — O(n log n) per piece, so a 1 MB piece without spaces is fine
 *      (the heap is 4-ary with 12-byte entries: for such a piece it is memory-bound, and a
 *      shallower heap touches fewer cache lines per pop);
 *   5. with add_special, the TemplateProcessing ids are put around the sequence.
 * Knows nothing about decoding or models. */
#include "text/tok_internal.h"
#include "text/utf8.h"

#include <stdlib.h>
#include <string.h>

typedef struct { size_t off, len; int32_t id; } tk_piece;
typedef struct { tk_piece *v; size_t n, cap; } tk_plist;

typedef struct { int32_t c, prev, next; uint32_t len; } tk_sym;
/* A candidate merge at pos, with its rank and merged id (12 bytes: a 1 MB word makes a heap of
 * ~1M entries, whose size is what costs). Ordered by (rank, pos) compared as one 64-bit key. */
typedef struct { uint32_t rank, pos; int32_t new_id; } tk_hent;
static inline uint64_t hkey(const tk_hent *e) { return (uint64_t)e->rank << 32 | e->pos; }

typedef struct {
    const g4_tokenizer *t;
    tk_buf wb;              /* all piece text */
    tk_buf nb, nb2, tmp;    /* scratch */
    tk_sym *sym; size_t sym_cap;
    tk_hent *heap; size_t heap_n, heap_cap;
    int32_t *out; size_t out_n, out_cap;
    g4_err *err;
} tk_ctx;

static int nomem(tk_ctx *c) { return g4_err_set(c->err, G4_ENOMEM, "tokenizer: out of memory while encoding"); }

static int plist_add(tk_plist *l, size_t off, size_t len, int32_t id) {
    if (!len) return G4_OK;
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 16;
        tk_piece *nv = realloc(l->v, nc * sizeof *nv);
        if (!nv) return G4_ENOMEM;
        l->v = nv;
        l->cap = nc;
    }
    l->v[l->n++] = (tk_piece){ off, len, id };
    return G4_OK;
}

static int out_add(tk_ctx *c, int32_t id) {
    if (c->out_n == c->out_cap) {
        size_t nc = c->out_cap ? c->out_cap * 2 : 64;
        int32_t *no = realloc(c->out, nc * sizeof *no);
        if (!no) return nomem(c);
        c->out = no;
        c->out_cap = nc;
    }
    c->out[c->out_n++] = id;
    return G4_OK;
}

/* ---------------------------------------------------------------- normalizer */

static int is_space_at(const char *s, size_t n, size_t *l) {
    uint32_t cp;
    *l = g4_utf8_decode(s, n, &cp);
    return g4_uni_is_space(cp);
}

int tk_normalize(const g4_tokenizer *t, const char *s, size_t len, tk_buf *out, tk_buf *tmp) {
    out->n = 0;
    if (tk_buf_put(out, s, len)) return G4_ENOMEM;
    for (size_t k = 0; k < t->n_norm; k++) {
        const tk_norm *op = &t->norm[k];
        tmp->n = 0;
        if (tk_buf_reserve(tmp, out->n)) return G4_ENOMEM;
        if (op->type == TN_REPLACE) {
            const char *p = tk_str(t, op->a_off), *c = tk_str(t, op->b_off);
            size_t i = 0;
            while (i < out->n) {
                const char *m = out->n - i >= op->a_len ? memmem(out->b + i, out->n - i, p, op->a_len) : NULL;
                if (!m) { if (tk_buf_put(tmp, out->b + i, out->n - i)) return G4_ENOMEM; break; }
                size_t at = (size_t)(m - out->b);
                if (tk_buf_put(tmp, out->b + i, at - i) || tk_buf_put(tmp, c, op->b_len)) return G4_ENOMEM;
                i = at + op->a_len;
            }
        } else if (op->type == TN_PREPEND) {
            if (out->n && tk_buf_put(tmp, tk_str(t, op->a_off), op->a_len)) return G4_ENOMEM;
            if (tk_buf_put(tmp, out->b, out->n)) return G4_ENOMEM;
        } else { /* TN_STRIP */
            size_t a = 0, b = out->n, l;
            if (op->left)
                while (a < b && is_space_at(out->b + a, b - a, &l)) a += l;
            if (op->right)
                while (b > a) {
                    size_t p = g4_utf8_prev(out->b, b);
                    if (!is_space_at(out->b + p, b - p, &l)) break;
                    b = p;
                }
            if (tk_buf_put(tmp, out->b + a, b - a)) return G4_ENOMEM;
        }
        tk_buf sw = *out;
        *out = *tmp;
        *tmp = sw;
    }
    if (tk_buf_reserve(out, 0)) return G4_ENOMEM;
    return G4_OK;
}

/* ---------------------------------------------------------------- added tokens */

static int word_char_before(const char *s, size_t at) {
    uint32_t cp;
    size_t p = g4_utf8_prev(s, at);
    g4_utf8_decode(s + p, at - p, &cp);
    return g4_uni_is_word(cp);
}

static int word_char_at(const char *s, size_t n) {
    uint32_t cp;
    g4_utf8_decode(s, n, &cp);
    return g4_uni_is_word(cp);
}

/* HF AddedVocabulary::find_matches on base[off..off+len), appending pieces (offsets into base). */
static int split_added(const g4_tokenizer *t, const tk_trie *tr, const char *base, size_t off, size_t len,
                       tk_plist *out) {
    const char *s = base + off;
    size_t start_offset = 0, i = 0, l;
    if (tr->n_nodes <= 1) return plist_add(out, off, len, -1);
    while (i < len) {
        size_t ml = 0;
        int32_t k = tk_trie_longest(t, tr, s + i, len - i, &ml);
        if (k < 0) { i++; continue; }
        size_t start = i, stop = i + ml;
        i = stop;
        const tk_added *a = &t->added[k];
        if (a->single_word) {
            int start_space = start == 0 || !word_char_before(s, start);
            int stop_space = stop == len || !word_char_at(s + stop, len - stop);
            if (!start_space || !stop_space) continue;
        }
        if (a->lstrip) {
            size_t ns = start;
            while (ns > 0) {
                size_t p = g4_utf8_prev(s, ns);
                if (!is_space_at(s + p, ns - p, &l)) break;
                ns = p;
            }
            start = ns > start_offset ? ns : start_offset;
        }
        if (a->rstrip)
            while (stop < len && is_space_at(s + stop, len - stop, &l)) stop += l;
        if (start_offset < start && plist_add(out, off + start_offset, start - start_offset, -1)) return G4_ENOMEM;
        if (plist_add(out, off + start, stop - start, a->id)) return G4_ENOMEM;
        start_offset = stop;
    }
    if (start_offset != len && plist_add(out, off + start_offset, len - start_offset, -1)) return G4_ENOMEM;
    return G4_OK;
}

/* ---------------------------------------------------------------- pre-tokenizer Split */

typedef struct { size_t a, b; int m; } tk_span;

static int split_piece(const g4_tokenizer *t, const tk_split *op, const char *base, size_t off, size_t len,
                       tk_plist *out, tk_buf *scratch) {
    const char *s = base + off, *pat = tk_str(t, op->pat_off);
    size_t pl = op->pat_len;
    scratch->n = 0;
    /* matches: alternating (non-match, match) spans covering the piece */
    size_t prev = 0, i = 0;
    for (;;) {
        const char *m = len - i >= pl ? memmem(s + i, len - i, pat, pl) : NULL;
        size_t at = m ? (size_t)(m - s) : len;
        if (at > prev) {
            tk_span sp = { prev, at, 0 };
            if (tk_buf_put(scratch, &sp, sizeof sp)) return G4_ENOMEM;
        }
        if (!m) break;
        tk_span sp = { at, at + pl, 1 };
        if (tk_buf_put(scratch, &sp, sizeof sp)) return G4_ENOMEM;
        prev = i = at + pl;
    }
    tk_span *v = (tk_span *)scratch->b;
    size_t n = scratch->n / sizeof *v, w = 0;
    if (op->invert)
        for (size_t k = 0; k < n; k++) v[k].m = !v[k].m;
    /* in-place fold into v[0..w), like HF SplitDelimiterBehavior */
    switch (op->behavior) {
    case TS_REMOVED:
        for (size_t k = 0; k < n; k++)
            if (!v[k].m) v[w++] = v[k];
        break;
    case TS_ISOLATED:
        w = n;
        break;
    case TS_MERGED_PREV: {
        int pm = 0;
        for (size_t k = 0; k < n; k++) {
            if (v[k].m && !pm && w) v[w - 1].b = v[k].b;
            else v[w++] = v[k];
            pm = v[k].m;
        }
        break;
    }
    case TS_MERGED_NEXT: {
        /* fold from the right, then the result is in reverse order at the end of the array */
        int pm = 0;
        size_t r = n; /* results stored at v[r..n) in order */
        for (size_t k = n; k-- > 0;) {
            tk_span cur = v[k];
            if (cur.m && !pm && r < n) v[r].a = cur.a;
            else v[--r] = cur;
            pm = cur.m;
        }
        memmove(v, v + r, (n - r) * sizeof *v);
        w = n - r;
        break;
    }
    case TS_CONTIGUOUS: {
        int pm = 0;
        for (size_t k = 0; k < n; k++) {
            if (v[k].m == pm && w) v[w - 1].b = v[k].b;
            else v[w++] = v[k];
            pm = v[k].m;
        }
        break;
    }
    }
    for (size_t k = 0; k < w; k++)
        if (plist_add(out, off + v[k].a, v[k].b - v[k].a, -1)) return G4_ENOMEM;
    return G4_OK;
}

/* ---------------------------------------------------------------- BPE */

static int sym_add(tk_ctx *c, size_t *n, int32_t id, uint32_t len) {
    if (*n == c->sym_cap) {
        if (tk_grow((void **)&c->sym, &c->sym_cap, sizeof *c->sym, 256)) return G4_ENOMEM;
    }
    if (*n) c->sym[*n - 1].next = (int32_t)*n;
    c->sym[*n] = (tk_sym){ id, *n ? (int32_t)*n - 1 : -1, -1, len };
    (*n)++;
    return G4_OK;
}

static int heap_push(tk_ctx *c, uint32_t rank, uint32_t pos, int32_t new_id) {
    if (c->heap_n == c->heap_cap) {
        if (tk_grow((void **)&c->heap, &c->heap_cap, sizeof *c->heap, 256)) return G4_ENOMEM;
    }
    size_t i = c->heap_n++;
    tk_hent e = { rank, pos, new_id };
    uint64_t k = hkey(&e);
    while (i > 0) {
        size_t p = (i - 1) / 4;
        if (k >= hkey(&c->heap[p])) break;
        c->heap[i] = c->heap[p];
        i = p;
    }
    c->heap[i] = e;
    return G4_OK;
}

static tk_hent heap_pop(tk_ctx *c) {
    tk_hent top = c->heap[0], last = c->heap[--c->heap_n];
    size_t i = 0, n = c->heap_n;
    uint64_t k = hkey(&last);
    for (;;) {
        size_t l = 4 * i + 1, e = l + 4 < n ? l + 4 : n, m = l;
        if (l >= n) break;
        uint64_t mk = hkey(&c->heap[l]);
        for (size_t j = l + 1; j < e; j++) {
            uint64_t jk = hkey(&c->heap[j]);
            if (jk < mk) { mk = jk; m = j; }
        }
        if (mk >= k) break;
        c->heap[i] = c->heap[m];
        i = m;
    }
    if (n) c->heap[i] = last;
    return top;
}

static int bpe_word(tk_ctx *c, const char *s, size_t len) {
    const g4_tokenizer *t = c->t;
    if (t->ignore_merges) {
        int32_t id = tk_strmap_get(t, &t->vocab, s, len);
        if (id >= 0) return out_add(c, id);
    }
    size_t n = 0;
    int32_t unk_id = -1;
    size_t unk_len = 0;
    int pending = 0;
    for (size_t i = 0; i < len;) {
        size_t l = g4_utf8_len((unsigned char)s[i]);
        if (l > len - i) l = len - i;
        const char *p = s + i;
        size_t pl = l;
        if ((i > 0 && t->has_prefix) || (i + l == len && t->has_suffix)) {
            c->tmp.n = 0;
            if ((i > 0 && t->has_prefix && tk_buf_put(&c->tmp, tk_str(t, t->prefix_off), t->prefix_len)) ||
                tk_buf_put(&c->tmp, s + i, l) ||
                (i + l == len && t->has_suffix && tk_buf_put(&c->tmp, tk_str(t, t->suffix_off), t->suffix_len)))
                return nomem(c);
            p = c->tmp.b;
            pl = c->tmp.n;
        }
        int32_t id = tk_strmap_get(t, &t->vocab, p, pl);
        if (id >= 0) {
            if (pending) {
                if (sym_add(c, &n, unk_id, (uint32_t)unk_len)) return nomem(c);
                pending = 0;
            }
            if (sym_add(c, &n, id, (uint32_t)l)) return nomem(c);
        } else {
            int done = 0;
            if (t->byte_fallback) {
                size_t k;
                for (k = 0; k < pl && t->byte_id[(unsigned char)p[k]] >= 0; k++) {}
                if (k == pl) {
                    for (k = 0; k < pl; k++)
                        if (sym_add(c, &n, t->byte_id[(unsigned char)p[k]], 1)) return nomem(c);
                    done = 1;
                }
            }
            if (!done && t->has_unk) {
                if (pending && t->fuse_unk) {
                    unk_len += l;
                } else {
                    if (t->unk_id < 0)
                        return g4_err_set(c->err, G4_EFORMAT, "tokenizer: unk_token \"%.60s\" is not in the vocab",
                                          tk_str(t, t->unk_off));
                    if (pending && sym_add(c, &n, unk_id, (uint32_t)unk_len)) return nomem(c);
                    unk_id = t->unk_id;
                    unk_len = l;
                    pending = 1;
                }
            }
        }
        i += l;
    }
    if (pending && sym_add(c, &n, unk_id, (uint32_t)unk_len)) return nomem(c);

    /* merge_all. The first lookups are independent: their table slots are prefetched a batch
     * ahead so the cache misses overlap. */
    tk_sym *sy = c->sym;
    const tk_mergemap *mm = &t->merges;
    c->heap_n = 0;
    uint32_t rank;
    int32_t nid;
    enum { AHEAD = 16 };
    for (size_t i = 0; i + 1 < n && i < AHEAD; i++)
        __builtin_prefetch(&mm->slots[tk_mhash(tk_pair_key(sy[i].c, sy[i + 1].c)) & (mm->cap - 1)]);
    for (size_t i = 0; i + 1 < n; i++) {
        if (i + AHEAD + 1 < n)
            __builtin_prefetch(&mm->slots[tk_mhash(tk_pair_key(sy[i + AHEAD].c, sy[i + AHEAD + 1].c)) & (mm->cap - 1)]);
        if (tk_mergemap_get(mm, tk_pair_key(sy[i].c, sy[i + 1].c), &rank, &nid) &&
            heap_push(c, rank, (uint32_t)i, nid))
            return nomem(c);
    }
    while (c->heap_n) {
        tk_hent top = heap_pop(c);
        uint32_t pos = top.pos;
        tk_sym *cur = &sy[pos];
        if (cur->len == 0 || cur->next == -1) continue;
        int32_t next_pos = cur->next;
        tk_sym right = sy[next_pos];
        /* like HF: skip the entry unless the pair there still merges to new_id */
        if (!tk_mergemap_get(mm, tk_pair_key(cur->c, right.c), NULL, &nid) || nid != top.new_id) continue;
        cur->c = top.new_id;
        cur->len += right.len;
        cur->next = right.next;
        sy[next_pos].len = 0;
        if (right.next > -1 && (size_t)right.next < n) sy[right.next].prev = (int32_t)pos;
        if (cur->prev >= 0 && tk_mergemap_get(mm, tk_pair_key(sy[cur->prev].c, cur->c), &rank, &nid) &&
            heap_push(c, rank, (uint32_t)cur->prev, nid))
            return nomem(c);
        if (cur->next >= 0 && (size_t)cur->next < n &&
            tk_mergemap_get(mm, tk_pair_key(cur->c, sy[cur->next].c), &rank, &nid) &&
            heap_push(c, rank, pos, nid))
            return nomem(c);
    }
    for (size_t i = 0; i < n; i++)
        if (sy[i].len && out_add(c, sy[i].c)) return G4_ENOMEM;
    return G4_OK;
}

/* ---------------------------------------------------------------- encode */

int g4_tokenizer_encode(const g4_tokenizer *t, const char *text, size_t len, int add_special, int32_t **ids,
                        size_t *n_ids, g4_err *err) {
    if (!t || !ids || !n_ids || (!text && len)) return g4_err_set(err, G4_EINVAL, "tokenizer encode: NULL argument");
    *ids = NULL;
    *n_ids = 0;
    size_t bad = g4_utf8_invalid_at(text, len);
    if (bad < len) return g4_err_set(err, G4_EFORMAT, "tokenizer encode: invalid UTF-8 at byte %zu", bad);
    tk_ctx c = { .t = t, .err = err };
    tk_plist a = { 0 }, b = { 0 };
    int rc = G4_OK;
    if (tk_buf_put(&c.wb, text, len)) { rc = nomem(&c); goto done; }
    /* 1. non-normalized added tokens on the raw text */
    if (len && (rc = split_added(t, &t->trie_raw, c.wb.b, 0, len, &a))) { rc = nomem(&c); goto done; }
    /* 2. normalize each text piece, then the normalized added tokens */
    for (size_t k = 0; k < a.n; k++) {
        tk_piece p = a.v[k];
        if (p.id >= 0) { if (plist_add(&b, p.off, p.len, p.id)) { rc = nomem(&c); goto done; } continue; }
        if (tk_normalize(t, c.wb.b + p.off, p.len, &c.nb, &c.nb2)) { rc = nomem(&c); goto done; }
        size_t off = c.wb.n;
        if (tk_buf_put(&c.wb, c.nb.b, c.nb.n)) { rc = nomem(&c); goto done; }
        if (c.nb.n && split_added(t, &t->trie_norm, c.wb.b, off, c.nb.n, &b)) { rc = nomem(&c); goto done; }
    }
    /* 3. pre-tokenizer splits */
    for (size_t s = 0; s < t->n_split; s++) {
        tk_plist sw = a;
        a = b;
        b = sw;
        b.n = 0;
        for (size_t k = 0; k < a.n; k++) {
            tk_piece p = a.v[k];
            int r2 = p.id >= 0 ? plist_add(&b, p.off, p.len, p.id)
                               : split_piece(t, &t->split[s], c.wb.b, p.off, p.len, &b, &c.tmp);
            if (r2) { rc = nomem(&c); goto done; }
        }
    }
    /* 4. the model */
    if (add_special)
        for (size_t k = 0; k < t->n_tmpl && t->tmpl[k] >= 0; k++)
            if ((rc = out_add(&c, t->tmpl[k]))) goto done;
    for (size_t k = 0; k < b.n; k++) {
        if (b.v[k].id >= 0) rc = out_add(&c, b.v[k].id);
        else rc = bpe_word(&c, c.wb.b + b.v[k].off, b.v[k].len);
        if (rc) goto done;
    }
    /* 5. the rest of the template after the sequence */
    if (add_special) {
        size_t k = 0;
        while (k < t->n_tmpl && t->tmpl[k] >= 0) k++;
        for (k++; k < t->n_tmpl; k++)
            if ((rc = out_add(&c, t->tmpl[k]))) goto done;
    }
    if (!c.out && !(c.out = malloc(sizeof *c.out))) { rc = nomem(&c); goto done; }
    *ids = c.out;
    *n_ids = c.out_n;
    c.out = NULL;
done:
    free(c.out);
    free(c.wb.b);
    free(c.nb.b);
    free(c.nb2.b);
    free(c.tmp.b);
    free(c.sym);
    free(c.heap);
    free(a.v);
    free(b.v);
    return rc;
}
