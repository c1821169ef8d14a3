/* router.h — several models behind one server (`g4tp serve --models-dir DIR`, llama-server's
 * router): the model folders of DIR, one of them loaded at a time in a `g4tp serve` child process
 * on a loopback port, started on the first request that names it (or POST /models/load) after
 * a check that it fits in memory, stopped after --sleep-idle-seconds without requests or when
 * another model is asked for. A request for a model that is not ready is answered 503 with
 * Retry-After (clients retry); one for a ready model is passed on as it is (proxy.h). Knows
 * processes, folders and the HTTP adapter; nothing of the engine. */
#ifndef G4_SERVER_ROUTER_H
#define G4_SERVER_ROUTER_H

#include <jansson.h>
#include <stddef.h>

#include "base/error.h"
#include "server/errors.h"
#include "server/http.h"

typedef struct g4_router g4_router;

typedef struct g4_router_opts {
    const char *models_dir;
    double sleep_idle_s;           /* unload after this long without requests (0: never) */
    const char *exe;               /* the g4tp binary a model's server runs as */
    const char *const *child_args; /* flags for `serve` in each child (engine flags), NULL-terminated */
    double drain_s;                /* a child stopped gets this long to finish its requests */
} g4_router_opts;

/* Reads models_dir (a folder with config.json in it is a model, named by the folder) and starts
 * the thread that watches the child. G4_EINVAL: the folder cannot be read or has no model. */
int g4_router_create(const g4_router_opts *o, g4_router **out, g4_err *err);
/* Stops the child (SIGTERM: it finishes its requests for up to drain_s; then SIGKILL) and the
 * watching thread; requests from then on get 503. The router stays valid until freed. */
void g4_router_stop(g4_router *r);
/* Stops (if not done) and frees the router. */
void g4_router_free(g4_router *r);

/* /v1/models' data: every model with its "status" (unloaded, loading, loaded). The folder is read
 * again, so models added since are listed. */
json_t *g4_router_models(g4_router *r);
/* One model's card, or NULL when there is no such model. */
json_t *g4_router_model_card(g4_router *r, const char *name);

/* Passes hr on to the child serving model name (len bytes; NULL: the loaded model, for routes
 * that name none). G4_OK: answered. Otherwise ae says why: 404 no such model, 503 with
 * Retry-After while it loads (the load is started), 503 insufficient_memory, 503 while shutting
 * down, 502-like 503 when the child does not answer. */
int g4_router_forward(g4_router *r, g4_http_req *hr, const char *name, size_t len, g4_api_err *ae);
/* POST /models/load: starts loading name (G4_OK, *loaded 1 when it is ready already). */
int g4_router_load(g4_router *r, const char *name, size_t len, int *loaded, g4_api_err *ae);
/* POST /models/unload: stops name's child if it runs (G4_OK either way; 404 unknown). */
int g4_router_unload(g4_router *r, const char *name, size_t len, g4_api_err *ae);
/* The router's series for /metrics (malloc'd Prometheus text). */
char *g4_router_metrics(g4_router *r);

#endif
