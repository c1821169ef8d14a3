/* kvfile.c — the KV cache's meta and rank files (kvfile.h). Little-endian, fixed headers. */
#include "engine/kvfile.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "base/fault.h"

#define RANK_MAGIC "G4KVR001"
#define META_MAGIC "G4KVM001"
#define FORMAT_VERSION 1
#define HDR_BYTES 96

/* ---- small helpers ------------------------------------------------------------------------- */

static void put32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static void put64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }
static uint32_t get32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t get64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

static int write_all(int fd, const void *buf, size_t n) {
    const uint8_t *p = buf;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int read_at(int fd, void *buf, size_t n, uint64_t off) {
    uint8_t *p = buf;
    while (n) {
        ssize_t r = pread(fd, p, n, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        p += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return 0;
}

/* The folder of a path, fsynced so that a rename in it is durable (best effort). */
static void sync_dir_of(const char *path) {
    char d[4096];
    snprintf(d, sizeof d, "%s", path);
    char *slash = strrchr(d, '/');
    if (slash) *slash = 0;
    else snprintf(d, sizeof d, ".");
    int fd = open(d, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) { fsync(fd); close(fd); }
}

/* Opens a temporary file beside path: <path>.tmp-<pid>-<thread>. */
static int open_temp(const char *path, char *tmp, size_t cap) {
    snprintf(tmp, cap, "%s.tmp-%d-%lx", path, (int)getpid(), (unsigned long)pthread_self());
    return open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
}

/* fsync, close and rename into place; on any failure the temporary file is removed. */
static int commit_temp(int fd, const char *tmp, const char *path, int ok, g4_err *err) {
    if (ok && fsync(fd) != 0) ok = 0;
    const int saved = errno;
    if (close(fd) != 0) ok = 0;
    if (ok && rename(tmp, path) != 0) ok = 0;
    if (!ok) {
        unlink(tmp);
        return g4_err_set(err, G4_EIO, "writing %s failed: %s", path, strerror(saved ? saved : errno));
    }
    sync_dir_of(path);
    return G4_OK;
}

/* ---- the model's identity -------------------------------------------------------------------- */

static int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int ends_with(const char *s, const char *t) {
    const size_t a = strlen(s), b = strlen(t);
    return a >= b && !strcmp(s + a - b, t);
}

static int hashed_file(const char *name) {
    return !strcmp(name, "config.json") || !strcmp(name, "processor_config.json") || !strcmp(name, "manifest.json") ||
           ends_with(name, ".safetensors") || ends_with(name, ".g4w");
}

int g4_kvfile_model_hash(const char *dir, uint64_t *out, g4_err *err) {
    DIR *d = opendir(dir);
    if (!d) return g4_err_set(err, G4_EIO, "cannot list %s: %s", dir, strerror(errno));
    char *names[4096];
    int n = 0;
    for (struct dirent *de; (de = readdir(d)) && n < 4096;)
        if (hashed_file(de->d_name) && (names[n] = strdup(de->d_name))) n++;
    closedir(d);
    if (n) qsort(names, (size_t)n, sizeof *names, cmp_names);
    XXH64_state_t *h = XXH64_createState();
    uint8_t *buf = malloc(1 << 20);
    int rc = h && buf ? G4_OK : g4_err_set(err, G4_ENOMEM, "out of memory");
    if (rc == G4_OK) XXH64_reset(h, G4_KV_NUMERIC_VERSION);
    for (int i = 0; i < n && rc == G4_OK; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) != 0) {
            rc = g4_err_set(err, G4_EIO, "cannot read %s: %s", path, strerror(errno));
            if (fd >= 0) close(fd);
            break;
        }
        const uint64_t size = (uint64_t)st.st_size;
        XXH64_update(h, names[i], strlen(names[i]) + 1);
        XXH64_update(h, &size, sizeof size);
        /* the head (headers, tensor tables) and the tail */
        const uint64_t head = size < (1u << 20) ? size : (1u << 20), tail = size - head < 65536 ? size - head : 65536;
        if (read_at(fd, buf, (size_t)head, 0)) rc = g4_err_set(err, G4_EIO, "cannot read %s", path);
        if (rc == G4_OK) XXH64_update(h, buf, (size_t)head);
        if (rc == G4_OK && tail) {
            if (read_at(fd, buf, (size_t)tail, size - tail)) rc = g4_err_set(err, G4_EIO, "cannot read %s", path);
            else XXH64_update(h, buf, (size_t)tail);
        }
        close(fd);
    }
    if (rc == G4_OK) *out = XXH64_digest(h);
    for (int i = 0; i < n; i++) free(names[i]);
    free(buf);
    if (h) XXH64_freeState(h);
    return rc;
}

/* ---- rank files -------------------------------------------------------------------------------- */

void g4_kvfile_rank_path(char *out, size_t cap, const char *stem, int rank, int tp) { snprintf(out, cap, "%s.r%dof%d.kv", stem, rank, tp); }

static uint64_t geom_hash(const g4_kv_geom *g) {
    XXH64_state_t *h = XXH64_createState();
    if (!h) return 0;
    XXH64_reset(h, 0x4b56);
    const int32_t head[3] = {g->dtype, g->bs, g->n_layers};
    XXH64_update(h, head, sizeof head);
    for (int l = 0; l < g->n_layers; l++) {
        const int64_t v[2] = {g->kind[l], g->row[l]};
        XXH64_update(h, v, sizeof v);
    }
    const uint64_t r = XXH64_digest(h);
    XXH64_freeState(h);
    return r;
}

/* Data bytes of chunk j (its positions of every stored layer, K then V) */
static uint64_t chunk_bytes(const g4_kv_geom *g, int64_t total, int64_t slide_from, int64_t j) {
    const int64_t n = total - j * g->bs < g->bs ? total - j * g->bs : g->bs;
    uint64_t b = 0;
    for (int l = 0; l < g->n_layers; l++)
        if (g->kind[l] == G4_KV_FULL || j * g->bs >= slide_from) b += 2 * (uint64_t)n * (uint64_t)g->row[l];
    return b;
}

uint64_t g4_kvfile_rank_bytes(const g4_kv_geom *g, int64_t total, int64_t slide_from) {
    uint64_t b = HDR_BYTES;
    for (int64_t j = 0; j * g->bs < total; j++) b += chunk_bytes(g, total, slide_from, j) + 8;
    return b;
}

static uint64_t chunk_seed(uint64_t identity, int64_t j) { return identity ^ (0x9e3779b97f4a7c15ull * (uint64_t)(j + 1)); }

static void rank_header(uint8_t *h, const g4_kv_geom *g, const g4_kvfile_span *sp) {
    memset(h, 0, HDR_BYTES);
    memcpy(h, RANK_MAGIC, 8);
    put32(h + 8, FORMAT_VERSION);
    put32(h + 12, G4_KV_NUMERIC_VERSION);
    put32(h + 16, (uint32_t)sp->rank);
    put32(h + 20, (uint32_t)sp->tp);
    put64(h + 24, sp->identity);
    put64(h + 32, geom_hash(g));
    put64(h + 40, (uint64_t)sp->total);
    put64(h + 48, (uint64_t)sp->slide_from);
    put32(h + 56, (uint32_t)g->bs);
    put32(h + 60, (uint32_t)g->n_layers);
    put64(h + HDR_BYTES - 8, XXH64(h, HDR_BYTES - 8, 0));
}

static uint64_t max_chunk(const g4_kv_geom *g) {
    uint64_t b = 0;
    for (int l = 0; l < g->n_layers; l++) b += 2 * (uint64_t)g->bs * (uint64_t)g->row[l];
    return b;
}

int g4_kvfile_write_rank(const g4_kvstore *s, const char *stem, const g4_kvfile_span *sp, g4_err *err) {
    const g4_kv_geom *g = &s->g;
    char path[4200], tmp[4300];
    g4_kvfile_rank_path(path, sizeof path, stem, sp->rank, sp->tp);
    if (sp->seq < 0 || sp->seq >= s->max_seqs || sp->total < 1 || sp->total > s->cap[sp->seq] || sp->slide_from % g->bs)
        return g4_err_set(err, G4_EINVAL, "KV save: bad span (sequence %d, %lld positions)", sp->seq, (long long)sp->total);
    uint8_t *buf = malloc(max_chunk(g) + HDR_BYTES + 8);
    if (!buf) return g4_err_set(err, G4_ENOMEM, "out of memory");
    int fd = open_temp(path, tmp, sizeof tmp);
    if (fd < 0) {
        free(buf);
        return g4_err_set(err, G4_EIO, "cannot write %s: %s", tmp, strerror(errno));
    }
    rank_header(buf, g, sp);
    int ok = write_all(fd, buf, HDR_BYTES) == 0, missing = 0;
    for (int64_t j = 0; ok && j * g->bs < sp->total; j++) {
        const int64_t n = sp->total - j * g->bs < g->bs ? sp->total - j * g->bs : g->bs;
        uint8_t *p = buf;
        for (int l = 0; l < g->n_layers; l++) {
            if (g->kind[l] != G4_KV_FULL && j * g->bs < sp->slide_from) continue;
            const int32_t blk = g4_kv_block(s, sp->seq, g->kind[l], j);
            if (blk < 0) { missing = 1; break; }
            const size_t rb = (size_t)n * (size_t)g->row[l];
            memcpy(p, g4_kv_rows(s, l, blk, 0), rb);
            memcpy(p + rb, g4_kv_rows(s, l, blk, g->bs), rb);
            p += 2 * rb;
        }
        if (missing) break;
        put64(p, XXH64(buf, (size_t)(p - buf), chunk_seed(sp->identity, j)));
        ok = !g4_fault_hit("kvfile.write") && write_all(fd, buf, (size_t)(p - buf) + 8) == 0;
    }
    free(buf);
    if (missing) {
        close(fd);
        unlink(tmp);
        return g4_err_set(err, G4_EINVAL, "KV save: sequence %d has no block for some of its %lld positions", sp->seq, (long long)sp->total);
    }
    if (!ok && !errno) errno = ENOSPC;
    return commit_temp(fd, tmp, path, ok, err);
}

int g4_kvfile_read_rank(g4_kvstore *s, const char *stem, const g4_kvfile_span *sp, g4_err *err) {
    const g4_kv_geom *g = &s->g;
    char path[4200];
    g4_kvfile_rank_path(path, sizeof path, stem, sp->rank, sp->tp);
    if (sp->seq < 0 || sp->seq >= s->max_seqs || sp->p0 < 0 || sp->p1 > sp->total || sp->p0 >= sp->p1 || sp->total > s->cap[sp->seq])
        return g4_err_set(err, G4_EINVAL, "KV load: bad span (sequence %d, positions %lld..%lld)", sp->seq, (long long)sp->p0, (long long)sp->p1);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return g4_err_set(err, G4_EIO, "%s: %s", path, strerror(errno));
    struct stat st;
    uint8_t hdr[HDR_BYTES], want[HDR_BYTES];
    rank_header(want, g, sp);
    int rc = G4_OK;
    if (fstat(fd, &st) != 0 || read_at(fd, hdr, HDR_BYTES, 0)) rc = g4_err_set(err, G4_EFORMAT, "%s: shorter than its header", path);
    else if (memcmp(hdr, RANK_MAGIC, 8) || get64(hdr + HDR_BYTES - 8) != XXH64(hdr, HDR_BYTES - 8, 0))
        rc = g4_err_set(err, G4_EFORMAT, "%s: not a g4tp KV rank file, or its header is damaged", path);
    else if (get32(hdr + 8) != FORMAT_VERSION || get32(hdr + 12) != G4_KV_NUMERIC_VERSION)
        rc = g4_err_set(err, G4_EUNSUPPORTED, "%s: written by another version (format %u, numeric %u; this engine: %d, %d)", path, get32(hdr + 8),
                        get32(hdr + 12), FORMAT_VERSION, G4_KV_NUMERIC_VERSION);
    else if (memcmp(hdr, want, HDR_BYTES))
        rc = g4_err_set(err, G4_EUNSUPPORTED, "%s: for another model, rank, TP degree, KV dtype or prefix (its header differs)", path);
    else if ((uint64_t)st.st_size != g4_kvfile_rank_bytes(g, sp->total, sp->slide_from))
        rc = g4_err_set(err, G4_EFORMAT, "%s: %lld bytes, %llu expected (truncated?)", path, (long long)st.st_size,
                        (unsigned long long)g4_kvfile_rank_bytes(g, sp->total, sp->slide_from));
    uint8_t *buf = rc ? NULL : malloc(max_chunk(g) + 8);
    if (!rc && !buf) rc = g4_err_set(err, G4_ENOMEM, "out of memory");
    uint64_t off = HDR_BYTES;
    for (int64_t j = 0; rc == G4_OK && j * g->bs < sp->p1; j++) {
        const uint64_t cb = chunk_bytes(g, sp->total, sp->slide_from, j);
        if ((j + 1) * g->bs <= sp->p0) { off += cb + 8; continue; }
        if (read_at(fd, buf, (size_t)cb + 8, off) || get64(buf + cb) != XXH64(buf, (size_t)cb, chunk_seed(sp->identity, j))) {
            rc = g4_err_set(err, G4_ECHECKSUM, "%s: block %lld does not match its checksum", path, (long long)j);
            break;
        }
        off += cb + 8;
        const int64_t n = sp->total - j * g->bs < g->bs ? sp->total - j * g->bs : g->bs;
        const int64_t i0 = sp->p0 > j * g->bs ? sp->p0 - j * g->bs : 0, i1 = sp->p1 < j * g->bs + n ? sp->p1 - j * g->bs : n;
        const uint8_t *p = buf;
        for (int l = 0; l < g->n_layers && rc == G4_OK; l++) {
            if (g->kind[l] != G4_KV_FULL && j * g->bs < sp->slide_from) continue;
            const size_t row = (size_t)g->row[l], rb = (size_t)n * row;
            const int32_t blk = g4_kv_block(s, sp->seq, g->kind[l], j);
            if (blk < 0) rc = g4_err_set(err, G4_EINVAL, "KV load: sequence %d has no block for position block %lld", sp->seq, (long long)j);
            else {
                memcpy(g4_kv_rows(s, l, blk, i0), p + (size_t)i0 * row, (size_t)(i1 - i0) * row);
                memcpy(g4_kv_rows(s, l, blk, g->bs + i0), p + rb + (size_t)i0 * row, (size_t)(i1 - i0) * row);
            }
            p += 2 * rb;
        }
    }
    free(buf);
    close(fd);
    return rc;
}

/* ---- meta files -------------------------------------------------------------------------------- */

#define META_FIXED 48 /* magic, version, tp, identity, n, slide_from, ident_len, pad */

int g4_kvfile_write_meta(const char *stem, uint64_t identity, const char *ident, int tp, int64_t slide_from, const int32_t *tok,
                         int64_t n, g4_err *err) {
    char path[4200], tmp[4300];
    snprintf(path, sizeof path, "%s" G4_KVFILE_META_EXT, stem);
    const size_t il = strlen(ident), bytes = META_FIXED + il + sizeof(int32_t) * (size_t)n + 8;
    uint8_t *b = calloc(1, bytes);
    if (!b) return g4_err_set(err, G4_ENOMEM, "out of memory");
    memcpy(b, META_MAGIC, 8);
    put32(b + 8, FORMAT_VERSION);
    put32(b + 12, (uint32_t)tp);
    put64(b + 16, identity);
    put64(b + 24, (uint64_t)n);
    put64(b + 32, (uint64_t)slide_from);
    put32(b + 40, (uint32_t)il);
    memcpy(b + META_FIXED, ident, il);
    memcpy(b + META_FIXED + il, tok, sizeof(int32_t) * (size_t)n);
    put64(b + bytes - 8, XXH64(b, bytes - 8, 0));
    int fd = open_temp(path, tmp, sizeof tmp);
    if (fd < 0) {
        free(b);
        return g4_err_set(err, G4_EIO, "cannot write %s: %s", tmp, strerror(errno));
    }
    const int ok = !g4_fault_hit("kvfile.meta") && write_all(fd, b, bytes) == 0;
    free(b);
    if (!ok && !errno) errno = ENOSPC;
    return commit_temp(fd, tmp, path, ok, err);
}

int g4_kvfile_read_meta(const char *path, uint64_t identity, int tp, int32_t **tok, int64_t *n, int64_t *slide_from, g4_err *err) {
    *tok = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return g4_err_set(err, G4_EIO, "%s: %s", path, strerror(errno));
    struct stat st;
    uint8_t *b = NULL;
    int rc = G4_OK;
    if (fstat(fd, &st) != 0 || st.st_size < META_FIXED + 8 || st.st_size > (1ll << 30)) rc = g4_err_set(err, G4_EFORMAT, "%s: not a g4tp KV meta file (size)", path);
    else if (!(b = malloc((size_t)st.st_size))) rc = g4_err_set(err, G4_ENOMEM, "out of memory");
    else if (read_at(fd, b, (size_t)st.st_size, 0)) rc = g4_err_set(err, G4_EIO, "%s: read failed", path);
    close(fd);
    const size_t size = rc ? 0 : (size_t)st.st_size;
    if (rc == G4_OK && (memcmp(b, META_MAGIC, 8) || get64(b + size - 8) != XXH64(b, size - 8, 0)))
        rc = g4_err_set(err, G4_ECHECKSUM, "%s: not a g4tp KV meta file, or damaged (checksum)", path);
    const uint64_t cnt = rc ? 0 : get64(b + 24);
    const uint32_t il = rc ? 0 : get32(b + 40);
    if (rc == G4_OK && (get32(b + 8) != FORMAT_VERSION || cnt < 1 || il > 4096 || size != META_FIXED + il + 4 * cnt + 8))
        rc = g4_err_set(err, G4_EFORMAT, "%s: another format version, or inconsistent sizes", path);
    if (rc == G4_OK && (get64(b + 16) != identity || (int)get32(b + 12) != tp))
        rc = g4_err_set(err, G4_EUNSUPPORTED, "%s: computed by another model or configuration (%.*s, TP %u)", path, (int)il, (const char *)b + META_FIXED,
                        get32(b + 12));
    if (rc == G4_OK && !(*tok = malloc(4 * cnt))) rc = g4_err_set(err, G4_ENOMEM, "out of memory");
    if (rc == G4_OK) {
        memcpy(*tok, b + META_FIXED + il, 4 * cnt);
        *n = (int64_t)cnt;
        *slide_from = (int64_t)get64(b + 32);
    }
    free(b);
    return rc;
}
