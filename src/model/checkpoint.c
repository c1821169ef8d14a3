/* checkpoint.c — opens and validates a Hugging Face checkpoint directory (see checkpoint.h). */
#include "model/checkpoint.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "base/mapfile.h"
#include "kernels/kernels.h"
#include "model/compressed.h"

static const char *const skip_prefixes[] = {
    "model.vision_tower.", "model.embed_vision.", "model.audio_tower.", "model.embed_audio.",
};
enum { N_VISION_PREFIXES = 2 }; /* the first two: the vision tower's */

static int starts_with(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }

static int is_skipped(const char *name) {
    for (size_t i = 0; i < sizeof skip_prefixes / sizeof *skip_prefixes; i++)
        if (starts_with(name, skip_prefixes[i])) return 1;
    return 0;
}

static int is_vision(const char *name) {
    for (int i = 0; i < N_VISION_PREFIXES; i++)
        if (starts_with(name, skip_prefixes[i])) return 1;
    return 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Shard file names from the index, sorted and unique; every weight_map value checked. */
static int read_index(const char *dir, json_t **index_out, char ***names, int *n_names, g4_err *err) {
    char *path = g4_path_join(dir, "model.safetensors.index.json");
    char *text;
    size_t len;
    int rc = g4_read_file(path, &text, &len, err);
    if (rc) { free(path); return rc; }
    json_error_t je;
    json_t *idx = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    free(text);
    if (!idx) {
        rc = g4_err_set(err, G4_EFORMAT, "%s: malformed JSON at line %d: %s", path, je.line, je.text);
        free(path);
        return rc;
    }
    json_t *wm = json_object_get(idx, "weight_map");
    if (!json_is_object(wm)) {
        json_decref(idx);
        rc = g4_err_set(err, G4_EFORMAT, "%s: no \"weight_map\" object", path);
        free(path);
        return rc;
    }
    char **list = calloc(json_object_size(wm) + 1, sizeof *list);
    int n = 0;
    const char *key;
    json_t *v;
    json_object_foreach(wm, key, v) {
        const char *s = json_is_string(v) ? json_string_value(v) : NULL;
        if (!s || !*s || strchr(s, '/') || strcmp(s, "..") == 0) {
            rc = g4_err_set(err, G4_EFORMAT, "%s: weight_map[\"%s\"] must be a shard file name in the same folder", path, key);
            break;
        }
        list[n++] = (char *)s;
    }
    if (rc == G4_OK && n == 0) rc = g4_err_set(err, G4_EFORMAT, "%s: weight_map is empty", path);
    if (rc) {
        free(list);
        json_decref(idx);
        free(path);
        return rc;
    }
    qsort(list, (size_t)n, sizeof *list, cmp_str);
    int u = 0;
    for (int i = 0; i < n; i++)
        if (u == 0 || strcmp(list[u - 1], list[i]) != 0) list[u++] = list[i];
    free(path);
    *index_out = idx;
    *names = list;
    *n_names = u;
    return G4_OK;
}

static const g4_st_tensor *find_any(const g4_checkpoint *ck, const char *name, int *file) {
    for (int i = 0; i < ck->n_files; i++) {
        const g4_st_tensor *t = g4_st_find(&ck->files[i], name);
        if (t) { if (file) *file = i; return t; }
    }
    return NULL;
}

static int kernel_dtype(int st) {
    switch (st) {
    case G4_ST_F32: return G4_DT_F32;
    case G4_ST_BF16: return G4_DT_BF16;
    case G4_ST_F16: return G4_DT_F16;
    default: return -1;
    }
}

int g4_checkpoint_dtype(const g4_checkpoint *ck, int i) { return ck->scales[i] ? G4_DT_CT_INT4 : kernel_dtype(ck->bound[i]->dtype); }

g4_mat g4_checkpoint_view(const g4_checkpoint *ck, int i, int64_t r0, int64_t nr, int64_t c0, int64_t nc) {
    const g4_tensor_spec *sp = &ck->specs[i];
    const int64_t full = sp->ndim == 2 ? sp->shape[1] : 1;
    if (ck->scales[i])
        return g4_ct_view(ck->bound[i]->data, ck->scales[i]->data, kernel_dtype(ck->scales[i]->dtype), full, r0, nr, c0, nc);
    const int dt = kernel_dtype(ck->bound[i]->dtype);
    const size_t es = g4_dtype_row_bytes(dt, 1);
    return (g4_mat){.data = ck->bound[i]->data + ((size_t)r0 * (size_t)full + (size_t)c0) * es, .dtype = dt, .rows = nr,
                    .cols = nc, .ld_bytes = (int64_t)((size_t)full * es)};
}

g4_mat g4_checkpoint_vision_view(const g4_checkpoint *ck, int i) {
    int64_t rows, cols;
    g4_tensor_spec_rows_cols(&ck->vspecs[i], &rows, &cols);
    const int dt = kernel_dtype(ck->vbound[i]->dtype);
    return (g4_mat){.data = ck->vbound[i]->data, .dtype = dt, .rows = rows, .cols = cols, .ld_bytes = (int64_t)g4_dtype_row_bytes(dt, cols)};
}

static void shape_text(const g4_st_tensor *t, char *got, size_t len) {
    snprintf(got, len, "[");
    for (int d = 0; d < t->ndim; d++) {
        size_t l = strlen(got);
        snprintf(got + l, len - l, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
    }
    strncat(got, "]", len - strlen(got) - 1);
}

/* A packed W4A16 matrix `base`.weight_packed/_scale/_shape for spec sp: every shape and dtype
 * against the config. */
static int bind_packed(g4_checkpoint *ck, int s, const char *base, const g4_st_tensor *packed, const char *path, g4_err *err) {
    const g4_tensor_spec *sp = &ck->specs[s];
    const int64_t out = sp->shape[0], in = sp->shape[1];
    char name[192], got[128];
    if (!ck->scheme.present)
        return g4_err_set(err, G4_EFORMAT, "%s: tensor %s.weight_packed is packed int4 but config.json has no quantization_config", path, base);
    if (in % 32)
        return g4_err_set(err, G4_ESHAPE, "%s: %s has %lld input columns; packed int4 groups of 32 need a multiple of 32", path, base, (long long)in);
    shape_text(packed, got, sizeof got);
    if (packed->dtype != G4_ST_I32 || packed->ndim != 2 || packed->shape[0] != out || packed->shape[1] != in / 8)
        return g4_err_set(err, G4_ESHAPE, "%s: %s.weight_packed is %s %s; the config needs I32 [%lld, %lld] (8 int4 per int32)", path, base,
                          g4_st_dtype_name(packed->dtype), got, (long long)out, (long long)(in / 8));
    snprintf(name, sizeof name, "%s.weight_scale", base);
    const g4_st_tensor *sc = find_any(ck, name, NULL);
    if (!sc) return g4_err_set(err, G4_ENOTFOUND, "checkpoint %s: missing tensor %s (the scales of %s.weight_packed)", ck->dir, name, base);
    shape_text(sc, got, sizeof got);
    if (kernel_dtype(sc->dtype) < 0 || sc->ndim != 2 || sc->shape[0] != out || sc->shape[1] != in / ck->scheme.group_size)
        return g4_err_set(err, G4_ESHAPE, "%s: %s is %s %s; group_size %d needs BF16, F16 or F32 [%lld, %lld]", path, name, g4_st_dtype_name(sc->dtype), got,
                          ck->scheme.group_size, (long long)out, (long long)(in / ck->scheme.group_size));
    snprintf(name, sizeof name, "%s.weight_shape", base);
    const g4_st_tensor *sh = find_any(ck, name, NULL);
    if (sh) {
        int64_t v[2] = {-1, -1};
        if (sh->ndim == 1 && sh->shape[0] == 2 && (sh->dtype == G4_ST_I32 || sh->dtype == G4_ST_I64))
            for (int k = 0; k < 2; k++) {
                if (sh->dtype == G4_ST_I32) { int32_t x; memcpy(&x, sh->data + 4 * k, 4); v[k] = x; }
                else memcpy(&v[k], sh->data + 8 * k, 8);
            }
        if (v[0] != out || v[1] != in)
            return g4_err_set(err, G4_ESHAPE, "%s: %s says [%lld, %lld]; the config needs [%lld, %lld]", path, name, (long long)v[0], (long long)v[1],
                              (long long)out, (long long)in);
    }
    for (const char *extra[] = {"weight_zero_point", "weight_g_idx"}, **e = extra; e < extra + 2; e++) {
        snprintf(name, sizeof name, "%s.%s", base, *e);
        if (find_any(ck, name, NULL))
            return g4_err_set(err, G4_EUNSUPPORTED, "%s: %s is present: %s are not supported (only symmetric groups in order)", path, name,
                              *e == extra[0] ? "zero points" : "act-order indices");
    }
    ck->bound[s] = packed;
    ck->scales[s] = sc;
    ck->n_packed++;
    return G4_OK;
}

/* 1 if name is a weight_scale/weight_shape of a bound packed matrix. */
static int is_packed_side(const g4_checkpoint *ck, const char *name) {
    const char *dot = strrchr(name, '.');
    if (!dot || (strcmp(dot, ".weight_scale") && strcmp(dot, ".weight_shape"))) return 0;
    char base[192];
    snprintf(base, sizeof base, "%.*s.weight_packed", (int)(dot - name), name);
    const g4_st_tensor *p = find_any(ck, base, NULL);
    for (int s = 0; p && s < ck->n_specs; s++)
        if (ck->bound[s] == p && ck->scales[s]) return 1;
    return 0;
}

/* The vision table: all or nothing (checkpoint.h). */
static int bind_vision(g4_checkpoint *ck, g4_err *err) {
    if (!ck->cfg.vision.has_vision) {
        snprintf(ck->vision_note, sizeof ck->vision_note, "config.json has no vision_config");
        return G4_OK;
    }
    int rc = g4_vision_tensor_specs(&ck->cfg, &ck->vspecs, &ck->n_vspecs, err);
    if (rc) return rc;
    if (!(ck->vbound = calloc((size_t)ck->n_vspecs, sizeof *ck->vbound))) return g4_err_set(err, G4_ENOMEM, "out of memory");
    char full[160];
    int found = 0;
    for (int i = 0; i < ck->n_vspecs; i++) {
        snprintf(full, sizeof full, "model.%s", ck->vspecs[i].name);
        found += find_any(ck, full, NULL) != NULL;
    }
    if (found == 0) {
        snprintf(ck->vision_note, sizeof ck->vision_note,
                 "config.json has a vision_config but the checkpoint holds none of its %d tensors: loaded without a vision tower", ck->n_vspecs);
        return G4_OK;
    }
    for (int i = 0; i < ck->n_vspecs; i++) {
        const g4_tensor_spec *sp = &ck->vspecs[i];
        snprintf(full, sizeof full, "model.%s", sp->name);
        int file = 0;
        const g4_st_tensor *t = find_any(ck, full, &file);
        if (!t) {
            char packed[192];
            snprintf(packed, sizeof packed, "%s_packed", full);
            if (find_any(ck, packed, NULL))
                return g4_err_set(err, G4_EUNSUPPORTED, "checkpoint %s: %s is packed int4: a quantized vision tower is not supported", ck->dir, packed);
            return g4_err_set(err, G4_ENOTFOUND, "checkpoint %s: missing vision tensor %s (%d of the vision_config's %d tower tensors are present)",
                              ck->dir, full, found, ck->n_vspecs);
        }
        const char *path = ck->files[file].map.path;
        if (kernel_dtype(t->dtype) < 0)
            return g4_err_set(err, G4_ESHAPE, "%s: tensor %s has dtype %s; expected BF16, F16 or F32", path, full, g4_st_dtype_name(t->dtype));
        int ok = t->ndim == sp->ndim || (sp->ndim == 0 && t->ndim == 1 && t->shape[0] == 1); /* a clip bound: [] or [1] */
        for (int d = 0; ok && d < sp->ndim; d++) ok = t->shape[d] == sp->shape[d];
        if (!ok) {
            char got[128], want[64];
            shape_text(t, got, sizeof got);
            g4_tensor_spec_shape_text(sp, want, sizeof want);
            return g4_err_set(err, G4_ESHAPE, "%s: tensor %s has shape %s; the vision_config needs %s", path, full, got, want);
        }
        ck->vbound[i] = t;
    }
    ck->has_vision = 1;
    return G4_OK;
}

static int bind_tensors(g4_checkpoint *ck, g4_err *err) {
    /* the text prefix: the multimodal layout if any tensor uses it, else the CausalLM layout */
    const char *prefix = "model.";
    for (int f = 0; f < ck->n_files; f++)
        for (size_t i = 0; i < ck->files[f].n_tensors; i++)
            if (starts_with(ck->files[f].tensors[i].name, "model.language_model.")) prefix = "model.language_model.";
    snprintf(ck->prefix, sizeof ck->prefix, "%s", prefix);
    int rc = g4_tensor_specs(&ck->cfg, &ck->specs, &ck->n_specs, err);
    if (rc) return rc;
    ck->bound = calloc((size_t)ck->n_specs, sizeof *ck->bound);
    ck->scales = calloc((size_t)ck->n_specs, sizeof *ck->scales);
    if (!ck->bound || !ck->scales) return g4_err_set(err, G4_ENOMEM, "out of memory");
    char full[160];
    for (int s = 0; s < ck->n_specs; s++) {
        const g4_tensor_spec *sp = &ck->specs[s];
        snprintf(full, sizeof full, "%s%s", prefix, sp->name);
        int file = 0;
        const g4_st_tensor *t = find_any(ck, full, &file);
        if (!t && sp->ndim == 2) { /* a compressed-tensors W4A16 matrix? */
            char base[160], packed[192];
            snprintf(base, sizeof base, "%.*s", (int)(strlen(full) - strlen(".weight")), full);
            snprintf(packed, sizeof packed, "%s.weight_packed", base);
            const g4_st_tensor *p = find_any(ck, packed, &file);
            if (p) {
                int rc2 = bind_packed(ck, s, base, p, ck->files[file].map.path, err);
                if (rc2) return rc2;
                continue;
            }
        }
        if (!t) return g4_err_set(err, G4_ENOTFOUND, "checkpoint %s: missing tensor %s", ck->dir, full);
        if (kernel_dtype(t->dtype) < 0)
            return g4_err_set(err, G4_ESHAPE, "%s: tensor %s has dtype %s; expected BF16, F16 or F32", ck->files[file].map.path, full, g4_st_dtype_name(t->dtype));
        int ok = t->ndim == sp->ndim && t->shape[0] == sp->shape[0] && (sp->ndim == 1 || t->shape[1] == sp->shape[1]);
        if (!ok) {
            char got[128];
            shape_text(t, got, sizeof got);
            char want[64];
            if (sp->ndim == 1) snprintf(want, sizeof want, "[%lld]", (long long)sp->shape[0]);
            else snprintf(want, sizeof want, "[%lld, %lld]", (long long)sp->shape[0], (long long)sp->shape[1]);
            return g4_err_set(err, G4_ESHAPE, "%s: tensor %s has shape %s; the config needs %s", ck->files[file].map.path, full, got, want);
        }
        ck->bound[s] = t;
    }
    if ((rc = bind_vision(ck, err))) return rc;
    /* every other tensor must be a skipped encoder tensor */
    for (int f = 0; f < ck->n_files; f++)
        for (size_t i = 0; i < ck->files[f].n_tensors; i++) {
            const char *name = ck->files[f].tensors[i].name;
            if (ck->has_vision && is_vision(name)) {
                int known = 0;
                for (int s = 0; s < ck->n_vspecs && !known; s++) known = ck->vbound[s] == &ck->files[f].tensors[i];
                if (!known)
                    return g4_err_set(err, G4_EFORMAT, "%s: unexpected tensor %s (not a tensor of the vision_config's tower%s)", ck->files[f].map.path,
                                      name, ck->cfg.vision.clipped ? "" : "; use_clipped_linears is false");
                continue;
            }
            if (is_skipped(name)) { ck->n_skipped++; continue; }
            int known = is_packed_side(ck, name);
            if (starts_with(name, prefix)) {
                for (int s = 0; s < ck->n_specs && !known; s++)
                    if (ck->bound[s] == &ck->files[f].tensors[i]) known = 1;
            }
            if (!known)
                return g4_err_set(err, G4_EFORMAT, "%s: unexpected tensor %s (not a Gemma-4 dense text tensor%s)", ck->files[f].map.path, name,
                                  strcmp(name, "lm_head.weight") == 0 ? "; the head is tied to embed_tokens" : "");
        }
    return G4_OK;
}

int g4_checkpoint_open(const char *dir, g4_checkpoint *ck, g4_err *err) {
    memset(ck, 0, sizeof *ck);
    ck->dir = strdup(dir);
    char *cpath = g4_path_join(dir, "config.json");
    int rc = g4_config_load(cpath, &ck->cfg, err);
    free(cpath);
    if (rc) goto fail;
    if ((rc = g4_ct_scheme_parse(ck->cfg.json, strlen(ck->cfg.json), &ck->scheme, err))) goto fail;
    /* a file that is there but cannot be read says what the system said, not "missing" */
    char *ipath = g4_path_join(dir, "model.safetensors.index.json");
    int has_index;
    rc = g4_optional_file(ipath, &has_index, err);
    free(ipath);
    if (rc) goto fail;
    json_t *idx = NULL;
    char **names = NULL;
    int n_names = 0;
    static char *single[] = {"model.safetensors"};
    if (has_index) {
        if ((rc = read_index(dir, &idx, &names, &n_names, err))) goto fail;
    } else {
        names = single;
        n_names = 1;
    }
    ck->files = calloc((size_t)n_names, sizeof *ck->files);
    if (!ck->files) { rc = g4_err_set(err, G4_ENOMEM, "out of memory"); goto fail_idx; }
    for (int i = 0; i < n_names; i++) {
        char *p = g4_path_join(dir, names[i]);
        int present;
        if ((rc = g4_optional_file(p, &present, err))) { free(p); goto fail_idx; }
        if (!present) {
            rc = has_index ? g4_err_set(err, G4_EIO, "model.safetensors.index.json names shard %s, which does not exist in %s", names[i], dir)
                           : g4_err_set(err, G4_EIO, "%s: no model.safetensors and no model.safetensors.index.json", dir);
            free(p);
            goto fail_idx;
        }
        rc = g4_st_open(&ck->files[i], p, err);
        free(p);
        if (rc) goto fail_idx;
        ck->n_files++;
    }
    if (idx) { /* each tensor the index names must be in the shard it names */
        const char *key;
        json_t *v;
        json_object_foreach(json_object_get(idx, "weight_map"), key, v) {
            const char *shard = json_string_value(v);
            int found = 0;
            for (int i = 0; i < n_names; i++)
                if (strcmp(names[i], shard) == 0) found = g4_st_find(&ck->files[i], key) != NULL;
            if (!found) { rc = g4_err_set(err, G4_EFORMAT, "model.safetensors.index.json: tensor %s is not in %s", key, shard); goto fail_idx; }
        }
    }
    rc = bind_tensors(ck, err);
fail_idx:
    if (has_index) { free(names); json_decref(idx); }
    if (rc) goto fail;
    return G4_OK;
fail:
    g4_checkpoint_close(ck);
    return rc;
}

void g4_checkpoint_close(g4_checkpoint *ck) {
    for (int i = 0; i < ck->n_files; i++) g4_st_close(&ck->files[i]);
    free(ck->files);
    free(ck->specs);
    free(ck->bound);
    free(ck->scales);
    free(ck->vspecs);
    free(ck->vbound);
    g4_config_free(&ck->cfg);
    free(ck->dir);
    memset(ck, 0, sizeof *ck);
}
