/* server_internal.h — the server's shared state, for server.c (lifecycle) and routes.c
 * (request handling). Not for use outside src/server. */
#ifndef G4_SERVER_INTERNAL_H
#define G4_SERVER_INTERNAL_H

#include <stdatomic.h>

#include "engine/scheduler.h"
#include "engine/textgen.h"
#include "server/http.h"
#include "server/errors.h"
#include "server/metrics.h"
#include "server/openai.h"
#include "server/server.h"

struct g4_server {
    g4_server_opts o;
    char *model_id, *model_alias, *api_key;
    long long created;
    g4_http *http;
    g4_metrics *metrics;
    atomic_int ready, stopping;
    atomic_ullong next_id;
    atomic_size_t render_bytes; /* of requests in prompt preparation now (see render_budget) */
    g4_engine *e;
    g4_textgen tg;
    int tg_open;
    g4_sched *sched;
    struct g4_grammar_cache *grammars; /* NULL: each request compiles its own */
    atomic_size_t grammar_bytes; /* working memory of the grammar compiles in flight (structured.c) */
};

/* The HTTP handler (routes.c). */
void g4_srv_handle(void *user, g4_http_req *req);

/* Shared by the routes (routes.c) and the generation driver (generate.c). answer_json takes
 * the reference; errors are answered in the route's API shape. */
void g4_srv_answer_json(g4_server *s, g4_http_req *r, const char *endpoint, int status, json_t *j);
void g4_srv_answer_error(g4_server *s, g4_http_req *r, const char *endpoint, const g4_api_err *ae);
/* 404 model_not_found unless name (len bytes; NULL: absent) is the served model. */
int g4_srv_model_check(g4_server *s, const char *name, size_t len, g4_api_err *ae);
/* The prompt preparation budget (render_budget) around rendering and tokenizing. */
int g4_srv_prep_begin(g4_server *s, size_t body_len, g4_api_err *ae);
void g4_srv_prep_end(g4_server *s, size_t body_len);
/* Renders a chat request and tokenizes it. *thought: the prompt ends inside a thought block. */
int g4_srv_chat_ids(g4_server *s, const json_t *chat, int32_t **ids, size_t *n, int *thought, g4_api_err *ae);

/* The grammar of what q asks of its output (structured.c): compiled through the cache within
 * the server's limits, cancelled when the client leaves or the server stops, counted in
 * /metrics. *out NULL: free text. */
struct g4_grammar;
int g4_srv_compile_output(g4_server *s, g4_http_req *hr, const g4_api_request *q, int thought, struct g4_grammar **out, g4_api_err *ae);

/* The generation routes (generate.c), in the API of kind. */
void g4_srv_generate(g4_server *s, g4_http_req *hr, const char *ep, g4_api_kind kind);
void g4_srv_count_tokens(g4_server *s, g4_http_req *hr, const char *ep);

#endif
