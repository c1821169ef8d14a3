/* config.h — the Gemma-4 dense text configuration, read from a Hugging Face config.json, and
 * its vision tower's (vision_config; g4_vision_cfg below).
 *
 * Accepts the multimodal form (Gemma4ForConditionalGeneration: text settings under
 * "text_config") and the text-only form (Gemma4ForCausalLM / model_type gemma4_text). Every key
 * the 31B text_config has must be present — class defaults are never substituted (HF's default
 * hidden_size_per_layer_input = 256 would switch per-layer embeddings on). Features that are on
 * but unsupported here are refused with a message naming the key. Per-layer geometry (type, head
 * dim, KV heads, window, RoPE) is derived here once, from the config only. */
#ifndef G4_MODEL_CONFIG_H
#define G4_MODEL_CONFIG_H

#include <stdint.h>

#include "base/error.h"

typedef struct g4_layer_cfg {
    int full;          /* 1: full (global) attention, 0: sliding window */
    int head_dim;      /* 256 sliding / 512 full on the 31B */
    int n_kv;          /* KV heads of this layer */
    int k_eq_v;        /* V is the raw k_proj output (no v_proj tensor) */
    int window;        /* sliding window W (keys i-W+1..i), 0 for full layers */
    int rope_kind;     /* 0 default, 1 proportional */
    double rope_theta;
    double rope_partial; /* proportional: partial_rotary_factor */
    double rope_factor;  /* proportional: divisor of inv_freq (1.0 = none) */
} g4_layer_cfg;

#define G4_MAX_EOS 8

/* The vision tower (vision_config of a Gemma4ForConditionalGeneration config.json) and the
 * multimodal token ids of the top level. has_vision = 0 when the config has no vision_config
 * (or it is null, or the config is the text-only form): the rest is then zero. Every key the
 * math uses is required (no class default), like the text settings. */
typedef struct g4_vision_cfg {
    int has_vision;
    int64_t hidden, intermediate;
    int n_layers, n_heads, n_kv_heads, head_dim;
    int patch_size;          /* pixels per patch side: patch_dim = 3 * patch^2 */
    int pooling;             /* pooling_kernel_size k: k x k patches per soft token */
    int64_t pos_size;        /* position_embedding_size P: table [2][P][hidden] */
    double rope_theta;       /* 2D RoPE base (100 on the 31B) */
    double rms_norm_eps;
    int standardize;         /* std_bias / std_scale present and applied */
    int clipped;             /* use_clipped_linears: every linear clamps its input and output */
    int boi_token_id, eoi_token_id, image_token_id; /* distinct; not checked against the vocabulary */
} g4_vision_cfg;

typedef struct g4_config {
    char architecture[64]; /* "Gemma4ForConditionalGeneration" or "Gemma4ForCausalLM" */
    int multimodal;        /* text settings were under text_config */
    int64_t vocab_size, hidden_size, intermediate_size;
    int n_layers, n_heads, n_kv_heads, n_global_kv_heads, head_dim, global_head_dim;
    int attention_k_eq_v;
    int sliding_window;
    double rms_norm_eps;
    double final_logit_softcapping; /* 0 = none */
    int64_t max_position_embeddings;
    int bos_token_id, pad_token_id;
    int eos_ids[G4_MAX_EOS];        /* top-level eos_token_id list (else text_config's) */
    int n_eos;
    g4_layer_cfg *layers;           /* [n_layers] */
    g4_vision_cfg vision;           /* has_vision = 0: text only */
    char *json;                     /* the whole config.json text as given (for manifests) */
} g4_config;

/* Parses config.json text. On success cfg owns its memory (g4_config_free). */
int g4_config_parse(const char *json, size_t len, g4_config *cfg, g4_err *err);
int g4_config_load(const char *path, g4_config *cfg, g4_err *err);
void g4_config_free(g4_config *cfg);

/* RoPE inverse frequencies of layer l: head_dim/2 floats, zeros where dims pass through.
 * Computed in fp32 exactly like HF (and the oracle). */
void g4_config_rope_inv_freq(const g4_config *cfg, int l, float *inv /* [head_dim/2] */);

/* The vision RoPE's inverse frequencies: head_dim/4 floats per axis, fp32(1 / theta^(2j /
 * (head_dim/2))) as HF computes them (the exponent's denominator is head_dim/2, not head_dim). */
void g4_vision_rope_inv_freq(const g4_vision_cfg *v, float *inv /* [head_dim/4] */);

/* Embedding multiplier: fp32(sqrt(hidden_size)). */
float g4_config_embed_scale(const g4_config *cfg);

#endif
