/* fuzz_tokenizer_load.c — tokenizer.json loading (the fast JSON reader tok_json.c, then the
 * vocab, merges, added tokens and pipeline checks of tokenizer.c), and a loaded tokenizer in
 * use: a fixed text encoded, the ids decoded whole and streamed (they must agree). */
#include "fuzz_tok.h"

static const char sample[] = "Hello world! <start_of_turn>user\n  tabs\tand\nnewlines  \xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80 1234 \xe2\x96\x81x";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    g4_tokenizer *tok = NULL;
    g4_err err = {0};
    int rc = g4_tokenizer_load_json((const char *)data, size, &tok, &err);
    if (rc) {
        FUZZ_CHECK_ERR(rc, err);
        FUZZ_CHECK(tok == NULL, "tokenizer returned with a failure");
        return 0;
    }
    FUZZ_CHECK(g4_tokenizer_vocab_size(tok) >= 0, "vocab size");
    for (int add = 0; add < 2; add++) {
        size_t n = 0, len;
        int32_t *ids = fuzz_encode(tok, sample, sizeof sample - 1, add, &n);
        if (ids) free(fuzz_decode_both(tok, ids, n, add, &len));
        free(ids);
    }
    /* every id once, in order: every piece through the decoder chain */
    int vs = g4_tokenizer_vocab_size(tok);
    if (vs > 0 && vs <= 1 << 16) {
        int32_t *all = malloc((size_t)vs * sizeof *all);
        for (int i = 0; i < vs; i++) all[i] = i;
        size_t len;
        free(fuzz_decode_both(tok, all, (size_t)vs, 0, &len));
        free(all);
    }
    g4_tokenizer_free(tok);
    return 0;
}
