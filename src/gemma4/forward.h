/* forward.h — the Gemma-4 forward pass of one rank over a batch of tokens.
 *
 * A batch is any mix of tokens from any sequences (a prompt chunk, one decode token for each of
 * many sequences, or both), each with its absolute position and sequence slot. Every output
 * element is computed in a fixed order independent of the batch's composition, the thread
 * count and the TP degree (DESIGN.md §4), so a token's logits are the same bits whether it was
 * prefilled or decoded, alone or among others. Two all-reduces per layer; the embedding lookup
 * is one more. Tensor-parallel collectives go through the rank's g4_comm. Keys and values live
 * in the rank's paged pool (kvpool.h): the pass reads each sequence's block table and knows
 * nothing of how blocks were chosen or shared. The per-batch path allocates nothing: all
 * buffers are sized at init for max_batch tokens and max_ctx keys. */
#ifndef G4_GEMMA4_FORWARD_H
#define G4_GEMMA4_FORWARD_H

#include <stdint.h>

#include "g4.h"
#include "base/threadpool.h"
#include "gemma4/kvpool.h"
#include "gemma4/weights.h"
#include "kernels/kernels.h"
#include "tp/comm.h"


/* Test-only deliberate mistakes (spec §4), to show the golden tests catch them. */
enum { G4_MUT_NONE = 0, G4_MUT_SCALAR_ONE, G4_MUT_NORM_PLUS_ONE, G4_MUT_V_AFTER_KNORM, G4_MUT_NO_VNORM,
       G4_MUT_ATTN_SCALE, G4_MUT_NO_WINDOW };

typedef struct g4_rank_model g4_rank_model;

typedef struct g4_rank_model_opts {
    int max_batch;      /* tokens per forward call */
    int64_t max_ctx;    /* longest sequence (positions) */
    int max_seqs;       /* sequence slots */
    int mutation;       /* G4_MUT_*; 0 in production */
    int64_t kv_pages;   /* pages of the KV pool */
    int kv_dtype;       /* G4_DT_F32, BF16, Q8_0 */
} g4_rank_model_opts;

int g4_rank_model_create(const g4_config *cfg, const g4_tp_plan *plan, const g4_rank_weights *w,
                         const g4_kernels *K, g4_pool *pool, g4_comm *comm, const g4_rank_model_opts *opts,
                         g4_rank_model **out, g4_err *err);
void g4_rank_model_free(g4_rank_model *m);

/* Runs the batch; writes logits for the flagged tokens, in batch order, as
 * logits_local[k][n_v_local] (this rank's vocab rows). Collective: every rank calls it with the
 * same batch. */
int g4_rank_forward(g4_rank_model *m, const g4_batch *b, float *logits_local, g4_err *err);

/* After a forward with flagged tokens: their final-normed hidden states, [flagged][hidden]
 * (the same on every rank), valid until the next forward. */
const float *g4_rank_hidden(const g4_rank_model *m);

/* The rank's decode phase times (g4.h g4_phase_times), and their reset. */
void g4_rank_phase_times(const g4_rank_model *m, g4_phase_times *out);
void g4_rank_phase_times_reset(g4_rank_model *m);
/* The rank's KV pool: the engine applies the leader's ops to it between steps. */
g4_kvstore *g4_rank_kv(g4_rank_model *m);

#endif
