/* stop_strings.c — streaming detection of OpenAI `stop` strings in generated text.
 *
 * Owns the matching rule (first match by END position, then the longest), the hold-back of a
 * suffix that may grow into a stop string, and the whole-text form built on the same code.
 * Works on bytes of UTF-8 text; knows nothing about tokens, the model or the HTTP layer. */
#include "text/stop_strings.h"

#include <stdlib.h>
#include <string.h>

#include "text/utf8.h"

struct g4_stop_strings {
    size_t n;
    char **str;
    size_t *len;
    size_t maxlen;
    char *buf;       /* held-back text, then the new delta */
    size_t bn, bcap; /* bytes in buf, capacity */
    size_t consumed; /* bytes at the head of buf emitted by the last call (dropped next call) */
    size_t quiet;    /* buf[0..quiet) was fed with matching off: no match may end inside it */
    int matched;     /* index of the matching stop string, or -1 */
};

int g4_stop_strings_create(const char *const *stops, size_t n, g4_stop_strings **out, g4_err *err) {
    if (!out) return g4_err_set(err, G4_EINVAL, "stop: NULL output pointer");
    *out = NULL;
    if (n > G4_STOP_MAX) return g4_err_set(err, G4_EINVAL, "stop: %zu stop strings, at most %d allowed", n, G4_STOP_MAX);
    if (n && !stops) return g4_err_set(err, G4_EINVAL, "stop: NULL list");
    for (size_t i = 0; i < n; i++) {
        if (!stops[i]) return g4_err_set(err, G4_EINVAL, "stop[%zu]: NULL", i);
        size_t l = strlen(stops[i]);
        if (l == 0) return g4_err_set(err, G4_EINVAL, "stop[%zu]: empty stop string", i);
        if (l > G4_STOP_MAX_LEN)
            return g4_err_set(err, G4_EINVAL, "stop[%zu]: %zu bytes, at most %d allowed", i, l, G4_STOP_MAX_LEN);
        size_t bad = g4_utf8_invalid_at(stops[i], l);
        if (bad != l) return g4_err_set(err, G4_EINVAL, "stop[%zu]: invalid UTF-8 at byte %zu", i, bad);
    }
    g4_stop_strings *s = calloc(1, sizeof *s);
    if (!s) return g4_err_set(err, G4_ENOMEM, "stop: out of memory");
    s->matched = -1;
    s->n = n;
    if (n) {
        s->str = calloc(n, sizeof *s->str);
        s->len = calloc(n, sizeof *s->len);
        if (!s->str || !s->len) goto oom;
        for (size_t i = 0; i < n; i++) {
            s->len[i] = strlen(stops[i]);
            s->str[i] = malloc(s->len[i] + 1);
            if (!s->str[i]) goto oom;
            memcpy(s->str[i], stops[i], s->len[i] + 1);
            if (s->len[i] > s->maxlen) s->maxlen = s->len[i];
        }
    }
    *out = s;
    return G4_OK;
oom:
    g4_stop_strings_free(s);
    return g4_err_set(err, G4_ENOMEM, "stop: out of memory");
}

void g4_stop_strings_free(g4_stop_strings *s) {
    if (!s) return;
    for (size_t i = 0; i < s->n && s->str; i++) free(s->str[i]);
    free(s->str);
    free(s->len);
    free(s->buf);
    free(s);
}

void g4_stop_strings_reset(g4_stop_strings *s) {
    if (!s) return;
    s->bn = s->consumed = s->quiet = 0;
    s->matched = -1;
}

int g4_stop_strings_matched(const g4_stop_strings *s) { return s ? s->matched : -1; }

size_t g4_stop_strings_pending(const g4_stop_strings *s) { return s ? s->bn - s->consumed : 0; }

/* Earliest-ending match in b[0..n) that ends after b[0..quiet): 1 with *start and *which, else 0. */
static int find_first(const g4_stop_strings *s, const char *b, size_t n, size_t quiet, size_t *start, int *which) {
    int found = 0;
    size_t best_end = 0, best_len = 0;
    for (size_t i = 0; i < s->n; i++) {
        size_t l = s->len[i];
        if (l > n) continue;
        /* the first occurrence of string i from there is its earliest-ending one */
        const size_t from = quiet >= l ? quiet - l + 1 : 0;
        const char *q = from < n ? memmem(b + from, n - from, s->str[i], l) : NULL;
        if (!q) continue;
        size_t st = (size_t)(q - b), end = st + l;
        if (!found || end < best_end || (end == best_end && l > best_len)) {
            found = 1;
            best_end = end;
            best_len = l;
            *which = (int)i;
        }
    }
    if (found) *start = best_end - best_len;
    return found;
}

/* Longest suffix of b[0..n) that is a proper prefix of some stop string. */
static size_t holdback(const g4_stop_strings *s, const char *b, size_t n) {
    size_t best = 0;
    for (size_t i = 0; i < s->n; i++) {
        size_t l = s->len[i];
        size_t k = l - 1 < n ? l - 1 : n;
        for (; k > best; k--)
            if (b[n - k] == s->str[i][0] && memcmp(b + n - k, s->str[i], k) == 0) break;
        if (k > best) best = k;
    }
    return best;
}

int g4_stop_strings_feed(g4_stop_strings *s, const char *delta, size_t len, const char **emit, size_t *emit_len,
                         g4_err *err) {
    return g4_stop_strings_feed_ex(s, delta, len, 1, emit, emit_len, err);
}

int g4_stop_strings_feed_ex(g4_stop_strings *s, const char *delta, size_t len, int may_match, const char **emit, size_t *emit_len,
                            g4_err *err) {
    if (emit) *emit = "";
    if (emit_len) *emit_len = 0;
    if (!s || (!delta && len) || !emit || !emit_len) return -g4_err_set(err, G4_EINVAL, "stop: NULL argument");
    if (s->matched >= 0) return 1;
    /* drop what the previous call emitted */
    if (s->consumed) {
        memmove(s->buf, s->buf + s->consumed, s->bn - s->consumed);
        s->bn -= s->consumed;
        s->quiet = s->quiet > s->consumed ? s->quiet - s->consumed : 0;
        s->consumed = 0;
    }
    if (s->bn + len + 1 > s->bcap) {
        size_t cap = s->bcap ? s->bcap : 256;
        while (cap < s->bn + len + 1) cap *= 2;
        char *nb = realloc(s->buf, cap);
        if (!nb) return -g4_err_set(err, G4_ENOMEM, "stop: out of memory");
        s->buf = nb;
        s->bcap = cap;
    }
    if (len) memcpy(s->buf + s->bn, delta, len);
    s->bn += len;
    if (!may_match) s->quiet = s->bn;
    size_t st;
    int which;
    if (may_match && find_first(s, s->buf, s->bn, s->quiet, &st, &which)) {
        s->matched = which;
        *emit = s->buf;
        *emit_len = st;
        s->consumed = s->bn; /* everything else is dropped */
        return 1;
    }
    size_t keep = holdback(s, s->buf, s->bn);
    *emit = s->buf;
    *emit_len = s->bn - keep;
    s->consumed = s->bn - keep;
    return 0;
}

int g4_stop_strings_finish(g4_stop_strings *s, const char **emit, size_t *emit_len) {
    if (emit) *emit = "";
    if (emit_len) *emit_len = 0;
    if (!s) return 0;
    if (s->matched >= 0) return 1;
    if (emit) *emit = s->buf ? s->buf + s->consumed : "";
    if (emit_len) *emit_len = s->bn - s->consumed;
    s->consumed = s->bn;
    return 0;
}

int g4_stop_strings_find(const char *text, size_t len, const char *const *stops, size_t n, size_t *cut, int *which,
                         g4_err *err) {
    if (!cut || !which || (!text && len)) return g4_err_set(err, G4_EINVAL, "stop: NULL argument");
    *cut = len;
    *which = -1;
    g4_stop_strings *s;
    int rc = g4_stop_strings_create(stops, n, &s, err);
    if (rc) return rc;
    size_t st;
    int w;
    if (find_first(s, text ? text : "", len, 0, &st, &w)) {
        *cut = st;
        *which = w;
    }
    g4_stop_strings_free(s);
    return G4_OK;
}
