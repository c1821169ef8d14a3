/* logprob_json.c — token log-probabilities as OpenAI JSON (see logprob_json.h). Knows the
 * tokenizer's pieces and the JSON shapes; nothing about HTTP or the scheduler. */
#include "server/logprob_json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/utf8.h"

/* The exact bytes of a token into buf (up to cap); returns the length. */
static size_t token_bytes(const g4_tokenizer *tok, int32_t id, char *buf, size_t cap) {
    size_t pl = 0;
    const char *piece = g4_tokenizer_piece(tok, id, &pl);
    unsigned v;
    char tail;
    /* a byte-fallback token: decoding it alone would give U+FFFD for a partial character */
    if (piece && pl == 6 && !g4_tokenizer_is_special(tok, id) && !memcmp(piece, "<0x", 3) && sscanf(piece + 3, "%2x%c", &v, &tail) == 2 &&
        tail == '>') {
        buf[0] = (char)v;
        return 1;
    }
    char *text = NULL;
    size_t len = 0;
    g4_err err;
    if (g4_tokenizer_decode(tok, &id, 1, 0, &text, &len, &err)) return 0;
    if (len > cap) len = cap;
    memcpy(buf, text, len);
    free(text);
    return len;
}

/* `token`: the text itself when it is valid UTF-8 without U+0000 (usable as an object key),
 * else "bytes:" and a \xNN per byte. */
static json_t *token_string(const char *b, size_t n) {
    if (g4_utf8_invalid_at(b, n) >= n && !memchr(b, 0, n)) return json_stringn(b, n);
    char out[6 + 4 * 256 + 1];
    size_t k = (size_t)snprintf(out, sizeof out, "bytes:");
    for (size_t i = 0; i < n && k + 4 < sizeof out; i++) k += (size_t)snprintf(out + k, sizeof out - k, "\\x%02x", (unsigned char)b[i]);
    return json_stringn(out, k);
}

static json_t *bytes_array(const char *b, size_t n) {
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(a, json_integer((unsigned char)b[i]));
    return a;
}

static json_t *chat_entry(const g4_tokenizer *tok, int32_t id, float lp) {
    char b[256];
    size_t n = token_bytes(tok, id, b, sizeof b);
    return json_pack("{s:o,s:f,s:o}", "token", token_string(b, n), "logprob", (double)lp, "bytes", bytes_array(b, n));
}

int g4_lpj_chat_append(const g4_tokenizer *tok, const g4_token_logprob *lp, size_t n, json_t *arr) {
    for (size_t i = 0; i < n; i++) {
        json_t *e = chat_entry(tok, lp[i].id, lp[i].logprob), *top = json_array();
        if (!e || !top) { json_decref(e); json_decref(top); return G4_ENOMEM; }
        for (int k = 0; k < lp[i].n_top; k++) json_array_append_new(top, chat_entry(tok, lp[i].top_id[k], lp[i].top_logprob[k]));
        json_object_set_new(e, "top_logprobs", top);
        if (json_array_append_new(arr, e)) return G4_ENOMEM;
    }
    return G4_OK;
}

void g4_lpj_completion_init(g4_lpj_completion *c) {
    c->tokens = json_array();
    c->token_logprobs = json_array();
    c->top_logprobs = json_array();
    c->text_offset = json_array();
    c->offset = 0;
}

int g4_lpj_completion_append(g4_lpj_completion *c, const g4_tokenizer *tok, const g4_token_logprob *lp, size_t n, int first_null) {
    if (!c->tokens || !c->token_logprobs || !c->top_logprobs || !c->text_offset) return G4_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        char b[256];
        size_t len = token_bytes(tok, lp[i].id, b, sizeof b);
        json_t *ts = token_string(b, len);
        json_array_append_new(c->text_offset, json_integer((json_int_t)c->offset));
        c->offset += json_string_length(ts);
        json_array_append_new(c->tokens, ts);
        if (first_null && i == 0) {
            json_array_append_new(c->token_logprobs, json_null());
            json_array_append_new(c->top_logprobs, json_null());
            continue;
        }
        json_array_append_new(c->token_logprobs, json_real((double)lp[i].logprob));
        /* the top ones and, as OpenAI does, always the chosen token (logprobs + 1 at most);
         * two tokens with the same text keep the likelier */
        json_t *top = json_object();
        for (int k = 0; k <= lp[i].n_top; k++) {
            const int32_t id = k < lp[i].n_top ? lp[i].top_id[k] : lp[i].id;
            const float v = k < lp[i].n_top ? lp[i].top_logprob[k] : lp[i].logprob;
            char tb[256];
            json_t *key = token_string(tb, token_bytes(tok, id, tb, sizeof tb));
            const char *ks = json_string_value(key);
            if (ks && !json_object_get(top, ks)) json_object_set_new(top, ks, json_real((double)v));
            json_decref(key);
        }
        json_array_append_new(c->top_logprobs, top);
    }
    return G4_OK;
}

json_t *g4_lpj_completion_take(g4_lpj_completion *c) {
    json_t *o = json_pack("{s:o,s:o,s:o,s:o}", "tokens", c->tokens, "token_logprobs", c->token_logprobs, "top_logprobs", c->top_logprobs,
                          "text_offset", c->text_offset);
    const size_t off = c->offset;
    g4_lpj_completion_init(c);
    c->offset = off;
    return o;
}

void g4_lpj_completion_clear(g4_lpj_completion *c) {
    json_decref(c->tokens);
    json_decref(c->token_logprobs);
    json_decref(c->top_logprobs);
    json_decref(c->text_offset);
    memset(c, 0, sizeof *c);
}
