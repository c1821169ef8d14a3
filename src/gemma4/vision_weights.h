/* vision_weights.h — the Gemma-4 vision tower's weights, bound for the kernels.
 *
 * Matrices and the position table are g4_mat views of the tensors as stored (bf16 on every
 * Gemma-4 checkpoint; f16/f32 also read), straight into the read-only map of a checkpoint or of
 * rank 0's artifact: nothing is copied or converted (--dtype is for the text model). Norm
 * vectors, std_bias/std_scale and the clip bounds are upcast to fp32 once. Knows the vision
 * tensor kinds (model/tensors.h), not file formats: the caller's getter returns each tensor of
 * the vision table whole. Knows nothing of the tower's arithmetic (vision.c). */
#ifndef G4_GEMMA4_VISION_WEIGHTS_H
#define G4_GEMMA4_VISION_WEIGHTS_H

#include "gemma4/weights.h"
#include "kernels/kernels.h"
#include "model/config.h"
#include "model/tensors.h"

/* Where the tower's tensors come from: the vision table and a getter for whole tensors. */
typedef struct g4_vision_source {
    const g4_tensor_spec *specs; /* g4_vision_tensor_specs order */
    int n_specs;
    g4_tensor_getter get;        /* view of specs[idx], rows x cols by g4_tensor_spec_rows_cols */
    void *ctx;
} g4_vision_source;

typedef struct g4_vision_layer {
    g4_mat lin[G4_VL_N];          /* q, k, v [heads*hd][hidden]; o [hidden][heads*hd]; gate, up [inter][hidden]; down [hidden][inter] */
    float clip[G4_VL_N][4];       /* G4_CLIP_* bounds per linear; -inf/+inf without use_clipped_linears */
    float *ln_in, *ln_post_attn, *ln_pre_ff, *ln_post_ff; /* [hidden], used as-is (not 1 + w) */
    float *q_norm, *k_norm;       /* [head_dim] */
} g4_vision_layer;

typedef struct g4_vision_weights {
    g4_mat input_proj;            /* [hidden][3 p^2], columns in (py, px, c) order */
    g4_mat pos_table;             /* [2 P][hidden]: row x = table[0][x] (column), row P + y = table[1][y] (row) */
    float *std_bias, *std_scale;  /* [hidden]; NULL without standardize */
    g4_mat proj;                  /* embed_vision [text hidden][hidden] */
    g4_vision_layer *layers;      /* [n_layers] */
    float *vecs;                  /* the one allocation behind every fp32 vector above */
    size_t mapped_bytes;          /* bytes of the tensors read in place */
} g4_vision_weights;

/* Binds every tensor of src (the config's vision table); checks each view's shape and dtype. */
int g4_vision_weights_bind(const g4_config *cfg, const g4_vision_source *src, g4_vision_weights *w, g4_err *err);
void g4_vision_weights_free(g4_vision_weights *w);

#endif
