/* The fast math mode through the engine, for every kernel set this CPU runs: on the bf16 golden
 * models, prefill == token-by-token decode, TP 1/2/4/8 and 1 vs 3 threads per rank give the same
 * bits; the logits differ from the exact mode's (the fast path is in use) but stay close
 * (NMSE < 1e-3), and an unknown --math name is refused. */
#include "engine_util.h"
#include "kernels/kernels.h"

static void run(const char *isa, const char *math, const char *preset, int tp, int threads, int max_batch,
                tu_run *r, int *nw) {
    json_t *g = tu_load_json(tu_path("golden/%s__p40.json", preset));
    int n;
    int32_t *ids = tu_json_ids(json_object_get(g, "prompt_ids"), &n);
    free(tu_json_ids(json_object_get(g, "generated_ids"), nw));
    g4_engine_opts o = {.tp = tp, .threads = threads, .model_dir = tu_path("golden/%s", preset), .isa = isa,
                        .max_batch = max_batch, .math = math};
    g4_err err = {0};
    if (tu_generate(&o, ids, n, *nw, r, &err)) fail_msg("%s %s %s tp=%d: %s", isa, math, preset, tp, err.msg);
    free(ids);
    json_decref(g);
}

static void same(const tu_run *a, const tu_run *b, int n, const char *what, const char *isa) {
    if (memcmp(a->logits, b->logits, sizeof(float) * (size_t)n * (size_t)a->vocab))
        fail_msg("%s fast: %s changed the logits' bits", isa, what);
}

static void test_fast_invariances(void **state) {
    (void)state;
    const char *names[3];
    int nsets = g4_kernels_available(names, 3);
    for (int k = 0; k < nsets; k++) {
        const char *presets[] = {"tiny_default", "tiny_tp8"};
        for (int p = 0; p < 2; p++) {
            tu_run a, b;
            int n;
            run(names[k], "fast", presets[p], 1, 1, 64, &a, &n);
            run(names[k], "fast", presets[p], 1, 1, 1, &b, &n);
            same(&a, &b, n, "token-by-token decode", names[k]);
            tu_run_free(&b);
            run(names[k], "fast", presets[p], 1, 3, 7, &b, &n);
            same(&a, &b, n, "3 threads, batches of 7", names[k]);
            tu_run_free(&b);
            for (int tp = 2; tp <= (p ? 8 : 4); tp *= 2) {
                run(names[k], "fast", presets[p], tp, 1, 64, &b, &n);
                same(&a, &b, n, "the TP degree", names[k]);
                tu_run_free(&b);
            }
            /* Exact vs fast on the same steps: different bits, small distance. */
            run(names[k], "exact", presets[p], 1, 1, 64, &b, &n);
            double num = 0, den = 0;
            for (int64_t i = 0; i < a.vocab; i++) { /* step 0: both saw the same prompt */
                double d = (double)a.logits[i] - b.logits[i];
                num += d * d, den += (double)b.logits[i] * b.logits[i];
            }
            if (!(num > 0)) fail_msg("%s %s: fast logits equal the exact ones (fast path unused)", names[k], presets[p]);
            if (!(num / den < 1e-3)) fail_msg("%s %s: fast NMSE %.3g", names[k], presets[p], num / den);
            print_message("%s %s: fast invariances ok, step-0 NMSE vs exact %.3g\n", names[k], presets[p], num / den);
            tu_run_free(&a);
            tu_run_free(&b);
        }
    }
    g4_engine_opts o = {.tp = 1, .threads = 1, .model_dir = tu_path("golden/tiny_default"), .math = "quick"};
    g4_engine *e;
    g4_err err = {0};
    assert_int_equal(g4_engine_open(&o, &e, &err), G4_EINVAL);
    assert_non_null(strstr(err.msg, "math"));
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_fast_invariances)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
