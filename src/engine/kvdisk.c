/* kvdisk.c — the KV cache folder's index, budget and write-behind queue (kvdisk.h). */
#include "engine/kvdisk.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "engine/kvfile.h"

#define QUEUE_CAP 16

typedef struct {
    char *stem;
    int64_t t;     /* last use, ns */
    uint64_t bytes;
} entry;

struct g4_kvdisk {
    char *dir;
    char prefix[24];       /* "<identity hex>-": this engine's names */
    uint64_t budget;
    int64_t min_tokens;
    entry *e;              /* newest first */
    int n, cap;
    uint64_t bytes;
    struct { int32_t *tok; int64_t n, hint; } q[QUEUE_CAP];
    int qn;
    g4_kvdisk_stats st;
};

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int by_time_desc(const void *a, const void *b) {
    const entry *x = a, *y = b;
    return x->t < y->t ? 1 : x->t > y->t ? -1 : strcmp(x->stem, y->stem);
}

static int starts_with(const char *s, const char *p) { return !strncmp(s, p, strlen(p)); }

static int push(g4_kvdisk *d, const char *stem, int64_t t, uint64_t bytes) {
    if (d->n == d->cap) {
        int cap = d->cap ? 2 * d->cap : 64;
        entry *ne = realloc(d->e, sizeof *ne * (size_t)cap);
        if (!ne) return -1;
        d->e = ne;
        d->cap = cap;
    }
    char *s = strdup(stem);
    if (!s) return -1;
    d->e[d->n++] = (entry){s, t, bytes};
    d->bytes += bytes;
    return 0;
}

/* Lists this identity's entries: a meta file and the bytes of every file of its stem. */
static int scan(g4_kvdisk *d, g4_err *err) {
    DIR *dh = opendir(d->dir);
    if (!dh) return g4_err_set(err, G4_EIO, "--kv-cache-dir %s: %s", d->dir, strerror(errno));
    struct dirent *de;
    char path[4600];
    /* pass 1: interrupted writes go; metas are entries */
    while ((de = readdir(dh))) {
        if (!starts_with(de->d_name, d->prefix)) continue;
        snprintf(path, sizeof path, "%s/%s", d->dir, de->d_name);
        if (strstr(de->d_name, ".tmp-")) { unlink(path); continue; }
        const size_t l = strlen(de->d_name), el = strlen(G4_KVFILE_META_EXT);
        struct stat st;
        if (l > el && !strcmp(de->d_name + l - el, G4_KVFILE_META_EXT) && stat(path, &st) == 0) {
            path[strlen(path) - el] = 0;
            if (push(d, path, (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec, (uint64_t)st.st_size)) break;
        }
    }
    /* pass 2: rank files count to their entry; those of no entry are half-written ones */
    rewinddir(dh);
    while ((de = readdir(dh))) {
        const char *dot = strchr(de->d_name, '.');
        const size_t l = strlen(de->d_name);
        if (!starts_with(de->d_name, d->prefix) || !dot || strncmp(dot, ".r", 2) || l < 3 || strcmp(de->d_name + l - 3, ".kv")) continue;
        char full[4600];
        snprintf(full, sizeof full, "%s/%s", d->dir, de->d_name);
        snprintf(path, sizeof path, "%s/%.*s", d->dir, (int)(dot - de->d_name), de->d_name); /* its stem */
        struct stat st;
        if (stat(full, &st) != 0) continue;
        int found = 0;
        for (int i = 0; i < d->n && !found; i++)
            if (!strcmp(d->e[i].stem, path)) { d->e[i].bytes += (uint64_t)st.st_size; d->bytes += (uint64_t)st.st_size; found = 1; }
        if (!found) unlink(full);
    }
    closedir(dh);
    if (d->n) qsort(d->e, (size_t)d->n, sizeof *d->e, by_time_desc);
    return G4_OK;
}

int g4_kvdisk_open(const char *dir, uint64_t identity, uint64_t budget_bytes, int64_t min_tokens, g4_kvdisk **out, g4_err *err) {
    *out = NULL;
    if (!dir || !*dir) return g4_err_set(err, G4_EINVAL, "--kv-cache-dir: empty path");
    if (strlen(dir) > 3000) return g4_err_set(err, G4_EINVAL, "--kv-cache-dir: path too long");
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) return g4_err_set(err, G4_EIO, "--kv-cache-dir %s: %s", dir, strerror(errno));
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) return g4_err_set(err, G4_EIO, "--kv-cache-dir %s: not a folder", dir);
    if (access(dir, W_OK) != 0) fprintf(stderr, "g4tp: --kv-cache-dir %s is not writable: prefixes are read, none is written\n", dir);
    g4_kvdisk *d = calloc(1, sizeof *d);
    if (!d || !(d->dir = strdup(dir))) {
        free(d);
        return g4_err_set(err, G4_ENOMEM, "out of memory");
    }
    snprintf(d->prefix, sizeof d->prefix, "%016llx-", (unsigned long long)identity);
    d->budget = budget_bytes;
    d->min_tokens = min_tokens > 1 ? min_tokens : 1;
    int rc = scan(d, err);
    if (rc) { g4_kvdisk_free(d); return rc; }
    *out = d;
    return G4_OK;
}

void g4_kvdisk_free(g4_kvdisk *d) {
    if (!d) return;
    for (int i = 0; i < d->n; i++) free(d->e[i].stem);
    for (int i = 0; i < d->qn; i++) free(d->q[i].tok);
    free(d->e);
    free(d->dir);
    free(d);
}

void g4_kvdisk_stem(const g4_kvdisk *d, const int32_t *tok, int64_t n, char *out, size_t cap) {
    snprintf(out, cap, "%s/%s%016llx-%lld", d->dir, d->prefix, (unsigned long long)XXH64(tok, sizeof(int32_t) * (size_t)n, 0x6b76), (long long)n);
}

const char *g4_kvdisk_entry(const g4_kvdisk *d, int i) { return i >= 0 && i < d->n ? d->e[i].stem : NULL; }

static int find(const g4_kvdisk *d, const char *stem) {
    for (int i = 0; i < d->n; i++)
        if (!strcmp(d->e[i].stem, stem)) return i;
    return -1;
}

int g4_kvdisk_touch(g4_kvdisk *d, const char *stem) {
    const int i = find(d, stem);
    if (i < 0) return 0;
    char meta[4200];
    snprintf(meta, sizeof meta, "%s" G4_KVFILE_META_EXT, stem);
    utimensat(AT_FDCWD, meta, NULL, 0);
    entry x = d->e[i];
    x.t = now_ns();
    memmove(d->e + 1, d->e, sizeof *d->e * (size_t)i);
    d->e[0] = x;
    return 1;
}

void g4_kvdisk_added(g4_kvdisk *d, const char *stem, uint64_t bytes) {
    if (find(d, stem) >= 0) { g4_kvdisk_touch(d, stem); return; }
    if (push(d, stem, now_ns(), bytes)) return;
    entry x = d->e[d->n - 1];
    memmove(d->e + 1, d->e, sizeof *d->e * (size_t)(d->n - 1));
    d->e[0] = x;
}

void g4_kvdisk_forget(g4_kvdisk *d, const char *stem) {
    const int i = find(d, stem);
    if (i < 0) return;
    d->bytes -= d->e[i].bytes;
    free(d->e[i].stem);
    memmove(d->e + i, d->e + i + 1, sizeof *d->e * (size_t)(d->n - i - 1));
    d->n--;
}

const char *g4_kvdisk_victim(const g4_kvdisk *d, uint64_t need) {
    if (d->n == 0 || d->bytes + need <= d->budget) return NULL;
    return d->e[d->n - 1].stem;
}

void g4_kvdisk_queue(g4_kvdisk *d, const int32_t *tok, int64_t n, int64_t hint) {
    if (n < d->min_tokens) return;
    int32_t *c = malloc(sizeof(int32_t) * (size_t)n);
    if (!c) return;
    memcpy(c, tok, sizeof(int32_t) * (size_t)n);
    if (d->qn == QUEUE_CAP) {
        free(d->q[0].tok);
        memmove(d->q, d->q + 1, sizeof d->q[0] * (QUEUE_CAP - 1));
        d->qn--;
    }
    d->q[d->qn].tok = c;
    d->q[d->qn].hint = hint;
    d->q[d->qn++].n = n;
}

int g4_kvdisk_pending(const g4_kvdisk *d) { return d->qn; }

int32_t *g4_kvdisk_pop(g4_kvdisk *d, int64_t *n, int64_t *hint) {
    if (!d->qn) return NULL;
    int32_t *t = d->q[0].tok;
    *n = d->q[0].n;
    *hint = d->q[0].hint;
    memmove(d->q, d->q + 1, sizeof d->q[0] * (size_t)(d->qn - 1));
    d->qn--;
    return t;
}

void g4_kvdisk_count(g4_kvdisk *d, int saved, int save_failed, int64_t loaded_tokens, int refused, int evicted) {
    d->st.saved += (uint64_t)saved;
    d->st.save_failed += (uint64_t)save_failed;
    d->st.loaded_tokens += (uint64_t)loaded_tokens;
    d->st.refused += (uint64_t)refused;
    d->st.evicted += (uint64_t)evicted;
}

void g4_kvdisk_get_stats(const g4_kvdisk *d, g4_kvdisk_stats *st) {
    *st = d->st;
    st->entries = d->n;
    st->bytes = d->bytes;
    st->budget = d->budget;
}

void g4_kvdisk_unlink(const char *stem) {
    char path[4600], dir[4200];
    snprintf(path, sizeof path, "%s" G4_KVFILE_META_EXT, stem);
    unlink(path);
    snprintf(dir, sizeof dir, "%s", stem);
    char *slash = strrchr(dir, '/');
    const char *base = slash ? slash + 1 : dir;
    if (slash) *slash = 0;
    DIR *dh = opendir(slash ? dir : ".");
    if (!dh) return;
    const size_t bl = strlen(base);
    for (struct dirent *de; (de = readdir(dh));) {
        if (strncmp(de->d_name, base, bl) || strncmp(de->d_name + bl, ".r", 2)) continue;
        snprintf(path, sizeof path, "%s/%s", slash ? dir : ".", de->d_name);
        unlink(path);
    }
    closedir(dh);
}
