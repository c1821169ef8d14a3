/* fuzz_jinja.c — the Jinja engine: a template (parser), rendered with variables (evaluator,
 * filters, tests, methods). Input: TEMPLATE, then optionally a NUL byte and a JSON object of
 * variables (a fixed chat-like set when absent or not an object). Invariants: errors carry a
 * code and message; output is NUL-terminated with the stated length and valid UTF-8 whenever
 * the template and the variables are. A second render of the same compiled template gives the
 * same bytes (a compiled template is immutable; templates calling strftime_now excepted). */
#include <jansson.h>

#include "fuzz_util.h"
#include "text/jinja_engine.h"

static json_t *default_vars;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    default_vars = json_loads("{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": "
                              "\"Hi \\u00e9\\ud83d\\ude00\"}, {\"role\": \"assistant\", \"content\": \"Hello\", \"tool_calls\": "
                              "[{\"function\": {\"name\": \"f\", \"arguments\": {\"a\": 1, \"b\": [true, null, 2.5]}}}]}], "
                              "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"type\": "
                              "\"object\"}}}], \"add_generation_prompt\": true, \"bos_token\": \"<bos>\", \"n\": 3, \"x\": -0.5, "
                              "\"s\": \"a,b,c\", \"d\": {\"k\": \"v\", \"z\": [1, 2]}}",
                              0, NULL);
    if (!default_vars) abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    fuzz_in src = {data, nul ? (size_t)(nul - data) : size};
    json_t *vars = NULL;
    if (nul) vars = json_loadb((const char *)nul + 1, size - (size_t)(nul + 1 - data), JSON_ALLOW_NUL, NULL);
    if (vars && !json_is_object(vars)) { json_decref(vars); vars = NULL; }
    g4_jinja *t = NULL;
    g4_err err = {0};
    int rc = g4_jinja_compile((const char *)src.p, src.n, &t, &err);
    if (rc) {
        FUZZ_CHECK_ERR(rc, err);
        FUZZ_CHECK(t == NULL, "template returned with a failure");
        json_decref(vars);
        return 0;
    }
    char *out = NULL, *out2 = NULL;
    size_t len = 0, len2 = 0;
    const json_t *v = vars ? vars : default_vars;
    rc = g4_jinja_render(t, v, &out, &len, &err);
    if (rc) {
        FUZZ_CHECK_ERR(rc, err);
        FUZZ_CHECK(out == NULL, "output returned with a failure");
    } else {
        FUZZ_CHECK(out && out[len] == 0, "output not NUL-terminated");
        if (fuzz_utf8_ok(/* jansson only yields valid UTF-8 */ (const char *)src.p, src.n)) FUZZ_CHECK(fuzz_utf8_ok(out, len), "output is not valid UTF-8");
        if (!memmem(src.p, src.n, "strftime", 8)) { /* the clock is the one input that may change */
            int rc2 = g4_jinja_render(t, v, &out2, &len2, &err);
            FUZZ_CHECK(rc2 == 0 && len2 == len && memcmp(out, out2, len) == 0, "second render differs");
        }
    }
    free(out);
    free(out2);
    g4_jinja_free(t);
    json_decref(vars);
    return 0;
}
