/* logprobs.h — log-probabilities of tokens under the distribution the sampler draws from.
 *
 * For one row of fp32 logits and the request's temperature T (T = 1 when the request is greedy,
 * temperature 0: the model's own distribution), logprob(i) = x_i - log(sum_j exp(x_j)) with
 * x_i = (l_i - max l) / T, evaluated in double exactly as the sampler weighs its candidates
 * (the same deterministic exp), and reported rounded to fp32. Top-k, top-p and min-p do not
 * truncate it: every token keeps a finite value, so a prompt token's logprob is comparable
 * across requests (lm-eval-harness's loglikelihood) and the sampled token's is never -inf.
 * NaN and -inf logits are tokens of probability 0: they never appear among the top ones, and a
 * chosen token of probability 0 reports G4_LOGPROB_FLOOR (JSON has no -inf). */
#ifndef G4_ENGINE_LOGPROBS_H
#define G4_ENGINE_LOGPROBS_H

#include <stdint.h>

#define G4_TOP_LOGPROBS_MAX 20
#define G4_LOGPROB_FLOOR (-9999.0f)

typedef struct g4_token_logprob {
    int32_t id;
    float logprob;
    int n_top;                              /* alternatives below (the best first, ties lowest id) */
    int32_t top_id[G4_TOP_LOGPROBS_MAX];
    float top_logprob[G4_TOP_LOGPROBS_MAX];
} g4_token_logprob;

/* Fills *out for token id of a row of n_vocab logits: its logprob and the n_top (0..20, clamped)
 * most likely tokens. temperature <= 0 counts as 1. No allocation. */
void g4_logprobs_row(const float *logits, int n_vocab, float temperature, int32_t id, int n_top, g4_token_logprob *out);

#endif
