/* route_common.h — what every route needs (route_common.c): answers in the route's API shape,
 * the model-name check, prompt preparation. For routes.c and generate.c; not for use outside
 * src/server. */
#ifndef G4_SERVER_ROUTE_COMMON_H
#define G4_SERVER_ROUTE_COMMON_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "server/api_family.h"
#include "server/server_internal.h"

/* Where a request went: its name in the metrics and the API whose shape its answers have. */
typedef struct g4_srv_route {
    const char *endpoint;     /* the route's path, "/v1/models/{id}", or "other" (static strings) */
    const g4_api_family *api; /* a generation route's API, or the API whose error body the route uses; NULL: OpenAI's */
} g4_srv_route;

/* Answers, each counted in the metrics under the route's endpoint. answer_json takes the
 * reference; errors are answered in the route's API shape; answer_error_close also ends the
 * connection after the answer (the request's framing is in doubt). */
void g4_srv_answer_text(g4_server *s, g4_http_req *r, const g4_srv_route *rt, int status, const char *ctype, const char *body, size_t len,
                       const char *const *headers);
void g4_srv_answer_json(g4_server *s, g4_http_req *r, const g4_srv_route *rt, int status, json_t *j);
void g4_srv_answer_error(g4_server *s, g4_http_req *r, const g4_srv_route *rt, const g4_api_err *ae);
void g4_srv_answer_error_close(g4_server *s, g4_http_req *r, const g4_srv_route *rt, const g4_api_err *ae);
/* 404 model_not_found unless name (len bytes; NULL: absent) is the served model. */
int g4_srv_model_check(g4_server *s, const char *name, size_t len, g4_api_err *ae);
/* The prompt preparation budget (render_budget) around rendering and tokenizing. */
int g4_srv_prep_begin(g4_server *s, size_t body_len, g4_api_err *ae);
void g4_srv_prep_end(g4_server *s, size_t body_len);
/* Renders a chat request and tokenizes it. *thought: the prompt ends inside a thought block. */
int g4_srv_chat_ids(g4_server *s, const json_t *chat, int32_t **ids, size_t *n, int *thought, g4_api_err *ae);

#endif
