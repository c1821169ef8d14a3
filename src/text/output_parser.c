/* output_parser.c — Gemma-4 model-turn output: thinking channel, answer text, tool calls.
 *
 * Owns the marker grammar of a generated turn (see output_parser.h), the tool-call argument
 * syntax (<|"|>strings<|"|>, bare keys, nested objects/arrays) and its conversion to JSON, and
 * the streaming state machine that the whole-text parse is built on (so both agree by
 * construction: the whole-text parse is one feed plus finish). Knows nothing about tokens,
 * ids, HTTP or OpenAI beyond producing a compact JSON `arguments` string. */
#include "text/output_parser.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ growable buffer */

typedef struct {
    char *p;
    size_t n, cap;
} sbuf;

static int sb_reserve(sbuf *b, size_t extra) {
    if (b->n + extra + 1 <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->n + extra + 1) {
        if (cap > SIZE_MAX / 2) return -1;
        cap *= 2;
    }
    char *p = realloc(b->p, cap);
    if (!p) return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

static int sb_add(sbuf *b, const char *s, size_t n) {
    if (sb_reserve(b, n)) return -1;
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

static int sb_adds(sbuf *b, const char *s) { return sb_add(b, s, strlen(s)); }

static void sb_free(sbuf *b) {
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

/* Detaches the contents as a NUL-terminated string ("" when empty); NULL on OOM. */
static char *sb_take(sbuf *b) {
    char *p = b->p;
    if (!p) p = calloc(1, 1);
    b->p = NULL;
    b->n = b->cap = 0;
    return p;
}

/* ------------------------------------------------------------------ markers */

#define MK_CHANNEL "<|channel>"
#define MK_CHANNEL_END "<channel|>"
#define MK_CALL "<|tool_call>"
#define MK_CALL_END "<tool_call|>"
#define MK_STR "<|\"|>"
#define MK_TURN_END "<turn|>"
#define MK_EOS "<eos>"
#define MK_TOOL_RESP "<|tool_response>"
#define MK_STR_LEN 5

enum { CLS_NONE, CLS_PARTIAL, CLS_FULL };

/* Is p[0..avail) a marker from the list (FULL, *which, *mlen), a proper prefix of one that
 * more text could complete (PARTIAL, only when !final), or neither? */
static int classify(const char *p, size_t avail, const char *const *mk, int n, int final, int *which,
                    size_t *mlen) {
    int partial = 0;
    for (int i = 0; i < n; i++) {
        size_t l = strlen(mk[i]);
        if (avail >= l) {
            if (memcmp(p, mk[i], l) == 0) {
                *which = i;
                *mlen = l;
                return CLS_FULL;
            }
        } else if (memcmp(p, mk[i], avail) == 0) {
            partial = 1;
        }
    }
    return (partial && !final) ? CLS_PARTIAL : CLS_NONE;
}

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* ------------------------------------------------------------------ UTF-8 and JSON text */

static int utf8_valid(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        if (c < 0x80) { i++; continue; }
        size_t k;
        uint32_t cp;
        if (c >= 0xC2 && c <= 0xDF) { k = 1; cp = c & 0x1F; }
        else if (c >= 0xE0 && c <= 0xEF) { k = 2; cp = c & 0x0F; }
        else if (c >= 0xF0 && c <= 0xF4) { k = 3; cp = c & 0x07; }
        else return 0;
        if (i + k >= n) return 0; /* truncated sequence */
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (s[i + j] & 0x3F);
        }
        if ((k == 2 && cp < 0x800) || (k == 3 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
        i += k + 1;
    }
    return 1;
}

static int json_str_out(sbuf *b, const char *s, size_t n) {
    if (sb_add(b, "\"", 1)) return -1;
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char tmp[8];
        if (c == '"') esc = "\\\"";
        else if (c == '\\') esc = "\\\\";
        else if (c == '\n') esc = "\\n";
        else if (c == '\r') esc = "\\r";
        else if (c == '\t') esc = "\\t";
        else if (c == '\b') esc = "\\b";
        else if (c == '\f') esc = "\\f";
        else if (c < 0x20) {
            snprintf(tmp, sizeof tmp, "\\u%04x", c);
            esc = tmp;
        }
        if (esc) {
            if (sb_add(b, s + i - run, run) || sb_adds(b, esc)) return -1;
            run = 0;
        } else {
            run++;
        }
    }
    if (sb_add(b, s + n - run, run)) return -1;
    return sb_add(b, "\"", 1);
}

/* ------------------------------------------------------------------ tool-call arguments */

#define TC_MAX_DEPTH 64

typedef struct {
    const char *base, *p, *end;
    sbuf out;     /* compact JSON text */
    char msg[256];
    int oom;
} tcp;

static int tc_fail(tcp *P, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int tc_fail(tcp *P, const char *fmt, ...) {
    if (P->msg[0]) return -1; /* keep the first (innermost) message */
    char m[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    snprintf(P->msg, sizeof P->msg, "%s at offset %zu", m, (size_t)(P->p - P->base));
    return -1;
}

static int tc_oom(tcp *P) {
    P->oom = 1;
    return tc_fail(P, "out of memory");
}

static void tc_ws(tcp *P) {
    while (P->p < P->end && is_ws(*P->p)) P->p++;
}

static int tc_at(tcp *P, const char *s) {
    size_t l = strlen(s);
    return (size_t)(P->end - P->p) >= l && memcmp(P->p, s, l) == 0;
}

/* What follows a bare token: end, white space or a structural character. */
static int tc_delim(tcp *P) {
    if (P->p >= P->end) return 1;
    char c = *P->p;
    return is_ws(c) || c == ',' || c == '}' || c == ']';
}

/* Keys and strings must be UTF-8, keys without U+0000: jansson reads no NUL in an object key
 * (not even with JSON_ALLOW_NUL), so `arguments` would not read back. */
static int tc_text_bad(tcp *P, const char *s, size_t n, const char *what) {
    if (!utf8_valid((const unsigned char *)s, n)) return tc_fail(P, "%s is not valid UTF-8", what);
    if (!strcmp(what, "key") && memchr(s, 0, n)) return tc_fail(P, "key contains a NUL byte (U+0000)");
    return 0;
}

/* <|"|>...<|"|> with P->p at the opening marker: the raw bytes go to s and n. */
static int tc_string_raw(tcp *P, const char **s, size_t *n, const char *what) {
    P->p += MK_STR_LEN;
    const char *start = P->p;
    const char *q = memmem(start, (size_t)(P->end - start), MK_STR, MK_STR_LEN);
    if (!q) return tc_fail(P, "unterminated <|\"|> string");
    if (tc_text_bad(P, start, (size_t)(q - start), what)) return -1;
    *s = start;
    *n = (size_t)(q - start);
    P->p = q + MK_STR_LEN;
    return 0;
}

static json_t *tc_value(tcp *P, int depth);

static json_t *tc_number(tcp *P) {
    const char *s = P->p, *q = s;
    int is_int = 1;
    if (q < P->end && *q == '-') q++;
    if (q < P->end && *q == '0') q++;
    else if (q < P->end && *q >= '1' && *q <= '9')
        while (q < P->end && *q >= '0' && *q <= '9') q++;
    else {
        tc_fail(P, "bad number");
        return NULL;
    }
    if (q < P->end && *q == '.') {
        is_int = 0;
        q++;
        const char *d = q;
        while (q < P->end && *q >= '0' && *q <= '9') q++;
        if (q == d) { P->p = q; tc_fail(P, "bad number: no digits after '.'"); return NULL; }
    }
    if (q < P->end && (*q == 'e' || *q == 'E')) {
        is_int = 0;
        q++;
        if (q < P->end && (*q == '+' || *q == '-')) q++;
        const char *d = q;
        while (q < P->end && *q >= '0' && *q <= '9') q++;
        if (q == d) { P->p = q; tc_fail(P, "bad number: no digits in the exponent"); return NULL; }
    }
    P->p = q;
    if (!tc_delim(P)) { tc_fail(P, "unexpected character '%c' after a number", *P->p); return NULL; }
    char tmp[64];
    size_t n = (size_t)(q - s);
    char *buf = n < sizeof tmp ? tmp : malloc(n + 1);
    if (!buf) { tc_oom(P); return NULL; }
    memcpy(buf, s, n);
    buf[n] = 0;
    json_t *v = NULL;
    if (is_int) {
        errno = 0;
        long long ll = strtoll(buf, NULL, 10);
        if (errno == 0) v = json_integer((json_int_t)ll);
        else is_int = 0;
    }
    if (!is_int) {
        errno = 0;
        double d = strtod(buf, NULL);
        if (errno == ERANGE && (d > 1.0 || d < -1.0)) {
            if (buf != tmp) free(buf);
            tc_fail(P, "number out of range");
            return NULL;
        }
        v = json_real(d);
    }
    if (buf != tmp) free(buf);
    if (!v) { tc_oom(P); return NULL; }
    /* an integer too big for 64 bits became a real: written as one (".0"), since jansson
     * refuses to read an integer it cannot hold */
    if (sb_add(&P->out, s, n) || (json_is_real(v) && !memchr(s, '.', n) && !memchr(s, 'e', n) && !memchr(s, 'E', n) &&
                                  sb_add(&P->out, ".0", 2))) {
        json_decref(v);
        tc_oom(P);
        return NULL;
    }
    return v;
}

static json_t *tc_object(tcp *P, int depth) {
    P->p++; /* '{' */
    json_t *o = json_object();
    if (!o || sb_add(&P->out, "{", 1)) { json_decref(o); tc_oom(P); return NULL; }
    tc_ws(P);
    if (P->p < P->end && *P->p == '}') {
        P->p++;
        if (sb_add(&P->out, "}", 1)) goto oom;
        return o;
    }
    for (int first = 1;; first = 0) {
        tc_ws(P);
        const char *k;
        size_t kn;
        if (tc_at(P, MK_STR)) {
            if (tc_string_raw(P, &k, &kn, "key")) goto bad;
        } else {
            k = P->p;
            while (P->p < P->end && *P->p != ':' && *P->p != '{' && *P->p != '}' && *P->p != '[' &&
                   *P->p != ']' && *P->p != ',' && *P->p != '<' && !is_ws(*P->p))
                P->p++;
            kn = (size_t)(P->p - k);
            if (kn == 0) {
                if (P->p >= P->end) tc_fail(P, "unterminated object");
                else tc_fail(P, "expected a key, found '%c'", *P->p);
                goto bad;
            }
            if (tc_text_bad(P, k, kn, "key")) goto bad;
        }
        tc_ws(P);
        if (P->p >= P->end || *P->p != ':') {
            tc_fail(P, "expected ':' after key '%.*s'", (int)(kn > 40 ? 40 : kn), k);
            goto bad;
        }
        P->p++;
        if (json_object_getn(o, k, kn)) { tc_fail(P, "duplicate key '%.*s'", (int)(kn > 40 ? 40 : kn), k); goto bad; }
        if (!first && sb_add(&P->out, ",", 1)) goto oom;
        if (json_str_out(&P->out, k, kn) || sb_add(&P->out, ":", 1)) goto oom;
        tc_ws(P);
        json_t *v = tc_value(P, depth + 1);
        if (!v) goto bad;
        if (json_object_setn_new(o, k, kn, v)) goto oom;
        tc_ws(P);
        if (P->p >= P->end) { tc_fail(P, "unterminated object"); goto bad; }
        if (*P->p == ',') { P->p++; continue; }
        if (*P->p == '}') { P->p++; break; }
        tc_fail(P, "expected ',' or '}' in an object, found '%c'", *P->p);
        goto bad;
    }
    if (sb_add(&P->out, "}", 1)) goto oom;
    return o;
oom:
    tc_oom(P);
bad:
    json_decref(o);
    return NULL;
}

static json_t *tc_array(tcp *P, int depth) {
    P->p++; /* '[' */
    json_t *a = json_array();
    if (!a || sb_add(&P->out, "[", 1)) { json_decref(a); tc_oom(P); return NULL; }
    tc_ws(P);
    if (P->p < P->end && *P->p == ']') {
        P->p++;
        if (sb_add(&P->out, "]", 1)) goto oom;
        return a;
    }
    for (int first = 1;; first = 0) {
        tc_ws(P);
        if (!first && sb_add(&P->out, ",", 1)) goto oom;
        json_t *v = tc_value(P, depth + 1);
        if (!v) goto bad;
        if (json_array_append_new(a, v)) goto oom;
        tc_ws(P);
        if (P->p >= P->end) { tc_fail(P, "unterminated array"); goto bad; }
        if (*P->p == ',') { P->p++; continue; }
        if (*P->p == ']') { P->p++; break; }
        tc_fail(P, "expected ',' or ']' in an array, found '%c'", *P->p);
        goto bad;
    }
    if (sb_add(&P->out, "]", 1)) goto oom;
    return a;
oom:
    tc_oom(P);
bad:
    json_decref(a);
    return NULL;
}

static json_t *tc_value(tcp *P, int depth) {
    if (depth > TC_MAX_DEPTH) { tc_fail(P, "nesting deeper than %d", TC_MAX_DEPTH); return NULL; }
    if (P->p >= P->end) { tc_fail(P, "expected a value, found the end"); return NULL; }
    char c = *P->p;
    if (c == '{') return tc_object(P, depth);
    if (c == '[') return tc_array(P, depth);
    if (tc_at(P, MK_STR)) {
        const char *s;
        size_t n;
        if (tc_string_raw(P, &s, &n, "string")) return NULL;
        json_t *v = json_stringn(s, n);
        if (!v || json_str_out(&P->out, s, n)) { json_decref(v); tc_oom(P); return NULL; }
        return v;
    }
    if (c == '-' || (c >= '0' && c <= '9')) return tc_number(P);
    static const char *const lit[3] = {"true", "false", "null"};
    for (int i = 0; i < 3; i++) {
        if (tc_at(P, lit[i])) {
            P->p += strlen(lit[i]);
            if (!tc_delim(P)) {
                P->p -= strlen(lit[i]);
                break;
            }
            json_t *v = i == 0 ? json_true() : i == 1 ? json_false() : json_null();
            if (sb_adds(&P->out, lit[i])) { tc_oom(P); return NULL; }
            return v;
        }
    }
    if (c == '"') { tc_fail(P, "strings must be written <|\"|>...<|\"|>, found '\"'"); return NULL; }
    tc_fail(P, "unexpected '%c' where a value should start", c);
    return NULL;
}

void g4_tool_call_free(g4_tool_call *c) {
    if (!c) return;
    free(c->name);
    free(c->arguments_json);
    json_decref(c->arguments);
    memset(c, 0, sizeof *c);
}

int g4_tool_call_parse(const char *body, size_t len, g4_tool_call *out, g4_err *err) {
    if (!out) return g4_err_set(err, G4_EINVAL, "tool call: NULL output");
    memset(out, 0, sizeof *out);
    if (!body && len) return g4_err_set(err, G4_EINVAL, "tool call: NULL text");
    tcp P = {.base = body, .p = body, .end = body + len};
    tc_ws(&P);
    if (!tc_at(&P, "call:")) {
        tc_fail(&P, "expected 'call:NAME{...}'");
        return g4_err_set(err, G4_EFORMAT, "tool call: %s", P.msg);
    }
    P.p += 5;
    const char *name = P.p;
    while (P.p < P.end) {
        unsigned char c = (unsigned char)*P.p;
        if (c <= 0x20 || c == 0x7F || strchr("{}[]<>,\"'()", c)) break;
        P.p++;
    }
    size_t nn = (size_t)(P.p - name);
    if (nn == 0) {
        tc_fail(&P, "missing function name after 'call:'");
        return g4_err_set(err, G4_EFORMAT, "tool call: %s", P.msg);
    }
    if (!utf8_valid((const unsigned char *)name, nn)) {
        tc_fail(&P, "function name is not valid UTF-8");
        return g4_err_set(err, G4_EFORMAT, "tool call: %s", P.msg);
    }
    tc_ws(&P);
    if (P.p >= P.end || *P.p != '{') {
        tc_fail(&P, "expected '{' after the function name '%.*s'", (int)(nn > 64 ? 64 : nn), name);
        return g4_err_set(err, G4_EFORMAT, "tool call: %s", P.msg);
    }
    json_t *args = tc_object(&P, 1);
    if (args) {
        tc_ws(&P);
        if (P.p < P.end) {
            tc_fail(&P, "unexpected text after the arguments");
            json_decref(args);
            args = NULL;
        }
    }
    if (!args) {
        sb_free(&P.out);
        return g4_err_set(err, P.oom ? G4_ENOMEM : G4_EFORMAT, "tool call '%.*s': %s", (int)(nn > 64 ? 64 : nn),
                          name, P.msg);
    }
    out->name = malloc(nn + 1);
    if (!out->name) {
        json_decref(args);
        sb_free(&P.out);
        return g4_err_set(err, G4_ENOMEM, "tool call: out of memory");
    }
    memcpy(out->name, name, nn);
    out->name[nn] = 0;
    out->arguments_json = sb_take(&P.out);
    out->arguments = args;
    if (!out->arguments_json) {
        g4_tool_call_free(out);
        return g4_err_set(err, G4_ENOMEM, "tool call: out of memory");
    }
    return G4_OK;
}

/* ------------------------------------------------------------------ streaming machine */

enum { ST_CONTENT, ST_CHAN_HDR, ST_THOUGHT, ST_CALL, ST_END };

typedef struct {
    int started; /* a non-space byte has been emitted */
    sbuf ws;     /* trailing white space held back */
} trim_t;

typedef struct {
    int kind;
    size_t off, len, call_index;
} evrec;

struct g4_output_stream {
    int state, finished, in_str;
    sbuf in;      /* unconsumed input */
    sbuf call;    /* raw body of the tool call being read */
    trim_t tr[2]; /* per text kind */
    /* this call's events */
    sbuf evtext;
    evrec *ev;
    size_t nev, evcap;
    g4_out_event *evout;
    size_t evoutcap;
    /* the whole result so far */
    sbuf acc[2];
    g4_tool_call *calls;
    size_t ncalls, callcap;
    int malformed, ended, oom, truncated;
    char *malformed_msg;
};

static int ev_push(g4_output_stream *s, int kind, size_t off, size_t len, size_t ci) {
    if (s->nev == s->evcap) {
        size_t cap = s->evcap ? s->evcap * 2 : 16;
        evrec *e = realloc(s->ev, cap * sizeof *e);
        if (!e) return -1;
        s->ev = e;
        s->evcap = cap;
    }
    s->ev[s->nev++] = (evrec){kind, off, len, ci};
    return 0;
}

/* Raw output of text of one kind (after trimming): into the event list and the result. */
static void out_text(g4_output_stream *s, int kind, const char *p, size_t n) {
    if (!n || s->oom) return;
    size_t off = s->evtext.n;
    if (sb_add(&s->evtext, p, n) || sb_add(&s->acc[kind], p, n)) { s->oom = 1; return; }
    if (s->nev && s->ev[s->nev - 1].kind == kind && s->ev[s->nev - 1].off + s->ev[s->nev - 1].len == off) {
        s->ev[s->nev - 1].len += n;
        return;
    }
    if (ev_push(s, kind, off, n, 0)) s->oom = 1;
}

/* Text through the trim filter: leading white space dropped, trailing held back. */
static void emit(g4_output_stream *s, int kind, const char *p, size_t n) {
    trim_t *t = &s->tr[kind];
    size_t i = 0;
    if (!t->started) {
        while (i < n && is_ws(p[i])) i++;
        if (i == n) return;
        t->started = 1;
    }
    size_t j = n;
    while (j > i && is_ws(p[j - 1])) j--;
    if (j == i) {
        if (sb_add(&t->ws, p + i, n - i)) s->oom = 1;
        return;
    }
    out_text(s, kind, t->ws.p, t->ws.n);
    t->ws.n = 0;
    out_text(s, kind, p + i, j - i);
    if (j < n && sb_add(&t->ws, p + j, n - j)) s->oom = 1;
}

static void note_malformed(g4_output_stream *s, const char *msg) {
    s->malformed++;
    if (!s->malformed_msg) {
        size_t l = strlen(msg) + 32;
        s->malformed_msg = malloc(l);
        if (!s->malformed_msg) { s->oom = 1; return; }
        snprintf(s->malformed_msg, l, "tool call %zu: %s", s->ncalls + (size_t)s->malformed, msg);
    }
}

/* The call block closed by <tool_call|> (closed = 1) or cut off (closed = 0). */
static void finish_call(g4_output_stream *s, int closed, const char *why) {
    if (closed) {
        g4_tool_call c;
        g4_err e;
        int rc = g4_tool_call_parse(s->call.p ? s->call.p : "", s->call.n, &c, &e);
        if (rc == G4_OK) {
            if (s->ncalls == s->callcap) {
                size_t cap = s->callcap ? s->callcap * 2 : 4;
                g4_tool_call *nc = realloc(s->calls, cap * sizeof *nc);
                if (!nc) { g4_tool_call_free(&c); s->oom = 1; return; }
                s->calls = nc;
                s->callcap = cap;
            }
            s->calls[s->ncalls] = c;
            if (ev_push(s, G4_OUT_TOOL_CALL, 0, 0, s->ncalls)) s->oom = 1;
            s->ncalls++;
            s->call.n = 0;
            return;
        }
        if (rc == G4_ENOMEM) { s->oom = 1; return; }
        note_malformed(s, e.msg);
    } else {
        note_malformed(s, why);
    }
    emit(s, G4_OUT_CONTENT, MK_CALL, strlen(MK_CALL));
    emit(s, G4_OUT_CONTENT, s->call.p ? s->call.p : "", s->call.n);
    if (closed) emit(s, G4_OUT_CONTENT, MK_CALL_END, strlen(MK_CALL_END));
    s->call.n = 0;
}

static const char *const TERMINATORS[3] = {MK_TURN_END, MK_EOS, MK_TOOL_RESP};

/* Consumes s->in as far as it can decide; `final` decides everything. */
static void run(g4_output_stream *s, int final) {
    static const char *const content_mk[5] = {MK_CHANNEL, MK_CALL, MK_TURN_END, MK_EOS, MK_TOOL_RESP};
    static const char *const thought_mk[4] = {MK_CHANNEL_END, MK_TURN_END, MK_EOS, MK_TOOL_RESP};
    static const char *const call_mk[5] = {MK_STR, MK_CALL_END, MK_TURN_END, MK_EOS, MK_TOOL_RESP};
    static const char *const callstr_mk[4] = {MK_STR, MK_TURN_END, MK_EOS, MK_TOOL_RESP};
    const char *b = s->in.p;
    size_t n = s->in.n, pos = 0;
    int which;
    size_t ml;
    while (pos < n && !s->oom) {
        if (s->state == ST_END) {
            pos = n;
            break;
        }
        if (s->state == ST_CHAN_HDR) {
            static const char *const hdr[2] = {"thought\n", "thought" MK_CHANNEL_END};
            int r = classify(b + pos, n - pos, hdr, 2, final, &which, &ml);
            if (r == CLS_PARTIAL) break;
            if (r == CLS_FULL) pos += which == 0 ? ml : strlen("thought");
            s->state = ST_THOUGHT;
            continue;
        }
        const char *lt = memchr(b + pos, '<', n - pos);
        size_t stop = lt ? (size_t)(lt - b) : n;
        int kind = s->state == ST_THOUGHT ? G4_OUT_REASONING : G4_OUT_CONTENT;
        if (s->state == ST_CALL) {
            if (sb_add(&s->call, b + pos, stop - pos)) { s->oom = 1; break; }
        } else {
            emit(s, kind, b + pos, stop - pos);
        }
        pos = stop;
        if (!lt) break;
        const char *const *mk;
        int nm;
        switch (s->state) {
        case ST_CONTENT: mk = content_mk; nm = 5; break;
        case ST_THOUGHT: mk = thought_mk; nm = 4; break;
        default: mk = s->in_str ? callstr_mk : call_mk; nm = s->in_str ? 4 : 5; break;
        }
        int r = classify(b + pos, n - pos, mk, nm, final, &which, &ml);
        if (r == CLS_PARTIAL) break;
        if (r == CLS_NONE) {
            if (s->state == ST_CALL) {
                if (sb_add(&s->call, "<", 1)) s->oom = 1;
            } else {
                emit(s, kind, "<", 1);
            }
            pos++;
            continue;
        }
        const char *m = mk[which];
        pos += ml;
        int term = 0;
        for (int i = 0; i < 3; i++) term |= strcmp(m, TERMINATORS[i]) == 0;
        if (term) {
            if (s->state == ST_CALL) {
                char why[80];
                snprintf(why, sizeof why, "unterminated (the turn ended with %s inside the call)", m);
                finish_call(s, 0, why);
            }
            s->state = ST_END;
            s->ended = 1;
        } else if (strcmp(m, MK_CHANNEL) == 0) {
            s->state = ST_CHAN_HDR;
        } else if (strcmp(m, MK_CALL) == 0) {
            s->state = ST_CALL;
            s->in_str = 0;
            s->call.n = 0;
        } else if (strcmp(m, MK_CHANNEL_END) == 0) {
            s->state = ST_CONTENT;
        } else if (strcmp(m, MK_STR) == 0) {
            if (sb_add(&s->call, m, ml)) s->oom = 1;
            s->in_str = !s->in_str;
        } else if (strcmp(m, MK_CALL_END) == 0) {
            finish_call(s, 1, NULL);
            s->state = ST_CONTENT;
        }
    }
    if (pos) {
        memmove(s->in.p, s->in.p + pos, n - pos);
        s->in.n = n - pos;
    }
}

int g4_output_stream_create(const g4_output_parse_opts *opts, g4_output_stream **out, g4_err *err) {
    if (!out) return g4_err_set(err, G4_EINVAL, "output parser: NULL output pointer");
    g4_output_stream *s = calloc(1, sizeof *s);
    if (!s) return g4_err_set(err, G4_ENOMEM, "output parser: out of memory");
    s->state = (opts && opts->start_in_thought) ? ST_THOUGHT : ST_CONTENT;
    *out = s;
    return G4_OK;
}

static void free_results(g4_output_stream *s) {
    for (size_t i = 0; i < s->ncalls; i++) g4_tool_call_free(&s->calls[i]);
    free(s->calls);
    s->calls = NULL;
    s->ncalls = s->callcap = 0;
    sb_free(&s->acc[0]);
    sb_free(&s->acc[1]);
    free(s->malformed_msg);
    s->malformed_msg = NULL;
}

void g4_output_stream_free(g4_output_stream *s) {
    if (!s) return;
    free_results(s);
    sb_free(&s->in);
    sb_free(&s->call);
    sb_free(&s->tr[0].ws);
    sb_free(&s->tr[1].ws);
    sb_free(&s->evtext);
    free(s->ev);
    free(s->evout);
    free(s);
}

static int collect(g4_output_stream *s, const g4_out_event **events, size_t *n_events, g4_err *err) {
    if (s->oom) return g4_err_set(err, G4_ENOMEM, "output parser: out of memory");
    if (s->evoutcap < s->nev) {
        g4_out_event *e = realloc(s->evout, s->nev * sizeof *e);
        if (!e) { s->oom = 1; return g4_err_set(err, G4_ENOMEM, "output parser: out of memory"); }
        s->evout = e;
        s->evoutcap = s->nev;
    }
    for (size_t i = 0; i < s->nev; i++) {
        const evrec *r = &s->ev[i];
        g4_out_event *e = &s->evout[i];
        memset(e, 0, sizeof *e);
        e->kind = (g4_out_kind)r->kind;
        if (r->kind == G4_OUT_TOOL_CALL) {
            e->call = &s->calls[r->call_index];
            e->call_index = r->call_index;
        } else {
            e->text = s->evtext.p + r->off;
            e->len = r->len;
        }
    }
    if (events) *events = s->evout;
    if (n_events) *n_events = s->nev;
    return G4_OK;
}

static void begin_call(g4_output_stream *s) {
    s->nev = 0;
    s->evtext.n = 0;
}

int g4_output_stream_feed(g4_output_stream *s, const char *delta, size_t len, const g4_out_event **events,
                          size_t *n_events, g4_err *err) {
    if (events) *events = NULL;
    if (n_events) *n_events = 0;
    if (!s || (!delta && len)) return g4_err_set(err, G4_EINVAL, "output parser: NULL argument");
    if (s->finished) return g4_err_set(err, G4_EINVAL, "output parser: feed after finish");
    begin_call(s);
    if (sb_add(&s->in, delta, len)) s->oom = 1;
    else run(s, 0);
    return collect(s, events, n_events, err);
}

int g4_output_stream_finish(g4_output_stream *s, const g4_out_event **events, size_t *n_events, g4_err *err) {
    if (events) *events = NULL;
    if (n_events) *n_events = 0;
    if (!s) return g4_err_set(err, G4_EINVAL, "output parser: NULL stream");
    if (s->finished) return g4_err_set(err, G4_EINVAL, "output parser: finish called twice");
    begin_call(s);
    s->finished = 1;
    run(s, 1);
    if (s->state == ST_CALL) { /* generation was cut inside the call (max_tokens, a stop string): no call, no markup as text */
        s->truncated = 1;
        s->call.n = 0;
    }
    s->state = ST_END;
    s->tr[0].ws.n = s->tr[1].ws.n = 0; /* trailing white space is trimmed */
    return collect(s, events, n_events, err);
}

int g4_output_stream_take(g4_output_stream *s, g4_parsed_output *out, g4_err *err) {
    if (!out) return g4_err_set(err, G4_EINVAL, "output parser: NULL output");
    memset(out, 0, sizeof *out);
    if (!s) return g4_err_set(err, G4_EINVAL, "output parser: NULL stream");
    if (s->oom) return g4_err_set(err, G4_ENOMEM, "output parser: out of memory");
    out->reasoning_len = s->acc[G4_OUT_REASONING].n;
    out->content_len = s->acc[G4_OUT_CONTENT].n;
    out->reasoning = sb_take(&s->acc[G4_OUT_REASONING]);
    out->content = sb_take(&s->acc[G4_OUT_CONTENT]);
    if (!out->reasoning || !out->content) {
        free(out->reasoning);
        free(out->content);
        memset(out, 0, sizeof *out);
        return g4_err_set(err, G4_ENOMEM, "output parser: out of memory");
    }
    out->calls = s->calls;
    out->n_calls = s->ncalls;
    out->malformed = s->malformed;
    out->malformed_msg = s->malformed_msg;
    out->ended = s->ended;
    out->truncated = s->truncated;
    s->calls = NULL;
    s->ncalls = s->callcap = 0;
    s->malformed_msg = NULL;
    return G4_OK;
}

void g4_parsed_output_free(g4_parsed_output *o) {
    if (!o) return;
    free(o->reasoning);
    free(o->content);
    for (size_t i = 0; i < o->n_calls; i++) g4_tool_call_free(&o->calls[i]);
    free(o->calls);
    free(o->malformed_msg);
    memset(o, 0, sizeof *o);
}

int g4_output_parse_ex(const char *text, size_t len, const g4_output_parse_opts *opts, g4_parsed_output *out,
                       g4_err *err) {
    if (!out) return g4_err_set(err, G4_EINVAL, "output parser: NULL output");
    memset(out, 0, sizeof *out);
    if (!text && len) return g4_err_set(err, G4_EINVAL, "output parser: NULL text");
    g4_output_stream *s = NULL;
    int rc = g4_output_stream_create(opts, &s, err);
    if (rc) return rc;
    rc = g4_output_stream_feed(s, text ? text : "", len, NULL, NULL, err);
    if (!rc) rc = g4_output_stream_finish(s, NULL, NULL, err);
    if (!rc) rc = g4_output_stream_take(s, out, err);
    g4_output_stream_free(s);
    return rc;
}

int g4_output_parse(const char *text, size_t len, g4_parsed_output *out, g4_err *err) {
    return g4_output_parse_ex(text, len, NULL, out, err);
}
