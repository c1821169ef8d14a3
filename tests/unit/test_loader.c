/* Loading checkpoints as published, and refusing bad ones with clear messages: config.json
 * rules (both layouts, every 31B key required, unsupported features named), safetensors
 * structure (truncation, header length, malformed JSON, offsets, overlaps, dtypes), the index,
 * and tensor names/shapes against the config. Bad files are made from a copy of tiny_default. */
#include <sys/stat.h>
#include <unistd.h>

#include <math.h>
#include "testutil.h"
#include "base/mapfile.h"
#include "model/checkpoint.h"
#include "model/safetensors.h"

#define SHARD1 "model-00001-of-00002.safetensors"
#define SHARD2 "model-00002-of-00002.safetensors"

static char *slurp(const char *path, size_t *n) {
    char *p = tu_read_file(path, n);
    if (!p) fail_msg("cannot read %s", path);
    return p;
}

static void spit(const char *path, const void *data, size_t n) { tu_write_file(path, data, n); }

/* A fresh copy of tiny_default in a new folder; returns its path. */
static const char *fresh_copy(const char *tag) {
    static char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", tu_tmpdir(), tag);
    const char *files[] = {"config.json", "generation_config.json", "model.safetensors.index.json", SHARD1, SHARD2};
    tu_copy_files(tu_path("golden/tiny_default"), dir, files, 5);
    return dir;
}

static void replace_in_file(const char *dir, const char *file, const char *from, const char *to) {
    char path[700];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    tu_replace_in_file(path, from, to);
}

static void edit_header(const char *dir, const char *file, const char *from, const char *to) {
    char path[700];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    tu_edit_st_header(path, from, to);
}

static void expect_fail(const char *dir, int code, const char *needle) {
    g4_checkpoint ck;
    g4_err err = {0};
    int rc = g4_checkpoint_open(dir, &ck, &err);
    print_message("  -> %s\n", err.msg);
    assert_int_equal(rc, code);
    if (needle && !strstr(err.msg, needle)) fail_msg("message \"%s\" lacks \"%s\"", err.msg, needle);
}

static void test_good_checkpoints(void **state) {
    (void)state;
    const char *presets[] = {"tiny_default", "tiny_wide", "tiny_tp8"};
    for (int i = 0; i < 3; i++) {
        g4_checkpoint ck;
        g4_err err = {0};
        assert_int_equal(g4_checkpoint_open(tu_path("golden/%s", presets[i]), &ck, &err), G4_OK);
        assert_string_equal(ck.prefix, "model.language_model.");
        assert_true(ck.has_vision); /* the vision tower is there and bound */
        assert_int_equal(ck.n_skipped, 0);
        g4_checkpoint_close(&ck);
    }
    /* the demo model: text-only Gemma4ForCausalLM layout, one file */
    g4_checkpoint ck;
    g4_err err = {0};
    assert_int_equal(g4_checkpoint_open("models/demo", &ck, &err), G4_OK);
    assert_string_equal(ck.prefix, "model.");
    assert_int_equal(ck.n_skipped, 0);
    g4_checkpoint_close(&ck);
}

static void test_31b_config(void **state) {
    (void)state;
    g4_config c;
    g4_err err = {0};
    assert_int_equal(g4_config_load(tu_path("spec/gemma-4-31B-it.config.json"), &c, &err), G4_OK);
    assert_int_equal(c.n_layers, 60);
    int full = 0;
    for (int l = 0; l < 60; l++) full += c.layers[l].full;
    assert_int_equal(full, 10);
    assert_true(c.layers[5].full && !c.layers[4].full && c.layers[59].full);
    assert_int_equal(c.layers[5].head_dim, 512);
    assert_int_equal(c.layers[5].n_kv, 4);
    assert_int_equal(c.layers[0].n_kv, 16);
    assert_int_equal(c.layers[0].window, 1024);
    assert_int_equal(c.n_eos, 2);
    float inv[256];
    g4_config_rope_inv_freq(&c, 5, inv);
    assert_true(inv[63] > 0 && inv[64] == 0 && inv[255] == 0);
    assert_float_equal(inv[1], 1.0f / powf(1e6f, 2.0f / 512.0f), 1e-12);
    g4_config_free(&c);
}

static void test_config_errors(void **state) {
    (void)state;
    struct { const char *from, *to; int code; const char *needle; } cases[] = {
        {"\"hidden_size_per_layer_input\": 0", "\"hidden_size_per_layer_input\": 256", G4_EUNSUPPORTED, "hidden_size_per_layer_input"},
        {"\"hidden_size_per_layer_input\": 0,", "", G4_EFORMAT, "hidden_size_per_layer_input"},
        {"\"num_kv_shared_layers\": 0", "\"num_kv_shared_layers\": 4", G4_EUNSUPPORTED, "num_kv_shared_layers"},
        {"\"enable_moe_block\": false", "\"enable_moe_block\": true", G4_EUNSUPPORTED, "enable_moe_block"},
        {"\"attention_bias\": false", "\"attention_bias\": true", G4_EUNSUPPORTED, "attention_bias"},
        {"\"sliding_window\": 6", "\"sliding_window\": \"6\"", G4_EFORMAT, "sliding_window"},
        {"\"rope_type\": \"proportional\"", "\"rope_type\": \"yarn\"", G4_EUNSUPPORTED, "yarn"},
        {"{", "[", G4_EFORMAT, "malformed JSON"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char tag[32];
        snprintf(tag, sizeof tag, "cfg%zu", i);
        const char *dir = fresh_copy(tag);
        replace_in_file(dir, "config.json", cases[i].from, cases[i].to);
        expect_fail(dir, cases[i].code, cases[i].needle);
    }
}

static void test_file_errors(void **state) {
    (void)state;
    char path[700];
    const char *dir;
    /* missing shard named by the index */
    dir = fresh_copy("missing_shard");
    snprintf(path, sizeof path, "%s/%s", dir, SHARD2);
    unlink(path);
    expect_fail(dir, G4_EIO, SHARD2);
    /* index naming a shard that does not exist */
    dir = fresh_copy("bad_index");
    replace_in_file(dir, "model.safetensors.index.json", SHARD2, "model-00003-of-00002.safetensors");
    expect_fail(dir, G4_EIO, "model-00003-of-00002.safetensors");
    /* missing folder / config */
    expect_fail("/nonexistent/g4tp", G4_EIO, "config.json");
    /* truncated shard */
    dir = fresh_copy("truncated");
    snprintf(path, sizeof path, "%s/%s", dir, SHARD1);
    {
        struct stat st;
        assert_int_equal(stat(path, &st), 0);
        assert_int_equal(truncate(path, st.st_size - 1000), 0); /* the data area loses its tail */
    }
    expect_fail(dir, G4_EFORMAT, "out of range");
    /* header length past the end of the file */
    dir = fresh_copy("hlen");
    snprintf(path, sizeof path, "%s/%s", dir, SHARD1);
    assert_int_equal(truncate(path, 100), 0);
    expect_fail(dir, G4_EFORMAT, "header length");
    /* shorter than 8 bytes */
    dir = fresh_copy("tiny");
    snprintf(path, sizeof path, "%s/%s", dir, SHARD1);
    assert_int_equal(truncate(path, 3), 0);
    expect_fail(dir, G4_EFORMAT, "truncated");
    /* malformed header JSON */
    dir = fresh_copy("badjson");
    edit_header(dir, SHARD1, "\"dtype\"", "\"dtype");
    expect_fail(dir, G4_EFORMAT, "malformed header JSON");
    /* unknown dtype */
    dir = fresh_copy("dtype");
    edit_header(dir, SHARD1, "\"BF16\"", "\"BF17\"");
    expect_fail(dir, G4_EFORMAT, "unknown dtype");
    /* a dtype the engine does not take for a text tensor */
    dir = fresh_copy("dtype_i16");
    edit_header(dir, SHARD1, "\"dtype\":\"BF16\",\"shape\":[64]", "\"dtype\":\"I16\",\"shape\":[64]");
    expect_fail(dir, G4_ESHAPE, "I16");
    /* offsets out of range */
    dir = fresh_copy("offsets");
    edit_header(dir, SHARD1, "\"data_offsets\":[0,", "\"data_offsets\":[99999999,");
    expect_fail(dir, G4_EFORMAT, "data_offsets");
    /* wrong shape (size no longer matches the offsets) */
    dir = fresh_copy("shape_bytes");
    edit_header(dir, SHARD1, "\"shape\":[512,64]", "\"shape\":[512,65]");
    expect_fail(dir, G4_EFORMAT, "need");
}

/* Tensor-level errors: overlap, wrong shape, missing and unexpected tensors. */
static void test_tensor_errors(void **state) {
    (void)state;
    const char *dir;
    size_t n;
    char *h;
    /* overlapping: make two 64-element BF16 tensors share bytes by shifting one's offsets */
    dir = fresh_copy("overlap");
    {
        char path[700];
        snprintf(path, sizeof path, "%s/%s", dir, SHARD1);
        g4_st_file f;
        g4_err err;
        assert_int_equal(g4_st_open(&f, path, &err), 0);
        /* find two tensors of the same byte size and point the second at the first's bytes */
        const g4_st_tensor *a = g4_st_find(&f, "model.language_model.layers.0.input_layernorm.weight");
        const g4_st_tensor *b = g4_st_find(&f, "model.language_model.layers.0.post_attention_layernorm.weight");
        assert_non_null(a);
        assert_non_null(b);
        uint64_t hl = 0;
        for (int i = 7; i >= 0; i--) hl = hl << 8 | f.map.data[i];
        long ao = (long)(a->data - (f.map.data + 8 + hl)), bo = (long)(b->data - (f.map.data + 8 + hl));
        g4_st_close(&f);
        char from[64], to[64];
        snprintf(from, sizeof from, "\"data_offsets\":[%ld,%ld]", bo, bo + 128);
        snprintf(to, sizeof to, "\"data_offsets\":[%ld,%ld]", ao + 2, ao + 130);
        edit_header(dir, SHARD1, from, to);
        expect_fail(dir, G4_EFORMAT, "overlap");
    }
    /* a shape that disagrees with the config (same byte count, different dims) */
    dir = fresh_copy("shape_cfg");
    h = slurp(tu_path("golden/tiny_default/%s", SHARD1), &n);
    free(h);
    edit_header(dir, SHARD1, "\"shape\":[512,64]", "\"shape\":[256,128]");
    expect_fail(dir, G4_ESHAPE, "embed_tokens.weight has shape [256, 128]; the config needs [512, 64]");
    /* missing tensor: rename it in the header and the index */
    dir = fresh_copy("missing_tensor");
    edit_header(dir, SHARD1, "layers.0.layer_scalar", "layers.0.layer_scalaX");
    replace_in_file(dir, "model.safetensors.index.json", "layers.0.layer_scalar", "layers.0.layer_scalaX");
    expect_fail(dir, G4_ENOTFOUND, "missing tensor model.language_model.layers.0.layer_scalar");
    /* an unexpected tensor outside the text and encoder prefixes (without a vision_config, so
     * that the tower's tensors are skipped and the renamed one is not a missing tower tensor) */
    dir = fresh_copy("unexpected");
    replace_in_file(dir, "config.json", "\"vision_config\": {", "\"vision_config\": null, \"unused_vision_config\": {");
    edit_header(dir, SHARD2, "model.embed_vision.", "model.embed_visiom.");
    replace_in_file(dir, "model.safetensors.index.json", "model.embed_vision.", "model.embed_visiom.");
    expect_fail(dir, G4_EFORMAT, "unexpected tensor model.embed_visiom.");
}

/* A safetensors file from a header and a data area of n zero bytes. */
static void write_st(const char *path, const char *header, size_t n) {
    size_t hl = strlen(header);
    uint8_t *b = calloc(8 + hl + n, 1);
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    memcpy(b + 8, header, hl);
    spit(path, b, 8 + hl + n);
    free(b);
}

/* Overlaps are found on the non-empty ranges: an empty tensor sorted between two overlapping
 * ones used to hide them. */
static void test_overlap_past_empty(void **state) {
    (void)state;
    char path[512];
    snprintf(path, sizeof path, "%s/overlap.safetensors", tu_tmpdir());
    static const struct { const char *header; int code; } cases[] = {
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
         "\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", G4_EFORMAT},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]},"
         "\"c\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}", G4_EFORMAT},
        /* empty tensors anywhere, even inside another's bytes, share nothing */
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", G4_OK},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_st(path, cases[i].header, 16);
        g4_st_file f;
        g4_err err = {0};
        int rc = g4_st_open(&f, path, &err);
        if (rc != cases[i].code) fail_msg("case %zu: rc %d (%s)", i, rc, err.msg);
        if (rc) assert_non_null(strstr(err.msg, "overlap"));
        else g4_st_close(&f);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good_checkpoints),
        cmocka_unit_test(test_31b_config),
        cmocka_unit_test(test_config_errors),
        cmocka_unit_test(test_file_errors),
        cmocka_unit_test(test_tensor_errors),
        cmocka_unit_test(test_overlap_past_empty),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
