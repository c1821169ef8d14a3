/* generate.c — one generation request, whatever its API (/generate, /v1/completions,
 * /v1/chat/completions, /v1/messages, /v1/responses): the route's row of the API table
 * (api_family.h) translates the body into the one internal request, the prompt is rendered and tokenized,
 * its n choices submitted to the scheduler (choice 0 first; the others wait for its prompt and
 * take it from the prefix cache; a completions batch of several prompts does this per prompt,
 * choices prompt-major), and the events of all choices either streamed (sse.c, in the
 * API's stream shape) or collected and rendered as the API's response object. Logprobs come from the scheduler
 * and become JSON in logprob_json.c. Errors go through errors.c only. */
#include "server/generate.h"

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "grammar/grammar.h"
#include "server/anthropic.h"
#include "server/api_family.h"
#include "server/errors.h"
#include "server/logprob_json.h"
#include "server/route_common.h"
#include "server/openai.h"
#include "server/sse.h"
#include "server/structured.h"
#include "server/vision.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct member {
    g4_sched_req *req;
    int done;                 /* its DONE or ERROR was taken */
    g4_sched_event fin;       /* that event */
    size_t lp_seen;           /* logprobs taken so far */
    char *text;               /* collected text (whole answers) */
    size_t len, cap;
    int echoed;               /* streaming echo sent */
    g4_lpj_completion lpc;    /* completions logprobs: offsets continue across chunks */
} member;

/* One prompt of the request (a completions batch has several; its choices are members
 * [k * per, (k + 1) * per)). */
typedef struct part {
    int32_t *ids;
    size_t n_prompt;
    char *echo;               /* completions echo: the prompt's text */
    size_t echo_len;
    g4_token_logprob *plp;    /* [n_prompt] with echo + logprobs, once known */
} part;

typedef struct gen_job {
    g4_server *s;
    g4_srv_route rt;          /* the route: metrics name, the API's table row */
    const g4_api_family *api;
    g4_api_request q;         /* owned: stop strings, extra fields */
    char id[64];
    int n, n_done, next;      /* all choices of all prompts; next: the member polled first (round robin) */
    int per;                  /* choices per prompt (q.n) */
    member *m;                /* [n] */
    part *parts;              /* [n_parts] */
    size_t n_parts;
    g4_srv_images im;         /* the one prompt's images (vision.h) */
    g4_sched_notify note;
    uint64_t seen;
    g4_sse *sse;
    double t0, t_tok, t_out;
} gen_job;

static void job_free(gen_job *j) {
    for (int i = 0; j->m && i < j->n; i++) {
        g4_sched_req_free(j->m[i].req); /* before the notify goes: the scheduler may still push */
        g4_sched_event_clear(&j->m[i].fin);
        free(j->m[i].text);
        g4_lpj_completion_clear(&j->m[i].lpc);
    }
    g4_sched_notify_destroy(&j->note);
    g4_sse_free(j->sse);
    g4_api_request_free(&j->q);
    g4_srv_images_free(&j->im);
    for (size_t k = 0; k < j->n_parts; k++) {
        free(j->parts[k].ids);
        free(j->parts[k].echo);
        free(j->parts[k].plp);
    }
    free(j->parts);
    free(j->m);
    free(j);
}

/* The next event of any choice, round robin; waits up to timeout_ms. */
static int next_event(gen_job *j, int timeout_ms, int *who, g4_sched_event *ev) {
    const double until = now_s() + timeout_ms / 1e3;
    for (;;) {
        for (int k = 0; k < j->n; k++) {
            int i = (j->next + k) % j->n;
            if (!j->m[i].done && g4_sched_next(j->m[i].req, ev, 0)) {
                j->next = (i + 1) % j->n;
                *who = i;
                return 1;
            }
        }
        const double left = until - now_s();
        if (left <= 0) return 0;
        g4_sched_notify_wait(&j->note, &j->seen, (int)(left * 1e3) + 1);
    }
}

static void observe_token(gen_job *j, const g4_sched_event *ev) {
    if (ev->token < 0) return;
    double t = now_s();
    if (j->t_tok > 0) g4_metrics_itl(j->s->metrics, t - j->t_tok);
    j->t_tok = t;
}

static void observe_done(gen_job *j, const g4_sched_event *ev, const char *reason) {
    g4_metrics_finished(j->s->metrics, reason, ev->prompt_tokens, ev->completion_tokens);
    if (ev->completion_tokens) g4_metrics_ttft(j->s->metrics, ev->ttft_ms / 1e3);
    g4_metrics_e2e(j->s->metrics, now_s() - j->t0);
}

static const char *stop_sequence(const gen_job *j, const g4_sched_event *ev) {
    return ev->stop_index >= 0 && (size_t)ev->stop_index < j->q.n_stops ? j->q.stops[ev->stop_index] : NULL;
}

/* The logprobs of member i's tokens since the last call, up to token upto (SIZE_MAX: all), as
 * the API's JSON (NULL when off or none): chat an array of content entries, completions an
 * object of the four lists. */
static json_t *take_logprobs(gen_job *j, int i, size_t upto) {
    if (!j->q.logprobs) return NULL;
    member *m = &j->m[i];
    g4_token_logprob buf[32];
    json_t *arr = j->api->chat_logprobs ? json_array() : NULL;
    size_t got, total = 0;
    while (m->lp_seen < upto && (got = g4_sched_req_logprobs(m->req, m->lp_seen, buf, upto - m->lp_seen < 32 ? upto - m->lp_seen : 32))) {
        m->lp_seen += got;
        total += got;
        if (arr) g4_lpj_chat_append(j->s->tg.tok, buf, got, arr);
        else g4_lpj_completion_append(&m->lpc, j->s->tg.tok, buf, got, 0);
    }
    if (!total) { json_decref(arr); return NULL; }
    return arr ? arr : g4_lpj_completion_take(&m->lpc);
}

/* echo + logprobs: the prompt tokens' entries (the first has none), from the prompt's first choice. */
static int prompt_logprobs(gen_job *j, size_t k) {
    part *p = &j->parts[k];
    if (p->plp || !j->q.echo || !j->q.logprobs) return 0;
    p->plp = malloc(sizeof *p->plp * p->n_prompt);
    if (!p->plp) return G4_ENOMEM;
    if (!g4_sched_req_prompt_logprobs(j->m[k * (size_t)j->per].req, p->plp, p->n_prompt)) { free(p->plp); p->plp = NULL; return G4_EINVAL; }
    return 0;
}

static void make_id(g4_server *s, const g4_api_family *api, char *id, size_t n) {
    unsigned long long x = atomic_fetch_add(&s->next_id, 1) * 0x9E3779B97F4A7C15ull;
    snprintf(id, n, "%s%016llx", api->id_prefix, x);
}

static void engine_error(const g4_sched_event *ev, g4_api_err *ae) {
    g4_err e2 = {.code = ev->code};
    snprintf(e2.msg, sizeof e2.msg, "%s", ev->text ? ev->text : "generation failed");
    g4_api_err_from(ae, &e2, NULL);
}

/* The body as the one internal request, by the API's header check and parser. */
static int parse_any(const g4_api_family *api, g4_http_req *hr, const char *body, size_t len, g4_api_request *q, g4_api_err *ae) {
    int rc = api->header ? api->check_header(g4_http_header(hr, api->header), ae) : 0;
    return rc ? rc : api->parse(body, len, q, ae);
}

/* The prompt's ids: a rendered chat, a tokenized text, or the ids given (taken from p). */
static int prompt_ids(g4_server *s, const json_t *chat, g4_api_prompt *p, int add_special, size_t blen, int32_t **ids, size_t *n, int *thought,
                      g4_api_err *ae) {
    int rc = g4_srv_prep_begin(s, blen, ae);
    if (rc) return rc;
    g4_err err = {0};
    if (chat) rc = g4_srv_chat_ids(s, chat, ids, n, thought, ae);
    else if (p->text) {
        if (g4_tokenizer_encode(s->tg.tok, p->text, p->len, add_special, ids, n, &err)) rc = g4_api_err_from(ae, &err, "prompt");
    } else {
        *ids = p->ids;
        *n = p->n_ids;
        p->ids = NULL;
    }
    g4_srv_prep_end(s, blen);
    if (!rc && *n == 0) rc = g4_api_err_status(ae, G4_EINVAL, "prompt", "the prompt is empty (no tokens)");
    return rc;
}

/* A batch: an error about the prompt says which one. */
static void name_prompt(g4_api_err *ae, size_t k) {
    if (strcmp(ae->param, "prompt")) return;
    char m[sizeof ae->message + 32];
    int l = snprintf(m, sizeof m, "prompt[%zu]: %s", k, ae->message);
    size_t c = l < 0 ? 0 : (size_t)l < sizeof ae->message ? (size_t)l : sizeof ae->message - 1;
    memcpy(ae->message, m, c);
    ae->message[c] = 0;
}

/* The request's prompts as parts: the batch's, or the one prompt (chat, text or ids). */
static int make_parts(gen_job *j, size_t blen, int *thought, g4_api_err *ae) {
    g4_api_request *q = &j->q;
    const size_t np = q->n_batch ? q->n_batch : 1;
    if (!(j->parts = calloc(np, sizeof *j->parts))) return g4_api_err_status(ae, G4_ENOMEM, NULL, "out of memory");
    j->n_parts = np;
    for (size_t k = 0; k < np; k++) {
        g4_api_prompt one = {.text = q->prompt, .len = q->prompt_len, .ids = q->prompt_ids, .n_ids = q->n_prompt_ids};
        g4_api_prompt *p = q->n_batch ? &q->batch[k] : &one;
        int rc = prompt_ids(j->s, q->chat, p, q->add_special, blen, &j->parts[k].ids, &j->parts[k].n_prompt, thought, ae);
        if (!q->n_batch) q->prompt_ids = one.ids; /* NULL once taken */
        if (rc && q->n_batch) name_prompt(ae, k);
        if (rc) return rc;
    }
    return 0;
}

/* The images (vision.h): the one prompt's, decoded and its placeholders expanded. A batch of
 * prompts takes none, and a placeholder typed into one of its prompts is refused. */
static int prepare_images(gen_job *j, g4_http_req *hr, g4_api_err *ae) {
    if (!j->q.n_batch) {
        int rc = g4_srv_images_prepare(j->s, hr, &j->q, &j->parts[0].ids, &j->parts[0].n_prompt, &j->im, 1, ae);
        g4_api_images_free(&j->q.images); /* the encoded bytes: the pixels are in j->im now */
        return rc;
    }
    if (j->q.images.n) return g4_api_err_status(ae, G4_EINVAL, "images", "images go with one prompt, not a batch of prompts");
    g4_api_request none = j->q;
    memset(&none.images, 0, sizeof none.images);
    for (size_t k = 0; k < j->n_parts; k++) {
        g4_srv_images im;
        int rc = g4_srv_images_prepare(j->s, hr, &none, &j->parts[k].ids, &j->parts[k].n_prompt, &im, 1, ae);
        g4_srv_images_free(&im);
        if (rc) { name_prompt(ae, k); return rc; }
    }
    return 0;
}

static int gen_params(g4_server *s, const g4_api_request *q, size_t n, g4_gen_params *gp, g4_api_err *ae) {
    memset(gp, 0, sizeof *gp);
    const int64_t ctx = g4_engine_max_ctx(s->e);
    if ((int64_t)n >= ctx)
        return g4_api_err_status(ae, G4_ECONTEXT, q->chat ? "messages" : "prompt", "the prompt has %zu tokens; the context holds %lld, leaving no room to generate",
                                 n, (long long)ctx);
    gp->max_new_tokens = q->max_tokens;
    if (gp->max_new_tokens < 0) {
        gp->max_new_tokens = ctx - (int64_t)n;
        int64_t cap = s->tg.gen.max_new_tokens > 0 ? s->tg.gen.max_new_tokens : s->o.default_max_tokens;
        if (gp->max_new_tokens > cap) gp->max_new_tokens = cap;
    }
    g4_gen_config_sampling_defaults(&s->tg.gen, &gp->sampling);
    if (q->has_temperature) gp->sampling.temperature = (float)q->temperature;
    if (q->has_top_p) gp->sampling.top_p = (float)q->top_p;
    if (q->has_top_k) gp->sampling.top_k = q->top_k;
    if (q->has_min_p) gp->sampling.min_p = (float)q->min_p;
    if (q->has_seed) { gp->sampling.seed = q->seed; gp->sampling.has_seed = 1; }
    gp->penalty.presence = (float)q->presence_penalty;
    gp->penalty.frequency = (float)q->frequency_penalty;
    gp->penalty.repetition = (float)q->repetition_penalty;
    gp->penalty.min_tokens = q->min_tokens;
    gp->penalty.bias = q->logit_bias;
    gp->penalty.n_bias = q->n_logit_bias;
    const int64_t V = g4_engine_vocab(s->e);
    for (size_t i = 0; i < q->n_logit_bias; i++)
        if (q->logit_bias[i].id >= V)
            return g4_api_err_status(ae, G4_EINVAL, "logit_bias", "'logit_bias': token id %d is outside the vocabulary (0 to %lld)", q->logit_bias[i].id,
                                     (long long)V - 1);
    if (q->min_tokens > gp->max_new_tokens)
        return g4_api_err_status(ae, G4_EINVAL, "min_tokens", "'min_tokens' (%lld) must not be more than the tokens to generate (%lld)",
                                 (long long)q->min_tokens, (long long)gp->max_new_tokens);
    gp->stop_strings = (const char *const *)q->stops;
    gp->n_stop_strings = q->n_stops;
    gp->skip_special = q->parse_output ? 0 : 1;
    gp->ignore_eos = q->ignore_eos;
    gp->speculative = q->speculative;
    return 0;
}

/* Submits every prompt's choices: per prompt its choice 0 first (with the prompt's logprobs for
 * echo), the others after it; choice i of every prompt draws with the same seed as it would alone. */
static int submit_all(gen_job *j, g4_grammar *grammar, g4_api_err *ae) {
    g4_server *s = j->s;
    if (j->n > s->o.max_waiting) {
        if (j->n_parts > 1)
            return g4_api_err_status(ae, G4_EINVAL, "prompt", "%zu prompts with 'n' %d are %d sequences, more than the server queues at once (--max-waiting %d)",
                                     j->n_parts, j->per, j->n, s->o.max_waiting);
        return g4_api_err_status(ae, G4_EINVAL, "n", "'n' (%d) is more than the server queues at once (--max-waiting %d)", j->n, s->o.max_waiting);
    }
    for (size_t k = 0; k < j->n_parts; k++) {
        g4_gen_params gp;
        int rc = gen_params(s, &j->q, j->parts[k].n_prompt, &gp, ae);
        if (rc && j->n_parts > 1) name_prompt(ae, k);
        if (rc) return rc;
        gp.grammar = grammar;
        if (k == 0) { gp.images = j->im.pim; gp.n_images = j->im.n; }
        const uint64_t seed = gp.sampling.seed;
        for (int c = 0; c < j->per; c++) {
            member *m = &j->m[k * (size_t)j->per + (size_t)c];
            g4_sched_sub_opts x = {.logprobs = j->q.logprobs, .top_logprobs = j->q.top_logprobs, .notify = &j->note,
                                   .prompt_logprobs = c == 0 && j->q.echo && j->q.logprobs, .after = c ? m[-c].req : NULL};
            if (gp.sampling.has_seed) gp.sampling.seed = g4_sched_choice_seed(seed, c);
            g4_err err = {0};
            if (g4_sched_submit_ex(s->sched, j->parts[k].ids, j->parts[k].n_prompt, &gp, &x, &m->req, &err)) {
                if (err.code == G4_EBUSY && atomic_load(&s->stopping)) g4_api_err_refuse(ae, G4_API_SHUTTING_DOWN, NULL, "%s", err.msg);
                else g4_api_err_from(ae, &err, err.code == G4_ECONTEXT ? "max_tokens" : NULL);
                return ae->status;
            }
        }
    }
    return 0;
}

/* The echo text of a completion: the prompt as given, or its ids decoded as the answer is. */
static int echo_text(gen_job *j, size_t k, g4_api_err *ae) {
    if (!j->q.echo) return 0;
    part *p = &j->parts[k];
    const char *text = j->q.n_batch ? j->q.batch[k].text : j->q.prompt;
    const size_t len = j->q.n_batch ? j->q.batch[k].len : j->q.prompt_len;
    if (text) {
        if (!(p->echo = malloc(len + 1))) return g4_api_err_status(ae, G4_ENOMEM, NULL, "out of memory");
        memcpy(p->echo, text, len + 1);
        p->echo_len = len;
        return 0;
    }
    g4_err err = {0};
    if (g4_tokenizer_decode(j->s->tg.tok, p->ids, p->n_prompt, 1, &p->echo, &p->echo_len, &err)) return g4_api_err_from(ae, &err, "prompt");
    return 0;
}

/* ---- streaming ------------------------------------------------------------------------------- */

/* Seconds without a byte to the client before a keep-alive comment goes out. */
#define KEEPALIVE_S 1.0

static int stream_event(gen_job *j, int i, g4_sched_event *ev, g4_err *err) {
    member *m = &j->m[i];
    g4_api_err ae;
    int rc = 0;
    const int cancelled = ev->kind == G4_EV_DONE && !strcmp(ev->finish_reason, "cancelled");
    if (j->q.echo && !m->echoed && ev->kind != G4_EV_ERROR && !cancelled) { /* the prompt first, with its logprobs */
        m->echoed = 1;
        const size_t k = (size_t)(i / j->per);
        part *p = &j->parts[k];
        json_t *lp = NULL;
        if (!prompt_logprobs(j, k) && p->plp) {
            g4_lpj_completion_append(&m->lpc, j->s->tg.tok, p->plp, p->n_prompt, 1);
            lp = g4_lpj_completion_take(&m->lpc);
        }
        if ((rc = g4_sse_feed_choice(j->sse, i, p->echo, p->echo_len, lp, err))) return rc;
    }
    if (ev->kind == G4_EV_TEXT) {
        observe_token(j, ev);
        return g4_sse_feed_choice(j->sse, i, ev->text, ev->len, take_logprobs(j, i, ev->n_tokens), err);
    }
    m->done = 1;
    j->n_done++;
    if (ev->kind == G4_EV_ERROR) {
        engine_error(ev, &ae);
        g4_sse_error(j->sse, &ae);
        return 0;
    }
    if (cancelled) {
        observe_done(j, ev, "cancelled");
        g4_api_err_refuse(&ae, G4_API_SHUTTING_DOWN, NULL, "the generation was cancelled: the server is shutting down");
        g4_sse_error(j->sse, &ae);
        return 0;
    }
    m->fin = *ev;
    ev->text = NULL;
    g4_sse_end end = {.finish_reason = ev->finish_reason, .stop_sequence = stop_sequence(j, ev), .prompt_tokens = ev->prompt_tokens,
                      .completion_tokens = ev->completion_tokens, .cached_tokens = ev->cached_tokens};
    rc = g4_sse_finish_choice(j->sse, i, &end, take_logprobs(j, i, SIZE_MAX), err);
    observe_done(j, ev, rc ? ev->finish_reason : i == 0 ? g4_sse_finish_reason(j->sse) : ev->finish_reason);
    if (rc || j->n_done < j->n) return rc;
    /* every choice ended: usage counts each prompt once and every choice's tokens */
    end.completion_tokens = end.prompt_tokens = end.cached_tokens = 0;
    for (int k = 0; k < j->n; k++) {
        end.completion_tokens += j->m[k].fin.completion_tokens;
        if (k % j->per) continue;
        end.prompt_tokens += j->m[k].fin.prompt_tokens;
        end.cached_tokens += j->m[k].fin.cached_tokens;
    }
    return g4_sse_end_stream(j->sse, &end, err);
}

static long stream_read(void *user, char *buf, size_t max) {
    gen_job *j = user;
    for (;;) {
        if (g4_sse_pending(j->sse)) {
            j->t_out = now_s();
            return (long)g4_sse_take(j->sse, buf, max);
        }
        if (g4_sse_closed(j->sse)) return G4_HTTP_END;
        /* no byte for a second, whatever the events (queued, a long prefill, tokens that give no
         * text: special tokens, text the parser holds back): a comment keeps proxies patient,
         * and writing is what finds a client that went away */
        double idle = now_s() - j->t_out;
        if (idle >= KEEPALIVE_S) {
            if (g4_sse_comment(j->sse, "keep-alive")) return G4_HTTP_ABORT;
            continue;
        }
        g4_sched_event ev;
        int i;
        if (!next_event(j, (int)((KEEPALIVE_S - idle) * 1000) + 1, &i, &ev)) continue;
        g4_err err = {0};
        int rc = stream_event(j, i, &ev, &err);
        g4_sched_event_clear(&ev);
        if (rc) {
            g4_api_err ae;
            g4_api_err_from(&ae, &err, NULL);
            if (g4_sse_error(j->sse, &ae)) return G4_HTTP_ABORT;
        }
    }
}

/* The response is over: sent completely, or the client went away (then freeing the requests
 * cancels them, which frees their sequences and KV cache at the next token boundary). */
static void stream_done(void *user) {
    gen_job *j = user;
    for (int i = 0; i < j->n; i++)
        if (!j->m[i].done) g4_metrics_finished(j->s->metrics, "cancelled", 0, 0);
    job_free(j);
}

/* ---- whole answers --------------------------------------------------------------------------- */

static int collect(gen_job *j, g4_http_req *hr) {
    double t_check = now_s();
    int oom = 0;
    while (j->n_done < j->n) {
        g4_sched_event ev;
        int i;
        int got = next_event(j, 100, &i, &ev);
        if (now_s() - t_check > 0.1) {
            t_check = now_s();
            if (g4_http_client_gone(hr))
                for (int k = 0; k < j->n; k++) g4_sched_cancel(j->m[k].req);
        }
        if (!got) continue;
        member *m = &j->m[i];
        if (ev.kind == G4_EV_TEXT) {
            observe_token(j, &ev);
            if (m->len + ev.len + 1 > m->cap) {
                size_t c = m->cap ? m->cap * 2 : 1024;
                while (c < m->len + ev.len + 1) c *= 2;
                char *b = realloc(m->text, c);
                if (!b) oom = 1;
                else { m->text = b; m->cap = c; }
            }
            if (!oom) { memcpy(m->text + m->len, ev.text, ev.len); m->len += ev.len; m->text[m->len] = 0; }
            g4_sched_event_clear(&ev);
            continue;
        }
        m->fin = ev;
        m->done = 1;
        j->n_done++;
    }
    return oom;
}

/* One choice's logprobs JSON for a whole answer (a new reference, or NULL). */
static json_t *choice_logprobs(gen_job *j, int i) {
    if (!j->q.logprobs) return NULL;
    member *m = &j->m[i];
    if (j->api->chat_logprobs) {
        json_t *content = take_logprobs(j, i, SIZE_MAX);
        return json_pack("{s:o,s:n}", "content", content ? content : json_array(), "refusal");
    }
    const part *p = &j->parts[i / j->per];
    if (p->plp) g4_lpj_completion_append(&m->lpc, j->s->tg.tok, p->plp, p->n_prompt, 1);
    json_t *all = take_logprobs(j, i, SIZE_MAX); /* the prompt's (if any), then the answer's */
    return all ? all : g4_lpj_completion_take(&m->lpc);
}

static void answer_whole(gen_job *j, g4_http_req *hr, int thought) {
    g4_server *s = j->s;
    g4_api_err ae;
    int oom = collect(j, hr);
    for (int i = 0; i < j->n; i++) {
        const g4_sched_event *f = &j->m[i].fin;
        if (f->kind == G4_EV_ERROR || oom) {
            if (oom) g4_api_err_status(&ae, G4_ENOMEM, NULL, "out of memory");
            else engine_error(f, &ae);
            g4_srv_answer_error(s, hr, &j->rt, &ae);
            return;
        }
        if (!strcmp(f->finish_reason, "cancelled")) {
            for (int k = 0; k < j->n; k++) observe_done(j, &j->m[k].fin, "cancelled");
            if (atomic_load(&s->stopping)) g4_api_err_refuse(&ae, G4_API_SHUTTING_DOWN, NULL, "the generation was cancelled: the server is shutting down");
            else g4_api_err_status(&ae, G4_ECANCELED, NULL, "the generation was cancelled");
            g4_srv_answer_error(s, hr, &j->rt, &ae);
            return;
        }
    }
    for (size_t k = 0; k < j->n_parts; k++)
        if (prompt_logprobs(j, k)) {
            g4_api_err_status(&ae, G4_ENOMEM, NULL, "the prompt's logprobs are missing");
            g4_srv_answer_error(s, hr, &j->rt, &ae);
            return;
        }
    const size_t n = (size_t)j->n;
    g4_api_output *po = calloc(n, sizeof *po);
    int *parsed = calloc(n, sizeof *parsed);
    g4_api_result *res = calloc(n, sizeof *res);
    json_t **lps = calloc(n, sizeof *lps);
    char **joined = calloc(n, sizeof *joined);
    if (!po || !parsed || !res || !lps || !joined) {
        free(po); free(parsed); free(res); free(lps); free(joined);
        g4_api_err_status(&ae, G4_ENOMEM, NULL, "out of memory");
        g4_srv_answer_error(s, hr, &j->rt, &ae);
        return;
    }
    const long long created = (long long)time(NULL);
    for (int i = 0; i < j->n; i++) {
        member *m = &j->m[i];
        const part *p = &j->parts[i / j->per];
        const g4_sched_event *f = &m->fin;
        g4_err err = {0};
        parsed[i] = j->q.parse_output && g4_api_parse_output(m->text ? m->text : "", m->len, thought, &po[i], &err) == G4_OK;
        const char *text = m->text ? m->text : "";
        size_t tl = m->len;
        if (p->echo && (joined[i] = malloc(p->echo_len + m->len + 1))) { /* echo: the prompt, then the answer */
            memcpy(joined[i], p->echo, p->echo_len);
            memcpy(joined[i] + p->echo_len, text, m->len);
            joined[i][p->echo_len + m->len] = 0;
            text = joined[i];
            tl += p->echo_len;
        }
        lps[i] = choice_logprobs(j, i);
        res[i] = (g4_api_result){.id = j->id, .model = s->model_id, .created = created, .text = text, .text_len = tl,
                                 .parsed = parsed[i] ? &po[i] : NULL, .finish_reason = f->finish_reason, .prompt_tokens = f->prompt_tokens,
                                 .completion_tokens = f->completion_tokens, .cached_tokens = f->cached_tokens, .ttft_ms = f->ttft_ms,
                                 .tokens_per_s = f->tokens_per_s, .index = i, .logprobs = lps[i], .stop_sequence = stop_sequence(j, f),
                                 .new_prompt = i % j->per == 0};
        observe_done(j, f, g4_api_finish_reason(&res[i]));
    }
    g4_srv_answer_json(s, hr, &j->rt, 200, j->api->render(res, n, j->q.extra));
    for (int i = 0; i < j->n; i++) {
        if (parsed[i]) g4_api_output_free(&po[i]);
        json_decref(lps[i]);
        free(joined[i]);
    }
    free(po); free(parsed); free(res); free(lps); free(joined);
}

/* ---- the route ------------------------------------------------------------------------------- */

void g4_srv_generate(g4_server *s, g4_http_req *hr, const g4_srv_route *ep) {
    size_t blen;
    const char *body = g4_http_body(hr, &blen);
    g4_api_err ae;
    gen_job *j = calloc(1, sizeof *j);
    if (!j) {
        g4_api_err_status(&ae, G4_ENOMEM, NULL, "out of memory");
        g4_srv_answer_error(s, hr, ep, &ae);
        return;
    }
    g4_sched_notify_init(&j->note);
    j->s = s;
    j->rt = *ep;
    j->api = ep->api;
    if (parse_any(j->api, hr, body, blen, &j->q, &ae)) {
        job_free(j);
        g4_srv_answer_error(s, hr, ep, &ae);
        return;
    }
    j->per = j->q.n > 1 ? j->q.n : 1;
    const size_t np = j->q.n_batch ? j->q.n_batch : 1;
    j->n = (int)np * j->per;
    int thought = 0, rc = 0;
    if (!(j->m = calloc((size_t)j->n, sizeof *j->m))) rc = g4_api_err_status(&ae, G4_ENOMEM, NULL, "out of memory");
    for (int i = 0; !rc && j->q.logprobs && i < j->n; i++) g4_lpj_completion_init(&j->m[i].lpc);
    if (!rc) rc = g4_srv_model_check(s, j->q.model, j->q.model_len, &ae);
    if (!rc && j->q.stream && !j->api->sse) rc = g4_api_err_status(&ae, G4_EUNSUPPORTED, "stream", "%s does not stream", j->api->path);
    if (!rc) rc = make_parts(j, blen, &thought, &ae);
    if (!rc) rc = prepare_images(j, hr, &ae);
    g4_grammar *grammar = NULL; /* response_format / tool_choice (docs/structured-output.md) */
    if (!rc) rc = g4_srv_compile_output(s, hr, &j->q, thought, &grammar, &ae);
    for (size_t k = 0; !rc && k < j->n_parts; k++) rc = echo_text(j, k, &ae);
    j->t0 = now_s();
    if (!rc) rc = submit_all(j, grammar, &ae);
    g4_grammar_release(grammar); /* each choice's request holds its own */
    size_t n = 0;
    for (size_t k = 0; k < j->n_parts; k++) n += j->parts[k].n_prompt;
    if (rc) {
        job_free(j);
        g4_srv_answer_error(s, hr, ep, &ae);
        return;
    }
    make_id(s, j->api, j->id, sizeof j->id);
    if (!j->q.stream) {
        answer_whole(j, hr, thought);
        job_free(j);
        return;
    }
    g4_sse_opts so = {.shape = j->api->sse, .kind = j->api->kind, .id = j->id, .model = s->model_id, .created = (long long)time(NULL), .include_usage = j->q.include_usage,
                      .parse_output = j->q.parse_output, .start_in_thought = thought, .n_choices = j->n, .prompt_tokens = n,
                      .extra = j->q.extra};
    g4_err err = {0};
    if (g4_sse_create(&so, &j->sse, &err)) {
        job_free(j);
        g4_api_err_from(&ae, &err, NULL);
        g4_srv_answer_error(s, hr, ep, &ae);
        return;
    }
    j->t_out = now_s();
    static const char *const hdr[] = {"Cache-Control", "no-cache", "X-Accel-Buffering", "no", NULL, NULL};
    g4_metrics_request(s->metrics, ep->endpoint, 200);
    g4_http_send_stream(hr, 200, "text/event-stream", stream_read, stream_done, j, hdr);
}

/* POST /v1/messages/count_tokens: the prompt's length as a /v1/messages request would have it. */
void g4_srv_count_tokens(g4_server *s, g4_http_req *hr, const g4_srv_route *ep) {
    size_t blen;
    const char *body = g4_http_body(hr, &blen);
    g4_api_err ae;
    g4_api_request q;
    int rc = g4_anth_check_version(g4_http_header(hr, "anthropic-version"), &ae);
    if (!rc) rc = g4_anth_parse(body, blen, 1, &q, &ae);
    if (rc) { g4_srv_answer_error(s, hr, ep, &ae); return; }
    int32_t *ids = NULL;
    size_t n = 0;
    int thought;
    g4_api_prompt none = {0};
    rc = g4_srv_model_check(s, q.model, q.model_len, &ae);
    if (!rc) rc = prompt_ids(s, q.chat, &none, 0, blen, &ids, &n, &thought, &ae);
    g4_srv_images im = {0};
    if (!rc) rc = g4_srv_images_prepare(s, hr, &q, &ids, &n, &im, 0, &ae); /* an image counts its soft tokens */
    g4_srv_images_free(&im);
    g4_api_request_free(&q);
    free(ids);
    if (rc) { g4_srv_answer_error(s, hr, ep, &ae); return; }
    g4_srv_answer_json(s, hr, ep, 200, json_pack("{s:I}", "input_tokens", (json_int_t)n));
}
