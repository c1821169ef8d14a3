/* fuzz_output_parser.c — the Gemma-4 output parser (thinking channel, answer, tool calls) and
 * the tool-call argument syntax. Input: a flags byte (start inside a thought; parse the rest as
 * one tool-call body), a seed byte for the stream cuts, then the text. Invariants: the streaming
 * parse, fed the text in deltas, gives the same reasoning, content and calls as the whole-text
 * parse (output_parser.h promises it for every split); each call's arguments_json is a JSON
 * object equal to its arguments; for valid UTF-8 text every delta and result is valid UTF-8. */
#include <jansson.h>

#include "fuzz_util.h"
#include "text/output_parser.h"

static void check_call(const g4_tool_call *c) {
    FUZZ_CHECK(c->name && c->arguments_json && json_is_object(c->arguments), "call fields");
    json_error_t je;
    json_t *j = json_loads(c->arguments_json, JSON_ALLOW_NUL, &je);
    FUZZ_CHECK(json_is_object(j), "arguments_json is not a JSON object: %s (%s)", c->arguments_json, je.text);
    FUZZ_CHECK(json_equal(j, c->arguments), "arguments_json differs from arguments: %s", c->arguments_json);
    json_decref(j);
}

static void check_same(const g4_parsed_output *a, const g4_parsed_output *b, const char *what) {
    FUZZ_CHECK(a->reasoning_len == b->reasoning_len && !memcmp(a->reasoning, b->reasoning, a->reasoning_len), "%s: reasoning differs", what);
    FUZZ_CHECK(a->content_len == b->content_len && !memcmp(a->content, b->content, a->content_len), "%s: content differs", what);
    FUZZ_CHECK(a->n_calls == b->n_calls && a->malformed == b->malformed && a->ended == b->ended, "%s: %zu/%zu calls, %d/%d malformed, ended %d/%d",
               what, a->n_calls, b->n_calls, a->malformed, b->malformed, a->ended, b->ended);
    for (size_t i = 0; i < a->n_calls; i++)
        FUZZ_CHECK(!strcmp(a->calls[i].name, b->calls[i].name) && !strcmp(a->calls[i].arguments_json, b->calls[i].arguments_json), "%s: call %zu differs", what, i);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_in in = {data, size};
    unsigned flags = fuzz_byte(&in), seed = fuzz_byte(&in);
    const char *text = (const char *)in.p;
    size_t len = in.n;
    int utf8 = fuzz_utf8_ok(text, len);
    g4_err err = {0};
    if (flags & 2) { /* one tool-call body */
        g4_tool_call c;
        memset(&c, 0, sizeof c);
        int rc = g4_tool_call_parse(text, len, &c, &err);
        if (rc) FUZZ_CHECK(rc == G4_EFORMAT && err.msg[0], "tool call: rc %d %s", rc, err.msg);
        else {
            check_call(&c);
            if (utf8) FUZZ_CHECK(fuzz_utf8_ok(c.name, strlen(c.name)), "name not UTF-8");
        }
        g4_tool_call_free(&c);
        return 0;
    }
    g4_output_parse_opts opts = {.start_in_thought = flags & 1};
    g4_parsed_output whole;
    FUZZ_CHECK(g4_output_parse_ex(text, len, &opts, &whole, &err) == 0, "parse failed: %s", err.msg);
    FUZZ_CHECK(whole.reasoning && whole.content && (whole.n_calls == 0 || whole.calls), "result fields");
    for (size_t i = 0; i < whole.n_calls; i++) check_call(&whole.calls[i]);
    FUZZ_CHECK(whole.reasoning[whole.reasoning_len] == 0 && whole.content[whole.content_len] == 0, "results not NUL-terminated");
    if (utf8) FUZZ_CHECK(fuzz_utf8_ok(whole.reasoning, whole.reasoning_len) && fuzz_utf8_ok(whole.content, whole.content_len), "result not UTF-8");

    g4_output_stream *s;
    FUZZ_CHECK(g4_output_stream_create(&opts, &s, &err) == 0, "stream create: %s", err.msg);
    fuzz_acc reasoning = {0}, content = {0};
    fuzz_acc_add(&reasoning, "", 0); /* allocated even when nothing comes */
    fuzz_acc_add(&content, "", 0);
    size_t n_calls = 0;
    fuzz_cutter cut = fuzz_cutter_new(text, len, seed, utf8);
    for (int last = 0; !last;) {
        size_t k = fuzz_cut(&cut);
        const g4_out_event *ev;
        size_t nev;
        last = cut.at == len && (seed & 1 || k == 0); /* the final feed may be empty or not */
        int rc = g4_output_stream_feed(s, text + cut.at - k, k, &ev, &nev, &err);
        FUZZ_CHECK(rc == 0, "feed: %s", err.msg);
        for (int fin = 0; fin < 1 + last; fin++) {
            if (fin) FUZZ_CHECK(g4_output_stream_finish(s, &ev, &nev, &err) == 0, "finish: %s", err.msg);
            for (size_t e = 0; e < nev; e++) {
                if (ev[e].kind == G4_OUT_TOOL_CALL) {
                    FUZZ_CHECK(ev[e].call_index == n_calls && n_calls < whole.n_calls, "call event %zu out of order", ev[e].call_index);
                    FUZZ_CHECK(!strcmp(ev[e].call->arguments_json, whole.calls[n_calls].arguments_json), "call %zu differs", n_calls);
                    n_calls++;
                    continue;
                }
                if (utf8) FUZZ_CHECK(fuzz_utf8_ok(ev[e].text, ev[e].len), "delta is not whole UTF-8");
                fuzz_acc_add(ev[e].kind == G4_OUT_REASONING ? &reasoning : &content, ev[e].text, ev[e].len);
            }
        }
    }
    const g4_out_event *ev;
    size_t nev;
    FUZZ_CHECK(g4_output_stream_feed(s, "x", 1, &ev, &nev, &err) == G4_EINVAL, "feed after finish accepted");
    FUZZ_CHECK(reasoning.n == whole.reasoning_len && !memcmp(reasoning.p, whole.reasoning, reasoning.n), "streamed reasoning \"%s\" vs \"%s\"", reasoning.p, whole.reasoning);
    FUZZ_CHECK(content.n == whole.content_len && !memcmp(content.p, whole.content, content.n), "streamed content \"%s\" vs \"%s\"", content.p, whole.content);
    FUZZ_CHECK(n_calls == whole.n_calls, "%zu call events, %zu calls", n_calls, whole.n_calls);
    g4_parsed_output taken;
    FUZZ_CHECK(g4_output_stream_take(s, &taken, &err) == 0, "take: %s", err.msg);
    check_same(&whole, &taken, "take");
    g4_parsed_output_free(&taken);
    g4_output_stream_free(s);
    free(reasoning.p);
    free(content.p);
    g4_parsed_output_free(&whole);
    return 0;
}
