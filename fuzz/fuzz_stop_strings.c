/* fuzz_stop_strings.c — OpenAI `stop` matching. Input: a seed byte for the stream cuts, the stop
 * strings separated by 0x1f and ended by a NUL byte, then the text. Invariants: create accepts
 * exactly the lists stop_strings.h allows; the whole-text match is the one a brute-force search
 * finds (earliest end, then longest, then first listed); streaming over any cuts emits exactly
 * the text before it, holds back less than the longest stop string, and (valid UTF-8 text cut
 * at character boundaries) never emits part of a character; reset forgets everything. */
#include "fuzz_util.h"
#include "text/stop_strings.h"

/* The specified answer, by brute force. */
static void oracle(const char *t, size_t n, char **stops, size_t ns, size_t *cut, int *which) {
    *cut = n;
    *which = -1;
    for (size_t e = 1; e <= n; e++) {
        size_t best = 0;
        for (size_t i = 0; i < ns; i++) {
            size_t l = strlen(stops[i]);
            if (l <= e && l > best && memcmp(t + e - l, stops[i], l) == 0) { best = l; *which = (int)i; }
        }
        if (best) { *cut = e - best; return; }
    }
}

/* One emitted piece: must continue the text before the match. */
static void got(const char *t, size_t want_cut, int utf8, size_t *out, const char *em, size_t el) {
    FUZZ_CHECK(*out + el <= want_cut && memcmp(em, t + *out, el) == 0, "emitted text differs at byte %zu", *out);
    if (utf8) FUZZ_CHECK(fuzz_utf8_ok(em, el), "emitted part of a character at byte %zu", *out);
    *out += el;
}

static void stream(g4_stop_strings *s, const char *t, size_t n, unsigned seed, int utf8, size_t maxlen, size_t want_cut, int want_which) {
    fuzz_cutter c = fuzz_cutter_new(t, n, seed, utf8);
    size_t out = 0, el;
    int matched = 0, rc;
    const char *em;
    g4_err err = {0};
    while (c.at < n) {
        size_t k = fuzz_cut(&c);
        rc = g4_stop_strings_feed(s, t + c.at - k, k, &em, &el, &err);
        FUZZ_CHECK(rc == 0 || rc == 1, "feed: rc %d %s", rc, err.msg);
        if (matched) FUZZ_CHECK(rc == 1 && el == 0, "text after the match");
        got(t, want_cut, utf8, &out, em, el);
        if (rc == 1) matched = 1;
        else FUZZ_CHECK(g4_stop_strings_pending(s) < (maxlen ? maxlen : 1), "holding back %zu bytes", g4_stop_strings_pending(s));
    }
    rc = g4_stop_strings_finish(s, &em, &el);
    FUZZ_CHECK(rc == matched && (!matched || el == 0), "finish: rc %d after %s", rc, matched ? "a match" : "no match");
    got(t, want_cut, utf8, &out, em, el);
    FUZZ_CHECK(out == want_cut, "emitted %zu bytes, want %zu", out, want_cut);
    FUZZ_CHECK(g4_stop_strings_matched(s) == want_which, "matched %d, want %d", g4_stop_strings_matched(s), want_which);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_in in = {data, size};
    unsigned seed = fuzz_byte(&in);
    const uint8_t *nul = memchr(in.p, 0, in.n);
    if (!nul) return 0;
    fuzz_in list = {in.p, (size_t)(nul - in.p)};
    const char *text = (const char *)nul + 1;
    size_t len = in.n - list.n - 1;
    char *stops[G4_STOP_MAX + 2];
    size_t ns = 0, maxlen = 0;
    int valid = 1;
    while (list.n && ns < G4_STOP_MAX + 1) {
        stops[ns] = fuzz_strdup(fuzz_split(&list, "\x1f"));
        size_t l = strlen(stops[ns]);
        if (l == 0 || l > G4_STOP_MAX_LEN || !fuzz_utf8_ok(stops[ns], l)) valid = 0;
        if (l > maxlen) maxlen = l;
        ns++;
    }
    if (ns > G4_STOP_MAX) valid = 0;
    g4_stop_strings *s = NULL;
    g4_err err = {0};
    int rc = g4_stop_strings_create((const char *const *)stops, ns, &s, &err);
    FUZZ_CHECK(valid ? rc == 0 : rc == G4_EINVAL && err.msg[0] && !s, "create: rc %d for a %s list (%s)", rc, valid ? "valid" : "invalid", err.msg);
    if (valid) {
        size_t cut, want_cut;
        int which, want_which;
        oracle(text, len, stops, ns, &want_cut, &want_which);
        FUZZ_CHECK(g4_stop_strings_find(text, len, (const char *const *)stops, ns, &cut, &which, &err) == 0, "find: %s", err.msg);
        FUZZ_CHECK(cut == want_cut && which == want_which, "find: cut %zu stop %d, want %zu stop %d", cut, which, want_cut, want_which);
        int utf8 = fuzz_utf8_ok(text, len);
        stream(s, text, len, seed, utf8, maxlen, want_cut, want_which);
        g4_stop_strings_reset(s);
        stream(s, text, len, seed + 1, utf8, maxlen, want_cut, want_which);
    }
    g4_stop_strings_free(s);
    for (size_t i = 0; i < ns; i++) free(stops[i]);
    return 0;
}
