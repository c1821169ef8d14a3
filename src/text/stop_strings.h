/* stop_strings.h — OpenAI `stop`: finds the first of N stop strings in a stream of text deltas.
 *
 * Feed the detokenized text as it is produced; each call says which text is safe to send now.
 * The matcher holds back the longest suffix that could still grow into a stop string, and on a
 * match returns the text before it (the stop string itself is never emitted, as OpenAI does);
 * everything after a match is ignored. Streaming and whole-text use agree for every split:
 * the match is the one that ENDS first in the text; among stop strings ending at the same
 * place, the longest (the one that starts first). Matching is on bytes, so any UTF-8 works,
 * and since a held-back suffix starts where a stop string would, valid UTF-8 input is never
 * cut inside a character. */
#ifndef G4_TEXT_STOP_STRINGS_H
#define G4_TEXT_STOP_STRINGS_H

#include <stddef.h>

#include "base/error.h"

#define G4_STOP_MAX 64           /* stop strings per request */
#define G4_STOP_MAX_LEN 1024     /* bytes per stop string */

typedef struct g4_stop_strings g4_stop_strings;

/* Copies the n strings (NUL-terminated). n may be 0 (never matches). G4_EINVAL for an empty
 * string, more than G4_STOP_MAX strings, one longer than G4_STOP_MAX_LEN, or invalid UTF-8.
 * A stop string therefore cannot hold U+0000: a caller that takes stop strings from JSON must
 * refuse one that does (the server's `stop` does) rather than pass it cut at the NUL. The text
 * fed may hold NUL bytes: every text path carries a length and matches them like any byte. */
int g4_stop_strings_create(const char *const *stops, size_t n, g4_stop_strings **out, g4_err *err);
void g4_stop_strings_free(g4_stop_strings *s);
/* Forgets all text, keeps the stop strings. */
void g4_stop_strings_reset(g4_stop_strings *s);

/* Feeds a delta. *emit / *emit_len: text safe to send now (points into the matcher, valid
 * until the next call). Returns 1 when a stop string matched (the emitted text ends just before
 * it, and every later feed emits nothing and returns 1), 0 otherwise, or a negative g4_status
 * (G4_EINVAL / G4_ENOMEM) with err set. */
int g4_stop_strings_feed(g4_stop_strings *s, const char *delta, size_t len, const char **emit,
                         size_t *emit_len, g4_err *err);
/* The same; with may_match 0 the delta is taken in but no match may END inside it (vLLM's
 * min_tokens: no stop string ends the output before that many tokens). Its text is held back as
 * usual, so a stop string that starts in it and ends in a later delta fed with may_match 1
 * matches. */
int g4_stop_strings_feed_ex(g4_stop_strings *s, const char *delta, size_t len, int may_match, const char **emit,
                            size_t *emit_len, g4_err *err);
/* End of generation without a match: releases the held-back text. Returns 0, or 1 when a
 * match had already happened (then nothing is emitted). */
int g4_stop_strings_finish(g4_stop_strings *s, const char **emit, size_t *emit_len);

/* Which stop string matched (its index in the create list), or -1. */
int g4_stop_strings_matched(const g4_stop_strings *s);
/* Bytes currently held back (for tests and for sizing). */
size_t g4_stop_strings_pending(const g4_stop_strings *s);

/* Whole-text form: *cut = length of the text to keep (len when nothing matched), *which =
 * index of the matching stop string or -1. Same result as streaming. */
int g4_stop_strings_find(const char *text, size_t len, const char *const *stops, size_t n,
                         size_t *cut, int *which, g4_err *err);

#endif
