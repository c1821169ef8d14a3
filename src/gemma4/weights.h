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
#include "tp/split.h"

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
/* The column segments the q4_0 grouped layout (kernels.h, G4_Q4_GROUPED) groups each row of a
 * rank's matrix of this kind in: the forward pass's row-parallel slices for o_proj (layer l) and
 * down_proj (each slice a view that starts at its first column), the whole row otherwise; 0 when
 * the matrix cannot be grouped (a slice width that does not divide the row, or not a matrix).
 * The one rule for the loader and the shard step. */
int64_t g4_q4_0_group_cols(const g4_config *cfg, const g4_tp_plan *plan, int kind, int layer, int64_t cols);
/* Puts every q4_0 matrix (layers and the tied head) in `layout`: G4_Q4_GROUPED, the layout the
 * avx512 set reads faster with the same bits (by g4_q4_0_group_cols segments), or 0, llama.cpp's
 * blocks, which every set reads. A matrix already so (an artifact sharded in that layout) stays
 * in the map; one read through the file map in the other layout is copied into owned memory
 * first. The embedding's lookups read either layout (g4_mat_lookup_row). */
int g4_weights_set_q4_layout(g4_rank_weights *w, const g4_config *cfg, const g4_tp_plan *plan, int layout, g4_err *err);

/* Converts a view (any kernel dtype, or packed int4) into a new dense matrix of dtype dt
 * (rows × row_bytes(cols)); q8_0 and q4_0 need cols % 32 == 0. Used by the loader and the shard
 * step. */
int g4_mat_convert(const g4_mat *src, int dt, void **out, size_t *bytes, g4_err *err);
/* Rows [r0, r0+n) of a view, as a view. */
g4_mat g4_mat_rows(const g4_mat *m, int64_t r0, int64_t n);
/* Row r of a view as fp32 (dequantized for q8_0, q4_0 and packed int4). */
void g4_mat_row_to_f32(const g4_mat *m, int64_t r, float *dst);
/* Bytes one row of a view spans in its source (packed int4: the nibbles). */
size_t g4_mat_src_row_bytes(const g4_mat *m);

#endif
