/* The whole model against the fp32 oracle's golden vectors (tests/data/golden, copied from the
 * project's shared data): identical greedy ids, every logit at the prompt's last position and
 * every step's top-5 within 1e-4. Also: the same with each classic spec mistake injected must
 * FAIL (shows the goldens are sensitive), and prefill equals decode bit for bit. */
#include "engine_util.h"

static const char *presets[] = {"tiny_default", "tiny_wide", "tiny_tp8"};
static const char *prompts[] = {"p1", "p16", "p40"};

/* Returns the largest |logit - golden| over the checked values; *ids_ok = greedy ids equal. */
static double compare_golden(const char *preset, const char *prompt, const g4_engine_opts *base, int *ids_ok) {
    json_t *g = tu_load_json(tu_path("golden/%s__%s.json", preset, prompt));
    int n, n_gen;
    int32_t *ids = tu_json_ids(json_object_get(g, "prompt_ids"), &n);
    int32_t *want = tu_json_ids(json_object_get(g, "generated_ids"), &n_gen);
    g4_engine_opts o = *base;
    o.model_dir = tu_path("golden/%s", preset);
    tu_run r;
    g4_err err = {0};
    int rc = tu_generate(&o, ids, n, n_gen, &r, &err);
    if (rc) fail_msg("%s/%s: %s", preset, prompt, err.msg);
    *ids_ok = r.n_gen == n_gen && memcmp(r.gen, want, sizeof(int32_t) * (size_t)n_gen) == 0;
    double worst = 0;
    json_t *vals = json_object_get(json_object_get(g, "prompt_last_logits"), "values");
    assert_int_equal(json_array_size(vals), r.vocab);
    for (int64_t i = 0; i < r.vocab; i++) {
        double d = fabs(r.logits[i] - json_real_value(json_array_get(vals, (size_t)i)));
        if (d > worst) worst = d;
    }
    json_t *steps = json_object_get(g, "steps");
    for (size_t s = 0; s < json_array_size(steps) && (int)s < r.n_gen; s++) {
        json_t *st = json_array_get(steps, s);
        json_t *ti = json_object_get(st, "top5_ids"), *tv = json_object_get(st, "top5_values");
        for (size_t k = 0; k < json_array_size(ti); k++) {
            int64_t id = json_integer_value(json_array_get(ti, k));
            double d = fabs(r.logits[s * (size_t)r.vocab + (size_t)id] - json_real_value(json_array_get(tv, k)));
            if (d > worst) worst = d;
        }
    }
    tu_run_free(&r);
    free(ids);
    free(want);
    json_decref(g);
    return worst;
}

static void test_goldens_tp1(void **state) {
    (void)state;
    g4_engine_opts o = {.tp = 1, .threads = 1};
    for (int p = 0; p < 3; p++)
        for (int q = 0; q < 3; q++) {
            int ok;
            double worst = compare_golden(presets[p], prompts[q], &o, &ok);
            print_message("%s/%s: ids %s, max |dlogit| %.3g\n", presets[p], prompts[q], ok ? "equal" : "DIFFER", worst);
            assert_true(ok);
            assert_true(worst < 1e-4);
        }
}

/* Each injected spec mistake must be caught by the golden comparison. */
static void test_mutations_are_caught(void **state) {
    (void)state;
    const int muts[] = {1, 2, 3, 4, 5};
    const char *names[] = {"", "layer_scalar = 1", "(1 + w) norms", "V after k_norm", "no v_norm", "1/sqrt(d) scaling"};
    for (size_t i = 0; i < sizeof muts / sizeof *muts; i++) {
        g4_engine_opts o = {.tp = 1, .threads = 1, .mutation = muts[i]};
        int ok;
        double worst = compare_golden("tiny_default", "p16", &o, &ok);
        print_message("mutation %-18s: ids %s, max |dlogit| %.3g\n", names[muts[i]], ok ? "equal" : "differ", worst);
        assert_true(!ok || worst > 1e-3);
    }
}

/* Prefill (whole prompt in one batch) and decode (one token at a time) give the same bits. */
static void test_prefill_equals_decode(void **state) {
    (void)state;
    for (int p = 0; p < 3; p++) {
        json_t *g = tu_load_json(tu_path("golden/%s__p40.json", presets[p]));
        int n;
        int32_t *ids = tu_json_ids(json_object_get(g, "prompt_ids"), &n);
        g4_engine_opts a = {.tp = 1, .threads = 1, .max_batch = 64, .model_dir = tu_path("golden/%s", presets[p])};
        g4_engine_opts b = a;
        b.max_batch = 1;
        g4_engine_opts c = a;
        c.max_batch = 7; /* chunks that do not divide the prompt */
        tu_run ra, rb, rc;
        g4_err err;
        assert_int_equal(tu_generate(&a, ids, n, 4, &ra, &err), 0);
        assert_int_equal(tu_generate(&b, ids, n, 4, &rb, &err), 0);
        assert_int_equal(tu_generate(&c, ids, n, 4, &rc, &err), 0);
        assert_memory_equal(ra.logits, rb.logits, sizeof(float) * 4 * (size_t)ra.vocab);
        assert_memory_equal(ra.logits, rc.logits, sizeof(float) * 4 * (size_t)ra.vocab);
        tu_run_free(&ra); tu_run_free(&rb); tu_run_free(&rc);
        free(ids);
        json_decref(g);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_goldens_tp1),
        cmocka_unit_test(test_mutations_are_caught),
        cmocka_unit_test(test_prefill_equals_decode),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
