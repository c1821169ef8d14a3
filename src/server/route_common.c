/* route_common.c — what every route needs, shared by routes.c (routing, the small endpoints)
 * and generate.c (the generation routes) so that neither calls the other back: answers (JSON,
 * text, errors in the route's API shape, each counted in the metrics), the served model's name
 * check, and prompt preparation (its budget across requests, chat template and tokenizer).
 * Knows the HTTP adapter's interface, never MHD; routes nothing. */
#include "server/route_common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- answers --------------------------------------------------------------------------------- */

void g4_srv_answer_text(g4_server *s, g4_http_req *r, const g4_srv_route *rt, int status, const char *ctype, const char *body, size_t len,
                       const char *const *headers) {
    g4_http_send(r, status, ctype, body, len, headers);
    g4_metrics_request(s->metrics, rt->endpoint, status);
}

/* Takes the reference. */
void g4_srv_answer_json(g4_server *s, g4_http_req *r, const g4_srv_route *rt, int status, json_t *j) {
    char *txt = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!txt) {
        g4_api_err ae;
        g4_api_err_status(&ae, G4_ENOMEM, NULL, "out of memory while rendering the response");
        txt = g4_api_err_json(&ae);
        status = ae.status;
    }
    g4_srv_answer_text(s, r, rt, status, "application/json", txt ? txt : "{}", txt ? strlen(txt) : 2, NULL);
    free(txt);
}

static void answer_error_ex(g4_server *s, g4_http_req *r, const g4_srv_route *rt, const g4_api_err *ae, int close) {
    char *txt = g4_api_family_error(rt->api, ae);
    char retry[16];
    const char *hdr[6] = {0};
    int k = 0;
    snprintf(retry, sizeof retry, "%d", ae->retry_after_s);
    if (ae->retry_after_s > 0) { hdr[k++] = "Retry-After"; hdr[k++] = retry; }
    if (close) { hdr[k++] = "Connection"; hdr[k++] = "close"; }
    g4_srv_answer_text(s, r, rt, ae->status, "application/json", txt ? txt : "{}", txt ? strlen(txt) : 2, k ? hdr : NULL);
    free(txt);
}

void g4_srv_answer_error(g4_server *s, g4_http_req *r, const g4_srv_route *rt, const g4_api_err *ae) {
    answer_error_ex(s, r, rt, ae, 0);
}

void g4_srv_answer_error_close(g4_server *s, g4_http_req *r, const g4_srv_route *rt, const g4_api_err *ae) {
    answer_error_ex(s, r, rt, ae, 1);
}

/* ---- the model, prompt preparation ---------------------------------------------------------- */

/* name holds len bytes (JSON strings may hold U+0000: such a name matches nothing) */
static int model_ok(const g4_server *s, const char *name, size_t len) {
    if (!name) return 1;
    return (len == strlen(s->model_id) && !memcmp(name, s->model_id, len)) ||
           (s->model_alias && len == strlen(s->model_alias) && !memcmp(name, s->model_alias, len));
}

int g4_srv_model_check(g4_server *s, const char *name, size_t len, g4_api_err *ae) {
    if (model_ok(s, name, len)) return 0;
    return g4_api_err_refuse(ae, G4_API_MODEL_NOT_FOUND, "model", "the model \"%s%s\" does not exist; this server serves \"%s\"", name,
                             strlen(name) < len ? "\\u0000..." : "", s->model_id);
}

/* Prompt preparation (chat template, tokenizer) runs in the connection's thread, cannot be
 * interrupted and costs more the larger the request. Other connections keep being served (one
 * thread each), but the request bytes being prepared at once are bounded across requests
 * (render_budget) so that many huge requests cannot take every core and the memory: beyond it
 * the answer is 503 server_busy with Retry-After. A request alone always goes ahead. */
int g4_srv_prep_begin(g4_server *s, size_t body_len, g4_api_err *ae) {
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

void g4_srv_prep_end(g4_server *s, size_t body_len) {
    g4_metrics_preparing(s->metrics, -1);
    atomic_fetch_sub(&s->render_bytes, body_len + 1);
}

/* Renders a chat request and tokenizes it. *thought: the prompt ends inside a thought block. */
int g4_srv_chat_ids(g4_server *s, const json_t *chat, int32_t **ids, size_t *n, int *thought, g4_api_err *ae) {
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
