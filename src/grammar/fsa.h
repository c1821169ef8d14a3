/* fsa.h — byte-level finite automata for constrained decoding: a Thompson-style NFA builder
 * (symbol ranges, epsilon moves and "call" moves that consume a whole phrase of another rule),
 * subset construction into a DFA over symbol classes, dead-state trimming, a sound reduction
 * (states with identical futures merged), intersection and complement of call-free DFAs, and
 * embedding a DFA back into an NFA. Internal to src/grammar (grammar.h is the interface).
 *
 * Budget: every automaton may carry a g4_fsa_budget (NULL: unbounded), which its operations
 * charge with the bytes they hold and the steps they take, and which stops them — with the
 * limit named — past its memory, its steps, its deadline, or when its cancel callback says so.
 * Subset construction and products are where an adversarial input costs time and memory (a
 * pattern like (a{1000}){1000} unanchored gives sets of a million NFA states), so they poll it
 * inside their loops.
 *
 * Symbols: 0..255 are bytes; G4_SYM_SPECIAL + k (k < G4_SYM_NSPECIAL) stand for whole special
 * tokens (e.g. Gemma's <|"|>), so a grammar can ask for the token itself rather than its text.
 * Knows nothing about JSON, tokens or requests. */
#ifndef G4_GRAMMAR_FSA_H
#define G4_GRAMMAR_FSA_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

#define G4_SYM_SPECIAL 256
#define G4_SYM_NSPECIAL 32
#define G4_NSYM (G4_SYM_SPECIAL + G4_SYM_NSPECIAL)

/* Why a budget stopped (G4_FSA_OK: it did not). */
enum { G4_FSA_OK = 0, G4_FSA_MEMORY, G4_FSA_WORK, G4_FSA_TIME, G4_FSA_SHARED, G4_FSA_CANCELLED, G4_FSA_OOM };

typedef struct g4_fsa_budget {
    size_t max_bytes;         /* working memory of this compile (0: none) */
    uint64_t max_work;        /* steps (0: none) */
    double deadline;          /* CLOCK_MONOTONIC seconds (0: none) */
    int (*cancelled)(void *user); /* polled with the clock; nonzero stops */
    void *user;
    atomic_size_t *shared;    /* bytes of every compile that shares it, at most shared_max; a */
    size_t shared_max;        /* compile alone may go past it up to max_bytes */
    /* spent */
    size_t bytes, peak;
    uint64_t work, next_poll;
    int stop;                 /* G4_FSA_*: once set, every charge fails */
} g4_fsa_budget;

/* Charged allocation (b may be NULL): NULL past the budget (b->stop says why) or out of memory. */
void *g4_fsa_malloc(g4_fsa_budget *b, size_t n);
void *g4_fsa_calloc(g4_fsa_budget *b, size_t n, size_t size);
void *g4_fsa_realloc(g4_fsa_budget *b, void *p, size_t n);
void g4_fsa_free(g4_fsa_budget *b, void *p);
/* Charges n bytes held elsewhere (a grammar's tables); 0, or -1 past the budget. */
int g4_fsa_reserve(g4_fsa_budget *b, size_t n);
/* Adds work steps; checks the deadline and the cancel callback every few thousand. Nonzero once
 * the budget has stopped. */
int g4_fsa_poll(g4_fsa_budget *b, uint64_t work);
/* Gives back what the budget still holds to its shared counter (at the end of a compile). */
void g4_fsa_budget_release(g4_fsa_budget *b);
/* The error of a stopped budget: G4_EINVAL naming the limit, G4_EBUSY (shared), G4_ECANCELED,
 * G4_ENOMEM. */
int g4_fsa_budget_err(const g4_fsa_budget *b, g4_err *err);

typedef struct {
    int32_t from, to;
    int32_t call;             /* >= 0: a call of rule `call`; else lo..hi symbols, lo < 0: epsilon */
    int16_t lo, hi;
} g4_nfa_edge;

typedef struct g4_nfa {
    int n;                    /* states 0..n-1 */
    g4_nfa_edge *e;
    size_t ne, cap;
    int max_states;           /* 0: no limit; beyond it g4_nfa_state returns -1 and sets over */
    size_t max_edges;         /* 0: no limit; beyond it edges are dropped and over_edges is set */
    int over, over_edges, oom;
    g4_fsa_budget *budget;    /* NULL: unbounded (a stopped budget sets oom) */
} g4_nfa;

/* A new state, or -1 (over the limit or out of memory: see over / oom). */
int g4_nfa_state(g4_nfa *a);
void g4_nfa_sym(g4_nfa *a, int from, int to, int lo, int hi);
void g4_nfa_eps(g4_nfa *a, int from, int to);
void g4_nfa_call(g4_nfa *a, int from, int to, int rule);
/* A chain of single bytes from -> to. */
void g4_nfa_lit(g4_nfa *a, int from, int to, const char *s, size_t n);
void g4_nfa_free(g4_nfa *a);
/* Drops every state >= n and edge >= ne (undoes what was built since a mark). */
void g4_nfa_truncate(g4_nfa *a, int n, size_t ne);

/* A DFA with start state 0. next[s * ncls + c] is the target on class c or -1. */
typedef struct g4_dfa {
    int n, ncls;
    uint16_t cls[G4_NSYM];
    int32_t *next;
    uint8_t *acc;
    int32_t *coff;            /* [n + 1]: calls of state s are call[2*coff[s] .. 2*coff[s+1]) */
    int32_t *call;            /* pairs (rule, target) */
    g4_fsa_budget *budget;    /* what its tables are charged to (NULL: none); results inherit it */
} g4_dfa;

/* Subset construction of the part reachable from `start`; `accept` is the NFA's final state.
 * More than max_states DFA states is G4_EINVAL naming the limit. The result is trimmed (every
 * state reaches an accepting one, calls counted as moves) and reduced; an empty language gives
 * a DFA with n == 0. An NFA that went past its own limits (over, over_edges) is refused
 * (G4_EINVAL naming the limit). Charged to a->budget; a stopped budget is its error. */
int g4_nfa_to_dfa(const g4_nfa *a, int start, int accept, int max_states, g4_dfa *out, g4_err *err);
/* Intersection of two call-free DFAs (trimmed and reduced; charged to a's budget). */
int g4_dfa_intersect(const g4_dfa *a, const g4_dfa *b, int max_states, g4_dfa *out, g4_err *err);
/* Complement over byte strings (symbols 0..255; specials stay excluded). */
int g4_dfa_complement(const g4_dfa *a, g4_dfa *out, g4_err *err);
/* Removes states that cannot reach acceptance (calls whose keep[rule] is 0 are dropped first;
 * keep may be NULL), then merges states with identical futures and renumbers from 0. */
int g4_dfa_trim(g4_dfa *d, const uint8_t *keep, g4_err *err);
/* Copies d into a between from and to (from -> d's start, d's accepting states -> to). */
void g4_nfa_embed(g4_nfa *a, const g4_dfa *d, int from, int to);
/* A deep copy (G4_ENOMEM). */
int g4_dfa_copy(const g4_dfa *a, g4_dfa *b, g4_err *err);
void g4_dfa_free(g4_dfa *d);

#endif
