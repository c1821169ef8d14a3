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

static int write_all(FILE *f, const void *p, size_t n) { return fwrite(p, 1, n, f) == n; }

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
    uint16_t *buf = NULL;
    FILE *f = NULL;
    json_t *wmap = NULL;
    int n = 0, n_sh = 0;
    if (o->layers > 0 && (rc = cut_layers(root, o->layers, err))) goto done;
    text = json_dumps(root, JSON_INDENT(2));
    if ((rc = g4_config_parse(text, strlen(text), &cfg, err))) { g4_err_prefix(err, "%s: ", o->like); goto done; }
    if ((rc = g4_tensor_specs(&cfg, &specs, &n, err))) goto done;
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
    const char *prefix = cfg.multimodal ? "model.language_model." : "model.";
    /* group tensors into files of at most shard_bytes */
    uint64_t limit = o->shard_bytes ? o->shard_bytes : (uint64_t)2000 * 1000 * 1000;
    sh = calloc((size_t)n, sizeof *sh);
    buf = malloc(BUF_ELEMS * sizeof *buf);
    if (!sh || !buf) { rc = g4_err_set(err, G4_ENOMEM, "out of memory"); goto done; }
    for (int i = 0; i < n; i++) {
        uint64_t b = (uint64_t)g4_tensor_spec_numel(&specs[i]) * 2;
        if (n_sh == 0 || (sh[n_sh - 1].bytes + b > limit && sh[n_sh - 1].count > 0)) sh[n_sh++] = (shard){i, 0, 0};
        sh[n_sh - 1].count++;
        sh[n_sh - 1].bytes += b;
    }
    wmap = json_object();
    uint64_t total = 0;
    for (int k = 0; k < n_sh && rc == G4_OK; k++) {
        char fname[64], full[160];
        snprintf(fname, sizeof fname, "model-%05d-of-%05d.safetensors", k + 1, n_sh);
        json_t *hdr = json_object();
        uint64_t off = 0;
        for (int i = sh[k].first; i < sh[k].first + sh[k].count; i++) {
            const g4_tensor_spec *s = &specs[i];
            uint64_t b = (uint64_t)g4_tensor_spec_numel(s) * 2;
            json_t *t = json_object();
            json_object_set_new(t, "dtype", json_string("BF16"));
            json_t *shape = json_array();
            for (int d = 0; d < s->ndim; d++) json_array_append_new(shape, json_integer(s->shape[d]));
            json_object_set_new(t, "shape", shape);
            json_t *offs = json_array();
            json_array_append_new(offs, json_integer((json_int_t)off));
            json_array_append_new(offs, json_integer((json_int_t)(off + b)));
            json_object_set_new(t, "data_offsets", offs);
            snprintf(full, sizeof full, "%s%s", prefix, s->name);
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
        for (int i = sh[k].first; ok && i < sh[k].first + sh[k].count; i++) {
            const g4_tensor_spec *s = &specs[i];
            uint64_t st = o->seed ^ fnv1a(s->name);
            uint64_t left = (uint64_t)g4_tensor_spec_numel(s);
            int mat = g4_tensor_kind_is_matrix(s->kind);
            while (ok && left > 0) {
                size_t m = left < BUF_ELEMS ? (size_t)left : BUF_ELEMS;
                for (size_t j = 0; j < m; j++) {
                    uint64_t r = splitmix(&st);
                    float v;
                    if (mat) v = 0.02f * approx_normal(r);
                    else if (s->kind == G4_T_SCALAR) v = 0.5f + (float)(r >> 40) / 16777216.0f;
                    else v = 1.0f + 0.05f * approx_normal(r);
                    buf[j] = g4_f32_to_bf16(v);
                }
                ok = write_all(f, buf, m * 2);
                left -= m;
            }
        }
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
    free(buf);
    json_decref(wmap);
    json_decref(root);
    if (cfg.layers || cfg.json) g4_config_free(&cfg);
    return rc;
}
