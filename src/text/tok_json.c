/* tok_json.c — the arena JSON reader behind tokenizer loading (see tok_json.h).
 *
 * Owns: strict RFC 8259 parsing (no comments, no trailing commas, no lone surrogates), string
 * unescaping into one buffer sized by the input (which a caller may keep: tj_take_strings), and
 * an arena of value nodes in 4 MB blocks. Containers are built on a scratch stack and copied
 * into the arena when closed, so the parse is linear. Big buffers come from tj_big_alloc (huge
 * pages). Knows nothing about tokenizers. */
#include "text/tok_json.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define TJ_MAX_DEPTH 256

typedef struct tj_block {
    struct tj_block *next;
    size_t used, cap;
    tj_val v[];
} tj_block;

struct tj_doc {
    char *strings;      /* all decoded strings; NULL once taken by tj_take_strings */
    size_t str_used, str_cap;
    tj_block *blocks;
    tj_val root;
};

typedef struct {
    const char *p, *end, *start;
    tj_doc *doc;
    tj_val *stack;
    size_t sp, scap;
    g4_err *err;
    int depth;
} tj_parser;

static int perr(tj_parser *ps, const char *what) {
    return g4_err_set(ps->err, G4_EFORMAT, "JSON: %s at byte %zu", what, (size_t)(ps->p - ps->start));
}

static tj_val *arena_alloc(tj_parser *ps, size_t n) {
    tj_block *b = ps->doc->blocks;
    if (n == 0) n = 1;
    if (!b || b->cap - b->used < n) {
        /* 4 MB blocks (huge pages; the 33 MB Gemma file needs ~2M values), less for small
         * inputs: a value takes at least one input byte */
        size_t in = (size_t)(ps->end - ps->start) + 1, cap = in < 262144 ? in : 262144;
        if (cap < n) cap = n;
        tj_block *nb = tj_big_alloc(sizeof *nb + cap * sizeof(tj_val));
        if (!nb) return NULL;
        nb->next = b;
        nb->used = 0;
        nb->cap = cap;
        ps->doc->blocks = nb;
        b = nb;
    }
    tj_val *r = b->v + b->used;
    b->used += n;
    return r;
}

/* The scratch stack reaches 8 MB for the Gemma merges list: from 4 MB on it gets huge pages. */
static int stack_grow(tj_parser *ps) {
    size_t nc = ps->scap ? ps->scap * 2 : 1024;
    tj_val *ns;
    if (nc * sizeof *ns < ((size_t)4 << 20)) {
        ns = realloc(ps->stack, nc * sizeof *ns);
    } else {
        ns = tj_big_alloc(nc * sizeof *ns);
        if (ns) memcpy(ns, ps->stack, ps->sp * sizeof *ns);
        if (ns) free(ps->stack);
    }
    if (!ns) return g4_err_set(ps->err, G4_ENOMEM, "JSON: out of memory");
    ps->stack = ns;
    ps->scap = nc;
    return G4_OK;
}

static inline int push(tj_parser *ps, const tj_val *v) {
    if (ps->sp == ps->scap && stack_grow(ps)) return G4_ENOMEM;
    ps->stack[ps->sp++] = *v;
    return G4_OK;
}

static void skip_ws(tj_parser *ps) {
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\n' || *ps->p == '\r' || *ps->p == '\t')) ps->p++;
}

static int hex4(const char *p, unsigned *out) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else return -1;
    }
    *out = v;
    return 0;
}

static size_t put_utf8(char *o, unsigned cp) {
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xC0 | (cp >> 6)); o[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12)); o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F)); return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18)); o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); o[3] = (char)(0x80 | (cp & 0x3F)); return 4;
}

/* Length of a valid UTF-8 sequence at p (raw input inside a string), 0 if invalid. */
static size_t utf8_valid_at(const unsigned char *p, const unsigned char *end) {
    unsigned c = p[0];
    if (c < 0x80) return 1;
    size_t n;
    unsigned cp, min;
    if (c >= 0xC2 && c <= 0xDF) { n = 2; cp = c & 0x1F; min = 0x80; }
    else if (c >= 0xE0 && c <= 0xEF) { n = 3; cp = c & 0x0F; min = 0x800; }
    else if (c >= 0xF0 && c <= 0xF4) { n = 4; cp = c & 0x07; min = 0x10000; }
    else return 0;
    if ((size_t)(end - p) < n) return 0;
    for (size_t i = 1; i < n; i++) {
        if ((p[i] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (p[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return n;
}

/* The cursor lives in locals here: writes through `o` (a char *) could alias ps->p, which would
 * make the compiler reload and store it for every byte. */
static int parse_string(tj_parser *ps, tj_val *out) {
    const char *p = ps->p + 1, *end = ps->end; /* past the opening quote */
    char *o = ps->doc->strings + ps->doc->str_used;
    char *o0 = o;
#define SFAIL(msg) do { ps->p = p; return perr(ps, msg); } while (0)
    for (;;) {
        if (p >= end) SFAIL("unterminated string");
        unsigned char c = (unsigned char)*p;
        if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\') { *o++ = (char)c; p++; continue; }
        if (c == '"') { p++; break; }
        if (c < 0x20) SFAIL("control character in string");
        if (c == '\\') {
            if (end - p < 2) SFAIL("unterminated escape");
            char e = p[1];
            p += 2;
            switch (e) {
            case '"': *o++ = '"'; break;
            case '\\': *o++ = '\\'; break;
            case '/': *o++ = '/'; break;
            case 'b': *o++ = '\b'; break;
            case 'f': *o++ = '\f'; break;
            case 'n': *o++ = '\n'; break;
            case 'r': *o++ = '\r'; break;
            case 't': *o++ = '\t'; break;
            case 'u': {
                unsigned cp, lo;
                if (end - p < 4 || hex4(p, &cp)) SFAIL("bad \\u escape");
                p += 4;
                if (cp >= 0xDC00 && cp <= 0xDFFF) SFAIL("lone low surrogate in \\u escape");
                if (cp >= 0xD800 && cp <= 0xDBFF) {
                    if (end - p < 6 || p[0] != '\\' || p[1] != 'u' || hex4(p + 2, &lo) || lo < 0xDC00 || lo > 0xDFFF)
                        SFAIL("lone high surrogate in \\u escape");
                    p += 6;
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                }
                o += put_utf8(o, cp);
                break;
            }
            default: SFAIL("bad escape");
            }
            continue;
        }
        size_t n = utf8_valid_at((const unsigned char *)p, (const unsigned char *)end);
        if (!n) SFAIL("invalid UTF-8 in string");
        for (size_t i = 0; i < n; i++) *o++ = *p++; /* 2-4 bytes: no memcpy call */
    }
#undef SFAIL
    ps->p = p;
    *o++ = 0;
    size_t len = (size_t)(o - o0) - 1;
    if (len > UINT32_MAX) return perr(ps, "string too long");
    out->type = TJ_STR;
    out->n = (uint32_t)len;
    out->u.s = o0;
    ps->doc->str_used += len + 1;
    return G4_OK;
}

static int parse_number(tj_parser *ps, tj_val *out) {
    const char *s = ps->p, *p = ps->p, *e = ps->end;
    if (p < e && *p == '-') p++;
    if (p >= e) return perr(ps, "bad number");
    if (*p == '0') p++;
    else if (*p >= '1' && *p <= '9') { while (p < e && *p >= '0' && *p <= '9') p++; }
    else return perr(ps, "bad number");
    int frac_or_exp = p < e && (*p == '.' || *p == 'e' || *p == 'E');
    if (p < e && *p == '.') {
        p++;
        if (p >= e || *p < '0' || *p > '9') { ps->p = p; return perr(ps, "bad number"); }
        while (p < e && *p >= '0' && *p <= '9') p++;
    }
    if (p < e && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < e && (*p == '+' || *p == '-')) p++;
        if (p >= e || *p < '0' || *p > '9') { ps->p = p; return perr(ps, "bad number"); }
        while (p < e && *p >= '0' && *p <= '9') p++;
    }
    out->type = TJ_NUM;
    out->n = 0;
    if (!frac_or_exp && p - s <= 15) { /* an integer below 10^15: exact without strtod */
        const char *q = s + (*s == '-');
        double v = 0;
        while (q < p) v = v * 10 + (*q++ - '0');
        out->u.num = *s == '-' ? -v : v;
        ps->p = p;
        return G4_OK;
    }
    char tmp[64];
    size_t n = (size_t)(p - s);
    if (n >= sizeof tmp) return perr(ps, "number too long");
    memcpy(tmp, s, n);
    tmp[n] = 0;
    out->type = TJ_NUM;
    out->n = 0;
    out->u.num = strtod(tmp, NULL);
    ps->p = p;
    return G4_OK;
}

static int parse_value(tj_parser *ps, tj_val *out);

static int parse_container(tj_parser *ps, tj_val *out, int is_obj) {
    if (++ps->depth > TJ_MAX_DEPTH) return perr(ps, "nesting too deep");
    ps->p++;
    size_t base = ps->sp;
    int rc;
    skip_ws(ps);
    char close = is_obj ? '}' : ']';
    if (ps->p < ps->end && *ps->p == close) {
        ps->p++;
    } else {
        for (;;) {
            tj_val v;
            skip_ws(ps);
            if (is_obj) {
                if (ps->p >= ps->end || *ps->p != '"') return perr(ps, "expected a string key");
                if ((rc = parse_string(ps, &v)) || (rc = push(ps, &v))) return rc;
                skip_ws(ps);
                if (ps->p >= ps->end || *ps->p != ':') return perr(ps, "expected ':'");
                ps->p++;
                skip_ws(ps);
            }
            if ((rc = parse_value(ps, &v)) || (rc = push(ps, &v))) return rc;
            skip_ws(ps);
            if (ps->p >= ps->end) return perr(ps, is_obj ? "unterminated object" : "unterminated array");
            if (*ps->p == ',') { ps->p++; continue; }
            if (*ps->p == close) { ps->p++; break; }
            return perr(ps, is_obj ? "expected ',' or '}'" : "expected ',' or ']'");
        }
    }
    size_t cnt = ps->sp - base;
    tj_val *items = arena_alloc(ps, cnt);
    if (!items) return g4_err_set(ps->err, G4_ENOMEM, "JSON: out of memory");
    if (cnt) memcpy(items, ps->stack + base, cnt * sizeof *items);
    ps->sp = base;
    out->type = is_obj ? TJ_OBJ : TJ_ARR;
    out->n = (uint32_t)(is_obj ? cnt / 2 : cnt);
    out->u.items = items;
    ps->depth--;
    return G4_OK;
}

static int lit(tj_parser *ps, const char *w, tj_type t, tj_val *out) {
    size_t n = strlen(w);
    if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, w, n)) return perr(ps, "unexpected character");
    ps->p += n;
    out->type = t;
    out->n = 0;
    out->u.items = NULL;
    return G4_OK;
}

static int parse_value(tj_parser *ps, tj_val *out) {
    skip_ws(ps);
    if (ps->p >= ps->end) return perr(ps, "unexpected end of input");
    switch (*ps->p) {
    case '{': return parse_container(ps, out, 1);
    case '[': return parse_container(ps, out, 0);
    case '"': return parse_string(ps, out);
    case 't': return lit(ps, "true", TJ_TRUE, out);
    case 'f': return lit(ps, "false", TJ_FALSE, out);
    case 'n': return lit(ps, "null", TJ_NULL, out);
    default:
        if (*ps->p == '-' || (*ps->p >= '0' && *ps->p <= '9')) return parse_number(ps, out);
        return perr(ps, "unexpected character");
    }
}

void tj_free(tj_doc *doc) {
    if (!doc) return;
    tj_block *b = doc->blocks;
    while (b) {
        tj_block *n = b->next;
        free(b);
        b = n;
    }
    free(doc->strings);
    free(doc);
}

int tj_parse(const char *buf, size_t len, tj_doc **doc, const tj_val **root, g4_err *err) {
    *doc = NULL;
    *root = NULL;
    tj_doc *d = calloc(1, sizeof *d);
    if (!d) return g4_err_set(err, G4_ENOMEM, "JSON: out of memory");
    d->str_cap = len + 1;
    d->strings = tj_big_alloc(d->str_cap);
    if (!d->strings) { free(d); return g4_err_set(err, G4_ENOMEM, "JSON: out of memory"); }
    tj_parser ps = { .p = buf, .end = buf + len, .start = buf, .doc = d, .err = err };
    int rc = parse_value(&ps, &d->root);
    if (!rc) {
        skip_ws(&ps);
        if (ps.p != ps.end) rc = perr(&ps, "trailing characters after the JSON value");
    }
    free(ps.stack);
    if (rc) { tj_free(d); return rc; }
    *doc = d;
    *root = &d->root;
    return G4_OK;
}

void *tj_big_alloc(size_t n) {
    const size_t huge = (size_t)2 << 20;
    if (n < 2 * huge) return malloc(n ? n : 1);
    void *p;
    if (posix_memalign(&p, huge, n)) return NULL;
#ifdef MADV_HUGEPAGE
    madvise(p, n & ~(huge - 1), MADV_HUGEPAGE); /* a hint: failure is harmless */
#endif
    return p;
}

char *tj_take_strings(tj_doc *doc, size_t *used, size_t *cap) {
    char *s = doc->strings;
    *used = doc->str_used;
    *cap = doc->str_cap;
    doc->strings = NULL;
    return s;
}

const tj_val *tj_get(const tj_val *obj, const char *key) {
    if (!obj || obj->type != TJ_OBJ) return NULL;
    size_t kl = strlen(key);
    const tj_val *found = NULL;
    for (uint32_t i = 0; i < obj->n; i++) {
        const tj_val *k = &obj->u.items[2 * i];
        if (k->n == kl && !memcmp(k->u.s, key, kl)) found = &obj->u.items[2 * i + 1];
    }
    return found;
}

int tj_str_eq(const tj_val *v, const char *s) {
    return v && v->type == TJ_STR && v->n == strlen(s) && !memcmp(v->u.s, s, v->n);
}

const char *tj_type_name(const tj_val *v) {
    if (!v) return "missing";
    switch (v->type) {
    case TJ_NULL: return "null";
    case TJ_FALSE: case TJ_TRUE: return "boolean";
    case TJ_NUM: return "number";
    case TJ_STR: return "string";
    case TJ_ARR: return "array";
    case TJ_OBJ: return "object";
    }
    return "?";
}
