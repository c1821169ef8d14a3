/* test_sched_penalty.c — request penalties, logit_bias and min_tokens through the scheduler, on
 * the tiny checkpoint (ids only): every request's tokens and logprobs equal a reference run that
 * steps the engine one token at a time and adjusts each row with tests/unit/penalty_ref.h (so the
 * logprobs are those of the adjusted distribution), greedy and seeded, four requests batched; the
 * same bits at TP 1, 2 and 4 and 2 threads, and with speculative decoding (n-gram and MTP drafts
 * verified with the penalty state of each token: lossless); a logit_bias of -100 on the greedy
 * answer's first token changes it; image tokens in the prompt (negative prefix-cache keys) are
 * not penalized, whatever id the prompt holds there. */
#include "engine_util.h"
#include "engine/logprobs.h"
#include "engine/scheduler.h"
#include "engine/textgen.h"
#include "penalty_ref.h"

#define NREQ 4
#define MAXN 48

typedef struct {
    float temp;
    int top_k;
    g4_penalty_params pen;
    int32_t stop[2];
    size_t n_stop;
    int n_new;
} cfg;

typedef struct {
    int32_t ids[NREQ][MAXN];
    size_t n[NREQ];
    g4_token_logprob lp[NREQ][MAXN];
    g4_sched_stats st;
} outs;

static const char *model(void) { return tu_path("golden/tiny_default"); }

/* Request i's prompt: a pattern with a repeat (the n-gram drafter finds it), varied by i. */
static void prompt_of(int i, int32_t *p) {
    for (int j = 0; j < 24; j++) p[j] = 3 + (j * 41) % 200;
    for (int j = 0; j < 8; j++) p[16 + j] = p[j];
    p[23] = 3 + (p[23] + 7 * i) % 400;
}

static void gen_params(const cfg *c, int i, g4_gen_params *gp) {
    *gp = (g4_gen_params){.max_new_tokens = c->n_new, .ignore_eos = 1, .skip_special = 1, .stop_ids = c->stop, .n_stop_ids = c->n_stop,
                          .penalty = c->pen};
    g4_sampling_params_default(&gp->sampling);
    gp->sampling.temperature = c->temp;
    gp->sampling.top_k = c->top_k;
    gp->sampling.seed = 77 + (uint64_t)i;
    gp->sampling.has_seed = 1;
}

static void collect(g4_sched_req *r, outs *o, int i) {
    g4_sched_event ev;
    for (;;) {
        if (!g4_sched_next(r, &ev, -1)) continue;
        const int k = ev.kind;
        if (k == G4_EV_ERROR) fail_msg("request %d: %s", i, ev.text);
        g4_sched_event_clear(&ev);
        if (k == G4_EV_DONE) break;
    }
    g4_sched_req_ids(r, o->ids[i], MAXN, &o->n[i]);
    assert_int_equal(g4_sched_req_logprobs(r, 0, o->lp[i], MAXN), o->n[i]);
    g4_sched_req_free(r);
}

/* An ids-only scheduler (no tokenizer) over the tiny checkpoint. */
typedef struct {
    g4_engine *e;
    g4_textgen tg;
    g4_sched *s;
} rig;

static void rig_open(rig *g, const g4_engine_opts *eo) {
    g4_err err = {0};
    if (g4_engine_open(eo, &g->e, &err)) fail_msg("%s", err.msg);
    g->tg = (g4_textgen){.engine = g->e};
    if (g4_sched_create(&g->tg, NULL, &g->s, &err)) fail_msg("%s", err.msg);
}

static void rig_close(rig *g) {
    g4_sched_free(g->s);
    g4_engine_close(g->e);
}

static void run_sched(const char *spec, int always, int tp, int threads, const cfg *c, outs *o) {
    memset(o, 0, sizeof *o);
    g4_engine_opts eo = {.tp = tp, .threads = threads, .model_dir = model(), .max_batch = 64, .speculative = spec, .speculative_always = always};
    rig g;
    rig_open(&g, &eo);
    g4_sched *s = g.s;
    g4_err err = {0};
    g4_sched_req *r[NREQ];
    for (int i = 0; i < NREQ; i++) {
        int32_t prompt[24];
        prompt_of(i, prompt);
        g4_gen_params gp;
        gen_params(c, i, &gp);
        g4_sched_sub_opts x = {.logprobs = 1, .top_logprobs = 5};
        if (g4_sched_submit_ex(s, prompt, 24, &gp, &x, &r[i], &err)) fail_msg("submit: %s", err.msg);
    }
    for (int i = 0; i < NREQ; i++) collect(r[i], o, i);
    g4_sched_get_stats(s, &o->st);
    rig_close(&g);
}

/* The reference: one sequence at a time, one token per forward, each row adjusted by the plain
 * reference and drawn by a sampler of the request's seed; logprobs of the adjusted row. */
static void run_reference(const cfg *c, outs *o) {
    memset(o, 0, sizeof *o);
    g4_engine_opts eo = {.tp = 1, .threads = 1, .model_dir = model(), .max_batch = 64};
    g4_engine *e;
    g4_err err = {0};
    if (g4_engine_open(&eo, &e, &err)) fail_msg("%s", err.msg);
    const int V = (int)g4_engine_vocab(e);
    float *row = malloc(sizeof(float) * (size_t)V), *adj = malloc(sizeof(float) * (size_t)V);
    for (int i = 0; i < NREQ; i++) {
        int32_t prompt[24], pos[24], sq[24];
        uint8_t want[24];
        prompt_of(i, prompt);
        g4_gen_params gp;
        gen_params(c, i, &gp);
        g4_sampler *smp;
        assert_int_equal(g4_sampler_create(V, &gp.sampling, &smp, &err), G4_OK);
        int seq;
        assert_int_equal(g4_engine_seq_open(e, 24 + c->n_new, &seq, &err), G4_OK);
        for (int k = 0; k < 24; k++) { pos[k] = k; sq[k] = seq; want[k] = k == 23; }
        g4_batch b = {.n = 24, .ids = prompt, .pos = pos, .seq = sq, .logits = want};
        assert_int_equal(g4_engine_forward(e, &b, row, &err), G4_OK);
        for (int t = 0; t < c->n_new; t++) {
            reference(row, V, prompt, 24, o->ids[i], (size_t)t, c->stop, c->n_stop, &c->pen, adj);
            const int32_t id = g4_sampler_sample(smp, adj, V);
            assert_true(id >= 0);
            o->ids[i][t] = id;
            g4_logprobs_row(adj, V, c->temp, id, 5, &o->lp[i][t]);
            o->n[i] = (size_t)t + 1;
            int stop = 0;
            for (size_t k = 0; k < c->n_stop; k++) stop |= id == c->stop[k];
            if (stop) break;
            int32_t p = 24 + t;
            uint8_t one = 1;
            g4_batch d = {.n = 1, .ids = &o->ids[i][t], .pos = &p, .seq = &seq, .logits = &one};
            assert_int_equal(g4_engine_forward(e, &d, row, &err), G4_OK);
        }
        g4_engine_seq_close(e, seq);
        g4_sampler_free(smp);
    }
    free(row);
    free(adj);
    g4_engine_close(e);
}

static void same_outputs(const outs *a, const outs *b) {
    for (int i = 0; i < NREQ; i++) {
        assert_int_equal(a->n[i], b->n[i]);
        assert_memory_equal(a->ids[i], b->ids[i], sizeof(int32_t) * a->n[i]);
        tu_same_logprobs(a->lp[i], b->lp[i], a->n[i]);
    }
}

static int repeats(const outs *o) {
    int r = 0;
    for (int i = 0; i < NREQ; i++)
        for (size_t a = 0; a < o->n[i]; a++)
            for (size_t b = 0; b < a; b++) r += o->ids[i][a] == o->ids[i][b];
    return r;
}

static g4_logit_bias bias_set[3];

/* The configurations: greedy and seeded, each penalty, logit_bias, min_tokens, all at once. */
static int configs(cfg *c) {
    int n = 0;
    const g4_penalty_params pf = {.presence = 0.8f, .frequency = 0.6f}, rp = {.repetition = 1.5f}, low = {.repetition = 0.7f, .frequency = -0.5f},
                            all = {.presence = 0.3f, .frequency = 0.4f, .repetition = 1.2f, .bias = bias_set, .n_bias = 3, .min_tokens = 4};
    bias_set[0] = (g4_logit_bias){5, -100.0f};
    bias_set[1] = (g4_logit_bias){9, 2.5f};
    bias_set[2] = (g4_logit_bias){300, -3.0f};
    for (int samp = 0; samp < 2; samp++) {
        const float temp = samp ? 0.9f : 0.0f;
        const int k = samp ? 8 : 0;
        c[n++] = (cfg){.temp = temp, .top_k = k, .pen = pf, .n_new = 40};
        c[n++] = (cfg){.temp = temp, .top_k = k, .pen = rp, .n_new = 40};
        c[n++] = (cfg){.temp = temp, .top_k = k, .pen = low, .n_new = 40};
        c[n++] = (cfg){.temp = temp, .top_k = k, .pen = all, .n_new = 40};
    }
    return n;
}

/* Batched through the scheduler = the plain reference, token for token and bit for bit. */
static void test_matches_reference(void **st) {
    (void)st;
    static outs got, want, plain;
    cfg c[8];
    const int n = configs(c);
    cfg none = {.n_new = 40};
    run_reference(&none, &plain);
    for (int k = 0; k < n; k++) {
        run_reference(&c[k], &want);
        run_sched(NULL, 0, 1, 1, &c[k], &got);
        same_outputs(&want, &got);
        if (k < 3) assert_true(memcmp(want.ids, plain.ids, sizeof want.ids) != 0); /* the penalties changed something */
        print_message("config %d: %zu tokens, %d repeats (none: %d)\n", k, got.n[0], repeats(&got), repeats(&plain));
    }
    assert_true(repeats(&plain) > 0); /* the plain greedy answers repeat themselves: something to penalize */
}

/* min_tokens holds the stop ids back: without it the request ends at its stop id (the greedy
 * answer's second token), with it only after at least min_tokens tokens. */
static void test_min_tokens(void **st) {
    (void)st;
    static outs plain, got, want;
    cfg c = {.n_new = 30};
    run_sched(NULL, 0, 1, 1, &c, &plain);
    c.stop[0] = plain.ids[0][1];
    c.n_stop = 1;
    run_sched(NULL, 0, 1, 1, &c, &got);
    assert_int_equal(got.n[0], 2);
    c.pen.min_tokens = 9;
    run_sched(NULL, 0, 1, 1, &c, &got);
    run_reference(&c, &want);
    same_outputs(&want, &got);
    assert_true(got.n[0] > 9);
    for (size_t t = 0; t < 9; t++) assert_int_not_equal(got.ids[0][t], c.stop[0]);
    for (int i = 0; i < NREQ; i++) assert_true(got.n[i] >= 9);
}

/* Banning the greedy answer's first token changes it (to the runner-up); +100 forces a token. */
static void test_logit_bias(void **st) {
    (void)st;
    static outs plain, got;
    cfg c = {.n_new = 4};
    run_sched(NULL, 0, 1, 1, &c, &plain);
    g4_logit_bias b = {plain.ids[0][0], -100.0f};
    c.pen.bias = &b;
    c.pen.n_bias = 1;
    run_sched(NULL, 0, 1, 1, &c, &got);
    for (int i = 0; i < NREQ; i++)
        for (size_t t = 0; t < got.n[i]; t++) assert_int_not_equal(got.ids[i][t], b.id);
    assert_int_equal(got.ids[0][0], plain.lp[0][0].top_id[1]); /* the runner-up of the plain row */
    b = (g4_logit_bias){321, 100.0f};
    run_sched(NULL, 0, 1, 1, &c, &got);
    for (int i = 0; i < NREQ; i++)
        for (size_t t = 0; t < got.n[i]; t++) assert_int_equal(got.ids[i][t], 321);
}

/* TP 2 and 4, two threads per rank: the same tokens and logprobs as TP 1 (the logits are the
 * same bits; the adjustment runs once per request on the leader). */
static void test_tp_invariant(void **st) {
    (void)st;
    static outs base, other;
    cfg c[8];
    const int n = configs(c);
    for (int k = 3; k < n; k += 4) { /* "all", greedy and seeded */
        run_sched(NULL, 0, 1, 1, &c[k], &base);
        run_sched(NULL, 0, 2, 1, &c[k], &other);
        same_outputs(&base, &other);
        run_sched(NULL, 0, 4, 1, &c[k], &other);
        same_outputs(&base, &other);
        run_sched(NULL, 0, 2, 2, &c[k], &other);
        same_outputs(&base, &other);
    }
}

/* Speculative decoding stays lossless with penalties: each verification row is drawn with the
 * penalty state as of its token (advanced by the accepted drafts before it; a rejected draft
 * never enters it). n-gram and MTP drafts, every round or by the cost policy, TP 1 and 2. */
static void test_speculative_lossless(void **st) {
    (void)st;
    static outs base, spec;
    char mtp[300];
    snprintf(mtp, sizeof mtp, "mtp:%s", tu_path("assistant/asst_copy"));
    const char *specs[] = {"ngram:3,4", mtp};
    cfg c[8];
    const int n = configs(c);
    uint64_t accepted = 0;
    for (int k = 0; k < n; k++) {
        if (k % 4 == 1) continue; /* pf, low and all, greedy and seeded */
        run_sched(NULL, 0, 1, 1, &c[k], &base);
        for (int sp = 0; sp < 2; sp++)
            for (int always = 0; always < 2; always++) {
                const int tp = 1 + (k + sp + always) % 2;
                run_sched(specs[sp], always, tp, 1, &c[k], &spec);
                same_outputs(&base, &spec);
                if (always) assert_true(spec.st.draft_proposed > 0);
                accepted += spec.st.draft_accepted;
            }
    }
    print_message("drafts accepted over the runs: %llu\n", (unsigned long long)accepted);
    assert_true(accepted > 0); /* some rounds accepted drafts and went on drawing after them */
}

/* A prompt with an image block (soft tokens given): the prompt's ids there become negative
 * prefix-cache keys, which the repetition penalty skips; so whatever id the prompt holds at the
 * block, the tokens and logprobs are the same bits. */
static void test_image_tokens_skipped(void **st) {
    (void)st;
    g4_engine_opts eo = {.tp = 1, .threads = 1, .model_dir = model(), .max_batch = 64, .max_seqs = 2};
    rig g;
    rig_open(&g, &eo);
    g4_err err = {0};
    const int H = (int)g4_engine_hidden_size(g.e), n_tok = 8;
    float *soft = malloc(sizeof(float) * (size_t)n_tok * (size_t)H);
    for (int i = 0; i < n_tok * H; i++) soft[i] = (float)((i * 37) % 101) / 101.0f - 0.5f;
    g4_prompt_image im = {.pos = 6, .n_tok = n_tok, .hash = {11, 12}, .soft = soft};
    outs o[2];
    memset(o, 0, sizeof o);
    int32_t prompt[24];
    prompt_of(0, prompt);
    for (int v = 0; v < 2; v++) {
        /* the block holds an id found elsewhere in the prompt, or ids found nowhere else */
        for (int j = 0; j < n_tok; j++) prompt[6 + j] = v ? 499 - j : prompt[0];
        cfg c = {.n_new = 12, .pen = {.repetition = 3.0f, .presence = 1.0f}};
        g4_gen_params gp;
        gen_params(&c, 0, &gp);
        gp.images = &im;
        gp.n_images = 1;
        g4_sched_sub_opts x = {.logprobs = 1, .top_logprobs = 5};
        g4_sched_req *r;
        if (g4_sched_submit_ex(g.s, prompt, 24, &gp, &x, &r, &err)) fail_msg("submit: %s", err.msg);
        collect(r, &o[v], 0);
    }
    assert_int_equal(o[0].n[0], o[1].n[0]);
    assert_memory_equal(o[0].ids[0], o[1].ids[0], sizeof(int32_t) * o[0].n[0]);
    tu_same_logprobs(o[0].lp[0], o[1].lp[0], o[0].n[0]);
    rig_close(&g);
    free(soft);
}

/* Bad penalties are refused at submit, naming the field; min_tokens above max_new_tokens too. */
static void test_submit_errors(void **st) {
    (void)st;
    g4_engine_opts eo = {.tp = 1, .threads = 1, .model_dir = model(), .max_batch = 64};
    rig g;
    rig_open(&g, &eo);
    g4_err err = {0};
    int32_t prompt[24];
    prompt_of(0, prompt);
    g4_logit_bias b = {512, 1.0f}; /* the vocabulary has 512 tokens */
    const struct { g4_penalty_params p; int n_new; const char *word; } bad[] = {
        {{.presence = 3}, 4, "presence_penalty"},
        {{.repetition = -2}, 4, "repetition_penalty"},
        {{.bias = &b, .n_bias = 1}, 4, "logit_bias"},
        {{.min_tokens = 5}, 4, "min_tokens"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        cfg c = {.n_new = bad[i].n_new, .pen = bad[i].p};
        g4_gen_params gp;
        gen_params(&c, 0, &gp);
        g4_sched_req *r = NULL;
        assert_int_equal(g4_sched_submit(g.s, prompt, 24, &gp, &r, &err), G4_EINVAL);
        assert_null(r);
        if (!strstr(err.msg, bad[i].word)) fail_msg("'%s' does not name %s", err.msg, bad[i].word);
    }
    rig_close(&g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_reference),
        cmocka_unit_test(test_min_tokens),
        cmocka_unit_test(test_logit_bias),
        cmocka_unit_test(test_tp_invariant),
        cmocka_unit_test(test_speculative_lossless),
        cmocka_unit_test(test_image_tokens_skipped),
        cmocka_unit_test(test_submit_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
