/* server.h — the g4tp HTTP server: OpenAI-compatible endpoints over the continuous-batching
 * scheduler. Lifecycle: start (the listener answers /health with 503 while the model loads),
 * attach a loaded engine (ready), stop (drain or cancel in-flight requests, close). */
#ifndef G4_SERVER_SERVER_H
#define G4_SERVER_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "g4.h"

typedef struct g4_server g4_server;

typedef struct g4_server_opts {
    const char *host;           /* default 127.0.0.1 */
    int port;                   /* default 8080; 0: any free port */
    const char *api_key;        /* NULL/"": no authentication */
    const char *model_id;       /* the id /v1/models lists and requests may name */
    const char *model_alias;    /* a second accepted name (e.g. the folder's basename); may be NULL */
    size_t max_body;            /* request body limit in bytes (default 32 MiB: images sent inline) */
    int max_waiting;            /* scheduler queue length before 503 (default 64) */
    int max_conns;              /* concurrent connections (default 256) */
    int64_t default_max_tokens; /* when a request gives none (default 4096, capped by the context) */
    double drain_s;             /* on stop: seconds to let running requests finish (default 10) */
    size_t render_budget;       /* body bytes of requests whose prompt (chat template, tokenizer) is
                                 * being prepared at once; more: 503 (default 2 x max_body) */
    int grammar_cache;          /* structured output: compiled grammars kept for reuse (default 16; < 0: none) */
    const char *allowed_hosts;  /* Host names served besides the loopback ones and host (comma-separated; "*": any); on a
                                 * loopback host only those are served (DNS rebinding), elsewhere any unless given */
    const char *cors;           /* origins answered with CORS headers (comma-separated, or "*"); NULL: none */
    size_t grammar_budget;      /* working memory of the grammar compiles in flight together; more: 503
                                 * (default 2 x G4_GRAMMAR_DEFAULT_MEMORY; a compile alone may use its own limit) */
    uint32_t grammar_timeout_ms;/* one compile's time limit (default G4_GRAMMAR_DEFAULT_TIMEOUT_MS) */
    /* images (docs/server.md, "Images") */
    int max_images;             /* per request (default 8) */
    size_t image_max_bytes;     /* one image's encoded bytes, inline or fetched (default 20 MiB) */
    int64_t image_max_pixels;   /* one image's declared width x height, checked before decoding (default Pillow's 89,478,485) */
    size_t image_budget;        /* worst-case pixel bytes of the images being decoded at once; more: 503 (default 1 GiB) */
    const char *allowed_image_domains; /* hosts image URLs may be fetched from (comma-separated, "*.x" subdomains, "*"); NULL: no fetching */
    int image_fetch_timeout_ms; /* default 10000 */
    const char *slot_save_path; /* POST /slots/{id}?action=save|restore files go there; NULL: off (docs/server.md "Slots") */
    struct g4_router *router;   /* --models-dir: requests go to the model they name (router.h); no engine is attached */
    int test_render_delay_ms;   /* tests only: hold each prompt preparation this long */
    int test_compile_delay_ms;  /* tests only: hold each grammar compile this long (cancellable) */
} g4_server_opts;

int g4_server_start(const g4_server_opts *o, g4_server **out, g4_err *err);
int g4_server_port(const g4_server *s);
/* Opens the model's text pieces and the scheduler on e; from then on requests are served.
 * The engine stays the caller's (close it after g4_server_stop). */
int g4_server_attach(g4_server *s, g4_engine *e, g4_err *err);
/* Stops admitting, lets running requests finish for up to drain_s, cancels the rest, closes
 * the listener and frees the server. */
void g4_server_stop(g4_server *s);
/* Changes drain_s for the coming stop (e.g. when the launcher allows less time than asked). */
void g4_server_set_drain(g4_server *s, double drain_s);

#endif
