/* test_penalty.c — logit_bias, min_tokens and the repetition / frequency / presence penalties
 * (engine/penalty.h) against a reference written plainly from vLLM's definition (token counts ->
 * adjusted logits over the whole vocabulary -> softmax), for each parameter alone and in
 * combinations on random rows with NaN / -inf entries and image-token keys (negative ids) in the
 * prompt; the ban of -100, min_tokens giving way to a grammar, the state advancing only by
 * accepted tokens, and the range errors naming their fields. */
#include "testutil.h"

#include <math.h>

#include "engine/penalty.h"
#include "engine/sampler.h"
#include "penalty_ref.h"

static int same_value(float a, float b) { return (isnan(a) && isnan(b)) || a == b; }

static uint64_t rng_state = 12345;
static uint32_t rnd(void) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33);
}
static float rndf(float lo, float hi) { return lo + (hi - lo) * (float)(rnd() % 1000001) / 1000000.0f; }

/* One random case: a row of V logits (some NaN / -inf / exactly 0), a prompt with image keys,
 * outputs accepted one by one; after each, the module's row equals the reference bit for bit
 * (up to the sign of zero) and the sampler's candidate probabilities equal softmax(adj / T). */
static void one_case(int V, const g4_penalty_params *rp, int with_images) {
    float *row = malloc(sizeof(float) * (size_t)V), *got = malloc(sizeof(float) * (size_t)V), *want = malloc(sizeof(float) * (size_t)V);
    for (int v = 0; v < V; v++) {
        const uint32_t k = rnd() % 50;
        row[v] = k == 0 ? NAN : k == 1 ? -INFINITY : k == 2 ? 0.0f : rndf(-30.0f, 30.0f);
    }
    int32_t prompt[64], out[48], stops[3] = {1, (int32_t)(rnd() % (uint32_t)V), 7};
    const size_t np = 1 + rnd() % 64, no = rnd() % 48;
    for (size_t i = 0; i < np; i++) prompt[i] = with_images && rnd() % 4 == 0 ? (int32_t)(-1 - (int32_t)(rnd() % 100000)) - (1 << 30) : (int32_t)(rnd() % (uint32_t)V);
    for (size_t i = 0; i < no; i++) out[i] = rnd() % 3 ? prompt[rnd() % np] : (int32_t)(rnd() % (uint32_t)V); /* repeats */
    for (size_t i = 0; i < no; i++)
        if (out[i] < 0) out[i] = (int32_t)(rnd() % (uint32_t)V);
    g4_penalty *pn;
    g4_err err = {0};
    if (g4_penalty_create(rp, V, prompt, np, stops, 3, &pn, &err)) fail_msg("create: %s", err.msg);
    g4_sampling_params sp;
    g4_sampling_params_default(&sp);
    sp.temperature = 0.7f;
    g4_sampler *smp;
    assert_int_equal(g4_sampler_create(V, &sp, &smp, &err), G4_OK);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)V);
    float *probs = malloc(sizeof(float) * (size_t)V);
    for (size_t t = 0; t <= no; t++) {
        memcpy(got, row, sizeof(float) * (size_t)V);
        g4_penalty_apply(pn, got, V);
        reference(row, V, prompt, np, out, t, stops, 3, rp, want);
        for (int v = 0; v < V; v++)
            if (!same_value(got[v], want[v])) fail_msg("token %d after %zu outputs: %.9g, reference %.9g", v, t, (double)got[v], (double)want[v]);
        /* ... and the distribution drawn from: softmax(adj / T) over the finite entries */
        const double T = (double)sp.temperature;
        double mx = -HUGE_VAL, z = 0;
        int finite = 0;
        for (int v = 0; v < V; v++)
            if (want[v] > -INFINITY) { finite++; if (want[v] > mx) mx = want[v]; }
        for (int v = 0; v < V; v++)
            if (want[v] > -INFINITY) z += exp(((double)want[v] - mx) / T);
        const int m = g4_sampler_candidates(smp, got, V, ids, probs, V);
        assert_int_equal(m, finite ? finite : G4_SAMPLE_ENOFINITE);
        for (int i = 0; i < m; i++) {
            const double ref = exp(((double)want[ids[i]] - mx) / T) / z;
            if (fabs(probs[i] - ref) > 1e-6 * ref + 1e-12) fail_msg("p(%d) %.9g, reference %.9g", ids[i], (double)probs[i], ref);
        }
        assert_int_equal(g4_penalty_generated(pn), t);
        if (t < no) assert_int_equal(g4_penalty_accept(pn, out[t], &err), G4_OK);
    }
    free(ids);
    free(probs);
    g4_sampler_free(smp);
    g4_penalty_free(pn);
    free(row);
    free(got);
    free(want);
}

static void test_each_parameter(void **st) {
    (void)st;
    g4_logit_bias bias[4] = {{3, 5.5f}, {10, -100.0f}, {11, -2.25f}, {40, 100.0f}};
    const g4_penalty_params cases[] = {
        {.presence = 1.5f},
        {.presence = -2.0f},
        {.frequency = 0.75f},
        {.frequency = -1.25f},
        {.repetition = 1.3f},
        {.repetition = 0.6f},
        {.min_tokens = 5},
        {.bias = bias, .n_bias = 4},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++)
        for (int k = 0; k < 20; k++) one_case(64 + (int)(rnd() % 200), &cases[c], k & 1);
}

static void test_combinations(void **st) {
    (void)st;
    const float pres[] = {0, 0.5f, -1, 2}, freq[] = {0, 0.3f, -0.7f, 2}, rep[] = {0, 1, 1.15f, 0.8f, 3};
    g4_logit_bias bias[6];
    for (int k = 0; k < 400; k++) {
        const size_t nb = rnd() % 7;
        const int V = 50 + (int)(rnd() % 300);
        for (size_t i = 0; i < nb; i++) {
            bias[i].id = (int32_t)(i * 7 + rnd() % 7) % V;
            bias[i].bias = rnd() % 5 == 0 ? -100.0f : rndf(-100, 100);
        }
        size_t n = 0; /* distinct ids */
        for (size_t i = 0; i < nb; i++) {
            int dup = 0;
            for (size_t j = 0; j < n; j++) dup |= bias[j].id == bias[i].id;
            if (!dup) bias[n++] = bias[i];
        }
        g4_penalty_params rp = {.presence = pres[rnd() % 4], .frequency = freq[rnd() % 4], .repetition = rep[rnd() % 5], .min_tokens = rnd() % 4 ? 0 : rnd() % 10,
                         .bias = bias, .n_bias = n};
        one_case(V, &rp, (int)(rnd() & 1));
    }
}

/* Image tokens' keys in the prompt are negative: skipped (a key equal to -id penalizes nothing). */
static void test_image_keys_skipped(void **st) {
    (void)st;
    const int V = 16;
    float row[16], adj[16];
    for (int v = 0; v < V; v++) row[v] = (float)v - 4.0f;
    const int32_t prompt[] = {INT32_MIN, -5, -1, 6, -1 - 6, INT32_MIN + 1};
    g4_penalty_params p = {.repetition = 2.0f};
    g4_penalty *pn;
    g4_err err = {0};
    assert_int_equal(g4_penalty_create(&p, V, prompt, 6, NULL, 0, &pn, &err), G4_OK);
    memcpy(adj, row, sizeof row);
    g4_penalty_apply(pn, adj, V);
    for (int v = 0; v < V; v++) assert_true(adj[v] == (v == 6 ? row[v] / 2.0f : row[v]));
    g4_penalty_free(pn);
}

/* -100 bans (the logit is -inf: never drawn, whatever the temperature); +100 wins greedy. */
static void test_bias_ban_and_force(void **st) {
    (void)st;
    float row[8] = {1, 9, 3, 2, -1, 0, 4, 8.5f};
    g4_logit_bias b[2] = {{1, -100.0f}, {4, 100.0f}};
    g4_penalty_params p = {.bias = b, .n_bias = 1};
    g4_penalty *pn;
    g4_err err = {0};
    assert_int_equal(g4_penalty_create(&p, 8, NULL, 0, NULL, 0, &pn, &err), G4_OK);
    float a[8];
    memcpy(a, row, sizeof row);
    g4_penalty_apply(pn, a, 8);
    assert_true(isinf(a[1]) && a[1] < 0);
    assert_int_equal(g4_sample_greedy(a, 8), 7);
    g4_sampling_params sp;
    g4_sampling_params_default(&sp);
    sp.temperature = 50.0f; /* flat: every finite token is likely, the banned one never */
    sp.seed = 3;
    sp.has_seed = 1;
    g4_sampler *smp;
    assert_int_equal(g4_sampler_create(8, &sp, &smp, &err), G4_OK);
    for (int i = 0; i < 2000; i++) assert_int_not_equal(g4_sampler_sample(smp, a, 8), 1);
    g4_sampler_free(smp);
    g4_penalty_free(pn);
    p.bias = b + 1;
    assert_int_equal(g4_penalty_create(&p, 8, NULL, 0, NULL, 0, &pn, &err), G4_OK);
    memcpy(a, row, sizeof row);
    g4_penalty_apply(pn, a, 8);
    assert_int_equal(g4_sample_greedy(a, 8), 4);
    assert_true(a[4] == 99.0f);
    g4_penalty_free(pn);
}

/* min_tokens: the stop ids are -inf for the first min_tokens draws, then free; when only stop ids
 * are finite (a grammar that allows only the end) the row is left as it was. Stop strings are
 * live from token min_tokens + 1 on. */
static void test_min_tokens(void **st) {
    (void)st;
    const int32_t stops[] = {2, 5, 2};
    g4_penalty_params p = {.min_tokens = 3};
    g4_penalty *pn;
    g4_err err = {0};
    assert_int_equal(g4_penalty_create(&p, 6, NULL, 0, stops, 3, &pn, &err), G4_OK);
    const float row[6] = {0, 1, 9, 2, 3, 8};
    for (int t = 0; t < 5; t++) {
        float a[6];
        memcpy(a, row, sizeof a);
        g4_penalty_apply(pn, a, 6);
        assert_int_equal(g4_sample_greedy(a, 6), t < 3 ? 4 : 2);
        assert_int_equal(g4_penalty_stops_live(pn), t > 3);
        float only[6] = {-INFINITY, NAN, 1.5f, -INFINITY, -INFINITY, -INFINITY}; /* only the end is allowed */
        g4_penalty_apply(pn, only, 6);
        assert_true(only[2] == 1.5f);
        assert_int_equal(g4_penalty_accept(pn, 4, &err), G4_OK);
    }
    assert_true(g4_penalty_stops_live(pn));
    g4_penalty_free(pn);
    assert_true(g4_penalty_stops_live(NULL));
}

/* The state is what was accepted, nothing else: applying does not advance it, and a state fed
 * the accepted tokens of a run with rejected drafts equals one fed them without (rollback). */
static void test_state_by_accept(void **st) {
    (void)st;
    const int V = 40;
    float row[40], a[40], b[40];
    for (int v = 0; v < V; v++) row[v] = rndf(-5, 5);
    const int32_t prompt[] = {1, 2, 3, 3, 9};
    g4_penalty_params p = {.presence = 0.4f, .frequency = 0.3f, .repetition = 1.2f};
    g4_penalty *x, *y;
    g4_err err = {0};
    assert_int_equal(g4_penalty_create(&p, V, prompt, 5, NULL, 0, &x, &err), G4_OK);
    assert_int_equal(g4_penalty_create(&p, V, prompt, 5, NULL, 0, &y, &err), G4_OK);
    const int32_t toks[] = {3, 7, 7, 30, 3};
    for (int i = 0; i < 5; i++) {
        memcpy(a, row, sizeof row);
        g4_penalty_apply(x, a, V);
        g4_penalty_apply(x, a + 0, 0); /* nothing */
        memcpy(b, row, sizeof row);
        g4_penalty_apply(x, b, V); /* applying twice from the same row: the same row */
        assert_memory_equal(a, b, sizeof a);
        assert_int_equal(g4_penalty_accept(x, toks[i], &err), G4_OK);
        assert_int_equal(g4_penalty_accept(y, toks[i], &err), G4_OK);
    }
    memcpy(a, row, sizeof row);
    memcpy(b, row, sizeof row);
    g4_penalty_apply(x, a, V);
    g4_penalty_apply(y, b, V);
    assert_memory_equal(a, b, sizeof a);
    assert_int_equal(g4_penalty_accept(x, V, &err), G4_EINVAL);
    assert_int_equal(g4_penalty_accept(x, -1, &err), G4_EINVAL);
    /* many distinct tokens: the table grows */
    for (int i = 0; i < 5000; i++) assert_int_equal(g4_penalty_accept(y, i % V, &err), G4_OK);
    g4_penalty_free(x);
    g4_penalty_free(y);
}

static void expect_bad(const g4_penalty_params *p, int V, const char *field) {
    g4_err err = {0};
    assert_int_equal(g4_penalty_params_validate(p, V, &err), G4_EINVAL);
    if (!strstr(err.msg, field)) fail_msg("'%s' does not name %s", err.msg, field);
    g4_penalty *pn = (g4_penalty *)1;
    assert_int_equal(g4_penalty_create(p, V, NULL, 0, NULL, 0, &pn, &err), G4_EINVAL);
    assert_null(pn);
}

static void test_param_errors(void **st) {
    (void)st;
    g4_penalty_params z = {0};
    g4_err err = {0};
    assert_int_equal(g4_penalty_params_validate(&z, 10, &err), G4_OK);
    assert_false(g4_penalty_params_active(&z));
    z.repetition = 1.0f;
    assert_false(g4_penalty_params_active(&z));
    g4_penalty_params p = {.presence = 2.5f};
    expect_bad(&p, 10, "presence_penalty");
    p = (g4_penalty_params){.presence = NAN};
    expect_bad(&p, 10, "presence_penalty");
    p = (g4_penalty_params){.frequency = -2.01f};
    expect_bad(&p, 10, "frequency_penalty");
    p = (g4_penalty_params){.repetition = -1.0f};
    expect_bad(&p, 10, "repetition_penalty");
    p = (g4_penalty_params){.repetition = INFINITY};
    expect_bad(&p, 10, "repetition_penalty");
    p = (g4_penalty_params){.min_tokens = -1};
    expect_bad(&p, 10, "min_tokens");
    g4_logit_bias b[3] = {{3, 1.0f}, {10, 1.0f}, {3, 2.0f}};
    p = (g4_penalty_params){.bias = b + 1, .n_bias = 1};
    expect_bad(&p, 10, "logit_bias"); /* id 10 of a 10-token vocabulary */
    p = (g4_penalty_params){.bias = b, .n_bias = 1};
    assert_int_equal(g4_penalty_params_validate(&p, 10, &err), G4_OK);
    b[0].bias = 100.5f;
    expect_bad(&p, 10, "logit_bias");
    b[0].bias = NAN;
    expect_bad(&p, 10, "logit_bias");
    b[0].bias = 1.0f;
    b[1].id = 4;
    p.n_bias = 3;
    expect_bad(&p, 10, "twice");
    b[1].id = -1;
    p.n_bias = 2;
    expect_bad(&p, 10, "logit_bias");
    p = (g4_penalty_params){.n_bias = 2};
    expect_bad(&p, 10, "logit_bias");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_each_parameter),
        cmocka_unit_test(test_combinations),
        cmocka_unit_test(test_image_keys_skipped),
        cmocka_unit_test(test_bias_ban_and_force),
        cmocka_unit_test(test_min_tokens),
        cmocka_unit_test(test_state_by_accept),
        cmocka_unit_test(test_param_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
