/* logprob_json.h — the OpenAI shapes of token log-probabilities (engine/logprobs.h gives the
 * numbers): chat's `logprobs.content` entries {token, logprob, bytes, top_logprobs} and the
 * completions object {tokens, token_logprobs, top_logprobs, text_offset}. A token's text is its
 * exact bytes: a byte-fallback token (<0xE2>) is that byte, others decode with special tokens
 * kept; `token` is the text when it is valid UTF-8, else "bytes:\xe2\x80" spelled out (as
 * OpenAI does), and chat's `bytes` always has the exact bytes. */
#ifndef G4_SERVER_LOGPROB_JSON_H
#define G4_SERVER_LOGPROB_JSON_H

#include <jansson.h>
#include <stddef.h>

#include "engine/logprobs.h"
#include "text/tokenizer.h"

/* Chat: appends one entry per token to arr (a JSON array). */
int g4_lpj_chat_append(const g4_tokenizer *tok, const g4_token_logprob *lp, size_t n, json_t *arr);

/* Completions: the four parallel lists, built in pieces (streaming chunks continue the offsets). */
typedef struct g4_lpj_completion {
    json_t *tokens, *token_logprobs, *top_logprobs, *text_offset;
    size_t offset;            /* text_offset of the next token: the token texts' bytes so far */
} g4_lpj_completion;
void g4_lpj_completion_init(g4_lpj_completion *c);
/* first_null: the first token is the prompt's first (no logprob: null entries). */
int g4_lpj_completion_append(g4_lpj_completion *c, const g4_tokenizer *tok, const g4_token_logprob *lp, size_t n, int first_null);
/* The object built so far (a new reference); the lists start again empty, the offset goes on. */
json_t *g4_lpj_completion_take(g4_lpj_completion *c);
void g4_lpj_completion_clear(g4_lpj_completion *c);

#endif
