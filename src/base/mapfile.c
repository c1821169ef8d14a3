/* mapfile.c — mmap of weight files and whole-file helpers (POSIX), and the guard of the maps
 * (SIGBUS from truncated files, files changed in place). No model knowledge. */
#include "base/mapfile.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define HUGE_ALIGN ((size_t)2 << 20)

/* Maps the file at a 2 MiB-aligned address and asks for huge pages: where the page cache holds
 * the file in 2 MiB folios (ext4 and others since Linux 6.x) the kernel then maps them with one
 * page-table entry each. With 4 KiB mappings a decode step, which streams every weight once,
 * takes a page walk per 4 KiB; in a VM whose nested page tables miss the caches that cost half
 * the bandwidth (decode of the 31B-width model: 17 -> 30-37 GB/s, bench/README.md). Falls back
 * to a plain map. */
static void *map_huge_aligned(int fd, size_t size) {
    size_t span = size + HUGE_ALIGN;
    uint8_t *r = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r == MAP_FAILED) return mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    uint8_t *a = (uint8_t *)(((uintptr_t)r + HUGE_ALIGN - 1) & ~(uintptr_t)(HUGE_ALIGN - 1));
    void *p = mmap(a, size, PROT_READ, MAP_SHARED | MAP_FIXED, fd, 0);
    if (p == MAP_FAILED) {
        munmap(r, span);
        return mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    }
    /* give back the reservation around the file map */
    if (a > r) munmap(r, (size_t)(a - r));
    size_t used = (size_t)(a - r) + size, tail_start = (used + 4095) & ~(size_t)4095;
    if (tail_start < span) munmap(r + tail_start, span - tail_start);
#ifdef MADV_HUGEPAGE
    madvise(p, size, MADV_HUGEPAGE); /* advice only: failure changes nothing but speed */
#endif
    return p;
}

/* kB of `field` ("FilePmdMapped:") in /proc/self/smaps for the mapping that starts at addr, or -1. */
static long long smaps_kb(const void *addr, const char *field) {
    FILE *f = fopen("/proc/self/smaps", "re");
    if (!f) return -1;
    char line[512], head[32];
    snprintf(head, sizeof head, "%lx-", (unsigned long)(uintptr_t)addr);
    long long kb = -1;
    int in = 0;
    const size_t fl = strlen(field);
    while (fgets(line, sizeof line, f)) {
        const size_t tok = strcspn(line, " "); /* a mapping's line: "lo-hi perms ..."; a field's: "Name: n kB" */
        if (memchr(line, '-', tok) && !memchr(line, ':', tok)) {
            if (in) break; /* the next mapping */
            in = !strncmp(line, head, strlen(head));
        } else if (in && !strncmp(line, field, fl)) {
            kb = atoll(line + fl);
            break;
        }
    }
    fclose(f);
    return kb;
}

/* A file written shortly before (g4tp synth, shard, a download) sits in the page cache in small
 * folios, which the huge map above can only map 4 KiB at a time: a decode of such a map ran at a
 * quarter to a half of the speed of the same weights in a copy (2048-wide 12-layer model, bf16:
 * 2-11 against 18-19 tok/s). Dropping those pages and faulting the file in again through the
 * huge map brings it back in 2 MiB folios, mapped whole (same model: 16.6 tok/s; one read of
 * the file, 0.9 s there). So: for each 2 MiB of the file whose first page is cached, touch it
 * (no I/O) and ask smaps how much became PMD-mapped; under 90 % of what was touched, unmap,
 * write back, drop the file's unmapped cached pages (pages other processes map stay) and let the
 * first reads fault it in again. Files under 64 MiB, or caches already in 2 MiB folios, are left
 * alone, and so is everything after g4_mapfile_set_refolio(0) (--load copy reads each file once:
 * from the cache as it is). G4_MAP_REFOLIO=0 turns it off, =1 on, =force does it for any cached
 * file (tests). */
static atomic_int refolio_on = 1;
void g4_mapfile_set_refolio(int on) { atomic_store(&refolio_on, on != 0); }

static void refolio_small_cache(const uint8_t *p, size_t size, int fd) {
    const char *env = getenv("G4_MAP_REFOLIO");
    const int force = env && !strcmp(env, "force");
    if ((env ? !strcmp(env, "0") : !atomic_load(&refolio_on)) || (!force && size < ((size_t)64 << 20)) ||
        ((uintptr_t)p & (HUGE_ALIGN - 1)))
        return;
    size_t touched = 0;
    unsigned char vec;
    volatile uint8_t sink = 0;
    for (size_t o = 0; o + HUGE_ALIGN <= size; o += HUGE_ALIGN)
        if (mincore((void *)(p + o), 4096, &vec) == 0 && (vec & 1)) {
            sink ^= p[o];
            touched += HUGE_ALIGN;
        }
    (void)sink;
    if (!touched) return;
    const long long pmd_kb = force ? 0 : smaps_kb(p, "FilePmdMapped:");
    /* either way the touches' page-table entries go (a shared file map: the pages stay cached), so
     * the map's resident size grows only as the weights are read, as before this check */
    madvise((void *)p, size, MADV_DONTNEED);
    if (pmd_kb < 0 || (double)pmd_kb * 1024.0 >= 0.9 * (double)touched) return;
    (void)fdatasync(fd); /* dirty pages would stay small */
    (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
}

/* ---- the guard ------------------------------------------------------------------------------ */

/* The signal handler reads this table: a slot is filled, then published by `used`; it is
 * withdrawn before its map goes. Strings are built without stdio (async-signal-safe). */
enum { GUARD_SLOTS = 256, GUARD_WHY = 1200 };
enum { G_INTACT, G_WRITING, G_TRUNCATED, G_CHANGED };
typedef struct {
    atomic_int used;
    atomic_int state;
    uintptr_t lo, hi;         /* the map's pages */
    const char *path;
    int fd;                   /* the mapped file itself: what fstat sees is what the map shows */
    off_t size;
    struct timespec mtime;
    char why[GUARD_WHY];
} guard;

static guard guards[GUARD_SLOTS];
static pthread_mutex_t guard_mu = PTHREAD_MUTEX_INITIALIZER;
static struct sigaction old_bus;
static uintptr_t page_size;

static size_t put(char *d, size_t at, const char *s) {
    while (*s && at + 1 < GUARD_WHY) d[at++] = *s++;
    d[at] = 0;
    return at;
}

static void on_sigbus(int sig, siginfo_t *si, void *uc) {
    const int saved = errno;
    const uintptr_t a = (uintptr_t)si->si_addr;
    for (int i = 0; i < GUARD_SLOTS; i++) {
        guard *g = &guards[i];
        if (!atomic_load(&g->used) || a < g->lo || a >= g->hi) continue;
        /* zeros from the faulting page to the map's end: the file ends before it (or the page
         * is unreadable); the read resumes, and the damage is reported where the data is used */
        const uintptr_t p = a & ~(page_size - 1);
        if (mmap((void *)p, g->hi - p, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED) break;
        int intact = G_INTACT;
        if (atomic_compare_exchange_strong(&g->state, &intact, G_WRITING)) {
            size_t n = put(g->why, 0, "the model file ");
            n = put(g->why, n, g->path);
            n = put(g->why, n, " was truncated while in use (SIGBUS reading it): restart to load it again (--load copy reads the "
                               "files once, at startup)");
            atomic_store(&g->state, G_TRUNCATED);
            if (write(2, "g4tp: ", 6) < 0 || write(2, g->why, n) < 0 || write(2, "\n", 1) < 0) { /* nothing to do */ }
        }
        errno = saved;
        return;
    }
    /* not a map of ours: what would have happened without this handler */
    if (old_bus.sa_flags & SA_SIGINFO) {
        old_bus.sa_sigaction(sig, si, uc);
    } else if (old_bus.sa_handler != SIG_DFL && old_bus.sa_handler != SIG_IGN) {
        old_bus.sa_handler(sig);
    } else {
        struct sigaction dfl;
        memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        sigaction(SIGBUS, &dfl, NULL); /* the faulting access runs again and ends the process */
    }
    errno = saved;
}

/* Under guard_mu, at every new map: a handler installed after ours (a test harness, the
 * application) would take SIGBUS from us; ours goes back on top and passes it the others. */
static void guard_install(void) {
    if (!page_size) page_size = (uintptr_t)sysconf(_SC_PAGESIZE);
    struct sigaction cur, sa;
    if (sigaction(SIGBUS, NULL, &cur) == 0 && (cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == on_sigbus) return;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER; /* SA_NODEFER: a fault in a chained handler still reaches us */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, &old_bus);
}

/* Keeps fd (returns the slot) or, with no free slot, returns -1 (the map then goes unguarded). */
static int guard_add(const g4_mapfile *m, int fd, const struct stat *st) {
    pthread_mutex_lock(&guard_mu);
    guard_install();
    int k = -1;
    for (int i = 0; i < GUARD_SLOTS && k < 0; i++)
        if (!atomic_load(&guards[i].used)) k = i;
    if (k >= 0) {
        guard *g = &guards[k];
        g->lo = (uintptr_t)m->data;
        g->hi = (g->lo + m->size + page_size - 1) & ~(page_size - 1);
        g->path = m->path;
        g->fd = fd;
        g->size = st->st_size;
        g->mtime = st->st_mtim;
        g->why[0] = 0;
        atomic_store(&g->state, G_INTACT);
        atomic_store(&g->used, 1);
    }
    pthread_mutex_unlock(&guard_mu);
    return k;
}

static void guard_remove(int k) {
    if (k < 0) return;
    pthread_mutex_lock(&guard_mu);
    atomic_store(&guards[k].used, 0);
    close(guards[k].fd);
    pthread_mutex_unlock(&guard_mu);
}

const char *g4_mapfile_check(void) {
    const char *first = NULL;
    pthread_mutex_lock(&guard_mu);
    for (int i = 0; i < GUARD_SLOTS; i++) {
        guard *g = &guards[i];
        if (!atomic_load(&g->used)) continue;
        struct stat st;
        int intact = G_INTACT;
        if (atomic_load(&g->state) == G_INTACT && fstat(g->fd, &st) == 0 &&
            (st.st_size != g->size || st.st_mtim.tv_sec != g->mtime.tv_sec || st.st_mtim.tv_nsec != g->mtime.tv_nsec) &&
            atomic_compare_exchange_strong(&g->state, &intact, G_WRITING)) {
            char how[96];
            if (st.st_size == g->size) snprintf(how, sizeof how, "modified after it was loaded");
            else snprintf(how, sizeof how, "%lld bytes when loaded, %lld now", (long long)g->size, (long long)st.st_size);
            snprintf(g->why, sizeof g->why, "the model file %s was %s while in use (%s): restart to load it again "
                     "(--load copy reads the files once, at startup)", g->path, st.st_size < g->size ? "truncated" : "changed in place", how);
            atomic_store(&g->state, G_CHANGED);
            fprintf(stderr, "g4tp: %s\n", g->why);
        }
        if (!first && atomic_load(&g->state) >= G_TRUNCATED) first = g->why;
    }
    pthread_mutex_unlock(&guard_mu);
    return first;
}

size_t g4_mapfile_release(const void *p, size_t n) {
    if (!p || !n || !page_size) return 0;
    uintptr_t lo = ((uintptr_t)p + page_size - 1) & ~(page_size - 1), hi = ((uintptr_t)p + n) & ~(page_size - 1);
    size_t done = 0;
    pthread_mutex_lock(&guard_mu); /* the map stays open meanwhile: close takes the lock first */
    for (int i = 0; i < GUARD_SLOTS && lo < hi; i++) {
        const guard *g = &guards[i];
        if (!atomic_load(&g->used) || g->hi <= lo || g->lo >= hi) continue;
        const uintptr_t a = lo > g->lo ? lo : g->lo, b = hi < g->hi ? hi : g->hi;
        if (a < b && madvise((void *)a, b - a, MADV_DONTNEED) == 0) done += b - a;
    }
    pthread_mutex_unlock(&guard_mu);
    return done;
}

/* ---- maps ----------------------------------------------------------------------------------- */

int g4_mapfile_open(g4_mapfile *m, const char *path, g4_err *err) {
    memset(m, 0, sizeof *m);
    m->guard = -1;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return g4_err_set(err, G4_EIO, "cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return g4_err_set(err, G4_EIO, "cannot stat %s: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return g4_err_set(err, G4_EIO, "%s is not a regular file", path);
    }
    m->size = (size_t)st.st_size;
    if (m->size > 0) {
        void *p = map_huge_aligned(fd, m->size);
        if (p == MAP_FAILED) {
            int e = errno;
            close(fd);
            return g4_err_set(err, G4_EIO, "cannot map %s: %s", path, strerror(e));
        }
        m->data = p;
    }
    m->path = strdup(path);
    m->guard = m->data && m->path ? guard_add(m, fd, &st) : -1;
    /* after the guard: a file truncated meanwhile reads zeros in the check's touches, no SIGBUS */
    if (m->data) refolio_small_cache(m->data, m->size, fd);
    if (m->guard >= 0) return G4_OK;
    close(fd);
    return G4_OK;
}

void g4_mapfile_close(g4_mapfile *m) {
    guard_remove(m->guard);
    if (m->data) munmap((void *)m->data, m->size);
    free(m->path);
    memset(m, 0, sizeof *m);
}

int g4_read_file(const char *path, char **data, size_t *len, g4_err *err) {
    *data = NULL;
    if (len) *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return g4_err_set(err, G4_EIO, "cannot open %s: %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    if (!buf) { fclose(f); return g4_err_set(err, G4_ENOMEM, "out of memory reading %s", path); }
    for (;;) {
        if (n + 1 >= cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) { free(buf); fclose(f); return g4_err_set(err, G4_ENOMEM, "out of memory reading %s", path); }
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0) break;
    }
    int bad = ferror(f), e = errno;
    fclose(f);
    if (bad) { free(buf); return g4_err_set(err, G4_EIO, "cannot read %s: %s", path, strerror(e)); }
    buf[n] = 0;
    *data = buf;
    if (len) *len = n;
    return G4_OK;
}

int g4_write_file_atomic(const char *path, const void *data, size_t len, g4_err *err) {
    size_t pl = strlen(path);
    char *tmp = malloc(pl + 32);
    if (!tmp) return g4_err_set(err, G4_ENOMEM, "out of memory");
    snprintf(tmp, pl + 32, "%s.tmp.%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        g4_err_set(err, G4_EIO, "cannot create %s: %s", tmp, strerror(errno));
        free(tmp);
        return G4_EIO;
    }
    const char *p = data;
    size_t left = len;
    while (left > 0) {
        ssize_t w = write(fd, p, left);
        if (w < 0) {
            if (errno == EINTR) continue;
            g4_err_set(err, G4_EIO, "cannot write %s: %s", tmp, strerror(errno));
            close(fd); unlink(tmp); free(tmp);
            return G4_EIO;
        }
        p += w;
        left -= (size_t)w;
    }
    if (fsync(fd) != 0 || close(fd) != 0) {
        g4_err_set(err, G4_EIO, "cannot flush %s: %s", tmp, strerror(errno));
        unlink(tmp); free(tmp);
        return G4_EIO;
    }
    if (rename(tmp, path) != 0) {
        g4_err_set(err, G4_EIO, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
        unlink(tmp); free(tmp);
        return G4_EIO;
    }
    free(tmp);
    return G4_OK;
}

int g4_file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

int g4_optional_file(const char *path, int *present, g4_err *err) {
    *present = 0;
    struct stat st;
    if (stat(path, &st) != 0) {
        int e = errno;
        if (e != ENOENT) return g4_err_set(err, G4_EIO, "%s: %s", path, strerror(e));
        if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode))
            return g4_err_set(err, G4_EIO, "%s: a symbolic link to nothing (its target does not exist)", path);
        return G4_OK;
    }
    if (S_ISDIR(st.st_mode)) return g4_err_set(err, G4_EIO, "%s: is a directory, not a file", path);
    if (!S_ISREG(st.st_mode)) return g4_err_set(err, G4_EIO, "%s: not a regular file", path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return g4_err_set(err, G4_EIO, "%s: cannot open: %s", path, strerror(errno));
    close(fd);
    *present = 1;
    return G4_OK;
}

int g4_is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int g4_check_dir(const char *path, const char *what, g4_err *err) {
    struct stat st;
    if (stat(path, &st) != 0) return g4_err_set(err, G4_EIO, "%s %s: %s", what, path, strerror(errno));
    if (!S_ISDIR(st.st_mode)) return g4_err_set(err, G4_EIO, "%s %s: not a folder", what, path);
    return G4_OK;
}

char *g4_path_join(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (!p) return NULL;
    memcpy(p, dir, a);
    size_t k = a;
    if (a > 0 && dir[a - 1] != '/') p[k++] = '/';
    memcpy(p + k, name, b + 1);
    return p;
}
