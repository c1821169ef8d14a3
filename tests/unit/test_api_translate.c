/* The API translations of the server (src/server/anthropic.c, responses.c, logprob_json.c and
 * the per-choice SSE of sse.c), without HTTP or a model: an Anthropic Messages request and a
 * Responses request with system text, thinking, tool calls and tool results render the very
 * prompt of the equivalent chat completions request; generated Gemma-4 text (thinking, text,
 * a tool call) becomes thinking / text / tool_use blocks and reasoning / message /
 * function_call items, whole and streamed, the same for every split of the text; bad bodies
 * get 400s naming the field in each API's error shape; logprob JSON keeps exact bytes; n
 * choices stream with their own indexes and logprobs. */
#include "testutil.h"

#include <jansson.h>

#include "grammar/grammar.h"
#include "server/anthropic.h"
#include "server/api_family.h"
#include "server/errors.h"
#include "server/logprob_json.h"
#include "server/openai.h"
#include "server/responses.h"
#include "server/sse.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

#define Q "<|\"|>"

static json_t *load(const char *s) {
    json_error_t je;
    json_t *j = json_loads(s, 0, &je);
    if (!j) fail_msg("bad JSON (%s): %s", je.text, s);
    return j;
}

static char *render(const json_t *chat) {
    static g4_chat_template *t;
    static json_t *special;
    g4_err e;
    if (!t) {
        size_t n = 0;
        char *src = tu_read_file("models/demo/chat_template.jinja", &n);
        assert_non_null(src);
        assert_int_equal(g4_chat_template_load(src, n, &t, &e), 0);
        free(src);
        assert_int_equal(g4_chat_template_special_tokens("models/demo", &special, &e), 0);
    }
    char *out;
    size_t n = 0;
    if (g4_chat_template_render(t, chat, special, &out, &n, &e)) fail_msg("render: %s", e.msg);
    return out;
}

#define SCHEMA "{\"type\":\"object\",\"properties\":{\"country\":{\"type\":\"string\"}},\"required\":[\"country\"]}"

/* The conversation of every API: system text, a question, an assistant turn that thought, said
 * something and called a tool, the tool's result and a follow-up. */
static const char *chat_body =
    "{\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":\"Capital of France?\"},"
    "{\"role\":\"assistant\",\"content\":\"Let me check.\",\"reasoning_content\":\"Look it up.\",\"tool_calls\":[{\"id\":\"toolu_1\",\"type\":\"function\","
    "\"function\":{\"name\":\"get_capital\",\"arguments\":{\"country\":\"France\"}}}]},{\"role\":\"tool\",\"tool_call_id\":\"toolu_1\",\"content\":\"Paris\"},"
    "{\"role\":\"user\",\"content\":\"Thanks\"}],"
    "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_capital\",\"description\":\"Capital of a country\",\"parameters\":" SCHEMA "}}]}";

static void test_anthropic_request_renders_like_chat(void **st) {
    (void)st;
    g4_api_request c, a;
    g4_api_err ae;
    assert_int_equal(g4_api_parse(G4_API_CHAT, chat_body, strlen(chat_body), &c, &ae), 0);
    const char *body =
        "{\"model\":\"m\",\"max_tokens\":50,\"temperature\":0.5,\"top_p\":0.9,\"top_k\":7,\"stop_sequences\":[\"END\"],\"stream\":true,"
        "\"metadata\":{\"user_id\":\"u\"},\"system\":[{\"type\":\"text\",\"text\":\"Be brief.\",\"cache_control\":{\"type\":\"ephemeral\"}}],"
        "\"tools\":[{\"name\":\"get_capital\",\"description\":\"Capital of a country\",\"input_schema\":" SCHEMA "}],\"tool_choice\":{\"type\":\"auto\"},"
        "\"messages\":[{\"role\":\"user\",\"content\":\"Capital of France?\"},"
        "{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"Look it up.\",\"signature\":\"s\"},{\"type\":\"text\",\"text\":\"Let me check.\"},"
        "{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"get_capital\",\"input\":{\"country\":\"France\"}}]},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"toolu_1\",\"content\":[{\"type\":\"text\",\"text\":\"Paris\"}]},"
        "{\"type\":\"text\",\"text\":\"Thanks\"}]}]}";
    assert_int_equal(g4_anth_parse(body, strlen(body), 0, &a, &ae), 0);
    assert_int_equal(a.max_tokens, 50);
    assert_true(a.has_temperature && a.temperature == 0.5 && a.has_top_p && a.has_top_k && a.top_k == 7);
    assert_int_equal(a.n_stops, 1);
    assert_string_equal(a.stops[0], "END");
    assert_true(a.stream && a.parse_output && a.n == 1);
    assert_string_equal(a.model, "m");
    if (!json_equal(a.chat, c.chat)) fail_msg("not the chat request:\n%s\n%s", json_dumps(a.chat, JSON_COMPACT), json_dumps(c.chat, JSON_COMPACT));
    char *want = render(c.chat), *got = render(a.chat);
    assert_string_equal(got, want);
    assert_non_null(strstr(got, "<|tool_call>call:get_capital{country:" Q "France" Q "}<tool_call|>"));
    assert_non_null(strstr(got, "<|tool_response>response:get_capital{value:" Q "Paris" Q "}<tool_response|>"));
    assert_non_null(strstr(got, "declaration:get_capital"));
    free(got);
    g4_api_request_free(&a);
    /* thinking on; tool_choice none keeps the tools out; count_tokens needs no max_tokens */
    const char *b2 = "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":2048},"
                     "\"tools\":[{\"name\":\"f\",\"input_schema\":{\"type\":\"object\"}}],\"tool_choice\":{\"type\":\"none\"}}";
    assert_int_equal(g4_anth_parse(b2, strlen(b2), 1, &a, &ae), 0);
    assert_true(json_is_true(json_object_get(a.chat, "enable_thinking")));
    assert_null(json_object_get(a.chat, "tools"));
    g4_api_request_free(&a);
    free(want);
    g4_api_request_free(&c);
}

/* tool_choice and output formats become the one request's tool mode, tools and schema, as
 * chat's "required" / named / parallel_tool_calls / response_format do */
static void test_tool_choice_and_formats(void **st) {
    (void)st;
    g4_api_request r;
    g4_api_err ae;
#define ATOOLS "\"tools\":[{\"name\":\"f\",\"input_schema\":{\"type\":\"object\"}},{\"name\":\"g\",\"input_schema\":{}}]"
    const struct { const char *tc; int mode; const char *name; int no_par; } a[] = {
        {"{\"type\":\"auto\"}", G4_TOOLS_AUTO, NULL, 0},
        {"{\"type\":\"any\"}", G4_TOOLS_REQUIRED, NULL, 0},
        {"{\"type\":\"tool\",\"name\":\"g\"}", G4_TOOLS_NAMED, "g", 0},
        {"{\"type\":\"any\",\"disable_parallel_tool_use\":true}", G4_TOOLS_REQUIRED, NULL, 1},
        {"{\"type\":\"auto\",\"disable_parallel_tool_use\":true}", G4_TOOLS_AUTO, NULL, 1},
        {"{\"type\":\"none\"}", G4_TOOLS_NONE, NULL, 0},
    };
    for (size_t i = 0; i < sizeof a / sizeof *a; i++) {
        char body[512];
        snprintf(body, sizeof body, "{\"model\":\"m\",\"max_tokens\":9,\"messages\":[{\"role\":\"user\",\"content\":\"q\"}]," ATOOLS ",\"tool_choice\":%s}", a[i].tc);
        if (g4_anth_parse(body, strlen(body), 0, &r, &ae)) fail_msg("%s: %s", a[i].tc, ae.message);
        assert_int_equal(r.tool_mode, a[i].mode);
        assert_int_equal(r.no_parallel_tool_calls, a[i].no_par);
        if (a[i].name) assert_string_equal(r.tool_name, a[i].name);
        else assert_null(r.tool_name);
        assert_int_equal(json_array_size(r.tools), 2); /* OpenAI-shaped, for the grammar */
        assert_string_equal(json_string_value(json_object_get(json_object_get(json_array_get(r.tools, 1), "function"), "name")), "g");
        assert_int_equal(json_array_size(json_object_get(r.chat, "tools")), a[i].mode == G4_TOOLS_NONE ? 0 : 2);
        g4_grammar *gr = NULL;
        if (g4_api_constraint(&r, 0, &gr, &ae)) fail_msg("%s: %s", a[i].tc, ae.message);
        assert_true((gr != NULL) == (a[i].mode != G4_TOOLS_AUTO || a[i].no_par)); /* auto with parallel calls: free */
        g4_grammar_release(gr);
        g4_api_request_free(&r);
    }
#define RTOOLS "\"tools\":[{\"type\":\"function\",\"name\":\"f\",\"parameters\":{\"type\":\"object\"}},{\"type\":\"function\",\"name\":\"g\"}]"
    const struct { const char *extra; int mode; const char *name; int no_par, fmt; } b[] = {
        {",\"tool_choice\":\"auto\"", G4_TOOLS_AUTO, NULL, 0, G4_FMT_TEXT},
        {",\"tool_choice\":\"required\"", G4_TOOLS_REQUIRED, NULL, 0, G4_FMT_TEXT},
        {",\"tool_choice\":{\"type\":\"function\",\"name\":\"f\"}", G4_TOOLS_NAMED, "f", 0, G4_FMT_TEXT},
        {",\"tool_choice\":\"required\",\"parallel_tool_calls\":false", G4_TOOLS_REQUIRED, NULL, 1, G4_FMT_TEXT},
        {",\"tool_choice\":\"none\"", G4_TOOLS_NONE, NULL, 0, G4_FMT_TEXT},
        {",\"text\":{\"format\":{\"type\":\"json_object\"}}", G4_TOOLS_AUTO, NULL, 0, G4_FMT_JSON_OBJECT},
        {",\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"p\",\"strict\":true,\"schema\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}},\"verbosity\":\"low\"}",
         G4_TOOLS_AUTO, NULL, 0, G4_FMT_JSON_SCHEMA},
        {",\"text\":{\"format\":{\"type\":\"text\"}}", G4_TOOLS_AUTO, NULL, 0, G4_FMT_TEXT},
    };
    for (size_t i = 0; i < sizeof b / sizeof *b; i++) {
        char body[512];
        snprintf(body, sizeof body, "{\"input\":\"q\"," RTOOLS "%s}", b[i].extra);
        if (g4_resp_parse(body, strlen(body), &r, &ae)) fail_msg("%s: %s", b[i].extra, ae.message);
        assert_int_equal(r.tool_mode, b[i].mode);
        assert_int_equal(r.no_parallel_tool_calls, b[i].no_par);
        assert_int_equal(r.out_format, b[i].fmt);
        if (b[i].fmt == G4_FMT_JSON_SCHEMA) assert_non_null(json_object_get(json_object_get(r.out_schema, "properties"), "a"));
        if (b[i].name) assert_string_equal(r.tool_name, b[i].name);
        assert_int_equal(json_array_size(r.tools), 2);
        g4_grammar *gr = NULL;
        if (g4_api_constraint(&r, 0, &gr, &ae)) fail_msg("%s: %s", b[i].extra, ae.message);
        g4_grammar_release(gr);
        g4_api_request_free(&r);
    }
    /* Anthropic's output_config.format (and the beta's output_format) is a json_schema format;
     * a strict tool makes its calls follow input_schema under auto */
    const char *const of[] = {"\"output_config\":{\"effort\":\"low\",\"format\":{\"type\":\"json_schema\",\"schema\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}}}",
                              "\"output_format\":{\"type\":\"json_schema\",\"schema\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}}"};
    for (size_t i = 0; i < 2; i++) {
        char body[512];
        snprintf(body, sizeof body, "{\"model\":\"m\",\"max_tokens\":9,\"messages\":[{\"role\":\"user\",\"content\":\"q\"}],%s}", of[i]);
        if (g4_anth_parse(body, strlen(body), 0, &r, &ae)) fail_msg("%s: %s", of[i], ae.message);
        assert_int_equal(r.out_format, G4_FMT_JSON_SCHEMA);
        assert_non_null(json_object_get(json_object_get(r.out_schema, "properties"), "a"));
        g4_grammar *gr = NULL;
        assert_int_equal(g4_api_constraint(&r, 0, &gr, &ae), 0);
        assert_non_null(gr);
        g4_grammar_release(gr);
        g4_api_request_free(&r);
    }
    const char *strict = "{\"model\":\"m\",\"max_tokens\":9,\"messages\":[{\"role\":\"user\",\"content\":\"q\"}],\"tools\":[{\"name\":\"f\",\"strict\":true,\"input_schema\":{\"type\":\"object\"}}]}";
    assert_int_equal(g4_anth_parse(strict, strlen(strict), 0, &r, &ae), 0);
    assert_true(r.strict_tools);
    g4_grammar *sg = NULL;
    assert_int_equal(g4_api_constraint(&r, 0, &sg, &ae), 0);
    assert_non_null(sg); /* auto, but constrained */
    g4_grammar_release(sg);
    g4_api_request_free(&r);
    /* compile errors name the API's own fields */
    const struct { int anth; const char *body, *param; } e[] = {
        {1, "{\"model\":\"m\",\"max_tokens\":9,\"messages\":[{\"role\":\"user\",\"content\":\"q\"}],\"tools\":[{\"name\":\"f\",\"input_schema\":{\"type\":\"object\",\"not\":{}}}],\"tool_choice\":{\"type\":\"any\"}}",
         "tools[0].input_schema"},
        {0, "{\"input\":\"q\",\"tools\":[{\"type\":\"function\",\"name\":\"f\",\"parameters\":{\"type\":\"object\",\"not\":{}}}],\"tool_choice\":\"required\"}", "tools[0].parameters"},
        {0, "{\"input\":\"q\",\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"p\",\"schema\":{\"not\":{}}}}}", "text.format.schema"},
        {1, "{\"model\":\"m\",\"max_tokens\":9,\"messages\":[{\"role\":\"user\",\"content\":\"q\"}],\"output_config\":{\"format\":{\"type\":\"json_schema\",\"schema\":{\"not\":{}}}}}",
         "output_config.format.schema"},
    };
    for (size_t i = 0; i < sizeof e / sizeof *e; i++) {
        int rc = e[i].anth ? g4_anth_parse(e[i].body, strlen(e[i].body), 0, &r, &ae) : g4_resp_parse(e[i].body, strlen(e[i].body), &r, &ae);
        assert_int_equal(rc, 0);
        g4_grammar *gr = NULL;
        assert_int_equal(g4_api_constraint(&r, 0, &gr, &ae), 400);
        assert_string_equal(ae.param, e[i].param);
        assert_null(gr);
        g4_api_request_free(&r);
    }
}

static void test_responses_request_renders_like_chat(void **st) {
    (void)st;
    g4_api_request c, r;
    g4_api_err ae;
    assert_int_equal(g4_api_parse(G4_API_CHAT, chat_body, strlen(chat_body), &c, &ae), 0);
    const char *body =
        "{\"model\":\"m\",\"instructions\":\"Be brief.\",\"store\":false,\"max_output_tokens\":40,\"temperature\":1.5,\"stream\":true,"
        "\"include\":[\"reasoning.encrypted_content\"],\"metadata\":{\"k\":\"v\"},\"parallel_tool_calls\":false,"
        "\"tools\":[{\"type\":\"function\",\"name\":\"get_capital\",\"description\":\"Capital of a country\",\"parameters\":" SCHEMA ",\"strict\":true}],"
        "\"input\":[{\"role\":\"user\",\"content\":\"Capital of France?\"},"
        "{\"type\":\"reasoning\",\"id\":\"rs_1\",\"summary\":[],\"content\":[{\"type\":\"reasoning_text\",\"text\":\"Look it up.\"}]},"
        "{\"type\":\"message\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"Let me check.\"}]},"
        "{\"type\":\"function_call\",\"call_id\":\"toolu_1\",\"name\":\"get_capital\",\"arguments\":\"{\\\"country\\\":\\\"France\\\"}\"},"
        "{\"type\":\"function_call_output\",\"call_id\":\"toolu_1\",\"output\":\"Paris\"},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"Thanks\"}]}]}";
    assert_int_equal(g4_resp_parse(body, strlen(body), &r, &ae), 0);
    assert_int_equal(r.max_tokens, 40);
    assert_true(r.has_temperature && r.temperature == 1.5 && r.stream);
    if (!json_equal(r.chat, c.chat)) fail_msg("not the chat request:\n%s\n%s", json_dumps(r.chat, JSON_COMPACT), json_dumps(c.chat, JSON_COMPACT));
    char *want = render(c.chat), *got = render(r.chat);
    assert_string_equal(got, want);
    free(got);
    /* the fields a response repeats */
    assert_string_equal(json_string_value(json_object_get(r.extra, "instructions")), "Be brief.");
    assert_int_equal(json_integer_value(json_object_get(r.extra, "max_output_tokens")), 40);
    assert_true(json_is_false(json_object_get(r.extra, "store")));
    assert_true(json_is_false(json_object_get(r.extra, "parallel_tool_calls")));
    assert_int_equal(json_array_size(json_object_get(r.extra, "tools")), 1);
    g4_api_request_free(&r);
    /* input as a string, reasoning effort turns thinking on */
    const char *b2 = "{\"input\":\"hi\",\"reasoning\":{\"effort\":\"high\"}}";
    assert_int_equal(g4_resp_parse(b2, strlen(b2), &r, &ae), 0);
    assert_true(json_is_true(json_object_get(r.chat, "enable_thinking")));
    assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(r.chat, "messages"), 0), "content")), "hi");
    assert_null(r.model);
    g4_api_request_free(&r);
    free(want);
    g4_api_request_free(&c);
}

typedef struct { const char *body, *param, *code; int status; } bad_case;

static void check_bad(const bad_case *c, size_t n, int (*parse)(const char *, size_t, g4_api_request *, g4_api_err *)) {
    for (size_t i = 0; i < n; i++) {
        g4_api_request r;
        g4_api_err ae;
        int rc = parse(c[i].body, strlen(c[i].body), &r, &ae);
        if (rc != c[i].status) fail_msg("case %zu (%s): status %d, want %d (%s)", i, c[i].body, rc, c[i].status, rc ? ae.message : "");
        if (strcmp(ae.code, c[i].code)) fail_msg("case %zu (%s): code %s, want %s (%s)", i, c[i].body, ae.code, c[i].code, ae.message);
        if (c[i].param && strcmp(ae.param, c[i].param)) fail_msg("case %zu (%s): param '%s', want '%s'", i, c[i].body, ae.param, c[i].param);
        assert_true(ae.message[0] != 0);
    }
}

static int anth_parse(const char *b, size_t n, g4_api_request *r, g4_api_err *ae) { return g4_anth_parse(b, n, 0, r, ae); }

#define M "\"model\":\"m\",\"max_tokens\":5,"
#define U "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]"

static void test_anthropic_bad_requests(void **st) {
    (void)st;
    const bad_case c[] = {
        {"{", NULL, "invalid_json", 400},
        {"{" U "}", "model", "invalid_value", 400},
        {"{\"model\":\"m\"," U "}", "max_tokens", "invalid_value", 400},
        {"{\"model\":\"m\",\"max_tokens\":0," U "}", "max_tokens", "invalid_value", 400},
        {"{" M "\"messages\":[]}", "messages", "invalid_value", 400},
        {"{" M "\"messages\":[{\"role\":\"system\",\"content\":\"x\"}]}", "messages[0].role", "invalid_value", 400},
        {"{" M "\"messages\":[{\"role\":\"user\",\"content\":5}]}", "messages[0].content", "invalid_value", 400},
        {"{" M "\"messages\":[{\"role\":\"user\",\"content\":[{\"text\":\"x\"}]}]}", "messages[0].content[0]", "invalid_value", 400},
        {"{" M "\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":1}]}]}", "messages[0].content[0]", "invalid_value", 400},
        {"{" M "\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\",\"source\":{}}]}]}", "messages[0].content[0]", "invalid_value", 400},
        {"{" M "\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"bogus\"}]}]}", "messages[0].content[0]", "invalid_value", 400},
        {"{" M "\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_use\",\"id\":\"a\",\"name\":\"f\",\"input\":{}}]}]}", "messages[0].content[0]", "invalid_value", 400},
        {"{" M "\"messages\":[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"id\":\"a\",\"name\":\"f\",\"input\":\"{}\"}]},{\"role\":\"user\",\"content\":\"x\"}]}",
         "messages[1].content[0]", "invalid_value", 400},
        {"{" M "\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"content\":\"x\"}]}]}", "messages[0].content[0]", "invalid_value", 400},
        {"{" M "\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"a\",\"is_error\":\"no\"}]}]}", "messages[0].content[0]", "invalid_value", 400},
        {"{" M "\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"a\",\"content\":[{\"type\":\"image\"}]}]}]}",
         "messages[0].content[0].content[0]", "invalid_value", 400},
        {"{" M "\"messages\":[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\",\"content\":\"Sure\"}]}", "messages", "unsupported_value", 400},
        {"{" M U ",\"system\":5}", "system", "invalid_value", 400},
        {"{" M U ",\"temperature\":1.5}", "temperature", "invalid_value", 400},
        {"{" M U ",\"top_k\":-1}", "top_k", "invalid_value", 400},
        {"{" M U ",\"stop_sequences\":\"x\"}", "stop_sequences", "invalid_value", 400},
        {"{" M U ",\"stop_sequences\":[\"\"]}", "stop_sequences", "invalid_value", 400},
        {"{" M U ",\"stream\":\"yes\"}", "stream", "invalid_value", 400},
        {"{" M U ",\"metadata\":{\"user_id\":3}}", "metadata.user_id", "invalid_value", 400},
        {"{" M U ",\"thinking\":{\"type\":\"enabled\"}}", "thinking.budget_tokens", "invalid_value", 400},
        {"{\"model\":\"m\",\"max_tokens\":2000," U ",\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":4096}}", "thinking.budget_tokens", "invalid_value", 400},
        {"{" M U ",\"thinking\":{\"type\":\"maybe\"}}", "thinking.type", "invalid_value", 400},
        {"{" M U ",\"tools\":{}}", "tools", "invalid_value", 400},
        {"{" M U ",\"tools\":[{\"name\":\"a b\",\"input_schema\":{}}]}", "tools[0]", "invalid_value", 400},
        {"{" M U ",\"tools\":[{\"name\":\"f\"}]}", "tools[0]", "invalid_value", 400},
        {"{" M U ",\"tools\":[{\"name\":\"f\",\"input_schema\":{\"type\":\"string\"}}]}", "tools[0]", "invalid_value", 400},
        {"{" M U ",\"tools\":[{\"type\":\"web_search_20250305\",\"name\":\"web_search\"}]}", "tools[0]", "unsupported_value", 400},
        {"{" M U ",\"tool_choice\":\"auto\"}", "tool_choice", "invalid_value", 400},
        {"{" M U ",\"tool_choice\":{\"type\":\"any\"}}", "tool_choice", "invalid_value", 400},
        {"{" M U ",\"tools\":[{\"name\":\"f\",\"input_schema\":{}}],\"tool_choice\":{\"type\":\"tool\",\"name\":\"g\"}}", "tool_choice", "invalid_value", 400},
        {"{" M U ",\"tools\":[{\"name\":\"f\",\"input_schema\":{}}],\"tool_choice\":{\"type\":\"tool\"}}", "tool_choice", "invalid_value", 400},
        {"{" M U ",\"tools\":[{\"name\":\"f\",\"input_schema\":{}}],\"tool_choice\":{\"type\":\"any\",\"name\":\"f\"}}", "tool_choice", "invalid_value", 400},
        {"{" M U ",\"tools\":[{\"name\":\"f\",\"input_schema\":{}}],\"tool_choice\":{\"type\":\"any\",\"disable_parallel_tool_use\":1}}", "tool_choice", "invalid_value", 400},
        {"{" M U ",\"tool_choice\":{\"type\":\"sometimes\"}}", "tool_choice", "invalid_value", 400},
        {"{" M U ",\"mcp_servers\":[]}", "mcp_servers", "unsupported_value", 400},
        {"{" M U ",\"output_config\":3}", "output_config", "invalid_value", 400},
        {"{" M U ",\"output_config\":{\"effort\":\"huge\"}}", "output_config.effort", "invalid_value", 400},
        {"{" M U ",\"output_config\":{\"format\":{\"type\":\"text\"}}}", "output_config.format", "invalid_value", 400},
        {"{" M U ",\"output_config\":{\"format\":{\"type\":\"json_schema\"}}}", "output_config.format", "invalid_value", 400},
        {"{" M U ",\"output_config\":{\"format\":{\"type\":\"json_schema\",\"schema\":{},\"name\":\"x\"}}}", "output_config.format", "invalid_value", 400},
        {"{" M U ",\"output_format\":{\"type\":\"json_schema\",\"schema\":{}},\"output_config\":{\"format\":{\"type\":\"json_schema\",\"schema\":{}}}}", "output_format", "invalid_value", 400},
        {"{" M U ",\"tools\":[{\"name\":\"f\",\"strict\":\"yes\",\"input_schema\":{}}]}", "tools[0]", "invalid_value", 400},
    };
    check_bad(c, sizeof c / sizeof *c, anth_parse);
    g4_api_err ae;
    assert_int_equal(g4_anth_check_version(NULL, &ae), 0);
    assert_int_equal(g4_anth_check_version("2023-06-01", &ae), 0);
    assert_int_equal(g4_anth_check_version("2026-10-21", &ae), 0); /* what @anthropic-ai/sdk 1.16 sends */
    assert_int_equal(g4_anth_check_version("2022-12-31", &ae), 400);
    assert_int_equal(g4_anth_check_version("2023-6-1", &ae), 400);
    assert_int_equal(g4_anth_check_version("latest", &ae), 400);
    /* Anthropic's error body: type "error" and the error's type from the status */
    const struct { int status; const char *type; } m[] = {{400, "invalid_request_error"}, {401, "authentication_error"}, {404, "not_found_error"},
                                                         {413, "request_too_large"}, {503, "overloaded_error"}, {500, "api_error"}};
    for (size_t i = 0; i < sizeof m / sizeof *m; i++) {
        ae.status = m[i].status;
        snprintf(ae.message, sizeof ae.message, "bad \xff thing");
        char *s = g4_api_err_json_anthropic(&ae);
        json_t *j = load(s);
        assert_string_equal(json_string_value(json_object_get(j, "type")), "error");
        json_t *e = json_object_get(j, "error");
        assert_int_equal(json_object_size(e), 2);
        assert_string_equal(json_string_value(json_object_get(e, "type")), m[i].type);
        assert_string_equal(json_string_value(json_object_get(e, "message")), "bad ? thing");
        json_decref(j);
        free(s);
    }
}

#define I "\"input\":\"hi\""

static void test_responses_bad_requests(void **st) {
    (void)st;
    const bad_case c[] = {
        {"{}", "input", "invalid_value", 400},
        {"{\"input\":5}", "input", "invalid_value", 400},
        {"{\"input\":[]}", "input", "invalid_value", 400},
        {"{" I ",\"store\":true}", "store", "unsupported_value", 400},
        {"{" I ",\"store\":\"no\"}", "store", "invalid_value", 400},
        {"{" I ",\"previous_response_id\":\"resp_1\"}", "previous_response_id", "unsupported_value", 400},
        {"{" I ",\"conversation\":\"c\"}", "conversation", "unsupported_value", 400},
        {"{" I ",\"background\":true}", "background", "unsupported_value", 400},
        {"{" I ",\"max_output_tokens\":0}", "max_output_tokens", "invalid_value", 400},
        {"{" I ",\"temperature\":3}", "temperature", "invalid_value", 400},
        {"{" I ",\"instructions\":1}", "instructions", "invalid_value", 400},
        {"{" I ",\"top_logprobs\":3}", "top_logprobs", "unsupported_value", 400},
        {"{" I ",\"truncation\":\"sometimes\"}", "truncation", "invalid_value", 400},
        {"{" I ",\"text\":{\"format\":{\"type\":\"xml\"}}}", "text.format.type", "invalid_value", 400},
        {"{" I ",\"text\":{\"format\":{\"type\":\"json_object\",\"schema\":{}}}}", "text.format", "invalid_value", 400},
        {"{" I ",\"text\":{\"format\":{\"type\":\"json_schema\",\"schema\":{}}}}", "text.format.name", "invalid_value", 400},
        {"{" I ",\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"x\"}}}", "text.format.schema", "invalid_value", 400},
        {"{" I ",\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"x\",\"schema\":3}}}", "text.format.schema", "invalid_value", 400},
        {"{" I ",\"text\":{\"schema\":{}}}", "text", "invalid_value", 400},
        {"{" I ",\"text\":{\"verbosity\":\"loud\"}}", "text.verbosity", "invalid_value", 400},
        {"{" I ",\"reasoning\":{\"effort\":\"max\"}}", "reasoning.effort", "invalid_value", 400},
        {"{" I ",\"tools\":[{\"type\":\"web_search\"}]}", "tools[0]", "unsupported_value", 400},
        {"{" I ",\"tools\":[{\"type\":\"function\"}]}", "tools[0]", "invalid_value", 400},
        {"{" I ",\"tools\":[{\"type\":\"function\",\"name\":\"f\",\"parameters\":[]}]}", "tools[0]", "invalid_value", 400},
        {"{" I ",\"tool_choice\":\"required\"}", "tool_choice", "invalid_value", 400},
        {"{" I ",\"tools\":[{\"type\":\"function\",\"name\":\"f\"}],\"tool_choice\":{\"type\":\"function\",\"name\":\"g\"}}", "tool_choice", "invalid_value", 400},
        {"{" I ",\"tools\":[{\"type\":\"function\",\"name\":\"f\"}],\"tool_choice\":{\"type\":\"function\"}}", "tool_choice", "invalid_value", 400},
        {"{" I ",\"tools\":[{\"type\":\"function\",\"name\":\"f\"}],\"tool_choice\":{\"type\":\"allowed_tools\"}}", "tool_choice", "unsupported_value", 400},
        {"{" I ",\"tools\":[{\"type\":\"function\",\"name\":\"a b\"}]}", "tools[0]", "invalid_value", 400},
        {"{" I ",\"tool_choice\":\"maybe\"}", "tool_choice", "invalid_value", 400},
        {"{\"input\":[{\"type\":\"message\",\"role\":\"bot\",\"content\":\"x\"}]}", "input[0]", "invalid_value", 400},
        {"{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_image\",\"image_url\":\"x\"}]}]}", NULL, "invalid_value", 400} /* the part is named as in the chat it becomes */,
        {"{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"output_text\",\"text\":\"x\"}]}]}", "input[0].content", "unsupported_value", 400},
        {"{\"input\":[{\"type\":\"function_call\",\"name\":\"f\",\"arguments\":\"{}\"}]}", "input[0]", "invalid_value", 400},
        {"{\"input\":[{\"type\":\"function_call\",\"call_id\":\"c\",\"name\":\"f\",\"arguments\":\"nope\"}]}", NULL, "invalid_value", 400},
        {"{\"input\":[{\"type\":\"function_call_output\",\"call_id\":\"c\",\"output\":5}]}", "input[0].output", "invalid_value", 400},
        {"{\"input\":[{\"type\":\"item_reference\",\"id\":\"x\"}]}", "input[0]", "unsupported_value", 400},
        {"{\"input\":[{\"type\":\"computer_call\"}]}", "input[0]", "unsupported_value", 400},
        {"{\"input\":[7]}", "input[0]", "invalid_value", 400},
    };
    check_bad(c, sizeof c / sizeof *c, g4_resp_parse);
}

/* ---- answers ---- */

static const char *gen_text = "<|channel>thought\nHmm, Paris.<channel|>Sure: the capital.<|tool_call>call:get_capital{country:" Q "France" Q "}<tool_call|><turn|>";

static void test_anthropic_response(void **st) {
    (void)st;
    g4_api_output po;
    g4_err err;
    assert_int_equal(g4_api_parse_output(gen_text, strlen(gen_text), 0, &po, &err), 0);
    g4_api_result r = {.id = "msg_abc", .model = "m", .parsed = &po, .finish_reason = "stop", .prompt_tokens = 30, .completion_tokens = 9,
                       .cached_tokens = 16};
    json_t *j = g4_anth_response(&r);
    char *s = json_dumps(j, JSON_COMPACT);
    assert_string_equal(s, "{\"id\":\"msg_abc\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"m\",\"content\":["
                           "{\"type\":\"thinking\",\"thinking\":\"Hmm, Paris.\",\"signature\":\"\"},{\"type\":\"text\",\"text\":\"Sure: the capital.\"},"
                           "{\"type\":\"tool_use\",\"id\":\"toolu_abc_0\",\"name\":\"get_capital\",\"input\":{\"country\":\"France\"}}],"
                           "\"stop_reason\":\"tool_use\",\"stop_sequence\":null,\"usage\":{\"input_tokens\":14,\"output_tokens\":9,"
                           "\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":16}}");
    free(s);
    json_decref(j);
    assert_string_equal(g4_anth_stop_reason("length", NULL, 1), "max_tokens");
    assert_string_equal(g4_anth_stop_reason("stop", "END", 1), "stop_sequence");
    assert_string_equal(g4_anth_stop_reason("stop", NULL, 0), "end_turn");
    r.stop_sequence = "END";
    j = g4_anth_response(&r);
    assert_string_equal(json_string_value(json_object_get(j, "stop_sequence")), "END");
    json_decref(j);
    g4_api_output_free(&po);
}

static void test_responses_response(void **st) {
    (void)st;
    g4_api_output po;
    g4_err err;
    assert_int_equal(g4_api_parse_output(gen_text, strlen(gen_text), 0, &po, &err), 0);
    json_t *extra = load("{\"store\":false,\"tools\":[]}");
    g4_api_result r = {.id = "resp_abc", .model = "m", .created = 5, .parsed = &po, .finish_reason = "stop", .prompt_tokens = 30,
                       .completion_tokens = 9, .cached_tokens = 16};
    json_t *j = g4_resp_response(&r, extra);
    char *s = json_dumps(json_object_get(j, "output"), JSON_COMPACT);
    assert_string_equal(s, "[{\"id\":\"rs_abc_0\",\"type\":\"reasoning\",\"summary\":[],\"content\":[{\"type\":\"reasoning_text\",\"text\":\"Hmm, Paris.\"}]},"
                           "{\"id\":\"msg_abc_1\",\"type\":\"message\",\"status\":\"completed\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\","
                           "\"text\":\"Sure: the capital.\",\"annotations\":[],\"logprobs\":[]}]},"
                           "{\"id\":\"fc_abc_2\",\"type\":\"function_call\",\"status\":\"completed\",\"call_id\":\"call_abc_0\",\"name\":\"get_capital\","
                           "\"arguments\":\"{\\\"country\\\":\\\"France\\\"}\"}]");
    free(s);
    assert_string_equal(json_string_value(json_object_get(j, "status")), "completed");
    assert_string_equal(json_string_value(json_object_get(j, "object")), "response");
    assert_true(json_is_false(json_object_get(j, "store")));
    json_t *u = json_object_get(j, "usage");
    assert_int_equal(json_integer_value(json_object_get(u, "total_tokens")), 39);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(u, "input_tokens_details"), "cached_tokens")), 16);
    json_decref(j);
    r.finish_reason = "length"; /* cut short: incomplete, and why */
    j = g4_resp_response(&r, extra);
    assert_string_equal(json_string_value(json_object_get(j, "status")), "incomplete");
    assert_string_equal(json_string_value(json_object_get(json_object_get(j, "incomplete_details"), "reason")), "max_output_tokens");
    json_decref(j);
    json_decref(extra);
    g4_api_output_free(&po);
}

/* ---- streams ---- */

typedef struct { char *buf; size_t len; } bytes;

/* Runs a stream of one choice over text cut at a and b, and returns what it wrote. */
static bytes stream(g4_api_kind kind, const char *text, size_t a, size_t b, const json_t *extra) {
    g4_sse_opts o = {.shape = kind == G4_API_ANTHROPIC ? &g4_anth_sse_shape : &g4_resp_sse_shape, .kind = kind,
                     .id = kind == G4_API_ANTHROPIC ? "msg_abc" : "resp_abc", .model = "m", .created = 5, .parse_output = 1,
                     .prompt_tokens = 30, .extra = extra};
    g4_sse *s;
    assert_int_equal(g4_sse_create(&o, &s, NULL), 0);
    size_t n = strlen(text), cuts[4] = {0, a < b ? a : b, a < b ? b : a, n};
    for (int k = 0; k < 3; k++) assert_int_equal(g4_sse_feed(s, text + cuts[k], cuts[k + 1] - cuts[k], NULL), 0);
    assert_int_equal(g4_sse_comment(s, "keep-alive"), 0);
    g4_sse_end e = {.finish_reason = "stop", .prompt_tokens = 30, .completion_tokens = 9, .cached_tokens = 16};
    assert_int_equal(g4_sse_finish_choice(s, 0, &e, NULL, NULL), 0);
    assert_int_equal(g4_sse_end_stream(s, &e, NULL), 0);
    assert_true(g4_sse_closed(s));
    bytes out = {malloc(65536), 0};
    size_t got;
    while ((got = g4_sse_take(s, out.buf + out.len, 13))) out.len += got;
    out.buf[out.len] = 0;
    g4_sse_free(s);
    return out;
}

/* Calls fn for each named event (name, data) of an SSE byte stream; checks the framing. */
static void each_event(const bytes *b, void (*fn)(const char *name, json_t *data, void *u), void *u) {
    char *copy = strndup(b->buf, b->len), *save = NULL, *name = NULL;
    for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (line[0] == ':') continue;
        if (!strncmp(line, "event: ", 7)) { name = line + 7; continue; }
        assert_memory_equal(line, "data: ", 6);
        assert_non_null(name);
        json_t *d = load(line + 6);
        assert_string_equal(json_string_value(json_object_get(d, "type")), name); /* the event name is the data's type */
        fn(name, d, u);
        json_decref(d);
        name = NULL;
    }
    free(copy);
}

/* What the Anthropic SDK's MessageStream accumulates. */
typedef struct { json_t *msg; int started, stopped, open; } anth_acc;

static void anth_event(const char *name, json_t *d, void *u) {
    anth_acc *a = u;
    if (!strcmp(name, "message_start")) { assert_false(a->started); a->started = 1; a->msg = json_deep_copy(json_object_get(d, "message")); return; }
    assert_true(a->started && !a->stopped);
    json_t *content = json_object_get(a->msg, "content");
    if (!strcmp(name, "content_block_start")) {
        assert_int_equal(a->open, 0);
        assert_int_equal(json_integer_value(json_object_get(d, "index")), json_array_size(content));
        json_array_append(content, json_object_get(d, "content_block"));
        a->open = 1;
    } else if (!strcmp(name, "content_block_delta")) {
        assert_true(a->open);
        json_t *blk = json_array_get(content, (size_t)json_integer_value(json_object_get(d, "index"))), *delta = json_object_get(d, "delta");
        const char *t = json_string_value(json_object_get(delta, "type"));
        const char *field = !strcmp(t, "text_delta") ? "text" : !strcmp(t, "thinking_delta") ? "thinking" : "partial_json";
        const char *key = !strcmp(t, "input_json_delta") ? "json" : field;
        json_t *cur = json_object_get(blk, key);
        char buf[1024];
        snprintf(buf, sizeof buf, "%s%s", cur ? json_string_value(cur) : "", json_string_value(json_object_get(delta, field)));
        json_object_set_new(blk, key, json_string(buf));
    } else if (!strcmp(name, "content_block_stop")) {
        json_t *blk = json_array_get(content, (size_t)json_integer_value(json_object_get(d, "index")));
        json_t *js = json_object_get(blk, "json");
        if (js) { json_object_set_new(blk, "input", load(json_string_value(js))); json_object_del(blk, "json"); }
        a->open = 0;
    } else if (!strcmp(name, "message_delta")) {
        json_t *delta = json_object_get(d, "delta");
        json_object_set(a->msg, "stop_reason", json_object_get(delta, "stop_reason"));
        json_object_set(a->msg, "stop_sequence", json_object_get(delta, "stop_sequence"));
        json_object_set(a->msg, "usage", json_object_get(d, "usage"));
    } else if (!strcmp(name, "message_stop")) a->stopped = 1;
    else assert_string_equal(name, "ping");
}

static void test_anthropic_stream(void **st) {
    (void)st;
    g4_api_output po;
    g4_err err;
    assert_int_equal(g4_api_parse_output(gen_text, strlen(gen_text), 0, &po, &err), 0);
    g4_api_result r = {.id = "msg_abc", .model = "m", .parsed = &po, .finish_reason = "stop", .prompt_tokens = 30, .completion_tokens = 9,
                       .cached_tokens = 16};
    json_t *whole = g4_anth_response(&r);
    const size_t n = strlen(gen_text);
    for (size_t a = 0; a <= n; a += 7)
        for (size_t b = a; b <= n; b += 11) {
            bytes out = stream(G4_API_ANTHROPIC, gen_text, a, b, NULL);
            anth_acc acc = {0};
            each_event(&out, anth_event, &acc);
            assert_true(acc.stopped);
            if (!json_equal(acc.msg, whole)) {
                char *x = json_dumps(acc.msg, JSON_COMPACT), *y = json_dumps(whole, JSON_COMPACT);
                fail_msg("split %zu,%zu:\n%s\nwhole:\n%s", a, b, x, y);
            }
            json_decref(acc.msg);
            free(out.buf);
        }
    json_decref(whole);
    g4_api_output_free(&po);
}

/* What the OpenAI SDK's ResponseStream checks: response.created first, increasing sequence
 * numbers, deltas into items that were added; the last event's response. */
typedef struct { json_t *final; long long seq; int created, n_items, open_text; char text[512]; } resp_acc;

static void resp_event(const char *name, json_t *d, void *u) {
    resp_acc *a = u;
    long long seq = json_integer_value(json_object_get(d, "sequence_number"));
    assert_int_equal(seq, a->seq);
    a->seq++;
    if (!strcmp(name, "response.created")) { a->created = 1; return; }
    assert_true(a->created);
    if (!strcmp(name, "response.output_item.added")) {
        assert_int_equal(json_integer_value(json_object_get(d, "output_index")), a->n_items);
        a->n_items++;
    } else if (!strcmp(name, "response.output_text.delta")) {
        assert_int_equal(json_integer_value(json_object_get(d, "output_index")), a->n_items - 1);
        strcat(a->text, json_string_value(json_object_get(d, "delta")));
    } else if (!strcmp(name, "response.output_text.done")) {
        assert_string_equal(json_string_value(json_object_get(d, "text")), a->text);
    } else if (!strcmp(name, "response.completed") || !strcmp(name, "response.incomplete")) {
        a->final = json_deep_copy(json_object_get(d, "response"));
    }
}

static void test_responses_stream(void **st) {
    (void)st;
    g4_api_output po;
    g4_err err;
    assert_int_equal(g4_api_parse_output(gen_text, strlen(gen_text), 0, &po, &err), 0);
    json_t *extra = load("{\"store\":false,\"tools\":[]}");
    g4_api_result r = {.id = "resp_abc", .model = "m", .created = 5, .parsed = &po, .finish_reason = "stop", .prompt_tokens = 30,
                       .completion_tokens = 9, .cached_tokens = 16};
    json_t *whole = g4_resp_response(&r, extra);
    const size_t n = strlen(gen_text);
    for (size_t a = 0; a <= n; a += 7)
        for (size_t b = a; b <= n; b += 11) {
            bytes out = stream(G4_API_RESPONSES, gen_text, a, b, extra);
            resp_acc acc = {0};
            each_event(&out, resp_event, &acc);
            assert_string_equal(acc.text, "Sure: the capital.");
            assert_int_equal(acc.n_items, 3);
            if (!json_equal(acc.final, whole)) {
                char *x = json_dumps(acc.final, JSON_COMPACT), *y = json_dumps(whole, JSON_COMPACT);
                fail_msg("split %zu,%zu:\n%s\nwhole:\n%s", a, b, x, y);
            }
            json_decref(acc.final);
            free(out.buf);
        }
    json_decref(whole);
    json_decref(extra);
    g4_api_output_free(&po);
}

/* Errors after the start, in each API's stream shape. */
static void test_stream_errors(void **st) {
    (void)st;
    for (int k = 0; k < 2; k++) {
        g4_sse_opts o = {.shape = k ? &g4_resp_sse_shape : &g4_anth_sse_shape, .kind = k ? G4_API_RESPONSES : G4_API_ANTHROPIC, .id = "x_1",
                         .model = "m", .parse_output = 1};
        g4_sse *s;
        assert_int_equal(g4_sse_create(&o, &s, NULL), 0);
        assert_int_equal(g4_sse_feed(s, "Hi", 2, NULL), 0);
        g4_api_err ae;
        g4_api_err_refuse(&ae, G4_API_SHUTTING_DOWN, NULL, "bye");
        assert_int_equal(g4_sse_error(s, &ae), 0);
        assert_true(g4_sse_closed(s));
        char buf[8192];
        size_t len = g4_sse_take(s, buf, sizeof buf - 1);
        buf[len] = 0;
        const char *tail = k ? "\"code\":\"shutting_down\",\"message\":\"bye\",\"param\":null" : "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"bye\"}}\n\n";
        if (!strstr(buf, tail)) fail_msg("no error event in:\n%s", buf);
        assert_null(strstr(buf, "[DONE]"));
        g4_sse_free(s);
    }
}

/* n choices: each its role chunk, deltas and finish chunk with its own index; logprobs go with
 * the next content chunk, never the role chunk; usage counts every choice. */
static void test_sse_choices(void **st) {
    (void)st;
    g4_sse_opts o = {.shape = &g4_openai_sse_shape, .kind = G4_API_CHAT, .id = "chatcmpl-x", .model = "m", .created = 1, .include_usage = 1,
                     .parse_output = 1, .n_choices = 2};
    g4_sse *s;
    assert_int_equal(g4_sse_create(&o, &s, NULL), 0);
    assert_int_equal(g4_sse_feed_choice(s, 1, "B", 1, load("[{\"token\":\"B\"}]"), NULL), 0);
    assert_int_equal(g4_sse_feed_choice(s, 0, "<|chan", 6, load("[{\"token\":\"<|chan\"}]"), NULL), 0); /* held back: the logprob waits */
    assert_int_equal(g4_sse_feed_choice(s, 0, "x", 1, load("[{\"token\":\"x\"}]"), NULL), 0);
    g4_sse_end e = {.finish_reason = "stop", .completion_tokens = 2};
    assert_int_equal(g4_sse_finish_choice(s, 1, &e, NULL, NULL), 0);
    assert_int_equal(g4_sse_finish_choice(s, 0, &e, load("[{\"token\":\"<turn|>\"}]"), NULL), 0);
    assert_int_not_equal(g4_sse_feed_choice(s, 0, "y", 1, NULL, NULL), 0); /* that choice is over */
    g4_sse_end t = {.prompt_tokens = 5, .completion_tokens = 4, .cached_tokens = 1};
    assert_int_equal(g4_sse_end_stream(s, &t, NULL), 0);
    char buf[16384];
    size_t len = 0, got;
    while ((got = g4_sse_take(s, buf + len, 100))) len += got;
    buf[len] = 0;
    char text[2][64] = {"", ""}, lps[2][256] = {"", ""};
    int roles[2] = {0}, fin[2] = {0}, usage = 0;
    char *save = NULL;
    for (char *line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (!strcmp(line, "data: [DONE]")) continue;
        json_t *j = load(line + 6), *ch = json_array_get(json_object_get(j, "choices"), 0);
        if (!ch) {
            usage = (int)json_integer_value(json_object_get(json_object_get(j, "usage"), "completion_tokens"));
            json_decref(j);
            continue;
        }
        int i = (int)json_integer_value(json_object_get(ch, "index"));
        json_t *d = json_object_get(ch, "delta"), *lp = json_object_get(json_object_get(ch, "logprobs"), "content");
        if (json_object_get(d, "role")) { roles[i]++; assert_true(json_is_null(json_object_get(ch, "logprobs"))); }
        if (json_object_get(d, "content")) strcat(text[i], json_string_value(json_object_get(d, "content")));
        for (size_t k = 0; k < json_array_size(lp); k++) strcat(lps[i], json_string_value(json_object_get(json_array_get(lp, k), "token")));
        if (json_is_string(json_object_get(ch, "finish_reason"))) fin[i]++;
        json_decref(j);
    }
    assert_string_equal(text[0], "<|chanx");
    assert_string_equal(text[1], "B");
    assert_string_equal(lps[0], "<|chanx<turn|>");
    assert_string_equal(lps[1], "B");
    assert_true(roles[0] == 1 && roles[1] == 1 && fin[0] == 1 && fin[1] == 1);
    assert_int_equal(usage, 4);
    g4_sse_free(s);
}

/* ---- logprob JSON ---- */

static void test_logprob_json(void **st) {
    (void)st;
    g4_tokenizer *tok;
    g4_err err;
    assert_int_equal(g4_tokenizer_load("models/demo/tokenizer.json", &tok, &err), 0);
    const int32_t e2 = g4_tokenizer_token_id(tok, "<0xE2>", 6);
    int32_t *ids;
    size_t n;
    assert_true(e2 >= 0);
    assert_int_equal(g4_tokenizer_encode(tok, " Paris", 6, 0, &ids, &n, &err), 0);
    assert_int_equal(n, 1);
    g4_token_logprob lp[2] = {{.id = ids[0], .logprob = -0.5f, .n_top = 2, .top_id = {ids[0], e2}, .top_logprob = {-0.5f, -1.25f}},
                              {.id = e2, .logprob = -2.0f, .n_top = 1, .top_id = {ids[0]}, .top_logprob = {-0.25f}}};
    json_t *arr = json_array();
    assert_int_equal(g4_lpj_chat_append(tok, lp, 2, arr), 0);
    char *s = json_dumps(arr, JSON_COMPACT);
    assert_string_equal(s, "[{\"token\":\" Paris\",\"logprob\":-0.5,\"bytes\":[32,80,97,114,105,115],\"top_logprobs\":["
                           "{\"token\":\" Paris\",\"logprob\":-0.5,\"bytes\":[32,80,97,114,105,115]},{\"token\":\"bytes:\\\\xe2\",\"logprob\":-1.25,\"bytes\":[226]}]},"
                           "{\"token\":\"bytes:\\\\xe2\",\"logprob\":-2.0,\"bytes\":[226],\"top_logprobs\":[{\"token\":\" Paris\",\"logprob\":-0.25,\"bytes\":[32,80,97,114,105,115]}]}]");
    free(s);
    json_decref(arr);
    /* completions: the first token of an echoed prompt has no logprob; the chosen token is in
     * its top list even when it is not among the best; offsets count the token texts */
    g4_lpj_completion c;
    g4_lpj_completion_init(&c);
    assert_int_equal(g4_lpj_completion_append(&c, tok, lp, 2, 1), 0);
    json_t *o = g4_lpj_completion_take(&c);
    s = json_dumps(o, JSON_COMPACT);
    assert_string_equal(s, "{\"tokens\":[\" Paris\",\"bytes:\\\\xe2\"],\"token_logprobs\":[null,-2.0],\"top_logprobs\":[null,{\" Paris\":-0.25,\"bytes:\\\\xe2\":-2.0}],"
                           "\"text_offset\":[0,6]}");
    free(s);
    json_decref(o);
    assert_int_equal(g4_lpj_completion_append(&c, tok, lp, 1, 0), 0); /* a later chunk: the offsets go on */
    o = g4_lpj_completion_take(&c);
    assert_int_equal(json_integer_value(json_array_get(json_object_get(o, "text_offset"), 0)), 16);
    json_decref(o);
    g4_lpj_completion_clear(&c);
    free(ids);
    g4_tokenizer_free(tok);
}

/* The API table: a row per kind, found by its route; each parses into its own kind, errors in
 * its shape (Anthropic's for /v1/messages), streams where the API does. */
static void test_api_families(void **st) {
    (void)st;
    static const struct { g4_api_kind k; const char *path, *body; int streams, anthropic_errors; } want[] = {
        {G4_API_GENERATE, "/generate", "{\"prompt\":\"x\"}", 0, 0},
        {G4_API_COMPLETIONS, "/v1/completions", "{\"prompt\":\"x\"}", 1, 0},
        {G4_API_CHAT, "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 1, 0},
        {G4_API_ANTHROPIC, "/v1/messages", "{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 1, 1},
        {G4_API_RESPONSES, "/v1/responses", "{\"input\":\"x\"}", 1, 0},
    };
    g4_api_err ae;
    g4_api_err_status(&ae, G4_EINVAL, "x", "bad");
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        const g4_api_family *f = g4_api_family_of(want[i].k);
        assert_non_null(f);
        assert_ptr_equal(g4_api_family_at(want[i].path), f);
        assert_int_equal(f->sse != NULL, want[i].streams);
        g4_api_request q;
        assert_int_equal(f->parse(want[i].body, strlen(want[i].body), &q, &ae), 0);
        assert_int_equal(q.kind, want[i].k);
        g4_api_request_free(&q);
        char *e = g4_api_family_error(f, &ae);
        assert_int_equal(strstr(e, "\"type\":\"error\"") != NULL, want[i].anthropic_errors);
        free(e);
    }
    assert_null(g4_api_family_at("/v1/messages/count_tokens"));
    assert_null(g4_api_family_of((g4_api_kind)99));
    assert_string_equal(g4_api_family_of(G4_API_ANTHROPIC)->header, "anthropic-version");
    assert_int_not_equal(g4_api_family_of(G4_API_ANTHROPIC)->check_header("2022-01-01", &ae), 0);
}

/* A chat (one user message) or completions body with more fields, parsed. */
static int parse_with(int kind, const char *extra, g4_api_request *r, g4_api_err *ae) {
    char body[512];
    snprintf(body, sizeof body, kind == G4_API_CHAT ? "{\"messages\":[{\"role\":\"user\",\"content\":\"q\"}],%s}" : "{\"prompt\":\"q\",%s}", extra);
    return g4_api_parse(kind, body, strlen(body), r, ae);
}

/* vLLM's guided_* fields on chat and completions (issue 24 item 8): guided_json / guided_regex /
 * guided_choice are enforced (a grammar, errors naming the field), guided_grammar and
 * guided_whitespace_pattern are refused, guided_decoding_backend is accepted and ignored; one
 * format only. Stop strings with a constrained answer are refused (item 9). */
static void test_guided_and_stops(void **st) {
    (void)st;
    g4_api_request r;
    g4_api_err ae;
    static const struct { int kind; const char *extra; int format; } ok[] = {
        {G4_API_CHAT, "\"guided_json\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}},\"guided_decoding_backend\":\"xgrammar\"", G4_FMT_JSON_SCHEMA},
        {G4_API_CHAT, "\"guided_json\":\"{\\\"type\\\":\\\"integer\\\"}\"", G4_FMT_JSON_SCHEMA},
        {G4_API_COMPLETIONS, "\"guided_regex\":\"[0-9]{3}\"", G4_FMT_REGEX},
        {G4_API_CHAT, "\"guided_choice\":[\"yes\",\"no\"]", G4_FMT_CHOICE},
    };
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        if (parse_with(ok[i].kind, ok[i].extra, &r, &ae)) fail_msg("%s: %s", ok[i].extra, ae.message);
        assert_int_equal(r.out_format, ok[i].format);
        g4_grammar *gr = NULL;
        if (g4_api_constraint(&r, 0, &gr, &ae)) fail_msg("%s: %s", ok[i].extra, ae.message);
        assert_non_null(gr);
        g4_grammar_release(gr);
        g4_api_request_free(&r);
    }
    static const struct { int kind; const char *extra, *param, *code; } bad[] = {
        {G4_API_CHAT, "\"guided_grammar\":\"root ::= \\\"a\\\"\"", "guided_grammar", "unsupported_value"},
        {G4_API_CHAT, "\"guided_json\":{},\"guided_regex\":\"a\"", "guided_regex", "invalid_value"},
        {G4_API_CHAT, "\"guided_regex\":\"a\",\"response_format\":{\"type\":\"json_object\"}", "guided_regex", "invalid_value"},
        {G4_API_CHAT, "\"guided_choice\":[]", "guided_choice", "invalid_value"},
        {G4_API_CHAT, "\"guided_choice\":[1]", "guided_choice", "invalid_value"},
        {G4_API_CHAT, "\"guided_json\":\"not json\"", "guided_json", "invalid_value"},
        {G4_API_CHAT, "\"guided_json\":{},\"guided_whitespace_pattern\":\" *\"", "guided_whitespace_pattern", "unsupported_value"},
        {G4_API_COMPLETIONS, "\"guided_regex\":\"\"", "guided_regex", "invalid_value"},
        {G4_API_CHAT, "\"structured_outputs\":{\"json\":{}}", "structured_outputs", "unsupported_value"},
        /* stop strings would cut the constrained answer */
        {G4_API_CHAT, "\"stop\":[\"}\"],\"response_format\":{\"type\":\"json_object\"}", "stop", "unsupported_value"},
        {G4_API_COMPLETIONS, "\"stop\":\"\\n\",\"guided_regex\":\"a+\"", "stop", "unsupported_value"},
        {G4_API_CHAT, "\"stop\":\"x\",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],\"tool_choice\":\"required\"", "stop", "unsupported_value"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        if (parse_with(bad[i].kind, bad[i].extra, &r, &ae) != 400) fail_msg("%s: not refused", bad[i].extra);
        assert_string_equal(ae.param, bad[i].param);
        assert_string_equal(ae.code, bad[i].code);
    }
    /* the compiler's errors name the guided field */
    const char *b = "{\"messages\":[{\"role\":\"user\",\"content\":\"q\"}],\"guided_regex\":\"(a\"}";
    assert_int_equal(g4_api_parse(G4_API_CHAT, b, strlen(b), &r, &ae), 0);
    g4_grammar *gr = NULL;
    assert_int_equal(g4_api_constraint(&r, 0, &gr, &ae), 400);
    assert_string_equal(ae.param, "guided_regex");
    g4_api_request_free(&r);
    /* Anthropic: stop_sequences with a forced tool call */
    const char *a = "{\"model\":\"m\",\"max_tokens\":9,\"messages\":[{\"role\":\"user\",\"content\":\"q\"}],\"stop_sequences\":[\"x\"],"
                    "\"tools\":[{\"name\":\"f\",\"input_schema\":{\"type\":\"object\"}}],\"tool_choice\":{\"type\":\"any\"}}";
    assert_int_equal(g4_anth_parse(a, strlen(a), 0, &r, &ae), 400);
    assert_string_equal(ae.param, "stop_sequences");
    /* stop strings with free text, and with tools under auto, still work */
    const char *c = "{\"messages\":[{\"role\":\"user\",\"content\":\"q\"}],\"stop\":\"x\",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]}";
    assert_int_equal(g4_api_parse(G4_API_CHAT, c, strlen(c), &r, &ae), 0);
    g4_api_request_free(&r);
}

/* The sampling fields beyond temperature / top_p (issue 27 item 1, issue 24 item 8): every API
 * family reads presence / frequency / repetition penalties, logit_bias, min_tokens and seed the
 * same way (extensions in Anthropic's and the Responses API); bad values are 400s naming them. */
static void test_penalty_fields(void **st) {
    (void)st;
    static const char *const bodies[] = {
        "{\"prompt\":\"x\",%s}",
        "{\"prompt\":\"x\",%s}",
        "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],%s}",
        "{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],%s}",
        "{\"input\":\"x\",%s}",
    };
    const g4_api_kind kinds[] = {G4_API_GENERATE, G4_API_COMPLETIONS, G4_API_CHAT, G4_API_ANTHROPIC, G4_API_RESPONSES};
    static const struct { const char *fields, *param; } bad[] = {
        {"\"presence_penalty\":2.5", "presence_penalty"},
        {"\"presence_penalty\":\"1\"", "presence_penalty"},
        {"\"frequency_penalty\":-2.01", "frequency_penalty"},
        {"\"repetition_penalty\":0", "repetition_penalty"},
        {"\"repetition_penalty\":-1", "repetition_penalty"},
        {"\"min_tokens\":-1", "min_tokens"},
        {"\"min_tokens\":1.5", "min_tokens"},
        {"\"logit_bias\":[1]", "logit_bias"},
        {"\"logit_bias\":{\"a\":1}", "logit_bias"},
        {"\"logit_bias\":{\"-1\":1}", "logit_bias"},
        {"\"logit_bias\":{\"\":1}", "logit_bias"},
        {"\"logit_bias\":{\"1 \":1}", "logit_bias"},
        {"\"logit_bias\":{\"2147483648\":1}", "logit_bias"},
        {"\"logit_bias\":{\"1\":100.5}", "logit_bias"},
        {"\"logit_bias\":{\"1\":\"5\"}", "logit_bias"},
        {"\"logit_bias\":{\"7\":1,\"007\":2}", "logit_bias"},
        {"\"seed\":1.5", "seed"},
    };
    for (size_t f = 0; f < 5; f++) {
        const g4_api_family *fam = g4_api_family_of(kinds[f]);
        char body[512];
        g4_api_request q;
        g4_api_err ae;
        snprintf(body, sizeof body, bodies[f],
                 "\"presence_penalty\":-0.5,\"frequency_penalty\":1.25,\"repetition_penalty\":1.1,\"min_tokens\":3,\"seed\":42,"
                 "\"logit_bias\":{\"300\":-100,\"2\":7.5,\"0\":-0.25}");
        if (fam->parse(body, strlen(body), &q, &ae)) fail_msg("%s: %s", body, ae.message);
        assert_true(q.presence_penalty == -0.5 && q.frequency_penalty == 1.25 && q.repetition_penalty == 1.1);
        assert_int_equal(q.min_tokens, 3);
        assert_true(q.has_seed && q.seed == 42);
        assert_int_equal(q.n_logit_bias, 3); /* sorted by id */
        assert_int_equal(q.logit_bias[0].id, 0);
        assert_true(q.logit_bias[0].bias == -0.25f);
        assert_int_equal(q.logit_bias[1].id, 2);
        assert_int_equal(q.logit_bias[2].id, 300);
        assert_true(q.logit_bias[2].bias == -100.0f);
        g4_api_request_free(&q);
        /* absent: nothing; an empty logit_bias and explicit zeros / nulls too */
        snprintf(body, sizeof body, bodies[f], "\"logit_bias\":{},\"presence_penalty\":0,\"frequency_penalty\":null,\"repetition_penalty\":1");
        assert_int_equal(fam->parse(body, strlen(body), &q, &ae), 0);
        assert_true(q.presence_penalty == 0 && q.frequency_penalty == 0 && q.repetition_penalty == 1 && !q.n_logit_bias && !q.min_tokens && !q.has_seed);
        g4_api_request_free(&q);
        for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
            snprintf(body, sizeof body, bodies[f], bad[i].fields);
            const int rc = fam->parse(body, strlen(body), &q, &ae);
            if (rc != 400 || strcmp(ae.param, bad[i].param)) fail_msg("%s: status %d, param '%s' (%s)", body, rc, ae.param, ae.message);
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_anthropic_request_renders_like_chat),
        cmocka_unit_test(test_responses_request_renders_like_chat),
        cmocka_unit_test(test_tool_choice_and_formats),
        cmocka_unit_test(test_anthropic_bad_requests),
        cmocka_unit_test(test_responses_bad_requests),
        cmocka_unit_test(test_anthropic_response),
        cmocka_unit_test(test_responses_response),
        cmocka_unit_test(test_anthropic_stream),
        cmocka_unit_test(test_responses_stream),
        cmocka_unit_test(test_stream_errors),
        cmocka_unit_test(test_sse_choices),
        cmocka_unit_test(test_logprob_json),
        cmocka_unit_test(test_api_families),
        cmocka_unit_test(test_guided_and_stops),
        cmocka_unit_test(test_penalty_fields),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
