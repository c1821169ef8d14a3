/* fuzz_openai.c — the OpenAI request parser (g4_api_parse for /generate, /v1/completions,
 * /v1/chat/completions; the first input byte picks which, the rest is the body), then what the
 * server does next with an accepted request: render its chat with the demo model's chat
 * template, encode the prompt (each of a completions batch), set up its stop strings. Invariants: a refusal is a 4xx/5xx with
 * a message and a valid OpenAI error body; an accepted request has its fields within the ranges
 * the parser checks; the rendered prompt is valid UTF-8 and encodes. */
#include <jansson.h>
#include <math.h>
#include <strings.h>

#include "fuzz_api.h"
#include "text/stop_strings.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    fuzz_api_init();
    return 0;
}

static void check_refusal(const g4_api_err *ae) {
    FUZZ_CHECK(ae->status >= 400 && ae->status < 600 && ae->message[0] && ae->type, "refusal %d \"%s\"", ae->status, ae->message);
    char *body = g4_api_err_json(ae);
    json_t *j = body ? json_loads(body, 0, NULL) : NULL;
    FUZZ_CHECK(json_is_object(json_object_get(j, "error")), "error body is not {\"error\": {...}}: %s", body ? body : "(null)");
    json_decref(j);
    free(body);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_in in = {data, size};
    g4_api_kind kind = (g4_api_kind)(fuzz_byte(&in) % 3);
    g4_api_request r;
    g4_api_err ae;
    memset(&ae, 0, sizeof ae);
    int rc = g4_api_parse(kind, (const char *)in.p, in.n, &r, &ae);
    if (rc) {
        FUZZ_CHECK(rc == ae.status, "returned %d, status %d", rc, ae.status);
        check_refusal(&ae);
        return 0;
    }
    FUZZ_CHECK(r.kind == kind, "kind");
    FUZZ_CHECK(!r.has_temperature || (r.temperature >= 0 && r.temperature <= 100), "temperature %g", r.temperature);
    FUZZ_CHECK(!r.has_top_p || (r.top_p >= 0 && r.top_p <= 1), "top_p %g", r.top_p);
    FUZZ_CHECK(!r.has_min_p || (r.min_p >= 0 && r.min_p <= 1), "min_p %g", r.min_p);
    FUZZ_CHECK(!r.has_top_k || r.top_k >= 0, "top_k %d", r.top_k);
    FUZZ_CHECK(r.max_tokens == -1 || r.max_tokens >= 1, "max_tokens %lld", (long long)r.max_tokens);
    FUZZ_CHECK(r.n_stops <= G4_API_MAX_STOPS, "%zu stops", r.n_stops);
    FUZZ_CHECK((r.chat != NULL) + (r.prompt != NULL) + (r.prompt_ids != NULL) + (r.n_batch != 0) == 1, "exactly one of chat, prompt, prompt ids, a batch");
    FUZZ_CHECK(r.n_batch != 1 && r.n_batch <= G4_API_MAX_PROMPTS, "a batch of %zu", r.n_batch);
    for (size_t i = 0; i < r.n_batch; i++) {
        FUZZ_CHECK((r.batch[i].text != NULL) + (r.batch[i].ids != NULL) == 1, "prompt %zu: text or ids", i);
        FUZZ_CHECK(!r.batch[i].ids || r.batch[i].n_ids, "prompt %zu: no ids", i);
        for (size_t k = 0; k < r.batch[i].n_ids; k++) FUZZ_CHECK(r.batch[i].ids[k] >= 0, "prompt %zu id %d", i, r.batch[i].ids[k]);
        if (r.batch[i].text) {
            size_t n = 0;
            int32_t *ids = fuzz_encode(fuzz_tokz, r.batch[i].text, r.batch[i].len, r.add_special, &n);
            FUZZ_CHECK(ids != NULL || !fuzz_utf8_ok(r.batch[i].text, r.batch[i].len), "prompt %zu did not encode", i);
            free(ids);
        }
    }
    FUZZ_CHECK(r.images.n <= G4_API_MAX_IMAGES, "%zu images", r.images.n);
    for (size_t i = 0; i < r.images.n; i++) {
        const g4_api_image *im = &r.images.v[i];
        FUZZ_CHECK((im->data != NULL) + (im->url != NULL) == 1 && im->param[0], "image %zu: bytes or a URL, and where it was", i);
        FUZZ_CHECK(!im->url || !strncasecmp(im->url, "http://", 7) || !strncasecmp(im->url, "https://", 8), "image %zu: URL %s", i, im->url);
    }
    for (size_t i = 0; i < r.n_prompt_ids; i++) FUZZ_CHECK(r.prompt_ids[i] >= 0, "prompt id %d", r.prompt_ids[i]);
    for (size_t i = 0; i < r.n_stops; i++) FUZZ_CHECK(r.stops[i] && r.stops[i][0], "stop %zu empty", i);
    g4_err err = {0};
    char *text = NULL;
    size_t len = 0;
    if (r.chat) {
        rc = g4_chat_template_render(fuzz_tmpl, r.chat, NULL, &text, &len, &err);
        if (rc) FUZZ_CHECK_ERR(rc, err);
    } else if (r.prompt) {
        text = malloc(r.prompt_len + 1);
        memcpy(text, r.prompt, r.prompt_len + 1);
        len = r.prompt_len;
    }
    if (text) {
        FUZZ_CHECK(fuzz_utf8_ok(text, len), "the prompt is not valid UTF-8");
        size_t n = 0;
        int32_t *ids = fuzz_encode(fuzz_tokz, text, len, r.chat ? 0 : r.add_special, &n);
        FUZZ_CHECK(ids != NULL, "a valid UTF-8 prompt did not encode");
        free(ids);
        free(text);
    }
    if (r.n_stops) {
        g4_stop_strings *ss = NULL;
        rc = g4_stop_strings_create((const char *const *)r.stops, r.n_stops, &ss, &err);
        if (rc) FUZZ_CHECK(rc == G4_EINVAL && err.msg[0], "stop strings: rc %d %s", rc, err.msg);
        g4_stop_strings_free(ss);
    }
    g4_api_request_free(&r);
    return 0;
}
