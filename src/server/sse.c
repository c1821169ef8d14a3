/* sse.c — OpenAI streaming chunks as server-sent events (see sse.h). Owns the chunk shapes and
 * the byte buffer; the output parser does the splitting of chat text. Knows nothing about
 * HTTP or the scheduler. */
#include "server/sse.h"

#include <stdlib.h>
#include <string.h>

struct g4_sse {
    g4_sse_opts o;
    char *id, *model;
    g4_output_stream *parser;
    char *buf;                /* pending bytes: buf[off..len) */
    size_t off, len, cap;
    int started, closed, n_calls;
    const char *finish;
    size_t cached_tokens;
};

static int append(g4_sse *s, const char *p, size_t n) {
    if (s->off && s->off == s->len) s->off = s->len = 0;
    if (s->len + n + 1 > s->cap) {
        if (s->off) { /* compact first */
            memmove(s->buf, s->buf + s->off, s->len - s->off);
            s->len -= s->off;
            s->off = 0;
        }
        if (s->len + n + 1 > s->cap) {
            size_t c = s->cap ? s->cap : 4096;
            while (c < s->len + n + 1) c *= 2;
            char *b = realloc(s->buf, c);
            if (!b) return G4_ENOMEM;
            s->buf = b;
            s->cap = c;
        }
    }
    memcpy(s->buf + s->len, p, n);
    s->len += n;
    return G4_OK;
}

/* data: <json>\n\n; takes the reference. */
static int frame(g4_sse *s, json_t *j) {
    if (!j) return G4_ENOMEM;
    char *txt = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (!txt) return G4_ENOMEM;
    int rc = append(s, "data: ", 6);
    if (!rc) rc = append(s, txt, strlen(txt));
    if (!rc) rc = append(s, "\n\n", 2);
    free(txt);
    return rc;
}

static json_t *chunk(g4_sse *s, json_t *delta_or_text, const char *finish) {
    int chat = s->o.kind == G4_API_CHAT;
    json_t *j = json_pack("{s:s,s:s,s:I,s:s}", "id", s->id, "object", chat ? "chat.completion.chunk" : "text_completion",
                          "created", (json_int_t)s->o.created, "model", s->model);
    json_t *choice = json_pack("{s:i,s:o,s:n}", "index", 0, chat ? "delta" : "text", delta_or_text, "logprobs");
    json_object_set_new(choice, "finish_reason", finish ? json_string(finish) : json_null());
    json_object_set_new(j, "choices", json_pack("[o]", choice));
    if (s->o.include_usage) json_object_set_new(j, "usage", json_null());
    return j;
}

static int start(g4_sse *s) {
    if (s->started || s->o.kind != G4_API_CHAT) { s->started = 1; return G4_OK; }
    s->started = 1;
    return frame(s, chunk(s, json_pack("{s:s,s:s}", "role", "assistant", "content", ""), NULL));
}

static int emit_events(g4_sse *s, const g4_out_event *ev, size_t n) {
    int rc = G4_OK;
    for (size_t i = 0; i < n && !rc; i++) {
        json_t *d = NULL;
        if (ev[i].kind == G4_OUT_CONTENT) d = json_pack("{s:s%}", "content", ev[i].text, ev[i].len);
        else if (ev[i].kind == G4_OUT_REASONING) d = json_pack("{s:s%}", "reasoning_content", ev[i].text, ev[i].len);
        else {
            json_t *tc = g4_api_tool_call(s->id, ev[i].call_index, ev[i].call);
            json_object_set_new(tc, "index", json_integer((json_int_t)ev[i].call_index));
            d = json_pack("{s:[o]}", "tool_calls", tc);
            s->n_calls++;
        }
        rc = frame(s, chunk(s, d, NULL));
    }
    return rc;
}

int g4_sse_create(const g4_sse_opts *o, g4_sse **out, g4_err *err) {
    g4_sse *s = calloc(1, sizeof *s);
    if (!s) return g4_err_set(err, G4_ENOMEM, "out of memory");
    s->o = *o;
    s->id = strdup(o->id);
    s->model = strdup(o->model);
    if (!s->id || !s->model) { g4_sse_free(s); return g4_err_set(err, G4_ENOMEM, "out of memory"); }
    if (o->parse_output) {
        g4_output_parse_opts po = {.start_in_thought = o->start_in_thought};
        int rc = g4_output_stream_create(&po, &s->parser, err);
        if (rc) { g4_sse_free(s); return rc; }
    }
    *out = s;
    return G4_OK;
}

void g4_sse_free(g4_sse *s) {
    if (!s) return;
    g4_output_stream_free(s->parser);
    free(s->id);
    free(s->model);
    free(s->buf);
    free(s);
}

int g4_sse_feed(g4_sse *s, const char *text, size_t len, g4_err *err) {
    if (s->closed) return g4_err_set(err, G4_EINVAL, "the stream is closed");
    int rc = start(s);
    if (rc) return g4_err_set(err, rc, "out of memory");
    if (!len) return G4_OK;
    if (s->parser) {
        const g4_out_event *ev;
        size_t n;
        if ((rc = g4_output_stream_feed(s->parser, text, len, &ev, &n, err))) return rc;
        rc = emit_events(s, ev, n);
    } else {
        rc = frame(s, chunk(s, json_stringn(text, len), NULL));
    }
    return rc ? g4_err_set(err, rc, "out of memory") : G4_OK;
}

int g4_sse_finish(g4_sse *s, const char *finish_reason, size_t prompt_tokens, size_t completion_tokens, g4_err *err) {
    if (s->closed) return g4_err_set(err, G4_EINVAL, "the stream is closed");
    int rc = start(s);
    if (!rc && s->parser) {
        const g4_out_event *ev;
        size_t n;
        if ((rc = g4_output_stream_finish(s->parser, &ev, &n, err))) return rc;
        rc = emit_events(s, ev, n);
    }
    s->finish = s->n_calls && !strcmp(finish_reason, "stop") ? "tool_calls" : finish_reason;
    if (!rc) rc = frame(s, chunk(s, s->o.kind == G4_API_CHAT ? json_object() : json_string(""), s->finish));
    if (!rc && s->o.include_usage) {
        int chat = s->o.kind == G4_API_CHAT;
        json_t *j = json_pack("{s:s,s:s,s:I,s:s,s:[]}", "id", s->id, "object", chat ? "chat.completion.chunk" : "text_completion",
                              "created", (json_int_t)s->o.created, "model", s->model, "choices");
        json_object_set_new(j, "usage", g4_api_usage(prompt_tokens, completion_tokens, s->cached_tokens));
        rc = frame(s, j);
    }
    if (!rc) rc = append(s, "data: [DONE]\n\n", 14);
    s->closed = 1;
    return rc ? g4_err_set(err, rc, "out of memory") : G4_OK;
}

int g4_sse_error(g4_sse *s, const g4_api_err *ae) {
    if (s->closed) return G4_EINVAL;
    s->closed = 1;
    char *e = g4_api_err_json(ae);
    if (!e) return G4_ENOMEM;
    int rc = append(s, "data: ", 6);
    if (!rc) rc = append(s, e, strlen(e));
    if (!rc) rc = append(s, "\n\ndata: [DONE]\n\n", 16);
    free(e);
    return rc;
}

int g4_sse_comment(g4_sse *s, const char *text) {
    int rc = append(s, ": ", 2);
    if (!rc) rc = append(s, text, strlen(text));
    if (!rc) rc = append(s, "\n\n", 2);
    return rc;
}

size_t g4_sse_take(g4_sse *s, char *buf, size_t max) {
    size_t n = s->len - s->off;
    if (n > max) n = max;
    if (!n) return 0; /* nothing framed yet: buf may still be NULL */
    memcpy(buf, s->buf + s->off, n);
    s->off += n;
    return n;
}

size_t g4_sse_pending(const g4_sse *s) { return s->len - s->off; }
int g4_sse_closed(const g4_sse *s) { return s->closed; }
const char *g4_sse_finish_reason(const g4_sse *s) { return s->finish; }
void g4_sse_set_cached_tokens(g4_sse *s, size_t n) { s->cached_tokens = n; }
