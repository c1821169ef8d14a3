/* sse.c — streamed generations as server-sent events (see sse.h). Owns the byte buffer, SSE
 * framing and the output parser of each choice; what the events say is the stream shape's,
 * given by the caller. Knows nothing about HTTP, the scheduler or any API. */
#include "server/sse.h"

#include <stdlib.h>
#include <string.h>

typedef struct choice {
    g4_output_stream *parser;
    int started, finished;
    g4_sse_end end;
} choice;

struct g4_sse {
    g4_sse_opts o;            /* id and model: copies the stream owns (shapes may keep the pointers) */
    char *id, *model;
    choice *ch;
    int n;
    const g4_sse_shape *shape;
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
int g4_sse_event(g4_sse *s, const char *name, json_t *j) {
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

int g4_sse_write(g4_sse *s, const char *bytes, size_t n) { return append(s, bytes, n); }
const g4_sse_opts *g4_sse_options(const g4_sse *s) { return &s->o; }

static int start(g4_sse *s, int i) {
    choice *c = &s->ch[i];
    if (c->started) return G4_OK;
    c->started = 1;
    return s->shape->start ? s->shape->start(s->st, s, i) : G4_OK;
}

static void give_logprobs(g4_sse *s, int i, json_t *lp) {
    if (!lp) return;
    if (s->shape->logprobs) s->shape->logprobs(s->st, i, lp);
    else json_decref(lp);
}

static int give_text(g4_sse *s, int i, const char *text, size_t len) {
    if (s->shape->text) return s->shape->text(s->st, s, i, text, len);
    g4_out_event ev = {.kind = G4_OUT_CONTENT, .text = text, .len = len};
    return s->shape->events(s->st, s, i, &ev, 1);
}

int g4_sse_create(const g4_sse_opts *o, g4_sse **out, g4_err *err) {
    if (!o->shape) return g4_err_set(err, G4_EINVAL, "a stream needs a shape");
    g4_sse *s = calloc(1, sizeof *s);
    if (!s) return g4_err_set(err, G4_ENOMEM, "out of memory");
    s->o = *o;
    s->n = o->n_choices > 1 ? o->n_choices : 1;
    s->shape = o->shape;
    if (s->shape->max_choices && s->n > s->shape->max_choices) { free(s); return g4_err_set(err, G4_EINVAL, "this API streams one choice"); }
    s->o.id = s->id = strdup(o->id ? o->id : "");
    s->o.model = s->model = strdup(o->model ? o->model : "");
    s->ch = calloc((size_t)s->n, sizeof *s->ch);
    s->st = s->ch && s->id && s->model ? s->shape->create(&s->o) : NULL;
    if (!s->st) { g4_sse_free(s); return g4_err_set(err, G4_ENOMEM, "out of memory"); }
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
    for (int i = 0; s->ch && i < s->n; i++) g4_output_stream_free(s->ch[i].parser);
    if (s->st) s->shape->free(s->st);
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
    int rc = start(s, i); /* the first bytes of a choice carry no logprobs */
    give_logprobs(s, i, logprobs);
    if (rc) return g4_err_set(err, rc, "out of memory");
    if (!len) return G4_OK;
    if (c->parser) {
        const g4_out_event *ev;
        size_t n;
        if ((rc = g4_output_stream_feed(c->parser, text, len, &ev, &n, err))) return rc;
        rc = s->shape->events(s->st, s, i, ev, n);
    } else {
        rc = give_text(s, i, text, len);
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
    give_logprobs(s, i, logprobs);
    if (!rc && c->parser) {
        const g4_out_event *ev;
        size_t n;
        if ((rc = g4_output_stream_finish(c->parser, &ev, &n, err))) return rc;
        rc = s->shape->events(s->st, s, i, ev, n);
    }
    c->finished = 1;
    c->end = *end;
    if (!rc && s->shape->finish) rc = s->shape->finish(s->st, s, i, end);
    return rc ? g4_err_set(err, rc, "out of memory") : G4_OK;
}

int g4_sse_end_stream(g4_sse *s, const g4_sse_end *totals, g4_err *err) {
    if (s->closed) return g4_err_set(err, G4_EINVAL, "the stream is closed");
    g4_sse_end e = *totals;
    e.finish_reason = s->ch[0].end.finish_reason;
    e.stop_sequence = s->ch[0].end.stop_sequence;
    int rc = s->shape->end(s->st, s, &e);
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
    return s->shape->error(s->st, s, ae);
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

const char *g4_sse_finish_reason(const g4_sse *s) {
    if (!s->ch[0].finished) return NULL;
    const char *r = s->shape->finish_reason ? s->shape->finish_reason(s->st, 0) : NULL;
    return r ? r : s->ch[0].end.finish_reason;
}

void g4_sse_set_cached_tokens(g4_sse *s, size_t n) { s->cached_tokens = n; }
