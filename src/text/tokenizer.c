/* tokenizer.c — loading a Hugging Face tokenizer.json and the lookups (token <-> id).
 *
 * Owns: reading the file (mapped when it is a regular file) and the JSON (tok_json.c, whose
 * decoded-string buffer becomes the string pool, so no string is copied), filling the hash
 * tables (vocab string -> id, merge pair -> rank/new id, added-token contents; sized once from
 * the JSON lengths) and the added-token tries (both tok_tables.c's), and the normalizer, pre-tokenizer, decoder and
 * post-processor descriptions, refusing what it does not implement. The merges list itself is
 * resolved in tok_merges.c. Added-token ids follow HF's AddedVocabulary::add_tokens (the id
 * stored in the file is not trusted: a content found in the vocab takes the vocab id, a new one
 * the next free id). Encoding lives in tok_encode.c, decoding in tok_decode.c. Knows nothing
 * about models or chat templates. */
#include "text/tok_internal.h"
#include "text/tok_json.h"
#include "text/utf8.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---------------------------------------------------------------- loading helpers */

typedef struct {
    g4_tokenizer *t;
    g4_err *err;
} loader;

/* Offset of a string of the parsed JSON: the parser's string buffer is the pool (no copy). */
static uint32_t pool_ref(const g4_tokenizer *t, const char *s) { return (uint32_t)(s - t->pool.b); }

/* Appends a string that is not in the JSON. Only after the JSON values are no longer read: the
 * pool may move. */
static int pool_add(g4_tokenizer *t, const char *s, size_t len, uint32_t *off) {
    if (t->pool.n + len + 1 > UINT32_MAX) return G4_ENOMEM;
    *off = (uint32_t)t->pool.n;
    if (tk_buf_put(&t->pool, s, len) || tk_buf_put(&t->pool, "", 1)) return G4_ENOMEM;
    return G4_OK;
}

static int oom(g4_err *err) { return g4_err_set(err, G4_ENOMEM, "tokenizer.json: out of memory"); }

static int want(g4_err *err, const tj_val *v, tj_type ty, const char *what) {
    if (v && (v->type == ty || (ty == TJ_TRUE && v->type == TJ_FALSE))) return G4_OK;
    const char *tn = ty == TJ_STR ? "a string" : ty == TJ_OBJ ? "an object" : ty == TJ_ARR ? "an array"
                   : ty == TJ_NUM ? "a number" : "a boolean";
    return g4_err_set(err, G4_EFORMAT, "tokenizer.json: %s must be %s (found %s)", what, tn, tj_type_name(v));
}

/* Optional boolean: absent/null -> def. */
static int get_bool(g4_err *err, const tj_val *obj, const char *key, int def, int *out, const char *what) {
    const tj_val *v = tj_get(obj, key);
    if (!v || v->type == TJ_NULL) { *out = def; return G4_OK; }
    if (v->type != TJ_TRUE && v->type != TJ_FALSE)
        return g4_err_set(err, G4_EFORMAT, "tokenizer.json: %s.%s must be a boolean (found %s)", what, key, tj_type_name(v));
    *out = v->type == TJ_TRUE;
    return G4_OK;
}

static int get_count(g4_err *err, const tj_val *obj, const char *key, size_t *out, const char *what) {
    const tj_val *v = tj_get(obj, key);
    if (!v || v->type != TJ_NUM || v->u.num < 0 || v->u.num > 1e9 || v->u.num != (double)(size_t)v->u.num)
        return g4_err_set(err, G4_EFORMAT, "tokenizer.json: %s.%s must be a non-negative integer (found %s)",
                          what, key, tj_type_name(v));
    *out = (size_t)v->u.num;
    return G4_OK;
}

/* {"String": "x"} -> the string; {"Regex": ...} -> unsupported. */
static int get_pattern(g4_err *err, const tj_val *obj, const char *what, const tj_val **out) {
    const tj_val *p = tj_get(obj, "pattern");
    if (!p || p->type != TJ_OBJ)
        return g4_err_set(err, G4_EFORMAT, "tokenizer.json: %s.pattern must be an object (found %s)", what, tj_type_name(p));
    const tj_val *s = tj_get(p, "String");
    if (!s) {
        if (tj_get(p, "Regex"))
            return g4_err_set(err, G4_EUNSUPPORTED, "tokenizer.json: %s with a Regex pattern is not supported", what);
        return g4_err_set(err, G4_EFORMAT, "tokenizer.json: %s.pattern must hold \"String\" or \"Regex\"", what);
    }
    if (s->type != TJ_STR)
        return g4_err_set(err, G4_EFORMAT, "tokenizer.json: %s.pattern.String must be a string (found %s)", what, tj_type_name(s));
    if (s->n == 0)
        return g4_err_set(err, G4_EUNSUPPORTED, "tokenizer.json: %s with an empty pattern is not supported", what);
    *out = s;
    return G4_OK;
}

static const char *type_of(const tj_val *obj) {
    const tj_val *ty = tj_get(obj, "type");
    return ty && ty->type == TJ_STR ? ty->u.s : NULL;
}

/* ---------------------------------------------------------------- model */

static int load_bpe(g4_tokenizer *t, const tj_val *model, g4_err *err) {
    const char *ty = type_of(model);
    if (model->type != TJ_OBJ) return want(err, model, TJ_OBJ, "model");
    if (ty && strcmp(ty, "BPE"))
        return g4_err_set(err, G4_EUNSUPPORTED, "tokenizer.json: model type '%s' is not supported (only BPE)", ty);
    if (!ty && !tj_get(model, "merges"))
        return g4_err_set(err, G4_EUNSUPPORTED, "tokenizer.json: model has no type and is not a BPE model");
    const tj_val *drop = tj_get(model, "dropout");
    if (drop && drop->type != TJ_NULL) {
        if (drop->type != TJ_NUM) return want(err, drop, TJ_NUM, "model.dropout");
        if (drop->u.num != 0.0)
            return g4_err_set(err, G4_EUNSUPPORTED, "tokenizer.json: BPE dropout %g is not supported", drop->u.num);
    }
    int rc;
    if ((rc = get_bool(err, model, "byte_fallback", 0, &t->byte_fallback, "model")) ||
        (rc = get_bool(err, model, "fuse_unk", 0, &t->fuse_unk, "model")) ||
        (rc = get_bool(err, model, "ignore_merges", 0, &t->ignore_merges, "model")))
        return rc;
    const tj_val *unk = tj_get(model, "unk_token");
    if (unk && unk->type != TJ_NULL) {
        if ((rc = want(err, unk, TJ_STR, "model.unk_token"))) return rc;
        t->unk_off = pool_ref(t, unk->u.s);
        t->unk_len = unk->n;
        t->has_unk = 1;
    }
    const tj_val *pre = tj_get(model, "continuing_subword_prefix"), *suf = tj_get(model, "end_of_word_suffix");
    if (pre && pre->type != TJ_NULL) {
        if ((rc = want(err, pre, TJ_STR, "model.continuing_subword_prefix"))) return rc;
        t->prefix_off = pool_ref(t, pre->u.s);
        t->prefix_len = pre->n;
        t->has_prefix = 1;
    }
    if (suf && suf->type != TJ_NULL) {
        if ((rc = want(err, suf, TJ_STR, "model.end_of_word_suffix"))) return rc;
        t->suffix_off = pool_ref(t, suf->u.s);
        t->suffix_len = suf->n;
        t->has_suffix = 1;
    }
    const tj_val *vocab = tj_get(model, "vocab");
    if ((rc = want(err, vocab, TJ_OBJ, "model.vocab"))) return rc;
    if (tk_strmap_init(&t->vocab, vocab->n)) return oom(err);
    int32_t max_id = -1;
    for (uint32_t i = 0; i < vocab->n; i++) {
        const tj_val *k = &vocab->u.items[2 * i], *v = &vocab->u.items[2 * i + 1];
        if (v->type != TJ_NUM || v->u.num < 0 || v->u.num > 2147483646.0 || v->u.num != (double)(int32_t)v->u.num)
            return g4_err_set(err, G4_EFORMAT, "tokenizer.json: model.vocab[\"%.60s\"] must be a non-negative integer id",
                              k->u.s);
        if (tk_strmap_put(t, &t->vocab, pool_ref(t, k->u.s), k->n, (int32_t)v->u.num)) return oom(err);
        if ((int32_t)v->u.num > max_id) max_id = (int32_t)v->u.num;
    }
    t->model_vocab_size = t->vocab.n;
    t->unk_id = t->has_unk ? tk_strmap_get(t, &t->vocab, tk_str(t, t->unk_off), t->unk_len) : -1;
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        t->byte_id[b] = tk_strmap_get(t, &t->vocab, name, 6);
    }
    const tj_val *merges = tj_get(model, "merges");
    if (!merges || merges->type == TJ_NULL) merges = NULL;
    else if ((rc = want(err, merges, TJ_ARR, "model.merges"))) return rc;
    if ((rc = tk_load_merges(t, merges, err))) return rc;
    t->n_ids = max_id + 1;
    return G4_OK;
}

/* ---------------------------------------------------------------- added tokens */

static int added_eq(const g4_tokenizer *t, const tk_added *a, const tk_added *b) {
    return a->len == b->len && !memcmp(tk_str(t, a->off), tk_str(t, b->off), a->len) && a->special == b->special &&
           a->normalized == b->normalized && a->lstrip == b->lstrip && a->rstrip == b->rstrip &&
           a->single_word == b->single_word;
}

static int load_added(g4_tokenizer *t, const tj_val *arr, g4_err *err) {
    int rc;
    if (tk_strmap_init(&t->added_map, 64) || tk_strmap_init(&t->special_set, 64)) return oom(err);
    if (!arr || arr->type == TJ_NULL) return G4_OK;
    if ((rc = want(err, arr, TJ_ARR, "added_tokens"))) return rc;
    t->added = calloc(arr->n ? arr->n : 1, sizeof *t->added);
    if (!t->added) return oom(err);
    /* HF: tokens are added in file order; special ones also enter special_tokens. An entry equal
     * (content and flags) to one already present is ignored. */
    int32_t max_added = -1;
    tk_mergemap by_id; /* id -> index in t->added */
    if (tk_mergemap_init(&by_id, arr->n)) return oom(err);
    for (uint32_t i = 0; i < arr->n; i++) {
        const tj_val *o = &arr->u.items[i];
        char what[48];
        snprintf(what, sizeof what, "added_tokens[%u]", i);
        if ((rc = want(err, o, TJ_OBJ, what))) { free(by_id.slots); return rc; }
        const tj_val *c = tj_get(o, "content");
        if ((rc = want(err, c, TJ_STR, "added_tokens[].content"))) { free(by_id.slots); return rc; }
        int sp, nz, ls, rs, sw;
        if ((rc = get_bool(err, o, "special", 0, &sp, what)) || (rc = get_bool(err, o, "normalized", !sp, &nz, what)) ||
            (rc = get_bool(err, o, "lstrip", 0, &ls, what)) || (rc = get_bool(err, o, "rstrip", 0, &rs, what)) ||
            (rc = get_bool(err, o, "single_word", 0, &sw, what)))
            { free(by_id.slots); return rc; }
        const tj_val *idv = tj_get(o, "id");
        if (!idv || idv->type != TJ_NUM) { free(by_id.slots); return want(err, idv, TJ_NUM, "added_tokens[].id"); }
        if (c->n == 0) continue;
        tk_added a = { 0, c->n, -1, (uint8_t)sp, (uint8_t)nz, (uint8_t)ls, (uint8_t)rs, (uint8_t)sw };
        a.off = pool_ref(t, c->u.s);
        if (sp && tk_strmap_get(t, &t->special_set, c->u.s, c->n) < 0 &&
            tk_strmap_put(t, &t->special_set, a.off, a.len, 1))
            { free(by_id.slots); return oom(err); }
        /* an equal token can only sit at the id its content already maps to */
        int32_t id = tk_strmap_get(t, &t->added_map, c->u.s, c->n);
        int32_t at = -1;
        if (id >= 0 && tk_mergemap_get(&by_id, (uint64_t)id, NULL, &at) && added_eq(t, &t->added[at], &a)) continue;
        if (id < 0) id = tk_strmap_get(t, &t->vocab, c->u.s, c->n);
        if (id < 0) {
            size_t vs = t->model_vocab_size;
            if (max_added < 0) id = (int32_t)vs;
            else id = ((size_t)max_added >= vs || vs == 0) ? max_added + 1 : (int32_t)vs;
        }
        if (tk_strmap_put(t, &t->added_map, a.off, a.len, id)) { free(by_id.slots); return oom(err); }
        /* an existing content keeps its id, so the max over the map's values only grows */
        if (id > max_added) max_added = id;
        a.id = id;
        /* added_tokens_map_r[id] = token: the latest entry for an id wins */
        int32_t k;
        if (!tk_mergemap_get(&by_id, (uint64_t)id, NULL, &k)) {
            k = (int32_t)t->n_added++;
            if (tk_mergemap_put(&by_id, (uint64_t)id, 0, k)) { free(by_id.slots); return oom(err); }
        }
        t->added[k] = a;
    }
    free(by_id.slots);
    return G4_OK;
}

static int build_id_tables(g4_tokenizer *t, g4_err *err) {
    const int32_t vocab_max = t->n_ids - 1;
    for (size_t k = 0; k < t->n_added; k++)
        if (t->added[k].id + 1 > t->n_ids) t->n_ids = t->added[k].id + 1;
    /* the tables below have one entry per id: ids far beyond the tokens actually present (a
     * 60-byte file with the id 2e8 asked for 1.5 GB) are refused; a few holes are tolerated, and
     * added ids are dense by construction */
    const size_t present = t->vocab.n + t->n_added, limit = 2 * present + 256;
    if ((size_t)t->n_ids > limit)
        return g4_err_set(err, G4_EFORMAT,
                          "tokenizer.json: model.vocab uses the id %d, but the file holds only %zu tokens (vocab and added); "
                          "ids beyond %zu are refused", vocab_max, present, limit - 1);
    for (size_t i = 0; i < t->n_tmpl; i++)
        if (t->tmpl[i] >= t->n_ids)
            return g4_err_set(err, G4_EFORMAT, "tokenizer.json: post_processor adds the id %d, which is no token (ids 0..%d)",
                              t->tmpl[i], t->n_ids - 1);
    size_t n = (size_t)t->n_ids;
    t->id_off = malloc((n ? n : 1) * sizeof *t->id_off);
    t->id_len = malloc((n ? n : 1) * sizeof *t->id_len);
    t->id_special = calloc(n ? n : 1, 1);
    t->id_added = malloc((n ? n : 1) * sizeof *t->id_added);
    if (!t->id_off || !t->id_len || !t->id_special || !t->id_added) return oom(err);
    for (size_t i = 0; i < n; i++) { t->id_len[i] = UINT32_MAX; t->id_added[i] = -1; }
    for (size_t j = 0; j < t->vocab.cap; j++) {
        const tk_sslot *s = &t->vocab.slots[j];
        if (!s->idp1) continue;
        int32_t id = s->idp1 - 1;
        /* several strings with one id: keep the smallest offset (first in the file) */
        if (t->id_len[id] == UINT32_MAX || s->off < t->id_off[id]) {
            t->id_off[id] = s->off;
            t->id_len[id] = s->len;
        }
    }
    /* HF keeps the normalized content of a normalized added token as its id -> token string
     * (decode shows it, and it is what skip_special compares against the special contents). */
    tk_buf nb = { 0 }, tmp = { 0 };
    for (size_t k = 0; k < t->n_added; k++) {
        int32_t id = t->added[k].id;
        t->id_added[id] = (int32_t)k;
        t->id_off[id] = t->added[k].off;
        t->id_len[id] = t->added[k].len;
        if (t->added[k].normalized && t->has_normalizer) {
            uint32_t off;
            if (tk_normalize(t, tk_str(t, t->added[k].off), t->added[k].len, &nb, &tmp) ||
                pool_add(t, nb.b ? nb.b : "", nb.n, &off)) {
                free(nb.b);
                free(tmp.b);
                return oom(err);
            }
            t->id_off[id] = off;
            t->id_len[id] = (uint32_t)nb.n;
        }
    }
    free(nb.b);
    free(tmp.b);
    for (size_t i = 0; i < n; i++)
        if (t->id_len[i] != UINT32_MAX)
            t->id_special[i] = tk_strmap_get(t, &t->special_set, tk_str(t, t->id_off[i]), t->id_len[i]) >= 0;
    return G4_OK;
}

static int build_tries(g4_tokenizer *t, g4_err *err) {
    if (tk_trie_init(&t->trie_raw) || tk_trie_init(&t->trie_norm)) return oom(err);
    tk_buf out = { 0 }, tmp = { 0 };
    /* HF order: special tokens first (in order), then the non-special ones */
    for (int pass = 0; pass < 2; pass++) {
        for (size_t k = 0; k < t->n_added; k++) {
            const tk_added *a = &t->added[k];
            if (a->special != (pass == 0)) continue;
            int rc;
            if (!a->normalized) {
                rc = tk_trie_add(&t->trie_raw, tk_str(t, a->off), a->len, (int32_t)k);
            } else {
                out.n = 0;
                rc = tk_normalize(t, tk_str(t, a->off), a->len, &out, &tmp);
                if (!rc) rc = tk_trie_add(&t->trie_norm, out.b ? out.b : "", out.n, (int32_t)k);
            }
            if (rc) { free(out.b); free(tmp.b); return oom(err); }
        }
    }
    free(out.b);
    free(tmp.b);
    return G4_OK;
}

/* ---------------------------------------------------------------- pipeline pieces */

static int add_norm(g4_tokenizer *t, const tj_val *n, g4_err *err, int depth) {
    if (!n || n->type == TJ_NULL) return G4_OK;
    if (n->type != TJ_OBJ) return want(err, n, TJ_OBJ, "normalizer");
    const char *ty = type_of(n);
    if (!ty) return g4_err_set(err, G4_EFORMAT, "tokenizer.json: normalizer has no \"type\"");
    int rc;
    if (!strcmp(ty, "Sequence")) {
        const tj_val *l = tj_get(n, "normalizers");
        if ((rc = want(err, l, TJ_ARR, "normalizer.normalizers"))) return rc;
        if (depth > 8) return g4_err_set(err, G4_EFORMAT, "tokenizer.json: normalizer Sequence nested too deep");
        for (uint32_t i = 0; i < l->n; i++)
            if ((rc = add_norm(t, &l->u.items[i], err, depth + 1))) return rc;
        return G4_OK;
    }
    tk_norm op = { 0 };
    if (!strcmp(ty, "Replace")) {
        const tj_val *p, *c = tj_get(n, "content");
        if ((rc = get_pattern(err, n, "normalizer Replace", &p))) return rc;
        if ((rc = want(err, c, TJ_STR, "normalizer Replace.content"))) return rc;
        op.type = TN_REPLACE;
        op.a_off = pool_ref(t, p->u.s);
        op.b_off = pool_ref(t, c->u.s);
        op.a_len = p->n;
        op.b_len = c->n;
    } else if (!strcmp(ty, "Prepend")) {
        const tj_val *p = tj_get(n, "prepend");
        if ((rc = want(err, p, TJ_STR, "normalizer Prepend.prepend"))) return rc;
        op.type = TN_PREPEND;
        op.a_off = pool_ref(t, p->u.s);
        op.a_len = p->n;
    } else if (!strcmp(ty, "Strip")) {
        op.type = TN_STRIP;
        if ((rc = get_bool(err, n, "strip_left", 1, &op.left, "normalizer Strip")) ||
            (rc = get_bool(err, n, "strip_right", 1, &op.right, "normalizer Strip")))
            return rc;
    } else {
        return g4_err_set(err, G4_EUNSUPPORTED, "tokenizer.json: normalizer type '%s' is not supported", ty);
    }
    tk_norm *nn = realloc(t->norm, (t->n_norm + 1) * sizeof *nn);
    if (!nn) return oom(err);
    t->norm = nn;
    t->norm[t->n_norm++] = op;
    return G4_OK;
}

static int add_pretok(g4_tokenizer *t, const tj_val *n, g4_err *err, int depth) {
    if (!n || n->type == TJ_NULL) return G4_OK;
    if (n->type != TJ_OBJ) return want(err, n, TJ_OBJ, "pre_tokenizer");
    const char *ty = type_of(n);
    if (!ty) return g4_err_set(err, G4_EFORMAT, "tokenizer.json: pre_tokenizer has no \"type\"");
    int rc;
    if (!strcmp(ty, "Sequence")) {
        const tj_val *l = tj_get(n, "pretokenizers");
        if ((rc = want(err, l, TJ_ARR, "pre_tokenizer.pretokenizers"))) return rc;
        if (depth > 8) return g4_err_set(err, G4_EFORMAT, "tokenizer.json: pre_tokenizer Sequence nested too deep");
        for (uint32_t i = 0; i < l->n; i++)
            if ((rc = add_pretok(t, &l->u.items[i], err, depth + 1))) return rc;
        return G4_OK;
    }
    if (strcmp(ty, "Split"))
        return g4_err_set(err, G4_EUNSUPPORTED, "tokenizer.json: pre_tokenizer type '%s' is not supported", ty);
    tk_split op = { 0 };
    const tj_val *p, *b = tj_get(n, "behavior");
    if ((rc = get_pattern(err, n, "pre_tokenizer Split", &p))) return rc;
    if ((rc = want(err, b, TJ_STR, "pre_tokenizer Split.behavior"))) return rc;
    static const char *names[] = { "Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous" };
    op.behavior = -1;
    for (int i = 0; i < 5; i++)
        if (!strcmp(b->u.s, names[i])) op.behavior = i;
    if (op.behavior < 0)
        return g4_err_set(err, G4_EFORMAT, "tokenizer.json: pre_tokenizer Split.behavior '%s' is unknown", b->u.s);
    if ((rc = get_bool(err, n, "invert", 0, &op.invert, "pre_tokenizer Split"))) return rc;
    op.pat_off = pool_ref(t, p->u.s);
    op.pat_len = p->n;
    tk_split *ns = realloc(t->split, (t->n_split + 1) * sizeof *ns);
    if (!ns) return oom(err);
    t->split = ns;
    t->split[t->n_split++] = op;
    return G4_OK;
}

static int add_dec(g4_tokenizer *t, const tj_val *n, g4_err *err, int depth) {
    if (n->type != TJ_OBJ) return want(err, n, TJ_OBJ, "decoder");
    const char *ty = type_of(n);
    if (!ty) return g4_err_set(err, G4_EFORMAT, "tokenizer.json: decoder has no \"type\"");
    int rc;
    if (!strcmp(ty, "Sequence")) {
        const tj_val *l = tj_get(n, "decoders");
        if ((rc = want(err, l, TJ_ARR, "decoder.decoders"))) return rc;
        if (depth > 8) return g4_err_set(err, G4_EFORMAT, "tokenizer.json: decoder Sequence nested too deep");
        for (uint32_t i = 0; i < l->n; i++)
            if ((rc = add_dec(t, &l->u.items[i], err, depth + 1))) return rc;
        return G4_OK;
    }
    tk_dec op = { 0 };
    if (!strcmp(ty, "Replace")) {
        const tj_val *p, *c = tj_get(n, "content");
        if ((rc = get_pattern(err, n, "decoder Replace", &p))) return rc;
        if ((rc = want(err, c, TJ_STR, "decoder Replace.content"))) return rc;
        op.type = TD_REPLACE;
        op.a_off = pool_ref(t, p->u.s);
        op.b_off = pool_ref(t, c->u.s);
        op.a_len = p->n;
        op.b_len = c->n;
    } else if (!strcmp(ty, "ByteFallback")) {
        op.type = TD_BYTEFALLBACK;
    } else if (!strcmp(ty, "Fuse")) {
        op.type = TD_FUSE;
    } else if (!strcmp(ty, "Strip")) {
        const tj_val *c = tj_get(n, "content");
        if ((rc = want(err, c, TJ_STR, "decoder Strip.content"))) return rc;
        if (c->n == 0 || g4_utf8_len((unsigned char)c->u.s[0]) != c->n)
            return g4_err_set(err, G4_EFORMAT, "tokenizer.json: decoder Strip.content must be one character");
        g4_utf8_decode(c->u.s, c->n, &op.content);
        op.type = TD_STRIP;
        if ((rc = get_count(err, n, "start", &op.start, "decoder Strip")) ||
            (rc = get_count(err, n, "stop", &op.stop, "decoder Strip")))
            return rc;
    } else {
        return g4_err_set(err, G4_EUNSUPPORTED, "tokenizer.json: decoder type '%s' is not supported", ty);
    }
    tk_dec *nd = realloc(t->dec, (t->n_dec + 1) * sizeof *nd);
    if (!nd) return oom(err);
    t->dec = nd;
    t->dec[t->n_dec++] = op;
    return G4_OK;
}

static int load_post(g4_tokenizer *t, const tj_val *n, g4_err *err) {
    if (!n || n->type == TJ_NULL) return G4_OK;
    if (n->type != TJ_OBJ) return want(err, n, TJ_OBJ, "post_processor");
    const char *ty = type_of(n);
    if (!ty) return g4_err_set(err, G4_EFORMAT, "tokenizer.json: post_processor has no \"type\"");
    if (strcmp(ty, "TemplateProcessing"))
        return g4_err_set(err, G4_EUNSUPPORTED, "tokenizer.json: post_processor type '%s' is not supported", ty);
    const tj_val *single = tj_get(n, "single"), *sp = tj_get(n, "special_tokens");
    int rc;
    if ((rc = want(err, single, TJ_ARR, "post_processor.single"))) return rc;
    if (sp && sp->type != TJ_NULL && (rc = want(err, sp, TJ_OBJ, "post_processor.special_tokens"))) return rc;
    size_t cap = 4;
    t->tmpl = malloc(cap * sizeof *t->tmpl);
    if (!t->tmpl) return oom(err);
    for (uint32_t i = 0; i < single->n; i++) {
        const tj_val *it = &single->u.items[i], *s, *q;
        if (it->type != TJ_OBJ) return want(err, it, TJ_OBJ, "post_processor.single[]");
        if ((s = tj_get(it, "Sequence"))) {
            const tj_val *id = tj_get(s, "id");
            if (!tj_str_eq(id, "A"))
                return g4_err_set(err, G4_EUNSUPPORTED,
                                  "tokenizer.json: post_processor.single uses a sequence other than A");
            if (t->n_tmpl + 1 > cap) {
                int32_t *nt = realloc(t->tmpl, (cap *= 2) * sizeof *nt);
                if (!nt) return oom(err);
                t->tmpl = nt;
            }
            t->tmpl[t->n_tmpl++] = -1;
        } else if ((q = tj_get(it, "SpecialToken"))) {
            const tj_val *id = tj_get(q, "id");
            if ((rc = want(err, id, TJ_STR, "post_processor SpecialToken.id"))) return rc;
            const tj_val *st = tj_get(sp, id->u.s), *ids = tj_get(st, "ids");
            if (!st || !ids || ids->type != TJ_ARR)
                return g4_err_set(err, G4_EFORMAT, "tokenizer.json: post_processor special token '%s' is missing or has no ids",
                                  id->u.s);
            for (uint32_t k = 0; k < ids->n; k++) {
                const tj_val *x = &ids->u.items[k];
                if (x->type != TJ_NUM || x->u.num < 0 || x->u.num > 2147483646.0)
                    return g4_err_set(err, G4_EFORMAT, "tokenizer.json: post_processor special token '%s' has a bad id",
                                      id->u.s);
                if (t->n_tmpl + 1 > cap) {
                    int32_t *nt = realloc(t->tmpl, (cap *= 2) * sizeof *nt);
                    if (!nt) return oom(err);
                    t->tmpl = nt;
                }
                t->tmpl[t->n_tmpl++] = (int32_t)x->u.num;
            }
        } else {
            return g4_err_set(err, G4_EUNSUPPORTED, "tokenizer.json: post_processor.single[%u] is neither Sequence nor SpecialToken", i);
        }
    }
    return G4_OK;
}

/* ---------------------------------------------------------------- public */

void g4_tokenizer_free(g4_tokenizer *t) {
    if (!t) return;
    free(t->pool.b);
    free(t->vocab.slots);
    free(t->merges.slots);
    free(t->id_off);
    free(t->id_len);
    free(t->id_special);
    free(t->id_added);
    free(t->added);
    free(t->added_map.slots);
    free(t->special_set.slots);
    tk_trie_free(&t->trie_raw);
    tk_trie_free(&t->trie_norm);
    free(t->norm);
    free(t->split);
    free(t->dec);
    free(t->tmpl);
    free(t);
}

int g4_tokenizer_load_json(const char *json, size_t len, g4_tokenizer **out, g4_err *err) {
    if (!out || (!json && len)) return g4_err_set(err, G4_EINVAL, "tokenizer: NULL argument");
    *out = NULL;
    tj_doc *doc;
    const tj_val *root;
    int rc = tj_parse(json ? json : "", len, &doc, &root, err);
    if (rc) { g4_err_prefix(err, "tokenizer.json: "); return rc; }
    g4_tokenizer *t = calloc(1, sizeof *t);
    if (!t) { tj_free(doc); return oom(err); }
    t->pool.b = tj_take_strings(doc, &t->pool.n, &t->pool.cap);
    if (t->pool.cap > UINT32_MAX) { rc = g4_err_set(err, G4_EUNSUPPORTED, "tokenizer.json: larger than 4 GB"); goto done; }
    if (root->type != TJ_OBJ) { rc = want(err, root, TJ_OBJ, "the top level"); goto done; }
    const tj_val *trunc = tj_get(root, "truncation"), *pad = tj_get(root, "padding");
    if (trunc && trunc->type != TJ_NULL) { rc = g4_err_set(err, G4_EUNSUPPORTED, "tokenizer.json: truncation is not supported"); goto done; }
    if (pad && pad->type != TJ_NULL) { rc = g4_err_set(err, G4_EUNSUPPORTED, "tokenizer.json: padding is not supported"); goto done; }
    const tj_val *model = tj_get(root, "model");
    if (!model) { rc = g4_err_set(err, G4_EFORMAT, "tokenizer.json: no \"model\""); goto done; }
    if ((rc = load_bpe(t, model, err))) goto done;
    if ((rc = add_norm(t, tj_get(root, "normalizer"), err, 0))) goto done;
    const tj_val *nz = tj_get(root, "normalizer");
    t->has_normalizer = nz && nz->type != TJ_NULL;
    if ((rc = add_pretok(t, tj_get(root, "pre_tokenizer"), err, 0))) goto done;
    const tj_val *dec = tj_get(root, "decoder");
    if (dec && dec->type != TJ_NULL) {
        t->has_decoder = 1;
        if ((rc = add_dec(t, dec, err, 0))) goto done;
    }
    if ((rc = load_post(t, tj_get(root, "post_processor"), err))) goto done;
    if ((rc = load_added(t, tj_get(root, "added_tokens"), err))) goto done;
    /* the JSON values are read; from here the pool may grow */
    tj_free(doc);
    doc = NULL;
    if ((rc = build_id_tables(t, err))) goto done;
    if ((rc = build_tries(t, err))) goto done;
done:
    tj_free(doc);
    if (rc) { g4_tokenizer_free(t); return rc; }
    *out = t;
    return G4_OK;
}

int g4_tokenizer_load(const char *path, g4_tokenizer **out, g4_err *err) {
    if (!path || !out) return g4_err_set(err, G4_EINVAL, "tokenizer: NULL argument");
    *out = NULL;
    /* A regular file is mapped (no 33 MB copy, no fresh pages to fault in); anything else (a
     * pipe, an empty file, a file mmap refuses) is read to its end. */
    int fd = open(path, O_RDONLY);
    if (fd < 0) return g4_err_set(err, G4_EIO, "cannot open tokenizer file %s", path);
    struct stat st;
    if (fstat(fd, &st) != 0) { close(fd); return g4_err_set(err, G4_EIO, "cannot read %s", path); }
    if (S_ISDIR(st.st_mode)) { close(fd); return g4_err_set(err, G4_EIO, "tokenizer file %s is a directory", path); }
    int rc;
    if (S_ISREG(st.st_mode) && st.st_size > 0) {
        void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
        if (m != MAP_FAILED) {
            close(fd);
            rc = g4_tokenizer_load_json(m, (size_t)st.st_size, out, err);
            munmap(m, (size_t)st.st_size);
            if (rc) g4_err_prefix(err, "%s: ", path);
            return rc;
        }
    }
    tk_buf b = { 0 };
    for (;;) {
        if (tk_buf_reserve(&b, 1 << 16)) { close(fd); free(b.b); return g4_err_set(err, G4_ENOMEM, "out of memory reading %s", path); }
        ssize_t got = read(fd, b.b + b.n, b.cap - b.n - 1);
        if (got == 0) break;
        if (got < 0) { close(fd); free(b.b); return g4_err_set(err, G4_EIO, "cannot read %s", path); }
        b.n += (size_t)got;
    }
    close(fd);
    rc = g4_tokenizer_load_json(b.b, b.n, out, err);
    free(b.b);
    if (rc) g4_err_prefix(err, "%s: ", path);
    return rc;
}

int g4_tokenizer_vocab_size(const g4_tokenizer *t) { return t ? t->n_ids : 0; }

int32_t g4_tokenizer_token_id(const g4_tokenizer *t, const char *piece, size_t len) {
    if (!t || (!piece && len)) return -1;
    int32_t id = tk_strmap_get(t, &t->added_map, piece ? piece : "", len);
    return id >= 0 ? id : tk_strmap_get(t, &t->vocab, piece ? piece : "", len);
}

const char *g4_tokenizer_piece(const g4_tokenizer *t, int32_t id, size_t *len) {
    if (!t || id < 0 || id >= t->n_ids || t->id_len[id] == UINT32_MAX) return NULL;
    if (len) *len = t->id_len[id];
    return tk_str(t, t->id_off[id]);
}

int g4_tokenizer_is_special(const g4_tokenizer *t, int32_t id) {
    return t && id >= 0 && id < t->n_ids && t->id_special[id];
}
