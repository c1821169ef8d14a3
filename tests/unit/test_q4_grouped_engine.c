/* The grouped q4_0 layout at the model level (engine.c regroups the q4_0 layer matrices when the
 * kernel set is avx512; gemma4/weights.c g4_weights_group_q4): on a checkpoint wide enough for
 * full groups of 16 blocks (hidden 512: q/k/v/gate/up rows of one group; down slices of 768 (a group and a partial one)
 * columns; global layers' o slices of 512; the q4_0 tied head, whose lookup ungroups its rows), avx512 logits are bitwise those of the block layout
 * (G4_Q4_LAYOUT=blocks) for TP 1, TP 2 and batch shapes, read from the checkpoint's map or
 * copied (--copy). Skipped where the CPU has no avx512. */
#include <sys/stat.h>

#include "engine_util.h"
#include "kernels/kernels.h"
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

/* Greedy generation of 4 tokens on the avx512 set (tu_generate), failing with its message. */
static void gen4(g4_engine_opts o, tu_run *r) {
    g4_err err;
    o.dtype = "q4_0";
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

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_grouped_equals_blocks)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
