/* sampler.h — picks the next token id from a row of logits.
 *
 * Controls (see docs/sampling.md): temperature, top-k, top-p, min-p and a seed. The order is the
 * one of Hugging Face's generate(): temperature -> top-k -> top-p -> min-p -> draw.
 *   temperature <= 0 (exactly 0 in practice)  greedy: argmax, ties go to the LOWEST id
 *   top_k 0      off;  otherwise keep exactly the k best logits (ties at the k-th place: lowest id)
 *   top_p 1.0    off;  otherwise keep the smallest prefix (by probability, ties lowest id first)
 *                whose mass reaches top_p; the best token is always kept (top_p 0 keeps one)
 *   min_p 0      off;  otherwise drop tokens whose probability is below min_p * p(best)
 * Draws are reproducible: the PRNG is our own xoshiro256** seeded through splitmix64 from the
 * request seed, and exp() is our own double-precision routine built from + and * only, so the
 * same seed and the same logits give the same token on every IEEE-754 machine.
 *
 * The sampler owns a workspace sized for the vocabulary at creation; g4_sampler_sample() never
 * allocates. One sampler per sequence (it holds the PRNG state). Not thread-safe per object. */
#ifndef G4_ENGINE_SAMPLER_H
#define G4_ENGINE_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

typedef struct {
    float temperature; /* 0 = greedy; must be >= 0 and finite */
    float top_p;       /* (0, 1]; 1 = off; 0 is accepted and keeps only the best token */
    float min_p;       /* [0, 1]; 0 = off */
    int top_k;         /* >= 0; 0 = off */
    uint64_t seed;     /* used when has_seed */
    int has_seed;      /* 0: seeded from the clock and a process-wide counter */
} g4_sampling_params;

/* Greedy defaults: temperature 0, top_k 0, top_p 1, min_p 0, no seed. */
void g4_sampling_params_default(g4_sampling_params *p);
/* G4_EINVAL with a message naming the field when a value is out of range or not finite. */
int g4_sampling_params_validate(const g4_sampling_params *p, g4_err *err);
/* 1 when the params reduce to argmax (temperature 0, or top_k 1). */
int g4_sampling_params_is_greedy(const g4_sampling_params *p);

typedef struct g4_sampler g4_sampler;

/* Preallocates the workspace for rows of up to n_vocab logits. Validates params. */
int g4_sampler_create(int n_vocab, const g4_sampling_params *p, g4_sampler **out, g4_err *err);
void g4_sampler_free(g4_sampler *s);
/* Replaces the params (validated) and reseeds the PRNG from them; no allocation. */
int g4_sampler_reset(g4_sampler *s, const g4_sampling_params *p, g4_err *err);
const g4_sampling_params *g4_sampler_params(const g4_sampler *s);

/* Sampler error codes (negative returns of g4_sampler_sample / g4_sampler_candidates). */
#define G4_SAMPLE_EARG (-1)     /* NULL logits, n_vocab <= 0 or larger than the workspace */
#define G4_SAMPLE_ENOFINITE (-2) /* every logit is NaN or -inf */

/* The next token id (>= 0), or a negative G4_SAMPLE_E* code. NaN logits count as -inf, +inf
 * as the largest float. Advances the PRNG by exactly one draw unless greedy. */
int32_t g4_sampler_sample(g4_sampler *s, const float *logits, int n_vocab);

/* Constrained decoding: sets to -inf every logit whose bit in allow is 0 (bit i % 64 of word
 * i / 64; constrain.h's masks), then draws as g4_sampler_sample does: the same token as an
 * unconstrained draw from the masked row, greedy or not. Writes to logits; never allocates. */
int32_t g4_sampler_sample_masked(g4_sampler *s, float *logits, int n_vocab, const uint64_t *allow);
/* The masking alone. */
void g4_logits_mask(float *logits, int n_vocab, const uint64_t *allow);

/* Test/inspection hook: the candidate set the params leave (after temperature, top-k, top-p,
 * min-p), sorted by probability descending, ties lowest id first, with renormalised
 * probabilities. Writes min(count, cap) entries; returns the count or a negative code.
 * Greedy params give the single argmax with probability 1. Does not touch the PRNG. */
int g4_sampler_candidates(g4_sampler *s, const float *logits, int n_vocab, int32_t *ids,
                          float *probs, int cap);

/* Plain argmax, ties to the lowest id; NaN ignored. Negative code when nothing is finite. */
int32_t g4_sample_greedy(const float *logits, int n_vocab);

/* The PRNG, exposed for tests: xoshiro256** seeded by splitmix64(seed). */
typedef struct { uint64_t s[4]; } g4_rng;
void g4_rng_seed(g4_rng *r, uint64_t seed);
uint64_t g4_rng_next(g4_rng *r);
/* Uniform double in [0, 1) with 53 random bits. */
double g4_rng_uniform(g4_rng *r);

/* exp(x) for x <= 0 built only from IEEE + - * and ldexp: identical on every machine.
 * Relative error below 1e-15; returns 0 for x < -745 or x = -inf. Exposed for tests. */
double g4_det_exp(double x);

#endif
