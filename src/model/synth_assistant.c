/* synth_assistant.c — writes a random-weight MTP assistant for a target config (see
 * synth_assistant.h). Values: matrices ~ N(0, 0.02), norm weights 1 + N(0, 0.05), layer_scalar
 * in [0.5, 1.5], each tensor's stream seeded from (seed, name). */
#include "model/synth_assistant.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/mapfile.h"
#include "kernels/kernels.h"
#include "model/config.h"

enum { T_MAT, T_NORM, T_SCALAR };
typedef struct { char name[96]; int64_t rows, cols; int kind; } asst_tensor;

static uint64_t mix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static float value(uint64_t *st, int kind) {
    const uint64_t r = mix(st);
    if (kind == T_SCALAR) return 0.5f + (float)(r >> 40) / 16777216.0f;
    /* ~N(0,1) from four 16-bit uniforms */
    const uint32_t s = (uint32_t)(r & 0xffff) + (uint32_t)((r >> 16) & 0xffff) + (uint32_t)((r >> 32) & 0xffff) + (uint32_t)(r >> 48);
    const float n = ((float)s / 65536.0f - 2.0f) * 1.7320508f;
    return kind == T_MAT ? 0.02f * n : 1.0f + 0.05f * n;
}

static int list_tensors(const g4_config *t, int64_t H, int64_t I, int L, const int *full, asst_tensor *out) {
    int n = 0;
#define ADD(r, c, k, ...) do { snprintf(out[n].name, sizeof out[n].name, __VA_ARGS__); out[n].rows = (r); out[n].cols = (c); out[n].kind = (k); n++; } while (0)
    ADD(t->vocab_size, H, T_MAT, "model.embed_tokens.weight");
    ADD(H, 0, T_NORM, "model.norm.weight");
    ADD(H, 2 * t->hidden_size, T_MAT, "pre_projection.weight");
    ADD(t->hidden_size, H, T_MAT, "post_projection.weight");
    for (int l = 0; l < L; l++) {
        const int64_t qd = (int64_t)t->n_heads * (full[l] ? t->global_head_dim : t->head_dim);
        ADD(H, 0, T_NORM, "model.layers.%d.input_layernorm.weight", l);
        ADD(qd, H, T_MAT, "model.layers.%d.self_attn.q_proj.weight", l);
        ADD(full[l] ? t->global_head_dim : t->head_dim, 0, T_NORM, "model.layers.%d.self_attn.q_norm.weight", l);
        ADD(H, qd, T_MAT, "model.layers.%d.self_attn.o_proj.weight", l);
        ADD(H, 0, T_NORM, "model.layers.%d.post_attention_layernorm.weight", l);
        ADD(H, 0, T_NORM, "model.layers.%d.pre_feedforward_layernorm.weight", l);
        ADD(I, H, T_MAT, "model.layers.%d.mlp.gate_proj.weight", l);
        ADD(I, H, T_MAT, "model.layers.%d.mlp.up_proj.weight", l);
        ADD(H, I, T_MAT, "model.layers.%d.mlp.down_proj.weight", l);
        ADD(H, 0, T_NORM, "model.layers.%d.post_feedforward_layernorm.weight", l);
        ADD(1, 0, T_SCALAR, "model.layers.%d.layer_scalar", l);
    }
#undef ADD
    return n;
}

static int write_safetensors(const char *path, const asst_tensor *ts, int n, uint64_t seed, g4_err *err) {
    json_t *hdr = json_object(), *meta = json_object();
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        const uint64_t b = (uint64_t)ts[i].rows * (uint64_t)(ts[i].cols ? ts[i].cols : 1) * 2;
        json_t *shape = ts[i].cols ? json_pack("[I,I]", (json_int_t)ts[i].rows, (json_int_t)ts[i].cols) : json_pack("[I]", (json_int_t)ts[i].rows);
        json_object_set_new(hdr, ts[i].name, json_pack("{s:s,s:o,s:[I,I]}", "dtype", "BF16", "shape", shape, "data_offsets", (json_int_t)off,
                                                       (json_int_t)(off + b)));
        off += b;
    }
    json_object_set_new(meta, "format", json_string("pt"));
    json_object_set_new(hdr, "__metadata__", meta);
    char *h = json_dumps(hdr, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(hdr);
    FILE *f = fopen(path, "wb");
    if (!f) { free(h); return g4_err_set(err, G4_EIO, "cannot create %s: %s", path, strerror(errno)); }
    const size_t hl = strlen(h), padded = (hl + 7) / 8 * 8;
    uint8_t len8[8];
    for (int b = 0; b < 8; b++) len8[b] = (uint8_t)((uint64_t)padded >> (8 * b));
    int ok = fwrite(len8, 1, 8, f) == 8 && fwrite(h, 1, hl, f) == hl;
    for (size_t p = hl; ok && p < padded; p++) ok = fputc(' ', f) != EOF;
    free(h);
    enum { CHUNK = 1 << 20 };
    uint16_t *buf = malloc(sizeof(uint16_t) * CHUNK);
    ok = ok && buf;
    for (int i = 0; ok && i < n; i++) {
        uint64_t st = seed;
        for (const char *c = ts[i].name; *c; c++) st = (st ^ (uint8_t)*c) * 0x100000001b3ull;
        for (uint64_t left = (uint64_t)ts[i].rows * (uint64_t)(ts[i].cols ? ts[i].cols : 1); ok && left;) {
            const size_t m = left < CHUNK ? (size_t)left : CHUNK;
            for (size_t j = 0; j < m; j++) buf[j] = g4_f32_to_bf16(value(&st, ts[i].kind));
            ok = fwrite(buf, 2, m, f) == m;
            left -= m;
        }
    }
    free(buf);
    if (fclose(f) != 0) ok = 0;
    return ok ? G4_OK : g4_err_set(err, G4_EIO, "writing %s: %s", path, strerror(errno));
}

int g4_synth_assistant_write(const g4_synth_asst_opts *o, g4_err *err) {
    if (!o->like || !o->out_dir) return g4_err_set(err, G4_EINVAL, "synth --assistant needs --like TARGET_CONFIG and --out DIR");
    g4_config t;
    int rc = g4_config_load(o->like, &t, err);
    if (rc) return rc;
    json_error_t je;
    json_t *root = json_load_file(o->like, 0, &je), *out = NULL;
    const int64_t H = o->hidden > 0 ? o->hidden : 1024, I = o->intermediate > 0 ? o->intermediate : 8 * H;
    const int L = o->layers > 0 ? o->layers : 4;
    int has_slide = 0, *full = calloc((size_t)L, sizeof *full);
    asst_tensor *ts = calloc((size_t)(4 + 11 * L), sizeof *ts);
    char *path = NULL, *text = NULL;
    if (!root || !full || !ts) { rc = g4_err_set(err, G4_ENOMEM, "out of memory"); goto done; }
    for (int l = 0; l < t.n_layers; l++) has_slide |= !t.layers[l].full;
    json_t *tc = json_deep_copy(json_is_object(json_object_get(root, "text_config")) ? json_object_get(root, "text_config") : root);
    json_t *lt = json_array();
    for (int l = 0; l < L; l++) {
        full[l] = l == L - 1 || !has_slide;
        json_array_append_new(lt, json_string(full[l] ? "full_attention" : "sliding_attention"));
    }
    json_object_set_new(tc, "layer_types", lt);
    json_object_set_new(tc, "hidden_size", json_integer(H));
    json_object_set_new(tc, "intermediate_size", json_integer(I));
    json_object_set_new(tc, "num_hidden_layers", json_integer(L));
    json_object_set_new(tc, "num_kv_shared_layers", json_integer(L));
    json_object_set_new(tc, "final_logit_softcapping", json_null());
    json_object_set_new(tc, "hidden_size_per_layer_input", json_integer(0));
    json_object_set_new(tc, "vocab_size_per_layer_input", json_integer(0));
    json_object_set_new(tc, "model_type", json_string("gemma4_text"));
    json_object_del(tc, "quantization_config");
    out = json_pack("{s:[s],s:s,s:I,s:b,s:i,s:i,s:b,s:s,s:o}", "architectures", "Gemma4AssistantForCausalLM", "model_type", "gemma4_assistant",
                    "backbone_hidden_size", (json_int_t)t.hidden_size, "use_ordered_embeddings", 0, "num_centroids", 2048,
                    "centroid_intermediate_top_k", 32, "tie_word_embeddings", 1, "dtype", "bfloat16", "text_config", tc);
    if (mkdir(o->out_dir, 0755) != 0 && errno != EEXIST) { rc = g4_err_set(err, G4_EIO, "cannot create %s: %s", o->out_dir, strerror(errno)); goto done; }
    text = json_dumps(out, JSON_INDENT(2));
    path = g4_path_join(o->out_dir, "config.json");
    if ((rc = g4_write_file_atomic(path, text, strlen(text), err))) goto done;
    free(path);
    path = g4_path_join(o->out_dir, "model.safetensors");
    rc = write_safetensors(path, ts, list_tensors(&t, H, I, L, full, ts), o->seed, err);
done:
    free(path);
    free(text);
    free(full);
    free(ts);
    json_decref(out);
    json_decref(root);
    g4_config_free(&t);
    return rc;
}
