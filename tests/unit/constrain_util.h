/* constrain_util.h — test helpers for constrained decoding: feeding a matcher text in which
 * control tokens are written out, and the tool set the tool-call tests use with the check of
 * what a walk through its masks produced. */
#ifndef G4_TEST_CONSTRAIN_UTIL_H
#define G4_TEST_CONSTRAIN_UTIL_H

#include <jansson.h>

#include "testutil.h"
#include "grammar/grammar.h"
#include "text/output_parser.h"
#include "text/tokenizer.h"

/* A tokenizer and its vocabulary index for masks over n_ids ids (0: the tokenizer's size), for
 * group setups: 0, or -1 with the reason on stderr. */
static inline int tu_vocab_open(const char *path, int n_ids, g4_tokenizer **tok, g4_vocab **v) {
    g4_err err = {0};
    if (g4_tokenizer_load(path, tok, &err) || g4_vocab_create(*tok, n_ids ? n_ids : g4_tokenizer_vocab_size(*tok), v, &err)) {
        fprintf(stderr, "%s: %s\n", path, err.msg);
        return -1;
    }
    return 0;
}

/* Feeds t to m, taking each of the n special texts in it as that token of tok (the longest
 * that matches), and the text between them as bytes. 0, or -1 when the matcher refuses. */
static inline int tu_feed(g4_matcher *m, const g4_tokenizer *tok, const char *const *special, int n, const char *t) {
    g4_err err = {0};
    size_t len = strlen(t), i = 0;
    while (i < len) {
        int k = -1;
        for (int j = 0; j < n; j++)
            if (!strncmp(t + i, special[j], strlen(special[j])) && (k < 0 || strlen(special[j]) > strlen(special[k]))) k = j;
        if (k >= 0) {
            if (g4_matcher_accept(m, g4_tokenizer_token_id(tok, special[k], strlen(special[k])), &err)) return -1;
            i += strlen(special[k]);
            continue;
        }
        size_t e = i + 1;
        while (e < len && t[e] != '<') e++;
        if (g4_matcher_accept_bytes(m, t + i, e - i, &err)) return -1;
        i = e;
    }
    return 0;
}

static const char TU_TOOLS[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\",\"properties\":{"
    "\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":7},\"units\":{\"enum\":[\"c\",\"f\"]}},"
    "\"required\":[\"city\"]}}},{\"type\":\"function\",\"function\":{\"name\":\"now\"}}]";

/* An output made under TU_TOOLS with calls required: only calls, each well-formed with
 * arguments that fit its schema. Returns how many. */
static inline size_t tu_check_tool_output(const char *t, size_t n) {
    g4_parsed_output po;
    g4_err err = {0};
    assert_int_equal(g4_output_parse(t, n, &po, &err), 0);
    if (po.malformed || po.n_calls < 1) fail_msg("'%s' gave %zu calls, %d malformed (%s)", t, po.n_calls, po.malformed, po.malformed_msg ? po.malformed_msg : "");
    assert_int_equal(po.content_len, 0);
    for (size_t k = 0; k < po.n_calls; k++) {
        const json_t *a = po.calls[k].arguments;
        if (!strcmp(po.calls[k].name, "now")) { assert_int_equal(json_object_size(a), 0); continue; }
        assert_string_equal(po.calls[k].name, "get_weather");
        assert_true(json_is_string(json_object_get(a, "city")));
        const json_t *d = json_object_get(a, "days"), *u = json_object_get(a, "units");
        if (d) assert_true(json_is_integer(d) && json_integer_value(d) >= 1 && json_integer_value(d) <= 7);
        if (u) assert_true(!strcmp(json_string_value(u), "c") || !strcmp(json_string_value(u), "f"));
    }
    const size_t calls = po.n_calls;
    g4_parsed_output_free(&po);
    return calls;
}

#endif
