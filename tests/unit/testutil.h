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
#include <sys/stat.h>

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
static inline void tu_write_file(const char *dir, const char *name, const char *text) {
    char p[1024];
    mkdir(dir, 0755);
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* A fresh temporary directory (removed by the OS's tmp cleaning; tests keep them small). */
static inline const char *tu_tmpdir(void) {
    static char dir[256];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/g4test.XXXXXX");
        if (!mkdtemp(dir)) { perror("mkdtemp"); abort(); }
    }
    return dir;
}

#endif
