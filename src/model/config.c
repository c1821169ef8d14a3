/* config.c — config.json → g4_config, strict: see config.h for the rules. */
#include "model/config.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/mapfile.h"

/* The keys of google/gemma-4-31B-it's text_config: all required, none defaulted. */
static const char *const required_keys[] = {
    "attention_bias", "attention_dropout", "attention_k_eq_v", "bos_token_id", "dtype",
    "enable_moe_block", "eos_token_id", "expert_intermediate_size", "final_logit_softcapping",
    "global_head_dim", "head_dim", "hidden_activation", "hidden_size",
    "hidden_size_per_layer_input", "initializer_range", "intermediate_size", "layer_types",
    "max_position_embeddings", "model_type", "num_attention_heads", "num_experts",
    "num_global_key_value_heads", "num_hidden_layers", "num_key_value_heads",
    "num_kv_shared_layers", "pad_token_id", "rms_norm_eps", "rope_parameters", "sliding_window",
    "tie_word_embeddings", "top_k_experts", "use_bidirectional_attention", "use_cache",
    "use_double_wide_mlp", "vocab_size", "vocab_size_per_layer_input",
};

/* what: the key's path prefix for messages ("" or "vision_config."). */
static int get_int_in(json_t *o, const char *what, const char *key, int64_t lo, int64_t hi, int64_t *out, g4_err *err) {
    json_t *v = json_object_get(o, key);
    if (!json_is_integer(v))
        return g4_err_set(err, G4_EFORMAT, "config.json: %s%s must be an integer", what, key);
    int64_t x = json_integer_value(v);
    if (x < lo || x > hi)
        return g4_err_set(err, G4_EFORMAT, "config.json: %s%s = %lld is out of range [%lld, %lld]", what, key,
                          (long long)x, (long long)lo, (long long)hi);
    *out = x;
    return G4_OK;
}

static int get_int(json_t *o, const char *key, int64_t lo, int64_t hi, int64_t *out, g4_err *err) {
    return get_int_in(o, "", key, lo, hi, out, err);
}

static int get_num_in(json_t *o, const char *what, const char *key, double *out, g4_err *err) {
    json_t *v = json_object_get(o, key);
    if (!json_is_number(v)) return g4_err_set(err, G4_EFORMAT, "config.json: %s%s must be a number", what, key);
    *out = json_number_value(v);
    return G4_OK;
}

static int get_num(json_t *o, const char *key, double *out, g4_err *err) { return get_num_in(o, "", key, out, err); }

/* A key that must be false/0/null for the dense model: any other value is a feature we refuse. */
static int must_be_off(json_t *o, const char *key, const char *what, g4_err *err) {
    json_t *v = json_object_get(o, key);
    int on = !(json_is_null(v) || json_is_false(v) || (json_is_integer(v) && json_integer_value(v) == 0));
    if (on)
        return g4_err_set(err, G4_EUNSUPPORTED,
                          "config.json: %s is set (%s): %s is not supported by this dense-text engine", key,
                          json_is_integer(v) ? "non-zero" : "true", what);
    return G4_OK;
}

static int parse_rope(json_t *rp, const char *type, g4_layer_cfg *lc, g4_err *err) {
    json_t *r = json_object_get(rp, type);
    if (!json_is_object(r))
        return g4_err_set(err, G4_EFORMAT, "config.json: rope_parameters.%s is missing", type);
    json_t *rt = json_object_get(r, "rope_type");
    const char *kind = json_is_string(rt) ? json_string_value(rt) : "default";
    json_t *th = json_object_get(r, "rope_theta");
    if (!json_is_number(th))
        return g4_err_set(err, G4_EFORMAT, "config.json: rope_parameters.%s.rope_theta must be a number", type);
    lc->rope_theta = json_number_value(th);
    lc->rope_partial = 1.0;
    lc->rope_factor = 1.0;
    if (strcmp(kind, "default") == 0) {
        lc->rope_kind = 0;
    } else if (strcmp(kind, "proportional") == 0) {
        lc->rope_kind = 1;
        json_t *p = json_object_get(r, "partial_rotary_factor");
        if (p && !json_is_number(p))
            return g4_err_set(err, G4_EFORMAT, "config.json: rope_parameters.%s.partial_rotary_factor must be a number", type);
        if (p) lc->rope_partial = json_number_value(p);
        json_t *f = json_object_get(r, "factor");
        if (f && !json_is_number(f))
            return g4_err_set(err, G4_EFORMAT, "config.json: rope_parameters.%s.factor must be a number", type);
        if (f) lc->rope_factor = json_number_value(f);
        if (!(lc->rope_partial > 0 && lc->rope_partial <= 1) || !(lc->rope_factor > 0))
            return g4_err_set(err, G4_EFORMAT, "config.json: rope_parameters.%s has an invalid factor", type);
    } else {
        return g4_err_set(err, G4_EUNSUPPORTED, "config.json: rope_parameters.%s.rope_type \"%s\" is not supported (default, proportional)", type, kind);
    }
    if (!(lc->rope_theta > 0))
        return g4_err_set(err, G4_EFORMAT, "config.json: rope_parameters.%s.rope_theta must be positive", type);
    return G4_OK;
}

static int parse_text(json_t *tc, json_t *top, g4_config *cfg, g4_err *err) {
    for (size_t i = 0; i < sizeof required_keys / sizeof *required_keys; i++)
        if (!json_object_get(tc, required_keys[i]))
            return g4_err_set(err, G4_EFORMAT,
                              "config.json: text config lacks \"%s\" (every key of the 31B config is required; "
                              "no class default is assumed)", required_keys[i]);
    json_t *mt = json_object_get(tc, "model_type");
    if (!json_is_string(mt) || strcmp(json_string_value(mt), "gemma4_text") != 0)
        return g4_err_set(err, G4_EUNSUPPORTED, "config.json: text model_type must be \"gemma4_text\"");
    int rc;
    if ((rc = must_be_off(tc, "hidden_size_per_layer_input", "per-layer embeddings (PLE)", err)) ||
        (rc = must_be_off(tc, "num_kv_shared_layers", "KV sharing", err)) ||
        (rc = must_be_off(tc, "enable_moe_block", "the MoE block", err)) ||
        (rc = must_be_off(tc, "attention_bias", "attention bias", err)) ||
        (rc = must_be_off(tc, "num_experts", "MoE experts", err)))
        return rc;
    json_t *act = json_object_get(tc, "hidden_activation");
    if (!json_is_string(act) || strcmp(json_string_value(act), "gelu_pytorch_tanh") != 0)
        return g4_err_set(err, G4_EUNSUPPORTED, "config.json: hidden_activation must be \"gelu_pytorch_tanh\"");
    json_t *bi = json_object_get(tc, "use_bidirectional_attention");
    if (json_is_string(bi) && strcmp(json_string_value(bi), "all") == 0)
        return g4_err_set(err, G4_EUNSUPPORTED, "config.json: use_bidirectional_attention = \"all\" is not supported");
    if (!json_is_true(json_object_get(tc, "tie_word_embeddings")))
        return g4_err_set(err, G4_EUNSUPPORTED, "config.json: tie_word_embeddings must be true (Gemma-4 ties the head to the embedding)");

    int64_t v;
    const int64_t BIG = (int64_t)1 << 31;
    if ((rc = get_int(tc, "vocab_size", 1, BIG, &cfg->vocab_size, err)) ||
        (rc = get_int(tc, "hidden_size", 1, 1 << 20, &cfg->hidden_size, err)) ||
        (rc = get_int(tc, "intermediate_size", 1, 1 << 24, &cfg->intermediate_size, err)) ||
        (rc = get_int(tc, "max_position_embeddings", 1, BIG, &cfg->max_position_embeddings, err)))
        return rc;
#define GETI(key, field, lo, hi)                                   \
    if ((rc = get_int(tc, key, lo, hi, &v, err))) return rc;       \
    cfg->field = (int)v;
    GETI("num_hidden_layers", n_layers, 1, 4096);
    GETI("num_attention_heads", n_heads, 1, 4096);
    GETI("num_key_value_heads", n_kv_heads, 1, 4096);
    GETI("head_dim", head_dim, 2, 65536);
    GETI("global_head_dim", global_head_dim, 2, 65536);
    GETI("num_global_key_value_heads", n_global_kv_heads, 1, 4096);
    GETI("sliding_window", sliding_window, 1, 1 << 30);
    GETI("bos_token_id", bos_token_id, 0, cfg->vocab_size - 1);
    GETI("pad_token_id", pad_token_id, 0, cfg->vocab_size - 1);
#undef GETI
    json_t *kev = json_object_get(tc, "attention_k_eq_v");
    if (!json_is_boolean(kev)) return g4_err_set(err, G4_EFORMAT, "config.json: attention_k_eq_v must be a boolean");
    cfg->attention_k_eq_v = json_is_true(kev);
    if ((rc = get_num(tc, "rms_norm_eps", &cfg->rms_norm_eps, err))) return rc;
    if (!(cfg->rms_norm_eps > 0)) return g4_err_set(err, G4_EFORMAT, "config.json: rms_norm_eps must be positive");
    json_t *sc = json_object_get(tc, "final_logit_softcapping");
    if (json_is_null(sc)) cfg->final_logit_softcapping = 0;
    else if ((rc = get_num(tc, "final_logit_softcapping", &cfg->final_logit_softcapping, err))) return rc;
    if (cfg->final_logit_softcapping < 0) return g4_err_set(err, G4_EFORMAT, "config.json: final_logit_softcapping must be >= 0");
    if (cfg->head_dim % 2 || cfg->global_head_dim % 2)
        return g4_err_set(err, G4_EFORMAT, "config.json: head dims must be even (RoPE pairs dims i and i+d/2)");

    /* eos: the top-level list (chat stop ids) when present, else the text config's */
    json_t *eos = top ? json_object_get(top, "eos_token_id") : NULL;
    if (!eos) eos = json_object_get(tc, "eos_token_id");
    cfg->n_eos = 0;
    if (json_is_integer(eos)) cfg->eos_ids[cfg->n_eos++] = (int)json_integer_value(eos);
    else if (json_is_array(eos)) {
        size_t i;
        json_t *e;
        json_array_foreach(eos, i, e) {
            if (!json_is_integer(e) || cfg->n_eos >= G4_MAX_EOS)
                return g4_err_set(err, G4_EFORMAT, "config.json: eos_token_id must be integers (at most %d)", G4_MAX_EOS);
            cfg->eos_ids[cfg->n_eos++] = (int)json_integer_value(e);
        }
    } else return g4_err_set(err, G4_EFORMAT, "config.json: eos_token_id must be an integer or a list");

    json_t *lt = json_object_get(tc, "layer_types");
    if (!json_is_array(lt) || json_array_size(lt) != (size_t)cfg->n_layers)
        return g4_err_set(err, G4_EFORMAT, "config.json: layer_types must be a list of num_hidden_layers (%d) entries", cfg->n_layers);
    json_t *rp = json_object_get(tc, "rope_parameters");
    if (!json_is_object(rp)) return g4_err_set(err, G4_EFORMAT, "config.json: rope_parameters must be an object");
    cfg->layers = calloc((size_t)cfg->n_layers, sizeof *cfg->layers);
    if (!cfg->layers) return g4_err_set(err, G4_ENOMEM, "out of memory");
    for (int l = 0; l < cfg->n_layers; l++) {
        json_t *t = json_array_get(lt, (size_t)l);
        const char *s = json_is_string(t) ? json_string_value(t) : "";
        g4_layer_cfg *lc = &cfg->layers[l];
        if (strcmp(s, "full_attention") == 0) lc->full = 1;
        else if (strcmp(s, "sliding_attention") == 0) lc->full = 0;
        else return g4_err_set(err, G4_EFORMAT, "config.json: layer_types[%d] = \"%s\" (expected sliding_attention or full_attention)", l, s);
        /* HF's Gemma4TextConfig forces the last layer to full attention; so do we. */
        if (l == cfg->n_layers - 1) lc->full = 1;
        lc->head_dim = lc->full ? cfg->global_head_dim : cfg->head_dim;
        lc->k_eq_v = lc->full && cfg->attention_k_eq_v;
        lc->n_kv = lc->k_eq_v ? cfg->n_global_kv_heads : cfg->n_kv_heads;
        lc->window = lc->full ? 0 : cfg->sliding_window;
        if ((rc = parse_rope(rp, lc->full ? "full_attention" : "sliding_attention", lc, err))) return rc;
        if (lc->rope_kind == 0 && lc->head_dim != cfg->head_dim)
            return g4_err_set(err, G4_EUNSUPPORTED, "config.json: default RoPE on a layer whose head_dim (%d) differs from head_dim (%d)", lc->head_dim, cfg->head_dim);
        if (cfg->n_heads % lc->n_kv != 0)
            return g4_err_set(err, G4_EFORMAT, "config.json: num_attention_heads (%d) is not a multiple of the KV heads (%d) of layer %d", cfg->n_heads, lc->n_kv, l);
    }
    return G4_OK;
}

/* The keys of the 31B's vision_config the tower's math reads: all required. */
static const char *const vision_keys[] = {
    "attention_bias", "head_dim", "hidden_activation", "hidden_size", "intermediate_size", "model_type",
    "num_attention_heads", "num_hidden_layers", "num_key_value_heads", "patch_size", "pooling_kernel_size",
    "position_embedding_size", "rms_norm_eps", "rope_parameters", "standardize", "use_clipped_linears",
};

static int get_bool(json_t *o, const char *what, const char *key, int *out, g4_err *err) {
    json_t *v = json_object_get(o, key);
    if (!json_is_boolean(v)) return g4_err_set(err, G4_EFORMAT, "config.json: %s%s must be true or false", what, key);
    *out = json_is_true(v);
    return G4_OK;
}

/* vision_config and the top-level image token ids (VISION.md section 1). Values the math
 * cannot take are refused here, so the tower never checks them again. */
static int parse_vision(json_t *vc, json_t *top, g4_config *cfg, g4_err *err) {
    g4_vision_cfg *v = &cfg->vision;
    for (size_t i = 0; i < sizeof vision_keys / sizeof *vision_keys; i++)
        if (!json_object_get(vc, vision_keys[i]))
            return g4_err_set(err, G4_EFORMAT, "config.json: vision_config lacks \"%s\" (every key the vision tower uses is required)",
                              vision_keys[i]);
    json_t *mt = json_object_get(vc, "model_type");
    if (!json_is_string(mt) || strcmp(json_string_value(mt), "gemma4_vision") != 0)
        return g4_err_set(err, G4_EUNSUPPORTED, "config.json: vision_config.model_type must be \"gemma4_vision\"");
    json_t *act = json_object_get(vc, "hidden_activation");
    if (!json_is_string(act) || strcmp(json_string_value(act), "gelu_pytorch_tanh") != 0)
        return g4_err_set(err, G4_EUNSUPPORTED, "config.json: vision_config.hidden_activation must be \"gelu_pytorch_tanh\"");
    int rc, bias = 0;
    if ((rc = get_bool(vc, "vision_config.", "attention_bias", &bias, err)) ||
        (rc = get_bool(vc, "vision_config.", "standardize", &v->standardize, err)) ||
        (rc = get_bool(vc, "vision_config.", "use_clipped_linears", &v->clipped, err)))
        return rc;
    if (bias) return g4_err_set(err, G4_EUNSUPPORTED, "config.json: vision_config.attention_bias is true: biases are not supported (Gemma-4 has none)");
    int64_t x;
    const struct { const char *key; int *dst, lo, hi; } ints[] = {
        {"num_hidden_layers", &v->n_layers, 1, 1024}, {"num_attention_heads", &v->n_heads, 1, 1024},
        {"num_key_value_heads", &v->n_kv_heads, 1, 1024}, {"head_dim", &v->head_dim, 4, 4096},
        {"patch_size", &v->patch_size, 1, 256}, {"pooling_kernel_size", &v->pooling, 1, 64},
    };
    for (size_t i = 0; i < sizeof ints / sizeof *ints; i++) {
        if ((rc = get_int_in(vc, "vision_config.", ints[i].key, ints[i].lo, ints[i].hi, &x, err))) return rc;
        *ints[i].dst = (int)x;
    }
    if ((rc = get_int_in(vc, "vision_config.", "hidden_size", 1, 1 << 16, &v->hidden, err)) ||
        (rc = get_int_in(vc, "vision_config.", "intermediate_size", 1, 1 << 20, &v->intermediate, err)) ||
        (rc = get_int_in(vc, "vision_config.", "position_embedding_size", 1, 1 << 24, &v->pos_size, err)))
        return rc;
    if (v->head_dim % 4)
        return g4_err_set(err, G4_EFORMAT, "config.json: vision_config.head_dim = %d: the 2D RoPE needs a multiple of 4 (two axes, NeoX halves)", v->head_dim);
    if (v->n_kv_heads != v->n_heads)
        return g4_err_set(err, G4_EUNSUPPORTED, "config.json: vision_config has %d KV heads for %d query heads: grouped-query attention in the vision tower is not supported",
                          v->n_kv_heads, v->n_heads);
    if ((rc = get_num_in(vc, "vision_config.", "rms_norm_eps", &v->rms_norm_eps, err))) return rc;
    if (!(v->rms_norm_eps > 0 && v->rms_norm_eps < 1)) return g4_err_set(err, G4_EFORMAT, "config.json: vision_config.rms_norm_eps must be in (0, 1)");
    json_t *rp = json_object_get(vc, "rope_parameters");
    json_t *rt = json_object_get(rp, "rope_type"), *th = json_object_get(rp, "rope_theta");
    if (!json_is_object(rp) || !json_is_number(th))
        return g4_err_set(err, G4_EFORMAT, "config.json: vision_config.rope_parameters must be an object with a numeric rope_theta");
    if (rt && (!json_is_string(rt) || strcmp(json_string_value(rt), "default") != 0))
        return g4_err_set(err, G4_EUNSUPPORTED, "config.json: vision_config.rope_parameters.rope_type must be \"default\"");
    v->rope_theta = json_number_value(th);
    if (!(v->rope_theta > 0 && v->rope_theta < 1e30)) return g4_err_set(err, G4_EFORMAT, "config.json: vision_config rope_theta must be positive");
    const char *ids[3] = {"boi_token_id", "eoi_token_id", "image_token_id"};
    int *dst[3] = {&v->boi_token_id, &v->eoi_token_id, &v->image_token_id};
    for (int i = 0; i < 3; i++) {
        if (!json_object_get(top, ids[i]))
            return g4_err_set(err, G4_EFORMAT, "config.json: a config with a vision_config needs \"%s\"", ids[i]);
        /* not checked against vocab_size: make_tiny.py's checkpoints keep the 31B's ids beyond
         * their 512-token vocabulary; a prompt that uses them is refused when it is built */
        if ((rc = get_int(top, ids[i], 0, INT32_MAX, &x, err))) return rc;
        *dst[i] = (int)x;
    }
    if (v->boi_token_id == v->eoi_token_id || v->boi_token_id == v->image_token_id || v->eoi_token_id == v->image_token_id)
        return g4_err_set(err, G4_EFORMAT, "config.json: boi_token_id, eoi_token_id and image_token_id must differ");
    v->has_vision = 1;
    return G4_OK;
}

int g4_config_parse(const char *text, size_t len, g4_config *cfg, g4_err *err) {
    memset(cfg, 0, sizeof *cfg);
    json_error_t je;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!root) return g4_err_set(err, G4_EFORMAT, "config.json: malformed JSON at line %d: %s", je.line, je.text);
    int rc = G4_OK;
    if (!json_is_object(root)) { rc = g4_err_set(err, G4_EFORMAT, "config.json: not a JSON object"); goto out; }
    json_t *arch = json_array_get(json_object_get(root, "architectures"), 0);
    snprintf(cfg->architecture, sizeof cfg->architecture, "%s", json_is_string(arch) ? json_string_value(arch) : "");
    json_t *tc = json_object_get(root, "text_config");
    json_t *mt = json_object_get(root, "model_type");
    if (json_is_object(tc)) {
        if (!json_is_string(mt) || strcmp(json_string_value(mt), "gemma4") != 0) {
            rc = g4_err_set(err, G4_EUNSUPPORTED, "config.json: model_type must be \"gemma4\" for a multimodal config");
            goto out;
        }
        if (arch && strcmp(cfg->architecture, "Gemma4ForConditionalGeneration") != 0) {
            rc = g4_err_set(err, G4_EUNSUPPORTED, "config.json: architecture %s is not supported (Gemma4ForConditionalGeneration, Gemma4ForCausalLM)", cfg->architecture);
            goto out;
        }
        cfg->multimodal = 1;
        rc = parse_text(tc, root, cfg, err);
        json_t *vc = json_object_get(root, "vision_config");
        if (rc == G4_OK && vc && !json_is_null(vc)) {
            if (!json_is_object(vc)) rc = g4_err_set(err, G4_EFORMAT, "config.json: vision_config must be an object or null");
            else rc = parse_vision(vc, root, cfg, err);
        }
    } else if (json_is_string(mt) && strcmp(json_string_value(mt), "gemma4_text") == 0) {
        if (arch && strcmp(cfg->architecture, "Gemma4ForCausalLM") != 0) {
            rc = g4_err_set(err, G4_EUNSUPPORTED, "config.json: architecture %s is not supported (Gemma4ForConditionalGeneration, Gemma4ForCausalLM)", cfg->architecture);
            goto out;
        }
        rc = parse_text(root, NULL, cfg, err);
    } else {
        rc = g4_err_set(err, G4_EUNSUPPORTED, "config.json: not a Gemma-4 config (model_type gemma4 with text_config, or gemma4_text)");
    }
    if (rc == G4_OK) {
        cfg->json = malloc(len + 1);
        if (!cfg->json) rc = g4_err_set(err, G4_ENOMEM, "out of memory");
        else { memcpy(cfg->json, text, len); cfg->json[len] = 0; }
    }
out:
    json_decref(root);
    if (rc != G4_OK) g4_config_free(cfg);
    return rc;
}

int g4_config_load(const char *path, g4_config *cfg, g4_err *err) {
    char *text;
    size_t len;
    memset(cfg, 0, sizeof *cfg);
    int rc = g4_read_file(path, &text, &len, err);
    if (rc) return rc;
    rc = g4_config_parse(text, len, cfg, err);
    free(text);
    if (rc) g4_err_prefix(err, "%s: ", path);
    return rc;
}

void g4_config_free(g4_config *cfg) {
    free(cfg->layers);
    free(cfg->json);
    memset(cfg, 0, sizeof *cfg);
}

void g4_config_rope_inv_freq(const g4_config *cfg, int l, float *inv) {
    const g4_layer_cfg *lc = &cfg->layers[l];
    int half = lc->head_dim / 2;
    float base = (float)lc->rope_theta;
    if (lc->rope_kind == 0) {
        for (int j = 0; j < half; j++)
            inv[j] = 1.0f / powf(base, (float)(2 * j) / (float)cfg->head_dim);
        return;
    }
    /* proportional: rope_angles = int(partial * head_dim // 2) frequency slots over the FULL
     * head_dim exponent, the rest zero (those dims pass through unrotated) */
    int angles = (int)floor(lc->rope_partial * lc->head_dim / 2.0);
    float factor = (float)lc->rope_factor;
    for (int j = 0; j < half; j++) {
        float v = j < angles ? 1.0f / powf(base, (float)(2 * j) / (float)lc->head_dim) : 0.0f;
        inv[j] = v / factor;
    }
}

void g4_vision_rope_inv_freq(const g4_vision_cfg *v, float *inv) {
    const int sd = v->head_dim / 2;
    for (int j = 0; j < sd / 2; j++) inv[j] = 1.0f / powf((float)v->rope_theta, (float)(2 * j) / (float)sd);
}

float g4_config_embed_scale(const g4_config *cfg) {
    return (float)sqrt((double)cfg->hidden_size);
}
