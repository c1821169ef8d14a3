/* Per-rank artifacts (g4tp shard): loading them gives the same logits, bit for bit, as loading
 * the Hugging Face folder at the same TP, and the golden ids; sharding is deterministic; damage
 * (a flipped tensor byte under --verify, a truncated rank file, an edited manifest, a wrong TP)
 * is refused with a message naming the file or tensor; the writer is atomic. */
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include "engine_util.h"
#include "engine/model_source.h"
#include "model/artifact.h"
#include "model/matconv.h"

static char *tmp_sub(const char *name) {
    static char buf[8][512];
    static int k;
    char *b = buf[k++ & 7];
    snprintf(b, 512, "%s/%s", tu_tmpdir(), name);
    return b;
}

static int exists(const char *p) { struct stat sb; return lstat(p, &sb) == 0; }

static void shard_ok(const char *model, int tp, int dtype, const char *out) {
    g4_shard_opts o = {.model_dir = tu_path("golden/%s", model), .out_dir = out, .tp = tp, .dtype = dtype, .force = 1};
    g4_err err = {0};
    int rc = g4_artifact_shard(&o, &err);
    if (rc) fail_msg("shard %s tp %d: %s", model, tp, err.msg);
}

static json_t *golden(const char *model, int32_t **ids, int *n, int32_t **want, int *n_gen) {
    json_t *g = tu_load_json(tu_path("golden/%s__p16.json", model));
    *ids = tu_json_ids(json_object_get(g, "prompt_ids"), n);
    *want = tu_json_ids(json_object_get(g, "generated_ids"), n_gen);
    return g;
}

/* Artifacts at TP t give the HF folder's logits at TP t, byte for byte, and the golden ids. */
static void check_equal(const char *model, int tp, const char *dtype, int shard_dtype) {
    char name[64];
    snprintf(name, sizeof name, "%s-tp%d-%s", model, tp, dtype ? dtype : "stored");
    const char *out = tmp_sub(name);
    shard_ok(model, tp, shard_dtype, out);
    int n, n_gen;
    int32_t *ids, *want;
    json_t *g = golden(model, &ids, &n, &want, &n_gen);
    g4_engine_opts hf = {.tp = tp, .threads = 1, .model_dir = tu_path("golden/%s", model), .dtype = dtype};
    g4_engine_opts art = {.tp = tp, .threads = 1, .model_dir = out, .verify = 1};
    tu_run a, b;
    g4_err err = {0};
    if (tu_generate(&hf, ids, n, n_gen, &a, &err)) fail_msg("HF %s: %s", model, err.msg);
    if (tu_generate(&art, ids, n, n_gen, &b, &err)) fail_msg("artifact %s tp %d: %s", model, tp, err.msg);
    print_message("%s TP %d %s: %d steps\n", model, tp, dtype ? dtype : "as stored", n_gen);
    assert_int_equal(a.n_gen, b.n_gen);
    assert_memory_equal(a.logits, b.logits, sizeof(float) * (size_t)a.vocab * (size_t)n_gen);
    if (!dtype) assert_memory_equal(b.gen, want, sizeof(int32_t) * (size_t)n_gen);
    tu_run_free(&a);
    tu_run_free(&b);
    free(ids);
    free(want);
    json_decref(g);
}

static void test_logits_equal_hf(void **state) {
    (void)state;
    const int tps[] = {1, 2, 4, 8};
    for (int i = 0; i < 4; i++) check_equal("tiny_tp8", tps[i], NULL, -1);
    check_equal("tiny_default", 2, NULL, -1);
    /* converted at shard time == converted at load time */
    check_equal("tiny_default", 4, "q8_0", G4_DT_Q8_0);
    check_equal("tiny_default", 2, "f32", G4_DT_F32);
}

static int files_equal(const char *a, const char *b) {
    size_t la = 0, lb = 0;
    char *x = tu_read_file(a, &la), *y = tu_read_file(b, &lb);
    int eq = x && y && la == lb && memcmp(x, y, la) == 0;
    free(x);
    free(y);
    return eq;
}

static void test_deterministic(void **state) {
    (void)state;
    const char *a = tmp_sub("det-a"), *b = tmp_sub("det-b");
    shard_ok("tiny_tp8", 4, -1, a);
    shard_ok("tiny_tp8", 4, -1, b);
    DIR *d = opendir(a);
    assert_non_null(d);
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char pa[1024], pb[1024];
        snprintf(pa, sizeof pa, "%s/%s", a, e->d_name);
        snprintf(pb, sizeof pb, "%s/%s", b, e->d_name);
        if (!files_equal(pa, pb)) fail_msg("%s differs between two shard runs", e->d_name);
        n++;
    }
    closedir(d);
    assert_int_equal(n, 4 + 3); /* 4 rank files, manifest, config.json, generation_config.json */
    /* and a different dtype really gives different bytes (the comparison can fail) */
    const char *c = tmp_sub("det-c");
    shard_ok("tiny_tp8", 4, G4_DT_F32, c);
    char pa[1024], pc[1024];
    snprintf(pa, sizeof pa, "%s/rank-00001-of-00004.g4w", a);
    snprintf(pc, sizeof pc, "%s/rank-00001-of-00004.g4w", c);
    assert_false(files_equal(pa, pc));
}

static int open_err(const char *dir, int tp, int verify, g4_err *err) {
    g4_engine_opts o = {.tp = tp, .threads = 1, .model_dir = dir, .verify = verify};
    g4_engine *e = NULL;
    int rc = g4_engine_open(&o, &e, err);
    if (rc == G4_OK) g4_engine_close(e);
    return rc;
}

static void expect_msg(const g4_err *err, const char *want) {
    if (!strstr(err->msg, want)) fail_msg("error \"%s\" does not mention \"%s\"", err->msg, want);
}

static void test_corrupt_tensor(void **state) {
    (void)state;
    const char *dir = tmp_sub("corrupt");
    shard_ok("tiny_tp8", 4, -1, dir);
    g4_artifact *a;
    g4_err err = {0};
    assert_int_equal(g4_artifact_open(dir, 2, 4, 1, &a, &err), G4_OK);
    int idx = -1;
    for (int i = 0; i < a->n_specs; i++)
        if (!strcmp(a->specs[i].name, "layers.5.mlp.down_proj.weight")) idx = i;
    assert_true(idx >= 0);
    assert_null(a->ranks[0].map.data); /* only the asked rank is opened */
    uint64_t off = a->ranks[2].ents[idx].offset + 100;
    g4_artifact_close(a);
    char path[1024];
    snprintf(path, sizeof path, "%s/rank-00002-of-00004.g4w", dir);
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    uint8_t byte;
    assert_int_equal(pread(fd, &byte, 1, (off_t)off), 1);
    byte ^= 0x10;
    assert_int_equal(pwrite(fd, &byte, 1, (off_t)off), 1);
    close(fd);
    assert_int_equal(open_err(dir, 4, 1, &err), G4_ECHECKSUM);
    print_message("verify: %s\n", err.msg);
    expect_msg(&err, "layers.5.mlp.down_proj.weight");
    expect_msg(&err, "rank-00002-of-00004.g4w");
    /* without --verify only headers are checked: it loads (the documented contract) */
    assert_int_equal(open_err(dir, 4, 0, &err), G4_OK);
}

static void test_truncated(void **state) {
    (void)state;
    const char *dir = tmp_sub("trunc");
    shard_ok("tiny_tp8", 4, -1, dir);
    char path[1024];
    snprintf(path, sizeof path, "%s/rank-00003-of-00004.g4w", dir);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(truncate(path, sb.st_size - 4096), 0);
    g4_err err = {0};
    assert_int_not_equal(open_err(dir, 4, 0, &err), G4_OK);
    print_message("truncated: %s\n", err.msg);
    expect_msg(&err, "rank-00003-of-00004.g4w");
    expect_msg(&err, "truncated");
    /* a missing rank file */
    assert_int_equal(unlink(path), 0);
    assert_int_not_equal(open_err(dir, 4, 0, &err), G4_OK);
    expect_msg(&err, "rank-00003-of-00004.g4w");
}

static void replace_in_file(const char *path, const char *from, const char *to) {
    size_t len;
    char *t = tu_read_file(path, &len);
    assert_non_null(t);
    char *p = strstr(t, from);
    if (!p) fail_msg("%s: no \"%s\"", path, from);
    FILE *f = fopen(path, "wb");
    fwrite(t, 1, (size_t)(p - t), f);
    fputs(to, f);
    fputs(p + strlen(from), f);
    fclose(f);
    free(t);
}

static void test_manifest_edit(void **state) {
    (void)state;
    const char *dir = tmp_sub("manifest");
    shard_ok("tiny_tp8", 2, -1, dir);
    char mp[1024];
    snprintf(mp, sizeof mp, "%s/manifest.json", dir);
    replace_in_file(mp, "\"sliding_window\": 7", "\"sliding_window\": 8");
    g4_err err = {0};
    assert_int_equal(open_err(dir, 2, 0, &err), G4_ECHECKSUM);
    print_message("edited: %s\n", err.msg);
    expect_msg(&err, "manifest.json");
    /* forge the manifest's own checksum: the rank headers still catch the config change */
    json_t *m = tu_load_json(mp);
    json_object_del(m, "manifest_xxh3");
    char *c = json_dumps(m, JSON_COMPACT | JSON_SORT_KEYS);
    char hx[17];
    snprintf(hx, sizeof hx, "%016llx", (unsigned long long)XXH3_64bits(c, strlen(c)));
    free(c);
    json_object_set_new(m, "manifest_xxh3", json_string(hx));
    assert_int_equal(json_dump_file(m, mp, JSON_INDENT(2)), 0);
    json_decref(m);
    assert_int_equal(open_err(dir, 2, 0, &err), G4_ECHECKSUM);
    print_message("forged: %s\n", err.msg);
    expect_msg(&err, "rank-00000-of-00002.g4w");
}

/* Rewrites the manifest's checksums after a deliberate edit (what a careful forger would do). */
static void reseal(const char *dir, int rank, const uint8_t *hdr, size_t hb) {
    char mp[1024];
    snprintf(mp, sizeof mp, "%s/manifest.json", dir);
    json_t *m = tu_load_json(mp);
    char hx[17];
    if (hdr) {
        snprintf(hx, sizeof hx, "%016llx", (unsigned long long)XXH3_64bits(hdr, hb));
        json_object_set_new(json_array_get(json_object_get(m, "ranks"), (size_t)rank), "header_xxh3", json_string(hx));
    }
    json_object_del(m, "manifest_xxh3");
    char *c = json_dumps(m, JSON_COMPACT | JSON_SORT_KEYS);
    snprintf(hx, sizeof hx, "%016llx", (unsigned long long)XXH3_64bits(c, strlen(c)));
    free(c);
    json_object_set_new(m, "manifest_xxh3", json_string(hx));
    assert_int_equal(json_dump_file(m, mp, JSON_INDENT(2)), 0);
    json_decref(m);
}

/* With the checksums forged, the table checks still refuse bad entries (bounds, alignment,
 * overlap, shape, name, dtype) — and a header byte flip without forging is always refused. */
static void test_forged_tables(void **state) {
    (void)state;
    struct { uint64_t field; uint64_t value; const char *want; } cases[] = {
        {120, 1ull << 40, "bad placement"},   /* offset beyond the file */
        {120, 4096 * 3 + 8, "bad placement"}, /* unaligned */
        {120, 4096, "bad placement"},         /* overlaps the header */
        {104, 7, "holds"},                    /* wrong rows */
        {96, 9, "invalid dtype"},
        {0, 'X', "expected tensor"},          /* name */
        {128, 1ull << 62, "bad placement"},   /* size overflow */
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        const char *dir = tmp_sub("forged");
        shard_ok("tiny_tp8", 2, -1, dir);
        char path[1024];
        snprintf(path, sizeof path, "%s/rank-00001-of-00002.g4w", dir);
        size_t len;
        uint8_t *f = (uint8_t *)tu_read_file(path, &len);
        assert_non_null(f);
        uint32_t n = (uint32_t)f[20] | (uint32_t)f[21] << 8;
        size_t hb = G4_ART_HEADER_BYTES + (size_t)n * G4_ART_ENTRY_BYTES;
        uint8_t *e = f + G4_ART_HEADER_BYTES + 3 * G4_ART_ENTRY_BYTES; /* the 4th tensor */
        if (cases[k].field == 0) e[0] = (uint8_t)cases[k].value;
        else if (cases[k].field == 96) memcpy(e + 96, &(uint32_t){(uint32_t)cases[k].value}, 4);
        else memcpy(e + cases[k].field, &cases[k].value, 8);
        /* without forging: the header checksum in the manifest catches it */
        FILE *o = fopen(path, "r+b");
        fwrite(f, 1, hb, o);
        fclose(o);
        g4_err err = {0};
        assert_int_equal(open_err(dir, 2, 0, &err), G4_ECHECKSUM);
        reseal(dir, 1, f, hb);
        assert_int_not_equal(open_err(dir, 2, 0, &err), G4_OK);
        print_message("forged case %zu: %s\n", k, err.msg);
        expect_msg(&err, cases[k].want);
        expect_msg(&err, "rank-00001-of-00002.g4w");
        free(f);
    }
}

static void test_wrong_tp_and_refusals(void **state) {
    (void)state;
    const char *dir = tmp_sub("tp4");
    shard_ok("tiny_tp8", 4, -1, dir);
    g4_err err = {0};
    assert_int_equal(open_err(dir, 2, 0, &err), G4_EINVAL);
    print_message("wrong tp: %s\n", err.msg);
    expect_msg(&err, "TP 4");
    assert_int_equal(g4_model_source_tp(dir), 4);
    assert_int_equal(g4_model_source_tp(tu_path("golden/tiny_tp8")), 0);
    /* tp 0 at the source level takes the folder's degree */
    g4_model_source s;
    assert_int_equal(g4_model_source_open(&s, dir, 3, 0, 1, &err), G4_OK);
    assert_true(s.is_artifact);
    assert_int_equal(s.cfg.n_layers, 12);
    g4_tp_plan plan;
    g4_rank_weights w;
    assert_int_equal(g4_tp_plan_make(&s.cfg, g4_model_source_wdtype(&s, G4_DTYPE_AS_STORED), 4, 3, &plan, &err), G4_OK);
    assert_int_equal(g4_model_source_bind(&s, &plan, G4_DTYPE_AS_STORED, 0, &w, &err), G4_OK);
    /* views into the map: no copy */
    const uint8_t *base = s.art->ranks[3].map.data;
    assert_true((const uint8_t *)w.layers[0].q.data >= base && (const uint8_t *)w.layers[0].q.data < base + s.art->ranks[3].map.size);
    assert_int_equal(((uintptr_t)w.layers[0].q.data - (uintptr_t)base) % G4_ART_ALIGN, 0);
    g4_weights_free(&w);
    g4_tp_plan_free(&plan);
    g4_model_source_close(&s);
    /* an impossible degree is refused by shard with the plan's message */
    g4_shard_opts o = {.model_dir = tu_path("golden/tiny_wide"), .out_dir = tmp_sub("wide4"), .tp = 4, .dtype = -1};
    assert_int_not_equal(g4_artifact_shard(&o, &err), G4_OK);
    print_message("impossible: %s\n", err.msg);
    expect_msg(&err, "valid degrees");
    assert_false(exists(tmp_sub("wide4")));
    /* an existing folder is kept unless --force */
    g4_shard_opts o2 = {.model_dir = tu_path("golden/tiny_tp8"), .out_dir = dir, .tp = 2, .dtype = -1};
    assert_int_equal(g4_artifact_shard(&o2, &err), G4_EINVAL);
    expect_msg(&err, "--force");
    assert_int_equal(g4_model_source_tp(dir), 4);
    o2.force = 1;
    assert_int_equal(g4_artifact_shard(&o2, &err), G4_OK);
    assert_int_equal(g4_model_source_tp(dir), 2);
    assert_int_equal(open_err(dir, 2, 1, &err), G4_OK);
    /* --force never replaces a folder that is not an artifact folder */
    o2.out_dir = tu_path("golden/tiny_default");
    assert_int_equal(g4_artifact_shard(&o2, &err), G4_EINVAL);
    expect_msg(&err, "not a g4tp artifact folder");
}

static void test_cancel_leaves_nothing(void **state) {
    (void)state;
    volatile sig_atomic_t stop = 1;
    const char *out = tmp_sub("canceled");
    g4_shard_opts o = {.model_dir = tu_path("golden/tiny_tp8"), .out_dir = out, .tp = 2, .dtype = -1, .cancel = &stop};
    g4_err err = {0};
    assert_int_equal(g4_artifact_shard(&o, &err), G4_ECANCELED);
    assert_false(exists(out));
    DIR *d = opendir(tu_tmpdir());
    struct dirent *e;
    while ((e = readdir(d)))
        if (strstr(e->d_name, "canceled")) fail_msg("left %s behind", e->d_name);
    closedir(d);
}

/* Patches rank file r of a TP 2 folder: the u32 at byte `at` of table entry `ent` (ent < 0: of the
 * header), then forges the checksums. */
static void patch_u32(const char *dir, int r, int ent, size_t at, uint32_t value) {
    char path[1024];
    snprintf(path, sizeof path, "%s/rank-%05d-of-00002.g4w", dir, r);
    size_t len;
    uint8_t *f = (uint8_t *)tu_read_file(path, &len);
    assert_non_null(f);
    uint32_t n = (uint32_t)f[20] | (uint32_t)f[21] << 8;
    size_t hb = G4_ART_HEADER_BYTES + (size_t)n * G4_ART_ENTRY_BYTES;
    memcpy(f + (ent < 0 ? 0 : G4_ART_HEADER_BYTES + (size_t)ent * G4_ART_ENTRY_BYTES) + at, &value, 4);
    FILE *o = fopen(path, "r+b");
    assert_int_equal(fwrite(f, 1, hb, o), hb);
    fclose(o);
    reseal(dir, r, f, hb);
    free(f);
}

static int spec_index(const g4_artifact *a, const char *name) {
    for (int i = 0; i < a->n_specs; i++)
        if (!strcmp(a->specs[i].name, name)) return i;
    fail_msg("no tensor %s", name);
    return -1;
}

/* q4_0 artifacts record their layout per tensor: sharded grouped, every q4_0 matrix carries the
 * segments the loader's rule gives (o and down: the reduction slices); a forged grouping is
 * refused (on a tensor that is not q4_0 at open, with other segments at load); version 1 files
 * (blocks only) still load. */
static void test_q4_grouping(void **state) {
    (void)state;
    const char *dir = tmp_sub("q4grouped"), *blocks = tmp_sub("q4blocks");
    g4_err err = {0};
    /* text-only (format version 2): the version-1 check below rewrites the versions */
    g4_shard_opts o = {.model_dir = tu_path("golden/tiny_default"), .out_dir = dir, .tp = 2, .dtype = G4_DT_Q4_0,
                       .q4_layout = G4_SHARD_Q4_GROUPED, .force = 1, .no_vision = 1};
    assert_int_equal(g4_artifact_shard(&o, &err), G4_OK);
    o.out_dir = blocks;
    o.q4_layout = G4_SHARD_Q4_BLOCKS;
    assert_int_equal(g4_artifact_shard(&o, &err), G4_OK);
    g4_artifact *a;
    assert_int_equal(g4_artifact_open(dir, -1, 2, 1, &a, &err), G4_OK);
    g4_tp_plan plan;
    assert_int_equal(g4_tp_plan_make(&a->cfg, G4_DT_Q4_0, 2, 1, &plan, &err), G4_OK);
    int n_grouped = 0;
    for (int i = 0; i < a->n_specs; i++) {
        const g4_art_entry *e = &a->ranks[1].ents[i];
        const int64_t want = e->dtype == G4_DT_Q4_0 ? g4_q4_0_group_cols(&a->cfg, &plan, a->specs[i].kind, a->specs[i].layer, e->cols) : 0;
        if (e->q4_group_cols != want) fail_msg("%s: grouped in %lld columns, the rule says %lld", e->name, (long long)e->q4_group_cols, (long long)want);
        n_grouped += want > 0;
    }
    const int down = spec_index(a, "layers.0.mlp.down_proj.weight"), norm = spec_index(a, "layers.0.input_layernorm.weight");
    const int64_t down_seg = a->ranks[1].ents[down].q4_group_cols, down_cols = a->ranks[1].ents[down].cols;
    print_message("%d q4_0 tensors grouped; down_proj rows in segments of %lld of %lld columns\n", n_grouped, (long long)down_seg, (long long)down_cols);
    assert_true(n_grouped > 8 && down_seg > 0 && down_seg < down_cols);
    g4_tp_plan_free(&plan);
    g4_artifact_close(a);
    int n, n_gen;
    int32_t *ids, *want;
    json_t *g = golden("tiny_default", &ids, &n, &want, &n_gen);
    tu_run ra, rb;
    assert_int_equal(tu_generate(&(g4_engine_opts){.tp = 2, .threads = 1, .model_dir = dir}, ids, n, n_gen, &ra, &err), G4_OK);
    /* down_proj forged to whole rows: the header is fine, the loader's rule is not */
    patch_u32(dir, 1, down, 100, (uint32_t)down_cols);
    assert_int_equal(g4_artifact_open(dir, -1, 2, 0, &a, &err), G4_OK);
    g4_artifact_close(a);
    assert_int_not_equal(tu_generate(&(g4_engine_opts){.tp = 2, .threads = 1, .model_dir = dir}, ids, n, n_gen, &rb, &err), G4_OK);
    print_message("forged segments: %s\n", err.msg);
    expect_msg(&err, "down_proj");
    expect_msg(&err, "segments of");
    tu_run_free(&rb);
    patch_u32(dir, 1, norm, 100, 32); /* a grouping on a bf16 norm weight */
    assert_int_equal(open_err(dir, 2, 0, &err), G4_EFORMAT);
    print_message("forged grouping: %s\n", err.msg);
    expect_msg(&err, "input_layernorm");
    expect_msg(&err, "invalid q4_0 grouping");
    /* version 1: blocks load, a grouping is refused */
    for (int r = 0; r < 2; r++) patch_u32(blocks, r, -1, 8, 1);
    replace_in_file(tmp_sub("q4blocks/manifest.json"), "\"format_version\": 2", "\"format_version\": 1");
    reseal(blocks, 0, NULL, 0);
    assert_int_equal(tu_generate(&(g4_engine_opts){.tp = 2, .threads = 1, .model_dir = blocks}, ids, n, n_gen, &rb, &err), G4_OK);
    assert_memory_equal(ra.logits, rb.logits, sizeof(float) * (size_t)ra.vocab * (size_t)n_gen);
    patch_u32(blocks, 1, down, 100, (uint32_t)down_seg);
    assert_int_equal(open_err(blocks, 2, 0, &err), G4_EFORMAT);
    expect_msg(&err, "invalid q4_0 grouping");
    tu_run_free(&ra);
    tu_run_free(&rb);
    free(ids);
    free(want);
    json_decref(g);
}

/* tiny_default's golden prompt through folders a and b (TP 2; b with batches of 3 and its
 * checksums verified) on every kernel set this CPU runs: the same logits bit for bit. */
static void expect_same_logits(const char *a, const char *b, const char *what) {
    int n, n_gen;
    int32_t *ids, *want;
    json_t *g = golden("tiny_default", &ids, &n, &want, &n_gen);
    const char *isas[] = {"scalar", "avx2", "avx512"};
    g4_err err = {0};
    for (int k = 0; k < 3; k++) {
        if (!g4_kernels_by_name(isas[k])) continue;
        tu_run ra, rb;
        assert_int_equal(tu_generate(&(g4_engine_opts){.tp = 2, .threads = 2, .model_dir = a, .isa = isas[k]}, ids, n, n_gen, &ra, &err), G4_OK);
        assert_int_equal(tu_generate(&(g4_engine_opts){.tp = 2, .threads = 2, .max_batch = 3, .model_dir = b, .isa = isas[k], .verify = 1}, ids,
                                     n, n_gen, &rb, &err), G4_OK);
        if (memcmp(ra.logits, rb.logits, sizeof(float) * (size_t)ra.vocab * (size_t)n_gen)) fail_msg("%s: %s", isas[k], what);
        tu_run_free(&ra);
        tu_run_free(&rb);
    }
    free(ids);
    free(want);
    json_decref(g);
}

/* Column parts: q4_0 sharded grouped (format version 4) or q8_0 (version 6), o_proj / down_proj
 * wider than rowpar_part_cols are stored in the column parts matconv.h's rule gives (here parts of
 * one down_proj slice); they give the logits of the whole-row folder (version 2) bit for bit on
 * every kernel set (on avx512 mapped in place, nothing copied); forged parts are refused at open
 * (on a norm weight, parts that split a slice, parts in a file of the version before). */
static void col_parts_case(int dtype, int version, const char *name) {
    char n2[64], nv[64];
    snprintf(n2, sizeof n2, "%s-v2", name);
    snprintf(nv, sizeof nv, "%s-v%d", name, version);
    const char *v2 = tmp_sub(n2), *v4 = tmp_sub(nv);
    g4_err err = {0};
    g4_shard_opts o = {.model_dir = tu_path("golden/tiny_default"), .out_dir = v2, .tp = 2, .dtype = dtype,
                       .q4_layout = G4_SHARD_Q4_GROUPED, .rowpar_part_cols = -1, .q4_tail_blocks = 1, .force = 1, .no_vision = 1};
    assert_int_equal(g4_artifact_shard(&o, &err), G4_OK);
    g4_artifact *a;
    assert_int_equal(g4_artifact_open(v2, -1, 2, 0, &a, &err), G4_OK);
    const int down = spec_index(a, "layers.0.mlp.down_proj.weight"), norm = spec_index(a, "layers.0.input_layernorm.weight");
    g4_tp_plan plan1;
    assert_int_equal(g4_tp_plan_make(&a->cfg, dtype, 2, 1, &plan1, &err), G4_OK);
    const int64_t cols = a->ranks[1].ents[down].cols, seg = g4_q4_0_group_cols(&a->cfg, &plan1, G4_T_DOWN, 0, cols);
    g4_tp_plan_free(&plan1);
    assert_true(seg > 0 && cols / seg >= 2);
    assert_int_equal(a->ranks[1].ents[down].col_parts, 0);
    g4_artifact_close(a);
    o.out_dir = v4;
    o.rowpar_part_cols = seg;
    assert_int_equal(g4_artifact_shard(&o, &err), G4_OK);
    char mp[1100], was[64], older[64];
    snprintf(mp, sizeof mp, "%s/manifest.json", v4);
    json_t *m = tu_load_json(mp);
    assert_int_equal(json_integer_value(json_object_get(m, "format_version")), version);
    json_decref(m);
    assert_int_equal(g4_artifact_open(v4, -1, 2, 1, &a, &err), G4_OK);
    int n_parted = 0;
    for (int r = 0; r < 2; r++) {
        g4_tp_plan plan;
        assert_int_equal(g4_tp_plan_make(&a->cfg, dtype, 2, r, &plan, &err), G4_OK);
        for (int i = 0; i < a->n_specs; i++) {
            const g4_art_entry *e = &a->ranks[r].ents[i];
            const int want = g4_rowpar_col_parts(&a->cfg, &plan, e->dtype, a->specs[i].kind, a->specs[i].layer, e->cols, seg);
            if ((e->col_parts > 1 ? e->col_parts : 1) != want) fail_msg("%s: %d parts, the rule says %d", e->name, e->col_parts, want);
            n_parted += want > 1;
        }
        g4_tp_plan_free(&plan);
    }
    print_message("%s: %d entries in column parts (down_proj: %lld of %lld columns)\n", name, n_parted, (long long)seg, (long long)cols);
    assert_true(n_parted >= 2 * a->cfg.n_layers);
    g4_artifact_close(a);
    expect_same_logits(v2, v4, "the logits of the column parts differ");
    if (g4_kernels_by_name("avx512"))
        assert_int_equal(tu_copied_weight_bytes((g4_engine_opts){.tp = 2, .threads = 1, .model_dir = v4, .isa = "avx512"}), 0);
    /* forgeries: parts on a norm weight; parts that split a slice; parts in the version before */
    const uint32_t dt = (uint32_t)dtype;
    patch_u32(v4, 1, norm, 96, (uint32_t)G4_DT_BF16 | 2u << 16);
    assert_int_equal(open_err(v4, 2, 0, &err), G4_EFORMAT);
    print_message("forged parts: %s\n", err.msg);
    expect_msg(&err, "input_layernorm");
    expect_msg(&err, "invalid column parts");
    patch_u32(v4, 1, norm, 96, G4_DT_BF16);
    assert_int_equal(open_err(v4, 2, 0, &err), G4_OK);
    patch_u32(v4, 1, down, 96, dt | (uint32_t)(cols / seg + 1) << 16);
    assert_int_equal(open_err(v4, 2, 0, &err), G4_EFORMAT);
    expect_msg(&err, "down_proj");
    expect_msg(&err, "invalid column parts");
    patch_u32(v4, 1, down, 96, dt | (uint32_t)(cols / seg) << 16);
    assert_int_equal(open_err(v4, 2, 0, &err), G4_OK);
    for (int r = 0; r < 2; r++) patch_u32(v4, r, -1, 8, (uint32_t)version - 1);
    snprintf(was, sizeof was, "\"format_version\": %d", version);
    snprintf(older, sizeof older, "\"format_version\": %d", version - 1);
    replace_in_file(mp, was, older);
    reseal(v4, 0, NULL, 0);
    assert_int_equal(open_err(v4, 2, 0, &err), G4_EFORMAT);
    print_message("parts in version %d: %s\n", version - 1, err.msg);
    expect_msg(&err, "invalid column parts");
}

static void test_q4_col_parts(void **state) {
    (void)state;
    col_parts_case(G4_DT_Q4_0, 4, "q4parts");
}

static void test_q8_col_parts(void **state) {
    (void)state;
    col_parts_case(G4_DT_Q8_0, 6, "q8parts");
}

/* Format version 5: grouped q4_0 entries' partial groups in the tail layout (kernels.h). Such a
 * folder and one sharded with the older layout (q4_tail_blocks: version 2) give the same logits
 * bit for bit on every kernel set, and on avx512 both are read in place (the kernels take either
 * tail). Every q4_0 matrix of the tiny model ends in a partial group (64 or 128 columns). */
static void test_q4_tails(void **state) {
    (void)state;
    const char *v5 = tmp_sub("q4tails-v5"), *old = tmp_sub("q4tails-old");
    g4_err err = {0};
    g4_shard_opts o = {.model_dir = tu_path("golden/tiny_default"), .out_dir = v5, .tp = 2, .dtype = G4_DT_Q4_0,
                       .q4_layout = G4_SHARD_Q4_GROUPED, .force = 1, .no_vision = 1};
    assert_int_equal(g4_artifact_shard(&o, &err), G4_OK);
    o.out_dir = old;
    o.q4_tail_blocks = 1;
    assert_int_equal(g4_artifact_shard(&o, &err), G4_OK);
    const char *dirs[2] = {v5, old};
    const int want_ver[2] = {5, 2};
    for (int d = 0; d < 2; d++) {
        char mp[1100];
        snprintf(mp, sizeof mp, "%s/manifest.json", dirs[d]);
        json_t *m = tu_load_json(mp);
        assert_int_equal(json_integer_value(json_object_get(m, "format_version")), want_ver[d]);
        assert_int_equal(json_is_true(json_object_get(m, "q4_tail")), d == 0);
        json_decref(m);
        g4_artifact *a;
        assert_int_equal(g4_artifact_open(dirs[d], -1, 2, 1, &a, &err), G4_OK);
        int tails = 0;
        for (int i = 0; i < a->n_specs; i++) {
            g4_mat v;
            assert_int_equal(g4_artifact_view(a, 1, i, &v, &err), G4_OK);
            assert_int_equal(v.q4_tail, d == 0 && v.layout == G4_Q4_GROUPED);
            tails += v.q4_tail && (v.layout_cols / G4_Q4_BLOCK) % 16;
        }
        if (d == 0) assert_true(tails >= 5 * a->cfg.n_layers);
        g4_artifact_close(a);
    }
    expect_same_logits(old, v5, "the logits of the tail layout differ from the older folder's");
    if (g4_kernels_by_name("avx512"))
        for (int d = 0; d < 2; d++)
            assert_int_equal(tu_copied_weight_bytes((g4_engine_opts){.tp = 2, .threads = 1, .model_dir = dirs[d], .isa = "avx512"}), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_logits_equal_hf),
        cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_corrupt_tensor),
        cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_manifest_edit),
        cmocka_unit_test(test_forged_tables),
        cmocka_unit_test(test_wrong_tp_and_refusals),
        cmocka_unit_test(test_cancel_leaves_nothing),
        cmocka_unit_test(test_q4_grouping),
        cmocka_unit_test(test_q4_col_parts),
        cmocka_unit_test(test_q8_col_parts),
        cmocka_unit_test(test_q4_tails),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
