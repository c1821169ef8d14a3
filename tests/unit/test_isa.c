/* Every kernel set this CPU runs (scalar, AVX2, AVX-512), forced in turn: the goldens (ids
 * exact, logits within 1e-4), bitwise TP invariance at TP 1/2/4/8 and prefill == decode hold for
 * each ISA on its own (bits may differ between ISAs, never within one). */
#include "engine_util.h"
#include "kernels/kernels.h"

static void run(const char *isa, const char *preset, const char *prompt, int tp, int max_batch, tu_run *r, int32_t **want, int *nw) {
    json_t *g = tu_load_json(tu_path("golden/%s__%s.json", preset, prompt));
    int n;
    int32_t *ids = tu_json_ids(json_object_get(g, "prompt_ids"), &n);
    *want = tu_json_ids(json_object_get(g, "generated_ids"), nw);
    g4_engine_opts o = {.tp = tp, .threads = 1, .model_dir = tu_path("golden/%s", preset), .isa = isa, .max_batch = max_batch};
    g4_err err = {0};
    if (tu_generate(&o, ids, n, *nw, r, &err)) fail_msg("%s %s tp=%d: %s", isa, preset, tp, err.msg);
    /* golden logits of step 0 */
    json_t *vals = json_object_get(json_object_get(g, "prompt_last_logits"), "values");
    double worst = 0;
    for (int64_t i = 0; i < r->vocab; i++) {
        double d = fabs(r->logits[i] - json_real_value(json_array_get(vals, (size_t)i)));
        if (d > worst) worst = d;
    }
    if (worst >= 1e-4) fail_msg("%s %s/%s: max |dlogit| %.3g", isa, preset, prompt, worst);
    free(ids);
    json_decref(g);
}

static void test_each_isa(void **state) {
    (void)state;
    const char *names[3];
    int n = g4_kernels_available(names, 3);
    assert_true(n >= 1);
    for (int k = 0; k < n; k++) {
        const char *presets[] = {"tiny_default", "tiny_wide", "tiny_tp8"};
        for (int p = 0; p < 3; p++) {
            tu_run a, b;
            int32_t *w1, *w2;
            int n1, n2;
            run(names[k], presets[p], "p40", 1, 64, &a, &w1, &n1);
            assert_memory_equal(a.gen, w1, sizeof(int32_t) * (size_t)n1);
            run(names[k], presets[p], "p40", 1, 1, &b, &w2, &n2); /* token by token */
            assert_memory_equal(a.logits, b.logits, sizeof(float) * (size_t)n1 * (size_t)a.vocab);
            tu_run_free(&b);
            free(w2);
            int maxtp = p == 1 ? 2 : p == 0 ? 4 : 8;
            for (int tp = 2; tp <= maxtp; tp *= 2) {
                run(names[k], presets[p], "p40", tp, 64, &b, &w2, &n2);
                assert_memory_equal(a.logits, b.logits, sizeof(float) * (size_t)n1 * (size_t)a.vocab);
                tu_run_free(&b);
                free(w2);
            }
            tu_run_free(&a);
            free(w1);
        }
        print_message("%s: goldens, prefill == decode, TP invariance: ok\n", names[k]);
    }
    g4_engine_opts o = {.tp = 1, .threads = 1, .model_dir = tu_path("golden/tiny_default"), .isa = "sse9"};
    g4_engine *e;
    g4_err err;
    assert_int_equal(g4_engine_open(&o, &e, &err), G4_EUNSUPPORTED);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_each_isa)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
