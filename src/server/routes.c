/* routes.c — request handling: routing, authentication, and the endpoints (/health,
 * /metrics, /v1/models, /tokenize, /detokenize, /generate, /v1/completions,
 * /v1/chat/completions). A generation request is parsed (openai.c), rendered with the chat
 * template and tokenized, submitted to the scheduler, and either awaited (one JSON answer) or
 * streamed (sse.c) from the request's event queue. Errors go through errors.c only. Knows
 * the HTTP adapter's interface, never MHD. */
#include "server/server_internal.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/errors.h"
#include "server/openai.h"
#include "server/sse.h"
#include "text/output_parser.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- answers --------------------------------------------------------------------------------- */

static void answer_text(g4_server *s, g4_http_req *r, const char *endpoint, int status, const char *ctype, const char *body,
                        size_t len, const char *const *headers) {
    g4_http_send(r, status, ctype, body, len, headers);
    g4_metrics_request(s->metrics, endpoint, status);
}

/* Takes the reference. */
static void answer_json(g4_server *s, g4_http_req *r, const char *endpoint, int status, json_t *j) {
    char *txt = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!txt) {
        g4_api_err ae;
        g4_api_err_status(&ae, G4_ENOMEM, NULL, "out of memory while rendering the response");
        txt = g4_api_err_json(&ae);
        status = ae.status;
    }
    answer_text(s, r, endpoint, status, "application/json", txt ? txt : "{}", txt ? strlen(txt) : 2, NULL);
    free(txt);
}

/* close: the connection ends after the answer (the request's framing is in doubt). */
static void answer_error_ex(g4_server *s, g4_http_req *r, const char *endpoint, const g4_api_err *ae, int close) {
    char *txt = g4_api_err_json(ae);
    char retry[16];
    const char *hdr[6] = {0};
    int k = 0;
    snprintf(retry, sizeof retry, "%d", ae->retry_after_s);
    if (ae->retry_after_s > 0) { hdr[k++] = "Retry-After"; hdr[k++] = retry; }
    if (close) { hdr[k++] = "Connection"; hdr[k++] = "close"; }
    answer_text(s, r, endpoint, ae->status, "application/json", txt ? txt : "{}", txt ? strlen(txt) : 2, k ? hdr : NULL);
    free(txt);
}

static void answer_error(g4_server *s, g4_http_req *r, const char *endpoint, const g4_api_err *ae) {
    answer_error_ex(s, r, endpoint, ae, 0);
}

/* ---- small endpoints ------------------------------------------------------------------------- */

static void route_health(g4_server *s, g4_http_req *r, const char *ep) {
    if (atomic_load(&s->stopping)) answer_json(s, r, ep, 503, json_pack("{s:s}", "status", "shutting_down"));
    else if (!atomic_load(&s->ready)) answer_json(s, r, ep, 503, json_pack("{s:s}", "status", "loading"));
    else answer_json(s, r, ep, 200, json_pack("{s:s}", "status", "ok"));
}

static void route_metrics(g4_server *s, g4_http_req *r, const char *ep) {
    g4_sched_stats st;
    int ready = atomic_load(&s->ready);
    if (ready) {
        g4_sched_get_stats(s->sched, &st);
        /* the scheduler refreshes kv_used before each step, so after the last sequence ended it
         * still shows that step's value; with nothing admitted no sequence holds cache */
        if (st.running == 0) st.kv_used = 0;
    }
    size_t len = 0;
    char *txt = g4_metrics_render(s->metrics, ready ? &st : NULL, ready, &len);
    if (!txt) {
        g4_api_err ae;
        g4_api_err_status(&ae, G4_ENOMEM, NULL, "out of memory");
        answer_error(s, r, ep, &ae);
        return;
    }
    answer_text(s, r, ep, 200, "text/plain; version=0.0.4; charset=utf-8", txt, len, NULL);
    free(txt);
}

static json_t *model_card(g4_server *s) {
    json_t *m = json_pack("{s:s,s:s,s:I,s:s}", "id", s->model_id, "object", "model", "created", (json_int_t)s->created, "owned_by", "g4tp");
    if (atomic_load(&s->ready)) json_object_set_new(m, "max_model_len", json_integer((json_int_t)g4_engine_max_ctx(s->e)));
    return m;
}

static void route_models(g4_server *s, g4_http_req *r, const char *ep) {
    answer_json(s, r, ep, 200, json_pack("{s:s,s:[o]}", "object", "list", "data", model_card(s)));
}

/* name holds len bytes (JSON strings may hold U+0000: such a name matches nothing) */
static int model_ok(const g4_server *s, const char *name, size_t len) {
    if (!name) return 1;
    return (len == strlen(s->model_id) && !memcmp(name, s->model_id, len)) ||
           (s->model_alias && len == strlen(s->model_alias) && !memcmp(name, s->model_alias, len));
}

static int model_check(g4_server *s, const char *name, size_t len, g4_api_err *ae) {
    if (model_ok(s, name, len)) return 0;
    return g4_api_err_refuse(ae, G4_API_MODEL_NOT_FOUND, "model", "the model \"%s%s\" does not exist; this server serves \"%s\"", name,
                             strlen(name) < len ? "\\u0000..." : "", s->model_id);
}

/* Prompt preparation (chat template, tokenizer) runs in the connection's thread, cannot be
 * interrupted and costs more the larger the request. Other connections keep being served (one
 * thread each), but the request bytes being prepared at once are bounded across requests
 * (render_budget) so that many huge requests cannot take every core and the memory: beyond it
 * the answer is 503 server_busy with Retry-After. A request alone always goes ahead. */
static int prep_begin(g4_server *s, size_t body_len, g4_api_err *ae) {
    size_t cost = body_len + 1, cur = atomic_load(&s->render_bytes);
    do {
        if (cur && cur + cost > s->o.render_budget)
            return g4_api_err_status(ae, G4_EBUSY, NULL, "too many large prompts are being prepared at once (%zu of %zu bytes in use); retry shortly",
                                     cur, s->o.render_budget);
    } while (!atomic_compare_exchange_weak(&s->render_bytes, &cur, cur + cost));
    g4_metrics_preparing(s->metrics, 1);
    if (s->o.test_render_delay_ms > 0) {
        struct timespec ts = {s->o.test_render_delay_ms / 1000, (long)(s->o.test_render_delay_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    return 0;
}

static void prep_end(g4_server *s, size_t body_len) {
    g4_metrics_preparing(s->metrics, -1);
    atomic_fetch_sub(&s->render_bytes, body_len + 1);
}

/* Renders a chat request and tokenizes it. *thought: the prompt ends inside a thought block. */
static int chat_ids(g4_server *s, const json_t *chat, int32_t **ids, size_t *n, int *thought, g4_api_err *ae) {
    char *text = NULL;
    size_t len = 0;
    g4_err err = {0};
    if (g4_textgen_render(&s->tg, chat, &text, &len, &err)) return g4_api_err_from(ae, &err, "messages");
    static const char open_thought[] = "<|channel>thought\n";
    size_t ol = sizeof open_thought - 1;
    *thought = len >= ol && !memcmp(text + len - ol, open_thought, ol);
    int rc = g4_tokenizer_encode(s->tg.tok, text, len, 0, ids, n, &err);
    free(text);
    return rc ? g4_api_err_from(ae, &err, "messages") : 0;
}

static void route_tokenize(g4_server *s, g4_http_req *r, const char *ep) {
    size_t len;
    const char *body = g4_http_body(r, &len);
    json_t *o;
    g4_api_err ae;
    if (g4_api_parse_object(body, len, &o, &ae)) { answer_error(s, r, ep, &ae); return; }
    json_t *prompt = json_object_get(o, "prompt"), *msgs = json_object_get(o, "messages"), *model = json_object_get(o, "model");
    int32_t *ids = NULL;
    size_t n = 0;
    g4_err err = {0};
    int rc = 0, thought;
    if (model && !json_is_null(model) && !json_is_string(model)) rc = g4_api_err_status(&ae, G4_EINVAL, "model", "'model' must be a string");
    if (!rc) rc = model_check(s, json_string_value(model), json_string_length(model), &ae);
    int prep = !rc && !(rc = prep_begin(s, len, &ae));
    if (rc) {
    } else if (prompt && msgs) rc = g4_api_err_status(&ae, G4_EINVAL, "prompt", "give either 'prompt' or 'messages', not both");
    else if (json_is_string(prompt)) {
        json_t *as = json_object_get(o, "add_special_tokens");
        if (as && !json_is_boolean(as)) rc = g4_api_err_status(&ae, G4_EINVAL, "add_special_tokens", "'add_special_tokens' must be true or false");
        else if (g4_tokenizer_encode(s->tg.tok, json_string_value(prompt), json_string_length(prompt), !as || json_is_true(as), &ids, &n, &err))
            rc = g4_api_err_from(&ae, &err, "prompt");
    } else if (prompt) rc = g4_api_err_status(&ae, G4_EINVAL, "prompt", "'prompt' must be a string");
    else if (msgs) {
        json_t *copy;
        if (!(rc = g4_api_messages(msgs, &copy, &ae))) {
            json_t *chat = json_pack("{s:o,s:b}", "messages", copy, "add_generation_prompt", 1);
            json_t *agp = json_object_get(o, "add_generation_prompt"), *tools = json_object_get(o, "tools");
            if (json_is_boolean(agp)) json_object_set(chat, "add_generation_prompt", agp);
            if (json_is_array(tools)) json_object_set(chat, "tools", tools);
            rc = chat_ids(s, chat, &ids, &n, &thought, &ae);
            json_decref(chat);
        }
    } else rc = g4_api_err_status(&ae, G4_EINVAL, "prompt", "'prompt' (a string) or 'messages' is required");
    if (prep) prep_end(s, len);
    json_decref(o);
    if (rc) { free(ids); answer_error(s, r, ep, &ae); return; }
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(arr, json_integer(ids[i]));
    free(ids);
    answer_json(s, r, ep, 200, json_pack("{s:o,s:I,s:I}", "tokens", arr, "count", (json_int_t)n, "max_model_len", (json_int_t)g4_engine_max_ctx(s->e)));
}

static void route_detokenize(g4_server *s, g4_http_req *r, const char *ep) {
    size_t len;
    const char *body = g4_http_body(r, &len);
    json_t *o;
    g4_api_err ae;
    if (g4_api_parse_object(body, len, &o, &ae)) { answer_error(s, r, ep, &ae); return; }
    json_t *toks = json_object_get(o, "tokens");
    int rc = 0;
    if (!json_is_array(toks)) rc = g4_api_err_status(&ae, G4_EINVAL, "tokens", "'tokens' (a list of token ids) is required");
    size_t n = json_is_array(toks) ? json_array_size(toks) : 0, i;
    int32_t *ids = malloc(sizeof(int32_t) * (n ? n : 1));
    json_t *v;
    int vocab = g4_tokenizer_vocab_size(s->tg.tok);
    if (!rc && !ids) rc = g4_api_err_status(&ae, G4_ENOMEM, NULL, "out of memory");
    if (!rc) json_array_foreach(toks, i, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= vocab) {
            rc = g4_api_err_status(&ae, G4_EINVAL, "tokens", "tokens[%zu] must be a token id in [0, %d)", i, vocab);
            break;
        }
        ids[i] = (int32_t)json_integer_value(v);
    }
    json_t *sk = json_object_get(o, "skip_special_tokens");
    if (!rc && sk && !json_is_boolean(sk)) rc = g4_api_err_status(&ae, G4_EINVAL, "skip_special_tokens", "'skip_special_tokens' must be true or false");
    char *text = NULL;
    size_t tl = 0;
    g4_err err = {0};
    if (!rc && g4_tokenizer_decode(s->tg.tok, ids, n, sk && json_is_true(sk), &text, &tl, &err)) rc = g4_api_err_from(&ae, &err, "tokens");
    free(ids);
    json_decref(o);
    if (rc) { free(text); answer_error(s, r, ep, &ae); return; }
    answer_json(s, r, ep, 200, json_pack("{s:s%}", "prompt", text, tl));
    free(text);
}

/* ---- generation -------------------------------------------------------------------------------- */

typedef struct {
    g4_server *s;
    g4_sched_req *req;
    g4_sse *sse;
    const char *endpoint;
    double t0, t_tok;
    double t_out;             /* when bytes last went to the socket */
    int finished;
} stream_job;

static void observe_token(g4_server *s, const g4_sched_event *ev, double *t_tok) {
    if (ev->token < 0) return;
    double t = now_s();
    if (*t_tok > 0) g4_metrics_itl(s->metrics, t - *t_tok);
    *t_tok = t;
}

static void observe_done(g4_server *s, const g4_sched_event *ev, const char *reason, double t0) {
    g4_metrics_finished(s->metrics, reason, ev->prompt_tokens, ev->completion_tokens);
    if (ev->completion_tokens) g4_metrics_ttft(s->metrics, ev->ttft_ms / 1e3);
    g4_metrics_e2e(s->metrics, now_s() - t0);
}

/* Seconds without a byte to the client before a keep-alive comment goes out. */
#define KEEPALIVE_S 1.0

static long stream_read(void *user, char *buf, size_t max) {
    stream_job *j = user;
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
        if (!g4_sched_next(j->req, &ev, (int)((KEEPALIVE_S - idle) * 1000) + 1)) continue;
        g4_err err = {0};
        g4_api_err ae;
        int rc = 0;
        if (ev.kind == G4_EV_TEXT) {
            observe_token(j->s, &ev, &j->t_tok);
            rc = g4_sse_feed(j->sse, ev.text, ev.len, &err);
        } else if (ev.kind == G4_EV_DONE) {
            j->finished = 1;
            if (!strcmp(ev.finish_reason, "cancelled")) {
                observe_done(j->s, &ev, "cancelled", j->t0);
                g4_api_err_refuse(&ae, G4_API_SHUTTING_DOWN, NULL, "the generation was cancelled: the server is shutting down");
                g4_sse_error(j->sse, &ae);
            } else {
                g4_sse_set_cached_tokens(j->sse, ev.cached_tokens);
                rc = g4_sse_finish(j->sse, ev.finish_reason, ev.prompt_tokens, ev.completion_tokens, &err);
                observe_done(j->s, &ev, rc ? ev.finish_reason : g4_sse_finish_reason(j->sse), j->t0);
            }
        } else {
            j->finished = 1;
            g4_err e2 = {.code = ev.code};
            snprintf(e2.msg, sizeof e2.msg, "%s", ev.text ? ev.text : "generation failed");
            g4_api_err_from(&ae, &e2, NULL);
            g4_sse_error(j->sse, &ae);
        }
        g4_sched_event_clear(&ev);
        if (rc) {
            g4_api_err_from(&ae, &err, NULL);
            if (g4_sse_error(j->sse, &ae)) return G4_HTTP_ABORT;
        }
    }
}

/* The response is over: sent completely, or the client went away (then this cancels the
 * generation, which frees its sequence and KV cache at the next token boundary). */
static void stream_done(void *user) {
    stream_job *j = user;
    if (!j->finished) g4_metrics_finished(j->s->metrics, "cancelled", 0, 0);
    g4_sched_req_free(j->req);
    g4_sse_free(j->sse);
    free(j);
}

static void make_id(g4_server *s, g4_api_kind kind, char *id, size_t n) {
    unsigned long long x = atomic_fetch_add(&s->next_id, 1) * 0x9E3779B97F4A7C15ull;
    snprintf(id, n, "%s-%016llx", kind == G4_API_CHAT ? "chatcmpl" : kind == G4_API_COMPLETIONS ? "cmpl" : "gen", x);
}

static void route_generate(g4_server *s, g4_http_req *hr, const char *ep, g4_api_kind kind) {
    size_t blen;
    const char *body = g4_http_body(hr, &blen);
    g4_api_request q;
    g4_api_err ae;
    if (g4_api_parse(kind, body, blen, &q, &ae)) { answer_error(s, hr, ep, &ae); return; }
    int32_t *ids = NULL;
    size_t n = 0;
    int thought = 0, rc = model_check(s, q.model, q.model_len, &ae);
    int prep = !rc && !(rc = prep_begin(s, blen, &ae));
    g4_err err = {0};
    if (rc) {
    } else if (q.chat) rc = chat_ids(s, q.chat, &ids, &n, &thought, &ae);
    else if (q.prompt) {
        if (g4_tokenizer_encode(s->tg.tok, q.prompt, q.prompt_len, q.add_special, &ids, &n, &err)) rc = g4_api_err_from(&ae, &err, "prompt");
    } else {
        ids = q.prompt_ids;
        n = q.n_prompt_ids;
        q.prompt_ids = NULL;
    }
    if (prep) prep_end(s, blen);
    if (!rc && n == 0) rc = g4_api_err_status(&ae, G4_EINVAL, "prompt", "the prompt is empty (no tokens)");
    g4_gen_params gp = {0};
    if (!rc) {
        int64_t ctx = g4_engine_max_ctx(s->e);
        if ((int64_t)n >= ctx)
            rc = g4_api_err_status(&ae, G4_ECONTEXT, q.chat ? "messages" : "prompt", "the prompt has %zu tokens; the context holds %lld, leaving no room to generate",
                                   n, (long long)ctx);
        gp.max_new_tokens = q.max_tokens;
        if (gp.max_new_tokens < 0) {
            gp.max_new_tokens = ctx - (int64_t)n;
            int64_t cap = s->tg.gen.max_new_tokens > 0 ? s->tg.gen.max_new_tokens : s->o.default_max_tokens;
            if (gp.max_new_tokens > cap) gp.max_new_tokens = cap;
        }
    }
    if (!rc) {
        g4_gen_config_sampling_defaults(&s->tg.gen, &gp.sampling);
        if (q.has_temperature) gp.sampling.temperature = (float)q.temperature;
        if (q.has_top_p) gp.sampling.top_p = (float)q.top_p;
        if (q.has_top_k) gp.sampling.top_k = q.top_k;
        if (q.has_min_p) gp.sampling.min_p = (float)q.min_p;
        if (q.has_seed) { gp.sampling.seed = q.seed; gp.sampling.has_seed = 1; }
        gp.stop_strings = (const char *const *)q.stops;
        gp.n_stop_strings = q.n_stops;
        gp.skip_special = q.parse_output ? 0 : 1;
        gp.ignore_eos = q.ignore_eos;
    }
    g4_sched_req *req = NULL;
    double t0 = now_s();
    if (!rc && g4_sched_submit(s->sched, ids, n, &gp, &req, &err)) {
        if (err.code == G4_EBUSY && atomic_load(&s->stopping)) g4_api_err_refuse(&ae, G4_API_SHUTTING_DOWN, NULL, "%s", err.msg);
        else g4_api_err_from(&ae, &err, err.code == G4_ECONTEXT ? "max_tokens" : NULL);
        rc = 1;
    }
    free(ids);
    if (rc) { g4_api_request_free(&q); answer_error(s, hr, ep, &ae); return; }
    char id[64];
    make_id(s, kind, id, sizeof id);

    if (q.stream) {
        stream_job *j = calloc(1, sizeof *j);
        g4_sse_opts so = {.kind = kind, .id = id, .model = s->model_id, .created = (long long)time(NULL), .include_usage = q.include_usage,
                          .parse_output = q.parse_output, .start_in_thought = thought};
        if (!j || g4_sse_create(&so, &j->sse, &err)) {
            free(j);
            g4_sched_req_free(req);
            g4_api_request_free(&q);
            g4_api_err_status(&ae, G4_ENOMEM, NULL, "out of memory");
            answer_error(s, hr, ep, &ae);
            return;
        }
        g4_api_request_free(&q);
        j->s = s;
        j->req = req;
        j->endpoint = ep;
        j->t0 = t0;
        j->t_out = now_s();
        static const char *const hdr[] = {"Cache-Control", "no-cache", "X-Accel-Buffering", "no", NULL, NULL};
        g4_metrics_request(s->metrics, ep, 200);
        g4_http_send_stream(hr, 200, "text/event-stream", stream_read, stream_done, j, hdr);
        return;
    }

    /* one answer: collect the text, watching for a client that goes away */
    char *text = NULL;
    size_t tl = 0, cap = 0;
    double t_tok = 0, t_check = now_s();
    int oom = 0;
    g4_sched_event done = {0};
    for (;;) {
        g4_sched_event ev;
        int got = g4_sched_next(req, &ev, 100);
        if (now_s() - t_check > 0.1) {
            t_check = now_s();
            if (g4_http_client_gone(hr)) g4_sched_cancel(req);
        }
        if (!got) continue;
        if (ev.kind == G4_EV_TEXT) {
            observe_token(s, &ev, &t_tok);
            if (tl + ev.len + 1 > cap) {
                size_t c = cap ? cap * 2 : 1024;
                while (c < tl + ev.len + 1) c *= 2;
                char *b = realloc(text, c);
                if (!b) oom = 1;
                else { text = b; cap = c; }
            }
            if (!oom) { memcpy(text + tl, ev.text, ev.len); tl += ev.len; text[tl] = 0; }
            g4_sched_event_clear(&ev);
            continue;
        }
        done = ev;
        break;
    }
    g4_sched_req_free(req);
    if (done.kind == G4_EV_ERROR || oom) {
        g4_err e2 = {.code = oom ? G4_ENOMEM : done.code};
        snprintf(e2.msg, sizeof e2.msg, "%s", oom ? "out of memory" : done.text ? done.text : "generation failed");
        g4_api_err_from(&ae, &e2, NULL);
        answer_error(s, hr, ep, &ae);
    } else if (!strcmp(done.finish_reason, "cancelled")) {
        observe_done(s, &done, "cancelled", t0);
        if (atomic_load(&s->stopping)) g4_api_err_refuse(&ae, G4_API_SHUTTING_DOWN, NULL, "the generation was cancelled: the server is shutting down");
        else g4_api_err_status(&ae, G4_ECANCELED, NULL, "the generation was cancelled");
        answer_error(s, hr, ep, &ae);
    } else {
        g4_api_output po = {0};
        int parsed = q.parse_output && g4_api_parse_output(text ? text : "", tl, thought, &po, &err) == G4_OK;
        g4_api_result res = {.id = id, .model = s->model_id, .created = (long long)time(NULL), .text = text ? text : "", .text_len = tl,
                             .parsed = parsed ? &po : NULL, .finish_reason = done.finish_reason, .prompt_tokens = done.prompt_tokens,
                             .completion_tokens = done.completion_tokens, .cached_tokens = done.cached_tokens, .ttft_ms = done.ttft_ms,
                             .tokens_per_s = done.tokens_per_s};
        observe_done(s, &done, g4_api_finish_reason(&res), t0);
        json_t *j = kind == G4_API_CHAT ? g4_api_chat_response(&res) : kind == G4_API_COMPLETIONS ? g4_api_completion_response(&res)
                                                                                                  : g4_api_generate_response(&res);
        answer_json(s, hr, ep, 200, j);
        if (parsed) g4_api_output_free(&po);
    }
    g4_sched_event_clear(&done);
    free(text);
    g4_api_request_free(&q);
}

/* ---- routing ------------------------------------------------------------------------------------ */

static int key_ok(const g4_server *s, const char *auth) {
    if (!s->api_key) return 1;
    if (!auth || strncmp(auth, "Bearer ", 7) != 0) return 0;
    const char *k = auth + 7;
    size_t a = strlen(k), b = strlen(s->api_key);
    unsigned diff = (unsigned)(a ^ b);
    for (size_t i = 0; i < a; i++) diff |= (unsigned char)k[i] ^ (unsigned char)s->api_key[i % (b ? b : 1)];
    return diff == 0;
}

typedef enum { R_HEALTH, R_METRICS, R_MODELS, R_TOKENIZE, R_DETOKENIZE, R_GENERATE, R_COMPLETIONS, R_CHAT } route_id;
static const struct { const char *path, *method; route_id id; int auth, needs_model; } routes[] = {
    {"/health", "GET", R_HEALTH, 0, 0},
    {"/metrics", "GET", R_METRICS, 0, 0},
    {"/v1/models", "GET", R_MODELS, 1, 0},
    {"/tokenize", "POST", R_TOKENIZE, 1, 1},
    {"/detokenize", "POST", R_DETOKENIZE, 1, 1},
    {"/generate", "POST", R_GENERATE, 1, 1},
    {"/v1/completions", "POST", R_COMPLETIONS, 1, 1},
    {"/v1/chat/completions", "POST", R_CHAT, 1, 1},
};

void g4_srv_handle(void *user, g4_http_req *r) {
    g4_server *s = user;
    const char *path = g4_http_path(r), *method = g4_http_method(r);
    g4_api_err ae;
    const char *bad = g4_http_malformed(r);
    if (bad) {
        g4_api_err_refuse(&ae, G4_API_MALFORMED, NULL, "%s", bad);
        answer_error_ex(s, r, "other", &ae, 1);
        return;
    }
    size_t k, nr = sizeof routes / sizeof *routes;
    for (k = 0; k < nr; k++) if (!strcmp(path, routes[k].path)) break;
    const char *ep = k < nr ? routes[k].path : "other";
    if (k == nr && !strncmp(path, "/v1/models/", 11)) { /* GET /v1/models/{id} */
        ep = "/v1/models/{id}";
        if (strcmp(method, "GET") && strcmp(method, "HEAD")) g4_api_err_refuse(&ae, G4_API_BAD_METHOD, NULL, "%s does not accept %s (use GET)", path, method);
        else if (!key_ok(s, g4_http_header(r, "Authorization"))) g4_api_err_refuse(&ae, G4_API_UNAUTHORIZED, NULL, "a valid API key is required (Authorization: Bearer KEY)");
        else if (model_check(s, path + 11, strlen(path + 11), &ae) == 0) { answer_json(s, r, ep, 200, model_card(s)); return; }
        answer_error(s, r, ep, &ae);
        return;
    }
    if (k == nr) { g4_api_err_refuse(&ae, G4_API_NO_ROUTE, NULL, "no route %s %s", method, path); answer_error(s, r, ep, &ae); return; }
    int head = !strcmp(method, "HEAD") && !strcmp(routes[k].method, "GET");
    if (strcmp(method, routes[k].method) && !head) {
        g4_api_err_refuse(&ae, G4_API_BAD_METHOD, NULL, "%s does not accept %s (use %s)", path, method, routes[k].method);
        answer_error(s, r, ep, &ae);
        return;
    }
    if (g4_http_body_too_large(r)) {
        g4_api_err_refuse(&ae, G4_API_TOO_LARGE, NULL, "the request body is larger than the limit of %zu bytes", s->o.max_body);
        answer_error(s, r, ep, &ae);
        return;
    }
    if (routes[k].auth && !key_ok(s, g4_http_header(r, "Authorization"))) {
        g4_api_err_refuse(&ae, G4_API_UNAUTHORIZED, NULL, "a valid API key is required (Authorization: Bearer KEY)");
        answer_error(s, r, ep, &ae);
        return;
    }
    if (routes[k].needs_model && !atomic_load(&s->ready)) {
        if (atomic_load(&s->stopping)) g4_api_err_refuse(&ae, G4_API_SHUTTING_DOWN, NULL, "the server is shutting down");
        else g4_api_err_refuse(&ae, G4_API_LOADING, NULL, "the model is still loading; retry shortly");
        answer_error(s, r, ep, &ae);
        return;
    }
    switch (routes[k].id) {
    case R_HEALTH: route_health(s, r, ep); break;
    case R_METRICS: route_metrics(s, r, ep); break;
    case R_MODELS: route_models(s, r, ep); break;
    case R_TOKENIZE: route_tokenize(s, r, ep); break;
    case R_DETOKENIZE: route_detokenize(s, r, ep); break;
    case R_GENERATE: route_generate(s, r, ep, G4_API_GENERATE); break;
    case R_COMPLETIONS: route_generate(s, r, ep, G4_API_COMPLETIONS); break;
    case R_CHAT: route_generate(s, r, ep, G4_API_CHAT); break;
    }
}
