/* test_jinja.c — the Jinja engine on small templates: every case of
 * tests/data/template/jinja_cases.json (expected output or error rendered by Python Jinja2 with
 * HF's settings; scripts/make_template_parity.py) plus robustness: malformed templates give
 * errors, unsupported constructs are refused by name, deep nesting and runaway recursion or
 * output are bounded, the render limits (steps, memory, output, timeout, cancellation, a memory
 * budget shared across renders) stop a render with a clear error, and mutated real templates
 * never crash. */
#include "testutil.h"

#include <jansson.h>
#include <pthread.h>

#include "text/jinja_engine.h"

static int render_src(const char *src, const char *vars_json, char **out, g4_err *e)
{
    g4_jinja *j = NULL;
    *out = NULL;
    int rc = g4_jinja_compile(src, strlen(src), &j, e);
    if (rc) {
        assert_null(j);
        return rc;
    }
    json_t *vars = vars_json ? json_loads(vars_json, 0, NULL) : NULL;
    size_t n;
    rc = g4_jinja_render(j, vars, out, &n, e);
    if (rc == G4_OK) assert_int_equal(n, strlen(*out));
    json_decref(vars);
    g4_jinja_free(j);
    return rc;
}

static void test_engine_cases(void **state)
{
    (void)state;
    json_error_t je;
    json_t *root = json_load_file(tu_path("template/jinja_cases.json"), 0, &je);
    assert_non_null(root);
    json_t *cases = json_object_get(root, "cases");
    assert_true(json_array_size(cases) >= 100);
    int failures = 0;
    for (size_t i = 0; i < json_array_size(cases); i++) {
        json_t *c = json_array_get(cases, i);
        const char *src = json_string_value(json_object_get(c, "template"));
        size_t srclen = json_string_length(json_object_get(c, "template"));
        g4_jinja *j = NULL;
        g4_err e = {0};
        char *out = NULL;
        size_t n = 0;
        int rc = g4_jinja_compile(src, srclen, &j, &e);
        if (rc == G4_OK) {
            rc = g4_jinja_render(j, json_object_get(c, "vars"), &out, &n, &e);
            g4_jinja_free(j);
        }
        json_t *exp = json_object_get(c, "expected");
        if (exp) {
            if (rc != G4_OK) {
                fprintf(stderr, "case %zu %s: error %d: %s\n", i, src, rc, e.msg);
                failures++;
            } else if (n != json_string_length(exp) || memcmp(out, json_string_value(exp), n) != 0) {
                fprintf(stderr, "case %zu %s:\n  expected: %s\n  got:      %s\n", i, src, json_string_value(exp), out);
                failures++;
            }
        } else {
            json_t *err = json_object_get(c, "error");
            char want[1200];
            const char *type = json_string_value(json_object_get(err, "type"));
            /* raise_exception's TemplateError carries the bare message; others name the class */
            snprintf(want, sizeof want, "%s%s%s", strcmp(type, "TemplateError") ? type : "",
                     strcmp(type, "TemplateError") ? ": " : "", json_string_value(json_object_get(err, "message")));
            if (rc != G4_ETEMPLATE || !strstr(e.msg, want)) {
                fprintf(stderr, "case %zu %s: expected error \"%s\", got rc=%d \"%s\"\n", i, src, want, rc, e.msg);
                failures++;
            }
        }
        free(out);
    }
    json_decref(root);
    assert_int_equal(failures, 0);
}

static void test_malformed(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "{% if %}", "{{ ", "{{ 1 + }}", "{% for x in %}{% endfor %}", "{% endif %}", "{{ (1 }}", "{{ 'abc }}",
        "{# unterminated", "{% raw %}x", "{% macro %}{% endmacro %}", "{{ a. }}", "{% set %}", "{% else %}",
        "{% break %}", "{{ }}", "{% if x %}{% endfor %}", "{% for x in y %}", "{{ a b }}", "{{ 1 ) }}",
        "{% set x = %}", "{{ x | }}", "{{ x is }}", "{% macro m(a=1, b) %}{% endmacro %}", "{{ f(a=1, 2) }}",
        "{% set true = 1 %}", "{{ x[] }}", "{% for %}", "{% if 1 %}{% elif %}{% endif %}", "{{ '\\x4' }}",
        "{% unknown %}", "{{ 1 is is }}", "}}{{", "{%", "{{", "{{ {'a': } }}", "{{ ) }}", "{{ x.1.2 ]}}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        g4_jinja *j = NULL;
        g4_err e = {0};
        int rc = g4_jinja_compile(bad[i], strlen(bad[i]), &j, &e);
        if (rc == G4_OK) {
            /* some are only errors at render time in Jinja too ("}}{{" is text then a tag) */
            char *out = NULL;
            size_t n;
            rc = g4_jinja_render(j, NULL, &out, &n, &e);
            free(out);
            g4_jinja_free(j);
            if (rc == G4_OK && strcmp(bad[i], "}}{{") != 0) fprintf(stderr, "accepted: %s\n", bad[i]);
            if (strcmp(bad[i], "}}{{") != 0) assert_int_not_equal(rc, G4_OK);
            continue;
        }
        assert_true(rc == G4_EFORMAT || rc == G4_EUNSUPPORTED);
        assert_true(strlen(e.msg) > 0);
        assert_non_null(strstr(e.msg, "line "));
    }
}

static void expect_unsupported(const char *src, const char *needle)
{
    char *out;
    g4_err e = {0};
    int rc = render_src(src, "{\"x\": {\"a\": 1}}", &out, &e);
    if (rc != G4_EUNSUPPORTED) fprintf(stderr, "%s: rc=%d %s\n", src, rc, e.msg);
    assert_int_equal(rc, G4_EUNSUPPORTED);
    assert_non_null(strstr(e.msg, needle));
    assert_non_null(strstr(e.msg, "line "));
    free(out);
}

static void test_unsupported(void **state)
{
    (void)state;
    expect_unsupported("{% include 'a.j2' %}", "include");
    expect_unsupported("{% extends 'a.j2' %}", "extends");
    expect_unsupported("{% block b %}{% endblock %}", "block");
    expect_unsupported("\n{{ x | urlize }}", "urlize");
    expect_unsupported("{{ x is escaped }}", "escaped");
    expect_unsupported("{% for a in x recursive %}{% endfor %}", "recursive");
    expect_unsupported("{{ f(*x) }}", "*args");
    expect_unsupported("{{ 'a %s' % 1 }}", "formatting");
    expect_unsupported("{{ 'abc'.format(1) }}", "format");
    expect_unsupported("{{ x.items }}", "function");
    expect_unsupported("{{ [1] | map('string') }}", "generator");
    expect_unsupported("{{ 9223372036854775807 + 1 }}", "overflow");
    expect_unsupported("{{ 99999999999999999999 }}", "too large");
    expect_unsupported("{{ cycler(1, 2) }}", "cycler");
    expect_unsupported("{{ x | tojson(ensure_ascii=true) }}", "ensure_ascii");
    expect_unsupported("{{ 'Ünïcode' | capitalize }}", "non-ASCII");
    /* Jinja2 prints the loop variables of such a macro as 'missing' */
    expect_unsupported("{% set ns = namespace(ms=[]) %}{% for i in [1,2] %}{% macro m() %}{{ i }}{% endmacro %}"
                       "{% set ns.ms = ns.ms + [m] %}{% endfor %}{% for m in ns.ms %}{{ m() }}{% endfor %}", "ended");
}

static void test_limits(void **state)
{
    (void)state;
    char *out;
    g4_err e = {0};
    /* deep expression nesting: refused by the parser, no stack overflow */
    size_t depth = 20000;
    char *src = malloc(depth * 2 + 16);
    size_t k = 0;
    src[k++] = '{';
    src[k++] = '{';
    for (size_t i = 0; i < depth; i++) src[k++] = '(';
    src[k++] = '1';
    for (size_t i = 0; i < depth; i++) src[k++] = ')';
    src[k++] = '}';
    src[k++] = '}';
    src[k] = 0;
    assert_int_equal(render_src(src, NULL, &out, &e), G4_EFORMAT);
    for (size_t i = 0; i < depth; i++) src[2 + i] = '[';
    assert_int_equal(render_src(src, NULL, &out, &e), G4_EFORMAT);
    free(src);
    /* deep statement nesting */
    size_t nif = 5000;
    src = malloc(nif * 24 + 16);
    k = 0;
    for (size_t i = 0; i < nif; i++) k += (size_t)sprintf(src + k, "{%% if 1 %%}");
    for (size_t i = 0; i < nif; i++) k += (size_t)sprintf(src + k, "{%% endif %%}");
    assert_int_equal(render_src(src, NULL, &out, &e), G4_EFORMAT);
    free(src);
    /* unbounded macro recursion */
    assert_int_equal(render_src("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", NULL, &out, &e), G4_ETEMPLATE);
    assert_non_null(strstr(e.msg, "RecursionError"));
    /* bounded recursion works */
    assert_int_equal(render_src("{% macro f(n) %}{% if n %}{{ f(n - 1) }}{% endif %}{{ n }}{% endmacro %}{{ f(50) | length }}",
                                NULL, &out, &e), G4_OK);
    assert_string_equal(out, "92");
    free(out);
    /* runaway output and huge strings */
    assert_int_equal(render_src("{% for i in range(100000) %}{% for j in range(100000) %}"
                                "{{ 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx' * 64 }}{% endfor %}{% endfor %}",
                                NULL, &out, &e), G4_ENOMEM);
    assert_int_equal(render_src("{{ 'x' * 100000000000 }}", NULL, &out, &e), G4_ENOMEM);
    /* deeply nested JSON variables print fine to a point */
    assert_int_equal(render_src("{{ x }}", "{\"x\": [[[[[[[[[[1]]]]]]]]]]}", &out, &e), G4_OK);
    assert_string_equal(out, "[[[[[[[[[[1]]]]]]]]]]");
    free(out);
}

static int render_lim(const char *src, const g4_jinja_limits *lim, g4_jinja_stats *st, g4_err *e)
{
    g4_jinja *j = NULL;
    assert_int_equal(g4_jinja_compile(src, strlen(src), &j, e), G4_OK);
    char *out = NULL;
    size_t n;
    int rc = g4_jinja_render_ex(j, NULL, lim, st, &out, &n, e);
    if (rc) assert_null(out);
    free(out);
    g4_jinja_free(j);
    return rc;
}

/* ~10^10 iterations (no output): only a limit ends it */
static const char *const k_endless = "{% set ns = namespace(k=0) %}{% for i in range(100000) %}{% for j in range(100000) %}"
                                     "{% set ns.k = ns.k + 1 %}{% endfor %}{% endfor %}{{ ns.k }}";

static void *cancel_later(void *arg)
{
    volatile int *flag = arg;
    *flag = 1;
    return NULL;
}

static void test_render_limits(void **state)
{
    (void)state;
    g4_err e = {0};
    g4_jinja_stats st;
    /* the step budget ends a runaway loop; stats say how far it got */
    g4_jinja_limits lim = {.max_steps = 100000};
    assert_int_equal(render_lim(k_endless, &lim, &st, &e), G4_ENOMEM);
    assert_non_null(strstr(e.msg, "exceeded its budget of 100000 evaluation steps"));
    assert_true(st.steps > 100000 && st.steps < 100100);
    /* working memory and output */
    lim = (g4_jinja_limits){.max_memory = 1u << 20};
    assert_int_equal(render_lim("{{ 'x' * 2000000 }}", &lim, &st, &e), G4_ENOMEM);
    assert_non_null(strstr(e.msg, "working memory limit (1 MiB) exceeded"));
    assert_true(st.memory <= (1u << 20));
    lim = (g4_jinja_limits){.max_output = 1000};
    assert_int_equal(render_lim("{% for i in range(100) %}0123456789abcdef{% endfor %}", &lim, &st, &e), G4_ENOMEM);
    assert_non_null(strstr(e.msg, "output limit (1000 bytes)"));
    /* timeout: the loop runs until the clock says stop, however slow the machine */
    lim = (g4_jinja_limits){.max_steps = UINT64_MAX - 1, .timeout_ms = 1};
    assert_int_equal(render_lim(k_endless, &lim, &st, &e), G4_ECANCELED);
    assert_non_null(strstr(e.msg, "timed out after 1 ms"));
    /* cancellation from another thread while the render runs (timeout only as a safety net) */
    volatile int flag = 0;
    lim = (g4_jinja_limits){.max_steps = UINT64_MAX - 1, .timeout_ms = 600000, .cancel = &flag};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, cancel_later, (void *)&flag), 0);
    assert_int_equal(render_lim(k_endless, &lim, &st, &e), G4_ECANCELED);
    pthread_join(th, NULL);
    assert_non_null(strstr(e.msg, "template render cancelled"));
    /* a memory budget shared by renders: over it G4_EBUSY, and each render gives back its share */
    atomic_size_t shared = 0;
    lim = (g4_jinja_limits){.shared = &shared, .shared_max = 4u << 20};
    assert_int_equal(render_lim("{{ ('x' * 100) | length }}", &lim, &st, &e), G4_OK);
    assert_int_equal(atomic_load(&shared), 0);
    assert_int_equal(render_lim("{{ ('x' * 8000000) | length }}", &lim, &st, &e), G4_EBUSY);
    assert_non_null(strstr(e.msg, "shared memory budget (4 MiB)"));
    assert_int_equal(atomic_load(&shared), 0);
    atomic_store(&shared, (4u << 20) - 1000); /* other renders in flight hold nearly all of it */
    assert_int_equal(render_lim("{{ 1 }}", &lim, &st, &e), G4_EBUSY);
    assert_int_equal(atomic_load(&shared), (4u << 20) - 1000);
}

static void test_api(void **state)
{
    (void)state;
    g4_jinja *j = NULL;
    g4_err e = {0};
    assert_int_equal(g4_jinja_compile(NULL, 0, &j, &e), G4_EINVAL);
    assert_int_equal(g4_jinja_compile("a{{ x }}", 8, &j, &e), G4_OK);
    json_t *arr = json_array();
    char *out = NULL;
    size_t n;
    assert_int_equal(g4_jinja_render(j, arr, &out, &n, &e), G4_EINVAL);
    json_decref(arr);
    /* a compiled template renders many times with different variables */
    for (int i = 0; i < 3; i++) {
        json_t *v = json_pack("{s:i}", "x", i);
        assert_int_equal(g4_jinja_render(j, v, &out, &n, &e), G4_OK);
        char want[32];
        snprintf(want, sizeof want, "a%d", i);
        assert_string_equal(out, want);
        free(out);
        json_decref(v);
    }
    /* embedded NUL in the template and in values is kept */
    g4_jinja_free(j);
    assert_int_equal(g4_jinja_compile("a\0b{{ x }}", 10, &j, &e), G4_OK);
    json_t *v = json_pack("{s:s#}", "x", "c\0d", (int)3);
    assert_int_equal(g4_jinja_render(j, v, &out, &n, &e), G4_OK);
    assert_int_equal(n, 6);
    assert_memory_equal(out, "a\0bc\0d", 6);
    free(out);
    json_decref(v);
    g4_jinja_free(j);
    g4_jinja_free(NULL);
}

/* deterministic mutation fuzz of the real template: any result but a crash or leak is fine */
static void test_fuzz_real_template(void **state)
{
    (void)state;
    size_t len = 0;
    char *tpl = tu_read_file(tu_path("template/chat_template.jinja"), &len);
    assert_non_null(tpl);
    json_t *vars = json_loads("{\"bos_token\":\"<bos>\",\"add_generation_prompt\":true,\"tools\":[{\"type\":\"function\","
                              "\"function\":{\"name\":\"f\",\"description\":\"d\",\"parameters\":{\"type\":\"object\","
                              "\"properties\":{\"a\":{\"type\":\"string\"}}}}}],\"messages\":[{\"role\":\"system\",\"content\":\"s\"},"
                              "{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\",\"content\":\"yo\",\"tool_calls\":"
                              "[{\"id\":\"1\",\"function\":{\"name\":\"f\",\"arguments\":{\"a\":\"b\"}}}]},"
                              "{\"role\":\"tool\",\"tool_call_id\":\"1\",\"content\":\"r\"}]}", 0, NULL);
    assert_non_null(vars);
    char *buf = malloc(len + 8);
    uint32_t seed = 12345;
    int ok = 0, errs = 0;
    for (int it = 0; it < 600; it++) {
        memcpy(buf, tpl, len);
        size_t n = len;
        int edits = 1 + it % 4;
        for (int k = 0; k < edits; k++) {
            seed = seed * 1103515245u + 12345u;
            size_t pos = (seed >> 8) % n;
            seed = seed * 1103515245u + 12345u;
            int op = (int)((seed >> 8) % 3);
            static const char alphabet[] = "{}%#-+()[]|.'\"\n x0";
            if (op == 0 && n > 1) {
                memmove(buf + pos, buf + pos + 1, n - pos - 1);
                n--;
            } else if (op == 1) {
                memmove(buf + pos + 1, buf + pos, n - pos);
                buf[pos] = alphabet[(seed >> 16) % (sizeof alphabet - 1)];
                n++;
            } else {
                buf[pos] = alphabet[(seed >> 16) % (sizeof alphabet - 1)];
            }
        }
        g4_jinja *j = NULL;
        g4_err e = {0};
        int rc = g4_jinja_compile(buf, n, &j, &e);
        if (rc == G4_OK) {
            char *out = NULL;
            size_t on;
            rc = g4_jinja_render(j, vars, &out, &on, &e);
            free(out);
            g4_jinja_free(j);
        }
        if (rc == G4_OK) ok++;
        else {
            errs++;
            assert_true(strlen(e.msg) > 0);
        }
    }
    assert_true(ok > 0 && errs > 0);
    free(buf);
    free(tpl);
    json_decref(vars);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_engine_cases),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_unsupported),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_render_limits),
        cmocka_unit_test(test_api),
        cmocka_unit_test(test_fuzz_real_template),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
