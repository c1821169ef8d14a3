/* The KV cache on disk (src/engine/kvfile.c, kvdisk.c, the engine's CMD_KV_DISK):
 * - a prefix saved by one engine and loaded by a new one gives, for the rest of the prompt,
 *   bitwise the logits of a cold prefill: TP 1 and 2, other thread counts, f32 / bf16 / q8_0
 *   KV, prefixes ending on and inside a block, past the sliding window;
 * - --kv-cache-dir: a finished sequence is written when idle, read back at the next start, and
 *   the request after the restart hits it; the disk budget evicts the least recently used;
 * - refusals: a damaged meta, a damaged block, a truncated rank file, another version, another
 *   model, another TP degree: refused with the reason, and the cache stays exact. */
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "kv_util.h"

/* Computes tok[0..n) in a sequence and closes it: its blocks are in the prefix cache. */
static void run_prefix(kt *k, const int32_t *tok, int64_t n) {
    int seq;
    int64_t c;
    g4_err err = {0};
    if (g4_engine_seq_open_cached(k->e, g4_engine_max_ctx(k->e), tok, n, &seq, &c, &err)) fail_msg("%s", err.msg);
    feed(k, seq, tok, c, n, NULL);
    g4_engine_seq_close(k->e, seq);
}

static char tmpdir[64];

static void rm_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    for (struct dirent *de; (de = readdir(d));) {
        if (de->d_name[0] == '.') continue;
        char p[512];
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

static int setup(void **state) {
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/g4kvdisk-XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}
static int teardown(void **state) {
    (void)state;
    rm_tree(tmpdir);
    return 0;
}

static int count_files(const char *dir, const char *suffix) {
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *de; d && (de = readdir(d));) {
        const size_t l = strlen(de->d_name), s = strlen(suffix);
        n += l > s && !strcmp(de->d_name + l - s, suffix);
    }
    if (d) closedir(d);
    return n;
}

/* Save L positions from engine A (tp_a x th_a), load into a fresh engine B (tp_b x th_b): the
 * rest of the prompt is bitwise the cold prefill. */
static void roundtrip(const char *dir, int tp, int th_a, int th_b, const char *kvd, int64_t L) {
    g4_engine_opts o = {.tp = tp, .threads = th_a, .model_dir = dir, .max_batch = 24, .max_ctx = 512, .kv_dtype = kvd};
    kt a, b;
    kt_open(&a, &o);
    const int64_t N = 170;
    int32_t t[170];
    fill_ids(t, N, a.V, 11);
    float *ref = cold(&a, t, N);
    g4_engine_prefix_clear(a.e);
    run_prefix(&a, t, L);
    char stem[256];
    snprintf(stem, sizeof stem, "%s/rt", tmpdir);
    int64_t saved;
    g4_err err = {0};
    if (g4_engine_kv_save(a.e, stem, t, L, &saved, &err)) fail_msg("save: %s", err.msg);
    assert_int_equal(saved, L);
    kt_close(&a);
    o.threads = th_b;
    kt_open(&b, &o);
    int64_t loaded, ntok;
    if (g4_engine_kv_load(b.e, stem, &loaded, &ntok, &err)) fail_msg("load: %s", err.msg);
    assert_int_equal(loaded, L);
    assert_int_equal(ntok, L);
    char what[256];
    snprintf(what, sizeof what, "%s tp %d, threads %d -> %d, %s KV, %lld saved", dir, tp, th_a, th_b, kvd ? kvd : "f32", (long long)L);
    check_hit(&b, t, N, ref, L, what);
    kt_close(&b);
    free(ref);
    char rp[300];
    snprintf(rp, sizeof rp, "%s.meta", stem);
    unlink(rp);
    for (int r = 0; r < tp; r++) {
        snprintf(rp, sizeof rp, "%s.r%dof%d.kv", stem, r, tp);
        unlink(rp);
    }
}

/* The saved sequence is a prompt and its answer; the next request has the prompt only: the
 * sliding rows of the prompt's window were kept too (g4_engine_kv_save_from), so it hits. */
static void test_prompt_of_a_saved_answer(void **state) {
    (void)state;
    g4_engine_opts o = {.tp = 1, .threads = 1, .model_dir = "models/demo", .max_batch = 24, .max_ctx = 1024};
    kt a, b;
    kt_open(&a, &o);
    const int64_t N = 560, prompt = 543;
    int32_t *t = malloc(sizeof(int32_t) * N);
    fill_ids(t, N, a.V, 3);
    float *ref = cold(&a, t, prompt);
    g4_engine_prefix_clear(a.e);
    run_prefix(&a, t, N);
    char stem[256];
    snprintf(stem, sizeof stem, "%s/answer", tmpdir);
    int64_t saved;
    g4_err err = {0};
    if (g4_engine_kv_save_from(a.e, stem, t, N, prompt, &saved, &err)) fail_msg("save: %s", err.msg);
    kt_close(&a);
    kt_open(&b, &o);
    int64_t loaded;
    if (g4_engine_kv_load(b.e, stem, &loaded, NULL, &err)) fail_msg("load: %s", err.msg);
    assert_int_equal(loaded, N);
    check_hit(&b, t, prompt, ref, prompt - 1, "the prompt of a saved answer");
    kt_close(&b);
    free(ref);
    free(t);
}

static void test_restored_is_exact(void **state) {
    (void)state;
    roundtrip(tu_path("golden/tiny_default"), 1, 1, 2, NULL, 32);   /* on a block boundary */
    roundtrip(tu_path("golden/tiny_default"), 1, 1, 1, NULL, 141);  /* inside a block, past the window */
    roundtrip(tu_path("golden/tiny_tp8"), 2, 1, 2, NULL, 77);
    roundtrip(tu_path("golden/tiny_wide"), 2, 2, 1, "bf16", 133);
    roundtrip("models/demo", 1, 2, 1, "q8_0", 100);
    roundtrip("models/demo", 2, 1, 1, NULL, 150);
}

/* Makes one entry of tiny_default (tp 1) at stem; returns its meta's path in meta. */
static void make_entry(const char *stem, int32_t *t, int64_t n, g4_engine_opts *o) {
    kt a;
    kt_open(&a, o);
    fill_ids(t, n, a.V, 5);
    run_prefix(&a, t, n);
    int64_t saved;
    g4_err err = {0};
    if (g4_engine_kv_save(a.e, stem, t, n, &saved, &err)) fail_msg("save: %s", err.msg);
    assert_int_equal(saved, n);
    kt_close(&a);
}

static int load_rc(g4_engine_opts *o, const char *stem, char *msg, size_t cap) {
    kt b;
    kt_open(&b, o);
    int64_t loaded;
    g4_err err = {0};
    const int rc = g4_engine_kv_load(b.e, stem, &loaded, NULL, &err);
    snprintf(msg, cap, "%s", err.msg);
    kt_close(&b);
    return rc;
}

static void flip(const char *path, long off) {
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    if (off < 0) { fseek(f, 0, SEEK_END); off += ftell(f); }
    fseek(f, off, SEEK_SET);
    int c = fgetc(f);
    fseek(f, off, SEEK_SET);
    fputc(c ^ 0x20, f);
    fclose(f);
}

static void test_refusals(void **state) {
    (void)state;
    g4_engine_opts o = {.tp = 1, .threads = 1, .model_dir = tu_path("golden/tiny_default"), .max_batch = 24, .max_ctx = 512};
    char stem[256], meta[300], rank[300], msg[1024];
    snprintf(stem, sizeof stem, "%s/bad", tmpdir);
    snprintf(meta, sizeof meta, "%s.meta", stem);
    snprintf(rank, sizeof rank, "%s.r0of1.kv", stem);
    int32_t t[90];
    /* sound: loads */
    make_entry(stem, t, 90, &o);
    assert_int_equal(load_rc(&o, stem, msg, sizeof msg), G4_OK);
    /* a damaged meta */
    flip(meta, 60);
    assert_int_equal(load_rc(&o, stem, msg, sizeof msg), G4_ECHECKSUM);
    make_entry(stem, t, 90, &o);
    /* a damaged block: refused from there on; whatever is cached stays exact */
    flip(rank, -20);
    assert_int_equal(load_rc(&o, stem, msg, sizeof msg), G4_ECHECKSUM);
    assert_non_null(strstr(msg, "checksum"));
    make_entry(stem, t, 90, &o);
    /* truncated */
    assert_int_equal(truncate(rank, 5000), 0);
    assert_int_equal(load_rc(&o, stem, msg, sizeof msg), G4_EFORMAT);
    assert_non_null(strstr(msg, "truncated"));
    make_entry(stem, t, 90, &o);
    /* another numeric version, with a header that is otherwise sound */
    {
        FILE *f = fopen(rank, "r+b");
        uint8_t h[96];
        assert_int_equal(fread(h, 1, 96, f), 96);
        h[12] ^= 0x7f;
        const uint64_t x = XXH64(h, 88, 0);
        memcpy(h + 88, &x, 8);
        fseek(f, 0, SEEK_SET);
        fwrite(h, 1, 96, f);
        fclose(f);
    }
    assert_int_equal(load_rc(&o, stem, msg, sizeof msg), G4_EUNSUPPORTED);
    assert_non_null(strstr(msg, "another version"));
    make_entry(stem, t, 90, &o);
    /* another model, another TP degree, another KV dtype: the meta's identity says no */
    g4_engine_opts other = o;
    other.model_dir = tu_path("golden/tiny_wide");
    assert_int_equal(load_rc(&other, stem, msg, sizeof msg), G4_EUNSUPPORTED);
    other = o;
    other.tp = 2;
    other.model_dir = tu_path("golden/tiny_default");
    assert_int_equal(load_rc(&other, stem, msg, sizeof msg), G4_EUNSUPPORTED);
    other = o;
    other.kv_dtype = "bf16";
    assert_int_equal(load_rc(&other, stem, msg, sizeof msg), G4_EUNSUPPORTED);
    /* missing */
    assert_int_equal(unlink(rank), 0);
    assert_int_equal(load_rc(&o, stem, msg, sizeof msg), G4_EIO);
    unlink(meta);
    /* nothing cached: nothing to save */
    kt a;
    kt_open(&a, &o);
    int64_t saved;
    g4_err err = {0};
    assert_int_equal(g4_engine_kv_save(a.e, stem, t, 90, &saved, &err), G4_ENOTFOUND);
    /* an unwritable place: an error, the engine goes on */
    run_prefix(&a, t, 40);
    assert_int_equal(g4_engine_kv_save(a.e, "/proc/no/such/dir/x", t, 40, &saved, &err), G4_EIO);
    float *ref = cold(&a, t, 90);
    g4_engine_prefix_clear(a.e);
    run_prefix(&a, t, 40);
    check_hit(&a, t, 90, ref, 40, "after a failed save");
    free(ref);
    kt_close(&a);
}

/* A fresh engine computes one new prefix of n random ids and writes it (one idle step); *ds after. */
static void one_new_prefix(g4_engine_opts *o, int64_t n, uint32_t seed, g4_kv_disk_stats *ds) {
    kt b;
    kt_open(&b, o);
    int32_t *w = malloc(sizeof(int32_t) * (size_t)n);
    fill_ids(w, n, b.V, seed);
    run_prefix(&b, w, n);
    assert_int_equal(g4_engine_kv_disk_step(b.e), 1);
    g4_engine_kv_disk_stats(b.e, ds);
    free(w);
    kt_close(&b);
}

/* --kv-cache-dir: written when idle, read at the next start, hit after the restart; LRU budget. */
static void test_cache_dir(void **state) {
    (void)state;
    char dir[128];
    snprintf(dir, sizeof dir, "%s/auto", tmpdir);
    g4_engine_opts o = {.tp = 2, .threads = 1, .model_dir = tu_path("golden/tiny_tp8"), .max_batch = 24, .max_ctx = 512,
                        .kv_cache_dir = dir, .kv_cache_min_tokens = 32};
    kt a, b;
    kt_open(&a, &o);
    const int64_t N = 160;
    int32_t t[160], u[160];
    fill_ids(t, N, a.V, 21);
    fill_ids(u, N, a.V, 22);
    float *ref = cold(&a, t, N), *ref2 = cold(&a, u, N);
    assert_int_equal(g4_engine_kv_disk_step(a.e), 1); /* the two cold runs were queued */
    assert_int_equal(g4_engine_kv_disk_step(a.e), 1);
    assert_int_equal(g4_engine_kv_disk_step(a.e), 0);
    g4_kv_disk_stats ds;
    g4_engine_kv_disk_stats(a.e, &ds);
    assert_int_equal(ds.saved, 2);
    assert_int_equal(ds.entries, 2);
    run_prefix(&a, t, 20); /* shorter than kv_cache_min_tokens: not written */
    assert_int_equal(g4_engine_kv_disk_step(a.e), 0);
    run_prefix(&a, t, 120); /* queued; written at close */
    kt_close(&a);
    assert_int_equal(count_files(dir, ".meta"), 3);
    assert_int_equal(count_files(dir, ".kv"), 6);
    /* restart: read back; the whole of t (160 positions) is cached, the rest exact */
    kt_open(&b, &o);
    g4_engine_kv_disk_stats(b.e, &ds);
    assert_true(ds.loaded_tokens >= 2 * (uint64_t)N - 1);
    check_hit(&b, t, N, ref, N - 1, "t after a restart");
    check_hit(&b, u, N, ref2, N - 1, "u after a restart");
    kt_close(&b);
    /* a budget for one entry: the least recently used go */
    o.kv_cache_dir_bytes = (int64_t)(ds.bytes / 2); /* one entry of 160 positions, not two (the three: 440) */
    one_new_prefix(&o, N, 23, &ds);
    assert_true(ds.evicted >= 2);
    assert_true(ds.bytes <= ds.budget);
    assert_int_equal(ds.entries, 1);
    assert_int_equal(count_files(dir, ".meta"), 1);
    assert_int_equal(count_files(dir, ".kv"), 2);
    /* an entry larger than the whole budget is not written, and evicts nothing for it */
    o.kv_cache_dir_bytes = 1;
    one_new_prefix(&o, N, 24, &ds);
    assert_int_equal(ds.evicted, 0);
    assert_int_equal(ds.saved, 0);
    assert_int_equal(ds.entries, 1);
    assert_int_equal(count_files(dir, ".meta"), 1);
    /* a half-written entry (rank files without their meta) and a temporary file go at start */
    char prefix[32] = "", p1[400], p2[400];
    DIR *d = opendir(dir);
    for (struct dirent *de; d && (de = readdir(d));)
        if (strstr(de->d_name, ".meta")) memcpy(prefix, de->d_name, 17);
    closedir(d);
    assert_int_equal(strlen(prefix), 17);
    snprintf(p1, sizeof p1, "%s/%sfeed-7.r1of2.kv", dir, prefix);
    snprintf(p2, sizeof p2, "%s/%sfeed-7.meta.tmp-1-1", dir, prefix);
    fclose(fopen(p1, "w"));
    fclose(fopen(p2, "w"));
    kt_open(&b, &o);
    kt_close(&b);
    assert_int_equal(access(p1, F_OK), -1);
    assert_int_equal(access(p2, F_OK), -1);
    assert_int_equal(count_files(dir, ".kv"), 2);
    free(ref);
    free(ref2);
    rm_tree(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_restored_is_exact),
        cmocka_unit_test(test_prompt_of_a_saved_answer),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_cache_dir),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
