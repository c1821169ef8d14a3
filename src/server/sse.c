/* sse.c — streamed generations as server-sent events (see sse.h). Owns the byte buffer, the
 * output parser of each choice and OpenAI's chunk shapes; the Anthropic and Responses event
 * shapes are theirs (anthropic.c, responses.c), reached through their g4_sse_shape. Knows
 * nothing about HTTP or the scheduler. */
#include "server/sse.h"

#include <stdlib.h>
#include <string.h>

#include "server/anthropic.h"
#include "server/responses.h"

typedef struct choice {
    g4_output_stream *parser;
    int started, n_calls, finished;
    const char *finish;
    json_t *lp;               /* logprobs waiting for the choice's next chunk */
    g4_sse_end end;
} choice;

struct g4_sse {
    g4_sse_opts o;
    char *id, *model;
    choice *ch;
    int n;
    const g4_sse_shape *shape;/* Anthropic, Responses: named events; NULL: OpenAI chunks */
    void *st;
    char *buf;                /* pending bytes: buf[off..len) */
    size_t off, len, cap;
    int closed;
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

/* [event: name\n]data: <json>\n\n; takes the reference. */
static int frame_named(g4_sse *s, const char *name, json_t *j) {
    if (!j) return G4_ENOMEM;
    char *txt = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (!txt) return G4_ENOMEM;
    int rc = G4_OK;
    if (name) {
        rc = append(s, "event: ", 7);
        if (!rc) rc = append(s, name, strlen(name));
        if (!rc) rc = append(s, "\n", 1);
    }
    if (!rc) rc = append(s, "data: ", 6);
    if (!rc) rc = append(s, txt, strlen(txt));
    if (!rc) rc = append(s, "\n\n", 2);
    free(txt);
    return rc;
}

static int frame(g4_sse *s, json_t *j) { return frame_named(s, NULL, j); }

int g4_sse_event(g4_sse *s, const char *name, json_t *data) { return frame_named(s, name, data); }
const g4_sse_opts *g4_sse_options(const g4_sse *s) { return &s->o; }

/* Adds logprobs to a choice's waiting ones: chat arrays concatenate, completion lists too. */
static void lp_add(g4_sse *s, choice *c, json_t *lp) {
    if (!lp) return;
    if (!c->lp) { c->lp = lp; return; }
    if (s->o.kind == G4_API_CHAT) json_array_extend(c->lp, lp);
    else {
        const char *k;
        json_t *v;
        json_object_foreach(lp, k, v) json_array_extend(json_object_get(c->lp, k), v);
    }
    json_decref(lp);
}

static json_t *chunk(g4_sse *s, int i, json_t *delta_or_text, const char *finish) {
    int chat = s->o.kind == G4_API_CHAT;
    choice *c = &s->ch[i];
    json_t *j = json_pack("{s:s,s:s,s:I,s:s}", "id", s->id, "object", chat ? "chat.completion.chunk" : "text_completion",
                          "created", (json_int_t)s->o.created, "model", s->model);
    json_t *lp = json_null();
    if (c->lp) { /* the logprobs of the tokens generated since the last chunk */
        lp = chat ? json_pack("{s:o}", "content", c->lp) : c->lp;
        c->lp = NULL;
    }
    json_t *ch = json_pack("{s:i,s:o,s:o}", "index", i, chat ? "delta" : "text", delta_or_text, "logprobs", lp);
    json_object_set_new(ch, "finish_reason", finish ? json_string(finish) : json_null());
    json_object_set_new(j, "choices", json_pack("[o]", ch));
    if (s->o.include_usage) json_object_set_new(j, "usage", json_null());
    return j;
}

static int start(g4_sse *s, int i) {
    choice *c = &s->ch[i];
    if (c->started) return G4_OK;
    c->started = 1;
    if (s->shape) return i == 0 ? s->shape->start(s->st, s) : G4_OK;
    if (s->o.kind != G4_API_CHAT) return G4_OK;
    return frame(s, chunk(s, i, json_pack("{s:s,s:s}", "role", "assistant", "content", ""), NULL));
}

static int emit_events(g4_sse *s, int i, const g4_out_event *ev, size_t n) {
    if (s->shape) return s->shape->events(s->st, s, ev, n);
    int rc = G4_OK;
    for (size_t k = 0; k < n && !rc; k++) {
        json_t *d = NULL;
        if (ev[k].kind == G4_OUT_CONTENT) d = json_pack("{s:s%}", "content", ev[k].text, ev[k].len);
        else if (ev[k].kind == G4_OUT_REASONING) d = json_pack("{s:s%}", "reasoning_content", ev[k].text, ev[k].len);
        else { /* a call: its id, type and name with empty arguments, then the arguments in pieces */
            json_t *tc = g4_api_tool_call(s->id, ev[k].call_index, ev[k].call);
            json_object_set_new(tc, "index", json_integer((json_int_t)ev[k].call_index));
            const char *args = json_string_value(json_object_get(json_object_get(tc, "function"), "arguments"));
            size_t alen = args ? strlen(args) : 0, ends[64], np = g4_api_args_pieces(args ? args : "", alen, ends, 64), from = 0;
            char *whole = args ? strdup(args) : NULL;
            json_object_set_new(json_object_get(tc, "function"), "arguments", json_string(""));
            s->ch[i].n_calls++;
            rc = frame(s, chunk(s, i, json_pack("{s:[o]}", "tool_calls", tc), NULL));
            for (size_t p = 0; p < np && !rc && whole; p++) {
                size_t to = p + 1 < np && p < 63 ? ends[p] : alen; /* more than 64 members: the rest in the last */
                json_t *piece = json_pack("{s:I,s:{s:s%}}", "index", (json_int_t)ev[k].call_index, "function", "arguments", whole + from, to - from);
                rc = frame(s, chunk(s, i, json_pack("{s:[o]}", "tool_calls", piece), NULL));
                from = to;
                if (to == alen) break;
            }
            free(whole);
            continue;
        }
        rc = frame(s, chunk(s, i, d, NULL));
    }
    return rc;
}

int g4_sse_create(const g4_sse_opts *o, g4_sse **out, g4_err *err) {
    g4_sse *s = calloc(1, sizeof *s);
    if (!s) return g4_err_set(err, G4_ENOMEM, "out of memory");
    s->o = *o;
    s->n = o->n_choices > 1 ? o->n_choices : 1;
    s->id = strdup(o->id);
    s->model = strdup(o->model);
    s->ch = calloc((size_t)s->n, sizeof *s->ch);
    s->shape = o->kind == G4_API_ANTHROPIC ? &g4_anth_sse_shape : o->kind == G4_API_RESPONSES ? &g4_resp_sse_shape : NULL;
    if (s->shape && s->n != 1) { g4_sse_free(s); return g4_err_set(err, G4_EINVAL, "this API streams one choice"); }
    if (s->shape) s->st = s->shape->create(&s->o);
    if (!s->id || !s->model || !s->ch || (s->shape && !s->st)) { g4_sse_free(s); return g4_err_set(err, G4_ENOMEM, "out of memory"); }
    for (int i = 0; o->parse_output && i < s->n; i++) {
        g4_output_parse_opts po = {.start_in_thought = o->start_in_thought};
        int rc = g4_output_stream_create(&po, &s->ch[i].parser, err);
        if (rc) { g4_sse_free(s); return rc; }
    }
    *out = s;
    return G4_OK;
}

void g4_sse_free(g4_sse *s) {
    if (!s) return;
    for (int i = 0; s->ch && i < s->n; i++) {
        g4_output_stream_free(s->ch[i].parser);
        json_decref(s->ch[i].lp);
    }
    if (s->shape && s->st) s->shape->free(s->st);
    free(s->ch);
    free(s->id);
    free(s->model);
    free(s->buf);
    free(s);
}

int g4_sse_feed_choice(g4_sse *s, int i, const char *text, size_t len, json_t *logprobs, g4_err *err) {
    if (s->closed || i < 0 || i >= s->n || s->ch[i].finished) {
        json_decref(logprobs);
        return g4_err_set(err, G4_EINVAL, "the stream is closed");
    }
    choice *c = &s->ch[i];
    int rc = start(s, i); /* the role chunk carries no logprobs */
    lp_add(s, c, logprobs);
    if (rc) return g4_err_set(err, rc, "out of memory");
    if (!len) return G4_OK;
    if (c->parser) {
        const g4_out_event *ev;
        size_t n;
        if ((rc = g4_output_stream_feed(c->parser, text, len, &ev, &n, err))) return rc;
        rc = emit_events(s, i, ev, n);
    } else {
        rc = frame(s, chunk(s, i, json_stringn(text, len), NULL));
    }
    return rc ? g4_err_set(err, rc, "out of memory") : G4_OK;
}

int g4_sse_feed(g4_sse *s, const char *text, size_t len, g4_err *err) { return g4_sse_feed_choice(s, 0, text, len, NULL, err); }

int g4_sse_finish_choice(g4_sse *s, int i, const g4_sse_end *end, json_t *logprobs, g4_err *err) {
    if (s->closed || i < 0 || i >= s->n || s->ch[i].finished) {
        json_decref(logprobs);
        return g4_err_set(err, G4_EINVAL, "the stream is closed");
    }
    choice *c = &s->ch[i];
    int rc = start(s, i);
    lp_add(s, c, logprobs);
    if (!rc && c->parser) {
        const g4_out_event *ev;
        size_t n;
        if ((rc = g4_output_stream_finish(c->parser, &ev, &n, err))) return rc;
        rc = emit_events(s, i, ev, n);
    }
    c->finished = 1;
    c->end = *end;
    c->finish = c->n_calls && !strcmp(end->finish_reason, "stop") ? "tool_calls" : end->finish_reason;
    if (!rc && !s->shape) rc = frame(s, chunk(s, i, s->o.kind == G4_API_CHAT ? json_object() : json_string(""), c->finish));
    return rc ? g4_err_set(err, rc, "out of memory") : G4_OK;
}

int g4_sse_end_stream(g4_sse *s, const g4_sse_end *totals, g4_err *err) {
    if (s->closed) return g4_err_set(err, G4_EINVAL, "the stream is closed");
    int rc = G4_OK;
    if (s->shape) {
        g4_sse_end e = *totals;
        e.finish_reason = s->ch[0].end.finish_reason;
        e.stop_sequence = s->ch[0].end.stop_sequence;
        rc = s->shape->finish(s->st, s, &e);
    } else {
        if (s->o.include_usage) {
            int chat = s->o.kind == G4_API_CHAT;
            json_t *j = json_pack("{s:s,s:s,s:I,s:s,s:[]}", "id", s->id, "object", chat ? "chat.completion.chunk" : "text_completion",
                                  "created", (json_int_t)s->o.created, "model", s->model, "choices");
            json_object_set_new(j, "usage", g4_api_usage(totals->prompt_tokens, totals->completion_tokens, totals->cached_tokens));
            rc = frame(s, j);
        }
        if (!rc) rc = append(s, "data: [DONE]\n\n", 14);
    }
    s->closed = 1;
    return rc ? g4_err_set(err, rc, "out of memory") : G4_OK;
}

int g4_sse_finish(g4_sse *s, const char *finish_reason, size_t prompt_tokens, size_t completion_tokens, g4_err *err) {
    g4_sse_end e = {.finish_reason = finish_reason, .prompt_tokens = prompt_tokens, .completion_tokens = completion_tokens,
                    .cached_tokens = s->cached_tokens};
    int rc = g4_sse_finish_choice(s, 0, &e, NULL, err);
    return rc ? rc : g4_sse_end_stream(s, &e, err);
}

int g4_sse_error(g4_sse *s, const g4_api_err *ae) {
    if (s->closed) return G4_EINVAL;
    s->closed = 1;
    if (s->shape) return s->shape->error(s->st, s, ae);
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
const char *g4_sse_finish_reason(const g4_sse *s) { return s->ch[0].finish; }
void g4_sse_set_cached_tokens(g4_sse *s, size_t n) { s->cached_tokens = n; }
