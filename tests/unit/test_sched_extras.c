/* The scheduler's per-request extras (g4_sched_submit_ex) on the demo model: logprobs of
 * generated tokens and of every prompt token (echo) equal log-softmax of the logits the engine
 * gives for the same tokens directly (bitwise, greedy and tempered), a prompt whose prefix is
 * cached still gets every prompt logprob, n choices of one prompt share it through the prefix
 * cache (`after`) with the same tokens as alone, choice seeds, the matched stop string's index,
 * and one notify for several requests. Also g4_logprobs_row itself. */
#include <math.h>

#include "sched_util.h"
#include "engine/logprobs.h"
#include "engine/scheduler.h"
#include "engine/textgen.h"

static void open_demo(g4_engine **e, g4_textgen *tg) {
    g4_engine_opts o = {.tp = 2, .threads = 1, .model_dir = "models/demo", .max_seqs = 8, .max_batch = 64, .max_ctx = 256,
                        .kv_budget_bytes = 64 << 20};
    g4_err err = {0};
    if (g4_engine_open(&o, e, &err)) fail_msg("%s", err.msg);
    if (g4_textgen_open(*e, "models/demo", tg, &err)) fail_msg("%s", err.msg);
}

/* Logits of every position of ids, computed directly (its own sequence, no cache). */
static float *all_logits(g4_engine *e, const int32_t *ids, size_t n) {
    const int64_t V = g4_engine_vocab(e);
    const int mb = g4_engine_max_batch(e);
    float *out = malloc(sizeof(float) * (size_t)V * n);
    int seq;
    g4_err err;
    assert_int_equal(g4_engine_seq_open(e, (int64_t)n, &seq, &err), 0);
    int32_t pos[256], sq[256];
    uint8_t want[256];
    for (size_t s = 0; s < n; s += (size_t)mb) {
        int m = n - s < (size_t)mb ? (int)(n - s) : mb;
        for (int k = 0; k < m; k++) { pos[k] = (int32_t)(s + (size_t)k); sq[k] = seq; want[k] = 1; }
        g4_batch b = {.n = m, .ids = ids + s, .pos = pos, .seq = sq, .logits = want};
        if (g4_engine_forward(e, &b, out + s * (size_t)V, &err)) fail_msg("%s", err.msg);
    }
    g4_engine_seq_close(e, seq);
    return out;
}

static void expect_same_lp(const g4_token_logprob *a, const g4_token_logprob *b, const char *what, size_t k) {
    if (a->id != b->id || a->logprob != b->logprob || a->n_top != b->n_top ||
        memcmp(a->top_id, b->top_id, sizeof(int32_t) * (size_t)a->n_top) || memcmp(a->top_logprob, b->top_logprob, sizeof(float) * (size_t)a->n_top))
        fail_msg("%s %zu: id %d lp %.9g (%d top) vs id %d lp %.9g (%d top)", what, k, a->id, (double)a->logprob, a->n_top, b->id,
                 (double)b->logprob, b->n_top);
}

typedef struct {
    int32_t gen[64];
    size_t n_gen;
    g4_token_logprob lps[64], plp[128];
    int plp_done;
    g4_sched_event done;
} outcome;

static void run(g4_sched *s, const int32_t *ids, size_t n, const g4_gen_params *p, const g4_sched_sub_opts *x, outcome *o) {
    memset(o, 0, sizeof *o);
    g4_sched_req *r;
    g4_err err;
    assert_int_equal(g4_sched_submit_ex(s, ids, n, p, x, &r, &err), 0);
    for (;;) {
        g4_sched_event ev;
        if (!g4_sched_next(r, &ev, 60000)) fail_msg("no event in 60 s");
        if (ev.kind == G4_EV_ERROR) fail_msg("error: %s", ev.text);
        if (ev.kind == G4_EV_DONE) { o->done = ev; break; }
        g4_sched_event_clear(&ev);
    }
    g4_sched_req_ids(r, o->gen, 64, &o->n_gen);
    assert_int_equal(g4_sched_req_logprobs(r, 0, o->lps, 64), x && (x->logprobs || x->prompt_logprobs) ? o->n_gen : 0);
    o->plp_done = g4_sched_req_prompt_logprobs(r, o->plp, 128);
    g4_sched_req_free(r);
}

/* Generated and prompt logprobs against the direct logits, at temperature 0 (raw) and 1.5. */
static void test_logprobs_match_direct(void **state) {
    (void)state;
    g4_engine *e;
    g4_textgen tg;
    open_demo(&e, &tg);
    const int64_t V = g4_engine_vocab(e);
    size_t n;
    int32_t *ids = tu_chat_ids(&tg, "What is the capital of France?", &n);
    g4_sched *s;
    g4_err err;
    assert_int_equal(g4_sched_create(&tg, NULL, &s, &err), 0);
    outcome o[2];
    const float temps[2] = {0.0f, 1.5f};
    for (int t = 0; t < 2; t++) {
        g4_gen_params p = {.max_new_tokens = 12, .skip_special = 1};
        g4_sampling_params_default(&p.sampling);
        p.sampling.temperature = temps[t];
        p.sampling.seed = 5;
        p.sampling.has_seed = 1;
        g4_sched_sub_opts x = {.logprobs = 1, .top_logprobs = 5, .prompt_logprobs = 1};
        run(s, ids, n, &p, &x, &o[t]);
        assert_true(o[t].plp_done);
        assert_true(o[t].n_gen > 2);
        assert_int_equal(o[t].done.cached_tokens, 0);
    }
    g4_sched_free(s);
    for (int t = 0; t < 2; t++) {
        int32_t full[128];
        memcpy(full, ids, n * sizeof *ids);
        memcpy(full + n, o[t].gen, o[t].n_gen * sizeof *ids);
        const size_t total = n + o[t].n_gen;
        float *lg = all_logits(e, full, total - 1);
        assert_int_equal(o[t].plp[0].id, ids[0]);
        for (size_t k = 1; k < n; k++) {
            g4_token_logprob want;
            g4_logprobs_row(lg + (k - 1) * (size_t)V, (int)V, temps[t], full[k], 5, &want);
            expect_same_lp(&o[t].plp[k], &want, "prompt token", k);
        }
        for (size_t g = 0; g < o[t].n_gen; g++) {
            g4_token_logprob want;
            g4_logprobs_row(lg + (n - 1 + g) * (size_t)V, (int)V, temps[t], o[t].gen[g], 5, &want);
            expect_same_lp(&o[t].lps[g], &want, "generated token", g);
            assert_int_equal(o[t].lps[g].id, o[t].gen[g]);
            if (t == 0) { /* greedy: the chosen token is the best, with the very same value */
                assert_int_equal(o[t].lps[g].top_id[0], o[t].gen[g]);
                assert_true(o[t].lps[g].top_logprob[0] == o[t].lps[g].logprob);
            }
        }
        free(lg);
    }
    free(ids);
    g4_textgen_close(&tg);
    g4_engine_close(e);
}

/* A prompt already in the prefix cache: echo still computes (and reports) every position; a
 * later plain request takes the cache again. n choices with `after` share the prompt. */
static void test_cache_echo_and_choices(void **state) {
    (void)state;
    g4_engine *e;
    g4_textgen tg;
    open_demo(&e, &tg);
    size_t n;
    int32_t *ids = tu_chat_ids(&tg, "What is the capital of France? Please answer with the name of the city only, thank you.", &n);
    assert_true(n > 20); /* at least one whole KV block of 16 positions to share */
    g4_sched *s;
    g4_err err;
    assert_int_equal(g4_sched_create(&tg, NULL, &s, &err), 0);
    g4_gen_params p = {.max_new_tokens = 10, .skip_special = 1};
    g4_sampling_params_default(&p.sampling);
    outcome a, b, c;
    run(s, ids, n, &p, NULL, &a);
    g4_sched_sub_opts echo = {.prompt_logprobs = 1};
    run(s, ids, n, &p, &echo, &b);
    assert_true(b.plp_done);
    assert_int_equal(b.done.cached_tokens, 0);
    assert_int_equal(b.n_gen, a.n_gen);
    assert_memory_equal(b.gen, a.gen, a.n_gen * sizeof(int32_t));
    for (size_t k = 1; k < n; k++) assert_true(b.plp[k].logprob <= 0 && b.plp[k].id == ids[k] && b.plp[k].n_top == 0);
    run(s, ids, n, &p, NULL, &c);
    assert_true(c.done.cached_tokens >= 16);
    assert_false(c.plp_done); /* not asked for */

    /* n = 3 seeded choices of a fresh prompt: 1 and 2 wait for 0's prompt and take it from the cache */
    int32_t *ids2 = tu_chat_ids(&tg, "What is the capital of Japan? Please answer with the name of the city only, thank you.", &n);
    g4_sched_notify note;
    g4_sched_notify_init(&note);
    g4_gen_params pc = {.max_new_tokens = 10, .skip_special = 1};
    g4_sampling_params_default(&pc.sampling);
    pc.sampling.temperature = 1.2f;
    pc.sampling.has_seed = 1;
    int32_t got[3][64];
    size_t n_got[3];
    g4_sched_req *r[3];
    for (int i = 0; i < 3; i++) {
        pc.sampling.seed = g4_sched_choice_seed(77, i);
        g4_sched_sub_opts x = {.after = i ? r[0] : NULL, .notify = &note};
        assert_int_equal(g4_sched_submit_ex(s, ids2, n, &pc, &x, &r[i], &err), 0);
    }
    /* one wait for all three: poll each queue whenever the notify moves */
    int done[3] = {0}, n_done = 0;
    uint64_t seen = 0;
    g4_sched_event last[3];
    while (n_done < 3) {
        int any = 0;
        for (int i = 0; i < 3; i++) {
            g4_sched_event ev;
            while (!done[i] && g4_sched_next(r[i], &ev, 0)) {
                any = 1;
                if (ev.kind == G4_EV_ERROR) fail_msg("error: %s", ev.text);
                if (ev.kind == G4_EV_DONE) { done[i] = 1; n_done++; last[i] = ev; }
                else g4_sched_event_clear(&ev);
            }
        }
        if (!any && n_done < 3) g4_sched_notify_wait(&note, &seen, 60000);
    }
    for (int i = 0; i < 3; i++) {
        g4_sched_req_ids(r[i], got[i], 64, &n_got[i]);
        if (i) assert_true(last[i].cached_tokens >= 16); /* shared */
        else assert_true(last[i].cached_tokens < 16); /* only the template prefix it shares with the France prompt */
        g4_sched_req_free(r[i]);
    }
    for (int i = 0; i < 3; i++) { /* each alone, with nothing cached: the same tokens */
        g4_sched_free(s); /* the engine is the scheduler thread's while it runs */
        g4_engine_prefix_clear(e);
        assert_int_equal(g4_sched_create(&tg, NULL, &s, &err), 0);
        pc.sampling.seed = g4_sched_choice_seed(77, i);
        run(s, ids2, n, &pc, NULL, &a);
        assert_int_equal(a.done.cached_tokens, 0);
        assert_int_equal(n_got[i], a.n_gen);
        assert_memory_equal(got[i], a.gen, a.n_gen * sizeof(int32_t));
    }
    /* different seeds: the three choices are not all the same */
    assert_true(n_got[0] != n_got[1] || memcmp(got[0], got[1], n_got[0] * 4) || n_got[0] != n_got[2] || memcmp(got[0], got[2], n_got[0] * 4));
    g4_sched_notify_destroy(&note);
    g4_sched_free(s);
    free(ids);
    free(ids2);
    g4_textgen_close(&tg);
    g4_engine_close(e);
}

/* Two echo requests and a short plain prompt admitted in one step: every prompt position of the
 * echo requests and the plain one's last position want a logits row in the same step (more rows
 * than there are running sequences plus one prefill chunk: the rows buffer once overflowed). */
static void test_echo_crowded_step(void **state) {
    (void)state;
    g4_engine *e;
    g4_textgen tg;
    open_demo(&e, &tg);
    const int64_t V = g4_engine_vocab(e);
    const char *q[3] = {"Please tell me, in a few words and without any detours or long explanations, what the capital of France is.",
                        "What is the capital of Japan, please?", "What is the capital of Peru?"};
    size_t n[3];
    int32_t *ids[3];
    for (int i = 0; i < 3; i++) ids[i] = tu_chat_ids(&tg, q[i], &n[i]);
    assert_true(n[0] > 32 && n[0] < 128 && n[1] > 8 && n[2] < 24);
    g4_sched *s;
    g4_err err;
    assert_int_equal(g4_sched_create(&tg, NULL, &s, &err), 0);
    g4_gen_params p = {.max_new_tokens = 6, .skip_special = 1};
    g4_sampling_params_default(&p.sampling);
    g4_sched_req *r[3];
    for (int i = 0; i < 3; i++) {
        g4_sched_sub_opts x = {.prompt_logprobs = i < 2, .top_logprobs = 2};
        assert_int_equal(g4_sched_submit_ex(s, ids[i], n[i], &p, &x, &r[i], &err), 0);
    }
    outcome o[3];
    for (int i = 0; i < 3; i++) {
        memset(&o[i], 0, sizeof o[i]);
        for (;;) {
            g4_sched_event ev;
            if (!g4_sched_next(r[i], &ev, 60000)) fail_msg("no event in 60 s");
            if (ev.kind == G4_EV_ERROR) fail_msg("error: %s", ev.text);
            const int done = ev.kind == G4_EV_DONE;
            g4_sched_event_clear(&ev);
            if (done) break;
        }
        g4_sched_req_ids(r[i], o[i].gen, 64, &o[i].n_gen);
        o[i].plp_done = g4_sched_req_prompt_logprobs(r[i], o[i].plp, 128);
        g4_sched_req_free(r[i]);
    }
    g4_sched_free(s);
    for (int i = 0; i < 2; i++) {
        assert_true(o[i].plp_done);
        float *lg = all_logits(e, ids[i], n[i]);
        for (size_t k = 1; k < n[i]; k++) {
            g4_token_logprob want;
            g4_logprobs_row(lg + (k - 1) * (size_t)V, (int)V, 0.0f, ids[i][k], 2, &want);
            expect_same_lp(&o[i].plp[k], &want, "prompt token", k);
        }
        free(lg);
    }
    for (int i = 0; i < 3; i++) free(ids[i]);
    g4_textgen_close(&tg);
    g4_engine_close(e);
}

/* The matched stop string is reported by index; an end-of-sequence stop says -1. */
static void test_stop_index(void **state) {
    (void)state;
    g4_engine *e;
    g4_textgen tg;
    open_demo(&e, &tg);
    size_t n;
    int32_t *ids = tu_chat_ids(&tg, "What is the capital of France?", &n);
    g4_sched *s;
    g4_err err;
    assert_int_equal(g4_sched_create(&tg, NULL, &s, &err), 0);
    const char *stops[] = {"Berlin", "Paris"};
    g4_gen_params p = {.max_new_tokens = 20, .skip_special = 1, .stop_strings = stops, .n_stop_strings = 2};
    g4_sampling_params_default(&p.sampling);
    outcome o;
    run(s, ids, n, &p, NULL, &o);
    assert_string_equal(o.done.finish_reason, "stop");
    assert_int_equal(o.done.stop_index, 1);
    p.n_stop_strings = 1;
    run(s, ids, n, &p, NULL, &o);
    assert_string_equal(o.done.finish_reason, "stop");
    assert_int_equal(o.done.stop_index, -1);
    g4_sched_sub_opts bad = {.top_logprobs = 21};
    g4_sched_req *r;
    assert_int_equal(g4_sched_submit_ex(s, ids, n, &p, &bad, &r, &err), G4_EINVAL);
    g4_sched_free(s);
    free(ids);
    g4_textgen_close(&tg);
    g4_engine_close(e);
}

static void test_logprobs_row(void **state) {
    (void)state;
    const float l[6] = {1.0f, 3.0f, NAN, 3.0f, -INFINITY, 0.5f};
    g4_token_logprob o;
    g4_logprobs_row(l, 6, 0.0f, 3, 10, &o);
    double z = exp(1.0 - 3) + 1 + 1 + exp(0.5 - 3);
    assert_true(fabs(o.logprob - (float)(-log(z))) < 1e-6);
    assert_int_equal(o.n_top, 4); /* NaN and -inf are not candidates */
    assert_int_equal(o.top_id[0], 1); /* ties: the lower id first */
    assert_int_equal(o.top_id[1], 3);
    assert_int_equal(o.top_id[2], 0);
    assert_int_equal(o.top_id[3], 5);
    assert_true(o.top_logprob[1] == o.logprob);
    double sum = 0;
    for (int i = 0; i < 4; i++) sum += exp(o.top_logprob[i]);
    assert_true(fabs(sum - 1) < 1e-6);
    g4_logprobs_row(l, 6, 2.0f, 0, 1, &o); /* tempered */
    z = exp((1.0 - 3) / 2) + 2 + exp((0.5 - 3) / 2);
    assert_true(fabs(o.logprob - (float)((1.0 - 3) / 2 - log(z))) < 1e-6);
    assert_int_equal(o.n_top, 1);
    g4_logprobs_row(l, 6, 1.0f, 4, 0, &o); /* probability 0: the floor, not -inf */
    assert_true(o.logprob == G4_LOGPROB_FLOOR);
    assert_int_equal(o.n_top, 0);
    assert_true(g4_sched_choice_seed(123, 0) == 123);
    assert_true(g4_sched_choice_seed(123, 1) != g4_sched_choice_seed(123, 2));
    assert_true(g4_sched_choice_seed(123, 1) == g4_sched_choice_seed(123, 1));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_logprobs_row),
        cmocka_unit_test(test_logprobs_match_direct),
        cmocka_unit_test(test_cache_echo_and_choices),
        cmocka_unit_test(test_echo_crowded_step),
        cmocka_unit_test(test_stop_index),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
