/* router.c — several models behind one server (see router.h). One child `g4tp serve` at a time;
 * a thread of its own starts, watches and stops it: it reaps the child, starts the model asked
 * for once the previous one is gone, forwards the child's log lines (prefixed with the model's
 * name), reads the port the child listens on from them, polls its /health until it is ready,
 * and stops it when it has been idle long enough. Request threads only read the state and ask
 * for a model under the mutex; they never wait for a load (they answer 503 + Retry-After). */
#include "server/router.h"

#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "server/proxy.h"

typedef struct { char *name, *dir; size_t bytes; } model;
typedef enum { ST_NONE, ST_LOADING, ST_READY, ST_STOPPING } child_state;
static const char *const state_names[] = {"unloaded", "loading", "loaded", "unloading"};

struct g4_router {
    g4_router_opts o;
    char *dir, *exe, **args;
    char key[40];               /* the children's API key: only the router calls them */
    pthread_mutex_t mu;
    model *m;
    int n;
    /* the child */
    child_state st;
    pid_t pid;
    int port, log_fd;
    char cur[256], pending[256];
    int in_flight;
    double last_used, started;
    char logbuf[4096];
    size_t loglen;
    unsigned long long loads, load_failures, unloads_idle;
    int stopping;
    pthread_t th;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- the models ---------------------------------------------------------------------------- */

static void models_free(model *m, int n) {
    for (int i = 0; i < n; i++) { free(m[i].name); free(m[i].dir); }
    free(m);
}

static int by_name(const void *a, const void *b) { return strcmp(((const model *)a)->name, ((const model *)b)->name); }

/* The files' bytes of a model folder (not recursive): what loading it maps or reads. */
static size_t folder_bytes(const char *dir) {
    size_t sum = 0;
    DIR *d = opendir(dir);
    if (!d) return 0;
    char p[4096];
    struct stat sb;
    for (struct dirent *e; (e = readdir(d));)
        if (e->d_name[0] != '.' && snprintf(p, sizeof p, "%s/%s", dir, e->d_name) < (int)sizeof p && !stat(p, &sb) && S_ISREG(sb.st_mode))
            sum += (size_t)sb.st_size;
    closedir(d);
    return sum;
}

/* Reads the folder: each sub-folder (or link to one) holding config.json is a model. */
static int scan(g4_router *r, g4_err *err) {
    DIR *d = opendir(r->dir);
    if (!d) return g4_err_set(err, G4_EINVAL, "--models-dir %s: %s", r->dir, strerror(errno));
    model *m = NULL;
    int n = 0, cap = 0;
    char p[4096];
    struct stat sb;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.' || strlen(e->d_name) >= sizeof r->cur || strpbrk(e->d_name, "\"\\\n\r\t")) continue;
        if (snprintf(p, sizeof p, "%s/%s/config.json", r->dir, e->d_name) >= (int)sizeof p || stat(p, &sb) || !S_ISREG(sb.st_mode)) continue;
        if (n == cap) {
            model *x = realloc(m, (size_t)(cap = cap ? 2 * cap : 8) * sizeof *m);
            if (!x) break;
            m = x;
        }
        snprintf(p, sizeof p, "%s/%s", r->dir, e->d_name);
        m[n] = (model){strdup(e->d_name), strdup(p), folder_bytes(p)};
        if (!m[n].name || !m[n].dir) { free(m[n].name); free(m[n].dir); break; }
        n++;
    }
    closedir(d);
    if (n) qsort(m, (size_t)n, sizeof *m, by_name);
    models_free(r->m, r->n);
    r->m = m;
    r->n = n;
    return G4_OK;
}

static const model *find(g4_router *r, const char *name, size_t len) {
    for (int i = 0; i < r->n; i++)
        if (strlen(r->m[i].name) == len && !memcmp(r->m[i].name, name, len)) return &r->m[i];
    return NULL;
}

/* find, reading the folder again when the name is new (a model copied in since) */
static const model *lookup(g4_router *r, const char *name, size_t len) {
    const model *m = find(r, name, len);
    g4_err err = {0};
    if (!m && !scan(r, &err)) m = find(r, name, len);
    return m;
}

/* ---- the child ----------------------------------------------------------------------------- */

static size_t mem_available(void) {
    const char *t = getenv("G4_ROUTER_TEST_MEM_AVAILABLE"); /* tests: a machine with less memory */
    if (t && *t) return (size_t)strtoull(t, NULL, 10);
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return (size_t)-1;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
    fclose(f);
    return kb ? (size_t)kb * 1024 : (size_t)-1;
}

static void spawn(g4_router *r, const model *m) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC)) { fprintf(stderr, "g4tp serve: cannot start %s: %s\n", m->name, strerror(errno)); r->load_failures++; return; }
    size_t na = 0;
    while (r->args && r->args[na]) na++;
    char drain[32];
    snprintf(drain, sizeof drain, "%g", r->o.drain_s);
    const char *fixed[] = {"--model", m->dir, "--model-name", m->name, "--host", "127.0.0.1", "--port", "0", "--api-key", r->key,
                           "--drain-seconds", drain};
    const size_t nf = sizeof fixed / sizeof *fixed;
    char **argv = calloc(na + nf + 3, sizeof *argv);
    if (!argv) { close(fds[0]); close(fds[1]); r->load_failures++; return; }
    size_t k = 0;
    argv[k++] = r->exe;
    argv[k++] = "serve";
    for (size_t i = 0; i < na; i++) argv[k++] = r->args[i];
    for (size_t i = 0; i < nf; i++) argv[k++] = (char *)fixed[i];
    const pid_t pid = fork();
    if (pid == 0) {
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        prctl(PR_SET_PDEATHSIG, SIGTERM); /* the router killed: the model's server goes too */
        dup2(fds[1], 2);
        execv(r->exe, argv);
        _exit(127);
    }
    free(argv);
    close(fds[1]);
    if (pid < 0) { close(fds[0]); fprintf(stderr, "g4tp serve: cannot start %s: %s\n", m->name, strerror(errno)); r->load_failures++; return; }
    fcntl(fds[0], F_SETFL, O_NONBLOCK);
    r->pid = pid;
    r->log_fd = fds[0];
    r->port = 0;
    r->loglen = 0;
    r->st = ST_LOADING;
    r->started = now_s();
    r->loads++;
    snprintf(r->cur, sizeof r->cur, "%s", m->name);
    fprintf(stderr, "g4tp serve: loading %s (pid %d)\n", m->name, (int)pid);
}

/* The child's log: each line to our stderr under the model's name; the port it listens on. */
static void read_log(g4_router *r) {
    for (;;) {
        if (r->loglen == sizeof r->logbuf) r->loglen = 0; /* a line longer than the buffer: dropped */
        const ssize_t n = read(r->log_fd, r->logbuf + r->loglen, sizeof r->logbuf - r->loglen);
        if (n <= 0) return;
        r->loglen += (size_t)n;
        char *nl;
        while ((nl = memchr(r->logbuf, '\n', r->loglen))) {
            *nl = 0;
            fprintf(stderr, "[%s] %s\n", r->cur, r->logbuf);
            const char *at = strstr(r->logbuf, "listening on http://");
            const char *colon = at ? strrchr(at, ':') : NULL;
            if (colon && !r->port) r->port = atoi(colon + 1);
            const size_t used = (size_t)(nl + 1 - r->logbuf);
            memmove(r->logbuf, nl + 1, r->loglen - used);
            r->loglen -= used;
        }
    }
}

static int healthy(int port) {
    CURL *c = curl_easy_init();
    if (!c) return 0;
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/health", port);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 2000L);
    curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    long code = 0;
    if (curl_easy_perform(c) == CURLE_OK) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_cleanup(c);
    return code == 200;
}

static void stop_child(g4_router *r) {
    if (r->pid > 0 && r->st != ST_STOPPING) {
        kill(r->pid, SIGTERM);
        r->st = ST_STOPPING;
        fprintf(stderr, "g4tp serve: unloading %s\n", r->cur);
    }
}

static void *watch(void *u) {
    g4_router *r = u;
    for (;;) {
        pthread_mutex_lock(&r->mu);
        if (r->pid > 0) {
            read_log(r);
            int status;
            if (waitpid(r->pid, &status, WNOHANG) == r->pid) {
                read_log(r);
                if (r->st == ST_LOADING) {
                    r->load_failures++;
                    fprintf(stderr, "g4tp serve: %s stopped while loading (%s %d)\n", r->cur, WIFSIGNALED(status) ? "signal" : "exit status",
                            WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
                } else if (r->st == ST_READY) {
                    fprintf(stderr, "g4tp serve: %s's server ended unasked; it is loaded again when asked for\n", r->cur);
                }
                close(r->log_fd);
                r->pid = 0, r->port = 0, r->st = ST_NONE, r->cur[0] = 0;
            }
        }
        if (r->stopping) { pthread_mutex_unlock(&r->mu); break; }
        if (r->pid == 0 && r->pending[0]) {
            const model *m = find(r, r->pending, strlen(r->pending));
            if (m) spawn(r, m);
            r->pending[0] = 0;
        }
        if (r->st == ST_READY && r->o.sleep_idle_s > 0 && r->in_flight == 0 && now_s() - r->last_used >= r->o.sleep_idle_s) {
            r->unloads_idle++;
            stop_child(r);
        }
        const int check = r->st == ST_LOADING && r->port > 0 ? r->port : 0;
        const pid_t pid = r->pid;
        pthread_mutex_unlock(&r->mu);
        if (check && healthy(check)) {
            pthread_mutex_lock(&r->mu);
            if (r->pid == pid && r->st == ST_LOADING) {
                r->st = ST_READY;
                r->last_used = now_s();
                fprintf(stderr, "g4tp serve: %s loaded in %.1f s\n", r->cur, now_s() - r->started);
            }
            pthread_mutex_unlock(&r->mu);
        }
        usleep(50 * 1000);
    }
    return NULL;
}

int g4_router_create(const g4_router_opts *o, g4_router **out, g4_err *err) {
    g4_router *r = calloc(1, sizeof *r);
    if (!r) return g4_err_set(err, G4_ENOMEM, "out of memory");
    r->o = *o;
    pthread_mutex_init(&r->mu, NULL);
    r->dir = strdup(o->models_dir);
    r->exe = strdup(o->exe);
    size_t na = 0;
    while (o->child_args && o->child_args[na]) na++;
    r->args = calloc(na + 1, sizeof *r->args);
    int bad = !r->dir || !r->exe || !r->args;
    for (size_t i = 0; !bad && i < na; i++) bad = !(r->args[i] = strdup(o->child_args[i]));
    unsigned char rnd[16];
    FILE *f = fopen("/dev/urandom", "rb");
    if (!f || fread(rnd, 1, sizeof rnd, f) != sizeof rnd) bad = 1;
    if (f) fclose(f);
    for (int i = 0; i < 16; i++) snprintf(r->key + 2 * i, 3, "%02x", rnd[i]);
    int rc = bad ? g4_err_set(err, G4_ENOMEM, "out of memory") : scan(r, err);
    if (!rc && r->n == 0) rc = g4_err_set(err, G4_EINVAL, "--models-dir %s holds no model (a folder with a config.json)", r->dir);
    if (!rc && pthread_create(&r->th, NULL, watch, r)) rc = g4_err_set(err, G4_ENOMEM, "cannot start a thread");
    if (rc) {
        r->th = 0;
        g4_router_free(r);
        return rc;
    }
    *out = r;
    return G4_OK;
}

void g4_router_stop(g4_router *r) {
    if (!r) return;
    pthread_mutex_lock(&r->mu);
    const int first = !r->stopping;
    r->stopping = 1;
    r->pending[0] = 0;
    if (first && r->pid > 0) kill(r->pid, SIGTERM);
    pthread_mutex_unlock(&r->mu);
    if (!first) return;
    if (r->th) pthread_join(r->th, NULL);
    /* the thread is gone: the child (if the thread has not reaped it) is ours alone now */
    if (r->pid > 0) { /* it drains, then goes; after drain_s + 5 s it is killed */
        int status;
        for (double t = 0; waitpid(r->pid, &status, WNOHANG) == 0; t += 0.05) {
            read_log(r); /* a full pipe would stall the child's drain */
            if (t > r->o.drain_s + 5) { kill(r->pid, SIGKILL); waitpid(r->pid, &status, 0); break; }
            usleep(50 * 1000);
        }
        pthread_mutex_lock(&r->mu);
        read_log(r);
        close(r->log_fd);
        r->pid = 0, r->st = ST_NONE, r->cur[0] = 0;
        pthread_mutex_unlock(&r->mu);
    }
}

void g4_router_free(g4_router *r) {
    if (!r) return;
    g4_router_stop(r);
    models_free(r->m, r->n);
    for (size_t i = 0; r->args && r->args[i]; i++) free(r->args[i]);
    free(r->args);
    free(r->dir);
    free(r->exe);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

/* ---- requests ------------------------------------------------------------------------------- */

static json_t *card(const g4_router *r, const model *m) {
    child_state st = ST_NONE;
    if (!strcmp(r->cur, m->name)) st = r->st;
    else if (!strcmp(r->pending, m->name)) st = ST_LOADING;
    return json_pack("{s:s,s:s,s:i,s:s,s:s,s:I}", "id", m->name, "object", "model", "created", 0, "owned_by", "g4tp", "status", state_names[st],
                     "size_bytes", (json_int_t)m->bytes);
}

json_t *g4_router_models(g4_router *r) {
    json_t *a = json_array();
    pthread_mutex_lock(&r->mu);
    g4_err err = {0};
    scan(r, &err);
    for (int i = 0; a && i < r->n; i++) json_array_append_new(a, card(r, &r->m[i]));
    pthread_mutex_unlock(&r->mu);
    return a;
}

json_t *g4_router_model_card(g4_router *r, const char *name) {
    pthread_mutex_lock(&r->mu);
    const model *m = lookup(r, name, strlen(name));
    json_t *c = m ? card(r, m) : NULL;
    pthread_mutex_unlock(&r->mu);
    return c;
}

static void human_bytes(size_t b, char *out, size_t cap) {
    if (b >= 1000000000) snprintf(out, cap, "%.1f GB", b / 1e9);
    else snprintf(out, cap, "%.1f MB", b / 1e6);
}

/* Asks for m (under the mutex): G4_OK when it is ready, else ae (loading, memory). */
static int want(g4_router *r, const model *m, g4_api_err *ae) {
    if (r->st == ST_READY && !strcmp(r->cur, m->name)) return G4_OK;
    const int coming = (r->st == ST_LOADING && !strcmp(r->cur, m->name)) || !strcmp(r->pending, m->name);
    if (!coming) {
        /* it must fit beside what stays: the model being replaced gives its memory back */
        size_t avail = mem_available();
        const model *old = r->pid > 0 ? find(r, r->cur, strlen(r->cur)) : NULL;
        if (old && avail != (size_t)-1) avail += old->bytes;
        if (m->bytes > avail) {
            char need[32], have[32];
            human_bytes(m->bytes, need, sizeof need);
            human_bytes(avail, have, sizeof have);
            g4_api_err_status(ae, G4_ENOMEM, "model", "model %s needs about %s (its files) and %s of memory are available: not loaded", m->name, need, have);
            return ae->status;
        }
        snprintf(r->pending, sizeof r->pending, "%s", m->name);
        stop_child(r);
    }
    g4_api_err_refuse(ae, G4_API_LOADING, "model", "model %s is loading; retry shortly", m->name);
    ae->retry_after_s = 2;
    return ae->status;
}

static void forward_done(void *u) {
    g4_router *r = u;
    pthread_mutex_lock(&r->mu);
    r->in_flight--;
    r->last_used = now_s();
    pthread_mutex_unlock(&r->mu);
}

int g4_router_forward(g4_router *r, g4_http_req *hr, const char *name, size_t len, g4_api_err *ae) {
    pthread_mutex_lock(&r->mu);
    int rc = G4_OK;
    const model *m = NULL;
    if (r->stopping) rc = g4_api_err_refuse(ae, G4_API_SHUTTING_DOWN, NULL, "the server is shutting down");
    else if (!name && r->st != ST_READY)
        rc = g4_api_err_status(ae, G4_EINVAL, "model", "this server serves several models and none is loaded: name one in 'model' (GET /v1/models lists them)");
    else if (!(m = name ? lookup(r, name, len) : find(r, r->cur, strlen(r->cur))))
        rc = g4_api_err_status(ae, G4_ENOTFOUND, "model", "the model \"%.*s\" does not exist in %s (GET /v1/models lists them)", (int)(len > 200 ? 200 : len),
                               name, r->dir);
    else rc = want(r, m, ae);
    const int port = r->port;
    if (!rc) r->in_flight++;
    pthread_mutex_unlock(&r->mu);
    if (rc) return rc;
    g4_err err = {0};
    if (g4_proxy_forward(hr, port, r->key, forward_done, r, &err)) {
        forward_done(r);
        g4_api_err_refuse(ae, G4_API_LOADING, NULL, "the server of model %s did not answer (%s); retry shortly", m->name, err.msg);
        ae->retry_after_s = 2;
        return ae->status;
    }
    return G4_OK;
}

int g4_router_load(g4_router *r, const char *name, size_t len, int *loaded, g4_api_err *ae) {
    pthread_mutex_lock(&r->mu);
    const model *m = lookup(r, name, len);
    int rc;
    *loaded = 0;
    if (!m) rc = g4_api_err_status(ae, G4_ENOTFOUND, "model", "the model \"%.*s\" does not exist in %s", (int)(len > 200 ? 200 : len), name, r->dir);
    else if (r->stopping) rc = g4_api_err_refuse(ae, G4_API_SHUTTING_DOWN, NULL, "the server is shutting down");
    else {
        rc = want(r, m, ae);
        *loaded = rc == G4_OK;
        if (rc && ae->status == 503 && !strcmp(ae->code, "model_loading")) rc = G4_OK; /* started */
    }
    pthread_mutex_unlock(&r->mu);
    return rc;
}

int g4_router_unload(g4_router *r, const char *name, size_t len, g4_api_err *ae) {
    pthread_mutex_lock(&r->mu);
    const model *m = lookup(r, name, len);
    int rc = G4_OK;
    if (!m) rc = g4_api_err_status(ae, G4_ENOTFOUND, "model", "the model \"%.*s\" does not exist in %s", (int)(len > 200 ? 200 : len), name, r->dir);
    else {
        if (!strcmp(r->pending, m->name)) r->pending[0] = 0;
        if (!strcmp(r->cur, m->name)) stop_child(r);
    }
    pthread_mutex_unlock(&r->mu);
    return rc;
}

char *g4_router_metrics(g4_router *r) {
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    if (!f) return NULL;
    pthread_mutex_lock(&r->mu);
    fprintf(f, "# HELP g4tp_router_model_state The models of --models-dir: 1 in the state named (unloaded, loading, loaded, unloading).\n"
               "# TYPE g4tp_router_model_state gauge\n");
    for (int i = 0; i < r->n; i++) {
        child_state st = strcmp(r->cur, r->m[i].name) ? (strcmp(r->pending, r->m[i].name) ? ST_NONE : ST_LOADING) : r->st;
        for (int k = 0; k < 4; k++)
            fprintf(f, "g4tp_router_model_state{model=\"%s\",state=\"%s\"} %d\n", r->m[i].name, state_names[k], st == (child_state)k);
    }
    fprintf(f, "# HELP g4tp_router_loads_total Model servers started.\n# TYPE g4tp_router_loads_total counter\ng4tp_router_loads_total %llu\n", r->loads);
    fprintf(f, "# HELP g4tp_router_load_failures_total Model servers that ended before they were ready.\n# TYPE g4tp_router_load_failures_total counter\n"
               "g4tp_router_load_failures_total %llu\n", r->load_failures);
    fprintf(f, "# HELP g4tp_router_idle_unloads_total Models unloaded after --sleep-idle-seconds without requests.\n"
               "# TYPE g4tp_router_idle_unloads_total counter\ng4tp_router_idle_unloads_total %llu\n", r->unloads_idle);
    fprintf(f, "# HELP g4tp_router_requests_in_flight Requests being passed on to the loaded model's server.\n"
               "# TYPE g4tp_router_requests_in_flight gauge\ng4tp_router_requests_in_flight %d\n", r->in_flight);
    pthread_mutex_unlock(&r->mu);
    fclose(f);
    return out;
}
