/* mapfile.c — mmap of weight files and whole-file helpers (POSIX). No model knowledge. */
#include "base/mapfile.h"

#include <errno.h>
#include <fcntl.h>
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

int g4_mapfile_open(g4_mapfile *m, const char *path, g4_err *err) {
    memset(m, 0, sizeof *m);
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
    close(fd);
    m->path = strdup(path);
    return G4_OK;
}

void g4_mapfile_close(g4_mapfile *m) {
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
