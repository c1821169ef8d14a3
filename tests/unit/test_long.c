/* Long context: 33,000 positions on a tiny model (tests/data/golden/tiny_long, room for 64k
 * positions, sliding window 40, one full layer) against the fp32 oracle's golden
 * (tiny_long__p33k.json, made by tests/data/golden/make_long.py): a first sequence computes
 * the prompt's first 20,007 positions and ends; a second takes them from the prefix cache (a
 * hit inside a block: copy-on-write) and computes the rest, the KV cache paged throughout
 * (sliding blocks released as the window moves). The last prompt position's logits are within
 * 1e-4 of the oracle's, the greedy ids equal, every step's top-5 logits within 1e-4. */
#include "engine_util.h"
#include "gemma4/kvpool.h"

static void feed(g4_engine *e, int seq, const int32_t *ids, int64_t from, int64_t to, float *last) {
    const int mb = g4_engine_max_batch(e);
    int32_t pos[128], sq[128];
    uint8_t want[128];
    for (int64_t s = from; s < to; s += mb) {
        const int m = (int)(to - s < mb ? to - s : mb);
        for (int i = 0; i < m; i++) { pos[i] = (int32_t)(s + i); sq[i] = seq; want[i] = s + i == to - 1 && last; }
        g4_batch b = {.n = m, .ids = ids + s, .pos = pos, .seq = sq, .logits = want};
        g4_err err = {0};
        if (g4_engine_forward(e, &b, last, &err)) fail_msg("forward at %lld: %s", (long long)s, err.msg);
    }
}

static void test_33k_positions(void **state) {
    (void)state;
    json_t *g = tu_load_json(tu_path("golden/tiny_long__p33k.json"));
    int n, n_gen;
    int32_t *ids = tu_json_ids(json_object_get(g, "prompt_ids"), &n);
    int32_t *want_gen = tu_json_ids(json_object_get(g, "generated_ids"), &n_gen);
    assert_true(n > 32768);
    g4_engine_opts o = {.tp = 1, .threads = 2, .model_dir = tu_path("golden/tiny_long"), .max_batch = 128, .max_ctx = 33024};
    g4_engine *e;
    g4_err err = {0};
    if (g4_engine_open(&o, &e, &err)) fail_msg("%s", err.msg);
    const int64_t V = g4_engine_vocab(e);
    float *lg = malloc(sizeof(float) * (size_t)V);
    int a, b;
    const int64_t L = 20007;
    assert_int_equal(g4_engine_seq_open(e, 33024, &a, &err), 0);
    feed(e, a, ids, 0, L, NULL);
    g4_kv_stats st;
    g4_engine_kv_stats(e, &st);
    /* the sequence holds its full blocks and one window of sliding blocks (40 positions: at
     * most 4 blocks); the sliding blocks it dropped are the prefix cache's (evictable) */
    const int64_t held = st.pages_total - st.pages_free - st.pages_cached;
    print_message("after %lld positions: %lld full blocks; the sequence holds %lld pages, the cache %lld more\n", (long long)L,
                  (long long)st.blocks_used[G4_KV_FULL], (long long)held, (long long)st.pages_cached);
    assert_int_equal(st.blocks_used[G4_KV_FULL], (L + 15) / 16);
    assert_true(held <= (L + 15) / 16 + 3 * 4); /* tiny_long: a page per layer, 1 full and 3 sliding layers */
    g4_engine_seq_close(e, a);
    int64_t cached;
    assert_int_equal(g4_engine_seq_open_cached(e, 33024, ids, n, &b, &cached, &err), 0);
    assert_int_equal(cached, L);
    feed(e, b, ids, cached, n, lg);
    /* the prompt's last logits against the oracle */
    json_t *ref = json_object_get(json_object_get(g, "prompt_last_logits"), "values");
    double worst = 0;
    for (int64_t v = 0; v < V; v++) {
        const double d = fabs(lg[v] - json_real_value(json_array_get(ref, (size_t)v)));
        if (d > worst) worst = d;
    }
    print_message("33k positions (%lld from the cache): max |dlogit| %.3g at the prompt's end\n", (long long)cached, worst);
    assert_true(worst <= 1e-4);
    /* greedy steps */
    json_t *steps = json_object_get(g, "steps");
    for (int k = 0; k < n_gen; k++) {
        json_t *s = json_array_get(steps, (size_t)k);
        json_t *ti = json_object_get(s, "top5_ids"), *tv = json_object_get(s, "top5_values");
        for (size_t i = 0; i < 5; i++) {
            const int64_t id = json_integer_value(json_array_get(ti, i));
            if (fabs(lg[id] - json_real_value(json_array_get(tv, i))) > 1e-4) fail_msg("step %d: logit of %lld off", k, (long long)id);
        }
        int32_t id = g4_sample_greedy(lg, (int)V);
        assert_int_equal(id, want_gen[k]);
        if (k == n_gen - 1) break;
        int32_t p = n + k;
        uint8_t one = 1;
        g4_batch d = {.n = 1, .ids = &id, .pos = &p, .seq = &b, .logits = &one};
        assert_int_equal(g4_engine_forward(e, &d, lg, &err), 0);
    }
    g4_engine_seq_close(e, b);
    g4_engine_close(e);
    free(lg);
    free(ids);
    free(want_gen);
    json_decref(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_33k_positions)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
