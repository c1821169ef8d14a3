/* jinja_builtins.c — what templates can reach on values: attribute and item access with the
 * ImmutableSandboxedEnvironment's rules (getattr falls back to getitem and back; unsafe and
 * mutating methods refuse to run), slicing, iteration, Python string/dict/list methods, the
 * loop object, and the global functions (range, namespace, dict, raise_exception,
 * strftime_now). Python's str methods work on code points with CPython's Unicode tables.
 * Knows nothing about the AST; filters and tests live in jinja_filters.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "text/jinja_internal.h"

static jv unsafe(jx_ctx *c, jv obj, const char *name)
{
    jv v = {0};
    v.t = JV_UNDEF;
    v.sub = JU_UNSAFE;
    char *m = jx_alloc(c->a, strlen(name) + 80);
    sprintf(m, "access to attribute '%s' of '%s' object is unsafe.", name, jv_pytype(obj));
    v.u.name = m;
    return v;
}

/* ---------------------------------------------------------------- strings */

typedef struct cps {  /* a string as code points with byte offsets */
    size_t n;
    uint32_t *cp;
    size_t *off;      /* n + 1 entries */
} cps;

static cps decode(jx_ctx *c, jv s)
{
    cps r;
    r.cp = jx_alloc(c->a, (s.s.n + 1) * sizeof(uint32_t));
    r.off = jx_alloc(c->a, (s.s.n + 1) * sizeof(size_t));
    size_t i = 0, k = 0;
    while (i < s.s.n) {
        r.off[k] = i;
        i += jx_utf8_dec(s.s.p + i, s.s.n - i, &r.cp[k]);
        k++;
    }
    r.off[k] = i;
    r.n = k;
    return r;
}

static jv substr(jv s, const cps *d, size_t from, size_t to)
{
    return jv_strn(s.s.p + d->off[from], d->off[to] - d->off[from]);
}

static bool is_cased(uint32_t cp)
{
    uint32_t t[3];
    int k = jx_lower_cp(cp, t);
    if (k != 1 || t[0] != cp) return true;
    k = jx_upper_cp(cp, t);
    return k != 1 || t[0] != cp;
}

static jv case_map(jx_ctx *c, jv s, bool upper)
{
    bool ascii = true;
    for (size_t i = 0; i < s.s.n; i++)
        if ((unsigned char)s.s.p[i] >= 0x80) { ascii = false; break; }
    jx_buf b;
    jx_buf_init(&b, c->a);
    jx_buf_put(&b, "", 0);
    if (ascii) {
        for (size_t i = 0; i < s.s.n; i++) {
            char ch = s.s.p[i];
            if (upper && ch >= 'a' && ch <= 'z') ch = (char)(ch - 32);
            if (!upper && ch >= 'A' && ch <= 'Z') ch = (char)(ch + 32);
            jx_buf_putc(&b, ch);
        }
        return jv_strn(b.p, b.n);
    }
    cps d = decode(c, s);
    for (size_t i = 0; i < d.n; i++) {
        uint32_t out[3];
        int k;
        if (!upper && d.cp[i] == 0x3A3) { /* final sigma, as CPython does it */
            bool before = i > 0 && is_cased(d.cp[i - 1]);
            bool after = i + 1 < d.n && is_cased(d.cp[i + 1]);
            out[0] = (before && !after) ? 0x3C2 : 0x3C3;
            k = 1;
        } else {
            k = upper ? jx_upper_cp(d.cp[i], out) : jx_lower_cp(d.cp[i], out);
        }
        for (int j = 0; j < k; j++) jx_buf_put_cp(&b, out[j]);
    }
    return jv_strn(b.p, b.n);
}

jv jx_str_lower(jx_ctx *c, jv s) { return case_map(c, jv_to_string(c, s), false); }
jv jx_str_upper(jx_ctx *c, jv s) { return case_map(c, jv_to_string(c, s), true); }

static bool in_set(uint32_t cp, const cps *set)
{
    for (size_t i = 0; i < set->n; i++)
        if (set->cp[i] == cp) return true;
    return false;
}

/* which: 1 left, 2 right, 3 both */
jv jx_str_strip(jx_ctx *c, jv s, const char *chars, size_t nchars, bool have_chars, int which)
{
    cps d = decode(c, s);
    cps set = {0};
    if (have_chars) set = decode(c, jv_strn(chars, nchars));
    size_t a = 0, b = d.n;
    if (which & 1)
        while (a < b && (have_chars ? in_set(d.cp[a], &set) : jx_isspace_cp(d.cp[a]))) a++;
    if (which & 2)
        while (b > a && (have_chars ? in_set(d.cp[b - 1], &set) : jx_isspace_cp(d.cp[b - 1]))) b--;
    return substr(s, &d, a, b);
}

static jv need_str(jx_ctx *c, jv v, const char *what)
{
    if (v.t != JV_STR)
        jx_fail(&c->trap, G4_ETEMPLATE, "TypeError: %s must be str, not %s", what, jv_pytype(v));
    return v;
}

static bool bytes_at(jv s, size_t pos, jv sub)
{
    return pos + sub.s.n <= s.s.n && memcmp(s.s.p + pos, sub.s.p, sub.s.n) == 0;
}

static jv str_split(jx_ctx *c, jv s, jv sep, int64_t maxsplit, bool right)
{
    jx_list *l = jx_list_new(c->a, 4);
    if (sep.t == JV_NONE || sep.t == JV_UNDEF) {
        cps d = decode(c, s);
        /* whitespace split: collect runs */
        size_t *st = jx_alloc(c->a, (d.n + 1) * sizeof(size_t)), *en = jx_alloc(c->a, (d.n + 1) * sizeof(size_t));
        size_t nw = 0;
        for (size_t i = 0; i < d.n;) {
            while (i < d.n && jx_isspace_cp(d.cp[i])) i++;
            if (i >= d.n) break;
            size_t j = i;
            while (j < d.n && !jx_isspace_cp(d.cp[j])) j++;
            st[nw] = i;
            en[nw] = j;
            nw++;
            i = j;
        }
        if (maxsplit < 0 || (size_t)maxsplit >= nw) {
            for (size_t w = 0; w < nw; w++) jx_list_push(c->a, l, substr(s, &d, st[w], en[w]));
        } else if (!right) {
            for (size_t w = 0; w < (size_t)maxsplit; w++) jx_list_push(c->a, l, substr(s, &d, st[w], en[w]));
            /* remainder: from the next word start to the end, trailing whitespace kept */
            jx_list_push(c->a, l, substr(s, &d, st[maxsplit], d.n));
        } else {
            size_t first = nw - (size_t)maxsplit;
            jx_list_push(c->a, l, substr(s, &d, 0, en[first - 1]));
            for (size_t w = first; w < nw; w++) jx_list_push(c->a, l, substr(s, &d, st[w], en[w]));
        }
        return jv_list(l);
    }
    need_str(c, sep, "separator");
    if (sep.s.n == 0) jx_fail(&c->trap, G4_ETEMPLATE, "ValueError: empty separator");
    if (!right) {
        size_t start = 0, pos = 0;
        int64_t k = 0;
        while (pos + sep.s.n <= s.s.n && (maxsplit < 0 || k < maxsplit)) {
            if (bytes_at(s, pos, sep)) {
                jx_list_push(c->a, l, jv_strn(s.s.p + start, pos - start));
                pos += sep.s.n;
                start = pos;
                k++;
            } else {
                pos++;
            }
        }
        jx_list_push(c->a, l, jv_strn(s.s.p + start, s.s.n - start));
        return jv_list(l);
    }
    /* rsplit with a separator: split from the right, then reverse */
    jx_list *rev = jx_list_new(c->a, 4);
    size_t end = s.s.n;
    int64_t k = 0;
    size_t pos = s.s.n;
    while (pos >= sep.s.n && (maxsplit < 0 || k < maxsplit)) {
        if (bytes_at(s, pos - sep.s.n, sep)) {
            jx_list_push(c->a, rev, jv_strn(s.s.p + pos, end - pos));
            pos -= sep.s.n;
            end = pos;
            k++;
        } else {
            pos--;
        }
    }
    jx_list_push(c->a, rev, jv_strn(s.s.p, end));
    for (size_t i = rev->n; i > 0; i--) jx_list_push(c->a, l, rev->v[i - 1]);
    return jv_list(l);
}

static jv str_replace(jx_ctx *c, jv s, jv old, jv new, int64_t count)
{
    need_str(c, old, "replace() argument 1");
    need_str(c, new, "replace() argument 2");
    jx_buf b;
    jx_buf_init(&b, c->a);
    jx_buf_put(&b, "", 0);
    int64_t k = 0;
    if (old.s.n == 0) { /* insert between code points */
        cps d = decode(c, s);
        for (size_t i = 0; i <= d.n; i++) {
            if (count < 0 || k < count) {
                jx_buf_put(&b, new.s.p, new.s.n);
                k++;
            }
            if (i < d.n) jx_buf_put(&b, s.s.p + d.off[i], d.off[i + 1] - d.off[i]);
        }
        return jv_strn(b.p, b.n);
    }
    size_t pos = 0;
    while (pos < s.s.n) {
        if ((count < 0 || k < count) && bytes_at(s, pos, old)) {
            jx_buf_put(&b, new.s.p, new.s.n);
            pos += old.s.n;
            k++;
        } else {
            jx_buf_putc(&b, s.s.p[pos]);
            pos++;
        }
    }
    return jv_strn(b.p, b.n);
}

jv jx_str_replace(jx_ctx *c, jv s, jv old, jv new, int64_t count) { return str_replace(c, s, old, new, count); }

/* Python str.splitlines() (keepends=False) */
jx_list *jx_splitlines(jx_ctx *c, jv s)
{
    cps d = decode(c, s);
    jx_list *l = jx_list_new(c->a, 4);
    size_t start = 0;
    for (size_t i = 0; i < d.n; i++) {
        uint32_t cp = d.cp[i];
        if (cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || cp == 0x1C || cp == 0x1D || cp == 0x1E ||
            cp == 0x85 || cp == 0x2028 || cp == 0x2029) {
            jx_list_push(c->a, l, substr(s, &d, start, i));
            if (cp == '\r' && i + 1 < d.n && d.cp[i + 1] == '\n') i++;
            start = i + 1;
        }
    }
    if (start < d.n) jx_list_push(c->a, l, substr(s, &d, start, d.n));
    return l;
}

static int64_t find_cp(jx_ctx *c, jv s, jv sub, bool rev)
{
    need_str(c, sub, "find() argument");
    if (sub.s.n > s.s.n) return -1;
    size_t hit = (size_t)-1;
    for (size_t i = 0; i + sub.s.n <= s.s.n; i++)
        if (bytes_at(s, i, sub) && ((unsigned char)s.s.p[i] & 0xC0) != 0x80) {
            hit = i;
            if (!rev) break;
        }
    if (hit == (size_t)-1) return -1;
    return (int64_t)jx_utf8_count(s.s.p, hit);
}

/* ---------------------------------------------------------------- attribute tables */

static bool in_list(const char *name, const char *const *names)
{
    for (int i = 0; names[i]; i++)
        if (!strcmp(names[i], name)) return true;
    return false;
}

static const char *const k_str_methods[] = {
    "capitalize", "casefold", "center", "count", "encode", "endswith", "expandtabs", "find", "format",
    "format_map", "index", "isalnum", "isalpha", "isascii", "isdecimal", "isdigit", "isidentifier",
    "islower", "isnumeric", "isprintable", "isspace", "istitle", "isupper", "join", "ljust", "lower",
    "lstrip", "maketrans", "partition", "removeprefix", "removesuffix", "replace", "rfind", "rindex",
    "rjust", "rpartition", "rsplit", "rstrip", "split", "splitlines", "startswith", "strip", "swapcase",
    "title", "translate", "upper", "zfill", NULL};
static const char *const k_dict_methods[] = {"clear", "copy", "fromkeys", "get", "items", "keys", "pop",
                                             "popitem", "setdefault", "update", "values", NULL};
static const char *const k_dict_mutating[] = {"clear", "pop", "popitem", "setdefault", "update", NULL};
static const char *const k_list_methods[] = {"append", "clear", "copy", "count", "extend", "index", "insert",
                                             "pop", "remove", "reverse", "sort", NULL};
static const char *const k_list_mutating[] = {"append", "clear", "extend", "insert", "pop", "remove",
                                              "reverse", "sort", NULL};
static const char *const k_tuple_methods[] = {"count", "index", NULL};
static const char *const k_num_attrs[] = {"real", "imag", "numerator", "denominator", "conjugate",
                                          "bit_length", "bit_count", "to_bytes", "from_bytes", "is_integer",
                                          "hex", "fromhex", "as_integer_ratio", NULL};

static jv method(jx_ctx *c, jv self, const char *name)
{
    jx_method *m = jx_alloc(c->a, sizeof *m);
    m->self = self;
    m->name = name;
    jv v = {0};
    v.t = JV_METHOD;
    v.bm = m;
    return v;
}

/* Python attribute of obj if it has one: 1 found (*out), 0 not an attribute */
static int py_attr(jx_ctx *c, jv obj, const char *name, jv *out)
{
    if (name[0] == '_' && name[1] == '_') {
        /* dunder attributes exist on every object and are always unsafe */
        if (obj.t != JV_NS) {
            *out = unsafe(c, obj, name);
            return 1;
        }
    }
    switch (obj.t) {
    case JV_STR:
        if (in_list(name, k_str_methods)) { *out = method(c, obj, name); return 1; }
        return 0;
    case JV_DICT:
        if (in_list(name, k_dict_mutating)) { *out = unsafe(c, obj, name); return 1; }
        if (in_list(name, k_dict_methods)) { *out = method(c, obj, name); return 1; }
        return 0;
    case JV_LIST:
        if (obj.l->is_range) {
            static const char *const rng[] = {"start", "stop", "step", "count", "index", NULL};
            if (!in_list(name, rng)) return 0;
            if (!strcmp(name, "start")) *out = jv_int(obj.l->r0);
            else if (!strcmp(name, "stop")) *out = jv_int(obj.l->r1);
            else if (!strcmp(name, "step")) *out = jv_int(obj.l->rs);
            else *out = method(c, obj, name);
            return 1;
        }
        if (in_list(name, k_list_mutating)) { *out = unsafe(c, obj, name); return 1; }
        if (in_list(name, k_list_methods)) { *out = method(c, obj, name); return 1; }
        return 0;
    case JV_TUPLE:
        if (in_list(name, k_tuple_methods)) { *out = method(c, obj, name); return 1; }
        return 0;
    case JV_BOOL: case JV_INT: case JV_FLOAT:
        if (in_list(name, k_num_attrs))
            jx_fail(&c->trap, G4_EUNSUPPORTED, "the number attribute '%s' is not supported", name);
        return 0;
    case JV_NS: {
        jv *v = jx_dict_gets(obj.d, name, strlen(name));
        if (v) { *out = *v; return 1; }
        return 0;
    }
    case JV_LOOP: {
        jx_loop *lp = obj.lp;
        size_t i = lp->index0, n = lp->length;
        if (!strcmp(name, "index0")) *out = jv_int((int64_t)i);
        else if (!strcmp(name, "index")) *out = jv_int((int64_t)i + 1);
        else if (!strcmp(name, "revindex")) *out = jv_int((int64_t)(n - i));
        else if (!strcmp(name, "revindex0")) *out = jv_int((int64_t)(n - i - 1));
        else if (!strcmp(name, "first")) *out = jv_bool(i == 0);
        else if (!strcmp(name, "last")) *out = jv_bool(i + 1 == n);
        else if (!strcmp(name, "length")) *out = jv_int((int64_t)n);
        else if (!strcmp(name, "depth")) *out = jv_int(lp->depth0 + 1);
        else if (!strcmp(name, "depth0")) *out = jv_int(lp->depth0);
        else if (!strcmp(name, "previtem"))
            *out = i > 0 ? jx_list_at(lp->items, i - 1) : jv_undef_hint("there is no previous item");
        else if (!strcmp(name, "nextitem"))
            *out = i + 1 < n ? jx_list_at(lp->items, i + 1) : jv_undef_hint("there is no next item");
        else if (!strcmp(name, "cycle") || !strcmp(name, "changed")) *out = method(c, obj, name);
        else return 0;
        return 1;
    }
    case JV_MACRO:
        if (!strcmp(name, "name")) { *out = jv_strz(obj.m->name ? obj.m->name : "caller"); return 1; }
        if (!strcmp(name, "arguments") || !strcmp(name, "catch_kwargs") || !strcmp(name, "catch_varargs") ||
            !strcmp(name, "caller"))
            jx_fail(&c->trap, G4_EUNSUPPORTED, "the macro attribute '%s' is not supported", name);
        return 0;
    default: return 0;
    }
}

jv jx_getattr(jx_ctx *c, jv obj, const char *name)
{
    if (obj.t == JV_UNDEF) jx_undef_fail(c, obj);
    jv out;
    if (py_attr(c, obj, name, &out)) return out;
    jv key = jv_strz(name);
    if (obj.t == JV_DICT) {
        jv *v = jx_dict_get(obj.d, key);
        if (v) return *v;
    }
    return jv_undef_attr(c, obj, key);
}

static bool as_index(jv k, int64_t *i)
{
    if (k.t == JV_INT) { *i = k.i; return true; }
    if (k.t == JV_BOOL) { *i = k.b; return true; }
    return false;
}

jv jx_getitem(jx_ctx *c, jv obj, jv key)
{
    if (obj.t == JV_UNDEF) jx_undef_fail(c, obj);
    int64_t i;
    switch (obj.t) {
    case JV_DICT: {
        if (key.t == JV_LIST || key.t == JV_DICT || key.t == JV_NS) break; /* unhashable: TypeError */
        jv *v = jx_dict_get(obj.d, key);
        if (v) return *v;
        return jv_undef_attr(c, obj, key); /* KeyError: no attribute fallback for present keys */
    }
    case JV_LIST: case JV_TUPLE:
        if (as_index(key, &i)) {
            int64_t n = (int64_t)obj.l->n;
            if (i < 0) i += n;
            if (i >= 0 && i < n) return jx_list_at(obj.l, (size_t)i);
            return jv_undef_attr(c, obj, key);
        }
        break;
    case JV_STR:
        if (as_index(key, &i)) {
            cps d = decode(c, obj);
            int64_t n = (int64_t)d.n;
            if (i < 0) i += n;
            if (i >= 0 && i < n) return substr(obj, &d, (size_t)i, (size_t)i + 1);
            return jv_undef_attr(c, obj, key);
        }
        break;
    default: break;
    }
    if (key.t == JV_STR) {
        jv out;
        char *nm = jx_strdup(c->a, key.s.p, key.s.n);
        if (py_attr(c, obj, nm, &out)) return out;
    }
    return jv_undef_attr(c, obj, key);
}

static int64_t clampi(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

jv jx_slice(jx_ctx *c, jv obj, jv start, jv stop, jv step)
{
    if (obj.t == JV_UNDEF) jx_undef_fail(c, obj);
    int64_t st = 1, a, b;
    jv parts[3] = {start, stop, step};
    for (int k = 0; k < 3; k++)
        if (parts[k].t != JV_NONE && parts[k].t != JV_INT && parts[k].t != JV_BOOL)
            jx_fail(&c->trap, G4_ETEMPLATE,
                    "TypeError: slice indices must be integers or None or have an __index__ method");
    if (step.t != JV_NONE) as_index(step, &st);
    if (st == 0) jx_fail(&c->trap, G4_ETEMPLATE, "ValueError: slice step cannot be zero");
    cps d = {0};
    int64_t n;
    if (obj.t == JV_STR) {
        d = decode(c, obj);
        n = (int64_t)d.n;
    } else if (obj.t == JV_LIST || obj.t == JV_TUPLE) {
        n = (int64_t)obj.l->n;
    } else if (obj.t == JV_DICT) {
        /* Jinja compiles slices to a plain Python subscript (no getitem fallback) */
        jx_fail(&c->trap, G4_ETEMPLATE, "TypeError: unhashable type: 'slice'");
    } else {
        jx_fail(&c->trap, G4_ETEMPLATE, "TypeError: '%s' object is not subscriptable", jv_pytype(obj));
    }
    if (st > 0) {
        a = start.t == JV_NONE ? 0 : (as_index(start, &a), a < 0 ? clampi(a + n, 0, n) : clampi(a, 0, n));
        b = stop.t == JV_NONE ? n : (as_index(stop, &b), b < 0 ? clampi(b + n, 0, n) : clampi(b, 0, n));
    } else {
        a = start.t == JV_NONE ? n - 1 : (as_index(start, &a), a < 0 ? clampi(a + n, -1, n - 1) : clampi(a, -1, n - 1));
        b = stop.t == JV_NONE ? -1 : (as_index(stop, &b), b < 0 ? clampi(b + n, -1, n - 1) : clampi(b, -1, n - 1));
    }
    if (obj.t == JV_STR) {
        jx_buf buf;
        jx_buf_init(&buf, c->a);
        jx_buf_put(&buf, "", 0);
        for (int64_t i = a; st > 0 ? i < b : i > b; i += st)
            jx_buf_put(&buf, obj.s.p + d.off[i], d.off[i + 1] - d.off[i]);
        return jv_strn(buf.p, buf.n);
    }
    jx_list *l = jx_list_new(c->a, 0);
    if (obj.l->is_range) { /* a slice of a range is a range: no items either */
        l->is_range = true;
        l->r0 = obj.l->r0 + a * obj.l->rs;
        l->r1 = obj.l->r0 + b * obj.l->rs;
        l->rs = obj.l->rs * st;
        if (st > 0 ? a < b : a > b) l->n = (size_t)((st > 0 ? b - a - 1 : a - b - 1) / (st > 0 ? st : -st) + 1);
    } else {
        for (int64_t i = a; st > 0 ? i < b : i > b; i += st) jx_list_push(c->a, l, obj.l->v[i]);
    }
    jv r = obj;
    r.l = l;
    return r;
}

bool jx_is_iterable(jv v)
{
    return v.t == JV_LIST || v.t == JV_TUPLE || v.t == JV_UNDEF || v.t == JV_DICT || v.t == JV_STR;
}

jv jx_failing_gen(jx_ctx *c, const char *msg)
{
    jx_list *l = jx_list_new(c->a, 0);
    l->gen = true;
    l->gen_error = msg;
    return jv_list(l);
}

jx_list *jx_iterate(jx_ctx *c, jv v)
{
    switch (v.t) {
    case JV_LIST: case JV_TUPLE:
        if (v.l->gen_error) jx_fail(&c->trap, G4_ETEMPLATE, "TypeError: %s", v.l->gen_error);
        if (!v.l->v && v.l->n) { /* a range: its items, once (ranges are immutable) */
            v.l->v = jx_alloc(c->a, v.l->n * sizeof(jv));
            v.l->cap = v.l->n;
            for (size_t i = 0; i < v.l->n; i++) v.l->v[i] = jv_int(v.l->r0 + (int64_t)i * v.l->rs);
        }
        return v.l;
    case JV_UNDEF: return jx_list_new(c->a, 0);
    case JV_DICT: {
        jx_list *l = jx_list_new(c->a, v.d->n);
        for (size_t i = 0; i < v.d->n; i++) jx_list_push(c->a, l, v.d->k[i]);
        return l;
    }
    case JV_STR: {
        cps d = decode(c, v);
        jx_list *l = jx_list_new(c->a, d.n);
        for (size_t i = 0; i < d.n; i++) jx_list_push(c->a, l, substr(v, &d, i, i + 1));
        return l;
    }
    default:
        jx_fail(&c->trap, G4_ETEMPLATE, "TypeError: '%s' object is not iterable", jv_pytype(v));
    }
}

/* ---------------------------------------------------------------- arguments */

jv jx_arg(const jx_args *a, int pos, const char *kw, bool *have)
{
    if (pos >= 0 && pos < a->npos) {
        if (have) *have = true;
        return a->pos[pos];
    }
    for (int i = 0; kw && i < a->nkw; i++)
        if (!strcmp(a->kwn[i], kw)) {
            if (have) *have = true;
            return a->kwv[i];
        }
    if (have) *have = false;
    return jv_undef_name(kw ? kw : "");
}

static void max_args(jx_ctx *c, const jx_args *a, int maxpos, const char *const *kws, const char *what)
{
    if (a->npos > maxpos)
        jx_fail(&c->trap, G4_ETEMPLATE, "TypeError: %s takes at most %d argument(s) (%d given)", what, maxpos, a->npos);
    for (int i = 0; i < a->nkw; i++)
        if (!kws || !in_list(a->kwn[i], kws))
            jx_fail(&c->trap, G4_ETEMPLATE, "TypeError: %s got an unexpected keyword argument '%s'", what, a->kwn[i]);
}

static int64_t int_arg(jx_ctx *c, jv v, const char *what)
{
    int64_t i;
    if (!as_index(v, &i))
        jx_fail(&c->trap, G4_ETEMPLATE, "TypeError: %s must be an integer, not '%s'", what, jv_pytype(v));
    return i;
}

/* ---------------------------------------------------------------- methods */

static jv str_method(jx_ctx *c, jv s, const char *nm, const jx_args *a)
{
    bool have;
    if (!strcmp(nm, "strip") || !strcmp(nm, "lstrip") || !strcmp(nm, "rstrip")) {
        max_args(c, a, 1, NULL, nm);
        jv ch = jx_arg(a, 0, NULL, &have);
        if (have && ch.t != JV_NONE) need_str(c, ch, "strip arg");
        bool hc = have && ch.t == JV_STR;
        return jx_str_strip(c, s, hc ? ch.s.p : NULL, hc ? ch.s.n : 0, hc, nm[0] == 'l' ? 1 : nm[0] == 'r' ? 2 : 3);
    }
    if (!strcmp(nm, "split") || !strcmp(nm, "rsplit")) {
        static const char *const kws[] = {"sep", "maxsplit", NULL};
        max_args(c, a, 2, kws, nm);
        jv sep = jx_arg(a, 0, "sep", &have);
        if (!have) sep = jv_none();
        jv ms = jx_arg(a, 1, "maxsplit", &have);
        return str_split(c, s, sep, have ? int_arg(c, ms, "maxsplit") : -1, nm[0] == 'r');
    }
    if (!strcmp(nm, "startswith") || !strcmp(nm, "endswith")) {
        max_args(c, a, 1, NULL, nm);
        jv p = jx_arg(a, 0, NULL, &have);
        if (!have) jx_fail(&c->trap, G4_ETEMPLATE, "TypeError: %s() takes at least 1 argument (0 given)", nm);
        jx_list one = {0};
        jx_list *cands = &one;
        if (p.t == JV_TUPLE) cands = p.l;
        else if (p.t == JV_STR) { one.n = 1; one.v = &p; }
        else
            jx_fail(&c->trap, G4_ETEMPLATE, "TypeError: %s first arg must be str or a tuple of str, not %s", nm, jv_pytype(p));
        for (size_t i = 0; i < cands->n; i++) {
            jv x = need_str(c, cands->v[i], "tuple for startswith/endswith");
            if (x.s.n > s.s.n) continue;
            if (nm[0] == 's' ? bytes_at(s, 0, x) : bytes_at(s, s.s.n - x.s.n, x)) return jv_bool(true);
        }
        return jv_bool(false);
    }
    if (!strcmp(nm, "upper") || !strcmp(nm, "lower")) {
        max_args(c, a, 0, NULL, nm);
        return case_map(c, s, nm[0] == 'u');
    }
    if (!strcmp(nm, "replace")) {
        max_args(c, a, 3, NULL, nm);
        jv o = jx_arg(a, 0, NULL, &have);
        jv nw = jx_arg(a, 1, NULL, &have);
        if (!have) jx_fail(&c->trap, G4_ETEMPLATE, "TypeError: replace expected at least 2 arguments");
        jv cnt = jx_arg(a, 2, NULL, &have);
        return str_replace(c, s, o, nw, have ? int_arg(c, cnt, "count") : -1);
    }
    if (!strcmp(nm, "find") || !strcmp(nm, "rfind") || !strcmp(nm, "index") || !strcmp(nm, "rindex")) {
        max_args(c, a, 1, NULL, nm);
        int64_t r = find_cp(c, s, jx_arg(a, 0, NULL, NULL), nm[0] == 'r');
        if (r < 0 && strstr(nm, "index")) jx_fail(&c->trap, G4_ETEMPLATE, "ValueError: substring not found");
        return jv_int(r);
    }
    if (!strcmp(nm, "count")) {
        max_args(c, a, 1, NULL, nm);
        jv sub = need_str(c, jx_arg(a, 0, NULL, NULL), "count() argument");
        if (sub.s.n == 0) return jv_int((int64_t)jx_utf8_count(s.s.p, s.s.n) + 1);
        int64_t k = 0;
        for (size_t i = 0; i + sub.s.n <= s.s.n;) {
            if (bytes_at(s, i, sub)) { k++; i += sub.s.n; }
            else i++;
        }
        return jv_int(k);
    }
    if (!strcmp(nm, "join")) {
        max_args(c, a, 1, NULL, nm);
        jx_list *items = jx_iterate(c, jx_arg(a, 0, NULL, NULL));
        jx_buf b;
        jx_buf_init(&b, c->a);
        jx_buf_put(&b, "", 0);
        for (size_t i = 0; i < items->n; i++) {
            if (items->v[i].t != JV_STR)
                jx_fail(&c->trap, G4_ETEMPLATE, "TypeError: sequence item %zu: expected str instance, %s found", i,
                        jv_pytype(items->v[i]));
            if (i) jx_buf_put(&b, s.s.p, s.s.n);
            jx_buf_put(&b, items->v[i].s.p, items->v[i].s.n);
        }
        return jv_strn(b.p, b.n);
    }
    if (!strcmp(nm, "splitlines")) {
        max_args(c, a, 0, NULL, nm);
        return jv_list(jx_splitlines(c, s));
    }
    if (!strcmp(nm, "removeprefix") || !strcmp(nm, "removesuffix")) {
        max_args(c, a, 1, NULL, nm);
        jv x = need_str(c, jx_arg(a, 0, NULL, NULL), nm);
        if (x.s.n <= s.s.n) {
            if (nm[6] == 'p' && bytes_at(s, 0, x)) return jv_strn(s.s.p + x.s.n, s.s.n - x.s.n);
            if (nm[6] == 's' && x.s.n && bytes_at(s, s.s.n - x.s.n, x)) return jv_strn(s.s.p, s.s.n - x.s.n);
        }
        return s;
    }
    if (!strcmp(nm, "isdigit") || !strcmp(nm, "isalpha") || !strcmp(nm, "isalnum") || !strcmp(nm, "isspace") ||
        !strcmp(nm, "isupper") || !strcmp(nm, "islower")) {
        max_args(c, a, 0, NULL, nm);
        cps d = decode(c, s);
        if (d.n == 0) return jv_bool(false);
        bool any_cased = false;
        for (size_t i = 0; i < d.n; i++) {
            uint32_t cp = d.cp[i];
            if (!strcmp(nm, "isspace")) {
                if (!jx_isspace_cp(cp)) return jv_bool(false);
                continue;
            }
            if (cp >= 0x80)
                jx_fail(&c->trap, G4_EUNSUPPORTED, "str.%s() on non-ASCII text is not supported", nm);
            bool dig = cp >= '0' && cp <= '9', up = cp >= 'A' && cp <= 'Z', lo = cp >= 'a' && cp <= 'z';
            if (!strcmp(nm, "isdigit") && !dig) return jv_bool(false);
            if (!strcmp(nm, "isalpha") && !(up || lo)) return jv_bool(false);
            if (!strcmp(nm, "isalnum") && !(up || lo || dig)) return jv_bool(false);
            if (!strcmp(nm, "isupper")) { if (lo) return jv_bool(false); any_cased |= up; }
            if (!strcmp(nm, "islower")) { if (up) return jv_bool(false); any_cased |= lo; }
        }
        if (!strcmp(nm, "isupper") || !strcmp(nm, "islower")) return jv_bool(any_cased);
        return jv_bool(true);
    }
    if (!strcmp(nm, "title") || !strcmp(nm, "capitalize")) {
        max_args(c, a, 0, NULL, nm);
        for (size_t i = 0; i < s.s.n; i++)
            if ((unsigned char)s.s.p[i] >= 0x80)
                jx_fail(&c->trap, G4_EUNSUPPORTED, "str.%s() on non-ASCII text is not supported", nm);
        char *p = jx_strdup(c->a, s.s.p, s.s.n);
        bool prev_cased = false;
        for (size_t i = 0; i < s.s.n; i++) {
            char ch = p[i];
            bool alpha = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');
            bool make_upper = nm[0] == 't' ? (alpha && !prev_cased) : i == 0;
            if (make_upper && ch >= 'a' && ch <= 'z') p[i] = (char)(ch - 32);
            if (!make_upper && ch >= 'A' && ch <= 'Z') p[i] = (char)(ch + 32);
            prev_cased = alpha;
        }
        return jv_strn(p, s.s.n);
    }
    if (!strcmp(nm, "format") || !strcmp(nm, "format_map"))
        jx_fail(&c->trap, G4_EUNSUPPORTED, "str.%s() is not supported", nm);
    jx_fail(&c->trap, G4_EUNSUPPORTED, "the str method '%s' is not supported", nm);
}

static jx_list *view_list(jx_ctx *c, jx_dict *d, int which, const char *view)
{
    jx_list *l = jx_list_new(c->a, d->n);
    for (size_t i = 0; i < d->n; i++) {
        if (which == 0) jx_list_push(c->a, l, d->k[i]);
        else if (which == 1) jx_list_push(c->a, l, d->v[i]);
        else {
            jx_list *t = jx_list_new(c->a, 2);
            jx_list_push(c->a, t, d->k[i]);
            jx_list_push(c->a, t, d->v[i]);
            jx_list_push(c->a, l, jv_tuple(t));
        }
    }
    l->view = view;
    return l;
}

jv jx_call_method(jx_ctx *c, const jx_method *m, const jx_args *a)
{
    jv s = m->self;
    const char *nm = m->name;
    bool have;
    switch (s.t) {
    case JV_STR: return str_method(c, s, nm, a);
    case JV_DICT:
        if (!strcmp(nm, "get")) {
            max_args(c, a, 2, NULL, nm);
            jv k = jx_arg(a, 0, NULL, &have);
            if (!have) jx_fail(&c->trap, G4_ETEMPLATE, "TypeError: get expected at least 1 argument, got 0");
            if (k.t == JV_LIST || k.t == JV_DICT || k.t == JV_NS)
                jx_fail(&c->trap, G4_ETEMPLATE, "TypeError: unhashable type: '%s'", jv_pytype(k));
            jv *v = jx_dict_get(s.d, k);
            if (v) return *v;
            jv dflt = jx_arg(a, 1, NULL, &have);
            return have ? dflt : jv_none();
        }
        max_args(c, a, 0, NULL, nm);
        if (!strcmp(nm, "keys")) return jv_list(view_list(c, s.d, 0, "dict_keys"));
        if (!strcmp(nm, "values")) return jv_list(view_list(c, s.d, 1, "dict_values"));
        if (!strcmp(nm, "items")) return jv_list(view_list(c, s.d, 2, "dict_items"));
        if (!strcmp(nm, "copy")) {
            jx_dict *d = jx_dict_new(c->a, s.d->n);
            for (size_t i = 0; i < s.d->n; i++) jx_dict_set(c->a, d, s.d->k[i], s.d->v[i]);
            return jv_dict(d);
        }
        break;
    case JV_LIST: case JV_TUPLE:
        if (!strcmp(nm, "count") || !strcmp(nm, "index")) {
            max_args(c, a, 1, NULL, nm);
            jv x = jx_arg(a, 0, NULL, NULL);
            int64_t k = 0;
            for (size_t i = 0; i < s.l->n; i++)
                if (jv_eq(jx_list_at(s.l, i), x)) {
                    if (nm[0] == 'i') return jv_int((int64_t)i);
                    k++;
                }
            if (nm[0] == 'i') jx_fail(&c->trap, G4_ETEMPLATE, "ValueError: value is not in %s", jv_pytype(s));
            return jv_int(k);
        }
        if (!strcmp(nm, "copy")) {
            jx_list *l = jx_list_new(c->a, s.l->n);
            for (size_t i = 0; i < s.l->n; i++) jx_list_push(c->a, l, jx_list_at(s.l, i));
            return jv_list(l);
        }
        break;
    case JV_LOOP:
        if (!strcmp(nm, "cycle")) {
            if (a->npos == 0) jx_fail(&c->trap, G4_ETEMPLATE, "TypeError: no items for cycling given");
            return a->pos[s.lp->index0 % (size_t)a->npos];
        }
        if (!strcmp(nm, "changed")) {
            jx_list *l = jx_list_new(c->a, (size_t)a->npos);
            for (int i = 0; i < a->npos; i++) jx_list_push(c->a, l, a->pos[i]);
            jv now = jv_list(l);
            if (!s.lp->have_changed || !jv_eq(now, s.lp->changed_last)) {
                s.lp->have_changed = true;
                s.lp->changed_last = now;
                return jv_bool(true);
            }
            return jv_bool(false);
        }
        break;
    default: break;
    }
    jx_fail(&c->trap, G4_EUNSUPPORTED, "the %s method '%s' is not supported", jv_pytype(s), nm);
}

/* ---------------------------------------------------------------- globals */

int jx_global_id(const char *name)
{
    static const struct { const char *n; int id; } g[] = {
        {"range", JF_RANGE}, {"namespace", JF_NAMESPACE}, {"dict", JF_DICT},
        {"raise_exception", JF_RAISE}, {"strftime_now", JF_STRFTIME}, {"cycler", JF_CYCLER},
        {"joiner", JF_JOINER}, {"lipsum", JF_LIPSUM}};
    for (size_t i = 0; i < sizeof g / sizeof g[0]; i++)
        if (!strcmp(g[i].n, name)) return g[i].id;
    return 0;
}

static void dict_update_from(jx_ctx *c, jx_dict *d, const jx_args *a, const char *what)
{
    if (a->npos > 1) jx_fail(&c->trap, G4_ETEMPLATE, "TypeError: %s expected at most 1 argument, got %d", what, a->npos);
    if (a->npos == 1) {
        jv src = a->pos[0];
        if (src.t == JV_DICT || src.t == JV_NS) {
            for (size_t i = 0; i < src.d->n; i++) jx_dict_set(c->a, d, src.d->k[i], src.d->v[i]);
        } else {
            jx_list *items = jx_iterate(c, src);
            for (size_t i = 0; i < items->n; i++) {
                jx_list *pair = jx_iterate(c, items->v[i]);
                if (pair->n != 2)
                    jx_fail(&c->trap, G4_ETEMPLATE, "ValueError: dictionary update sequence element #%zu has length %zu; 2 is required", i, pair->n);
                jx_dict_set(c->a, d, pair->v[0], pair->v[1]);
            }
        }
    }
    for (int i = 0; i < a->nkw; i++) jx_dict_set(c->a, d, jv_strz(a->kwn[i]), a->kwv[i]);
}

jv jx_call_global(jx_ctx *c, int fn, const jx_args *a)
{
    switch (fn) {
    case JF_RANGE: {
        if (a->nkw) jx_fail(&c->trap, G4_ETEMPLATE, "TypeError: range() takes no keyword arguments");
        if (a->npos < 1 || a->npos > 3)
            jx_fail(&c->trap, G4_ETEMPLATE, "TypeError: range expected at most 3 arguments, got %d", a->npos);
        int64_t v[3];
        for (int i = 0; i < a->npos; i++) {
            if (a->pos[i].t == JV_UNDEF) jx_undef_fail(c, a->pos[i]);
            if (!as_index(a->pos[i], &v[i]))
                jx_fail(&c->trap, G4_ETEMPLATE, "TypeError: '%s' object cannot be interpreted as an integer", jv_pytype(a->pos[i]));
        }
        int64_t start = a->npos == 1 ? 0 : v[0], stop = a->npos == 1 ? v[0] : v[1], step = a->npos == 3 ? v[2] : 1;
        if (step == 0) jx_fail(&c->trap, G4_ETEMPLATE, "ValueError: range() arg 3 must not be zero");
        int64_t len = 0;
        if (step > 0 && start < stop) len = (stop - start - 1) / step + 1;
        if (step < 0 && start > stop) len = (start - stop - 1) / (-step) + 1;
        if (len > JX_MAX_RANGE)
            jx_fail(&c->trap, G4_ETEMPLATE, "OverflowError: Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).", JX_MAX_RANGE);
        jx_list *l = jx_list_new(c->a, 0); /* items computed on demand (jx_list_at, jx_iterate) */
        l->n = (size_t)len;
        l->is_range = true;
        l->r0 = start;
        l->r1 = stop;
        l->rs = step;
        return jv_list(l);
    }
    case JF_NAMESPACE: case JF_DICT: {
        jx_dict *d = jx_dict_new(c->a, (size_t)a->nkw);
        dict_update_from(c, d, a, fn == JF_DICT ? "dict" : "namespace");
        jv v = jv_dict(d);
        if (fn == JF_NAMESPACE) v.t = JV_NS;
        return v;
    }
    case JF_RAISE: {
        jv m = a->npos ? a->pos[0] : jx_arg(a, -1, "message", NULL);
        jv s = jv_to_string(c, m);
        jx_fail(&c->trap, G4_ETEMPLATE, "%.*s", (int)(s.s.n > 900 ? 900 : s.s.n), s.s.p);
    }
    case JF_STRFTIME: {
        jv f = a->npos ? a->pos[0] : jv_undef_name("format");
        if (f.t != JV_STR) jx_fail(&c->trap, G4_ETEMPLATE, "TypeError: strftime() argument 1 must be str, not %s", jv_pytype(f));
        char *fmt = jx_strdup(c->a, f.s.p, f.s.n);
        time_t now = time(NULL);
        struct tm tmv;
        localtime_r(&now, &tmv);
        size_t cap = f.s.n * 8 + 64;
        char *out = jx_alloc(c->a, cap);
        size_t n = strftime(out, cap, fmt, &tmv);
        return jv_strn(out, n);
    }
    default:
        jx_fail(&c->trap, G4_EUNSUPPORTED, "the global function %s is not supported",
                fn == JF_CYCLER ? "cycler" : fn == JF_JOINER ? "joiner" : "lipsum");
    }
}
