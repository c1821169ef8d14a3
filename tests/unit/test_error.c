/* Unit tests for base/error: messages, prefixes, code names; G4_ASSERT (base/assert.h) and the
 * KV allocator's use of it on a block let go twice. */
#include "testutil.h"
#include "base/assert.h"
#include "base/error.h"
#include "engine/kvalloc.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

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

/* Runs fn in a child with stderr in a pipe: its exit status and what it printed. */
static int in_child(void (*fn)(void), char *out, size_t cap) {
    int fd[2];
    assert_int_equal(pipe(fd), 0);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(fd[1], 2);
        close(fd[0]);
        fn();
        _exit(0);
    }
    close(fd[1]);
    size_t n = 0;
    ssize_t r;
    while (n + 1 < cap && (r = read(fd[0], out + n, cap - 1 - n)) > 0) n += (size_t)r;
    out[n] = 0;
    close(fd[0]);
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    return st;
}

static void assert_holds(void) { G4_ASSERT(1 + 1 == 2, "arithmetic"); }
static void assert_breaks(void) {
    int blocks = 3;
    G4_ASSERT(blocks < 2, "%d blocks", blocks);
}

static int no_flush(void *ctx, const int32_t *ops, int64_t n, g4_err *err) { return G4_OK; }
static void kv_double_free(void) {
    g4_kv_geom g = {.bs = 16, .ng = {1, 1}};
    g4_kvalloc a;
    g4_err err;
    if (g4_kvalloc_create(&a, &g, 8, 64, no_flush, NULL, &err)) _exit(3);
    int32_t b = g4_kvalloc_block(&a, 0);
    g4_kvalloc_unref(&a, 0, b);
    g4_kvalloc_unref(&a, 0, b); /* a holder's bookkeeping gone wrong */
    _exit(4);
}

static void test_assert(void **state) {
    (void)state;
    char out[2048];
    int st = in_child(assert_holds, out, sizeof out);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    assert_string_equal(out, "");
    st = in_child(assert_breaks, out, sizeof out);
    assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT);
    print_message("%s", out);
    assert_non_null(strstr(out, "g4tp: assertion failed at tests/unit/test_error.c:"));
    assert_non_null(strstr(out, ": blocks < 2: 3 blocks\n"));
    st = in_child(kv_double_free, out, sizeof out);
    assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT);
    assert_non_null(strstr(out, "kv block 0 of kind 0 is not held"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_set_and_prefix),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_assert),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
