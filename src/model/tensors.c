/* tensors.c — builds the tensor table of tensors.h from a config. */
#include "model/tensors.h"

#include <stdio.h>
#include <stdlib.h>

#include "kernels/kernels.h"
#include "model/compressed.h"

static const char *const kind_names[G4_T_NKINDS] = {
    "embed", "final_norm", "input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
    "post_feedforward_layernorm", "layer_scalar", "q_proj", "k_proj", "v_proj", "o_proj", "q_norm",
    "k_norm", "gate_proj", "up_proj", "down_proj",
};

const char *g4_tensor_kind_name(int kind) { return kind >= 0 && kind < G4_T_NKINDS ? kind_names[kind] : "?"; }

int g4_tensor_kind_is_matrix(int kind) {
    switch (kind) {
    case G4_T_EMBED: case G4_T_Q: case G4_T_K: case G4_T_V: case G4_T_O: case G4_T_GATE:
    case G4_T_UP: case G4_T_DOWN: return 1;
    default: return 0;
    }
}

int g4_tensor_dtype_for(int kind, int stored, g4_dtype_req req) {
    if (!g4_tensor_kind_is_matrix(kind)) return stored;
    if (kind == G4_T_EMBED && req.head >= 0) return req.head;
    if (req.mat >= 0) return req.mat;
    return stored == G4_DT_CT_INT4 ? G4_DT_Q4_0 : stored;
}

int64_t g4_tensor_spec_numel(const g4_tensor_spec *s) {
    return s->ndim == 1 ? s->shape[0] : s->shape[0] * s->shape[1];
}

static void add(g4_tensor_spec *s, int *n, int kind, int layer, const char *suffix, int ndim, int64_t d0, int64_t d1) {
    g4_tensor_spec *t = &s[(*n)++];
    if (layer >= 0) snprintf(t->name, sizeof t->name, "layers.%d.%s", layer, suffix);
    else snprintf(t->name, sizeof t->name, "%s", suffix);
    t->kind = kind;
    t->layer = layer;
    t->ndim = ndim;
    t->shape[0] = d0;
    t->shape[1] = ndim == 2 ? d1 : 0;
}

int g4_tensor_specs(const g4_config *cfg, g4_tensor_spec **specs, int *n_out, g4_err *err) {
    int cap = 2 + 14 * cfg->n_layers;
    g4_tensor_spec *s = calloc((size_t)cap, sizeof *s);
    if (!s) return g4_err_set(err, G4_ENOMEM, "out of memory");
    int n = 0;
    const int64_t H = cfg->hidden_size, I = cfg->intermediate_size, NH = cfg->n_heads;
    add(s, &n, G4_T_EMBED, -1, "embed_tokens.weight", 2, cfg->vocab_size, H);
    for (int l = 0; l < cfg->n_layers; l++) {
        const g4_layer_cfg *lc = &cfg->layers[l];
        const int64_t hd = lc->head_dim, kv = lc->n_kv;
        add(s, &n, G4_T_LN_IN, l, "input_layernorm.weight", 1, H, 0);
        add(s, &n, G4_T_LN_POST_ATTN, l, "post_attention_layernorm.weight", 1, H, 0);
        add(s, &n, G4_T_LN_PRE_FF, l, "pre_feedforward_layernorm.weight", 1, H, 0);
        add(s, &n, G4_T_LN_POST_FF, l, "post_feedforward_layernorm.weight", 1, H, 0);
        add(s, &n, G4_T_SCALAR, l, "layer_scalar", 1, 1, 0);
        add(s, &n, G4_T_Q, l, "self_attn.q_proj.weight", 2, NH * hd, H);
        add(s, &n, G4_T_K, l, "self_attn.k_proj.weight", 2, kv * hd, H);
        if (!lc->k_eq_v) add(s, &n, G4_T_V, l, "self_attn.v_proj.weight", 2, kv * hd, H);
        add(s, &n, G4_T_O, l, "self_attn.o_proj.weight", 2, H, NH * hd);
        add(s, &n, G4_T_QNORM, l, "self_attn.q_norm.weight", 1, hd, 0);
        add(s, &n, G4_T_KNORM, l, "self_attn.k_norm.weight", 1, hd, 0);
        add(s, &n, G4_T_GATE, l, "mlp.gate_proj.weight", 2, I, H);
        add(s, &n, G4_T_UP, l, "mlp.up_proj.weight", 2, I, H);
        add(s, &n, G4_T_DOWN, l, "mlp.down_proj.weight", 2, H, I);
    }
    add(s, &n, G4_T_FINAL_NORM, -1, "norm.weight", 1, H, 0);
    *specs = s;
    *n_out = n;
    return G4_OK;
}
