/* jinja_value.c — the Jinja engine's value model with Python semantics: the traps (errors,
 * undefined values, the step budget's poll), the arena and byte buffers everything lives in, UTF-8 helpers, truthiness, equality and ordering, str()/repr()
 * exactly as CPython prints them (floats, strings, lists, dicts, None/True/False), conversion
 * from jansson values (key order kept) and json.dumps() output for the tojson filter.
 * Knows nothing about templates' syntax, filters or chat messages. */
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "text/jinja_internal.h"

/* ---------------------------------------------------------------- traps */

_Noreturn void jx_fail(jx_trap *t, int code, const char *fmt, ...)
{
    char msg[G4_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (t->line > 0)
        g4_err_set(&t->err, code, "line %d: %s", t->line, msg);
    else
        g4_err_set(&t->err, code, "%s", msg);
    longjmp(t->jb, 1);
}

_Noreturn void jx_undef_fail(jx_ctx *c, jv u)
{
    switch (u.sub) {
    case JU_NAME: jx_fail(&c->trap, G4_ETEMPLATE, "UndefinedError: '%s' is undefined", u.u.name ? u.u.name : "");
    case JU_ATTR: jx_fail(&c->trap, G4_ETEMPLATE, "UndefinedError: '%s' has no attribute %s", u.u.obj, u.u.name);
    case JU_ELEM: jx_fail(&c->trap, G4_ETEMPLATE, "UndefinedError: %s has no element %s", u.u.obj, u.u.name);
    case JU_UNSAFE: jx_fail(&c->trap, G4_ETEMPLATE, "SecurityError: %s", u.u.name);
    default: jx_fail(&c->trap, G4_ETEMPLATE, "UndefinedError: %s", u.u.name ? u.u.name : "undefined value");
    }
}

uint64_t jx_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void jx_poll(jx_ctx *c)
{
    if (c->steps > c->max_steps)
        jx_fail(&c->trap, G4_ENOMEM, "template render exceeded its budget of %llu evaluation steps",
                (unsigned long long)c->max_steps);
    if (c->cancel && *c->cancel) jx_fail(&c->trap, G4_ECANCELED, "template render cancelled");
    if (c->deadline_ns && jx_now_ns() > c->deadline_ns)
        jx_fail(&c->trap, G4_ECANCELED, "template render timed out after %u ms", (unsigned)c->timeout_ms);
    c->poll_at = c->steps + JX_POLL_STEPS;
    if (c->poll_at > c->max_steps + 1) c->poll_at = c->max_steps + 1;
}

/* ---------------------------------------------------------------- arena */

const char *jx_size_str(char buf[32], size_t n)
{
    if (n >= (1u << 20) && n % (1u << 20) == 0) snprintf(buf, 32, "%zu MiB", n >> 20);
    else snprintf(buf, 32, "%zu bytes", n);
    return buf;
}

typedef struct jx_chunk {
    struct jx_chunk *next;
    size_t used, cap;
    max_align_t data[];
} jx_chunk;

struct jx_arena {
    jx_chunk *head;
    size_t total, limit;
    jx_trap *trap;
    atomic_size_t *shared;  /* see jx_arena_share; a->total of it is ours */
    size_t shared_max;
};

jx_arena *jx_arena_new(size_t limit_bytes)
{
    jx_arena *a = calloc(1, sizeof *a);
    if (a) a->limit = limit_bytes;
    return a;
}

void jx_arena_share(jx_arena *a, atomic_size_t *shared, size_t shared_max)
{
    a->shared = shared;
    a->shared_max = shared_max;
}

size_t jx_arena_total(const jx_arena *a) { return a->total; }

void jx_arena_free(jx_arena *a)
{
    if (!a) return;
    if (a->shared) atomic_fetch_sub(a->shared, a->total);
    jx_chunk *c = a->head;
    while (c) {
        jx_chunk *n = c->next;
        free(c);
        c = n;
    }
    free(a);
}

void jx_arena_set_trap(jx_arena *a, jx_trap *t) { a->trap = t; }

void *jx_alloc(jx_arena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (n == 0) n = 16;
    jx_chunk *c = a->head;
    if (!c || c->cap - c->used < n) {
        size_t cap = 64 * 1024;
        if (a->total > 4 * cap) cap = a->total / 4;
        if (cap < n) cap = n;
        if (a->total + cap > a->limit) {
            char sz[32];
            if (a->trap) jx_fail(a->trap, G4_ENOMEM, "template working memory limit (%s) exceeded", jx_size_str(sz, a->limit));
            return NULL;
        }
        if (a->shared && atomic_fetch_add(a->shared, cap) + cap > a->shared_max) {
            atomic_fetch_sub(a->shared, cap);
            char sz[32];
            if (a->trap)
                jx_fail(a->trap, G4_EBUSY, "the template renders in progress already use their shared memory budget (%s)",
                        jx_size_str(sz, a->shared_max));
            return NULL;
        }
        jx_chunk *nc = malloc(sizeof *nc + cap);
        if (!nc) {
            if (a->shared) atomic_fetch_sub(a->shared, cap);
            if (a->trap) jx_fail(a->trap, G4_ENOMEM, "out of memory in the template engine");
            return NULL;
        }
        nc->used = 0;
        nc->cap = cap;
        a->total += cap;
        /* keep the partly used head in front when the new chunk is a one-off big block */
        if (c && cap == n) {
            nc->next = c->next;
            c->next = nc;
            nc->used = n;
            memset(nc->data, 0, n);
            return nc->data;
        }
        nc->next = c;
        a->head = nc;
        c = nc;
    }
    char *p = (char *)c->data + c->used;
    c->used += n;
    memset(p, 0, n);
    return p;
}

char *jx_strdup(jx_arena *a, const char *p, size_t n)
{
    char *s = jx_alloc(a, n + 1);
    if (n) memcpy(s, p, n);
    s[n] = 0;
    return s;
}

/* ---------------------------------------------------------------- buffers */

void jx_buf_init(jx_buf *b, jx_arena *a)
{
    b->a = a;
    b->p = NULL;
    b->n = b->cap = 0;
}

static void buf_grow(jx_buf *b, size_t need)
{
    if (b->n + need + 1 <= b->cap) return;
    size_t cap = b->cap ? b->cap * 2 : 64;
    while (cap < b->n + need + 1) cap *= 2;
    char *np = jx_alloc(b->a, cap);
    if (b->n) memcpy(np, b->p, b->n);
    b->p = np;
    b->cap = cap;
}

void jx_buf_put(jx_buf *b, const char *p, size_t n)
{
    if (!n) {
        if (!b->p) buf_grow(b, 0);
        return;
    }
    buf_grow(b, n);
    memcpy(b->p + b->n, p, n);
    b->n += n;
    b->p[b->n] = 0;
}

void jx_buf_puts(jx_buf *b, const char *s) { jx_buf_put(b, s, strlen(s)); }
void jx_buf_putc(jx_buf *b, char c) { jx_buf_put(b, &c, 1); }

void jx_buf_printf(jx_buf *b, const char *fmt, ...)
{
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof tmp) {
        jx_buf_put(b, tmp, (size_t)n);
        return;
    }
    buf_grow(b, (size_t)n);
    va_start(ap, fmt);
    vsnprintf(b->p + b->n, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->n += (size_t)n;
}

void jx_buf_put_cp(jx_buf *b, uint32_t c)
{
    char t[4];
    size_t n;
    if (c < 0x80) { t[0] = (char)c; n = 1; }
    else if (c < 0x800) { t[0] = (char)(0xC0 | (c >> 6)); t[1] = (char)(0x80 | (c & 0x3F)); n = 2; }
    else if (c < 0x10000) {
        t[0] = (char)(0xE0 | (c >> 12)); t[1] = (char)(0x80 | ((c >> 6) & 0x3F));
        t[2] = (char)(0x80 | (c & 0x3F)); n = 3;
    } else {
        t[0] = (char)(0xF0 | (c >> 18)); t[1] = (char)(0x80 | ((c >> 12) & 0x3F));
        t[2] = (char)(0x80 | ((c >> 6) & 0x3F)); t[3] = (char)(0x80 | (c & 0x3F)); n = 4;
    }
    jx_buf_put(b, t, n);
}

/* ---------------------------------------------------------------- UTF-8 */

size_t jx_utf8_dec(const char *p, size_t n, uint32_t *cp)
{
    const unsigned char *s = (const unsigned char *)p;
    unsigned c = s[0];
    size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || len > n) { *cp = c; return 1; }
    uint32_t v = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) { *cp = c; return 1; }
        v = (v << 6) | (s[i] & 0x3F);
    }
    *cp = v;
    return len;
}

size_t jx_utf8_count(const char *p, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (((unsigned char)p[i] & 0xC0) != 0x80) k++;
    return k;
}

/* ---------------------------------------------------------------- constructors */

jv jv_strz(const char *s) { return jv_strn(s, strlen(s)); }

jv jv_undef_hint(const char *hint)
{
    jv v = {0};
    v.t = JV_UNDEF;
    v.sub = JU_HINT;
    v.u.name = hint;
    return v;
}

static const char *obj_type_repr(jv v)
{
    switch (v.t) {
    case JV_NONE: return "None";
    case JV_NS: return "jinja2.utils.Namespace object";
    case JV_LOOP: return "jinja2.runtime.LoopContext object";
    case JV_MACRO: return "jinja2.runtime.Macro object";
    case JV_UNDEF: return "jinja2.runtime.Undefined object";
    case JV_BOOL: return "bool object";
    case JV_INT: return "int object";
    case JV_FLOAT: return "float object";
    case JV_STR: return "str object";
    case JV_LIST: return v.l->is_range ? "range object" : "list object";
    case JV_TUPLE: return "tuple object";
    case JV_DICT: return "dict object";
    default: return "builtin_function_or_method object";
    }
}

jv jv_undef_attr(jx_ctx *c, jv obj, jv key)
{
    jv v = {0};
    v.t = JV_UNDEF;
    v.sub = key.t == JV_STR ? JU_ATTR : JU_ELEM;
    jx_buf b;
    jx_buf_init(&b, c->a);
    jv_repr(c, &b, key);
    v.u.name = b.p ? b.p : "";
    v.u.obj = obj_type_repr(obj);
    return v;
}

jx_list *jx_list_new(jx_arena *a, size_t cap)
{
    jx_list *l = jx_alloc(a, sizeof *l);
    if (cap) {
        l->v = jx_alloc(a, cap * sizeof(jv));
        l->cap = cap;
    }
    return l;
}

void jx_list_push(jx_arena *a, jx_list *l, jv v)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 8;
        jv *nv = jx_alloc(a, cap * sizeof(jv));
        if (l->n) memcpy(nv, l->v, l->n * sizeof(jv));
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = v;
}

jv jv_list(jx_list *l) { jv v = {0}; v.t = JV_LIST; v.l = l; return v; }
jv jv_tuple(jx_list *l) { jv v = {0}; v.t = JV_TUPLE; v.l = l; return v; }
jv jv_dict(jx_dict *d) { jv v = {0}; v.t = JV_DICT; v.d = d; return v; }

jx_dict *jx_dict_new(jx_arena *a, size_t cap)
{
    jx_dict *d = jx_alloc(a, sizeof *d);
    if (cap) {
        d->k = jx_alloc(a, cap * sizeof(jv));
        d->v = jx_alloc(a, cap * sizeof(jv));
        d->cap = cap;
    }
    return d;
}

jv *jx_dict_get(const jx_dict *d, jv k)
{
    for (size_t i = 0; i < d->n; i++)
        if (jv_eq(d->k[i], k)) return &d->v[i];
    return NULL;
}

jv *jx_dict_gets(const jx_dict *d, const char *k, size_t n)
{
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i].t == JV_STR && d->k[i].s.n == n && memcmp(d->k[i].s.p, k, n) == 0)
            return &d->v[i];
    return NULL;
}

void jx_dict_set(jx_arena *a, jx_dict *d, jv k, jv v)
{
    jv *slot = jx_dict_get(d, k);
    if (slot) {
        *slot = v;
        return;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 8;
        jv *nk = jx_alloc(a, cap * sizeof(jv)), *nv = jx_alloc(a, cap * sizeof(jv));
        if (d->n) {
            memcpy(nk, d->k, d->n * sizeof(jv));
            memcpy(nv, d->v, d->n * sizeof(jv));
        }
        d->k = nk;
        d->v = nv;
        d->cap = cap;
    }
    d->k[d->n] = k;
    d->v[d->n] = v;
    d->n++;
}

/* ---------------------------------------------------------------- Python semantics */

bool jv_truthy(jv v)
{
    switch (v.t) {
    case JV_UNDEF: case JV_NONE: return false;
    case JV_BOOL: return v.b;
    case JV_INT: return v.i != 0;
    case JV_FLOAT: return v.f != 0.0;
    case JV_STR: return v.s.n != 0;
    case JV_LIST: case JV_TUPLE: return v.l->gen || v.l->n != 0;
    case JV_DICT: return v.d->n != 0;
    default: return true;
    }
}

bool jv_is_num(jv v) { return v.t == JV_BOOL || v.t == JV_INT || v.t == JV_FLOAT; }

double jv_num(jv v)
{
    return v.t == JV_FLOAT ? v.f : v.t == JV_INT ? (double)v.i : v.t == JV_BOOL ? (double)v.b : 0.0;
}

bool jv_eq(jv a, jv b)
{
    if (jv_is_num(a) && jv_is_num(b)) {
        if (a.t != JV_FLOAT && b.t != JV_FLOAT) {
            int64_t x = a.t == JV_BOOL ? a.b : a.i, y = b.t == JV_BOOL ? b.b : b.i;
            return x == y;
        }
        return jv_num(a) == jv_num(b);
    }
    if (a.t != b.t) return false;
    switch (a.t) {
    case JV_UNDEF: case JV_NONE: return true;
    case JV_STR: return a.s.n == b.s.n && memcmp(a.s.p, b.s.p, a.s.n) == 0;
    case JV_LIST: case JV_TUPLE:
        if (a.l->gen || b.l->gen) return a.l == b.l; /* generators compare by identity */
        if (a.l->n != b.l->n) return false;
        for (size_t i = 0; i < a.l->n; i++)
            if (!jv_eq(jx_list_at(a.l, i), jx_list_at(b.l, i))) return false;
        return true;
    case JV_DICT:
        if (a.d->n != b.d->n) return false;
        for (size_t i = 0; i < a.d->n; i++) {
            jv *o = jx_dict_get(b.d, a.d->k[i]);
            if (!o || !jv_eq(a.d->v[i], *o)) return false;
        }
        return true;
    case JV_NS: return a.d == b.d;
    case JV_MACRO: return a.m == b.m;
    case JV_FUNC: return a.fn == b.fn;
    case JV_METHOD: return a.bm == b.bm;
    case JV_LOOP: return a.lp == b.lp;
    default: return false;
    }
}

const char *jv_pytype(jv v)
{
    switch (v.t) {
    case JV_UNDEF: return "Undefined";
    case JV_NONE: return "NoneType";
    case JV_BOOL: return "bool";
    case JV_INT: return "int";
    case JV_FLOAT: return "float";
    case JV_STR: return "str";
    case JV_LIST: return v.l->is_range ? "range" : v.l->gen ? "generator" : "list";
    case JV_TUPLE: return "tuple";
    case JV_DICT: return "dict";
    case JV_NS: return "Namespace";
    case JV_MACRO: return "Macro";
    case JV_LOOP: return "LoopContext";
    case JV_METHOD: return "builtin_function_or_method";
    default: return "function";
    }
}

int jv_cmp(jx_ctx *c, jv a, jv b, const char *opname)
{
    if (a.t == JV_UNDEF) jx_undef_fail(c, a);
    if (b.t == JV_UNDEF) jx_undef_fail(c, b);
    if (jv_is_num(a) && jv_is_num(b)) {
        if (a.t != JV_FLOAT && b.t != JV_FLOAT) {
            int64_t x = a.t == JV_BOOL ? a.b : a.i, y = b.t == JV_BOOL ? b.b : b.i;
            return x < y ? -1 : x > y;
        }
        double x = jv_num(a), y = jv_num(b);
        if (isnan(x) || isnan(y)) return 2; /* every ordering is false */
        return x < y ? -1 : x > y;
    }
    if (a.t == JV_STR && b.t == JV_STR) {
        size_t n = a.s.n < b.s.n ? a.s.n : b.s.n;
        int r = n ? memcmp(a.s.p, b.s.p, n) : 0; /* UTF-8 byte order == code point order */
        if (r) return r < 0 ? -1 : 1;
        return a.s.n < b.s.n ? -1 : a.s.n > b.s.n;
    }
    if ((a.t == JV_LIST || a.t == JV_TUPLE) && a.t == b.t) {
        size_t n = a.l->n < b.l->n ? a.l->n : b.l->n;
        for (size_t i = 0; i < n; i++) {
            jv x = jx_list_at(a.l, i), y = jx_list_at(b.l, i);
            if (!jv_eq(x, y)) return jv_cmp(c, x, y, opname);
        }
        return a.l->n < b.l->n ? -1 : a.l->n > b.l->n;
    }
    jx_fail(&c->trap, G4_ETEMPLATE, "TypeError: '%s' not supported between instances of '%s' and '%s'",
            opname, jv_pytype(a), jv_pytype(b));
}

/* ---------------------------------------------------------------- printing */

void jx_float_repr(jx_buf *b, double f)
{
    if (isnan(f)) { jx_buf_puts(b, "nan"); return; }
    if (isinf(f)) { jx_buf_puts(b, f < 0 ? "-inf" : "inf"); return; }
    if (f == 0) { jx_buf_puts(b, signbit(f) ? "-0.0" : "0.0"); return; }
    char tmp[64];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, f);
        if (strtod(tmp, NULL) == f) break;
    }
    const char *p = tmp;
    if (*p == '-') { jx_buf_putc(b, '-'); p++; }
    char digits[32];
    int nd = 0;
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9') digits[nd++] = *p;
    int e = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = 0;
    if (e >= -4 && e < 16) {
        if (e >= 0) {
            for (int i = 0; i <= e; i++) jx_buf_putc(b, i < nd ? digits[i] : '0');
            jx_buf_putc(b, '.');
            if (nd > e + 1) jx_buf_put(b, digits + e + 1, (size_t)(nd - e - 1));
            else jx_buf_putc(b, '0');
        } else {
            jx_buf_puts(b, "0.");
            for (int i = 0; i < -e - 1; i++) jx_buf_putc(b, '0');
            jx_buf_put(b, digits, (size_t)nd);
        }
    } else {
        jx_buf_putc(b, digits[0]);
        if (nd > 1) {
            jx_buf_putc(b, '.');
            jx_buf_put(b, digits + 1, (size_t)(nd - 1));
        }
        jx_buf_printf(b, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
    }
}

void jx_str_repr(jx_buf *b, const char *p, size_t n)
{
    bool sq = memchr(p, '\'', n) != NULL, dq = memchr(p, '"', n) != NULL;
    char q = (sq && !dq) ? '"' : '\'';
    jx_buf_putc(b, q);
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        size_t l = jx_utf8_dec(p + i, n - i, &cp);
        if (cp == (uint32_t)q || cp == '\\') { jx_buf_putc(b, '\\'); jx_buf_putc(b, (char)cp); }
        else if (cp == '\t') jx_buf_puts(b, "\\t");
        else if (cp == '\n') jx_buf_puts(b, "\\n");
        else if (cp == '\r') jx_buf_puts(b, "\\r");
        else if (cp < 0x20 || cp == 0x7F) jx_buf_printf(b, "\\x%02x", cp);
        else if (cp < 0x7F) jx_buf_putc(b, (char)cp);
        else if (jx_isprintable_cp(cp)) jx_buf_put(b, p + i, l);
        else if (cp <= 0xFF) jx_buf_printf(b, "\\x%02x", cp);
        else if (cp <= 0xFFFF) jx_buf_printf(b, "\\u%04x", cp);
        else jx_buf_printf(b, "\\U%08x", cp);
        i += l;
    }
    jx_buf_putc(b, q);
}

static void check_depth(jx_ctx *c)
{
    if (c->depth > JX_MAX_DEPTH)
        jx_fail(&c->trap, G4_ETEMPLATE, "RecursionError: value nesting too deep");
}

void jv_repr(jx_ctx *c, jx_buf *b, jv v)
{
    switch (v.t) {
    case JV_STR: jx_str_repr(b, v.s.p, v.s.n); return;
    case JV_UNDEF: jx_buf_puts(b, "Undefined"); return;
    case JV_LIST: case JV_TUPLE: {
        if (v.l->is_range) {
            if (v.l->rs == 1) jx_buf_printf(b, "range(%lld, %lld)", (long long)v.l->r0, (long long)v.l->r1);
            else jx_buf_printf(b, "range(%lld, %lld, %lld)", (long long)v.l->r0, (long long)v.l->r1, (long long)v.l->rs);
            return;
        }
        if (v.l->gen)
            jx_fail(&c->trap, G4_EUNSUPPORTED, "printing a generator (the result of map/select/reject/unique/reverse) is not supported; add |list");
        c->depth++;
        check_depth(c);
        if (v.l->view) jx_buf_printf(b, "%s(", v.l->view);
        jx_buf_putc(b, v.t == JV_LIST ? '[' : '(');
        for (size_t i = 0; i < v.l->n; i++) {
            if (i) jx_buf_puts(b, ", ");
            jv_repr(c, b, v.l->v[i]);
        }
        if (v.t == JV_TUPLE && v.l->n == 1) jx_buf_putc(b, ',');
        jx_buf_putc(b, v.t == JV_LIST ? ']' : ')');
        if (v.l->view) jx_buf_putc(b, ')');
        c->depth--;
        return;
    }
    case JV_DICT: case JV_NS: {
        c->depth++;
        check_depth(c);
        if (v.t == JV_NS) jx_buf_puts(b, "<Namespace ");
        jx_buf_putc(b, '{');
        for (size_t i = 0; i < v.d->n; i++) {
            if (i) jx_buf_puts(b, ", ");
            jv_repr(c, b, v.d->k[i]);
            jx_buf_puts(b, ": ");
            jv_repr(c, b, v.d->v[i]);
        }
        jx_buf_putc(b, '}');
        if (v.t == JV_NS) jx_buf_putc(b, '>');
        c->depth--;
        return;
    }
    case JV_MACRO: jx_buf_printf(b, "<Macro '%s'>", v.m->name ? v.m->name : "caller"); return;
    case JV_LOOP: jx_buf_printf(b, "<LoopContext %zu/%zu>", v.lp->index0 + 1, v.lp->length); return;
    case JV_FUNC: case JV_METHOD:
        jx_fail(&c->trap, G4_EUNSUPPORTED, "printing a function object is not supported");
    default: jv_str(c, b, v); return;
    }
}

void jv_str(jx_ctx *c, jx_buf *b, jv v)
{
    switch (v.t) {
    case JV_UNDEF: return;
    case JV_NONE: jx_buf_puts(b, "None"); return;
    case JV_BOOL: jx_buf_puts(b, v.b ? "True" : "False"); return;
    case JV_INT: jx_buf_printf(b, "%lld", (long long)v.i); return;
    case JV_FLOAT: jx_float_repr(b, v.f); return;
    case JV_STR: jx_buf_put(b, v.s.p, v.s.n); return;
    default: jv_repr(c, b, v); return;
    }
}

jv jv_to_string(jx_ctx *c, jv v)
{
    if (v.t == JV_STR) return v;
    jx_buf b;
    jx_buf_init(&b, c->a);
    jv_str(c, &b, v);
    return jv_strn(b.p ? b.p : "", b.n);
}

/* ---------------------------------------------------------------- JSON */

jv jv_from_json(jx_ctx *c, const json_t *j)
{
    if (!j) return jv_none();
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        c->depth++;
        check_depth(c);
        jx_dict *d = jx_dict_new(c->a, json_object_size(j));
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)j, k, v) {
            jx_dict_set(c->a, d, jv_strn(jx_strdup(c->a, k, strlen(k)), strlen(k)), jv_from_json(c, v));
        }
        c->depth--;
        return jv_dict(d);
    }
    case JSON_ARRAY: {
        c->depth++;
        check_depth(c);
        jx_list *l = jx_list_new(c->a, json_array_size(j));
        for (size_t i = 0; i < json_array_size(j); i++) jx_list_push(c->a, l, jv_from_json(c, json_array_get(j, i)));
        c->depth--;
        return jv_list(l);
    }
    case JSON_STRING: {
        size_t n = json_string_length(j);
        return jv_strn(jx_strdup(c->a, json_string_value(j), n), n);
    }
    case JSON_INTEGER: return jv_int((int64_t)json_integer_value(j));
    case JSON_REAL: return jv_float(json_real_value(j));
    case JSON_TRUE: return jv_bool(true);
    case JSON_FALSE: return jv_bool(false);
    default: return jv_none();
    }
}

static void json_str(jx_buf *b, const char *p, size_t n)
{
    jx_buf_putc(b, '"');
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)p[i];
        switch (ch) {
        case '"': jx_buf_puts(b, "\\\""); break;
        case '\\': jx_buf_puts(b, "\\\\"); break;
        case '\n': jx_buf_puts(b, "\\n"); break;
        case '\r': jx_buf_puts(b, "\\r"); break;
        case '\t': jx_buf_puts(b, "\\t"); break;
        case '\b': jx_buf_puts(b, "\\b"); break;
        case '\f': jx_buf_puts(b, "\\f"); break;
        default:
            if (ch < 0x20) jx_buf_printf(b, "\\u%04x", ch);
            else jx_buf_putc(b, (char)ch);
        }
    }
    jx_buf_putc(b, '"');
}

static void json_key(jx_ctx *c, jx_buf *b, jv k)
{
    switch (k.t) {
    case JV_STR: json_str(b, k.s.p, k.s.n); return;
    case JV_NONE: jx_buf_puts(b, "\"null\""); return;
    case JV_BOOL: jx_buf_puts(b, k.b ? "\"true\"" : "\"false\""); return;
    case JV_INT: jx_buf_printf(b, "\"%lld\"", (long long)k.i); return;
    case JV_FLOAT: {
        jx_buf t;
        jx_buf_init(&t, c->a);
        if (isnan(k.f)) jx_buf_puts(&t, "NaN");
        else if (isinf(k.f)) jx_buf_puts(&t, k.f < 0 ? "-Infinity" : "Infinity");
        else jx_float_repr(&t, k.f);
        json_str(b, t.p, t.n);
        return;
    }
    default:
        jx_fail(&c->trap, G4_ETEMPLATE, "TypeError: keys must be str, int, float, bool or None, not %s", jv_pytype(k));
    }
}

static void json_nl(jx_buf *b, int indent, int level)
{
    jx_buf_putc(b, '\n');
    for (int i = 0; i < indent * level; i++) jx_buf_putc(b, ' ');
}

static void tojson_rec(jx_ctx *c, jx_buf *b, jv v, int indent, const char *isep, const char *ksep,
                       bool sort_keys, int level)
{
    switch (v.t) {
    case JV_NONE: jx_buf_puts(b, "null"); return;
    case JV_BOOL: jx_buf_puts(b, v.b ? "true" : "false"); return;
    case JV_INT: jx_buf_printf(b, "%lld", (long long)v.i); return;
    case JV_FLOAT:
        if (isnan(v.f)) jx_buf_puts(b, "NaN");
        else if (isinf(v.f)) jx_buf_puts(b, v.f < 0 ? "-Infinity" : "Infinity");
        else jx_float_repr(b, v.f);
        return;
    case JV_STR: json_str(b, v.s.p, v.s.n); return;
    case JV_LIST: case JV_TUPLE:
        if (v.l->is_range || v.l->gen) break;
        if (v.l->n == 0) { jx_buf_puts(b, "[]"); return; }
        c->depth++;
        check_depth(c);
        jx_buf_putc(b, '[');
        for (size_t i = 0; i < v.l->n; i++) {
            if (i) jx_buf_puts(b, isep);
            if (indent >= 0) json_nl(b, indent, level + 1);
            tojson_rec(c, b, v.l->v[i], indent, isep, ksep, sort_keys, level + 1);
        }
        if (indent >= 0) json_nl(b, indent, level);
        jx_buf_putc(b, ']');
        c->depth--;
        return;
    case JV_DICT: {
        if (v.d->n == 0) { jx_buf_puts(b, "{}"); return; }
        c->depth++;
        check_depth(c);
        size_t n = v.d->n;
        size_t *ord = jx_alloc(c->a, n * sizeof *ord);
        for (size_t i = 0; i < n; i++) ord[i] = i;
        if (sort_keys) /* stable insertion sort: keys are few */
            for (size_t i = 1; i < n; i++) {
                size_t x = ord[i], j = i;
                while (j > 0 && jv_cmp(c, v.d->k[x], v.d->k[ord[j - 1]], "<") < 0) {
                    ord[j] = ord[j - 1];
                    j--;
                }
                ord[j] = x;
            }
        jx_buf_putc(b, '{');
        for (size_t i = 0; i < n; i++) {
            if (i) jx_buf_puts(b, isep);
            if (indent >= 0) json_nl(b, indent, level + 1);
            json_key(c, b, v.d->k[ord[i]]);
            jx_buf_puts(b, ksep);
            tojson_rec(c, b, v.d->v[ord[i]], indent, isep, ksep, sort_keys, level + 1);
        }
        if (indent >= 0) json_nl(b, indent, level);
        jx_buf_putc(b, '}');
        c->depth--;
        return;
    }
    default: break;
    }
    jx_fail(&c->trap, G4_ETEMPLATE, "TypeError: Object of type %s is not JSON serializable", jv_pytype(v));
}

void jv_tojson(jx_ctx *c, jx_buf *b, jv v, int indent, const char *item_sep, const char *key_sep,
               bool sort_keys)
{
    if (!item_sep) item_sep = indent >= 0 ? "," : ", ";
    if (!key_sep) key_sep = ": ";
    tojson_rec(c, b, v, indent, item_sep, key_sep, sort_keys, 0);
}
