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

#endif
