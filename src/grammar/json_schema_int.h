/* json_schema_int.h — internal to the JSON Schema compiler (json_schema.c: keywords, references,
 * merging, objects, arrays, dispatch and the top level; json_schema_emit.c: the NFA building
 * blocks, string bodies, literal values and numbers). Not for other modules: json_schema.h is
 * the interface. */
#ifndef G4_GRAMMAR_JSON_SCHEMA_INT_H
#define G4_GRAMMAR_JSON_SCHEMA_INT_H

#include <jansson.h>
#include <stddef.h>

#include "grammar/constrain.h"
#include "grammar/fsa.h"
#include "grammar/json_schema.h"
#include "grammar/regex.h"

enum { FMT_JSON = 0, FMT_GEMMA = 1 };
enum { T_NULL = 1, T_BOOL = 2, T_INT = 4, T_NUM = 8, T_STR = 16, T_ARR = 32, T_OBJ = 64, T_ALL = 127 };
enum { MK_NONE = 0, MK_CONTENT, MK_THOUGHT };

#define SC_MAX_NEST 64
#define SC_MAX_COUNT 4096        /* minLength, maxLength, minItems, maxItems: counted by states */
#define SC_NFA_MAX 2000000       /* NFA states while building */
#define SC_INDENT 20             /* a newline may be followed by up to this many spaces */
#define SC_COPY_BUDGET 4096      /* NFA states for copies of one array item before it becomes a rule */
#define MAXI 999999999999999999LL /* 18 digits */
#define TOK_STR "<|\"|>"              /* Gemma's string quote token */

typedef struct {
    int start, accept, fmt, mask, any;
    const json_t *schema, *root;
    char path[512], part[64];
} sc_rule;

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
} sc;

/* errors: the first one wins; it names the schema path and the request part */
void jsc_fail(sc *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void jsc_fail_err(sc *c, const g4_err *e);
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

/* rules: a schema compiled on its own (recursion, big repeats), called between two states */
int jsc_new_rule(sc *c, const json_t *schema, int fmt, int mask, int any);
void jsc_call(sc *c, int from, int to, int rule);

/* string contents as DFAs (encoding x length x pattern x format x the chat markers, minus the
 * excluded texts); the plain body is cached per encoding and marker set */
const g4_dfa *jsc_plain_body(sc *c, g4_str_enc enc, int mk);
int jsc_string_body(sc *c, g4_str_enc enc, int mk, long minl, long maxl, const char *pat, size_t patlen, const char *format,
                    const char *const *excl, const size_t *excl_len, int n_excl, g4_dfa *out);

/* literal values (enum, const) and object keys in the format's spelling */
int jsc_bare_key_ok(const char *s, size_t n);
void jsc_emit_key(sc *c, int fmt, int from, int to, const char *s, size_t n);
void jsc_emit_value(sc *c, const json_t *v, int fmt, int from, int to);

/* numbers: any, or within the schema's bounds */
void jsc_number_plain(sc *c, int is_int, int from, int to);
void jsc_gen_number(sc *c, const json_t *s, int is_int, int from, int to);

#endif
