/* End to end on the built-in demo model (models/demo): for each of the 34 golden cases
 * (tests/data/demo/golden_demo.json, from the fp32 reference) the chat template renders the
 * exact prompt text, the tokenizer gives the exact ids, greedy generation at TP 1 and TP 2 gives
 * the exact ids with every step's top-5 logits within 1e-4, and the detokenized answer matches. */
#include "engine_util.h"
#include "engine/textgen.h"

static void run_cases(int tp) {
    json_t *g = tu_load_json(tu_path("demo/golden_demo.json"));
    g4_engine_opts o = {.tp = tp, .threads = 1, .model_dir = "models/demo"};
    g4_engine *e;
    g4_err err = {0};
    if (g4_engine_open(&o, &e, &err)) fail_msg("%s", err.msg);
    g4_textgen tg;
    if (g4_textgen_open(e, "models/demo", &tg, &err)) fail_msg("%s", err.msg);
    const int64_t V = g4_engine_vocab(e);
    float *logits = malloc(sizeof(float) * (size_t)V);
    json_t *cases = json_object_get(g, "cases");
    size_t ci;
    json_t *c;
    int n_ok = 0;
    double worst = 0;
    json_array_foreach(cases, ci, c) {
        const char *name = json_string_value(json_object_get(c, "name"));
        json_t *req = json_object();
        json_object_set(req, "messages", json_object_get(c, "messages"));
        json_object_set_new(req, "add_generation_prompt", json_true());
        char *text;
        size_t len;
        if (g4_textgen_render(&tg, req, &text, &len, &err)) fail_msg("%s: render: %s", name, err.msg);
        json_decref(req);
        const char *want_text = json_string_value(json_object_get(c, "prompt_text"));
        if (strcmp(text, want_text) != 0) fail_msg("%s: rendered prompt differs:\n%s\nwant:\n%s", name, text, want_text);
        int32_t *ids;
        size_t n;
        if (g4_tokenizer_encode(tg.tok, text, len, 0, &ids, &n, &err)) fail_msg("%s: encode: %s", name, err.msg);
        free(text);
        int nw;
        int32_t *want_ids = tu_json_ids(json_object_get(c, "prompt_ids"), &nw);
        assert_int_equal(n, nw);
        assert_memory_equal(ids, want_ids, sizeof(int32_t) * n);
        free(want_ids);
        /* greedy with the stop ids, checking each step's top-5 logits */
        int ng;
        int32_t *want_gen = tu_json_ids(json_object_get(c, "generated_ids"), &ng);
        json_t *steps = json_object_get(c, "steps");
        int seq;
        if (g4_engine_seq_open(e, (int64_t)n + 64, &seq, &err)) fail_msg("%s", err.msg);
        int32_t pos[512], sq[512];
        uint8_t want[512];
        assert_true(n < 512);
        for (size_t k = 0; k < n; k++) { pos[k] = (int32_t)k; sq[k] = seq; want[k] = k == n - 1; }
        int mb = g4_engine_max_batch(e);
        for (size_t s = 0; s < n; s += (size_t)mb) {
            int m = (int)(n - s < (size_t)mb ? n - s : (size_t)mb);
            g4_batch b = {.n = m, .ids = ids + s, .pos = pos + s, .seq = sq + s, .logits = want + s};
            if (g4_engine_forward(e, &b, logits, &err)) fail_msg("%s", err.msg);
        }
        int32_t gen[64];
        int n_gen = 0;
        for (int step = 0; step < 64; step++) {
            json_t *st = json_array_get(steps, (size_t)step);
            if (st) {
                json_t *ti = json_object_get(st, "top5_ids"), *tv = json_object_get(st, "top5_values");
                for (size_t k = 0; k < json_array_size(ti); k++) {
                    double d = fabs(logits[json_integer_value(json_array_get(ti, k))] - json_real_value(json_array_get(tv, k)));
                    if (d > worst) worst = d;
                }
            }
            int32_t id = g4_sample_greedy(logits, (int)V);
            gen[n_gen++] = id;
            if (id == 1 || id == 106 || id == 50) break;
            int32_t p = (int32_t)(n + (size_t)step);
            uint8_t one = 1;
            g4_batch b = {.n = 1, .ids = &id, .pos = &p, .seq = &seq, .logits = &one};
            if (g4_engine_forward(e, &b, logits, &err)) fail_msg("%s", err.msg);
        }
        g4_engine_seq_close(e, seq);
        if (n_gen != ng || memcmp(gen, want_gen, sizeof(int32_t) * (size_t)ng)) fail_msg("%s (TP %d): generated ids differ", name, tp);
        char *answer;
        size_t alen;
        if (g4_tokenizer_decode(tg.tok, gen, (size_t)n_gen, 1, &answer, &alen, &err)) fail_msg("%s", err.msg);
        assert_string_equal(answer, json_string_value(json_object_get(c, "generated_text")));
        free(answer);
        free(want_gen);
        free(ids);
        n_ok++;
    }
    print_message("TP %d: %d/%zu cases exact, max |dlogit| over the top-5s %.3g\n", tp, n_ok, json_array_size(cases), worst);
    assert_true(worst < 1e-4);
    assert_int_equal(n_ok, 34);
    free(logits);
    g4_textgen_close(&tg);
    g4_engine_close(e);
    json_decref(g);
}

static void test_demo_tp1(void **state) { (void)state; run_cases(1); }
static void test_demo_tp2(void **state) { (void)state; run_cases(2); }

/* The text path as users call it: g4_textgen_generate answers the France question. */
static void test_textgen_answer(void **state) {
    (void)state;
    g4_engine_opts o = {.tp = 2, .threads = 1, .model_dir = "models/demo"};
    g4_engine *e;
    g4_err err = {0};
    assert_int_equal(g4_engine_open(&o, &e, &err), 0);
    g4_textgen tg;
    assert_int_equal(g4_textgen_open(e, "models/demo", &tg, &err), 0);
    json_t *req = json_pack("{s:[{s:s,s:s}],s:b}", "messages", "role", "user", "content", "What is the capital of France?",
                            "add_generation_prompt", 1);
    char *text;
    size_t len;
    assert_int_equal(g4_textgen_render(&tg, req, &text, &len, &err), 0);
    int32_t *ids;
    size_t n;
    assert_int_equal(g4_tokenizer_encode(tg.tok, text, len, 0, &ids, &n, &err), 0);
    g4_gen_params p = {.max_new_tokens = 32, .skip_special = 1};
    g4_sampling_params_default(&p.sampling);
    g4_gen_result r;
    assert_int_equal(g4_textgen_generate(&tg, ids, n, &p, NULL, NULL, &r, &err), 0);
    assert_string_equal(r.text, "The capital of France is Paris.");
    assert_string_equal(r.finish_reason, "stop");
    g4_gen_result_free(&r);
    /* a stop string cuts the text before it */
    const char *stops[] = {" Paris"};
    p.stop_strings = stops;
    p.n_stop_strings = 1;
    assert_int_equal(g4_textgen_generate(&tg, ids, n, &p, NULL, NULL, &r, &err), 0);
    assert_string_equal(r.text, "The capital of France is");
    assert_string_equal(r.finish_reason, "stop");
    g4_gen_result_free(&r);
    /* prompt plus requested tokens beyond the context */
    p.max_new_tokens = 1 << 20;
    assert_int_equal(g4_textgen_generate(&tg, ids, n, &p, NULL, NULL, &r, &err), G4_ECONTEXT);
    free(ids);
    free(text);
    json_decref(req);
    g4_textgen_close(&tg);
    g4_engine_close(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_demo_tp1),
        cmocka_unit_test(test_demo_tp2),
        cmocka_unit_test(test_textgen_answer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
