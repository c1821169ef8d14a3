/* Speculative decoding: the MTP assistant against the fp32 oracle's goldens
 * (tests/data/assistant), the same drafts at every TP degree, the KV rollback, prompt lookup,
 * the policy, and lossless generation (greedy and seeded sampling) with speculation on and off. */
#include "gemma4/assistant.h" /* before cmocka: its fail() macro meets comm.h's ops->fail */

#include "engine_util.h"

#include "engine/scheduler.h"
#include "engine/speculate.h"

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
    g4_batch b = {n, tok, pos, sq, want};
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
                g4_batch b = {k + 1, ids, pos, sq, fl};
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_assistant_goldens),
        cmocka_unit_test(test_assistant_mutations_are_caught),
        cmocka_unit_test(test_assistant_tp_invariant),
        cmocka_unit_test(test_assistant_rounds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
