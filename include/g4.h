/* g4.h — the public API of the g4tp engine.
 *
 * g4_engine: a loaded model spread over N tensor-parallel ranks (threads of this process, or
 * MPI processes). Immutable weights, shared; sequences (KV caches) are opened and closed by the
 * caller, which drives forward steps over batches of tokens from any open sequences. The CLI,
 * the scheduler and the HTTP server build on this and know nothing about tensors. */
#ifndef G4_H
#define G4_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

typedef struct g4_engine g4_engine;

typedef struct g4_engine_opts {
    const char *model_dir;   /* a Hugging Face checkpoint folder or a g4tp artifact folder */
    int tp;                  /* ranks (local backend); MPI: must equal the world size or 0 */
    int threads;             /* threads per rank (>= 1) */
    const char *comm;        /* "local" (default) or "mpi" */
    const char *dtype;       /* NULL: as stored (packed int4 as q4_0); "f32", "bf16", "f16", "q8_0", "q4_0": convert at load */
    const char *head_dtype;  /* NULL: follows dtype when that is q8_0/q4_0/a float type, else as stored; or a dtype name */
    int max_batch;           /* tokens per forward step (default 128) */
    int max_seqs;            /* concurrent sequences (default 16) */
    int64_t max_ctx;         /* longest sequence in positions (default min(config, 8192)) */
    int64_t kv_budget_bytes; /* KV cache memory per rank (default: 1/4 of RAM) */
    int verify;              /* artifacts: check every byte's checksum, not only headers */
    int mutation;            /* test-only: a deliberate spec mistake (forward.h G4_MUT_*) */
    const char *isa;         /* kernel set "scalar", "avx2", "avx512"; NULL: $G4_ISA or the best */
    int load_copy;           /* 1: copy weights into process memory instead of reading the map */
} g4_engine_opts;

/* One forward step: n tokens, each with its absolute position and sequence. */
typedef struct g4_batch {
    int n;
    const int32_t *ids;      /* [n] */
    const int32_t *pos;      /* [n] */
    const int32_t *seq;      /* [n] */
    const uint8_t *logits;   /* [n] 1: produce this token's logits */
} g4_batch;

int g4_engine_open(const g4_engine_opts *opts, g4_engine **out, g4_err *err);
/* Leader: stops the followers and frees everything. */
void g4_engine_close(g4_engine *e);
/* 0 on the leader (the process or thread that drives the engine). */
int g4_engine_rank(const g4_engine *e);
int g4_engine_tp(const g4_engine *e);
/* MPI ranks other than 0: serve the leader's steps until it closes the engine. */
int g4_engine_follow(g4_engine *e, g4_err *err);

int64_t g4_engine_vocab(const g4_engine *e);
int64_t g4_engine_max_ctx(const g4_engine *e);
int g4_engine_max_batch(const g4_engine *e);
int g4_engine_max_seqs(const g4_engine *e);
const char *g4_engine_isa(const g4_engine *e);
const char *g4_engine_model_dir(const g4_engine *e); /* where config/tokenizer files are */
/* The config (opaque here; see model/config.h). */
const struct g4_config *g4_engine_config(const g4_engine *e);
/* Stop ids (config eos and generation_config.json eos). */
int g4_engine_stop_ids(const g4_engine *e, int32_t *ids, int max);

/* Opens a sequence able to hold cap positions; G4_ENOMEM when the KV budget is exhausted,
 * G4_ECONTEXT when cap exceeds max_ctx. */
int g4_engine_seq_open(g4_engine *e, int64_t cap, int *seq, g4_err *err);
void g4_engine_seq_close(g4_engine *e, int seq);
size_t g4_engine_kv_bytes_used(const g4_engine *e);
size_t g4_engine_kv_budget(const g4_engine *e);
size_t g4_engine_seq_bytes(const g4_engine *e, int64_t cap);

/* Runs the batch on all ranks; logits [k][vocab] for the flagged tokens in order. */
int g4_engine_forward(g4_engine *e, const g4_batch *b, float *logits, g4_err *err);

/* Weight bytes the kernels read per decoded token, all ranks together (for bandwidth bounds). */
size_t g4_engine_weight_bytes(const g4_engine *e);

#endif
