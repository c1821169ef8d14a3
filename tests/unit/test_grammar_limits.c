/* test_grammar_limits.c — the grammar compiler's bounds (issue 24 items 1-3): the bodies that
 * hung the server or took its memory are refused fast with the limit named, or compiled with
 * little work where the algorithm no longer multiplies (nested arrays, a $ref used many times);
 * every limit (NFA states, transitions, DFA states, memory, steps, time, the budget shared across
 * compiles, cancellation) stops a compile, and the memory accounting holds: the peak stays under
 * the limit and the shared counter goes back to where it was. Work is counted in steps, so the
 * checks do not depend on the machine's speed. */
#include "testutil.h"

#include <jansson.h>
#include <stdatomic.h>

#include "grammar/grammar.h"

static json_t *J(const char *s) {
    json_error_t je;
    json_t *j = json_loads(s, JSON_DECODE_ANY, &je);
    if (!j) fail_msg("bad test JSON %s: %s", s, je.text);
    return j;
}

/* Compiles schema (raw JSON) within lim; returns the code, fills st and err. */
static int compile(const char *schema, const g4_grammar_limits *lim, g4_grammar_compile_stats *st, g4_err *err) {
    json_t *s = J(schema);
    g4_output_spec sp;
    g4_output_spec_init(&sp);
    sp.format = G4_FMT_JSON_SCHEMA;
    sp.schema = s;
    g4_grammar *g = NULL;
    char part[64];
    int rc = g4_output_compile_ex(&sp, lim, st, &g, part, sizeof part, err);
    if (rc) assert_null(g);
    else assert_non_null(g);
    g4_grammar_release(g);
    json_decref(s);
    return rc;
}

/* {"type":"array","maxItems":2,"items": ...} nested depth times around an integer */
static char *nested_arrays(int depth) {
    char *s = malloc((size_t)depth * 64 + 64);
    size_t k = 0;
    for (int i = 0; i < depth; i++) k += (size_t)sprintf(s + k, "{\"type\":\"array\",\"maxItems\":2,\"items\":");
    k += (size_t)sprintf(s + k, "{\"type\":\"integer\"}");
    for (int i = 0; i < depth; i++) s[k++] = '}';
    s[k] = 0;
    return s;
}

/* Item 1: 60 levels of arrays of at most 2 items (2.4 KB) never finished compiling: each level
 * built its item twice. Now a large item is one rule; the work grows with the depth. */
static void test_nested_arrays(void **st) {
    (void)st;
    g4_grammar_limits lim = {.max_work = 20000000};
    g4_grammar_compile_stats s20, s60;
    g4_err err = {0};
    char *a = nested_arrays(20), *b = nested_arrays(60);
    assert_int_equal(compile(a, &lim, &s20, &err), 0);
    if (compile(b, &lim, &s60, &err)) fail_msg("depth 60: %s", err.msg);
    print_message("nested arrays: depth 20 %llu steps, %d states; depth 60 %llu steps, %d states\n", (unsigned long long)s20.work, s20.states,
                  (unsigned long long)s60.work, s60.states);
    assert_true(s60.work < 8 * s20.work); /* linear-ish, not x1.6 per level */
    free(a);
    free(b);
}

/* A $def referenced twice by the one above it, 25 deep: 2^25 copies when each use is inlined. */
static void test_ref_fanout(void **st) {
    (void)st;
    char *s = malloc(1 << 16);
    size_t k = (size_t)sprintf(s, "{\"$ref\":\"#/$defs/d0\",\"$defs\":{");
    for (int i = 0; i < 25; i++)
        k += (size_t)sprintf(s + k, "%s\"d%d\":{\"type\":\"object\",\"properties\":{\"a\":{\"$ref\":\"#/$defs/d%d\"},\"b\":{\"$ref\":\"#/$defs/d%d\"}},"
                                    "\"additionalProperties\":false}", i ? "," : "", i, i + 1, i + 1);
    sprintf(s + k, ",\"d25\":{\"type\":\"string\",\"maxLength\":20}}}");
    g4_grammar_limits lim = {.max_work = 50000000};
    g4_grammar_compile_stats cs;
    g4_err err = {0};
    if (compile(s, &lim, &cs, &err)) fail_msg("%s", err.msg);
    print_message("ref fan-out: %llu steps, %d states\n", (unsigned long long)cs.work, cs.states);
    free(s);
}

/* Proving oneOf alternatives disjoint follows anyOf lists and references, which branch: the
 * proof is charged to the compile's steps like the automata. */
static void test_oneof_proof_bounded(void **st) {
    (void)st;
    char *s = malloc(1 << 20);
    g4_grammar_limits lim = {.max_work = 5000000};
    g4_grammar_compile_stats cs;
    g4_err err = {0};
    /* alternatives whose anyOf lists branch, 3 ways per level */
    size_t k = (size_t)sprintf(s, "{\"oneOf\":[{\"$ref\":\"#/$defs/d0\"},{\"$ref\":\"#/$defs/d0\"}],\"$defs\":{");
    for (int i = 0; i < 22; i++)
        k += (size_t)sprintf(s + k, "\"d%d\":{\"anyOf\":[{\"$ref\":\"#/$defs/d%d\"},{\"$ref\":\"#/$defs/d%d\"},{\"type\":\"object\","
                                    "\"properties\":{\"k\":{\"$ref\":\"#/$defs/d%d\"}},\"required\":[\"k\"]}]},", i, i + 1, i + 1, i + 1);
    sprintf(s + k, "\"d22\":{\"type\":\"integer\"}}}");
    assert_int_equal(compile(s, &lim, &cs, &err), G4_EINVAL);
    assert_int_equal(cs.limit, G4_GLIM_WORK);
    assert_true(cs.work < 6000000);
    /* a const checked against an anyOf of 30 object members per level, 7 levels deep */
    k = (size_t)sprintf(s, "{\"oneOf\":[{\"const\":");
    for (int i = 0; i < 7; i++) k += (size_t)sprintf(s + k, "{\"k\":");
    k += (size_t)sprintf(s + k, "\"s\"");
    for (int i = 0; i < 7; i++) s[k++] = '}';
    k += (size_t)sprintf(s + k, "},{\"$ref\":\"#/$defs/d0\"}],\"$defs\":{");
    for (int i = 0; i < 7; i++) {
        k += (size_t)sprintf(s + k, "\"d%d\":{\"anyOf\":[", i);
        for (int m = 0; m < 30; m++)
            k += (size_t)sprintf(s + k, "%s{\"type\":\"object\",\"properties\":{\"k\":{\"$ref\":\"#/$defs/d%d\"}},\"required\":[\"k\"],\"maxProperties\":%d}",
                                 m ? "," : "", i + 1, m + 1);
        k += (size_t)sprintf(s + k, "]},");
    }
    sprintf(s + k, "\"d7\":{\"type\":\"integer\"}}}");
    if (compile(s, &lim, &cs, &err) != G4_EINVAL) fail_msg("%s", err.msg);
    assert_int_equal(cs.limit, G4_GLIM_WORK);
    assert_true(cs.work < 6000000);
    free(s);
}

/* Item 2: counts multiply, (a{1000}){1000} is a million states; refused by its product before
 * anything is built. */
static void test_regex_product(void **st) {
    (void)st;
    static const char *const pats[] = {"(a{1000}){1000}", "^(a{1000}){1000}$", "^(a{0,1000}){1000}$", "((a{100}){100}){100}", "(a|b{1000}){1000}x"};
    for (size_t i = 0; i < sizeof pats / sizeof *pats; i++) {
        char s[256];
        snprintf(s, sizeof s, "{\"type\":\"string\",\"pattern\":\"%s\"}", pats[i]);
        g4_grammar_compile_stats cs;
        g4_err err = {0};
        assert_int_equal(compile(s, NULL, &cs, &err), G4_EINVAL);
        if (!strstr(err.msg, "NFA state limit")) fail_msg("%s: %s", pats[i], err.msg);
        assert_int_equal(cs.limit, G4_GLIM_NFA_STATES);
        assert_true(cs.work < 1000000);
        assert_true(cs.peak_memory < (4u << 20));
    }
}

/* A pattern as long as a request body: its concatenation and alternation chains were built
 * recursively, one stack frame per character (300,000 took the stack). Now they are walked as
 * lists; the tree is charged to the budget; the pattern is refused by its size, not a crash. */
static void test_long_pattern(void **st) {
    (void)st;
    const size_t n = 600000;
    char *s = malloc(n + 64);
    for (int alt = 0; alt < 2; alt++) {
        size_t k = (size_t)sprintf(s, "{\"type\":\"string\",\"pattern\":\"^");
        for (size_t i = 0; i < n / 2; i++) { s[k++] = 'a'; s[k++] = alt ? '|' : 'b'; }
        k += (size_t)sprintf(s + k, "c$\"}");
        g4_grammar_compile_stats cs;
        g4_err err = {0};
        assert_int_equal(compile(s, NULL, &cs, &err), G4_EINVAL);
        assert_true(cs.limit == G4_GLIM_NFA_STATES || cs.limit == G4_GLIM_MEMORY);
        g4_grammar_limits lim = {.max_memory = 16u << 20};
        assert_int_equal(compile(s, &lim, &cs, &err), G4_EINVAL);
        assert_int_equal(cs.limit, G4_GLIM_MEMORY);
        assert_true(cs.peak_memory <= lim.max_memory);
    }
    /* within the NFA limit, so it is built: 120,000 characters in a row, then too many DFA states */
    size_t k = (size_t)sprintf(s, "{\"type\":\"string\",\"pattern\":\"^");
    for (size_t i = 0; i < 120000; i++) s[k++] = 'a';
    sprintf(s + k, "$\"}");
    g4_grammar_compile_stats cs;
    g4_err err = {0};
    assert_int_equal(compile(s, NULL, &cs, &err), G4_EINVAL);
    assert_int_equal(cs.limit, G4_GLIM_STATES);
    free(s);
}

/* An unanchored pattern whose subset construction grows quadratically: stopped by the steps or
 * the memory limit, whichever comes first, with the memory accounted under its limit. */
static void test_subset_blowup(void **st) {
    (void)st;
    const char *s = "{\"type\":\"string\",\"pattern\":\"(a{300}){300}\"}";
    g4_grammar_limits lim = {.max_work = 30000000, .max_memory = 64u << 20};
    g4_grammar_compile_stats cs;
    g4_err err = {0};
    assert_int_equal(compile(s, &lim, &cs, &err), G4_EINVAL);
    assert_true(cs.limit == G4_GLIM_WORK || cs.limit == G4_GLIM_MEMORY);
    assert_non_null(strstr(err.msg, cs.limit == G4_GLIM_WORK ? "work limit" : "memory limit"));
    assert_true(cs.peak_memory <= lim.max_memory);
    lim = (g4_grammar_limits){.max_work = 1000000000, .max_memory = 8u << 20};
    assert_int_equal(compile(s, &lim, &cs, &err), G4_EINVAL);
    assert_int_equal(cs.limit, G4_GLIM_MEMORY);
    assert_non_null(strstr(err.msg, "8 MiB"));
    assert_true(cs.peak_memory <= lim.max_memory);
}

/* Each structural limit, named. */
static void test_each_limit(void **st) {
    (void)st;
    g4_grammar_compile_stats cs;
    g4_err err = {0};
    const char *big = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"maxLength\":1000},\"b\":{\"type\":\"string\",\"maxLength\":1000}}}";
    g4_grammar_limits lim = {.max_nfa_states = 2000};
    assert_int_equal(compile(big, &lim, &cs, &err), G4_EINVAL);
    assert_int_equal(cs.limit, G4_GLIM_NFA_STATES);
    assert_non_null(strstr(err.msg, "NFA state limit"));
    lim = (g4_grammar_limits){.max_transitions = 3000};
    assert_int_equal(compile(big, &lim, &cs, &err), G4_EINVAL);
    assert_int_equal(cs.limit, G4_GLIM_TRANSITIONS);
    assert_non_null(strstr(err.msg, "transition limit"));
    lim = (g4_grammar_limits){.max_states = 1000};
    assert_int_equal(compile(big, &lim, &cs, &err), G4_EINVAL);
    assert_int_equal(cs.limit, G4_GLIM_STATES);
    if (!strstr(err.msg, "state limit")) fail_msg("%s", err.msg);
    lim = (g4_grammar_limits){.max_work = 1000};
    assert_int_equal(compile(big, &lim, &cs, &err), G4_EINVAL);
    assert_int_equal(cs.limit, G4_GLIM_WORK);
    lim = (g4_grammar_limits){.max_memory = 64u << 10};
    assert_int_equal(compile(big, &lim, &cs, &err), G4_EINVAL);
    assert_int_equal(cs.limit, G4_GLIM_MEMORY);
    assert_true(cs.peak_memory <= lim.max_memory);
    /* the same schema within the defaults */
    assert_int_equal(compile(big, NULL, &cs, &err), 0);
    assert_int_equal(cs.limit, G4_GLIM_NONE);
    assert_true(cs.peak_memory > 0 && cs.peak_memory < G4_GRAMMAR_DEFAULT_MEMORY);
}

typedef struct { int calls, stop_at; } cancel_probe;

static int cancel_after(void *user) {
    cancel_probe *p = user;
    return ++p->calls >= p->stop_at;
}

/* The cancel callback is polled while the compile works, and stops it promptly. */
static void test_cancel(void **st) {
    (void)st;
    const char *s = "{\"type\":\"string\",\"pattern\":\"(a{100}){30}\"}"; /* a long but legal compile */
    cancel_probe p = {0, 3};
    g4_grammar_limits lim = {.cancelled = cancel_after, .user = &p};
    g4_grammar_compile_stats cs;
    g4_err err = {0};
    assert_int_equal(compile(s, &lim, &cs, &err), G4_ECANCELED);
    assert_int_equal(cs.limit, G4_GLIM_CANCELLED);
    assert_int_equal(p.calls, 3); /* it stopped at the first poll that said so */
    assert_true(cs.work < 200000);
    /* cancelled before it starts: nothing is built */
    p = (cancel_probe){0, 1};
    assert_int_equal(compile(s, &lim, &cs, &err), G4_ECANCELED);
    assert_int_equal(cs.nfa_states, 0);
}

/* A deadline stops a compile (named); a compile within it is not touched. */
static void test_timeout(void **st) {
    (void)st;
    g4_grammar_limits lim = {.timeout_ms = 1, .max_work = UINT64_MAX};
    g4_grammar_compile_stats cs;
    g4_err err = {0};
    assert_int_equal(compile("{\"type\":\"string\",\"pattern\":\"(a{300}){300}\"}", &lim, &cs, &err), G4_EINVAL);
    assert_int_equal(cs.limit, G4_GLIM_TIME);
    assert_non_null(strstr(err.msg, "time limit"));
    lim.timeout_ms = UINT32_MAX; /* none */
    assert_int_equal(compile("{\"type\":\"integer\"}", &lim, &cs, &err), 0);
}

/* The budget across compiles: what others hold counts; a compile alone goes ahead; every byte
 * charged comes back when the compile ends. */
static void test_shared_budget(void **st) {
    (void)st;
    const char *s = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"maxLength\":300}}}";
    atomic_size_t shared;
    atomic_init(&shared, 0);
    g4_grammar_limits lim = {.shared = &shared, .shared_max = 1024};
    g4_grammar_compile_stats cs;
    g4_err err = {0};
    assert_int_equal(compile(s, &lim, &cs, &err), 0); /* alone: past shared_max but goes ahead */
    assert_true(cs.peak_memory > 1024);
    assert_int_equal(atomic_load(&shared), 0);
    atomic_store(&shared, 1000); /* others hold 1000 bytes */
    assert_int_equal(compile(s, &lim, &cs, &err), G4_EBUSY);
    assert_int_equal(cs.limit, G4_GLIM_BUSY);
    assert_non_null(strstr(err.msg, "retry"));
    assert_int_equal(atomic_load(&shared), 1000);
    lim.shared_max = 64u << 20;
    assert_int_equal(compile(s, &lim, &cs, &err), 0);
    assert_int_equal(atomic_load(&shared), 1000);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nested_arrays),
        cmocka_unit_test(test_ref_fanout),
        cmocka_unit_test(test_oneof_proof_bounded),
        cmocka_unit_test(test_regex_product),
        cmocka_unit_test(test_long_pattern),
        cmocka_unit_test(test_subset_blowup),
        cmocka_unit_test(test_each_limit),
        cmocka_unit_test(test_cancel),
        cmocka_unit_test(test_timeout),
        cmocka_unit_test(test_shared_budget),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
