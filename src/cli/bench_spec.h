/* bench_spec.h — the measurements of `g4tp bench` for speculative decoding: the cost of one
 * forward step over 1..N tokens of one sequence (the curve that bounds what verifying drafts can
 * gain), and decode through the scheduler with N concurrent streams, with and without the
 * engine's drafter (bench/README.md). */
#ifndef G4_CLI_BENCH_SPEC_H
#define G4_CLI_BENCH_SPEC_H

#include <stdint.h>

#include "g4.h"

/* Median seconds of a step of t tokens (t = 1..max_t) appended to a sequence holding prompt. */
int bench_step_curve(g4_engine *e, const int32_t *prompt, int plen, int max_t, int reps, double *sec /* [max_t + 1] */, g4_err *err);

typedef struct bench_served {
    int streams, spec;                 /* spec: 1 with the engine's drafter, 0 with it off */
    double decode_tok_s;               /* all streams' tokens after their first / the decode time */
    double tokens_per_step;            /* generated tokens per forward step while decoding */
    uint64_t proposed, accepted, spec_steps, steps;
} bench_served;

/* streams requests of gen greedy tokens (ignore_eos), prompt i = prompt with its last token
 * changed by i, all at once through a scheduler (ids only). */
int bench_served_run(g4_engine *e, const int32_t *prompt, int plen, int gen, int streams, int spec, bench_served *out, g4_err *err);

#endif
