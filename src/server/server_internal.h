/* server_internal.h — the server's shared state, for server.c (lifecycle) and routes.c
 * (request handling). Not for use outside src/server. */
#ifndef G4_SERVER_INTERNAL_H
#define G4_SERVER_INTERNAL_H

#include <stdatomic.h>

#include "engine/scheduler.h"
#include "engine/textgen.h"
#include "server/http.h"
#include "server/metrics.h"
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
};

/* The HTTP handler (routes.c). */
void g4_srv_handle(void *user, g4_http_req *req);

#endif
