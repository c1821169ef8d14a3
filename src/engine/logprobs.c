/* logprobs.c — log-softmax of one logits row at the tempered distribution (see logprobs.h):
 * one pass for the maximum, one for the normaliser and a bounded heap of the best tokens. */
#include "engine/logprobs.h"

#include <float.h>
#include <math.h>

#include "engine/sampler.h"

/* The sampler's view of a logit: NaN / -inf are not candidates, +inf is the largest float. */
static inline int usable(float l, double *v) {
    if (!(l >= -FLT_MAX)) return 0;
    *v = l > FLT_MAX ? (double)FLT_MAX : (double)l;
    return 1;
}

typedef struct { double v; int32_t id; } ent;

/* a ranks before b: larger logit, then lower id */
static inline int better(const ent *a, const ent *b) { return a->v > b->v || (a->v == b->v && a->id < b->id); }

/* Min-heap on `better` (the worst at the root) of at most k entries. */
static void heap_push(ent *h, int *n, int k, ent x) {
    int i;
    if (*n < k) {
        i = (*n)++;
        while (i > 0 && better(&h[(i - 1) / 2], &x)) { h[i] = h[(i - 1) / 2]; i = (i - 1) / 2; }
        h[i] = x;
        return;
    }
    if (!better(&x, &h[0])) return;
    i = 0;
    for (;;) {
        int l = 2 * i + 1, w;
        if (l >= *n) break;
        w = l + 1 < *n && better(&h[l], &h[l + 1]) ? l + 1 : l;
        if (!better(&x, &h[w])) break;
        h[i] = h[w];
        i = w;
    }
    h[i] = x;
}

void g4_logprobs_row(const float *logits, int n_vocab, float temperature, int32_t id, int n_top, g4_token_logprob *out) {
    const double T = temperature > 0.0f ? (double)temperature : 1.0;
    if (n_top < 0) n_top = 0;
    if (n_top > G4_TOP_LOGPROBS_MAX) n_top = G4_TOP_LOGPROBS_MAX;
    out->id = id;
    out->n_top = 0;
    out->logprob = G4_LOGPROB_FLOOR;
    double mx = -HUGE_VAL, v;
    int any = 0;
    for (int i = 0; i < n_vocab; i++)
        if (usable(logits[i], &v) && (!any || v > mx)) { mx = v; any = 1; }
    if (!any) return;
    ent heap[G4_TOP_LOGPROBS_MAX];
    int nh = 0;
    double sum = 0.0;
    for (int i = 0; i < n_vocab; i++) {
        if (!usable(logits[i], &v)) continue;
        sum += g4_det_exp((v - mx) / T);
        if (n_top) heap_push(heap, &nh, n_top, (ent){v, i});
    }
    const double lse = log(sum); /* sum >= 1: the maximum weighs exactly 1 */
    if (id >= 0 && id < n_vocab && usable(logits[id], &v)) {
        double lp = (v - mx) / T - lse;
        out->logprob = lp > (double)G4_LOGPROB_FLOOR ? (float)lp : G4_LOGPROB_FLOOR;
    }
    /* heap -> best first: repeatedly take the worst off the end */
    for (int k = nh - 1; k >= 0; k--) {
        ent worst = heap[0];
        heap[0] = heap[k];
        int n = k, i = 0;
        for (;;) { /* sift down heap[0] within heap[0..n) */
            int l = 2 * i + 1, w;
            if (l >= n) break;
            w = l + 1 < n && better(&heap[l], &heap[l + 1]) ? l + 1 : l;
            if (!better(&heap[i], &heap[w])) break;
            ent t = heap[i]; heap[i] = heap[w]; heap[w] = t;
            i = w;
        }
        double lp = (worst.v - mx) / T - lse;
        out->top_id[k] = worst.id;
        out->top_logprob[k] = lp > (double)G4_LOGPROB_FLOOR ? (float)lp : G4_LOGPROB_FLOOR;
    }
    out->n_top = nh;
}
