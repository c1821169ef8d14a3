/* fuzz_util.h — shared bits of the libFuzzer harnesses (fuzz/fuzz_*.c, docs/fuzzing.md):
 * invariant checks that abort (so libFuzzer saves the input), cutting one input into pieces,
 * writing pieces as files of a private temp folder (for parsers that only take a path), and the
 * project's own data files (the demo tokenizer and chat template). Header-only: each harness
 * is one translation unit. */
#ifndef G4_FUZZ_UTIL_H
#define G4_FUZZ_UTIL_H

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "base/mapfile.h"
#include "text/utf8.h"

/* An invariant that must hold for every input: on failure print why and abort (a crash). */
#define FUZZ_CHECK(cond, ...)                                                                \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            fprintf(stderr, "fuzz invariant failed at %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                                    \
            fputc('\n', stderr);                                                             \
            abort();                                                                         \
        }                                                                                    \
    } while (0)

/* A failing parser must say why: a known code and a non-empty message. */
#define FUZZ_CHECK_ERR(rc, err)                                                              \
    FUZZ_CHECK((rc) > 0 && (rc) < G4_NSTATUS && (err).msg[0], "rc %d with message \"%s\"", (rc), (err).msg)

static inline int fuzz_utf8_ok(const char *s, size_t n) { return g4_utf8_invalid_at(s, n) == n; }

/* Reads pieces off the front of an input. */
typedef struct { const uint8_t *p; size_t n; } fuzz_in;

static inline unsigned fuzz_byte(fuzz_in *in) {
    if (!in->n) return 0;
    in->n--;
    return *in->p++;
}

/* The bytes up to the next occurrence of sep (removed), or all that is left. */
static inline fuzz_in fuzz_split(fuzz_in *in, const char *sep) {
    size_t sl = strlen(sep);
    const uint8_t *m = in->n >= sl ? memmem(in->p, in->n, sep, sl) : NULL;
    fuzz_in head = {in->p, m ? (size_t)(m - in->p) : in->n};
    in->p += head.n + (m ? sl : 0);
    in->n -= head.n + (m ? sl : 0);
    return head;
}

/* Cuts text into deltas the way a stream would get them: lengths 0..16 from a small PRNG
 * seeded by the input; when whole characters only (valid UTF-8 text, as the detokenizer
 * emits), a cut is moved to the end of the character it falls in. */
typedef struct { const char *s; size_t n, at; uint32_t rng; int whole_chars; } fuzz_cutter;

static inline fuzz_cutter fuzz_cutter_new(const char *s, size_t n, unsigned seed, int whole_chars) {
    return (fuzz_cutter){s, n, 0, seed * 2654435761u + 1, whole_chars};
}

/* The next delta's length (0 allowed); 0 and c->at == c->n once all is cut. */
static inline size_t fuzz_cut(fuzz_cutter *c) {
    c->rng ^= c->rng << 13;
    c->rng ^= c->rng >> 17;
    c->rng ^= c->rng << 5;
    size_t k = c->rng % 17, left = c->n - c->at;
    if (k > left) k = left;
    if (c->whole_chars)
        while (c->at + k < c->n && ((unsigned char)c->s[c->at + k] & 0xC0) == 0x80) k++;
    c->at += k;
    return k;
}

/* A NUL-terminated copy (the parsers that take C strings). */
static inline char *fuzz_strdup(fuzz_in s) {
    char *c = malloc(s.n + 1);
    if (!c) abort();
    memcpy(c, s.p, s.n);
    c[s.n] = 0;
    return c;
}

/* The private temp folder of this process, made once (removed at exit). */
static char fuzz_dir_path[64];
static void fuzz_dir_remove(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", fuzz_dir_path);
    if (system(cmd)) { /* best effort */ }
}
static inline const char *fuzz_dir(void) {
    if (!fuzz_dir_path[0]) {
        snprintf(fuzz_dir_path, sizeof fuzz_dir_path, "/tmp/g4fuzz.XXXXXX");
        if (!mkdtemp(fuzz_dir_path)) { perror("mkdtemp"); abort(); }
        atexit(fuzz_dir_remove);
    }
    return fuzz_dir_path;
}

/* Writes bytes as fuzz_dir()/name, replacing what was there; pad_to > n extends it with zeros
 * (a sparse tail: cheap even when large). */
static inline void fuzz_write_file(const char *name, const void *p, size_t n, size_t pad_to) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", fuzz_dir(), name);
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(p, 1, n, f) != n)) { perror(path); abort(); }
    if (pad_to > n && ftruncate(fileno(f), (off_t)pad_to)) { perror(path); abort(); }
    fclose(f);
}

static inline void fuzz_remove_file(const char *name) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", fuzz_dir(), name);
    unlink(path);
}

/* Removes every file of fuzz_dir() (the folder of the previous input). */
static inline void fuzz_dir_clear(void) {
    DIR *d = opendir(fuzz_dir());
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (e->d_name[0] != '.') fuzz_remove_file(e->d_name);
    if (d) closedir(d);
}

/* A folder packed into one input: sections "=== NAME\n" followed by the file's bytes, up to the
 * next "\n=== " or the end. Names are plain file names ([A-Za-z0-9._-], not starting with a
 * dot); other sections are skipped. Each is written to fuzz_dir() (emptied first), extended to
 * pad(name, bytes, n) bytes when that is larger (0: no padding). */
typedef size_t (*fuzz_pad_fn)(const char *name, const uint8_t *p, size_t n);
static inline void fuzz_write_folder(fuzz_in in, fuzz_pad_fn pad) {
    fuzz_dir_clear();
    if (in.n < 4 || memcmp(in.p, "=== ", 4)) return;
    in.p += 4;
    in.n -= 4;
    while (in.n) {
        fuzz_in name = fuzz_split(&in, "\n");
        fuzz_in body = fuzz_split(&in, "\n=== ");
        char nm[101];
        int ok = name.n >= 1 && name.n <= 100 && name.p[0] != '.';
        for (size_t i = 0; ok && i < name.n; i++) {
            unsigned char ch = name.p[i];
            ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == '-';
        }
        if (!ok) continue;
        memcpy(nm, name.p, name.n);
        nm[name.n] = 0;
        fuzz_write_file(nm, body.p, body.n, pad ? pad(nm, body.p, body.n) : 0);
    }
}

/* A file of the repository (the demo model's tokenizer and template), read once: from $G4_ROOT,
 * else the checkout the harness was built in. */
#ifndef G4_FUZZ_ROOT
#define G4_FUZZ_ROOT "."
#endif
/* A whole file (NUL-terminated), or NULL when it cannot be read. */
static inline char *fuzz_read(const char *path, size_t *len) {
    char *b = NULL;
    return g4_read_file(path, &b, len, NULL) == G4_OK ? b : NULL;
}

static inline char *fuzz_repo_file(const char *rel, size_t *len) {
    const char *root = getenv("G4_ROOT");
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", root && *root ? root : G4_FUZZ_ROOT, rel);
    char *b = fuzz_read(path, len);
    if (!b) { perror(path); abort(); }
    return b;
}

/* A growing byte string (what a stream's deltas add up to); start it as {0}. */
typedef struct { char *p; size_t n, cap; } fuzz_acc;
static inline void fuzz_acc_add(fuzz_acc *a, const char *s, size_t n) {
    if (a->n + n + 1 > a->cap) {
        a->cap = (a->n + n + 1) * 2;
        if (!(a->p = realloc(a->p, a->cap))) abort();
    }
    if (n) memcpy(a->p + a->n, s, n);
    a->n += n;
    a->p[a->n] = 0;
}

#endif
