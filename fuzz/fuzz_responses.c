/* fuzz_responses.c — the Responses parser (g4_resp_parse for /v1/responses; the input is the
 * body) and what the server does with an accepted request (fuzz_api.h: render, encode, compile
 * the tool_choice / tools / text.format constraint). Invariants: a refusal is a 4xx/5xx with an
 * OpenAI error body; an accepted request repeats its fields in r.extra (an object with tools,
 * tool_choice, text, parallel_tool_calls) and passes fuzz_api.h's checks; the response object
 * built from a fixed answer repeats them. */
#include "fuzz_api.h"
#include "server/responses.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    fuzz_api_init();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    g4_api_request r;
    g4_api_err ae;
    memset(&ae, 0, sizeof ae);
    int rc = g4_resp_parse((const char *)data, size, &r, &ae);
    if (rc) {
        fuzz_api_refusal(&ae, rc);
        char *body = g4_api_err_json(&ae);
        json_t *j = body ? json_loads(body, 0, NULL) : NULL;
        FUZZ_CHECK(json_is_object(json_object_get(j, "error")), "error body is not {\"error\": {...}}: %s", body ? body : "(null)");
        json_decref(j);
        free(body);
        return 0;
    }
    FUZZ_CHECK(r.kind == G4_API_RESPONSES, "kind");
    FUZZ_CHECK(r.max_tokens == -1 || r.max_tokens >= 1, "max_tokens %lld", (long long)r.max_tokens);
    static const char *const keys[] = {"tools", "tool_choice", "text", "parallel_tool_calls", "store"};
    FUZZ_CHECK(json_is_object(r.extra), "no extra fields");
    for (int k = 0; k < 5; k++) FUZZ_CHECK(json_object_get(r.extra, keys[k]), "extra lacks '%s'", keys[k]);
    fuzz_api_accepted(&r);
    g4_api_output po;
    fuzz_api_answer(&po);
    g4_api_result res = {.id = "resp_1", .model = "m", .parsed = &po, .finish_reason = "stop", .prompt_tokens = 3, .completion_tokens = 2};
    json_t *j = g4_resp_response(&res, r.extra);
    FUZZ_CHECK(json_is_array(json_object_get(j, "output")) && json_equal(json_object_get(j, "tool_choice"), json_object_get(r.extra, "tool_choice")),
               "response object");
    json_decref(j);
    g4_api_output_free(&po);
    g4_api_request_free(&r);
    return 0;
}
