/* test_image_prompt.c — images in the text forward pass (g4_batch.embd / span_end): the
 * reference's soft tokens replace the image tokens' embeddings unscaled, the image blocks are
 * bidirectional in sliding-window layers only, and the tiny vision checkpoint then gives the
 * oracle's greedy ids and top-5 logits (tests/data/vision, made by the shared numpy oracle,
 * itself checked against Hugging Face's code). The soft tokens here are the oracle's, so this
 * tests the engine's side alone (the tower has its own tests). Also: the same bits at TP 1/2/4,
 * with the text before an image in an earlier step, and refusals of split blocks. */
#include "engine_util.h"

typedef struct {
    int32_t *ids;      /* expanded prompt, image tokens as negative keys */
    int32_t *span;     /* [n] 0 or the end of the token's image block */
    const float **embd;/* [n] soft token rows for the image tokens */
    float *soft;       /* all images' soft tokens, in prompt order */
    int n, n_img_tok;
    json_t *g;
} prompt;

static void prompt_load(prompt *p, const char *golden, int image_id) {
    memset(p, 0, sizeof *p);
    p->g = tu_load_json(tu_path("vision/%s/golden.json", golden));
    int32_t *raw = tu_json_ids(json_object_get(p->g, "prompt_ids"), &p->n);
    const char *st = json_string_value(json_object_get(p->g, "soft_tokens"));
    /* "a/soft_tokens.npy" or "a/soft_tokens.npy then b/soft_tokens.npy" (or a vision section) */
    char files[2][256];
    int nf = 0;
    if (st) {
        char tmp[600];
        snprintf(tmp, sizeof tmp, "%s", st);
        for (char *tok = strtok(tmp, " "); tok; tok = strtok(NULL, " "))
            if (strstr(tok, ".npy")) snprintf(files[nf++], sizeof files[0], "%s", tok);
    } else {
        snprintf(files[nf++], sizeof files[0], "%s/soft_tokens.npy", golden);
    }
    int rows_total = 0, cols = 0;
    float *parts[2];
    int rows[2];
    for (int i = 0; i < nf; i++) {
        parts[i] = tu_read_npy_f32(tu_path("vision/%s", files[i]), &rows[i], &cols);
        rows_total += rows[i];
    }
    p->soft = malloc(sizeof(float) * (size_t)rows_total * (size_t)cols);
    for (int i = 0, r = 0; i < nf; r += rows[i], i++) {
        memcpy(p->soft + (size_t)r * cols, parts[i], sizeof(float) * (size_t)rows[i] * (size_t)cols);
        free(parts[i]);
    }
    p->ids = raw;
    p->span = calloc((size_t)p->n, sizeof *p->span);
    p->embd = calloc((size_t)p->n, sizeof *p->embd);
    for (int i = 0, k = 0; i < p->n;) {
        if (raw[i] != image_id) { i++; continue; }
        int e = i;
        while (e < p->n && raw[e] == image_id) e++;
        for (int j = i; j < e; j++, k++) {
            p->ids[j] = -1 - k;
            p->span[j] = e;
            p->embd[j] = p->soft + (size_t)k * cols;
        }
        p->n_img_tok += e - i;
        i = e;
    }
    assert_int_equal(p->n_img_tok, rows_total);
}

static void prompt_free(prompt *p) {
    free(p->ids); free(p->span); free(p->embd); free(p->soft);
    json_decref(p->g);
}

/* Prefill in steps cut at `cut` (0: one step), then greedy decoding; logits [steps][V]. */
static int run(const char *model, int tp, const prompt *p, int cut, int n_new, int drop_span, float **logits_out, int64_t *V, g4_err *err) {
    g4_engine_opts o = {.model_dir = tu_path("vision/%s", model), .tp = tp, .threads = 1, .max_batch = 600, .max_seqs = 2, .max_ctx = 1024};
    g4_engine *e;
    int rc = g4_engine_open(&o, &e, err);
    if (rc) return rc;
    *V = g4_engine_vocab(e);
    float *L = malloc(sizeof(float) * (size_t)*V * (size_t)n_new);
    int seq;
    rc = g4_engine_seq_open(e, p->n + n_new, &seq, err);
    int32_t pos[1024], sq[1024];
    uint8_t want[1024];
    for (int i = 0; i < p->n; i++) { pos[i] = i; sq[i] = seq; want[i] = i == p->n - 1; }
    const int cuts[3] = {0, cut > 0 ? cut : p->n, p->n};
    for (int c = 0; rc == G4_OK && c < 2; c++) {
        const int s = cuts[c], m = cuts[c + 1] - s;
        if (m <= 0) continue;
        g4_batch b = {.n = m, .ids = p->ids + s, .pos = pos + s, .seq = sq + s, .logits = want + s, .embd = p->embd + s,
                      .span_end = drop_span ? NULL : p->span + s};
        rc = g4_engine_forward(e, &b, L, err);
    }
    for (int k = 1; rc == G4_OK && k < n_new; k++) {
        int32_t id = g4_sample_greedy(L + (size_t)(k - 1) * *V, (int)*V), ps = p->n + k - 1;
        uint8_t one = 1;
        g4_batch b = {.n = 1, .ids = &id, .pos = &ps, .seq = &seq, .logits = &one};
        rc = g4_engine_forward(e, &b, L + (size_t)k * *V, err);
    }
    g4_engine_close(e);
    if (rc) free(L);
    else *logits_out = L;
    return rc;
}

/* Greedy ids, top-5 ids and values (1e-4) of every step against the golden. Returns the
 * number of mismatching steps (0: all match). */
static int compare(const prompt *p, const float *L, int64_t V, int n_steps, int verbose) {
    json_t *steps = json_object_get(json_object_get(p->g, "text"), "steps");
    int bad = 0;
    for (int s = 0; s < n_steps && s < (int)json_array_size(steps); s++) {
        json_t *st = json_array_get(steps, (size_t)s);
        const float *row = L + (size_t)s * V;
        int chosen = g4_sample_greedy(row, (int)V);
        int ok = chosen == json_integer_value(json_object_get(st, "chosen_id"));
        json_t *ti = json_object_get(st, "top5_ids"), *tv = json_object_get(st, "top5_values");
        for (int k = 0; k < 5; k++) {
            const int id = (int)json_integer_value(json_array_get(ti, (size_t)k));
            const double want = json_real_value(json_array_get(tv, (size_t)k));
            if (fabs(row[id] - want) > 1e-4) ok = 0;
        }
        if (!ok) {
            bad++;
            if (verbose) print_message("step %d: chosen %d, golden %lld\n", s, chosen, (long long)json_integer_value(json_object_get(st, "chosen_id")));
        }
    }
    return bad;
}

static const struct { const char *golden, *model; } cases[] = {
    {"native_672x960", "tiny_vision"},     {"square_1000x1000", "tiny_vision"}, {"nonsquare_333x517", "tiny_vision"},
    {"two_images", "tiny_vision"},         {"window_smaller_than_block", "tiny_vision_w6"},
};

static void test_goldens(void **state) {
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        prompt p;
        prompt_load(&p, cases[c].golden, 501);
        const int n_new = (int)json_array_size(json_object_get(json_object_get(p.g, "text"), "steps"));
        float *ref = NULL;
        int64_t V;
        g4_err err = {0};
        for (int tp = 1; tp <= 4; tp *= 2) {
            float *L;
            if (run(cases[c].model, tp, &p, 0, n_new, 0, &L, &V, &err)) fail_msg("%s tp %d: %s", cases[c].golden, tp, err.msg);
            if (compare(&p, L, V, n_new, 1)) fail_msg("%s at TP %d differs from the reference", cases[c].golden, tp);
            if (!ref) ref = L;
            else {
                assert_memory_equal(ref, L, sizeof(float) * (size_t)V * (size_t)n_new); /* bitwise across TP */
                free(L);
            }
        }
        /* the text before the (first) image in an earlier step: the same bits */
        int first = 0;
        while (p.span[first] == 0) first++;
        float *L;
        if (run(cases[c].model, 2, &p, first, n_new, 0, &L, &V, &err)) fail_msg("%s: %s", cases[c].golden, err.msg);
        assert_memory_equal(ref, L, sizeof(float) * (size_t)V * (size_t)n_new);
        free(L);
        free(ref);
        prompt_free(&p);
    }
}

/* Without the image blocks' bidirectional attention the reference is not met (the mask
 * matters on these goldens: the oracle's "causal" variant moves the top-5 logits by ~2). */
static void test_mask_matters(void **state) {
    prompt p;
    prompt_load(&p, "square_1000x1000", 501);
    float *L;
    int64_t V;
    g4_err err = {0};
    assert_int_equal(run("tiny_vision", 1, &p, 0, 1, 1, &L, &V, &err), G4_OK);
    assert_true(compare(&p, L, V, 1, 0) > 0);
    free(L);
    prompt_free(&p);
}

/* A block cut between two steps, a block end beyond the batch, a negative id without an
 * embedding: each refused with a clear error, nothing run. */
static void test_refusals(void **state) {
    prompt p;
    prompt_load(&p, "nonsquare_333x517", 501);
    float *L = NULL;
    int64_t V;
    g4_err err = {0};
    int first = 0;
    while (p.span[first] == 0) first++;
    assert_int_equal(run("tiny_vision", 1, &p, first + 10, 2, 0, &L, &V, &err), G4_EINVAL);
    assert_non_null(strstr(err.msg, "image block"));
    p.embd[first + 3] = NULL;
    assert_int_equal(run("tiny_vision", 1, &p, 0, 2, 0, &L, &V, &err), G4_EINVAL);
    assert_non_null(strstr(err.msg, "no embedding"));
    prompt_free(&p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_goldens),
        cmocka_unit_test(test_mask_matters),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
