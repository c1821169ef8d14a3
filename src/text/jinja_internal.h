/* jinja_internal.h — private declarations shared by the Jinja engine's files (value model,
 * lexer/parser, evaluator, builtins, Unicode tables). Not for use outside src/text/jinja_*.c and
 * src/text/chat_template.c's engine calls (which go through jinja_engine.h).
 *
 * Memory: everything a parse or a render allocates lives in one arena (jx_arena) freed at once.
 * Errors: parse and render run under a jx_trap; jx_fail() longjmps back to the entry point, which
 * returns the code. Nothing outside the arena is allocated while a trap is armed. */
#ifndef G4_TEXT_JINJA_INTERNAL_H
#define G4_TEXT_JINJA_INTERNAL_H

#include <setjmp.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

/* ---- traps (non-local error exit) ---- */
typedef struct jx_trap {
    jmp_buf jb;
    g4_err err;
    int line;          /* template line being worked on, for messages (0: unknown) */
} jx_trap;

_Noreturn void jx_fail(jx_trap *t, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ---- arena ---- */
typedef struct jx_arena jx_arena;
jx_arena *jx_arena_new(size_t limit_bytes);
/* Also charges the arena's chunks to *shared (bytes held by every arena sharing it, e.g. all
 * renders in flight) and fails with G4_EBUSY past shared_max; jx_arena_free gives them back. */
void jx_arena_share(jx_arena *a, atomic_size_t *shared, size_t shared_max);
size_t jx_arena_total(const jx_arena *a); /* bytes taken from malloc so far (the peak: nothing is freed early) */
void jx_arena_free(jx_arena *a);
void jx_arena_set_trap(jx_arena *a, jx_trap *t);
void *jx_alloc(jx_arena *a, size_t n); /* zeroed; fails through the trap when out of memory */
char *jx_strdup(jx_arena *a, const char *p, size_t n); /* NUL-terminated copy */
const char *jx_size_str(char buf[32], size_t n);       /* "256 MiB" or "1000 bytes", for messages */

/* ---- growable byte buffer in the arena ---- */
typedef struct jx_buf {
    jx_arena *a;
    char *p;
    size_t n, cap;
} jx_buf;
void jx_buf_init(jx_buf *b, jx_arena *a);
void jx_buf_put(jx_buf *b, const char *p, size_t n);
void jx_buf_puts(jx_buf *b, const char *s);
void jx_buf_putc(jx_buf *b, char c);
void jx_buf_printf(jx_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void jx_buf_put_cp(jx_buf *b, uint32_t cp); /* UTF-8 encode */

/* ---- UTF-8 and Unicode (jinja_unicode.c + jinja_value.c) ---- */
int jx_upper_cp(uint32_t c, uint32_t out[3]);
int jx_lower_cp(uint32_t c, uint32_t out[3]);
bool jx_isspace_cp(uint32_t c);
bool jx_isprintable_cp(uint32_t c);
/* Decodes one code point at p (n bytes left); returns its byte length (>=1). Bytes that are not
 * valid UTF-8 decode as themselves (len 1) — inputs are validated by jansson beforehand. */
size_t jx_utf8_dec(const char *p, size_t n, uint32_t *cp);
size_t jx_utf8_count(const char *p, size_t n);

/* ---- values ---- */
typedef enum {
    JV_UNDEF = 0, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STR, JV_LIST, JV_TUPLE, JV_DICT,
    JV_NS, JV_MACRO, JV_FUNC, JV_METHOD, JV_LOOP
} jv_type;

/* Undefined flavours (jv.sub when t == JV_UNDEF), mirroring jinja2.Undefined's messages. */
enum { JU_NAME = 0, JU_ATTR, JU_ELEM, JU_HINT, JU_UNSAFE };

struct jx_list;
struct jx_dict;
struct jx_macro;
struct jx_method;
struct jx_loop;

typedef struct jv {
    uint8_t t;
    uint8_t sub;
    union {
        bool b;
        int64_t i;
        double f;
        struct { const char *p; size_t n; } s;
        struct jx_list *l;     /* LIST, TUPLE */
        struct jx_dict *d;     /* DICT, NS */
        struct jx_macro *m;
        int fn;                /* JV_FUNC: builtin global id */
        struct jx_method *bm;
        struct jx_loop *lp;
        struct { const char *name; const char *obj; } u;
    };
} jv;

typedef struct jx_list {
    size_t n, cap;
    jv *v;                     /* NULL for a range() until something needs all items (jx_iterate):
                                  read single items with jx_list_at */
    bool is_range;             /* made by range(): prints as range(a, b[, s]); item i = r0 + i*rs */
    const char *view;          /* "dict_items"/"dict_keys"/"dict_values": repr wraps the list */
    bool gen;                  /* stands for a Python generator/iterator (map, select, ...):
                                  always truthy, has no len(), cannot be printed */
    const char *gen_error;     /* a generator whose first step raises this TypeError */
    int64_t r0, r1, rs;
} jx_list;

typedef struct jx_dict {       /* insertion-ordered, like a Python dict; also Namespace attrs */
    size_t n, cap;
    jv *k, *v;
} jx_dict;

typedef struct jx_method {
    jv self;
    const char *name;
} jx_method;

struct jx_node;
struct jx_scope;
typedef struct jx_macro {
    const struct jx_node *def;   /* S_MACRO or S_CALLBLOCK node */
    struct jx_scope *scope;      /* defining scope */
    const char *name;
    jv caller;                   /* for a macro invoked by {% call %}: the caller macro */
} jx_macro;

typedef struct jx_loop {
    size_t index0, length;
    jx_list *items;
    int depth0;
    bool have_changed;
    jv changed_last;
} jx_loop;

/* builtin global functions */
enum { JF_RANGE = 1, JF_NAMESPACE, JF_DICT, JF_RAISE, JF_STRFTIME, JF_CYCLER, JF_JOINER, JF_LIPSUM };

typedef struct jx_ctx jx_ctx;

static inline jv jv_undef_name(const char *name) { jv v = {0}; v.t = JV_UNDEF; v.sub = JU_NAME; v.u.name = name; return v; }
static inline jv jv_none(void) { jv v = {0}; v.t = JV_NONE; return v; }
static inline jv jv_bool(bool b) { jv v = {0}; v.t = JV_BOOL; v.b = b; return v; }
static inline jv jv_int(int64_t i) { jv v = {0}; v.t = JV_INT; v.i = i; return v; }
static inline jv jv_float(double f) { jv v = {0}; v.t = JV_FLOAT; v.f = f; return v; }
static inline jv jv_strn(const char *p, size_t n) { jv v = {0}; v.t = JV_STR; v.s.p = p; v.s.n = n; return v; }
jv jv_strz(const char *s);
jv jv_undef_hint(const char *hint);
jv jv_undef_attr(jx_ctx *c, jv obj, jv key); /* "<type> object has no attribute/element <key>" */

jx_list *jx_list_new(jx_arena *a, size_t cap);
/* Item i < l->n of any list, a range included, without materialising it. */
static inline jv jx_list_at(const jx_list *l, size_t i)
{
    return l->v ? l->v[i] : jv_int(l->r0 + (int64_t)i * l->rs);
}
void jx_list_push(jx_arena *a, jx_list *l, jv v);
jv jv_list(jx_list *l);
jv jv_tuple(jx_list *l);
jx_dict *jx_dict_new(jx_arena *a, size_t cap);
/* Sets key (replacing an equal key in place, like Python). */
void jx_dict_set(jx_arena *a, jx_dict *d, jv k, jv v);
/* Returns the value slot of key or NULL. */
jv *jx_dict_get(const jx_dict *d, jv k);
jv *jx_dict_gets(const jx_dict *d, const char *k, size_t n);
jv jv_dict(jx_dict *d);

bool jv_truthy(jv v);
bool jv_is_num(jv v);            /* bool, int or float */
double jv_num(jv v);
bool jv_eq(jv a, jv b);
/* Python ordering a < b etc.; raises TypeError through ctx on incomparable types. */
int jv_cmp(jx_ctx *c, jv a, jv b, const char *opname);
const char *jv_pytype(jv v);     /* Python type name: "str", "int", "dict", "NoneType", ... */

void jv_str(jx_ctx *c, jx_buf *b, jv v);   /* str(v) as Jinja prints it */
void jv_repr(jx_ctx *c, jx_buf *b, jv v);  /* repr(v) */
jv jv_to_string(jx_ctx *c, jv v);          /* str(v) as a JV_STR (identity for strings) */
void jx_float_repr(jx_buf *b, double f);
void jx_str_repr(jx_buf *b, const char *p, size_t n);

struct json_t;
jv jv_from_json(jx_ctx *c, const struct json_t *j);
/* json.dumps(v, ensure_ascii=False, indent=indent (<0: None), separators, sort_keys). */
void jv_tojson(jx_ctx *c, jx_buf *b, jv v, int indent, const char *item_sep, const char *key_sep,
               bool sort_keys);

/* ---- AST ---- */
enum {
    /* statements */
    S_TEXT = 1, S_OUTPUT, S_IF, S_FOR, S_SET, S_SETATTR, S_SETBLOCK, S_MACRO, S_CALLBLOCK,
    S_FILTERBLOCK, S_WITH, S_BREAK, S_CONTINUE, S_SCOPE,
    /* expressions */
    E_CONST = 50, E_NAME, E_LIST, E_TUPLE, E_DICT, E_ATTR, E_ITEM, E_SLICE, E_CALL, E_FILTER,
    E_TEST, E_NOT, E_NEG, E_POS, E_BIN, E_AND, E_OR, E_CMP, E_COND
};
/* E_BIN ops and E_CMP ops */
enum { OP_ADD = 1, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW, OP_CONCAT,
       OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE, OP_IN, OP_NOTIN };

typedef struct jx_body {
    struct jx_node **v;
    int n;
} jx_body;

typedef struct jx_node {
    int kind, line, op;
    jv val;                       /* E_CONST; S_TEXT text */
    const char *name;             /* names, attribute, filter/test name, macro name */
    const char *attr;             /* S_SETATTR attribute */
    struct jx_node *a, *b, *c;
    struct jx_node **args;        /* call/filter/test args, list items, dict keys, cmp operands,
                                     macro defaults (NULL entries: no default), with values */
    int nargs;
    struct jx_node **kwv;         /* keyword values; E_DICT values */
    const char **kwn;
    int nkw;
    int *ops;                     /* E_CMP operators */
    const char **names;           /* targets / macro parameters */
    int nnames;
    jx_body body, else_body;
    int flags;                    /* S_MACRO: JM_* ; S_FOR: 1 = recursive (refused at parse) */
} jx_node;

enum { JM_VARARGS = 1, JM_KWARGS = 2, JM_CALLER = 4 };

typedef struct jx_template {
    jx_arena *a;
    jx_body root;
} jx_template;

/* jinja_parse.c: lexes and parses src into t (arena t->a); errors go through trap. */
void jx_parse(jx_trap *trap, jx_template *t, const char *src, size_t len);

/* ---- evaluation context (jinja_eval.c) ---- */
typedef struct jx_args {
    jv *pos;
    int npos;
    const char **kwn;
    jv *kwv;
    int nkw;
} jx_args;

struct jx_ctx {
    jx_trap trap;
    jx_arena *a;
    jx_buf *out;
    struct jx_scope *root;
    int depth;           /* recursion depth (expressions, statements, macro calls) */
    int loop_depth;
    size_t out_limit;
    uint64_t steps;      /* evaluation steps so far (enter() counts them) */
    uint64_t max_steps;
    uint64_t poll_at;    /* next step count at which jx_poll runs */
    const volatile int *cancel;
    uint64_t deadline_ns; /* CLOCK_MONOTONIC; 0: none */
    uint32_t timeout_ms;
};

#define JX_MAX_DEPTH 400
#define JX_MAX_PARSE_DEPTH 200
#define JX_MAX_RANGE 100000
#define JX_POLL_STEPS 1024  /* cancellation and the deadline are checked this often */

/* Counts n evaluation steps (builtins charge their per-item work with it); past the step budget,
 * on cancellation or after the deadline it fails through the trap (jx_poll: jinja_value.c). */
void jx_poll(jx_ctx *c);
/* CLOCK_MONOTONIC in ns, the clock of deadline_ns (jinja_value.c) */
uint64_t jx_now_ns(void);
/* "undefined" error for a value about to be used (jinja_value.c) */
_Noreturn void jx_undef_fail(jx_ctx *c, jv u);
static inline void jx_charge(jx_ctx *c, uint64_t n)
{
    c->steps += n;
    if (c->steps >= c->poll_at) jx_poll(c);
}

/* jinja_builtins.c */
bool jx_filter_known(const char *name);
bool jx_test_known(const char *name);
jv jx_apply_filter(jx_ctx *c, const char *name, jv in, const jx_args *args);
bool jx_apply_test(jx_ctx *c, const char *name, jv in, const jx_args *args);
jv jx_getattr(jx_ctx *c, jv obj, const char *name);
jv jx_getitem(jx_ctx *c, jv obj, jv key);
jv jx_slice(jx_ctx *c, jv obj, jv start, jv stop, jv step);
jv jx_call_method(jx_ctx *c, const jx_method *m, const jx_args *args);
jv jx_call_global(jx_ctx *c, int fn, const jx_args *args);
int jx_global_id(const char *name);
/* Iterates v as a Python for loop would: a list of items (dict -> keys, str -> chars). */
jx_list *jx_iterate(jx_ctx *c, jv v);
bool jx_is_iterable(jv v);
/* an empty generator that raises msg when iterated (Jinja's lazy filters on bad input) */
jv jx_failing_gen(jx_ctx *c, const char *msg);
jv jx_arg(const jx_args *a, int pos, const char *kw, bool *have);
jv jx_str_lower(jx_ctx *c, jv s);
jv jx_str_upper(jx_ctx *c, jv s);
jv jx_str_strip(jx_ctx *c, jv s, const char *chars, size_t nchars, bool have_chars, int which);

/* jinja_eval.c — used by builtins to call back into the evaluator */
jv jx_call_value(jx_ctx *c, jv callee, const jx_args *args);

#endif
