/* The paged KV cache and the prefix cache, through the engine API (src/gemma4/kvpool.c,
 * src/engine/kvseq.c, src/engine/prefix.c):
 * - exactness: logits after a cache hit are bitwise the logits of a cold prefill of the same
 *   tokens, on the goldens and the demo model, TP 1 and 2, 1 and 2 threads, hits at a block
 *   boundary, inside a block (copy-on-write), past the sliding window, on a prompt that
 *   diverges inside a cached block, and after two sequences computed the same blocks at once;
 *   with the f32 cache and with bf16 / q8_0 ones;
 * - the pool: sliding blocks are released as the window moves, a step the pool cannot hold
 *   fails with G4_ENOMEM and changes nothing, a pool too small for one sequence is refused at
 *   open naming the flag, positions must be appended in order;
 * - the cache's policy: a chat's next turn reuses the whole previous turn, a long shared system
 *   prompt is reused by the requests after the first, eight conversations interleaved round-
 *   robin keep hitting in a pool that holds them but not every spare sliding block. */
#include "kv_util.h"
#include "gemma4/kvpool.h"

static void exact_on(const char *dir, int tp, int threads, const char *kvd) {
    g4_engine_opts o = {.tp = tp, .threads = threads, .model_dir = dir, .max_batch = 24, .max_ctx = 512, .kv_dtype = kvd};
    kt k;
    kt_open(&k, &o);
    const int64_t N = 150;
    int32_t t[150], u[150];
    fill_ids(t, N, k.V, 7);
    memcpy(u, t, sizeof u);
    fill_ids(u + 70, N - 70, k.V, 99);
    float *ref = cold(&k, t, N), *ref2 = cold(&k, u, N);
    g4_engine_prefix_clear(k.e);
    /* a finished sequence of L positions, then the whole prompt: the hit is L (the block
     * boundary 32, inside a block 37, far past every sliding window 133) */
    const int64_t Ls[] = {32, 37, 133};
    for (int i = 0; i < 3; i++) {
        int64_t c;
        const int s = open_seq(&k, t, Ls[i], &c);
        assert_int_equal(c, 0);
        feed(&k, s, t, 0, Ls[i], NULL);
        g4_engine_seq_close(k.e, s);
        char what[128];
        snprintf(what, sizeof what, "%s tp %d x %d: after %lld", dir, tp, threads, (long long)Ls[i]);
        check_hit(&k, t, N, ref, Ls[i], what);
        g4_engine_prefix_clear(k.e);
    }
    /* the whole prompt cached: one token is left to compute */
    int64_t c;
    int s = open_seq(&k, t, N, &c);
    feed(&k, s, t, c, N, NULL);
    g4_engine_seq_close(k.e, s);
    check_hit(&k, t, N, ref, N - 1, "all cached");
    /* another prompt that leaves the cached one inside block 4 (positions 64..79): 70 reused */
    check_hit(&k, u, N, ref2, 70, "diverging inside a block");
    free(ref2);
    /* two sequences computing the same blocks in the same steps: one copy is kept, both exact */
    g4_engine_prefix_clear(k.e);
    int a = open_seq(&k, t, 60, &c), b;
    assert_int_equal(c, 0);
    g4_err err = {0};
    assert_int_equal(g4_engine_seq_open(k.e, 512, &b, &err), 0);
    const int mb = g4_engine_max_batch(k.e);
    for (int64_t s0 = 0; s0 < 60; s0 += mb / 2) {
        int32_t ids[32], pos[32], sq[32];
        uint8_t want[32] = {0};
        int m = 0;
        for (int64_t p = s0; p < s0 + mb / 2 && p < 60; p++)
            for (int w = 0; w < 2; w++) { ids[m] = t[p]; pos[m] = (int32_t)p; sq[m] = w ? b : a; m++; }
        g4_batch bt = {.n = m, .ids = ids, .pos = pos, .seq = sq, .logits = want};
        assert_int_equal(g4_engine_forward(k.e, &bt, k.lg, &err), 0);
    }
    g4_kv_stats st;
    g4_engine_kv_stats(k.e, &st);
    assert_int_equal(st.blocks_used[G4_KV_FULL], 60 / 16 * 1 + 2); /* 3 shared whole blocks, 2 private last ones */
    g4_engine_seq_close(k.e, a);
    g4_engine_seq_close(k.e, b);
    check_hit(&k, t, N, ref, 60, "after twins");
    free(ref);
    kt_close(&k);
}

static void test_hits_are_exact(void **state) {
    (void)state;
    const char *dirs[] = {"golden/tiny_default", "golden/tiny_tp8", "golden/tiny_wide"};
    for (int i = 0; i < 3; i++) exact_on(tu_path("%s", dirs[i]), 1, 1, NULL);
    exact_on(tu_path("golden/tiny_tp8"), 2, 2, NULL);
    exact_on("models/demo", 1, 2, NULL);
    exact_on("models/demo", 2, 1, NULL);
    /* a bf16 or q8_0 cache: hits give the bits of a cold prefill with the same cache */
    exact_on(tu_path("golden/tiny_wide"), 2, 1, "bf16");
    exact_on("models/demo", 1, 1, "q8_0");
}

/* Sliding blocks go as the window moves; full blocks stay; positions must come in order. */
static void test_sliding_released(void **state) {
    (void)state;
    g4_engine_opts o = {.tp = 1, .threads = 1, .model_dir = tu_path("golden/tiny_default"), .max_batch = 8, .max_ctx = 1024,
                        .no_prefix_cache = 1};
    kt k;
    kt_open(&k, &o);
    int32_t t[400];
    fill_ids(t, 400, k.V, 3);
    int seq;
    g4_err err = {0};
    assert_int_equal(g4_engine_seq_open(k.e, 1024, &seq, &err), 0);
    for (int64_t n = 0; n < 400; n += 8) {
        feed(&k, seq, t, n, n + 8, NULL);
        g4_kv_stats st;
        g4_engine_kv_stats(k.e, &st);
        assert_int_equal(st.blocks_used[G4_KV_FULL], (n + 8 + 15) / 16);
        assert_true(st.blocks_used[G4_KV_SLIDE] <= 2); /* window 6, steps of 8, blocks of 16 */
    }
    assert_int_equal(g4_engine_seq_len(k.e, seq), 400);
    /* out of order: refused, nothing changes */
    int32_t id = 5, p = 402;
    uint8_t one = 1;
    g4_batch b = {.n = 1, .ids = &id, .pos = &p, .seq = &seq, .logits = &one};
    assert_int_equal(g4_engine_forward(k.e, &b, k.lg, &err), G4_EINVAL);
    assert_non_null(strstr(err.msg, "position 400"));
    g4_engine_seq_close(k.e, seq);
    g4_kv_stats st;
    g4_engine_kv_stats(k.e, &st);
    assert_int_equal(st.pages_free, st.pages_total);
    kt_close(&k);
}

/* A pool for one sequence of max_ctx: a second one runs out, fails cleanly, and works later. */
static void test_pool_exhaustion(void **state) {
    (void)state;
    g4_engine_opts o = {.tp = 2, .threads = 1, .model_dir = "models/demo", .max_batch = 16, .max_ctx = 128, .no_prefix_cache = 1};
    kt k;
    kt_open(&k, &o);
    const size_t one = g4_engine_seq_bytes(k.e, 128);
    kt_close(&k);
    o.kv_budget_bytes = (int64_t)one;
    kt_open(&k, &o);
    int32_t t[128];
    fill_ids(t, 128, k.V, 11);
    float *ref = cold(&k, t, 128);
    int a, b;
    g4_err err = {0};
    assert_int_equal(g4_engine_seq_open(k.e, 128, &a, &err), 0);
    assert_int_equal(g4_engine_seq_open(k.e, 128, &b, &err), 0);
    feed(&k, a, t, 0, 112, NULL);
    int32_t pos[16], sq[16];
    uint8_t want[16] = {0};
    for (int i = 0; i < 16; i++) { pos[i] = i; sq[i] = b; }
    g4_batch bt = {.n = 16, .ids = t, .pos = pos, .seq = sq, .logits = want};
    int rc = 0;
    for (int i = 0; i < 8 && rc == 0; i++) {
        for (int j = 0; j < 16; j++) pos[j] = i * 16 + j;
        bt.ids = t + i * 16;
        rc = g4_engine_forward(k.e, &bt, k.lg, &err);
    }
    assert_int_equal(rc, G4_ENOMEM);
    assert_non_null(strstr(err.msg, "KV cache is full"));
    const int64_t lb = g4_engine_seq_len(k.e, b);
    /* a goes on, exactly */
    float *got = malloc(sizeof(float) * 16 * (size_t)k.V);
    g4_engine_seq_close(k.e, b);
    feed(&k, a, t, 112, 128, got);
    assert_memory_equal(got, ref + (size_t)112 * (size_t)k.V, sizeof(float) * 16 * (size_t)k.V);
    assert_true(lb > 0 && lb < 128);
    g4_engine_seq_close(k.e, a);
    free(got);
    free(ref);
    kt_close(&k);
    /* a budget below one sequence is refused at open, naming the flag */
    o.kv_budget_bytes = (int64_t)one - 1;
    g4_engine *e;
    assert_int_equal(g4_engine_open(&o, &e, &err), G4_EINVAL);
    assert_non_null(strstr(err.msg, "--kv-budget-mb"));
    assert_non_null(strstr(err.msg, "--max-ctx"));
}

/* Conversations: each turn appends a user part to the previous prompt and answer. */
typedef struct { int32_t t[1200]; int64_t n; } conv;

/* One turn: `user` new tokens, prefilled from the cache, then `answer` tokens fed one at a
 * time as decode steps; the sequence is closed. Returns the positions the cache gave. */
static int64_t turn(kt *k, conv *c, int user, int answer, uint32_t seed) {
    fill_ids(c->t + c->n, user + answer, k->V, seed);
    c->n += user;
    int64_t p;
    const int seq = open_seq(k, c->t, c->n, &p);
    feed(k, seq, c->t, p, c->n, NULL);
    for (int j = 0; j < answer; j++, c->n++) feed(k, seq, c->t, c->n, c->n + 1, NULL);
    g4_engine_seq_close(k->e, seq);
    return p;
}

static void test_chat_and_system_prompt(void **state) {
    (void)state;
    g4_engine_opts o = {.tp = 1, .threads = 1, .model_dir = "models/demo", .max_batch = 32, .max_ctx = 1200};
    kt k;
    kt_open(&k, &o);
    /* (a) every turn reuses the previous turn's prompt and answer */
    static conv c;
    for (int i = 0; i < 6; i++) {
        const int64_t before = c.n, p = turn(&k, &c, 30, 17, 50 + (uint32_t)i);
        if (i) assert_int_equal(p, before);
    }
    /* (b) one long system prompt, many requests: all after the first reuse it whole */
    g4_engine_prefix_clear(k.e);
    int32_t sys[400];
    fill_ids(sys, 300, k.V, 5);
    for (int r = 0; r < 5; r++) {
        fill_ids(sys + 300, 50, k.V, 900 + (uint32_t)r);
        int64_t p;
        const int seq = open_seq(&k, sys, 350, &p);
        if (r) assert_true(p >= 300);
        feed(&k, seq, sys, p, 350, NULL);
        g4_engine_seq_close(k.e, seq);
    }
    g4_kv_stats st;
    g4_engine_kv_stats(k.e, &st);
    assert_true(st.cache_hit_tokens >= 5 * 47 + 4 * 300);
    kt_close(&k);
}

/* Eight conversations round-robin, in a pool that holds their chains and final windows but
 * not every sliding block they dropped on the way: every turn after the first hits whole. */
static void test_interleaved_conversations(void **state) {
    (void)state;
    g4_engine_opts o = {.tp = 1, .threads = 1, .model_dir = "models/demo", .max_batch = 32, .max_ctx = 1024};
    kt k;
    kt_open(&k, &o);
    const size_t one = g4_engine_seq_bytes(k.e, 1024);
    kt_close(&k);
    /* 8 conversations of 3 turns x (150 + 10) = 480 positions: 30 full blocks each and one
     * sliding block at their end, 8 x (30 x ngf + ngs) = 512 pages; the sliding blocks they drop
     * on the way are 8 x 29 x ngs = 928 more. A pool of 720 holds the first, not the second. A
     * single LRU list would evict the next conversation's chain (older) before the running
     * one's fresh spares. */
    o.kv_budget_bytes = (int64_t)one * 5;
    kt_open(&k, &o);
    g4_kv_stats st;
    static conv cs[8];
    int64_t hits = 0, want = 0;
    for (int r = 0; r < 3; r++)
        for (int i = 0; i < 8; i++) {
            const int64_t before = cs[i].n;
            const int64_t p = turn(&k, &cs[i], 150, 10, (uint32_t)(r * 8 + i + 1));
            if (r) { hits += p; want += before; }
        }
    g4_engine_kv_stats(k.e, &st);
    print_message("8 conversations: %lld of %lld positions from the cache; %lld evictions, pages %lld of %lld free, %lld cached\n",
                  (long long)hits, (long long)want, (long long)st.cache_evictions, (long long)st.pages_free,
                  (long long)st.pages_total, (long long)st.pages_cached);
    assert_true(st.cache_evictions > 0); /* the pool was under pressure */
    assert_int_equal(hits, want);
    kt_close(&k);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hits_are_exact),
        cmocka_unit_test(test_sliding_released),
        cmocka_unit_test(test_pool_exhaustion),
        cmocka_unit_test(test_chat_and_system_prompt),
        cmocka_unit_test(test_interleaved_conversations),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
