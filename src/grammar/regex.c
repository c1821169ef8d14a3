/* regex.c — the pattern subset of regex.h: a recursive-descent parser into a small tree of
 * code-point sets, concatenations, alternations and repetitions, then Thompson construction
 * where each set becomes the byte paths of its characters' encodings (UTF-8 ranges split the
 * way RE2 does, JSON escapes for the characters a JSON string must escape). */
#include "grammar/regex.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- encodings of code-point sets ------------------------------------------------------------- */

static size_t utf8_put(uint32_t c, unsigned char *b) {
    if (c < 0x80) { b[0] = (unsigned char)c; return 1; }
    if (c < 0x800) { b[0] = (unsigned char)(0xC0 | (c >> 6)); b[1] = (unsigned char)(0x80 | (c & 0x3F)); return 2; }
    if (c < 0x10000) {
        b[0] = (unsigned char)(0xE0 | (c >> 12)); b[1] = (unsigned char)(0x80 | ((c >> 6) & 0x3F)); b[2] = (unsigned char)(0x80 | (c & 0x3F));
        return 3;
    }
    b[0] = (unsigned char)(0xF0 | (c >> 18)); b[1] = (unsigned char)(0x80 | ((c >> 12) & 0x3F));
    b[2] = (unsigned char)(0x80 | ((c >> 6) & 0x3F)); b[3] = (unsigned char)(0x80 | (c & 0x3F));
    return 4;
}

/* [lo, hi] as chains of byte ranges (no surrogates inside: the caller removed them). */
static void utf8_range(g4_nfa *a, int from, int to, uint32_t lo, uint32_t hi) {
    static const uint32_t lim[3] = {0x7F, 0x7FF, 0xFFFF};
    for (int i = 0; i < 3; i++)
        if (lo <= lim[i] && hi > lim[i]) { utf8_range(a, from, to, lo, lim[i]); utf8_range(a, from, to, lim[i] + 1, hi); return; }
    if (hi < 0x80) { g4_nfa_sym(a, from, to, (int)lo, (int)hi); return; }
    int len = hi < 0x800 ? 2 : hi < 0x10000 ? 3 : 4;
    for (int i = 1; i < len; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if (lo & m) { utf8_range(a, from, to, lo, lo | m); utf8_range(a, from, to, (lo | m) + 1, hi); return; }
            if ((hi & m) != m) { utf8_range(a, from, to, lo, (hi & ~m) - 1); utf8_range(a, from, to, hi & ~m, hi); return; }
        }
    }
    unsigned char bl[4], bh[4];
    utf8_put(lo, bl);
    utf8_put(hi, bh);
    int cur = from;
    for (int i = 0; i < len; i++) {
        int nx = i + 1 == len ? to : g4_nfa_state(a);
        g4_nfa_sym(a, cur, nx, bl[i], bh[i]);
        cur = nx;
    }
}

static size_t json_escape(uint32_t c, char *b) {
    static const char hex[] = "0123456789abcdef";
    switch (c) {
    case '"': memcpy(b, "\\\"", 2); return 2;
    case '\\': memcpy(b, "\\\\", 2); return 2;
    case '\b': memcpy(b, "\\b", 2); return 2;
    case '\t': memcpy(b, "\\t", 2); return 2;
    case '\n': memcpy(b, "\\n", 2); return 2;
    case '\f': memcpy(b, "\\f", 2); return 2;
    case '\r': memcpy(b, "\\r", 2); return 2;
    default: break;
    }
    memcpy(b, "\\u00", 4);
    b[4] = hex[c >> 4];
    b[5] = hex[c & 15];
    return 6;
}

static int needs_escape(uint32_t c) { return c < 0x20 || c == '"' || c == '\\'; }

/* [lo, hi] minus the surrogates, encoded */
static void enc_range(g4_nfa *a, int from, int to, uint32_t lo, uint32_t hi, g4_str_enc enc) {
    if (lo <= 0xDFFF && hi >= 0xD800) {
        if (lo < 0xD800) enc_range(a, from, to, lo, 0xD7FF, enc);
        if (hi > 0xDFFF) enc_range(a, from, to, 0xE000, hi, enc);
        return;
    }
    if (hi > 0x10FFFF) hi = 0x10FFFF;
    if (lo > hi) return;
    if (enc == G4_ENC_RAW) { utf8_range(a, from, to, lo, hi); return; }
    uint32_t c = lo;
    while (c <= hi) {
        if (needs_escape(c)) {
            char b[8];
            size_t n = json_escape(c, b);
            g4_nfa_lit(a, from, to, b, n);
            c++;
            continue;
        }
        uint32_t e = c < '"' ? '"' - 1 : c < '\\' ? '\\' - 1 : hi; /* the run up to the next character to escape */
        if (e > hi) e = hi;
        utf8_range(a, from, to, c, e);
        if (e == hi) break;
        c = e + 1;
    }
}

void g4_enc_ranges(g4_nfa *a, int from, int to, const uint32_t *r, int n, g4_str_enc enc) {
    for (int i = 0; i < n; i++) enc_range(a, from, to, r[2 * i], r[2 * i + 1], enc);
}

size_t g4_enc_string(const char *s, size_t n, g4_str_enc enc, char *buf) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (enc == G4_ENC_JSON && needs_escape(c)) k += json_escape(c, buf + k);
        else buf[k++] = (char)c;
    }
    return k;
}

/* ---- parsing ------------------------------------------------------------------------------------ */

enum { RX_SET, RX_CAT, RX_ALT, RX_REP, RX_EMPTY };

typedef struct {
    int kind, a, b, min, max; /* max -1: unbounded */
    size_t roff;
    int nr;
} rxnode;

typedef struct { uint32_t *v; size_t n, cap; } rset; /* pairs lo, hi */

typedef struct {
    const unsigned char *p;
    size_t n, i;
    rxnode *nd;
    int nn, ncap;
    uint32_t *rp;
    size_t nrp, rcap;
    g4_err *err;
    int rc, depth;
    g4_fsa_budget *b;         /* the tree is charged to the NFA's budget: a long pattern is a big tree */
} rx;

static int rx_fail(rx *R, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int rx_fail(rx *R, int code, const char *fmt, ...) {
    if (R->rc) return -1;
    char m[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    R->rc = g4_err_set(R->err, code, "pattern: %s at offset %zu", m, R->i);
    return -1;
}

static int rs_add(rset *s, uint32_t lo, uint32_t hi) {
    if (s->n + 2 > s->cap) {
        size_t c = s->cap ? s->cap * 2 : 16;
        uint32_t *v = realloc(s->v, c * sizeof *v);
        if (!v) return -1;
        s->v = v;
        s->cap = c;
    }
    s->v[s->n++] = lo;
    s->v[s->n++] = hi;
    return 0;
}

static int cmp_range(const void *a, const void *b) {
    const uint32_t *x = a, *y = b;
    return (x[0] > y[0]) - (x[0] < y[0]);
}

static void rs_norm(rset *s) {
    size_t n = s->n / 2;
    if (n < 2) return;
    qsort(s->v, n, 2 * sizeof *s->v, cmp_range);
    size_t k = 0;
    for (size_t i = 1; i < n; i++) {
        if (s->v[2 * i] <= s->v[2 * k + 1] + 1) {
            if (s->v[2 * i + 1] > s->v[2 * k + 1]) s->v[2 * k + 1] = s->v[2 * i + 1];
        } else {
            k++;
            s->v[2 * k] = s->v[2 * i];
            s->v[2 * k + 1] = s->v[2 * i + 1];
        }
    }
    s->n = 2 * (k + 1);
}

static int rs_negate(rset *s) {
    rs_norm(s);
    rset o = {0};
    uint32_t next = 0;
    for (size_t i = 0; i < s->n; i += 2) {
        if (s->v[i] > next && rs_add(&o, next, s->v[i] - 1)) { free(o.v); return -1; }
        next = s->v[i + 1] + 1;
    }
    if (next <= 0x10FFFF && rs_add(&o, next, 0x10FFFF)) { free(o.v); return -1; }
    free(s->v);
    *s = o;
    return 0;
}

static int new_node(rx *R, int kind, int a, int b) {
    if (R->nn == R->ncap) {
        int c = R->ncap ? R->ncap * 2 : 64;
        rxnode *nd = g4_fsa_realloc(R->b, R->nd, (size_t)c * sizeof *nd);
        if (!nd) return rx_fail(R, G4_ENOMEM, "out of memory");
        R->nd = nd;
        R->ncap = c;
    }
    R->nd[R->nn] = (rxnode){kind, a, b, 0, 0, 0, 0};
    return R->nn++;
}

static int set_node(rx *R, rset *s) {
    rs_norm(s);
    int k = new_node(R, RX_SET, -1, -1);
    if (k < 0) return -1;
    if (R->nrp + s->n > R->rcap) {
        size_t c = R->rcap ? R->rcap * 2 : 256;
        while (c < R->nrp + s->n) c *= 2;
        uint32_t *v = g4_fsa_realloc(R->b, R->rp, c * sizeof *v);
        if (!v) return rx_fail(R, G4_ENOMEM, "out of memory");
        R->rp = v;
        R->rcap = c;
    }
    if (s->n) memcpy(R->rp + R->nrp, s->v, s->n * sizeof *s->v); /* an empty class ([^\s\S]) has no ranges and maybe no buffer */
    R->nd[k].roff = R->nrp;
    R->nd[k].nr = (int)(s->n / 2);
    R->nrp += s->n;
    return k;
}

static int add_class(rset *s, char c) {
    switch (c) {
    case 'd': return rs_add(s, '0', '9');
    case 'w': return rs_add(s, '0', '9') || rs_add(s, 'A', 'Z') || rs_add(s, '_', '_') || rs_add(s, 'a', 'z');
    case 's': return rs_add(s, 9, 13) || rs_add(s, ' ', ' ') || rs_add(s, 0xA0, 0xA0) || rs_add(s, 0x1680, 0x1680) ||
                     rs_add(s, 0x2000, 0x200A) || rs_add(s, 0x2028, 0x2029) || rs_add(s, 0x202F, 0x202F) ||
                     rs_add(s, 0x205F, 0x205F) || rs_add(s, 0x3000, 0x3000) || rs_add(s, 0xFEFF, 0xFEFF);
    default: return 0;
    }
}

static uint32_t utf8_next(rx *R) {
    const unsigned char *p = R->p + R->i;
    size_t left = R->n - R->i;
    uint32_t c = p[0];
    int k = c < 0x80 ? 0 : c < 0xE0 ? 1 : c < 0xF0 ? 2 : 3;
    if ((size_t)k >= left) { R->i = R->n; return 0xFFFD; }
    if (k) c &= 0x3F >> k;
    for (int j = 1; j <= k; j++) c = (c << 6) | (p[j] & 0x3F);
    R->i += (size_t)k + 1;
    return c;
}

static int hexval(int c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static int read_hex(rx *R, int digits, uint32_t *out) {
    uint32_t v = 0;
    for (int k = 0; k < digits; k++) {
        int h = R->i < R->n ? hexval(R->p[R->i]) : -1;
        if (h < 0) return rx_fail(R, G4_EINVAL, "expected %d hexadecimal digits", digits);
        v = v * 16 + (uint32_t)h;
        R->i++;
    }
    *out = v;
    return 0;
}

/* After a backslash: one code point (*cp, returns 0), or a class added to set (returns 1). */
static int parse_escape(rx *R, int in_class, uint32_t *cp, rset *set) {
    if (R->i >= R->n) return rx_fail(R, G4_EINVAL, "a pattern must not end with a backslash");
    unsigned char c = R->p[R->i++];
    switch (c) {
    case 'd': case 'w': case 's':
        if (add_class(set, (char)c)) return rx_fail(R, G4_ENOMEM, "out of memory");
        return 1;
    case 'D': case 'W': case 'S': {
        rset t = {0};
        if (add_class(&t, (char)(c + 32)) || rs_negate(&t)) { free(t.v); return rx_fail(R, G4_ENOMEM, "out of memory"); }
        for (size_t k = 0; k < t.n; k += 2)
            if (rs_add(set, t.v[k], t.v[k + 1])) { free(t.v); return rx_fail(R, G4_ENOMEM, "out of memory"); }
        free(t.v);
        return 1;
    }
    case 't': *cp = '\t'; return 0;
    case 'n': *cp = '\n'; return 0;
    case 'r': *cp = '\r'; return 0;
    case 'f': *cp = '\f'; return 0;
    case 'v': *cp = '\v'; return 0;
    case '0':
        if (R->i < R->n && R->p[R->i] >= '0' && R->p[R->i] <= '9') { R->i--; return rx_fail(R, G4_EUNSUPPORTED, "octal escapes are not supported"); }
        *cp = 0;
        return 0;
    case 'b':
        if (in_class) { *cp = '\b'; return 0; }
        R->i--;
        return rx_fail(R, G4_EUNSUPPORTED, "word boundaries (\\b) are not supported");
    case 'B': R->i--; return rx_fail(R, G4_EUNSUPPORTED, "word boundaries (\\B) are not supported");
    case 'c':
        if (R->i < R->n && ((R->p[R->i] >= 'a' && R->p[R->i] <= 'z') || (R->p[R->i] >= 'A' && R->p[R->i] <= 'Z'))) {
            *cp = R->p[R->i++] % 32;
            return 0;
        }
        return rx_fail(R, G4_EINVAL, "\\c must be followed by a letter");
    case 'x': return read_hex(R, 2, cp) ? -1 : 0;
    case 'u':
        if (R->i < R->n && R->p[R->i] == '{') {
            R->i++;
            uint32_t v = 0;
            int nd = 0;
            while (R->i < R->n && hexval(R->p[R->i]) >= 0 && nd < 7) { v = v * 16 + (uint32_t)hexval(R->p[R->i++]); nd++; }
            if (!nd || R->i >= R->n || R->p[R->i] != '}' || v > 0x10FFFF) return rx_fail(R, G4_EINVAL, "bad \\u{...} escape");
            R->i++;
            *cp = v;
            return 0;
        }
        if (read_hex(R, 4, cp)) return -1;
        if (*cp >= 0xD800 && *cp <= 0xDBFF && R->i + 6 <= R->n && R->p[R->i] == '\\' && R->p[R->i + 1] == 'u') {
            uint32_t lo = 0;
            int ok = 1;
            for (int k = 2; k < 6; k++) {
                int h = hexval(R->p[R->i + (size_t)k]);
                if (h < 0) ok = 0;
                lo = lo * 16 + (uint32_t)(h < 0 ? 0 : h);
            }
            if (ok && lo >= 0xDC00 && lo <= 0xDFFF) { /* a surrogate pair is one character */
                *cp = 0x10000 + ((*cp - 0xD800) << 10) + (lo - 0xDC00);
                R->i += 6;
            }
        }
        return 0;
    case 'p': case 'P': R->i--; return rx_fail(R, G4_EUNSUPPORTED, "Unicode property escapes (\\%c{...}) are not supported", c);
    case 'k': R->i--; return rx_fail(R, G4_EUNSUPPORTED, "backreferences are not supported");
    default:
        if (c >= '1' && c <= '9') { R->i--; return rx_fail(R, G4_EUNSUPPORTED, "backreferences are not supported"); }
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
            R->i--;
            return rx_fail(R, G4_EINVAL, "unknown escape \\%c", c);
        }
        R->i--;
        *cp = utf8_next(R); /* an escaped syntax (or other) character stands for itself */
        return 0;
    }
}

static int parse_class(rx *R) {
    rset s = {0};
    R->i++; /* '[' */
    int neg = R->i < R->n && R->p[R->i] == '^';
    if (neg) R->i++;
    for (;;) {
        if (R->i >= R->n) { free(s.v); return rx_fail(R, G4_EINVAL, "unterminated character class"); }
        if (R->p[R->i] == ']') { R->i++; break; }
        uint32_t lo;
        int k;
        if (R->p[R->i] == '\\') {
            R->i++;
            if ((k = parse_escape(R, 1, &lo, &s)) < 0) { free(s.v); return -1; }
            if (k == 1) continue;
        } else {
            lo = utf8_next(R);
        }
        if (R->i + 1 < R->n && R->p[R->i] == '-' && R->p[R->i + 1] != ']') {
            R->i++;
            uint32_t hi;
            rset dummy = {0};
            if (R->p[R->i] == '\\') {
                R->i++;
                k = parse_escape(R, 1, &hi, &dummy);
                free(dummy.v);
                if (k < 0) { free(s.v); return -1; }
                if (k == 1) { free(s.v); return rx_fail(R, G4_EINVAL, "a class escape cannot end a range"); }
            } else {
                hi = utf8_next(R);
            }
            if (hi < lo) { free(s.v); return rx_fail(R, G4_EINVAL, "range out of order in a character class"); }
            if (rs_add(&s, lo, hi)) { free(s.v); return rx_fail(R, G4_ENOMEM, "out of memory"); }
        } else if (rs_add(&s, lo, lo)) {
            free(s.v);
            return rx_fail(R, G4_ENOMEM, "out of memory");
        }
    }
    if (neg && rs_negate(&s)) { free(s.v); return rx_fail(R, G4_ENOMEM, "out of memory"); }
    int node = set_node(R, &s);
    free(s.v);
    return node;
}

/* {n}, {n,}, {n,m} at R->i: 1 with the counts in mn, mx and R->i past it; 0: no quantifier. */
static int brace_quant(rx *R, int *mn, int *mx) {
    size_t j = R->i + 1;
    long a = 0, b;
    int da = 0, db = 0;
    while (j < R->n && R->p[j] >= '0' && R->p[j] <= '9') { if (a < 100000) a = a * 10 + (R->p[j] - '0'); j++; da++; }
    if (!da) return 0;
    b = a;
    if (j < R->n && R->p[j] == ',') {
        j++;
        b = -1;
        long v = 0;
        while (j < R->n && R->p[j] >= '0' && R->p[j] <= '9') { if (v < 100000) v = v * 10 + (R->p[j] - '0'); j++; db++; }
        if (db) b = v;
    }
    if (j >= R->n || R->p[j] != '}') return 0;
    R->i = j + 1;
    *mn = (int)a;
    *mx = (int)b;
    return 1;
}

static int parse_alt(rx *R, int top, int *anch);

static int parse_atom(rx *R) {
    unsigned char c = R->p[R->i];
    rset s = {0};
    int node;
    switch (c) {
    case '(':
        R->i++;
        if (R->i < R->n && R->p[R->i] == '?') {
            if (R->i + 1 < R->n && R->p[R->i + 1] == ':') R->i += 2;
            else if (R->i + 2 < R->n && R->p[R->i + 1] == '<' && R->p[R->i + 2] != '=' && R->p[R->i + 2] != '!') {
                while (R->i < R->n && R->p[R->i] != '>') R->i++;
                if (R->i >= R->n) return rx_fail(R, G4_EINVAL, "unterminated group name");
                R->i++;
            } else {
                return rx_fail(R, G4_EUNSUPPORTED, "lookahead and lookbehind ((?=, (?!, (?<=, (?<!) are not supported");
            }
        }
        if (++R->depth > G4_REGEX_MAX_NEST) return rx_fail(R, G4_EUNSUPPORTED, "groups nested deeper than %d are not supported", G4_REGEX_MAX_NEST);
        node = parse_alt(R, 0, NULL);
        R->depth--;
        if (node < 0) return -1;
        if (R->i >= R->n || R->p[R->i] != ')') return rx_fail(R, G4_EINVAL, "missing ')'");
        R->i++;
        return node;
    case '[': return parse_class(R);
    case '.':
        R->i++;
        if (rs_add(&s, 0, 9) || rs_add(&s, 11, 12) || rs_add(&s, 14, 0x2027) || rs_add(&s, 0x202A, 0x10FFFF)) { free(s.v); return rx_fail(R, G4_ENOMEM, "out of memory"); }
        break;
    case '\\': {
        R->i++;
        uint32_t cp;
        int k = parse_escape(R, 0, &cp, &s);
        if (k < 0) { free(s.v); return -1; }
        if (k == 0 && rs_add(&s, cp, cp)) { free(s.v); return rx_fail(R, G4_ENOMEM, "out of memory"); }
        break;
    }
    case '*': case '+': case '?': return rx_fail(R, G4_EINVAL, "nothing to repeat before '%c'", c);
    case '^': case '$':
        return rx_fail(R, G4_EUNSUPPORTED, "'%c' is supported only at the start or end of the pattern (or of a top-level alternative)", c);
    default: {
        int mn, mx;
        size_t save = R->i;
        if (c == '{' && brace_quant(R, &mn, &mx)) { R->i = save; return rx_fail(R, G4_EINVAL, "nothing to repeat before '{'"); }
        /* anything else, a lone '{' too, is a literal */
        uint32_t cp = utf8_next(R);
        if (rs_add(&s, cp, cp)) { free(s.v); return rx_fail(R, G4_ENOMEM, "out of memory"); }
        break;
    }
    }
    node = set_node(R, &s);
    free(s.v);
    return node;
}

static int parse_cat(rx *R, int top, int *end_anchor) {
    int acc = -1;
    while (R->i < R->n && R->p[R->i] != '|' && R->p[R->i] != ')') {
        if (top && R->p[R->i] == '$' && (R->i + 1 == R->n || R->p[R->i + 1] == '|')) { R->i++; *end_anchor = 1; break; }
        int at = parse_atom(R);
        if (at < 0) return -1;
        for (;;) {
            int mn, mx;
            if (R->i >= R->n) break;
            unsigned char q = R->p[R->i];
            if (q == '*') { mn = 0; mx = -1; R->i++; }
            else if (q == '+') { mn = 1; mx = -1; R->i++; }
            else if (q == '?') { mn = 0; mx = 1; R->i++; }
            else if (q != '{' || !brace_quant(R, &mn, &mx)) break;
            if (mx >= 0 && mx < mn) return rx_fail(R, G4_EINVAL, "numbers out of order in a {n,m} quantifier");
            if (mn > G4_REGEX_MAX_REPEAT || mx > G4_REGEX_MAX_REPEAT)
                return rx_fail(R, G4_EUNSUPPORTED, "repetition counts above %d are not supported", G4_REGEX_MAX_REPEAT);
            if (R->i < R->n && R->p[R->i] == '?') R->i++; /* lazy: the same language */
            int r = new_node(R, RX_REP, at, -1);
            if (r < 0) return -1;
            R->nd[r].min = mn;
            R->nd[r].max = mx;
            at = r;
            if (R->i < R->n && (R->p[R->i] == '*' || R->p[R->i] == '+' || R->p[R->i] == '?'))
                return rx_fail(R, G4_EINVAL, "nothing to repeat before '%c'", R->p[R->i]);
        }
        acc = acc < 0 ? at : new_node(R, RX_CAT, acc, at);
        if (acc < 0) return -1;
    }
    return acc < 0 ? new_node(R, RX_EMPTY, -1, -1) : acc;
}

/* anch (top level only): per alternative bit 1 = ^, bit 2 = $; alternatives kept separate */
static int parse_alt(rx *R, int top, int *anch) {
    int acc = -1;
    for (int k = 0;; k++) {
        int start = 0, end = 0;
        if (top && R->i < R->n && R->p[R->i] == '^') { R->i++; start = 1; }
        int c = parse_cat(R, top, &end);
        if (c < 0) return -1;
        if (top) {
            /* the free sides take any text */
            rset all = {0};
            if (rs_add(&all, 0, 0x10FFFF)) return rx_fail(R, G4_ENOMEM, "out of memory");
            if (!start) {
                int st = set_node(R, &all), r = st < 0 ? -1 : new_node(R, RX_REP, st, -1);
                if (r < 0) { free(all.v); return -1; }
                R->nd[r].max = -1;
                if ((c = new_node(R, RX_CAT, r, c)) < 0) { free(all.v); return -1; }
            }
            if (!end) {
                int st = set_node(R, &all), r = st < 0 ? -1 : new_node(R, RX_REP, st, -1);
                if (r < 0) { free(all.v); return -1; }
                R->nd[r].max = -1;
                if ((c = new_node(R, RX_CAT, c, r)) < 0) { free(all.v); return -1; }
            }
            free(all.v);
        }
        (void)anch;
        acc = acc < 0 ? c : new_node(R, RX_ALT, acc, c);
        if (acc < 0) return -1;
        if (R->i < R->n && R->p[R->i] == '|') { R->i++; continue; }
        return acc;
    }
}

/* ---- construction -------------------------------------------------------------------------------- */

static void emit(rx *R, g4_nfa *a, int node, int from, int to, g4_str_enc enc) {
    if (a->over || a->oom) return;
    const rxnode *x = &R->nd[node];
    switch (x->kind) {
    case RX_EMPTY: g4_nfa_eps(a, from, to); break;
    case RX_SET: g4_enc_ranges(a, from, to, R->rp + x->roff, x->nr, enc); break;
    /* alternations and concatenations are left-deep chains as long as the pattern: walked as
     * lists, so that a long literal does not take the stack (recursion goes only as deep as the
     * groups nest) */
    case RX_ALT: {
        int k = node;
        for (; R->nd[k].kind == RX_ALT; k = R->nd[k].a) emit(R, a, R->nd[k].b, from, to, enc);
        emit(R, a, k, from, to, enc);
        break;
    }
    case RX_CAT: { /* built from the right: the last part ends at `to` */
        int k = node, end = to;
        for (; R->nd[k].kind == RX_CAT; k = R->nd[k].a) {
            int mid = g4_nfa_state(a);
            emit(R, a, R->nd[k].b, mid, end, enc);
            end = mid;
        }
        emit(R, a, k, from, end, enc);
        break;
    }
    case RX_REP: {
        int cur = from;
        for (int k = 0; k < x->min; k++) {
            int nx = g4_nfa_state(a);
            emit(R, a, x->a, cur, nx, enc);
            cur = nx;
        }
        if (x->max < 0) {
            int loop = g4_nfa_state(a);
            g4_nfa_eps(a, cur, loop);
            emit(R, a, x->a, loop, loop, enc);
            g4_nfa_eps(a, loop, to);
        } else {
            for (int k = x->min; k < x->max; k++) {
                int nx = g4_nfa_state(a);
                g4_nfa_eps(a, cur, to);
                emit(R, a, x->a, cur, nx, enc);
                cur = nx;
            }
            g4_nfa_eps(a, cur, to);
        }
        break;
    }
    }
}

/* Automaton states the construction makes for node (an upper estimate, saturating at cap):
 * counted before anything is built, so that nested counts like (a{1000}){1000} are refused by
 * their product instead of built until memory runs out. */
static double node_states(const rx *R, int node, double cap) {
    const rxnode *x = &R->nd[node];
    double v = 0;
    switch (x->kind) {
    case RX_EMPTY: return 1;
    case RX_SET: return 4.0 * x->nr + 1; /* UTF-8 ranges split into a few chains each */
    case RX_ALT: case RX_CAT: { /* chains, walked as lists (see emit) */
        int k = node;
        for (; R->nd[k].kind == x->kind && v < cap; k = R->nd[k].a) v += node_states(R, R->nd[k].b, cap) + 1;
        v += node_states(R, k, cap);
        break;
    }
    default: { /* RX_REP */
        double copies = x->max < 0 ? (double)x->min + 1 : (double)x->max;
        v = (node_states(R, x->a, cap) + 1) * (copies > 0 ? copies : 1) + 1;
        break;
    }
    }
    return v > cap ? cap : v;
}

int g4_regex_compile(const char *pat, size_t len, g4_str_enc enc, g4_nfa *a, int from, int to, g4_err *err) {
    rx R = {.p = (const unsigned char *)pat, .n = len, .err = err, .b = a->budget};
    int root = parse_alt(&R, 1, NULL);
    if (R.rc == G4_ENOMEM && R.b && R.b->stop) R.rc = g4_fsa_budget_err(R.b, err); /* the memory limit, named */
    if (root >= 0 && R.i < R.n) rx_fail(&R, G4_EINVAL, "unmatched ')'");
    if (!R.rc && a->max_states) {
        double need = node_states(&R, root, 1e15), room = (double)(a->max_states - a->n);
        if (need > room) a->over = 1;
        if (need > room)
            R.rc = g4_err_set(err, G4_EINVAL, "pattern: its repetitions expand to about %.3g automaton states, more than the %d left of the limit "
                              "(the grammar NFA state limit)", need, a->max_states - a->n);
    }
    if (!R.rc) {
        emit(&R, a, root, from, to, enc);
        if (a->oom) R.rc = g4_fsa_budget_err(a->budget, err);
        else if (a->over) R.rc = g4_err_set(err, G4_EINVAL, "pattern: the automaton has more than %d states (the grammar NFA state limit)", a->max_states);
        else if (a->over_edges) R.rc = g4_err_set(err, G4_EINVAL, "pattern: the automaton has more than %zu transitions (the grammar transition limit)", a->max_edges);
    }
    g4_fsa_free(R.b, R.nd);
    g4_fsa_free(R.b, R.rp);
    return R.rc;
}
