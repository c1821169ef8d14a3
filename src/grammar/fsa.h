/* fsa.h — byte-level finite automata for constrained decoding: a Thompson-style NFA builder
 * (symbol ranges, epsilon moves and "call" moves that consume a whole phrase of another rule),
 * subset construction into a DFA over symbol classes, dead-state trimming, a sound reduction
 * (states with identical futures merged), intersection and complement of call-free DFAs, and
 * embedding a DFA back into an NFA.
 *
 * Symbols: 0..255 are bytes; G4_SYM_SPECIAL + k (k < G4_SYM_NSPECIAL) stand for whole special
 * tokens (e.g. Gemma's <|"|>), so a grammar can ask for the token itself rather than its text.
 * Knows nothing about JSON, tokens or requests. */
#ifndef G4_GRAMMAR_FSA_H
#define G4_GRAMMAR_FSA_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

#define G4_SYM_SPECIAL 256
#define G4_SYM_NSPECIAL 32
#define G4_NSYM (G4_SYM_SPECIAL + G4_SYM_NSPECIAL)

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
    int over, oom;
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
} g4_dfa;

/* Subset construction of the part reachable from `start`; `accept` is the NFA's final state.
 * More than max_states DFA states is G4_EINVAL naming the limit. The result is trimmed (every
 * state reaches an accepting one, calls counted as moves) and reduced; an empty language gives
 * a DFA with n == 0. */
int g4_nfa_to_dfa(const g4_nfa *a, int start, int accept, int max_states, g4_dfa *out, g4_err *err);
/* Intersection of two call-free DFAs (trimmed and reduced). */
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
