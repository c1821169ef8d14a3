/* constrain.h — constrained decoding: a grammar (a pushdown automaton over bytes and special
 * tokens: one DFA per rule, rules calling rules), a vocabulary index (every token's bytes in a
 * trie), and a per-request matcher that gives the set of allowed token ids for its state and
 * advances on the sampled token.
 *
 * Masks. The allowed set is found by walking the token trie against the automaton (a subtree
 * is skipped as soon as its prefix is rejected) and cached: per automaton state in the grammar
 * when the walk never looked below the top of the stack (the usual case: a token rarely spans
 * the end of a recursive rule), else per whole configuration in the matcher. A cached step
 * copies one bitset and allocates nothing. Special tokens are allowed only where the grammar
 * names them; the stop ids only where the grammar may end — and where it can only end, they
 * are all that is allowed.
 *
 * Threads: a grammar is immutable but for its mask cache (mutex inside) and may be shared; a
 * matcher belongs to one request and is used by one thread at a time. Knows tokens and bytes,
 * never HTTP or JSON Schema (json_schema.h builds grammars). */
#ifndef G4_GRAMMAR_CONSTRAIN_H
#define G4_GRAMMAR_CONSTRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "grammar/fsa.h"
#include "text/tokenizer.h"

/* Limits (see docs/structured-output.md). */
#define G4_GRAMMAR_MAX_STATES 100000  /* DFA states of all rules together */
#define G4_GRAMMAR_MAX_RULES 1024
#define G4_MASK_CACHE_GRAMMAR 512     /* masks cached per grammar (each vocab/8 bytes) */
#define G4_MASK_CACHE_MATCHER 64      /* masks cached per matcher for stack-dependent states */

typedef struct g4_grammar g4_grammar;
typedef struct g4_vocab g4_vocab;
typedef struct g4_matcher g4_matcher;

/* Rule r is rules[r] (rule 0: the whole output; call moves name other rules). Specials:
 * symbol G4_SYM_SPECIAL + k is the token whose text is specials[k]. Checks what makes a
 * matcher safe: every rule non-empty and productive (calls to unproductive rules are dropped;
 * an unproductive rule 0 is G4_EINVAL "accepts nothing"), no left recursion, the state limit.
 * The DFAs are copied. */
int g4_grammar_build(const g4_dfa *rules, int n_rules, const char *const *specials, int n_specials, g4_grammar **out,
                     g4_err *err);
void g4_grammar_retain(g4_grammar *g);
void g4_grammar_release(g4_grammar *g);
int g4_grammar_n_states(const g4_grammar *g);
int g4_grammar_n_special(const g4_grammar *g);
const char *g4_grammar_special(const g4_grammar *g, int k);

/* Index of the tokenizer's tokens; masks are n_ids wide (the model's vocabulary, at least the
 * tokenizer's). A token's bytes are what the streaming detokenizer appends for it (byte
 * tokens: their byte). Tokens without bytes are never allowed. */
int g4_vocab_create(const g4_tokenizer *tok, int n_ids, g4_vocab **out, g4_err *err);
void g4_vocab_free(g4_vocab *v);
int g4_vocab_n_ids(const g4_vocab *v);
/* The bytes of a token (NULL for special or empty tokens). */
const char *g4_vocab_bytes(const g4_vocab *v, int32_t id, size_t *len);

/* G4_ENOTFOUND when the tokenizer lacks a special token the grammar needs (named). */
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
