/* http.h — the HTTP adapter: a small request/response interface over libmicrohttpd, so the
 * routes never see MHD. One thread per connection: a handler may block (a non-streaming
 * generation), and a streaming body's read callback may block until it has bytes. */
#ifndef G4_SERVER_HTTP_H
#define G4_SERVER_HTTP_H

#include <stddef.h>

#include "base/error.h"

typedef struct g4_http g4_http;
typedef struct g4_http_req g4_http_req;

/* Called once per request, after the whole body arrived (or the body went over the limit:
 * g4_http_body_too_large). It must answer with g4_http_send or g4_http_send_stream. */
typedef void (*g4_http_handler)(void *user, g4_http_req *req);

typedef struct g4_http_opts {
    const char *host;         /* numeric address or name to bind (default 127.0.0.1) */
    int port;                 /* 0: any free port (g4_http_port tells which) */
    size_t max_body;          /* bytes; larger bodies are not read (413) */
    int max_conns;            /* concurrent connections (threads) */
    g4_http_handler handler;
    void *user;
} g4_http_opts;

int g4_http_start(const g4_http_opts *o, g4_http **out, g4_err *err);
/* 1 when host (as g4_http_opts.host: NULL is 127.0.0.1) binds a loopback address. */
int g4_http_host_is_loopback(const char *host);
int g4_http_port(const g4_http *h);
/* Waits up to wait_ms for requests in progress to complete (their answers sent), then closes
 * the listener and every connection and waits for the connection threads. */
void g4_http_stop(g4_http *h, int wait_ms);

const char *g4_http_method(const g4_http_req *r);
const char *g4_http_path(const g4_http_req *r);
const char *g4_http_header(const g4_http_req *r, const char *name);
/* A query-string argument (?name=value), NULL when absent. */
const char *g4_http_query(const g4_http_req *r, const char *name);
const char *g4_http_body(const g4_http_req *r, size_t *len);
int g4_http_body_too_large(const g4_http_req *r);
/* NULL, or why the request head is ambiguous (several Content-Length headers): the handler
 * refuses it with 400 (the body was not read; the connection closes after the answer). */
const char *g4_http_malformed(const g4_http_req *r);
/* 1 when the client is gone, for a handler that waits long before answering (checked without
 * reading; call it every ~100 ms). A FIN alone is not "gone": a client may half-close
 * (shutdown(SHUT_WR)) and still read. After a FIN an HTTP/1.1 client is sent an interim
 * "100 Continue" (clients skip 1xx answers, RFC 9110 15.2); a peer that closed answers it with
 * a reset, seen at the next check. HTTP/1.0 clients cannot be probed so: only a reset counts. */
int g4_http_client_gone(g4_http_req *r);

/* A header every answer to r carries from now on (up to 8; copied): what the router decides
 * for the request as a whole (CORS), whoever answers it. */
int g4_http_add_header(g4_http_req *r, const char *name, const char *value);

/* Extra headers: a NULL-terminated list of name, value pairs (may be NULL). */
int g4_http_send(g4_http_req *r, int status, const char *content_type, const char *body, size_t len,
                 const char *const *headers);

/* Streaming body (chunked). read: fills buf with up to max bytes and returns the count (> 0;
 * it may block until it has some), G4_HTTP_END at the end of the stream, G4_HTTP_ABORT to
 * drop the connection. done: called exactly once when the response is over, whether it was
 * sent completely or the client went away (cancel the work there). */
#define G4_HTTP_END (-1L)
#define G4_HTTP_ABORT (-2L)
typedef long (*g4_http_read_fn)(void *user, char *buf, size_t max);
typedef void (*g4_http_done_fn)(void *user);
int g4_http_send_stream(g4_http_req *r, int status, const char *content_type, g4_http_read_fn read,
                        g4_http_done_fn done, void *user, const char *const *headers);

#endif
