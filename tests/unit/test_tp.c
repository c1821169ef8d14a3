/* Tensor-parallel and threading invariance (DESIGN.md §4): the logits of every step are
 * bitwise identical for every TP degree a model allows (ranks as threads), for any thread
 * count per rank, and for a sequence decoded alone or batched with others; greedy ids equal
 * the golden ids throughout. The MPI backend is covered by tests/e2e/tp_mpi.sh. */
#include "engine_util.h"
#include "kernels/kernels.h"
#include "model/artifact.h"
#include "model/synth.h"

static void run_golden(const char *preset, const char *prompt, int tp, int threads, tu_run *r, int32_t **want, int *n_want) {
    json_t *g = tu_load_json(tu_path("golden/%s__%s.json", preset, prompt));
    int n;
    int32_t *ids = tu_json_ids(json_object_get(g, "prompt_ids"), &n);
    *want = tu_json_ids(json_object_get(g, "generated_ids"), n_want);
    g4_engine_opts o = {.tp = tp, .threads = threads, .model_dir = tu_path("golden/%s", preset), .max_batch = 16};
    g4_err err = {0};
    if (tu_generate(&o, ids, n, *n_want, r, &err)) fail_msg("%s tp=%d threads=%d: %s", preset, tp, threads, err.msg);
    free(ids);
    json_decref(g);
}

static void check_degrees(const char *preset, const int *tps, int ntp) {
    const char *prompts[] = {"p16", "p40"};
    for (int q = 0; q < 2; q++) {
        tu_run base;
        int32_t *want;
        int nw;
        run_golden(preset, prompts[q], 1, 1, &base, &want, &nw);
        assert_memory_equal(base.gen, want, sizeof(int32_t) * (size_t)nw);
        for (int i = 0; i < ntp; i++) {
            tu_run r;
            int32_t *w2;
            int n2;
            run_golden(preset, prompts[q], tps[i], 1, &r, &w2, &n2);
            print_message("%s/%s TP=%d: logits %s\n", preset, prompts[q], tps[i],
                          memcmp(r.logits, base.logits, sizeof(float) * (size_t)nw * (size_t)base.vocab) ? "DIFFER" : "bitwise equal");
            assert_memory_equal(r.gen, want, sizeof(int32_t) * (size_t)nw);
            assert_memory_equal(r.logits, base.logits, sizeof(float) * (size_t)nw * (size_t)base.vocab);
            tu_run_free(&r);
            free(w2);
        }
        tu_run_free(&base);
        free(want);
    }
}

static void test_tiny_tp8_all_degrees(void **state) {
    (void)state;
    const int tps[] = {2, 4, 8};
    check_degrees("tiny_tp8", tps, 3);
}

static void test_tiny_default_degrees(void **state) {
    (void)state;
    const int tps[] = {2, 4};
    check_degrees("tiny_default", tps, 2);
}

static void test_tiny_wide_degrees(void **state) {
    (void)state;
    const int tps[] = {2};
    check_degrees("tiny_wide", tps, 1);
}

static void test_thread_counts(void **state) {
    (void)state;
    tu_run a, b, c;
    int32_t *w;
    int n;
    run_golden("tiny_tp8", "p40", 1, 1, &a, &w, &n);
    free(w);
    run_golden("tiny_tp8", "p40", 1, 3, &b, &w, &n);
    free(w);
    run_golden("tiny_tp8", "p40", 2, 2, &c, &w, &n);
    free(w);
    assert_memory_equal(a.logits, b.logits, sizeof(float) * (size_t)n * (size_t)a.vocab);
    assert_memory_equal(a.logits, c.logits, sizeof(float) * (size_t)n * (size_t)a.vocab);
    tu_run_free(&a); tu_run_free(&b); tu_run_free(&c);
}

static void test_bad_degree_refused(void **state) {
    (void)state;
    g4_engine_opts o = {.tp = 4, .threads = 1, .model_dir = tu_path("golden/tiny_wide")};
    g4_engine *e = NULL;
    g4_err err = {0};
    assert_int_equal(g4_engine_open(&o, &e, &err), G4_EINVAL);
    assert_non_null(strstr(err.msg, "valid degrees: 1, 2"));
    o.tp = 3;
    o.model_dir = tu_path("golden/tiny_tp8");
    assert_int_equal(g4_engine_open(&o, &e, &err), G4_EINVAL);
    assert_non_null(strstr(err.msg, "valid degrees: 1, 2, 4, 8"));
}

/* A synth checkpoint like tiny_default but with 16 query heads and FFN 320 (10 blocks of 32:
 * q8_0 gets 2 reduction slices, bf16 16 of 20 whole columns). */
static const char *synth_ffn320(void) {
    static char dir[512];
    if (dir[0]) return dir;
    char cfg_path[512];
    snprintf(cfg_path, sizeof cfg_path, "%s/ffn320.config.json", tu_tmpdir());
    snprintf(dir, sizeof dir, "%s/ffn320", tu_tmpdir());
    json_t *c = tu_load_json(tu_path("golden/tiny_default/config.json"));
    json_t *t = json_object_get(c, "text_config");
    json_object_set_new(t, "num_attention_heads", json_integer(16));
    json_object_set_new(t, "intermediate_size", json_integer(320));
    assert_int_equal(json_dump_file(c, cfg_path, 0), 0);
    json_decref(c);
    g4_synth_opts so = {.like = cfg_path, .layers = 2, .seed = 11, .out_dir = dir};
    g4_err err = {0};
    if (g4_synth_write(&so, &err)) fail_msg("synth: %s", err.msg);
    return dir;
}

static void gen_ffn320(const char *dir, const char *dtype, int tp, tu_run *r) {
    const int32_t ids[] = {2, 105, 17, 33, 44, 55, 66, 77, 88, 99};
    g4_engine_opts o = {.tp = tp, .threads = 1, .model_dir = dir, .dtype = dtype, .max_batch = 16};
    g4_err err = {0};
    if (tu_generate(&o, ids, 10, 6, r, &err)) fail_msg("%s %s tp=%d: %s", dir, dtype ? dtype : "as stored", tp, err.msg);
}

/* Only block-quantized weights need 32-column reduction slices: bf16 with FFN 320 runs at every
 * degree the heads allow, bit for bit; q8_0 is refused at TP 4 with a message naming q8_0, and
 * its own slice count does not depend on the degree either. */
static void test_ffn_whole_columns(void **state) {
    (void)state;
    const char *dir = synth_ffn320();
    const int tps[] = {2, 4, 8};
    tu_run base, r;
    gen_ffn320(dir, NULL, 1, &base);
    for (int i = 0; i < 3; i++) {
        gen_ffn320(dir, NULL, tps[i], &r);
        assert_memory_equal(r.gen, base.gen, sizeof(int32_t) * (size_t)base.n_gen);
        assert_memory_equal(r.logits, base.logits, sizeof(float) * (size_t)base.n_gen * (size_t)base.vocab);
        tu_run_free(&r);
    }
    /* an artifact folder (sharded as stored) cuts the same slices */
    char art[512];
    snprintf(art, sizeof art, "%s/ffn320-tp8", tu_tmpdir());
    g4_err err = {0};
    g4_shard_opts so = {.model_dir = dir, .out_dir = art, .tp = 8, .dtype = -1, .force = 1};
    if (g4_artifact_shard(&so, &err)) fail_msg("shard: %s", err.msg);
    gen_ffn320(art, NULL, 8, &r);
    assert_memory_equal(r.logits, base.logits, sizeof(float) * (size_t)base.n_gen * (size_t)base.vocab);
    tu_run_free(&r);
    tu_run_free(&base);

    gen_ffn320(dir, "q8_0", 1, &base);
    gen_ffn320(dir, "q8_0", 2, &r);
    assert_memory_equal(r.logits, base.logits, sizeof(float) * (size_t)base.n_gen * (size_t)base.vocab);
    tu_run_free(&r);
    tu_run_free(&base);
    g4_engine_opts o = {.tp = 4, .threads = 1, .model_dir = dir, .dtype = "q8_0"};
    g4_engine *e = NULL;
    assert_int_equal(g4_engine_open(&o, &e, &err), G4_EINVAL);
    print_message("q8_0 at TP 4: %s\n", err.msg);
    assert_non_null(strstr(err.msg, "q8_0 weights need slices of whole 32-column blocks"));
    assert_non_null(strstr(err.msg, "valid degrees: 1, 2"));
    so.tp = 4;
    so.dtype = G4_DT_Q8_0;
    snprintf(art, sizeof art, "%s/ffn320-q8-tp4", tu_tmpdir());
    assert_int_equal(g4_artifact_shard(&so, &err), G4_EINVAL);
    assert_non_null(strstr(err.msg, "q8_0 weights need"));
}

/* A sequence's logits do not depend on what else shares its batch. */
static void test_batch_composition(void **state) {
    (void)state;
    g4_engine_opts o = {.tp = 2, .threads = 1, .model_dir = tu_path("golden/tiny_tp8"), .max_batch = 32};
    g4_engine *e;
    g4_err err;
    assert_int_equal(g4_engine_open(&o, &e, &err), 0);
    const int64_t V = g4_engine_vocab(e);
    int32_t a_ids[12] = {2, 105, 17, 33, 44, 55, 66, 77, 88, 99, 111, 122};
    int32_t b_ids[5] = {2, 7, 9, 400, 1000};
    float *alone = malloc(sizeof(float) * (size_t)V * 12), *mixed = malloc(sizeof(float) * (size_t)V * 17);
    /* A alone: all 12 positions with logits */
    int sa, sb;
    assert_int_equal(g4_engine_seq_open(e, 32, &sa, &err), 0);
    int32_t pos[17], sq[17];
    uint8_t want[17];
    for (int i = 0; i < 12; i++) { pos[i] = i; sq[i] = sa; want[i] = 1; }
    g4_batch b1 = {.n = 12, .ids = a_ids, .pos = pos, .seq = sq, .logits = want};
    assert_int_equal(g4_engine_forward(e, &b1, alone, &err), 0);
    g4_engine_seq_close(e, sa);
    /* A interleaved with B in one batch */
    assert_int_equal(g4_engine_seq_open(e, 32, &sa, &err), 0);
    assert_int_equal(g4_engine_seq_open(e, 32, &sb, &err), 0);
    int32_t ids[17];
    int k = 0, ia = 0, ib = 0;
    for (int i = 0; i < 17; i++) {
        if ((i % 3 == 2 && ib < 5) || ia >= 12) { ids[k] = b_ids[ib]; pos[k] = ib++; sq[k] = sb; want[k] = 0; }
        else { ids[k] = a_ids[ia]; pos[k] = ia++; sq[k] = sa; want[k] = 1; }
        k++;
    }
    g4_batch b2 = {.n = 17, .ids = ids, .pos = pos, .seq = sq, .logits = want};
    assert_int_equal(g4_engine_forward(e, &b2, mixed, &err), 0);
    assert_memory_equal(alone, mixed, sizeof(float) * (size_t)V * 12);
    g4_engine_seq_close(e, sa);
    g4_engine_seq_close(e, sb);
    g4_engine_close(e);
    free(alone);
    free(mixed);
}

/* g4_engine_phase_times: one-token passes only, every phase of every rank, the bytes of every
 * matrix once, a reset, and a clear refusal for a rank that is not here. */
static void test_phase_times(void **state) {
    (void)state;
    g4_engine_opts o = {.tp = 2, .threads = 2, .model_dir = tu_path("golden/tiny_tp8"), .max_batch = 16};
    g4_engine *e;
    g4_err err;
    assert_int_equal(g4_engine_open(&o, &e, &err), 0);
    const int64_t V = g4_engine_vocab(e);
    float *logits = malloc(sizeof(float) * (size_t)V);
    g4_engine_phase_times_reset(e);
    int seq;
    assert_int_equal(g4_engine_seq_open(e, 32, &seq, &err), 0);
    int32_t ids[8] = {2, 105, 17, 33, 44, 55, 66, 77}, pos[8], sq[8];
    uint8_t want[8] = {0};
    for (int i = 0; i < 8; i++) { pos[i] = i; sq[i] = seq; }
    want[7] = 1;
    g4_batch pre = {.n = 8, .ids = ids, .pos = pos, .seq = sq, .logits = want};
    assert_int_equal(g4_engine_forward(e, &pre, logits, &err), 0);
    g4_phase_times t, pre_t[2];
    const int timed[] = {G4_PHASE_QKV, G4_PHASE_ATTENTION, G4_PHASE_O_PROJ, G4_PHASE_GATE_UP, G4_PHASE_DOWN_PROJ, G4_PHASE_HEAD,
                         G4_PHASE_ALLREDUCE, G4_PHASE_OTHER};
    for (int r = 0; r < 2; r++) { /* a prefill is not a decode step: counted apart */
        assert_int_equal(g4_engine_phase_times(e, r, &pre_t[r], &err), 0);
        assert_int_equal(pre_t[r].steps, 0);
        assert_int_equal(pre_t[r].prefill_tokens, 8);
        for (int i = 0; i < G4_PHASE_COUNT; i++) assert_true(pre_t[r].seconds[i] == 0);
        for (int i = 0; i < 8; i++) assert_true(pre_t[r].prefill_seconds[timed[i]] > 0);
    }
    for (int s = 0; s < 3; s++) {
        int32_t p = 8 + s;
        uint8_t one = 1;
        g4_batch b = {.n = 1, .ids = &ids[s], .pos = &p, .seq = &seq, .logits = &one};
        assert_int_equal(g4_engine_forward(e, &b, logits, &err), 0);
    }
    double bytes = 0, madds = 0;
    const char *wdt = g4_engine_weight_dtype(e);
    const double elem = !strcmp(wdt, "f32") ? 4 : 2;
    assert_true(!strcmp(wdt, "f32") || !strcmp(wdt, "bf16") || !strcmp(wdt, "f16"));
    for (int r = 0; r < 2; r++) {
        assert_int_equal(g4_engine_phase_times(e, r, &t, &err), 0);
        assert_int_equal(t.steps, 3);
        assert_int_equal(t.prefill_tokens, 8); /* decode steps leave the prefill's figures alone */
        for (int i = 0; i < G4_PHASE_COUNT; i++) assert_true(t.prefill_seconds[i] == pre_t[r].prefill_seconds[i]);
        for (int i = 0; i < 8; i++) assert_true(t.seconds[timed[i]] > 0);
        const int mats[] = {G4_PHASE_QKV, G4_PHASE_O_PROJ, G4_PHASE_GATE_UP, G4_PHASE_DOWN_PROJ, G4_PHASE_HEAD};
        for (int i = 0; i < 5; i++) assert_true(t.step_bytes[mats[i]] > 0);
        for (int i = 0; i < G4_PHASE_COUNT; i++) {
            bytes += t.step_bytes[i];
            madds += t.token_madds[i];
            /* one multiply-add per weight: the bytes of an element each (a float model) */
            assert_true(t.step_bytes[i] == t.token_madds[i] * elem);
        }
    }
    assert_true(bytes == (double)g4_engine_weight_bytes(e)); /* every matrix once, the tied head included */
    assert_true(madds * elem == bytes);
    assert_int_equal(g4_engine_phase_times(e, 2, &t, &err), G4_EINVAL);
    assert_non_null(strstr(err.msg, "rank 2"));
    assert_int_equal(g4_engine_phase_times(e, -1, &t, &err), G4_EINVAL);
    g4_engine_phase_times_reset(e);
    assert_int_equal(g4_engine_phase_times(e, 1, &t, &err), 0);
    assert_int_equal(t.steps, 0);
    assert_int_equal(t.prefill_tokens, 0);
    assert_true(t.seconds[G4_PHASE_GATE_UP] == 0);
    assert_true(t.prefill_seconds[G4_PHASE_GATE_UP] == 0);
    assert_string_equal(g4_phase_name(G4_PHASE_DOWN_PROJ), "down_proj");
    assert_string_equal(g4_phase_name(G4_PHASE_COUNT), "?");
    g4_engine_seq_close(e, seq);
    g4_engine_close(e);
    free(logits);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tiny_tp8_all_degrees),
        cmocka_unit_test(test_tiny_default_degrees),
        cmocka_unit_test(test_tiny_wide_degrees),
        cmocka_unit_test(test_thread_counts),
        cmocka_unit_test(test_bad_degree_refused),
        cmocka_unit_test(test_ffn_whole_columns),
        cmocka_unit_test(test_batch_composition),
        cmocka_unit_test(test_phase_times),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
