/* fuzz_tokenizer.c — encode and decode with the demo model's tokenizer (the real Gemma
 * pipeline: Replace normalizer, BPE with byte fallback, added special tokens, Replace /
 * ByteFallback / Fuse decoder). The first input byte picks the mode, the rest is the text or the
 * ids. Invariants: encode accepts exactly valid UTF-8; decode(encode(text)) gives text back
 * (U+2581 reads back as a space, as in HF: the normalizer's space marker); decode output is
 * valid UTF-8 and the streaming detokenizer gives the same bytes, for any ids. */
#include "fuzz_tok.h"

static g4_tokenizer *tok;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    size_t len;
    char *json = fuzz_repo_file("models/demo/tokenizer.json", &len);
    g4_err err = {0};
    if (g4_tokenizer_load_json(json, len, &tok, &err)) { fprintf(stderr, "demo tokenizer: %s\n", err.msg); abort(); }
    free(json);
    return 0;
}

/* text with every U+2581 (e2 96 81) turned into a space: what a round trip gives back */
static char *spaces_for_markers(const char *s, size_t n, size_t *out_n) {
    char *o = malloc(n + 1);
    size_t j = 0;
    for (size_t i = 0; i < n; i++) {
        if (i + 2 < n && (unsigned char)s[i] == 0xe2 && (unsigned char)s[i + 1] == 0x96 && (unsigned char)s[i + 2] == 0x81) {
            o[j++] = ' ';
            i += 2;
        } else o[j++] = s[i];
    }
    *out_n = j;
    return o;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_in in = {data, size};
    unsigned mode = fuzz_byte(&in);
    int add_special = mode & 1, skip_special = (mode >> 1) & 1;
    if (mode & 4) { /* ids: little-endian int32, any value */
        size_t n = in.n / 4;
        int32_t *ids = malloc((n + 1) * sizeof *ids);
        for (size_t i = 0; i < n; i++) memcpy(&ids[i], in.p + 4 * i, 4);
        size_t len;
        char *text = fuzz_decode_both(tok, ids, n, skip_special, &len);
        FUZZ_CHECK(fuzz_utf8_ok(text, len), "decode output is not valid UTF-8");
        free(text);
        free(ids);
        return 0;
    }
    size_t n = 0, len, want_len;
    int32_t *ids = fuzz_encode(tok, (const char *)in.p, in.n, add_special, &n);
    if (!ids) return 0;
    char *text = fuzz_decode_both(tok, ids, n, 0, &len);
    if (!add_special) {
        char *want = spaces_for_markers((const char *)in.p, in.n, &want_len);
        FUZZ_CHECK(len == want_len && memcmp(text, want, len) == 0, "round trip differs (%zu bytes back for %zu)", len, want_len);
        free(want);
    }
    free(text);
    free(ids);
    return 0;
}
