/* proxy.h — one HTTP request passed on to a server on this host (libcurl) and its answer passed
 * back as it arrives: status, Content-Type, Retry-After and the body, streamed (an SSE stream
 * stays a stream). The upstream transfer stops when the client leaves. Knows the HTTP adapter
 * and URLs, nothing of models or APIs. */
#ifndef G4_SERVER_PROXY_H
#define G4_SERVER_PROXY_H

#include "base/error.h"
#include "server/http.h"

/* Called once when the answer is over (sent, failed or the client left). */
typedef void (*g4_proxy_done_fn)(void *user);

/* Sends r's method, path, body and content headers (Content-Type, Accept, anthropic-version,
 * anthropic-beta, Origin not) to http://127.0.0.1:port with Authorization: Bearer key, and
 * answers r with what comes back. G4_OK: r is answered (done is called when it is over);
 * G4_EIO: nothing came back (the upstream cannot be reached or closed early): r is not answered,
 * done is not called, and the caller answers. */
int g4_proxy_forward(g4_http_req *r, int port, const char *key, g4_proxy_done_fn done, void *user, g4_err *err);

#endif
