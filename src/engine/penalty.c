/* penalty.c — logit_bias, min_tokens and the repetition / frequency / presence penalties of one
 * request (see penalty.h for the order and the rules).
 *
 * Owns the per-request token table: one entry per distinct token of the prompt (when the
 * repetition penalty needs them) and of the output, with the output count, found through an
 * open-addressing index. Applying touches only those entries, the bias list and the stop ids,
 * so a request with penalties costs O(distinct tokens) per row, not O(vocab). Knows nothing
 * about the scheduler, the sampler or the engine. */
#include "engine/penalty.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int32_t id;
    uint32_t count;  /* times generated */
    uint8_t prompt;  /* in the prompt */
} entry;

struct g4_penalty {
    g4_penalty_params p;      /* p.bias points at bias */
    int n_vocab;
    int track;                /* some penalty needs the table */
    int rep;                  /* the repetition penalty is on */
    g4_logit_bias *bias;      /* [p.n_bias] */
    int32_t *stops;           /* [n_stops] held back until min_tokens */
    size_t n_stops;
    float *held;              /* [n_stops] their logits, to give way (apply) */
    entry *ent;               /* [n_ent] in order of first sight */
    size_t n_ent, cap_ent;
    int32_t *idx;             /* [cap_idx] index into ent, -1 empty; cap_idx a power of two */
    size_t cap_idx;
    size_t n_gen;
};

/* ---------------------------------------------------------------- params */

int g4_penalty_params_active(const g4_penalty_params *p) {
    return p && (p->presence != 0.0f || p->frequency != 0.0f || (p->repetition != 0.0f && p->repetition != 1.0f) || p->min_tokens > 0 ||
                 p->n_bias > 0);
}

int g4_penalty_params_validate(const g4_penalty_params *p, int n_vocab, g4_err *err) {
    if (!p) return g4_err_set(err, G4_EINVAL, "penalties: NULL");
    if (!isfinite(p->presence) || fabsf(p->presence) > G4_PENALTY_MAX)
        return g4_err_set(err, G4_EINVAL, "presence_penalty must be between -2 and 2 (got %g)", (double)p->presence);
    if (!isfinite(p->frequency) || fabsf(p->frequency) > G4_PENALTY_MAX)
        return g4_err_set(err, G4_EINVAL, "frequency_penalty must be between -2 and 2 (got %g)", (double)p->frequency);
    if (!isfinite(p->repetition) || p->repetition < 0.0f)
        return g4_err_set(err, G4_EINVAL, "repetition_penalty must be a finite number > 0 (got %g; 1 turns it off)", (double)p->repetition);
    if (p->min_tokens < 0) return g4_err_set(err, G4_EINVAL, "min_tokens must be >= 0 (got %lld)", (long long)p->min_tokens);
    if (p->n_bias && !p->bias) return g4_err_set(err, G4_EINVAL, "logit_bias: NULL list");
    if (p->n_bias > (size_t)n_vocab)
        return g4_err_set(err, G4_EINVAL, "logit_bias has %zu entries, more than the vocabulary's %d tokens", p->n_bias, n_vocab);
    uint64_t *seen = p->n_bias > 1 ? calloc(((size_t)n_vocab + 63) / 64, sizeof *seen) : NULL;
    if (p->n_bias > 1 && !seen) return g4_err_set(err, G4_ENOMEM, "logit_bias: out of memory");
    int rc = G4_OK;
    for (size_t i = 0; i < p->n_bias && !rc; i++) {
        const int32_t id = p->bias[i].id;
        const float b = p->bias[i].bias;
        if (id < 0 || id >= n_vocab)
            rc = g4_err_set(err, G4_EINVAL, "logit_bias: token id %d is outside the vocabulary (0 to %d)", id, n_vocab - 1);
        else if (!isfinite(b) || fabsf(b) > G4_LOGIT_BIAS_MAX)
            rc = g4_err_set(err, G4_EINVAL, "logit_bias: the bias of token %d must be between -100 and 100 (got %g)", id, (double)b);
        else if (seen && (seen[id / 64] >> (id % 64) & 1))
            rc = g4_err_set(err, G4_EINVAL, "logit_bias: token id %d is given twice", id);
        else if (seen)
            seen[id / 64] |= 1ull << (id % 64);
    }
    free(seen);
    return rc;
}

/* ---------------------------------------------------------------- the token table */

static inline size_t slot_of(int32_t id, size_t cap) { return ((uint32_t)id * 2654435761u) & (cap - 1); }

static int grow_index(g4_penalty *pn, size_t want_ent) {
    size_t cap = pn->cap_idx ? pn->cap_idx : 64;
    while (cap < 2 * want_ent) cap *= 2;
    if (cap == pn->cap_idx) return 0;
    int32_t *idx = malloc(cap * sizeof *idx);
    if (!idx) return -1;
    memset(idx, 0xff, cap * sizeof *idx);
    for (size_t i = 0; i < pn->n_ent; i++) {
        size_t s = slot_of(pn->ent[i].id, cap);
        while (idx[s] >= 0) s = (s + 1) & (cap - 1);
        idx[s] = (int32_t)i;
    }
    free(pn->idx);
    pn->idx = idx;
    pn->cap_idx = cap;
    return 0;
}

/* The entry of id, added when absent; NULL when out of memory. */
static entry *entry_of(g4_penalty *pn, int32_t id) {
    if (pn->cap_idx) {
        for (size_t s = slot_of(id, pn->cap_idx); pn->idx[s] >= 0; s = (s + 1) & (pn->cap_idx - 1))
            if (pn->ent[pn->idx[s]].id == id) return &pn->ent[pn->idx[s]];
    }
    if (pn->n_ent == pn->cap_ent) {
        size_t c = pn->cap_ent ? pn->cap_ent * 2 : 64;
        entry *e = realloc(pn->ent, c * sizeof *e);
        if (!e) return NULL;
        pn->ent = e;
        pn->cap_ent = c;
    }
    if (grow_index(pn, pn->n_ent + 1)) return NULL;
    size_t s = slot_of(id, pn->cap_idx);
    while (pn->idx[s] >= 0) s = (s + 1) & (pn->cap_idx - 1);
    pn->idx[s] = (int32_t)pn->n_ent;
    entry *e = &pn->ent[pn->n_ent++];
    e->id = id;
    e->count = 0;
    e->prompt = 0;
    return e;
}

/* ---------------------------------------------------------------- state */

void g4_penalty_free(g4_penalty *pn) {
    if (!pn) return;
    free(pn->bias);
    free(pn->stops);
    free(pn->held);
    free(pn->ent);
    free(pn->idx);
    free(pn);
}

int g4_penalty_create(const g4_penalty_params *p, int n_vocab, const int32_t *prompt, size_t n_prompt, const int32_t *stop_ids,
                      size_t n_stop, g4_penalty **out, g4_err *err) {
    if (!out) return g4_err_set(err, G4_EINVAL, "penalties: NULL output pointer");
    *out = NULL;
    if (n_vocab <= 0) return g4_err_set(err, G4_EINVAL, "penalties: vocabulary size must be > 0 (got %d)", n_vocab);
    int rc = g4_penalty_params_validate(p, n_vocab, err);
    if (rc) return rc;
    if ((n_prompt && !prompt) || (n_stop && !stop_ids)) return g4_err_set(err, G4_EINVAL, "penalties: NULL token list");
    g4_penalty *pn = calloc(1, sizeof *pn);
    if (!pn) return g4_err_set(err, G4_ENOMEM, "penalties: out of memory");
    pn->p = *p;
    pn->n_vocab = n_vocab;
    pn->rep = p->repetition != 0.0f && p->repetition != 1.0f;
    pn->track = pn->rep || p->presence != 0.0f || p->frequency != 0.0f;
    if (p->n_bias) {
        if (!(pn->bias = malloc(p->n_bias * sizeof *pn->bias))) goto oom;
        memcpy(pn->bias, p->bias, p->n_bias * sizeof *pn->bias);
    }
    pn->p.bias = pn->bias;
    if (p->min_tokens > 0 && n_stop) {
        pn->stops = malloc(n_stop * sizeof *pn->stops);
        pn->held = malloc(n_stop * sizeof *pn->held);
        if (!pn->stops || !pn->held) goto oom;
        for (size_t i = 0; i < n_stop; i++)
            if (stop_ids[i] >= 0 && stop_ids[i] < n_vocab) pn->stops[pn->n_stops++] = stop_ids[i];
    }
    for (size_t i = 0; pn->rep && i < n_prompt; i++) {
        if (prompt[i] < 0 || prompt[i] >= n_vocab) continue; /* an image token's key: no token of the vocabulary */
        entry *e = entry_of(pn, prompt[i]);
        if (!e) goto oom;
        e->prompt = 1;
    }
    *out = pn;
    return G4_OK;
oom:
    g4_penalty_free(pn);
    return g4_err_set(err, G4_ENOMEM, "penalties: out of memory for a prompt of %zu tokens", n_prompt);
}

int g4_penalty_accept(g4_penalty *pn, int32_t id, g4_err *err) {
    if (!pn) return G4_OK;
    if (id < 0 || id >= pn->n_vocab) return g4_err_set(err, G4_EINVAL, "penalties: token id %d is outside the vocabulary", id);
    pn->n_gen++;
    if (!pn->track) return G4_OK;
    entry *e = entry_of(pn, id);
    if (!e) return g4_err_set(err, G4_ENOMEM, "penalties: out of memory after %zu tokens", pn->n_gen);
    if (e->count < UINT32_MAX) e->count++;
    return G4_OK;
}

size_t g4_penalty_generated(const g4_penalty *pn) { return pn ? pn->n_gen : 0; }

int g4_penalty_stops_live(const g4_penalty *pn) { return !pn || (int64_t)pn->n_gen > pn->p.min_tokens; }

/* Holds the stop ids back; gives way when nothing else is finite (NaN and -inf are not). */
static void hold_stops(const g4_penalty *pn, float *row, int n) {
    float *held = pn->held;
    for (size_t i = 0; i < pn->n_stops; i++) {
        held[i] = row[pn->stops[i]];
        row[pn->stops[i]] = -INFINITY;
    }
    for (int i = 0; i < n; i++)
        if (row[i] > -INFINITY) return;
    for (size_t i = pn->n_stops; i-- > 0;) row[pn->stops[i]] = held[i]; /* reverse: a repeated id gets its first value */
}

void g4_penalty_apply(const g4_penalty *pn, float *row, int n) {
    if (!pn || !row || n <= 0) return;
    if ((int64_t)pn->n_gen < pn->p.min_tokens && pn->n_stops) hold_stops(pn, row, n);
    for (size_t i = 0; i < pn->p.n_bias; i++) {
        const g4_logit_bias *b = &pn->bias[i];
        if (b->id >= n) continue;
        row[b->id] = b->bias <= -G4_LOGIT_BIAS_MAX ? -INFINITY : row[b->id] + b->bias;
    }
    if (!pn->track) return;
    const float r = pn->rep ? pn->p.repetition : 1.0f, f = pn->p.frequency, pr = pn->p.presence;
    for (size_t i = 0; i < pn->n_ent; i++) {
        const entry *e = &pn->ent[i];
        if (e->id >= n) continue;
        float l = row[e->id];
        if (pn->rep) l = l > 0.0f ? l / r : l * r;
        if (e->count) {
            l -= f * (float)e->count;
            l -= pr;
        }
        row[e->id] = l;
    }
}
