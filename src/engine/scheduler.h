/* scheduler.h — continuous batching over one g4_engine.
 *
 * Requests are submitted from any thread; one scheduler thread (the engine's leader) runs the
 * loop: admit waiting requests while a sequence slot and free KV pages for their prompts allow
 * (the longest cached prefix of a prompt is taken from the prefix cache and not computed again),
 * build one batch with one decode token of every running sequence plus prefill chunks of newly
 * admitted prompts (bounded per step so running streams keep flowing), run g4_engine_forward,
 * sample each sequence's next token with its own sampler, and push text events to the
 * request's queue. Sequences join and leave at token boundaries. When the KV pool runs out in
 * a step, the newest sequence is preempted: its blocks go to the prefix cache, it waits at the
 * head of the queue and resumes from its cached prefix, recomputing the rest. A request's tokens
 * are bitwise the same alone, among others, or preempted and resumed (the forward pass
 * guarantees it; sampling is per request with its own seed and state).
 *
 * Each request has an event queue: the submitter reads it with g4_sched_next (blocking with a
 * timeout), so an HTTP handler can stream. Cancelling (client gone) frees the sequence at the
 * next token boundary. */
#ifndef G4_ENGINE_SCHEDULER_H
#define G4_ENGINE_SCHEDULER_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/logprobs.h"
#include "engine/textgen.h"

typedef struct g4_sched g4_sched;
typedef struct g4_sched_req g4_sched_req;

typedef struct g4_sched_opts {
    int max_waiting;          /* queue length beyond which submit says G4_EBUSY (default 64) */
    int prefill_chunk;        /* prompt tokens per step per sequence (default: engine max_batch / 2) */
} g4_sched_opts;

typedef enum { G4_EV_TEXT = 1, G4_EV_DONE, G4_EV_ERROR } g4_sched_ev_kind;

typedef struct g4_sched_event {
    int kind;                 /* g4_sched_ev_kind */
    char *text;               /* TEXT: newly decoded text (malloc'd; caller frees); ERROR: message */
    size_t len;
    int32_t token;            /* TEXT: the token that produced it (-1 for flushed text) */
    size_t n_tokens;          /* TEXT: tokens generated so far (their logprobs are recorded) */
    /* DONE: */
    const char *finish_reason;/* "stop", "length", "cancelled" */
    size_t prompt_tokens, completion_tokens;
    size_t cached_tokens;     /* prompt tokens taken from the prefix cache */
    int stop_index;           /* "stop" by a stop string: its index in the params' list; else -1 */
    double ttft_ms, tokens_per_s;
    int code;                 /* ERROR: g4_status */
} g4_sched_event;

typedef struct g4_sched_stats {
    int running, waiting;
    size_t kv_used, kv_budget;
    uint64_t prompt_tokens, generated_tokens, steps;
    uint64_t preemptions;
    uint64_t draft_proposed;  /* speculative decoding: drafts verified, */
    uint64_t draft_accepted;  /* ... accepted, */
    uint64_t spec_steps;      /* ... and steps that verified some */
    uint64_t images_encoded;  /* images run through the vision tower */
    double image_encode_s;    /* ... and the seconds it took */
    g4_kv_stats kv;           /* the engine's pool and prefix cache */
    g4_kv_disk_stats disk;    /* ... and its files (--kv-cache-dir) */
} g4_sched_stats;

int g4_sched_create(g4_textgen *tg, const g4_sched_opts *opts, g4_sched **out, g4_err *err);
/* Stops the loop (cancels what runs and waits; each request gets DONE/cancelled) and frees it. */
void g4_sched_free(g4_sched *s);

/* Submits a tokenized prompt. G4_EBUSY when the waiting queue is full, G4_ECONTEXT when the
 * prompt plus max_new_tokens exceeds the context, G4_ENOMEM when the request could never fit
 * in the KV budget, G4_EINVAL for bad params. The returned handle must be freed. */
int g4_sched_submit(g4_sched *s, const int32_t *prompt, size_t n_prompt, const g4_gen_params *p,
                    g4_sched_req **out, g4_err *err);
/* One wait for the events of several requests (the n choices of one HTTP request): every
 * event pushed to a request submitted with it bumps a counter and wakes the waiter. */
typedef struct g4_sched_notify {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t count;
} g4_sched_notify;
void g4_sched_notify_init(g4_sched_notify *w);
void g4_sched_notify_destroy(g4_sched_notify *w);
/* Returns once the counter differs from *seen (then *seen is updated) or after timeout_ms. */
void g4_sched_notify_wait(g4_sched_notify *w, uint64_t *seen, int timeout_ms);

/* A request's observer of its tokens: id and the row of V logits it was drawn from (through the
 * grammar's mask when the request has one, then its penalties and logit bias), in order, before
 * the token's text event. Called on the scheduler's thread with its lock held (keep it short; no
 * scheduler calls from it); a non-zero return cancels the request. Costs nothing for requests without one. */
typedef int (*g4_sched_token_fn)(void *user, int32_t id, const float *logits);

/* Per-request extras (docs/server.md "Log probabilities", "n"). */
typedef struct g4_sched_sub_opts {
    int logprobs;             /* record each generated token's logprob (g4_sched_req_logprobs) */
    int top_logprobs;         /* ... and its 0..G4_TOP_LOGPROBS_MAX most likely tokens */
    int prompt_logprobs;      /* also every prompt token's (the first has none): the prompt is
                               * computed whole, not taken from the prefix cache */
    g4_sched_req *after;      /* admit only once this request's prompt is computed, so the shared
                               * prompt comes from the prefix cache (the n choices of a request) */
    g4_sched_notify *notify;  /* signalled on every event (must outlive the handle) */
    g4_sched_token_fn on_token; /* NULL, or called with each generated token and the logits row it was */
    void *on_token_user;      /* drawn from (see g4_sched_token_fn) */
} g4_sched_sub_opts;
int g4_sched_submit_ex(g4_sched *s, const int32_t *prompt, size_t n_prompt, const g4_gen_params *p, const g4_sched_sub_opts *x,
                       g4_sched_req **out, g4_err *err);
/* n > 1: choice i's seed, derived from the request's seed (choice 0 keeps it, so n = 1 and the
 * first of n choices are the same tokens). */
uint64_t g4_sched_choice_seed(uint64_t seed, int i);

/* Next event of the request; waits up to timeout_ms (-1: forever). Returns 1 with an event,
 * 0 on timeout. After DONE or ERROR there are no more events. */
int g4_sched_next(g4_sched_req *r, g4_sched_event *ev, int timeout_ms);
void g4_sched_event_clear(g4_sched_event *ev);
/* Asks the scheduler to stop generating for this request (idempotent). */
void g4_sched_cancel(g4_sched_req *r);
/* Cancels if still running and releases the handle (the scheduler drops its side later). */
void g4_sched_req_free(g4_sched_req *r);

/* The ids generated so far (safe after DONE): copies up to max, sets *n. */
void g4_sched_req_ids(g4_sched_req *r, int32_t *ids, size_t max, size_t *n);
/* Logprobs of generated tokens from..: copies up to max entries, returns how many (a token's
 * entry is there before its text event). */
size_t g4_sched_req_logprobs(g4_sched_req *r, size_t from, g4_token_logprob *out, size_t max);
/* prompt_logprobs: entry k (1 <= k < n_prompt) is prompt token k's given tokens 0..k-1; entry 0
 * has only the id. Copies min(n_prompt, max) entries and returns 1 once all are computed (from
 * the request's first event on), else 0 and copies nothing. */
int g4_sched_req_prompt_logprobs(g4_sched_req *r, g4_token_logprob *out, size_t max);

/* Runs fn on the scheduler's thread between two steps (the engine is not used meanwhile) and
 * returns what it returns; G4_ECANCELED when the scheduler stops first. One job at a time. */
typedef int (*g4_sched_job_fn)(struct g4_engine *e, void *arg);
int g4_sched_run_job(g4_sched *s, g4_sched_job_fn fn, void *arg);

void g4_sched_get_stats(g4_sched *s, g4_sched_stats *st);
/* Stop admitting new requests (submit says G4_EBUSY); with drain, let running ones finish. */
void g4_sched_shutdown(g4_sched *s, int drain);

#endif
