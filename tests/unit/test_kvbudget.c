/* The default KV budget (src/engine/kvbudget.c): sized from the memory free once the weights are
 * held, less a reserve, over the local ranks; never above the older quarter-of-RAM rule, never
 * below one sequence; a cgroup limit counts. The 60-layer 31B in 4-bit at TP 2 on a 24 GiB
 * machine, where the older rule gave KV plus weights beyond RAM, now fits. Also the weight bytes
 * a rank holds (g4_model_source_rank_bytes) and the engine's note. */
#include <sys/stat.h>

#include "engine_util.h"
#include "engine/kvbudget.h"
#include "engine/model_source.h"

#define MIB ((uint64_t)1 << 20)
#define GIB ((uint64_t)1 << 30)

static void test_sizing(void **state) {
    (void)state;
    char why[320];
    /* the case: 24 GiB, 22 free, 17 GiB of q4_0 weights over two ranks */
    g4_mem_info m = {.total = 24 * GIB, .available = 22 * GIB};
    size_t b = g4_kv_default_budget(&m, 17 * GIB, 2, 64 * MIB, why, sizeof why);
    print_message("%s\n", why);
    const uint64_t reserve = GIB + 24 * GIB / 16;
    assert_int_equal(b, (22 * GIB - 17 * GIB - reserve) / 2);
    assert_true(2 * b + 17 * GIB + reserve <= m.available); /* the older rule: 2 x 3 GiB + 17 GiB > 22 */
    assert_true(b < m.total / 4 / 2);
    assert_non_null(strstr(why, "MiB per rank"));
    assert_non_null(strstr(why, "MemAvailable"));
    /* plenty free: the older rule caps it */
    m = (g4_mem_info){.total = 256 * GIB, .available = 250 * GIB};
    assert_int_equal(g4_kv_default_budget(&m, 10 * GIB, 2, 64 * MIB, why, sizeof why), 256 * GIB / 4 / 2);
    assert_non_null(strstr(why, "quarter of RAM"));
    /* the reserve is at most 8 GiB */
    m = (g4_mem_info){.total = 512 * GIB, .available = 100 * GIB};
    assert_int_equal(g4_kv_default_budget(&m, 50 * GIB, 1, 0, NULL, 0), 100 * GIB - 50 * GIB - 8 * GIB);
    /* weights beyond what is free: one sequence, and the note says memory is short */
    m = (g4_mem_info){.total = 24 * GIB, .available = 10 * GIB};
    assert_int_equal(g4_kv_default_budget(&m, 17 * GIB, 2, 300 * MIB, why, sizeof why), 300 * MIB);
    assert_non_null(strstr(why, "memory is short"));
    /* a cgroup with less left than the host: it decides */
    m = (g4_mem_info){.total = 64 * GIB, .available = 60 * GIB, .cg_limit = 16 * GIB, .cg_used = 2 * GIB};
    assert_int_equal(g4_kv_default_budget(&m, 4 * GIB, 1, 0, why, sizeof why), 14 * GIB - 4 * GIB - (GIB + 4 * GIB));
    assert_non_null(strstr(why, "cgroup"));
    /* no MemAvailable (old kernels): MemTotal */
    m = (g4_mem_info){.total = 32 * GIB};
    assert_int_equal(g4_kv_default_budget(&m, 24 * GIB, 1, 0, why, sizeof why), 32 * GIB - 24 * GIB - 3 * GIB);
    assert_non_null(strstr(why, "MemTotal"));
    /* what this machine says */
    g4_mem_info here;
    g4_mem_info_read(&here);
    assert_true(here.total > 0 && here.available > 0 && here.available <= here.total);
}

/* The weight bytes of the ranks add up to the checkpoint's tensors (the demo: bf16 matrices,
 * fp32-held norms), and converting to q8_0 shrinks them. */
static void test_rank_bytes(void **state) {
    (void)state;
    g4_model_source src;
    g4_err err = {0};
    assert_int_equal(g4_model_source_open(&src, "models/demo", -1, 2, 0, &err), G4_OK);
    uint64_t sum = 0, q8 = 0;
    for (int r = 0; r < 2; r++) {
        g4_tp_plan plan;
        assert_int_equal(g4_tp_plan_make(&src.cfg, g4_model_source_wdtype(&src, G4_DTYPE_AS_STORED), 2, r, &plan, &err), G4_OK);
        sum += g4_model_source_rank_bytes(&src, &plan, G4_DTYPE_AS_STORED);
        q8 += g4_model_source_rank_bytes(&src, &plan, (g4_dtype_req){G4_DT_Q8_0, -1});
        g4_tp_plan_free(&plan);
    }
    struct stat st;
    assert_int_equal(stat("models/demo/model.safetensors", &st), 0);
    print_message("two ranks hold %llu bytes (bf16), %llu (q8_0); the file has %lld\n", (unsigned long long)sum, (unsigned long long)q8,
                  (long long)st.st_size);
    assert_true(sum > (uint64_t)st.st_size * 9 / 10 && sum < (uint64_t)st.st_size * 12 / 10);
    assert_true(q8 < sum);
    g4_model_source_close(&src);
}

static void test_engine_note(void **state) {
    (void)state;
    g4_engine_opts o = {.tp = 2, .threads = 1, .model_dir = "models/demo", .max_ctx = 256};
    g4_engine *e;
    g4_err err = {0};
    assert_int_equal(g4_engine_open(&o, &e, &err), G4_OK);
    g4_mem_info m;
    g4_mem_info_read(&m);
    print_message("%s\n", g4_engine_kv_budget_note(e));
    assert_true(g4_engine_kv_budget(e) <= m.total / 4 / 2);
    assert_true(g4_engine_kv_budget(e) >= g4_engine_seq_bytes(e, 256));
    assert_non_null(strstr(g4_engine_kv_budget_note(e), "MiB per rank ("));
    g4_engine_close(e);
    o.kv_budget_bytes = 40 << 20;
    assert_int_equal(g4_engine_open(&o, &e, &err), G4_OK);
    assert_int_equal(g4_engine_kv_budget(e), 40 << 20);
    assert_string_equal(g4_engine_kv_budget_note(e), "40 MiB per rank (--kv-budget-mb)");
    g4_engine_close(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sizing),
        cmocka_unit_test(test_rank_bytes),
        cmocka_unit_test(test_engine_note),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
