/* testutil.h — shared helpers for the cmocka unit tests: where the test data lives, reading
 * whole files, and a temporary directory per test binary. Tests run from the repository root. */
#ifndef G4_TESTUTIL_H
#define G4_TESTUTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <cmocka.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

/* tests/data, or $G4_TEST_DATA. */
static inline const char *tu_data_dir(void) {
    const char *d = getenv("G4_TEST_DATA");
    return d ? d : "tests/data";
}

static inline char *tu_path(const char *fmt, ...) {
    static char buf[8][4096];
    static int k;
    char rel[3000];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rel, sizeof rel, fmt, ap);
    va_end(ap);
    char *b = buf[k++ & 7];
    snprintf(b, 4096, "%s/%s", tu_data_dir(), rel);
    return b;
}

/* Reads a whole file; NULL if missing. *len gets the size. Caller frees. */
static inline char *tu_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *p = malloc((size_t)n + 1);
    if (p && fread(p, 1, (size_t)n, f) != (size_t)n) { free(p); p = NULL; }
    fclose(f);
    if (p) { p[n] = 0; if (len) *len = (size_t)n; }
    return p;
}

/* Writes text to dir/name, creating dir (one level) first. */
static inline void tu_write_text(const char *dir, const char *name, const char *text) {
    char p[1024];
    mkdir(dir, 0755);
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* A fresh temporary directory per test binary, under $TMPDIR (default /tmp), removed with
 * everything in it when the binary exits (failed tests included; not after a crash). */
static char tu_tmpdir_path[256];
static pid_t tu_tmpdir_owner;
static inline int tu_rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st; (void)flag; (void)ftw;
    return remove(path) ? 0 : 0; /* best effort: go on past what cannot be removed */
}
static inline void tu_tmpdir_remove(void) {
    if (tu_tmpdir_path[0] && getpid() == tu_tmpdir_owner) nftw(tu_tmpdir_path, tu_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}
static inline const char *tu_tmpdir(void) {
    if (!tu_tmpdir_path[0]) {
        const char *t = getenv("TMPDIR");
        snprintf(tu_tmpdir_path, sizeof tu_tmpdir_path, "%s/g4test.XXXXXX", t && *t ? t : "/tmp");
        if (!mkdtemp(tu_tmpdir_path)) { perror("mkdtemp"); abort(); }
        tu_tmpdir_owner = getpid(); /* a forked child that exits must not take it away */
        atexit(tu_tmpdir_remove);
    }
    return tu_tmpdir_path;
}

/* tu_tmpdir()/name (a few live at a time). */
static inline char *tu_tmp_path(const char *name) {
    static char buf[8][512];
    static int k;
    char *b = buf[k++ & 7];
    snprintf(b, 512, "%s/%s", tu_tmpdir(), name);
    return b;
}

/* Writes n bytes to path (replacing it); fails the test on error. */
static inline void tu_write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) fail_msg("cannot create %s", path);
    assert_int_equal(fwrite(data, 1, n, f), n);
    fclose(f);
}

/* Replaces the first occurrence of `from` by `to` in a file (any bytes, any lengths). */
static inline void tu_replace_in_file(const char *path, const char *from, const char *to) {
    size_t n = 0;
    char *d = tu_read_file(path, &n);
    if (!d) fail_msg("cannot read %s", path);
    char *hit = memmem(d, n, from, strlen(from));
    if (!hit) fail_msg("'%s' not found in %s", from, path);
    size_t a = (size_t)(hit - d), fl = strlen(from), tl = strlen(to);
    char *o = malloc(n - fl + tl);
    memcpy(o, d, a);
    memcpy(o + a, to, tl);
    memcpy(o + a + tl, d + a + fl, n - a - fl);
    tu_write_file(path, o, n - fl + tl);
    free(o);
    free(d);
}

/* Rewrites a safetensors file's JSON header with `from` replaced by `to` (the header length
 * updated, the data area kept). */
static inline void tu_edit_st_header(const char *path, const char *from, const char *to) {
    size_t n = 0;
    uint8_t *d = (uint8_t *)tu_read_file(path, &n);
    if (!d) fail_msg("cannot read %s", path);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = hl << 8 | d[i];
    char *h = malloc(hl + 1);
    memcpy(h, d + 8, hl);
    h[hl] = 0;
    char *hit = strstr(h, from);
    if (!hit) fail_msg("'%s' not in the header of %s", from, path);
    size_t fl = strlen(from), tl = strlen(to), nhl = hl - fl + tl;
    uint8_t *o = malloc(8 + nhl + (n - 8 - hl));
    for (int i = 0; i < 8; i++) o[i] = (uint8_t)(nhl >> (8 * i));
    size_t a = (size_t)(hit - h);
    memcpy(o + 8, h, a);
    memcpy(o + 8 + a, to, tl);
    memcpy(o + 8 + a + tl, hit + fl, hl - a - fl);
    memcpy(o + 8 + nhl, d + 8 + hl, n - 8 - hl);
    tu_write_file(path, o, 8 + nhl + (n - 8 - hl));
    free(o);
    free(h);
    free(d);
}

/* Copies the named files of folder src into folder dst (created if missing). */
static inline void tu_copy_files(const char *src, const char *dst, const char *const *files, int n) {
    mkdir(dst, 0755);
    for (int i = 0; i < n; i++) {
        char in[2048], out[2048];
        size_t len = 0;
        snprintf(in, sizeof in, "%s/%s", src, files[i]);
        snprintf(out, sizeof out, "%s/%s", dst, files[i]);
        char *d = tu_read_file(in, &len);
        if (!d) fail_msg("cannot read %s", in);
        tu_write_file(out, d, len);
        free(d);
    }
}

#endif
