/* The decode loop creates no threads and allocates no memory: malloc and friends are counted
 * (interposed in this test binary), and so are the threads the pools create; after warm-up,
 * decode steps through g4_engine_forward at TP 2 × 2 threads (bf16/f32 and q8_0 weights) must
 * leave both counters unchanged — across KV block boundaries too (a new block is taken, the
 * completed one goes into the prefix cache, sliding blocks are released).
 * (Skipped under ASan, which owns malloc.) */
#include <stdatomic.h>

#include "engine_util.h"
#include "base/threadpool.h"

#if defined(__SANITIZE_ADDRESS__)
#define G4_COUNT_ALLOCS 0
#else
#define G4_COUNT_ALLOCS 1
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
static atomic_long n_alloc;
void *malloc(size_t n) { atomic_fetch_add(&n_alloc, 1); return __libc_malloc(n); }
void *calloc(size_t a, size_t b) { atomic_fetch_add(&n_alloc, 1); return __libc_calloc(a, b); }
void *realloc(void *p, size_t n) { atomic_fetch_add(&n_alloc, 1); return __libc_realloc(p, n); }
void *aligned_alloc(size_t al, size_t n) { atomic_fetch_add(&n_alloc, 1); return __libc_memalign(al, n); }
int posix_memalign(void **p, size_t al, size_t n) { atomic_fetch_add(&n_alloc, 1); *p = __libc_memalign(al, n); return *p ? 0 : 12; }
#endif

static void test_decode_allocates_nothing(void **state) {
    (void)state;
#if !G4_COUNT_ALLOCS
    skip();
#else
    /* the demo model with q8_0 weights: its phases prepare quantized activations per thread */
    const char *models[] = {"golden/tiny_tp8", "golden/tiny_default", "demo"};
    for (int m = 0; m < 3; m++) {
        g4_engine_opts o = {.tp = 2, .threads = 2, .max_batch = 32,
                            .model_dir = m == 2 ? "models/demo" : tu_path("%s", models[m]), .dtype = m == 2 ? "q8_0" : NULL};
        g4_engine *e;
        g4_err err;
        assert_int_equal(g4_engine_open(&o, &e, &err), 0);
        const int64_t V = g4_engine_vocab(e);
        float *logits = malloc(sizeof(float) * (size_t)V);
        int seq;
        assert_int_equal(g4_engine_seq_open(e, 64, &seq, &err), 0);
        int32_t ids[8] = {2, 105, 17, 33, 44, 55, 66, 77}, pos[8], sq[8];
        uint8_t want[8] = {0, 0, 0, 0, 0, 0, 0, 1};
        for (int i = 0; i < 8; i++) { pos[i] = i; sq[i] = seq; }
        g4_batch b = {.n = 8, .ids = ids, .pos = pos, .seq = sq, .logits = want};
        assert_int_equal(g4_engine_forward(e, &b, logits, &err), 0);
        int32_t id = g4_sample_greedy(logits, (int)V), p = 8;
        uint8_t one = 1;
        g4_batch d = {.n = 1, .ids = &id, .pos = &p, .seq = &seq, .logits = &one};
        assert_int_equal(g4_engine_forward(e, &d, logits, &err), 0); /* warm-up step */
        long a0 = atomic_load(&n_alloc), t0 = g4_pool_threads_created();
        for (int step = 0; step < 40; step++) {
            id = g4_sample_greedy(logits, (int)V);
            p = 9 + step;
            assert_int_equal(g4_engine_forward(e, &d, logits, &err), 0);
        }
        long a1 = atomic_load(&n_alloc), t1 = g4_pool_threads_created();
        print_message("%s: %ld allocations and %ld threads created in 40 decode steps\n", models[m], a1 - a0, t1 - t0);
        assert_int_equal(a1 - a0, 0);
        assert_int_equal(t1 - t0, 0);
        /* the counter works */
        void *(*volatile mf)(size_t) = malloc;
        free(mf(8));
        assert_true(atomic_load(&n_alloc) > a1);
        g4_engine_seq_close(e, seq);
        free(logits);
        g4_engine_close(e);
    }
#endif
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_decode_allocates_nothing)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
