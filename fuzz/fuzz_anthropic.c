/* fuzz_anthropic.c — the Anthropic Messages parser (g4_anth_parse for /v1/messages; the first
 * input byte's low bit picks /v1/messages/count_tokens, the rest is the body) and what the
 * server does with an accepted request (fuzz_api.h: render, encode, compile the tool_choice /
 * tools constraint). Invariants: a refusal is a 4xx/5xx whose Anthropic error body is
 * {"type": "error", "error": {type, message}}; an accepted request holds max_tokens >= 1 (not
 * for count_tokens) and a model, plus fuzz_api.h's checks; the message object built from a
 * fixed answer is well formed. */
#include "fuzz_api.h"
#include "server/anthropic.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    fuzz_api_init();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_in in = {data, size};
    const int count_only = fuzz_byte(&in) & 1;
    g4_api_request r;
    g4_api_err ae;
    memset(&ae, 0, sizeof ae);
    int rc = g4_anth_parse((const char *)in.p, in.n, count_only, &r, &ae);
    if (rc) {
        fuzz_api_refusal(&ae, rc);
        char *body = g4_api_err_json_anthropic(&ae);
        json_t *j = body ? json_loads(body, 0, NULL) : NULL, *e = json_object_get(j, "error");
        FUZZ_CHECK(json_is_string(json_object_get(j, "type")) && !strcmp(json_string_value(json_object_get(j, "type")), "error") &&
                       json_is_string(json_object_get(e, "type")) && json_is_string(json_object_get(e, "message")),
                   "not Anthropic's error body: %s", body ? body : "(null)");
        json_decref(j);
        free(body);
        return 0;
    }
    FUZZ_CHECK(r.kind == G4_API_ANTHROPIC && r.model, "kind / model");
    FUZZ_CHECK(count_only || r.max_tokens >= 1, "max_tokens %lld", (long long)r.max_tokens);
    FUZZ_CHECK(!r.has_temperature || (r.temperature >= 0 && r.temperature <= 1), "temperature %g", r.temperature);
    fuzz_api_accepted(&r);
    g4_api_output po;
    fuzz_api_answer(&po);
    g4_api_result res = {.id = "msg_1", .model = "m", .parsed = &po, .finish_reason = "stop", .prompt_tokens = 3, .completion_tokens = 2};
    json_t *m = g4_anth_response(&res);
    FUZZ_CHECK(json_is_array(json_object_get(m, "content")) && json_array_size(json_object_get(m, "content")) == 3, "message content");
    json_decref(m);
    g4_api_output_free(&po);
    g4_api_request_free(&r);
    return 0;
}
