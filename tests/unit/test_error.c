/* Unit tests for base/error: messages, prefixes, code names. */
#include "testutil.h"
#include "base/error.h"

static void test_set_and_prefix(void **state) {
    (void)state;
    g4_err e;
    g4_err_clear(&e);
    assert_int_equal(g4_err_set(&e, G4_EFORMAT, "bad %s at %d", "header", 7), G4_EFORMAT);
    assert_string_equal(e.msg, "bad header at 7");
    g4_err_prefix(&e, "%s: ", "model.safetensors");
    assert_string_equal(e.msg, "model.safetensors: bad header at 7");
    assert_int_equal(e.code, G4_EFORMAT);
    assert_int_equal(g4_err_set(NULL, G4_EIO, "x"), G4_EIO);
}

static void test_names(void **state) {
    (void)state;
    assert_string_equal(g4_status_name(G4_OK), "ok");
    assert_string_equal(g4_status_name(G4_ECONTEXT), "context_length_exceeded");
    assert_string_equal(g4_status_name(-3), "unknown");
    assert_string_equal(g4_status_name(G4_NSTATUS), "unknown");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_set_and_prefix),
        cmocka_unit_test(test_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
