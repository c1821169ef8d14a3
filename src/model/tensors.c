/* tensors.c — builds the text and vision tensor tables of tensors.h from a config. */
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

static const char *const vision_kind_names[G4_VT_END - G4_T_NKINDS] = {
    "vision input_proj", "vision position_embedding_table", "vision input_layernorm", "vision post_attention_layernorm",
    "vision pre_feedforward_layernorm", "vision post_feedforward_layernorm", "vision q_proj", "vision k_proj",
    "vision v_proj", "vision o_proj", "vision q_norm", "vision k_norm", "vision gate_proj", "vision up_proj",
    "vision down_proj", "vision clip bound", "vision std_bias", "vision std_scale", "embed_vision projection",
};

const char *g4_tensor_kind_name(int kind) {
    if (kind >= 0 && kind < G4_T_NKINDS) return kind_names[kind];
    return g4_tensor_kind_is_vision(kind) ? vision_kind_names[kind - G4_T_NKINDS] : "?";
}

int g4_tensor_kind_is_vision(int kind) { return kind >= G4_T_NKINDS && kind < G4_VT_END; }

int g4_tensor_kind_is_matrix(int kind) {
    switch (kind) {
    case G4_T_EMBED: case G4_T_Q: case G4_T_K: case G4_T_V: case G4_T_O: case G4_T_GATE:
    case G4_T_UP: case G4_T_DOWN: return 1;
    case G4_VT_INPUT_PROJ: case G4_VT_Q: case G4_VT_K: case G4_VT_V: case G4_VT_O: case G4_VT_GATE:
    case G4_VT_UP: case G4_VT_DOWN: case G4_VT_PROJ: return 1;
    default: return 0;
    }
}

int g4_tensor_dtype_for(int kind, int stored, g4_dtype_req req) {
    if (!g4_tensor_kind_is_matrix(kind) || g4_tensor_kind_is_vision(kind)) return stored;
    if (kind == G4_T_EMBED && req.head >= 0) return req.head;
    if (req.mat >= 0) return req.mat;
    return stored == G4_DT_CT_INT4 ? G4_DT_Q4_0 : stored;
}

int64_t g4_tensor_spec_numel(const g4_tensor_spec *s) {
    int64_t n = 1;
    for (int d = 0; d < s->ndim; d++) n *= s->shape[d];
    return n;
}

void g4_tensor_spec_rows_cols(const g4_tensor_spec *s, int64_t *rows, int64_t *cols) {
    *cols = s->ndim >= 2 ? s->shape[s->ndim - 1] : 1;
    *rows = g4_tensor_spec_numel(s) / *cols;
}

void g4_tensor_spec_shape_text(const g4_tensor_spec *s, char *buf, size_t len) {
    size_t k = (size_t)snprintf(buf, len, "[");
    for (int d = 0; d < s->ndim && k < len; d++) k += (size_t)snprintf(buf + k, len - k, "%s%lld", d ? ", " : "", (long long)s->shape[d]);
    if (k < len) snprintf(buf + k, len - k, "]");
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

/* One vision spec; shape d[0..ndim). */
static void vadd(g4_tensor_spec *s, int *n, int kind, int layer, int sub, const char *name, int ndim, int64_t d0, int64_t d1, int64_t d2) {
    g4_tensor_spec *t = &s[(*n)++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->kind = kind;
    t->layer = layer;
    t->sub = sub;
    t->ndim = ndim;
    const int64_t d[3] = {d0, d1, d2};
    for (int i = 0; i < ndim; i++) t->shape[i] = d[i];
}

int g4_vision_tensor_specs(const g4_config *cfg, g4_tensor_spec **specs, int *n_out, g4_err *err) {
    *specs = NULL;
    *n_out = 0;
    const g4_vision_cfg *v = &cfg->vision;
    if (!v->has_vision) return G4_OK;
    static const char *const lin[G4_VL_N] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                                             "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"};
    static const char *const bound[4] = {"input_min", "input_max", "output_min", "output_max"};
    const int per_layer = 13 + (v->clipped ? 4 * G4_VL_N : 0);
    g4_tensor_spec *s = calloc((size_t)(5 + per_layer * v->n_layers), sizeof *s);
    if (!s) return g4_err_set(err, G4_ENOMEM, "out of memory");
    const int64_t H = v->hidden, I = v->intermediate, A = (int64_t)v->n_heads * v->head_dim, KV = (int64_t)v->n_kv_heads * v->head_dim;
    const int64_t P = v->patch_size;
    int n = 0;
    char name[96];
    vadd(s, &n, G4_VT_INPUT_PROJ, -1, 0, "vision_tower.patch_embedder.input_proj.weight", 2, H, 3 * P * P, 0);
    vadd(s, &n, G4_VT_POS_TABLE, -1, 0, "vision_tower.patch_embedder.position_embedding_table", 3, 2, v->pos_size, H);
    const int lin_kind[G4_VL_N] = {G4_VT_Q, G4_VT_K, G4_VT_V, G4_VT_O, G4_VT_GATE, G4_VT_UP, G4_VT_DOWN};
    const int64_t lin_shape[G4_VL_N][2] = {{A, H}, {KV, H}, {KV, H}, {H, A}, {I, H}, {I, H}, {H, I}};
    for (int l = 0; l < v->n_layers; l++) {
#define LNAME(fmt, ...) (snprintf(name, sizeof name, "vision_tower.encoder.layers.%d." fmt, l, __VA_ARGS__), name)
        for (int j = 0; j < G4_VL_N; j++) {
            vadd(s, &n, lin_kind[j], l, 0, LNAME("%s.linear.weight", lin[j]), 2, lin_shape[j][0], lin_shape[j][1], 0);
            if (j == G4_VL_O) {
                vadd(s, &n, G4_VT_QNORM, l, 0, LNAME("%s", "self_attn.q_norm.weight"), 1, v->head_dim, 0, 0);
                vadd(s, &n, G4_VT_KNORM, l, 0, LNAME("%s", "self_attn.k_norm.weight"), 1, v->head_dim, 0, 0);
            }
            for (int b = 0; v->clipped && b < 4; b++) vadd(s, &n, G4_VT_CLIP, l, 4 * j + b, LNAME("%s.%s", lin[j], bound[b]), 0, 0, 0, 0);
        }
        vadd(s, &n, G4_VT_LN_IN, l, 0, LNAME("%s", "input_layernorm.weight"), 1, H, 0, 0);
        vadd(s, &n, G4_VT_LN_POST_ATTN, l, 0, LNAME("%s", "post_attention_layernorm.weight"), 1, H, 0, 0);
        vadd(s, &n, G4_VT_LN_PRE_FF, l, 0, LNAME("%s", "pre_feedforward_layernorm.weight"), 1, H, 0, 0);
        vadd(s, &n, G4_VT_LN_POST_FF, l, 0, LNAME("%s", "post_feedforward_layernorm.weight"), 1, H, 0, 0);
#undef LNAME
    }
    if (v->standardize) {
        vadd(s, &n, G4_VT_STD_BIAS, -1, 0, "vision_tower.std_bias", 1, H, 0, 0);
        vadd(s, &n, G4_VT_STD_SCALE, -1, 0, "vision_tower.std_scale", 1, H, 0, 0);
    }
    vadd(s, &n, G4_VT_PROJ, -1, 0, "embed_vision.embedding_projection.weight", 2, cfg->hidden_size, H, 0);
    *specs = s;
    *n_out = n;
    return G4_OK;
}
