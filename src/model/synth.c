/* synth.c — writes random-weight checkpoints (see synth.h). Owns the config cut (layers,
 * layer_types), the deterministic generator and the safetensors/index writer. Knows tensor names
 * only through model/tensors.h; knows nothing about TP or artifacts.
 *
 * Values: matrices ~ N(0, 0.02) approximated by a scaled sum of four uniforms (Irwin-Hall, fast
 * and exact-bit deterministic), norm weights 1 + N(0, 0.05) the same way, layer_scalar uniform in
 * [0.5, 1.5]. Each tensor's stream is seeded from (seed, name), so files do not depend on the
 * shard size. */
#include "model/synth.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/mapfile.h"
#include "kernels/kernels.h"
#include "model/compressed.h"
#include "model/config.h"
#include "model/tensors.h"

#define BUF_ELEMS ((size_t)2 << 20) /* 4 MiB of bf16 */

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t fnv1a(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    return h;
}

/* ~N(0,1): four 16-bit uniforms, centred and scaled to unit variance. */
static float approx_normal(uint64_t r) {
    uint32_t s = (uint32_t)(r & 0xffff) + (uint32_t)((r >> 16) & 0xffff) + (uint32_t)((r >> 32) & 0xffff) + (uint32_t)(r >> 48);
    return ((float)s / 65536.0f - 2.0f) * 1.7320508f;
}

/* Cuts the config to `layers` layers in place (text_config or the root). */
static int cut_layers(json_t *root, int layers, g4_err *err) {
    json_t *tc = json_object_get(root, "text_config");
    if (!json_is_object(tc)) tc = root;
    json_t *lt = json_object_get(tc, "layer_types");
    json_t *nl = json_object_get(tc, "num_hidden_layers");
    if (!json_is_array(lt) || !json_is_integer(nl)) return g4_err_set(err, G4_EFORMAT, "config: no layer_types list or num_hidden_layers");
    if (layers > (int)json_array_size(lt))
        return g4_err_set(err, G4_EINVAL, "--layers %d exceeds the %zu layers of the config", layers, json_array_size(lt));
    while ((int)json_array_size(lt) > layers) json_array_remove(lt, json_array_size(lt) - 1);
    json_array_set_new(lt, (size_t)layers - 1, json_string("full_attention"));
    json_object_set_new(tc, "num_hidden_layers", json_integer(layers));
    return G4_OK;
}

typedef struct { int first, count; uint64_t bytes; } shard;

/* One safetensors tensor to write: a whole spec (bf16), or one part of a packed W4A16 matrix. */
enum { PART_DENSE, PART_PACKED, PART_SCALE, PART_SHAPE };
typedef struct { int spec, part; uint64_t bytes; } entry;

/* the text model's matrices but the embedding (the vision tower stays bf16, as in QAT releases) */
static int quantized(const g4_synth_opts *o, const g4_tensor_spec *s) {
    return o->format != G4_SYNTH_BF16 && g4_tensor_kind_is_matrix(s->kind) && s->kind != G4_T_EMBED && !g4_tensor_kind_is_vision(s->kind);
}

static uint64_t part_bytes(const g4_tensor_spec *s, int part) {
    const uint64_t n = (uint64_t)g4_tensor_spec_numel(s);
    switch (part) {
    case PART_PACKED: return n / 2;
    case PART_SCALE: return n / 32 * 2;
    case PART_SHAPE: return 8;
    default: return n * 2;
    }
}

/* One 32-block on the Q4_0 grid: levels q in -8..7 (roughly normal, sd ~2.5) and a scale d with 4
 * significant bits, so every d*q is exact in bf16 and d exact in f16 (as QAT weights are). */
static float grid_block(uint64_t *st, int8_t q[32]) {
    uint64_t r = splitmix(st);
    float d = 0.0064f * (0.75f + 0.5f * (float)(r >> 40) / 16777216.0f);
    union { float f; uint32_t u; } v = {d};
    v.u &= 0xfff00000u; /* 1 + 3 mantissa bits */
    for (int i = 0; i < 32; i += 4) {
        r = splitmix(st);
        for (int k = 0; k < 4; k++) {
            uint32_t x = (uint32_t)(r >> (16 * k)) & 0xffff;
            int sum = (int)(x & 15) + (int)(x >> 4 & 15) + (int)(x >> 8 & 15) + (int)(x >> 12);
            int l = (int)lrintf((float)(sum - 30) / 3.7f);
            q[i + k] = (int8_t)(l < -8 ? -8 : l > 7 ? 7 : l);
        }
    }
    return v.f;
}

static int write_all(FILE *f, const void *p, size_t n) { return fwrite(p, 1, n, f) == n; }

/* Writes the data of one entry; buf holds BUF_ELEMS uint16. Each spec's stream is seeded from
 * (seed, name), so a packed matrix's levels and scales come from the same stream. */
static int write_entry(FILE *f, const g4_synth_opts *o, const g4_tensor_spec *s, int part, uint16_t *buf) {
    uint64_t st = o->seed ^ fnv1a(s->name);
    if (part == PART_SHAPE) {
        int32_t shp[2] = {(int32_t)s->shape[0], (int32_t)s->shape[1]};
        return write_all(f, shp, sizeof shp);
    }
    if (quantized(o, s)) { /* block by block: 32 levels and a scale */
        const uint64_t nb = (uint64_t)g4_tensor_spec_numel(s) / 32;
        const size_t per = BUF_ELEMS / 32; /* blocks per buffer */
        int8_t q[32];
        int ok = 1;
        for (uint64_t b0 = 0; ok && b0 < nb; b0 += per) {
            size_t m = nb - b0 < per ? (size_t)(nb - b0) : per, bytes = 0;
            for (size_t j = 0; j < m; j++) {
                float d = grid_block(&st, q);
                if (part == PART_SCALE) { buf[j] = g4_f32_to_bf16(d); bytes += 2; }
                else if (part == PART_PACKED) { g4_ct_pack_row(q, 32, (int32_t *)((uint8_t *)buf + 16 * j)); bytes += 16; }
                else { for (int i = 0; i < 32; i++) buf[32 * j + (size_t)i] = g4_f32_to_bf16(d * (float)q[i]); bytes += 64; }
            }
            ok = write_all(f, buf, bytes);
        }
        return ok;
    }
    uint64_t left = (uint64_t)g4_tensor_spec_numel(s);
    int mat = g4_tensor_kind_is_matrix(s->kind) || s->kind == G4_VT_POS_TABLE || s->kind == G4_VT_STD_BIAS, ok = 1;
    while (ok && left > 0) {
        size_t m = left < BUF_ELEMS ? (size_t)left : BUF_ELEMS;
        for (size_t j = 0; j < m; j++) {
            uint64_t r = splitmix(&st);
            float v;
            if (mat) v = 0.02f * approx_normal(r);
            else if (s->kind == G4_T_SCALAR) v = 0.5f + (float)(r >> 40) / 16777216.0f;
            else if (s->kind == G4_VT_CLIP) v = s->sub % 2 ? 8.0f : -8.0f; /* wide clamps: min, max, min, max */
            else v = 1.0f + 0.05f * approx_normal(r);
            buf[j] = g4_f32_to_bf16(v);
        }
        ok = write_all(f, buf, m * 2);
        left -= m;
    }
    return ok;
}

/* The compressed-tensors quantization_config of a W4A16 checkpoint (as llm-compressor writes). */
static json_t *w4a16_config(void) {
    const char *text =
        "{\"quant_method\":\"compressed-tensors\",\"format\":\"pack-quantized\",\"quantization_status\":\"compressed\","
        "\"config_groups\":{\"group_0\":{\"targets\":[\"Linear\"],\"input_activations\":null,\"output_activations\":null,"
        "\"weights\":{\"num_bits\":4,\"type\":\"int\",\"symmetric\":true,\"strategy\":\"group\",\"group_size\":32,"
        "\"dynamic\":false,\"actorder\":null,\"observer\":\"minmax\"}}},"
        "\"ignore\":[\"lm_head\"],\"kv_cache_scheme\":null,\"sparsity_config\":{}}";
    return json_loads(text, 0, NULL);
}

/* processor_config.json as google/gemma-4-31B-it's (the keys of tests/data/vision/tiny_vision's),
 * with the config's patch and pooling sizes. */
static int write_processor_config(const char *dir, const g4_vision_cfg *v, g4_err *err) {
    char text[1024];
    snprintf(text, sizeof text,
             "{\n  \"audio_ms_per_token\": 40,\n  \"audio_seq_length\": 750,\n  \"image_processor\": {\n    \"do_convert_rgb\": true,\n"
             "    \"do_normalize\": false,\n    \"do_rescale\": true,\n    \"do_resize\": true,\n    \"image_mean\": [0.0, 0.0, 0.0],\n"
             "    \"image_processor_type\": \"Gemma4ImageProcessor\",\n    \"image_seq_length\": 280,\n    \"image_std\": [1.0, 1.0, 1.0],\n"
             "    \"max_soft_tokens\": 280,\n    \"patch_size\": %d,\n    \"pooling_kernel_size\": %d,\n    \"resample\": 3,\n"
             "    \"rescale_factor\": 0.00392156862745098\n  },\n  \"image_seq_length\": 280,\n  \"processor_class\": \"Gemma4Processor\"\n}\n",
             v->patch_size, v->pooling);
    char *path = g4_path_join(dir, "processor_config.json");
    int rc = g4_write_file_atomic(path, text, strlen(text), err);
    free(path);
    return rc;
}

int g4_synth_write(const g4_synth_opts *o, g4_err *err) {
    if (!o->like || !o->out_dir) return g4_err_set(err, G4_EINVAL, "synth needs --like CONFIG and --out DIR");
    json_error_t je;
    json_t *root = json_load_file(o->like, JSON_REJECT_DUPLICATES, &je);
    if (!root) return g4_err_set(err, G4_EFORMAT, "%s: %s (line %d)", o->like, je.text, je.line);
    int rc = G4_OK;
    char *text = NULL, *path = NULL;
    g4_config cfg = {0};
    g4_tensor_spec *specs = NULL;
    shard *sh = NULL;
    entry *ents = NULL;
    uint16_t *buf = NULL;
    FILE *f = NULL;
    json_t *wmap = NULL;
    int n = 0, n_sh = 0;
    if (o->layers > 0 && (rc = cut_layers(root, o->layers, err))) goto done;
    if (o->format == G4_SYNTH_W4A16) json_object_set_new(root, "quantization_config", w4a16_config());
    else json_object_del(root, "quantization_config");
    text = json_dumps(root, JSON_INDENT(2));
    if ((rc = g4_config_parse(text, strlen(text), &cfg, err))) { g4_err_prefix(err, "%s: ", o->like); goto done; }
    if ((rc = g4_tensor_specs(&cfg, &specs, &n, err))) goto done;
    int n_text = n;
    if (o->vision) { /* the tower after the text tensors, its names under "model." */
        if (!cfg.vision.has_vision) { rc = g4_err_set(err, G4_EINVAL, "--vision: %s has no vision_config", o->like); goto done; }
        g4_tensor_spec *vs;
        int nv;
        if ((rc = g4_vision_tensor_specs(&cfg, &vs, &nv, err))) goto done;
        g4_tensor_spec *all = realloc(specs, sizeof *specs * (size_t)(n + nv));
        if (!all) { free(vs); rc = g4_err_set(err, G4_ENOMEM, "out of memory"); goto done; }
        specs = all;
        memcpy(specs + n, vs, sizeof *vs * (size_t)nv);
        free(vs);
        n += nv;
    }
    if (mkdir(o->out_dir, 0755) != 0 && errno != EEXIST) { rc = g4_err_set(err, G4_EIO, "cannot create %s: %s", o->out_dir, strerror(errno)); goto done; }
    path = g4_path_join(o->out_dir, "config.json");
    size_t tl = strlen(text);
    {
        char *t2 = malloc(tl + 2);
        memcpy(t2, text, tl);
        t2[tl] = '\n';
        rc = g4_write_file_atomic(path, t2, tl + 1, err);
        free(t2);
        free(path);
        path = NULL;
        if (rc) goto done;
    }
    if (o->vision && (rc = write_processor_config(o->out_dir, &cfg.vision, err))) goto done;
    const char *text_prefix = cfg.multimodal ? "model.language_model." : "model.";
    /* the tensors to write (a packed matrix is three), grouped into files of at most shard_bytes */
    uint64_t limit = o->shard_bytes ? o->shard_bytes : (uint64_t)2000 * 1000 * 1000;
    int n_ent = 0;
    ents = calloc((size_t)n * 3, sizeof *ents);
    sh = calloc((size_t)n * 3, sizeof *sh);
    buf = malloc(BUF_ELEMS * sizeof *buf);
    if (!sh || !buf || !ents) { rc = g4_err_set(err, G4_ENOMEM, "out of memory"); goto done; }
    for (int i = 0; i < n; i++) {
        if (o->format == G4_SYNTH_W4A16 && quantized(o, &specs[i]))
            for (int part = PART_PACKED; part <= PART_SHAPE; part++) ents[n_ent++] = (entry){i, part, part_bytes(&specs[i], part)};
        else ents[n_ent++] = (entry){i, PART_DENSE, part_bytes(&specs[i], PART_DENSE)};
    }
    for (int i = 0; i < n_ent; i++) {
        uint64_t b = ents[i].bytes;
        if (n_sh == 0 || (sh[n_sh - 1].bytes + b > limit && sh[n_sh - 1].count > 0)) sh[n_sh++] = (shard){i, 0, 0};
        sh[n_sh - 1].count++;
        sh[n_sh - 1].bytes += b;
    }
    static const char *const part_suffix[] = {"weight", "weight_packed", "weight_scale", "weight_shape"};
    static const char *const part_dtype[] = {"BF16", "I32", "BF16", "I32"};
    wmap = json_object();
    uint64_t total = 0;
    for (int k = 0; k < n_sh && rc == G4_OK; k++) {
        char fname[64], full[192];
        snprintf(fname, sizeof fname, "model-%05d-of-%05d.safetensors", k + 1, n_sh);
        json_t *hdr = json_object();
        uint64_t off = 0;
        for (int i = sh[k].first; i < sh[k].first + sh[k].count; i++) {
            const g4_tensor_spec *s = &specs[ents[i].spec];
            const int part = ents[i].part;
            uint64_t b = ents[i].bytes;
            json_t *t = json_object();
            json_object_set_new(t, "dtype", json_string(part_dtype[part]));
            json_t *shape = json_array();
            if (part == PART_SHAPE) json_array_append_new(shape, json_integer(2));
            else
                for (int d = 0; d < s->ndim; d++)
                    json_array_append_new(shape, json_integer(d == 1 && part == PART_PACKED ? s->shape[1] / 8 : d == 1 && part == PART_SCALE ? s->shape[1] / 32 : s->shape[d]));
            json_object_set_new(t, "shape", shape);
            json_t *offs = json_array();
            json_array_append_new(offs, json_integer((json_int_t)off));
            json_array_append_new(offs, json_integer((json_int_t)(off + b)));
            json_object_set_new(t, "data_offsets", offs);
            const char *prefix = ents[i].spec < n_text ? text_prefix : "model.";
            if (part == PART_DENSE) snprintf(full, sizeof full, "%s%s", prefix, s->name);
            else snprintf(full, sizeof full, "%s%.*s%s", prefix, (int)(strlen(s->name) - strlen("weight")), s->name, part_suffix[part]);
            json_object_set_new(hdr, full, t);
            json_object_set_new(wmap, full, json_string(fname));
            off += b;
        }
        json_t *meta = json_object();
        json_object_set_new(meta, "format", json_string("pt"));
        json_object_set_new(hdr, "__metadata__", meta);
        char *h = json_dumps(hdr, JSON_COMPACT);
        json_decref(hdr);
        size_t hl = strlen(h), padded = (hl + 7) / 8 * 8;
        path = g4_path_join(o->out_dir, fname);
        if (!(f = fopen(path, "wb"))) { rc = g4_err_set(err, G4_EIO, "cannot create %s: %s", path, strerror(errno)); free(h); goto done; }
        uint8_t len8[8];
        for (int b = 0; b < 8; b++) len8[b] = (uint8_t)((uint64_t)padded >> (8 * b));
        int ok = write_all(f, len8, 8) && write_all(f, h, hl);
        for (size_t p = hl; ok && p < padded; p++) ok = fputc(' ', f) != EOF;
        free(h);
        for (int i = sh[k].first; ok && i < sh[k].first + sh[k].count; i++) ok = write_entry(f, o, &specs[ents[i].spec], ents[i].part, buf);
        if (fclose(f) != 0) ok = 0;
        f = NULL;
        if (!ok) rc = g4_err_set(err, G4_EIO, "writing %s: %s", path, strerror(errno));
        free(path);
        path = NULL;
        total += sh[k].bytes;
    }
    if (rc) goto done;
    {
        json_t *idx = json_object(), *meta = json_object();
        json_object_set_new(meta, "total_size", json_integer((json_int_t)total));
        json_object_set_new(idx, "metadata", meta);
        json_object_set(idx, "weight_map", wmap);
        char *t = json_dumps(idx, JSON_INDENT(2));
        json_decref(idx);
        path = g4_path_join(o->out_dir, "model.safetensors.index.json");
        rc = g4_write_file_atomic(path, t, strlen(t), err);
        free(t);
    }
done:
    if (f) fclose(f);
    free(path);
    free(text);
    free(specs);
    free(sh);
    free(ents);
    free(buf);
    json_decref(wmap);
    json_decref(root);
    if (cfg.layers || cfg.json) g4_config_free(&cfg);
    return rc;
}
