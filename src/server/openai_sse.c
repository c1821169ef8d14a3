/* openai_sse.c — OpenAI's stream shape for sse.c: `data: {chunk}\n\n` frames of
 * chat.completion.chunk (a role chunk per choice, content, reasoning_content and tool_calls
 * deltas, logprobs with the next chunk) or text_completion, each choice's finish chunk, the usage
 * chunk (stream_options.include_usage), `data: [DONE]`, and errors as `data: {"error": …}` then
 * [DONE]. Knows JSON and the output parser's events; nothing about HTTP or the engine. */
#include <stdlib.h>
#include <string.h>

#include "server/openai.h"
#include "server/sse.h"

typedef struct {
    json_t *lp;               /* logprobs waiting for the choice's next chunk */
    size_t n_calls;
    const char *finish;       /* the finish reason its finish chunk said */
} oa_choice;

typedef struct {
    const char *id, *model;   /* the stream's (g4_sse_options) */
    long long created;
    int chat, include_usage, n;
    oa_choice *ch;
} oa_stream;

static void st_free(void *p) {
    oa_stream *a = p;
    for (int i = 0; a->ch && i < a->n; i++) json_decref(a->ch[i].lp);
    free(a->ch);
    free(a);
}

static void *st_create(const g4_sse_opts *o) {
    oa_stream *a = calloc(1, sizeof *a);
    if (!a) return NULL;
    *a = (oa_stream){.id = o->id, .model = o->model, .created = o->created, .chat = o->kind == G4_API_CHAT, .include_usage = o->include_usage,
                     .n = o->n_choices > 1 ? o->n_choices : 1};
    if (!(a->ch = calloc((size_t)a->n, sizeof *a->ch))) { st_free(a); return NULL; }
    return a;
}

/* Adds logprobs to a choice's waiting ones: chat arrays concatenate, completion lists too. */
static void st_logprobs(void *p, int i, json_t *lp) {
    oa_stream *a = p;
    oa_choice *c = &a->ch[i];
    if (!c->lp) { c->lp = lp; return; }
    if (a->chat) json_array_extend(c->lp, lp);
    else {
        const char *k;
        json_t *v;
        json_object_foreach(lp, k, v) json_array_extend(json_object_get(c->lp, k), v);
    }
    json_decref(lp);
}

static json_t *chunk(oa_stream *a, int i, json_t *delta_or_text, const char *finish) {
    oa_choice *c = &a->ch[i];
    json_t *j = json_pack("{s:s,s:s,s:I,s:s}", "id", a->id, "object", a->chat ? "chat.completion.chunk" : "text_completion",
                          "created", (json_int_t)a->created, "model", a->model);
    json_t *lp = json_null();
    if (c->lp) { /* the logprobs of the tokens generated since the last chunk */
        lp = a->chat ? json_pack("{s:o}", "content", c->lp) : c->lp;
        c->lp = NULL;
    }
    json_t *ch = json_pack("{s:i,s:o,s:o}", "index", i, a->chat ? "delta" : "text", delta_or_text, "logprobs", lp);
    json_object_set_new(ch, "finish_reason", finish ? json_string(finish) : json_null());
    json_object_set_new(j, "choices", json_pack("[o]", ch));
    if (a->include_usage) json_object_set_new(j, "usage", json_null());
    return j;
}

static int st_start(void *p, g4_sse *s, int i) {
    oa_stream *a = p;
    if (!a->chat) return G4_OK;
    return g4_sse_event(s, NULL, chunk(a, i, json_pack("{s:s,s:s}", "role", "assistant", "content", ""), NULL));
}

static int st_events(void *p, g4_sse *s, int i, const g4_out_event *ev, size_t n) {
    oa_stream *a = p;
    int rc = G4_OK;
    for (size_t k = 0; k < n && !rc; k++) {
        json_t *d = NULL;
        if (ev[k].kind == G4_OUT_CONTENT) d = json_pack("{s:s%}", "content", ev[k].text, ev[k].len);
        else if (ev[k].kind == G4_OUT_REASONING) d = json_pack("{s:s%}", "reasoning_content", ev[k].text, ev[k].len);
        else { /* a call: its id, type and name with empty arguments, then the arguments in pieces */
            json_t *tc = g4_api_tool_call(a->id, ev[k].call_index, ev[k].call);
            json_object_set_new(tc, "index", json_integer((json_int_t)ev[k].call_index));
            const char *args = json_string_value(json_object_get(json_object_get(tc, "function"), "arguments"));
            size_t alen = args ? strlen(args) : 0, ends[64], np = g4_api_args_pieces(args ? args : "", alen, ends, 64), from = 0;
            char *whole = args ? strdup(args) : NULL;
            json_object_set_new(json_object_get(tc, "function"), "arguments", json_string(""));
            a->ch[i].n_calls++;
            rc = g4_sse_event(s, NULL, chunk(a, i, json_pack("{s:[o]}", "tool_calls", tc), NULL));
            for (size_t q = 0; q < np && !rc && whole; q++) {
                size_t to = q + 1 < np && q < 63 ? ends[q] : alen; /* more than 64 members: the rest in the last */
                json_t *piece = json_pack("{s:I,s:{s:s%}}", "index", (json_int_t)ev[k].call_index, "function", "arguments", whole + from, to - from);
                rc = g4_sse_event(s, NULL, chunk(a, i, json_pack("{s:[o]}", "tool_calls", piece), NULL));
                from = to;
                if (to == alen) break;
            }
            free(whole);
            continue;
        }
        rc = g4_sse_event(s, NULL, chunk(a, i, d, NULL));
    }
    return rc;
}

static int st_text(void *p, g4_sse *s, int i, const char *text, size_t len) {
    return g4_sse_event(s, NULL, chunk(p, i, json_stringn(text, len), NULL));
}

static int st_finish(void *p, g4_sse *s, int i, const g4_sse_end *end) {
    oa_stream *a = p;
    oa_choice *c = &a->ch[i];
    c->finish = c->n_calls && !strcmp(end->finish_reason, "stop") ? "tool_calls" : end->finish_reason;
    return g4_sse_event(s, NULL, chunk(a, i, a->chat ? json_object() : json_string(""), c->finish));
}

static const char *st_finish_reason(void *p, int i) { return ((oa_stream *)p)->ch[i].finish; }

static int st_end(void *p, g4_sse *s, const g4_sse_end *totals) {
    oa_stream *a = p;
    int rc = G4_OK;
    if (a->include_usage) {
        json_t *j = json_pack("{s:s,s:s,s:I,s:s,s:[]}", "id", a->id, "object", a->chat ? "chat.completion.chunk" : "text_completion",
                              "created", (json_int_t)a->created, "model", a->model, "choices");
        json_object_set_new(j, "usage", g4_api_usage(totals->prompt_tokens, totals->completion_tokens, totals->cached_tokens));
        rc = g4_sse_event(s, NULL, j);
    }
    if (!rc) rc = g4_sse_write(s, "data: [DONE]\n\n", 14);
    return rc;
}

static int st_error(void *p, g4_sse *s, const g4_api_err *ae) {
    (void)p;
    char *e = g4_api_err_json(ae);
    if (!e) return G4_ENOMEM;
    int rc = g4_sse_write(s, "data: ", 6);
    if (!rc) rc = g4_sse_write(s, e, strlen(e));
    if (!rc) rc = g4_sse_write(s, "\n\ndata: [DONE]\n\n", 16);
    free(e);
    return rc;
}

const g4_sse_shape g4_openai_sse_shape = {.max_choices = 0, .create = st_create, .free = st_free, .start = st_start, .events = st_events,
                                          .text = st_text, .logprobs = st_logprobs, .finish = st_finish, .end = st_end,
                                          .error = st_error, .finish_reason = st_finish_reason};
