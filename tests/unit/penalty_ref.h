/* penalty_ref.h — the reference of the request penalties for the tests: vLLM's definition
 * written plainly over the whole vocabulary (token counts -> adjusted logits), one token at a
 * time, to compare engine/penalty.c and the scheduler's draws against. */
#ifndef G4_TEST_PENALTY_REF_H
#define G4_TEST_PENALTY_REF_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "engine/penalty.h"

/* adj = the row as vLLM adjusts it: min_tokens and logit_bias (its non-argmax-invariant logits
 * processors), then repetition (prompt or output), frequency (output counts), presence (output). */
static inline void reference(const float *in, int V, const int32_t *prompt, size_t np, const int32_t *out, size_t no, const int32_t *stops, size_t ns,
                             const g4_penalty_params *p, float *adj) {
    int *count = calloc((size_t)V, sizeof(int)), *seen = calloc((size_t)V, sizeof(int));
    for (size_t i = 0; i < np; i++)
        if (prompt[i] >= 0 && prompt[i] < V) seen[prompt[i]] = 1;
    for (size_t i = 0; i < no; i++) count[out[i]]++;
    for (int v = 0; v < V; v++) {
        float l = in[v];
        for (size_t i = 0; i < ns; i++)
            if ((int64_t)no < p->min_tokens && stops[i] == v) l = -INFINITY;
        for (size_t i = 0; i < p->n_bias; i++)
            if (p->bias[i].id == v) l = p->bias[i].bias == -100.0f ? -INFINITY : l + p->bias[i].bias;
        const float r = p->repetition == 0.0f ? 1.0f : p->repetition;
        if (seen[v] || count[v]) l = l > 0.0f ? l / r : l * r;
        l -= p->frequency * (float)count[v];
        l -= p->presence * (count[v] > 0 ? 1.0f : 0.0f);
        adj[v] = l;
    }
    free(count);
    free(seen);
}

#endif
