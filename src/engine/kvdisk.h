/* kvdisk.h — the leader's index of the KV cache folder (--kv-cache-dir): which entries this
 * engine's identity wrote there, newest first, their bytes against the disk budget (least
 * recently used out first), and the queue of finished sequences' prefixes waiting to be written
 * when the engine is idle. Knows names, sizes and times; not the file formats (kvfile.h) nor
 * the ranks (engine.c does the writing, loading and dropping).
 *
 * An entry's stem is DIR/<identity>-<hash of its tokens>-<positions>: entries of another model
 * or configuration in the same folder are other names, never listed, never evicted. At open,
 * temporary files of interrupted writes and rank files whose meta is missing (a write that
 * did not finish) are removed. */
#ifndef G4_ENGINE_KVDISK_H
#define G4_ENGINE_KVDISK_H

#include <stdint.h>

#include "base/error.h"

typedef struct g4_kvdisk g4_kvdisk;

typedef struct g4_kvdisk_stats {
    int64_t entries;
    uint64_t bytes, budget;
    uint64_t saved, save_failed, loaded_tokens, refused, evicted;
} g4_kvdisk_stats;

/* Creates DIR when missing (its parent must exist). */
int g4_kvdisk_open(const char *dir, uint64_t identity, uint64_t budget_bytes, int64_t min_tokens, g4_kvdisk **out, g4_err *err);
void g4_kvdisk_free(g4_kvdisk *d);

/* The stem of the entry holding tok[0..n). */
void g4_kvdisk_stem(const g4_kvdisk *d, const int32_t *tok, int64_t n, char *out, size_t cap);
/* Entries, newest first: index i's stem (NULL past the end). */
const char *g4_kvdisk_entry(const g4_kvdisk *d, int i);
/* 1 when the stem is listed; then its time becomes now (it was used). */
int g4_kvdisk_touch(g4_kvdisk *d, const char *stem);
/* A new entry of `bytes` (every file of it) was written. */
void g4_kvdisk_added(g4_kvdisk *d, const char *stem, uint64_t bytes);
/* The entry is gone (its files were removed, or refused): out of the index. */
void g4_kvdisk_forget(g4_kvdisk *d, const char *stem);
/* The oldest entry to drop so that `need` more bytes fit the budget (NULL: they fit, or
 * nothing is left to drop). */
const char *g4_kvdisk_victim(const g4_kvdisk *d, uint64_t need);

/* Finished sequences' prefixes, written when idle: shorter than min_tokens are not queued;
 * the queue holds a few (the oldest go when it is full). pop: malloc'd, NULL when empty. */
/* hint: where the sequence's prompt ended (the window there is kept too). */
void g4_kvdisk_queue(g4_kvdisk *d, const int32_t *tok, int64_t n, int64_t hint);
int g4_kvdisk_pending(const g4_kvdisk *d);
int32_t *g4_kvdisk_pop(g4_kvdisk *d, int64_t *n, int64_t *hint);

void g4_kvdisk_count(g4_kvdisk *d, int saved, int save_failed, int64_t loaded_tokens, int refused, int evicted);
void g4_kvdisk_get_stats(const g4_kvdisk *d, g4_kvdisk_stats *st);

/* Removes the files of stem in this process's folder: the meta and every rank file. */
void g4_kvdisk_unlink(const char *stem);

#endif
