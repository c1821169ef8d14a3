/* The Gemma-4 vision tower (gemma4/vision.h): soft tokens and pooled features against the numpy
 * oracle (float64) on the tiny checkpoints of tests/data/vision (one with clipped linears), with
 * every kernel set this CPU runs; bitwise the same at 1, 2 and 3 threads, after other images,
 * and loaded from the checkpoint or from shard artifacts (rank 0's file); vision_config rules,
 * broken towers and bad inputs refused with clear messages. */
#include <math.h>
#include <sys/stat.h>

#include "testutil.h"
#include <jansson.h>
#include "base/threadpool.h"
#include "engine/model_source.h"
#include "gemma4/vision.h"
#include "model/artifact.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/synth.h"

#define SHARD2 "model-00002-of-00002.safetensors"
#define TOL 1e-5 /* relative to the largest value: the fp32 tower against the float64 oracle */

typedef struct {
    int ph, pw, n, m;  /* patch grid, patches, soft tokens */
    float *pixels;     /* [n][768] */
    int32_t *pos;      /* [n][2] (x, y) */
} patches;

/* tests/data/vision/<name>.u8 (h x w x 3; formula_*: make_tower_goldens.py's integer formula)
 * as the image processor's patches: row-major, (py, px, c) inside a patch, u8 / 255 computed in
 * double then rounded to float (HF's PIL path). */
static patches load_patches(const char *name, int h, int w) {
    size_t len = (size_t)h * w * 3;
    uint8_t *img;
    if (!strncmp(name, "formula_", 8)) {
        img = malloc(len);
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++)
                for (int c = 0; c < 3; c++) img[((size_t)y * w + x) * 3 + c] = (uint8_t)((x * 3 + y * 5 + c * 71 + (x * y) % 97 + ((x ^ y) & 31) * 4) & 255);
    } else {
        img = (uint8_t *)tu_read_file(tu_path("vision/%s.u8", name), &len);
        assert_non_null(img);
        assert_int_equal(len, (size_t)h * w * 3);
    }
    patches P = {.ph = h / 16, .pw = w / 16};
    P.n = P.ph * P.pw;
    P.m = P.n / 9;
    P.pixels = malloc(sizeof(float) * (size_t)P.n * 768);
    P.pos = malloc(sizeof(int32_t) * 2 * (size_t)P.n);
    for (int r = 0; r < P.ph; r++)
        for (int c = 0; c < P.pw; c++) {
            const int i = r * P.pw + c;
            P.pos[2 * i] = c;
            P.pos[2 * i + 1] = r;
            for (int py = 0; py < 16; py++)
                for (int px = 0; px < 16; px++)
                    for (int ch = 0; ch < 3; ch++)
                        P.pixels[(size_t)i * 768 + (size_t)(py * 48 + px * 3 + ch)] =
                            (float)(img[((size_t)(r * 16 + py) * (size_t)w + (size_t)(c * 16 + px)) * 3 + (size_t)ch] * (1.0 / 255.0));
        }
    free(img);
    return P;
}

static void free_patches(patches *P) { free(P->pixels); free(P->pos); }

static float *load_f32(const char *rel, size_t want) {
    size_t len = 0;
    float *p = (float *)tu_read_file(tu_path("vision/%s", rel), &len);
    if (!p) fail_msg("cannot read tests/data/vision/%s", rel);
    assert_int_equal(len, want * sizeof(float));
    return p;
}

static double max_diff(const float *a, const float *b, size_t n) {
    double d = 0;
    for (size_t i = 0; i < n; i++) d = fmax(d, fabs((double)a[i] - b[i]));
    return d;
}

/* max |a - b| over max(1, max |b|): the pooled features are O(30), the soft tokens O(3) */
static double rel_diff(const float *a, const float *b, size_t n) {
    double m = 1;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)b[i]));
    return max_diff(a, b, n) / m;
}

static g4_pool *pool_of(int n) {
    g4_pool *p;
    g4_err err = {0};
    if (g4_pool_create(n, NULL, &p, &err)) fail_msg("pool: %s", err.msg);
    return p;
}

static g4_vision *tower(g4_model_source *s, const char *dir, const g4_kernels *K) {
    g4_err err = {0};
    if (g4_model_source_open(s, dir, -1, 0, 1, &err)) fail_msg("%s: %s", dir, err.msg);
    g4_vision *v;
    if (g4_model_source_vision_create(s, K, &v, &err)) fail_msg("%s: %s", dir, err.msg);
    return v;
}

/* soft [m][64] (and pooled [m][32]) of one picture on nth threads */
static float *encode(g4_vision *v, const patches *P, int nth, float **pooled) {
    g4_pool *pool = pool_of(nth);
    float *soft = malloc(sizeof(float) * (size_t)P->m * (size_t)g4_vision_soft_dim(v));
    if (pooled) *pooled = malloc(sizeof(float) * (size_t)P->m * (size_t)g4_vision_hidden(v));
    g4_err err = {0};
    if (g4_vision_encode(v, pool, P->pixels, P->pos, P->ph, P->pw, soft, pooled ? *pooled : NULL, &err)) fail_msg("encode: %s", err.msg);
    g4_pool_free(pool);
    return soft;
}

static const struct { const char *model, *pic; int h, w; } goldens[] = {
    {"tiny_vision", "img_96x144", 96, 144},    {"tiny_vision", "img_144x192", 144, 192}, {"tiny_vision", "img_144x240", 144, 240},
    {"tiny_clipped", "img_96x144", 96, 144},   {"tiny_clipped", "img_144x240", 144, 240},
    {"tiny_vision", "formula_672x960", 672, 960}, /* 2520 patches: the 31B's 280-token budget */
};

/* Every golden with every kernel set: soft tokens and pooled features within TOL. */
static void test_oracle(void **state) {
    (void)state;
    const char *sets[] = {"scalar", "avx2", "avx512"};
    for (int k = 0; k < 3; k++) {
        const g4_kernels *K = g4_kernels_by_name(sets[k]);
        if (!K) continue;
        for (size_t g = 0; g < sizeof goldens / sizeof *goldens; g++) {
            g4_model_source s;
            g4_vision *v = tower(&s, tu_path("vision/%s", goldens[g].model), K);
            patches P = load_patches(goldens[g].pic, goldens[g].h, goldens[g].w);
            char rel[128];
            snprintf(rel, sizeof rel, "%s__%s.soft.f32", goldens[g].model, goldens[g].pic);
            float *want = load_f32(rel, (size_t)P.m * 64);
            snprintf(rel, sizeof rel, "%s__%s.pooled.f32", goldens[g].model, goldens[g].pic);
            float *want_pooled = load_f32(rel, (size_t)P.m * 32), *pooled;
            float *soft = encode(v, &P, 2, &pooled);
            const double ds = rel_diff(soft, want, (size_t)P.m * 64), dp = rel_diff(pooled, want_pooled, (size_t)P.m * 32);
            print_message("%-6s %-12s %-11s %3d patches: soft %.2e, pooled %.2e\n", sets[k], goldens[g].model, goldens[g].pic, P.n, ds, dp);
            if (!(ds <= TOL && dp <= TOL)) fail_msg("%s %s on %s: off the oracle by %.3g / %.3g", goldens[g].model, goldens[g].pic, sets[k], ds, dp);
            free(soft); free(pooled); free(want); free(want_pooled);
            free_patches(&P);
            g4_vision_free(v);
            g4_model_source_close(&s);
        }
    }
}

/* 1, 2 and 3 threads give the same bits; so does a run after other pictures (nothing carried);
 * patches in another row order give the same soft tokens within the tolerance. */
static void test_threads_bitwise(void **state) {
    (void)state;
    g4_model_source s;
    g4_vision *v = tower(&s, tu_path("vision/tiny_clipped"), g4_kernels_get());
    patches P = load_patches("img_144x240", 144, 240), Q = load_patches("img_96x144", 96, 144);
    const size_t bytes = sizeof(float) * (size_t)P.m * 64;
    float *a = encode(v, &P, 1, NULL);
    for (int nth = 2; nth <= 3; nth++) {
        float *b = encode(v, &P, nth, NULL);
        if (memcmp(a, b, bytes)) fail_msg("%d threads differ from 1 (max %.3g)", nth, max_diff(a, b, bytes / 4));
        free(b);
    }
    free(encode(v, &Q, 3, NULL));
    float *c = encode(v, &P, 2, NULL);
    assert_memory_equal(a, c, bytes);
    /* reversed patch order: the tower pairs each patch with its own position */
    patches R = P;
    R.pixels = malloc(sizeof(float) * (size_t)P.n * 768);
    R.pos = malloc(sizeof(int32_t) * 2 * (size_t)P.n);
    for (int i = 0; i < P.n; i++) {
        memcpy(R.pixels + (size_t)i * 768, P.pixels + (size_t)(P.n - 1 - i) * 768, sizeof(float) * 768);
        memcpy(R.pos + 2 * i, P.pos + 2 * (P.n - 1 - i), sizeof(int32_t) * 2);
    }
    float *d = encode(v, &R, 2, NULL);
    print_message("reversed patch order: %.2e\n", max_diff(a, d, bytes / 4));
    assert_true(max_diff(a, d, bytes / 4) <= TOL);
    free(a); free(c); free(d);
    free_patches(&P); free_patches(&Q); free_patches(&R);
    g4_vision_free(v);
    g4_model_source_close(&s);
    /* 2520 patches: ten token blocks per matmul, 315 attention items per head */
    v = tower(&s, tu_path("vision/tiny_vision"), g4_kernels_get());
    P = load_patches("formula_672x960", 672, 960);
    a = encode(v, &P, 1, NULL);
    for (int nth = 2; nth <= 3; nth++) {
        float *b = encode(v, &P, nth, NULL);
        assert_memory_equal(a, b, sizeof(float) * (size_t)P.m * 64);
        free(b);
    }
    free(a);
    free_patches(&P);
    g4_vision_free(v);
    g4_model_source_close(&s);
}

/* Shard artifacts carry the tower in rank 0's file, read in place: the same bits as the
 * checkpoint; a folder without it (--no-vision, or a rank that did not open rank 0) says why. */
static void test_artifacts(void **state) {
    (void)state;
    const char *out = tu_tmp_path("art"), *bare = tu_tmp_path("art-novision");
    g4_err err = {0};
    g4_shard_opts o = {.model_dir = tu_path("vision/tiny_vision"), .out_dir = out, .tp = 2, .dtype = G4_DT_F32, .force = 1};
    if (g4_artifact_shard(&o, &err)) fail_msg("shard: %s", err.msg);
    patches P = load_patches("img_144x192", 144, 192);
    g4_model_source hs, as;
    g4_vision *hv = tower(&hs, tu_path("vision/tiny_vision"), g4_kernels_get()), *av = tower(&as, out, g4_kernels_get());
    float *a = encode(hv, &P, 2, NULL), *b = encode(av, &P, 2, NULL);
    assert_memory_equal(a, b, sizeof(float) * (size_t)P.m * 64);
    /* --dtype f32 left the tower bf16, in rank 0's map */
    const g4_vision_weights *w = g4_vision_weights_of(av);
    const uint8_t *base = as.art->ranks[0].map.data;
    assert_int_equal(w->layers[1].lin[G4_VL_DOWN].dtype, G4_DT_BF16);
    assert_true((const uint8_t *)w->pos_table.data > base && (const uint8_t *)w->pos_table.data < base + as.art->ranks[0].map.size);
    assert_int_equal(((uintptr_t)w->proj.data - (uintptr_t)base) % G4_ART_ALIGN, 0);
    json_t *m = json_load_file(tu_tmp_path("art/manifest.json"), 0, NULL);
    assert_int_equal(json_integer_value(json_object_get(m, "vision_tensors")), as.art->n_vision);
    assert_int_equal(json_integer_value(json_object_get(m, "format_version")), 3);
    json_decref(m);
    struct stat sb;
    assert_int_equal(stat(tu_tmp_path("art/processor_config.json"), &sb), 0);
    g4_vision_free(hv); g4_vision_free(av);
    g4_model_source_close(&hs); g4_model_source_close(&as);
    /* rank 1 alone (an MPI process that is not the leader) has no tower */
    assert_int_equal(g4_model_source_open(&as, out, 1, 0, 0, &err), G4_OK);
    assert_false(g4_model_source_has_vision(&as));
    print_message("rank 1 only: %s\n", g4_model_source_vision_note(&as));
    assert_non_null(strstr(g4_model_source_vision_note(&as), "rank 0"));
    g4_model_source_close(&as);
    /* --no-vision: a text-only folder of version 2 */
    o.out_dir = bare;
    o.no_vision = 1;
    assert_int_equal(g4_artifact_shard(&o, &err), G4_OK);
    assert_int_equal(g4_model_source_open(&as, bare, -1, 0, 1, &err), G4_OK);
    assert_false(g4_model_source_has_vision(&as));
    g4_vision *none;
    assert_int_equal(g4_model_source_vision_create(&as, g4_kernels_get(), &none, &err), G4_EUNSUPPORTED);
    print_message("no tower: %s\n", err.msg);
    assert_non_null(strstr(err.msg, "no vision tower"));
    g4_model_source_close(&as);
    m = json_load_file(tu_tmp_path("art-novision/manifest.json"), 0, NULL);
    assert_int_equal(json_integer_value(json_object_get(m, "format_version")), 2);
    assert_null(json_object_get(m, "vision_tensors"));
    json_decref(m);
    free(a); free(b);
    free_patches(&P);
}

/* A copy of a test checkpoint in a fresh folder. */
static const char *copy_model(const char *model, const char *tag) {
    const char *files[] = {"config.json", "model.safetensors.index.json", "model-00001-of-00002.safetensors", SHARD2};
    const char *dir = tu_tmp_path(tag);
    tu_copy_files(tu_path("vision/%s", model), dir, files, 4);
    return dir;
}

static void expect_open(const char *dir, int code, const char *needle) {
    g4_checkpoint ck;
    g4_err err = {0};
    int rc = g4_checkpoint_open(dir, &ck, &err);
    print_message("  -> %s\n", rc ? err.msg : ck.vision_note);
    assert_int_equal(rc, code);
    if (!strstr(rc ? err.msg : ck.vision_note, needle)) fail_msg("\"%s\" lacks \"%s\"", rc ? err.msg : ck.vision_note, needle);
    if (rc == G4_OK) g4_checkpoint_close(&ck);
}

static void test_bad_checkpoints(void **state) {
    (void)state;
    char p[1024];
    const char *dir = copy_model("tiny_vision", "missing");
    snprintf(p, sizeof p, "%s/%s", dir, SHARD2);
    tu_edit_st_header(p, "model.vision_tower.std_scale", "model.vision_tower.std_scalX");
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    tu_replace_in_file(p, "model.vision_tower.std_scale", "model.vision_tower.std_scalX");
    expect_open(dir, G4_ENOTFOUND, "missing vision tensor model.vision_tower.std_scale (30 of the vision_config's 31");
    dir = copy_model("tiny_vision", "shape");
    snprintf(p, sizeof p, "%s/%s", dir, SHARD2);
    tu_edit_st_header(p, "\"shape\":[2,1024,32]", "\"shape\":[2,512,64]");
    expect_open(dir, G4_ESHAPE, "position_embedding_table has shape [2, 512, 64]; the vision_config needs [2, 1024, 32]");
    dir = copy_model("tiny_vision", "clip_missing"); /* the config asks for clamps the checkpoint lacks */
    snprintf(p, sizeof p, "%s/config.json", dir);
    tu_replace_in_file(p, "\"use_clipped_linears\": false", "\"use_clipped_linears\": true");
    expect_open(dir, G4_ENOTFOUND, "self_attn.q_proj.input_min");
    dir = copy_model("tiny_clipped", "clip_extra"); /* clamps the config does not use */
    snprintf(p, sizeof p, "%s/config.json", dir);
    tu_replace_in_file(p, "\"use_clipped_linears\": true", "\"use_clipped_linears\": false");
    expect_open(dir, G4_EFORMAT, "use_clipped_linears is false");
    /* a vision_config without any of its tensors (synth without --vision): text-only, with a note */
    dir = tu_tmp_path("synth-text");
    g4_err err = {0};
    g4_synth_opts so = {.like = tu_path("vision/tiny_vision/config.json"), .out_dir = dir};
    assert_int_equal(g4_synth_write(&so, &err), G4_OK);
    expect_open(dir, G4_OK, "holds none of its 31 tensors");
    g4_model_source s;
    assert_int_equal(g4_model_source_open(&s, dir, -1, 0, 0, &err), G4_OK);
    assert_false(g4_model_source_has_vision(&s));
    g4_vision *v;
    assert_int_equal(g4_model_source_vision_create(&s, g4_kernels_get(), &v, &err), G4_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "holds none"));
    g4_model_source_close(&s);
}

/* vision_config rules: each edit of tiny_vision's config.json is refused with its message. */
static void test_config(void **state) {
    (void)state;
    size_t len = 0;
    char *text = tu_read_file(tu_path("vision/tiny_vision/config.json"), &len);
    assert_non_null(text);
    g4_config cfg;
    g4_err err = {0};
    assert_int_equal(g4_config_parse(text, len, &cfg, &err), G4_OK);
    const g4_vision_cfg *v = &cfg.vision;
    assert_true(v->has_vision);
    assert_int_equal(v->hidden, 32);
    assert_int_equal(v->n_layers, 2);
    assert_int_equal(v->head_dim, 16);
    assert_int_equal(v->pos_size, 1024);
    assert_int_equal(v->pooling, 3);
    assert_true(v->standardize && !v->clipped);
    assert_true(v->rope_theta == 100.0);
    assert_int_equal(v->boi_token_id, 500);
    assert_int_equal(v->image_token_id, 501);
    assert_int_equal(v->eoi_token_id, 502);
    float inv[4];
    g4_vision_rope_inv_freq(v, inv);
    assert_true(inv[0] == 1.0f && fabsf(inv[1] - powf(100.0f, -0.25f)) < 1e-7f); /* 100^(-2j/8), head_dim/2 = 8 */
    g4_config_free(&cfg);
    /* "path=json" (no "=": the key removed), the code, a piece of the message */
    static const struct { const char *edit; int code; const char *msg; } bad[] = {
        {"vision_config.hidden_activation=\"gelu\"", G4_EUNSUPPORTED, "hidden_activation"},
        {"vision_config.attention_bias=true", G4_EUNSUPPORTED, "attention_bias"},
        {"vision_config.head_dim=18", G4_EFORMAT, "multiple of 4"},
        {"vision_config.num_key_value_heads=1", G4_EUNSUPPORTED, "grouped-query"},
        {"vision_config.rope_parameters={\"rope_type\": \"linear\", \"rope_theta\": 100}", G4_EUNSUPPORTED, "rope_type"},
        {"vision_config.rms_norm_eps=0", G4_EFORMAT, "rms_norm_eps"},
        {"vision_config.standardize=1", G4_EFORMAT, "standardize must be true or false"},
        {"vision_config.hidden_size=0", G4_EFORMAT, "vision_config.hidden_size = 0 is out of range"},
        {"vision_config.pooling_kernel_size=null", G4_EFORMAT, "pooling_kernel_size must be an integer"},
        {"vision_config.patch_size", G4_EFORMAT, "lacks \"patch_size\""},
        {"vision_config.model_type=\"siglip\"", G4_EUNSUPPORTED, "gemma4_vision"},
        {"boi_token_id", G4_EFORMAT, "needs \"boi_token_id\""},
        {"eoi_token_id=500", G4_EFORMAT, "must differ"},
        {"vision_config=5", G4_EFORMAT, "vision_config must be an object or null"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        json_t *root = json_loads(text, 0, NULL), *obj = root;
        char key[128];
        snprintf(key, sizeof key, "%s", bad[i].edit);
        char *eq = strchr(key, '='), *dot = strchr(key, '.');
        if (eq) *eq = 0;
        if (dot && (!eq || dot < eq)) { *dot = 0; obj = json_object_get(root, key); }
        const char *leaf = dot && (!eq || dot < eq) ? dot + 1 : key;
        if (eq) json_object_set_new(obj, leaf, json_loads(eq + 1, JSON_DECODE_ANY, NULL));
        else json_object_del(obj, leaf);
        char *t = json_dumps(root, 0);
        int rc = g4_config_parse(t, strlen(t), &cfg, &err);
        print_message("%s: %s\n", bad[i].edit, err.msg);
        assert_int_equal(rc, bad[i].code);
        if (!strstr(err.msg, bad[i].msg)) fail_msg("\"%s\" lacks \"%s\"", err.msg, bad[i].msg);
        free(t);
        json_decref(root);
    }
    /* null: text-only */
    json_t *root = json_loads(text, 0, NULL);
    json_object_set_new(root, "vision_config", json_null());
    char *t = json_dumps(root, 0);
    assert_int_equal(g4_config_parse(t, strlen(t), &cfg, &err), G4_OK);
    assert_false(cfg.vision.has_vision);
    g4_config_free(&cfg);
    free(t);
    json_decref(root);
    free(text);
}

/* synth --vision: the config's tower with the real names (loads, encodes to finite values) and
 * processor_config.json; a config without a vision_config is refused. */
static void test_synth(void **state) {
    (void)state;
    const char *dir = tu_tmp_path("synth-vision");
    g4_err err = {0};
    g4_synth_opts so = {.like = tu_path("vision/tiny_clipped/config.json"), .out_dir = dir, .vision = 1, .seed = 3};
    if (g4_synth_write(&so, &err)) fail_msg("synth: %s", err.msg);
    g4_model_source s;
    g4_vision *v = tower(&s, dir, g4_kernels_get());
    patches P = load_patches("img_96x144", 96, 144);
    float *soft = encode(v, &P, 2, NULL);
    double mx = 0;
    for (int i = 0; i < P.m * 64; i++) {
        assert_true(isfinite(soft[i]));
        mx = fmax(mx, fabs(soft[i]));
    }
    assert_true(mx > 0.1);
    free(soft);
    free_patches(&P);
    g4_vision_free(v);
    g4_model_source_close(&s);
    json_t *pc = json_load_file(tu_tmp_path("synth-vision/processor_config.json"), 0, NULL);
    assert_non_null(pc);
    json_t *ip = json_object_get(pc, "image_processor");
    assert_int_equal(json_integer_value(json_object_get(ip, "patch_size")), 16);
    assert_int_equal(json_integer_value(json_object_get(ip, "max_soft_tokens")), 280);
    json_decref(pc);
    so.like = tu_path("golden/tiny_long/config.json");
    so.out_dir = tu_tmp_path("synth-novision");
    assert_int_equal(g4_synth_write(&so, &err), G4_EINVAL);
    assert_non_null(strstr(err.msg, "has no vision_config"));
}

static void expect_encode(g4_vision *v, g4_pool *pool, const patches *P, int ph, int pw, const char *needle) {
    g4_err err = {0};
    float soft[64 * 16];
    int rc = g4_vision_encode(v, pool, P->pixels, P->pos, ph, pw, soft, NULL, &err);
    print_message("  -> %s\n", err.msg);
    assert_int_equal(rc, G4_EINVAL);
    if (!strstr(err.msg, needle)) fail_msg("\"%s\" lacks \"%s\"", err.msg, needle);
}

static void test_bad_input(void **state) {
    (void)state;
    g4_model_source s;
    g4_vision *v = tower(&s, tu_path("vision/tiny_vision"), g4_kernels_get());
    g4_pool *pool = pool_of(2);
    patches P = load_patches("img_96x144", 96, 144); /* 6 x 9 */
    assert_int_equal(g4_vision_max_patches(v), 10080);
    assert_int_equal(g4_vision_patch_dim(v), 768);
    expect_encode(v, pool, &P, 5, 9, "multiples of the pooling size 3");
    expect_encode(v, pool, &P, 102, 102, "at most 10080");
    expect_encode(v, pool, &P, 3, 2049, "position table has 1024");
    P.pos[2 * 7] = 9;
    expect_encode(v, pool, &P, 6, 9, "patch 7 has position (9, 0), outside");
    P.pos[2 * 7] = 6;
    expect_encode(v, pool, &P, 6, 9, "patch 7 repeats position (6, 0)");
    P.pos[2 * 7] = 7;
    P.pixels[3 * 768 + 5] = NAN;
    expect_encode(v, pool, &P, 6, 9, "pixel value 5 of patch 3 is not finite");
    free_patches(&P);
    g4_pool_free(pool);
    g4_vision_free(v);
    g4_model_source_close(&s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config),
        cmocka_unit_test(test_oracle),
        cmocka_unit_test(test_threads_bitwise),
        cmocka_unit_test(test_artifacts),
        cmocka_unit_test(test_bad_checkpoints),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_synth),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
