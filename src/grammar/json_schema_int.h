/* json_schema_int.h — internal to the JSON Schema compiler (json_schema.c: keywords, references,
 * merging, objects, arrays, dispatch and the top level; json_schema_emit.c: the NFA building
 * blocks, string bodies, literal values and numbers). Not for other modules: grammar.h is
 * the interface. */
#ifndef G4_GRAMMAR_JSON_SCHEMA_INT_H
#define G4_GRAMMAR_JSON_SCHEMA_INT_H

#include <jansson.h>
#include <stddef.h>

#include "grammar/constrain.h"
#include "grammar/fsa.h"
#include "grammar/grammar.h"
#include "grammar/regex.h"

enum { FMT_JSON = 0, FMT_GEMMA = 1 };
enum { T_NULL = 1, T_BOOL = 2, T_INT = 4, T_NUM = 8, T_STR = 16, T_ARR = 32, T_OBJ = 64, T_ALL = 127 };
enum { MK_NONE = 0, MK_CONTENT, MK_THOUGHT };

#define SC_MAX_NEST 64
#define SC_MAX_COUNT 4096        /* minLength, maxLength, minItems, maxItems: counted by states */
#define SC_COPY_BUDGET 4096      /* NFA states for copies of one array item before it becomes a rule */
#define SC_REF_SHARE 1024        /* NFA states of a $ref target above which its later uses call one rule */
#define MAXI 999999999999999999LL /* 18 digits */
#define TOK_STR "<|\"|>"              /* Gemma's string quote token */

typedef struct {
    int start, accept, fmt, mask, any;
    const json_t *schema, *root;
    char path[512], part[64];
} sc_rule;

/* the NFA states one schema node took when it was last built inline (array items: copy or rule) */
typedef struct {
    const json_t *schema, *root;
    int fmt, mask, states;
} sc_size;

typedef struct {
    g4_nfa a;
    sc_rule *rules;
    int nr, rcap;
    const json_t *root;
    const json_t *stack[SC_MAX_NEST];
    int depth, nest;
    char path[512];
    char part[64];            /* the request field being compiled (for error params) */
    char fail_part[64];
    g4_err *err;
    int rc, chat;
    const char *special[G4_SYM_NSPECIAL];
    int ns;
    json_t *owned;            /* schemas made by merging, kept alive until the end */
    g4_dfa body[4];
    int have_body[4];
    int any_rule[2];
    sc_size *sizes;
    int nsizes, capsizes;
    /* limits (grammar.h): the budget every automaton of the compile is charged to */
    g4_fsa_budget bud;
    int max_states;           /* DFA states */
    int max_nfa;              /* NFA states of any one automaton being built */
    size_t max_edges;
    int limit;                /* g4_grammar_limit found by a check outside the budget */
} sc;

/* errors: the first one wins; it names the schema path and the request part */
void jsc_fail(sc *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void jsc_fail_err(sc *c, const g4_err *e);
/* an automaton operation failed: e is its error; the limit it went past is noted for the stats */
void jsc_fail_fsa(sc *c, const g4_nfa *a, const g4_err *e);
/* the compile's budget stopped (memory, steps, time, shared budget, cancel) */
void jsc_fail_budget(sc *c);
/* a new scratch NFA bounded by the compile's limits */
g4_nfa jsc_scratch_nfa(sc *c);
/* the JSON pointer of the node being compiled: push returns the length to pop back to */
size_t jsc_path_push(sc *c, const char *seg);
size_t jsc_path_push_i(sc *c, const char *seg, size_t i);
void jsc_path_pop(sc *c, size_t m);

/* NFA building blocks: a new state, a literal, an epsilon, a special token, white space and
 * the separators of the format (FMT_JSON or FMT_GEMMA) */
int jsc_st(sc *c);
void jsc_lit(sc *c, int from, int to, const char *s);
int jsc_lit_new(sc *c, int from, const char *s);
void jsc_eps(sc *c, int from, int to);
void jsc_tok(sc *c, int from, int to, const char *text);
void jsc_ws(sc *c, int fmt, int from, int to);
int jsc_comma(sc *c, int fmt, int from);
int jsc_colon(sc *c, int fmt, int from);

/* values and references: the JSON Schema types of a value (T_INT for whole numbers, T_NUM for
 * all), a string's characters, a local $ref's target (quiet: NULL without an error) */
int jsc_value_types(const json_t *v);
size_t jsc_utf8_chars(const char *p, size_t n);
const json_t *jsc_resolve_ref(sc *c, const char *ref, int quiet);
/* oneOf (json_schema_oneof.c): 1 when no JSON value validates against both schemas (proven), 0 when
 * that is not proven */
int jsc_disjoint(sc *c, const json_t *a, const json_t *b);

/* rules: a schema compiled on its own (recursion, big repeats), called between two states */
int jsc_new_rule(sc *c, const json_t *schema, int fmt, int mask, int any);
void jsc_call(sc *c, int from, int to, int rule);

/* string contents as DFAs (encoding x length x pattern x format x the chat markers, minus the
 * excluded texts); the plain body is cached per encoding and marker set */
const g4_dfa *jsc_plain_body(sc *c, g4_str_enc enc, int mk);
int jsc_string_body(sc *c, g4_str_enc enc, int mk, long minl, long maxl, const char *pat, size_t patlen, const char *format,
                    const char *const *excl, const size_t *excl_len, int n_excl, g4_dfa *out);

/* formats: of strings (a regex each), of numbers (OpenAPI's int32 / int64 bound integers; float
 * and double any number), 0 unknown */
enum { JSC_FMT_STRING = 1, JSC_FMT_NUMBER = 2 };
#define JSC_FORMATS_KNOWN "date, time, date-time, uuid, email, ipv4 on strings; int32, int64, float, double on numbers"
int jsc_format_kind(const char *f);

/* literal values (enum, const) and object keys in the format's spelling */
int jsc_bare_key_ok(const char *s, size_t n);
/* whether a key / literal value can be written in the format: in a chat turn Gemma's strings
 * cannot hold markup (<|, <turn|>, <eos>); JSON escapes it */
int jsc_key_ok(const sc *c, int fmt, const char *s, size_t n);
int jsc_literal_ok(const sc *c, int fmt, const json_t *v);
void jsc_emit_key(sc *c, int fmt, int from, int to, const char *s, size_t n);
void jsc_emit_value(sc *c, const json_t *v, int fmt, int from, int to);

/* numbers: any, or within the schema's bounds */
void jsc_number_plain(sc *c, int is_int, int from, int to);
void jsc_gen_number(sc *c, const json_t *s, int is_int, int from, int to);

#endif
