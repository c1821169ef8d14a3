/* test_image_e2e.c — images all the way: the golden PNG files decoded and preprocessed
 * (src/image), the placeholders expanded (g4_images_prepare), the patches encoded by the tiny
 * checkpoint's vision tower inside the scheduler and the text model run on the result. Against
 * the shared oracle's goldens (itself checked against Hugging Face's code): the soft tokens
 * within 1e-5, the greedy ids of every golden and each step's top-5 ids with their logits' gaps
 * within 1e-4, one and two images per prompt; the logits
 * (through the chosen tokens' logprobs) bitwise equal at TP 1/2/4, at 1 and 2 threads per rank,
 * and to the run with the oracle's soft tokens given instead of patches. */
#include <math.h>

#include "engine_util.h"
#include "engine/images.h"
#include "engine/scheduler.h"
#include "engine/textgen.h"
#include "image/image.h"
#include "image/processor.h"

typedef struct {
    int32_t ids[16];
    float lp[16];
    int32_t top_id[16][5];    /* each step's 5 most likely tokens */
    float top_lp[16][5];
    size_t n;
} outcome;

typedef struct {
    const char *golden, *model;
    const char *images[2];
} gcase;

static const gcase cases[] = {
    {"native_672x960", "tiny_vision", {"native_672x960"}},
    {"square_1000x1000", "tiny_vision", {"square_1000x1000"}},
    {"nonsquare_333x517", "tiny_vision", {"nonsquare_333x517"}},
    {"two_images", "tiny_vision", {"square_1000x1000", "nonsquare_333x517"}},
    {"window_smaller_than_block", "tiny_vision_w6", {"nonsquare_333x517"}},
};

static void preprocess(const char *model, const char *image, g4_image_patches *pp) {
    g4_image_proc proc;
    g4_image im;
    g4_err err = {0};
    if (g4_image_proc_load(tu_path("vision/%s", model), &proc, &err)) fail_msg("%s", err.msg);
    if (g4_image_load_file(tu_path("vision/images/%s.png", image), NULL, &im, &err)) fail_msg("%s", err.msg);
    if (g4_image_preprocess(&proc, &im, pp, &err)) fail_msg("%s", err.msg);
    g4_image_free(&im);
}

/* Runs the golden's prompt with its images (patches, or the oracle's soft tokens when soft). */
static void run(const gcase *c, int tp, int threads, int soft, int n_new, outcome *o) {
    json_t *g = tu_load_json(tu_path("vision/%s/golden.json", c->golden));
    int nu;
    int32_t *raw = tu_json_ids(json_object_get(g, "prompt_ids_unexpanded"), &nu);
    g4_engine_opts eo = {.model_dir = tu_path("vision/%s", c->model), .tp = tp, .threads = threads, .max_seqs = 2, .max_ctx = 1024};
    g4_engine *e;
    g4_err err = {0};
    if (g4_engine_open(&eo, &e, &err)) fail_msg("%s", err.msg);
    assert_true(g4_engine_has_vision(e));
    assert_true(g4_engine_max_batch(e) >= 280 + 2); /* the default step holds the largest image */
    g4_image_patches pp[2];
    int n_img = 0;
    float *given[2] = {NULL, NULL};
    for (; n_img < 2 && c->images[n_img]; n_img++) preprocess(c->model, c->images[n_img], &pp[n_img]);
    g4_prompt_image im[2];
    int32_t *ids;
    size_t n;
    if (g4_images_prepare(g4_engine_config(e), raw, (size_t)nu, pp, n_img, &ids, &n, im, &err)) fail_msg("%s", err.msg);
    int ne;
    int32_t *want = tu_json_ids(json_object_get(g, "prompt_ids"), &ne);
    assert_int_equal(ne, (int)n);
    assert_memory_equal(want, ids, sizeof(int32_t) * n); /* the processor's expansion */
    for (int i = 0; soft && i < n_img; i++) {
        int rows, cols;
        given[i] = tu_read_npy_f32(tu_path("vision/%s/soft_tokens.npy", c->images[i]), &rows, &cols);
        assert_int_equal(rows, im[i].n_tok);
        im[i].soft = given[i];
        im[i].pixels = NULL;
    }
    g4_textgen tg = {.engine = e};
    g4_sched *s;
    if (g4_sched_create(&tg, NULL, &s, &err)) fail_msg("%s", err.msg);
    g4_gen_params gp = {.max_new_tokens = n_new, .ignore_eos = 1, .images = im, .n_images = n_img};
    g4_sampling_params_default(&gp.sampling);
    gp.sampling.temperature = 0;
    g4_sched_sub_opts x = {.logprobs = 1, .top_logprobs = 5};
    g4_sched_req *q;
    if (g4_sched_submit_ex(s, ids, n, &gp, &x, &q, &err)) fail_msg("submit: %s", err.msg);
    for (;;) {
        g4_sched_event ev;
        if (!g4_sched_next(q, &ev, -1)) continue;
        const int kind = ev.kind;
        if (kind == G4_EV_ERROR) fail_msg("%s: %s", c->golden, ev.text);
        g4_sched_event_clear(&ev);
        if (kind == G4_EV_DONE) break;
    }
    g4_sched_req_ids(q, o->ids, 16, &o->n);
    g4_token_logprob lp[16];
    assert_int_equal(g4_sched_req_logprobs(q, 0, lp, 16), o->n);
    for (size_t i = 0; i < o->n; i++) {
        o->lp[i] = lp[i].logprob;
        assert_int_equal(lp[i].n_top, 5);
        memcpy(o->top_id[i], lp[i].top_id, sizeof o->top_id[i]);
        memcpy(o->top_lp[i], lp[i].top_logprob, sizeof o->top_lp[i]);
    }
    g4_sched_req_free(q);
    g4_sched_stats st;
    g4_sched_get_stats(s, &st);
    assert_int_equal(st.images_encoded, soft ? 0 : (uint64_t)n_img);
    g4_sched_free(s);
    g4_engine_close(e);
    for (int i = 0; i < n_img; i++) { g4_image_patches_free(&pp[i]); free(given[i]); }
    free(ids); free(want); free(raw);
    json_decref(g);
}

static void test_goldens(void **state) {
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        const gcase *c = &cases[k];
        json_t *g = tu_load_json(tu_path("vision/%s/golden.json", c->golden));
        int ng;
        int32_t *gen = tu_json_ids(json_object_get(json_object_get(g, "text"), "generated_ids"), &ng);
        outcome ref, o;
        run(c, 1, 1, 0, ng, &ref);
        assert_int_equal((int)ref.n, ng);
        if (memcmp(ref.ids, gen, sizeof(int32_t) * (size_t)ng)) fail_msg("%s: greedy ids differ from the reference", c->golden);
        /* every step's top 5: the same ids, and their logits' gaps to the first within 1e-4 (a
         * logprob differs from its logit by the step's logsumexp alone) */
        json_t *steps = json_object_get(json_object_get(g, "text"), "steps");
        assert_int_equal((int)json_array_size(steps), ng);
        for (int t = 0; t < ng; t++) {
            json_t *st = json_array_get(steps, (size_t)t), *ti = json_object_get(st, "top5_ids"), *tv = json_object_get(st, "top5_values");
            for (int j = 0; j < 5; j++) {
                if (ref.top_id[t][j] != (int32_t)json_integer_value(json_array_get(ti, (size_t)j)))
                    fail_msg("%s step %d: top-5 id %d is %d, the reference's %lld", c->golden, t, j, ref.top_id[t][j],
                             (long long)json_integer_value(json_array_get(ti, (size_t)j)));
                const double want = json_real_value(json_array_get(tv, (size_t)j)) - json_real_value(json_array_get(tv, 0));
                const double got = (double)ref.top_lp[t][j] - ref.top_lp[t][0];
                if (fabs(got - want) > 1e-4) fail_msg("%s step %d: top-5 logit gap %d is %.6f, the reference's %.6f", c->golden, t, j, got, want);
            }
        }
        /* the same bits at TP 2 and 4, with 2 threads, and from the oracle's soft tokens */
        const int conf[4][3] = {{2, 1, 0}, {4, 1, 0}, {2, 2, 0}, {1, 1, 1}};
        for (int i = 0; i < 4; i++) {
            if (k > 0 && i < 3 && i != (int)(k % 3)) continue; /* every configuration on some golden, not all on all */
            run(c, conf[i][0], conf[i][1], conf[i][2], ng, &o);
            assert_memory_equal(ref.ids, o.ids, sizeof(int32_t) * ref.n);
            if (!conf[i][2]) assert_memory_equal(ref.lp, o.lp, sizeof(float) * ref.n);
        }
        free(gen);
        json_decref(g);
    }
}

/* The soft tokens from the files: within 1e-5 of the oracle's (preprocessing and tower
 * together; the tower alone is in test_vision). */
static void test_soft_tokens(void **state) {
    const char *images[3] = {"native_672x960", "square_1000x1000", "nonsquare_333x517"};
    g4_engine_opts eo = {.model_dir = tu_path("vision/tiny_vision"), .tp = 2, .threads = 2};
    g4_engine *e;
    g4_err err = {0};
    if (g4_engine_open(&eo, &e, &err)) fail_msg("%s", err.msg);
    const int64_t H = g4_engine_hidden_size(e);
    for (int k = 0; k < 3; k++) {
        g4_image_patches pp;
        preprocess("tiny_vision", images[k], &pp);
        int rows, cols;
        float *want = tu_read_npy_f32(tu_path("vision/%s/soft_tokens.npy", images[k]), &rows, &cols);
        assert_int_equal(rows, pp.n_soft);
        assert_int_equal(cols, H);
        float *soft = malloc(sizeof(float) * (size_t)rows * (size_t)H);
        if (g4_engine_encode_image(e, pp.pixels, pp.pos, pp.ph, pp.pw, soft, &err)) fail_msg("%s", err.msg);
        double worst = 0;
        for (size_t i = 0; i < (size_t)rows * (size_t)H; i++) {
            double d = fabs((double)soft[i] - want[i]) / (1.0 + fabs(want[i]));
            if (d > worst) worst = d;
        }
        if (worst > 1e-5) fail_msg("%s: soft tokens %.3g from the reference", images[k], worst);
        free(soft);
        free(want);
        g4_image_patches_free(&pp);
    }
    g4_engine_close(e);
}

/* A model without a tower refuses images with a clear error; the text model still serves. */
static void test_no_tower(void **state) {
    g4_engine_opts eo = {.model_dir = "models/demo", .tp = 1, .threads = 1};
    g4_engine *e;
    g4_err err = {0};
    if (g4_engine_open(&eo, &e, &err)) fail_msg("%s", err.msg);
    assert_false(g4_engine_has_vision(e));
    float x[4];
    int32_t p[2] = {0, 0};
    assert_int_equal(g4_engine_encode_image(e, x, p, 1, 1, x, &err), G4_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "cannot take images"));
    g4_engine_close(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_soft_tokens),
        cmocka_unit_test(test_goldens),
        cmocka_unit_test(test_no_tower),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
