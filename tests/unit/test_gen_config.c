/* test_gen_config.c — generation_config.json: the real 31B file, field types and ranges, the
 * fallback to config.json's stop ids, and the sampling defaults derived from it. */
#include "testutil.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/gen_config.h"

static void test_31b(void **st) {
    (void)st;
    g4_gen_config c;
    g4_err err;
    int rc = g4_gen_config_load_dir(tu_path("gen_config/gemma-4-31B-it"), &c, &err);
    if (rc) fail_msg("%s", err.msg);
    assert_int_equal(c.from_file, 1);
    assert_int_equal(c.n_eos, 3);
    assert_int_equal(c.eos_ids[0], 1);
    assert_int_equal(c.eos_ids[1], 106);
    assert_int_equal(c.eos_ids[2], 50);
    assert_int_equal(c.bos_token_id, 2);
    assert_int_equal(c.pad_token_id, 0);
    assert_int_equal(c.do_sample, 1);
    assert_true(c.temperature == 1.0f);
    assert_int_equal(c.top_k, 64);
    assert_true(c.top_p == 0.95f);
    assert_true(c.min_p == 0.0f);
    assert_true(c.max_new_tokens == -1 && c.max_length == -1);
    assert_true(g4_gen_config_is_eos(&c, 106));
    assert_true(g4_gen_config_is_eos(&c, 50));
    assert_false(g4_gen_config_is_eos(&c, 2));
    g4_sampling_params p;
    g4_gen_config_sampling_defaults(&c, &p);
    assert_true(p.temperature == 1.0f && p.top_k == 64 && p.top_p == 0.95f && p.min_p == 0.0f);
    assert_int_equal(p.has_seed, 0);
    assert_int_equal(g4_sampling_params_validate(&p, NULL), 0);
}

static void test_missing_file_uses_config_json(void **st) {
    (void)st;
    char dir[512];
    snprintf(dir, sizeof dir, "%s/nogen", tu_tmpdir());
    /* the 31B config.json: top-level eos [1, 106], text_config has bos/pad */
    size_t n;
    char *cfg = tu_read_file(tu_path("gen_config/gemma-4-31B-it/config.json"), &n);
    assert_non_null(cfg);
    tu_write_text(dir, "config.json", cfg);
    free(cfg);
    g4_gen_config c;
    g4_err err;
    int rc = g4_gen_config_load_dir(dir, &c, &err);
    if (rc) fail_msg("%s", err.msg);
    assert_int_equal(c.from_file, 0);
    assert_int_equal(c.n_eos, 2);
    assert_int_equal(c.eos_ids[0], 1);
    assert_int_equal(c.eos_ids[1], 106);
    assert_int_equal(c.bos_token_id, 2);
    assert_int_equal(c.pad_token_id, 0);
    assert_int_equal(c.do_sample, 0);
    g4_sampling_params p;
    g4_gen_config_sampling_defaults(&c, &p);
    assert_true(g4_sampling_params_is_greedy(&p));
    assert_true(p.temperature == 0.0f);

    /* only text_config has eos */
    snprintf(dir, sizeof dir, "%s/textonly", tu_tmpdir());
    tu_write_text(dir, "config.json", "{\"text_config\": {\"eos_token_id\": 7, \"bos_token_id\": 3}}");
    assert_int_equal(g4_gen_config_load_dir(dir, &c, &err), 0);
    assert_int_equal(c.n_eos, 1);
    assert_int_equal(c.eos_ids[0], 7);
    assert_int_equal(c.bos_token_id, 3);
    assert_int_equal(c.pad_token_id, -1);

    /* a generation config without eos takes config.json's */
    tu_write_text(dir, "generation_config.json", "{\"do_sample\": true, \"temperature\": 0.7}");
    assert_int_equal(g4_gen_config_load_dir(dir, &c, &err), 0);
    assert_int_equal(c.from_file, 1);
    assert_int_equal(c.n_eos, 1);
    assert_int_equal(c.eos_ids[0], 7);
    g4_gen_config_sampling_defaults(&c, &p);
    assert_true(p.temperature == 0.7f && p.top_k == 0 && p.top_p == 1.0f);

    /* neither file */
    snprintf(dir, sizeof dir, "%s/empty", tu_tmpdir());
    mkdir(dir, 0755);
    assert_int_equal(g4_gen_config_load_dir(dir, &c, &err), G4_EIO);
    assert_non_null(strstr(err.msg, "neither"));
    /* bad config.json */
    snprintf(dir, sizeof dir, "%s/badcfg", tu_tmpdir());
    tu_write_text(dir, "config.json", "{\"eos_token_id\": \"</s>\"}");
    assert_int_equal(g4_gen_config_load_dir(dir, &c, &err), G4_EFORMAT);
    assert_non_null(strstr(err.msg, "eos_token_id"));
    assert_non_null(strstr(err.msg, "config.json"));
}

static void test_types(void **st) {
    (void)st;
    static const struct { const char *json, *want; } bad[] = {
        {"{\"eos_token_id\": \"1\"}", "eos_token_id must be an integer or a list of integers, got a string"},
        {"{\"eos_token_id\": [1, 2.5]}", "eos_token_id[1] must be an integer, got a real number"},
        {"{\"eos_token_id\": [1, -4]}", "eos_token_id[1] = -4"},
        {"{\"eos_token_id\": [1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17]}", "at most 16"},
        {"{\"bos_token_id\": true}", "bos_token_id must be an integer, got a boolean"},
        {"{\"do_sample\": 1}", "do_sample must be true or false, got an integer"},
        {"{\"temperature\": \"hot\"}", "temperature must be a number, got a string"},
        {"{\"temperature\": -1}", "temperature = -1 must be >= 0"},
        {"{\"temperature\": 1e300}", "temperature = 1e+300 is too large"},
        {"{\"top_p\": 1.5}", "top_p = 1.5 must be in [0, 1]"},
        {"{\"min_p\": [0.1]}", "min_p must be a number, got a list"},
        {"{\"top_k\": 6.4}", "top_k must be an integer, got a real number"},
        {"{\"top_k\": -1}", "top_k = -1 must be >= 0"},
        {"{\"max_new_tokens\": 0}", "max_new_tokens = 0 must be >= 1"},
        {"{\"max_length\": {}}", "max_length must be an integer, got an object"},
        {"[1, 2]", "top level must be an object"},
        {"{\"top_k\": 5", "invalid JSON"},
    };
    g4_gen_config c;
    g4_err err;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = g4_gen_config_parse(bad[i].json, strlen(bad[i].json), "gc.json", &c, &err);
        if (rc != G4_EFORMAT || !strstr(err.msg, bad[i].want))
            fprintf(stderr, "%s: rc %d [%s]\n", bad[i].json, rc, err.msg);
        assert_int_equal(rc, G4_EFORMAT);
        assert_non_null(strstr(err.msg, bad[i].want));
        assert_non_null(strstr(err.msg, "gc.json"));
    }
    const char *good = "{\"eos_token_id\": 5, \"do_sample\": true, \"temperature\": 2, \"top_k\": 0, "
                       "\"top_p\": null, \"min_p\": 0.05, \"max_new_tokens\": 128, \"max_length\": 4096, \"extra\": [1]}";
    assert_int_equal(g4_gen_config_parse(good, strlen(good), NULL, &c, &err), 0);
    assert_int_equal(c.n_eos, 1);
    assert_int_equal(c.eos_ids[0], 5);
    assert_true(c.temperature == 2.0f && c.top_p == 1.0f && c.min_p == 0.05f);
    assert_true(c.max_new_tokens == 128 && c.max_length == 4096);
    /* do_sample true with temperature 0 is greedy */
    const char *t0 = "{\"do_sample\": true, \"temperature\": 0.0, \"top_k\": 5}";
    assert_int_equal(g4_gen_config_parse(t0, strlen(t0), NULL, &c, &err), 0);
    g4_sampling_params p;
    g4_gen_config_sampling_defaults(&c, &p);
    assert_true(g4_sampling_params_is_greedy(&p));
    /* sampling knobs without do_sample are ignored, as in HF */
    const char *nods = "{\"temperature\": 0.5, \"top_k\": 5}";
    assert_int_equal(g4_gen_config_parse(nods, strlen(nods), NULL, &c, &err), 0);
    g4_gen_config_sampling_defaults(&c, &p);
    assert_true(p.temperature == 0.0f && p.top_k == 0);
    assert_int_equal(g4_gen_config_load_file("/nonexistent/generation_config.json", &c, &err), G4_EIO);
    assert_non_null(strstr(err.msg, "/nonexistent/generation_config.json"));
}

static void expect_unreadable(const char *dir, const char *file, const char *why) {
    g4_gen_config c;
    g4_err err = {0};
    assert_int_equal(g4_gen_config_load_dir(dir, &c, &err), G4_EIO);
    print_message("%s\n", err.msg);
    assert_non_null(strstr(err.msg, file));
    assert_non_null(strstr(err.msg, why));
}

/* A generation_config.json (or config.json) that is there but cannot be read is an error naming
 * it, never "absent" (the model's sampling defaults would silently become ours). As root chmod
 * cannot deny a read, so: a directory, a symlink loop, a dangling link, and a mode-000 file read
 * by a child process that drops to nobody. */
static void test_unreadable(void **st) {
    (void)st;
    char dir[512], p[600];
    snprintf(dir, sizeof dir, "%s/unreadable", tu_tmpdir());
    tu_write_text(dir, "config.json", "{\"eos_token_id\": 1}");
    snprintf(p, sizeof p, "%s/generation_config.json", dir);
    assert_int_equal(mkdir(p, 0755), 0);
    expect_unreadable(dir, "generation_config.json", "is a directory");
    rmdir(p);
    assert_int_equal(symlink("generation_config.json", p), 0);
    expect_unreadable(dir, "generation_config.json", "symbolic links");
    unlink(p);
    assert_int_equal(symlink("gone.json", p), 0);
    expect_unreadable(dir, "generation_config.json", "symbolic link to nothing");
    unlink(p);
    /* config.json as the fallback is held to the same rule */
    snprintf(p, sizeof p, "%s/config.json", dir);
    unlink(p);
    assert_int_equal(mkdir(p, 0755), 0);
    expect_unreadable(dir, "config.json", "is a directory");
    rmdir(p);

    /* permission denied: a folder anyone may enter, a file only root could read */
    char open_dir[512];
    snprintf(open_dir, sizeof open_dir, "%s/openXXXXXX", tu_tmpdir());
    assert_non_null(mkdtemp(open_dir));
    chmod(tu_tmpdir(), 0755); /* the other user must reach it */
    chmod(open_dir, 0755);
    tu_write_text(open_dir, "config.json", "{\"eos_token_id\": 1}");
    tu_write_text(open_dir, "generation_config.json", "{\"do_sample\": true}");
    snprintf(p, sizeof p, "%s/generation_config.json", open_dir);
    chmod(p, 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (getuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0)) _exit(77);
        g4_gen_config c;
        g4_err err = {0};
        int rc = g4_gen_config_load_dir(open_dir, &c, &err);
        fprintf(stderr, "as uid %d: rc %d: %s\n", (int)getuid(), rc, err.msg);
        _exit(rc == G4_EIO && strstr(err.msg, "generation_config.json") && strstr(err.msg, "Permission denied") ? 0 : 1);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    if (WEXITSTATUS(status) == 77) print_message("skipped the EACCES case: cannot switch to uid 65534\n");
    else assert_int_equal(WEXITSTATUS(status), 0);
    unlink(p);
    snprintf(p, sizeof p, "%s/config.json", open_dir);
    unlink(p);
    rmdir(open_dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_31b),
        cmocka_unit_test(test_missing_file_uses_config_json),
        cmocka_unit_test(test_types),
        cmocka_unit_test(test_unreadable),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
