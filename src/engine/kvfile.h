/* kvfile.h — the KV cache's files on disk (docs/kvcache.md "On disk"): one entry is a token
 * prefix of P positions with its keys and values, written as a meta file (the leader's: the
 * tokens and the identity of what computed them) and one rank file per tensor-parallel rank
 * (that rank's KV heads: every full-layer position, and the sliding-layer positions of the last
 * window, from slide_from on). Knows a rank's store (gemma4/kvpool.h) and the file formats; not
 * which prefixes are worth keeping (kvdisk.h) nor the ranks' protocol (engine.c).
 *
 * A file is never trusted: headers carry the identity (model files, dtypes, KV dtype, TP
 * degree, math, kernel set, numeric version), the rank and the geometry; data comes in chunks
 * of one block of positions, each with its own checksum, verified before a byte of it reaches
 * the pool. Writes go to a temporary name, are fsynced and renamed: a name is absent, old or
 * whole. */
#ifndef G4_ENGINE_KVFILE_H
#define G4_ENGINE_KVFILE_H

#include <stdint.h>

#include "base/error.h"
#include "gemma4/kvpool.h"

/* Bumped when the kernels' bits change (a KV row computed by an older engine would differ
 * from a cold prefill's): part of every file's identity. */
#define G4_KV_NUMERIC_VERSION 1

#define G4_KVFILE_META_EXT ".meta"

/* What one rank reads or writes: positions of sequence seq's table. */
typedef struct g4_kvfile_span {
    uint64_t identity;
    int rank, tp, seq;
    int64_t total;       /* P: positions in the entry */
    int64_t slide_from;  /* first sliding position stored (a multiple of the block size) */
    int64_t p0, p1;      /* read: positions [p0, p1) into the table */
} g4_kvfile_span;

/* A hash of the model's files as this engine would read them: config.json, and of every
 * weight file its size and the bytes where the tables are (a safetensors header, an artifact's
 * tensor table with each tensor's checksum) plus the tail. Cheap (a few MiB read). */
int g4_kvfile_model_hash(const char *dir, uint64_t *out, g4_err *err);

/* The rank file's name: <stem>.r<rank>of<tp>.kv */
void g4_kvfile_rank_path(char *out, size_t cap, const char *stem, int rank, int tp);
/* Bytes of one rank's file of an entry. */
uint64_t g4_kvfile_rank_bytes(const g4_kv_geom *g, int64_t total, int64_t slide_from);

/* Rank side: positions [0, total) of seq's table to <stem>'s rank file. */
int g4_kvfile_write_rank(const g4_kvstore *s, const char *stem, const g4_kvfile_span *sp, g4_err *err);
/* Rank side: positions [p0, p1) of <stem>'s rank file into seq's table (sliding positions
 * below slide_from are skipped: the table has no block there). Every chunk is checked first. */
int g4_kvfile_read_rank(g4_kvstore *s, const char *stem, const g4_kvfile_span *sp, g4_err *err);

/* Leader side: the meta file <stem>.meta. ident: the identity's text (kept for the logs). */
int g4_kvfile_write_meta(const char *stem, uint64_t identity, const char *ident, int tp, int64_t slide_from, const int32_t *tok,
                         int64_t n, g4_err *err);
/* Reads and checks it: G4_EFORMAT / G4_ECHECKSUM for a damaged one, G4_EUNSUPPORTED for one of
 * another identity or TP degree (the message says which). *tok is malloc'd. */
int g4_kvfile_read_meta(const char *path, uint64_t identity, int tp, int32_t **tok, int64_t *n, int64_t *slide_from, g4_err *err);

#endif
