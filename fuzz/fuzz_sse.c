/* fuzz_sse.c — server-sent events for streamed completions: generated text (the input, cut into
 * deltas) through g4_sse to frames, taken out in small reads as the HTTP side does. Input: a
 * flags byte (chat with output parsing or completions, usage chunk, start in a thought, finish
 * reason, keep-alive comments, an error instead of the finish) and a seed byte for the cuts.
 * Invariants for valid UTF-8 text (what the detokenizer emits): every frame is `data: JSON` or a
 * comment, the stream ends with `data: [DONE]`, the content (and reasoning) deltas add up to
 * the whole-text parse (chat) or the text itself (completions), the finish chunk carries the
 * right reason, and tool-call deltas carry the parsed calls. */
#include <jansson.h>

#include "fuzz_util.h"
#include "server/openai.h"
#include "server/sse.h"

static void add_str(fuzz_acc *a, json_t *v) {
    if (!v || json_is_null(v)) return;
    FUZZ_CHECK(json_is_string(v), "delta text is not a string");
    fuzz_acc_add(a, json_string_value(v), json_string_length(v));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_in in = {data, size};
    unsigned flags = fuzz_byte(&in), seed = fuzz_byte(&in);
    const char *text = (const char *)in.p;
    size_t len = in.n;
    int chat = flags & 1, parse = chat /* the server always parses chat output */, usage = (flags >> 2) & 1, fail = (flags & 0x30) == 0x30;
    const char *reason = flags & 8 ? "length" : "stop";
    g4_sse_opts o = {.shape = &g4_openai_sse_shape, .kind = chat ? G4_API_CHAT : G4_API_COMPLETIONS, .id = "chatcmpl-1", .model = "m", .created = 1,
                     .include_usage = usage, .parse_output = parse, .start_in_thought = parse && (flags & 0x40)};
    g4_sse *s;
    g4_err err = {0};
    FUZZ_CHECK(g4_sse_create(&o, &s, &err) == 0, "create: %s", err.msg);
    int utf8 = fuzz_utf8_ok(text, len);
    fuzz_acc wire = {0};
    fuzz_acc_add(&wire, "", 0);
    char buf[61];
    fuzz_cutter c = fuzz_cutter_new(text, len, seed, utf8);
    int rc = 0;
    while (c.at < len && !rc) {
        size_t k = fuzz_cut(&c);
        rc = g4_sse_feed(s, text + c.at - k, k, &err);
        if (rc) FUZZ_CHECK(!utf8 && err.msg[0], "feed failed on valid UTF-8: %s", err.msg);
        if (flags & 0x10 && !fail) FUZZ_CHECK(g4_sse_comment(s, "keep-alive") == 0, "comment");
        for (size_t got; (got = g4_sse_take(s, buf, 1 + c.rng % 60)) > 0;) fuzz_acc_add(&wire, buf, got);
    }
    if (rc || fail) {
        g4_api_err ae;
        g4_api_err_status(&ae, G4_ECOMM, NULL, "a rank failed");
        FUZZ_CHECK(g4_sse_error(s, &ae) == 0, "error frame");
    } else {
        FUZZ_CHECK(g4_sse_finish(s, reason, 3, 4, &err) == 0, "finish: %s", err.msg);
    }
    FUZZ_CHECK(g4_sse_closed(s) && g4_sse_feed(s, "x", 1, &err) != 0, "feed after close accepted");
    for (size_t got; (got = g4_sse_take(s, buf, sizeof buf)) > 0;) fuzz_acc_add(&wire, buf, got);
    FUZZ_CHECK(g4_sse_pending(s) == 0, "bytes left");

    /* read the frames back */
    fuzz_acc content = {0}, reasoning = {0};
    fuzz_acc_add(&content, "", 0); /* allocated even when nothing comes */
    fuzz_acc_add(&reasoning, "", 0);
    fuzz_in w = {(const uint8_t *)wire.p, wire.n};
    int done = 0, finished = 0, saw_error = 0;
    size_t n_calls = 0;
    fuzz_acc call_args[64] = {{0}}; /* each call's arguments as streamed: a first delta, then pieces */
    while (w.n) {
        fuzz_in f = fuzz_split(&w, "\n\n");
        FUZZ_CHECK(!done, "a frame after [DONE]");
        if (f.n >= 2 && !memcmp(f.p, ": ", 2)) continue;
        FUZZ_CHECK(f.n > 6 && !memcmp(f.p, "data: ", 6), "frame without data: %.*s", (int)f.n, (const char *)f.p);
        if (f.n == 12 && !memcmp(f.p + 6, "[DONE]", 6)) { done = 1; continue; }
        json_error_t je;
        json_t *j = json_loadb((const char *)f.p + 6, f.n - 6, JSON_ALLOW_NUL, &je);
        FUZZ_CHECK(json_is_object(j), "frame is not a JSON object: %s", je.text);
        if (json_object_get(j, "error")) saw_error = 1;
        if (!utf8) { /* out of contract (the detokenizer emits whole characters): only no crash, valid JSON */
            json_decref(j);
            continue;
        }
        json_t *ch = json_array_get(json_object_get(j, "choices"), 0);
        if (ch) {
            json_t *fr = json_object_get(ch, "finish_reason");
            if (json_is_string(fr)) { FUZZ_CHECK(!finished, "two finish chunks"); finished = 1; FUZZ_CHECK(!strcmp(json_string_value(fr), g4_sse_finish_reason(s)), "finish reason"); }
            if (chat) {
                json_t *d = json_object_get(ch, "delta");
                FUZZ_CHECK(json_is_object(d), "chat chunk without a delta");
                add_str(&content, json_object_get(d, "content"));
                add_str(&reasoning, json_object_get(d, "reasoning_content"));
                json_t *tc = json_array_get(json_object_get(d, "tool_calls"), 0);
                if (tc) { /* a new call (index n_calls, with its name) or more arguments of the last one */
                    json_int_t idx = json_integer_value(json_object_get(tc, "index"));
                    json_t *fn = json_object_get(tc, "function");
                    if (idx == (json_int_t)n_calls) {
                        FUZZ_CHECK(json_is_string(json_object_get(fn, "name")) && n_calls < 64, "tool call %zu starts without a name", n_calls);
                        n_calls++;
                    } else FUZZ_CHECK(n_calls > 0 && idx == (json_int_t)n_calls - 1, "tool call delta index %lld after %zu calls", (long long)idx, n_calls);
                    add_str(&call_args[n_calls - 1], json_object_get(fn, "arguments"));
                }
            } else add_str(&content, json_object_get(ch, "text"));
        } else FUZZ_CHECK(usage || json_object_get(j, "error"), "a frame without choices");
        json_decref(j);
    }
    FUZZ_CHECK(done, "no [DONE] at the end");
    for (size_t k = 0; k < n_calls; k++) { /* the pieces reassemble to a JSON object */
        json_t *a = json_loadb(call_args[k].p ? call_args[k].p : "", call_args[k].n, JSON_ALLOW_NUL, NULL);
        FUZZ_CHECK(json_is_object(a), "tool call %zu: arguments do not reassemble to an object", k);
        json_decref(a);
        free(call_args[k].p);
    }
    if (!rc && !fail && utf8) {
        FUZZ_CHECK(finished && !saw_error, "no finish chunk");
        if (parse) {
            g4_output_parse_opts po = {.start_in_thought = o.start_in_thought};
            g4_parsed_output p;
            FUZZ_CHECK(g4_output_parse_ex(text, len, &po, &p, &err) == 0, "parse");
            FUZZ_CHECK(content.n == p.content_len && !memcmp(content.p, p.content, content.n) && reasoning.n == p.reasoning_len &&
                           !memcmp(reasoning.p, p.reasoning, reasoning.n) && n_calls == p.n_calls, "streamed chat differs from the parse");
            FUZZ_CHECK(!strcmp(g4_sse_finish_reason(s), p.n_calls && !strcmp(reason, "stop") ? "tool_calls" : reason), "finish reason %s", g4_sse_finish_reason(s));
            g4_parsed_output_free(&p);
        } else {
            FUZZ_CHECK(content.n == len && !memcmp(content.p, text, len), "streamed text differs from the input");
        }
    } else if (utf8) FUZZ_CHECK(saw_error && !finished, "error stream");
    free(content.p);
    free(reasoning.p);
    free(wire.p);
    g4_sse_free(s);
    return 0;
}
