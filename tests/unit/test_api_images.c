/* test_api_images.c — the pure parts of image input in the server: strict base64, image_url parts
 * taken out of a conversation (data URLs, http(s) URLs, what is refused, the part left behind),
 * one image list in template order across the API parsers, and the URL allow-list's host match.
 * Fetching, decoding and generation are covered by tests/e2e/server_images.sh. */
#include "testutil.h"

#include <jansson.h>

#include "server/anthropic.h"
#include "server/api_images.h"
#include "server/fetch.h"
#include "server/openai.h"

static void test_base64(void **st) {
    (void)st;
    struct { const char *in; const char *out; } ok[] = {
        {"aGVsbG8=", "hello"}, {"aGVsbG8", "hello"}, {"aGk=", "hi"}, {"aGk", "hi"}, {"YQ==", "a"}, {"YQ", "a"},
        {"aGVs\nbG8=", "hello"}, {"aGVs\r\nbG8=", "hello"}, {"+/8=", "\xfb\xff"}, {"-_8=", "\xfb\xff"} /* the URL-safe alphabet */, {"", ""},
    };
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        unsigned char *o = NULL;
        size_t n = 99;
        assert_int_equal(g4_base64_decode(ok[i].in, strlen(ok[i].in), &o, &n), 0);
        assert_int_equal(n, strlen(ok[i].out));
        assert_memory_equal(o, ok[i].out, n);
        free(o);
    }
    /* bad characters, a lone sextet, padding that does not end a quantum, padding inside,
     * non-zero spare bits (not canonical), spaces */
    const char *bad[] = {"aGVsbG8*", "a", "aGVsb", "YQ=", "YQ===", "Y===", "YQ==YQ==", "aGk=aGk=", "YR==", "aGl=", "aGVs bG8="};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        unsigned char *o = (unsigned char *)"untouched";
        size_t n = 7;
        if (g4_base64_decode(bad[i], strlen(bad[i]), &o, &n) != -1) fail_msg("accepted bad base64 '%s'", bad[i]);
        assert_string_equal((const char *)o, "untouched");
    }
}

static int take(const char *part_json, g4_api_images *im, g4_api_err *ae, json_t **left) {
    json_error_t je;
    json_t *p = json_loads(part_json, JSON_ALLOW_NUL, &je);
    assert_non_null(p);
    int rc = g4_api_images_take(p, "messages[0].content[1]", im, ae);
    *left = p;
    return rc;
}

static void test_take(void **st) {
    (void)st;
    g4_api_images im = {0};
    g4_api_err ae;
    json_t *left;
    assert_int_equal(take("{\"type\":\"image_url\",\"image_url\":{\"url\":\"data:image/png;base64,aGk=\",\"detail\":\"low\"}}", &im, &ae, &left), 0);
    char *s = json_dumps(left, JSON_COMPACT);
    assert_string_equal(s, "{\"type\":\"image\"}"); /* what the chat template renders as the placeholder */
    free(s);
    json_decref(left);
    assert_int_equal(take("{\"type\":\"image_url\",\"image_url\":\"HTTPS://example.com/a.png\"}", &im, &ae, &left), 0);
    json_decref(left);
    assert_int_equal(take("{\"type\":\"image_url\",\"image_url\":{\"url\":\"data:;base64,aGk=\"}}", &im, &ae, &left), 0); /* no media type: the bytes decide */
    json_decref(left);
    assert_int_equal(im.n, 3);
    assert_int_equal(im.v[0].len, 2);
    assert_memory_equal(im.v[0].data, "hi", 2);
    assert_null(im.v[0].url);
    assert_string_equal(im.v[0].param, "messages[0].content[1]");
    assert_null(im.v[1].data);
    assert_string_equal(im.v[1].url, "HTTPS://example.com/a.png");
    const char *bad[] = {
        "{\"type\":\"image_url\"}", "{\"type\":\"image_url\",\"image_url\":{}}", "{\"type\":\"image_url\",\"image_url\":7}",
        "{\"type\":\"image_url\",\"image_url\":\"file:///etc/passwd\"}", "{\"type\":\"image_url\",\"image_url\":\"ftp://x/a.png\"}",
        "{\"type\":\"image_url\",\"image_url\":\"data:image/png,rawbytes\"}", "{\"type\":\"image_url\",\"image_url\":\"data:image/png;base64\"}",
        "{\"type\":\"image_url\",\"image_url\":\"data:text/plain;base64,aGk=\"}", "{\"type\":\"image_url\",\"image_url\":\"data:image/png;base64,\"}",
        "{\"type\":\"image_url\",\"image_url\":\"data:image/png;base64,a\"}", "{\"type\":\"image_url\",\"image_url\":\"http://x/a\\u0000b\"}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        if (take(bad[i], &im, &ae, &left) != 400) fail_msg("accepted %s", bad[i]);
        assert_string_equal(ae.param, "messages[0].content[1]");
        assert_true(strstr(ae.message, "messages[0].content[1]") != NULL);
        json_decref(left);
    }
    assert_int_equal(im.n, 3); /* nothing added by a refusal */
    g4_api_images_free(&im);
    assert_int_equal(im.n, 0);
}

/* The parsers put every image in one list, in the order the template renders them, and leave
 * {"type":"image"} in the conversation. */
static void test_parsers(void **st) {
    (void)st;
    g4_api_request q;
    g4_api_err ae;
    const char *chat = "{\"messages\":[{\"role\":\"system\",\"content\":\"s\"},{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
                       "{\"type\":\"image_url\",\"image_url\":{\"url\":\"data:image/png;base64,MQ==\"}}]},{\"role\":\"assistant\",\"content\":\"b\"},"
                       "{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":\"http://h/2.png\"},{\"type\":\"text\",\"text\":\"c\"}]}]}";
    assert_int_equal(g4_api_parse(G4_API_CHAT, chat, strlen(chat), &q, &ae), 0);
    assert_int_equal(q.images.n, 2);
    assert_memory_equal(q.images.v[0].data, "1", 1);
    assert_string_equal(q.images.v[0].param, "messages[1].content[1]");
    assert_string_equal(q.images.v[1].url, "http://h/2.png");
    assert_string_equal(q.images.v[1].param, "messages[3].content[0]");
    json_t *msgs = json_is_array(q.chat) ? q.chat : json_object_get(q.chat, "messages");
    char *s = json_dumps(json_object_get(json_array_get(msgs, 3), "content"), JSON_COMPACT);
    assert_non_null(s);
    assert_string_equal(s, "[{\"type\":\"image\"},{\"type\":\"text\",\"text\":\"c\"}]");
    free(s);
    g4_api_request_free(&q);

    const char *gen = "{\"prompt\":\"p\",\"images\":[\"MQ==\",\"Mg==\"]}";
    assert_int_equal(g4_api_parse(G4_API_GENERATE, gen, strlen(gen), &q, &ae), 0);
    assert_int_equal(q.images.n, 2);
    assert_memory_equal(q.images.v[1].data, "2", 1);
    assert_string_equal(q.images.v[1].param, "images[1]");
    g4_api_request_free(&q);
    const char *gbad = "{\"prompt\":\"p\",\"images\":[\"MQ==\",7]}";
    assert_int_equal(g4_api_parse(G4_API_GENERATE, gbad, strlen(gbad), &q, &ae), 400);
    assert_string_equal(ae.param, "images[1]");

    const char *anth = "{\"model\":\"m\",\"max_tokens\":4,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\",\"source\":{\"type\":\"base64\","
                       "\"media_type\":\"image/png\",\"data\":\"MQ==\"}},{\"type\":\"image\",\"source\":{\"type\":\"url\",\"url\":\"https://h/3.png\"}},"
                       "{\"type\":\"text\",\"text\":\"q\"}]}]}";
    assert_int_equal(g4_anth_parse(anth, strlen(anth), 0, &q, &ae), 0);
    assert_int_equal(q.images.n, 2);
    assert_memory_equal(q.images.v[0].data, "1", 1);
    assert_string_equal(q.images.v[1].url, "https://h/3.png");
    g4_api_request_free(&q);
    const char *abad = "{\"model\":\"m\",\"max_tokens\":4,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\",\"source\":{\"type\":\"base64\","
                       "\"media_type\":\"text/plain\",\"data\":\"MQ==\"}}]}]}";
    assert_int_equal(g4_anth_parse(abad, strlen(abad), 0, &q, &ae), 400);
    assert_true(strstr(ae.param, "messages[0].content[0]") == ae.param);
}

static void test_allow_list(void **st) {
    (void)st;
    struct { const char *list, *url; int want; } c[] = {
        {"example.com", "http://example.com/a.png", 1},
        {"example.com", "https://EXAMPLE.com:8443/a.png", 1},
        {"example.com", "http://www.example.com/a.png", 0},
        {"example.com", "http://example.com.evil.org/a.png", 0},
        {"example.com", "http://example.com@evil.org/a.png", 0},   /* userinfo is not the host */
        {"*.example.com", "http://img.example.com/a.png", 1},
        {"*.example.com", "http://a.b.example.com/a.png", 1},
        {"*.example.com", "http://example.com/a.png", 0},
        {"*.example.com", "http://evilexample.com/a.png", 0},
        {" cdn.x.org , 127.0.0.1 ", "http://127.0.0.1:9/a.png", 1},
        {"cdn.x.org,127.0.0.1", "http://127.0.0.2/a.png", 0},
        {"*", "http://anything.test/a", 1},
        {"*", "ftp://anything.test/a", 0},
        {"*", "file:///etc/passwd", 0},
        {"", "http://example.com/", 0},
        {NULL, "http://example.com/", 0},
    };
    for (size_t i = 0; i < sizeof c / sizeof *c; i++)
        if (g4_fetch_host_allowed(c[i].list, c[i].url) != c[i].want) fail_msg("'%s' against '%s': want %d", c[i].url, c[i].list ? c[i].list : "(null)", c[i].want);
    /* what is not on the list is refused before any network */
    g4_fetch_opts o = {.allowed = "example.com", .max_bytes = 100, .timeout_ms = 1000};
    unsigned char *d = NULL;
    size_t n = 0;
    g4_err err = {0};
    assert_int_equal(g4_fetch("http://127.0.0.1:1/a.png", &o, &d, &n, &err), G4_EINVAL);
    assert_non_null(strstr(err.msg, "allowed-image-domains"));
    assert_null(d);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_base64),
        cmocka_unit_test(test_take),
        cmocka_unit_test(test_parsers),
        cmocka_unit_test(test_allow_list),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
