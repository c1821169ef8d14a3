/* grammar.h — the grammar layer as engine/ and server/ see it: what an API asks of the output
 * (an output spec: a JSON object, a JSON Schema, a regex, a choice, tool calls) compiled within
 * limits into a grammar, a cache of compiled grammars shared across requests, and per-request
 * matchers that give the allowed tokens (masks) and advance on the sampled one.
 * docs/structured-output.md has the JSON Schema coverage, the limits and the generated forms.
 *
 * The other headers of src/grammar (constrain.h, fsa.h, regex.h, json_schema_int.h) are
 * internal to it: the tables, the automata and the schema walk.
 *
 * Threads: a grammar is immutable but for its mask cache (mutex inside) and may be shared; a
 * matcher belongs to one request and is used by one thread at a time; the cache is thread-safe
 * (compiling happens outside its lock). Knows tokens, bytes and JSON, never HTTP. */
#ifndef G4_GRAMMAR_GRAMMAR_H
#define G4_GRAMMAR_GRAMMAR_H

#include <jansson.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "text/tokenizer.h"

typedef struct g4_grammar g4_grammar;
typedef struct g4_vocab g4_vocab;
typedef struct g4_matcher g4_matcher;
typedef struct g4_grammar_cache g4_grammar_cache;

/* ---- output specs ------------------------------------------------------------------------------ */

typedef enum {
    G4_FMT_TEXT = 0,
    G4_FMT_JSON_OBJECT,       /* any JSON object */
    G4_FMT_JSON_SCHEMA,       /* JSON of `schema` */
    G4_FMT_REGEX,             /* text that `regex` matches whole (vLLM's guided_regex) */
    G4_FMT_CHOICE             /* exactly one of the strings of `choices` (vLLM's guided_choice) */
} g4_out_format;
typedef enum { G4_TOOLS_AUTO = 0, G4_TOOLS_NONE, G4_TOOLS_REQUIRED, G4_TOOLS_NAMED } g4_tool_mode;
typedef enum { G4_THOUGHT_NONE = 0, G4_THOUGHT_OPTIONAL, G4_THOUGHT_INSIDE } g4_thought_mode;

typedef struct g4_output_spec {
    g4_out_format format;
    const json_t *schema;     /* G4_FMT_JSON_SCHEMA: the schema (an object or a boolean) */
    const char *regex;        /* G4_FMT_REGEX: the pattern (regex_len bytes; ECMA subset, whole match) */
    size_t regex_len;
    const json_t *choices;    /* G4_FMT_CHOICE: a non-empty array of strings */
    const json_t *tools;      /* OpenAI-shaped [{type:"function", function:{name, parameters}}] or NULL */
    g4_tool_mode tool_mode;
    const char *tool_name;    /* G4_TOOLS_NAMED */
    int parallel_calls;       /* 0: at most one call */
    int strict_calls;         /* tools "auto": calls follow their schemas too (text may come first) */
    int chat;                 /* the output is a Gemma-4 model turn (markup, thinking, calls); else raw text */
    g4_thought_mode thought;  /* chat: a thinking block may come first / the text starts inside one */
} g4_output_spec;

/* Defaults: free text, tools auto, parallel calls allowed, not chat. */
void g4_output_spec_init(g4_output_spec *s);
/* 1 when the spec needs a grammar: a format, required / named tools, or tools with "none",
 * with parallel calls off or with strict calls. */
int g4_output_spec_constrains(const g4_output_spec *s);

/* ---- limits of one compile ----------------------------------------------------------------------- */

#define G4_GRAMMAR_MAX_STATES 100000  /* DFA states of all rules together */
#define G4_GRAMMAR_MAX_RULES 1024
#define G4_MASK_CACHE_GRAMMAR 512     /* masks cached per grammar (each vocab/8 bytes) */
#define G4_MASK_CACHE_MATCHER 64      /* masks cached per matcher for stack-dependent states */

/* Defaults of g4_grammar_limits (a field left 0 takes its default). The largest schema of the
 * benchmark (docs/structured-output.md, Speed) takes under 5 % of each. */
#define G4_GRAMMAR_DEFAULT_NFA_STATES 1000000   /* automaton states while building */
#define G4_GRAMMAR_DEFAULT_TRANSITIONS 4000000  /* automaton transitions while building */
#define G4_GRAMMAR_DEFAULT_MEMORY (256u << 20)  /* working memory, bytes */
#define G4_GRAMMAR_DEFAULT_WORK 400000000ull    /* steps: a few seconds of one core */
#define G4_GRAMMAR_DEFAULT_TIMEOUT_MS 20000

/* Bounds of one compile. Past a per-compile bound the compile stops with G4_EINVAL naming the
 * limit (an HTTP 400); past the shared budget with G4_EBUSY (503, retry); cancelled with
 * G4_ECANCELED. The compile looks at the clock and the cancel callback every few thousand steps
 * (well under a millisecond), wherever it spends its time. */
typedef struct g4_grammar_limits {
    int max_states;             /* DFA states of the grammar (at most G4_GRAMMAR_MAX_STATES) */
    int max_nfa_states;         /* automaton states while building */
    size_t max_transitions;     /* automaton transitions while building */
    size_t max_memory;          /* working memory of the compile, the grammar's tables included */
    uint64_t max_work;          /* steps (states and transitions made, set elements visited) */
    uint32_t timeout_ms;        /* wall clock from the start; UINT32_MAX: none */
    int (*cancelled)(void *user); /* NULL, or nonzero to stop (client gone, shutdown) */
    void *user;
    /* A budget across compiles: the working memory of every compile given the same counter is
     * charged to it while the compile runs; one that would take it past shared_max stops with
     * G4_EBUSY, unless it is the only one holding memory. */
    atomic_size_t *shared;
    size_t shared_max;
} g4_grammar_limits;

/* Which limit stopped a compile (g4_grammar_compile_stats.limit). */
typedef enum {
    G4_GLIM_NONE = 0, G4_GLIM_STATES, G4_GLIM_NFA_STATES, G4_GLIM_TRANSITIONS, G4_GLIM_MEMORY, G4_GLIM_WORK, G4_GLIM_TIME,
    G4_GLIM_BUSY, G4_GLIM_CANCELLED
} g4_grammar_limit;
/* "states", "nfa_states", "transitions", "memory", "work", "time", "busy", "cancelled" ("" for none). */
const char *g4_grammar_limit_name(int limit);

typedef struct g4_grammar_compile_stats {
    int cached;                 /* the cache had it: nothing was compiled */
    int limit;                  /* g4_grammar_limit that stopped the compile */
    double seconds;             /* compile time (0 when cached) */
    size_t peak_memory;         /* working memory at its highest */
    uint64_t work;
    int nfa_states, states;
} g4_grammar_compile_stats;

/* Compiles the spec; *out is NULL when nothing is to be constrained. lim NULL: the defaults;
 * st may be NULL. Errors name the part at fault in param ("response_format",
 * "tools[2].function.parameters", "guided_regex") and say where in the schema in the message. */
int g4_output_compile_ex(const g4_output_spec *s, const g4_grammar_limits *lim, g4_grammar_compile_stats *st, g4_grammar **out,
                         char *param, size_t param_cap, g4_err *err);
/* With the default limits. */
int g4_output_compile(const g4_output_spec *s, g4_grammar **out, char *param, size_t param_cap, g4_err *err);
/* One JSON value of the schema as raw text, with the default limits (tests, benchmarks). */
int g4_json_schema_compile(const json_t *schema, g4_grammar **out, g4_err *err);

/* ---- the cache of compiled grammars ------------------------------------------------------------ */

/* Keyed by the whole output spec (format, schema, pattern, choices and tools in their own key
 * order, which the generated text follows, tool mode, name, parallel / strict calls, chat and
 * thinking mode); least recently used entries go first. Refusals are not kept. max_entries >= 1
 * (G4_EINVAL otherwise). */
int g4_grammar_cache_create(int max_entries, g4_grammar_cache **out, g4_err *err);
void g4_grammar_cache_free(g4_grammar_cache *c);
/* g4_output_compile_ex through the cache (c NULL: no cache). *out is a new reference. */
int g4_output_compile_cached(g4_grammar_cache *c, const g4_output_spec *sp, const g4_grammar_limits *lim, g4_grammar_compile_stats *st,
                             g4_grammar **out, char *param, size_t param_cap, g4_err *err);

typedef struct {
    uint64_t hits, misses;
    int entries;
} g4_grammar_cache_stats;
void g4_grammar_cache_get_stats(g4_grammar_cache *c, g4_grammar_cache_stats *st);

/* ---- grammars ------------------------------------------------------------------------------------ */

void g4_grammar_retain(g4_grammar *g);
void g4_grammar_release(g4_grammar *g);
int g4_grammar_n_states(const g4_grammar *g);
int g4_grammar_n_special(const g4_grammar *g);
const char *g4_grammar_special(const g4_grammar *g, int k);

/* ---- vocabulary and matchers ----------------------------------------------------------------------- */

/* Index of the tokenizer's tokens; masks are n_ids wide (the model's vocabulary, at least the
 * tokenizer's). A token's bytes are what the streaming detokenizer appends for it (byte
 * tokens: their byte). Tokens without bytes are never allowed. */
int g4_vocab_create(const g4_tokenizer *tok, int n_ids, g4_vocab **out, g4_err *err);
void g4_vocab_free(g4_vocab *v);
int g4_vocab_n_ids(const g4_vocab *v);
/* The bytes of a token (NULL for special or empty tokens). */
const char *g4_vocab_bytes(const g4_vocab *v, int32_t id, size_t *len);

/* Masks. The allowed set is found by walking the token trie against the automaton (a subtree is
 * skipped as soon as its prefix is rejected) and cached: per automaton state in the grammar when
 * the walk never looked below the top of the stack (the usual case), else per whole
 * configuration in the matcher. Special tokens are allowed only where the grammar names them;
 * the stop ids only where the grammar may end — and where it can only end, they are all that
 * is allowed. G4_ENOTFOUND when the tokenizer lacks a special token the grammar needs (named). */
int g4_matcher_create(g4_grammar *g, const g4_vocab *v, const int32_t *stop_ids, int n_stop, g4_matcher **out,
                      g4_err *err);
void g4_matcher_free(g4_matcher *m);
/* The allowed ids as a bitset (bit i%64 of word i/64), valid until the next call; once done,
 * the stop ids. NULL with err set when nothing is allowed (the tokenizer cannot spell what the
 * grammar needs) or the grammar is too ambiguous at this point. */
const uint64_t *g4_matcher_mask(g4_matcher *m, g4_err *err);
/* Advances on a token; G4_EINVAL when the token is not allowed (its state is then kept). A
 * stop id is allowed when the grammar may end; after it the matcher is done (and takes only
 * stop ids, for ignore_eos). */
int g4_matcher_accept(g4_matcher *m, int32_t id, g4_err *err);
/* Advances on raw bytes (tests); G4_EINVAL at the first byte the grammar refuses. */
int g4_matcher_accept_bytes(g4_matcher *m, const char *s, size_t n, g4_err *err);
/* 1 when the output may end here (a stop id is allowed). */
int g4_matcher_can_end(const g4_matcher *m);
int g4_matcher_done(const g4_matcher *m);

typedef struct {
    uint64_t masks;           /* g4_matcher_mask calls */
    uint64_t walks;           /* of them, computed by a trie walk */
    uint64_t grammar_hits, matcher_hits;
} g4_matcher_stats;
void g4_matcher_get_stats(const g4_matcher *m, g4_matcher_stats *st);

#endif
