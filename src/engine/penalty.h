/* penalty.h — a request's adjustments of a logits row before the sampler draws from it:
 * logit_bias, min_tokens and the repetition / frequency / presence penalties, with vLLM's
 * semantics and in vLLM's order (docs/sampling.md "Penalties, logit bias, min_tokens"):
 *   1. min_tokens   until min_tokens tokens are generated, the stop ids' logits are -inf
 *   2. logit_bias   logit += bias (a bias of exactly -100 bans: the logit becomes -inf)
 *   3. repetition   a token of the prompt or of the output: logit / r when logit > 0, else logit * r
 *   4. frequency    logit -= frequency * (times the token was generated)
 *   5. presence     logit -= presence when the token was generated at least once
 * all in fp32, one rounding per operation, so an adjusted row is a pure function of the row, the
 * params and the tokens: bitwise the same at every TP degree, batch and thread count.
 *
 * The state (which tokens the prompt holds, how often each was generated) advances only through
 * g4_penalty_accept, once per emitted token: speculative decoding draws each verification row
 * with the state as of that token, and a rejected draft never enters it. Prompt entries that are
 * negative (the prefix-cache keys of image tokens, engine/images.h) are skipped. Knows nothing
 * about models, tokenizers or requests: it sees ids and floats. Not thread-safe per object. */
#ifndef G4_ENGINE_PENALTY_H
#define G4_ENGINE_PENALTY_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

#define G4_LOGIT_BIAS_MAX 100.0f /* |bias| at most; -100 bans */
#define G4_PENALTY_MAX 2.0f      /* |presence|, |frequency| at most (OpenAI's and vLLM's range) */

typedef struct g4_logit_bias {
    int32_t id;
    float bias;
} g4_logit_bias;

/* All zero: no adjustment. */
typedef struct g4_penalty_params {
    float presence;           /* [-2, 2]; 0 off */
    float frequency;          /* [-2, 2]; 0 off */
    float repetition;         /* finite > 0; 1 off (0: not given, the same as 1) */
    int64_t min_tokens;       /* >= 0: no stop id and no stop string ends the output before this many tokens */
    const g4_logit_bias *bias; /* [n_bias]: distinct ids in [0, vocab), bias in [-100, 100] */
    size_t n_bias;
} g4_penalty_params;

/* G4_EINVAL with a message naming the field (presence_penalty, frequency_penalty,
 * repetition_penalty, min_tokens, logit_bias) when a value is out of range. */
int g4_penalty_params_validate(const g4_penalty_params *p, int n_vocab, g4_err *err);
/* 1 when p adjusts anything (a NULL state then costs nothing). */
int g4_penalty_params_active(const g4_penalty_params *p);

typedef struct g4_penalty g4_penalty;

/* The state of one request: p validated and copied (bias too), the prompt's tokens noted when
 * the repetition penalty needs them, the stop ids that min_tokens holds back copied. */
int g4_penalty_create(const g4_penalty_params *p, int n_vocab, const int32_t *prompt, size_t n_prompt, const int32_t *stop_ids,
                      size_t n_stop, g4_penalty **out, g4_err *err);
void g4_penalty_free(g4_penalty *pn);

/* Adjusts row[0..n_vocab) in place for the next token. NaN stays NaN and -inf stays -inf. When
 * holding the stop ids back would leave no finite logit (a grammar that allows only the end),
 * min_tokens gives way for this row. Never allocates. */
void g4_penalty_apply(const g4_penalty *pn, float *row, int n_vocab);
/* Records an emitted token (0 <= id < n_vocab). G4_ENOMEM when its count could not be stored. */
int g4_penalty_accept(g4_penalty *pn, int32_t id, g4_err *err);
/* Tokens accepted so far. */
size_t g4_penalty_generated(const g4_penalty *pn);
/* 1 once a stop string may end the output: more than min_tokens tokens accepted (vLLM checks
 * stop strings from token min_tokens + 1 on; a NULL state: always). */
int g4_penalty_stops_live(const g4_penalty *pn);

#endif
