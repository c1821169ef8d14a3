/* errors.h — the server's one table from failures to HTTP: g4_status codes and HTTP-level
 * refusals become a status, an OpenAI error type and code, and the OpenAI error body
 * {"error": {"message", "type", "param", "code"}}. */
#ifndef G4_SERVER_ERRORS_H
#define G4_SERVER_ERRORS_H

#include "base/error.h"

/* HTTP-level refusals that have no g4_status of their own. */
typedef enum {
    G4_API_FROM_STATUS = 0,   /* use the g4_status code */
    G4_API_UNAUTHORIZED,      /* 401 invalid_api_key */
    G4_API_NO_ROUTE,          /* 404 unknown path */
    G4_API_BAD_METHOD,        /* 405 */
    G4_API_TOO_LARGE,         /* 413 body over the limit */
    G4_API_MODEL_NOT_FOUND,   /* 404 model_not_found */
    G4_API_INVALID_JSON,      /* 400 the body is not JSON */
    G4_API_LOADING,           /* 503 the model is still loading */
    G4_API_SHUTTING_DOWN,     /* 503 SIGTERM received */
    G4_API_MALFORMED,         /* 400 an HTTP request head we will not guess at */
    G4_API_HOST_NOT_ALLOWED,  /* 403 a Host name the server does not answer to (DNS rebinding) */
    G4_API_ORIGIN_NOT_ALLOWED,/* 403 a CORS preflight from an origin --cors does not list */
    G4_API_NOT_JSON           /* 415 an API body whose Content-Type is not JSON */
} g4_api_refusal;

typedef struct g4_api_err {
    int status;               /* HTTP status */
    const char *type;         /* OpenAI error type */
    const char *code;         /* OpenAI error code (NULL -> JSON null) */
    char param[128];          /* the request field at fault ("" -> JSON null) */
    char message[G4_ERR_MSG_MAX];
    int retry_after_s;        /* > 0: send a Retry-After header */
} g4_api_err;

/* Fills ae from a g4_status code and message; param may be NULL. Returns ae->status. */
int g4_api_err_status(g4_api_err *ae, int g4code, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Same from a g4_err (its message). */
int g4_api_err_from(g4_api_err *ae, const g4_err *err, const char *param);
/* Fills ae for an HTTP-level refusal. */
int g4_api_err_refuse(g4_api_err *ae, g4_api_refusal what, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The OpenAI error body (malloc'd, compact JSON). */
char *g4_api_err_json(const g4_api_err *ae);
/* Anthropic's error body {"type":"error","error":{"type","message"}} (malloc'd); its type
 * follows the status: invalid_request_error, authentication_error, not_found_error,
 * request_too_large, overloaded_error (503), api_error (500 and the rest). */
char *g4_api_err_json_anthropic(const g4_api_err *ae);
const char *g4_api_err_anthropic_type(int status);

#endif
