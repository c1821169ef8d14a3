/* jinja_filters.c — Jinja2's built-in filters and tests as the chat templates use them, with
 * Jinja2 3.1's Python behaviour: dictsort (case-insensitive by default, stable), trim (Python
 * str.strip whitespace set), default (with boolean=), map/select/reject/selectattr/rejectattr,
 * join, length, first/last, list, string, int/float, tojson (HF's override: json.dumps with
 * ensure_ascii=False), ... Filters or tests outside this set are refused when the template is
 * compiled (G4_EUNSUPPORTED). Knows nothing about the AST or chat messages. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/jinja_internal.h"

jv jx_str_replace(jx_ctx *c, jv s, jv old, jv new, int64_t count);
jx_list *jx_splitlines(jx_ctx *c, jv s);

static const char *const k_filters[] = {
    "abs", "attr", "count", "d", "default", "dictsort", "first", "float", "indent", "int", "items", "join",
    "last", "length", "list", "lower", "map", "max", "min", "reject", "rejectattr", "replace", "reverse",
    "select", "selectattr", "sort", "string", "sum", "tojson", "trim", "unique", "upper", "wordcount",
    "capitalize", "title", NULL};

static const char *const k_tests[] = {
    "boolean", "callable", "defined", "divisibleby", "eq", "equalto", "==", "even", "false", "filter", "float",
    "ge", ">=", "gt", "greaterthan", ">", "in", "integer", "iterable", "le", "<=", "lower", "lt", "lessthan",
    "<", "mapping", "ne", "!=", "none", "number", "odd", "sameas", "sequence", "string", "test", "true",
    "undefined", "upper", NULL};

static bool in_list(const char *name, const char *const *names)
{
    for (int i = 0; names[i]; i++)
        if (!strcmp(names[i], name)) return true;
    return false;
}

bool jx_filter_known(const char *name) { return in_list(name, k_filters); }
bool jx_test_known(const char *name) { return in_list(name, k_tests); }

static void check_kw(jx_ctx *c, const jx_args *a, int maxpos, const char *const *kws, const char *what)
{
    if (a->npos > maxpos)
        jx_fail(&c->trap, G4_ETEMPLATE, "TypeError: %s() takes at most %d positional argument(s) (%d given)", what,
                maxpos + 1, a->npos + 1);
    for (int i = 0; i < a->nkw; i++) {
        bool ok = false;
        for (int k = 0; kws && kws[k]; k++)
            if (!strcmp(kws[k], a->kwn[i])) ok = true;
        if (!ok) jx_fail(&c->trap, G4_ETEMPLATE, "TypeError: %s() got an unexpected keyword argument '%s'", what, a->kwn[i]);
    }
}

static jv argd(const jx_args *a, int pos, const char *kw, jv dflt)
{
    bool have;
    jv v = jx_arg(a, pos, kw, &have);
    return have ? v : dflt;
}

static jv str_of(jx_ctx *c, jv v) { return jv_to_string(c, v); }

static size_t length_of(jx_ctx *c, jv v)
{
    switch (v.t) {
    case JV_UNDEF: return 0;
    case JV_STR: return jx_utf8_count(v.s.p, v.s.n);
    case JV_LIST: case JV_TUPLE:
        if (v.l->gen) break;
        return v.l->n;
    case JV_DICT: return v.d->n;
    default: break;
    }
    jx_fail(&c->trap, G4_ETEMPLATE, "TypeError: object of type '%s' has no len()", jv_pytype(v));
}

/* attribute path "a.b.0" as environment.getitem per part (Jinja's make_attrgetter) */
static jv attr_path(jx_ctx *c, jv v, jv attr)
{
    if (attr.t == JV_INT) return jx_getitem(c, v, attr);
    jv s = str_of(c, attr);
    size_t start = 0;
    for (size_t i = 0; i <= s.s.n; i++) {
        if (i == s.s.n || s.s.p[i] == '.') {
            jv part = jv_strn(s.s.p + start, i - start);
            bool digits = part.s.n > 0;
            for (size_t k = 0; k < part.s.n; k++)
                if (part.s.p[k] < '0' || part.s.p[k] > '9') digits = false;
            if (digits) part = jv_int(strtoll(jx_strdup(c->a, part.s.p, part.s.n), NULL, 10));
            v = jx_getitem(c, v, part);
            start = i + 1;
        }
    }
    return v;
}

/* sort key: lowercased strings unless case_sensitive */
static jv sort_key(jx_ctx *c, jv v, bool case_sensitive)
{
    if (!case_sensitive && v.t == JV_STR) return jx_str_lower(c, v);
    return v;
}

/* stable merge sort of idx[] by keys[] */
static void msort(jx_ctx *c, size_t *idx, size_t *tmp, size_t n, const jv *keys, bool reverse)
{
    if (n < 2) return;
    size_t h = n / 2;
    msort(c, idx, tmp, h, keys, reverse);
    msort(c, idx + h, tmp, n - h, keys, reverse);
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) {
        int r = jv_cmp(c, keys[idx[j]], keys[idx[i]], "<");
        bool take_right = reverse ? (jv_cmp(c, keys[idx[i]], keys[idx[j]], "<") < 0 && r != 2) : (r < 0 && r != 2);
        tmp[k++] = take_right ? idx[j++] : idx[i++];
    }
    while (i < h) tmp[k++] = idx[i++];
    while (j < n) tmp[k++] = idx[j++];
    memcpy(idx, tmp, n * sizeof *idx);
}

static jx_list *sorted_list(jx_ctx *c, jx_list *items, const jv *keys, bool reverse)
{
    size_t n = items->n;
    size_t *idx = jx_alloc(c->a, (n + 1) * sizeof *idx), *tmp = jx_alloc(c->a, (n + 1) * sizeof *tmp);
    for (size_t i = 0; i < n; i++) idx[i] = i;
    msort(c, idx, tmp, n, keys, reverse);
    jx_list *out = jx_list_new(c->a, n);
    for (size_t i = 0; i < n; i++) jx_list_push(c->a, out, items->v[idx[i]]);
    return out;
}

static jv do_tojson(jx_ctx *c, jv v, const jx_args *a)
{
    static const char *const kws[] = {"ensure_ascii", "indent", "separators", "sort_keys", NULL};
    check_kw(c, a, 4, kws, "tojson");
    jv ea = argd(a, 0, "ensure_ascii", jv_bool(false));
    jv ind = argd(a, 1, "indent", jv_none());
    jv sep = argd(a, 2, "separators", jv_none());
    jv sk = argd(a, 3, "sort_keys", jv_bool(false));
    if (jv_truthy(ea)) jx_fail(&c->trap, G4_EUNSUPPORTED, "tojson(ensure_ascii=True) is not supported");
    int indent = -1;
    if (ind.t == JV_INT) indent = ind.i < 0 ? 0 : (int)(ind.i > 64 ? 64 : ind.i);
    else if (ind.t != JV_NONE) jx_fail(&c->trap, G4_EUNSUPPORTED, "tojson indent must be an integer or None");
    const char *isep = NULL, *ksep = NULL;
    if (sep.t == JV_LIST || sep.t == JV_TUPLE) {
        jv s0 = sep.l->n == 2 ? jx_list_at(sep.l, 0) : jv_none(), s1 = sep.l->n == 2 ? jx_list_at(sep.l, 1) : jv_none();
        if (s0.t != JV_STR || s1.t != JV_STR)
            jx_fail(&c->trap, G4_ETEMPLATE, "ValueError: separators must be a pair of strings");
        isep = jx_strdup(c->a, s0.s.p, s0.s.n);
        ksep = jx_strdup(c->a, s1.s.p, s1.s.n);
    } else if (sep.t != JV_NONE) {
        jx_fail(&c->trap, G4_ETEMPLATE, "TypeError: separators must be a tuple of two strings");
    }
    jx_buf b;
    jx_buf_init(&b, c->a);
    jx_buf_put(&b, "", 0);
    jv_tojson(c, &b, v, indent, isep, ksep, jv_truthy(sk));
    return jv_strn(b.p, b.n);
}

static jv do_indent(jx_ctx *c, jv s, const jx_args *a)
{
    static const char *const kws[] = {"width", "first", "blank", NULL};
    check_kw(c, a, 3, kws, "indent");
    jv w = argd(a, 0, "width", jv_int(4));
    bool first = jv_truthy(argd(a, 1, "first", jv_bool(false)));
    bool blank = jv_truthy(argd(a, 2, "blank", jv_bool(false)));
    jx_buf ind;
    jx_buf_init(&ind, c->a);
    jx_buf_put(&ind, "", 0);
    if (w.t == JV_STR) jx_buf_put(&ind, w.s.p, w.s.n);
    else if (w.t == JV_INT) for (int64_t i = 0; i < w.i && i < 1000; i++) jx_buf_putc(&ind, ' ');
    else jx_fail(&c->trap, G4_ETEMPLATE, "TypeError: indent width must be int or str");
    s = str_of(c, s);
    jx_buf t;
    jx_buf_init(&t, c->a);
    jx_buf_put(&t, s.s.p, s.s.n);
    jx_buf_putc(&t, '\n');
    jx_list *lines = jx_splitlines(c, jv_strn(t.p, t.n));
    jx_buf b;
    jx_buf_init(&b, c->a);
    jx_buf_put(&b, "", 0);
    if (first) jx_buf_put(&b, ind.p, ind.n);
    for (size_t i = 0; i < lines->n; i++) {
        jv ln = lines->v[i];
        if (i) {
            jx_buf_putc(&b, '\n');
            if (blank || ln.s.n) jx_buf_put(&b, ind.p, ind.n);
        }
        jx_buf_put(&b, ln.s.p, ln.s.n);
    }
    return jv_strn(b.p, b.n);
}

static jv to_int(jx_ctx *c, jv v, jv dflt, int64_t base)
{
    switch (v.t) {
    case JV_INT: return v;
    case JV_BOOL: return jv_int(v.b);
    case JV_FLOAT:
        if (isnan(v.f) || isinf(v.f)) return dflt; /* OverflowError/ValueError -> default */
        if (fabs(v.f) >= 9.2e18) jx_fail(&c->trap, G4_EUNSUPPORTED, "int() of %g needs a Python big integer (not supported)", v.f);
        return jv_int((int64_t)v.f);
    case JV_STR: {
        char *s = jx_strdup(c->a, v.s.p, v.s.n);
        /* Python int(str, base): surrounding whitespace, sign, single underscores between digits */
        jv t = jx_str_strip(c, jv_strz(s), NULL, 0, false, 3);
        char *q = jx_alloc(c->a, t.s.n + 1);
        size_t k = 0, i = 0;
        bool ok = t.s.n > 0;
        if (i < t.s.n && (t.s.p[i] == '+' || t.s.p[i] == '-')) q[k++] = t.s.p[i++];
        if (base == 16 && i + 1 < t.s.n && t.s.p[i] == '0' && (t.s.p[i + 1] == 'x' || t.s.p[i + 1] == 'X')) i += 2;
        if (i >= t.s.n) ok = false;
        for (; ok && i < t.s.n; i++) {
            char ch = t.s.p[i];
            if (ch == '_') {
                if (k == 0 || q[k - 1] == '+' || q[k - 1] == '-' || i + 1 >= t.s.n || t.s.p[i + 1] == '_') ok = false;
                continue;
            }
            q[k++] = ch;
        }
        q[k] = 0;
        if (ok && (base == 10 || base == 16 || base == 8 || base == 2)) {
            char *end;
            errno = 0;
            long long r = strtoll(q, &end, (int)base);
            if (end != q && !*end && q[strlen(q) - 1] != '+' && q[strlen(q) - 1] != '-') {
                if (errno) jx_fail(&c->trap, G4_EUNSUPPORTED, "integer too large (Python big ints are not supported)");
                return jv_int(r);
            }
        } else if (ok) {
            jx_fail(&c->trap, G4_EUNSUPPORTED, "int(base=%lld) is not supported", (long long)base);
        }
        /* Jinja then tries int(float(value)) */
        char *end;
        double d = strtod(s, &end);
        if (end != s) {
            while (*end == ' ' || *end == '\t' || *end == '\n') end++;
            if (!*end && !isnan(d) && !isinf(d) && strpbrk(s, "xXpP") == NULL) return jv_int((int64_t)d);
        }
        return dflt;
    }
    default: return dflt;
    }
}

static jv lazy_empty(jx_ctx *c, jv seq, bool *done)
{
    *done = true;
    if (!jv_truthy(seq)) { /* Jinja's map/select start with `if value:` */
        jx_list *e = jx_list_new(c->a, 0);
        e->gen = true;
        return jv_list(e);
    }
    if (!jx_is_iterable(seq)) {
        char *m = jx_alloc(c->a, 64);
        snprintf(m, 64, "'%s' object is not iterable", jv_pytype(seq));
        return jx_failing_gen(c, m);
    }
    *done = false;
    return seq;
}

static jv do_map(jx_ctx *c, jv seq, const jx_args *a)
{
    bool done;
    jv early = lazy_empty(c, seq, &done);
    if (done) return early;
    jx_list *items = jx_iterate(c, seq);
    jx_list *out = jx_list_new(c->a, items->n);
    bool have;
    jv attr = jx_arg(a, -1, "attribute", &have);
    if (have) {
        jv dflt = argd(a, -1, "default", jv_undef_name(""));
        bool have_d = false;
        jx_arg(a, -1, "default", &have_d);
        for (size_t i = 0; i < items->n; i++) {
            jv v = attr_path(c, items->v[i], attr);
            if (v.t == JV_UNDEF && have_d) v = dflt;
            jx_list_push(c->a, out, v);
        }
        out->gen = true;
        return jv_list(out);
    }
    if (a->npos < 1) jx_fail(&c->trap, G4_ETEMPLATE, "TypeError: map requires a filter argument");
    jv name = a->pos[0];
    if (name.t != JV_STR) jx_fail(&c->trap, G4_ETEMPLATE, "TypeError: map filter name must be a string");
    char *fname = jx_strdup(c->a, name.s.p, name.s.n);
    if (!jx_filter_known(fname)) jx_fail(&c->trap, G4_EUNSUPPORTED, "filter '%s' is not supported", fname);
    jx_args sub = *a;
    sub.pos = a->pos + 1;
    sub.npos = a->npos - 1;
    for (size_t i = 0; i < items->n; i++) jx_list_push(c->a, out, jx_apply_filter(c, fname, items->v[i], &sub));
    out->gen = true;
    return jv_list(out);
}

static jv do_select(jx_ctx *c, jv seq, const jx_args *a, bool select, bool by_attr)
{
    bool done;
    jv early = lazy_empty(c, seq, &done);
    if (done) return early;
    jx_list *items = jx_iterate(c, seq);
    jx_list *out = jx_list_new(c->a, items->n);
    int off = 0;
    jv attr = {0};
    if (by_attr) {
        if (a->npos < 1) jx_fail(&c->trap, G4_ETEMPLATE, "FilterArgumentError: Missing parameter for attribute name");
        attr = a->pos[0];
        off = 1;
    }
    const char *tname = NULL;
    if (a->npos > off) {
        jv t = a->pos[off];
        if (t.t != JV_STR) jx_fail(&c->trap, G4_ETEMPLATE, "TypeError: test name must be a string");
        tname = jx_strdup(c->a, t.s.p, t.s.n);
        if (!jx_test_known(tname)) jx_fail(&c->trap, G4_EUNSUPPORTED, "test '%s' is not supported", tname);
    }
    /* no test name: Jinja2 selects by truthiness (its kwargs are then ignored) */
    jx_args sub = *a;
    sub.pos = tname ? a->pos + off + 1 : NULL;
    sub.npos = tname ? a->npos - off - 1 : 0;
    for (size_t i = 0; i < items->n; i++) {
        jv v = by_attr ? attr_path(c, items->v[i], attr) : items->v[i];
        bool r = tname ? jx_apply_test(c, tname, v, &sub) : jv_truthy(v);
        if (r == select) jx_list_push(c->a, out, items->v[i]);
    }
    out->gen = true;
    return jv_list(out);
}

jv jx_apply_filter(jx_ctx *c, const char *f, jv in, const jx_args *a)
{
    if (!strcmp(f, "default") || !strcmp(f, "d")) {
        static const char *const kws[] = {"default_value", "boolean", NULL};
        check_kw(c, a, 2, kws, f);
        jv dv = argd(a, 0, "default_value", jv_strz(""));
        bool boolean = jv_truthy(argd(a, 1, "boolean", jv_bool(false)));
        if (in.t == JV_UNDEF || (boolean && !jv_truthy(in))) return dv;
        return in;
    }
    if (!strcmp(f, "length") || !strcmp(f, "count")) {
        check_kw(c, a, 0, NULL, f);
        return jv_int((int64_t)length_of(c, in));
    }
    if (!strcmp(f, "trim")) {
        static const char *const kws[] = {"chars", NULL};
        check_kw(c, a, 1, kws, f);
        jv ch = argd(a, 0, "chars", jv_none());
        jv s = str_of(c, in);
        if (ch.t == JV_NONE) return jx_str_strip(c, s, NULL, 0, false, 3);
        if (ch.t != JV_STR) jx_fail(&c->trap, G4_ETEMPLATE, "TypeError: strip arg must be None or str");
        return jx_str_strip(c, s, ch.s.p, ch.s.n, true, 3);
    }
    if (!strcmp(f, "upper") || !strcmp(f, "lower")) {
        check_kw(c, a, 0, NULL, f);
        return f[0] == 'u' ? jx_str_upper(c, in) : jx_str_lower(c, in);
    }
    if (!strcmp(f, "title")) {
        /* Jinja's do_title: split at runs of [-\s({\[<], then item[0].upper() + item[1:].lower() */
        check_kw(c, a, 0, NULL, f);
        jv s = str_of(c, in);
        jx_buf b;
        jx_buf_init(&b, c->a);
        jx_buf_put(&b, "", 0);
        size_t i = 0;
        while (i < s.s.n) {
            uint32_t cp;
            size_t l = jx_utf8_dec(s.s.p + i, s.s.n - i, &cp);
            bool sep = cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || jx_isspace_cp(cp);
            if (sep) {
                jx_buf_put(&b, s.s.p + i, l);
                i += l;
                continue;
            }
            size_t j = i + l;
            while (j < s.s.n) {
                size_t l2 = jx_utf8_dec(s.s.p + j, s.s.n - j, &cp);
                if (cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || jx_isspace_cp(cp)) break;
                j += l2;
            }
            jv first = jx_str_upper(c, jv_strn(s.s.p + i, l));
            jv rest = jx_str_lower(c, jv_strn(s.s.p + i + l, j - i - l));
            jx_buf_put(&b, first.s.p, first.s.n);
            jx_buf_put(&b, rest.s.p, rest.s.n);
            i = j;
        }
        return jv_strn(b.p, b.n);
    }
    if (!strcmp(f, "capitalize")) {
        check_kw(c, a, 0, NULL, f);
        jx_method m = {str_of(c, in), f};
        jx_args none = {0};
        return jx_call_method(c, &m, &none);
    }
    if (!strcmp(f, "string")) {
        check_kw(c, a, 0, NULL, f);
        return str_of(c, in);
    }
    if (!strcmp(f, "replace")) {
        static const char *const kws[] = {"old", "new", "count", NULL};
        check_kw(c, a, 3, kws, f);
        bool h1, h2;
        jv o = jx_arg(a, 0, "old", &h1), n = jx_arg(a, 1, "new", &h2);
        if (!h1 || !h2) jx_fail(&c->trap, G4_ETEMPLATE, "TypeError: replace() missing required arguments");
        jv cnt = argd(a, 2, "count", jv_none());
        return jx_str_replace(c, str_of(c, in), str_of(c, o), str_of(c, n), cnt.t == JV_NONE ? -1 : cnt.i);
    }
    if (!strcmp(f, "dictsort")) {
        static const char *const kws[] = {"case_sensitive", "by", "reverse", NULL};
        check_kw(c, a, 3, kws, f);
        bool cs = jv_truthy(argd(a, 0, "case_sensitive", jv_bool(false)));
        jv by = argd(a, 1, "by", jv_strz("key"));
        bool rev = jv_truthy(argd(a, 2, "reverse", jv_bool(false)));
        int pos;
        if (by.t == JV_STR && by.s.n == 3 && !memcmp(by.s.p, "key", 3)) pos = 0;
        else if (by.t == JV_STR && by.s.n == 5 && !memcmp(by.s.p, "value", 5)) pos = 1;
        else jx_fail(&c->trap, G4_ETEMPLATE, "FilterArgumentError: You can only sort by either \"key\" or \"value\"");
        if (in.t == JV_UNDEF) jx_undef_fail(c, in);
        if (in.t != JV_DICT)
            jx_fail(&c->trap, G4_ETEMPLATE, "AttributeError: '%s' object has no attribute 'items'", jv_pytype(in));
        jx_list *items = jx_list_new(c->a, in.d->n);
        jv *keys = jx_alloc(c->a, (in.d->n + 1) * sizeof(jv));
        for (size_t i = 0; i < in.d->n; i++) {
            jx_list *t = jx_list_new(c->a, 2);
            jx_list_push(c->a, t, in.d->k[i]);
            jx_list_push(c->a, t, in.d->v[i]);
            jx_list_push(c->a, items, jv_tuple(t));
            keys[i] = sort_key(c, pos ? in.d->v[i] : in.d->k[i], cs);
        }
        return jv_list(sorted_list(c, items, keys, rev));
    }
    if (!strcmp(f, "items")) {
        check_kw(c, a, 0, NULL, f);
        if (in.t == JV_UNDEF) {
            jx_list *e = jx_list_new(c->a, 0);
            e->gen = true;
            return jv_list(e);
        }
        if (in.t != JV_DICT) return jx_failing_gen(c, "Can only get item pairs from a mapping.");
        jx_list *items = jx_list_new(c->a, in.d->n);
        items->gen = true;
        for (size_t i = 0; i < in.d->n; i++) {
            jx_list *t = jx_list_new(c->a, 2);
            jx_list_push(c->a, t, in.d->k[i]);
            jx_list_push(c->a, t, in.d->v[i]);
            jx_list_push(c->a, items, jv_tuple(t));
        }
        return jv_list(items);
    }
    if (!strcmp(f, "list")) {
        check_kw(c, a, 0, NULL, f);
        jx_list *src = jx_iterate(c, in), *l = jx_list_new(c->a, src->n);
        for (size_t i = 0; i < src->n; i++) jx_list_push(c->a, l, src->v[i]);
        return jv_list(l);
    }
    if (!strcmp(f, "join")) {
        static const char *const kws[] = {"d", "attribute", NULL};
        check_kw(c, a, 2, kws, f);
        jv d = str_of(c, argd(a, 0, "d", jv_strz("")));
        bool have;
        jv attr = jx_arg(a, 1, "attribute", &have);
        jx_list *items = jx_iterate(c, in);
        jx_buf b;
        jx_buf_init(&b, c->a);
        jx_buf_put(&b, "", 0);
        for (size_t i = 0; i < items->n; i++) {
            if (i) jx_buf_put(&b, d.s.p, d.s.n);
            jv_str(c, &b, have ? attr_path(c, items->v[i], attr) : items->v[i]);
        }
        return jv_strn(b.p, b.n);
    }
    if (!strcmp(f, "first") || !strcmp(f, "last")) {
        check_kw(c, a, 0, NULL, f);
        if (f[0] == 'l' && (in.t == JV_UNDEF))
            jx_fail(&c->trap, G4_ETEMPLATE, "TypeError: 'Undefined' object is not reversible");
        jx_list *items = jx_iterate(c, in);
        if (items->n == 0) return jv_undef_hint(f[0] == 'f' ? "No first item, sequence was empty." : "No last item, sequence was empty.");
        return f[0] == 'f' ? items->v[0] : items->v[items->n - 1];
    }
    if (!strcmp(f, "int")) {
        static const char *const kws[] = {"default", "base", NULL};
        check_kw(c, a, 2, kws, f);
        jv dflt = argd(a, 0, "default", jv_int(0));
        jv base = argd(a, 1, "base", jv_int(10));
        if (in.t == JV_UNDEF) jx_undef_fail(c, in);
        return to_int(c, in, dflt, base.t == JV_INT ? base.i : 10);
    }
    if (!strcmp(f, "float")) {
        static const char *const kws[] = {"default", NULL};
        check_kw(c, a, 1, kws, f);
        jv dflt = argd(a, 0, "default", jv_float(0.0));
        if (in.t == JV_UNDEF) jx_undef_fail(c, in);
        if (in.t == JV_FLOAT) return in;
        if (in.t == JV_INT || in.t == JV_BOOL) return jv_float(jv_num(in));
        if (in.t == JV_STR) {
            jv t = jx_str_strip(c, in, NULL, 0, false, 3);
            char *s = jx_strdup(c->a, t.s.p, t.s.n), *end;
            if (*s && !strpbrk(s, "xXpP_")) {
                double d = strtod(s, &end);
                if (!*end) return jv_float(d);
            }
        }
        return dflt;
    }
    if (!strcmp(f, "abs")) {
        check_kw(c, a, 0, NULL, f);
        if (in.t == JV_INT || in.t == JV_BOOL) {
            int64_t x = in.t == JV_BOOL ? in.b : in.i;
            if (x == INT64_MIN) jx_fail(&c->trap, G4_EUNSUPPORTED, "integer overflow");
            return jv_int(x < 0 ? -x : x);
        }
        if (in.t == JV_FLOAT) return jv_float(fabs(in.f));
        if (in.t == JV_UNDEF) jx_undef_fail(c, in);
        jx_fail(&c->trap, G4_ETEMPLATE, "TypeError: bad operand type for abs(): '%s'", jv_pytype(in));
    }
    if (!strcmp(f, "attr")) {
        check_kw(c, a, 1, NULL, f);
        jv nm = jx_arg(a, 0, NULL, NULL);
        if (nm.t != JV_STR) jx_fail(&c->trap, G4_ETEMPLATE, "TypeError: attribute name must be a string");
        if (in.t == JV_UNDEF) jx_undef_fail(c, in);
        /* environment.getattr without the item fallback for present keys */
        jv out = jx_getattr(c, in, jx_strdup(c->a, nm.s.p, nm.s.n));
        if (in.t == JV_DICT && out.t != JV_METHOD && out.t != JV_UNDEF)
            return jv_undef_attr(c, in, nm); /* dict keys are not attributes */
        return out;
    }
    if (!strcmp(f, "map")) return do_map(c, in, a);
    if (!strcmp(f, "select") || !strcmp(f, "reject")) return do_select(c, in, a, f[0] == 's', false);
    if (!strcmp(f, "selectattr") || !strcmp(f, "rejectattr")) return do_select(c, in, a, f[0] == 's', true);
    if (!strcmp(f, "tojson")) return do_tojson(c, in, a);
    if (!strcmp(f, "indent")) return do_indent(c, in, a);
    if (!strcmp(f, "reverse")) {
        check_kw(c, a, 0, NULL, f);
        if (in.t == JV_STR) {
            jx_list *ch = jx_iterate(c, in);
            jx_buf b;
            jx_buf_init(&b, c->a);
            jx_buf_put(&b, "", 0);
            for (size_t i = ch->n; i > 0; i--) jx_buf_put(&b, ch->v[i - 1].s.p, ch->v[i - 1].s.n);
            return jv_strn(b.p, b.n);
        }
        jx_list *items = jx_iterate(c, in), *l = jx_list_new(c->a, items->n);
        for (size_t i = items->n; i > 0; i--) jx_list_push(c->a, l, items->v[i - 1]);
        l->gen = in.t != JV_UNDEF; /* reversed(x) is an iterator; list(Undefined) a list */
        return jv_list(l);
    }
    if (!strcmp(f, "sort") || !strcmp(f, "unique") || !strcmp(f, "max") || !strcmp(f, "min")) {
        static const char *const kws_sort[] = {"reverse", "case_sensitive", "attribute", NULL};
        static const char *const kws_other[] = {"case_sensitive", "attribute", NULL};
        bool is_sort = f[0] == 's';
        check_kw(c, a, is_sort ? 3 : 2, is_sort ? kws_sort : kws_other, f);
        bool rev = is_sort ? jv_truthy(argd(a, 0, "reverse", jv_bool(false))) : false;
        bool cs = jv_truthy(argd(a, is_sort ? 1 : 0, "case_sensitive", jv_bool(false)));
        bool have;
        jv attr = jx_arg(a, is_sort ? 2 : 1, "attribute", &have);
        jx_list *items = jx_iterate(c, in);
        jv *keys = jx_alloc(c->a, (items->n + 1) * sizeof(jv));
        for (size_t i = 0; i < items->n; i++)
            keys[i] = sort_key(c, have ? attr_path(c, items->v[i], attr) : items->v[i], cs);
        if (is_sort) return jv_list(sorted_list(c, items, keys, rev));
        if (f[0] == 'u') {
            jx_list *l = jx_list_new(c->a, items->n), *seen = jx_list_new(c->a, items->n);
            for (size_t i = 0; i < items->n; i++) {
                bool dup = false;
                jx_charge(c, seen->n / 16); /* quadratic in the items: counted against the step budget */
                for (size_t k = 0; k < seen->n; k++)
                    if (jv_eq(seen->v[k], keys[i])) dup = true;
                if (!dup) {
                    jx_list_push(c->a, seen, keys[i]);
                    jx_list_push(c->a, l, items->v[i]);
                }
            }
            l->gen = true;
            return jv_list(l);
        }
        if (items->n == 0) return jv_undef_hint(f[1] == 'a' ? "No aggregated item, sequence was empty." : "No aggregated item, sequence was empty.");
        size_t best = 0;
        for (size_t i = 1; i < items->n; i++) {
            int r = jv_cmp(c, keys[i], keys[best], "<");
            if (f[1] == 'a' ? jv_cmp(c, keys[best], keys[i], "<") < 0 : r < 0) best = i;
        }
        return items->v[best];
    }
    if (!strcmp(f, "sum")) {
        static const char *const kws[] = {"attribute", "start", NULL};
        check_kw(c, a, 2, kws, f);
        bool have;
        jv attr = jx_arg(a, 0, "attribute", &have);
        jv acc = argd(a, 1, "start", jv_int(0));
        jx_list *items = jx_iterate(c, in);
        for (size_t i = 0; i < items->n; i++) {
            jv v = have ? attr_path(c, items->v[i], attr) : items->v[i];
            if (!jv_is_num(acc) || !jv_is_num(v))
                jx_fail(&c->trap, G4_ETEMPLATE, "TypeError: unsupported operand type(s) for +: '%s' and '%s'", jv_pytype(acc), jv_pytype(v));
            if (acc.t != JV_FLOAT && v.t != JV_FLOAT) {
                int64_t r, x = acc.t == JV_BOOL ? acc.b : acc.i, y = v.t == JV_BOOL ? v.b : v.i;
                if (__builtin_add_overflow(x, y, &r)) jx_fail(&c->trap, G4_EUNSUPPORTED, "integer overflow");
                acc = jv_int(r);
            } else {
                acc = jv_float(jv_num(acc) + jv_num(v));
            }
        }
        return acc;
    }
    if (!strcmp(f, "wordcount")) {
        check_kw(c, a, 0, NULL, f);
        jv s = str_of(c, in);
        /* Jinja: len(re.findall(r"\w+", s)) — ASCII word characters only are implemented */
        int64_t k = 0;
        bool inw = false;
        for (size_t i = 0; i < s.s.n; i++) {
            unsigned char ch = (unsigned char)s.s.p[i];
            if (ch >= 0x80) jx_fail(&c->trap, G4_EUNSUPPORTED, "wordcount on non-ASCII text is not supported");
            bool w = (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_';
            if (w && !inw) k++;
            inw = w;
        }
        return jv_int(k);
    }
    jx_fail(&c->trap, G4_EUNSUPPORTED, "filter '%s' is not supported", f);
}

/* ---------------------------------------------------------------- tests */

bool jx_apply_test(jx_ctx *c, const char *t, jv v, const jx_args *a)
{
    jv arg = jx_arg(a, 0, NULL, NULL);
    if (!strcmp(t, "defined")) return v.t != JV_UNDEF;
    if (!strcmp(t, "undefined")) return v.t == JV_UNDEF;
    if (!strcmp(t, "none")) return v.t == JV_NONE;
    if (!strcmp(t, "boolean")) return v.t == JV_BOOL;
    if (!strcmp(t, "false")) return v.t == JV_BOOL && !v.b;
    if (!strcmp(t, "true")) return v.t == JV_BOOL && v.b;
    if (!strcmp(t, "integer")) return v.t == JV_INT;
    if (!strcmp(t, "float")) return v.t == JV_FLOAT;
    if (!strcmp(t, "number")) return jv_is_num(v);
    if (!strcmp(t, "string")) return v.t == JV_STR;
    if (!strcmp(t, "mapping")) return v.t == JV_DICT;
    /* len() and __getitem__ exist: str, list, tuple, dict, range, and Undefined */
    if (!strcmp(t, "sequence")) return v.t == JV_STR || v.t == JV_LIST || v.t == JV_TUPLE || v.t == JV_DICT || v.t == JV_UNDEF;
    if (!strcmp(t, "iterable")) return v.t == JV_STR || v.t == JV_LIST || v.t == JV_TUPLE || v.t == JV_DICT || v.t == JV_UNDEF;
    if (!strcmp(t, "callable")) return v.t == JV_MACRO || v.t == JV_FUNC || v.t == JV_METHOD;
    if (!strcmp(t, "filter") || !strcmp(t, "test")) {
        if (v.t != JV_STR) return false;
        char *nm = jx_strdup(c->a, v.s.p, v.s.n);
        return t[0] == 'f' ? jx_filter_known(nm) : jx_test_known(nm);
    }
    if (!strcmp(t, "lower") || !strcmp(t, "upper")) {
        jx_method m = {jv_to_string(c, v), t[0] == 'l' ? "islower" : "isupper"};
        jx_args none = {0};
        return jv_truthy(jx_call_method(c, &m, &none));
    }
    if (!strcmp(t, "odd") || !strcmp(t, "even") || !strcmp(t, "divisibleby")) {
        if (v.t == JV_UNDEF) jx_undef_fail(c, v);
        if (!jv_is_num(v)) jx_fail(&c->trap, G4_ETEMPLATE, "TypeError: not all arguments converted during string formatting");
        if (v.t == JV_FLOAT || (t[0] == 'd' && arg.t == JV_FLOAT)) {
            double x = jv_num(v), y = t[0] == 'd' ? jv_num(arg) : 2.0;
            if (t[0] == 'd' && arg.t == JV_UNDEF) jx_undef_fail(c, arg);
            if (y == 0) jx_fail(&c->trap, G4_ETEMPLATE, "ZeroDivisionError: float modulo");
            double m = fmod(x, y);
            if (m != 0 && ((m < 0) != (y < 0))) m += y;
            return t[0] == 'o' ? m == 1.0 : m == 0.0;
        }
        int64_t x = v.t == JV_BOOL ? v.b : v.i;
        if (t[0] == 'o') return ((x % 2) + 2) % 2 == 1;
        if (t[0] == 'e') return x % 2 == 0;
        if (arg.t == JV_UNDEF) jx_undef_fail(c, arg);
        if (!jv_is_num(arg)) jx_fail(&c->trap, G4_ETEMPLATE, "TypeError: unsupported operand type(s) for %%");
        int64_t y = arg.t == JV_BOOL ? arg.b : arg.i;
        if (y == 0) jx_fail(&c->trap, G4_ETEMPLATE, "ZeroDivisionError: integer division or modulo by zero");
        return x % y == 0;
    }
    if (!strcmp(t, "eq") || !strcmp(t, "equalto") || !strcmp(t, "==")) return jv_eq(v, arg);
    if (!strcmp(t, "ne") || !strcmp(t, "!=")) return !jv_eq(v, arg);
    if (!strcmp(t, "lt") || !strcmp(t, "lessthan") || !strcmp(t, "<")) { int r = jv_cmp(c, v, arg, "<"); return r != 2 && r < 0; }
    if (!strcmp(t, "le") || !strcmp(t, "<=")) { int r = jv_cmp(c, v, arg, "<="); return r != 2 && r <= 0; }
    if (!strcmp(t, "gt") || !strcmp(t, "greaterthan") || !strcmp(t, ">")) { int r = jv_cmp(c, v, arg, ">"); return r != 2 && r > 0; }
    if (!strcmp(t, "ge") || !strcmp(t, ">=")) { int r = jv_cmp(c, v, arg, ">="); return r != 2 && r >= 0; }
    if (!strcmp(t, "in")) {
        switch (arg.t) {
        case JV_STR:
            if (v.t != JV_STR)
                jx_fail(&c->trap, G4_ETEMPLATE, "TypeError: 'in <string>' requires string as left operand, not %s", jv_pytype(v));
            return v.s.n == 0 || (v.s.n <= arg.s.n && memmem(arg.s.p, arg.s.n, v.s.p, v.s.n) != NULL);
        case JV_LIST: case JV_TUPLE:
            for (size_t i = 0; i < arg.l->n; i++)
                if (jv_eq(jx_list_at(arg.l, i), v)) return true;
            return false;
        case JV_DICT: return jx_dict_get(arg.d, v) != NULL;
        case JV_UNDEF: return false;
        default: jx_fail(&c->trap, G4_ETEMPLATE, "TypeError: argument of type '%s' is not iterable", jv_pytype(arg));
        }
    }
    if (!strcmp(t, "sameas")) {
        if (v.t != arg.t) return false;
        switch (v.t) {
        case JV_NONE: case JV_UNDEF: return true;
        case JV_BOOL: return v.b == arg.b;
        case JV_LIST: case JV_TUPLE: return v.l == arg.l;
        case JV_DICT: case JV_NS: return v.d == arg.d;
        default: jx_fail(&c->trap, G4_EUNSUPPORTED, "'sameas' on %s values (Python object identity) is not supported", jv_pytype(v));
        }
    }
    jx_fail(&c->trap, G4_EUNSUPPORTED, "test '%s' is not supported", t);
}
