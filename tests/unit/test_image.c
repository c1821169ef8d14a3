/* test_image.c — src/image decoding: the vision goldens' pixels, every file of
 * tests/data/vision/cases against what Pillow gives (open, exif_transpose, convert("RGB"); made by
 * tests/data/vision/make_cases.py), refused formats named, and bad input: empty, truncated at
 * every length, corrupted, decompression bombs refused before any pixel buffer, limits, files. */
#include "testutil.h"

#include <sys/stat.h>

#include "image/image.h"
#include "sha256.h"

static g4_image decode_ok(const char *path) {
    g4_image im;
    g4_err err = {0};
    int rc = g4_image_load_file(path, NULL, &im, &err);
    if (rc) fail_msg("%s: rc %d: %s", path, rc, err.msg);
    return im;
}

static void image_sha(const g4_image *im, char *hex) { sha256_hex(im->rgb, (size_t)im->w * im->h * 3, hex); }

/* The first string value of "key" in a JSON text (enough for golden.json's flat fields). */
static int json_str(const char *text, const char *key, char *out, size_t cap) {
    char pat[128];
    snprintf(pat, sizeof pat, "\"%s\": \"", key);
    const char *p = strstr(text, pat);
    if (!p) return 0;
    p += strlen(pat);
    size_t k = 0;
    while (p[k] && p[k] != '"' && k + 1 < cap) { out[k] = p[k]; k++; }
    out[k] = 0;
    return 1;
}

static void test_golden_pixels(void **st) {
    (void)st;
    static const char *const names[] = {"native_672x960", "square_1000x1000", "nonsquare_333x517"};
    static const int hw[3][2] = {{672, 960}, {1000, 1000}, {333, 517}};
    for (int i = 0; i < 3; i++) {
        char *gj = tu_read_file(tu_path("vision/%s/golden.json", names[i]), NULL);
        assert_non_null(gj);
        char want[80];
        assert_true(json_str(gj, "pixels_sha256_u8_hwc", want, sizeof want));
        g4_image im = decode_ok(tu_path("vision/images/%s.png", names[i]));
        assert_int_equal(im.h, hw[i][0]);
        assert_int_equal(im.w, hw[i][1]);
        char got[65];
        image_sha(&im, got);
        if (strcmp(got, want)) fail_msg("%s: decoded pixels sha256 %s, golden %s", names[i], got, want);
        g4_image_free(&im);
        free(gj);
    }
}

/* cases/expected.txt: "name W H sha256" | "name error ..." | "name unsupported" */
static void test_cases_match_pillow(void **st) {
    (void)st;
    char *ex = tu_read_file(tu_path("vision/cases/expected.txt"), NULL);
    assert_non_null(ex);
    int n = 0, bad = 0;
    for (char *line = strtok(ex, "\n"); line; line = strtok(NULL, "\n")) {
        if (line[0] == '#') continue;
        char name[128], a[80] = "", b[80] = "", sha[80] = "";
        if (sscanf(line, "%127s %79s %79s %79s", name, a, b, sha) < 2) continue;
        g4_image im;
        g4_err err = {0};
        int rc = g4_image_load_file(tu_path("vision/cases/%s", name), NULL, &im, &err);
        n++;
        if (!strcmp(a, "error")) {
            if (rc != G4_EFORMAT) { print_error("%s: want a format error, got rc %d (%s)\n", name, rc, err.msg); bad++; }
        } else if (!strcmp(a, "unsupported")) {
            const char *ext = strrchr(name, '.') + 1;   /* gif / bmp / tiff: the message names it */
            char up[16] = "";
            for (size_t k = 0; ext[k] && k < 15; k++) up[k] = (char)(ext[k] >= 'a' ? ext[k] - 32 : ext[k]);
            if (rc != G4_EUNSUPPORTED || !strstr(err.msg, up)) { print_error("%s: want unsupported naming %s, got rc %d (%s)\n", name, up, rc, err.msg); bad++; }
        } else if (rc) {
            print_error("%s: rc %d: %s\n", name, rc, err.msg);
            bad++;
        } else {
            char got[65];
            image_sha(&im, got);
            if (im.w != atoi(a) || im.h != atoi(b) || strcmp(got, sha)) {
                print_error("%s: got %d x %d %s, Pillow %s x %s %s\n", name, im.w, im.h, got, a, b, sha);
                bad++;
            }
        }
        if (!rc) g4_image_free(&im);
    }
    free(ex);
    assert_true(n >= 60);
    assert_int_equal(bad, 0);
}

/* ---- bad input ------------------------------------------------------------------------- */

static uint8_t *slurp(const char *rel, size_t *n) {
    *n = 0;
    uint8_t *d = (uint8_t *)tu_read_file(tu_path("%s", rel), n);
    assert_non_null(d);
    return d;
}

static int decode_mem(const void *d, size_t n, const g4_image_limits *lim, g4_err *err) {
    g4_image im;
    int rc = g4_image_decode(d, n, lim, &im, err);
    if (!rc) {
        assert_true(im.w > 0 && im.h > 0 && im.rgb);
        g4_image_free(&im);
    } else {
        assert_null(im.rgb);   /* nothing left behind on failure */
        assert_true(err->msg[0]);
    }
    return rc;
}

static void test_empty_and_tiny(void **st) {
    (void)st;
    g4_err err = {0};
    assert_int_equal(decode_mem(NULL, 0, NULL, &err), G4_EFORMAT);
    assert_non_null(strstr(err.msg, "empty"));
    assert_int_equal(decode_mem("", 0, NULL, &err), G4_EFORMAT);
    assert_int_equal(decode_mem("\x89", 1, NULL, &err), G4_EFORMAT);
    assert_non_null(strstr(err.msg, "PNG"));
    assert_int_equal(decode_mem("\x89PNG\r\n\x1a\n", 8, NULL, &err), G4_EFORMAT);
    assert_int_equal(decode_mem("\xff\xd8", 2, NULL, &err), G4_EFORMAT);
    assert_non_null(strstr(err.msg, "JPEG"));
    assert_int_equal(decode_mem("\xff\xd8\xff", 3, NULL, &err), G4_EFORMAT);
    assert_int_equal(decode_mem("RIFF", 4, NULL, &err), G4_EFORMAT);
    assert_int_equal(decode_mem("RIFF\x10\0\0\0WEBPVP8 ", 16, NULL, &err), G4_EFORMAT);
    assert_int_equal(decode_mem("x", 1, NULL, &err), G4_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "78"));   /* the first bytes, in hex */
}

static void test_refused_formats_named(void **st) {
    (void)st;
    static const struct { const char *bytes; size_t n; const char *name; } cases[] = {
        {"GIF89a\x01\0\x01\0\0\0\0", 13, "GIF"},
        {"GIF87a\x01\0\x01\0\0\0\0", 13, "GIF"},
        {"BM\x3a\0\0\0\0\0\0\0\x36\0\0\0", 14, "BMP"},
        {"II*\0\x08\0\0\0", 8, "TIFF"},
        {"MM\0*\0\0\0\x08", 8, "TIFF"},
        {"\0\0\0\x1c" "ftypheic\0\0\0\0", 16, "HEIC"},
        {"\0\0\0\x1c" "ftypavif\0\0\0\0", 16, "AVIF"},
        {"\0\0\0\x1c" "ftypisom\0\0\0\0", 16, "MP4"},
        {"\xff\x0a\xfa\x7f", 4, "JPEG XL"},
        {"\0\0\0\x0cjP  \r\n\x87\n", 12, "JPEG 2000"},
        {"\0\0\1\0\1\0", 6, "ICO"},
        {"8BPS\0\1", 6, "PSD"},
        {"%PDF-1.4", 8, "PDF"},
        {"<svg xmlns=\"http://www.w3.org/2000/svg\"/>", 41, "SVG"},
        {"<!DOCTYPE html><html>", 21, "HTML"},
        {"iVBORw0KGgoAAAANSUhEUg", 22, "base64"},
        {"/9j/4AAQSkZJRgABAQ", 18, "base64"},
        {"data:image/png;base64,iVBOR", 27, "data: URL"},
        {"RIFF\x24\0\0\0WAVEfmt ", 16, "RIFF"},
        {"P6\n1 1\n255\n\0\0\0", 14, "PNM"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        g4_err err = {0};
        int rc = decode_mem(cases[i].bytes, cases[i].n, NULL, &err);
        if (rc != G4_EUNSUPPORTED || !strstr(err.msg, cases[i].name))
            fail_msg("case %zu (%s): rc %d, \"%s\"", i, cases[i].name, rc, err.msg);
    }
}

/* Every prefix of a valid file: refused with a format error, except the prefixes Pillow still
 * opens (cases/cuts.txt: a PNG whose rows are all there, for instance), which must decode to
 * the full file's pixels. Nothing leaks either way (ASan). */
static void test_truncated_everywhere(void **st) {
    (void)st;
    char *cuts = tu_read_file(tu_path("vision/cases/cuts.txt"), NULL);
    assert_non_null(cuts);
    int files = 0;
    for (char *line = strtok(cuts, "\n"); line; line = strtok(NULL, "\n")) {
        if (line[0] == '#') continue;
        char name[128];
        int off = 0;
        if (sscanf(line, "%127s%n", name, &off) != 1) continue;
        char rel[200];
        snprintf(rel, sizeof rel, "vision/cases/%s", name);
        size_t n;
        uint8_t *d = slurp(rel, &n);
        g4_image full;
        g4_err err = {0};
        assert_int_equal(g4_image_decode(d, n, NULL, &full, &err), G4_OK);
        uint8_t *ok = calloc(n + 1, 1);
        for (char *p = line + off; *p;) {
            char *e;
            long k = strtol(p, &e, 10);
            if (e == p) break;
            assert_true(k >= 0 && (size_t)k < n);
            ok[k] = 1;
            p = e;
        }
        for (size_t k = 0; k < n; k++) {
            uint8_t *cut = malloc(k ? k : 1);
            memcpy(cut, d, k);
            g4_image im;
            int rc = g4_image_decode(cut, k, NULL, &im, &err);
            if (ok[k]) {
                if (rc) fail_msg("%s cut to %zu of %zu bytes: Pillow opens it, we say rc %d \"%s\"", name, k, n, rc, err.msg);
                /* the same pixels, unless the orientation was in the part cut off */
                if (im.w == full.w && im.h == full.h) assert_memory_equal(im.rgb, full.rgb, (size_t)full.w * full.h * 3);
                g4_image_free(&im);
            } else if (rc != G4_EFORMAT) {
                fail_msg("%s cut to %zu of %zu bytes: rc %d \"%s\" (want a format error)", name, k, n, rc, rc ? err.msg : "");
            } else {
                assert_null(im.rgb);
            }
            free(cut);
        }
        free(ok);
        free(d);
        g4_image_free(&full);
        files++;
    }
    free(cuts);
    assert_int_equal(files, 9);
}

/* Bytes flipped anywhere: decoded or refused, never a crash, hang or leak. */
static void corruptions(const char *rel) {
    size_t n;
    uint8_t *d = slurp(rel, &n);
    uint32_t seed = 12345;
    for (int t = 0; t < 300; t++) {
        uint8_t *c = malloc(n);
        memcpy(c, d, n);
        for (int k = 0; k < 1 + t % 4; k++) {
            seed = seed * 1103515245u + 12345u;
            size_t at = (seed >> 8) % n;
            c[at] ^= (uint8_t)(1u << (seed % 8)) | (uint8_t)(t & 0xf0);
        }
        g4_err err = {0};
        int rc = decode_mem(c, n, NULL, &err);
        assert_true(rc == G4_OK || rc == G4_EFORMAT || rc == G4_EUNSUPPORTED || rc == G4_EINVAL);
        free(c);
    }
    free(d);
}

static void test_corrupted_bytes(void **st) {
    (void)st;
    corruptions("vision/cases/pal4_interlaced.png");
    corruptions("vision/cases/exif6.jpg");
    corruptions("vision/cases/progressive.jpg");
    corruptions("vision/cases/cmyk.jpg");
    corruptions("vision/cases/lossy_alpha.webp");
    corruptions("vision/cases/lossless.webp");
}

static uint32_t crc32_png(const uint8_t *p, size_t n) {
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
    }
    return ~c;
}

static void put32be(uint8_t *p, uint32_t v) { p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16); p[2] = (uint8_t)(v >> 8); p[3] = (uint8_t)v; }

/* A real PNG whose IHDR now declares w x h (CRC fixed): the IDAT is far too small for it. */
static uint8_t *png_declaring(uint32_t w, uint32_t h, size_t *n) {
    uint8_t *d = slurp("vision/cases/rgb8.png", n);
    assert_memory_equal(d + 12, "IHDR", 4);
    put32be(d + 16, w);
    put32be(d + 20, h);
    put32be(d + 29, crc32_png(d + 12, 17));
    return d;
}

static void test_decompression_bombs(void **st) {
    (void)st;
    g4_err err = {0};
    size_t n;
    /* 2^31-1 squared: refused from the header; a buffer for it would not even be allocatable */
    uint8_t *d = png_declaring(0x7fffffffu, 0x7fffffffu, &n);
    assert_int_equal(decode_mem(d, n, NULL, &err), G4_EINVAL);
    assert_non_null(strstr(err.msg, "limit"));
    free(d);
    d = png_declaring(20000, 20000, &n);   /* 400 M pixels: past the default 89.5 M */
    assert_int_equal(decode_mem(d, n, NULL, &err), G4_EINVAL);
    assert_non_null(strstr(err.msg, "400000000 pixels"));
    free(d);
    d = png_declaring(70000, 10, &n);      /* a side past 65535 */
    assert_int_equal(decode_mem(d, n, NULL, &err), G4_EINVAL);
    assert_non_null(strstr(err.msg, "side"));
    free(d);
    d = png_declaring(9000, 9000, &n);     /* within the limits: decoding starts, the data runs out */
    assert_int_equal(decode_mem(d, n, NULL, &err), G4_EFORMAT);
    free(d);
    /* JPEG: the SOF of a baseline file declares 65000 x 65000 */
    d = slurp("vision/cases/q90_420.jpg", &n);
    size_t sof = 0;
    for (size_t i = 2; i + 9 < n; i++)
        if (d[i] == 0xff && d[i + 1] == 0xc0) { sof = i; break; }
    assert_true(sof > 0);
    d[sof + 5] = 0xfd; d[sof + 6] = 0xe8; d[sof + 7] = 0xfd; d[sof + 8] = 0xe8;
    assert_int_equal(decode_mem(d, n, NULL, &err), G4_EINVAL);
    assert_non_null(strstr(err.msg, "JPEG"));
    /* the same file with 12-bit samples declared: refused as unsupported, as Pillow refuses it */
    d[sof + 5] = 0; d[sof + 6] = 23; d[sof + 7] = 0; d[sof + 8] = 37;
    d[sof + 4] = 12;
    assert_int_equal(decode_mem(d, n, NULL, &err), G4_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "12-bit"));
    free(d);
    /* WebP: an animated file's canvas (VP8X) declares 16384 x 16384 */
    d = slurp("vision/cases/anim.webp", &n);
    assert_memory_equal(d + 12, "VP8X", 4);
    d[24] = 0xff; d[25] = 0x3f; d[26] = 0;  /* canvas width - 1 = 16383, 24-bit little-endian */
    d[27] = 0xff; d[28] = 0x3f; d[29] = 0;
    int rc = decode_mem(d, n, NULL, &err);
    assert_int_equal(rc, G4_EINVAL);
    assert_non_null(strstr(err.msg, "WebP"));
    free(d);
}

static void test_limits(void **st) {
    (void)st;
    g4_image_limits lim;
    g4_image_limits_default(&lim);
    assert_int_equal(lim.max_bytes, 20u << 20);
    assert_true(lim.max_pixels == 89478485);
    assert_int_equal(lim.max_side, 65535);
    size_t n;
    uint8_t *d = slurp("vision/cases/q90_420.jpg", &n);   /* 37 x 23 */
    g4_err err = {0};
    lim.max_pixels = 37 * 23;
    assert_int_equal(decode_mem(d, n, &lim, &err), G4_OK);
    lim.max_pixels = 37 * 23 - 1;
    assert_int_equal(decode_mem(d, n, &lim, &err), G4_EINVAL);
    g4_image_limits_default(&lim);
    lim.max_side = 36;
    assert_int_equal(decode_mem(d, n, &lim, &err), G4_EINVAL);
    g4_image_limits_default(&lim);
    lim.max_bytes = n - 1;
    assert_int_equal(decode_mem(d, n, &lim, &err), G4_EINVAL);
    assert_non_null(strstr(err.msg, "bytes"));
    lim.max_bytes = 0;
    assert_int_equal(decode_mem(d, n, &lim, &err), G4_EINVAL);
    free(d);
    /* the same limits from a file: the size is checked before reading */
    g4_image im;
    g4_image_limits_default(&lim);
    lim.max_bytes = 100;
    assert_int_equal(g4_image_load_file(tu_path("vision/cases/q90_420.jpg"), &lim, &im, &err), G4_EINVAL);
    assert_non_null(strstr(err.msg, "q90_420.jpg"));
    assert_null(im.rgb);
}

static void test_files(void **st) {
    (void)st;
    g4_image im;
    g4_err err = {0};
    assert_int_equal(g4_image_load_file("/nonexistent/x.png", NULL, &im, &err), G4_EIO);
    assert_non_null(strstr(err.msg, "/nonexistent/x.png"));
    assert_int_equal(g4_image_load_file(tu_data_dir(), NULL, &im, &err), G4_EIO);
    assert_non_null(strstr(err.msg, "directory"));
    char p[512];
    snprintf(p, sizeof p, "%s/empty.png", tu_tmpdir());
    FILE *f = fopen(p, "wb");
    fclose(f);
    assert_int_equal(g4_image_load_file(p, NULL, &im, &err), G4_EFORMAT);
    assert_non_null(strstr(err.msg, "empty"));
    /* the format comes from the bytes, not the name: a JPEG named .png decodes as JPEG */
    size_t n;
    uint8_t *d = slurp("vision/cases/q90_420.jpg", &n);
    snprintf(p, sizeof p, "%s/really_a_jpeg.png", tu_tmpdir());
    f = fopen(p, "wb");
    fwrite(d, 1, n, f);
    fclose(f);
    free(d);
    im = decode_ok(p);
    assert_int_equal(im.w, 37);
    g4_image_free(&im);
    g4_image_free(&im);   /* twice is harmless */
    g4_image_free(NULL);
}

static void test_sniff(void **st) {
    (void)st;
    assert_string_equal(g4_image_sniff("\x89PNG\r\n\x1a\nxxxx", 12), "PNG");
    assert_string_equal(g4_image_sniff("\xff\xd8\xff\xe0", 4), "JPEG");
    assert_string_equal(g4_image_sniff("RIFF\0\0\0\0WEBPVP8 ", 16), "WebP");
    assert_null(g4_image_sniff("hello", 5));
    assert_null(g4_image_sniff(NULL, 0));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden_pixels),
        cmocka_unit_test(test_cases_match_pillow),
        cmocka_unit_test(test_empty_and_tiny),
        cmocka_unit_test(test_refused_formats_named),
        cmocka_unit_test(test_truncated_everywhere),
        cmocka_unit_test(test_corrupted_bytes),
        cmocka_unit_test(test_decompression_bombs),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_files),
        cmocka_unit_test(test_sniff),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
