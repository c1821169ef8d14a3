/* constrain.h — internal to src/grammar: building a grammar from its rules' DFAs (the tables
 * the matcher of grammar.h runs on). A grammar is a pushdown automaton over bytes and special
 * tokens: one DFA per rule, rules calling rules. constrain.c also holds the vocabulary trie and
 * the matcher (their interface is in grammar.h). Knows tokens and bytes, never HTTP or JSON
 * Schema (json_schema.c builds the rules). */
#ifndef G4_GRAMMAR_CONSTRAIN_H
#define G4_GRAMMAR_CONSTRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "grammar/fsa.h"
#include "grammar/grammar.h"

/* Rule r is rules[r] (rule 0: the whole output; call moves name other rules). Specials:
 * symbol G4_SYM_SPECIAL + k is the token whose text is specials[k]. Checks what makes a
 * matcher safe: every rule non-empty and productive (calls to unproductive rules are dropped;
 * an unproductive rule 0 is G4_EINVAL "accepts nothing"), no left recursion, the state limit
 * (max_states; 0: G4_GRAMMAR_MAX_STATES). The DFAs are copied; the copies and the grammar's
 * tables are charged to budget (NULL: none), which is left holding the tables' bytes. */
int g4_grammar_build(const g4_dfa *rules, int n_rules, const char *const *specials, int n_specials, int max_states,
                     g4_fsa_budget *budget, g4_grammar **out, g4_err *err);

#endif
