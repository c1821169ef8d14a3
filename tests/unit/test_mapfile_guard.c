/* The guard of memory-mapped model files (src/base/mapfile.c, engine.c files_intact): a file
 * truncated under its map reads as zeros past its new end instead of killing the process with
 * SIGBUS, and is reported naming the file; a file changed in place is reported; a SIGBUS outside
 * every map still ends the process. Through the engine: a step after the model file was
 * truncated or overwritten in place fails with G4_EIO naming it, and so does every later step,
 * while g4_engine_failure says why (what /health shows); with --load copy nothing changes. */
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/mapfile.h"
#include "engine_util.h"

#define MIB ((size_t)1 << 20)

/* A file of n bytes of a pattern, last modified an hour ago (so a change now moves its mtime). */
static void write_pattern(const char *path, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    for (size_t i = 0; i < n; i++) fputc((int)((i * 131u + 7u) & 0xff) | 1, f);
    fclose(f);
    struct timespec t[2] = {{time(NULL) - 3600, 0}, {time(NULL) - 3600, 0}};
    assert_int_equal(utimensat(AT_FDCWD, path, t, 0), 0);
}

/* g4_mapfile_check names the file and what happened; closing the map takes the report away. */
static void damage_reported_then_gone(g4_mapfile *m, const char *path, const char *what) {
    const char *why = g4_mapfile_check();
    assert_non_null(why);
    print_message("%s\n", why);
    assert_non_null(strstr(why, path));
    assert_non_null(strstr(why, what));
    g4_mapfile_close(m);
    assert_null(g4_mapfile_check());
}

static void test_truncated_reads_zeros(void **state) {
    (void)state;
    char path[512];
    snprintf(path, sizeof path, "%s/guard_trunc.bin", tu_tmpdir());
    write_pattern(path, 5 * MIB + 123);
    g4_mapfile m;
    g4_err err;
    assert_int_equal(g4_mapfile_open(&m, path, &err), G4_OK);
    assert_null(g4_mapfile_check());
    const volatile uint8_t *d = m.data;
    assert_int_equal(d[4 * MIB], (uint8_t)(((4 * MIB) * 131u + 7u) & 0xff) | 1);
    assert_int_equal(truncate(path, (off_t)MIB), 0);
    assert_int_equal(d[MIB - 1], (uint8_t)(((MIB - 1) * 131u + 7u) & 0xff) | 1); /* before the new end: intact */
    assert_int_equal(d[3 * MIB + 5], 0);                                           /* past it: a zero, no SIGBUS */
    assert_int_equal(d[5 * MIB], 0);
    damage_reported_then_gone(&m, path, "truncated");
}

static void test_changed_in_place(void **state) {
    (void)state;
    char path[512];
    snprintf(path, sizeof path, "%s/guard_changed.bin", tu_tmpdir());
    write_pattern(path, 3 * MIB);
    g4_mapfile m;
    g4_err err;
    assert_int_equal(g4_mapfile_open(&m, path, &err), G4_OK);
    assert_null(g4_mapfile_check());
    int fd = open(path, O_WRONLY);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, "x", 1, (off_t)MIB), 1);
    close(fd);
    assert_int_equal(m.data[MIB], 'x'); /* the map shows the change: that is the danger */
    damage_reported_then_gone(&m, path, "changed in place");
}

/* A SIGBUS that is not a guarded map's ends the process as it would have without the guard. */
static void test_other_sigbus_still_kills(void **state) {
    (void)state;
    char path[512], other[512];
    snprintf(path, sizeof path, "%s/guard_a.bin", tu_tmpdir());
    snprintf(other, sizeof other, "%s/guard_b.bin", tu_tmpdir());
    write_pattern(path, MIB);
    write_pattern(other, 2 * MIB);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        signal(SIGBUS, SIG_DFL); /* not cmocka's: what a program has */
        g4_mapfile m;
        g4_err err;
        if (g4_mapfile_open(&m, path, &err)) _exit(2); /* the guard's handler is installed */
        int fd = open(other, O_RDONLY);
        const volatile uint8_t *p = mmap(NULL, 2 * MIB, PROT_READ, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED || truncate(other, 4096)) _exit(3);
        _exit(p[MIB] == 0 ? 4 : 5); /* must not get here */
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
#ifdef __SANITIZE_ADDRESS__
    /* ASan's own SIGBUS handler reports and exits */
    assert_true((WIFSIGNALED(st) && WTERMSIG(st) == SIGBUS) || (WIFEXITED(st) && WEXITSTATUS(st) != 4 && WEXITSTATUS(st) != 5 && WEXITSTATUS(st) != 0));
#else
    if (!(WIFSIGNALED(st) && WTERMSIG(st) == SIGBUS)) fail_msg("the child did not die of SIGBUS (status 0x%x)", st);
#endif
}

/* ---- through the engine ---------------------------------------------------------------------- */

/* A copy of the demo model (weights and config) in dir, its weights dated an hour ago. */
static void copy_demo(const char *dir) {
    char cmd[2000];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s' && cp models/demo/config.json models/demo/model.safetensors '%s'/ && touch -d '-1 hour' '%s'/model.safetensors",
             dir, dir, dir, dir);
    assert_int_equal(system(cmd), 0);
}

static int step(g4_engine *e, int seq, int32_t pos, float *logits, g4_err *err) {
    int32_t id = 2 + pos, p = pos, s = seq;
    uint8_t want = 1;
    g4_batch b = {.n = 1, .ids = &id, .pos = &p, .seq = &s, .logits = &want};
    return g4_engine_forward(e, &b, logits, err);
}

/* how: 't' truncates the weights, 'w' overwrites a byte in place. */
static void damage_under_engine(char how, int copy) {
    char dir[300], st[400];
    snprintf(dir, sizeof dir, "%s/demo_%c%d", tu_tmpdir(), how, copy);
    snprintf(st, sizeof st, "%s/model.safetensors", dir);
    copy_demo(dir);
    g4_engine_opts o = {.tp = 2, .threads = 1, .model_dir = dir, .max_seqs = 2, .max_batch = 8, .max_ctx = 64, .load_copy = copy};
    g4_engine *e;
    g4_err err = {0};
    if (g4_engine_open(&o, &e, &err)) fail_msg("%s", err.msg);
    const int64_t V = g4_engine_vocab(e);
    float *before = malloc(sizeof(float) * (size_t)V * 2), *after = malloc(sizeof(float) * (size_t)V);
    int seq;
    assert_int_equal(g4_engine_seq_open(e, 64, &seq, &err), G4_OK);
    assert_int_equal(step(e, seq, 0, before, &err), G4_OK);
    assert_int_equal(step(e, seq, 1, before + V, &err), G4_OK);
    g4_engine_seq_close(e, seq);
    assert_null(g4_engine_failure(e));
    if (how == 't') {
        assert_int_equal(truncate(st, 4096), 0);
    } else {
        struct stat sb;
        assert_int_equal(stat(st, &sb), 0);
        int fd = open(st, O_WRONLY);
        assert_true(fd >= 0);
        assert_int_equal(pwrite(fd, "\x40", 1, sb.st_size / 2), 1);
        close(fd);
    }
    assert_int_equal(g4_engine_seq_open(e, 64, &seq, &err), G4_OK);
    int rc = step(e, seq, 0, after, &err);
    if (copy) { /* the weights were read once, at open: nothing changes */
        assert_int_equal(rc, G4_OK);
        assert_memory_equal(after, before, sizeof(float) * (size_t)V);
        assert_null(g4_engine_failure(e));
    } else {
        if (rc != G4_EIO) fail_msg("a step on %s weights: rc %d (%s)", how == 't' ? "truncated" : "overwritten", rc, err.msg);
        print_message("%s\n", err.msg);
        assert_non_null(strstr(err.msg, st));
        assert_non_null(strstr(err.msg, how == 't' ? "truncated" : "changed in place"));
        assert_non_null(g4_engine_failure(e));
        assert_non_null(strstr(g4_engine_failure(e), st));
        assert_int_equal(step(e, seq, 0, after, &err), G4_EIO); /* every later step too */
        assert_non_null(strstr(err.msg, st));
    }
    g4_engine_seq_close(e, seq);
    g4_engine_close(e);
    free(before);
    free(after);
}

/* An overwrite is seen before any step runs (what /health asks). */
static void test_engine_reports_change_without_a_step(void **state) {
    (void)state;
    char dir[300], st[400];
    snprintf(dir, sizeof dir, "%s/demo_idle", tu_tmpdir());
    snprintf(st, sizeof st, "%s/model.safetensors", dir);
    copy_demo(dir);
    g4_engine_opts o = {.tp = 1, .threads = 1, .model_dir = dir, .max_seqs = 2, .max_batch = 8, .max_ctx = 64};
    g4_engine *e;
    g4_err err = {0};
    if (g4_engine_open(&o, &e, &err)) fail_msg("%s", err.msg);
    assert_null(g4_engine_failure(e));
    char cmd[700];
    snprintf(cmd, sizeof cmd, "printf 'x' | dd of='%s' bs=1 seek=100 conv=notrunc status=none", st);
    assert_int_equal(system(cmd), 0);
    assert_non_null(g4_engine_failure(e));
    g4_engine_close(e);
}

static void test_engine_truncated(void **state) { (void)state; damage_under_engine('t', 0); }
static void test_engine_overwritten(void **state) { (void)state; damage_under_engine('w', 0); }
static void test_engine_load_copy_immune(void **state) { (void)state; damage_under_engine('t', 1); damage_under_engine('w', 1); }

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_truncated_reads_zeros),
        cmocka_unit_test(test_changed_in_place),
        cmocka_unit_test(test_other_sigbus_still_kills),
        cmocka_unit_test(test_engine_truncated),
        cmocka_unit_test(test_engine_overwritten),
        cmocka_unit_test(test_engine_reports_change_without_a_step),
        cmocka_unit_test(test_engine_load_copy_immune),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
