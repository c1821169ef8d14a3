/* test_image_proc.c — src/image's processor: processor_config.json (nested, flat, absent, bad
 * values), the size rule against the numpy oracle's table (tests/data/vision/size_rule.txt),
 * Pillow-exact BICUBIC (the goldens' resized.png bit for bit, and resize/expected.txt made by
 * Pillow itself), and the goldens' patches: grid, counts, first values, and the sha256 of HF's
 * padded pixel_values / position_ids; plus the image hash. */
#include "testutil.h"

#include <math.h>
#include <sys/stat.h>

#include "image/image.h"
#include "image/processor.h"
#include "sha256.h"

static g4_image load(const char *rel) {
    g4_image im;
    g4_err err = {0};
    int rc = g4_image_load_file(tu_path("%s", rel), NULL, &im, &err);
    if (rc) fail_msg("%s: %s", rel, err.msg);
    return im;
}

/* ---- config ---------------------------------------------------------------------------- */

static void test_proc_load_tiny(void **st) {
    (void)st;
    g4_image_proc p;
    g4_err err = {0};
    int rc = g4_image_proc_load(tu_path("vision/tiny_vision"), &p, &err);   /* keys nested under image_processor */
    if (rc) fail_msg("%s", err.msg);
    assert_int_equal(p.max_soft_tokens, 280);
    assert_int_equal(p.patch_size, 16);
    assert_int_equal(p.pooling, 3);
    assert_int_equal(p.resample, 3);
    assert_true(p.rescale == 0.00392156862745098);
    assert_int_equal(p.do_rescale, 1);
    assert_int_equal(p.do_normalize, 0);
    assert_int_equal(p.do_convert_rgb, 1);
    g4_image_proc d;
    g4_image_proc_default(&d);
    assert_true(d.rescale == 1.0 / 255 && d.max_soft_tokens == 280 && d.patch_size == 16 && d.pooling == 3);
}

static int load_from(const char *sub, const char *name, const char *json, g4_image_proc *p, g4_err *err) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", tu_tmpdir(), sub);
    tu_write_text(dir, name, json);
    return g4_image_proc_load(dir, p, err);
}

static void test_proc_load_variants(void **st) {
    (void)st;
    g4_image_proc p;
    g4_err err = {0};
    /* flat keys in preprocessor_config.json (the older layout); absent keys keep HF's defaults */
    assert_int_equal(load_from("flat", "preprocessor_config.json",
                               "{\"image_processor_type\": \"Gemma4ImageProcessor\", \"max_soft_tokens\": 560}", &p, &err), G4_OK);
    assert_int_equal(p.max_soft_tokens, 560);
    assert_int_equal(p.patch_size, 16);
    /* a processor_config.json without image keys: preprocessor_config.json is read instead */
    char dir[512];
    snprintf(dir, sizeof dir, "%s/both", tu_tmpdir());
    tu_write_text(dir, "processor_config.json", "{\"processor_class\": \"Gemma4Processor\"}");
    tu_write_text(dir, "preprocessor_config.json", "{\"max_soft_tokens\": 70, \"patch_size\": 16}");
    assert_int_equal(g4_image_proc_load(dir, &p, &err), G4_OK);
    assert_int_equal(p.max_soft_tokens, 70);
    /* ... and it wins when it has them */
    tu_write_text(dir, "processor_config.json", "{\"image_processor\": {\"max_soft_tokens\": 1120}}");
    assert_int_equal(g4_image_proc_load(dir, &p, &err), G4_OK);
    assert_int_equal(p.max_soft_tokens, 1120);
    /* identity normalization is accepted */
    assert_int_equal(load_from("idnorm", "processor_config.json",
                               "{\"image_processor\": {\"do_normalize\": true, \"image_mean\": [0,0,0], \"image_std\": 1}}", &p, &err), G4_OK);
    assert_int_equal(p.do_normalize, 1);
}

static void test_proc_load_errors(void **st) {
    (void)st;
    g4_image_proc p;
    g4_err err = {0};
    char dir[512];
    snprintf(dir, sizeof dir, "%s/none", tu_tmpdir());
    mkdir(dir, 0755);
    assert_int_equal(g4_image_proc_load(dir, &p, &err), G4_ENOTFOUND);
    assert_non_null(strstr(err.msg, "processor_config.json"));
    static const struct { const char *json; int rc; const char *says; } bad[] = {
        {"{\"image_processor\": {\"resample\": 2}}", G4_EUNSUPPORTED, "resample"},
        {"{\"image_processor\": {\"max_soft_tokens\": 300}}", G4_EUNSUPPORTED, "max_soft_tokens"},
        {"{\"image_processor\": {\"max_soft_tokens\": \"280\"}}", G4_EFORMAT, "max_soft_tokens"},
        {"{\"image_processor\": {\"patch_size\": 0}}", G4_EFORMAT, "patch_size"},
        {"{\"image_processor\": {\"pooling_kernel_size\": 99}}", G4_EFORMAT, "pooling_kernel_size"},
        {"{\"image_processor\": {\"rescale_factor\": -1}}", G4_EFORMAT, "rescale_factor"},
        {"{\"image_processor\": {\"do_rescale\": 1}}", G4_EFORMAT, "do_rescale"},
        {"{\"image_processor\": {\"do_normalize\": true, \"image_mean\": [0.5, 0.5, 0.5]}}", G4_EUNSUPPORTED, "image_mean"},
        {"{\"image_processor\": {\"image_std\": [1, 1]}}", G4_EFORMAT, "image_std"},
        {"{\"image_processor\": {\"do_resize\": false}}", G4_EUNSUPPORTED, "do_resize"},
        {"{\"image_processor\": {\"image_processor_type\": \"SiglipImageProcessor\"}}", G4_EUNSUPPORTED, "Siglip"},
        {"{\"image_processor\": 7}", G4_EFORMAT, "image_processor"},
        {"{\"image_processor\": {\"max_soft_tokens\": 280,}}", G4_EFORMAT, "JSON"},
        {"[1]", G4_EFORMAT, "object"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char sub[32];
        snprintf(sub, sizeof sub, "bad%zu", i);
        int rc = load_from(sub, "processor_config.json", bad[i].json, &p, &err);
        if (rc != bad[i].rc || !strstr(err.msg, bad[i].says) || !strstr(err.msg, "processor_config.json"))
            fail_msg("case %zu: rc %d \"%s\"", i, rc, err.msg);
    }
    assert_int_equal(g4_image_proc_parse("{}", 2, "x", &p, &err), G4_OK);
}

/* ---- size rule ------------------------------------------------------------------------- */

static void test_size_rule_table(void **st) {
    (void)st;
    char *t = tu_read_file(tu_path("vision/size_rule.txt"), NULL);
    assert_non_null(t);
    g4_image_proc p;
    g4_image_proc_default(&p);
    int n = 0;
    for (char *line = strtok(t, "\n"); line; line = strtok(NULL, "\n")) {
        if (line[0] == '#') continue;
        int ms, h, w, eh, ew;
        char tail[16] = "";
        int k = sscanf(line, "%d %d %d %d %d", &ms, &h, &w, &eh, &ew);
        if (k < 5) assert_int_equal(sscanf(line, "%d %d %d %15s", &ms, &h, &w, tail), 4);
        p.max_soft_tokens = ms;
        int oh, ow;
        g4_err err = {0};
        int rc = g4_image_proc_size(&p, h, w, &oh, &ow, &err);
        if (k < 5) {
            if (!rc) fail_msg("%d tokens, %d x %d: the oracle raises, we give %d x %d", ms, h, w, oh, ow);
        } else if (rc || oh != eh || ow != ew) {
            fail_msg("%d tokens, %d x %d: want %d x %d, got %d x %d (rc %d %s)", ms, h, w, eh, ew, oh, ow, rc, err.msg);
        } else {
            /* within the budget, multiples of 48 */
            assert_true(oh % 48 == 0 && ow % 48 == 0 && (int64_t)oh * ow <= (int64_t)ms * 9 * 256);
        }
        n++;
    }
    free(t);
    assert_true(n >= 5 * 190);
}

static void test_size_rule_examples_and_errors(void **st) {
    (void)st;
    g4_image_proc p;
    g4_image_proc_default(&p);
    static const int ex[][4] = {   /* VISION.md 2.2 */
        {768, 768, 768, 768}, {1000, 1000, 768, 768}, {224, 224, 768, 768}, {672, 960, 672, 960},
        {1080, 1920, 576, 1056}, {480, 640, 672, 912}, {768, 1024, 672, 912}, {333, 517, 624, 960},
        {100, 2000, 144, 3552}, {20, 20, 768, 768}, {1, 100000, 48, 13440},
    };
    g4_err err = {0};
    for (size_t i = 0; i < sizeof ex / sizeof *ex; i++) {
        int oh, ow;
        assert_int_equal(g4_image_proc_size(&p, ex[i][0], ex[i][1], &oh, &ow, &err), G4_OK);
        if (oh != ex[i][2] || ow != ex[i][3]) fail_msg("%d x %d -> %d x %d", ex[i][0], ex[i][1], oh, ow);
    }
    int oh, ow;
    assert_int_equal(g4_image_proc_size(&p, 0, 10, &oh, &ow, &err), G4_EINVAL);
    assert_int_equal(g4_image_proc_size(&p, 10, -1, &oh, &ow, &err), G4_EINVAL);
    p.max_soft_tokens = 100;
    assert_int_equal(g4_image_proc_size(&p, 10, 10, &oh, &ow, &err), G4_EUNSUPPORTED);
    g4_image_proc_default(&p);
    p.resample = 2;
    assert_int_equal(g4_image_proc_size(&p, 10, 10, &oh, &ow, &err), G4_EUNSUPPORTED);
}

/* ---- resampler ------------------------------------------------------------------------- */

static void test_resize_matches_pillow(void **st) {
    (void)st;
    char *t = tu_read_file(tu_path("vision/resize/expected.txt"), NULL);
    assert_non_null(t);
    int n = 0;
    char last[128] = "";
    g4_image in = {0};
    for (char *line = strtok(t, "\n"); line; line = strtok(NULL, "\n")) {
        if (line[0] == '#') continue;
        char name[128], want[80];
        int oh, ow;
        assert_int_equal(sscanf(line, "%127s %d %d %79s", name, &oh, &ow, want), 4);
        if (strcmp(name, last)) {
            g4_image_free(&in);
            char rel[200];
            snprintf(rel, sizeof rel, "vision/resize/%s", name);
            in = load(rel);
            snprintf(last, sizeof last, "%s", name);
        }
        g4_image out;
        g4_err err = {0};
        assert_int_equal(g4_image_resize_bicubic(&in, oh, ow, &out, &err), G4_OK);
        assert_true(out.h == oh && out.w == ow);
        char got[65];
        sha256_hex(out.rgb, (size_t)oh * ow * 3, got);
        if (strcmp(got, want)) fail_msg("%s -> %d x %d: sha256 %s, Pillow %s", name, oh, ow, got, want);
        g4_image_free(&out);
        n++;
    }
    g4_image_free(&in);
    free(t);
    assert_true(n >= 40);
}

static void test_resize_bad_args(void **st) {
    (void)st;
    g4_image in = load("vision/cases/rgb8.png"), out;
    g4_err err = {0};
    assert_int_equal(g4_image_resize_bicubic(&in, 0, 5, &out, &err), G4_EINVAL);
    assert_int_equal(g4_image_resize_bicubic(&in, 5, -3, &out, &err), G4_EINVAL);
    assert_int_equal(g4_image_resize_bicubic(&in, 1 << 21, 5, &out, &err), G4_EINVAL);
    assert_null(out.rgb);
    /* same size: a copy */
    assert_int_equal(g4_image_resize_bicubic(&in, in.h, in.w, &out, &err), G4_OK);
    assert_memory_equal(out.rgb, in.rgb, (size_t)in.w * in.h * 3);
    g4_image_free(&out);
    g4_image empty = {0};
    assert_int_equal(g4_image_resize_bicubic(&empty, 5, 5, &out, &err), G4_EINVAL);
    g4_image_free(&in);
}

/* ---- the goldens' patches ------------------------------------------------------------------ */

static double jnum(const char *text, const char *key, int idx) {
    /* the idx-th number of the list under "key" (golden.json's flat arrays) */
    char pat[128];
    snprintf(pat, sizeof pat, "\"%s\": [", key);
    const char *p = strstr(text, pat);
    if (!p) fail_msg("%s not in golden.json", key);
    p += strlen(pat);
    for (int i = 0; i <= idx; i++) {
        while (*p == ' ' || *p == '\n' || *p == '[' || *p == ',' || *p == ']') p++;
        char *e;
        double v = strtod(p, &e);
        if (e == p) fail_msg("%s[%d] unreadable", key, idx);
        if (i == idx) return v;
        p = e;
    }
    return NAN;
}

static void jstr(const char *text, const char *key, char *out, size_t cap) {
    char pat[128];
    snprintf(pat, sizeof pat, "\"%s\": \"", key);
    const char *p = strstr(text, pat);
    if (!p) fail_msg("%s not in golden.json", key);
    p += strlen(pat);
    size_t k = 0;
    while (p[k] && p[k] != '"' && k + 1 < cap) { out[k] = p[k]; k++; }
    out[k] = 0;
}

static void golden_case(const char *name) {
    char *gj = tu_read_file(tu_path("vision/%s/golden.json", name), NULL);
    assert_non_null(gj);
    char rel[200];
    snprintf(rel, sizeof rel, "vision/images/%s.png", name);
    g4_image im = load(rel);
    g4_image_proc p;
    g4_err err = {0};
    assert_int_equal(g4_image_proc_load(tu_path("vision/tiny_vision"), &p, &err), G4_OK);
    g4_image_patches pp;
    int rc = g4_image_preprocess(&p, &im, &pp, &err);
    if (rc) fail_msg("%s: %s", name, err.msg);
    /* size, grid, counts */
    assert_int_equal(pp.height, (int)jnum(gj, "resized_hw", 0));
    assert_int_equal(pp.width, (int)jnum(gj, "resized_hw", 1));
    assert_int_equal(pp.ph, (int)jnum(gj, "patch_grid_hw", 0));
    assert_int_equal(pp.pw, (int)jnum(gj, "patch_grid_hw", 1));
    const char *q = strstr(gj, "\"num_patches\": ");
    assert_non_null(q);
    assert_int_equal(pp.n, atoi(q + 15));
    q = strstr(gj, "\"num_soft_tokens\": ");
    assert_non_null(q);
    assert_int_equal(pp.n_soft, atoi(q + 19));
    assert_int_equal(pp.patch_dim, 768);
    /* the resized pixels: golden.json's sha256 and resized.png, bit for bit */
    g4_image rs;
    if (pp.height != im.h || pp.width != im.w) assert_int_equal(g4_image_resize_bicubic(&im, pp.height, pp.width, &rs, &err), G4_OK);
    else assert_int_equal(g4_image_resize_bicubic(&im, im.h, im.w, &rs, &err), G4_OK);
    char want[80], got[65];
    jstr(gj, "resized_sha256_u8_hwc", want, sizeof want);
    sha256_hex(rs.rgb, (size_t)rs.w * rs.h * 3, got);
    if (strcmp(got, want)) fail_msg("%s: resized sha256 %s, golden %s", name, got, want);
    snprintf(rel, sizeof rel, "vision/%s/resized.png", name);
    g4_image ref = load(rel);
    assert_true(ref.w == rs.w && ref.h == rs.h);
    assert_memory_equal(ref.rgb, rs.rgb, (size_t)rs.w * rs.h * 3);
    /* the cache key is the hash of exactly these pixels */
    uint64_t hh[2];
    g4_image_hash(&rs, hh);
    assert_true(hh[0] == pp.hash[0] && hh[1] == pp.hash[1]);
    /* first values of patches 0 and 1, exactly (float32) */
    for (int i = 0; i < 8; i++) {
        assert_true(pp.pixels[i] == (float)jnum(gj, "pixel_values_patch0_first8", i));
        assert_true(pp.pixels[pp.patch_dim + i] == (float)jnum(gj, "pixel_values_patch1_first8", i));
    }
    /* HF's layout: [max_patches][768] float32 with zero padding rows; positions int64 with (-1, -1) */
    const int max_patches = p.max_soft_tokens * p.pooling * p.pooling;
    assert_true(pp.n <= max_patches);
    sha256_ctx c;
    sha256_init(&c);
    sha256_update(&c, pp.pixels, (size_t)pp.n * pp.patch_dim * sizeof(float));
    float zeros[768] = {0};
    for (int i = pp.n; i < max_patches; i++) sha256_update(&c, zeros, sizeof zeros);
    sha256_final_hex(&c, got);
    jstr(gj, "pixel_values_sha256_fp32", want, sizeof want);
    if (strcmp(got, want)) fail_msg("%s: pixel_values sha256 %s, golden %s", name, got, want);
    sha256_init(&c);
    for (int i = 0; i < max_patches; i++) {
        int64_t xy[2] = {i < pp.n ? pp.pos[2 * i] : -1, i < pp.n ? pp.pos[2 * i + 1] : -1};
        sha256_update(&c, xy, sizeof xy);
    }
    sha256_final_hex(&c, got);
    jstr(gj, "position_ids_sha256_i64", want, sizeof want);
    if (strcmp(got, want)) fail_msg("%s: position_ids sha256 %s, golden %s", name, got, want);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(pp.pos[2 * i], (int)jnum(gj, "position_ids_first4", 2 * i));
        assert_int_equal(pp.pos[2 * i + 1], (int)jnum(gj, "position_ids_first4", 2 * i + 1));
    }
    assert_int_equal(pp.pos[2 * (pp.n - 1)], (int)jnum(gj, "position_ids_last_valid", 0));
    assert_int_equal(pp.pos[2 * (pp.n - 1) + 1], (int)jnum(gj, "position_ids_last_valid", 1));
    g4_image_free(&ref);
    g4_image_free(&rs);
    g4_image_patches_free(&pp);
    g4_image_patches_free(&pp);
    g4_image_free(&im);
    free(gj);
}

static void test_golden_native(void **st) { (void)st; golden_case("native_672x960"); }
static void test_golden_square(void **st) { (void)st; golden_case("square_1000x1000"); }
static void test_golden_nonsquare(void **st) { (void)st; golden_case("nonsquare_333x517"); }

static void test_patch_layout(void **st) {
    (void)st;
    /* a picture whose values encode their position, through the whole processor: the patches
     * are the resized pixels, patches row-major, inside a patch (py, px, c) with the channel
     * fastest, positions (x = column, y = row) */
    g4_image im;
    g4_err err = {0};
    assert_int_equal(g4_image_alloc(&im, 96, 48, &err), G4_OK);
    for (int y = 0; y < 48; y++)
        for (int x = 0; x < 96; x++)
            for (int c = 0; c < 3; c++) im.rgb[((size_t)y * 96 + x) * 3 + c] = (uint8_t)((y * 5 + x * 2 + c * 100) & 0xff);
    g4_image_proc p;
    g4_image_proc_default(&p);
    p.do_rescale = 0;   /* values are the bytes themselves */
    int oh, ow;
    assert_int_equal(g4_image_proc_size(&p, 48, 96, &oh, &ow, &err), G4_OK);
    g4_image src = im;
    g4_image rs = {0};
    if (oh != 48 || ow != 96) {
        assert_int_equal(g4_image_resize_bicubic(&im, oh, ow, &rs, &err), G4_OK);
        src = rs;
    }
    g4_image_patches pp;
    assert_int_equal(g4_image_preprocess(&p, &im, &pp, &err), G4_OK);
    assert_int_equal(pp.ph * 16, oh);
    assert_int_equal(pp.pw * 16, ow);
    assert_int_equal(pp.n_soft, pp.n / 9);
    for (int i = 0; i < pp.n; i++) {
        int r = i / pp.pw, col = i % pp.pw;
        assert_int_equal(pp.pos[2 * i], col);
        assert_int_equal(pp.pos[2 * i + 1], r);
        for (int py = 0; py < 16; py += 5)
            for (int px = 0; px < 16; px += 3)
                for (int c = 0; c < 3; c++) {
                    float v = pp.pixels[(size_t)i * 768 + (py * 16 + px) * 3 + c];
                    uint8_t want = src.rgb[((size_t)(r * 16 + py) * ow + col * 16 + px) * 3 + c];
                    assert_true(v == (float)want);
                }
    }
    g4_image_patches_free(&pp);
    g4_image_free(&rs);
    g4_image_free(&im);
}

static void test_hash(void **st) {
    (void)st;
    g4_err err = {0};
    g4_image a, b;
    assert_int_equal(g4_image_alloc(&a, 3, 2, &err), G4_OK);
    assert_int_equal(g4_image_alloc(&b, 2, 3, &err), G4_OK);   /* the same 18 bytes, another shape */
    uint64_t ha[2], hb[2], hc[2];
    g4_image_hash(&a, ha);
    g4_image_hash(&b, hb);
    assert_false(ha[0] == hb[0] && ha[1] == hb[1]);
    a.rgb[7] = 1;
    g4_image_hash(&a, hc);
    assert_false(ha[0] == hc[0] && ha[1] == hc[1]);
    a.rgb[7] = 0;
    g4_image_hash(&a, hc);
    assert_true(ha[0] == hc[0] && ha[1] == hc[1]);
    g4_image_free(&a);
    g4_image_free(&b);
    /* preprocess: bad arguments leave nothing behind */
    g4_image_proc p;
    g4_image_proc_default(&p);
    g4_image_patches pp;
    g4_image none = {0};
    assert_int_equal(g4_image_preprocess(&p, &none, &pp, &err), G4_EINVAL);
    assert_null(pp.pixels);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_proc_load_tiny),
        cmocka_unit_test(test_proc_load_variants),
        cmocka_unit_test(test_proc_load_errors),
        cmocka_unit_test(test_size_rule_table),
        cmocka_unit_test(test_size_rule_examples_and_errors),
        cmocka_unit_test(test_resize_matches_pillow),
        cmocka_unit_test(test_resize_bad_args),
        cmocka_unit_test(test_golden_native),
        cmocka_unit_test(test_golden_square),
        cmocka_unit_test(test_golden_nonsquare),
        cmocka_unit_test(test_patch_layout),
        cmocka_unit_test(test_hash),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
