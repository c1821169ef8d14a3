/* server.c — the server's lifecycle (see server.h): starts the HTTP listener first so /health
 * answers while the model loads, attaches the engine (text pieces + scheduler), and on stop
 * drains or cancels in-flight requests before closing the listener. Request handling is in
 * routes.c; nothing here parses requests. */
#include "server/server_internal.h"

#include "grammar/grammar.h"
#include "image/image.h"
#include "server/guard.h"
#include "server/routes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int g4_server_start(const g4_server_opts *o, g4_server **out, g4_err *err) {
    *out = NULL;
    g4_server *s = calloc(1, sizeof *s);
    if (!s) return g4_err_set(err, G4_ENOMEM, "out of memory");
    s->o = *o;
    if (!s->o.max_body) s->o.max_body = 32u << 20; /* a photo as a base64 data URL */
    if (s->o.max_images <= 0) s->o.max_images = 8;
    if (!s->o.image_max_bytes) s->o.image_max_bytes = 20u << 20;
    if (s->o.image_max_pixels <= 0) s->o.image_max_pixels = G4_IMAGE_DEFAULT_MAX_PIXELS;
    if (!s->o.image_budget) s->o.image_budget = (size_t)1 << 30;
    if (s->o.image_fetch_timeout_ms <= 0) s->o.image_fetch_timeout_ms = 10000;
    if (s->o.max_waiting <= 0) s->o.max_waiting = 64;
    if (s->o.max_conns <= 0) s->o.max_conns = 256;
    if (s->o.default_max_tokens <= 0) s->o.default_max_tokens = 4096;
    if (s->o.drain_s < 0) s->o.drain_s = 0;
    if (!s->o.render_budget) s->o.render_budget = 2 * s->o.max_body;
    if (s->o.grammar_cache == 0) s->o.grammar_cache = 16;
    if (!s->o.grammar_budget) s->o.grammar_budget = 2 * (size_t)G4_GRAMMAR_DEFAULT_MEMORY;
    if (!s->o.grammar_timeout_ms) s->o.grammar_timeout_ms = G4_GRAMMAR_DEFAULT_TIMEOUT_MS;
    if (s->o.grammar_cache > 0 && g4_grammar_cache_create(s->o.grammar_cache, &s->grammars, err)) { g4_server_stop(s); return err->code; }
    s->model_id = strdup(o->model_id && *o->model_id ? o->model_id : "g4tp");
    s->model_alias = o->model_alias && *o->model_alias ? strdup(o->model_alias) : NULL;
    s->api_key = o->api_key && *o->api_key ? strdup(o->api_key) : NULL;
    s->created = (long long)time(NULL);
    s->metrics = g4_metrics_create();
    atomic_store(&s->next_id, ((unsigned long long)time(NULL) << 20) ^ (unsigned long long)clock());
    if (!s->model_id || !s->metrics || g4_metrics_set_model(s->metrics, s->model_id)) {
        g4_server_stop(s);
        return g4_err_set(err, G4_ENOMEM, "out of memory");
    }
    const char *host = o->host && *o->host ? o->host : "127.0.0.1";
    if (g4_guard_create(host, g4_http_host_is_loopback(host), o->allowed_hosts, o->cors, &s->guard, err)) {
        g4_server_stop(s);
        return err->code;
    }
    g4_http_opts ho = {.host = o->host, .port = o->port, .max_body = s->o.max_body, .max_conns = s->o.max_conns,
                       .handler = g4_srv_handle, .user = s};
    int rc = g4_http_start(&ho, &s->http, err);
    if (rc) { g4_server_stop(s); return rc; }
    *out = s;
    return G4_OK;
}

int g4_server_port(const g4_server *s) { return g4_http_port(s->http); }

int g4_server_attach(g4_server *s, g4_engine *e, g4_err *err) {
    int rc = g4_textgen_open(e, g4_engine_model_dir(e), &s->tg, err);
    if (rc) return rc;
    s->tg_open = 1;
    s->e = e;
    g4_err perr = {0}; /* a model without a processor still serves text; image requests are told why */
    if (g4_image_proc_load(g4_engine_model_dir(e), &s->image_proc, &perr)) snprintf(s->image_proc_err, sizeof s->image_proc_err, "%.200s", perr.msg[0] ? perr.msg : "no image processor");
    g4_sched_opts so = {.max_waiting = s->o.max_waiting};
    if ((rc = g4_sched_create(&s->tg, &so, &s->sched, err))) return rc;
    atomic_store(&s->ready, 1);
    return G4_OK;
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

void g4_server_set_drain(g4_server *s, double drain_s) {
    if (s && drain_s >= 0) s->o.drain_s = drain_s;
}

void g4_server_stop(g4_server *s) {
    if (!s) return;
    atomic_store(&s->stopping, 1);
    if (s->sched) {
        g4_sched_shutdown(s->sched, 1);
        for (int waited = 0; waited < (int)(s->o.drain_s * 1000); waited += 50) {
            g4_sched_stats st;
            g4_sched_get_stats(s->sched, &st);
            if (st.running == 0 && st.waiting == 0) break;
            sleep_ms(50);
        }
        g4_sched_shutdown(s->sched, 0); /* cancel what is left: each request gets its DONE */
    }
    g4_http_stop(s->http, 5000); /* answers in flight (the cancelled ones too) get out first */
    atomic_store(&s->ready, 0);
    g4_sched_free(s->sched);
    if (s->tg_open) g4_textgen_close(&s->tg);
    g4_metrics_free(s->metrics);
    g4_grammar_cache_free(s->grammars);
    g4_guard_free(s->guard);
    free(s->model_id);
    free(s->model_alias);
    free(s->api_key);
    free(s);
}
