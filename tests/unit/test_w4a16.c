/* 4-bit checkpoints at the model level: a compressed-tensors W4A16 checkpoint and a bf16 one on
 * the Q4_0 grid (both as g4tp synth writes them, like Google's QAT releases) load to the same
 * q4_0 weights bit for bit; the grid survives quantization exactly; q4_0 logits are bitwise the
 * same for every TP degree, thread count, batch shape, checkpoint or artifact, with each kernel
 * set; every malformed W4A16 detail is refused with a message naming it. */
#include <sys/stat.h>
#include <unistd.h>

#include "engine_util.h"
#include "kernels/kernels.h"
#include "model/artifact.h"
#include "model/synth.h"

static const int32_t prompt[] = {2, 105, 17, 300, 41, 7, 19, 88, 240, 3};
#define NP ((int)(sizeof prompt / sizeof *prompt))

static char *sub(const char *name) {
    static char buf[8][512];
    static int k;
    char *b = buf[k++ & 7];
    snprintf(b, 512, "%s/%s", tu_tmpdir(), name);
    return b;
}

/* A tiny_default-shaped checkpoint in format f (seed 5), written once per test binary. */
static const char *synth(int format) {
    static const char *names[] = {"bf16", "grid", "w4a16"};
    char *dir = sub(names[format]);
    struct stat sb;
    if (stat(dir, &sb) == 0) return dir;
    g4_synth_opts o = {.like = tu_path("golden/tiny_default/config.json"), .seed = 5, .out_dir = dir, .format = format};
    g4_err err;
    if (g4_synth_write(&o, &err)) fail_msg("synth: %s", err.msg);
    return dir;
}

static void run(g4_engine_opts o, tu_run *r) {
    g4_err err;
    if (tu_generate(&o, prompt, NP, 4, r, &err)) fail_msg("%s: %s", o.model_dir, err.msg);
}

static void assert_same_logits(const tu_run *a, const tu_run *b, const char *what) {
    if (a->vocab != b->vocab || memcmp(a->logits, b->logits, sizeof(float) * (size_t)a->vocab * 4) != 0) fail_msg("logits differ: %s", what);
}

static int n_inexact;
static void count_inexact(void *ud, const char *name, int src, int dt, double nmse) {
    (void)ud, (void)name, (void)src, (void)dt;
    if (nmse != 0) n_inexact++;
}

/* W4A16 as published == the bf16 grid checkpoint quantized to q4_0 (with its head kept bf16), per
 * kernel set; sharding the grid checkpoint to q4_0 reports every matrix exact. */
static void test_w4a16_equals_grid(void **state) {
    (void)state;
    const char *isas[3];
    const int nisa = g4_kernels_available(isas, 3);
    for (int k = 0; k < nisa; k++) {
        tu_run a, b;
        run((g4_engine_opts){.tp = 1, .threads = 1, .model_dir = synth(G4_SYNTH_W4A16), .isa = isas[k]}, &a);
        run((g4_engine_opts){.tp = 1, .threads = 1, .model_dir = synth(G4_SYNTH_Q4GRID), .dtype = "q4_0", .head_dtype = "bf16", .isa = isas[k]}, &b);
        assert_same_logits(&a, &b, isas[k]);
        tu_run_free(&a);
        tu_run_free(&b);
    }
    g4_shard_opts so = {.model_dir = synth(G4_SYNTH_Q4GRID), .out_dir = sub("grid-art"), .tp = 2, .dtype = G4_DT_Q4_0, .head_dtype = "bf16",
                        .force = 1, .report = count_inexact};
    g4_err err;
    n_inexact = 0;
    if (g4_artifact_shard(&so, &err)) fail_msg("shard: %s", err.msg);
    assert_int_equal(n_inexact, 0);
    /* an ordinary bf16 checkpoint is not on the grid: every matrix reports its error */
    so.model_dir = synth(G4_SYNTH_BF16);
    so.out_dir = sub("bf16-art");
    so.head_dtype = NULL;
    n_inexact = 0;
    if (g4_artifact_shard(&so, &err)) fail_msg("shard: %s", err.msg);
    assert_true(n_inexact >= 8 * 6 + 1); /* every layer's matrices and the head */
}

/* q4_0 logits do not depend on TP degree, threads, batch shape or where the weights came from. */
static void test_q4_invariance(void **state) {
    (void)state;
    const char *w4 = synth(G4_SYNTH_W4A16);
    g4_shard_opts so = {.model_dir = w4, .out_dir = sub("w4-art4"), .tp = 4, .dtype = -1, .force = 1};
    g4_err err;
    if (g4_artifact_shard(&so, &err)) fail_msg("shard: %s", err.msg);
    const struct { int tp, threads, max_batch, art; } cfgs[] = {{1, 1, 0, 0}, {1, 1, 1, 0}, {2, 2, 1, 0}, {4, 1, 0, 0},
                                                               {4, 1, 3, 1}, {1, 2, 3, 0}, {2, 1, 0, 0}};
    const char *isas[3], *heads[] = {NULL, "q4_0", "q8_0"}; /* the published bf16 head, or quantized */
    const int nisa = g4_kernels_available(isas, 3);
    for (int k = 0; k < nisa * 3; k++) {
        const char *head = heads[k % 3];
        tu_run base;
        for (size_t c = 0; c < sizeof cfgs / sizeof *cfgs; c++) {
            if (head && cfgs[c].art) continue; /* the artifacts hold the bf16 head */
            g4_engine_opts o = {.tp = cfgs[c].tp, .threads = cfgs[c].threads, .max_batch = cfgs[c].max_batch,
                                .model_dir = cfgs[c].art ? so.out_dir : w4, .isa = isas[k / 3], .head_dtype = head};
            tu_run r;
            run(o, c ? &r : &base);
            if (!c) continue;
            char what[96];
            snprintf(what, sizeof what, "%s head %s, TP %d x %d threads, max batch %d%s", isas[k / 3], head ? head : "bf16", cfgs[c].tp,
                     cfgs[c].threads, cfgs[c].max_batch, cfgs[c].art ? ", artifacts" : "");
            assert_same_logits(&base, &r, what);
            tu_run_free(&r);
        }
        tu_run_free(&base);
    }
}

/* ---- malformed checkpoints ---------------------------------------------------------------- */

/* Copies the W4A16 checkpoint to a new folder, letting fn change the single safetensors file's
 * header (and its data) and cfg change config.json. */
typedef void (*st_fn)(json_t *hdr, uint8_t *data, size_t n);
typedef void (*cfg_fn)(json_t *cfg);

static const char *mutated(const char *name, st_fn fn, cfg_fn cfg) {
    const char *src = synth(G4_SYNTH_W4A16);
    char *dir = sub(name);
    mkdir(dir, 0755);
    char p[600], q[600];
    snprintf(p, sizeof p, "%s/config.json", src);
    json_t *c = tu_load_json(p);
    if (cfg) cfg(c);
    snprintf(q, sizeof q, "%s/config.json", dir);
    assert_int_equal(json_dump_file(c, q, JSON_INDENT(1)), 0);
    json_decref(c);
    snprintf(p, sizeof p, "%s/model-00001-of-00001.safetensors", src);
    size_t len = 0;
    uint8_t *all = (uint8_t *)tu_read_file(p, &len);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = hl << 8 | all[i];
    json_t *hdr = json_loadb((const char *)all + 8, hl, 0, NULL);
    assert_non_null(hdr);
    uint8_t *data = all + 8 + hl;
    size_t n = len - 8 - hl;
    if (fn) fn(hdr, data, n);
    json_t *wm = json_object(); /* the index names every tensor of the (changed) header */
    const char *key;
    json_t *v;
    json_object_foreach(hdr, key, v) if (strcmp(key, "__metadata__")) json_object_set_new(wm, key, json_string("model-00001-of-00001.safetensors"));
    snprintf(q, sizeof q, "%s/model.safetensors.index.json", dir);
    json_t *idx = json_pack("{s:o}", "weight_map", wm);
    assert_int_equal(json_dump_file(idx, q, 0), 0);
    json_decref(idx);
    char *h = json_dumps(hdr, JSON_COMPACT);
    size_t nl = strlen(h), padded = (nl + 7) / 8 * 8;
    snprintf(q, sizeof q, "%s/model-00001-of-00001.safetensors", dir);
    FILE *f = fopen(q, "wb");
    for (int i = 0; i < 8; i++) fputc((int)((padded >> (8 * i)) & 255), f);
    fwrite(h, 1, nl, f);
    for (size_t i = nl; i < padded; i++) fputc(' ', f);
    fwrite(data, 1, n, f);
    fclose(f);
    free(h);
    json_decref(hdr);
    free(all);
    return dir;
}

#define T0 "model.language_model.layers.0.mlp.gate_proj."

static void set_dim(json_t *hdr, const char *name, int d, json_int_t v, int fix_end) {
    json_t *t = json_object_get(hdr, name);
    json_t *shape = json_object_get(t, "shape");
    json_int_t old = json_integer_value(json_array_get(shape, (size_t)d));
    json_array_set_new(shape, (size_t)d, json_integer(v));
    if (fix_end) { /* keep the byte size consistent, so only the W4A16 checks can object */
        json_t *offs = json_object_get(t, "data_offsets");
        json_int_t a = json_integer_value(json_array_get(offs, 0)), b = json_integer_value(json_array_get(offs, 1));
        json_array_set_new(offs, 1, json_integer(a + (b - a) / old * v));
    }
}

static void packed_short(json_t *h, uint8_t *d, size_t n) { (void)d, (void)n; set_dim(h, T0 "weight_packed", 1, 7, 1); }
static void scale_short(json_t *h, uint8_t *d, size_t n) { (void)d, (void)n; set_dim(h, T0 "weight_scale", 1, 1, 1); }
static void scale_i16(json_t *h, uint8_t *d, size_t n) {
    (void)d, (void)n;
    json_object_set_new(json_object_get(h, T0 "weight_scale"), "dtype", json_string("I16"));
}
static void shape_wrong(json_t *h, uint8_t *d, size_t n) {
    (void)n;
    json_int_t a = json_integer_value(json_array_get(json_object_get(json_object_get(h, T0 "weight_shape"), "data_offsets"), 0));
    d[a] = 7; /* [7, 64] instead of [256, 64] */
    d[a + 1] = 0;
}
static void zero_point(json_t *h, uint8_t *d, size_t n) {
    (void)d, (void)n;
    json_object_set(h, T0 "weight_zero_point", json_object_get(h, T0 "weight_shape")); /* renamed: no overlap */
    json_object_del(h, T0 "weight_shape");
}
static void scale_not_f16(json_t *h, uint8_t *d, size_t n) {
    (void)n;
    json_int_t a = json_integer_value(json_array_get(json_object_get(json_object_get(h, T0 "weight_scale"), "data_offsets"), 0));
    d[a] = 0x01; /* bf16 0x0d01 ~ 4e-31: far below f16's range */
    d[a + 1] = 0x0d;
}
static json_t *weights_of(json_t *c) {
    return json_object_get(json_object_get(json_object_get(json_object_get(c, "quantization_config"), "config_groups"), "group_0"), "weights");
}
static void cfg_group64(json_t *c) { json_object_set_new(weights_of(c), "group_size", json_integer(64)); }
static void cfg_asym(json_t *c) { json_object_set_new(weights_of(c), "symmetric", json_false()); }
static void cfg_bits8(json_t *c) { json_object_set_new(weights_of(c), "num_bits", json_integer(8)); }
static void cfg_acts(json_t *c) {
    json_object_set_new(json_object_get(json_object_get(json_object_get(c, "quantization_config"), "config_groups"), "group_0"),
                        "input_activations", json_pack("{s:i,s:s}", "num_bits", 8, "type", "int"));
}
static void cfg_none(json_t *c) { json_object_del(c, "quantization_config"); }
static void cfg_method(json_t *c) { json_object_set_new(json_object_get(c, "quantization_config"), "quant_method", json_string("gptq")); }

static void expect_refused(const char *dir, int code, const char *needle) {
    g4_engine_opts o = {.tp = 1, .threads = 1, .model_dir = dir};
    g4_engine *e;
    g4_err err = {0};
    int rc = g4_engine_open(&o, &e, &err);
    if (rc == G4_OK) { g4_engine_close(e); fail_msg("%s loaded; wanted an error naming \"%s\"", dir, needle); }
    if (!strstr(err.msg, needle)) fail_msg("%s: error \"%s\" does not name \"%s\"", dir, err.msg, needle);
    if (code && rc != code) fail_msg("%s: code %d, want %d (%s)", dir, rc, code, err.msg);
    print_message("refused: %s\n", err.msg);
}

static void test_w4a16_bad_input(void **state) {
    (void)state;
    expect_refused(mutated("m-packed", packed_short, NULL), G4_ESHAPE, "weight_packed");
    expect_refused(mutated("m-scale", scale_short, NULL), G4_ESHAPE, "weight_scale");
    expect_refused(mutated("m-scale16", scale_i16, NULL), G4_ESHAPE, "weight_scale");
    expect_refused(mutated("m-shape", shape_wrong, NULL), G4_ESHAPE, "weight_shape");
    expect_refused(mutated("m-zp", zero_point, NULL), G4_EUNSUPPORTED, "zero points");
    expect_refused(mutated("m-f16", scale_not_f16, NULL), G4_EUNSUPPORTED, "no exact f16");
    expect_refused(mutated("m-g64", NULL, cfg_group64), G4_EUNSUPPORTED, "group_size 64");
    expect_refused(mutated("m-asym", NULL, cfg_asym), G4_EUNSUPPORTED, "asymmetric");
    expect_refused(mutated("m-bits", NULL, cfg_bits8), G4_EUNSUPPORTED, "num_bits");
    expect_refused(mutated("m-acts", NULL, cfg_acts), G4_EUNSUPPORTED, "activations");
    expect_refused(mutated("m-none", NULL, cfg_none), G4_EFORMAT, "no quantization_config");
    expect_refused(mutated("m-method", NULL, cfg_method), G4_EUNSUPPORTED, "gptq");
    /* the same scale that q4_0 refuses loads dequantized (exactly) when asked for bf16 */
    g4_engine_opts o = {.tp = 1, .threads = 1, .model_dir = sub("m-f16"), .dtype = "bf16"};
    g4_engine *e;
    g4_err err;
    if (g4_engine_open(&o, &e, &err)) fail_msg("%s", err.msg);
    g4_engine_close(e);
    /* a truncated file */
    char p[600];
    snprintf(p, sizeof p, "%s/model-00001-of-00001.safetensors", mutated("m-trunc", NULL, NULL));
    struct stat sb;
    assert_int_equal(stat(p, &sb), 0);
    assert_int_equal(truncate(p, sb.st_size - 1000), 0);
    expect_refused(sub("m-trunc"), 0, "model-00001-of-00001.safetensors");
    /* q4_0 where the reduction slices are not whole 32-column blocks */
    o = (g4_engine_opts){.tp = 1, .threads = 1, .model_dir = tu_path("golden/tiny_tp8"), .dtype = "q4_0"};
    assert_int_equal(g4_engine_open(&o, &e, &err), G4_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "q4_0"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_w4a16_equals_grid),
        cmocka_unit_test(test_q4_invariance),
        cmocka_unit_test(test_w4a16_bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
