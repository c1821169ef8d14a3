/* weights.h — one rank's weights, bound for the kernels.
 *
 * Matrices are g4_mat views: into the read-only map of a checkpoint (slices taken in place;
 * column slices are strided views) or of a rank artifact (already sliced), or — when a dtype
 * conversion is asked for at load (f32, q8_0) — into memory owned here. Norm weights are
 * upcast to fp32 once (they are tiny). Knows the Gemma-4 tensor kinds, not file formats: the
 * caller supplies a getter that returns the rank's rectangle of each tensor. */
#ifndef G4_GEMMA4_WEIGHTS_H
#define G4_GEMMA4_WEIGHTS_H

#include "kernels/kernels.h"
#include "model/config.h"
#include "model/tensors.h"
#include "model/split.h"

typedef struct g4_layer_weights {
    g4_mat q, k, v;          /* v.data == NULL on k_eq_v layers */
    g4_mat o;                /* [hidden][n_q_local * hd] */
    g4_mat gate, up;         /* [n_f_local][hidden] */
    g4_mat down;             /* [hidden][n_f_local] */
    float *ln_in, *ln_post_attn, *ln_pre_ff, *ln_post_ff; /* [hidden] */
    float *q_norm, *k_norm;  /* [head_dim] */
    float scalar;            /* layer_scalar */
} g4_layer_weights;

typedef struct g4_rank_weights {
    g4_mat embed;            /* [n_v_local][hidden]: lookup rows and the tied head */
    float *final_norm;       /* [hidden] */
    g4_layer_weights *layers;
    void **owned;            /* allocations made here */
    int n_owned, cap_owned;
    void **big;              /* matrices copied or converted here (g4_big_alloc) */
    int n_big, cap_big;
    size_t matrix_bytes;     /* bytes of the matrices as the kernels read them */
    size_t copied_bytes;     /* of those, held in process memory (converted, copied, re-laid out) */
    int binding_kind;        /* while binding: the kind of the tensor being bound */
    int copy;                /* copy matrices into process memory instead of reading the map */
} g4_rank_weights;

/* Returns the rank's rectangle of tensor spec (index idx of the table) as a view. */
typedef int (*g4_tensor_getter)(void *src, const g4_tensor_spec *spec, int idx, g4_mat *view, g4_err *err);

/* convert: the dtypes asked for (model/tensors.h); packed int4 sources are always converted. */
/* copy: 1 = copy the matrices into this process's memory (huge pages where the OS gives them)
 * instead of reading them through the file map — faster where mapped file pages are slow to
 * read (some VMs), at the cost of load time and of sharing the page cache. */
int g4_weights_bind(const g4_config *cfg, const g4_tp_plan *plan, const g4_tensor_spec *specs, int n_specs,
                    g4_tensor_getter get, void *src, g4_dtype_req convert, int copy, g4_rank_weights *w, g4_err *err);
void g4_weights_free(g4_rank_weights *w);
/* Puts every q4_0 matrix (layers and the tied head) in `layout`: G4_Q4_GROUPED, the layout the
 * avx512 set reads faster with the same bits (by g4_q4_0_group_cols segments; tail: their partial
 * groups in the tail layout too, kernels.h), or 0, llama.cpp's blocks, which every set reads. A
 * matrix already grouped (an artifact sharded so, with or without tails) or already blocks stays
 * in the map; one read through the file map in the other layout is copied into owned memory
 * first. The embedding's lookups read either layout (g4_mat_lookup_row). */
int g4_weights_set_q4_layout(g4_rank_weights *w, const g4_config *cfg, const g4_tp_plan *plan, int layout, int tail, g4_err *err);
/* Stores each q4_0 or q8_0 row-parallel matrix (o_proj, down_proj) in the column parts
 * (kernels.h col_parts) of model/matconv.h g4_rowpar_col_parts (part_cols: 0 the dtype's default,
 * < 0 none), so that a thread's decode walks one part's rows as one stream against that part's
 * slices' activation records only (down_proj at TP 1: 16 slices, ~27 KB of q4_0 records, ~24 KB of
 * q8_0 ones, which with the weight stream overflowed L1). A matrix in parts already (an artifact
 * sharded so) stays as it is, in the map; others are copied (a map's pages released). Same
 * products, same bits. */
int g4_weights_split_rowpar(g4_rank_weights *w, const g4_config *cfg, const g4_tp_plan *plan, int64_t part_cols, g4_err *err);

#endif
