/* json_schema_emit.c — the JSON Schema compiler's building blocks (json_schema_int.h): errors
 * and schema paths, NFA helpers, rules, string bodies (DFAs of their content: encoding x length
 * x pattern x the markers a chat turn must not contain), literal values and numbers (digit
 * automata for bounded ranges). json_schema.c walks the schema and calls these. */
#include "grammar/json_schema_int.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void jsc_fail(sc *c, int code, const char *fmt, ...) {
    if (c->rc) return;
    char m[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    c->rc = g4_err_set(c->err, code, "%s: %s", c->path[0] ? c->path : "#", m);
    snprintf(c->fail_part, sizeof c->fail_part, "%s", c->part);
}

void jsc_fail_err(sc *c, const g4_err *e) {
    if (c->rc) return;
    jsc_fail(c, e->code, "%s", e->msg);
}

void jsc_fail_fsa(sc *c, const g4_nfa *a, const g4_err *e) {
    if (c->rc) return;
    if (!c->bud.stop && !c->limit) { /* the limits checked outside the budget */
        if (a && a->over) c->limit = G4_GLIM_NFA_STATES;
        else if (a && a->over_edges) c->limit = G4_GLIM_TRANSITIONS;
        else if (e->code == G4_EINVAL && strstr(e->msg, "limit")) c->limit = G4_GLIM_STATES;
    }
    jsc_fail_err(c, e);
}

void jsc_fail_budget(sc *c) {
    g4_err e = {0};
    g4_fsa_budget_err(&c->bud, &e);
    jsc_fail_fsa(c, NULL, &e);
}

g4_nfa jsc_scratch_nfa(sc *c) {
    g4_nfa a = {.max_states = c->max_nfa, .max_edges = c->max_edges, .budget = &c->bud};
    return a;
}

size_t jsc_path_push(sc *c, const char *seg) {
    size_t m = strlen(c->path), k = m;
    if (k + 2 < sizeof c->path) c->path[k++] = '/';
    for (const char *p = seg; *p && k + 3 < sizeof c->path; p++) {
        if (*p == '~' || *p == '/') { c->path[k++] = '~'; c->path[k++] = *p == '~' ? '0' : '1'; }
        else c->path[k++] = *p;
    }
    c->path[k] = 0;
    return m;
}

size_t jsc_path_push_i(sc *c, const char *seg, size_t i) {
    char b[96];
    snprintf(b, sizeof b, "%s/%zu", seg, i);
    size_t m = strlen(c->path);
    snprintf(c->path + m, sizeof c->path - m, "/%s", b);
    return m;
}

void jsc_path_pop(sc *c, size_t m) { c->path[m] = 0; }

/* ---- NFA helpers ------------------------------------------------------------------------------- */

/* the main NFA went past a limit or its budget stopped */
static void nfa_fail(sc *c) {
    g4_err e = {0};
    if (c->a.oom) { jsc_fail_budget(c); return; }
    if (c->a.over_edges)
        g4_err_set(&e, G4_EINVAL, "the schema is too large: its automaton would exceed %zu transitions while being built (the grammar transition limit)", c->max_edges);
    else
        g4_err_set(&e, G4_EINVAL, "the schema is too large: its automaton would exceed %d states while being built (the grammar NFA state limit)", c->max_nfa);
    jsc_fail_fsa(c, &c->a, &e);
}

int jsc_st(sc *c) {
    int s = g4_nfa_state(&c->a);
    if (s < 0 && !c->rc) nfa_fail(c);
    return s;
}

void jsc_lit(sc *c, int from, int to, const char *s) { g4_nfa_lit(&c->a, from, to, s, strlen(s)); }
int jsc_lit_new(sc *c, int from, const char *s) { int t = jsc_st(c); jsc_lit(c, from, t, s); return t; }
void jsc_eps(sc *c, int from, int to) { g4_nfa_eps(&c->a, from, to); }
static void rng(sc *c, int from, int to, int lo, int hi) { g4_nfa_sym(&c->a, from, to, lo, hi); }

static int special(sc *c, const char *text) {
    for (int k = 0; k < c->ns; k++) if (!strcmp(c->special[k], text)) return G4_SYM_SPECIAL + k;
    c->special[c->ns] = text;
    return G4_SYM_SPECIAL + c->ns++;
}

void jsc_tok(sc *c, int from, int to, const char *text) {
    int x = special(c, text);
    rng(c, from, to, x, x);
}


/* JSON white space: none or one space after '{', '[', ',' and ':' and before '}' and ']';
 * nowhere else, never a newline (outlines' default; xgrammar and llama.cpp bound it too): a model
 * let in may spend its tokens on indentation. Gemma's call syntax has none. */
void jsc_ws(sc *c, int fmt, int from, int to) {
    jsc_eps(c, from, to);
    if (fmt == FMT_GEMMA) return;
    rng(c, from, to, ' ', ' ');
}

/* from -> ',' ws -> returned state */
int jsc_comma(sc *c, int fmt, int from) {
    int b = jsc_lit_new(c, from, ","), d = jsc_st(c);
    jsc_ws(c, fmt, b, d);
    return d;
}

/* from -> ':' (space) -> returned state */
int jsc_colon(sc *c, int fmt, int from) {
    int b = jsc_lit_new(c, from, ":");
    if (fmt == FMT_GEMMA) return b;
    int d = jsc_st(c);
    jsc_ws(c, fmt, b, d);
    return d;
}

/* ---- rules --------------------------------------------------------------------------------------- */

int jsc_new_rule(sc *c, const json_t *schema, int fmt, int mask, int any) {
    for (int r = 1; r < c->nr; r++)
        if (c->rules[r].schema == schema && c->rules[r].fmt == fmt && c->rules[r].mask == mask && c->rules[r].any == any &&
            c->rules[r].root == c->root)
            return r;
    if (c->nr >= G4_GRAMMAR_MAX_RULES) { jsc_fail(c, G4_EINVAL, "the schema needs more than %d grammar rules", G4_GRAMMAR_MAX_RULES); return -1; }
    if (c->nr == c->rcap) {
        int cap = c->rcap ? c->rcap * 2 : 16;
        sc_rule *r = realloc(c->rules, (size_t)cap * sizeof *r);
        if (!r) { jsc_fail(c, G4_ENOMEM, "out of memory"); return -1; }
        c->rules = r;
        c->rcap = cap;
    }
    sc_rule *R = &c->rules[c->nr];
    memset(R, 0, sizeof *R);
    R->start = jsc_st(c);
    R->accept = jsc_st(c);
    R->fmt = fmt;
    R->mask = mask;
    R->any = any;
    R->schema = schema;
    R->root = c->root;
    snprintf(R->path, sizeof R->path, "%s", c->path);
    snprintf(R->part, sizeof R->part, "%s", c->part);
    return c->nr++;
}

void jsc_call(sc *c, int from, int to, int rule) { if (rule >= 0) g4_nfa_call(&c->a, from, to, rule); }

/* ---- string bodies ---------------------------------------------------------------------------------- */

static const char *const MARKERS_CONTENT[] = {"<|", "<turn|>", "<eos>", NULL};
static const char *const MARKERS_THOUGHT[] = {"<|", "<turn|>", "<eos>", "<channel|>", NULL};

/* Byte strings containing none of the markers (an Aho-Corasick automaton, every state final). */
static int markers_dfa(sc *c, const char *const *mk, g4_dfa *out, g4_err *err) {
    char pre[64][24];
    int np = 1;
    pre[0][0] = 0;
    for (int m = 0; mk[m]; m++)
        for (size_t l = 1; l < strlen(mk[m]); l++) {
            int dup = 0;
            for (int i = 0; i < np; i++) if (strlen(pre[i]) == l && !memcmp(pre[i], mk[m], l)) dup = 1;
            if (!dup) { memcpy(pre[np], mk[m], l); pre[np][l] = 0; np++; }
        }
    g4_nfa a = jsc_scratch_nfa(c);
    for (int i = 0; i <= np; i++) g4_nfa_state(&a);
    int acc = np;
    for (int i = 0; i < np; i++) {
        g4_nfa_eps(&a, i, acc);
        int run_lo = -1, run_t = -2;
        for (int b = 0; b <= 256; b++) {
            int t = -1;
            if (b < 256) {
                char w[32];
                size_t l = strlen(pre[i]);
                memcpy(w, pre[i], l);
                w[l++] = (char)b;
                int dead = 0;
                for (int m = 0; mk[m] && !dead; m++) {
                    size_t ml = strlen(mk[m]);
                    if (ml <= l && !memcmp(w + l - ml, mk[m], ml)) dead = 1;
                }
                if (!dead) { /* the longest suffix that is a prefix of a marker */
                    t = 0;
                    for (size_t s = 0; s < l && t == 0; s++)
                        for (int j = 1; j < np; j++)
                            if (strlen(pre[j]) == l - s && !memcmp(pre[j], w + s, l - s)) { t = j; break; }
                }
            }
            if (t != run_t) {
                if (run_t >= 0) g4_nfa_sym(&a, i, run_t, run_lo, b - 1);
                run_t = t;
                run_lo = b;
            }
        }
    }
    int rc = g4_nfa_to_dfa(&a, 0, acc, c->max_states, out, err);
    g4_nfa_free(&a);
    return rc;
}

static const uint32_t ALL_CHARS[2] = {0, 0x10FFFF};

/* The cached body: any text of the encoding, without the markers of the mode. */
const g4_dfa *jsc_plain_body(sc *c, g4_str_enc enc, int mk) {
    int k = enc == G4_ENC_JSON ? (mk == MK_NONE ? 0 : 1) : (mk == MK_THOUGHT ? 3 : 2);
    if (c->have_body[k]) return &c->body[k];
    g4_nfa a = jsc_scratch_nfa(c);
    int s0 = g4_nfa_state(&a), loop = g4_nfa_state(&a), acc = g4_nfa_state(&a);
    g4_nfa_eps(&a, s0, loop);
    g4_enc_ranges(&a, loop, loop, ALL_CHARS, 1, enc);
    g4_nfa_eps(&a, loop, acc);
    g4_err e = {0};
    g4_dfa d = {0}, m = {0};
    int rc = g4_nfa_to_dfa(&a, s0, acc, c->max_states, &d, &e);
    g4_nfa_free(&a);
    if (!rc && mk != MK_NONE) {
        rc = markers_dfa(c, mk == MK_THOUGHT ? MARKERS_THOUGHT : MARKERS_CONTENT, &m, &e);
        if (!rc) {
            g4_dfa x;
            rc = g4_dfa_intersect(&d, &m, c->max_states, &x, &e);
            g4_dfa_free(&d);
            d = x;
        }
        g4_dfa_free(&m);
    }
    if (rc) { g4_dfa_free(&d); jsc_fail_fsa(c, NULL, &e); return NULL; }
    c->body[k] = d;
    c->have_body[k] = 1;
    return &c->body[k];
}

/* d := d ∩ (what the fragment built by f accepts) */
static int intersect_into(sc *c, g4_dfa *d, g4_nfa *a, int s0, int acc) {
    g4_err e = {0};
    g4_dfa x = {0}, y = {0};
    int rc = g4_nfa_to_dfa(a, s0, acc, c->max_states, &x, &e);
    if (!rc) rc = g4_dfa_intersect(d, &x, c->max_states, &y, &e);
    g4_dfa_free(&x);
    if (rc) { jsc_fail_fsa(c, a, &e); return -1; }
    g4_dfa_free(d);
    *d = y;
    return 0;
}

static const struct { const char *name, *re; } FORMATS[] = {
#define DATE_RE "[0-9]{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))"
#define TIME_RE "(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]{1,9})?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
#define LABEL_RE "[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
#define OCTET_RE "(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
    {"date", "^" DATE_RE "$"},
    {"time", "^" TIME_RE "$"},
    {"date-time", "^" DATE_RE "T" TIME_RE "$"},
    {"uuid", "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"},
    {"email", "^[A-Za-z0-9_+-]+(?:\\.[A-Za-z0-9_+-]+)*@" LABEL_RE "(?:\\." LABEL_RE ")+$"},
    {"ipv4", "^(?:" OCTET_RE "\\.){3}" OCTET_RE "$"},
};

int jsc_format_kind(const char *f) {
    for (size_t i = 0; i < sizeof FORMATS / sizeof *FORMATS; i++) if (!strcmp(FORMATS[i].name, f)) return JSC_FMT_STRING;
    static const char *const num[] = {"int32", "int64", "float", "double"};
    for (size_t i = 0; i < sizeof num / sizeof *num; i++) if (!strcmp(num[i], f)) return JSC_FMT_NUMBER;
    return 0;
}

/* The content of a string with these constraints (pattern / format may be NULL; n_excl names
 * excluded as whole values, already encoded). An empty DFA when nothing satisfies them. */
static int string_body_in(sc *c, g4_str_enc enc, int mk, long minl, long maxl, const char *pat, size_t patlen, const char *format,
                          const char *const *excl, const size_t *excl_len, int n_excl, g4_dfa *out);
int jsc_string_body(sc *c, g4_str_enc enc, int mk, long minl, long maxl, const char *pat, size_t patlen, const char *format,
                       const char *const *excl, const size_t *excl_len, int n_excl, g4_dfa *out) {
    int rc = string_body_in(c, enc, mk, minl, maxl, pat, patlen, format, excl, excl_len, n_excl, out);
    if (rc) g4_dfa_free(out);
    return rc;
}

static int string_body_in(sc *c, g4_str_enc enc, int mk, long minl, long maxl, const char *pat, size_t patlen, const char *format,
                          const char *const *excl, const size_t *excl_len, int n_excl, g4_dfa *out) {
    memset(out, 0, sizeof *out);
    const g4_dfa *base = jsc_plain_body(c, enc, mk);
    g4_err e = {0};
    if (!base || g4_dfa_copy(base, out, &e)) { if (!c->rc) jsc_fail_fsa(c, NULL, &e); return -1; }
    if (minl > 0 || maxl >= 0) {
        g4_nfa a = jsc_scratch_nfa(c);
        int cur = g4_nfa_state(&a), s0 = cur;
        for (long i = 0; i < minl; i++) { int nx = g4_nfa_state(&a); g4_enc_ranges(&a, cur, nx, ALL_CHARS, 1, enc); cur = nx; }
        int acc = g4_nfa_state(&a);
        g4_nfa_eps(&a, cur, acc);
        if (maxl < 0) g4_enc_ranges(&a, cur, cur, ALL_CHARS, 1, enc);
        for (long i = minl; i < maxl; i++) { int nx = g4_nfa_state(&a); g4_enc_ranges(&a, cur, nx, ALL_CHARS, 1, enc); g4_nfa_eps(&a, nx, acc); cur = nx; }
        int r = intersect_into(c, out, &a, s0, acc);
        g4_nfa_free(&a);
        if (r) return -1;
    }
    for (int k = 0; k < 2; k++) {
        const char *re = k == 0 ? pat : NULL;
        size_t rl = k == 0 ? patlen : 0;
        if (k == 1 && format) {
            for (size_t f = 0; f < sizeof FORMATS / sizeof *FORMATS; f++) if (!strcmp(FORMATS[f].name, format)) re = FORMATS[f].re;
            if (!re) { jsc_fail(c, G4_EUNSUPPORTED, "'format' \"%s\" is not supported (%s)", format, JSC_FORMATS_KNOWN); return -1; }
            rl = strlen(re);
        }
        if (!re) continue;
        g4_nfa a = jsc_scratch_nfa(c);
        int s0 = g4_nfa_state(&a), acc = g4_nfa_state(&a);
        int rc = g4_regex_compile(re, rl, enc, &a, s0, acc, &e);
        if (rc) { jsc_fail_fsa(c, &a, &e); g4_nfa_free(&a); return -1; }
        int r = intersect_into(c, out, &a, s0, acc);
        g4_nfa_free(&a);
        if (r) return -1;
    }
    if (n_excl) {
        g4_nfa a = jsc_scratch_nfa(c);
        int s0 = g4_nfa_state(&a), acc = g4_nfa_state(&a);
        for (int i = 0; i < n_excl; i++) g4_nfa_lit(&a, s0, acc, excl[i], excl_len[i]);
        g4_dfa x = {0}, y = {0}, z = {0};
        int rc = g4_nfa_to_dfa(&a, s0, acc, c->max_states, &x, &e);
        if (!rc) rc = g4_dfa_complement(&x, &y, &e);
        if (!rc) rc = g4_dfa_intersect(out, &y, c->max_states, &z, &e);
        if (rc) jsc_fail_fsa(c, &a, &e);
        g4_nfa_free(&a);
        g4_dfa_free(&x);
        g4_dfa_free(&y);
        if (rc) return -1;
        g4_dfa_free(out);
        *out = z;
    }
    return 0;
}

/* ---- literal values ---------------------------------------------------------------------------- */

/* The marker of a chat turn that starts at s[0..n) (0: none). */
static size_t marker_at(const char *s, size_t n) {
    for (int m = 0; MARKERS_CONTENT[m]; m++) {
        size_t l = strlen(MARKERS_CONTENT[m]);
        if (l <= n && !memcmp(s, MARKERS_CONTENT[m], l)) return l;
    }
    return 0;
}

static int has_marker(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) if (s[i] == '<' && marker_at(s + i, n - i)) return 1;
    return 0;
}

/* A string of the schema written as a literal. In a chat turn its text must not read as markup,
 * the rule free strings follow (jsc_plain_body): JSON writes the '<' that starts a marker as
 * \u003c (the same string to any JSON reader); Gemma's strings have no escapes, so a literal
 * with a marker cannot be written there (jsc_literal_ok says so first). */
static void emit_string_lit(sc *c, int fmt, int from, int to, const char *s, size_t n) {
    char *buf = malloc(6 * n + 3);
    if (!buf) { jsc_fail(c, G4_ENOMEM, "out of memory"); return; }
    if (fmt == FMT_JSON) {
        size_t k = 0;
        buf[k++] = '"';
        for (size_t i = 0; i < n; i++) {
            if (c->chat && s[i] == '<' && marker_at(s + i, n - i)) { memcpy(buf + k, "\\u003c", 6); k += 6; }
            else k += g4_enc_string(s + i, 1, G4_ENC_JSON, buf + k);
        }
        buf[k++] = '"';
        g4_nfa_lit(&c->a, from, to, buf, k);
    } else {
        int a = jsc_st(c), b = jsc_st(c);
        jsc_tok(c, from, a, TOK_STR);
        g4_nfa_lit(&c->a, a, b, s, n);
        jsc_tok(c, b, to, TOK_STR);
    }
    free(buf);
}

int jsc_key_ok(const sc *c, int fmt, const char *s, size_t n) {
    (void)c;
    return fmt == FMT_JSON || !has_marker(s, n);
}

int jsc_literal_ok(const sc *c, int fmt, const json_t *v) {
    if (fmt == FMT_JSON) return 1;
    size_t i;
    const char *k;
    json_t *x;
    switch (json_typeof(v)) {
    case JSON_STRING: return !has_marker(json_string_value(v), json_string_length(v));
    case JSON_ARRAY:
        json_array_foreach(v, i, x) if (!jsc_literal_ok(c, fmt, x)) return 0;
        return 1;
    case JSON_OBJECT:
        json_object_foreach((json_t *)v, k, x) if (!jsc_key_ok(c, fmt, k, strlen(k)) || !jsc_literal_ok(c, fmt, x)) return 0;
        return 1;
    default: return 1;
    }
}

/* Gemma's bare keys stop at these (output_parser.c) */
int jsc_bare_key_ok(const char *s, size_t n) {
    if (!n || (n >= 5 && !memcmp(s, TOK_STR, 5))) return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch <= ' ' || strchr(":{}[],<", ch)) return 0;
    }
    return 1;
}

void jsc_emit_key(sc *c, int fmt, int from, int to, const char *s, size_t n) {
    if (fmt == FMT_GEMMA && jsc_bare_key_ok(s, n)) g4_nfa_lit(&c->a, from, to, s, n);
    else emit_string_lit(c, fmt, from, to, s, n);
}

static int cmp_key(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

void jsc_emit_value(sc *c, const json_t *v, int fmt, int from, int to) {
    if (c->rc) return;
    switch (json_typeof(v)) {
    case JSON_NULL: jsc_lit(c, from, to, "null"); return;
    case JSON_TRUE: jsc_lit(c, from, to, "true"); return;
    case JSON_FALSE: jsc_lit(c, from, to, "false"); return;
    case JSON_INTEGER: case JSON_REAL: {
        char *t = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
        if (!t) { jsc_fail(c, G4_ENOMEM, "out of memory"); return; }
        jsc_lit(c, from, to, t);
        free(t);
        return;
    }
    case JSON_STRING: emit_string_lit(c, fmt, from, to, json_string_value(v), json_string_length(v)); return;
    case JSON_ARRAY: {
        int cur = jsc_lit_new(c, from, "[");
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x) {
            if (i) cur = jsc_lit_new(c, cur, ",");
            int nx = jsc_st(c);
            jsc_emit_value(c, x, fmt, cur, nx);
            cur = nx;
        }
        jsc_lit(c, cur, to, "]");
        return;
    }
    case JSON_OBJECT: {
        size_t n = json_object_size(v), i = 0;
        const char **keys = malloc((n ? n : 1) * sizeof *keys);
        if (!keys) { jsc_fail(c, G4_ENOMEM, "out of memory"); return; }
        const char *k;
        json_t *x;
        json_object_foreach((json_t *)v, k, x) keys[i++] = k;
        if (fmt == FMT_GEMMA) qsort(keys, n, sizeof *keys, cmp_key);
        int cur = jsc_lit_new(c, from, "{");
        for (i = 0; i < n; i++) {
            if (i) cur = jsc_lit_new(c, cur, ",");
            int kk = jsc_st(c);
            jsc_emit_key(c, fmt, cur, kk, keys[i], strlen(keys[i]));
            cur = jsc_lit_new(c, kk, ":");
            int nx = jsc_st(c);
            jsc_emit_value(c, json_object_get(v, keys[i]), fmt, cur, nx);
            cur = nx;
        }
        jsc_lit(c, cur, to, "}");
        free(keys);
        return;
    }
    }
}

/* ---- numbers ------------------------------------------------------------------------------------- */

typedef struct { int has_lo, lo_x, has_hi, hi_x; long long lo, hi; } nbounds;

static void any_digits(sc *c, int from, int to, int n) {
    int cur = from;
    for (int i = 0; i < n; i++) { int nx = i + 1 == n ? to : jsc_st(c); rng(c, cur, nx, '0', '9'); cur = nx; }
    if (n == 0) jsc_eps(c, from, to);
}

/* decimal strings of length L from lo to hi (same length) */
static void fixed_range(sc *c, int from, int to, const char *lo, const char *hi, int L) {
    if (L == 0) { jsc_eps(c, from, to); return; }
    int rest0 = 1, rest9 = 1;
    for (int i = 1; i < L; i++) { if (lo[i] != '0') rest0 = 0; if (hi[i] != '9') rest9 = 0; }
    int m = jsc_st(c);
    if (rest0 && rest9) { rng(c, from, m, lo[0], hi[0]); any_digits(c, m, to, L - 1); return; }
    if (lo[0] == hi[0]) { rng(c, from, m, lo[0], lo[0]); fixed_range(c, m, to, lo + 1, hi + 1, L - 1); return; }
    char nines[20], zeros[20];
    memset(nines, '9', sizeof nines);
    memset(zeros, '0', sizeof zeros);
    rng(c, from, m, lo[0], lo[0]);
    fixed_range(c, m, to, lo + 1, nines, L - 1);
    if (hi[0] - lo[0] > 1) { m = jsc_st(c); rng(c, from, m, lo[0] + 1, hi[0] - 1); any_digits(c, m, to, L - 1); }
    m = jsc_st(c);
    rng(c, from, m, hi[0], hi[0]);
    fixed_range(c, m, to, zeros, hi + 1, L - 1);
}

/* the decimal integers a..b (0 <= a <= b <= MAXI), no leading zeros */
static void int_range(sc *c, int from, int to, long long a, long long b) {
    long long p = 1;
    for (int L = 1; L <= 18; L++, p *= 10) {
        long long lo = L == 1 ? 0 : p, hi = p * 10 - 1;
        if (lo < a) lo = a;
        if (hi > b) hi = b;
        if (lo > hi) continue;
        char ls[24], hs[24];
        snprintf(ls, sizeof ls, "%0*lld", L, lo);
        snprintf(hs, sizeof hs, "%0*lld", L, hi);
        fixed_range(c, from, to, ls, hs, L);
    }
}

enum { FR_NONE = 1, FR_ZERO = 2, FR_NONZERO = 4 };

static void fraction(sc *c, int from, int to, int mask) {
    if (mask & FR_NONE) jsc_eps(c, from, to);
    if (mask & FR_ZERO) {
        int p = jsc_lit_new(c, from, ".");
        for (int k = 0; k < 16; k++) { int nx = jsc_st(c); rng(c, p, nx, '0', '0'); jsc_eps(c, nx, to); p = nx; }
    }
    if (mask & FR_NONZERO) {
        int u = jsc_lit_new(c, from, "."), v = -1;
        for (int k = 0; k < 16; k++) {
            int u2 = k < 15 ? jsc_st(c) : -1, v2 = jsc_st(c);
            if (u2 >= 0) rng(c, u, u2, '0', '0');
            rng(c, u, v2, '1', '9');
            if (v >= 0) rng(c, v, v2, '0', '9');
            jsc_eps(c, v2, to);
            u = u2;
            v = v2;
        }
    }
}

static int point_ok(const nbounds *b, long long x) {
    if (b->has_lo && (x < b->lo || (x == b->lo && b->lo_x))) return 0;
    if (b->has_hi && (x > b->hi || (x == b->hi && b->hi_x))) return 0;
    return 1;
}

/* every x in the open interval (u, u + 1) */
static int open_ok(const nbounds *b, long long u) {
    if (b->has_lo && u < b->lo) return 0;
    if (b->has_hi && u + 1 > b->hi) return 0;
    return 1;
}

static void number_bounded(sc *c, const nbounds *b, int is_int, int from, int to) {
    long long pts[16];
    int n = 0;
    long long cand[12] = {0, 1, 2, MAXI + 1};
    int nc = 4;
    if (b->has_lo) { cand[nc++] = b->lo; cand[nc++] = b->lo + 1; cand[nc++] = -b->lo; cand[nc++] = -b->lo + 1; }
    if (b->has_hi) { cand[nc++] = b->hi; cand[nc++] = b->hi + 1; cand[nc++] = -b->hi; cand[nc++] = -b->hi + 1; }
    for (int i = 0; i < nc; i++)
        if (cand[i] >= 0 && cand[i] <= MAXI + 1) {
            int dup = 0;
            for (int j = 0; j < n; j++) if (pts[j] == cand[i]) dup = 1;
            if (!dup) pts[n++] = cand[i];
        }
    for (int i = 1; i < n; i++) for (int j = i; j > 0 && pts[j - 1] > pts[j]; j--) { long long t = pts[j]; pts[j] = pts[j - 1]; pts[j - 1] = t; }
    int any = 0;
    for (int neg = 0; neg < 2; neg++)
        for (int i = 0; i + 1 < n; i++) {
            long long I = pts[i], last = pts[i + 1] - 1;
            int m = 0;
            if (!neg) {
                if (point_ok(b, I)) m |= FR_NONE | FR_ZERO;
                if (open_ok(b, I)) m |= FR_NONZERO;
            } else {
                if (I >= 1 && point_ok(b, -I)) m |= FR_NONE | FR_ZERO;
                if (open_ok(b, -(I + 1))) m |= FR_NONZERO;
            }
            if (is_int) m &= FR_NONE;
            if (!m) continue;
            any = 1;
            int p = from;
            if (neg) p = jsc_lit_new(c, from, "-");
            int q = jsc_st(c);
            int_range(c, p, q, I, last);
            fraction(c, q, to, m);
        }
    if (!any) jsc_fail(c, G4_EINVAL, "no %s lies within the bounds", is_int ? "integer" : "number");
}

void jsc_number_plain(sc *c, int is_int, int from, int to) {
    int s0 = jsc_st(c), i1 = jsc_st(c), j = jsc_st(c);
    jsc_eps(c, from, s0);
    rng(c, from, s0, '-', '-');
    rng(c, s0, i1, '0', '0');
    rng(c, s0, j, '1', '9');
    int cur = j;
    for (int k = 0; k < 17; k++) { jsc_eps(c, cur, i1); int nx = jsc_st(c); rng(c, cur, nx, '0', '9'); cur = nx; }
    jsc_eps(c, cur, i1);
    if (is_int) { jsc_eps(c, i1, to); return; }
    int f0 = jsc_st(c);
    jsc_eps(c, i1, f0);
    cur = jsc_lit_new(c, i1, ".");
    for (int k = 0; k < 16; k++) { int nx = jsc_st(c); rng(c, cur, nx, '0', '9'); jsc_eps(c, nx, f0); cur = nx; }
    jsc_eps(c, f0, to);
    int e = jsc_st(c), e2 = jsc_st(c);
    rng(c, f0, e, 'e', 'e');
    rng(c, f0, e, 'E', 'E');
    jsc_eps(c, e, e2);
    rng(c, e, e2, '+', '+');
    rng(c, e, e2, '-', '-');
    cur = e2;
    for (int k = 0; k < 2; k++) { int nx = jsc_st(c); rng(c, cur, nx, '0', '9'); jsc_eps(c, nx, to); cur = nx; }
}

/* a number keyword's value: 0 absent, 1 present (*v), -1 failed */
static int num_kw(sc *c, const json_t *s, const char *k, double *v) {
    json_t *x = s ? json_object_get(s, k) : NULL;
    if (!x) return 0;
    if (!json_is_number(x)) { jsc_fail(c, G4_EINVAL, "'%s' must be a number", k); return -1; }
    *v = json_number_value(x);
    return 1;
}

void jsc_gen_number(sc *c, const json_t *s, int is_int, int from, int to) {
    double mn = 0, mx = 0, emn = 0, emx = 0, mul = 0;
    int hmn = num_kw(c, s, "minimum", &mn), hmx = num_kw(c, s, "maximum", &mx), hemn = 0, hemx = 0;
    if (hmn < 0 || hmx < 0) return;
    for (int k = 0; k < 2; k++) {
        const char *name = k ? "exclusiveMaximum" : "exclusiveMinimum";
        json_t *x = s ? json_object_get(s, name) : NULL;
        int *h = k ? &hemx : &hemn;
        double *v = k ? &emx : &emn;
        if (!x) continue;
        if (json_is_boolean(x)) { /* draft 4: the flag makes minimum / maximum exclusive */
            if (json_is_true(x) && (k ? hmx : hmn)) { *h = 1; *v = k ? mx : mn; if (k) hmx = 0; else hmn = 0; }
        } else if (json_is_number(x)) {
            *h = 1;
            *v = json_number_value(x);
        } else {
            jsc_fail(c, G4_EINVAL, "'%s' must be a number", name);
            return;
        }
    }
    int hm = num_kw(c, s, "multipleOf", &mul);
    if (hm < 0) return;
    /* OpenAPI's integer formats (validators with formats on check them): whole numbers, int32 in range */
    json_t *f = s ? json_object_get(s, "format") : NULL;
    const char *fs = json_is_string(f) ? json_string_value(f) : "";
    if (!strcmp(fs, "int32") || !strcmp(fs, "int64")) is_int = 1;
    if (!strcmp(fs, "int32")) {
        if (!hmn || mn < -2147483648.0) { hmn = 1; mn = -2147483648.0; }
        if (!hmx || mx > 2147483647.0) { hmx = 1; mx = 2147483647.0; }
    }
    if (hm) {
        if (!(mul > 0)) { jsc_fail(c, G4_EINVAL, "'multipleOf' must be greater than 0"); return; }
        if (mul != 1) { jsc_fail(c, G4_EUNSUPPORTED, "'multipleOf' other than 1 is not supported (got %g)", mul); return; }
        is_int = 1;
    }
    if (!hmn && !hmx && !hemn && !hemx) { jsc_number_plain(c, is_int, from, to); return; }
    nbounds b = {0};
    const double lim = (double)MAXI;
    struct { int has; double v; int excl, upper; const char *name; } in[4] = {
        {hmn, mn, 0, 0, "minimum"}, {hemn, emn, 1, 0, "exclusiveMinimum"}, {hmx, mx, 0, 1, "maximum"}, {hemx, emx, 1, 1, "exclusiveMaximum"}};
    for (int k = 0; k < 4; k++) {
        if (!in[k].has) continue;
        double v = in[k].v;
        int excl = in[k].excl;
        if (!isfinite(v)) { jsc_fail(c, G4_EINVAL, "'%s' must be finite", in[k].name); return; }
        if (is_int) { /* integer bounds: round inwards, inclusive */
            v = in[k].upper ? (excl ? ceil(v) - 1 : floor(v)) : (excl ? floor(v) + 1 : ceil(v));
            excl = 0;
        } else if (v != floor(v)) {
            jsc_fail(c, G4_EUNSUPPORTED, "'%s' %g: bounds of a number must be whole numbers (integers may have any)", in[k].name, v);
            return;
        }
        if (v > lim) { if (!in[k].upper) { jsc_fail(c, G4_EINVAL, "'%s' is beyond the %d-digit numbers generated", in[k].name, 18); return; } continue; }
        if (v < -lim) { if (in[k].upper) { jsc_fail(c, G4_EINVAL, "'%s' is beyond the %d-digit numbers generated", in[k].name, 18); return; } continue; }
        long long iv = (long long)v;
        if (!in[k].upper) {
            if (!b.has_lo || iv > b.lo || (iv == b.lo && excl)) { b.has_lo = 1; b.lo = iv; b.lo_x = excl; }
        } else if (!b.has_hi || iv < b.hi || (iv == b.hi && excl)) {
            b.has_hi = 1; b.hi = iv; b.hi_x = excl;
        }
    }
    if (b.has_lo && b.has_hi && (b.lo > b.hi || (b.lo == b.hi && (b.lo_x || b.hi_x)))) { jsc_fail(c, G4_EINVAL, "the minimum is above the maximum"); return; }
    number_bounded(c, &b, is_int, from, to);
}
