/* routes.c — request handling: routing, authentication (Authorization: Bearer or x-api-key),
 * and the small endpoints (/health, /metrics, /v1/models, /tokenize, /detokenize,
 * /v1/messages/count_tokens, the chat page's files through ui.c); the generation routes are the API table's (api_family.h) and go
 * to generate.c. Errors go through errors.c only, in the route's API shape (Anthropic's for
 * /v1/messages*). Knows the HTTP adapter's interface, never MHD. */
#include "server/routes.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "server/errors.h"
#include "server/generate.h"
#include "server/guard.h"
#include "server/openai.h"
#include "server/route_common.h"
#include "server/router.h"
#include "server/slots.h"
#include "server/ui.h"

/* ---- small endpoints ------------------------------------------------------------------------- */

static void route_health(g4_server *s, g4_http_req *r, const g4_srv_route *ep) {
    const char *failed = atomic_load(&s->ready) ? g4_engine_failure(s->e) : NULL; /* a rank died or failed */
    if (failed) g4_srv_answer_json(s, r, ep, 503, json_pack("{s:s,s:s}", "status", "failed", "error", failed));
    else if (atomic_load(&s->stopping)) g4_srv_answer_json(s, r, ep, 503, json_pack("{s:s}", "status", "shutting_down"));
    else if (!atomic_load(&s->ready)) g4_srv_answer_json(s, r, ep, 503, json_pack("{s:s}", "status", "loading"));
    else g4_srv_answer_json(s, r, ep, 200, json_pack("{s:s}", "status", "ok"));
}

static void route_metrics(g4_server *s, g4_http_req *r, const g4_srv_route *ep) {
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
    g4_srv_answer_text(s, r, ep, 200, "text/plain; version=0.0.4; charset=utf-8", txt, len, NULL);
    free(txt);
}

static json_t *model_card(g4_server *s) {
    json_t *m = json_pack("{s:s,s:s,s:I,s:s}", "id", s->model_id, "object", "model", "created", (json_int_t)s->created, "owned_by", "g4tp");
    if (atomic_load(&s->ready)) json_object_set_new(m, "max_model_len", json_integer((json_int_t)g4_engine_max_ctx(s->e)));
    return m;
}

static void route_models(g4_server *s, g4_http_req *r, const g4_srv_route *ep) {
    g4_srv_answer_json(s, r, ep, 200, json_pack("{s:s,s:[o]}", "object", "list", "data", model_card(s)));
}

static void route_tokenize(g4_server *s, g4_http_req *r, const g4_srv_route *ep) {
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
        if (!(rc = g4_api_messages(msgs, &copy, NULL, &ae))) { /* no images here: counting them needs their pixels */
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

static void route_detokenize(g4_server *s, g4_http_req *r, const g4_srv_route *ep) {
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

/* The chat page: "/" and "/ui/NAME" (ui.c), without API key (the page asks for it). */
static void route_ui(g4_server *s, g4_http_req *r, const g4_srv_route *ep) {
    const g4_ui_file *f = g4_ui_find(g4_http_path(r));
    int status;
    if (!f) {
        g4_api_err ae;
        g4_api_err_refuse(&ae, G4_API_NO_ROUTE, NULL, "no route %s %s", g4_http_method(r), g4_http_path(r));
        g4_srv_answer_error(s, r, ep, &ae);
    } else if (g4_ui_answer(r, f, g4_http_header(r, "If-None-Match"), &status) == G4_OK) {
        g4_metrics_request(s->metrics, ep->endpoint, status);
    }
}

/* Authorization: Bearer KEY (OpenAI clients), or x-api-key: KEY (Anthropic clients). */
static int key_ok(const g4_server *s, const g4_http_req *r) {
    if (!s->api_key) return 1;
    const char *auth = g4_http_header(r, "Authorization"), *x = g4_http_header(r, "x-api-key");
    return (auth && !strncmp(auth, "Bearer ", 7) && key_match(s, auth + 7)) || key_match(s, x);
}

/* The routes other than the generation APIs (api_family.h has those: POST, authenticated, need
 * the model). err_api: the API whose error body the route answers with (-1: OpenAI's). */
typedef enum { R_HEALTH, R_METRICS, R_MODELS, R_TOKENIZE, R_DETOKENIZE, R_COUNT_TOKENS, R_GENERATE, R_UI, R_LOAD, R_UNLOAD, R_SLOTS, R_SLOT } route_id;
typedef struct { const char *path, *method; route_id id; int auth, needs_model, err_api; } route;
static const route routes[] = {
    {"/health", "GET", R_HEALTH, 0, 0, -1},
    {"/metrics", "GET", R_METRICS, 0, 0, -1},
    {"/v1/models", "GET", R_MODELS, 1, 0, -1},
    {"/tokenize", "POST", R_TOKENIZE, 1, 1, -1},
    {"/detokenize", "POST", R_DETOKENIZE, 1, 1, -1},
    {"/v1/messages/count_tokens", "POST", R_COUNT_TOKENS, 1, 1, G4_API_ANTHROPIC},
    {"/models/load", "POST", R_LOAD, 1, 0, -1},     /* --models-dir only (router.h) */
    {"/models/unload", "POST", R_UNLOAD, 1, 0, -1},
    {"/slots", "GET", R_SLOTS, 1, 1, -1},
    {"/slots/{id}", "POST", R_SLOT, 1, 1, -1},        /* every /slots/N (slots.h) */
    {"/", "GET", R_UI, 0, 0, -1},
    {"/ui/{file}", "GET", R_UI, 0, 0, -1}, /* every /ui/NAME (one metrics label); stays the last row */
};

/* ---- several models (--models-dir, router.h) --------------------------------------------------- */

/* The request's "model" (NULL when the body names none); 0, or an error answered. */
static int body_model(g4_server *s, g4_http_req *r, const g4_srv_route *ep, json_t **o, const char **name, size_t *len) {
    size_t blen;
    const char *body = g4_http_body(r, &blen);
    g4_api_err ae;
    *name = NULL;
    *len = 0;
    if (g4_api_parse_object(body, blen, o, &ae)) { g4_srv_answer_error(s, r, ep, &ae); return -1; }
    json_t *m = json_object_get(*o, "model");
    if (m && !json_is_null(m) && !json_is_string(m)) {
        g4_api_err_status(&ae, G4_EINVAL, "model", "'model' must be a string");
        g4_srv_answer_error(s, r, ep, &ae);
        return -1;
    }
    if (json_is_string(m)) { *name = json_string_value(m); *len = json_string_length(m); }
    return 0;
}

/* What the front server of several models answers itself, and what it passes on to the model a
 * request names. 1: answered; 0: the route is answered as usual (the chat page). */
static int routed(g4_server *s, g4_http_req *r, const route *row, const g4_srv_route *ep) {
    g4_router *rt = s->o.router;
    g4_api_err ae;
    json_t *o = NULL;
    const char *name;
    size_t len;
    int rc = 0, loaded = 0;
    switch (row->id) {
    case R_UI: return 0;
    case R_HEALTH:
        g4_srv_answer_json(s, r, ep, atomic_load(&s->stopping) ? 503 : 200, json_pack("{s:s}", "status", atomic_load(&s->stopping) ? "shutting_down" : "ok"));
        return 1;
    case R_MODELS: g4_srv_answer_json(s, r, ep, 200, json_pack("{s:s,s:o}", "object", "list", "data", g4_router_models(rt))); return 1;
    case R_METRICS: {
        size_t a = 0;
        char *own = g4_metrics_render(s->metrics, NULL, 1, &a), *more = g4_router_metrics(rt);
        char *all = own && more ? malloc(a + strlen(more) + 1) : NULL;
        if (all) { memcpy(all, own, a); strcpy(all + a, more); }
        if (all) g4_srv_answer_text(s, r, ep, 200, "text/plain; version=0.0.4; charset=utf-8", all, strlen(all), NULL);
        else { g4_api_err_status(&ae, G4_ENOMEM, NULL, "out of memory"); g4_srv_answer_error(s, r, ep, &ae); }
        free(own), free(more), free(all);
        return 1;
    }
    case R_LOAD:
    case R_UNLOAD:
        if (body_model(s, r, ep, &o, &name, &len)) { json_decref(o); return 1; }
        if (!name) rc = g4_api_err_status(&ae, G4_EINVAL, "model", "name the model: {\"model\": NAME}");
        else if (row->id == R_LOAD) rc = g4_router_load(rt, name, len, &loaded, &ae);
        else rc = g4_router_unload(rt, name, len, &ae);
        if (rc) g4_srv_answer_error(s, r, ep, &ae);
        else g4_srv_answer_json(s, r, ep, row->id == R_UNLOAD ? 200 : loaded ? 200 : 202,
                                json_pack("{s:s%,s:s}", "model", name, len, "status", row->id == R_UNLOAD ? "unloading" : loaded ? "loaded" : "loading"));
        json_decref(o);
        return 1;
    default: break;
    }
    if (body_model(s, r, ep, &o, &name, &len)) { json_decref(o); return 1; }
    rc = g4_router_forward(rt, r, name, len, &ae);
    json_decref(o);
    if (rc) g4_srv_answer_error(s, r, ep, &ae);
    else g4_metrics_request(s->metrics, ep->endpoint, 200); /* the status the model's server gave is not known here */
    return 1;
}

/* The route of path (NULL: none) and what its answers are counted and shaped as. */
static const route *find_route(const char *path, route *gen, g4_srv_route *rt) {
    const size_t nr = sizeof routes / sizeof *routes;
    *rt = (g4_srv_route){"other", NULL};
    for (size_t k = 0; k < nr; k++)
        if (!strcmp(path, routes[k].path)) {
            *rt = (g4_srv_route){routes[k].path, routes[k].err_api < 0 ? NULL : g4_api_family_of((g4_api_kind)routes[k].err_api)};
            return &routes[k];
        }
    if (!strncmp(path, "/slots/", 7)) { /* the /slots/{id} row */
        for (size_t k = 0; k < nr; k++)
            if (routes[k].id == R_SLOT) { *rt = (g4_srv_route){routes[k].path, NULL}; return &routes[k]; }
    }
    if (!strncmp(path, "/ui/", 4)) { /* the /ui/{file} row */
        *rt = (g4_srv_route){routes[nr - 1].path, NULL};
        return &routes[nr - 1];
    }
    const g4_api_family *f = g4_api_family_at(path);
    if (!f) return NULL;
    *gen = (route){f->path, "POST", R_GENERATE, 1, 1, (int)f->kind};
    *rt = (g4_srv_route){f->path, f};
    return gen;
}

/* The rules for what a browser may make the server do (guard.h; docs/server.md, "Browsers"),
 * before anything else: a Host name the server does not answer to is refused (a page that
 * rebound its own name to this address must not read the answers); an allowed Origin gets its
 * CORS headers on every answer; a preflight (OPTIONS) is answered here. 0: answered. */
static int browser_rules(g4_server *s, g4_http_req *r, const char *path, const char *method, const route *row, const g4_srv_route *ep) {
    g4_api_err ae;
    const char *host = g4_http_header(r, "Host"), *origin = g4_http_header(r, "Origin");
    if (!g4_guard_host_ok(s->guard, host)) {
        g4_api_err_refuse(&ae, G4_API_HOST_NOT_ALLOWED, NULL,
                          "this server does not answer to the Host \"%.80s\" (it is bound to %s; --allowed-hosts adds names)", host,
                          s->o.host && *s->o.host ? s->o.host : "127.0.0.1");
        g4_srv_answer_error(s, r, ep, &ae);
        return 0;
    }
    const char *allow = g4_guard_cors(s->guard, origin);
    if (allow) {
        g4_http_add_header(r, "Access-Control-Allow-Origin", allow);
        if (!g4_guard_cors_any(s->guard)) g4_http_add_header(r, "Vary", "Origin");
    }
    if (strcmp(method, "OPTIONS")) return 1;
    if (!row && strncmp(path, "/v1/models/", 11)) return 1; /* unknown path: 404 as for any method */
    const char *want = row ? row->method : "GET", *allow_methods = strcmp(want, "GET") ? "POST, OPTIONS" : "GET, HEAD, OPTIONS";
    const char *req_method = g4_http_header(r, "Access-Control-Request-Method");
    if (!origin || !req_method) { /* a plain OPTIONS: what the route takes */
        g4_srv_answer_text(s, r, ep, 204, NULL, "", 0, (const char *const[]){"Allow", allow_methods, NULL, NULL});
        return 0;
    }
    if (!allow) {
        g4_api_err_refuse(&ae, G4_API_ORIGIN_NOT_ALLOWED, NULL, "the origin %.100s may not call this server from a browser (--cors lists the origins that may)",
                          origin);
        g4_srv_answer_error(s, r, ep, &ae);
        return 0;
    }
    const char *req_headers = g4_http_header(r, "Access-Control-Request-Headers");
    const char *hdr[] = {"Access-Control-Allow-Methods", allow_methods, "Access-Control-Max-Age", "600",
                         req_headers ? "Access-Control-Allow-Headers" : NULL, req_headers, NULL, NULL};
    g4_srv_answer_text(s, r, ep, 204, NULL, "", 0, hdr);
    return 0;
}

void g4_srv_handle(void *user, g4_http_req *r) {
    g4_server *s = user;
    const char *path = g4_http_path(r), *method = g4_http_method(r);
    g4_api_err ae;
    const char *bad = g4_http_malformed(r);
    if (bad) {
        g4_api_err_refuse(&ae, G4_API_MALFORMED, NULL, "%s", bad);
        g4_srv_answer_error_close(s, r, &(g4_srv_route){"other", NULL}, &ae);
        return;
    }
    route gen;
    g4_srv_route route_of;
    const g4_srv_route *ep = &route_of;
    const route *row = find_route(path, &gen, &route_of);
    if (!browser_rules(s, r, path, method, row, ep)) return;
    if (!row && !strncmp(path, "/v1/models/", 11)) { /* GET /v1/models/{id} */
        route_of.endpoint = "/v1/models/{id}";
        if (strcmp(method, "GET") && strcmp(method, "HEAD")) g4_api_err_refuse(&ae, G4_API_BAD_METHOD, NULL, "%s does not accept %s (use GET)", path, method);
        else if (!key_ok(s, r)) g4_api_err_refuse(&ae, G4_API_UNAUTHORIZED, NULL, "a valid API key is required (Authorization: Bearer KEY, or x-api-key: KEY)");
        else if (s->o.router) {
            json_t *c = g4_router_model_card(s->o.router, path + 11);
            if (c) { g4_srv_answer_json(s, r, ep, 200, c); return; }
            g4_api_err_status(&ae, G4_ENOTFOUND, NULL, "the model \"%.200s\" does not exist (GET /v1/models lists them)", path + 11);
        } else if (g4_srv_model_check(s, path + 11, strlen(path + 11), &ae) == 0) { g4_srv_answer_json(s, r, ep, 200, model_card(s)); return; }
        g4_srv_answer_error(s, r, ep, &ae);
        return;
    }
    if (!row) { g4_api_err_refuse(&ae, G4_API_NO_ROUTE, NULL, "no route %s %s", method, path); g4_srv_answer_error(s, r, ep, &ae); return; }
    int head = !strcmp(method, "HEAD") && !strcmp(row->method, "GET");
    if (strcmp(method, row->method) && !head) {
        g4_api_err_refuse(&ae, G4_API_BAD_METHOD, NULL, "%s does not accept %s (use %s)", path, method, row->method);
        g4_srv_answer_error(s, r, ep, &ae);
        return;
    }
    if (g4_http_body_too_large(r)) {
        g4_api_err_refuse(&ae, G4_API_TOO_LARGE, NULL, "the request body is larger than the limit of %zu bytes", s->o.max_body);
        g4_srv_answer_error(s, r, ep, &ae);
        return;
    }
    if (row->auth && !key_ok(s, r)) {
        g4_api_err_refuse(&ae, G4_API_UNAUTHORIZED, NULL, "a valid API key is required (Authorization: Bearer KEY, or x-api-key: KEY)");
        g4_srv_answer_error(s, r, ep, &ae);
        return;
    }
    if (!strcmp(row->method, "POST") && !g4_guard_json_type(g4_http_header(r, "Content-Type"))) {
        const char *ct = g4_http_header(r, "Content-Type");
        g4_api_err_refuse(&ae, G4_API_NOT_JSON, NULL, "%s takes a JSON body: send Content-Type: application/json (got %s%.60s%s)", path,
                          ct ? "\"" : "", ct ? ct : "none", ct ? "\"" : "");
        g4_srv_answer_error(s, r, ep, &ae);
        return;
    }
    if (s->o.router && routed(s, r, row, ep)) return;
    if (row->needs_model && !atomic_load(&s->ready)) {
        if (atomic_load(&s->stopping)) g4_api_err_refuse(&ae, G4_API_SHUTTING_DOWN, NULL, "the server is shutting down");
        else g4_api_err_refuse(&ae, G4_API_LOADING, NULL, "the model is still loading; retry shortly");
        g4_srv_answer_error(s, r, ep, &ae);
        return;
    }
    switch (row->id) {
    case R_HEALTH: route_health(s, r, ep); break;
    case R_METRICS: route_metrics(s, r, ep); break;
    case R_MODELS: route_models(s, r, ep); break;
    case R_TOKENIZE: route_tokenize(s, r, ep); break;
    case R_DETOKENIZE: route_detokenize(s, r, ep); break;
    case R_COUNT_TOKENS: g4_srv_count_tokens(s, r, ep); break;
    case R_GENERATE: g4_srv_generate(s, r, ep); break;
    case R_UI: route_ui(s, r, ep); break;
    case R_SLOTS: g4_srv_slots_list(s, r, ep); break;
    case R_SLOT: g4_srv_slot_action(s, r, ep); break;
    case R_LOAD:
    case R_UNLOAD:
        g4_api_err_refuse(&ae, G4_API_NO_ROUTE, NULL, "%s is for a server started with --models-dir", path);
        g4_srv_answer_error(s, r, ep, &ae);
        break;
    }
}
