/* scheduler.c — continuous batching over one engine (see scheduler.h).
 *
 * One thread owns the engine. Each step: drop cancelled sequences, admit waiting requests
 * (FIFO) while a sequence slot and the KV pages for their uncached prompt are free, then build
 * one batch — a decode token for every sequence that is generating, then prefill chunks of
 * admitted prompts up to the batch size — run it, and sample each sequence that produced
 * logits. A step the pool cannot hold preempts the newest sequence and is built again.
 * Requests talk to the thread only through their event queues and a cancel flag. */
#include "engine/scheduler.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/fault.h"
#include "engine/images.h"
#include "engine/speculate.h"
#include "grammar/grammar.h"
#include "text/stop_strings.h"

enum { ST_WAITING, ST_PREFILL, ST_DECODE, ST_DONE };

typedef struct ev_node { g4_sched_event ev; struct ev_node *next; } ev_node;

/* An image of a request's prompt (g4_prompt_image): its block, and its soft tokens once given
 * or encoded (kept until the request ends: a preempted request resumes without encoding again). */
typedef struct req_image {
    int64_t pos;
    int n_tok;
    float *pixels;            /* [ph * pw][patch_dim] (NULL when soft tokens were given) */
    int32_t *ppos;            /* [ph * pw][2] */
    int ph, pw, patch_dim;
    float *soft;              /* [n_tok][H] */
} req_image;

struct g4_sched_req {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    ev_node *head, *tail;
    int finished;             /* DONE/ERROR queued */
    ev_node *term;            /* made at submit: the DONE or ERROR event can always be queued */
    char *term_msg;           /* [G4_ERR_MSG_MAX] made at submit: the ERROR event's message */
    atomic_int cancelled;
    atomic_int refs;          /* client + scheduler */
    /* scheduler side */
    int32_t *toks;            /* [n_prompt + max_new_tokens]: the prompt, then the generated ids */
    int32_t *gen;             /* toks + n_prompt */
    size_t n_prompt, n_prefilled, n_gen;
    size_t n_target;          /* positions to prefill: the prompt, or after a preemption prompt + generated */
    size_t n_cached;          /* prompt tokens the prefix cache gave at the first admission */
    int admitted;             /* admitted once (a later admission is a resumption) */
    uint64_t admit_no;        /* order of admission: the newest is preempted first */
    g4_gen_params p;
    char **stops;
    int state, seq;
    int32_t next_token;       /* sampled, to be fed */
    g4_sampler *smp;
    g4_penalty *pen;          /* NULL when the request has no penalties, bias or min_tokens */
    g4_matcher *cm;           /* constrained decoding (g4_gen_params.grammar): the output's matcher */
    g4_detok *dt;
    g4_stop_strings *ss;
    double t_submit, t_first, t_last;
    struct g4_sched_req *next_wait;
    /* extras (g4_sched_sub_opts) */
    g4_sched_notify *notify;  /* under mu: cleared when the client lets go */
    g4_sched_token_fn on_token;
    void *on_token_user;
    int32_t *stop_ids;        /* [p.n_stop_ids] the request's copy */
    struct g4_sched_req *after; /* holds a reference until this one is admitted */
    int prompt_done;          /* the prompt was computed once (or the request ended) */
    int logprobs, top_logprobs;
    g4_token_logprob *lps;    /* [n_lps] under mu: the generated tokens' */
    size_t n_lps, cap_lps;
    g4_token_logprob *plp;    /* [n_prompt] when prompt logprobs are wanted */
    int plp_done;             /* under mu: plp complete */
    /* speculative decoding (speculate.h) */
    int spec_k;               /* drafts per round at most (0: none) */
    int n_draft;              /* this step's drafts, verified after it */
    int32_t draft[G4_SPEC_MAX_K];
    float *hid;               /* MTP: [hidden] the target's at the last computed position */
    int has_hid, tentative;
    g4_spec_stat st;
    int st_seeded;            /* st started from the scheduler's estimate */
    req_image *img;           /* [n_img] the prompt's images, in position order */
    int n_img;
};

struct g4_sched {
    g4_textgen *tg;
    g4_engine *e;
    g4_sched_opts o;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    g4_sched_req *wait_head, *wait_tail;
    int n_waiting;
    g4_sched_req **running;   /* [max_seqs] admitted (prefill or decode) */
    int n_running, max_running;
    int stop, closed, drain;
    g4_sched_stats stats;
    uint64_t n_admitted;
    /* step buffers */
    int32_t *ids, *pos, *seqs;
    uint8_t *want;
    const float **embd;       /* [max_batch] image tokens' soft token rows (g4_batch.embd) */
    int32_t *span;            /* [max_batch] image tokens' block ends (g4_batch.span_end) */
    g4_sched_req *image_wait; /* its next image block did not fit a step: goes first, without drafts */
    g4_sched_req **owner;     /* [max_batch] request of each logits row */
    int32_t *rowpos;          /* [max_batch] position of each logits row */
    g4_sched_req **pre;       /* [max_running] requests prefilling in this step */
    size_t *take;             /* [max_running] their tokens in it */
    float *logits;            /* [rows_cap][V] */
    float *hidden;            /* MTP: [rows_cap][H] the rows' final-normed hidden states */
    const g4_spec_cfg *spec;
    g4_spec_costs costs;      /* step and draft times, for the policy */
    g4_spec_stat all;         /* acceptance over every request: a new request's starting estimate */
    int64_t H;
    int rows_cap;             /* logits rows: max_running (x (1 + k) drafting); max_batch once prompt logprobs are wanted */
    int64_t V;
    int max_batch;
    g4_vocab *vocab;          /* constrained decoding: the tokenizer's trie, made at the first such request */
    pthread_mutex_t vocab_mu;
    /* g4_sched_run_job: one caller at a time (job_mu); the loop runs it between steps */
    pthread_mutex_t job_mu;
    pthread_cond_t job_cv;
    g4_sched_job_fn job_fn;
    void *job_arg;
    int job_rc, job_done;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- events ------------------------------------------------------------------------------ */

/* Queues an event. A text event needs memory for its node: G4_ENOMEM when there is none (the
 * caller then ends the request with an error: a client never gets an answer with text missing).
 * The end (DONE or ERROR) takes the node made at submit, so it always reaches the client. */
static int push(g4_sched_req *r, const g4_sched_event *ev) {
    ev_node *n;
    if (ev->kind == G4_EV_TEXT) {
        if (!(n = g4_fault_hit("sched.push") ? NULL : malloc(sizeof *n))) return G4_ENOMEM;
    } else {
        if (!(n = r->term)) return G4_OK; /* a request ends once */
        r->term = NULL;
    }
    n->ev = *ev;
    n->next = NULL;
    pthread_mutex_lock(&r->mu);
    if (r->tail) r->tail->next = n; else r->head = n;
    r->tail = n;
    if (ev->kind != G4_EV_TEXT) r->finished = 1;
    pthread_cond_signal(&r->cv);
    if (r->notify) { /* lock order: r->mu, then the notify's (its waiter takes no r->mu under it) */
        pthread_mutex_lock(&r->notify->mu);
        r->notify->count++;
        pthread_cond_broadcast(&r->notify->cv);
        pthread_mutex_unlock(&r->notify->mu);
    }
    pthread_mutex_unlock(&r->mu);
    return G4_OK;
}

void g4_sched_notify_init(g4_sched_notify *w) {
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    w->count = 0;
}

void g4_sched_notify_destroy(g4_sched_notify *w) {
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
}

void g4_sched_notify_wait(g4_sched_notify *w, uint64_t *seen, int timeout_ms) {
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += timeout_ms / 1000;
    dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (dl.tv_nsec >= 1000000000L) { dl.tv_sec++; dl.tv_nsec -= 1000000000L; }
    pthread_mutex_lock(&w->mu);
    while (w->count == *seen && timeout_ms != 0)
        if (pthread_cond_timedwait(&w->cv, &w->mu, &dl) != 0) break;
    *seen = w->count;
    pthread_mutex_unlock(&w->mu);
}

uint64_t g4_sched_choice_seed(uint64_t seed, int i) {
    if (i == 0) return seed;
    uint64_t z = seed + (uint64_t)i * 0x9E3779B97F4A7C15ull; /* splitmix64 step i */
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* G4_ENOMEM (err set) when the text could not be queued. */
static int push_text(g4_sched_req *r, const char *s, size_t n, int32_t token, g4_err *err) {
    if (n == 0) return G4_OK;
    g4_sched_event ev = {.kind = G4_EV_TEXT, .len = n, .token = token, .n_tokens = r->n_gen};
    ev.text = g4_fault_hit("sched.text") ? NULL : malloc(n + 1);
    if (ev.text) {
        memcpy(ev.text, s, n);
        ev.text[n] = 0;
        if (push(r, &ev) == G4_OK) return G4_OK;
    }
    free(ev.text);
    return g4_err_set(err, G4_ENOMEM, "out of memory for the text of token %zu: the answer cannot be completed", r->n_gen);
}

int g4_sched_next(g4_sched_req *r, g4_sched_event *ev, int timeout_ms) {
    memset(ev, 0, sizeof *ev);
    pthread_mutex_lock(&r->mu);
    if (!r->head && timeout_ms != 0) {
        struct timespec dl;
        clock_gettime(CLOCK_REALTIME, &dl);
        if (timeout_ms > 0) {
            dl.tv_sec += timeout_ms / 1000;
            dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
            if (dl.tv_nsec >= 1000000000L) { dl.tv_sec++; dl.tv_nsec -= 1000000000L; }
        }
        while (!r->head) {
            if (timeout_ms < 0) pthread_cond_wait(&r->cv, &r->mu);
            else if (pthread_cond_timedwait(&r->cv, &r->mu, &dl) != 0) break;
        }
    }
    ev_node *n = r->head;
    if (n) {
        r->head = n->next;
        if (!r->head) r->tail = NULL;
    }
    pthread_mutex_unlock(&r->mu);
    if (!n) return 0;
    *ev = n->ev;
    free(n);
    return 1;
}

void g4_sched_event_clear(g4_sched_event *ev) {
    free(ev->text);
    memset(ev, 0, sizeof *ev);
}

/* ---- request lifetime -------------------------------------------------------------------- */

static void req_unref(g4_sched_req *r) {
    if (atomic_fetch_sub(&r->refs, 1) != 1) return;
    ev_node *n = r->head;
    while (n) { ev_node *x = n->next; free(n->ev.text); free(n); n = x; }
    free(r->term);
    free(r->term_msg);
    g4_sampler_free(r->smp);
    g4_penalty_free(r->pen);
    g4_matcher_free(r->cm);
    g4_detok_free(r->dt);
    g4_stop_strings_free(r->ss);
    if (r->after) req_unref(r->after);
    free(r->lps);
    free(r->plp);
    free(r->hid);
    free(r->stop_ids);
    for (int i = 0; i < r->n_img; i++) { free(r->img[i].pixels); free(r->img[i].ppos); free(r->img[i].soft); }
    free(r->img);
    for (size_t i = 0; i < r->p.n_stop_strings; i++) free(r->stops[i]);
    free(r->stops);
    free(r->toks);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(r);
}

void g4_sched_cancel(g4_sched_req *r) { atomic_store(&r->cancelled, 1); }

void g4_sched_req_free(g4_sched_req *r) {
    if (!r) return;
    pthread_mutex_lock(&r->mu);
    r->notify = NULL; /* the client's notify may go away once this returns */
    pthread_mutex_unlock(&r->mu);
    g4_sched_cancel(r);
    req_unref(r);
}

/* ---- the loop ---------------------------------------------------------------------------- */

static void fail_req(g4_sched_req *r, const g4_err *err);

/* The request ends with the error; its sequence is freed. */
static void fail_seq(g4_sched *s, g4_sched_req *r, const g4_err *err) {
    fail_req(r, err);
    g4_engine_seq_close(s->e, r->seq);
    r->seq = -1;
}

/* The text the detokenizer and the stop matcher held back, queued (G4_OK), or the error that
 * kept it from the client; *reason becomes "stop" when a stop string ends in it. */
static int flush_text(g4_sched_req *r, const char **reason, g4_err *err) {
    char *rest = NULL;
    size_t rl = 0;
    int rc = g4_fault_hit("sched.flush") ? g4_err_set(err, G4_ENOMEM, "detok: out of memory") : g4_detok_flush(r->dt, &rest, &rl, err);
    if (rc == G4_OK) {
        const char *emit = rest;
        size_t elen = rl;
        int st = r->ss ? g4_stop_strings_feed_ex(r->ss, rest, rl, g4_penalty_stops_live(r->pen), &emit, &elen, err) : 0;
        if (st < 0) rc = -st;
        else rc = push_text(r, emit, elen, -1, err);
        if (rc == G4_OK && st == 1) *reason = "stop";
        else if (rc == G4_OK && st == 0 && r->ss && g4_stop_strings_finish(r->ss, &emit, &elen) == 0) rc = push_text(r, emit, elen, -1, err);
    }
    free(rest);
    return rc;
}

static void finish(g4_sched *s, g4_sched_req *r, const char *reason) {
    if (r->state == ST_DONE) return;
    g4_err err = {0};
    /* release what the detokenizer and the stop matcher held back: text that cannot be is an
     * error, never a shorter answer */
    if (r->dt && strcmp(reason, "cancelled") != 0 && !(r->ss && g4_stop_strings_matched(r->ss) >= 0) && flush_text(r, &reason, &err)) {
        fail_seq(s, r, &err);
        return;
    }
    g4_sched_event ev = {.kind = G4_EV_DONE, .finish_reason = reason, .prompt_tokens = r->n_prompt, .completion_tokens = r->n_gen,
                         .cached_tokens = r->n_cached, .stop_index = -1};
    if (!strcmp(reason, "stop") && r->ss) ev.stop_index = g4_stop_strings_matched(r->ss);
    r->prompt_done = 1;
    ev.ttft_ms = r->t_first > 0 ? (r->t_first - r->t_submit) * 1e3 : 0;
    ev.tokens_per_s = r->n_gen > 1 && r->t_last > r->t_first ? (double)(r->n_gen - 1) / (r->t_last - r->t_first) : 0;
    push(r, &ev);
    if (r->seq >= 0) g4_engine_seq_close(s->e, r->seq);
    r->seq = -1;
    r->state = ST_DONE;
}

/* The ERROR event takes the message buffer made at submit (so it needs no memory now). */
static void fail_req(g4_sched_req *r, const g4_err *err) {
    g4_sched_event ev = {.kind = G4_EV_ERROR, .code = err->code ? err->code : G4_EIO};
    r->prompt_done = 1;
    if ((ev.text = r->term_msg)) {
        r->term_msg = NULL;
        snprintf(ev.text, G4_ERR_MSG_MAX, "%s", err->msg[0] ? err->msg : g4_status_name(ev.code));
        ev.len = strlen(ev.text);
    }
    push(r, &ev);
    r->state = ST_DONE;
}

/* The request's draw from one logits row: through its constraint's mask when it has one, then
 * its penalties, logit bias and min_tokens (penalty.h; vLLM's order), then the sampler. The row
 * is adjusted in place, so logprobs and on_token see the distribution the token is drawn from. */
static int32_t draw(g4_sched_req *r, float *row, int V, g4_err *err) {
    const uint64_t *mask = r->cm ? g4_matcher_mask(r->cm, err) : NULL;
    if (r->cm && !mask) return -1;
    if (mask) g4_logits_mask(row, V, mask);
    g4_penalty_apply(r->pen, row, V);
    const int32_t id = g4_sampler_sample(r->smp, row, V);
    if (id < 0)
        g4_err_set(err, G4_EINVAL, "%s%s", mask ? "no token the output format allows has a finite logit" : "no finite logit to sample from",
                   r->p.penalty.n_bias ? " (after logit_bias)" : "");
    else if (r->on_token && r->on_token(r->on_token_user, id, row)) g4_sched_cancel(r);
    return id;
}

/* One sampled token (with its logprobs when wanted): stop id, text, stop strings, length. */
static void accept(g4_sched *s, g4_sched_req *r, int32_t id, const g4_token_logprob *lp, double t) {
    g4_err cerr;
    if (r->cm && g4_matcher_accept(r->cm, id, &cerr)) { /* drawn through the mask: cannot happen */
        fail_seq(s, r, &cerr);
        return;
    }
    if (g4_penalty_accept(r->pen, id, &cerr)) { /* the penalties' state: every emitted token (an accepted draft too; a rejected one never comes here) */
        fail_req(r, &cerr);
        g4_engine_seq_close(s->e, r->seq);
        r->seq = -1;
        return;
    }
    if (r->t_first == 0) r->t_first = t;
    r->t_last = t;
    pthread_mutex_lock(&r->mu);
    r->gen[r->n_gen++] = id;
    if (lp && r->n_lps == r->cap_lps) { /* grows before the text event that the entry precedes */
        size_t c = r->cap_lps ? r->cap_lps * 2 : 64;
        g4_token_logprob *q = realloc(r->lps, c * sizeof *q);
        if (q) { r->lps = q; r->cap_lps = c; }
    }
    const int lost = lp && r->n_lps == r->cap_lps;
    if (!lost && lp) r->lps[r->n_lps++] = *lp;
    pthread_mutex_unlock(&r->mu);
    if (lost) {
        g4_err e;
        g4_err_set(&e, G4_ENOMEM, "out of memory for the logprobs of %zu tokens", r->n_gen);
        fail_seq(s, r, &e);
        return;
    }
    s->stats.generated_tokens++;
    if (!r->p.ignore_eos && g4_gen_config_is_eos(&s->tg->gen, id)) { finish(s, r, "stop"); return; }
    for (size_t i = 0; i < r->p.n_stop_ids; i++)
        if (id == r->stop_ids[i]) { finish(s, r, "stop"); return; }
    char *piece = NULL;
    size_t plen = 0;
    g4_err err = {0};
    /* a token whose text cannot reach the client ends the request with an error */
    int rc = !r->dt ? G4_OK : g4_fault_hit("sched.detok") ? g4_err_set(&err, G4_ENOMEM, "detok: out of memory") : g4_detok_push(r->dt, id, &piece, &plen, &err);
    const char *emit = piece;
    size_t elen = plen;
    int st = rc == G4_OK && r->ss ? g4_stop_strings_feed_ex(r->ss, piece, plen, g4_penalty_stops_live(r->pen), &emit, &elen, &err) : 0;
    if (st < 0) rc = -st;
    if (rc == G4_OK) rc = push_text(r, emit, elen, id, &err);
    free(piece);
    if (rc) { fail_seq(s, r, &err); return; }
    if (st == 1) { finish(s, r, "stop"); return; }
    if ((int64_t)r->n_gen >= r->p.max_new_tokens) { finish(s, r, "length"); return; }
    r->next_token = id;
    r->state = ST_DECODE;
}

static void unqueue_head(g4_sched *s) {
    s->wait_head = s->wait_head->next_wait;
    if (!s->wait_head) s->wait_tail = NULL;
    s->n_waiting--;
}

/* FIFO while a slot is free and the pool has the pages for the head request's uncached
 * positions plus one step of growth for every running sequence (the first request is always
 * admitted: the engine refused pools that cannot hold one sequence of max_ctx). */
static void admit(g4_sched *s) {
    while (s->wait_head && s->n_running < s->max_running) {
        g4_sched_req *r = s->wait_head;
        if (atomic_load(&r->cancelled)) {
            unqueue_head(s);
            r->seq = -1;
            finish(s, r, "cancelled");
            req_unref(r);
            continue;
        }
        if (r->after && !r->after->prompt_done) break; /* its prompt is being computed: share it */
        /* prompt logprobs need the logits of every prompt position: no cached prefix for them */
        const int use_cache = !(r->plp && !r->plp_done);
        if (r->plp && !r->plp_done && s->rows_cap < s->max_batch) { /* a row per token of a step, at most */
            float *q = realloc(s->logits, sizeof(float) * (size_t)s->V * (size_t)s->max_batch);
            if (!q) {
                g4_err e;
                g4_err_set(&e, G4_ENOMEM, "out of memory for the logits of the prompt's positions");
                unqueue_head(s);
                fail_req(r, &e);
                req_unref(r);
                continue;
            }
            s->logits = q;
            s->rows_cap = s->max_batch;
        }
        int64_t taken = 0;
        const int64_t n = (int64_t)r->n_target;
        /* a cached prefix may end inside an image block: its positions there are exact (they
         * were computed with the whole block, the same pixels), and the block's rest goes into
         * one step (prefill_take), seeing them */
        const int64_t hit = use_cache ? g4_engine_prefix_peek(s->e, r->toks, n, &taken) : 0;
        const int64_t need = g4_engine_kv_pages_to_grow(s->e, hit, n - hit) + taken +
                             (int64_t)(s->n_running + 1) * g4_engine_kv_pages_to_grow(s->e, 0, 1);
        if (s->n_running > 0 && need > g4_engine_kv_avail_pages(s->e)) break; /* wait until running sequences free pages */
        g4_err err = {0};
        int seq;
        int64_t cached;
        int rc = g4_engine_seq_open_cached(s->e, (int64_t)r->n_prompt + r->p.max_new_tokens, use_cache ? r->toks : NULL, n, &seq, &cached, &err);
        if (rc == G4_EBUSY) break;
        unqueue_head(s);
        if (rc) { fail_req(r, &err); req_unref(r); continue; }
        if (r->after) { req_unref(r->after); r->after = NULL; }
        r->seq = seq;
        g4_engine_seq_hint(s->e, seq, (int64_t)r->n_prompt); /* a later request with this prompt hits here (--kv-cache-dir) */
        r->n_prefilled = (size_t)cached;
        if (!r->admitted) r->n_cached = (size_t)cached;
        r->admitted = 1;
        r->admit_no = ++s->n_admitted;
        r->state = ST_PREFILL;
        r->tentative = r->has_hid = r->n_draft = 0;
        s->running[s->n_running++] = r;
    }
}

/* The pool cannot hold the step: the newest sequence gives its blocks back (they stay in the
 * prefix cache) and waits at the head of the queue to resume with everything it has so far
 * (prompt and generated tokens: the next logits come out of the same positions, so the same
 * bits and the same sample). Returns 0 when only one sequence runs (nothing to preempt). */
static int preempt(g4_sched *s) {
    if (s->n_running < 2) return 0;
    int k = 0;
    for (int i = 1; i < s->n_running; i++)
        if (s->running[i]->admit_no > s->running[k]->admit_no) k = i;
    g4_sched_req *r = s->running[k];
    s->running[k] = s->running[--s->n_running];
    g4_engine_seq_close(s->e, r->seq);
    r->seq = -1;
    r->n_target = r->state == ST_DECODE ? r->n_prompt + r->n_gen : r->n_target;
    r->state = ST_WAITING;
    r->next_wait = s->wait_head;
    s->wait_head = r;
    if (!s->wait_tail) s->wait_tail = r;
    s->n_waiting++;
    s->stats.preemptions++;
    return 1;
}

/* ---- speculative decoding ------------------------------------------------------------------ */

static double wall_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* This step's drafts: which decoding sequences verify how many (r->n_draft), by the cost model
 * (speculate.h) or, with spec->always, every one that has drafts. MTP drafts are made here. */
static void spec_plan(g4_sched *s) {
    g4_sched_req *cand[s->max_running > 0 ? s->max_running : 1];
    double rate[s->max_running > 0 ? s->max_running : 1];
    int avail[s->max_running > 0 ? s->max_running : 1], take[s->max_running > 0 ? s->max_running : 1];
    int n = 0, decoding = 0, prefill = 0;
    const int mtp = s->spec->method == G4_SPEC_MTP;
    for (int i = 0; i < s->n_running; i++) {
        g4_sched_req *r = s->running[i];
        r->n_draft = 0;
        if (r->state == ST_PREFILL) {
            const size_t left = r->n_target - r->n_prefilled;
            prefill += (int)(left < (size_t)s->o.prefill_chunk ? left : (size_t)s->o.prefill_chunk);
        }
        if (r->state != ST_DECODE) continue;
        decoding++;
        /* a round emits up to drafts + 1 tokens: no more than the request has left */
        int k = r->spec_k, left = (int)(r->p.max_new_tokens - (int64_t)r->n_gen) - 1;
        if (k > left) k = left;
        if (k <= 0 || (mtp && !r->has_hid)) continue;
        avail[n] = mtp ? k : g4_spec_ngram(r->toks, (int64_t)(r->n_prompt + r->n_gen), s->spec->n, k, r->draft);
        if (avail[n] <= 0) continue;
        if (!r->st_seeded) { g4_spec_stat_seed(&r->st, &s->all); r->st_seeded = 1; }
        rate[n] = g4_spec_rate(&r->st);
        cand[n++] = r;
    }
    if (n == 0) return;
    int room = s->max_batch - decoding, rows = s->rows_cap - s->n_running;
    if (rows < room) room = rows;
    int base = decoding + (prefill < room ? prefill : room);
    if (s->spec->always) {
        for (int i = 0; i < n; i++) {
            take[i] = avail[i] < room ? avail[i] : room;
            room -= take[i];
        }
    } else {
        g4_spec_choose(&s->costs, base, decoding, n, rate, avail, room, mtp, take);
    }
    if (mtp) {
        /* one draft call for every chosen sequence, as many steps as the longest needs */
        int32_t seq[n], tok[n], ids[n * G4_SPEC_MAX_K];
        g4_sched_req *who[n];
        int m = 0, k = 0;
        for (int i = 0; i < n; i++) {
            if (!take[i]) continue;
            who[m] = cand[i];
            seq[m] = cand[i]->seq;
            tok[m] = cand[i]->next_token;
            memcpy(s->hidden + (size_t)m * (size_t)s->H, cand[i]->hid, sizeof(float) * (size_t)s->H);
            if (take[i] > k) k = take[i];
            m++;
        }
        if (m == 0) goto idle;
        g4_err err = {0};
        const double t0 = wall_s();
        if (g4_engine_draft(s->e, m, seq, tok, s->hidden, k, ids, NULL, &err)) return; /* no drafts this step (the step will say why) */
        g4_spec_costs_add_draft(&s->costs, m, k, wall_s() - t0);
        for (int j = 0, i = 0; i < n; i++) {
            if (!take[i]) continue;
            int c = 0;
            while (c < take[i] && ids[j * k + c] >= 0) { who[j]->draft[c] = ids[j * k + c]; c++; }
            take[i] = c;
            j++;
        }
    }
idle:
    for (int i = 0; i < n; i++) {
        cand[i]->n_draft = take[i];
        if (!take[i]) g4_spec_stat_idle(&cand[i]->st);
        else if (!cand[i]->tentative) {
            g4_engine_seq_tentative(s->e, cand[i]->seq, 1);
            cand[i]->tentative = 1;
        }
    }
}

/* Verifies the m drafts of r against its logits rows i..i+m: the request's sampler draws from
 * each row in order (exactly one draw per emitted token, as without drafts) and the drafts are
 * accepted while the draws equal them; the first draw that differs is the target's own token.
 * The rejected positions are rolled back. Returns the rows used after the first. */
static int spec_verify(g4_sched *s, g4_sched_req *r, int i, double t) {
    const int m = r->n_draft;
    int e = 0, acc = 0;
    for (; e <= m && r->state == ST_DECODE; e++) {
        float *row = s->logits + (size_t)(i + e) * (size_t)s->V;
        g4_err err;
        const int32_t id = draw(r, row, (int)s->V, &err);
        if (id < 0) {
            fail_req(r, &err);
            g4_engine_seq_close(s->e, r->seq);
            r->seq = -1;
            return m;
        }
        g4_token_logprob lp;
        if (r->logprobs) g4_logprobs_row(row, (int)s->V, r->p.sampling.temperature, id, r->top_logprobs, &lp);
        accept(s, r, id, r->logprobs ? &lp : NULL, t);
        if (e == m || id != r->draft[e]) { e++; break; }
        acc++; /* a draft emitted (the request may end on it: a stop id or string) */
    }
    /* e tokens emitted: acc drafts, then (unless the request ended on a draft) the target's own */
    s->stats.draft_proposed += (uint64_t)m;
    s->stats.draft_accepted += (uint64_t)acc;
    g4_spec_stat_update(&r->st, m, acc);
    g4_spec_stat_update(&s->all, m, acc);
    if (r->hid && r->state == ST_DECODE) {
        memcpy(r->hid, s->hidden + (size_t)(i + e - 1) * (size_t)s->H, sizeof(float) * (size_t)s->H);
        r->has_hid = 1;
    }
    return m;
}

/* After a step: every tentative sequence is rolled back to what it accepted (and its confirmed
 * blocks go to the prefix cache). */
static void spec_settle(g4_sched *s) {
    for (int i = 0; i < s->n_running; i++) {
        g4_sched_req *r = s->running[i];
        if (!r->tentative || r->state != ST_DECODE) continue;
        g4_err err = {0};
        if (g4_engine_seq_truncate(s->e, r->seq, (int64_t)(r->n_prompt + r->n_gen) - 1, r->toks, &err)) {
            fail_req(r, &err);
            g4_engine_seq_close(s->e, r->seq);
            r->seq = -1;
        }
    }
}

/* Soft tokens for the image blocks that admitted requests still have to compute (a block the
 * prefix cache gave whole needs none): the vision tower runs on the leader's threads, outside
 * the lock. A request whose image fails ends with the error. */
static void encode_images(g4_sched *s) {
    for (int i = 0; i < s->n_running; i++) {
        g4_sched_req *r = s->running[i];
        for (int k = 0; r->state == ST_PREFILL && k < r->n_img; k++) {
            req_image *im = &r->img[k];
            if (im->soft || im->pos + im->n_tok <= (int64_t)r->n_prefilled) continue;
            g4_err err = {0};
            float *soft = malloc(sizeof(float) * (size_t)im->n_tok * (size_t)s->H);
            const double t0 = wall_s();
            int rc = soft ? g4_engine_encode_image(s->e, im->pixels, im->ppos, im->ph, im->pw, soft, &err)
                          : g4_err_set(&err, G4_ENOMEM, "out of memory for an image's %d soft tokens", im->n_tok);
            if (rc) {
                free(soft);
                pthread_mutex_lock(&s->mu);
                fail_req(r, &err);
                g4_engine_seq_close(s->e, r->seq);
                r->seq = -1;
                pthread_mutex_unlock(&s->mu);
                break;
            }
            im->soft = soft;
            s->stats.images_encoded++;
            s->stats.image_encode_s += wall_s() - t0;
        }
    }
}

/* How many of r's next prompt positions (at most take) go into a step with room tokens left:
 * an image block is never cut, so a chunk ends before a block it cannot hold whole, and a block
 * at the chunk's start is taken whole (past the chunk size) when the step has room; 0 when it
 * has not (the block waits for a step with room). */
static size_t prefill_take(const g4_sched_req *r, size_t take, size_t room) {
    const int64_t p0 = (int64_t)r->n_prefilled;
    for (int i = 0; i < r->n_img; i++) {
        const int64_t b0 = r->img[i].pos, b1 = b0 + r->img[i].n_tok;
        if (b1 <= p0) continue;
        if (b0 >= p0 + (int64_t)take) break;
        if (b0 > p0) {
            if (b1 > p0 + (int64_t)take) { take = (size_t)(b0 - p0); break; }
            continue; /* whole in the chunk; a later block may not be */
        }
        if ((size_t)(b1 - p0) > room) return 0;
        if ((size_t)(b1 - p0) > take) take = (size_t)(b1 - p0);
    }
    return take;
}

static void *loop(void *arg) {
    g4_sched *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        /* drop finished and cancelled sequences */
        int k = 0;
        for (int i = 0; i < s->n_running; i++) {
            g4_sched_req *r = s->running[i];
            if (r->state != ST_DONE && atomic_load(&r->cancelled)) finish(s, r, "cancelled");
            if (r->state == ST_DONE && r == s->image_wait) s->image_wait = NULL;
            if (r->state == ST_DONE) req_unref(r);
            else s->running[k++] = r;
        }
        s->n_running = k;
        if (s->stop && (!s->drain || (s->n_running == 0 && !s->wait_head))) {
            for (int i = 0; i < s->n_running; i++) { finish(s, s->running[i], "cancelled"); req_unref(s->running[i]); }
            s->n_running = 0;
            while (s->wait_head) {
                g4_sched_req *r = s->wait_head;
                s->wait_head = r->next_wait;
                r->seq = -1;
                finish(s, r, "cancelled");
                req_unref(r);
            }
            s->wait_tail = NULL;
            s->n_waiting = 0;
            if (s->job_fn) { s->job_fn = NULL; s->job_rc = G4_ECANCELED; s->job_done = 1; pthread_cond_broadcast(&s->job_cv); }
            pthread_mutex_unlock(&s->mu);
            return NULL;
        }
        if (s->job_fn) {
            /* a job (slot save/restore) between two steps, with the engine to itself */
            g4_sched_job_fn fn = s->job_fn;
            pthread_mutex_unlock(&s->mu);
            const int rc = fn(s->e, s->job_arg);
            pthread_mutex_lock(&s->mu);
            s->job_fn = NULL;
            s->job_rc = rc;
            s->job_done = 1;
            pthread_cond_broadcast(&s->job_cv);
        }
        admit(s);
        s->stats.kv_used = g4_engine_kv_bytes_used(s->e); /* also when going idle: 0 then */
        g4_engine_kv_stats(s->e, &s->stats.kv);
        g4_engine_kv_disk_stats(s->e, &s->stats.disk);
        if (s->n_running == 0) {
            /* idle: write one queued prefix to --kv-cache-dir (then look at the queue again) */
            const int had_waiting = s->wait_head != NULL;
            pthread_mutex_unlock(&s->mu);
            if (g4_engine_kv_disk_step(s->e)) continue;
            pthread_mutex_lock(&s->mu);
            /* what came while the lock was free is not missed */
            if (!(s->wait_head && !had_waiting) && !s->job_fn && !s->stop) pthread_cond_wait(&s->cv, &s->mu);
            pthread_mutex_unlock(&s->mu);
            continue;
        }
        s->stats.running = s->n_running;
        s->stats.waiting = s->n_waiting;
        pthread_mutex_unlock(&s->mu);
        encode_images(s);

        /* build the batch: decode tokens first (running streams keep flowing), each with its
         * drafts, then prefill */
        /* an image block that found no room last step gets it now: no drafts in this step */
        if (s->image_wait && (s->image_wait->state != ST_PREFILL || s->image_wait->seq < 0)) s->image_wait = NULL;
        if (s->spec->method != G4_SPEC_NONE && !s->image_wait) spec_plan(s);
        else for (int i = 0; i < s->n_running; i++) s->running[i]->n_draft = 0;
        int n = 0, nl = 0, drafted = 0;
        for (int i = 0; i < s->n_running; i++) {
            g4_sched_req *r = s->running[i];
            if (r->state != ST_DECODE) continue;
            s->ids[n] = r->next_token;
            s->pos[n] = (int32_t)(r->n_prompt + r->n_gen - 1);
            s->seqs[n] = r->seq;
            s->want[n] = 1;
            s->embd[n] = NULL;
            s->span[n] = 0;
            s->rowpos[nl] = s->pos[n];
            s->owner[nl++] = r;
            n++;
            drafted += r->n_draft;
            for (int j = 0; j < r->n_draft; j++, n++) {
                s->ids[n] = r->draft[j];
                s->pos[n] = s->pos[n - 1] + 1;
                s->seqs[n] = r->seq;
                s->want[n] = 1;
                s->embd[n] = NULL;
                s->span[n] = 0;
                s->rowpos[nl] = s->pos[n];
                s->owner[nl++] = r;
            }
        }
        int np = 0, images = 0;
        g4_sched_req *first = s->image_wait;
        s->image_wait = NULL;
        for (int i = -1; i < s->n_running && n < s->max_batch; i++) {
            g4_sched_req *r = i < 0 ? first : s->running[i];
            if (!r || r->state != ST_PREFILL || (i >= 0 && r == first)) continue;
            size_t left = r->n_target - r->n_prefilled, take = (size_t)(s->max_batch - n);
            if (take > (size_t)s->o.prefill_chunk) take = (size_t)s->o.prefill_chunk;
            if (take > left) take = left;
            if (r->n_img && !(take = prefill_take(r, take, (size_t)(s->max_batch - n)))) {
                if (!s->image_wait) s->image_wait = r;
                continue;
            }
            const int all = r->plp && !r->plp_done; /* prompt logprobs: a logits row per position */
            int k = 0; /* the image that position p is in or before */
            for (size_t j = 0; j < take; j++) {
                size_t p = r->n_prefilled + j;
                while (k < r->n_img && r->img[k].pos + r->img[k].n_tok <= (int64_t)p) k++;
                const int in_img = k < r->n_img && r->img[k].pos <= (int64_t)p;
                s->ids[n] = r->toks[p];
                s->pos[n] = (int32_t)p;
                s->seqs[n] = r->seq;
                s->want[n] = all || p == r->n_target - 1;
                s->embd[n] = in_img ? r->img[k].soft + ((int64_t)p - r->img[k].pos) * s->H : NULL;
                s->span[n] = in_img ? (int32_t)(r->img[k].pos + r->img[k].n_tok) : 0;
                images |= in_img;
                if (s->want[n]) { s->rowpos[nl] = (int32_t)p; s->owner[nl++] = r; }
                n++;
            }
            s->pre[np] = r;
            s->take[np++] = take;
        }
        if (n == 0) continue;
        g4_batch b = {.n = n, .ids = s->ids, .pos = s->pos, .seq = s->seqs, .logits = s->want, .embd = images ? s->embd : NULL,
                      .span_end = images ? s->span : NULL};
        g4_err err = {0};
        const double t0 = wall_s();
        int rc = g4_engine_forward_ex(s->e, &b, s->logits, s->hidden, &err);
        if (rc == G4_OK) g4_spec_costs_add(&s->costs, n, wall_s() - t0);
        if (rc == G4_ENOMEM) {
            pthread_mutex_lock(&s->mu);
            const int again = preempt(s);
            pthread_mutex_unlock(&s->mu);
            if (again) continue; /* the same step without the newest sequence */
        }
        if (rc == G4_OK)
            for (int i = 0; i < np; i++) {
                s->pre[i]->n_prefilled += s->take[i];
                s->stats.prompt_tokens += s->take[i];
                if (s->pre[i]->n_prefilled >= s->pre[i]->n_prompt) s->pre[i]->prompt_done = 1;
            }
        s->stats.steps++;
        double t = now_s();
        pthread_mutex_lock(&s->mu);
        if (rc) {
            /* every sequence of the failed step ends with the error (prefill-only ones too) */
            for (int i = 0; i < nl + np; i++) {
                g4_sched_req *r = i < nl ? s->owner[i] : s->pre[i - nl];
                if (r->state == ST_DONE) continue;
                fail_req(r, &err);
                g4_engine_seq_close(s->e, r->seq);
                r->seq = -1;
            }
            nl = 0;
        }
        for (int i = 0; i < nl; i++) {
            g4_sched_req *r = s->owner[i];
            float *row = s->logits + (size_t)i * (size_t)s->V;
            const size_t p = (size_t)s->rowpos[i];
            if (r->state == ST_DONE) continue;
            if (r->state == ST_PREFILL && p + 1 < r->n_target) { /* a prompt position: the next prompt token's logprob */
                g4_logprobs_row(row, (int)s->V, r->p.sampling.temperature, r->toks[p + 1], r->top_logprobs, &r->plp[p + 1]);
                continue;
            }
            if (r->plp && !r->plp_done) {
                pthread_mutex_lock(&r->mu);
                r->plp_done = 1;
                pthread_mutex_unlock(&r->mu);
            }
            if (r->hid) {
                memcpy(r->hid, s->hidden + (size_t)i * (size_t)s->H, sizeof(float) * (size_t)s->H);
                r->has_hid = 1;
            }
            if (r->state == ST_DECODE && r->n_draft) {
                i += spec_verify(s, r, i, t);
                continue;
            }
            int32_t id = draw(r, row, (int)s->V, &err);
            if (id < 0) { fail_req(r, &err); g4_engine_seq_close(s->e, r->seq); r->seq = -1; continue; }
            g4_token_logprob lp;
            if (r->logprobs) g4_logprobs_row(row, (int)s->V, r->p.sampling.temperature, id, r->top_logprobs, &lp);
            accept(s, r, id, r->logprobs ? &lp : NULL, t);
        }
        if (s->spec->method != G4_SPEC_NONE) {
            if (drafted && rc == G4_OK) s->stats.spec_steps++;
            spec_settle(s);
        }
        pthread_mutex_unlock(&s->mu);
    }
}

/* ---- API ----------------------------------------------------------------------------------- */

int g4_sched_create(g4_textgen *tg, const g4_sched_opts *opts, g4_sched **out, g4_err *err) {
    g4_sched *s = calloc(1, sizeof *s);
    if (!s) return g4_err_set(err, G4_ENOMEM, "out of memory");
    pthread_mutex_init(&s->vocab_mu, NULL);
    pthread_mutex_init(&s->job_mu, NULL);
    pthread_cond_init(&s->job_cv, NULL);
    s->tg = tg;
    s->e = tg->engine;
    if (opts) s->o = *opts;
    s->max_batch = g4_engine_max_batch(s->e);
    if (s->o.max_waiting <= 0) s->o.max_waiting = 64;
    if (s->o.prefill_chunk <= 0) s->o.prefill_chunk = s->max_batch > 1 ? s->max_batch / 2 : 1;
    s->V = g4_engine_vocab(s->e);
    s->max_running = g4_engine_max_seqs(s->e);
    if (s->max_running > s->max_batch) s->max_running = s->max_batch;
    s->running = calloc((size_t)s->max_running, sizeof *s->running);
    s->ids = malloc(sizeof(int32_t) * (size_t)s->max_batch);
    s->pos = malloc(sizeof(int32_t) * (size_t)s->max_batch);
    s->seqs = malloc(sizeof(int32_t) * (size_t)s->max_batch);
    s->want = malloc((size_t)s->max_batch);
    s->embd = calloc((size_t)s->max_batch, sizeof *s->embd);
    s->span = calloc((size_t)s->max_batch, sizeof *s->span);
    s->owner = calloc((size_t)s->max_batch, sizeof *s->owner);
    s->rowpos = calloc((size_t)s->max_batch, sizeof *s->rowpos);
    s->pre = calloc((size_t)s->max_running, sizeof *s->pre);
    s->take = calloc((size_t)s->max_running, sizeof *s->take);
    s->spec = g4_engine_spec(s->e);
    s->H = g4_engine_hidden_size(s->e);
    s->rows_cap = s->max_running;
    if (s->spec->method != G4_SPEC_NONE) { /* a verification has k + 1 rows */
        s->rows_cap = s->max_running * (1 + s->spec->k);
        if (s->rows_cap > s->max_batch) s->rows_cap = s->max_batch > s->max_running ? s->max_batch : s->max_running;
        int rc = g4_spec_costs_init(&s->costs, s->max_batch, s->max_running, err);
        if (rc) { g4_sched_free(s); return rc; }
        if (s->spec->method == G4_SPEC_MTP && !(s->hidden = malloc(sizeof(float) * (size_t)s->max_batch * (size_t)s->H))) {
            g4_sched_free(s);
            return g4_err_set(err, G4_ENOMEM, "out of memory for the scheduler");
        }
    }
    s->logits = malloc(sizeof(float) * (size_t)s->V * (size_t)s->rows_cap);
    s->stats.kv_budget = g4_engine_kv_budget(s->e);
    if (!s->running || !s->ids || !s->pos || !s->seqs || !s->want || !s->embd || !s->span || !s->owner || !s->rowpos || !s->pre || !s->take || !s->logits) {
        g4_sched_free(s);
        return g4_err_set(err, G4_ENOMEM, "out of memory for the scheduler");
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    if (pthread_create(&s->thread, NULL, loop, s) != 0) {
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->cv);
        s->closed = 1;
        g4_sched_free(s);
        return g4_err_set(err, G4_ENOMEM, "cannot start the scheduler thread");
    }
    *out = s;
    return G4_OK;
}

void g4_sched_shutdown(g4_sched *s, int drain) {
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    s->drain = drain;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void g4_sched_free(g4_sched *s) {
    if (!s) return;
    if (!s->closed && s->thread) {
        g4_sched_shutdown(s, 0);
        pthread_join(s->thread, NULL);
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->cv);
    }
    free(s->running); free(s->ids); free(s->pos); free(s->seqs); free(s->want); free(s->embd); free(s->span); free(s->owner); free(s->rowpos); free(s->pre); free(s->take); free(s->logits);
    free(s->hidden);
    g4_spec_costs_free(&s->costs);
    g4_vocab_free(s->vocab);
    pthread_mutex_destroy(&s->vocab_mu);
    pthread_mutex_destroy(&s->job_mu);
    pthread_cond_destroy(&s->job_cv);
    free(s);
}

int g4_sched_run_job(g4_sched *s, g4_sched_job_fn fn, void *arg) {
    pthread_mutex_lock(&s->job_mu);
    pthread_mutex_lock(&s->mu);
    int rc;
    if (s->stop || s->closed) rc = G4_ECANCELED;
    else {
        s->job_fn = fn;
        s->job_arg = arg;
        s->job_done = 0;
        pthread_cond_signal(&s->cv);
        while (!s->job_done) pthread_cond_wait(&s->job_cv, &s->mu);
        rc = s->job_rc;
    }
    pthread_mutex_unlock(&s->mu);
    pthread_mutex_unlock(&s->job_mu);
    return rc;
}

int g4_sched_submit(g4_sched *s, const int32_t *prompt, size_t n_prompt, const g4_gen_params *p, g4_sched_req **out, g4_err *err) {
    return g4_sched_submit_ex(s, prompt, n_prompt, p, NULL, out, err);
}

/* The prompt's images: checked, copied, their tokens given their prefix-cache keys. */
static int check_images(const g4_sched *s, size_t n_prompt, const g4_gen_params *p, const g4_sched_sub_opts *x, g4_err *err) {
    if (p->n_images < 0 || (p->n_images && !p->images)) return g4_err_set(err, G4_EINVAL, "bad image list");
    if (p->n_images && x->prompt_logprobs) return g4_err_set(err, G4_EINVAL, "prompt logprobs are not available for prompts with images");
    for (int i = 0; i < p->n_images; i++) {
        const g4_prompt_image *im = &p->images[i];
        if (im->n_tok < 1 || im->pos < 0 || im->pos + im->n_tok > (int64_t)n_prompt || (i && im->pos < p->images[i - 1].pos + p->images[i - 1].n_tok))
            return g4_err_set(err, G4_EINVAL, "image %d: its %d tokens at position %lld are not inside the prompt, after the previous image", i + 1,
                              im->n_tok, (long long)im->pos);
        if (!im->soft && !(im->pixels && im->ppos && im->ph > 0 && im->pw > 0 && im->patch_dim > 0))
            return g4_err_set(err, G4_EINVAL, "image %d has neither patches nor soft tokens", i + 1);
        if (!im->soft && !g4_engine_has_vision(s->e))
            return g4_err_set(err, G4_EUNSUPPORTED, "the model in %s has no vision tower: it cannot take images", g4_engine_model_dir(s->e));
        /* its block goes into one step, beside a decode token of every other sequence */
        if (im->n_tok + s->max_running > s->max_batch)
            return g4_err_set(err, G4_EINVAL, "image %d has %d tokens: with %d sequences a step of %d tokens cannot hold it (raise --max-batch)",
                              i + 1, im->n_tok, s->max_running, s->max_batch);
    }
    return G4_OK;
}

static int take_images(g4_sched *s, g4_sched_req *r, const g4_gen_params *p, g4_err *err) {
    r->p.images = NULL;
    r->p.n_images = 0;
    if (!p->n_images) return G4_OK;
    if (!(r->img = calloc((size_t)p->n_images, sizeof *r->img))) return g4_err_set(err, G4_ENOMEM, "out of memory");
    r->n_img = p->n_images;
    for (int i = 0; i < p->n_images; i++) {
        const g4_prompt_image *im = &p->images[i];
        req_image *d = &r->img[i];
        d->pos = im->pos;
        d->n_tok = im->n_tok;
        const size_t np = (size_t)im->ph * (size_t)im->pw, ns = (size_t)im->n_tok * (size_t)s->H;
        if (im->soft) {
            if (!(d->soft = malloc(sizeof(float) * ns))) return g4_err_set(err, G4_ENOMEM, "out of memory for an image's soft tokens");
            memcpy(d->soft, im->soft, sizeof(float) * ns);
        } else {
            d->ph = im->ph, d->pw = im->pw, d->patch_dim = im->patch_dim;
            d->pixels = malloc(sizeof(float) * np * (size_t)im->patch_dim);
            d->ppos = malloc(sizeof(int32_t) * 2 * np);
            if (!d->pixels || !d->ppos) return g4_err_set(err, G4_ENOMEM, "out of memory for an image's %zu patches", np);
            memcpy(d->pixels, im->pixels, sizeof(float) * np * (size_t)im->patch_dim);
            memcpy(d->ppos, im->ppos, sizeof(int32_t) * 2 * np);
        }
        for (int j = 0; j < im->n_tok; j++) r->toks[im->pos + j] = g4_image_key(im->hash, im->n_tok, j);
    }
    return G4_OK;
}

/* The request's penalties over its prompt as the prefix cache keys it (image tokens are negative
 * keys there: skipped); min_tokens holds back the end-of-sequence ids (unless ignored) and the
 * request's stop ids. */
static int make_penalty(g4_sched *s, g4_sched_req *r, const g4_gen_params *p, g4_err *err) {
    const g4_gen_config *gc = &s->tg->gen;
    const size_t n_eos = p->ignore_eos ? 0 : gc->n_eos, n_stop = n_eos + p->n_stop_ids;
    int32_t *stops = n_stop ? malloc(sizeof(int32_t) * n_stop) : NULL;
    if (n_stop && !stops) return g4_err_set(err, G4_ENOMEM, "out of memory");
    for (size_t i = 0; i < n_eos; i++) stops[i] = gc->eos_ids[i];
    for (size_t i = 0; i < p->n_stop_ids; i++) stops[n_eos + i] = p->stop_ids[i];
    int rc = g4_penalty_create(&p->penalty, (int)s->V, r->toks, r->n_prompt, stops, n_stop, &r->pen, err);
    free(stops);
    return rc;
}

int g4_sched_submit_ex(g4_sched *s, const int32_t *prompt, size_t n_prompt, const g4_gen_params *p, const g4_sched_sub_opts *x,
                       g4_sched_req **out, g4_err *err) {
    static const g4_sched_sub_opts none = {0};
    if (!x) x = &none;
    *out = NULL;
    if (x->top_logprobs < 0 || x->top_logprobs > G4_TOP_LOGPROBS_MAX)
        return g4_err_set(err, G4_EINVAL, "top_logprobs must be between 0 and %d (got %d)", G4_TOP_LOGPROBS_MAX, x->top_logprobs);
    if (n_prompt == 0) return g4_err_set(err, G4_EINVAL, "the prompt is empty");
    if (p->max_new_tokens < 1) return g4_err_set(err, G4_EINVAL, "max_new_tokens must be at least 1");
    int rc = g4_sampling_params_validate(&p->sampling, err);
    if (!rc) rc = g4_penalty_params_validate(&p->penalty, (int)s->V, err);
    if (rc) return rc;
    if (p->penalty.min_tokens > p->max_new_tokens)
        return g4_err_set(err, G4_EINVAL, "min_tokens (%lld) must not be more than max_new_tokens (%lld)", (long long)p->penalty.min_tokens,
                          (long long)p->max_new_tokens);
    if (p->speculative < -1 || p->speculative > G4_SPEC_MAX_K)
        return g4_err_set(err, G4_EINVAL, "speculative must be -1 (off), 0 (the server's drafter) or 1..%d drafts per round (got %d)",
                          G4_SPEC_MAX_K, p->speculative);
    const int64_t ctx = g4_engine_max_ctx(s->e);
    if ((int64_t)n_prompt + p->max_new_tokens > ctx)
        return g4_err_set(err, G4_ECONTEXT, "the prompt (%zu tokens) plus %lld requested tokens exceeds the context of %lld tokens",
                          n_prompt, (long long)p->max_new_tokens, (long long)ctx);
    for (size_t i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= s->V) return g4_err_set(err, G4_EINVAL, "token id %d is outside the vocabulary", prompt[i]);
    if ((rc = check_images(s, n_prompt, p, x, err))) return rc;
    size_t need = g4_engine_seq_bytes(s->e, (int64_t)n_prompt + p->max_new_tokens);
    if (need > g4_engine_kv_budget(s->e))
        return g4_err_set(err, G4_ENOMEM, "the request needs %zu bytes of KV cache, more than the whole budget of %zu", need, g4_engine_kv_budget(s->e));
    g4_sched_req *r = calloc(1, sizeof *r);
    if (!r) return g4_err_set(err, G4_ENOMEM, "out of memory");
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    atomic_store(&r->refs, 2);
    r->seq = -1;
    r->p = *p;
    r->toks = malloc(sizeof(int32_t) * (n_prompt + (size_t)p->max_new_tokens));
    r->gen = r->toks ? r->toks + n_prompt : NULL;
    r->stops = p->n_stop_strings ? calloc(p->n_stop_strings, sizeof(char *)) : NULL;
    r->term = g4_fault_hit("sched.submit") ? NULL : malloc(sizeof *r->term);
    r->term_msg = malloc(G4_ERR_MSG_MAX);
    rc = (!r->toks || (p->n_stop_strings && !r->stops) || !r->term || !r->term_msg) ? g4_err_set(err, G4_ENOMEM, "out of memory") : G4_OK;
    for (size_t i = 0; rc == G4_OK && i < p->n_stop_strings; i++)
        if (!(r->stops[i] = strdup(p->stop_strings[i]))) rc = g4_err_set(err, G4_ENOMEM, "out of memory");
    r->p.stop_strings = (const char *const *)r->stops;
    if (rc == G4_OK && p->n_stop_ids) {
        if (!(r->stop_ids = malloc(sizeof(int32_t) * p->n_stop_ids))) rc = g4_err_set(err, G4_ENOMEM, "out of memory");
        else memcpy(r->stop_ids, p->stop_ids, sizeof(int32_t) * p->n_stop_ids);
    }
    r->p.stop_ids = r->stop_ids;
    r->on_token = x->on_token;
    r->on_token_user = x->on_token_user;
    r->logprobs = x->logprobs || x->prompt_logprobs;
    r->top_logprobs = x->top_logprobs;
    /* the engine's k is the most: the KV cache keeps rows for rolling back that many */
    r->spec_k = s->spec->method == G4_SPEC_NONE || p->speculative < 0 ? 0 : p->speculative > 0 && p->speculative < s->spec->k ? p->speculative : s->spec->k;
    g4_spec_stat_init(&r->st);
    if (rc == G4_OK && r->spec_k && s->spec->method == G4_SPEC_MTP && !(r->hid = malloc(sizeof(float) * (size_t)s->H)))
        rc = g4_err_set(err, G4_ENOMEM, "out of memory");
    if (rc == G4_OK && x->prompt_logprobs) {
        if (!(r->plp = calloc(n_prompt, sizeof *r->plp))) rc = g4_err_set(err, G4_ENOMEM, "out of memory for %zu prompt logprobs", n_prompt);
        else r->plp[0].id = prompt[0];
    }
    if (rc == G4_OK) {
        memcpy(r->toks, prompt, sizeof(int32_t) * n_prompt);
        r->n_prompt = r->n_target = n_prompt;
        rc = take_images(s, r, p, err);
    }
    if (rc == G4_OK) {
        rc = g4_sampler_create((int)s->V, &p->sampling, &r->smp, err);
    }
    if (rc == G4_OK && g4_penalty_params_active(&p->penalty)) rc = make_penalty(s, r, p, err);
    r->p.penalty.bias = NULL; /* the state holds its copy */
    if (rc == G4_OK && s->tg->tok) rc = g4_detok_create(s->tg->tok, p->skip_special, &r->dt, err); /* no tokenizer: ids only (bench) */
    if (rc == G4_OK && p->grammar) {
        if (!s->tg->tok) rc = g4_err_set(err, G4_EINVAL, "constrained decoding needs the model's tokenizer");
        pthread_mutex_lock(&s->vocab_mu); /* not s->mu: indexing a large vocabulary takes a while */
        if (!rc && !s->vocab) rc = g4_vocab_create(s->tg->tok, (int)s->V, &s->vocab, err);
        pthread_mutex_unlock(&s->vocab_mu);
        if (!rc) rc = g4_matcher_create(p->grammar, s->vocab, s->tg->gen.eos_ids, s->tg->gen.n_eos, &r->cm, err);
        r->p.grammar = NULL; /* the matcher holds it */
    }
    if (rc == G4_OK && p->n_stop_strings) rc = g4_stop_strings_create(p->stop_strings, p->n_stop_strings, &r->ss, err);
    if (rc) { atomic_store(&r->refs, 1); req_unref(r); return rc; }
    r->t_submit = now_s();
    pthread_mutex_lock(&s->mu);
    if (s->stop || s->n_waiting >= s->o.max_waiting) {
        int stopping = s->stop;
        pthread_mutex_unlock(&s->mu);
        atomic_store(&r->refs, 1);
        req_unref(r);
        return g4_err_set(err, G4_EBUSY, stopping ? "the server is shutting down" : "the request queue is full (%d waiting); retry later", s->o.max_waiting);
    }
    r->notify = x->notify;
    if (x->after) { atomic_fetch_add(&x->after->refs, 1); r->after = x->after; }
    if (s->wait_tail) s->wait_tail->next_wait = r; else s->wait_head = r;
    s->wait_tail = r;
    s->n_waiting++;
    s->stats.waiting = s->n_waiting;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    *out = r;
    return G4_OK;
}

void g4_sched_req_ids(g4_sched_req *r, int32_t *ids, size_t max, size_t *n) {
    pthread_mutex_lock(&r->mu);
    *n = r->n_gen < max ? r->n_gen : max;
    memcpy(ids, r->gen, sizeof(int32_t) * *n);
    pthread_mutex_unlock(&r->mu);
}

size_t g4_sched_req_logprobs(g4_sched_req *r, size_t from, g4_token_logprob *out, size_t max) {
    pthread_mutex_lock(&r->mu);
    size_t n = from < r->n_lps ? r->n_lps - from : 0;
    if (n > max) n = max;
    if (n) memcpy(out, r->lps + from, n * sizeof *out);
    pthread_mutex_unlock(&r->mu);
    return n;
}

int g4_sched_req_prompt_logprobs(g4_sched_req *r, g4_token_logprob *out, size_t max) {
    pthread_mutex_lock(&r->mu);
    const int done = r->plp && r->plp_done;
    if (done) memcpy(out, r->plp, (r->n_prompt < max ? r->n_prompt : max) * sizeof *out);
    pthread_mutex_unlock(&r->mu);
    return done;
}

void g4_sched_get_stats(g4_sched *s, g4_sched_stats *st) {
    pthread_mutex_lock(&s->mu);
    *st = s->stats;
    st->waiting = s->n_waiting;
    st->running = s->n_running;
    pthread_mutex_unlock(&s->mu);
}
