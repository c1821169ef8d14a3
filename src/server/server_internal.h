/* server_internal.h — the server's shared state, for server.c (lifecycle), routes.c (request
 * handling), route_common.c and generate.c. Not for use outside src/server. */
#ifndef G4_SERVER_INTERNAL_H
#define G4_SERVER_INTERNAL_H

#include <stdatomic.h>

#include "engine/scheduler.h"
#include "engine/textgen.h"
#include "image/processor.h"
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
    struct g4_guard *guard;   /* Host, CORS and Content-Type rules for browsers (guard.h) */
    atomic_size_t grammar_bytes; /* working memory of the grammar compiles in flight (structured.c) */
    atomic_size_t image_bytes;   /* decoded pixels of the images being prepared (vision.c) */
    g4_image_proc image_proc;    /* the model's processor_config.json, read once at attach */
    char image_proc_err[256];    /* why there is none ("" when it was read) */
};

#endif
