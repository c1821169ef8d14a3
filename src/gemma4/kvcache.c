/* kvcache.c — per-sequence KV storage of one rank (see kvcache.h). */
#include "gemma4/kvcache.h"

#include <stdlib.h>
#include <string.h>

static int64_t ring_len(const g4_config *cfg, int64_t cap, int max_batch) {
    int64_t r = (int64_t)cfg->sliding_window + max_batch - 1;
    return r < cap ? r : cap;
}

static int64_t layer_slots(const g4_config *cfg, int l, int64_t cap, int max_batch) {
    return cfg->layers[l].full ? cap : ring_len(cfg, cap, max_batch);
}

size_t g4_kv_seq_bytes(const g4_config *cfg, const g4_tp_plan *plan, int64_t cap, int max_batch) {
    size_t total = 0;
    for (int l = 0; l < cfg->n_layers; l++)
        total += 2 * sizeof(float) * (size_t)layer_slots(cfg, l, cap, max_batch) *
                 (size_t)plan->layers[l].n_kv_local * (size_t)cfg->layers[l].head_dim;
    return total;
}

int g4_kv_seq_open(g4_kv_seq *s, const g4_config *cfg, const g4_tp_plan *plan, int64_t cap, int max_batch, g4_err *err) {
    memset(s, 0, sizeof *s);
    s->cap = cap;
    s->ring = ring_len(cfg, cap, max_batch);
    s->k = calloc((size_t)cfg->n_layers, sizeof *s->k);
    s->v = calloc((size_t)cfg->n_layers, sizeof *s->v);
    if (!s->k || !s->v) goto oom;
    for (int l = 0; l < cfg->n_layers; l++) {
        size_t n = (size_t)layer_slots(cfg, l, cap, max_batch) * (size_t)plan->layers[l].n_kv_local * (size_t)cfg->layers[l].head_dim;
        s->k[l] = malloc(n * sizeof(float) + 1);
        s->v[l] = malloc(n * sizeof(float) + 1);
        if (!s->k[l] || !s->v[l]) goto oom;
        s->bytes += 2 * n * sizeof(float);
    }
    s->open = 1;
    return G4_OK;
oom:
    g4_kv_seq_close(s, cfg);
    return g4_err_set(err, G4_ENOMEM, "out of memory for a KV cache of %lld positions", (long long)cap);
}

void g4_kv_seq_close(g4_kv_seq *s, const g4_config *cfg) {
    if (s->k)
        for (int l = 0; l < cfg->n_layers; l++) free(s->k[l]);
    if (s->v)
        for (int l = 0; l < cfg->n_layers; l++) free(s->v[l]);
    free(s->k);
    free(s->v);
    memset(s, 0, sizeof *s);
}
