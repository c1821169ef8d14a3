/* fuzz_tok.h — the tokenizer invariants both tokenizer harnesses check (see tokenizer.h):
 * encode gives ids the tokenizer knows (bar the post-processor's), decode and the streaming
 * detokenizer agree byte for byte, and every streamed piece is whole UTF-8 when the whole text is. */
#ifndef G4_FUZZ_TOK_H
#define G4_FUZZ_TOK_H

#include "fuzz_util.h"
#include "text/tokenizer.h"

/* Decodes ids whole and streamed; returns the whole text (malloc'd) and checks they agree. */
static inline char *fuzz_decode_both(const g4_tokenizer *tok, const int32_t *ids, size_t n, int skip_special, size_t *len) {
    g4_err err = {0};
    char *text = NULL;
    int rc = g4_tokenizer_decode(tok, ids, n, skip_special, &text, len, &err);
    FUZZ_CHECK(rc == 0, "decode failed: %s", err.msg);
    FUZZ_CHECK(strlen(text) <= *len && text[*len] == 0, "decode result not NUL-terminated");
    g4_detok *d = NULL;
    rc = g4_detok_create(tok, skip_special, &d, &err);
    if (rc) { /* refused for decoders that are not prefix-stable */
        FUZZ_CHECK(rc == G4_EUNSUPPORTED, "detok_create: %s", err.msg);
        return text;
    }
    int whole_ok = fuzz_utf8_ok(text, *len);
    char *cat = malloc(*len + 1);
    size_t at = 0;
    for (size_t i = 0; i <= n; i++) {
        char *piece;
        size_t pl;
        rc = i < n ? g4_detok_push(d, ids[i], &piece, &pl, &err) : g4_detok_flush(d, &piece, &pl, &err);
        FUZZ_CHECK(rc == 0, "detok: %s", err.msg);
        FUZZ_CHECK(at + pl <= *len && memcmp(text + at, piece, pl) == 0, "streamed text differs from decode at byte %zu (id %zu of %zu)", at, i, n);
        if (whole_ok) FUZZ_CHECK(fuzz_utf8_ok(piece, pl), "streamed piece %zu is not whole UTF-8", i);
        memcpy(cat + at, piece, pl);
        at += pl;
        free(piece);
    }
    FUZZ_CHECK(at == *len, "streamed %zu bytes, decode %zu", at, *len);
    free(cat);
    g4_detok_free(d);
    return text;
}

/* Encodes text and checks the ids; returns them (malloc'd) or NULL when encode refused. */
static inline int32_t *fuzz_encode(const g4_tokenizer *tok, const char *text, size_t len, int add_special, size_t *n) {
    g4_err err = {0};
    int32_t *ids = NULL;
    int rc = g4_tokenizer_encode(tok, text, len, add_special, &ids, n, &err);
    size_t bad = g4_utf8_invalid_at(text, len);
    if (rc) {
        FUZZ_CHECK(rc == G4_EFORMAT && bad < len, "encode failed on valid UTF-8: rc %d %s", rc, err.msg);
        FUZZ_CHECK(ids == NULL || *n == 0, "ids left after a failure");
        free(ids);
        return NULL;
    }
    FUZZ_CHECK(bad == len, "encode accepted invalid UTF-8 at byte %zu", bad);
    FUZZ_CHECK(ids != NULL, "ids NULL on success");
    int vs = g4_tokenizer_vocab_size(tok);
    /* the post-processor's ids are used as written, like HF (the engine checks ids against the
     * model's vocabulary); everything else must be a token */
    for (size_t i = 0; i < *n; i++)
        FUZZ_CHECK(ids[i] >= 0 && (add_special || (ids[i] < vs && g4_tokenizer_piece(tok, ids[i], NULL))), "id %d is not a token", ids[i]);
    return ids;
}

#endif
