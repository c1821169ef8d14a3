/* The grouped q4_0 layout at the model level (engine.c puts the q4_0 matrices in the layout the
 * kernel set reads; gemma4/weights.c g4_weights_set_q4_layout): on a checkpoint wide enough for
 * full groups of 16 blocks (hidden 512: q/k/v/gate/up rows of one group; down slices of 768 (a group and a partial one)
 * columns; global layers' o slices of 512; the q4_0 tied head, whose lookup ungroups its rows), avx512 logits are bitwise those of the block layout
 * (G4_Q4_LAYOUT=blocks) for TP 1, TP 2 and batch shapes, read from the checkpoint's map or
 * copied (--copy). Skipped where the CPU has no avx512. */
#include <sys/stat.h>

#include "engine_util.h"
#include "kernels/kernels.h"
#include "model/artifact.h"
#include "model/synth.h"

static const int32_t prompt[] = {2, 105, 17, 300, 41, 7, 19, 88, 240, 3};
#define NP ((int)(sizeof prompt / sizeof *prompt))

/* tiny_default with every matrix at least one group wide, 2 layers (one sliding, one global). */
static const char *wide_model(void) {
    static char dir[600];
    snprintf(dir, sizeof dir, "%s/q4wide", tu_tmpdir());
    struct stat sb;
    if (stat(dir, &sb) == 0) return dir;
    char cfgp[700];
    snprintf(cfgp, sizeof cfgp, "%s/q4wide_config.json", tu_tmpdir());
    json_t *c = tu_load_json(tu_path("golden/tiny_default/config.json"));
    json_t *t = json_object_get(c, "text_config") ? json_object_get(c, "text_config") : c;
    json_object_set_new(t, "hidden_size", json_integer(512));
    json_object_set_new(t, "intermediate_size", json_integer(6144));
    json_object_set_new(t, "head_dim", json_integer(256));
    json_object_set_new(t, "global_head_dim", json_integer(512));
    json_object_set_new(t, "num_hidden_layers", json_integer(2));
    json_t *lt = json_object_get(t, "layer_types");
    if (lt) {
        json_t *n = json_array();
        json_array_append_new(n, json_string("sliding_attention"));
        json_array_append_new(n, json_string("full_attention"));
        json_object_set_new(t, "layer_types", n);
    }
    assert_int_equal(json_dump_file(c, cfgp, JSON_INDENT(1)), 0);
    json_decref(c);
    g4_err err;
    const int rc = g4_synth_write(&(g4_synth_opts){.like = cfgp, .seed = 5, .out_dir = dir, .format = G4_SYNTH_BF16}, &err);
    if (rc) fail_msg("synth: %s", err.msg);
    return dir;
}

/* Greedy generation of 4 tokens on the avx512 set (tu_generate), failing with its message;
 * the weights converted to q4_0 unless o names another dtype. */
static void gen4(g4_engine_opts o, tu_run *r) {
    g4_err err;
    if (!o.dtype) o.dtype = "q4_0";
    o.isa = "avx512";
    if (tu_generate(&o, prompt, NP, 4, r, &err)) fail_msg("%s (TP %d): %s", o.model_dir, o.tp, err.msg);
}

static void test_grouped_equals_blocks(void **state) {
    (void)state;
    if (!g4_kernels_by_name("avx512")) skip();
    const char *m = wide_model();
    const struct { int tp, threads, max_batch, copy; } cfgs[] = {{1, 1, 0, 0}, {2, 1, 0, 0}, {2, 2, 3, 1}, {1, 2, 1, 1}};
    tu_run base;
    setenv("G4_Q4_LAYOUT", "blocks", 1);
    gen4((g4_engine_opts){.tp = 1, .threads = 1, .model_dir = m}, &base);
    unsetenv("G4_Q4_LAYOUT");
    for (size_t c = 0; c < sizeof cfgs / sizeof *cfgs; c++) {
        tu_run r;
        gen4((g4_engine_opts){.tp = cfgs[c].tp, .threads = cfgs[c].threads, .max_batch = cfgs[c].max_batch,
                              .load_copy = cfgs[c].copy, .model_dir = m},
             &r);
        if (r.vocab != base.vocab || memcmp(r.logits, base.logits, sizeof(float) * (size_t)r.vocab * 4))
            fail_msg("grouped TP %d x %d threads, max batch %d, copy %d: logits differ from the blocks", cfgs[c].tp,
                     cfgs[c].threads, cfgs[c].max_batch, cfgs[c].copy);
        tu_run_free(&r);
    }
    tu_run_free(&base);
}

static const char *shard_q4(const char *model, int layout, const char *name) {
    static char dirs[2][600];
    char *d = dirs[layout == G4_SHARD_Q4_GROUPED];
    snprintf(d, 600, "%s/%s", tu_tmpdir(), name);
    g4_shard_opts so = {.model_dir = model, .out_dir = d, .tp = 2, .dtype = G4_DT_Q4_0, .q4_layout = layout, .force = 1};
    g4_err err;
    if (g4_artifact_shard(&so, &err)) fail_msg("shard %s: %s", name, err.msg);
    return d;
}

/* Artifacts sharded in either q4_0 layout give, on every kernel set, the logits of the checkpoint
 * converted at load, bit for bit; the layout the set reads is mapped in place (nothing copied),
 * the other one re-laid out in memory. */
static void test_artifact_layouts(void **state) {
    (void)state;
    const char *m = wide_model();
    const char *grouped = shard_q4(m, G4_SHARD_Q4_GROUPED, "q4wide-grouped"), *blocks = shard_q4(m, G4_SHARD_Q4_BLOCKS, "q4wide-blocks");
    char mp[700];
    snprintf(mp, sizeof mp, "%s/manifest.json", grouped);
    char *man = tu_read_file(mp, NULL);
    assert_non_null(man);
    assert_non_null(strstr(man, "\"q4_layout\": \"grouped\""));
    free(man);
    const char *isas[] = {"scalar", "avx2", "avx512"};
    for (int k = 0; k < 3; k++) {
        const g4_kernels *K = g4_kernels_by_name(isas[k]);
        if (!K) continue;
        g4_err err;
        tu_run ref, r;
        g4_engine_opts o = {.tp = 2, .threads = 1, .model_dir = m, .dtype = "q4_0", .isa = isas[k]};
        if (tu_generate(&o, prompt, NP, 4, &ref, &err)) fail_msg("checkpoint, %s: %s", isas[k], err.msg);
        const char *dirs[] = {grouped, blocks};
        for (int d = 0; d < 2; d++) {
            g4_engine_opts a = {.tp = 2, .threads = d + 1, .max_batch = d ? 3 : 0, .model_dir = dirs[d], .isa = isas[k], .verify = 1};
            if (tu_generate(&a, prompt, NP, 4, &r, &err)) fail_msg("%s, %s: %s", dirs[d], isas[k], err.msg);
            if (memcmp(r.logits, ref.logits, sizeof(float) * (size_t)r.vocab * 4))
                fail_msg("%s on %s: logits differ from the checkpoint converted at load", dirs[d], isas[k]);
            tu_run_free(&r);
            const int native = (g4_q4_0_layout_for(K) == G4_Q4_GROUPED) == (d == 0);
            const size_t c = tu_copied_weight_bytes(a);
            print_message("%s on %s: %zu bytes copied\n", dirs[d], isas[k], c);
            if (native ? c != 0 : c == 0) fail_msg("%s on %s: %zu weight bytes copied", dirs[d], isas[k], c);
        }
        tu_run_free(&ref);
    }
}

/* q8_0 at TP 2 sharded whole (no column parts: the engine splits them at load). */
static const char *shard_q8_whole(const char *model) {
    static char d[600];
    snprintf(d, sizeof d, "%s/q8wide-whole", tu_tmpdir());
    g4_shard_opts so = {.model_dir = model, .out_dir = d, .tp = 2, .dtype = G4_DT_Q8_0, .rowpar_part_cols = -1, .force = 1};
    g4_err err;
    if (g4_artifact_shard(&so, &err)) fail_msg("shard q8wide-whole: %s", err.msg);
    return d;
}

/* Row-parallel q4_0 and q8_0 matrices in column parts (weights.h g4_weights_split_rowpar;
 * engine.c, G4_ROWPAR_PART_COLS: here parts of at most 1536 columns — down_proj's 8 slices of 768
 * at TP 1 as 4 parts, its 4 at TP 2 as 2; the global o_proj's 4 slices of 512 at TP 1 as 2 —
 * q4_0 blocks and grouped, q8_0): the logits of the unsplit matrices, bit for bit, in decode (the
 * slices walk) and prefill (slice views), TP 1 and 2, threads, from the checkpoint and from a
 * mapped artifact (then copied). */
static void test_rowpar_parts(void **state) {
    (void)state;
    if (!g4_kernels_by_name("avx512")) skip();
    const char *m = wide_model(), *grouped = shard_q4(m, G4_SHARD_Q4_GROUPED, "q4wide-grouped"), *q8 = shard_q8_whole(m);
    const char *sets[] = {"0", "1536"};
    const struct { int tp, threads, max_batch; const char *dir, *layout, *dtype; } cfgs[] = {
        {1, 1, 0, m, NULL, NULL}, {1, 2, 3, m, NULL, NULL}, {1, 2, 1, m, "blocks", NULL}, {2, 2, 0, m, NULL, NULL}, {2, 1, 0, grouped, NULL, NULL},
        {1, 1, 0, m, NULL, "q8_0"}, {1, 2, 3, m, NULL, "q8_0"}, {2, 2, 0, m, NULL, "q8_0"}, {2, 1, 2, q8, NULL, NULL}};
    for (size_t c = 0; c < sizeof cfgs / sizeof *cfgs; c++) {
        tu_run r[2];
        size_t copied[2] = {0, 0};
        if (cfgs[c].layout) setenv("G4_Q4_LAYOUT", cfgs[c].layout, 1);
        for (int s = 0; s < 2; s++) {
            setenv("G4_ROWPAR_PART_COLS", sets[s], 1);
            g4_engine_opts o = {.tp = cfgs[c].tp, .threads = cfgs[c].threads, .max_batch = cfgs[c].max_batch,
                                .model_dir = cfgs[c].dir, .isa = "avx512", .dtype = cfgs[c].dtype};
            if (cfgs[c].dir == m) gen4(o, &r[s]);
            else {
                g4_err err;
                if (tu_generate(&o, prompt, NP, 4, &r[s], &err)) fail_msg("%s: %s", cfgs[c].dir, err.msg);
            }
            copied[s] = cfgs[c].dir == m ? 0 : tu_copied_weight_bytes(o);
        }
        unsetenv("G4_ROWPAR_PART_COLS");
        unsetenv("G4_Q4_LAYOUT");
        if (r[0].vocab != r[1].vocab || memcmp(r[0].logits, r[1].logits, sizeof(float) * (size_t)r[0].vocab * 4))
            fail_msg("config %zu (TP %d x %d threads, max batch %d, %s): logits with column parts differ", c, cfgs[c].tp,
                     cfgs[c].threads, cfgs[c].max_batch, cfgs[c].dir);
        /* a mapped artifact: the parts are a copy (a checkpoint's q4_0 / q8_0 is converted into
         * owned memory, split in place of it) */
        if (cfgs[c].dir != m && copied[1] <= copied[0])
            fail_msg("config %zu: nothing was split (%zu bytes copied)", c, copied[1]);
        tu_run_free(&r[0]);
        tu_run_free(&r[1]);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_grouped_equals_blocks), cmocka_unit_test(test_artifact_layouts),
                                       cmocka_unit_test(test_rowpar_parts)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
