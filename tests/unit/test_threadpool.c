/* The thread pool and the file maps (src/base): every thread of a run gets its own (i, n) once;
 * pinning touches the calling thread only while it runs the pool, so threads it starts later
 * (the server's) are not confined to the pool's first core, and its old mask comes back at free
 * (also through the engine: opening one leaves the opener's mask alone);
 * weight files are mapped at 2 MiB-aligned addresses (so the kernel can map them with huge
 * pages) and read back exactly. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "engine_util.h"
#include "base/mapfile.h"
#include "base/threadpool.h"

typedef struct {
    atomic_int calls[8];
    int nth_seen;
    int cpu0_ok; /* thread 0 ran confined to cpus[0] */
} run_ctx;

static void count_fn(void *p, int ith, int nth) {
    run_ctx *c = p;
    atomic_fetch_add(&c->calls[ith], 1);
    c->nth_seen = nth;
    if (ith == 0) {
        cpu_set_t m;
        c->cpu0_ok = pthread_getaffinity_np(pthread_self(), sizeof m, &m) == 0 && CPU_COUNT(&m) == 1 && CPU_ISSET(0, &m);
    }
}

static void test_each_thread_runs_once(void **state) {
    (void)state;
    for (int n = 1; n <= 4; n++) {
        g4_pool *p;
        g4_err err;
        assert_int_equal(g4_pool_create(n, NULL, &p, &err), 0);
        for (int r = 1; r <= 3; r++) {
            run_ctx c;
            memset(&c, 0, sizeof c);
            g4_pool_run(p, count_fn, &c);
            for (int i = 0; i < n; i++) assert_int_equal(atomic_load(&c.calls[i]), 1);
            assert_int_equal(c.nth_seen, n);
        }
        g4_pool_free(p);
    }
}

static void test_pinning_is_scoped_to_runs(void **state) {
    (void)state;
    if (sysconf(_SC_NPROCESSORS_ONLN) < 2) skip();
    cpu_set_t before, now;
    assert_int_equal(pthread_getaffinity_np(pthread_self(), sizeof before, &before), 0);
    if (!CPU_ISSET(0, &before) || !CPU_ISSET(1, &before)) skip();
    const int cpus[2] = {0, 1};
    g4_pool *p;
    g4_err err;
    assert_int_equal(g4_pool_create(2, cpus, &p, &err), 0);
    /* creating the pool leaves the caller alone */
    assert_int_equal(pthread_getaffinity_np(pthread_self(), sizeof now, &now), 0);
    assert_true(CPU_EQUAL(&before, &now));
    run_ctx c;
    memset(&c, 0, sizeof c);
    g4_pool_run(p, count_fn, &c);
    assert_true(c.cpu0_ok);
    g4_pool_free(p);
    /* and freeing it gives the caller its mask back */
    assert_int_equal(pthread_getaffinity_np(pthread_self(), sizeof now, &now), 0);
    assert_true(CPU_EQUAL(&before, &now));
}

static void test_engine_open_leaves_caller_unpinned(void **state) {
    (void)state;
    if (sysconf(_SC_NPROCESSORS_ONLN) < 2) skip();
    cpu_set_t before, now;
    assert_int_equal(pthread_getaffinity_np(pthread_self(), sizeof before, &before), 0);
    if (!CPU_ISSET(0, &before) || !CPU_ISSET(1, &before)) skip();
    g4_engine_opts o = {.tp = 1, .threads = 2, .model_dir = tu_path("golden/tiny_default")};
    g4_engine *e;
    g4_err err;
    assert_int_equal(g4_engine_open(&o, &e, &err), 0);
    assert_int_equal(pthread_getaffinity_np(pthread_self(), sizeof now, &now), 0);
    assert_true(CPU_EQUAL(&before, &now));
    int seq;
    assert_int_equal(g4_engine_seq_open(e, 4, &seq, &err), 0);
    int32_t id = 2, pos = 0;
    uint8_t want = 1;
    g4_batch b = {.n = 1, .ids = &id, .pos = &pos, .seq = &seq, .logits = &want};
    float *logits = malloc(sizeof(float) * (size_t)g4_engine_vocab(e));
    assert_int_equal(g4_engine_forward(e, &b, logits, &err), 0);
    assert_int_equal(pthread_getaffinity_np(pthread_self(), sizeof now, &now), 0);
    assert_int_equal(CPU_COUNT(&now), 1); /* running the pool pinned it */
    g4_engine_close(e);
    assert_int_equal(pthread_getaffinity_np(pthread_self(), sizeof now, &now), 0);
    assert_true(CPU_EQUAL(&before, &now));
    free(logits);
}

static void test_mapfile_aligned_and_exact(void **state) {
    (void)state;
    char path[512];
    snprintf(path, sizeof path, "%s/mapXXXXXX", tu_tmpdir());
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const size_t n = (3u << 20) + 123; /* not a multiple of any page size */
    unsigned char *buf = malloc(n);
    for (size_t i = 0; i < n; i++) buf[i] = (unsigned char)(i * 131u + 7u);
    assert_int_equal(write(fd, buf, n), (ssize_t)n);
    close(fd);
    g4_mapfile m;
    g4_err err;
    assert_int_equal(g4_mapfile_open(&m, path, &err), 0);
    assert_int_equal(m.size, n);
    assert_int_equal((uintptr_t)m.data % (2u << 20), 0);
    assert_memory_equal(m.data, buf, n);
    g4_mapfile_close(&m);
    unlink(path);
    free(buf);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_each_thread_runs_once),
        cmocka_unit_test(test_pinning_is_scoped_to_runs),
        cmocka_unit_test(test_engine_open_leaves_caller_unpinned),
        cmocka_unit_test(test_mapfile_aligned_and_exact),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
