/* tensors.h — the one table of the Gemma-4 text tensors: for a config, every tensor the model
 * needs, with its checkpoint name (without the "model.language_model." / "model." prefix), its
 * expected [out, in] shape, and what it is (kind, layer). The loader, the shard step, inspect
 * and the weight binding all walk this table; nothing else spells tensor names.
 * Beside it, the vision tower's table (g4_vision_tensor_specs: names without the "model."
 * prefix, kinds after the text ones), walked the same way by the same modules. */
#ifndef G4_MODEL_TENSORS_H
#define G4_MODEL_TENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "model/config.h"

typedef enum {
    G4_T_EMBED,       /* embed_tokens.weight [vocab, hidden]  (also the tied head) */
    G4_T_FINAL_NORM,  /* norm.weight [hidden] */
    G4_T_LN_IN,       /* layers.i.input_layernorm.weight [hidden] */
    G4_T_LN_POST_ATTN,
    G4_T_LN_PRE_FF,
    G4_T_LN_POST_FF,
    G4_T_SCALAR,      /* layers.i.layer_scalar [1] */
    G4_T_Q,           /* self_attn.q_proj.weight [heads*hd, hidden] */
    G4_T_K,           /* self_attn.k_proj.weight [kv*hd, hidden] */
    G4_T_V,           /* self_attn.v_proj.weight [kv*hd, hidden]   (not on k_eq_v layers) */
    G4_T_O,           /* self_attn.o_proj.weight [hidden, heads*hd] */
    G4_T_QNORM,       /* self_attn.q_norm.weight [hd] */
    G4_T_KNORM,       /* self_attn.k_norm.weight [hd] */
    G4_T_GATE,        /* mlp.gate_proj.weight [inter, hidden] */
    G4_T_UP,          /* mlp.up_proj.weight [inter, hidden] */
    G4_T_DOWN,        /* mlp.down_proj.weight [hidden, inter] */
    G4_T_NKINDS
} g4_tensor_kind;

/* The vision tower (vision_config; VISION.md section 1). Names below without "model.". */
typedef enum {
    G4_VT_INPUT_PROJ = G4_T_NKINDS, /* vision_tower.patch_embedder.input_proj.weight [hidden, 3 p^2] */
    G4_VT_POS_TABLE,  /* vision_tower.patch_embedder.position_embedding_table [2, P, hidden] */
    G4_VT_LN_IN,      /* vision_tower.encoder.layers.i.input_layernorm.weight [hidden] */
    G4_VT_LN_POST_ATTN,
    G4_VT_LN_PRE_FF,
    G4_VT_LN_POST_FF,
    G4_VT_Q,          /* ...layers.i.self_attn.q_proj.linear.weight [heads*hd, hidden] */
    G4_VT_K,
    G4_VT_V,
    G4_VT_O,          /* [hidden, heads*hd] */
    G4_VT_QNORM,      /* ...self_attn.q_norm.weight [hd] (no v_norm tensor: it has no weight) */
    G4_VT_KNORM,
    G4_VT_GATE,       /* ...mlp.gate_proj.linear.weight [inter, hidden] */
    G4_VT_UP,
    G4_VT_DOWN,       /* [hidden, inter] */
    G4_VT_CLIP,       /* use_clipped_linears: ...<linear>.{input,output}_{min,max} [] — sub = 4 * linear + bound */
    G4_VT_STD_BIAS,   /* vision_tower.std_bias [hidden] (standardize) */
    G4_VT_STD_SCALE,
    G4_VT_PROJ,       /* embed_vision.embedding_projection.weight [text hidden, hidden] */
    G4_VT_END
} g4_vision_tensor_kind;

/* G4_VT_CLIP: the linears in sub / 4 order and the bounds in sub % 4 order. */
enum { G4_VL_Q, G4_VL_K, G4_VL_V, G4_VL_O, G4_VL_GATE, G4_VL_UP, G4_VL_DOWN, G4_VL_N };
enum { G4_CLIP_IN_MIN, G4_CLIP_IN_MAX, G4_CLIP_OUT_MIN, G4_CLIP_OUT_MAX };

typedef struct g4_tensor_spec {
    char name[96];   /* e.g. "layers.3.self_attn.q_proj.weight" */
    int kind;        /* g4_tensor_kind or g4_vision_tensor_kind */
    int layer;       /* -1 for embed / final norm */
    int ndim;        /* 1 or 2 (vision: 0 for a clip scalar, 3 for the position table) */
    int64_t shape[3];
    int sub;         /* G4_VT_CLIP: 4 * G4_VL_* + G4_CLIP_*; else 0 */
} g4_tensor_spec;

/* All tensors of the text model in a fixed order (embed, layers 0.., final norm). */
int g4_tensor_specs(const g4_config *cfg, g4_tensor_spec **specs, int *n, g4_err *err);
int64_t g4_tensor_spec_numel(const g4_tensor_spec *s);
/* The [rows, cols] a tensor is stored as (g4_mat, artifact entries): 1-D: [n, 1]; 0-D: [1, 1];
 * the 3-D position table: [2 P, hidden]. */
void g4_tensor_spec_rows_cols(const g4_tensor_spec *s, int64_t *rows, int64_t *cols);
/* "[2, 1024, 32]" */
void g4_tensor_spec_shape_text(const g4_tensor_spec *s, char *buf, size_t len);
/* The vision tower's tensors in checkpoint order (patch embedder, layers, std_*, projection);
 * *n = 0 and *specs = NULL when the config has no vision tower. */
int g4_vision_tensor_specs(const g4_config *cfg, g4_tensor_spec **specs, int *n, g4_err *err);
int g4_tensor_kind_is_vision(int kind);
/* 1 for matrices the kernels multiply (q/k/v/o/gate/up/down/embed, and the vision tower's
 * input_proj, q/k/v/o/gate/up/down and projection); 0 for norms, scalars and tables. */
int g4_tensor_kind_is_matrix(int kind);
const char *g4_tensor_kind_name(int kind);
/* What a shard or a load asks of the dtypes: mat for every matrix but the tied embedding/head
 * (-1: as stored), head for the embedding/head (-1: the default rule below). */
typedef struct g4_dtype_req { int mat, head; } g4_dtype_req;
#define G4_DTYPE_AS_STORED ((g4_dtype_req){-1, -1})

/* The dtype a tensor of `kind` stored as `stored` is kept in: norms, scalars and every vision
 * tower tensor (the tower keeps its weights as stored: --dtype is for the text model) stay as stored;
 * matrices take req.mat (packed int4 sources, model/compressed.h, become q4_0 when it is -1); the
 * head takes req.head, else follows req.mat when that is block-quantized (q8_0, q4_0: as
 * llama.cpp's files do) or a float dtype, else stays as stored (a W4A16 checkpoint's bf16 head). */
int g4_tensor_dtype_for(int kind, int stored, g4_dtype_req req);

#endif
