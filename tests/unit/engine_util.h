/* engine_util.h — test helpers: run greedy generation through the engine API and keep every
 * step's logits; read golden JSON files. */
#ifndef G4_TEST_ENGINE_UTIL_H
#define G4_TEST_ENGINE_UTIL_H

#include <jansson.h>
#include <math.h>

#include "testutil.h"
#include "g4.h"
#include "engine/logprobs.h"
#include "engine/sampler.h"

typedef struct {
    int32_t gen[256];
    int n_gen;
    float *logits;  /* [n_gen][vocab]: logits of each step (step 0 = prompt's last position) */
    int64_t vocab;
} tu_run;

/* Greedy: n_new tokens (no early stop). Returns G4_OK or an error code (err filled). */
static inline int tu_generate(const g4_engine_opts *o, const int32_t *ids, int n, int n_new, tu_run *r, g4_err *err) {
    memset(r, 0, sizeof *r);
    g4_engine *e;
    int rc = g4_engine_open(o, &e, err);
    if (rc) return rc;
    r->vocab = g4_engine_vocab(e);
    r->logits = malloc(sizeof(float) * (size_t)r->vocab * (size_t)n_new);
    int seq, mb = g4_engine_max_batch(e);
    rc = g4_engine_seq_open(e, n + n_new, &seq, err);
    int32_t pos[4096], sq[4096];
    uint8_t want[4096];
    for (int s = 0; rc == G4_OK && s < n; s += mb) {
        int m = n - s < mb ? n - s : mb;
        for (int k = 0; k < m; k++) { pos[k] = s + k; sq[k] = seq; want[k] = s + k == n - 1; }
        g4_batch b = {.n = m, .ids = ids + s, .pos = pos, .seq = sq, .logits = want};
        rc = g4_engine_forward(e, &b, r->logits, err);
    }
    for (int step = 0; rc == G4_OK && step < n_new; step++) {
        float *l = r->logits + (size_t)step * r->vocab;
        int32_t id = g4_sample_greedy(l, (int)r->vocab);
        r->gen[r->n_gen++] = id;
        if (step == n_new - 1) break;
        int32_t p = n + step;
        uint8_t one = 1;
        g4_batch b = {.n = 1, .ids = &id, .pos = &p, .seq = &seq, .logits = &one};
        rc = g4_engine_forward(e, &b, l + r->vocab, err);
    }
    g4_engine_close(e);
    return rc;
}

/* Weight bytes an engine on these options holds in its own memory (0: all read in place). */
static inline size_t tu_copied_weight_bytes(g4_engine_opts o) {
    g4_engine *e;
    g4_err err;
    if (g4_engine_open(&o, &e, &err)) fail_msg("%s: %s", o.model_dir, err.msg);
    const size_t b = g4_engine_copied_weight_bytes(e);
    g4_engine_close(e);
    return b;
}

/* The logprobs of the same n tokens from two runs are the same bits (their rows were). */
static inline void tu_same_logprobs(const g4_token_logprob *a, const g4_token_logprob *b, size_t n) {
    for (size_t t = 0; t < n; t++) {
        const g4_token_logprob *x = &a[t], *y = &b[t];
        assert_int_equal(x->id, y->id);
        assert_memory_equal(&x->logprob, &y->logprob, sizeof(float));
        assert_int_equal(x->n_top, y->n_top);
        assert_memory_equal(x->top_id, y->top_id, sizeof(int32_t) * (size_t)x->n_top);
        assert_memory_equal(x->top_logprob, y->top_logprob, sizeof(float) * (size_t)x->n_top);
    }
}

static inline void tu_run_free(tu_run *r) { free(r->logits); r->logits = NULL; }

static inline json_t *tu_load_json(const char *path) {
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    if (!j) fail_msg("cannot read %s: %s", path, je.text);
    return j;
}

static inline int32_t *tu_json_ids(json_t *arr, int *n) {
    *n = (int)json_array_size(arr);
    int32_t *v = malloc(sizeof(int32_t) * (size_t)(*n + 1));
    for (int i = 0; i < *n; i++) v[i] = (int32_t)json_integer_value(json_array_get(arr, (size_t)i));
    return v;
}

/* A float32 .npy file (version 1/2, C order): data and shape [rows][cols]. */
static inline float *tu_read_npy_f32(const char *path, int *rows, int *cols) {
    size_t n;
    char *buf = tu_read_file(path, &n);
    if (!buf) fail_msg("cannot read %s", path);
    assert_memory_equal(buf, "\x93NUMPY", 6);
    const int v1 = buf[6] == 1;
    const size_t hl = v1 ? (size_t)(uint8_t)buf[8] | (size_t)(uint8_t)buf[9] << 8 : (size_t)(uint8_t)buf[8] | (size_t)(uint8_t)buf[9] << 8 | (size_t)(uint8_t)buf[10] << 16;
    const size_t off = (v1 ? 10 : 12) + hl;
    char *hdr = strndup(buf + (v1 ? 10 : 12), hl);
    assert_non_null(strstr(hdr, "'<f4'"));
    assert_non_null(strstr(hdr, "'fortran_order': False"));
    char *sh = strstr(hdr, "'shape': (");
    assert_non_null(sh);
    assert_int_equal(sscanf(sh, "'shape': (%d, %d)", rows, cols), 2);
    free(hdr);
    assert_int_equal(n - off, sizeof(float) * (size_t)*rows * (size_t)*cols);
    float *d = malloc(n - off);
    memcpy(d, buf + off, n - off);
    free(buf);
    return d;
}

#endif
