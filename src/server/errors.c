/* errors.c — the single mapping from failures to HTTP statuses and OpenAI error shapes (see
 * errors.h). Every route answers errors through this file; nothing else picks a status code
 * for an error. Knows nothing about MHD or the engine. */
#include "server/errors.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static void fill(g4_api_err *ae, int status, const char *type, const char *code, const char *param) {
    ae->status = status;
    ae->type = type;
    ae->code = code;
    ae->retry_after_s = 0;
    snprintf(ae->param, sizeof ae->param, "%s", param ? param : "");
}

static void map_status(g4_api_err *ae, int g4code, const char *param) {
    switch (g4code) {
    case G4_EINVAL:       fill(ae, 400, "invalid_request_error", "invalid_value", param); break;
    case G4_EFORMAT:      fill(ae, 400, "invalid_request_error", "invalid_format", param); break;
    case G4_ECONTEXT:     fill(ae, 400, "invalid_request_error", "context_length_exceeded", param); break;
    case G4_ETEMPLATE:    fill(ae, 400, "invalid_request_error", "template_error", param); break;
    case G4_EUNSUPPORTED: fill(ae, 400, "invalid_request_error", "unsupported_value", param); break;
    case G4_ENOTFOUND:    fill(ae, 404, "invalid_request_error", "not_found", param); break;
    case G4_EBUSY:        fill(ae, 503, "server_error", "server_busy", param); ae->retry_after_s = 1; break;
    case G4_ECANCELED:    fill(ae, 503, "server_error", "cancelled", param); break;
    case G4_ENOMEM:       fill(ae, 503, "server_error", "insufficient_memory", param); break;
    default:              fill(ae, 500, "server_error", "internal_error", param); break;
    }
}

int g4_api_err_status(g4_api_err *ae, int g4code, const char *param, const char *fmt, ...) {
    map_status(ae, g4code, param);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ae->message, sizeof ae->message, fmt, ap);
    va_end(ap);
    return ae->status;
}

int g4_api_err_from(g4_api_err *ae, const g4_err *err, const char *param) {
    int code = err && err->code ? err->code : G4_EINVAL;
    const char *msg = err && err->msg[0] ? err->msg : g4_status_name(code);
    return g4_api_err_status(ae, code, param, "%s", msg);
}

int g4_api_err_refuse(g4_api_err *ae, g4_api_refusal what, const char *param, const char *fmt, ...) {
    switch (what) {
    case G4_API_UNAUTHORIZED:    fill(ae, 401, "invalid_request_error", "invalid_api_key", param); break;
    case G4_API_NO_ROUTE:        fill(ae, 404, "invalid_request_error", "not_found", param); break;
    case G4_API_BAD_METHOD:      fill(ae, 405, "invalid_request_error", "method_not_allowed", param); break;
    case G4_API_TOO_LARGE:       fill(ae, 413, "invalid_request_error", "request_too_large", param); break;
    case G4_API_MODEL_NOT_FOUND: fill(ae, 404, "invalid_request_error", "model_not_found", param ? param : "model"); break;
    case G4_API_INVALID_JSON:    fill(ae, 400, "invalid_request_error", "invalid_json", param); break;
    case G4_API_LOADING:         fill(ae, 503, "server_error", "model_loading", param); ae->retry_after_s = 1; break;
    case G4_API_SHUTTING_DOWN:   fill(ae, 503, "server_error", "shutting_down", param); break;
    case G4_API_MALFORMED:       fill(ae, 400, "invalid_request_error", "malformed_request", param); break;
    case G4_API_HOST_NOT_ALLOWED: fill(ae, 403, "invalid_request_error", "host_not_allowed", param); break;
    case G4_API_ORIGIN_NOT_ALLOWED: fill(ae, 403, "invalid_request_error", "origin_not_allowed", param); break;
    case G4_API_NOT_JSON:        fill(ae, 415, "invalid_request_error", "unsupported_media_type", param); break;
    default:                     fill(ae, 500, "server_error", "internal_error", param); break;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ae->message, sizeof ae->message, fmt, ap);
    va_end(ap);
    return ae->status;
}

/* Messages may quote request bytes: invalid UTF-8 is replaced by '?' so the body stays JSON. */
static json_t *safe_string(const char *s) {
    json_t *j = json_string(s);
    if (j) return j;
    char buf[G4_ERR_MSG_MAX];
    size_t n = 0;
    for (; s[n] && n + 1 < sizeof buf; n++) buf[n] = (unsigned char)s[n] < 0x80 ? s[n] : '?';
    buf[n] = 0;
    return json_string(buf);
}

char *g4_api_err_json(const g4_api_err *ae) {
    json_t *e = json_object();
    json_object_set_new(e, "message", safe_string(ae->message));
    json_object_set_new(e, "type", json_string(ae->type ? ae->type : "server_error"));
    json_object_set_new(e, "param", ae->param[0] ? json_string(ae->param) : json_null());
    json_object_set_new(e, "code", ae->code ? json_string(ae->code) : json_null());
    json_t *root = json_pack("{s:o}", "error", e);
    char *s = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    return s;
}

const char *g4_api_err_anthropic_type(int status) {
    switch (status) {
    case 400: case 405: case 415: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: return "overloaded_error";
    default: return "api_error";
    }
}

char *g4_api_err_json_anthropic(const g4_api_err *ae) {
    json_t *root = json_pack("{s:s,s:{s:s,s:o}}", "type", "error", "error", "type", g4_api_err_anthropic_type(ae->status), "message",
                             safe_string(ae->message));
    char *s = root ? json_dumps(root, JSON_COMPACT) : NULL;
    json_decref(root);
    return s;
}
