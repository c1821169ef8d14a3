/* The leader's KV-op buffer flushed mid-operation (src/engine/kvseq.c, g4_kvalloc in
 * src/gemma4/kvpool.c): a sequence of 220,000 positions is cached, then a second sequence takes
 * it from the prefix cache; pointing its table at 13,750 cached blocks takes more than the
 * G4_KV_OPS_CAP (65,536) words the leader sends with one command, so the buffer is flushed to the
 * ranks in the middle of the call (the engine sends a KV_OPS command there). A rank's store that
 * applies what the flushes and the later sends carry, in order, ends with the leader's tables:
 * the new sequence's blocks are the cached sequence's. A failing flush marks the manager failed
 * (the engine then fails the step: "sending KV ops to the ranks failed"). Through the engine
 * this needs 210k positions computed first (quadratic attention: not affordable here). */
#include "engine_util.h"
#include "engine/kvseq.h"
#include "engine/kvalloc.h"
#include "gemma4/kvpool.h"
#include "model/config.h"
#include "model/split.h"

enum { N_POS = 220000, MAX_CTX = 1 << 18, STEP = 4096 };

/* The ranks' side: a store that applies every op the leader sends. */
typedef struct {
    g4_kvstore st;
    int flushes, fail;
    int64_t most;          /* largest flush in words */
} rank_sink;

static int flush_cb(void *ctx, const int32_t *ops, int64_t n, g4_err *err) {
    rank_sink *r = ctx;
    if (r->fail) return g4_err_set(err, G4_ECOMM, "the ranks are gone");
    r->flushes++;
    if (n > r->most) r->most = n;
    return g4_kvstore_apply(&r->st, ops, n, err);
}

/* What the engine does ahead of each step: send the queued ops, clear. */
static void send(g4_kvmgr *m, rank_sink *r) {
    int64_t n;
    const int32_t *ops = g4_kvmgr_ops(m, &n);
    g4_err err = {0};
    if (n && g4_kvstore_apply(&r->st, ops, n, &err)) fail_msg("a rank refused the ops: %s", err.msg);
    g4_kvmgr_ops_clear(m);
}

/* Computes (as far as the tables go) tok[0..n) into seq in steps of STEP positions. */
static void grow(g4_kvmgr *m, rank_sink *r, int seq, const int32_t *tok, int64_t n) {
    static int32_t pos[STEP], sq[STEP];
    static uint8_t want[STEP];
    for (int64_t s = 0; s < n; s += STEP) {
        const int k = (int)(n - s < STEP ? n - s : STEP);
        for (int i = 0; i < k; i++) { pos[i] = (int32_t)(s + i); sq[i] = seq; want[i] = 0; }
        g4_batch b = {.n = k, .ids = tok + s, .pos = pos, .seq = sq, .logits = want};
        g4_err err = {0};
        if (g4_kvmgr_prepare(m, &b, &err)) fail_msg("prepare at %lld: %s", (long long)s, err.msg);
        send(m, r);
        g4_kvmgr_commit(m, &b);
    }
}

/* A leader's manager and a rank's store on tiny_default's geometry, with room for N_POS
 * positions of full-layer blocks; a sequence of N_POS positions computed into slot 0. */
typedef struct {
    g4_config cfg;
    g4_tp_plan plan;
    g4_kv_geom g;
    rank_sink *r;
    g4_kvmgr *m;
    int32_t *tok;
    int32_t *blocks;       /* [N_POS / BS] slot 0's full blocks on the rank */
} fixture;

static void fx_open(fixture *x, uint32_t mul) {
    g4_err err = {0};
    if (g4_config_load(tu_path("golden/tiny_default/config.json"), &x->cfg, &err)) fail_msg("%s", err.msg);
    if (g4_tp_plan_make(&x->cfg, -1, 1, 0, &x->plan, &err)) fail_msg("%s", err.msg);
    if (g4_kv_geom_make(&x->cfg, &x->plan, G4_DT_F32, &x->g, &err)) fail_msg("%s", err.msg);
    const int64_t n_pages = ((int64_t)N_POS / G4_KV_BLOCK + 256) * (x->g.ng[0] + x->g.ng[1]);
    x->r = calloc(1, sizeof *x->r);
    if (g4_kvstore_create(&x->r->st, &x->cfg, &x->plan, G4_DT_F32, n_pages, 2, MAX_CTX, &err)) fail_msg("%s", err.msg);
    if (g4_kvmgr_create(&x->g, n_pages, 2, MAX_CTX, STEP, 1, flush_cb, x->r, &x->m, &err)) fail_msg("%s", err.msg);
    x->tok = malloc(sizeof(int32_t) * N_POS);
    for (int64_t i = 0; i < N_POS; i++) x->tok[i] = (int32_t)(3 + ((uint32_t)i * mul) % 500);
    g4_kvmgr_open(x->m, 0, MAX_CTX);
    send(x->m, x->r);
    grow(x->m, x->r, 0, x->tok, N_POS);
    assert_int_equal(g4_kvmgr_len(x->m, 0), N_POS);
    x->blocks = malloc(sizeof(int32_t) * (N_POS / G4_KV_BLOCK));
    for (int64_t j = 0; j < N_POS / G4_KV_BLOCK; j++) x->blocks[j] = g4_kv_block(&x->r->st, 0, G4_KV_FULL, j);
}

static void fx_close(fixture *x) {
    g4_kvmgr_free(x->m);
    g4_kvstore_free(&x->r->st);
    free(x->r);
    free(x->tok);
    free(x->blocks);
    g4_kv_geom_free(&x->g);
    g4_tp_plan_free(&x->plan);
    g4_config_free(&x->cfg);
}

static void test_flush_mid_open(void **state) {
    (void)state;
    fixture x;
    fx_open(&x, 7919);
    rank_sink *r = x.r;
    g4_kvmgr *m = x.m;
    assert_int_equal(r->flushes, 0); /* a step's ops fit one command */
    g4_kvmgr_close(m, 0);
    send(m, r);
    const int64_t hit = g4_kvmgr_open_cached(m, 1, MAX_CTX, x.tok, N_POS);
    int64_t queued;
    g4_kvmgr_ops(m, &queued);
    print_message("%lld of %d positions from the cache; %d flush(es) of up to %lld words during the open, %lld words queued after\n",
                  (long long)hit, N_POS, r->flushes, (long long)r->most, (long long)queued);
    assert_false(g4_kvmgr_failed(m));
    assert_true(hit >= N_POS - G4_KV_BLOCK);
    assert_true(r->flushes >= 1);
    assert_true(r->most <= G4_KV_OPS_CAP);
    send(m, r);
    /* the rank's table is the leader's: every cached block, in place */
    for (int64_t j = 0; j < hit / G4_KV_BLOCK; j++)
        if (g4_kv_block(&r->st, 1, G4_KV_FULL, j) != x.blocks[j])
            fail_msg("full block %lld of the new sequence: %d on the rank, %d cached", (long long)j, g4_kv_block(&r->st, 1, G4_KV_FULL, j), x.blocks[j]);
    /* and it goes on from there */
    int32_t pos = (int32_t)hit, sq = 1;
    uint8_t want = 1;
    g4_batch b = {.n = 1, .ids = x.tok + hit, .pos = &pos, .seq = &sq, .logits = &want};
    g4_err err = {0};
    if (g4_kvmgr_prepare(m, &b, &err)) fail_msg("the next position: %s", err.msg);
    send(m, r);
    g4_kvmgr_commit(m, &b);
    assert_int_equal(g4_kvmgr_len(m, 1), hit + 1);
    assert_true(g4_kv_block(&r->st, 1, G4_KV_FULL, hit / G4_KV_BLOCK) >= 0);
    fx_close(&x);
}

/* A flush that cannot reach the ranks leaves the manager failed (the engine's step then fails). */
static void test_flush_failure(void **state) {
    (void)state;
    fixture x;
    fx_open(&x, 104729);
    g4_kvmgr_close(x.m, 0);
    send(x.m, x.r);
    x.r->fail = 1;
    g4_kvmgr_open_cached(x.m, 1, MAX_CTX, x.tok, N_POS);
    assert_true(g4_kvmgr_failed(x.m));
    fx_close(&x);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_flush_mid_open),
        cmocka_unit_test(test_flush_failure),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
