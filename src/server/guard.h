/* guard.h — what a browser may make the server do (docs/server.md, "Browsers"): which Host
 * names are served (on a loopback address only the loopback names and the bound one, against
 * DNS rebinding, unless --allowed-hosts says more), which cross-origin callers get CORS headers
 * (--cors), and which request bodies count as JSON (a form or text/plain POST, which a page on
 * any site can send without asking, runs nothing). Pure string rules: no HTTP, no engine. */
#ifndef G4_SERVER_GUARD_H
#define G4_SERVER_GUARD_H

#include "base/error.h"

typedef struct g4_guard g4_guard;

/* bind_host: the --host value; loopback: it resolves to a loopback address; allowed_hosts:
 * NULL or a comma-separated list of host names (or "*": any) served besides those; cors: NULL or
 * a comma-separated list of origins (scheme://host[:port]) or "*". Bad lists: G4_EINVAL with a
 * message naming the entry. */
int g4_guard_create(const char *bind_host, int loopback, const char *allowed_hosts, const char *cors, g4_guard **out, g4_err *err);
void g4_guard_free(g4_guard *g);
/* 1 when a request with this Host header (NULL: none, as HTTP/1.0 allows) may be served. */
int g4_guard_host_ok(const g4_guard *g, const char *host);
/* The Access-Control-Allow-Origin answer to an Origin header: the origin itself when listed, "*"
 * under --cors "*", NULL when it gets none (no Origin, not listed, no --cors). */
const char *g4_guard_cors(const g4_guard *g, const char *origin);
/* 1 when --cors is "*" (answers need no Vary: Origin). */
int g4_guard_cors_any(const g4_guard *g);
/* 1 when a Content-Type is JSON: application/json or application/...+json, parameters allowed. */
int g4_guard_json_type(const char *content_type);

#endif
