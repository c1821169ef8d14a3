/* test_image_sched.c — prompts with images through the scheduler (continuous batching, prefix
 * cache, preemption-free small steps), on the tiny vision checkpoint with the oracle's soft tokens
 * given (the tower has its own tests): the golden greedy ids with a prefill chunk smaller than
 * the image block (the block is never cut), an image request batched with text requests, the
 * same image again hitting the prefix cache with the same bits as cold, another image with the
 * same layout not hitting it, and a cached prefix that ends inside an image block not used
 * past the block's start. Bits are compared through the chosen tokens' logprobs. (A model
 * without a tower refusing images: test_image_e2e.) */
#include "engine_util.h"
#include "engine/images.h"
#include "engine/scheduler.h"
#include "engine/textgen.h"

typedef struct {
    int32_t *ids;
    size_t n;
    g4_prompt_image im;
    float *soft;
    int32_t *gen;
    int n_gen;
} img_prompt;

/* The golden's prompt (un-expanded) with its image, expanded by g4_images_expand. */
static void load(img_prompt *p, const char *golden, uint64_t h0) {
    memset(p, 0, sizeof *p);
    json_t *g = tu_load_json(tu_path("vision/%s/golden.json", golden));
    int nu;
    int32_t *raw = tu_json_ids(json_object_get(g, "prompt_ids_unexpanded"), &nu);
    int rows, cols;
    p->soft = tu_read_npy_f32(tu_path("vision/%s/soft_tokens.npy", golden), &rows, &cols);
    g4_err err;
    assert_int_equal(g4_images_expand(raw, (size_t)nu, 501, 500, 502, &rows, 1, &p->ids, &p->n, &p->im.pos, &err), 0);
    int ne;
    int32_t *want = tu_json_ids(json_object_get(g, "prompt_ids"), &ne);
    assert_int_equal(ne, (int)p->n);
    assert_memory_equal(want, p->ids, sizeof(int32_t) * p->n); /* the expansion is the processor's */
    free(want);
    p->im.n_tok = rows;
    p->im.hash[0] = h0;
    p->im.hash[1] = 7;
    p->im.soft = p->soft;
    p->gen = tu_json_ids(json_object_get(json_object_get(g, "text"), "generated_ids"), &p->n_gen);
    free(raw);
    json_decref(g);
}

static void unload(img_prompt *p) { free(p->ids); free(p->soft); free(p->gen); }

typedef struct {
    g4_engine *e;
    g4_textgen tg;
    g4_sched *s;
} rig;

static void rig_open_spec(rig *r, int chunk, int prefix_cache, const char *spec) {
    g4_engine_opts o = {.model_dir = tu_path("vision/tiny_vision"), .tp = 2, .threads = 1, .max_batch = 300, .max_seqs = 4,
                        .max_ctx = 1024, .no_prefix_cache = !prefix_cache, .speculative = spec, .speculative_always = spec != NULL};
    g4_err err = {0};
    if (g4_engine_open(&o, &r->e, &err)) fail_msg("%s", err.msg);
    r->tg = (g4_textgen){.engine = r->e};
    g4_sched_opts so = {.prefill_chunk = chunk};
    if (g4_sched_create(&r->tg, &so, &r->s, &err)) fail_msg("%s", err.msg);
}

static void rig_open(rig *r, int chunk, int prefix_cache) { rig_open_spec(r, chunk, prefix_cache, NULL); }

static void rig_close(rig *r) {
    g4_sched_free(r->s);
    g4_engine_close(r->e);
}

typedef struct {
    int32_t ids[16];
    float lp[16];
    size_t n, cached;
} outcome;

static g4_sched_req *submit(rig *r, const int32_t *ids, size_t n, const g4_prompt_image *im, int max_new) {
    g4_gen_params gp = {.max_new_tokens = max_new, .ignore_eos = 1, .images = im, .n_images = im ? 1 : 0};
    g4_sampling_params_default(&gp.sampling);
    gp.sampling.temperature = 0;
    g4_sched_sub_opts x = {.logprobs = 1};
    g4_sched_req *q;
    g4_err err = {0};
    if (g4_sched_submit_ex(r->s, ids, n, &gp, &x, &q, &err)) fail_msg("submit: %s", err.msg);
    return q;
}

static void wait_done(g4_sched_req *q, outcome *o) {
    memset(o, 0, sizeof *o);
    for (;;) {
        g4_sched_event ev;
        if (!g4_sched_next(q, &ev, -1)) continue;
        const int kind = ev.kind;
        if (kind == G4_EV_ERROR) fail_msg("request failed: %s", ev.text);
        if (kind == G4_EV_DONE) o->cached = ev.cached_tokens;
        g4_sched_event_clear(&ev);
        if (kind == G4_EV_DONE) break;
    }
    g4_sched_req_ids(q, o->ids, 16, &o->n);
    g4_token_logprob lp[16];
    size_t k = g4_sched_req_logprobs(q, 0, lp, 16);
    assert_int_equal(k, o->n);
    for (size_t i = 0; i < k; i++) o->lp[i] = lp[i].logprob;
    g4_sched_req_free(q);
}

static void run_one(rig *r, const img_prompt *p, int max_new, outcome *o) { wait_done(submit(r, p->ids, p->n, &p->im, max_new), o); }

static void expect_same(const outcome *a, const outcome *b) {
    assert_int_equal(a->n, b->n);
    assert_memory_equal(a->ids, b->ids, sizeof(int32_t) * a->n);
    assert_memory_equal(a->lp, b->lp, sizeof(float) * a->n); /* bitwise */
}

/* The golden ids, with prefill chunks of 16 (the 256-token block goes in one step anyway). */
static void test_golden_chunked(void **state) {
    const char *goldens[] = {"square_1000x1000", "nonsquare_333x517"};
    for (int g = 0; g < 2; g++) {
        img_prompt p;
        load(&p, goldens[g], 1);
        rig r;
        rig_open(&r, 16, 0);
        outcome o;
        run_one(&r, &p, p.n_gen, &o);
        assert_int_equal((int)o.n, p.n_gen);
        assert_memory_equal(o.ids, p.gen, sizeof(int32_t) * (size_t)p.n_gen);
        rig_close(&r);
        unload(&p);
    }
}

/* An image request among text requests: each gets what it gets alone. */
static void test_mixed_batch(void **state) {
    img_prompt p;
    load(&p, "nonsquare_333x517", 1);
    rig r;
    rig_open(&r, 16, 0);
    const int32_t text[3][6] = {{2, 105, 17, 107, 33, 44}, {2, 105, 17, 107, 55, 66}, {2, 105, 17, 107, 77, 88}};
    outcome alone[4], mixed[4];
    run_one(&r, &p, 6, &alone[0]);
    for (int i = 0; i < 3; i++) wait_done(submit(&r, text[i], 6, NULL, 6), &alone[1 + i]);
    g4_sched_req *q[4];
    q[1] = submit(&r, text[0], 6, NULL, 6);
    q[0] = submit(&r, p.ids, p.n, &p.im, 6);
    q[2] = submit(&r, text[1], 6, NULL, 6);
    q[3] = submit(&r, text[2], 6, NULL, 6);
    for (int i = 0; i < 4; i++) wait_done(q[i], &mixed[i]);
    for (int i = 0; i < 4; i++) expect_same(&alone[i], &mixed[i]);
    rig_close(&r);
    unload(&p);
}

/* A second turn about the same image reuses its KV from the prefix cache, with the same bits
 * as a cold run; another image in the same layout does not hit past its block's start. */
static void test_prefix_cache(void **state) {
    img_prompt p;
    load(&p, "square_1000x1000", 1);
    const size_t n2 = p.n + 4;
    int32_t *turn2 = malloc(sizeof(int32_t) * n2);
    memcpy(turn2, p.ids, sizeof(int32_t) * p.n);
    const int32_t more[4] = {106, 107, 105, 77};
    memcpy(turn2 + p.n, more, sizeof more);
    outcome cold, first, warm;
    rig c;
    rig_open(&c, 64, 0);
    wait_done(submit(&c, turn2, n2, &p.im, 4), &cold);
    rig_close(&c);
    rig r;
    rig_open(&r, 64, 1);
    run_one(&r, &p, 4, &first);
    wait_done(submit(&r, turn2, n2, &p.im, 4), &warm);
    assert_true(warm.cached >= (size_t)(p.im.pos + p.im.n_tok)); /* the image's block came from the cache */
    expect_same(&cold, &warm);
    /* the same token layout, other pixels: the cache gives nothing of the image */
    g4_prompt_image other = p.im;
    other.hash[0] = 2;
    outcome o;
    wait_done(submit(&r, turn2, n2, &other, 4), &o);
    assert_true(o.cached <= (size_t)p.im.pos);
    rig_close(&r);
    free(turn2);
    unload(&p);
}

/* The same pixels in a block of another length (say another processor budget): its tokens have
 * other keys, so a later request takes nothing of it from the cache (an image token's KV depends
 * on its whole block): the result equals cold. */
static void test_hit_inside_block(void **state) {
    img_prompt p;
    load(&p, "nonsquare_333x517", 1);
    /* A: the image with one token fewer (its soft tokens are the first n - 1) */
    const int n_tok = p.im.n_tok;
    int32_t *a = malloc(sizeof(int32_t) * p.n);
    memcpy(a, p.ids, sizeof(int32_t) * (size_t)(p.im.pos + n_tok - 1));
    memcpy(a + p.im.pos + n_tok - 1, p.ids + p.im.pos + n_tok, sizeof(int32_t) * (p.n - (size_t)(p.im.pos + n_tok)));
    g4_prompt_image ia = p.im;
    ia.n_tok = n_tok - 1;
    outcome cold, oa, ob;
    rig c;
    rig_open(&c, 64, 0);
    run_one(&c, &p, 4, &cold);
    rig_close(&c);
    rig r;
    rig_open(&r, 64, 1);
    wait_done(submit(&r, a, p.n - 1, &ia, 4), &oa);
    run_one(&r, &p, 4, &ob);
    assert_true(ob.cached <= (size_t)p.im.pos);
    expect_same(&cold, &ob);
    rig_close(&r);
    free(a);
    unload(&p);
}

/* Speculative decoding after an image stays lossless: n-gram drafts (the answers repeat, so
 * they are accepted), the same tokens and logprobs as plain decoding, bit for bit. */
static void test_speculation(void **state) {
    img_prompt p;
    load(&p, "nonsquare_333x517", 1);
    outcome plain, spec;
    rig r;
    rig_open(&r, 64, 1);
    run_one(&r, &p, 12, &plain);
    rig_close(&r);
    rig_open_spec(&r, 64, 1, "ngram:3,4");
    run_one(&r, &p, 12, &spec);
    g4_sched_stats st;
    g4_sched_get_stats(r.s, &st);
    assert_true(st.draft_accepted > 0);
    rig_close(&r);
    expect_same(&plain, &spec);
    unload(&p);
}

/* Bad image lists are refused at submit. */
static void test_refusals(void **state) {
    img_prompt p;
    load(&p, "nonsquare_333x517", 1);
    rig r;
    rig_open(&r, 64, 1);
    g4_gen_params gp = {.max_new_tokens = 2, .images = &p.im, .n_images = 1};
    g4_sampling_params_default(&gp.sampling);
    g4_sched_req *q;
    g4_err err = {0};
    g4_prompt_image bad = p.im;
    bad.pos = (int64_t)p.n - 3; /* past the prompt's end */
    gp.images = &bad;
    assert_int_equal(g4_sched_submit(r.s, p.ids, p.n, &gp, &q, &err), G4_EINVAL);
    bad = p.im;
    bad.soft = NULL; /* neither patches nor soft tokens */
    assert_int_equal(g4_sched_submit(r.s, p.ids, p.n, &gp, &q, &err), G4_EINVAL);

    gp.images = &p.im;
    g4_sched_sub_opts x = {.prompt_logprobs = 1};
    assert_int_equal(g4_sched_submit_ex(r.s, p.ids, p.n, &gp, &x, &q, &err), G4_EINVAL);
    rig_close(&r);
    unload(&p);
}

/* g4_images_expand: counts must agree; keys are negative and differ per image and index. */
static void test_expand_keys(void **state) {
    const int32_t ids[] = {2, 501, 9, 501};
    const int n_tok[2] = {3, 2};
    int32_t *out;
    size_t n;
    int64_t pos[2];
    g4_err err;
    assert_int_equal(g4_images_expand(ids, 4, 501, 500, 502, n_tok, 2, &out, &n, pos, &err), 0);
    const int32_t want[] = {2, 500, 501, 501, 501, 502, 9, 500, 501, 501, 502};
    assert_int_equal(n, 11);
    assert_memory_equal(out, want, sizeof want);
    assert_int_equal(pos[0], 2);
    assert_int_equal(pos[1], 8);
    free(out);
    assert_int_equal(g4_images_expand(ids, 4, 501, 500, 502, n_tok, 1, &out, &n, pos, &err), G4_EINVAL);
    const uint64_t h1[2] = {1, 2}, h2[2] = {1, 3};
    assert_true(g4_image_key(h1, 5, 0) < 0);
    assert_true(g4_image_key(h1, 5, 0) != g4_image_key(h1, 5, 1));
    assert_true(g4_image_key(h1, 5, 0) != g4_image_key(h2, 5, 0));
    assert_true(g4_image_key(h1, 5, 0) != g4_image_key(h1, 6, 0));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_expand_keys),  cmocka_unit_test(test_golden_chunked), cmocka_unit_test(test_mixed_batch),
        cmocka_unit_test(test_prefix_cache), cmocka_unit_test(test_hit_inside_block), cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_speculation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
