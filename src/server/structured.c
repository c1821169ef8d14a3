/* structured.c — the grammar compile of one request (structured output, docs/structured-output.md):
 * through the server's cache, within the per-compile limits (grammar.h) and a memory budget
 * shared by the compiles in flight (--grammar-budget-bytes; past it 503 with Retry-After, as the
 * prompt preparation's render budget), cancelled when the client leaves or the server stops
 * (a compile runs in the connection's thread; SIGTERM must not wait for it), and counted in
 * /metrics. Knows the HTTP adapter's interface and the grammar layer's, nothing else. */
#include "server/structured.h"

#include <string.h>
#include <time.h>

#include "grammar/grammar.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct {
    g4_server *s;
    g4_http_req *hr;
    double next_probe;
} compile_watch;

/* The compile's cancel callback (polled every few thousand steps): the server stopping is a
 * flag; a client gone is probed at most every 100 ms (g4_http_client_gone asks for that). */
static int compile_cancelled(void *user) {
    compile_watch *w = user;
    if (atomic_load(&w->s->stopping)) return 1;
    double t = now_s();
    if (t < w->next_probe) return 0;
    w->next_probe = t + 0.1;
    return w->hr && g4_http_client_gone(w->hr);
}

/* tests: a compile held for the given time, cancelled as a real one is */
static int test_delay(compile_watch *w, int ms) {
    const double until = now_s() + ms / 1e3;
    while (now_s() < until) {
        if (compile_cancelled(w)) return 1;
        struct timespec ts = {0, 10 * 1000000L};
        nanosleep(&ts, NULL);
    }
    return 0;
}

int g4_srv_compile_output(g4_server *s, g4_http_req *hr, const g4_api_request *q, int thought, g4_grammar **out, g4_api_err *ae) {
    *out = NULL;
    compile_watch w = {.s = s, .hr = hr};
    g4_grammar_limits lim = {.timeout_ms = s->o.grammar_timeout_ms, .cancelled = compile_cancelled, .user = &w,
                             .shared = &s->grammar_bytes, .shared_max = s->o.grammar_budget};
    g4_grammar_compile_stats st;
    g4_metrics_compiling(s->metrics, 1);
    const double t0 = now_s();
    int rc;
    if (s->o.test_compile_delay_ms > 0 && test_delay(&w, s->o.test_compile_delay_ms)) {
        memset(&st, 0, sizeof st);
        st.limit = G4_GLIM_CANCELLED;
        rc = g4_api_err_status(ae, G4_ECANCELED, NULL, "the grammar compile was cancelled");
    } else {
        rc = g4_api_constraint_cached(q, thought, s->grammars, &lim, &st, out, ae);
    }
    g4_metrics_compiling(s->metrics, -1);
    if (!st.cached && g4_api_constrains(q)) g4_metrics_compiled(s->metrics, now_s() - t0, g4_grammar_limit_name(st.limit));
    if (rc && st.limit == G4_GLIM_CANCELLED && atomic_load(&s->stopping))
        g4_api_err_refuse(ae, G4_API_SHUTTING_DOWN, NULL, "the request was cancelled: the server is shutting down");
    return rc;
}
