/* tok_decode.c — ids to text: HF's Tokenizer::decode and a streaming detokenizer.
 *
 * decode: ids -> token strings (added tokens first, then the vocab; unknown ids dropped, special
 * ones dropped with skip_special), then the decoder chain over the list of strings exactly like
 * HF's decode_chain (Replace per token, ByteFallback turning each run of <0xNN> tokens into its
 * UTF-8 string or one U+FFFD per byte when the run is not valid UTF-8, Fuse, Strip per string),
 * then concatenation. No decoder: the strings joined by spaces.
 * detok: the same result incrementally; byte runs are held until a non-byte token (or flush)
 * ends them, so emitted text never splits a character. Knows nothing about encoding. */
#include "text/tok_internal.h"
#include "text/utf8.h"

#include <stdlib.h>
#include <string.h>

/* A list of strings stored back to back in one buffer. */
typedef struct { size_t off, n; } tk_span_t;
typedef struct { tk_buf data; tk_span_t *v; size_t n, cap; } tk_slist;

static void slist_free(tk_slist *l) {
    free(l->data.b);
    free(l->v);
    *l = (tk_slist){ 0 };
}

static inline const char *sl_str(const tk_slist *l, size_t i) { return l->data.b + l->v[i].off; }

static int slist_add(tk_slist *l, const char *s, size_t n) {
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 16;
        tk_span_t *nv = realloc(l->v, nc * sizeof *nv);
        if (!nv) return G4_ENOMEM;
        l->v = nv;
        l->cap = nc;
    }
    size_t off = l->data.n;
    if (tk_buf_put(&l->data, s, n)) return G4_ENOMEM;
    l->v[l->n++] = (tk_span_t){ off, n };
    return G4_OK;
}

/* Replace every non-overlapping occurrence of pat with rep (left to right). */
static int replace_into(tk_buf *out, const char *s, size_t n, const char *pat, size_t pl, const char *rep, size_t rl) {
    size_t i = 0;
    while (i < n) {
        const char *m = n - i >= pl ? memmem(s + i, n - i, pat, pl) : NULL;
        if (!m) return tk_buf_put(out, s + i, n - i);
        size_t at = (size_t)(m - s);
        if (tk_buf_put(out, s + i, at - i) || tk_buf_put(out, rep, rl)) return G4_ENOMEM;
        i = at + pl;
    }
    return tk_buf_reserve(out, 0);
}

/* HF Strip decoder on one string: up to `start` leading and `stop` trailing `content` chars. */
static int strip_into(tk_buf *out, const char *s, size_t n, uint32_t content, size_t start, size_t stop) {
    size_t a = 0, b = n, cnt = 0;
    uint32_t cp;
    while (cnt < start && a < n) {
        size_t l = g4_utf8_decode(s + a, n - a, &cp);
        if (cp != content) break;
        a += l;
        cnt++;
    }
    cnt = 0;
    while (cnt < stop && b > a) {
        size_t p = g4_utf8_prev(s, b);
        g4_utf8_decode(s + p, b - p, &cp);
        if (cp != content) break;
        b = p;
        cnt++;
    }
    return tk_buf_put(out, s + a, b - a);
}

/* 0..255 when the string is a byte token like HF's ByteFallback sees it, else -1. */
static int byte_token(const char *s, size_t n) {
    if (n != 6 || memcmp(s, "<0x", 3) || s[5] != '>') return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) {
            if (i == 3 && c == '+') continue; /* Rust's u8::from_str_radix accepts a leading '+' */
            return -1;
        }
        v = v * 16 + d;
    }
    return v;
}

/* The bytes of a finished byte run: themselves when valid UTF-8, else U+FFFD per byte. */
static int put_byte_run(tk_buf *out, const char *bytes, size_t n) {
    if (g4_utf8_invalid_at(bytes, n) == n) return tk_buf_put(out, bytes, n);
    for (size_t i = 0; i < n; i++)
        if (tk_buf_put(out, "\xEF\xBF\xBD", 3)) return G4_ENOMEM;
    return G4_OK;
}

static int dec_step(const g4_tokenizer *t, const tk_dec *op, tk_slist *in, tk_slist *out, tk_buf *tmp) {
    if (op->type == TD_FUSE) {
        tmp->n = 0;
        (void)tmp;
        return slist_add(out, in->data.b ? in->data.b : "", in->data.n);
    }
    if (op->type == TD_BYTEFALLBACK) {
        tk_buf run = { 0 };
        int rc = G4_OK;
        for (size_t i = 0; i < in->n && !rc; i++) {
            int b = byte_token(sl_str(in, i), in->v[i].n);
            if (b >= 0) { char c = (char)b; rc = tk_buf_put(&run, &c, 1); continue; }
            if (run.n) {
                tmp->n = 0;
                rc = put_byte_run(tmp, run.b, run.n);
                if (!rc) rc = slist_add(out, tmp->b, tmp->n);
                run.n = 0;
            }
            if (!rc) rc = slist_add(out, sl_str(in, i), in->v[i].n);
        }
        if (!rc && run.n) {
            tmp->n = 0;
            rc = put_byte_run(tmp, run.b, run.n);
            if (!rc) rc = slist_add(out, tmp->b, tmp->n);
        }
        free(run.b);
        return rc;
    }
    for (size_t i = 0; i < in->n; i++) {
        tmp->n = 0;
        int rc = op->type == TD_REPLACE
                     ? replace_into(tmp, sl_str(in, i), in->v[i].n, tk_str(t, op->a_off), op->a_len, tk_str(t, op->b_off), op->b_len)
                     : strip_into(tmp, sl_str(in, i), in->v[i].n, op->content, op->start, op->stop);
        if (rc || slist_add(out, tmp->b ? tmp->b : "", tmp->n)) return G4_ENOMEM;
    }
    return G4_OK;
}

static const char *id_piece(const g4_tokenizer *t, int32_t id, size_t *len, int skip_special) {
    if (id < 0 || id >= t->n_ids || t->id_len[id] == UINT32_MAX) return NULL;
    if (skip_special && t->id_special[id]) return NULL;
    *len = t->id_len[id];
    return tk_str(t, t->id_off[id]);
}

int g4_tokenizer_decode(const g4_tokenizer *t, const int32_t *ids, size_t n, int skip_special, char **text,
                        size_t *len, g4_err *err) {
    if (!t || !text || !len || (!ids && n)) return g4_err_set(err, G4_EINVAL, "tokenizer decode: NULL argument");
    *text = NULL;
    *len = 0;
    tk_slist a = { 0 }, b = { 0 };
    tk_buf tmp = { 0 }, res = { 0 };
    int rc = G4_OK;
    for (size_t i = 0; i < n && !rc; i++) {
        size_t pl;
        const char *p = id_piece(t, ids[i], &pl, skip_special);
        if (p) rc = slist_add(&a, p, pl);
    }
    if (t->has_decoder) {
        for (size_t k = 0; k < t->n_dec && !rc; k++) {
            rc = dec_step(t, &t->dec[k], &a, &b, &tmp);
            slist_free(&a);
            a = b;
            b = (tk_slist){ 0 };
        }
    }
    for (size_t i = 0; i < a.n && !rc; i++) {
        if (!t->has_decoder && i && tk_buf_put(&res, " ", 1)) rc = G4_ENOMEM;
        if (!rc) rc = tk_buf_put(&res, sl_str(&a, i), a.v[i].n);
    }
    if (!rc) rc = tk_buf_reserve(&res, 0);
    slist_free(&a);
    slist_free(&b);
    free(tmp.b);
    if (rc) { free(res.b); return g4_err_set(err, G4_ENOMEM, "tokenizer decode: out of memory"); }
    res.b[res.n] = 0;
    *text = res.b;
    *len = res.n;
    return G4_OK;
}

/* ---------------------------------------------------------------- streaming */

struct g4_detok {
    const g4_tokenizer *t;
    int skip_special;
    size_t n_pre, bf, n_mid, fuse;  /* op ranges: [0,n_pre) per token, bf = ByteFallback index or SIZE_MAX,
                                       (bf, fuse) per token, fuse = Fuse index or n_dec, (fuse, n_dec) whole text */
    tk_buf run;                     /* pending byte run */
    tk_buf a, b;                    /* scratch */
    size_t strip_left[8];           /* per whole-text Strip op: leading chars still strippable */
    int started;                    /* some text emitted (after whole-text ops) */
};

int g4_detok_create(const g4_tokenizer *t, int skip_special, g4_detok **out, g4_err *err) {
    if (!t || !out) return g4_err_set(err, G4_EINVAL, "detok: NULL argument");
    *out = NULL;
    g4_detok *d = calloc(1, sizeof *d);
    if (!d) return g4_err_set(err, G4_ENOMEM, "detok: out of memory");
    d->t = t;
    d->skip_special = skip_special;
    d->bf = SIZE_MAX;
    d->fuse = t->n_dec;
    size_t n_whole = 0;
    for (size_t k = 0; k < t->n_dec; k++) {
        const tk_dec *op = &t->dec[k];
        if (op->type == TD_FUSE && d->fuse == t->n_dec) { d->fuse = k; continue; }
        if (op->type == TD_BYTEFALLBACK && d->fuse == t->n_dec && d->bf == SIZE_MAX) { d->bf = k; continue; }
        if (d->fuse == t->n_dec) continue; /* per-token Replace/Strip: fine */
        /* after Fuse the ops see the whole text: only prefix-stable ones stream */
        int ok = (op->type == TD_REPLACE && g4_utf8_len((unsigned char)tk_str(t, op->a_off)[0]) == op->a_len) ||
                 (op->type == TD_STRIP && op->stop == 0) || op->type == TD_FUSE;
        if (op->type == TD_STRIP && n_whole < 8) d->strip_left[n_whole++] = op->start;
        else if (op->type == TD_STRIP) ok = 0;
        if (!ok) {
            free(d);
            return g4_err_set(err, G4_EUNSUPPORTED,
                              "detok: decoder step %zu (after Fuse) is not prefix-stable; streaming is not supported", k);
        }
    }
    if (d->bf == SIZE_MAX)
        for (size_t k = d->fuse; k < t->n_dec; k++)
            if (t->dec[k].type == TD_BYTEFALLBACK) {
                free(d);
                return g4_err_set(err, G4_EUNSUPPORTED, "detok: ByteFallback after Fuse is not supported for streaming");
            }
    *out = d;
    return G4_OK;
}

/* Per-token ops in [from, to) (skipping ByteFallback/Fuse), applied to d->a in place. */
static int apply_token_ops(g4_detok *d, size_t from, size_t to) {
    const g4_tokenizer *t = d->t;
    for (size_t k = from; k < to; k++) {
        const tk_dec *op = &t->dec[k];
        if (op->type != TD_REPLACE && op->type != TD_STRIP) continue;
        d->b.n = 0;
        int rc = op->type == TD_REPLACE
                     ? replace_into(&d->b, d->a.b, d->a.n, tk_str(t, op->a_off), op->a_len, tk_str(t, op->b_off), op->b_len)
                     : strip_into(&d->b, d->a.b, d->a.n, op->content, op->start, op->stop);
        if (rc || tk_buf_reserve(&d->b, 0)) return G4_ENOMEM;
        tk_buf sw = d->a;
        d->a = d->b;
        d->b = sw;
    }
    return G4_OK;
}

/* Whole-text ops (after Fuse) on the chunk in d->a, appended to *res. */
static int emit_chunk(g4_detok *d, tk_buf *res) {
    const g4_tokenizer *t = d->t;
    size_t ns = 0;
    for (size_t k = d->fuse + 1; k < t->n_dec; k++) {
        const tk_dec *op = &t->dec[k];
        d->b.n = 0;
        int rc = G4_OK;
        if (op->type == TD_REPLACE) {
            rc = replace_into(&d->b, d->a.b, d->a.n, tk_str(t, op->a_off), op->a_len, tk_str(t, op->b_off), op->b_len);
        } else if (op->type == TD_STRIP) {
            size_t *left = &d->strip_left[ns++];
            size_t a = 0;
            uint32_t cp;
            while (*left && a < d->a.n) {
                size_t l = g4_utf8_decode(d->a.b + a, d->a.n - a, &cp);
                if (cp != op->content) { *left = 0; break; }
                a += l;
                (*left)--;
            }
            if (a < d->a.n) *left = 0; /* a non-content char ends the leading run */
            rc = tk_buf_put(&d->b, d->a.b + a, d->a.n - a);
        } else {
            continue; /* another Fuse: no-op on one string */
        }
        if (rc || tk_buf_reserve(&d->b, 0)) return G4_ENOMEM;
        tk_buf sw = d->a;
        d->a = d->b;
        d->b = sw;
    }
    return tk_buf_put(res, d->a.b, d->a.n);
}

static int close_run(g4_detok *d, tk_buf *res) {
    if (!d->run.n) return G4_OK;
    d->a.n = 0;
    int rc = put_byte_run(&d->a, d->run.b, d->run.n);
    d->run.n = 0;
    if (rc || apply_token_ops(d, d->bf + 1, d->fuse)) return G4_ENOMEM;
    return emit_chunk(d, res);
}

static int finish(tk_buf *res, char **out, size_t *out_len, g4_err *err) {
    if (tk_buf_reserve(res, 0)) { free(res->b); return g4_err_set(err, G4_ENOMEM, "detok: out of memory"); }
    res->b[res->n] = 0;
    *out = res->b;
    *out_len = res->n;
    return G4_OK;
}

int g4_detok_push(g4_detok *d, int32_t id, char **out, size_t *out_len, g4_err *err) {
    if (!d || !out || !out_len) return g4_err_set(err, G4_EINVAL, "detok: NULL argument");
    *out = NULL;
    *out_len = 0;
    tk_buf res = { 0 };
    size_t pl;
    const char *p = id_piece(d->t, id, &pl, d->skip_special);
    if (!d->t->has_decoder) {
        /* no decoder: tokens joined by spaces */
        if (p && ((d->started && tk_buf_put(&res, " ", 1)) || tk_buf_put(&res, p, pl)))
            { free(res.b); return g4_err_set(err, G4_ENOMEM, "detok: out of memory"); }
        if (p) d->started = 1;
        return finish(&res, out, out_len, err);
    }
    if (p) {
        d->a.n = 0;
        int rc = tk_buf_put(&d->a, p, pl);
        size_t pre_end = d->bf != SIZE_MAX ? d->bf : d->fuse;
        if (!rc) rc = apply_token_ops(d, 0, pre_end);
        int b = d->bf != SIZE_MAX ? byte_token(d->a.b, d->a.n) : -1;
        if (!rc && b >= 0) {
            char c = (char)b;
            rc = tk_buf_put(&d->run, &c, 1);
        } else if (!rc) {
            tk_buf tok = d->a; /* keep the token while the run is flushed through d->a */
            d->a = (tk_buf){ 0 };
            rc = close_run(d, &res);
            free(d->a.b);
            d->a = tok;
            if (!rc && d->bf != SIZE_MAX) rc = apply_token_ops(d, d->bf + 1, d->fuse);
            if (!rc) rc = emit_chunk(d, &res);
        }
        if (rc) { free(res.b); return g4_err_set(err, G4_ENOMEM, "detok: out of memory"); }
    }
    return finish(&res, out, out_len, err);
}

int g4_detok_flush(g4_detok *d, char **out, size_t *out_len, g4_err *err) {
    if (!d || !out || !out_len) return g4_err_set(err, G4_EINVAL, "detok: NULL argument");
    tk_buf res = { 0 };
    if (d->t->has_decoder && close_run(d, &res)) { free(res.b); return g4_err_set(err, G4_ENOMEM, "detok: out of memory"); }
    for (size_t k = 0; k < 8; k++) d->strip_left[k] = 0;
    size_t nw = 0;
    for (size_t k = d->fuse + 1; k < d->t->n_dec; k++)
        if (d->t->dec[k].type == TD_STRIP && nw < 8) d->strip_left[nw++] = d->t->dec[k].start;
    d->started = 0;
    return finish(&res, out, out_len, err);
}

void g4_detok_free(g4_detok *d) {
    if (!d) return;
    free(d->run.b);
    free(d->a.b);
    free(d->b.b);
    free(d);
}
