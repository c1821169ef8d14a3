/* test_ui.c — the chat page's embedded files (src/server/ui.h): every file of src/server/ui/ is
 * in the binary with its current bytes (a stale generated table fails here), paths map to files
 * and nothing else, Content-Types, ETags. The HTTP answers are checked in tests/e2e/webui.sh. */
#include "testutil.h"

#include <dirent.h>
#include <ctype.h>

#include "server/ui.h"

#define UI_DIR "src/server/ui"

static void test_every_file_embedded_as_it_is(void **state) {
    (void)state;
    DIR *d = opendir(UI_DIR);
    assert_non_null(d);
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char path[512], url[512];
        snprintf(path, sizeof path, UI_DIR "/%s", e->d_name);
        snprintf(url, sizeof url, "/ui/%s", e->d_name);
        size_t len = 0;
        char *want = tu_read_file(path, &len);
        assert_non_null(want);
        const g4_ui_file *f = g4_ui_find(url);
        if (!f) fail_msg("%s is not embedded (rebuild: make)", path);
        if (f->len != len || memcmp(f->data, want, len)) fail_msg("%s: the embedded bytes differ from the file", path);
        free(want);
        n++;
    }
    closedir(d);
    assert_int_equal(n, g4_ui_n_files);
    assert_true(n >= 4);
}

static void test_paths(void **state) {
    (void)state;
    const g4_ui_file *idx = g4_ui_find("/");
    assert_non_null(idx);
    assert_string_equal(idx->name, "index.html");
    assert_ptr_equal(g4_ui_find("/ui/index.html"), idx);
    assert_non_null(g4_ui_find("/ui/app.js"));
    assert_non_null(g4_ui_find("/ui/app.css"));
    static const char *const none[] = {"", "/ui/", "/ui", "/index.html", "/app.js", "/ui/app.js/", "/ui//app.js",
                                       "/ui/../ui/app.js", "/ui/./app.js", "/uiapp.js", "/ui/APP.JS", "/ui/app.j", "//"};
    for (size_t i = 0; i < sizeof none / sizeof *none; i++)
        if (g4_ui_find(none[i])) fail_msg("\"%s\" names a file", none[i]);
}

static void test_content_types(void **state) {
    (void)state;
    assert_string_equal(g4_ui_content_type("index.html"), "text/html; charset=utf-8");
    assert_string_equal(g4_ui_content_type("app.js"), "text/javascript; charset=utf-8");
    assert_string_equal(g4_ui_content_type("app.css"), "text/css; charset=utf-8");
    assert_string_equal(g4_ui_content_type("icon.svg"), "image/svg+xml");
    assert_string_equal(g4_ui_content_type("x.bin"), "application/octet-stream");
    assert_string_equal(g4_ui_content_type("noext"), "application/octet-stream");
    for (size_t i = 0; i < g4_ui_n_files; i++) /* every embedded file has a known type */
        if (!strcmp(g4_ui_content_type(g4_ui_files[i].name), "application/octet-stream")) fail_msg("%s: no content type", g4_ui_files[i].name);
}

static void test_etags(void **state) {
    (void)state;
    for (size_t i = 0; i < g4_ui_n_files; i++) {
        const char *t = g4_ui_files[i].etag;
        assert_int_equal(strlen(t), 18);
        assert_int_equal(t[0], '"');
        assert_int_equal(t[17], '"');
        for (int k = 1; k < 17; k++) assert_true(isxdigit((unsigned char)t[k]));
        for (size_t j = 0; j < i; j++) assert_string_not_equal(t, g4_ui_files[j].etag);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_file_embedded_as_it_is),
        cmocka_unit_test(test_paths),
        cmocka_unit_test(test_content_types),
        cmocka_unit_test(test_etags),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
