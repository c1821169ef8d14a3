/* tensors.h — the one table of the Gemma-4 text tensors: for a config, every tensor the model
 * needs, with its checkpoint name (without the "model.language_model." / "model." prefix), its
 * expected [out, in] shape, and what it is (kind, layer). The loader, the shard step, inspect
 * and the weight binding all walk this table; nothing else spells tensor names. */
#ifndef G4_MODEL_TENSORS_H
#define G4_MODEL_TENSORS_H

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

typedef struct g4_tensor_spec {
    char name[96];   /* e.g. "layers.3.self_attn.q_proj.weight" */
    int kind;        /* g4_tensor_kind */
    int layer;       /* -1 for embed / final norm */
    int ndim;        /* 1 or 2 */
    int64_t shape[2];
} g4_tensor_spec;

/* All tensors of the text model in a fixed order (embed, layers 0.., final norm). */
int g4_tensor_specs(const g4_config *cfg, g4_tensor_spec **specs, int *n, g4_err *err);
int64_t g4_tensor_spec_numel(const g4_tensor_spec *s);
/* 1 for matrices the kernels multiply (q/k/v/o/gate/up/down/embed); 0 for norms and scalars. */
int g4_tensor_kind_is_matrix(int kind);
const char *g4_tensor_kind_name(int kind);
/* What a shard or a load asks of the dtypes: mat for every matrix but the tied embedding/head
 * (-1: as stored), head for the embedding/head (-1: the default rule below). */
typedef struct g4_dtype_req { int mat, head; } g4_dtype_req;
#define G4_DTYPE_AS_STORED ((g4_dtype_req){-1, -1})

/* The dtype a tensor of `kind` stored as `stored` is kept in: norms and scalars stay as stored;
 * matrices take req.mat (packed int4 sources, model/compressed.h, become q4_0 when it is -1); the
 * head takes req.head, else follows req.mat when that is block-quantized (q8_0, q4_0: as
 * llama.cpp's files do) or a float dtype, else stays as stored (a W4A16 checkpoint's bf16 head). */
int g4_tensor_dtype_for(int kind, int stored, g4_dtype_req req);

#endif
