/* kv_util.h — test helpers for the KV cache through the engine API: open an engine with a
 * logits buffer, feed tokens in chunks, cold logits, random ids, a hit checked bitwise against a
 * cold prefill. Shared by test_kvpool.c and test_kvdisk.c. */
#ifndef G4_TEST_KV_UTIL_H
#define G4_TEST_KV_UTIL_H

#include "engine_util.h"

typedef struct {
    g4_engine *e;
    int64_t V;
    float *lg;   /* [max_batch][V] */
} kt;

static inline void kt_open(kt *k, g4_engine_opts *o) {
    g4_err err = {0};
    if (g4_engine_open(o, &k->e, &err)) fail_msg("%s", err.msg);
    k->V = g4_engine_vocab(k->e);
    k->lg = malloc(sizeof(float) * (size_t)k->V * (size_t)g4_engine_max_batch(k->e));
}

static inline void kt_close(kt *k) {
    free(k->lg);
    g4_engine_close(k->e);
}

/* Feeds tok[from..to) to seq in chunks; out (may be NULL): [to-from][V] every position's logits. */
static inline void feed(kt *k, int seq, const int32_t *tok, int64_t from, int64_t to, float *out) {
    const int mb = g4_engine_max_batch(k->e);
    int32_t pos[256], sq[256];
    uint8_t want[256];
    for (int64_t s = from; s < to; s += mb) {
        const int m = (int)(to - s < mb ? to - s : mb);
        for (int i = 0; i < m; i++) { pos[i] = (int32_t)(s + i); sq[i] = seq; want[i] = out != NULL; }
        g4_batch b = {.n = m, .ids = tok + s, .pos = pos, .seq = sq, .logits = want};
        g4_err err = {0};
        if (g4_engine_forward(k->e, &b, k->lg, &err)) fail_msg("forward at %lld: %s", (long long)s, err.msg);
        if (out) memcpy(out + (size_t)(s - from) * (size_t)k->V, k->lg, sizeof(float) * (size_t)m * (size_t)k->V);
    }
}

static inline int open_seq(kt *k, const int32_t *tok, int64_t n, int64_t *cached) {
    int seq;
    g4_err err = {0};
    if (g4_engine_seq_open_cached(k->e, g4_engine_max_ctx(k->e), tok, n, &seq, cached, &err)) fail_msg("%s", err.msg);
    return seq;
}

/* Cold logits of every position of tok[0..n) in a fresh sequence (the cache is not asked). */
static inline float *cold(kt *k, const int32_t *tok, int64_t n) {
    float *out = malloc(sizeof(float) * (size_t)n * (size_t)k->V);
    int seq;
    g4_err err = {0};
    if (g4_engine_seq_open(k->e, g4_engine_max_ctx(k->e), &seq, &err)) fail_msg("%s", err.msg);
    feed(k, seq, tok, 0, n, out);
    g4_engine_seq_close(k->e, seq);
    return out;
}

static inline void fill_ids(int32_t *t, int64_t n, int64_t vocab, uint32_t seed) {
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        t[i] = (int32_t)(3 + (seed >> 8) % (uint32_t)(vocab - 3));
    }
}

/* Opens tok[0..n) from the cache and checks the rest's logits against `want` (cold, all n). */
static inline int64_t check_hit(kt *k, const int32_t *tok, int64_t n, const float *want, int64_t expect, const char *what) {
    int64_t p;
    const int seq = open_seq(k, tok, n, &p);
    if (expect >= 0 && p != expect) fail_msg("%s: %lld positions from the cache, expected %lld", what, (long long)p, (long long)expect);
    float *got = malloc(sizeof(float) * (size_t)(n - p) * (size_t)k->V);
    feed(k, seq, tok, p, n, got);
    for (int64_t i = p; i < n; i++)
        if (memcmp(got + (size_t)(i - p) * (size_t)k->V, want + (size_t)i * (size_t)k->V, sizeof(float) * (size_t)k->V))
            fail_msg("%s: position %lld after a hit of %lld differs from the cold prefill", what, (long long)i, (long long)p);
    free(got);
    g4_engine_seq_close(k->e, seq);
    return p;
}

#endif
