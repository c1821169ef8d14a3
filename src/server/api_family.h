/* api_family.h — the server's generation APIs as one table, a row per API: its route, how its
 * body becomes the one internal request (g4_api_request, openai.h), how a finished generation
 * becomes its response object, its stream shape (sse.h) and its error body. A new API is a row
 * here plus its translation file; the router (routes.c) and the generation driver (generate.c)
 * know APIs only through this table. Pure: no HTTP, no engine. */
#ifndef G4_SERVER_API_FAMILY_H
#define G4_SERVER_API_FAMILY_H

#include <jansson.h>
#include <stddef.h>

#include "server/errors.h"
#include "server/openai.h"
#include "server/sse.h"

typedef struct g4_api_family {
    g4_api_kind kind;
    const char *path;         /* its POST route */
    const char *id_prefix;    /* of the ids of its answers: "chatcmpl-", "msg_", ... */
    const char *header;       /* a request header the API defines (NULL: none), checked by check_header (value NULL: absent) */
    int (*check_header)(const char *value, g4_api_err *ae);
    int (*parse)(const char *body, size_t len, g4_api_request *out, g4_api_err *ae);
    /* the response object of n finished choices r[0..n) (extra: the request's g4_api_request.extra) */
    json_t *(*render)(const g4_api_result *r, size_t n, const json_t *extra);
    const g4_sse_shape *sse;  /* NULL: the API does not stream */
    char *(*error_json)(const g4_api_err *ae); /* the error body (malloc'd) */
    int chat_logprobs;        /* logprobs as chat's content entries (else as completions' four lists) */
} g4_api_family;

/* The row of an API kind. */
const g4_api_family *g4_api_family_of(g4_api_kind kind);
/* The API whose route path is (NULL: none). */
const g4_api_family *g4_api_family_at(const char *path);
/* An error body in f's shape (f NULL: OpenAI's). */
char *g4_api_family_error(const g4_api_family *f, const g4_api_err *ae);

#endif
