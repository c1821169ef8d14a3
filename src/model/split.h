/* split.h — the tensor-parallel split rules (DESIGN.md §4) for one rank of a TP group.
 *
 * q/k/v and gate/up by output rows (whole heads / FFN rows), o_proj and down_proj by input
 * columns, norms and layer_scalar replicated, embedding (= tied head) by vocab rows (uneven
 * splits allowed). A rank holds the KV heads its query heads use: with fewer KV heads than
 * ranks the query heads stay split and only the KV heads are replicated (rank r holds KV head
 * r / (T / n_kv)).
 *
 * Determinism: the input columns of o_proj and down_proj are cut into P canonical slices
 * (P = min(16, largest power of two dividing the unit count; units are heads for o_proj and,
 * for down_proj, FFN columns — 32-column groups when the weights are block-quantized (q8_0),
 * so no block straddles a slice). Each slice is one fixed-order dot product; the P partials are
 * summed in a fixed pairwise tree. A rank holds P/T consecutive slices (a subtree) and the
 * all-reduce finishes the tree, so every TP degree gives the same bits. P depends on the config
 * and the weight dtype, never on the TP degree.
 *
 * `wdtype` below is the dtype of the row-parallel weights (o_proj, down_proj) as they are
 * multiplied: a g4_dtype, or -1 for "as stored in a checkpoint" (f32/bf16/f16). */
#ifndef G4_MODEL_SPLIT_H
#define G4_MODEL_SPLIT_H

#include <stdint.h>

#include "base/error.h"
#include "model/config.h"
#include "model/tensors.h"

#define G4_MAX_SLICES 16

typedef struct g4_tp_layer {
    int kv0, n_kv_local;    /* KV heads held: [kv0, kv0 + n_kv_local) */
} g4_tp_layer;

typedef struct g4_tp_plan {
    int tp, rank;
    int q0, n_q_local;          /* query heads [q0, q0 + n_q_local) (every layer) */
    int64_t f0, n_f_local;      /* FFN rows (gate/up) and down_proj columns */
    int64_t v0, n_v_local;      /* vocab rows of the embedding / head */
    int wdtype;                 /* the weight dtype the slices were cut for (see above) */
    int p_attn, p_mlp;          /* canonical slice counts */
    int s_attn0, s_mlp0;        /* first slice held by this rank (P/T consecutive slices) */
    int64_t mlp_slice_cols;     /* width of one down_proj slice */
    g4_tp_layer *layers;        /* [n_layers] */
} g4_tp_plan;

/* Fills plan for rank of tp; refuses an impossible degree with a message listing those that work. */
int g4_tp_plan_make(const g4_config *cfg, int wdtype, int tp, int rank, g4_tp_plan *plan, g4_err *err);
void g4_tp_plan_free(g4_tp_plan *plan);
/* Writes the TP degrees this config supports with weights of wdtype ("1, 2, 4") into buf. */
void g4_tp_valid_degrees(const g4_config *cfg, int wdtype, char *buf, size_t len);
/* 1 if tp works for cfg with weights of wdtype. */
int g4_tp_degree_ok(const g4_config *cfg, int wdtype, int tp);
/* Vocab rows of rank r: the first (V mod T) ranks get one more row. */
void g4_tp_vocab_range(int64_t vocab, int tp, int rank, int64_t *v0, int64_t *n);
/* Columns a block of wdtype spans (32 for q8_0; 1 for f32/bf16/f16 and -1): slices must hold
 * whole blocks. */
int g4_tp_block_cols(int wdtype);
/* Canonical slice counts of a config (the MLP's depends on the weight dtype). */
int g4_tp_slices_attn(const g4_config *cfg);
int g4_tp_slices_mlp(const g4_config *cfg, int wdtype);
/* Width in columns of one down_proj slice, and of one o_proj slice on layer l. */
int64_t g4_tp_mlp_slice_cols(const g4_config *cfg, int wdtype);
int64_t g4_tp_attn_slice_cols(const g4_config *cfg, int l);

/* Whether weights of `dtype` can be used with this config: q8_0 blocks (32 columns) must not
 * straddle the canonical reduction slices of o_proj and down_proj. */
int g4_tp_check_dtype(const g4_config *cfg, int dtype, g4_err *err);
/* Whether a bound row-parallel matrix of `dtype` fits the plan's slices (a plan cut for bf16
 * must not run q8_0 weights); name is for the message. */
int g4_tp_check_plan_dtype(const g4_tp_plan *plan, int dtype, const char *name, g4_err *err);

/* The rectangle of a full checkpoint tensor that rank `plan->rank` holds:
 * rows [*r0, *r0 + *nr) × cols [*c0, *c0 + *nc) (1-D tensors: cols = 1, whole). */
void g4_tp_tensor_slice(const g4_config *cfg, const g4_tp_plan *plan, const g4_tensor_spec *spec,
                        int64_t *r0, int64_t *nr, int64_t *c0, int64_t *nc);

#endif
