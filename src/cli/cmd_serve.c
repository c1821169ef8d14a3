/* cmd_serve.c — `g4tp serve`: the HTTP server (OpenAI and Anthropic APIs). Reads flags and the
 * environment (MODEL_DIR, TP_DEGREE, KV_MAX, HOST, PORT, API_KEY; flags win), starts the
 * listener before loading the model (/health says 503 until ready), serves until SIGTERM or
 * SIGINT (or SIGUSR1, which mpirun passes on to every rank at once), then drains and exits.
 * Under MPI rank 0 serves and the other ranks follow (they ignore those signals and exit when
 * rank 0 closes the engine). When a rank fails, /health says 503 for --drain-seconds (in-flight
 * requests get their errors), then the process exits 1 so that a supervisor restarts the job. */
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/mapfile.h"
#include "cli.h"
#include "server/router.h"
#include "server/server.h"
#include "tp/comm.h"

static const char *help =
    "usage: g4tp serve [--model DIR] [--host 127.0.0.1] [--port 8080] [options]\n\n"
    "Serves the model over HTTP: /v1/chat/completions, /v1/completions, /v1/responses (OpenAI),\n"
    "/v1/messages, /v1/messages/count_tokens (Anthropic), /generate, /v1/models, /tokenize,\n"
    "/detokenize, /health, /metrics, and a chat page at / (see docs/server.md). API bodies must\n"
    "be sent as Content-Type: application/json (415 otherwise).\n"
    "  --host ADDR             address to bind (default 127.0.0.1; env HOST)\n"
    "  --port N                port (default 8080; 0 = any free port; env PORT)\n"
    "  --api-key KEY           require Authorization: Bearer KEY or x-api-key: KEY (env API_KEY)\n"
    "  --allowed-hosts H1,H2   Host names served besides localhost, 127.0.0.1, [::1] and --host; on a\n"
    "                          loopback address no other is (DNS rebinding); * = any (default: that\n"
    "                          check on loopback addresses only)\n"
    "  --cors ORIGINS          origins (http://host:port,...) that browsers may let call the API from\n"
    "                          their pages: CORS headers and preflights; * = any (default: none)\n"
    "  --model-name NAME       the model id clients use (default: folder name, g4tp-demo for the demo)\n"
    "  --max-body-bytes N      request body limit (default 33554432: room for images sent inline)\n"
    "  --max-waiting N         queued requests before 503 + Retry-After (default 64)\n"
    "  --max-seqs N            sequences decoded together (default 16)\n"
    "  --max-conns N           concurrent connections (default 256)\n"
    "  --render-budget-bytes N request bytes whose prompts (chat template, tokenizer) are\n"
    "                          prepared at once; beyond it 503 (default 2 x --max-body-bytes)\n"
    "  --default-max-tokens N  tokens generated when a request gives no limit (default 4096)\n"
    "  --drain-seconds S       on SIGTERM, time running requests get to finish (default 10)\n"
    "  --grammar-cache N       structured output: compiled grammars (schemas, tools) kept for\n"
    "                          the next requests that ask the same (default 16; 0 = none)\n"
    "  --grammar-budget-bytes N  working memory of the grammar compiles running at once;\n"
    "                          beyond it 503 (default 536870912; one compile alone may use 256 MiB)\n"
    "  --grammar-timeout-ms N  time limit of one grammar compile; beyond it 400 (default 20000)\n"
    "images (models with a vision tower; docs/server.md, \"Images\"):\n"
    "  --max-images N          images in one request (default 8, at most 64)\n"
    "  --max-image-bytes N     one image's encoded size, inline or fetched (default 20971520)\n"
    "  --max-image-pixels N    one image's width x height, checked before decoding (default 89478485)\n"
    "  --image-budget-bytes N  worst-case pixel bytes of the images decoded at once across\n"
    "                          requests; beyond it 503 (default 1073741824)\n"
    "  --allowed-image-domains H1,H2  hosts image URLs may be fetched from (http/https; *.x for\n"
    "                          subdomains; * = any); default: none, images come inline only\n"
    "  --image-fetch-timeout-ms N  time limit of one image fetch, redirects included (default 10000)\n"
    "several models (llama-server's router; docs/server.md, \"Several models\"):\n"
    "  --models-dir DIR        serve every model folder of DIR (one with a config.json), one loaded at a\n"
    "                          time, on the first request naming it or POST /models/load; 503 with\n"
    "                          Retry-After while it loads (instead of --model; not with --comm mpi)\n"
    "  --slot-save-path DIR    POST /slots/{id}?action=save|restore files go there (default: off)\n"
    "  --sleep-idle-seconds S  unload the model after S seconds without requests (default 0: never)\n"
    "environment: MODEL_DIR, TP_DEGREE (--tp), KV_MAX (--max-ctx), HOST, PORT, API_KEY\n"
    "%s";

static int env_int(const char *name, long long lo, long long hi, long long *out) {
    const char *v = getenv(name);
    if (!v || !*v) return 1;
    return cli_int(name, v, lo, hi, out);
}

/* mpirun, signalled with SIGTERM or SIGINT, sends the ranks SIGCONT, SIGTERM
 * odls_base_sigkill_timeout seconds (default 1) later and SIGKILL as long again after that;
 * SIGUSR1 it passes on at once. Say so when the SIGTERM path cuts the drain short. */
static long launcher_kill_s(void) {
    const char *v = getenv("OMPI_MCA_odls_base_sigkill_timeout");
    return v && *v && atol(v) > 0 ? atol(v) : 1;
}

static void check_launcher_kill_timeout(double drain_s) {
    long t = launcher_kill_s();
    if (t < drain_s + 2)
        fprintf(stderr, "g4tp serve: note: mpirun kills the ranks %ld s after it passes on a SIGTERM, before a drain of %.0f s "
                        "ends: stop the job with SIGUSR1 to mpirun (passed on at once), or start mpirun with "
                        "--mca odls_base_sigkill_timeout %.0f (docs/deploy.md)\n", t, drain_s, drain_s + 2);
}

static int mpi_launch_rank(void) {
    const char *names[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"};
    for (int i = 0; i < 3; i++) {
        const char *v = getenv(names[i]);
        if (v && *v) return atoi(v);
    }
    return 0;
}

/* --models-dir: the front server routes each request to the model it names, each model served
 * by a `g4tp serve` child with the flags given here that are not the front's own (server/router.h). */
static int serve_router(int argc, char **argv, const char *keep, const char *dir, double sleep_idle, g4_server_opts *so, sigset_t *sigs) {
    const char *args[argc + 1];
    int n = 0;
    for (int i = 1; i < argc; i++)
        if (keep[i]) args[n++] = argv[i];
    args[n] = NULL;
    char exe[4096];
    const ssize_t el = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (el <= 0) { fprintf(stderr, "g4tp serve: cannot find its own binary (/proc/self/exe)\n"); return 1; }
    exe[el] = 0;
    g4_router_opts ro = {.models_dir = dir, .sleep_idle_s = sleep_idle, .exe = exe, .child_args = args, .drain_s = so->drain_s};
    g4_err err = {0};
    g4_router *router = NULL;
    if (g4_router_create(&ro, &router, &err)) { cli_error("serve", &err); return 1; }
    so->router = router;
    if (!so->model_id) so->model_id = "g4tp-router";
    g4_server *srv = NULL;
    if (g4_server_start(so, &srv, &err)) { cli_error("serve", &err); g4_router_stop(router); g4_router_free(router); return 1; }
    fprintf(stderr, "g4tp serve: listening on http://%s:%d (pid %d, the models of %s)\n", so->host, g4_server_port(srv), (int)getpid(), dir);
    int sig = 0;
    while (sig <= 0) sig = sigtimedwait(sigs, NULL, &(struct timespec){1, 0});
    fprintf(stderr, "g4tp serve: %s: the model's server drains (up to %.1f s), then stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM", so->drain_s);
    g4_router_stop(router); /* new requests get 503; the child finishes what it runs */
    g4_server_stop(srv);
    g4_router_free(router);
    fprintf(stderr, "g4tp serve: stopped\n");
    return 0;
}

int cmd_serve(int argc, char **argv) {
    g4_engine_opts o = {0};
    o.threads = 1;
    g4_server_opts so = {0};
    int grammars = 16;
    so.host = "127.0.0.1";
    so.port = 8080;
    so.drain_s = 10;
    long long x;
    const char *models_dir = NULL;
    double sleep_idle = 0;
    int model_flag = 0;
    char keep[argc + 1]; /* router: the flags its model servers get too */
    memset(keep, 0, sizeof keep);
    /* the environment first: flags given below override it */
    if (getenv("MODEL_DIR") && *getenv("MODEL_DIR")) o.model_dir = getenv("MODEL_DIR");
    if (!env_int("TP_DEGREE", 1, 64, &x)) return 2; else if (getenv("TP_DEGREE") && *getenv("TP_DEGREE")) o.tp = (int)x;
    if (!env_int("KV_MAX", 1, 1LL << 31, &x)) return 2; else if (getenv("KV_MAX") && *getenv("KV_MAX")) o.max_ctx = x;
    if (!env_int("PORT", 0, 65535, &x)) return 2; else if (getenv("PORT") && *getenv("PORT")) so.port = (int)x;
    if (getenv("HOST") && *getenv("HOST")) so.host = getenv("HOST");
    if (getenv("API_KEY") && *getenv("API_KEY")) so.api_key = getenv("API_KEY");
    int bad = 0;
    for (int i = 1; i < argc && !bad; i++) {
        const char *a = argv[i], *v;
        const int i0 = i;
        int local = 0; /* a flag of the front server itself, not passed on to a model's server */
        model_flag |= !strcmp(a, "--model");
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { printf(help, cli_engine_help); return 0; }
        if (cli_engine_flag(argc, argv, &i, &o, &bad)) {
            for (int k = i0; k <= i && k < argc; k++) keep[k] = 1;
            continue;
        }
#define INTFLAG(name, lo, hi, dst) else if (!strcmp(a, name)) { if (!(v = cli_value(argc, argv, &i)) || !cli_int(a, v, lo, hi, &x)) bad = 1; else dst = x; }
        local = !strcmp(a, "--host") || !strcmp(a, "--port") || !strcmp(a, "--api-key") || !strcmp(a, "--model-name") || !strcmp(a, "--allowed-hosts") ||
                !strcmp(a, "--cors") || !strcmp(a, "--models-dir") || !strcmp(a, "--sleep-idle-seconds") || !strcmp(a, "--drain-seconds");
        if (!strcmp(a, "--host")) { if (!(so.host = cli_value(argc, argv, &i))) bad = 1; }
        else if (!strcmp(a, "--models-dir")) { if (!(models_dir = cli_value(argc, argv, &i))) bad = 1; }
        else if (!strcmp(a, "--sleep-idle-seconds")) { if (!(v = cli_value(argc, argv, &i)) || !cli_int(a, v, 0, 1LL << 31, &x)) bad = 1; else sleep_idle = (double)x; }
        else if (!strcmp(a, "--api-key")) { if (!(so.api_key = cli_value(argc, argv, &i))) bad = 1; }
        else if (!strcmp(a, "--model-name")) { if (!(so.model_id = cli_value(argc, argv, &i))) bad = 1; }
        else if (!strcmp(a, "--allowed-hosts")) { if (!(so.allowed_hosts = cli_value(argc, argv, &i))) bad = 1; }
        else if (!strcmp(a, "--cors")) { if (!(so.cors = cli_value(argc, argv, &i))) bad = 1; }
        else if (!strcmp(a, "--allowed-image-domains")) { if (!(so.allowed_image_domains = cli_value(argc, argv, &i))) bad = 1; }
        else if (!strcmp(a, "--slot-save-path")) {
            if (!(so.slot_save_path = cli_value(argc, argv, &i))) bad = 1;
            else if (!g4_is_dir(so.slot_save_path)) { fprintf(stderr, "g4tp serve: --slot-save-path %s is not a folder\n", so.slot_save_path); bad = 1; }
        }
        INTFLAG("--port", 0, 65535, so.port)
        INTFLAG("--max-body-bytes", 1, 1LL << 32, so.max_body)
        INTFLAG("--max-waiting", 1, 1 << 20, so.max_waiting)
        INTFLAG("--max-seqs", 1, 4096, o.max_seqs)
        INTFLAG("--max-conns", 1, 1 << 16, so.max_conns)
        INTFLAG("--render-budget-bytes", 1, 1LL << 40, so.render_budget)
        INTFLAG("--default-max-tokens", 1, 1LL << 31, so.default_max_tokens)
        INTFLAG("--drain-seconds", 0, 3600, so.drain_s)
        INTFLAG("--grammar-cache", 0, 4096, grammars)
        INTFLAG("--grammar-budget-bytes", 1, 1LL << 40, so.grammar_budget)
        INTFLAG("--grammar-timeout-ms", 1, 3600000, so.grammar_timeout_ms)
        INTFLAG("--max-images", 1, 64, so.max_images) /* api_images.h: G4_API_MAX_IMAGES */
        INTFLAG("--max-image-bytes", 1, 1LL << 31, so.image_max_bytes)
        INTFLAG("--max-image-pixels", 1, 1LL << 31, so.image_max_pixels)
        INTFLAG("--image-budget-bytes", 1, 1LL << 40, so.image_budget)
        INTFLAG("--image-fetch-timeout-ms", 1, 600000, so.image_fetch_timeout_ms)
        else { fprintf(stderr, "g4tp serve: unknown option %s (see --help)\n", a); bad = 1; }
#undef INTFLAG
        for (int k = i0; !local && k <= i && k < argc; k++) keep[k] = 1;
    }
    if (!bad && models_dir && model_flag) { fprintf(stderr, "g4tp serve: --models-dir and --model exclude each other\n"); bad = 1; }
    if (!bad && models_dir && o.comm && !strcmp(o.comm, "mpi")) { fprintf(stderr, "g4tp serve: --models-dir runs its models as processes on this host: not with --comm mpi\n"); bad = 1; }
    if (bad) return 2;
    so.grammar_cache = grammars ? grammars : -1; /* 0 on the command line: none (0 in the options: the default) */
    char base[256] = "";
    if (!o.model_dir) {
        o.model_dir = cli_default_model();
        if (!so.model_id) so.model_id = "g4tp-demo";
    } else {
        size_t n = strlen(o.model_dir);
        while (n > 1 && o.model_dir[n - 1] == '/') n--;
        size_t b = n;
        while (b > 0 && o.model_dir[b - 1] != '/') b--;
        snprintf(base, sizeof base, "%.*s", (int)(n - b), o.model_dir + b);
        if (!so.model_id) so.model_id = base;
        else so.model_alias = base;
    }

    /* signals: SIGTERM/SIGINT are taken by sigwait below (blocked in every thread we start) */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGUSR1); /* what mpirun passes on at once: a drain across hosts */
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    const char *rdelay = getenv("G4_SERVE_TEST_RENDER_DELAY_MS"); /* tests: hold prompt preparations */
    if (rdelay && *rdelay) so.test_render_delay_ms = atoi(rdelay);
    const char *cdelay = getenv("G4_SERVE_TEST_COMPILE_DELAY_MS"); /* tests: hold grammar compiles */
    if (cdelay && *cdelay) so.test_compile_delay_ms = atoi(cdelay);
    if (models_dir) return serve_router(argc, argv, keep, models_dir, sleep_idle, &so, &sigs);
    g4_err err = {0};
    g4_server *srv = NULL;
    int mpi = o.comm && !strcmp(o.comm, "mpi");
    if (!mpi || mpi_launch_rank() == 0) {
        if (g4_server_start(&so, &srv, &err)) { cli_error("serve", &err); return 1; }
        fprintf(stderr, "g4tp serve: listening on http://%s:%d (pid %d, loading %s)\n", so.host, g4_server_port(srv), (int)getpid(), o.model_dir);
    }
    const char *delay = getenv("G4_SERVE_TEST_LOAD_DELAY_MS"); /* tests: observe /health during loading */
    if (srv && delay && *delay) {
        long ms = atol(delay);
        struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    g4_engine *e;
    if (g4_engine_open(&o, &e, &err)) { cli_error("serve", &err); g4_server_stop(srv); return 1; }
    if (g4_engine_rank(e) != 0) {
        g4_server_stop(srv);
        int rc = g4_engine_follow(e, &err);
        if (rc) cli_error("serve", &err);
        g4_engine_close(e);
        return rc ? 1 : 0;
    }
    if (!srv) { /* the launcher's rank variable disagreed with the engine: serve anyway */
        if (g4_server_start(&so, &srv, &err)) { cli_error("serve", &err); g4_engine_close(e); return 1; }
    }
    if (g4_server_attach(srv, e, &err)) {
        cli_error("serve", &err);
        g4_server_stop(srv);
        g4_engine_close(e);
        return 1;
    }
    fprintf(stderr, "g4tp serve: ready: model \"%s\", tp %d, context %lld, isa %s\n", so.model_id, g4_engine_tp(e),
            (long long)g4_engine_max_ctx(e), g4_engine_isa(e));
    fprintf(stderr, "g4tp serve: KV cache: %s\n", g4_engine_kv_budget_note(e));
    if (mpi) check_launcher_kill_timeout(so.drain_s);
    /* until SIGTERM/SIGINT/SIGUSR1, or until a rank fails */
    int sig = 0;
    const char *failed = NULL;
    while (sig <= 0 && !(failed = g4_engine_failure(e))) sig = sigtimedwait(&sigs, NULL, &(struct timespec){0, 200000000});
    if (failed) {
        fprintf(stderr, "g4tp serve: %s\ng4tp serve: the model cannot be served any more: /health says 503; exiting in %.0f s\n", failed, so.drain_s);
        for (double t = 0; t < so.drain_s && sigtimedwait(&sigs, NULL, &(struct timespec){0, 200000000}) <= 0; t += 0.2) {}
        g4_server_stop(srv);
        g4_engine_close(e);
        fprintf(stderr, "g4tp serve: stopped after the failure\n");
        return 1;
    }
    if (mpi && sig != SIGUSR1 && g4_comm_mpi_launched() && launcher_kill_s() - 0.5 < so.drain_s) {
        /* mpirun's SIGKILL follows (its SIGCONT came first and made waits on peers bounded,
         * main.c): drain for less, so that every request still gets its end */
        so.drain_s = (double)launcher_kill_s() - 0.5;
        g4_server_set_drain(srv, so.drain_s);
    }
    fprintf(stderr, "g4tp serve: %s: draining (up to %.1f s), then stopping\n", sig == SIGINT ? "SIGINT" : sig == SIGUSR1 ? "SIGUSR1" : "SIGTERM",
            so.drain_s);
    g4_server_stop(srv);
    g4_engine_close(e);
    fprintf(stderr, "g4tp serve: stopped\n");
    return 0;
}
