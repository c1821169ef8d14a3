/* artifact.h — g4tp per-rank artifacts (DESIGN.md §7, docs/artifacts.md): a folder with
 * manifest.json and one rank-RRRRR-of-TTTTT.g4w file per tensor-parallel rank, each holding the
 * rank's rectangle of every tensor (g4_tp_tensor_slice), row-major and contiguous, at 4 KiB
 * aligned offsets, ready to be mapped and read in place by the kernels. Rank 0's file also holds
 * the vision tower (whole, as stored), after the text tensors: only the leader runs it.
 *
 * Writing (g4_artifact_shard) streams tensor by tensor from the mapped checkpoint through a
 * bounded buffer, into OUT.tmp-<pid>/, fsyncs, then renames to OUT: a folder named OUT is
 * either absent, the old one, or complete. Reading (g4_artifact_open) checks the manifest's own
 * checksum, every rank header against the manifest, and the tensor table's bounds and alignment;
 * with verify, every tensor's XXH3 too. */
#ifndef G4_MODEL_ARTIFACT_H
#define G4_MODEL_ARTIFACT_H

#include <signal.h>
#include <stdint.h>

#include "base/error.h"
#include "base/mapfile.h"
#include "kernels/kernels.h"
#include "model/config.h"
#include "model/tensors.h"

#define G4_ART_MAGIC "G4TPW001"
#define G4_ART_VERSION 6     /* 2: q4_0 entries may be grouped (q4_group_cols); 3: rank 0 also holds the
                              * vision tower (written only then); 4: grouped q4_0 row-parallel entries
                              * may be in column parts (written only then); 5: grouped q4_0 entries'
                              * partial groups are in the tail layout (kernels.h; written only then);
                              * 6: q8_0 row-parallel entries may be in column parts (written only
                              * then); versions 1-5 still load */
#define G4_ART_VERSION_MIN 1
#define G4_ART_ALIGN 4096
#define G4_ART_HEADER_BYTES 64   /* fixed header, then n_tensors table entries */
#define G4_ART_ENTRY_BYTES 144   /* name[96] dtype u16, col_parts u16, q4_group_cols u32, rows, cols, offset, nbytes,
                                  * xxh3 (u64) */
#define G4_ART_NAME_MAX 96

/* One tensor of a rank file, as in its table. */
typedef struct g4_art_entry {
    char name[G4_ART_NAME_MAX];
    int dtype;                 /* g4_dtype */
    int64_t q4_group_cols;     /* q4_0: 0 = llama.cpp's blocks; S > 0 = the grouped layout (kernels.h), each
                                * row grouped as segments of S columns (model/matconv.h g4_q4_0_group_cols) */
    int col_parts;             /* o_proj / down_proj, q4_0 from version 4, q8_0 from 6: > 1 = stored in
                                * that many column parts (kernels.h col_parts; matconv.h g4_rowpar_col_parts) */
    int64_t rows, cols;        /* the rank's rectangle (1-D tensors: rows = length, cols = 1) */
    uint64_t offset, nbytes;   /* in the file; offset % 4096 == 0; nbytes = rows * row_bytes */
    uint64_t xxh3;             /* XXH3_64bits of the nbytes */
} g4_art_entry;

typedef struct g4_art_rank {
    g4_mapfile map;            /* data == NULL: not opened (only_rank) */
    g4_art_entry *ents;        /* [n_specs], in tensor-table order */
    int version;               /* the rank file's format version */
} g4_art_rank;

typedef struct g4_artifact {
    char *dir;
    int tp;
    int dtype;                 /* -1: matrices as stored in the checkpoint, else the --dtype */
    g4_config cfg;
    g4_tensor_spec *specs;
    int n_specs;
    g4_tensor_spec *vspecs;    /* [n_vision] the vision table: entries n_specs.. of rank 0's file */
    int n_vision;              /* 0: no tower in this folder */
    g4_art_rank *ranks;        /* [tp] (rank 0's ents: n_specs + n_vision) */
} g4_artifact;

typedef struct g4_shard_opts {
    const char *model_dir;     /* Hugging Face checkpoint folder */
    const char *out_dir;
    int tp;
    int dtype;                 /* -1 as stored, else G4_DT_* for every matrix */
    const char *head_dtype;    /* NULL: the default rule (model/tensors.h), else a dtype name */
    int q4_layout;             /* q4_0 matrices: G4_SHARD_Q4_BLOCKS (default) or G4_SHARD_Q4_GROUPED;
                                * the caller picks the layout its kernels read (the CLI's "auto"), so
                                * this layer does not depend on the kernel dispatcher */
    int64_t rowpar_part_cols;  /* q4_0 (grouped only) and q8_0 o_proj / down_proj wider than this in
                                * column parts (matconv.h g4_rowpar_col_parts); 0: the dtype's
                                * default, < 0: never */
    int q4_tail_blocks;        /* grouped only: 1 keeps partial groups as blocks (a version <= 4 folder,
                                * for older builds); 0: the tail layout (kernels.h), version 5 */
    int force;                 /* replace an existing out_dir (atomically) */
    int no_vision;             /* leave the checkpoint's vision tower out (a text-only folder) */
    /* called now and then with bytes written so far / in all (may be NULL) */
    void (*progress)(void *ud, uint64_t done, uint64_t total);
    void *progress_ud;
    /* called once per block-quantized tensor with progress_ud (may be NULL): source and new
     * dtype, and the normalised squared error sum (w - q)^2 / sum w^2 over the whole tensor
     * (0: exact; packed int4 -> q4_0 is always exact) */
    void (*report)(void *ud, const char *name, int src_dtype, int dtype, double nmse);
    volatile sig_atomic_t *cancel; /* if it becomes non-zero: stop, remove the temp folder */
} g4_shard_opts;

enum { G4_SHARD_Q4_BLOCKS = 0, G4_SHARD_Q4_GROUPED = 1 };

/* 1 if dir holds a manifest.json (an artifact folder, valid or not). */
int g4_artifact_is_dir(const char *dir);
/* The TP degree a folder's manifest declares; 0 if it is not a readable artifact manifest. */
int g4_artifact_manifest_tp(const char *dir);

/* Writes the artifacts of a checkpoint. Deterministic: the same input gives the same bytes. */
int g4_artifact_shard(const g4_shard_opts *o, g4_err *err);

/* Opens an artifact folder. only_rank >= 0 opens only that rank's file (MPI); -1 all of them.
 * tp > 0 must equal the folder's degree (0 accepts it). verify: check every tensor's XXH3. */
int g4_artifact_open(const char *dir, int only_rank, int tp, int verify, g4_artifact **out, g4_err *err);
/* The rank's rectangle of table entry idx as a view into the map (no copy). */
int g4_artifact_view(const g4_artifact *a, int rank, int idx, g4_mat *view, g4_err *err);
/* Vision table entry idx (< n_vision), whole, from rank 0's file (which must be open). */
int g4_artifact_vision_view(const g4_artifact *a, int idx, g4_mat *view, g4_err *err);
void g4_artifact_close(g4_artifact *a);

/* File name of rank r of tp ("rank-00000-of-00004.g4w") into buf (>= 32 bytes). */
void g4_artifact_rank_name(int rank, int tp, char *buf, size_t len);

#endif
