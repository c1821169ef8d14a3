/* api_family.c — the table of generation APIs (see api_family.h): /generate, OpenAI's
 * completions and chat completions, Anthropic's Messages, OpenAI's Responses. The wrappers give
 * every translation the table's signatures; the translations themselves are openai.c,
 * anthropic.c and responses.c. */
#include "server/api_family.h"

#include <string.h>

#include "server/anthropic.h"
#include "server/responses.h"

static int parse_generate(const char *b, size_t n, g4_api_request *q, g4_api_err *ae) { return g4_api_parse(G4_API_GENERATE, b, n, q, ae); }
static int parse_completions(const char *b, size_t n, g4_api_request *q, g4_api_err *ae) { return g4_api_parse(G4_API_COMPLETIONS, b, n, q, ae); }
static int parse_chat(const char *b, size_t n, g4_api_request *q, g4_api_err *ae) { return g4_api_parse(G4_API_CHAT, b, n, q, ae); }
static int parse_messages(const char *b, size_t n, g4_api_request *q, g4_api_err *ae) { return g4_anth_parse(b, n, 0, q, ae); }

/* /generate and Anthropic's Messages answer one choice; Responses repeat request fields. */
static json_t *render_generate(const g4_api_result *r, size_t n, const json_t *extra) { (void)n; (void)extra; return g4_api_generate_response(r); }
static json_t *render_completions(const g4_api_result *r, size_t n, const json_t *extra) { (void)extra; return g4_api_completion_response_n(r, n); }
static json_t *render_chat(const g4_api_result *r, size_t n, const json_t *extra) { (void)extra; return g4_api_chat_response_n(r, n); }
static json_t *render_messages(const g4_api_result *r, size_t n, const json_t *extra) { (void)n; (void)extra; return g4_anth_response(r); }
static json_t *render_responses(const g4_api_result *r, size_t n, const json_t *extra) { (void)n; return g4_resp_response(r, extra); }

/* Indexed by g4_api_kind. */
static const g4_api_family families[] = {
    {G4_API_GENERATE, "/generate", "gen-", NULL, NULL, parse_generate, render_generate, NULL, g4_api_err_json, 0},
    {G4_API_COMPLETIONS, "/v1/completions", "cmpl-", NULL, NULL, parse_completions, render_completions, &g4_openai_sse_shape, g4_api_err_json, 0},
    {G4_API_CHAT, "/v1/chat/completions", "chatcmpl-", NULL, NULL, parse_chat, render_chat, &g4_openai_sse_shape, g4_api_err_json, 1},
    {G4_API_ANTHROPIC, "/v1/messages", "msg_", "anthropic-version", g4_anth_check_version, parse_messages, render_messages, &g4_anth_sse_shape,
     g4_api_err_json_anthropic, 0},
    {G4_API_RESPONSES, "/v1/responses", "resp_", NULL, NULL, g4_resp_parse, render_responses, &g4_resp_sse_shape, g4_api_err_json, 0},
};
#define N_FAMILIES (sizeof families / sizeof *families)

const g4_api_family *g4_api_family_of(g4_api_kind kind) {
    return (size_t)kind < N_FAMILIES && families[kind].kind == kind ? &families[kind] : NULL;
}

const g4_api_family *g4_api_family_at(const char *path) {
    for (size_t i = 0; i < N_FAMILIES; i++)
        if (!strcmp(path, families[i].path)) return &families[i];
    return NULL;
}

char *g4_api_family_error(const g4_api_family *f, const g4_api_err *ae) { return f ? f->error_json(ae) : g4_api_err_json(ae); }
