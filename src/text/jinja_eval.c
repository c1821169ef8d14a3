/* jinja_eval.c — the Jinja engine's evaluator: runs the AST made by jinja_parse.c against a set
 * of variables, with Jinja2 3.1's scoping (a for-loop iteration, a macro call, `with`, filter and
 * set blocks open scopes; `if` does not; `set` writes the innermost scope), loop.* variables,
 * macros (defaults, keyword arguments, varargs/kwargs/caller), namespaces, loop controls, and
 * Python operator semantics (+ - * / // % ** ~, chained comparisons, in / not in, and/or
 * returning operands). Also the public engine API of jinja_engine.h. Knows nothing about chat
 * messages; filters, tests and methods live in jinja_builtins.c. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/jinja_engine.h"
#include "text/jinja_internal.h"

typedef struct jx_scope {
    struct jx_scope *parent;
    jx_dict vars;
    bool captured;      /* a macro closed over it: a loop must not reuse it for the next item */
    bool ended;         /* a captured loop-iteration scope whose iteration is over */
} jx_scope;

enum { FLOW_NORMAL = 0, FLOW_BREAK, FLOW_CONTINUE };

static jv eval(jx_ctx *c, jx_scope *s, const jx_node *n);
static int exec_body(jx_ctx *c, jx_scope *s, const jx_body *b);

static jx_scope *scope_new(jx_ctx *c, jx_scope *parent)
{
    jx_scope *s = jx_alloc(c->a, sizeof *s);
    s->parent = parent;
    return s;
}

static void scope_set(jx_ctx *c, jx_scope *s, const char *name, jv v)
{
    jx_dict_set(c->a, &s->vars, jv_strz(name), v);
}

static jv lookup(jx_ctx *c, jx_scope *s, const char *name)
{
    size_t n = strlen(name);
    for (; s; s = s->parent) {
        jv *v = jx_dict_gets(&s->vars, name, n);
        if (v) return *v;
    }
    int g = jx_global_id(name);
    if (g) {
        jv v = {0};
        v.t = JV_FUNC;
        v.fn = g;
        return v;
    }
    (void)c;
    return jv_undef_name(name);
}

/* Every expression, statement list and loop iteration passes here: the recursion bound and the
 * step budget (cancellation, deadline) hold wherever the template spends its time. */
static void enter(jx_ctx *c)
{
    if (++c->depth > JX_MAX_DEPTH)
        jx_fail(&c->trap, G4_ETEMPLATE, "RecursionError: maximum recursion depth exceeded while rendering");
    jx_charge(c, 1);
}

static void out_put(jx_ctx *c, const char *p, size_t n)
{
    if (c->out->n + n > c->out_limit) {
        char sz[32];
        jx_fail(&c->trap, G4_ENOMEM, "rendered template exceeds the output limit (%s)", jx_size_str(sz, c->out_limit));
    }
    jx_buf_put(c->out, p, n);
}

/* ---------------------------------------------------------------- arithmetic */

static _Noreturn void type_err(jx_ctx *c, const char *fmt, jv a, jv b)
{
    jx_fail(&c->trap, G4_ETEMPLATE, fmt, jv_pytype(a), jv_pytype(b));
}

static int64_t int_of(jv v) { return v.t == JV_BOOL ? (int64_t)v.b : v.i; }

static jv int_result(jx_ctx *c, bool overflow, int64_t r)
{
    if (overflow) jx_fail(&c->trap, G4_EUNSUPPORTED, "integer overflow (Python big integers are not supported)");
    return jv_int(r);
}

static jx_list *concat_lists(jx_ctx *c, jx_list *x, jx_list *y)
{
    jx_list *l = jx_list_new(c->a, x->n + y->n);
    for (size_t i = 0; i < x->n; i++) jx_list_push(c->a, l, x->v[i]);
    for (size_t i = 0; i < y->n; i++) jx_list_push(c->a, l, y->v[i]);
    return l;
}

static jv repeat(jx_ctx *c, jv seq, int64_t k)
{
    if (k < 0) k = 0;
    if (seq.t == JV_STR) {
        if (seq.s.n && (uint64_t)k > c->out_limit / seq.s.n)
            jx_fail(&c->trap, G4_ENOMEM, "string repetition result too large");
        jx_buf b;
        jx_buf_init(&b, c->a);
        jx_buf_put(&b, "", 0);
        for (int64_t i = 0; i < k; i++) jx_buf_put(&b, seq.s.p, seq.s.n);
        return jv_strn(b.p ? b.p : "", b.n);
    }
    if (seq.l->n && (uint64_t)k > (c->out_limit / 16) / seq.l->n)
        jx_fail(&c->trap, G4_ENOMEM, "list repetition result too large");
    jx_list *l = jx_list_new(c->a, seq.l->n * (size_t)k);
    for (int64_t i = 0; i < k; i++)
        for (size_t j = 0; j < seq.l->n; j++) jx_list_push(c->a, l, seq.l->v[j]);
    jv r = seq;
    r.l = l;
    return r;
}

static double py_fmod(double a, double b)
{
    double m = fmod(a, b);
    if (m != 0 && ((m < 0) != (b < 0))) m += b;
    return m;
}

static jv binop(jx_ctx *c, int op, jv a, jv b)
{
    if (op == OP_CONCAT) {
        jx_buf buf;
        jx_buf_init(&buf, c->a);
        jx_buf_put(&buf, "", 0);
        jv_str(c, &buf, a);
        jv_str(c, &buf, b);
        return jv_strn(buf.p, buf.n);
    }
    if (op == OP_MOD && a.t == JV_STR)
        jx_fail(&c->trap, G4_EUNSUPPORTED, "printf-style string formatting (str %% x) is not supported");
    if (a.t == JV_UNDEF) jx_undef_fail(c, a);
    if (b.t == JV_UNDEF) jx_undef_fail(c, b);
    static const char *const opstr[] = {"", "+", "-", "*", "/", "//", "%", "**"};
    if (((a.t == JV_LIST || a.t == JV_TUPLE) && a.l->gen) || ((b.t == JV_LIST || b.t == JV_TUPLE) && b.l->gen)) {
        char fmt[128];
        snprintf(fmt, sizeof fmt, "TypeError: unsupported operand type(s) for %s: '%%s' and '%%s'", opstr[op]);
        type_err(c, fmt, a, b);
    }
    bool num = jv_is_num(a) && jv_is_num(b);
    bool ints = num && a.t != JV_FLOAT && b.t != JV_FLOAT;
    int64_t r;
    switch (op) {
    case OP_ADD:
        if (ints) {
            bool ovf = __builtin_add_overflow(int_of(a), int_of(b), &r);
            return int_result(c, ovf, r);
        }
        if (num) return jv_float(jv_num(a) + jv_num(b));
        if (a.t == JV_STR && b.t == JV_STR) {
            char *p = jx_alloc(c->a, a.s.n + b.s.n + 1);
            memcpy(p, a.s.p, a.s.n);
            memcpy(p + a.s.n, b.s.p, b.s.n);
            return jv_strn(p, a.s.n + b.s.n);
        }
        if ((a.t == JV_LIST || a.t == JV_TUPLE) && a.t == b.t && !a.l->is_range && !b.l->is_range) {
            jv v = a;
            v.l = concat_lists(c, a.l, b.l);
            return v;
        }
        if (a.t == JV_STR || a.t == JV_LIST || a.t == JV_TUPLE)
            jx_fail(&c->trap, G4_ETEMPLATE, "TypeError: can only concatenate %s (not \"%s\") to %s", jv_pytype(a),
                    jv_pytype(b), jv_pytype(a));
        break;
    case OP_SUB:
        if (ints) {
            bool ovf = __builtin_sub_overflow(int_of(a), int_of(b), &r);
            return int_result(c, ovf, r);
        }
        if (num) return jv_float(jv_num(a) - jv_num(b));
        break;
    case OP_MUL:
        if (ints) {
            bool ovf = __builtin_mul_overflow(int_of(a), int_of(b), &r);
            return int_result(c, ovf, r);
        }
        if (num) return jv_float(jv_num(a) * jv_num(b));
        if ((a.t == JV_STR || ((a.t == JV_LIST || a.t == JV_TUPLE) && !a.l->is_range)) && (b.t == JV_INT || b.t == JV_BOOL))
            return repeat(c, a, int_of(b));
        if ((b.t == JV_STR || ((b.t == JV_LIST || b.t == JV_TUPLE) && !b.l->is_range)) && (a.t == JV_INT || a.t == JV_BOOL))
            return repeat(c, b, int_of(a));
        break;
    case OP_DIV:
        if (num) {
            if (jv_num(b) == 0) jx_fail(&c->trap, G4_ETEMPLATE, "ZeroDivisionError: division by zero");
            return jv_float(jv_num(a) / jv_num(b));
        }
        break;
    case OP_FLOORDIV:
        if (ints) {
            int64_t x = int_of(a), y = int_of(b);
            if (y == 0) jx_fail(&c->trap, G4_ETEMPLATE, "ZeroDivisionError: integer division or modulo by zero");
            if (x == INT64_MIN && y == -1) int_result(c, true, 0);
            int64_t q = x / y;
            if ((x % y != 0) && ((x < 0) != (y < 0))) q--;
            return jv_int(q);
        }
        if (num) {
            if (jv_num(b) == 0) jx_fail(&c->trap, G4_ETEMPLATE, "ZeroDivisionError: float floor division by zero");
            double x = jv_num(a), y = jv_num(b);
            return jv_float(floor((x - py_fmod(x, y)) / y + 0.0));
        }
        break;
    case OP_MOD:
        if (ints) {
            int64_t x = int_of(a), y = int_of(b);
            if (y == 0) jx_fail(&c->trap, G4_ETEMPLATE, "ZeroDivisionError: integer division or modulo by zero");
            if (y == -1) return jv_int(0);
            int64_t m = x % y;
            if (m != 0 && ((m < 0) != (y < 0))) m += y;
            return jv_int(m);
        }
        if (num) {
            if (jv_num(b) == 0) jx_fail(&c->trap, G4_ETEMPLATE, "ZeroDivisionError: float modulo");
            return jv_float(py_fmod(jv_num(a), jv_num(b)));
        }
        if (a.t == JV_STR) jx_fail(&c->trap, G4_EUNSUPPORTED, "printf-style string formatting (str %% x) is not supported");
        break;
    case OP_POW:
        if (ints && int_of(b) >= 0) {
            int64_t base = int_of(a), e = int_of(b), acc = 1;
            bool ovf = false;
            while (e > 0 && !ovf) {
                if (e & 1) ovf |= __builtin_mul_overflow(acc, base, &acc);
                e >>= 1;
                if (e) ovf |= __builtin_mul_overflow(base, base, &base);
            }
            return int_result(c, ovf, acc);
        }
        if (num) {
            if (jv_num(a) == 0 && jv_num(b) < 0)
                jx_fail(&c->trap, G4_ETEMPLATE, "ZeroDivisionError: 0.0 cannot be raised to a negative power");
            return jv_float(pow(jv_num(a), jv_num(b)));
        }
        break;
    }
    char fmt[128];
    snprintf(fmt, sizeof fmt, "TypeError: unsupported operand type(s) for %s: '%%s' and '%%s'", opstr[op]);
    type_err(c, fmt, a, b);
}

static bool contains(jx_ctx *c, jv item, jv cont)
{
    switch (cont.t) {
    case JV_STR:
        if (item.t != JV_STR)
            jx_fail(&c->trap, G4_ETEMPLATE, "TypeError: 'in <string>' requires string as left operand, not %s", jv_pytype(item));
        return item.s.n == 0 || (item.s.n <= cont.s.n && memmem(cont.s.p, cont.s.n, item.s.p, item.s.n) != NULL);
    case JV_LIST: case JV_TUPLE:
        if (cont.l->gen_error) jx_iterate(c, cont); /* raises */
        jx_charge(c, cont.l->n / 16);
        for (size_t i = 0; i < cont.l->n; i++)
            if (jv_eq(jx_list_at(cont.l, i), item)) return true;
        return false;
    case JV_DICT:
        if (item.t == JV_LIST || item.t == JV_DICT || item.t == JV_NS)
            jx_fail(&c->trap, G4_ETEMPLATE, "TypeError: unhashable type: '%s'", jv_pytype(item));
        return jx_dict_get(cont.d, item) != NULL;
    case JV_UNDEF: return false;
    default:
        jx_fail(&c->trap, G4_ETEMPLATE, "TypeError: argument of type '%s' is not iterable", jv_pytype(cont));
    }
}

static bool compare(jx_ctx *c, int op, jv a, jv b)
{
    static const char *const names[] = {[OP_LT] = "<", [OP_LE] = "<=", [OP_GT] = ">", [OP_GE] = ">="};
    switch (op) {
    case OP_EQ: return jv_eq(a, b);
    case OP_NE: return !jv_eq(a, b);
    case OP_IN: return contains(c, a, b);
    case OP_NOTIN: return !contains(c, a, b);
    default: {
        int r = jv_cmp(c, a, b, names[op]);
        if (r == 2) return false; /* NaN */
        return op == OP_LT ? r < 0 : op == OP_LE ? r <= 0 : op == OP_GT ? r > 0 : r >= 0;
    }
    }
}

/* ---------------------------------------------------------------- calls */

static jx_args eval_args(jx_ctx *c, jx_scope *s, const jx_node *n)
{
    jx_args a = {0};
    a.npos = n->nargs;
    a.nkw = n->nkw;
    if (n->nargs) a.pos = jx_alloc(c->a, (size_t)n->nargs * sizeof(jv));
    for (int i = 0; i < n->nargs; i++) a.pos[i] = eval(c, s, n->args[i]);
    if (n->nkw) {
        a.kwv = jx_alloc(c->a, (size_t)n->nkw * sizeof(jv));
        a.kwn = n->kwn;
    }
    for (int i = 0; i < n->nkw; i++) a.kwv[i] = eval(c, s, n->kwv[i]);
    return a;
}

static jv call_macro(jx_ctx *c, jx_macro *m, const jx_args *args)
{
    const jx_node *def = m->def;
    const char *mname = m->name ? m->name : "caller";
    for (jx_scope *q = m->scope; q; q = q->parent)
        if (q->ended) /* Jinja2 renders such a macro's loop variables as the internal 'missing' */
            jx_fail(&c->trap, G4_EUNSUPPORTED, "calling macro '%s' after the for-loop iteration that defined it ended", mname);
    jx_scope *s = scope_new(c, m->scope);
    int np = def->nnames;
    if (args->npos > np && !(def->flags & JM_VARARGS))
        jx_fail(&c->trap, G4_ETEMPLATE, "TypeError: macro '%s' takes not more than %d argument(s)", mname, np);
    bool *used = args->nkw ? jx_alloc(c->a, (size_t)args->nkw) : NULL;
    jv caller = m->caller;
    for (int i = 0; i < args->nkw; i++)
        if (!strcmp(args->kwn[i], "caller") && (def->flags & JM_CALLER)) {
            caller = args->kwv[i];
            used[i] = true;
        }
    for (int p = 0; p < np; p++) {
        jv v;
        bool have = false;
        if (p < args->npos) {
            v = args->pos[p];
            have = true;
        }
        for (int i = 0; i < args->nkw; i++)
            if (!used[i] && !strcmp(args->kwn[i], def->names[p])) {
                if (have)
                    jx_fail(&c->trap, G4_ETEMPLATE, "TypeError: macro '%s' got multiple values for argument '%s'", mname,
                            def->names[p]);
                v = args->kwv[i];
                used[i] = true;
                have = true;
            }
        if (!have) {
            if (p < def->nargs && def->args[p]) {
                v = eval(c, s, def->args[p]);
            } else {
                char *h = jx_alloc(c->a, strlen(def->names[p]) + 40);
                sprintf(h, "parameter '%s' was not provided", def->names[p]);
                v = jv_undef_hint(h);
            }
        }
        scope_set(c, s, def->names[p], v);
    }
    jx_dict *kw = jx_dict_new(c->a, 0);
    for (int i = 0; i < args->nkw; i++) {
        if (used[i]) continue;
        if (!(def->flags & JM_KWARGS))
            jx_fail(&c->trap, G4_ETEMPLATE, "TypeError: macro '%s' takes no keyword argument '%s'", mname, args->kwn[i]);
        jx_dict_set(c->a, kw, jv_strz(args->kwn[i]), args->kwv[i]);
    }
    if (def->flags & JM_KWARGS) scope_set(c, s, "kwargs", jv_dict(kw));
    if (def->flags & JM_VARARGS) {
        jx_list *va = jx_list_new(c->a, 0);
        for (int i = np; i < args->npos; i++) jx_list_push(c->a, va, args->pos[i]);
        scope_set(c, s, "varargs", jv_tuple(va));
    }
    if (def->flags & JM_CALLER) {
        if (caller.t == JV_UNDEF && caller.u.name == NULL) caller = jv_undef_hint("No caller defined");
        scope_set(c, s, "caller", caller);
    }
    jx_buf buf, *saved = c->out;
    jx_buf_init(&buf, c->a);
    jx_buf_put(&buf, "", 0);
    c->out = &buf;
    enter(c);
    exec_body(c, s, &def->body);
    c->depth--;
    c->out = saved;
    return jv_strn(buf.p, buf.n);
}

jv jx_call_value(jx_ctx *c, jv callee, const jx_args *args)
{
    switch (callee.t) {
    case JV_MACRO: return call_macro(c, callee.m, args);
    case JV_FUNC: return jx_call_global(c, callee.fn, args);
    case JV_METHOD: return jx_call_method(c, callee.bm, args);
    case JV_UNDEF: jx_undef_fail(c, callee);
    default:
        jx_fail(&c->trap, G4_ETEMPLATE, "TypeError: '%s' object is not callable", jv_pytype(callee));
    }
}

/* ---------------------------------------------------------------- expressions */

static jv eval_filter(jx_ctx *c, jx_scope *s, const jx_node *n, jv block_input)
{
    jv in = n->a ? (n->a->kind == E_FILTER ? eval_filter(c, s, n->a, block_input) : eval(c, s, n->a)) : block_input;
    jx_args a = eval_args(c, s, n);
    c->trap.line = n->line;
    return jx_apply_filter(c, n->name, in, &a);
}

static jv eval(jx_ctx *c, jx_scope *s, const jx_node *n)
{
    enter(c);
    c->trap.line = n->line;
    jv r;
    switch (n->kind) {
    case E_CONST: r = n->val; break;
    case E_NAME: r = lookup(c, s, n->name); break;
    case E_LIST: case E_TUPLE: {
        jx_list *l = jx_list_new(c->a, (size_t)n->nargs);
        for (int i = 0; i < n->nargs; i++) jx_list_push(c->a, l, eval(c, s, n->args[i]));
        r = n->kind == E_LIST ? jv_list(l) : jv_tuple(l);
        break;
    }
    case E_DICT: {
        jx_dict *d = jx_dict_new(c->a, (size_t)n->nargs);
        for (int i = 0; i < n->nargs; i++) {
            jv k = eval(c, s, n->args[i]);
            if (k.t == JV_LIST || k.t == JV_DICT || k.t == JV_NS || k.t == JV_UNDEF)
                jx_fail(&c->trap, G4_ETEMPLATE, "TypeError: unhashable type: '%s'", jv_pytype(k));
            jx_dict_set(c->a, d, k, eval(c, s, n->kwv[i]));
        }
        r = jv_dict(d);
        break;
    }
    case E_ATTR: {
        jv obj = eval(c, s, n->a);
        c->trap.line = n->line;
        r = jx_getattr(c, obj, n->name);
        break;
    }
    case E_ITEM: {
        jv obj = eval(c, s, n->a);
        if (n->b->kind == E_SLICE) {
            jv part[3];
            for (int i = 0; i < 3; i++) part[i] = n->b->args[i] ? eval(c, s, n->b->args[i]) : jv_none();
            c->trap.line = n->line;
            r = jx_slice(c, obj, part[0], part[1], part[2]);
        } else {
            jv key = eval(c, s, n->b);
            c->trap.line = n->line;
            r = jx_getitem(c, obj, key);
        }
        break;
    }
    case E_CALL: {
        jv callee = eval(c, s, n->a);
        jx_args a = eval_args(c, s, n);
        c->trap.line = n->line;
        r = jx_call_value(c, callee, &a);
        break;
    }
    case E_FILTER: r = eval_filter(c, s, n, jv_undef_name("")); break;
    case E_TEST: {
        jv in = eval(c, s, n->a);
        jx_args a = eval_args(c, s, n);
        c->trap.line = n->line;
        r = jv_bool(jx_apply_test(c, n->name, in, &a));
        break;
    }
    case E_NOT: r = jv_bool(!jv_truthy(eval(c, s, n->a))); break;
    case E_NEG: case E_POS: {
        jv v = eval(c, s, n->a);
        c->trap.line = n->line;
        if (v.t == JV_UNDEF) jx_undef_fail(c, v);
        if (v.t == JV_FLOAT) r = jv_float(n->kind == E_NEG ? -v.f : v.f);
        else if (v.t == JV_INT || v.t == JV_BOOL) {
            int64_t x = int_of(v);
            if (n->kind == E_NEG && x == INT64_MIN) int_result(c, true, 0);
            r = jv_int(n->kind == E_NEG ? -x : x);
        } else {
            jx_fail(&c->trap, G4_ETEMPLATE, "TypeError: bad operand type for unary %c: '%s'", n->kind == E_NEG ? '-' : '+',
                    jv_pytype(v));
        }
        break;
    }
    case E_BIN: {
        jv a = eval(c, s, n->a), b = eval(c, s, n->b);
        c->trap.line = n->line;
        r = binop(c, n->op, a, b);
        break;
    }
    case E_AND: {
        jv a = eval(c, s, n->a);
        r = jv_truthy(a) ? eval(c, s, n->b) : a;
        break;
    }
    case E_OR: {
        jv a = eval(c, s, n->a);
        r = jv_truthy(a) ? a : eval(c, s, n->b);
        break;
    }
    case E_CMP: {
        jv left = eval(c, s, n->a);
        r = jv_bool(true);
        for (int i = 0; i < n->nargs; i++) {
            jv right = eval(c, s, n->args[i]);
            c->trap.line = n->line;
            if (!compare(c, n->ops[i], left, right)) {
                r = jv_bool(false);
                break;
            }
            left = right;
        }
        break;
    }
    case E_COND:
        if (jv_truthy(eval(c, s, n->a))) r = eval(c, s, n->b);
        else if (n->c) r = eval(c, s, n->c);
        else {
            char *h = jx_alloc(c->a, 120);
            sprintf(h, "the inline if-expression on line %d evaluated to false and no else section was defined.", n->line);
            r = jv_undef_hint(h);
        }
        break;
    default:
        jx_fail(&c->trap, G4_EUNSUPPORTED, "unsupported expression node %d", n->kind);
    }
    c->depth--;
    return r;
}

/* ---------------------------------------------------------------- statements */

static void assign_targets(jx_ctx *c, jx_scope *s, const jx_node *n, jv v)
{
    if (!(n->flags & 0x100)) {
        scope_set(c, s, n->names[0], v);
        return;
    }
    if (v.t == JV_UNDEF) jx_undef_fail(c, v);
    jx_list *items = jx_iterate(c, v);
    if (items->n != (size_t)n->nnames) {
        if (items->n > (size_t)n->nnames)
            jx_fail(&c->trap, G4_ETEMPLATE, "ValueError: too many values to unpack (expected %d)", n->nnames);
        jx_fail(&c->trap, G4_ETEMPLATE, "ValueError: not enough values to unpack (expected %d, got %zu)", n->nnames, items->n);
    }
    for (int i = 0; i < n->nnames; i++) scope_set(c, s, n->names[i], items->v[i]);
}

static jv render_block(jx_ctx *c, jx_scope *s, const jx_body *b)
{
    jx_buf buf, *saved = c->out;
    jx_buf_init(&buf, c->a);
    jx_buf_put(&buf, "", 0);
    c->out = &buf;
    exec_body(c, s, b);
    c->out = saved;
    return jv_strn(buf.p, buf.n);
}

/* ---- loops that can stop early ----
 * The official template scans forward from every message ({% for j in range(i + 1, n) %} whose
 * body is one {% if not ns.found %}): in Jinja2 that is quadratic. Such an iteration whose `if`
 * takes an empty branch changed nothing, and when the condition reads nothing a loop iteration
 * sets (no loop variable, no `loop`, no call or filter that could have an effect or differ from
 * call to call), every later iteration takes the same empty branch: the loop can stop there with
 * the same output, and the scan becomes linear overall. */

static bool is_blank(const jx_body *b)
{
    for (int i = 0; i < b->n; i++)
        if (b->v[i]->kind != S_TEXT || b->v[i]->val.s.n) return false;
    return true;
}

static bool names_target(const jx_node *loop, const char *name)
{
    if (!strcmp(name, "loop")) return true;
    for (int i = 0; i < loop->nnames; i++)
        if (!strcmp(loop->names[i], name)) return true;
    return false;
}

static bool loop_invariant(const jx_node *e, const jx_node *loop)
{
    if (!e) return true;
    switch (e->kind) {
    case E_CONST: return true;
    case E_NAME: return !names_target(loop, e->name);
    case E_LIST: case E_TUPLE: case E_DICT: case E_ATTR: case E_ITEM: case E_SLICE: case E_TEST: case E_NOT:
    case E_NEG: case E_POS: case E_BIN: case E_AND: case E_OR: case E_CMP: case E_COND:
        break;
    default: return false; /* calls, filters */
    }
    if (!loop_invariant(e->a, loop) || !loop_invariant(e->b, loop) || !loop_invariant(e->c, loop)) return false;
    for (int i = 0; i < e->nargs; i++)
        if (!loop_invariant(e->args[i], loop)) return false;
    for (int i = 0; i < e->nkw; i++)
        if (!loop_invariant(e->kwv[i], loop)) return false;
    return true;
}

/* The loop body's single `if` when its condition is loop-invariant, else NULL. */
static const jx_node *invariant_guard(const jx_node *loop)
{
    const jx_node *g = NULL;
    for (int i = 0; i < loop->body.n; i++) {
        const jx_node *st = loop->body.v[i];
        if (st->kind == S_TEXT && !st->val.s.n) continue;
        if (g || st->kind != S_IF) return NULL;
        g = st;
    }
    return g && loop_invariant(g->a, loop) ? g : NULL;
}

static int exec_for(jx_ctx *c, jx_scope *s, const jx_node *n)
{
    jv it = eval(c, s, n->a);
    c->trap.line = n->line;
    /* a range is walked without materialising it: a loop over range(i, n) per message would
     * otherwise cost memory quadratic in the messages */
    jx_list *items = it.t == JV_LIST && it.l->is_range ? it.l : jx_iterate(c, it);
    if (n->b) { /* loop filter: applied before the loop, so loop.length counts kept items */
        jx_list *kept = jx_list_new(c->a, items->n);
        for (size_t i = 0; i < items->n; i++) {
            jx_scope *fs = scope_new(c, s);
            jv item = jx_list_at(items, i);
            assign_targets(c, fs, n, item);
            if (jv_truthy(eval(c, fs, n->b))) jx_list_push(c->a, kept, item);
        }
        items = kept;
    }
    const jx_node *guard = items->n > 1 ? invariant_guard(n) : NULL;
    if (items->n == 0) return exec_body(c, scope_new(c, s), &n->else_body);
    jx_loop *lp = jx_alloc(c->a, sizeof *lp);
    lp->items = items;
    lp->length = items->n;
    lp->depth0 = 0;
    jv lv = {0};
    lv.t = JV_LOOP;
    lv.lp = lp;
    jx_scope *is = NULL;
    for (size_t i = 0; i < items->n; i++) {
        lp->index0 = i;
        /* a fresh scope per iteration (Jinja semantics), recycled when nothing kept it */
        if (!is || is->captured) is = scope_new(c, s);
        else is->vars.n = 0;
        assign_targets(c, is, n, jx_list_at(items, i));
        scope_set(c, is, "loop", lv);
        if (guard) { /* what exec_body(&n->body) would do, stopping at the first empty branch */
            enter(c);
            c->trap.line = guard->line;
            const jx_body *br = jv_truthy(eval(c, is, guard->a)) ? &guard->body : &guard->else_body;
            int f = is_blank(br) ? FLOW_BREAK : exec_body(c, is, br);
            c->depth--;
            if (is->captured) is->ended = true;
            if (f == FLOW_BREAK) break;
            continue;
        }
        int f = exec_body(c, is, &n->body);
        if (is->captured) is->ended = true;
        if (f == FLOW_BREAK) break;
    }
    return FLOW_NORMAL;
}

static int exec_stmt(jx_ctx *c, jx_scope *s, const jx_node *n)
{
    c->trap.line = n->line;
    switch (n->kind) {
    case S_TEXT: out_put(c, n->val.s.p, n->val.s.n); return FLOW_NORMAL;
    case S_OUTPUT: {
        jv v = eval(c, s, n->a);
        c->trap.line = n->line;
        if (v.t == JV_STR) {
            out_put(c, v.s.p, v.s.n);
        } else {
            jx_buf tmp;
            jx_buf_init(&tmp, c->a);
            jv_str(c, &tmp, v);
            out_put(c, tmp.p, tmp.n);
        }
        return FLOW_NORMAL;
    }
    case S_IF:
        if (jv_truthy(eval(c, s, n->a))) return exec_body(c, s, &n->body);
        return exec_body(c, s, &n->else_body);
    case S_FOR: return exec_for(c, s, n);
    case S_SET: assign_targets(c, s, n, eval(c, s, n->a)); return FLOW_NORMAL;
    case S_SETBLOCK: {
        jv v = render_block(c, scope_new(c, s), &n->body);
        if (n->a) v = eval_filter(c, s, n->a, v);
        scope_set(c, s, n->names[0], v);
        return FLOW_NORMAL;
    }
    case S_SETATTR: {
        jv v;
        if (n->flags & 0x200) {
            v = render_block(c, scope_new(c, s), &n->body);
            if (n->a) v = eval_filter(c, s, n->a, v);
        } else {
            v = eval(c, s, n->a);
        }
        c->trap.line = n->line;
        jv ns = lookup(c, s, n->name);
        if (ns.t != JV_NS)
            jx_fail(&c->trap, G4_ETEMPLATE, "TemplateRuntimeError: cannot assign attribute on non-namespace object");
        jx_dict_set(c->a, ns.d, jv_strz(n->attr), v);
        return FLOW_NORMAL;
    }
    case S_MACRO: {
        jx_macro *m = jx_alloc(c->a, sizeof *m);
        m->def = n;
        m->scope = s;
        s->captured = true;
        m->name = n->name;
        jv v = {0};
        v.t = JV_MACRO;
        v.m = m;
        scope_set(c, s, n->name, v);
        return FLOW_NORMAL;
    }
    case S_CALLBLOCK: {
        jx_macro *cm = jx_alloc(c->a, sizeof *cm);
        cm->def = n;
        cm->scope = s;
        s->captured = true;
        cm->name = NULL;
        jv callerv = {0};
        callerv.t = JV_MACRO;
        callerv.m = cm;
        const jx_node *call = n->a;
        jv callee = eval(c, s, call->a);
        jx_args a = eval_args(c, s, call);
        c->trap.line = n->line;
        jv r;
        if (callee.t == JV_MACRO) {
            jx_macro tmp = *callee.m;
            tmp.caller = callerv;
            if (!(tmp.def->flags & JM_CALLER))
                jx_fail(&c->trap, G4_ETEMPLATE, "TypeError: macro '%s' was invoked with a caller but does not use it", tmp.name);
            r = call_macro(c, &tmp, &a);
        } else {
            jx_fail(&c->trap, G4_EUNSUPPORTED, "{%% call %%} of something that is not a macro is not supported");
        }
        out_put(c, r.s.p, r.s.n);
        return FLOW_NORMAL;
    }
    case S_FILTERBLOCK: {
        jv v = render_block(c, scope_new(c, s), &n->body);
        v = eval_filter(c, s, n->a, v);
        jx_buf tmp;
        jx_buf_init(&tmp, c->a);
        jv_str(c, &tmp, v);
        out_put(c, tmp.p, tmp.n);
        return FLOW_NORMAL;
    }
    case S_WITH: {
        jx_scope *ws = scope_new(c, s);
        for (int i = 0; i < n->nnames; i++) scope_set(c, ws, n->names[i], eval(c, s, n->args[i]));
        return exec_body(c, ws, &n->body);
    }
    case S_SCOPE: return exec_body(c, s, &n->body);
    case S_BREAK: return FLOW_BREAK;
    case S_CONTINUE: return FLOW_CONTINUE;
    default: jx_fail(&c->trap, G4_EUNSUPPORTED, "unsupported statement node %d", n->kind);
    }
}

static int exec_body(jx_ctx *c, jx_scope *s, const jx_body *b)
{
    enter(c);
    int f = FLOW_NORMAL;
    for (int i = 0; i < b->n && f == FLOW_NORMAL; i++) f = exec_stmt(c, s, b->v[i]);
    c->depth--;
    return f;
}

/* ---------------------------------------------------------------- public API */

struct g4_jinja {
    jx_template t;
};

#define JX_TEMPLATE_MEM (256u << 20)

int g4_jinja_compile(const char *src, size_t len, g4_jinja **out, g4_err *err)
{
    *out = NULL;
    if (!src) return g4_err_set(err, G4_EINVAL, "template source is NULL");
    g4_jinja *j = calloc(1, sizeof *j);
    if (!j) return g4_err_set(err, G4_ENOMEM, "out of memory");
    j->t.a = jx_arena_new(JX_TEMPLATE_MEM);
    if (!j->t.a) {
        free(j);
        return g4_err_set(err, G4_ENOMEM, "out of memory");
    }
    jx_trap *trap = malloc(sizeof *trap);
    if (!trap) {
        jx_arena_free(j->t.a);
        free(j);
        return g4_err_set(err, G4_ENOMEM, "out of memory");
    }
    memset(trap, 0, sizeof *trap);
    jx_arena_set_trap(j->t.a, trap);
    if (setjmp(trap->jb)) {
        int code = trap->err.code;
        if (err) *err = trap->err;
        jx_arena_free(j->t.a);
        free(j);
        free(trap);
        return code ? code : G4_EFORMAT;
    }
    jx_parse(trap, &j->t, src, len);
    jx_arena_set_trap(j->t.a, NULL);
    free(trap);
    *out = j;
    return G4_OK;
}

void g4_jinja_free(g4_jinja *j)
{
    if (!j) return;
    jx_arena_free(j->t.a);
    free(j);
}

static void render_done(jx_ctx *c, g4_jinja_stats *stats)
{
    if (stats) {
        stats->steps = c->steps;
        stats->memory = jx_arena_total(c->a);
    }
    jx_arena_free(c->a);
    free(c);
}

int g4_jinja_render(const g4_jinja *j, const json_t *vars, char **out, size_t *out_len, g4_err *err)
{
    return g4_jinja_render_ex(j, vars, NULL, NULL, out, out_len, err);
}

int g4_jinja_render_ex(const g4_jinja *j, const json_t *vars, const g4_jinja_limits *lim, g4_jinja_stats *stats,
                       char **out, size_t *out_len, g4_err *err)
{
    *out = NULL;
    if (out_len) *out_len = 0;
    if (stats) memset(stats, 0, sizeof *stats);
    if (!j) return g4_err_set(err, G4_EINVAL, "template is NULL");
    if (vars && !json_is_object(vars)) return g4_err_set(err, G4_EINVAL, "template variables must be a JSON object");
    static const g4_jinja_limits none;
    if (!lim) lim = &none;
    jx_ctx *c = calloc(1, sizeof *c);
    if (!c) return g4_err_set(err, G4_ENOMEM, "out of memory");
    c->a = jx_arena_new(lim->max_memory ? lim->max_memory : G4_JINJA_DEFAULT_MEMORY);
    if (!c->a) {
        free(c);
        return g4_err_set(err, G4_ENOMEM, "out of memory");
    }
    if (lim->shared) jx_arena_share(c->a, lim->shared, lim->shared_max);
    c->out_limit = lim->max_output ? lim->max_output : G4_JINJA_DEFAULT_OUTPUT;
    c->max_steps = lim->max_steps ? lim->max_steps : G4_JINJA_DEFAULT_STEPS;
    c->cancel = lim->cancel;
    c->timeout_ms = lim->timeout_ms;
    if (lim->timeout_ms) c->deadline_ns = jx_now_ns() + (uint64_t)lim->timeout_ms * 1000000u;
    c->poll_at = 0; /* poll at the first step: a render cancelled before it starts does nothing */
    jx_arena_set_trap(c->a, &c->trap);
    if (setjmp(c->trap.jb)) {
        int code = c->trap.err.code;
        if (err) *err = c->trap.err;
        render_done(c, stats);
        return code ? code : G4_ETEMPLATE;
    }
    c->root = scope_new(c, NULL);
    if (vars) {
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)vars, k, v) {
            scope_set(c, c->root, jx_strdup(c->a, k, strlen(k)), jv_from_json(c, v));
        }
    }
    jx_buf buf;
    jx_buf_init(&buf, c->a);
    jx_buf_put(&buf, "", 0);
    c->out = &buf;
    exec_body(c, c->root, &j->t.root);
    char *res = malloc(buf.n + 1);
    if (!res) {
        render_done(c, stats);
        return g4_err_set(err, G4_ENOMEM, "out of memory");
    }
    memcpy(res, buf.p, buf.n);
    res[buf.n] = 0;
    *out = res;
    if (out_len) *out_len = buf.n;
    render_done(c, stats);
    return G4_OK;
}
