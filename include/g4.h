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

G4_API_BEGIN

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
    int64_t kv_budget_bytes; /* KV cache memory per rank (default: 1/4 of RAM, split between this process's ranks) */
    int verify;              /* artifacts: check every byte's checksum, not only headers */
    int mutation;            /* test-only: a deliberate spec mistake (forward.h G4_MUT_*) */
    const char *isa;         /* kernel set "scalar", "avx2", "avx512"; NULL: $G4_ISA or the best */
    const char *math;        /* NULL or "exact" (fp32 matmuls, the reference); "fast": bf16 weights' matmuls
                              * on bf16-rounded activations (vdpbf16ps; docs/math.md), invariances kept */
    int load_copy;           /* 1: copy weights into process memory instead of reading the map */
    int numa;                /* 1: each rank on one NUMA node's CPUs and memory (rank % nodes; MPI: the local rank) */
    const char *kv_dtype;    /* KV cache elements: NULL or "f32" (exact), "bf16", "q8_0" */
    int no_prefix_cache;     /* 1: no automatic prefix cache (every prompt is computed whole) */
    const char *speculative; /* NULL: none; "ngram[:n,k]" or "mtp:DIR[:k]" (docs/speculative.md) */
    int speculative_always;  /* 1: draft every round instead of when the cost model says it pays */
    const char *kv_cache_dir;/* NULL: none; else finished sequences' prefixes are written there when idle and
                              * read back into the prefix cache at start (docs/kvcache.md "On disk") */
    int64_t kv_cache_dir_bytes; /* its budget, least recently used out first (default 10 GiB) */
    int64_t kv_cache_min_tokens;/* shorter prefixes are not written (default 256) */
} g4_engine_opts;

/* One forward step: n tokens, each with its absolute position and sequence. */
typedef struct g4_batch {
    int n;
    const int32_t *ids;      /* [n]; a negative id is a token whose input embedding is given in
                              * embd (an image's soft token); the id is its key in the prefix
                              * cache (derived from the image's pixel hash, g4_engine_image_key) */
    const int32_t *pos;      /* [n] */
    const int32_t *seq;      /* [n] */
    const uint8_t *logits;   /* [n] 1: produce this token's logits */
    const float *const *embd;/* NULL, or [n]: for each negative id, its input embedding row
                              * [hidden_size], used as is (not scaled like looked-up rows) */
    const int32_t *span_end; /* NULL, or [n]: 0 for a causal token; else the end (exclusive) of the
                              * token's image block: in sliding-window layers it also attends to the
                              * block's later positions (Gemma-4's bidirectional image blocks; full
                              * layers stay causal). The whole block must be in this batch. */
} g4_batch;

int g4_engine_open(const g4_engine_opts *opts, g4_engine **out, g4_err *err);
/* Leader: stops the followers and frees everything. */
void g4_engine_close(g4_engine *e);
/* 0 on the leader (the process or thread that drives the engine). */
int g4_engine_rank(const g4_engine *e);
int g4_engine_tp(const g4_engine *e);
/* MPI ranks other than 0: serve the leader's steps until it closes the engine. */
int g4_engine_follow(g4_engine *e, g4_err *err);
/* NULL while every rank is healthy. Once a rank failed (died, hung, or returned an error in a
 * step), the message naming it; every later call that needs the ranks fails at once with
 * that message (G4_ECOMM, or G4_EIO when a model file was truncated or changed in place under
 * the memory-mapped weights: also reported here before the next step finds it; not with
 * load_copy). Safe to call from any thread. */
const char *g4_engine_failure(const g4_engine *e);

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

/* Opens an empty sequence allowed cap positions (<= max_ctx, else G4_ECONTEXT); G4_EBUSY when
 * every slot is in use. The KV cache is paged: a sequence takes blocks of positions as it grows
 * (g4_engine_forward says G4_ENOMEM when none are left), nothing is reserved here. */
int g4_engine_seq_open(g4_engine *e, int64_t cap, int *seq, g4_err *err);
/* The same, with its first positions taken from the prefix cache: the longest cached prefix of
 * tokens[0..n) that leaves at least one token to compute; *n_cached is its length, and the
 * caller feeds tokens[*n_cached..] from position *n_cached on. */
int g4_engine_seq_open_cached(g4_engine *e, int64_t cap, const int32_t *tokens, int64_t n, int *seq, int64_t *n_cached,
                              g4_err *err);
/* How many positions of tokens[0..n) the cache would give now (changes nothing); *taken (may
 * be NULL): the pages among them that are evictable now and would be held after the hit. */
int64_t g4_engine_prefix_peek(const g4_engine *e, const int32_t *tokens, int64_t n, int64_t *taken);
/* Releases the sequence's blocks; its computed blocks stay in the prefix cache (evictable). */
void g4_engine_seq_close(g4_engine *e, int seq);
int64_t g4_engine_seq_len(const g4_engine *e, int seq);
/* Bytes of KV pages held by open sequences (the prefix cache's evictable pages excluded). */
size_t g4_engine_kv_bytes_used(const g4_engine *e);
size_t g4_engine_kv_budget(const g4_engine *e);
/* How the KV budget was chosen, one line: "N MiB per rank (--kv-budget-mb)" or the default's
 * account (free memory, weights, reserve, ranks; docs/kvcache.md). */
const char *g4_engine_kv_budget_note(const g4_engine *e);
/* Bytes a sequence of cap positions holds at most (its full-layer blocks and one window). */
size_t g4_engine_seq_bytes(const g4_engine *e, int64_t cap);
/* KV pages: free plus evictable now, and what growing a sequence from len by n positions takes. */
int64_t g4_engine_kv_avail_pages(const g4_engine *e);
int64_t g4_engine_kv_pages_to_grow(const g4_engine *e, int64_t len, int64_t n);
/* Drops every cached block that no sequence uses. */
void g4_engine_prefix_clear(g4_engine *e);

/* ---- the KV cache on disk (docs/kvcache.md "On disk") ------------------------------------ */
/* Writes the longest prefix of tokens[0..n) that the prefix cache holds (its full-layer blocks
 * and the window its next query reads) as files <stem>.meta and <stem>.r<R>of<T>.kv (one per
 * rank, in that rank's process's folder); *n_saved: its positions. G4_ENOTFOUND when nothing
 * of it is cached. Needs a free sequence slot (G4_EBUSY). */
int g4_engine_kv_save(g4_engine *e, const char *stem, const int32_t *tokens, int64_t n, int64_t *n_saved, g4_err *err);
/* The same, keeping the sliding rows a hit at position `from` needs too, as far as the cache
 * still holds them (a request with the same prompt but not the answer hits there). */
int g4_engine_kv_save_from(g4_engine *e, const char *stem, const int32_t *tokens, int64_t n, int64_t from, int64_t *n_saved, g4_err *err);
/* Reads such files into the prefix cache (evictable, like a finished request's blocks): a
 * request sharing the prefix then takes it from the cache. Files of another model,
 * configuration, TP degree or version, damaged or truncated ones are refused (nothing of them
 * is used). *n_loaded: the prefix's positions now cached; *tokens (may be NULL): how many it has. */
int g4_engine_kv_load(g4_engine *e, const char *stem, int64_t *n_loaded, int64_t *tokens, g4_err *err);
/* The tokens of the last sequence closed in slot seq (NULL, 0 when none). */
const int32_t *g4_engine_seq_last(const g4_engine *e, int seq, int64_t *n);
/* Where the sequence's prompt ends (the scheduler says it at admission): when the sequence is
 * written to disk, the window a hit there needs is kept too. */
void g4_engine_seq_hint(g4_engine *e, int seq, int64_t prompt_len);
/* ... and of the last sequence closed in the slot. */
int64_t g4_engine_seq_last_hint(const g4_engine *e, int seq);
/* Forgets them; *n: how many there were. */
void g4_engine_seq_forget(g4_engine *e, int seq, int64_t *n);
/* 1 while a sequence is open in slot seq. */
int g4_engine_seq_open_now(const g4_engine *e, int seq);
/* --kv-cache-dir: writes one queued prefix; returns 1 when one was handled (call again), 0 when
 * nothing is queued. Called when the engine is idle (and at close, until the queue is empty). */
int g4_engine_kv_disk_step(g4_engine *e);
typedef struct g4_kv_disk_stats {
    int on;
    int64_t entries;
    uint64_t bytes, budget, saved, save_failed, loaded_tokens, refused, evicted;
} g4_kv_disk_stats;
void g4_engine_kv_disk_stats(const g4_engine *e, g4_kv_disk_stats *st);

typedef struct g4_kv_stats {
    int64_t page_bytes;       /* one page: 16 positions of some layers' K and V (per rank) */
    int64_t pages_total, pages_free;
    int64_t pages_cached;     /* held only by the prefix cache: evictable */
    int64_t blocks_used[2];   /* blocks of the sliding / full layers held (sequences and cache) */
    int prefix_cache;         /* 1: on */
    uint64_t cache_queries, cache_query_tokens, cache_hit_tokens;
    int64_t cache_nodes;
    uint64_t cache_evictions;
} g4_kv_stats;
void g4_engine_kv_stats(const g4_engine *e, g4_kv_stats *st);
const char *g4_engine_kv_dtype(const g4_engine *e);
/* "exact" or "fast" (g4_engine_opts.math). */
const char *g4_engine_math(const g4_engine *e);
/* The dtype of the layers' matrices as multiplied ("bf16", "q8_0", "q4_0", ...): what bounds the
 * prefill (the fp32 FMA, the bf16 or the int8 dot product peak). */
const char *g4_engine_weight_dtype(const g4_engine *e);

/* Runs the batch on all ranks; logits [k][vocab] for the flagged tokens in order. */
int g4_engine_forward(g4_engine *e, const g4_batch *b, float *logits, g4_err *err);
/* The same, and (hidden not NULL) the flagged tokens' final-normed hidden states, [k][hidden_size]
 * (what the MTP drafter is fed); the logits are the same bits either way. */
int g4_engine_forward_ex(g4_engine *e, const g4_batch *b, float *logits, float *hidden, g4_err *err);

/* ---- speculative decoding (docs/speculative.md) ----------------------------------------- */

enum { G4_SPEC_NONE = 0, G4_SPEC_NGRAM, G4_SPEC_MTP };
#define G4_SPEC_MAX_K 15     /* drafts per round: a round's k + 1 rows fit one KV block */
typedef struct g4_spec_cfg {
    int method;              /* G4_SPEC_* */
    int n;                   /* ngram: the longest n-gram matched (then n-1 .. 1) */
    int k;                   /* drafts per round, 1..G4_SPEC_MAX_K */
    char dir[1024];          /* mtp: the assistant checkpoint folder */
    int always;              /* 1: every round drafts (no cost policy; tests, benchmarks) */
} g4_spec_cfg;
/* The engine's drafter, from opts.speculative (method G4_SPEC_NONE without one). */
const g4_spec_cfg *g4_engine_spec(const g4_engine *e);
int64_t g4_engine_hidden_size(const g4_engine *e);
/* A tentative sequence's steps register no completed block in the prefix cache (they write
 * drafts that may be rejected); g4_engine_seq_truncate registers them once they are confirmed. */
void g4_engine_seq_tentative(g4_engine *e, int seq, int on);
/* Rolls the sequence back to len positions (by at most k + 2 of the engine's drafter), as if
 * the later ones had never been computed, and registers its confirmed complete blocks.
 * tokens: the sequence's tokens at positions 0..len-1. */
int g4_engine_seq_truncate(g4_engine *e, int seq, int64_t len, const int32_t *tokens, g4_err *err);
/* MTP drafts (opts.speculative "mtp:..."): k tokens for each of n sequences at once, drafted at
 * each sequence's length q from tok[i] (its token at q) and hidden [n][hidden_size] (the target's
 * final-normed hidden at q-1). drafts [n][k]; a sequence whose key rows are gone (the oldest
 * sliding rows of a prefix-cache hit) gets -1s. logits (may be NULL): [n][k][vocab]. */
int g4_engine_draft(g4_engine *e, int n, const int32_t *seq, const int32_t *tok, const float *hidden, int k, int32_t *drafts,
                    float *logits, g4_err *err);

/* ---- images (docs/vision.md) -------------------------------------------------------------- */

/* 1 when the model has a vision tower (images can be encoded). */
int g4_engine_has_vision(const g4_engine *e);
/* Encodes one preprocessed image on the leader's threads: patches pixels [ph * pw][patch_dim]
 * at positions pos [ph * pw][2] (x, y) into its soft tokens soft [ph * pw / pooling^2][hidden_size]
 * (what replaces its image tokens' embeddings, g4_batch.embd). The same bits at every TP degree
 * and thread count. */
int g4_engine_encode_image(g4_engine *e, const float *pixels, const int32_t *pos, int ph, int pw, float *soft, g4_err *err);

/* Weight bytes the kernels read per decoded token, all ranks together (for bandwidth bounds). */
size_t g4_engine_weight_bytes(const g4_engine *e);
/* A read-only stream over the very weight bytes a decoded token reads (this process's ranks'
 * matrices, as mapped or held), on `threads` threads, best of `passes`: the bandwidth a decode
 * of these pages can reach (their page size, placement and page-cache state included), in GB/s;
 * <= 0 on failure. For benchmarks (g4tp bench); nothing else may run on the engine meanwhile. */
double g4_engine_weight_read_gbs(const g4_engine *e, int threads, int passes);
/* Of the weights of this process's ranks, the bytes held in process memory — converted at load
 * (--dtype), copied (--load copy) or re-laid out for the kernels — rather than read in place
 * through the file map (0 for artifacts made for this machine's kernels). */
size_t g4_engine_copied_weight_bytes(const g4_engine *e);

/* Where decode and prefill time go: wall seconds per phase on one rank of this process since the
 * engine opened or the last reset, one-token forward passes (decode steps) and passes of several
 * tokens (prefill chunks, batches) apart; the weight bytes each phase reads per step (so bytes *
 * steps / seconds is its streaming speed) and its multiply-adds per token (so 2 * madds *
 * prefill_tokens / prefill_seconds is a prefill phase's arithmetic rate; the head's logits are
 * computed only for the tokens that ask for them). G4_PHASE_ALLREDUCE is the time in the
 * tensor-parallel all-reduces, most of it waiting for the slowest rank. For benchmarks (g4tp
 * bench); read it while no forward pass runs. */
enum {
    G4_PHASE_QKV, G4_PHASE_ATTENTION, G4_PHASE_O_PROJ, G4_PHASE_GATE_UP, G4_PHASE_DOWN_PROJ, G4_PHASE_HEAD,
    G4_PHASE_ALLREDUCE, G4_PHASE_OTHER, G4_PHASE_COUNT
};
typedef struct g4_phase_times {
    int64_t steps;                           /* one-token forward passes counted */
    double seconds[G4_PHASE_COUNT];          /* wall time per phase, summed over the steps */
    double step_bytes[G4_PHASE_COUNT];       /* weight bytes per step (the head's when logits are asked) */
    int64_t prefill_tokens;                  /* tokens of the several-token passes counted */
    double prefill_seconds[G4_PHASE_COUNT];  /* their wall time per phase */
    double token_madds[G4_PHASE_COUNT];      /* a phase's weight multiply-adds per token (this rank's) */
} g4_phase_times;
/* Rank `rank`'s figures (a rank of this process: 0..tp-1 with threaded ranks, this process's
 * own rank with MPI); G4_EINVAL for another. */
int g4_engine_phase_times(const g4_engine *e, int rank, g4_phase_times *out, g4_err *err);
void g4_engine_phase_times_reset(g4_engine *e);
/* A phase's name ("qkv", "attention", "o_proj", "gate_up", "down_proj", "head", "allreduce",
 * "other"). */
const char *g4_phase_name(int phase);

G4_API_END

#endif
