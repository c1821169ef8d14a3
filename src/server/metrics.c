/* metrics.c — Prometheus metrics of the server (see metrics.h and docs/server.md for names):
 * request counts by route and status, token counters, latency histograms, and the scheduler's
 * gauges (running/waiting sequences, KV cache); then the same numbers under vLLM's names
 * (vllm:..., labelled model_name, vLLM's histogram buckets) so that dashboards made for vLLM
 * work. Knows nothing about HTTP or JSON. */
#include "server/metrics.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SERIES 96
#define MAX_BUCKETS 22

typedef struct {
    const double *le;
    int n;
    uint64_t counts[MAX_BUCKETS + 1]; /* per bucket (not cumulative); last = +Inf */
    double sum;
    uint64_t total;
} histo;

static const double ttft_le[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80};
static const double itl_le[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 10};
static const double e2e_le[] = {0.01, 0.05, 0.1, 0.3, 0.5, 1, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480};
/* vLLM's buckets (vllm/v1/metrics/loggers.py) for its names */
static const double vllm_ttft_le[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
                                      1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 640, 2560};
static const double vllm_itl_le[] = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80};
static const double vllm_e2e_le[] = {0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680};

struct g4_metrics {
    pthread_mutex_t mu;
    struct { char endpoint[48]; int status; uint64_t n; } req[MAX_SERIES];
    int n_req;
    histo ttft, itl, e2e;
    histo vttft, vitl, ve2e;  /* the same observations in vLLM's buckets */
    char *model_label;        /* model_name="…" (escaped) */
    uint64_t fin_stop, fin_length, fin_tool, fin_cancel, fin_other;
    uint64_t req_prompt_tokens, req_completion_tokens;
    int preparing;
    unsigned long long grammar_hits, grammar_misses;
    int grammar_entries;
    int compiling;
    uint64_t compiles, compiles_cancelled, compiles_refused[8];
    double compile_seconds;
    uint64_t images, images_refused[9];
};

/* the limits a compile may be refused by (grammar.h's g4_grammar_limit_name) */
static const char *const compile_limits[8] = {"states", "nfa_states", "transitions", "memory", "work", "time", "busy", "other"};

/* why an image was refused (metrics.h) */
static const char *const image_refusals[9] = {"no_vision", "too_many", "url", "format", "limit", "corrupt", "placeholders", "busy", "other"};

static void histo_init(histo *h, const double *le, int n) {
    memset(h, 0, sizeof *h);
    h->le = le;
    h->n = n;
}

static void histo_add(histo *h, double v) {
    int i = 0;
    while (i < h->n && v > h->le[i]) i++;
    h->counts[i]++;
    h->sum += v;
    h->total++;
}

g4_metrics *g4_metrics_create(void) {
    g4_metrics *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    pthread_mutex_init(&m->mu, NULL);
    histo_init(&m->ttft, ttft_le, (int)(sizeof ttft_le / sizeof *ttft_le));
    histo_init(&m->itl, itl_le, (int)(sizeof itl_le / sizeof *itl_le));
    histo_init(&m->e2e, e2e_le, (int)(sizeof e2e_le / sizeof *e2e_le));
    histo_init(&m->vttft, vllm_ttft_le, (int)(sizeof vllm_ttft_le / sizeof *vllm_ttft_le));
    histo_init(&m->vitl, vllm_itl_le, (int)(sizeof vllm_itl_le / sizeof *vllm_itl_le));
    histo_init(&m->ve2e, vllm_e2e_le, (int)(sizeof vllm_e2e_le / sizeof *vllm_e2e_le));
    if (g4_metrics_set_model(m, "")) { g4_metrics_free(m); return NULL; }
    return m;
}

void g4_metrics_free(g4_metrics *m) {
    if (!m) return;
    pthread_mutex_destroy(&m->mu);
    free(m->model_label);
    free(m);
}

void g4_metrics_request(g4_metrics *m, const char *endpoint, int status) {
    pthread_mutex_lock(&m->mu);
    int i;
    for (i = 0; i < m->n_req; i++)
        if (m->req[i].status == status && !strcmp(m->req[i].endpoint, endpoint)) break;
    if (i == m->n_req && m->n_req < MAX_SERIES) {
        snprintf(m->req[i].endpoint, sizeof m->req[i].endpoint, "%s", endpoint);
        m->req[i].status = status;
        m->req[i].n = 0;
        m->n_req++;
    }
    if (i < m->n_req) m->req[i].n++;
    pthread_mutex_unlock(&m->mu);
}

#define LOCKED_ADD(field, vfield) \
    do { pthread_mutex_lock(&m->mu); histo_add(&m->field, s); histo_add(&m->vfield, s); pthread_mutex_unlock(&m->mu); } while (0)
void g4_metrics_ttft(g4_metrics *m, double s) { LOCKED_ADD(ttft, vttft); }
void g4_metrics_itl(g4_metrics *m, double s) { LOCKED_ADD(itl, vitl); }
void g4_metrics_e2e(g4_metrics *m, double s) { LOCKED_ADD(e2e, ve2e); }

/* A label value in the text format escapes backslash, double quote and line feed. */
int g4_metrics_set_model(g4_metrics *m, const char *model) {
    static const char pre[] = "model_name=\"";
    size_t n = sizeof pre + 2;
    for (const char *p = model; *p; p++) n += *p == '\\' || *p == '"' || *p == '\n' ? 2 : 1;
    char *l = malloc(n), *w = l;
    if (!l) return G4_ENOMEM;
    w += sprintf(w, "%s", pre);
    for (const char *p = model; *p; p++) {
        if (*p == '\\' || *p == '"') *w++ = '\\';
        if (*p == '\n') { *w++ = '\\'; *w++ = 'n'; continue; }
        *w++ = *p;
    }
    *w++ = '"';
    *w = 0;
    pthread_mutex_lock(&m->mu);
    free(m->model_label);
    m->model_label = l;
    pthread_mutex_unlock(&m->mu);
    return G4_OK;
}

void g4_metrics_finished(g4_metrics *m, const char *reason, size_t prompt_tokens, size_t completion_tokens) {
    pthread_mutex_lock(&m->mu);
    if (!strcmp(reason, "stop")) m->fin_stop++;
    else if (!strcmp(reason, "length")) m->fin_length++;
    else if (!strcmp(reason, "tool_calls")) m->fin_tool++;
    else if (!strcmp(reason, "cancelled")) m->fin_cancel++;
    else m->fin_other++;
    m->req_prompt_tokens += prompt_tokens;
    m->req_completion_tokens += completion_tokens;
    pthread_mutex_unlock(&m->mu);
}

typedef struct { char *s; size_t len, cap; int oom; } buf;

static void bprintf(buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void bprintf(buf *b, const char *fmt, ...) {
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n < 0) { b->oom = 1; return; }
        if ((size_t)n < b->cap - b->len) { b->len += (size_t)n; return; }
        size_t c = b->cap * 2 + (size_t)n + 1;
        char *p = realloc(b->s, c);
        if (!p) { b->oom = 1; return; }
        b->s = p;
        b->cap = c;
    }
}

/* A histogram; labels (may be NULL) go before le. vllm: le spelled as Python prints floats
 * ("1.0"), as vLLM's buckets are. */
static void histo_render(buf *b, const char *name, const char *help, const char *labels, int vllm, const histo *h) {
    const char *l = labels ? labels : "", *comma = labels ? "," : "";
    bprintf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int i = 0; i < h->n; i++) {
        cum += h->counts[i];
        char le[32];
        snprintf(le, sizeof le, "%g", h->le[i]);
        if (vllm && !strpbrk(le, ".e")) strcat(le, ".0");
        bprintf(b, "%s_bucket{%s%sle=\"%s\"} %llu\n", name, l, comma, le, (unsigned long long)cum);
    }
    cum += h->counts[h->n];
    bprintf(b, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, l, comma, (unsigned long long)cum);
    bprintf(b, labels ? "%s_sum{%s} %.6f\n%s_count{%s} %llu\n" : "%s_sum%s %.6f\n%s_count%s %llu\n", name, l, h->sum, name, l,
            (unsigned long long)h->total);
}

/* A counter with one label: a series per value. */
static void counters_by(buf *b, const char *name, const char *help, const char *label, const char *const *values, const uint64_t *n, int count) {
    bprintf(b, "# HELP %s %s\n# TYPE %s counter\n", name, help, name);
    for (int i = 0; i < count; i++) bprintf(b, "%s{%s=\"%s\"} %llu\n", name, label, values[i], (unsigned long long)n[i]);
}

void g4_metrics_preparing(g4_metrics *m, int delta) {
    pthread_mutex_lock(&m->mu);
    m->preparing += delta;
    pthread_mutex_unlock(&m->mu);
}

void g4_metrics_grammars(g4_metrics *m, unsigned long long hits, unsigned long long misses, int entries) {
    pthread_mutex_lock(&m->mu);
    m->grammar_hits = hits;
    m->grammar_misses = misses;
    m->grammar_entries = entries;
    pthread_mutex_unlock(&m->mu);
}

/* The numbers again under vLLM's names, types, label and buckets (vllm/v1/metrics/loggers.py;
 * its counters are exposed with _total). prefix_cache_queries / _hits count tokens, as vLLM's do. */
static void render_vllm(buf *b, g4_metrics *m, const g4_sched_stats *st) {
    pthread_mutex_lock(&m->mu);
    const char *l = m->model_label;
#define VLLM(name, type, help, fmt, value) \
    bprintf(b, "# HELP " name " " help "\n# TYPE " name " " type "\n" name "{%s} " fmt "\n", l, value)
    VLLM("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.", "%d", st->running);
    VLLM("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.", "%d", st->waiting);
    VLLM("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", "%.6f",
         st->kv_budget ? (double)st->kv_used / (double)st->kv_budget : 0.0);
    VLLM("vllm:prefix_cache_queries_total", "counter", "Prefix cache queries, in terms of number of queried tokens.", "%llu",
         (unsigned long long)st->kv.cache_query_tokens);
    VLLM("vllm:prefix_cache_hits_total", "counter", "Prefix cache hits, in terms of number of cached tokens.", "%llu",
         (unsigned long long)st->kv.cache_hit_tokens);
    VLLM("vllm:num_preemptions_total", "counter", "Cumulative number of preemption from the engine.", "%llu", (unsigned long long)st->preemptions);
    VLLM("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.", "%llu", (unsigned long long)st->prompt_tokens);
    VLLM("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.", "%llu", (unsigned long long)st->generated_tokens);
#undef VLLM
    bprintf(b, "# HELP vllm:request_success_total Count of successfully processed requests.\n# TYPE vllm:request_success_total counter\n");
    bprintf(b, "vllm:request_success_total{%s,finished_reason=\"stop\"} %llu\n", l, (unsigned long long)(m->fin_stop + m->fin_tool));
    bprintf(b, "vllm:request_success_total{%s,finished_reason=\"length\"} %llu\n", l, (unsigned long long)m->fin_length);
    bprintf(b, "vllm:request_success_total{%s,finished_reason=\"abort\"} %llu\n", l, (unsigned long long)(m->fin_cancel + m->fin_other));
    histo_render(b, "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", l, 1, &m->vttft);
    histo_render(b, "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", l, 1, &m->vitl);
    histo_render(b, "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", l, 1, &m->ve2e);
    pthread_mutex_unlock(&m->mu);
}

void g4_metrics_compiling(g4_metrics *m, int delta) {
    pthread_mutex_lock(&m->mu);
    m->compiling += delta;
    pthread_mutex_unlock(&m->mu);
}

void g4_metrics_compiled(g4_metrics *m, double seconds, const char *limit) {
    pthread_mutex_lock(&m->mu);
    m->compiles++;
    m->compile_seconds += seconds;
    if (limit && !strcmp(limit, "cancelled")) m->compiles_cancelled++;
    else if (limit && *limit) {
        int k = 7;
        for (int i = 0; i < 7; i++) if (!strcmp(limit, compile_limits[i])) k = i;
        m->compiles_refused[k]++;
    }
    pthread_mutex_unlock(&m->mu);
}

void g4_metrics_images(g4_metrics *m, int n) {
    pthread_mutex_lock(&m->mu);
    m->images += (uint64_t)n;
    pthread_mutex_unlock(&m->mu);
}

void g4_metrics_image_refused(g4_metrics *m, const char *why) {
    int k = 8;
    for (int i = 0; i < 8; i++) if (why && !strcmp(why, image_refusals[i])) k = i;
    pthread_mutex_lock(&m->mu);
    m->images_refused[k]++;
    pthread_mutex_unlock(&m->mu);
}

char *g4_metrics_render(g4_metrics *m, const g4_sched_stats *st, int ready, size_t *len) {
    buf b = {malloc(8192), 0, 8192, 0};
    if (!b.s) return NULL;
    b.s[0] = 0;
    pthread_mutex_lock(&m->mu);
    bprintf(&b, "# HELP g4tp_model_ready 1 when the model is loaded and requests are served.\n# TYPE g4tp_model_ready gauge\ng4tp_model_ready %d\n", ready);
    bprintf(&b, "# HELP g4tp_http_requests_total HTTP requests answered, by route and status code.\n# TYPE g4tp_http_requests_total counter\n");
    for (int i = 0; i < m->n_req; i++)
        bprintf(&b, "g4tp_http_requests_total{endpoint=\"%s\",code=\"%d\"} %llu\n", m->req[i].endpoint, m->req[i].status,
                (unsigned long long)m->req[i].n);
    bprintf(&b, "# HELP g4tp_request_finished_total Finished generations by finish reason.\n# TYPE g4tp_request_finished_total counter\n");
    bprintf(&b, "g4tp_request_finished_total{finish_reason=\"stop\"} %llu\n", (unsigned long long)m->fin_stop);
    bprintf(&b, "g4tp_request_finished_total{finish_reason=\"length\"} %llu\n", (unsigned long long)m->fin_length);
    bprintf(&b, "g4tp_request_finished_total{finish_reason=\"tool_calls\"} %llu\n", (unsigned long long)m->fin_tool);
    bprintf(&b, "g4tp_request_finished_total{finish_reason=\"cancelled\"} %llu\n", (unsigned long long)m->fin_cancel);
    bprintf(&b, "g4tp_request_finished_total{finish_reason=\"other\"} %llu\n", (unsigned long long)m->fin_other);
    bprintf(&b, "# HELP g4tp_request_prompt_tokens_total Prompt tokens of finished generations.\n# TYPE g4tp_request_prompt_tokens_total counter\ng4tp_request_prompt_tokens_total %llu\n",
            (unsigned long long)m->req_prompt_tokens);
    bprintf(&b, "# HELP g4tp_request_generation_tokens_total Generated tokens of finished generations.\n# TYPE g4tp_request_generation_tokens_total counter\ng4tp_request_generation_tokens_total %llu\n",
            (unsigned long long)m->req_completion_tokens);
    histo_render(&b, "g4tp_time_to_first_token_seconds", "Time from submission to the first generated token.", NULL, 0, &m->ttft);
    histo_render(&b, "g4tp_inter_token_latency_seconds", "Time between consecutive generated tokens as the server received them.", NULL, 0,
                 &m->itl);
    histo_render(&b, "g4tp_request_duration_seconds", "Time from submission to the end of a generation.", NULL, 0, &m->e2e);
    bprintf(&b, "# HELP g4tp_num_requests_preparing Requests whose prompt is being rendered and tokenized.\n# TYPE g4tp_num_requests_preparing gauge\ng4tp_num_requests_preparing %d\n",
            m->preparing);
    bprintf(&b, "# HELP g4tp_grammar_cache_hits_total Constrained requests whose grammar was compiled before (--grammar-cache).\n# TYPE g4tp_grammar_cache_hits_total counter\n"
                "g4tp_grammar_cache_hits_total %llu\n", m->grammar_hits);
    bprintf(&b, "# HELP g4tp_grammar_cache_misses_total Constrained requests that compiled their grammar.\n# TYPE g4tp_grammar_cache_misses_total counter\n"
                "g4tp_grammar_cache_misses_total %llu\n", m->grammar_misses);
    bprintf(&b, "# HELP g4tp_grammar_cache_entries Compiled grammars kept.\n# TYPE g4tp_grammar_cache_entries gauge\ng4tp_grammar_cache_entries %d\n",
            m->grammar_entries);
    bprintf(&b, "# HELP g4tp_grammar_compiles_total Grammar compiles started (structured output not found in the cache).\n# TYPE g4tp_grammar_compiles_total counter\n"
                "g4tp_grammar_compiles_total %llu\n", (unsigned long long)m->compiles);
    counters_by(&b, "g4tp_grammar_compiles_refused_total", "Grammar compiles stopped by a limit (docs/structured-output.md), by limit.", "limit",
                compile_limits, m->compiles_refused, 8);
    bprintf(&b, "# HELP g4tp_grammar_compiles_cancelled_total Grammar compiles cancelled (the client left, the server stopped).\n"
                "# TYPE g4tp_grammar_compiles_cancelled_total counter\ng4tp_grammar_compiles_cancelled_total %llu\n",
            (unsigned long long)m->compiles_cancelled);
    bprintf(&b, "# HELP g4tp_grammar_compile_seconds_total Time spent compiling grammars.\n# TYPE g4tp_grammar_compile_seconds_total counter\n"
                "g4tp_grammar_compile_seconds_total %.6f\n", m->compile_seconds);
    bprintf(&b, "# HELP g4tp_grammar_compiles_running Grammar compiles in progress.\n# TYPE g4tp_grammar_compiles_running gauge\n"
                "g4tp_grammar_compiles_running %d\n", m->compiling);
    bprintf(&b, "# HELP g4tp_images_total Images taken with requests (decoded, preprocessed, sent to the scheduler).\n# TYPE g4tp_images_total counter\n"
                "g4tp_images_total %llu\n", (unsigned long long)m->images);
    counters_by(&b, "g4tp_images_refused_total", "Requests with images refused before the scheduler, by reason (docs/server.md, Images).", "reason",
                image_refusals, m->images_refused, 9);
    pthread_mutex_unlock(&m->mu);
    g4_sched_stats z = {0};
    if (!st) st = &z;
    bprintf(&b, "# HELP g4tp_prompt_tokens_total Prompt tokens prefilled by the scheduler.\n# TYPE g4tp_prompt_tokens_total counter\ng4tp_prompt_tokens_total %llu\n",
            (unsigned long long)st->prompt_tokens);
    bprintf(&b, "# HELP g4tp_generation_tokens_total Tokens generated by the scheduler.\n# TYPE g4tp_generation_tokens_total counter\ng4tp_generation_tokens_total %llu\n",
            (unsigned long long)st->generated_tokens);
    bprintf(&b, "# HELP g4tp_scheduler_steps_total Forward steps run by the scheduler.\n# TYPE g4tp_scheduler_steps_total counter\ng4tp_scheduler_steps_total %llu\n",
            (unsigned long long)st->steps);
    bprintf(&b, "# HELP g4tp_num_requests_running Sequences admitted (prefilling or decoding).\n# TYPE g4tp_num_requests_running gauge\ng4tp_num_requests_running %d\n", st->running);
    bprintf(&b, "# HELP g4tp_num_requests_waiting Requests queued for admission.\n# TYPE g4tp_num_requests_waiting gauge\ng4tp_num_requests_waiting %d\n", st->waiting);
    bprintf(&b, "# HELP g4tp_kv_cache_used_bytes KV cache bytes held by running sequences (per rank).\n# TYPE g4tp_kv_cache_used_bytes gauge\ng4tp_kv_cache_used_bytes %zu\n", st->kv_used);
    bprintf(&b, "# HELP g4tp_kv_cache_budget_bytes KV cache budget (per rank).\n# TYPE g4tp_kv_cache_budget_bytes gauge\ng4tp_kv_cache_budget_bytes %zu\n", st->kv_budget);
    bprintf(&b, "# HELP g4tp_kv_cache_usage_ratio Used fraction of the KV cache budget.\n# TYPE g4tp_kv_cache_usage_ratio gauge\ng4tp_kv_cache_usage_ratio %.6f\n",
            st->kv_budget ? (double)st->kv_used / (double)st->kv_budget : 0.0);
    /* the paged KV pool (docs/kvcache.md): pages of 16 positions of some layers, per rank */
    const g4_kv_stats *kv = &st->kv;
    bprintf(&b, "# HELP g4tp_kv_pages KV pool pages per rank.\n# TYPE g4tp_kv_pages gauge\ng4tp_kv_pages %lld\n", (long long)kv->pages_total);
    bprintf(&b, "# HELP g4tp_kv_pages_free KV pool pages free.\n# TYPE g4tp_kv_pages_free gauge\ng4tp_kv_pages_free %lld\n", (long long)kv->pages_free);
    bprintf(&b, "# HELP g4tp_kv_pages_cached KV pool pages held only by the prefix cache (evictable).\n# TYPE g4tp_kv_pages_cached gauge\ng4tp_kv_pages_cached %lld\n",
            (long long)kv->pages_cached);
    if (st->disk.on) { /* --kv-cache-dir (docs/kvcache.md "On disk") */
        const g4_kv_disk_stats *d = &st->disk;
        bprintf(&b, "# HELP g4tp_kv_disk_entries Prefixes in --kv-cache-dir.\n# TYPE g4tp_kv_disk_entries gauge\ng4tp_kv_disk_entries %lld\n", (long long)d->entries);
        bprintf(&b, "# HELP g4tp_kv_disk_bytes Bytes of those prefixes' files.\n# TYPE g4tp_kv_disk_bytes gauge\ng4tp_kv_disk_bytes %llu\n", (unsigned long long)d->bytes);
        bprintf(&b, "# HELP g4tp_kv_disk_budget_bytes --kv-cache-dir-mb.\n# TYPE g4tp_kv_disk_budget_bytes gauge\ng4tp_kv_disk_budget_bytes %llu\n", (unsigned long long)d->budget);
        bprintf(&b, "# HELP g4tp_kv_disk_saves_total Prefixes written.\n# TYPE g4tp_kv_disk_saves_total counter\ng4tp_kv_disk_saves_total %llu\n", (unsigned long long)d->saved);
        bprintf(&b, "# HELP g4tp_kv_disk_save_failures_total Prefixes that could not be written (disk full, unwritable).\n# TYPE g4tp_kv_disk_save_failures_total counter\ng4tp_kv_disk_save_failures_total %llu\n",
                (unsigned long long)d->save_failed);
        bprintf(&b, "# HELP g4tp_kv_disk_loaded_tokens_total Positions read back into the prefix cache.\n# TYPE g4tp_kv_disk_loaded_tokens_total counter\ng4tp_kv_disk_loaded_tokens_total %llu\n",
                (unsigned long long)d->loaded_tokens);
        bprintf(&b, "# HELP g4tp_kv_disk_refused_total Files refused (damaged, truncated, another version) and removed.\n# TYPE g4tp_kv_disk_refused_total counter\ng4tp_kv_disk_refused_total %llu\n",
                (unsigned long long)d->refused);
        bprintf(&b, "# HELP g4tp_kv_disk_evictions_total Prefixes removed for the disk budget.\n# TYPE g4tp_kv_disk_evictions_total counter\ng4tp_kv_disk_evictions_total %llu\n",
                (unsigned long long)d->evicted);
    }
    bprintf(&b, "# HELP g4tp_kv_blocks_used KV blocks (16 positions of every layer of a kind) held by sequences and the cache.\n# TYPE g4tp_kv_blocks_used gauge\n"
                "g4tp_kv_blocks_used{kind=\"sliding\"} %lld\ng4tp_kv_blocks_used{kind=\"full\"} %lld\n", (long long)kv->blocks_used[0], (long long)kv->blocks_used[1]);
    bprintf(&b, "# HELP g4tp_prefix_cache_queries_total Prompts looked up in the prefix cache.\n# TYPE g4tp_prefix_cache_queries_total counter\ng4tp_prefix_cache_queries_total %llu\n",
            (unsigned long long)kv->cache_queries);
    bprintf(&b, "# HELP g4tp_prefix_cache_query_tokens_total Prompt tokens looked up in the prefix cache.\n# TYPE g4tp_prefix_cache_query_tokens_total counter\ng4tp_prefix_cache_query_tokens_total %llu\n",
            (unsigned long long)kv->cache_query_tokens);
    bprintf(&b, "# HELP g4tp_prefix_cache_hit_tokens_total Prompt tokens taken from the prefix cache.\n# TYPE g4tp_prefix_cache_hit_tokens_total counter\ng4tp_prefix_cache_hit_tokens_total %llu\n",
            (unsigned long long)kv->cache_hit_tokens);
    bprintf(&b, "# HELP g4tp_prefix_cache_evictions_total Cached blocks evicted.\n# TYPE g4tp_prefix_cache_evictions_total counter\ng4tp_prefix_cache_evictions_total %llu\n",
            (unsigned long long)kv->cache_evictions);
    bprintf(&b, "# HELP g4tp_preemptions_total Sequences preempted because the KV pool was full (they resume).\n# TYPE g4tp_preemptions_total counter\ng4tp_preemptions_total %llu\n",
            (unsigned long long)st->preemptions);
    /* speculative decoding (docs/speculative.md) */
    bprintf(&b, "# HELP g4tp_spec_decode_draft_tokens_total Draft tokens verified.\n# TYPE g4tp_spec_decode_draft_tokens_total counter\ng4tp_spec_decode_draft_tokens_total %llu\n",
            (unsigned long long)st->draft_proposed);
    bprintf(&b, "# HELP g4tp_spec_decode_accepted_tokens_total Draft tokens accepted.\n# TYPE g4tp_spec_decode_accepted_tokens_total counter\ng4tp_spec_decode_accepted_tokens_total %llu\n",
            (unsigned long long)st->draft_accepted);
    bprintf(&b, "# HELP g4tp_spec_decode_steps_total Forward steps that verified drafts.\n# TYPE g4tp_spec_decode_steps_total counter\ng4tp_spec_decode_steps_total %llu\n",
            (unsigned long long)st->spec_steps);
    /* the vision tower (docs/vision.md) */
    bprintf(&b, "# HELP g4tp_images_encoded_total Images run through the vision tower.\n# TYPE g4tp_images_encoded_total counter\ng4tp_images_encoded_total %llu\n",
            (unsigned long long)st->images_encoded);
    bprintf(&b, "# HELP g4tp_image_encode_seconds_total Time the vision tower ran.\n# TYPE g4tp_image_encode_seconds_total counter\ng4tp_image_encode_seconds_total %.6f\n",
            st->image_encode_s);
    render_vllm(&b, m, st);
    if (b.oom) { free(b.s); return NULL; }
    *len = b.len;
    return b.s;
}
