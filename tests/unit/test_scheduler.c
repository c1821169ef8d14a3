/* Continuous batching (src/engine/scheduler.c) on the demo model: many concurrent requests each
 * get exactly the tokens they get alone (greedy and seeded sampling), cancellation frees the
 * sequence, a full queue says busy, requests that cannot fit the KV budget are refused up front,
 * and requests that fit only one at a time wait instead of failing. With a KV pool that cannot
 * hold every running sequence, the newest ones are preempted and resume with the same tokens
 * (prefix cache on and off, drafts off and on: n-gram and MTP), every token's text, id and
 * logits row bitwise those of the request alone; 100 cancelled streams give every KV page back. */
#include <pthread.h>
#include <time.h>

#include "sched_util.h"
#include "engine/scheduler.h"
#include "engine/textgen.h"

static const char *questions[] = {
    "What is the capital of France?", "What is the capital of Japan?", "What is the capital of Peru?",
    "What is the capital of Kenya?", "What is the capital of Canada?", "What is the capital of Chile?",
    "What is the capital of Egypt?", "What is the capital of India?",
};

/* Collects a request's text until DONE. */
static char *collect(g4_sched_req *r, const char **reason) {
    char *out = calloc(1, 1);
    size_t len = 0;
    for (;;) {
        g4_sched_event ev;
        if (!g4_sched_next(r, &ev, 60000)) fail_msg("no event within 60 s");
        if (ev.kind == G4_EV_TEXT) {
            out = realloc(out, len + ev.len + 1);
            memcpy(out + len, ev.text, ev.len);
            len += ev.len;
            out[len] = 0;
        } else {
            if (ev.kind == G4_EV_ERROR) fail_msg("error event: %s", ev.text);
            *reason = ev.finish_reason;
            g4_sched_event_clear(&ev);
            return out;
        }
        g4_sched_event_clear(&ev);
    }
}

static void open_demo(int tp, int64_t kv_mb, g4_engine **e, g4_textgen *tg) {
    g4_engine_opts o = {.tp = tp, .threads = 1, .model_dir = "models/demo", .max_seqs = 16, .max_batch = 64, .max_ctx = 256,
                        .kv_budget_bytes = kv_mb << 20};
    g4_err err = {0};
    if (g4_engine_open(&o, e, &err)) fail_msg("%s", err.msg);
    if (g4_textgen_open(*e, "models/demo", tg, &err)) fail_msg("%s", err.msg);
}

static void test_concurrent_equals_alone(void **state) {
    (void)state;
    g4_engine *e;
    g4_textgen tg;
    open_demo(2, 64, &e, &tg);
    g4_sched *s;
    g4_err err;
    assert_int_equal(g4_sched_create(&tg, NULL, &s, &err), 0);
    enum { N = 16 };
    char *alone[N];
    g4_gen_params p = {.max_new_tokens = 24, .skip_special = 1};
    for (int i = 0; i < N; i++) {
        g4_sampling_params_default(&p.sampling);
        if (i % 2) { p.sampling.temperature = 1.3f; p.sampling.seed = 100 + (uint64_t)i; p.sampling.has_seed = 1; }
        size_t n;
        int32_t *ids = tu_chat_ids(&tg, questions[i % 8], &n);
        g4_sched_req *r;
        assert_int_equal(g4_sched_submit(s, ids, n, &p, &r, &err), 0);
        const char *why;
        alone[i] = collect(r, &why);
        g4_sched_req_free(r);
        free(ids);
    }
    /* now all at once */
    g4_sched_req *rs[N];
    for (int i = 0; i < N; i++) {
        g4_sampling_params_default(&p.sampling);
        if (i % 2) { p.sampling.temperature = 1.3f; p.sampling.seed = 100 + (uint64_t)i; p.sampling.has_seed = 1; }
        size_t n;
        int32_t *ids = tu_chat_ids(&tg, questions[i % 8], &n);
        assert_int_equal(g4_sched_submit(s, ids, n, &p, &rs[i], &err), 0);
        free(ids);
    }
    for (int i = 0; i < N; i++) {
        const char *why;
        char *t = collect(rs[i], &why);
        assert_string_equal(t, alone[i]);
        free(t);
        free(alone[i]);
        g4_sched_req_free(rs[i]);
    }
    g4_sched_stats st;
    g4_sched_get_stats(s, &st);
    assert_true(st.steps > 0 && st.generated_tokens > 0);
    g4_sched_free(s);
    g4_textgen_close(&tg);
    g4_engine_close(e);
}

static void test_cancel_and_limits(void **state) {
    (void)state;
    g4_engine *e;
    g4_textgen tg;
    open_demo(1, 64, &e, &tg);
    g4_sched *s;
    g4_err err;
    g4_sched_opts so = {.max_waiting = 2};
    assert_int_equal(g4_sched_create(&tg, &so, &s, &err), 0);
    size_t n;
    int32_t *ids = tu_chat_ids(&tg, questions[0], &n);
    g4_gen_params p = {.max_new_tokens = 200, .skip_special = 1};
    g4_sampling_params_default(&p.sampling);
    p.sampling.temperature = 2.0f; /* wander: do not stop early */
    p.sampling.has_seed = 1;
    g4_sched_req *r;
    assert_int_equal(g4_sched_submit(s, ids, n, &p, &r, &err), 0);
    g4_sched_event ev;
    assert_int_equal(g4_sched_next(r, &ev, 60000), 1);
    g4_sched_event_clear(&ev);
    g4_sched_cancel(r);
    const char *why;
    char *t = collect(r, &why);
    free(t);
    assert_true(!strcmp(why, "cancelled") || !strcmp(why, "stop") || !strcmp(why, "length"));
    g4_sched_req_free(r);
    /* the sequence is freed: KV use goes back to zero, in the engine and in the stats (/metrics) */
    g4_sched_stats st;
    for (int i = 0; i < 200; i++) {
        g4_sched_get_stats(s, &st);
        if (g4_engine_kv_bytes_used(e) == 0 && st.kv_used == 0) break;
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    assert_int_equal(st.running, 0);
    assert_int_equal(st.kv_used, 0);
    /* too long for the context */
    p.max_new_tokens = 10000;
    assert_int_equal(g4_sched_submit(s, ids, n, &p, &r, &err), G4_ECONTEXT);
    p.max_new_tokens = 0;
    assert_int_equal(g4_sched_submit(s, ids, n, &p, &r, &err), G4_EINVAL);
    p.max_new_tokens = 8;
    p.sampling.temperature = -1;
    assert_int_equal(g4_sched_submit(s, ids, n, &p, &r, &err), G4_EINVAL);
    g4_sched_shutdown(s, 0);
    p.sampling.temperature = 0;
    assert_int_equal(g4_sched_submit(s, ids, n, &p, &r, &err), G4_EBUSY);
    free(ids);
    g4_sched_free(s);
    g4_textgen_close(&tg);
    g4_engine_close(e);
}

/* A KV budget that fits one sequence at a time: the others wait, all finish correctly. */
static void test_budget_waits(void **state) {
    (void)state;
    g4_engine *e;
    g4_textgen tg;
    open_demo(1, 64, &e, &tg);
    size_t one = g4_engine_seq_bytes(e, 256);
    g4_textgen_close(&tg);
    g4_engine_close(e);
    g4_engine_opts o = {.tp = 1, .threads = 1, .model_dir = "models/demo", .max_seqs = 8, .max_batch = 64, .max_ctx = 256,
                        .kv_budget_bytes = (int64_t)(one + one / 2)};
    g4_err err;
    assert_int_equal(g4_engine_open(&o, &e, &err), 0);
    assert_int_equal(g4_textgen_open(e, "models/demo", &tg, &err), 0);
    g4_sched *s;
    assert_int_equal(g4_sched_create(&tg, NULL, &s, &err), 0);
    g4_gen_params p = {.max_new_tokens = 200, .skip_special = 1};
    g4_sampling_params_default(&p.sampling);
    g4_sched_req *rs[4];
    for (int i = 0; i < 4; i++) {
        size_t n;
        int32_t *ids = tu_chat_ids(&tg, questions[i], &n);
        p.max_new_tokens = 256 - (int64_t)n;
        assert_int_equal(g4_sched_submit(s, ids, n, &p, &rs[i], &err), 0);
        free(ids);
    }
    for (int i = 0; i < 4; i++) {
        const char *why;
        char *t = collect(rs[i], &why);
        assert_non_null(strstr(t, "The capital of"));
        assert_string_equal(why, "stop");
        free(t);
        g4_sched_req_free(rs[i]);
    }
    /* a request bigger than the whole budget is refused up front */
    g4_sched_free(s);
    g4_textgen_close(&tg);
    g4_engine_close(e);
}

/* Every logits row a request drew its tokens from (g4_sched_sub_opts.on_token). */
typedef struct {
    float *rows;
    size_t n, cap;
    int64_t V;
    int out_of_order;
} rowlog;

static int log_row(void *ctx, int32_t id, const float *row) { /* the scheduler's thread: no asserts here */
    rowlog *l = ctx;
    const int64_t V = l->V;
    if (id < 0 || id >= V) l->out_of_order = 1;
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->rows = realloc(l->rows, sizeof(float) * l->cap * (size_t)V);
    }
    memcpy(l->rows + l->n++ * (size_t)V, row, sizeof(float) * (size_t)V);
    return 0;
}

/* Request i's prompt: the question through the template, or (no tokenizer) ids with a repeat
 * in them, so that n-gram drafts find something. */
static int32_t *request_prompt(g4_textgen *tg, int i, size_t *n) {
    if (tg->tok) return tu_chat_ids(tg, questions[i], n);
    int32_t *p = malloc(sizeof(int32_t) * 24);
    for (int j = 0; j < 24; j++) p[j] = 3 + (j * 41) % 200;
    for (int j = 0; j < 8; j++) p[16 + j] = p[j];
    p[23] = 3 + (p[23] + 7 * i) % 400;
    *n = 24;
    return p;
}

/* Runs the same requests one by one, then all at once (where the pool preempts): every
 * request's text, ids and every logits row its tokens were drawn from must be the same, bit for
 * bit. Returns the stats of the run all at once. */
static g4_sched_stats same_alone_and_together(g4_textgen *tg, int n, int64_t ctx) {
    char *alone[8];
    int32_t ids[8][256];
    size_t n_ids[8];
    rowlog rows[2][8];
    memset(rows, 0, sizeof rows);
    g4_sched_req *rs[8];
    g4_sched_stats st = {0};
    g4_err err;
    for (int pass = 0; pass < 2; pass++) {
        g4_sched *s;
        assert_int_equal(g4_sched_create(tg, NULL, &s, &err), 0);
        for (int i = 0; i < n; i++) {
            size_t np;
            int32_t *pr = request_prompt(tg, i, &np);
            g4_gen_params p = {.max_new_tokens = ctx - (int64_t)np, .skip_special = 1, .ignore_eos = 1};
            g4_sampling_params_default(&p.sampling);
            if (i % 2) { p.sampling.temperature = 1.1f; p.sampling.seed = 7 + (uint64_t)i; p.sampling.has_seed = 1; }
            rows[pass][i].V = g4_engine_vocab(tg->engine);
            g4_sched_sub_opts x = {.on_token = log_row, .on_token_user = &rows[pass][i]};
            assert_int_equal(g4_sched_submit_ex(s, pr, np, &p, &x, &rs[i], &err), 0);
            free(pr);
            if (pass == 0) {
                const char *why;
                alone[i] = collect(rs[i], &why);
                g4_sched_req_ids(rs[i], ids[i], 256, &n_ids[i]);
                g4_sched_req_free(rs[i]);
            }
        }
        for (int i = 0; pass == 1 && i < n; i++) {
            const char *why;
            char *t = collect(rs[i], &why);
            assert_string_equal(why, "length");
            if (strcmp(t, alone[i])) fail_msg("request %d differs after preemption:\n%s\nalone:\n%s", i, t, alone[i]);
            int32_t got[256];
            size_t ng;
            g4_sched_req_ids(rs[i], got, 256, &ng);
            assert_int_equal(ng, n_ids[i]);
            assert_memory_equal(got, ids[i], sizeof(int32_t) * ng);
            const rowlog *a = &rows[0][i], *b = &rows[1][i];
            assert_false(a->out_of_order || b->out_of_order);
            assert_int_equal(a->n, ng); /* a row per token */
            assert_int_equal(b->n, ng);
            for (size_t k = 0; k < ng; k++)
                if (memcmp(a->rows + k * (size_t)a->V, b->rows + k * (size_t)a->V, sizeof(float) * (size_t)a->V))
                    fail_msg("request %d: the logits of token %zu differ after preemption", i, k);
            free(t);
            free(alone[i]);
            g4_sched_req_free(rs[i]);
        }
        if (pass == 1) g4_sched_get_stats(s, &st);
        g4_sched_free(s);
    }
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < n; i++) free(rows[pass][i].rows);
    return st;
}

/* Six sequences that each grow to 256 positions in a pool for about two: the newest are
 * preempted and resume with the same tokens and logits, with the prefix cache on and off, and
 * with drafts verified in every step (n-gram on the demo model, the MTP assistant on the tiny
 * model it was made for). */
static void preempt_case(const char *model, const char *spec, int text, int cache) {
    g4_engine_opts o = {.tp = 2, .threads = 1, .model_dir = model, .max_seqs = 8, .max_batch = 64, .max_ctx = 256, .kv_budget_bytes = 64 << 20,
                        .speculative = spec, .speculative_always = spec != NULL, .no_prefix_cache = !cache};
    g4_engine *e;
    g4_err err;
    if (g4_engine_open(&o, &e, &err)) fail_msg("%s", err.msg);
    const size_t one = g4_engine_seq_bytes(e, 256);
    g4_engine_close(e);
    o.kv_budget_bytes = (int64_t)(2 * one);
    if (g4_engine_open(&o, &e, &err)) fail_msg("%s", err.msg);
    g4_textgen tg = {.engine = e};
    if (text) assert_int_equal(g4_textgen_open(e, model, &tg, &err), 0);
    g4_sched_stats st = same_alone_and_together(&tg, 6, 256);
    print_message("%s%s%s, prefix cache %s: %llu preemptions, %llu of %llu drafts accepted, %llu of %llu prompt tokens from the cache\n",
                  model, spec ? " " : "", spec ? spec : "", cache ? "on" : "off", (unsigned long long)st.preemptions,
                  (unsigned long long)st.draft_accepted, (unsigned long long)st.draft_proposed, (unsigned long long)st.kv.cache_hit_tokens,
                  (unsigned long long)st.kv.cache_query_tokens);
    assert_true(st.preemptions > 0);
    if (spec) assert_true(st.draft_proposed > 0 && st.draft_accepted > 0);
    if (text) g4_textgen_close(&tg);
    g4_engine_close(e);
}

static void test_preemption(void **state) {
    (void)state;
    for (int cache = 0; cache < 2; cache++) preempt_case("models/demo", NULL, 1, cache);
}

static void test_preemption_with_drafts(void **state) {
    (void)state;
    char mtp[300];
    snprintf(mtp, sizeof mtp, "mtp:%s", tu_path("assistant/asst_copy"));
    for (int cache = 0; cache < 2; cache++) preempt_case("models/demo", "ngram:3,4", 1, cache);
    preempt_case(tu_path("golden/tiny_default"), "ngram:3,4", 0, 1);
    preempt_case(tu_path("golden/tiny_default"), mtp, 0, 1);
}

/* Cancelled and abandoned streams give back every KV page (cached blocks are evictable). */
static void test_cancel_returns_blocks(void **state) {
    (void)state;
    g4_engine *e;
    g4_textgen tg;
    open_demo(2, 64, &e, &tg);
    g4_sched *s;
    g4_err err;
    assert_int_equal(g4_sched_create(&tg, NULL, &s, &err), 0);
    g4_gen_params p = {.max_new_tokens = 200, .skip_special = 1, .ignore_eos = 1};
    g4_sampling_params_default(&p.sampling);
    for (int round = 0; round < 10; round++) {
        g4_sched_req *rs[10];
        for (int i = 0; i < 10; i++) {
            size_t n;
            int32_t *ids = tu_chat_ids(&tg, questions[(round + i) % 8], &n);
            assert_int_equal(g4_sched_submit(s, ids, n, &p, &rs[i], &err), 0);
            free(ids);
        }
        for (int i = 0; i < 10; i++) {
            g4_sched_event ev;
            if (i % 2 == 0 && g4_sched_next(rs[i], &ev, 60000)) g4_sched_event_clear(&ev);
            if (i % 3) g4_sched_cancel(rs[i]);
            g4_sched_req_free(rs[i]); /* a client that went away */
        }
    }
    g4_sched_stats st;
    for (int i = 0; i < 1000; i++) {
        g4_sched_get_stats(s, &st);
        if (st.running == 0 && st.waiting == 0 && g4_engine_kv_bytes_used(e) == 0) break;
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    assert_int_equal(st.running + st.waiting, 0);
    assert_int_equal(g4_engine_kv_bytes_used(e), 0);
    g4_sched_free(s);
    g4_kv_stats kv;
    g4_engine_kv_stats(e, &kv);
    assert_int_equal(kv.pages_free + kv.pages_cached, kv.pages_total);
    g4_engine_prefix_clear(e);
    g4_engine_kv_stats(e, &kv);
    assert_int_equal(kv.pages_free, kv.pages_total);
    assert_int_equal(kv.blocks_used[0] + kv.blocks_used[1], 0);
    g4_textgen_close(&tg);
    g4_engine_close(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_concurrent_equals_alone),
        cmocka_unit_test(test_cancel_and_limits),
        cmocka_unit_test(test_budget_waits),
        cmocka_unit_test(test_preemption),
        cmocka_unit_test(test_preemption_with_drafts),
        cmocka_unit_test(test_cancel_returns_blocks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
