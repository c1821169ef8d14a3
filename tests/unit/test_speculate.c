/* Speculative decoding: the MTP assistant against the fp32 oracle's goldens
 * (tests/data/assistant), the same drafts at every TP degree, the KV rollback, prompt lookup,
 * the policy, and lossless generation (greedy and seeded sampling) with speculation on and off. */
#include "gemma4/assistant.h" /* before cmocka: its fail() macro meets comm.h's ops->fail */

#include "engine_util.h"

#include "engine/scheduler.h"
#include "engine/speculate.h"
#include "model/checkpoint.h"
#include "model/synth.h"
#include "model/synth_assistant.h"

static const char *assts[] = {"asst_plain", "asst_ordered", "asst_copy"};
static const char *prompts[] = {"p1", "p16", "p40"};

typedef struct {
    g4_engine *e;
    int64_t V, H;
} eng;

static void eng_open(eng *x, const char *spec, int tp, int mutation) {
    g4_engine_opts o = {.tp = tp, .threads = 1, .model_dir = tu_path("golden/tiny_default"), .speculative = spec, .mutation = mutation,
                        .max_batch = 64};
    g4_err err = {0};
    if (g4_engine_open(&o, &x->e, &err)) fail_msg("engine: %s", err.msg);
    x->V = g4_engine_vocab(x->e);
    x->H = g4_engine_hidden_size(x->e);
}

/* Computes tokens[0..n) into a new sequence; logits and hidden of the last position. */
static int prefill(eng *x, const int32_t *tok, int n, float *logits, float *hidden) {
    int seq;
    g4_err err = {0};
    if (g4_engine_seq_open(x->e, 256, &seq, &err)) fail_msg("seq: %s", err.msg);
    int32_t pos[256], sq[256];
    uint8_t want[256];
    for (int i = 0; i < n; i++) { pos[i] = i; sq[i] = seq; want[i] = i == n - 1; }
    g4_batch b = {.n = n, .ids = tok, .pos = pos, .seq = sq, .logits = want};
    if (g4_engine_forward_ex(x->e, &b, logits, hidden, &err)) fail_msg("forward: %s", err.msg);
    return seq;
}

static int32_t *prompt_and_target(json_t *g, int *np, int *ng, int32_t **gen) {
    int32_t *p = tu_json_ids(json_object_get(g, "prompt_ids"), np);
    *gen = tu_json_ids(json_object_get(g, "target_generated_ids"), ng);
    int32_t *all = malloc(sizeof(int32_t) * (size_t)(*np + *ng));
    memcpy(all, p, sizeof(int32_t) * (size_t)*np);
    memcpy(all + *np, *gen, sizeof(int32_t) * (size_t)*ng);
    free(p);
    return all;
}

/* Every golden draft of one assistant and prompt: ids exact, top-5 values and (first draft)
 * all logits within tol. Returns the largest difference; *ids_ok. With out (k = 4 steps of each
 * draft) the logits are kept for bitwise comparisons. */
static double check_drafts(eng *x, const char *asst, const char *prompt, int *ids_ok, float **keep) {
    json_t *g = tu_load_json(tu_path("assistant/%s__%s.json", asst, prompt));
    int np, ng;
    int32_t *gen, *all = prompt_and_target(g, &np, &ng, &gen);
    json_t *drafts = json_object_get(g, "drafts");
    const int k = (int)json_integer_value(json_object_get(g, "k")), nd = (int)json_array_size(drafts);
    float *lg = malloc(sizeof(float) * (size_t)x->V), *hid = malloc(sizeof(float) * (size_t)x->H);
    float *dl = malloc(sizeof(float) * (size_t)(k * nd) * (size_t)x->V);
    double worst = 0;
    *ids_ok = 1;
    for (int d = 0; d < nd; d++) {
        json_t *dj = json_array_get(drafts, (size_t)d);
        const int q = (int)json_integer_value(json_object_get(dj, "position"));
        const int32_t tok = (int32_t)json_integer_value(json_object_get(dj, "input_token"));
        assert_int_equal(tok, all[q]);
        int seq = prefill(x, all, q, lg, hid);
        int32_t ids[G4_SPEC_MAX_K];
        float *l = dl + (size_t)d * (size_t)k * (size_t)x->V;
        g4_err err = {0};
        if (g4_engine_draft(x->e, 1, &seq, &tok, hid, k, ids, l, &err)) fail_msg("draft: %s", err.msg);
        g4_engine_seq_close(x->e, seq);
        int nw;
        int32_t *want = tu_json_ids(json_object_get(dj, "draft_ids"), &nw);
        assert_int_equal(nw, k);
        if (memcmp(ids, want, sizeof(int32_t) * (size_t)k)) *ids_ok = 0;
        json_t *steps = json_object_get(dj, "steps");
        for (int j = 0; j < k; j++) {
            json_t *st = json_array_get(steps, (size_t)j), *ti = json_object_get(st, "top5_ids"), *tv = json_object_get(st, "top5_values");
            const float *row = l + (size_t)j * (size_t)x->V;
            for (size_t m = 0; m < json_array_size(ti); m++) {
                const int64_t id = json_integer_value(json_array_get(ti, m));
                const double diff = fabs(row[id] - json_real_value(json_array_get(tv, m)));
                if (diff > worst) worst = diff;
            }
            if (ids[j] != (int32_t)json_integer_value(json_object_get(st, "chosen_id"))) *ids_ok = 0;
        }
        if (d == 0) {
            json_t *all_l = json_object_get(json_object_get(g, "first_draft_step0_logits"), "values");
            assert_int_equal(json_array_size(all_l), x->V);
            for (int64_t v = 0; v < x->V; v++) {
                const double diff = fabs(l[v] - json_real_value(json_array_get(all_l, (size_t)v)));
                if (diff > worst) worst = diff;
            }
        }
        free(want);
    }
    if (keep) *keep = dl;
    else free(dl);
    free(lg); free(hid); free(all); free(gen);
    json_decref(g);
    return worst;
}

static void test_assistant_goldens(void **state) {
    (void)state;
    for (int a = 0; a < 3; a++) {
        char spec[256];
        snprintf(spec, sizeof spec, "mtp:%s", tu_path("assistant/%s", assts[a]));
        eng x;
        eng_open(&x, spec, 1, 0);
        for (int p = 0; p < 3; p++) {
            int ok;
            const double worst = check_drafts(&x, assts[a], prompts[p], &ok, NULL);
            print_message("%s/%s: drafts %s, max |dlogit| %.3g\n", assts[a], prompts[p], ok ? "equal" : "DIFFER", worst);
            assert_true(ok);
            assert_true(worst < 1e-4);
        }
        g4_engine_close(x.e);
    }
}

/* The traps of ASSISTANT.md, planted one at a time: each must change some golden draft. */
static void test_assistant_mutations_are_caught(void **state) {
    (void)state;
    const int muts[] = {G4_MUT_ASST_WINDOW_W, G4_MUT_ASST_QPOS, G4_MUT_ASST_SOFTCAP};
    const char *names[] = {"W sliding rows", "query RoPE at q-1", "target softcap"};
    for (int m = 0; m < 3; m++) {
        char spec[256];
        snprintf(spec, sizeof spec, "mtp:%s", tu_path("assistant/asst_plain"));
        eng x;
        eng_open(&x, spec, 1, muts[m]);
        double worst = 0;
        int all_ok = 1;
        for (int p = 0; p < 3; p++) {
            int ok;
            const double w = check_drafts(&x, "asst_plain", prompts[p], &ok, NULL);
            all_ok &= ok;
            if (w > worst) worst = w;
        }
        print_message("mutation %-18s: drafts %s, max |dlogit| %.3g\n", names[m], all_ok ? "equal" : "differ", worst);
        assert_true(!all_ok || worst > 1e-3);
        g4_engine_close(x.e);
    }
}

/* Drafts and their logits are the same bits at TP 1, 2 and 4. */
static void test_assistant_tp_invariant(void **state) {
    (void)state;
    for (int a = 0; a < 2; a++) {
        char spec[256];
        snprintf(spec, sizeof spec, "mtp:%s", tu_path("assistant/%s", assts[a]));
        float *ref = NULL;
        size_t n = 0;
        for (int tp = 1; tp <= 4; tp *= 2) {
            eng x;
            eng_open(&x, spec, tp, 0);
            int ok;
            float *l;
            check_drafts(&x, assts[a], "p40", &ok, &l);
            assert_true(ok);
            json_t *g = tu_load_json(tu_path("assistant/%s__p40.json", assts[a]));
            n = json_array_size(json_object_get(g, "drafts")) * 4 * (size_t)x.V;
            json_decref(g);
            if (!ref) ref = l;
            else {
                assert_memory_equal(ref, l, sizeof(float) * n);
                free(l);
            }
            g4_engine_close(x.e);
        }
        free(ref);
    }
}

/* The oracle's greedy speculative loop, through the engine's API: draft at the sequence's
 * length, verify [t, d1..dk] in one step, keep the longest matching prefix plus the target's
 * own token, roll back the rest. Every round as recorded, and the ids of plain greedy. */
static void test_assistant_rounds(void **state) {
    (void)state;
    for (int a = 0; a < 3; a++) {
        char spec[256];
        snprintf(spec, sizeof spec, "mtp:%s", tu_path("assistant/%s", assts[a]));
        eng x;
        eng_open(&x, spec, 1, 0);
        for (int p = 0; p < 3; p++) {
            json_t *g = tu_load_json(tu_path("assistant/%s__%s.json", assts[a], prompts[p]));
            json_t *sp = json_object_get(g, "speculative"), *rounds = json_object_get(sp, "rounds");
            const int k = (int)json_integer_value(json_object_get(sp, "k"));
            int np, ng;
            int32_t *gen, *all = prompt_and_target(g, &np, &ng, &gen);
            int32_t toks[256];
            memcpy(toks, all, sizeof(int32_t) * (size_t)np);
            float *lg = malloc(sizeof(float) * (size_t)(k + 1) * (size_t)x.V), *hid = malloc(sizeof(float) * (size_t)(k + 1) * (size_t)x.H);
            const int seq = prefill(&x, toks, np, lg, hid);
            g4_engine_seq_tentative(x.e, seq, 1);
            int len = np, n_out = 0, hrow = 0;
            toks[len] = g4_sample_greedy(lg, (int)x.V);
            n_out = 1;
            for (size_t r = 0; n_out < ng; r++) {
                json_t *rj = json_array_get(rounds, r);
                assert_non_null(rj);
                int32_t d[G4_SPEC_MAX_K];
                g4_err err = {0};
                if (g4_engine_draft(x.e, 1, &seq, &toks[len], hid + (size_t)hrow * (size_t)x.H, k, d, NULL, &err)) fail_msg("%s", err.msg);
                int nw;
                int32_t *want = tu_json_ids(json_object_get(rj, "draft_ids"), &nw);
                assert_int_equal(json_integer_value(json_object_get(rj, "position")), len);
                assert_memory_equal(d, want, sizeof(int32_t) * (size_t)k);
                free(want);
                int32_t ids[G4_SPEC_MAX_K + 1], pos[G4_SPEC_MAX_K + 1], sq[G4_SPEC_MAX_K + 1];
                uint8_t fl[G4_SPEC_MAX_K + 1];
                ids[0] = toks[len];
                for (int i = 0; i <= k; i++) { if (i) ids[i] = d[i - 1]; pos[i] = len + i; sq[i] = seq; fl[i] = 1; }
                g4_batch b = {.n = k + 1, .ids = ids, .pos = pos, .seq = sq, .logits = fl};
                if (g4_engine_forward_ex(x.e, &b, lg, hid, &err)) fail_msg("%s", err.msg);
                int acc = 0;
                while (acc < k && g4_sample_greedy(lg + (size_t)acc * (size_t)x.V, (int)x.V) == d[acc]) acc++;
                for (int i = 0; i < acc; i++) toks[len + 1 + i] = d[i];
                toks[len + 1 + acc] = g4_sample_greedy(lg + (size_t)acc * (size_t)x.V, (int)x.V);
                assert_int_equal(json_integer_value(json_object_get(rj, "n_accepted")), acc);
                len += acc + 1;
                n_out += acc + 1;
                hrow = acc;
                if (g4_engine_seq_truncate(x.e, seq, len, toks, &err)) fail_msg("%s", err.msg);
                assert_int_equal(g4_engine_seq_len(x.e, seq), len);
            }
            assert_memory_equal(toks + np, gen, sizeof(int32_t) * (size_t)ng);
            g4_engine_seq_close(x.e, seq);
            free(lg); free(hid); free(all); free(gen);
            json_decref(g);
        }
        g4_engine_close(x.e);
    }
}

/* ---- tokens, spec strings, policy ------------------------------------------------------------ */

static void test_ngram(void **state) {
    (void)state;
    int32_t out[8];
    const int32_t a[] = {5, 6, 7, 8, 9, 1, 2, 5, 6, 7};
    /* "5 6 7" occurred at 0: propose what followed */
    assert_int_equal(g4_spec_ngram(a, 10, 3, 4, out), 4);
    assert_int_equal(out[0], 8); assert_int_equal(out[1], 9); assert_int_equal(out[2], 1); assert_int_equal(out[3], 2);
    /* nothing matches the last token */
    const int32_t b[] = {1, 2, 3, 4};
    assert_int_equal(g4_spec_ngram(b, 4, 3, 4, out), 0);
    /* a loop keeps looping past the end of the text */
    const int32_t c[] = {9, 3, 4, 3, 4};
    assert_int_equal(g4_spec_ngram(c, 5, 2, 5, out), 5);
    const int32_t want_c[] = {3, 4, 3, 4, 3};
    assert_memory_equal(out, want_c, sizeof want_c);
    /* the most recent occurrence wins; a shorter match when the longest fails */
    const int32_t d[] = {1, 2, 7, 3, 2, 8, 5, 2};
    assert_int_equal(g4_spec_ngram(d, 8, 3, 1, out), 1);
    assert_int_equal(out[0], 8);
    assert_int_equal(g4_spec_ngram(d, 1, 3, 2, out), 0);
}

static void test_spec_parse(void **state) {
    (void)state;
    g4_spec_cfg c;
    g4_err err = {0};
    assert_int_equal(g4_spec_parse(NULL, &c, &err), G4_OK);
    assert_int_equal(c.method, G4_SPEC_NONE);
    assert_int_equal(g4_spec_parse("ngram", &c, &err), G4_OK);
    assert_true(c.method == G4_SPEC_NGRAM && c.n == 3 && c.k == 4);
    assert_int_equal(g4_spec_parse("ngram:2,7", &c, &err), G4_OK);
    assert_true(c.n == 2 && c.k == 7);
    assert_int_equal(g4_spec_parse("mtp:/a:b/dir", &c, &err), G4_OK);
    assert_true(c.method == G4_SPEC_MTP && c.k == 4 && !strcmp(c.dir, "/a:b/dir"));
    assert_int_equal(g4_spec_parse("mtp:/x/y:9", &c, &err), G4_OK);
    assert_true(c.k == 9 && !strcmp(c.dir, "/x/y"));
    const char *bad[] = {"ngram:3", "ngram:0,4", "ngram:3,16", "ngram:3,x", "mtp:", "mtp:/x:99", "mtp:/x:0", "eagle", "ngram:3,4,5"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_equal(g4_spec_parse(bad[i], &c, &err), G4_EINVAL);
        assert_non_null(strstr(err.msg, "--speculative"));
    }
    assert_int_equal(g4_spec_parse("ngram:3,16", &c, &err), G4_EINVAL);
    assert_non_null(strstr(err.msg, "[1, 15]"));
}

static void costs_linear(g4_spec_costs *c, double fixed, double per_token) {
    g4_err err;
    assert_int_equal(g4_spec_costs_init(c, 64, 16, &err), G4_OK);
    for (int t = 1; t <= 64; t++) g4_spec_costs_add(c, t, fixed + per_token * t);
}

/* Drafts are taken when the step hardly grows with its tokens and the drafts are likely, and
 * not when the step is compute bound or the drafts are unlikely, nor many of them at a batch. */
static void test_policy(void **state) {
    (void)state;
    g4_spec_costs bw, flop;
    costs_linear(&bw, 10e-3, 0.1e-3);    /* bandwidth bound: 8 tokens cost 1.07 x one */
    costs_linear(&flop, 0, 1e-3);        /* compute bound: cost in proportion to the tokens */
    double rate[16];
    int avail[16], take[16];
    for (int i = 0; i < 16; i++) { rate[i] = 0.8; avail[i] = 4; }
    assert_int_equal(g4_spec_choose(&bw, 1, 1, 1, rate, avail, 63, 0, take), 4);
    assert_int_equal(g4_spec_choose(&flop, 1, 1, 1, rate, avail, 63, 0, take), 0);
    /* nearly always rejected: on a nearly flat step even that pays a little; on one that grows
     * by a tenth per token it does not */
    g4_spec_costs mid;
    costs_linear(&mid, 10e-3, 1e-3);
    rate[0] = 0.02;
    assert_true(g4_spec_choose(&bw, 1, 1, 1, rate, avail, 63, 0, take) > 0);
    assert_int_equal(g4_spec_choose(&mid, 1, 1, 1, rate, avail, 63, 0, take), 0);
    /* 16 streams, four likely ones, on that step: only some of them, or fewer drafts each */
    for (int i = 0; i < 16; i++) rate[i] = i < 4 ? 0.9 : 0.3;
    const int got = g4_spec_choose(&mid, 16, 16, 16, rate, avail, 48, 0, take);
    assert_true(got > 0 && got < 64);
    for (int i = 4; i < 16; i++) assert_true(take[i] <= take[0]);
    /* drafts still to be made cost their own time: an expensive drafter is not used */
    for (int j = 1; j <= 16; j++) g4_spec_costs_add_draft(&bw, j, 1, 50e-3);
    rate[0] = 0.8;
    assert_int_equal(g4_spec_choose(&bw, 1, 1, 1, rate, avail, 63, 1, take), 0);
    /* unmeasured step sizes: interpolated, flat past the largest measured */
    g4_spec_costs few;
    g4_err err;
    assert_int_equal(g4_spec_costs_init(&few, 64, 16, &err), G4_OK);
    assert_true(g4_spec_cost(&few, 5) == 1.0);
    g4_spec_costs_add(&few, 1, 1.0);
    g4_spec_costs_add(&few, 9, 3.0);
    assert_true(fabs(g4_spec_cost(&few, 5) - 2.0) < 1e-12 && g4_spec_cost(&few, 30) == 3.0);
    /* acceptance estimates: down after rejections, back toward 1/2 while idle */
    g4_spec_stat st;
    g4_spec_stat_init(&st);
    assert_true(g4_spec_rate(&st) == 0.5);
    for (int i = 0; i < 10; i++) g4_spec_stat_update(&st, 4, 0);
    const double low = g4_spec_rate(&st);
    assert_true(low < 0.2);
    for (int i = 0; i < 200; i++) g4_spec_stat_idle(&st);
    assert_true(g4_spec_rate(&st) > 0.4);
    for (int i = 0; i < 10; i++) g4_spec_stat_update(&st, 4, 4);
    assert_true(g4_spec_rate(&st) > 0.8);
    /* a new sequence starts from the drafter's record, weighed as a few rounds */
    g4_spec_stat fresh;
    g4_spec_stat_seed(&fresh, &st);
    assert_true(g4_spec_rate(&fresh) > 0.7 && fresh.trials <= 4.0 + 1e-9);
    for (int i = 0; i < 5; i++) g4_spec_stat_update(&fresh, 4, 0);
    assert_true(g4_spec_rate(&fresh) < 0.5);
    g4_spec_costs_free(&bw); g4_spec_costs_free(&flop); g4_spec_costs_free(&mid); g4_spec_costs_free(&few);
}

/* ---- lossless, one sequence on the engine ----------------------------------------------------- */

typedef struct { int32_t gen[256]; int n; float *logits; int64_t V; } spec_out;

static int collect(void *u, int32_t id, const float *row) {
    spec_out *o = u;
    memcpy(o->logits + (size_t)o->n * (size_t)o->V, row, sizeof(float) * (size_t)o->V);
    o->gen[o->n++] = id;
    return 0;
}

/* One greedy request through the scheduler (the loop g4tp generate runs), every round drafting,
 * the prompt in steps of max_batch; collect() sees each token and its row. Returns the stats. */
static g4_sched_stats spec_run(g4_engine *e, const int32_t *ids, int n, int n_new, const int32_t *stop, int n_stop, spec_out *so) {
    g4_textgen tg = {.engine = e};
    g4_sched_opts opts = {.prefill_chunk = g4_engine_max_batch(e)};
    g4_gen_params gp = {.max_new_tokens = n_new, .ignore_eos = 1, .stop_ids = stop, .n_stop_ids = (size_t)n_stop};
    g4_sampling_params_default(&gp.sampling);
    g4_sched_sub_opts x = {.on_token = collect, .on_token_user = so};
    g4_sched *s;
    g4_sched_req *r;
    g4_err err = {0};
    if (g4_sched_create(&tg, &opts, &s, &err) || g4_sched_submit_ex(s, ids, (size_t)n, &gp, &x, &r, &err)) fail_msg("%s", err.msg);
    g4_sched_event ev;
    while (!g4_sched_next(r, &ev, -1) || ev.kind == G4_EV_TEXT) g4_sched_event_clear(&ev);
    if (ev.kind != G4_EV_DONE) fail_msg("generation failed: %s", ev.text);
    g4_sched_event_clear(&ev);
    g4_sched_stats st;
    g4_sched_get_stats(s, &st);
    g4_sched_req_free(r);
    g4_sched_free(s);
    return st;
}

/* Speculative greedy decoding with spec at tp against plain greedy decoding at TP 1: the same
 * ids and every emitted token's logits bit for bit; with a stop id, the reference's ids up to
 * its first occurrence. Returns the drafts accepted. */
static int64_t lossless_one(const char *model, const char *spec, int tp, const int32_t *ids, int n, int n_new) {
    g4_engine_opts o = {.tp = tp, .threads = 1, .model_dir = model, .max_batch = 64};
    tu_run ref;
    g4_err err = {0};
    if (tu_generate(&o, ids, n, n_new, &ref, &err)) fail_msg("%s: %s", model, err.msg);
    o.speculative = spec;
    o.speculative_always = 1;
    g4_engine *e;
    if (g4_engine_open(&o, &e, &err)) fail_msg("%s %s: %s", model, spec, err.msg);
    spec_out so = {.V = g4_engine_vocab(e)};
    so.logits = malloc(sizeof(float) * (size_t)n_new * (size_t)so.V);
    g4_sched_stats run = spec_run(e, ids, n, n_new, NULL, 0, &so);
    assert_int_equal(so.n, n_new);
    assert_memory_equal(so.gen, ref.gen, sizeof(int32_t) * (size_t)n_new);
    assert_memory_equal(so.logits, ref.logits, sizeof(float) * (size_t)n_new * (size_t)so.V);
    assert_true(run.steps < (uint64_t)(n_new + (n + 63) / 64) || run.draft_proposed > 0);
    assert_true(run.draft_accepted <= run.draft_proposed);
    /* a stop id the reference meets half way: the same ids up to it, included */
    const int32_t stop = ref.gen[n_new / 2];
    int upto = 0;
    while (ref.gen[upto] != stop) upto++;
    spec_out so2 = {.V = so.V, .logits = so.logits};
    g4_sched_stats run2 = spec_run(e, ids, n, n_new, &stop, 1, &so2);
    assert_int_equal(so2.n, upto + 1);
    assert_memory_equal(so2.gen, ref.gen, sizeof(int32_t) * (size_t)(upto + 1));
    assert_memory_equal(so2.logits, ref.logits, sizeof(float) * (size_t)(upto + 1) * (size_t)so.V);
    assert_true(run2.draft_accepted <= run2.draft_proposed);
    g4_engine_close(e);
    free(so.logits);
    tu_run_free(&ref);
    return (int64_t)run.draft_accepted;
}

static void test_lossless_goldens(void **state) {
    (void)state;
    char specs[4][300];
    snprintf(specs[0], sizeof specs[0], "ngram:3,4");
    snprintf(specs[1], sizeof specs[1], "ngram:1,15");
    snprintf(specs[2], sizeof specs[2], "mtp:%s:4", tu_path("assistant/asst_copy"));
    snprintf(specs[3], sizeof specs[3], "mtp:%s:3", tu_path("assistant/asst_ordered"));
    int64_t accepted = 0;
    for (int p = 0; p < 3; p++) {
        json_t *g = tu_load_json(tu_path("golden/tiny_default__%s.json", prompts[p]));
        int n;
        int32_t *ids = tu_json_ids(json_object_get(g, "prompt_ids"), &n);
        for (int sp = 0; sp < 4; sp++)
            for (int tp = 1; tp <= 4; tp *= 2) accepted += lossless_one(tu_path("golden/tiny_default"), specs[sp], tp, ids, n, 40);
        free(ids);
        json_decref(g);
    }
    print_message("drafts accepted over all runs: %lld\n", (long long)accepted);
    assert_true(accepted > 0);
}

static void test_lossless_demo(void **state) {
    (void)state;
    /* a passage, then its beginning again: the trained demo model continues it */
    int32_t ids[64];
    for (int i = 0; i < 24; i++) ids[i] = 2 + (i * 37) % 1500;
    for (int i = 0; i < 8; i++) ids[24 + i] = ids[i];
    const int64_t acc = lossless_one("models/demo", "ngram:3,6", 1, ids, 32, 48) + lossless_one("models/demo", "ngram:3,6", 2, ids, 32, 48);
    print_message("demo: %lld drafts accepted\n", (long long)acc);
}

/* The named BF16 tensor's bytes in a safetensors file held in buf (header parsed each call). */
static uint16_t *st_tensor(char *buf, const char *name, int64_t *numel) {
    uint64_t hl = 0;
    for (int b = 0; b < 8; b++) hl |= (uint64_t)(uint8_t)buf[b] << (8 * b);
    json_error_t je;
    json_t *h = json_loadb(buf + 8, hl, 0, &je), *t = json_object_get(h, name);
    if (!t) fail_msg("no tensor %s", name);
    json_t *off = json_object_get(t, "data_offsets");
    const uint64_t a = (uint64_t)json_integer_value(json_array_get(off, 0)), z = (uint64_t)json_integer_value(json_array_get(off, 1));
    assert_string_equal(json_string_value(json_object_get(t, "dtype")), "BF16");
    json_decref(h);
    *numel = (int64_t)(z - a) / 2;
    return (uint16_t *)(buf + 8 + hl + a);
}

/* Turns the synthesized assistant in adir (hidden Ha) into one that drafts its input token again:
 * its embedding is the target's first Ha columns, pre_projection passes them through, the layers
 * add nothing (o_proj and down_proj zero), so its logits are E_a[tok] . E_a[v], largest at tok.
 * The wide random target repeats one token, so these drafts are accepted. */
static void make_copier(const char *target, const char *adir, int64_t Ha) {
    g4_checkpoint ck;
    g4_err err = {0};
    if (g4_checkpoint_open(target, &ck, &err)) fail_msg("%s", err.msg);
    int ie = -1;
    for (int i = 0; i < ck.n_specs; i++)
        if (ck.specs[i].kind == G4_T_EMBED) ie = i;
    const int64_t V = ck.cfg.vocab_size, Ht = ck.cfg.hidden_size;
    g4_mat E = g4_checkpoint_view(&ck, ie, 0, V, 0, Ht);
    assert_int_equal(E.dtype, G4_DT_BF16);
    char path[600];
    snprintf(path, sizeof path, "%s/model.safetensors", adir);
    size_t len = 0;
    char *buf = tu_read_file(path, &len);
    assert_non_null(buf);
    int64_t n;
    uint16_t *ea = st_tensor(buf, "model.embed_tokens.weight", &n);
    assert_int_equal(n, V * Ha);
    for (int64_t v = 0; v < V; v++) memcpy(ea + v * Ha, (const uint8_t *)E.data + v * E.ld_bytes, 2 * (size_t)Ha);
    uint16_t *pre = st_tensor(buf, "pre_projection.weight", &n);
    assert_int_equal(n, Ha * 2 * Ht);
    memset(pre, 0, 2 * (size_t)n);
    for (int64_t i = 0; i < Ha; i++) pre[i * 2 * Ht + i] = 0x3f80; /* 1.0 */
    uint16_t *nw = st_tensor(buf, "model.norm.weight", &n);
    for (int64_t i = 0; i < n; i++) nw[i] = 0x3f80;
    for (int l = 0;; l++) {
        char name[96];
        snprintf(name, sizeof name, "model.layers.%d.self_attn.o_proj.weight", l);
        if (!strstr(buf, name)) break;
        uint16_t *w = st_tensor(buf, name, &n);
        memset(w, 0, 2 * (size_t)n);
        snprintf(name, sizeof name, "model.layers.%d.mlp.down_proj.weight", l);
        w = st_tensor(buf, name, &n);
        memset(w, 0, 2 * (size_t)n);
    }
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(buf, 1, len, f), len);
    fclose(f);
    free(buf);
    g4_checkpoint_close(&ck);
}

/* The 31B's widths (hidden 5376, head dims 256 / 512, KV heads 16 / 4 on 32 query heads) with a
 * small vocabulary and FFN, and a synthesized assistant in the 31B assistant's layout (made a
 * copier, so that some of its drafts are accepted). */
static const char *wide_model(const char **asst) {
    static char dir[512], adir[512];
    *asst = adir;
    if (dir[0]) return dir;
    char cfg[512];
    snprintf(cfg, sizeof cfg, "%s/wide.config.json", tu_tmpdir());
    snprintf(dir, sizeof dir, "%s/wide", tu_tmpdir());
    snprintf(adir, sizeof adir, "%s/wide_asst", tu_tmpdir());
    json_t *c = tu_load_json(tu_path("spec/gemma-4-31B-it.config.json"));
    json_t *t = json_object_get(c, "text_config");
    json_object_set_new(t, "vocab_size", json_integer(2048));
    json_object_set_new(t, "intermediate_size", json_integer(512));
    json_object_set_new(t, "sliding_window", json_integer(8));
    assert_int_equal(json_dump_file(c, cfg, 0), 0);
    json_decref(c);
    g4_synth_opts so = {.like = cfg, .layers = 2, .seed = 5, .out_dir = dir};
    g4_err err = {0};
    if (g4_synth_write(&so, &err)) fail_msg("synth: %s", err.msg);
    char p[600];
    snprintf(p, sizeof p, "%s/config.json", dir);
    g4_synth_asst_opts ao = {.like = p, .out_dir = adir, .hidden = 256, .intermediate = 512, .seed = 3};
    if (g4_synth_assistant_write(&ao, &err)) fail_msg("synth assistant: %s", err.msg);
    make_copier(dir, adir, ao.hidden);
    return dir;
}

static void test_lossless_wide(void **state) {
    (void)state;
    const char *asst, *dir = wide_model(&asst);
    int32_t ids[24];
    for (int i = 0; i < 12; i++) ids[i] = ids[12 + i] = 3 + (i * 131) % 2000;
    char spec[600];
    snprintf(spec, sizeof spec, "mtp:%s:3", asst);
    for (int tp = 1; tp <= 2; tp++) {
        const int64_t ng = lossless_one(dir, "ngram:2,5", tp, ids, 24, 24), mt = lossless_one(dir, spec, tp, ids, 24, 12);
        print_message("tp %d: drafts accepted: n-gram %lld, MTP %lld\n", tp, (long long)ng, (long long)mt);
        assert_true(ng > 0); /* a run that accepts nothing checks only the rejection path */
        assert_true(mt > 0);
    }
}

/* ---- the KV cache: rejected positions leave no trace --------------------------------------------- */

static void test_rollback_leaves_no_trace(void **state) {
    (void)state;
    g4_engine_opts o = {.tp = 1, .threads = 1, .model_dir = tu_path("golden/tiny_default"), .speculative = "ngram:3,15", .max_batch = 64};
    g4_engine *e;
    g4_err err = {0};
    assert_int_equal(g4_engine_open(&o, &e, &err), G4_OK);
    const int64_t V = g4_engine_vocab(e);
    int32_t toks[64];
    for (int i = 0; i < 64; i++) toks[i] = 3 + (i * 53) % 500;
    /* 20 positions, then a verification of 15 "drafts" at 20..34 (position 31 completes block 1),
     * of which 2 are kept */
    float *lg = malloc(sizeof(float) * 64 * (size_t)V);
    int seq;
    assert_int_equal(g4_engine_seq_open(e, 64, &seq, &err), G4_OK);
    int32_t pos[64], sq[64];
    uint8_t want[64];
    for (int i = 0; i < 64; i++) { pos[i] = i; sq[i] = seq; want[i] = 0; }
    g4_batch b = {.n = 20, .ids = toks, .pos = pos, .seq = sq, .logits = want};
    assert_int_equal(g4_engine_forward(e, &b, lg, &err), G4_OK);
    g4_engine_seq_tentative(e, seq, 1);
    int32_t drafts[15];
    for (int i = 0; i < 15; i++) drafts[i] = 7 + i;
    want[20] = 1;
    g4_batch v = {.n = 15, .ids = drafts, .pos = pos + 20, .seq = sq, .logits = want + 20};
    assert_int_equal(g4_engine_forward(e, &v, lg, &err), G4_OK);
    int32_t kept[64];
    memcpy(kept, toks, sizeof(int32_t) * 20);
    kept[20] = drafts[0];
    kept[21] = drafts[1];
    assert_int_equal(g4_engine_seq_truncate(e, seq, 22, kept, &err), G4_OK);
    assert_int_equal(g4_engine_seq_len(e, seq), 22);
    /* too far back, or past the end: refused */
    assert_int_equal(g4_engine_seq_truncate(e, seq, 23, kept, &err), G4_EINVAL);
    assert_int_equal(g4_engine_seq_truncate(e, seq, 1, kept, &err), G4_EINVAL);
    /* the rest of the sequence as if the rejected drafts had never been there */
    for (int i = 22; i < 40; i++) kept[i] = toks[i];
    want[20] = 0;
    for (int i = 22; i < 40; i++) want[i] = 1;
    g4_batch r = {.n = 18, .ids = kept + 22, .pos = pos + 22, .seq = sq, .logits = want + 22};
    assert_int_equal(g4_engine_forward(e, &r, lg, &err), G4_OK);
    assert_int_equal(g4_engine_seq_truncate(e, seq, 40, kept, &err), G4_OK); /* confirms: registers blocks 1 */
    g4_engine_seq_close(e, seq);
    /* the rejected drafts' block was never cached: no prefix of them hits beyond what was kept */
    int32_t bad[40];
    memcpy(bad, toks, sizeof(int32_t) * 20);
    memcpy(bad + 20, drafts, sizeof(int32_t) * 15);
    bad[35] = 1;
    assert_true(g4_engine_prefix_peek(e, bad, 36, NULL) <= 22);
    /* the kept sequence's blocks were: a resumed request computes the same bits from the cache */
    int64_t hit;
    assert_int_equal(g4_engine_seq_open_cached(e, 64, kept, 40, &seq, &hit, &err), G4_OK);
    assert_true(hit >= 32);
    int nr = 40 - (int)hit;
    float *lc = malloc(sizeof(float) * 64 * (size_t)V);
    for (int i = 0; i < nr; i++) sq[i] = seq;
    g4_batch c = {.n = nr, .ids = kept + hit, .pos = pos + hit, .seq = sq, .logits = want + hit};
    assert_int_equal(g4_engine_forward(e, &c, lc, &err), G4_OK);
    assert_memory_equal(lc, lg + (size_t)(hit - 22) * (size_t)V, sizeof(float) * (size_t)nr * (size_t)V);
    g4_engine_seq_close(e, seq);
    free(lg);
    free(lc);
    g4_engine_close(e);
}

/* ---- through the scheduler: continuous batching, sampling ------------------------------------------ */

typedef struct {
    int32_t ids[8][128];
    size_t n[8];
    g4_token_logprob lp[8][128];
    g4_sched_stats st;
} sched_out;

/* n requests at once (prompt i: base prompt with its last token changed by i), ids-only
 * scheduler (no tokenizer); temperature 0 or the given sampling; spec per request. */
static void sched_run(const char *model, const char *spec, int always, int tp, int n, int n_new, float temp, uint64_t seed, int per_req_spec,
                      sched_out *out) {
    g4_engine_opts o = {.tp = tp, .threads = 1, .model_dir = model, .max_batch = 64, .speculative = spec, .speculative_always = always};
    g4_engine *e;
    g4_err err = {0};
    if (g4_engine_open(&o, &e, &err)) fail_msg("%s: %s", model, err.msg);
    g4_textgen tg = {.engine = e};
    g4_sched *s;
    assert_int_equal(g4_sched_create(&tg, NULL, &s, &err), G4_OK);
    g4_sched_req *r[8];
    for (int i = 0; i < n; i++) {
        int32_t prompt[24];
        for (int j = 0; j < 24; j++) prompt[j] = 3 + (j * 41) % 200;
        for (int j = 0; j < 8; j++) prompt[16 + j] = prompt[j]; /* a repeat to look up */
        prompt[23] = 3 + (prompt[23] + 7 * i) % 400;
        g4_gen_params gp = {.max_new_tokens = n_new, .ignore_eos = 1, .skip_special = 1, .speculative = per_req_spec};
        g4_sampling_params_default(&gp.sampling);
        gp.sampling.temperature = temp;
        gp.sampling.top_k = temp > 0 ? 8 : 0;
        gp.sampling.seed = seed + (uint64_t)i;
        gp.sampling.has_seed = 1;
        g4_sched_sub_opts x = {.logprobs = 1, .top_logprobs = 5};
        if (g4_sched_submit_ex(s, prompt, 24, &gp, &x, &r[i], &err)) fail_msg("submit: %s", err.msg);
    }
    for (int i = 0; i < n; i++) {
        g4_sched_event ev;
        for (;;) {
            if (!g4_sched_next(r[i], &ev, -1)) continue;
            const int k = ev.kind;
            if (k == G4_EV_ERROR) fail_msg("request %d: %s", i, ev.text);
            g4_sched_event_clear(&ev);
            if (k == G4_EV_DONE) break;
        }
        g4_sched_req_ids(r[i], out->ids[i], 128, &out->n[i]);
        assert_int_equal(g4_sched_req_logprobs(r[i], 0, out->lp[i], 128), out->n[i]);
        g4_sched_req_free(r[i]);
    }
    g4_sched_get_stats(s, &out->st);
    g4_sched_free(s);
    g4_engine_close(e);
}

static void same_outputs(const sched_out *a, const sched_out *b, int n) {
    for (int i = 0; i < n; i++) {
        assert_int_equal(a->n[i], b->n[i]);
        assert_memory_equal(a->ids[i], b->ids[i], sizeof(int32_t) * a->n[i]);
        tu_same_logprobs(a->lp[i], b->lp[i], a->n[i]); /* the logprobs come from the rows: bitwise equal rows */
    }
}

/* Greedy and seeded sampling: with drafts verified inside continuous batching (4 streams, every
 * round drafting, or by the cost policy), every request's tokens and logprobs are those of the
 * run without speculation, at TP 1 and 2; a request that opts out drafts nothing. */
static void test_sched_lossless(void **state) {
    (void)state;
    static sched_out base, spec;
    char mtp[300];
    snprintf(mtp, sizeof mtp, "mtp:%s", tu_path("assistant/asst_copy"));
    const char *model = tu_path("golden/tiny_default");
    const char *specs[] = {"ngram:3,4", mtp};
    for (int samp = 0; samp < 2; samp++) {
        const float temp = samp ? 0.9f : 0.0f;
        sched_run(model, NULL, 0, 1, 4, 40, temp, 77, 0, &base);
        for (int sp = 0; sp < 2; sp++)
            for (int tp = 1; tp <= 2; tp++)
                for (int always = 0; always < 2; always++) {
                    sched_run(model, specs[sp], always, tp, 4, 40, temp, 77, 0, &spec);
                    same_outputs(&base, &spec, 4);
                    if (always) assert_true(spec.st.draft_proposed > 0 && spec.st.spec_steps > 0);
                    print_message("%s %s tp %d %s: %llu drafts, %llu accepted, %llu steps for %llu tokens\n", samp ? "sampled" : "greedy", specs[sp], tp,
                                  always ? "always" : "auto", (unsigned long long)spec.st.draft_proposed, (unsigned long long)spec.st.draft_accepted,
                                  (unsigned long long)spec.st.steps, (unsigned long long)spec.st.generated_tokens);
                }
        /* per-request opt-out */
        sched_run(model, "ngram:3,4", 1, 1, 4, 40, temp, 77, -1, &spec);
        same_outputs(&base, &spec, 4);
        assert_int_equal(spec.st.draft_proposed, 0);
    }
}

/* The token distribution with speculative sampling is the target's: the second and third
 * generated tokens (drawn from verification rows, after accepted or rejected drafts) over 3000
 * seeds, against their exact marginals from the target's own distributions (temperature 1,
 * top-k 4), by a chi-square test at the 0.1 % level. */
static void test_sampling_distribution(void **state) {
    (void)state;
    const char *model = tu_path("golden/tiny_default");
    char mtp[300];
    snprintf(mtp, sizeof mtp, "mtp:%s", tu_path("assistant/asst_copy"));
    g4_engine_opts o = {.tp = 1, .threads = 1, .model_dir = model, .max_batch = 64, .speculative = mtp, .speculative_always = 1};
    g4_engine *e;
    g4_err err = {0};
    assert_int_equal(g4_engine_open(&o, &e, &err), G4_OK);
    const int V = (int)g4_engine_vocab(e);
    /* a prompt on which the copying assistant's drafts are accepted about 40 % of the time */
    int32_t prompt[16];
    for (int j = 0; j < 16; j++) prompt[j] = 3 + ((j % 3) * 97 + 155) % 500;
    g4_sampling_params sp;
    g4_sampling_params_default(&sp);
    sp.temperature = 1.0f;
    sp.top_k = 4;
    g4_sampler *smp;
    assert_int_equal(g4_sampler_create(V, &sp, &smp, &err), G4_OK);
    /* exact: p(x1) p(x2 | x1) p(x3 | x1 x2) over the top-4 candidates of each row */
    float *lg = malloc(sizeof(float) * (size_t)V * 3);
    int32_t toks[24];
    memcpy(toks, prompt, sizeof prompt);
    double *p2 = calloc((size_t)V, sizeof(double)), *p3 = calloc((size_t)V, sizeof(double));
    int32_t c1[4], c2[4], c3[4];
    float q1[4], q2[4], q3[4];
    assert_int_equal(g4_engine_hidden_size(e), 64);
    float hid[64];
    int seq = prefill(&(eng){e, V, 64}, toks, 16, lg, hid);
    g4_engine_seq_close(e, seq);
    const int n1 = g4_sampler_candidates(smp, lg, V, c1, q1, 4);
    for (int a = 0; a < n1; a++) {
        toks[16] = c1[a];
        seq = prefill(&(eng){e, V, 64}, toks, 17, lg, hid);
        g4_engine_seq_close(e, seq);
        const int n2 = g4_sampler_candidates(smp, lg, V, c2, q2, 4);
        for (int b = 0; b < n2; b++) {
            p2[c2[b]] += (double)q1[a] * q2[b];
            toks[17] = c2[b];
            seq = prefill(&(eng){e, V, 64}, toks, 18, lg, hid);
            g4_engine_seq_close(e, seq);
            const int n3 = g4_sampler_candidates(smp, lg, V, c3, q3, 4);
            for (int c = 0; c < n3; c++) p3[c3[c]] += (double)q1[a] * q2[b] * q3[c];
        }
    }
    g4_textgen tg = {.engine = e};
    g4_sched *s;
    assert_int_equal(g4_sched_create(&tg, NULL, &s, &err), G4_OK);
    const int N = 3000;
    int *h2 = calloc((size_t)V, sizeof(int)), *h3 = calloc((size_t)V, sizeof(int));
    for (int i0 = 0; i0 < N; i0 += 16) {
        g4_sched_req *r[16];
        const int m = N - i0 < 16 ? N - i0 : 16;
        for (int i = 0; i < m; i++) {
            g4_gen_params gp = {.max_new_tokens = 3, .ignore_eos = 1, .sampling = sp};
            gp.sampling.seed = 1000 + (uint64_t)(i0 + i);
            gp.sampling.has_seed = 1;
            assert_int_equal(g4_sched_submit(s, prompt, 16, &gp, &r[i], &err), G4_OK);
        }
        for (int i = 0; i < m; i++) {
            g4_sched_event ev;
            for (;;) {
                if (!g4_sched_next(r[i], &ev, -1)) continue;
                const int k = ev.kind;
                g4_sched_event_clear(&ev);
                if (k != G4_EV_TEXT) break;
            }
            int32_t ids[3];
            size_t n;
            g4_sched_req_ids(r[i], ids, 3, &n);
            assert_int_equal(n, 3);
            h2[ids[1]]++;
            h3[ids[2]]++;
            g4_sched_req_free(r[i]);
        }
    }
    g4_sched_stats st;
    g4_sched_get_stats(s, &st);
    print_message("drafts verified %llu, accepted %llu\n", (unsigned long long)st.draft_proposed, (unsigned long long)st.draft_accepted);
    assert_true(st.draft_proposed > 0 && st.draft_accepted > 0);
    for (int which = 0; which < 2; which++) {
        const double *p = which ? p3 : p2;
        const int *h = which ? h3 : h2;
        /* bins of expected count >= 5; the rest pooled */
        double chi = 0, pool_e = 0, pool_o = 0;
        int bins = 0;
        for (int v = 0; v < V; v++) {
            if (p[v] == 0) { assert_int_equal(h[v], 0); continue; }
            const double ex = p[v] * N;
            if (ex < 5) { pool_e += ex; pool_o += h[v]; continue; }
            chi += (h[v] - ex) * (h[v] - ex) / ex;
            bins++;
        }
        if (pool_e > 0) { chi += (pool_o - pool_e) * (pool_o - pool_e) / pool_e; bins++; }
        /* chi-square 0.999 quantiles for 1..40 degrees of freedom, roughly: dof + 3.3 sqrt(2 dof) + 5 */
        const int dof = bins - 1;
        const double crit = dof + 3.3 * sqrt(2.0 * dof) + 5;
        print_message("token %d: chi-square %.2f over %d bins (0.1 %% critical ~%.1f)\n", which + 2, chi, bins, crit);
        assert_true(dof >= 2);
        assert_true(chi < crit);
    }
    g4_sched_free(s);
    g4_sampler_free(smp);
    g4_engine_close(e);
    free(lg); free(p2); free(p3); free(h2); free(h3);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_assistant_goldens),
        cmocka_unit_test(test_assistant_mutations_are_caught),
        cmocka_unit_test(test_assistant_tp_invariant),
        cmocka_unit_test(test_assistant_rounds),
        cmocka_unit_test(test_ngram),
        cmocka_unit_test(test_spec_parse),
        cmocka_unit_test(test_policy),
        cmocka_unit_test(test_lossless_goldens),
        cmocka_unit_test(test_lossless_demo),
        cmocka_unit_test(test_lossless_wide),
        cmocka_unit_test(test_rollback_leaves_no_trace),
        cmocka_unit_test(test_sched_lossless),
        cmocka_unit_test(test_sampling_distribution),
    };
    if (getenv("G4_TEST_FILTER")) cmocka_set_test_filter(getenv("G4_TEST_FILTER")); /* e.g. "test_rollback*" */
    return cmocka_run_group_tests(tests, NULL, NULL);
}
