/* test_server.c — the server's pure pieces: the one error mapping (status, type, code, body
 * shape), OpenAI request parsing and validation, response objects (tool calls, reasoning,
 * finish reasons), SSE chunk streams (the same result for every split of the generated text),
 * and the Prometheus exposition. HTTP and generation are covered by tests/e2e/server_*.sh. */
#include "testutil.h"

#include <jansson.h>

#include "server/errors.h"
#include "server/guard.h"
#include "server/metrics.h"
#include "server/openai.h"
#include "server/sse.h"

#define Q "<|\"|>"

static json_t *load(const char *s) {
    json_error_t je;
    json_t *j = json_loads(s, 0, &je);
    if (!j) fail_msg("bad JSON (%s): %s", je.text, s);
    return j;
}

/* ---- errors ---- */

static void test_error_mapping(void **st) {
    (void)st;
    struct { int code, status; const char *ecode; } m[] = {
        {G4_EINVAL, 400, "invalid_value"}, {G4_EFORMAT, 400, "invalid_format"}, {G4_ECONTEXT, 400, "context_length_exceeded"},
        {G4_ETEMPLATE, 400, "template_error"}, {G4_EUNSUPPORTED, 400, "unsupported_value"}, {G4_ENOTFOUND, 404, "not_found"},
        {G4_EBUSY, 503, "server_busy"}, {G4_ENOMEM, 503, "insufficient_memory"}, {G4_EIO, 500, "internal_error"},
        {G4_ECOMM, 500, "internal_error"},
    };
    for (size_t i = 0; i < sizeof m / sizeof *m; i++) {
        g4_api_err ae;
        assert_int_equal(g4_api_err_status(&ae, m[i].code, NULL, "x %d", 1), m[i].status);
        assert_string_equal(ae.code, m[i].ecode);
        assert_int_equal(ae.retry_after_s > 0, m[i].code == G4_EBUSY);
    }
    g4_api_err ae;
    assert_int_equal(g4_api_err_refuse(&ae, G4_API_UNAUTHORIZED, NULL, "no"), 401);
    assert_int_equal(g4_api_err_refuse(&ae, G4_API_TOO_LARGE, NULL, "big"), 413);
    assert_int_equal(g4_api_err_refuse(&ae, G4_API_MODEL_NOT_FOUND, NULL, "m"), 404);
    assert_string_equal(ae.code, "model_not_found");
    assert_string_equal(ae.param, "model");
    assert_int_equal(g4_api_err_refuse(&ae, G4_API_LOADING, NULL, "wait"), 503);
    assert_true(ae.retry_after_s > 0);
    /* the body: exactly the four OpenAI fields; bad bytes in a message do not break the JSON */
    g4_api_err_status(&ae, G4_EINVAL, "temperature", "bad \xff value");
    char *s = g4_api_err_json(&ae);
    json_t *j = load(s);
    json_t *e = json_object_get(j, "error");
    assert_int_equal(json_object_size(j), 1);
    assert_int_equal(json_object_size(e), 4);
    assert_string_equal(json_string_value(json_object_get(e, "param")), "temperature");
    assert_string_equal(json_string_value(json_object_get(e, "type")), "invalid_request_error");
    assert_string_equal(json_string_value(json_object_get(e, "message")), "bad ? value");
    json_decref(j);
    free(s);
    g4_api_err_status(&ae, G4_EIO, NULL, "disk");
    s = g4_api_err_json(&ae);
    j = load(s);
    assert_true(json_is_null(json_object_get(json_object_get(j, "error"), "param")));
    json_decref(j);
    free(s);
}

/* ---- requests ---- */

static int parse(g4_api_kind k, const char *body, g4_api_request *r, g4_api_err *ae) {
    return g4_api_parse(k, body, strlen(body), r, ae);
}

static void test_parse_chat(void **st) {
    (void)st;
    g4_api_request r;
    g4_api_err ae;
    const char *b = "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"s\"},{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"hi\"}]},"
                    "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"a\\\":1}\"}}]},"
                    "{\"role\":\"tool\",\"tool_call_id\":\"c\",\"content\":\"r\"}],"
                    "\"temperature\":0.5,\"top_p\":0.9,\"top_k\":-1,\"seed\":-3,\"max_tokens\":9,\"max_completion_tokens\":7,\"stop\":[\"a\",\"b\"],"
                    "\"stream\":true,\"stream_options\":{\"include_usage\":true},\"chat_template_kwargs\":{\"enable_thinking\":true,\"x\":1},"
                    "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\"}}}]}";
    assert_int_equal(parse(G4_API_CHAT, b, &r, &ae), 0);
    assert_string_equal(r.model, "m");
    assert_true(r.has_temperature && r.temperature == 0.5);
    assert_true(r.has_top_k && r.top_k == 0);
    assert_true(r.has_seed && r.seed == (uint64_t)-3);
    assert_int_equal(r.max_tokens, 7); /* max_completion_tokens wins */
    assert_int_equal(r.n_stops, 2);
    assert_true(r.stream && r.include_usage && r.parse_output);
    assert_true(json_is_true(json_object_get(r.chat, "enable_thinking")));
    assert_true(json_is_true(json_object_get(r.chat, "add_generation_prompt")));
    assert_int_equal(json_integer_value(json_object_get(r.chat, "x")), 1);
    assert_int_equal(json_array_size(json_object_get(r.chat, "tools")), 1);
    /* the tool call's string arguments became an object for the template */
    json_t *args = json_object_get(json_object_get(json_array_get(json_object_get(json_array_get(json_object_get(r.chat, "messages"), 2), "tool_calls"), 0), "function"), "arguments");
    assert_true(json_is_object(args));
    assert_int_equal(json_integer_value(json_object_get(args, "a")), 1);
    g4_api_request_free(&r);
    /* tool_choice none: tools stay out of the prompt; top-level enable_thinking wins over kwargs */
    assert_int_equal(parse(G4_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":\"none\",\"enable_thinking\":false,"
                                        "\"chat_template_kwargs\":{\"enable_thinking\":true},\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]}", &r, &ae), 0);
    assert_null(json_object_get(r.chat, "tools"));
    assert_true(json_is_false(json_object_get(r.chat, "enable_thinking")));
    assert_int_equal(r.max_tokens, -1);
    g4_api_request_free(&r);
}

static void test_parse_errors(void **st) {
    (void)st;
    struct { g4_api_kind k; const char *body, *param, *code; int status; } c[] = {
        {G4_API_CHAT, "{", NULL, "invalid_json", 400},
        {G4_API_CHAT, "", NULL, "invalid_json", 400},
        {G4_API_CHAT, "[]", NULL, "invalid_json", 400},
        {G4_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"caf\xe9\"}]}", NULL, "invalid_utf8", 400},
        {G4_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"\\udc00\"}]}", NULL, "invalid_utf8", 400},
        {G4_API_CHAT, "{}", "messages", "invalid_value", 400},
        {G4_API_CHAT, "{\"messages\":{}}", "messages", "invalid_value", 400},
        {G4_API_CHAT, "{\"messages\":[]}", "messages", "invalid_value", 400},
        {G4_API_CHAT, "{\"messages\":[1]}", "messages[0]", "invalid_value", 400},
        {G4_API_CHAT, "{\"messages\":[{\"content\":\"x\"}]}", "messages[0].role", "invalid_value", 400},
        {G4_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"bot\",\"content\":\"x\"}]}", "messages[1].role", "invalid_value", 400},
        {G4_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":1}]}", "messages[0].content", "invalid_value", 400},
        {G4_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}", "messages[0].content[0]", "invalid_value", 400},
        {G4_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_audio\"}]}]}", "messages[0].content", "unsupported_value", 400},
        {G4_API_CHAT, "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":\"[1]\"}}]}]}",
         "messages[0].tool_calls[0].function.arguments", "invalid_value", 400},
        {G4_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temperature\":\"1\"}", "temperature", "invalid_value", 400},
        {G4_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temperature\":-1}", "temperature", "invalid_value", 400},
        {G4_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_p\":2}", "top_p", "invalid_value", 400},
        {G4_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_k\":1.5}", "top_k", "invalid_value", 400},
        {G4_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":0}", "max_tokens", "invalid_value", 400},
        {G4_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stop\":\"\"}", "stop", "invalid_value", 400},
        {G4_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stop\":[\"a\",2]}", "stop", "invalid_value", 400},
        {G4_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stream\":1}", "stream", "invalid_value", 400},
        {G4_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"model\":5}", "model", "invalid_value", 400},
        {G4_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":17}", "n", "invalid_value", 400},
        {G4_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":0}", "n", "invalid_value", 400},
        {G4_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":1}", "logprobs", "invalid_value", 400},
        {G4_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":true,\"top_logprobs\":21}", "top_logprobs", "invalid_value", 400},
        {G4_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_logprobs\":2}", "top_logprobs", "invalid_value", 400},
        {G4_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":\"required\"}", "tool_choice", "invalid_value", 400},
        {G4_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"x\"}]}", "tools[0]", "invalid_value", 400},
        {G4_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"json_schema\",\"schema\":{}}}", "response_format", "invalid_value", 400},
        {G4_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"chat_template_kwargs\":[]}", "chat_template_kwargs", "invalid_value", 400},
        {G4_API_COMPLETIONS, "{}", "prompt", "invalid_value", 400},
        {G4_API_COMPLETIONS, "{\"prompt\":[\"a\",[]]}", "prompt", "invalid_value", 400},
        {G4_API_COMPLETIONS, "{\"prompt\":[\"a\",[1,\"b\"]]}", "prompt", "invalid_value", 400},
        {G4_API_COMPLETIONS, "{\"prompt\":[\"a\",3]}", "prompt", "invalid_value", 400},
        {G4_API_COMPLETIONS, "{\"prompt\":[1,-2]}", "prompt", "invalid_value", 400},
        {G4_API_COMPLETIONS, "{\"prompt\":\"x\",\"echo\":1}", "echo", "invalid_value", 400},
        {G4_API_COMPLETIONS, "{\"prompt\":\"x\",\"logprobs\":true}", "logprobs", "invalid_value", 400},
        {G4_API_COMPLETIONS, "{\"prompt\":\"x\",\"logprobs\":21}", "logprobs", "invalid_value", 400},
        {G4_API_COMPLETIONS, "{\"prompt\":\"x\",\"top_logprobs\":2}", "top_logprobs", "invalid_value", 400},
        {G4_API_GENERATE, "{\"prompt\":\"x\",\"n\":2}", "n", "unsupported_value", 400},
        {G4_API_GENERATE, "{\"prompt\":\"x\",\"logprobs\":1}", "logprobs", "unsupported_value", 400},
        {G4_API_GENERATE, "{\"prompt\":3}", "prompt", "invalid_value", 400},
        {G4_API_GENERATE, "{\"prompt\":\"x\",\"raw\":\"yes\"}", "raw", "invalid_value", 400},
        {G4_API_GENERATE, "{\"prompt\":\"x\",\"stream\":true}", "stream", "unsupported_value", 400},
    };
    for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
        g4_api_request r;
        g4_api_err ae;
        int rc = parse(c[i].k, c[i].body, &r, &ae);
        if (rc != c[i].status) fail_msg("case %zu (%s): status %d, want %d (%s)", i, c[i].body, rc, c[i].status, ae.message);
        if (strcmp(ae.code, c[i].code)) fail_msg("case %zu (%s): code %s, want %s", i, c[i].body, ae.code, c[i].code);
        if (strcmp(ae.param, c[i].param ? c[i].param : "")) fail_msg("case %zu (%s): param '%s', want '%s'", i, c[i].body, ae.param, c[i].param ? c[i].param : "");
        assert_true(ae.message[0] != 0);
    }
}

static void test_parse_prompts(void **st) {
    (void)st;
    g4_api_request r;
    g4_api_err ae;
    assert_int_equal(parse(G4_API_COMPLETIONS, "{\"prompt\":[[5,6,7]],\"max_tokens\":2}", &r, &ae), 0);
    assert_int_equal(r.n_prompt_ids, 3);
    assert_int_equal(r.prompt_ids[2], 7);
    assert_null(r.chat);
    assert_false(r.parse_output);
    g4_api_request_free(&r);
    /* a batch: strings and token lists, in order (lm-eval-harness sends several at once) */
    assert_int_equal(parse(G4_API_COMPLETIONS, "{\"prompt\":[\"ab\",[5,6],\"\"],\"max_tokens\":2}", &r, &ae), 0);
    assert_int_equal(r.n_batch, 3);
    assert_null(r.prompt);
    assert_null(r.prompt_ids);
    assert_string_equal(r.batch[0].text, "ab");
    assert_int_equal(r.batch[1].n_ids, 2);
    assert_int_equal(r.batch[1].ids[1], 6);
    assert_non_null(r.batch[2].text);
    assert_int_equal(r.batch[2].len, 0);
    g4_api_request_free(&r);
    assert_int_equal(parse(G4_API_COMPLETIONS, "{\"prompt\":[\"a\\u0000b\"],\"add_special_tokens\":false}", &r, &ae), 0);
    assert_int_equal(r.prompt_len, 3);
    assert_false(r.add_special);
    g4_api_request_free(&r);
    assert_int_equal(parse(G4_API_GENERATE, "{\"prompt\":\"What?\",\"max_new_tokens\":5}", &r, &ae), 0);
    assert_int_equal(r.max_tokens, 5);
    assert_true(r.parse_output);
    json_t *m = json_array_get(json_object_get(r.chat, "messages"), 0);
    assert_string_equal(json_string_value(json_object_get(m, "role")), "user");
    assert_string_equal(json_string_value(json_object_get(m, "content")), "What?");
    g4_api_request_free(&r);
    assert_int_equal(parse(G4_API_GENERATE, "{\"prompt\":\"What?\",\"raw\":true}", &r, &ae), 0);
    assert_null(r.chat);
    assert_string_equal(r.prompt, "What?");
    assert_true(r.add_special);
    g4_api_request_free(&r);
}

/* ---- responses ---- */

static void test_responses(void **st) {
    (void)st;
    const char *text = "<|channel>thought\nhmm<channel|>Let me look.<|tool_call>call:get_capital{country:" Q "France" Q "}<tool_call|>";
    g4_api_output po;
    assert_int_equal(g4_api_parse_output(text, strlen(text), 0, &po, NULL), 0);
    g4_api_result res = {.id = "chatcmpl-abc", .model = "g4tp-demo", .created = 7, .parsed = &po, .finish_reason = "stop",
                         .prompt_tokens = 10, .completion_tokens = 5, .ttft_ms = 1.5, .tokens_per_s = 100};
    assert_string_equal(g4_api_finish_reason(&res), "tool_calls");
    json_t *j = g4_api_chat_response(&res);
    json_t *ch = json_array_get(json_object_get(j, "choices"), 0), *msg = json_object_get(ch, "message");
    assert_string_equal(json_string_value(json_object_get(j, "object")), "chat.completion");
    assert_string_equal(json_string_value(json_object_get(ch, "finish_reason")), "tool_calls");
    assert_string_equal(json_string_value(json_object_get(msg, "content")), "Let me look.");
    assert_string_equal(json_string_value(json_object_get(msg, "reasoning_content")), "hmm");
    json_t *tc = json_array_get(json_object_get(msg, "tool_calls"), 0);
    assert_string_equal(json_string_value(json_object_get(tc, "type")), "function");
    assert_string_equal(json_string_value(json_object_get(tc, "id")), "call_abc_0");
    assert_string_equal(json_string_value(json_object_get(json_object_get(tc, "function"), "name")), "get_capital");
    assert_string_equal(json_string_value(json_object_get(json_object_get(tc, "function"), "arguments")), "{\"country\":\"France\"}");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "usage"), "total_tokens")), 15);
    json_decref(j);
    /* /generate shape */
    j = g4_api_generate_response(&res);
    assert_string_equal(json_string_value(json_object_get(j, "response")), "Let me look.");
    assert_string_equal(json_string_value(json_object_get(j, "finish_reason")), "tool_calls");
    assert_true(json_real_value(json_object_get(j, "time_to_first_token_ms")) == 1.5);
    assert_int_equal(json_integer_value(json_object_get(j, "prompt_tokens")), 10);
    json_decref(j);
    g4_api_output_free(&po);
    /* only a call: content is null; a length stop stays "length" */
    text = "<|tool_call>call:f{}<tool_call|>";
    assert_int_equal(g4_api_parse_output(text, strlen(text), 0, &po, NULL), 0);
    res.finish_reason = "length";
    j = g4_api_chat_response(&res);
    msg = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "message");
    assert_true(json_is_null(json_object_get(msg, "content")));
    assert_null(json_object_get(msg, "reasoning_content"));
    assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(j, "choices"), 0), "finish_reason")), "length");
    json_decref(j);
    g4_api_output_free(&po);
    /* completions: plain text */
    g4_api_result cr = {.id = "cmpl-1", .model = "m", .text = "abc", .text_len = 3, .finish_reason = "stop"};
    j = g4_api_completion_response(&cr);
    assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(j, "choices"), 0), "text")), "abc");
    assert_string_equal(json_string_value(json_object_get(j, "object")), "text_completion");
    json_decref(j);
}

/* Generated text may hold U+0000: every response carries all of it (a C string stops there). */
static void test_responses_nul(void **st) {
    (void)st;
    static const char text[] = "<|channel>thought\nA\0B<channel|>x\0y\0z";
    size_t n = sizeof text - 1;
    g4_api_output po;
    assert_int_equal(g4_api_parse_output(text, n, 0, &po, NULL), 0);
    assert_int_equal(po.content_len, 5);
    assert_int_equal(po.reasoning_len, 3);
    g4_api_result res = {.id = "chatcmpl-n", .model = "m", .parsed = &po, .text = text, .text_len = n, .finish_reason = "length"};
    json_t *j = g4_api_chat_response(&res);
    json_t *msg = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "message");
    assert_int_equal(json_string_length(json_object_get(msg, "content")), 5);
    assert_memory_equal(json_string_value(json_object_get(msg, "content")), "x\0y\0z", 5);
    assert_int_equal(json_string_length(json_object_get(msg, "reasoning_content")), 3);
    json_decref(j);
    j = g4_api_generate_response(&res);
    assert_int_equal(json_string_length(json_object_get(j, "response")), 5);
    assert_int_equal(json_string_length(json_object_get(j, "reasoning")), 3);
    json_decref(j);
    g4_api_output_free(&po);
    /* starting inside a thought; the unparsed (raw) forms */
    assert_int_equal(g4_api_parse_output("a\0b<channel|>c", 14, 1, &po, NULL), 0);
    assert_int_equal(po.reasoning_len, 3);
    assert_int_equal(po.content_len, 1);
    g4_api_output_free(&po);
    g4_api_result raw = {.id = "cmpl-n", .model = "m", .text = "a\0b", .text_len = 3, .finish_reason = "stop"};
    j = g4_api_completion_response(&raw);
    assert_int_equal(json_string_length(json_object_get(json_array_get(json_object_get(j, "choices"), 0), "text")), 3);
    json_decref(j);
    j = g4_api_chat_response(&raw);
    assert_int_equal(json_string_length(json_object_get(json_object_get(json_array_get(json_object_get(j, "choices"), 0), "message"), "content")), 3);
    json_decref(j);
    j = g4_api_generate_response(&raw);
    assert_int_equal(json_string_length(json_object_get(j, "response")), 3);
    json_decref(j);
    /* requests: a model name keeps its length; a stop string with U+0000 is refused in both forms */
    g4_api_request r;
    g4_api_err ae;
    assert_int_equal(parse(G4_API_CHAT, "{\"model\":\"m\\u0000x\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", &r, &ae), 0);
    assert_int_equal(r.model_len, 3);
    assert_memory_equal(r.model, "m\0x", 4);
    g4_api_request_free(&r);
    const char *bad[] = {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stop\":\"a\\u0000b\"}",
                         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stop\":[\"a\\u0000b\"]}",
                         "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":\"{}\\u0000x\"}}]}]}"};
    const char *param[] = {"stop", "stop", "messages[0].tool_calls[0].function.arguments"};
    for (int i = 0; i < 3; i++) {
        if (parse(G4_API_CHAT, bad[i], &r, &ae) != 400) fail_msg("case %d accepted: %s", i, bad[i]);
        assert_string_equal(ae.param, param[i]);
    }
}

/* ---- SSE ---- */

typedef struct { char reasoning[256], content[256], calls[512], finish[32]; int n_chunks, usage, done, role; } sse_sum;

static void summarize(const char *s, size_t n, sse_sum *o) {
    memset(o, 0, sizeof *o);
    json_t *calls = json_array();
    char *copy = strndup(s, n), *save = NULL;
    for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (line[0] == ':') continue;
        assert_memory_equal(line, "data: ", 6);
        const char *d = line + 6;
        if (!strcmp(d, "[DONE]")) { o->done++; continue; }
        assert_int_equal(o->done, 0);
        json_t *j = load(d);
        o->n_chunks++;
        json_t *ch = json_array_get(json_object_get(j, "choices"), 0);
        if (!ch) { o->usage += json_is_object(json_object_get(j, "usage")); json_decref(j); continue; }
        json_t *delta = json_object_get(ch, "delta");
        if (json_object_get(delta, "role")) o->role++;
        json_t *v;
        if ((v = json_object_get(delta, "content"))) strcat(o->content, json_string_value(v));
        if ((v = json_object_get(delta, "reasoning_content"))) strcat(o->reasoning, json_string_value(v));
        if ((v = json_object_get(delta, "tool_calls"))) { /* a call's first delta names it, the next ones carry its arguments */
            size_t k;
            json_t *c;
            json_array_foreach(v, k, c) {
                size_t idx = (size_t)json_integer_value(json_object_get(c, "index"));
                json_t *fn = json_object_get(c, "function"), *have = json_array_get(calls, idx);
                if (!have) {
                    assert_int_equal(idx, json_array_size(calls));
                    assert_true(json_is_string(json_object_get(c, "id")) && json_is_string(json_object_get(fn, "name")));
                    json_array_append_new(calls, json_deep_copy(c));
                    continue;
                }
                assert_null(json_object_get(c, "id"));
                json_t *hf = json_object_get(have, "function");
                char *joined = NULL;
                assert_true(asprintf(&joined, "%s%s", json_string_value(json_object_get(hf, "arguments")), json_string_value(json_object_get(fn, "arguments"))) > 0);
                json_object_set_new(hf, "arguments", json_string(joined));
                free(joined);
            }
        }
        if (json_is_string(json_object_get(ch, "finish_reason"))) strcpy(o->finish, json_string_value(json_object_get(ch, "finish_reason")));
        json_decref(j);
    }
    free(copy);
    if (json_array_size(calls)) {
        char *t = json_dumps(calls, JSON_COMPACT | JSON_SORT_KEYS);
        strcat(o->calls, t);
        free(t);
    }
    json_decref(calls);
}

static void run_sse(const char *text, size_t split_a, size_t split_b, sse_sum *out) {
    g4_sse_opts o = {.shape = &g4_openai_sse_shape, .kind = G4_API_CHAT, .id = "chatcmpl-x", .model = "m", .created = 1, .include_usage = 1,
                     .parse_output = 1};
    g4_sse *s;
    assert_int_equal(g4_sse_create(&o, &s, NULL), 0);
    size_t n = strlen(text);
    size_t cuts[4] = {0, split_a < split_b ? split_a : split_b, split_a < split_b ? split_b : split_a, n};
    for (int k = 0; k < 3; k++) assert_int_equal(g4_sse_feed(s, text + cuts[k], cuts[k + 1] - cuts[k], NULL), 0);
    assert_int_equal(g4_sse_comment(s, "keep-alive"), 0);
    assert_int_equal(g4_sse_finish(s, "stop", 3, 4, NULL), 0);
    assert_true(g4_sse_closed(s));
    char buf[16384];
    size_t len = 0, got;
    while ((got = g4_sse_take(s, buf + len, 7))) len += got; /* small reads, as a socket may take */
    assert_int_equal(g4_sse_pending(s), 0);
    summarize(buf, len, out);
    g4_sse_free(s);
}

static void test_sse_splits(void **st) {
    (void)st;
    const char *text = "<|channel>thought\nThink ü.<channel|>Answer: 日本.<|tool_call>call:f{a:" Q "x" Q "}<tool_call|><|tool_response>";
    sse_sum ref;
    run_sse(text, 0, 0, &ref);
    assert_string_equal(ref.reasoning, "Think ü.");
    assert_string_equal(ref.content, "Answer: 日本.");
    assert_string_equal(ref.calls, "[{\"function\":{\"arguments\":\"{\\\"a\\\":\\\"x\\\"}\",\"name\":\"f\"},\"id\":\"call_x_0\",\"index\":0,\"type\":\"function\"}]");
    assert_string_equal(ref.finish, "tool_calls");
    assert_int_equal(ref.usage, 1);
    assert_int_equal(ref.done, 1);
    assert_int_equal(ref.role, 1);
    size_t n = strlen(text);
    for (size_t a = 0; a <= n; a += 3)
        for (size_t b = a; b <= n; b += 5) {
            /* only splits at character boundaries: the detokenizer never cuts a character */
            if ((a < n && (text[a] & 0xC0) == 0x80) || (b < n && (text[b] & 0xC0) == 0x80)) continue;
            sse_sum s;
            run_sse(text, a, b, &s);
            if (strcmp(s.reasoning, ref.reasoning) || strcmp(s.content, ref.content) || strcmp(s.calls, ref.calls) || strcmp(s.finish, ref.finish))
                fail_msg("split %zu,%zu differs: [%s] [%s] [%s] %s", a, b, s.reasoning, s.content, s.calls, s.finish);
        }
}

static void test_sse_completions_and_errors(void **st) {
    (void)st;
    g4_sse_opts o = {.shape = &g4_openai_sse_shape, .kind = G4_API_COMPLETIONS, .id = "cmpl-1", .model = "m", .created = 1};
    g4_sse *s;
    assert_int_equal(g4_sse_create(&o, &s, NULL), 0);
    char buf[4096];
    /* nothing framed yet (a completion frames nothing before its first text): no bytes, no
     * read through the still-NULL buffer (UBSan; found by fuzz_sse) */
    assert_int_equal(g4_sse_feed(s, "", 0, NULL), 0);
    assert_int_equal(g4_sse_take(s, buf, sizeof buf), 0);
    assert_int_equal(g4_sse_feed(s, "<b>raw", 6, NULL), 0);
    assert_int_equal(g4_sse_finish(s, "length", 1, 1, NULL), 0);
    assert_int_not_equal(g4_sse_feed(s, "x", 1, NULL), 0); /* closed */
    size_t len = g4_sse_take(s, buf, sizeof buf);
    buf[len] = 0;
    assert_non_null(strstr(buf, "\"text\":\"<b>raw\""));
    assert_non_null(strstr(buf, "\"finish_reason\":\"length\""));
    assert_null(strstr(buf, "usage"));
    assert_non_null(strstr(buf, "data: [DONE]\n\n"));
    g4_sse_free(s);
    /* an error after the start: an error object, then [DONE], then nothing */
    o.kind = G4_API_CHAT;
    assert_int_equal(g4_sse_create(&o, &s, NULL), 0);
    assert_int_equal(g4_sse_feed(s, "Hi", 2, NULL), 0);
    g4_api_err ae;
    g4_api_err_refuse(&ae, G4_API_SHUTTING_DOWN, NULL, "bye");
    assert_int_equal(g4_sse_error(s, &ae), 0);
    assert_true(g4_sse_closed(s));
    len = g4_sse_take(s, buf, sizeof buf);
    buf[len] = 0;
    const char *tail = "data: {\"error\":{\"message\":\"bye\",\"type\":\"server_error\",\"param\":null,\"code\":\"shutting_down\"}}\n\ndata: [DONE]\n\n";
    assert_true(len > strlen(tail));
    assert_string_equal(buf + len - strlen(tail), tail);
    g4_sse_free(s);
}

/* ---- metrics ---- */

static void test_metrics(void **st) {
    (void)st;
    g4_metrics *m = g4_metrics_create();
    assert_int_equal(g4_metrics_set_model(m, "a\"b\\c\n"), 0);
    g4_metrics_request(m, "/v1/chat/completions", 200);
    g4_metrics_request(m, "/v1/chat/completions", 200);
    g4_metrics_request(m, "/v1/chat/completions", 400);
    g4_metrics_ttft(m, 0.003);
    g4_metrics_ttft(m, 100);
    g4_metrics_itl(m, 0.02);
    g4_metrics_finished(m, "tool_calls", 5, 6);
    g4_metrics_preparing(m, 1);
    g4_metrics_preparing(m, 1);
    g4_metrics_preparing(m, -1);
    g4_sched_stats stt = {.running = 2, .waiting = 3, .kv_used = 50, .kv_budget = 200, .prompt_tokens = 11, .generated_tokens = 12};
    size_t len;
    char *t = g4_metrics_render(m, &stt, 1, &len);
    assert_int_equal(strlen(t), len);
    const char *want[] = {
        "g4tp_http_requests_total{endpoint=\"/v1/chat/completions\",code=\"200\"} 2\n",
        "g4tp_http_requests_total{endpoint=\"/v1/chat/completions\",code=\"400\"} 1\n",
        "g4tp_time_to_first_token_seconds_bucket{le=\"0.001\"} 0\n",
        "g4tp_time_to_first_token_seconds_bucket{le=\"0.005\"} 1\n",
        "g4tp_time_to_first_token_seconds_bucket{le=\"80\"} 1\n",
        "g4tp_time_to_first_token_seconds_bucket{le=\"+Inf\"} 2\n",
        "g4tp_time_to_first_token_seconds_count 2\n",
        "g4tp_inter_token_latency_seconds_count 1\n",
        "g4tp_request_finished_total{finish_reason=\"tool_calls\"} 1\n",
        "g4tp_num_requests_running 2\n", "g4tp_num_requests_waiting 3\n", "g4tp_kv_cache_used_bytes 50\n",
        "g4tp_kv_cache_usage_ratio 0.250000\n", "g4tp_prompt_tokens_total 11\n", "g4tp_generation_tokens_total 12\n",
        "# TYPE g4tp_inter_token_latency_seconds histogram\n", "g4tp_model_ready 1\n", "g4tp_num_requests_preparing 1\n",
        "# TYPE g4tp_kv_pages gauge\n", /* a gauge without _total (promtool) */
        /* vLLM's names: its label (escaped), its types, its buckets spelled as it spells them */
        "vllm:num_requests_running{model_name=\"a\\\"b\\\\c\\n\"} 2\n", "vllm:num_requests_waiting{model_name=\"a\\\"b\\\\c\\n\"} 3\n",
        "vllm:kv_cache_usage_perc{model_name=\"a\\\"b\\\\c\\n\"} 0.250000\n", "# TYPE vllm:prefix_cache_queries_total counter\n",
        "# TYPE vllm:prefix_cache_hits_total counter\n", "# TYPE vllm:time_to_first_token_seconds histogram\n",
        "vllm:time_to_first_token_seconds_bucket{model_name=\"a\\\"b\\\\c\\n\",le=\"1.0\"} 1\n",
        "vllm:time_to_first_token_seconds_bucket{model_name=\"a\\\"b\\\\c\\n\",le=\"2560.0\"} 2\n",
        "vllm:time_to_first_token_seconds_count{model_name=\"a\\\"b\\\\c\\n\"} 2\n",
        "vllm:inter_token_latency_seconds_bucket{model_name=\"a\\\"b\\\\c\\n\",le=\"0.025\"} 1\n",
        "vllm:request_success_total{model_name=\"a\\\"b\\\\c\\n\",finished_reason=\"stop\"} 1\n",
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        if (!strstr(t, want[i])) fail_msg("missing: %s", want[i]);
    assert_null(strstr(t, "g4tp_kv_pages_total"));
    /* vLLM's TTFT buckets: 22 bounds and +Inf */
    size_t nb = 0;
    for (const char *p = t; (p = strstr(p, "vllm:time_to_first_token_seconds_bucket{")); p++) nb++;
    assert_int_equal(nb, 23);
    free(t);
    t = g4_metrics_render(m, NULL, 0, &len); /* while loading */
    assert_non_null(strstr(t, "g4tp_model_ready 0\n"));
    assert_non_null(strstr(t, "g4tp_num_requests_running 0\n"));
    free(t);
    g4_metrics_free(m);
}

/* The browser rules: Host names on a loopback bind, --allowed-hosts, --cors, JSON bodies. */
static void test_guard(void **st) {
    (void)st;
    g4_guard *g;
    g4_err err = {0};
    assert_int_equal(g4_guard_create("127.0.0.1", 1, NULL, NULL, &g, &err), 0);
    const char *served[] = {"localhost", "LOCALHOST:8080", "localhost.", "127.0.0.1:1", "[::1]:80", "[::1]"};
    for (size_t i = 0; i < sizeof served / sizeof *served; i++)
        if (!g4_guard_host_ok(g, served[i])) fail_msg("refused %s", served[i]);
    assert_true(g4_guard_host_ok(g, NULL)); /* HTTP/1.0 without Host: no browser */
    const char *refused[] = {"evil.example", "evil.example:8080", "", "localhost.evil.example", "127.0.0.1.nip.io", "[::2]", "localhost:80:80"};
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++)
        if (g4_guard_host_ok(g, refused[i])) fail_msg("served %s", refused[i]);
    assert_null(g4_guard_cors(g, "http://localhost:3000")); /* no --cors: no CORS headers */
    assert_null(g4_guard_cors(g, NULL));
    g4_guard_free(g);

    assert_int_equal(g4_guard_create("::1", 1, "Example.com, foo.test:99", "http://app.example:3000/, https://b.example", &g, &err), 0);
    assert_true(g4_guard_host_ok(g, "example.com") && g4_guard_host_ok(g, "EXAMPLE.COM:1") && g4_guard_host_ok(g, "foo.test"));
    assert_true(g4_guard_host_ok(g, "[::1]:8080") && !g4_guard_host_ok(g, "bar.test"));
    const char *o = "HTTP://APP.EXAMPLE:3000";
    assert_ptr_equal(g4_guard_cors(g, o), o); /* the origin itself, echoed */
    assert_non_null(g4_guard_cors(g, "https://b.example"));
    assert_null(g4_guard_cors(g, "http://app.example"));
    assert_null(g4_guard_cors(g, "http://b.example"));
    assert_null(g4_guard_cors(g, "null"));
    assert_false(g4_guard_cors_any(g));
    g4_guard_free(g);

    assert_int_equal(g4_guard_create("0.0.0.0", 0, NULL, "*", &g, &err), 0); /* beyond loopback: any Host unless told */
    assert_true(g4_guard_host_ok(g, "evil.example"));
    assert_string_equal(g4_guard_cors(g, "http://anything.example"), "*");
    assert_true(g4_guard_cors_any(g));
    g4_guard_free(g);
    assert_int_equal(g4_guard_create("0.0.0.0", 0, "a.example", NULL, &g, &err), 0);
    assert_true(g4_guard_host_ok(g, "a.example") && g4_guard_host_ok(g, "localhost") && !g4_guard_host_ok(g, "b.example"));
    g4_guard_free(g);
    assert_int_equal(g4_guard_create("127.0.0.1", 1, "*", NULL, &g, &err), 0);
    assert_true(g4_guard_host_ok(g, "evil.example"));
    g4_guard_free(g);

    const char *bad_cors[] = {"null", "app.example", "http://a.example/path", "http://*.example", "ftp://a.example", "http://"};
    for (size_t i = 0; i < sizeof bad_cors / sizeof *bad_cors; i++) {
        err = (g4_err){0};
        if (g4_guard_create("127.0.0.1", 1, NULL, bad_cors[i], &g, &err) != G4_EINVAL || !strstr(err.msg, "--cors")) fail_msg("--cors %s accepted", bad_cors[i]);
    }
    assert_int_equal(g4_guard_create("127.0.0.1", 1, "a/b", NULL, &g, &err), G4_EINVAL);
    assert_non_null(strstr(err.msg, "--allowed-hosts"));

    const char *json[] = {"application/json", "Application/JSON; charset=utf-8", " application/json ;x=y", "application/vnd.api+json"};
    for (size_t i = 0; i < sizeof json / sizeof *json; i++)
        if (!g4_guard_json_type(json[i])) fail_msg("not JSON: %s", json[i]);
    const char *not_json[] = {"", "text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
                              "application/jsonx", "application/+json", "text/json", "application/a/b+json"};
    for (size_t i = 0; i < sizeof not_json / sizeof *not_json; i++)
        if (g4_guard_json_type(not_json[i])) fail_msg("JSON: %s", not_json[i]);
    assert_false(g4_guard_json_type(NULL));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_error_mapping),
        cmocka_unit_test(test_parse_chat),
        cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_parse_prompts),
        cmocka_unit_test(test_responses),
        cmocka_unit_test(test_responses_nul),
        cmocka_unit_test(test_sse_splits),
        cmocka_unit_test(test_sse_completions_and_errors),
        cmocka_unit_test(test_metrics),
        cmocka_unit_test(test_guard),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
