/* speculate.h — speculative decoding's pieces that know tokens, not tensors: the drafter spec,
 * prompt lookup (n-gram) drafts, per-sequence acceptance estimates, the step-cost curve and the
 * policy that decides, step by step, which sequences draft how many tokens (docs/speculative.md).
 *
 * The scheduler asks these per step and verifies the drafts itself: one forward step over
 * [t, d1..dk] of a sequence at consecutive positions gives k+1 rows of logits that are the same
 * bits as k+1 single-token steps (the engine's batch invariance); the request's sampler draws
 * from each row in order, and drafts are accepted while its draw equals them. That is standard
 * speculative sampling for a deterministic drafter (q one-hot: accept d with probability p(d),
 * else a draw from p without d, renormalised) driven by the same one uniform per emitted token
 * as plain decoding — so greedy and seeded sampling emit exactly the tokens they would without
 * speculation. The MTP drafter itself runs in the engine (g4_engine_draft). */
#ifndef G4_ENGINE_SPECULATE_H
#define G4_ENGINE_SPECULATE_H

#include <stdint.h>

#include "g4.h"

/* "ngram" | "ngram:N,K" | "mtp:DIR" | "mtp:DIR:K" (N 1..16, K 1..G4_SPEC_MAX_K); NULL or ""
 * gives G4_SPEC_NONE. Defaults: ngram N 3, K 4; mtp K 4. */
int g4_spec_parse(const char *s, g4_spec_cfg *out, g4_err *err);
/* Sliding positions the KV cache must keep below each target window for this drafter: k for a
 * rollback, and for MTP the assistant's W_a + 1 rows below the query position. */
int64_t g4_spec_keep(const g4_spec_cfg *c, int asst_window, int target_window);

/* Prompt lookup: the most recent earlier occurrence of the last m tokens of toks[0..len)
 * (m = n, then n-1 .. 1), and up to k tokens that followed it into out; an occurrence that runs
 * into the suffix continues periodically (a loop keeps looping). Returns how many (0: none). */
int g4_spec_ngram(const int32_t *toks, int64_t len, int n, int k, int32_t *out);

/* One sequence's acceptance estimate: accepted drafts per examined draft, with a prior of 1/2
 * and a memory of about ten rounds; rounds it sits out move it back toward the prior, so a
 * switched-off sequence is tried again later. */
typedef struct g4_spec_stat { double succ, trials; } g4_spec_stat;
void g4_spec_stat_init(g4_spec_stat *s);
double g4_spec_rate(const g4_spec_stat *s);
void g4_spec_stat_update(g4_spec_stat *s, int proposed, int accepted);
void g4_spec_stat_idle(g4_spec_stat *s);
/* A new sequence's estimate from the drafter's so far (weighed as a few rounds at most). */
void g4_spec_stat_seed(g4_spec_stat *dst, const g4_spec_stat *all);
/* Expected tokens a round emits with m drafts at acceptance rate a: 1 + a + .. + a^m. */
double g4_spec_expected(double a, int m);

/* Wall time of a forward step by its token count (moving averages), and of one MTP draft step by
 * the number of sequences drafting. Unmeasured counts are interpolated; beyond the largest one
 * measured the cost is taken flat (optimistic: the policy tries it, and then knows). */
typedef struct g4_spec_costs {
    int max_tokens, max_seqs;
    double *step;             /* [max_tokens + 1] seconds, 0: unmeasured */
    double *draft;            /* [max_seqs + 1] seconds per draft step */
} g4_spec_costs;
int g4_spec_costs_init(g4_spec_costs *c, int max_tokens, int max_seqs, g4_err *err);
void g4_spec_costs_free(g4_spec_costs *c);
void g4_spec_costs_add(g4_spec_costs *c, int tokens, double seconds);
void g4_spec_costs_add_draft(g4_spec_costs *c, int seqs, int steps, double seconds);
double g4_spec_cost(const g4_spec_costs *c, int tokens);
double g4_spec_draft_cost(const g4_spec_costs *c, int seqs);

/* The policy. A step computes base_tokens anyway (one per decoding sequence, plus prefill);
 * n candidates could add drafts: rate[i] their acceptance estimates, avail[i] drafts on hand (or
 * to be drafted). draft: 1 when the drafts are still to be made (MTP: j sequences x m steps
 * cost m * draft_cost(j)), 0 when they exist. Chooses take[i] <= avail[i] (the most likely
 * sequences first, at most `room` tokens in all) to maximise expected emitted tokens per second;
 * all zero when plain decoding is better. Returns the drafts taken. */
int g4_spec_choose(const g4_spec_costs *c, int base_tokens, int decoding, int n, const double *rate, const int *avail, int room,
                   int draft, int *take);

#endif
