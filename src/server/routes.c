/* routes.c — request handling: routing, authentication (Authorization: Bearer or x-api-key),
 * and the small endpoints (/health, /metrics, /v1/models, /tokenize, /detokenize); the
 * generation routes (/generate, /v1/completions, /v1/chat/completions, /v1/messages,
 * /v1/responses) go to generate.c. Errors go through errors.c only, in the route's API shape
 * (Anthropic's for /v1/messages*). Knows the HTTP adapter's interface, never MHD. */
#include "server/server_internal.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "grammar/grammar.h"
#include "server/errors.h"
#include "server/openai.h"
#include "server/sse.h"
#include "text/output_parser.h"

/* ---- answers --------------------------------------------------------------------------------- */

static void answer_text(g4_server *s, g4_http_req *r, const char *endpoint, int status, const char *ctype, const char *body,
                        size_t len, const char *const *headers) {
    g4_http_send(r, status, ctype, body, len, headers);
    g4_metrics_request(s->metrics, endpoint, status);
}

/* Takes the reference. */
void g4_srv_answer_json(g4_server *s, g4_http_req *r, const char *endpoint, int status, json_t *j) {
    char *txt = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!txt) {
        g4_api_err ae;
        g4_api_err_status(&ae, G4_ENOMEM, NULL, "out of memory while rendering the response");
        txt = g4_api_err_json(&ae);
        status = ae.status;
    }
    answer_text(s, r, endpoint, status, "application/json", txt ? txt : "{}", txt ? strlen(txt) : 2, NULL);
    free(txt);
}

/* close: the connection ends after the answer (the request's framing is in doubt). */
static void answer_error_ex(g4_server *s, g4_http_req *r, const char *endpoint, const g4_api_err *ae, int close) {
    char *txt = strncmp(endpoint, "/v1/messages", 12) ? g4_api_err_json(ae) : g4_api_err_json_anthropic(ae);
    char retry[16];
    const char *hdr[6] = {0};
    int k = 0;
    snprintf(retry, sizeof retry, "%d", ae->retry_after_s);
    if (ae->retry_after_s > 0) { hdr[k++] = "Retry-After"; hdr[k++] = retry; }
    if (close) { hdr[k++] = "Connection"; hdr[k++] = "close"; }
    answer_text(s, r, endpoint, ae->status, "application/json", txt ? txt : "{}", txt ? strlen(txt) : 2, k ? hdr : NULL);
    free(txt);
}

void g4_srv_answer_error(g4_server *s, g4_http_req *r, const char *endpoint, const g4_api_err *ae) {
    answer_error_ex(s, r, endpoint, ae, 0);
}

/* ---- small endpoints ------------------------------------------------------------------------- */

static void route_health(g4_server *s, g4_http_req *r, const char *ep) {
    const char *failed = atomic_load(&s->ready) ? g4_engine_failure(s->e) : NULL; /* a rank died or failed */
    if (failed) g4_srv_answer_json(s, r, ep, 503, json_pack("{s:s,s:s}", "status", "failed", "error", failed));
    else if (atomic_load(&s->stopping)) g4_srv_answer_json(s, r, ep, 503, json_pack("{s:s}", "status", "shutting_down"));
    else if (!atomic_load(&s->ready)) g4_srv_answer_json(s, r, ep, 503, json_pack("{s:s}", "status", "loading"));
    else g4_srv_answer_json(s, r, ep, 200, json_pack("{s:s}", "status", "ok"));
}

static void route_metrics(g4_server *s, g4_http_req *r, const char *ep) {
    g4_sched_stats st;
    int ready = atomic_load(&s->ready);
    if (ready) {
        g4_sched_get_stats(s->sched, &st);
        /* the scheduler refreshes kv_used before each step, so after the last sequence ended it
         * still shows that step's value; with nothing admitted no sequence holds cache */
        if (st.running == 0) st.kv_used = 0;
    }
    g4_grammar_cache_stats gs;
    g4_grammar_cache_get_stats(s->grammars, &gs);
    g4_metrics_grammars(s->metrics, gs.hits, gs.misses, gs.entries);
    size_t len = 0;
    char *txt = g4_metrics_render(s->metrics, ready ? &st : NULL, ready, &len);
    if (!txt) {
        g4_api_err ae;
        g4_api_err_status(&ae, G4_ENOMEM, NULL, "out of memory");
        g4_srv_answer_error(s, r, ep, &ae);
        return;
    }
    answer_text(s, r, ep, 200, "text/plain; version=0.0.4; charset=utf-8", txt, len, NULL);
    free(txt);
}

static json_t *model_card(g4_server *s) {
    json_t *m = json_pack("{s:s,s:s,s:I,s:s}", "id", s->model_id, "object", "model", "created", (json_int_t)s->created, "owned_by", "g4tp");
    if (atomic_load(&s->ready)) json_object_set_new(m, "max_model_len", json_integer((json_int_t)g4_engine_max_ctx(s->e)));
    return m;
}

static void route_models(g4_server *s, g4_http_req *r, const char *ep) {
    g4_srv_answer_json(s, r, ep, 200, json_pack("{s:s,s:[o]}", "object", "list", "data", model_card(s)));
}

/* name holds len bytes (JSON strings may hold U+0000: such a name matches nothing) */
static int model_ok(const g4_server *s, const char *name, size_t len) {
    if (!name) return 1;
    return (len == strlen(s->model_id) && !memcmp(name, s->model_id, len)) ||
           (s->model_alias && len == strlen(s->model_alias) && !memcmp(name, s->model_alias, len));
}

int g4_srv_model_check(g4_server *s, const char *name, size_t len, g4_api_err *ae) {
    if (model_ok(s, name, len)) return 0;
    return g4_api_err_refuse(ae, G4_API_MODEL_NOT_FOUND, "model", "the model \"%s%s\" does not exist; this server serves \"%s\"", name,
                             strlen(name) < len ? "\\u0000..." : "", s->model_id);
}

/* Prompt preparation (chat template, tokenizer) runs in the connection's thread, cannot be
 * interrupted and costs more the larger the request. Other connections keep being served (one
 * thread each), but the request bytes being prepared at once are bounded across requests
 * (render_budget) so that many huge requests cannot take every core and the memory: beyond it
 * the answer is 503 server_busy with Retry-After. A request alone always goes ahead. */
int g4_srv_prep_begin(g4_server *s, size_t body_len, g4_api_err *ae) {
    size_t cost = body_len + 1, cur = atomic_load(&s->render_bytes);
    do {
        if (cur && cur + cost > s->o.render_budget)
            return g4_api_err_status(ae, G4_EBUSY, NULL, "too many large prompts are being prepared at once (%zu of %zu bytes in use); retry shortly",
                                     cur, s->o.render_budget);
    } while (!atomic_compare_exchange_weak(&s->render_bytes, &cur, cur + cost));
    g4_metrics_preparing(s->metrics, 1);
    if (s->o.test_render_delay_ms > 0) {
        struct timespec ts = {s->o.test_render_delay_ms / 1000, (long)(s->o.test_render_delay_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    return 0;
}

void g4_srv_prep_end(g4_server *s, size_t body_len) {
    g4_metrics_preparing(s->metrics, -1);
    atomic_fetch_sub(&s->render_bytes, body_len + 1);
}

/* Renders a chat request and tokenizes it. *thought: the prompt ends inside a thought block. */
int g4_srv_chat_ids(g4_server *s, const json_t *chat, int32_t **ids, size_t *n, int *thought, g4_api_err *ae) {
    char *text = NULL;
    size_t len = 0;
    g4_err err = {0};
    if (g4_textgen_render(&s->tg, chat, &text, &len, &err)) return g4_api_err_from(ae, &err, "messages");
    static const char open_thought[] = "<|channel>thought\n";
    size_t ol = sizeof open_thought - 1;
    *thought = len >= ol && !memcmp(text + len - ol, open_thought, ol);
    int rc = g4_tokenizer_encode(s->tg.tok, text, len, 0, ids, n, &err);
    free(text);
    return rc ? g4_api_err_from(ae, &err, "messages") : 0;
}

static void route_tokenize(g4_server *s, g4_http_req *r, const char *ep) {
    size_t len;
    const char *body = g4_http_body(r, &len);
    json_t *o;
    g4_api_err ae;
    if (g4_api_parse_object(body, len, &o, &ae)) { g4_srv_answer_error(s, r, ep, &ae); return; }
    json_t *prompt = json_object_get(o, "prompt"), *msgs = json_object_get(o, "messages"), *model = json_object_get(o, "model");
    int32_t *ids = NULL;
    size_t n = 0;
    g4_err err = {0};
    int rc = 0, thought;
    if (model && !json_is_null(model) && !json_is_string(model)) rc = g4_api_err_status(&ae, G4_EINVAL, "model", "'model' must be a string");
    if (!rc) rc = g4_srv_model_check(s, json_string_value(model), json_string_length(model), &ae);
    int prep = !rc && !(rc = g4_srv_prep_begin(s, len, &ae));
    if (rc) {
    } else if (prompt && msgs) rc = g4_api_err_status(&ae, G4_EINVAL, "prompt", "give either 'prompt' or 'messages', not both");
    else if (json_is_string(prompt)) {
        json_t *as = json_object_get(o, "add_special_tokens");
        if (as && !json_is_boolean(as)) rc = g4_api_err_status(&ae, G4_EINVAL, "add_special_tokens", "'add_special_tokens' must be true or false");
        else if (g4_tokenizer_encode(s->tg.tok, json_string_value(prompt), json_string_length(prompt), !as || json_is_true(as), &ids, &n, &err))
            rc = g4_api_err_from(&ae, &err, "prompt");
    } else if (prompt) rc = g4_api_err_status(&ae, G4_EINVAL, "prompt", "'prompt' must be a string");
    else if (msgs) {
        json_t *copy;
        if (!(rc = g4_api_messages(msgs, &copy, &ae))) {
            json_t *chat = json_pack("{s:o,s:b}", "messages", copy, "add_generation_prompt", 1);
            json_t *agp = json_object_get(o, "add_generation_prompt"), *tools = json_object_get(o, "tools");
            if (json_is_boolean(agp)) json_object_set(chat, "add_generation_prompt", agp);
            if (json_is_array(tools)) json_object_set(chat, "tools", tools);
            rc = g4_srv_chat_ids(s, chat, &ids, &n, &thought, &ae);
            json_decref(chat);
        }
    } else rc = g4_api_err_status(&ae, G4_EINVAL, "prompt", "'prompt' (a string) or 'messages' is required");
    if (prep) g4_srv_prep_end(s, len);
    json_decref(o);
    if (rc) { free(ids); g4_srv_answer_error(s, r, ep, &ae); return; }
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(arr, json_integer(ids[i]));
    free(ids);
    g4_srv_answer_json(s, r, ep, 200, json_pack("{s:o,s:I,s:I}", "tokens", arr, "count", (json_int_t)n, "max_model_len", (json_int_t)g4_engine_max_ctx(s->e)));
}

static void route_detokenize(g4_server *s, g4_http_req *r, const char *ep) {
    size_t len;
    const char *body = g4_http_body(r, &len);
    json_t *o;
    g4_api_err ae;
    if (g4_api_parse_object(body, len, &o, &ae)) { g4_srv_answer_error(s, r, ep, &ae); return; }
    json_t *toks = json_object_get(o, "tokens");
    int rc = 0;
    if (!json_is_array(toks)) rc = g4_api_err_status(&ae, G4_EINVAL, "tokens", "'tokens' (a list of token ids) is required");
    size_t n = json_is_array(toks) ? json_array_size(toks) : 0, i;
    int32_t *ids = malloc(sizeof(int32_t) * (n ? n : 1));
    json_t *v;
    int vocab = g4_tokenizer_vocab_size(s->tg.tok);
    if (!rc && !ids) rc = g4_api_err_status(&ae, G4_ENOMEM, NULL, "out of memory");
    if (!rc) json_array_foreach(toks, i, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= vocab) {
            rc = g4_api_err_status(&ae, G4_EINVAL, "tokens", "tokens[%zu] must be a token id in [0, %d)", i, vocab);
            break;
        }
        ids[i] = (int32_t)json_integer_value(v);
    }
    json_t *sk = json_object_get(o, "skip_special_tokens");
    if (!rc && sk && !json_is_boolean(sk)) rc = g4_api_err_status(&ae, G4_EINVAL, "skip_special_tokens", "'skip_special_tokens' must be true or false");
    char *text = NULL;
    size_t tl = 0;
    g4_err err = {0};
    if (!rc && g4_tokenizer_decode(s->tg.tok, ids, n, sk && json_is_true(sk), &text, &tl, &err)) rc = g4_api_err_from(&ae, &err, "tokens");
    free(ids);
    json_decref(o);
    if (rc) { free(text); g4_srv_answer_error(s, r, ep, &ae); return; }
    g4_srv_answer_json(s, r, ep, 200, json_pack("{s:s%}", "prompt", text, tl));
    free(text);
}

/* ---- routing ------------------------------------------------------------------------------------ */

static int key_match(const g4_server *s, const char *k) {
    if (!k) return 0;
    size_t a = strlen(k), b = strlen(s->api_key);
    unsigned diff = (unsigned)(a ^ b);
    for (size_t i = 0; i < a; i++) diff |= (unsigned char)k[i] ^ (unsigned char)s->api_key[i % (b ? b : 1)];
    return diff == 0;
}

/* Authorization: Bearer KEY (OpenAI clients), or x-api-key: KEY (Anthropic clients). */
static int key_ok(const g4_server *s, const g4_http_req *r) {
    if (!s->api_key) return 1;
    const char *auth = g4_http_header(r, "Authorization"), *x = g4_http_header(r, "x-api-key");
    return (auth && !strncmp(auth, "Bearer ", 7) && key_match(s, auth + 7)) || key_match(s, x);
}

typedef enum { R_HEALTH, R_METRICS, R_MODELS, R_TOKENIZE, R_DETOKENIZE, R_GENERATE, R_COMPLETIONS, R_CHAT, R_MESSAGES, R_COUNT_TOKENS, R_RESPONSES } route_id;
static const struct { const char *path, *method; route_id id; int auth, needs_model; } routes[] = {
    {"/health", "GET", R_HEALTH, 0, 0},
    {"/metrics", "GET", R_METRICS, 0, 0},
    {"/v1/models", "GET", R_MODELS, 1, 0},
    {"/tokenize", "POST", R_TOKENIZE, 1, 1},
    {"/detokenize", "POST", R_DETOKENIZE, 1, 1},
    {"/generate", "POST", R_GENERATE, 1, 1},
    {"/v1/completions", "POST", R_COMPLETIONS, 1, 1},
    {"/v1/chat/completions", "POST", R_CHAT, 1, 1},
    {"/v1/messages", "POST", R_MESSAGES, 1, 1},
    {"/v1/messages/count_tokens", "POST", R_COUNT_TOKENS, 1, 1},
    {"/v1/responses", "POST", R_RESPONSES, 1, 1},
};

void g4_srv_handle(void *user, g4_http_req *r) {
    g4_server *s = user;
    const char *path = g4_http_path(r), *method = g4_http_method(r);
    g4_api_err ae;
    const char *bad = g4_http_malformed(r);
    if (bad) {
        g4_api_err_refuse(&ae, G4_API_MALFORMED, NULL, "%s", bad);
        answer_error_ex(s, r, "other", &ae, 1);
        return;
    }
    size_t k, nr = sizeof routes / sizeof *routes;
    for (k = 0; k < nr; k++) if (!strcmp(path, routes[k].path)) break;
    const char *ep = k < nr ? routes[k].path : "other";
    if (k == nr && !strncmp(path, "/v1/models/", 11)) { /* GET /v1/models/{id} */
        ep = "/v1/models/{id}";
        if (strcmp(method, "GET") && strcmp(method, "HEAD")) g4_api_err_refuse(&ae, G4_API_BAD_METHOD, NULL, "%s does not accept %s (use GET)", path, method);
        else if (!key_ok(s, r)) g4_api_err_refuse(&ae, G4_API_UNAUTHORIZED, NULL, "a valid API key is required (Authorization: Bearer KEY, or x-api-key: KEY)");
        else if (g4_srv_model_check(s, path + 11, strlen(path + 11), &ae) == 0) { g4_srv_answer_json(s, r, ep, 200, model_card(s)); return; }
        g4_srv_answer_error(s, r, ep, &ae);
        return;
    }
    if (k == nr) { g4_api_err_refuse(&ae, G4_API_NO_ROUTE, NULL, "no route %s %s", method, path); g4_srv_answer_error(s, r, ep, &ae); return; }
    int head = !strcmp(method, "HEAD") && !strcmp(routes[k].method, "GET");
    if (strcmp(method, routes[k].method) && !head) {
        g4_api_err_refuse(&ae, G4_API_BAD_METHOD, NULL, "%s does not accept %s (use %s)", path, method, routes[k].method);
        g4_srv_answer_error(s, r, ep, &ae);
        return;
    }
    if (g4_http_body_too_large(r)) {
        g4_api_err_refuse(&ae, G4_API_TOO_LARGE, NULL, "the request body is larger than the limit of %zu bytes", s->o.max_body);
        g4_srv_answer_error(s, r, ep, &ae);
        return;
    }
    if (routes[k].auth && !key_ok(s, r)) {
        g4_api_err_refuse(&ae, G4_API_UNAUTHORIZED, NULL, "a valid API key is required (Authorization: Bearer KEY, or x-api-key: KEY)");
        g4_srv_answer_error(s, r, ep, &ae);
        return;
    }
    if (routes[k].needs_model && !atomic_load(&s->ready)) {
        if (atomic_load(&s->stopping)) g4_api_err_refuse(&ae, G4_API_SHUTTING_DOWN, NULL, "the server is shutting down");
        else g4_api_err_refuse(&ae, G4_API_LOADING, NULL, "the model is still loading; retry shortly");
        g4_srv_answer_error(s, r, ep, &ae);
        return;
    }
    switch (routes[k].id) {
    case R_HEALTH: route_health(s, r, ep); break;
    case R_METRICS: route_metrics(s, r, ep); break;
    case R_MODELS: route_models(s, r, ep); break;
    case R_TOKENIZE: route_tokenize(s, r, ep); break;
    case R_DETOKENIZE: route_detokenize(s, r, ep); break;
    case R_GENERATE: g4_srv_generate(s, r, ep, G4_API_GENERATE); break;
    case R_COMPLETIONS: g4_srv_generate(s, r, ep, G4_API_COMPLETIONS); break;
    case R_CHAT: g4_srv_generate(s, r, ep, G4_API_CHAT); break;
    case R_MESSAGES: g4_srv_generate(s, r, ep, G4_API_ANTHROPIC); break;
    case R_COUNT_TOKENS: g4_srv_count_tokens(s, r, ep); break;
    case R_RESPONSES: g4_srv_generate(s, r, ep, G4_API_RESPONSES); break;
    }
}
