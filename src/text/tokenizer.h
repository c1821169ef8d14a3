/* tokenizer.h — Hugging Face tokenizer.json (BPE) in C, matching the `tokenizers` library.
 *
 * Supported pipeline pieces (anything else in a tokenizer.json is refused at load with
 * G4_EUNSUPPORTED naming it):
 *   model          BPE (merges as ["a","b"] or "a b"; byte_fallback, fuse_unk, unk_token,
 *                  continuing_subword_prefix, end_of_word_suffix, ignore_merges; no dropout)
 *   added_tokens   special or not, with lstrip/rstrip/single_word/normalized
 *   normalizer     Replace (string pattern), Prepend, Strip, Sequence, null
 *   pre_tokenizer  Split (string pattern, every behavior, invert), Sequence, null
 *   decoder        Replace (string pattern), ByteFallback, Fuse, Strip, Sequence, null
 *   post_processor TemplateProcessing (single sequences), null
 * All strings are byte arrays with a length (U+0000 is an ordinary character). */
#ifndef G4_TEXT_TOKENIZER_H
#define G4_TEXT_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>
#include "base/error.h"

typedef struct g4_tokenizer g4_tokenizer;

/* Loads a tokenizer.json file / buffer. Errors: G4_EIO, G4_EFORMAT (bad JSON, wrong types,
 * merges naming pieces outside the vocab), G4_EUNSUPPORTED (a component we do not implement). */
int g4_tokenizer_load(const char *path, g4_tokenizer **out, g4_err *err);
int g4_tokenizer_load_json(const char *json, size_t len, g4_tokenizer **out, g4_err *err);
void g4_tokenizer_free(g4_tokenizer *tok);

/* Number of ids: 1 + the largest id of the vocab and the added tokens. */
int g4_tokenizer_vocab_size(const g4_tokenizer *tok);

/* Encodes text[0..len) (UTF-8, may contain U+0000). add_special: apply the post-processor like
 * HF's add_special_tokens=True. Invalid UTF-8 -> G4_EFORMAT naming the byte offset.
 * *ids is malloc'd (non-NULL even when *n_ids == 0); the caller frees it. */
int g4_tokenizer_encode(const g4_tokenizer *tok, const char *text, size_t len, int add_special,
                        int32_t **ids, size_t *n_ids, g4_err *err);

/* Decodes like HF decode(ids, skip_special_tokens): ids that are not tokens are skipped.
 * *text is malloc'd and NUL-terminated; *len excludes the NUL. */
int g4_tokenizer_decode(const g4_tokenizer *tok, const int32_t *ids, size_t n, int skip_special,
                        char **text, size_t *len, g4_err *err);

/* Id of a token string (added tokens first, then the vocab); -1 if none. */
int32_t g4_tokenizer_token_id(const g4_tokenizer *tok, const char *piece, size_t len);
/* The token string of an id (not NUL-terminated when it contains U+0000; *len gets the
 * length, len may be NULL); NULL when the id is not a token. */
const char *g4_tokenizer_piece(const g4_tokenizer *tok, int32_t id, size_t *len);
/* 1 when the id is a special added token (skipped by decode with skip_special). */
int g4_tokenizer_is_special(const g4_tokenizer *tok, int32_t id);

/* Streaming detokenizer: push ids one at a time and get the newly completed text. Output is
 * always whole UTF-8 characters: a run of byte-fallback tokens is held back until it ends (a
 * later byte could make the whole run invalid, which HF decodes as one U+FFFD per byte).
 * The concatenation of every push and the final flush equals g4_tokenizer_decode of all ids.
 * Refused (G4_EUNSUPPORTED) for decoders whose output is not prefix-stable (Strip with stop > 0
 * after Fuse, a multi-character Replace after Fuse). */
typedef struct g4_detok g4_detok;
int g4_detok_create(const g4_tokenizer *tok, int skip_special, g4_detok **out, g4_err *err);
/* *out is malloc'd and NUL-terminated, possibly "" (*out_len 0). */
int g4_detok_push(g4_detok *d, int32_t id, char **out, size_t *out_len, g4_err *err);
/* Emits what is held back; the detokenizer can then be reused for a new text. */
int g4_detok_flush(g4_detok *d, char **out, size_t *out_len, g4_err *err);
void g4_detok_free(g4_detok *d);

#endif
