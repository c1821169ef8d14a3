/* test_stop_strings.c — stop-string matching: the first-ending rule, hold-back of possible
 * prefixes, UTF-8, errors, and streaming == whole text for every split on random inputs. */
#include "testutil.h"

#include "text/stop_strings.h"

/* Streams text cut at the given positions; returns the emitted text (malloc) and the match. */
static char *stream(g4_stop_strings *s, const char *text, size_t len, const size_t *cuts, int ncuts, int *which) {
    g4_stop_strings_reset(s);
    char *acc = malloc(len + 1);
    size_t an = 0, prev = 0;
    int matched = 0;
    for (int i = 0; i <= ncuts; i++) {
        size_t at = i < ncuts ? cuts[i] : len;
        const char *e;
        size_t el;
        int rc = g4_stop_strings_feed(s, text + prev, at - prev, &e, &el, NULL);
        assert_true(rc == 0 || rc == 1);
        if (matched) assert_int_equal(el, 0);
        memcpy(acc + an, e, el);
        an += el;
        matched |= rc == 1;
        prev = at;
    }
    const char *e;
    size_t el;
    int rc = g4_stop_strings_finish(s, &e, &el);
    assert_int_equal(rc, matched);
    memcpy(acc + an, e, el);
    an += el;
    acc[an] = 0;
    *which = g4_stop_strings_matched(s);
    return acc;
}

static void check_all_splits(const char *text, const char *const *stops, size_t n, const char *want, int want_which) {
    size_t len = strlen(text), cut;
    int which;
    assert_int_equal(g4_stop_strings_find(text, len, stops, n, &cut, &which, NULL), 0);
    if (want) {
        assert_int_equal(cut, strlen(want));
        assert_memory_equal(text, want, cut);
        assert_int_equal(which, want_which);
    }
    g4_stop_strings *s;
    assert_int_equal(g4_stop_strings_create(stops, n, &s, NULL), 0);
    for (size_t i = 0; i <= len; i++) {
        int w;
        char *got = stream(s, text, len, &i, 1, &w);
        if (strlen(got) != cut || memcmp(got, text, cut) || w != which)
            fprintf(stderr, "text [%s] split %zu: got [%s] (%d), want %zu bytes (%d)\n", text, i, got, w, cut, which);
        assert_int_equal(strlen(got), cut);
        assert_memory_equal(got, text, cut);
        assert_int_equal(w, which);
        free(got);
    }
    size_t *cuts = malloc(sizeof *cuts * (len + 1));
    for (size_t i = 0; i < len; i++) cuts[i] = i;
    int w;
    char *got = stream(s, text, len, cuts, (int)len, &w);
    assert_int_equal(strlen(got), cut);
    assert_int_equal(w, which);
    free(got);
    free(cuts);
    g4_stop_strings_free(s);
}

static void test_basic(void **st) {
    (void)st;
    const char *s1[] = {"###"};
    check_all_splits("abc###def", s1, 1, "abc", 0);
    check_all_splits("abc##def#", s1, 1, "abc##def#", -1);
    check_all_splits("###", s1, 1, "", 0);
    /* first by end, then longest */
    const char *s2[] = {"xyz", "y"};
    check_all_splits("axyz", s2, 2, "ax", 1);
    const char *s3[] = {"bc", "abc"};
    check_all_splits("zabcd", s3, 2, "z", 1);
    const char *s4[] = {"lo w", "hello"};
    check_all_splits("hello world", s4, 2, "", 1);
    /* self-overlapping stop string */
    const char *s5[] = {"aab"};
    check_all_splits("aaab", s5, 1, "a", 0);
    check_all_splits("aaaaaa", s5, 1, "aaaaaa", -1);
    /* UTF-8 */
    const char *s6[] = {"日本", "é!", "\xF0\x9F\x98\x80"};
    check_all_splits("Café 日 本 日本語", s6, 3, "Café 日 本 ", 0);
    check_all_splits("a😀b", s6, 3, "a", 2);
    check_all_splits("é é!", s6, 3, "é ", 1);
    /* no stops: everything passes */
    check_all_splits("anything at all", NULL, 0, "anything at all", -1);
    /* four+ stops, OpenAI style */
    const char *s7[] = {"\n\n", "User:", "</s>", "STOP", "\nUser"};
    check_all_splits("Answer.\nUser: more", s7, 5, "Answer.", 4);
}

static void test_holdback(void **st) {
    (void)st;
    const char *stops[] = {"##", "<end>"};
    g4_stop_strings *s;
    assert_int_equal(g4_stop_strings_create(stops, 2, &s, NULL), 0);
    const char *e;
    size_t el;
    assert_int_equal(g4_stop_strings_feed(s, "Hello #", 7, &e, &el, NULL), 0);
    assert_int_equal(el, 6);
    assert_memory_equal(e, "Hello ", 6);
    assert_int_equal(g4_stop_strings_pending(s), 1);
    assert_int_equal(g4_stop_strings_feed(s, "x <en", 5, &e, &el, NULL), 0);
    assert_int_equal(el, 3);
    assert_memory_equal(e, "#x ", 3);
    assert_int_equal(g4_stop_strings_pending(s), 3);
    assert_int_equal(g4_stop_strings_feed(s, "d>tail", 6, &e, &el, NULL), 1);
    assert_int_equal(el, 0);
    assert_int_equal(g4_stop_strings_matched(s), 1);
    assert_int_equal(g4_stop_strings_feed(s, "more", 4, &e, &el, NULL), 1);
    assert_int_equal(el, 0);
    assert_int_equal(g4_stop_strings_finish(s, &e, &el), 1);
    assert_int_equal(el, 0);
    /* finish releases a held prefix that never completed */
    g4_stop_strings_reset(s);
    assert_int_equal(g4_stop_strings_matched(s), -1);
    assert_int_equal(g4_stop_strings_feed(s, "ok <e", 5, &e, &el, NULL), 0);
    assert_int_equal(el, 3);
    assert_int_equal(g4_stop_strings_finish(s, &e, &el), 0);
    assert_int_equal(el, 2);
    assert_memory_equal(e, "<e", 2);
    g4_stop_strings_free(s);
}

static void test_errors(void **st) {
    (void)st;
    g4_stop_strings *s = NULL;
    g4_err err;
    const char *empty[] = {"ok", ""};
    assert_int_equal(g4_stop_strings_create(empty, 2, &s, &err), G4_EINVAL);
    assert_non_null(strstr(err.msg, "stop[1]"));
    assert_null(s);
    const char *bad[] = {"\xC3("};
    assert_int_equal(g4_stop_strings_create(bad, 1, &s, &err), G4_EINVAL);
    assert_non_null(strstr(err.msg, "UTF-8"));
    char *big = malloc(G4_STOP_MAX_LEN + 2);
    memset(big, 'a', G4_STOP_MAX_LEN + 1);
    big[G4_STOP_MAX_LEN + 1] = 0;
    const char *longs[] = {big};
    assert_int_equal(g4_stop_strings_create(longs, 1, &s, &err), G4_EINVAL);
    free(big);
    const char *many[G4_STOP_MAX + 1];
    for (int i = 0; i <= G4_STOP_MAX; i++) many[i] = "x";
    assert_int_equal(g4_stop_strings_create(many, G4_STOP_MAX + 1, &s, &err), G4_EINVAL);
    const char *nul[] = {NULL};
    assert_int_equal(g4_stop_strings_create(nul, 1, &s, &err), G4_EINVAL);
    size_t cut;
    int which;
    assert_int_equal(g4_stop_strings_find("abc", 3, empty, 2, &cut, &which, &err), G4_EINVAL);
    assert_int_equal(g4_stop_strings_create(many, 2, &s, &err), 0);
    const char *e;
    size_t el;
    assert_true(g4_stop_strings_feed(s, NULL, 3, &e, &el, &err) < 0);
    g4_stop_strings_free(s);
}

static void test_random_splits(void **st) {
    (void)st;
    static const char *const alpha[] = {"a", "b", "c", "é", "ab", "\n"};
    uint64_t r = 99;
#define RND() (r = r * 6364136223846793005ull + 1442695040888963407ull, (unsigned)(r >> 33))
    char text[128], stops_buf[6][16];
    for (int it = 0; it < 1500; it++) {
        size_t len = 0;
        int parts = (int)(RND() % 30);
        for (int i = 0; i < parts; i++) {
            const char *a = alpha[RND() % 6];
            size_t l = strlen(a);
            memcpy(text + len, a, l);
            len += l;
        }
        text[len] = 0;
        int ns = (int)(RND() % 5);
        const char *stops[6];
        for (int k = 0; k < ns; k++) {
            size_t sl = 0;
            int p = 1 + (int)(RND() % 4);
            for (int i = 0; i < p; i++) {
                const char *a = alpha[RND() % 6];
                memcpy(stops_buf[k] + sl, a, strlen(a));
                sl += strlen(a);
            }
            stops_buf[k][sl] = 0;
            stops[k] = stops_buf[k];
        }
        /* reference: the rule written naively, position by position */
        size_t want = len;
        int ww = -1;
        for (size_t end = 1; end <= len && ww < 0; end++) {
            size_t bl = 0;
            for (int k = 0; k < ns; k++) {
                size_t l = strlen(stops[k]);
                if (l <= end && memcmp(text + end - l, stops[k], l) == 0 && l > bl) {
                    bl = l;
                    ww = k;
                }
            }
            if (ww >= 0) want = end - bl;
        }
        char *w = malloc(want + 1);
        memcpy(w, text, want);
        w[want] = 0;
        check_all_splits(text, stops, (size_t)ns, w, ww);
        free(w);
    }
}

/* min_tokens (feed_ex with may_match 0): text fed quietly is emitted (stop strings inside it
 * included) but no match may END in it; a stop string that starts in it and ends in live text
 * matches. Random texts, stop strings, quiet prefixes and splits against the rule written
 * naively: the earliest end after the quiet prefix, then the longest. */
static void test_quiet_prefix(void **st) {
    (void)st;
    static const char *const alpha[] = {"a", "b", "é", "ab", "\n"};
    uint64_t r = 7;
    char text[128], stops_buf[4][16];
    for (int it = 0; it < 3000; it++) {
        size_t len = 0;
        const int parts = (int)(RND() % 24);
        for (int i = 0; i < parts; i++) {
            const char *a = alpha[RND() % 5];
            memcpy(text + len, a, strlen(a));
            len += strlen(a);
        }
        text[len] = 0;
        const int ns = 1 + (int)(RND() % 3);
        const char *stops[4];
        for (int k = 0; k < ns; k++) {
            size_t sl = 0;
            for (int i = 0, p = 1 + (int)(RND() % 3); i < p; i++) {
                const char *a = alpha[RND() % 5];
                memcpy(stops_buf[k] + sl, a, strlen(a));
                sl += strlen(a);
            }
            stops_buf[k][sl] = 0;
            stops[k] = stops_buf[k];
        }
        const size_t q = len ? RND() % (len + 1) : 0;
        size_t want = len;
        int ww = -1;
        for (size_t end = q + 1; end <= len && ww < 0; end++) {
            size_t bl = 0;
            for (int k = 0; k < ns; k++) {
                const size_t l = strlen(stops[k]);
                if (l <= end && memcmp(text + end - l, stops[k], l) == 0 && l > bl) { bl = l; ww = k; }
            }
            if (ww >= 0) want = end - bl;
        }
        /* deltas: cut at q and at two random places */
        size_t cuts[4] = {q, len ? RND() % (len + 1) : 0, len ? RND() % (len + 1) : 0, len};
        for (int i = 0; i < 4; i++)
            for (int j = i + 1; j < 4; j++)
                if (cuts[j] < cuts[i]) { size_t t = cuts[i]; cuts[i] = cuts[j]; cuts[j] = t; }
        g4_stop_strings *s;
        assert_int_equal(g4_stop_strings_create(stops, (size_t)ns, &s, NULL), 0);
        char got[160];
        size_t gn = 0, prev = 0;
        int rc = 0;
        for (int i = 0; i < 4; i++) {
            const char *e;
            size_t el;
            rc = g4_stop_strings_feed_ex(s, text + prev, cuts[i] - prev, cuts[i] > q ? 1 : 0, &e, &el, NULL);
            assert_true(rc == 0 || rc == 1);
            memcpy(got + gn, e, el);
            gn += el;
            prev = cuts[i];
        }
        const char *e;
        size_t el;
        assert_int_equal(g4_stop_strings_finish(s, &e, &el), rc);
        memcpy(got + gn, e, el);
        gn += el;
        if (gn != want || memcmp(got, text, gn) || g4_stop_strings_matched(s) != ww)
            fail_msg("text [%s] quiet %zu: got %zu bytes (%d), want %zu (%d)", text, q, gn, g4_stop_strings_matched(s), want, ww);
        g4_stop_strings_free(s);
    }
}

/* NUL bytes in the text are bytes like any other: nothing is cut at them, streamed at any
 * split or whole. */
static void test_nul_in_text(void **st) {
    (void)st;
    const char text[] = "x\0a\0ab\0y";
    const size_t len = sizeof text - 1;
    const char *stops[] = {"ab", "b\0y" /* stops at the NUL: "b" */};
    size_t cut;
    int which;
    assert_int_equal(g4_stop_strings_find(text, len, stops, 2, &cut, &which, NULL), 0);
    assert_int_equal(cut, 4); /* "x\0a\0", then "ab" ends first */
    assert_int_equal(which, 0);
    const char *one[] = {"y"};
    assert_int_equal(g4_stop_strings_find(text, len, one, 1, &cut, &which, NULL), 0);
    assert_int_equal(cut, len - 1);
    g4_stop_strings *s;
    assert_int_equal(g4_stop_strings_create(one, 1, &s, NULL), 0);
    for (size_t i = 0; i <= len; i++) {
        char got[32];
        size_t gn = 0;
        const char *e;
        size_t el;
        g4_stop_strings_reset(s);
        assert_true(g4_stop_strings_feed(s, text, i, &e, &el, NULL) >= 0);
        memcpy(got + gn, e, el);
        gn += el;
        assert_int_equal(g4_stop_strings_feed(s, text + i, len - i, &e, &el, NULL), 1);
        memcpy(got + gn, e, el);
        gn += el;
        assert_int_equal(gn, len - 1);
        assert_memory_equal(got, text, gn);
    }
    g4_stop_strings_free(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_basic),
        cmocka_unit_test(test_holdback),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_random_splits),
        cmocka_unit_test(test_nul_in_text),
        cmocka_unit_test(test_quiet_prefix),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
