/* regex.h — JSON Schema `pattern` (an ECMA-262 subset) compiled into byte automata over the
 * ENCODED form of a string, plus the encoders of code-point sets shared with the schema
 * compiler.
 *
 * Supported: literals (UTF-8), `.` (any character but \n \r U+2028 U+2029), classes `[...]` and
 * `[^...]` with ranges, escapes \d \D \w \W \s \S \t \n \r \f \v \0 \b (in classes) \cX \xHH
 * \uHHHH (surrogate pairs joined) \u{H...} and escaped syntax characters, groups `(...)`,
 * `(?:...)`, `(?<name>...)`, alternation, quantifiers * + ? {n} {n,} {n,m} (lazy forms too: the
 * language is the same), and the anchors ^ and $ at the start and end of the pattern or of a
 * top-level alternative. Without ^ (or $) the pattern matches anywhere, as JSON Schema says:
 * any text may come before (after) it. Refused with G4_EUNSUPPORTED naming the construct:
 * backreferences, lookaround, \b \B word boundaries, \p{...}, anchors elsewhere, repetition
 * counts above G4_REGEX_MAX_REPEAT, groups nested deeper than G4_REGEX_MAX_NEST. A lone { or }
 * that is no quantifier is a literal. Nested counts multiply: a pattern whose construction
 * would go past the NFA's state limit is refused (G4_EINVAL naming the limit) before it is
 * built. Internal to src/grammar. */
#ifndef G4_GRAMMAR_REGEX_H
#define G4_GRAMMAR_REGEX_H

#include <stddef.h>
#include <stdint.h>

#include "grammar/fsa.h"

#define G4_REGEX_MAX_REPEAT 1000
#define G4_REGEX_MAX_NEST 256        /* groups inside groups */

typedef enum {
    G4_ENC_JSON = 0,          /* inside a JSON string: " \ and controls escaped (one canonical form) */
    G4_ENC_RAW                /* the bytes themselves (Gemma's <|"|> strings) */
} g4_str_enc;

/* Adds the encodings of every code point in the ranges (pairs lo, hi, inclusive; surrogates
 * never) as paths from -> to. JSON: \" \\ \b \t \n \f \r, \u00xx for the other controls,
 * everything else as UTF-8. */
void g4_enc_ranges(g4_nfa *a, int from, int to, const uint32_t *ranges, int n_ranges, g4_str_enc enc);
/* The canonical encoding of a UTF-8 string (its bytes are valid UTF-8) into buf (6 bytes per
 * input byte at most); returns the length. */
size_t g4_enc_string(const char *s, size_t n, g4_str_enc enc, char *buf);

/* Adds paths from -> to for every encoded string the pattern accepts (with the implicit .*
 * around an unanchored side). G4_EINVAL for a malformed pattern, G4_EUNSUPPORTED for
 * constructs outside the subset, both with a message naming the offset; a stopped budget of the
 * NFA is its error (fsa.h). */
int g4_regex_compile(const char *pat, size_t len, g4_str_enc enc, g4_nfa *a, int from, int to, g4_err *err);

#endif
