/* Weight formats at load (--dtype): f32 and bf16 keep the goldens; q8_0 (int8 blocks of 32 with
 * a scale; the tied embedding/head too, by default: docs/quantization.md) keeps the demo model's logits within NMSE
 * 1e-3 of the fp32 path and its answers exact; q8_0 is refused where blocks would straddle the
 * reduction slices; q8_0 logits do not depend on the TP degree. */
#include "engine_util.h"
#include "kernels/kernels.h"
#include "engine/textgen.h"

static double nmse(const float *a, const float *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    return num / den;
}

/* NMSE of the q8_0 logits at the prompt's last position against the fp32 path. */
static double q8_nmse(const char *model, const int32_t *ids, int n, int tp) {
    g4_engine_opts o = {.tp = 1, .threads = 1, .model_dir = model};
    tu_run ref, q;
    g4_err err;
    if (tu_generate(&o, ids, n, 1, &ref, &err)) fail_msg("%s", err.msg);
    o.dtype = "q8_0";
    o.tp = tp;
    if (tu_generate(&o, ids, n, 1, &q, &err)) fail_msg("%s", err.msg);
    double e = nmse(q.logits, ref.logits, (size_t)ref.vocab);
    tu_run_free(&ref);
    tu_run_free(&q);
    return e;
}

/* The trained demo model (real weight statistics): NMSE < 1e-3 on every golden prompt. */
static void test_q8_nmse_demo(void **state) {
    (void)state;
    json_t *g = tu_load_json(tu_path("demo/golden_demo.json"));
    size_t ci;
    json_t *c;
    double worst = 0;
    json_array_foreach(json_object_get(g, "cases"), ci, c) {
        int n;
        int32_t *ids = tu_json_ids(json_object_get(c, "prompt_ids"), &n);
        double e = q8_nmse("models/demo", ids, n, ci % 2 ? 2 : 1);
        if (e > worst) worst = e;
        assert_true(e > 0); /* it really is quantized */
        free(ids);
    }
    print_message("demo q8_0: worst logits NMSE %.3g over 34 prompts\n", worst);
    assert_true(worst < 1e-3);
    json_decref(g);
}

/* The random tiny golden model amplifies any perturbation (it is chaotic: 8 layers of random
 * weights with layer scalars > 1), so q8_0 lands at 1e-3 .. 1e-2 there; rounding only the weights
 * through q8_0 on the fp32 path already gives up to 6.7e-3 (bench/q8_nmse_floor.py), so no
 * q8_0 engine meets 1e-3 on it. The bound only guards against a broken quantizer (a wrong scale
 * gives NMSE ~ 1). See bench/README.md. */
static void test_q8_nmse_tiny(void **state) {
    (void)state;
    const char *prompts[] = {"p1", "p16", "p40"};
    for (int p = 0; p < 3; p++) {
        json_t *g = tu_load_json(tu_path("golden/tiny_default__%s.json", prompts[p]));
        int n;
        int32_t *ids = tu_json_ids(json_object_get(g, "prompt_ids"), &n);
        double e = q8_nmse(tu_path("golden/tiny_default"), ids, n, 1);
        print_message("tiny_default/%s q8_0: logits NMSE %.3g\n", prompts[p], e);
        assert_true(e > 0 && e < 5e-2);
        free(ids);
        json_decref(g);
    }
}

static void test_f32_f16_keep_goldens(void **state) {
    (void)state;
    json_t *g = tu_load_json(tu_path("golden/tiny_tp8__p16.json"));
    int n, nw;
    int32_t *ids = tu_json_ids(json_object_get(g, "prompt_ids"), &n);
    int32_t *want = tu_json_ids(json_object_get(g, "generated_ids"), &nw);
    const char *dts[] = {"f32", "bf16"};
    tu_run base;
    g4_engine_opts o = {.tp = 1, .threads = 1, .model_dir = tu_path("golden/tiny_tp8")};
    g4_err err;
    assert_int_equal(tu_generate(&o, ids, n, nw, &base, &err), 0);
    for (int d = 0; d < 2; d++) {
        tu_run r;
        o.dtype = dts[d];
        assert_int_equal(tu_generate(&o, ids, n, nw, &r, &err), 0);
        assert_memory_equal(r.gen, want, sizeof(int32_t) * (size_t)nw);
        /* bf16 -> f32 is exact, so the logits are close (the kernels differ per dtype only in loads) */
        for (int64_t i = 0; i < base.vocab * nw; i++) assert_true(fabsf(r.logits[i] - base.logits[i]) < 1e-4f);
        tu_run_free(&r);
    }
    o.dtype = "q8_1";
    g4_engine *e;
    assert_int_equal(g4_engine_open(&o, &e, &err), G4_EINVAL);
    o.dtype = "q8_0"; /* 16-column reduction slices: q8_0 needs multiples of 32 */
    assert_int_equal(g4_engine_open(&o, &e, &err), G4_EUNSUPPORTED);
    print_message("q8_0 on tiny_tp8: %s\n", err.msg);
    tu_run_free(&base);
    free(ids);
    free(want);
    json_decref(g);
}

/* The demo model with q8_0 weights still answers every golden question exactly. */
static void test_demo_q8_answers(void **state) {
    (void)state;
    json_t *g = tu_load_json(tu_path("demo/golden_demo.json"));
    g4_engine_opts o = {.tp = 2, .threads = 1, .model_dir = "models/demo", .dtype = "q8_0"};
    g4_engine *e;
    g4_err err;
    if (g4_engine_open(&o, &e, &err)) fail_msg("%s", err.msg);
    g4_textgen tg;
    assert_int_equal(g4_textgen_open(e, "models/demo", &tg, &err), 0);
    size_t ci;
    json_t *c;
    int right = 0, total = 0;
    json_array_foreach(json_object_get(g, "cases"), ci, c) {
        int n;
        int32_t *ids = tu_json_ids(json_object_get(c, "prompt_ids"), &n);
        g4_gen_params p = {.max_new_tokens = 48, .skip_special = 1};
        g4_sampling_params_default(&p.sampling);
        g4_gen_result r;
        assert_int_equal(g4_textgen_generate(&tg, ids, (size_t)n, &p, NULL, NULL, &r, &err), 0);
        const char *want = json_string_value(json_object_get(c, "generated_text"));
        right += strcmp(r.text, want) == 0;
        if (strcmp(r.text, want)) print_message("q8_0 %s: \"%s\" (want \"%s\")\n", json_string_value(json_object_get(c, "name")), r.text, want);
        total++;
        g4_gen_result_free(&r);
        free(ids);
    }
    print_message("demo q8_0: %d/%d answers exact\n", right, total);
    assert_int_equal(right, total);
    g4_textgen_close(&tg);
    g4_engine_close(e);
    json_decref(g);
}

/* q8_0 logits are bitwise the same for every TP degree, thread count and batch shape, with each
 * kernel set this CPU runs: the prompt as one prefill (q8_0 T > 1 path) or token by token (T = 1,
 * activations prepared once per phase), 2 or 1 threads, TP 1 or 2. */
static void test_q8_invariance(void **state) {
    (void)state;
    json_t *g = tu_load_json(tu_path("demo/golden_demo.json"));
    int n;
    int32_t *ids = tu_json_ids(json_object_get(json_array_get(json_object_get(g, "cases"), 0), "prompt_ids"), &n);
    const struct { int tp, threads, max_batch; } cfgs[] = {{1, 1, 0}, {1, 1, 1}, {1, 2, 1}, {2, 1, 0}, {2, 2, 1}, {1, 2, 3}};
    const char *isas[3];
    const int nisa = g4_kernels_available(isas, 3);
    for (int k = 0; k < nisa; k++) { /* bits may differ between kernel sets, never within one */
        tu_run base;
        g4_err err;
        for (int c = 0; c < 6; c++) {
            g4_engine_opts o = {.tp = cfgs[c].tp, .threads = cfgs[c].threads, .max_batch = cfgs[c].max_batch,
                                .model_dir = "models/demo", .dtype = "q8_0", .isa = isas[k]};
            tu_run r;
            if (tu_generate(&o, ids, n, 6, c ? &r : &base, &err)) fail_msg("%s: %s", isas[k], err.msg);
            if (!c) continue;
            if (memcmp(r.logits, base.logits, sizeof(float) * (size_t)base.vocab * 6) != 0)
                fail_msg("%s: q8_0 logits differ at TP %d x %d threads, max batch %d", isas[k], cfgs[c].tp,
                         cfgs[c].threads, cfgs[c].max_batch);
            tu_run_free(&r);
        }
        tu_run_free(&base);
    }
    free(ids);
    json_decref(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_q8_invariance),
        cmocka_unit_test(test_q8_nmse_demo),
        cmocka_unit_test(test_q8_nmse_tiny),
        cmocka_unit_test(test_f32_f16_keep_goldens),
        cmocka_unit_test(test_demo_q8_answers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
