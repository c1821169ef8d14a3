/* mapfile.h — read-only memory maps of whole files, and small whole-file reads.
 * The weights are never copied: kernels read them in place from these maps.
 *
 * Every map is guarded: a file truncated while mapped would kill the process with SIGBUS at
 * the next read of a page past its new end. The first map installs a SIGBUS handler that, for
 * an address inside a map, logs one line naming the file, maps zero pages over the rest of the
 * map (the read goes on and sees zeros) and marks the map damaged; other SIGBUS go to the handler
 * that was there before (or kill the process as they would have). Each map keeps its file open,
 * so a file changed in place (size or modification time differ from the open) is noticed by
 * g4_mapfile_check. Readers of mapped data call it after using the data: what they computed
 * since the damage is garbage. */
#ifndef G4_BASE_MAPFILE_H
#define G4_BASE_MAPFILE_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

typedef struct g4_mapfile {
    const uint8_t *data;
    size_t size;
    char *path;
    int guard;                /* its slot in the guard's table, or -1 (empty file, table full) */
} g4_mapfile;

/* Maps path read-only. An empty file maps to data == NULL, size == 0. A large file the page cache
 * holds in small folios is first dropped from the cache, so that it comes back in 2 MiB folios
 * that the map covers with one entry each (mapfile.c refolio_small_cache). */
int g4_mapfile_open(g4_mapfile *m, const char *path, g4_err *err);
/* Whether later opens may drop such a cache (default 1): 0 where the maps are only read once to
 * copy the weights (--load copy). The environment's G4_MAP_REFOLIO=0|1|force overrides it. */
void g4_mapfile_set_refolio(int on);
void g4_mapfile_close(g4_mapfile *m);
/* After the bytes [p, p+n) were copied out of a map and will not be read there again: drops this
 * process's page-table entries for the whole pages of the range that lie inside an open map
 * (MADV_DONTNEED; the file and its page cache keep the data, a later read faults it back in), so
 * that a loaded copy and the map it came from do not both count in the resident set (--load
 * copy held the model twice at its peak). Pages shared with bytes still in use elsewhere only
 * cost a fault; anything not inside a map is left alone. Returns the bytes released. */
size_t g4_mapfile_release(const void *p, size_t n);
/* NULL while every open map's file is as it was when mapped; else an account of the first that
 * is not (truncated: reads of it failed and gave zeros; or changed in place), naming the file,
 * valid until that map is closed. Looks at each file (one fstat each); logs a change once. */
const char *g4_mapfile_check(void);

/* Reads a whole (small) file into a NUL-terminated malloc'd buffer. */
int g4_read_file(const char *path, char **data, size_t *len, g4_err *err);
/* Writes len bytes to path atomically (temp file in the same folder, fsync, rename). */
int g4_write_file_atomic(const char *path, const void *data, size_t len, g4_err *err);
int g4_file_exists(const char *path);
/* An optional file: G4_OK with *present = 0 when nothing is at path (ENOENT), 1 when a regular
 * file is there and opens for reading; anything else is G4_EIO naming the file with what the
 * system said (permission denied, a directory, a symbolic-link loop, a dangling link): present
 * but unreadable is an error, never "absent". */
int g4_optional_file(const char *path, int *present, g4_err *err);
int g4_is_dir(const char *path);
/* G4_OK when path is a folder (links followed); else G4_EIO "<what> <path>: <what the system
 * said>" (no such file, a symbolic-link loop, permission denied, not a folder). */
int g4_check_dir(const char *path, const char *what, g4_err *err);
/* path_join into a malloc'd string: dir + "/" + name. */
char *g4_path_join(const char *dir, const char *name);

#endif
