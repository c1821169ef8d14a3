/* safetensors.c — the safetensors container: 8-byte little-endian header length, JSON header,
 * then raw tensor bytes. See safetensors.h for the checks made. */
#include "model/safetensors.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static const struct { const char *name; size_t size; } dtypes[G4_ST_NDTYPES] = {
    [G4_ST_F32] = {"F32", 4},  [G4_ST_BF16] = {"BF16", 2}, [G4_ST_F16] = {"F16", 2},
    [G4_ST_F64] = {"F64", 8},  [G4_ST_I64] = {"I64", 8},   [G4_ST_I32] = {"I32", 4},
    [G4_ST_I16] = {"I16", 2},  [G4_ST_I8] = {"I8", 1},     [G4_ST_U8] = {"U8", 1},
    [G4_ST_BOOL] = {"BOOL", 1}, [G4_ST_F8_E4M3] = {"F8_E4M3", 1}, [G4_ST_F8_E5M2] = {"F8_E5M2", 1},
    [G4_ST_U16] = {"U16", 2},  [G4_ST_U32] = {"U32", 4},   [G4_ST_U64] = {"U64", 8},
};

const char *g4_st_dtype_name(int dt) { return dt >= 0 && dt < G4_ST_NDTYPES ? dtypes[dt].name : "?"; }
size_t g4_st_dtype_size(int dt) { return dt >= 0 && dt < G4_ST_NDTYPES ? dtypes[dt].size : 0; }

static int cmp_tensor(const void *a, const void *b) {
    return strcmp(((const g4_st_tensor *)a)->name, ((const g4_st_tensor *)b)->name);
}

typedef struct { uint64_t begin, end; const char *name; } span;
static int cmp_span(const void *a, const void *b) {
    const span *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : (x->end < y->end ? -1 : x->end > y->end);
}

static void free_tensors(g4_st_file *f) {
    for (size_t i = 0; i < f->n_tensors; i++) free(f->tensors[i].name);
    free(f->tensors);
    f->tensors = NULL;
    f->n_tensors = 0;
}

int g4_st_parse(g4_st_file *f, const uint8_t *bytes, size_t size, const char *fname, g4_err *err) {
    f->tensors = NULL;
    f->n_tensors = 0;
    if (size < 8)
        return g4_err_set(err, G4_EFORMAT, "%s: truncated: %zu bytes, a safetensors file needs at least 8", fname, size);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | bytes[i];
    if (hlen > size - 8)
        return g4_err_set(err, G4_EFORMAT, "%s: header length %llu runs past the end of the file (%zu bytes): truncated or not a safetensors file",
                          fname, (unsigned long long)hlen, size);
    if (hlen > ((uint64_t)1 << 30))
        return g4_err_set(err, G4_EFORMAT, "%s: header length %llu is implausibly large", fname, (unsigned long long)hlen);
    const uint8_t *data = bytes + 8 + hlen;
    uint64_t data_size = size - 8 - hlen;
    json_error_t je;
    json_t *h = json_loadb((const char *)bytes + 8, hlen, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je);
    if (!h) return g4_err_set(err, G4_EFORMAT, "%s: malformed header JSON at offset %d: %s", fname, je.position, je.text);
    int rc = G4_OK;
    span *spans = NULL;
    if (!json_is_object(h)) { rc = g4_err_set(err, G4_EFORMAT, "%s: header is not a JSON object", fname); goto out; }
    size_t n = json_object_size(h);
    f->tensors = calloc(n ? n : 1, sizeof *f->tensors);
    spans = calloc(n ? n : 1, sizeof *spans);
    if (!f->tensors || !spans) { rc = g4_err_set(err, G4_ENOMEM, "out of memory"); goto out; }
    const char *key;
    json_t *val;
    json_object_foreach(h, key, val) {
        if (strcmp(key, "__metadata__") == 0) continue;
        g4_st_tensor *t = &f->tensors[f->n_tensors];
        if (!json_is_object(val)) { rc = g4_err_set(err, G4_EFORMAT, "%s: tensor %s: entry is not an object", fname, key); goto out; }
        json_t *dt = json_object_get(val, "dtype"), *sh = json_object_get(val, "shape"), *off = json_object_get(val, "data_offsets");
        if (!json_is_string(dt)) { rc = g4_err_set(err, G4_EFORMAT, "%s: tensor %s: dtype missing", fname, key); goto out; }
        t->dtype = -1;
        for (int d = 0; d < G4_ST_NDTYPES; d++)
            if (strcmp(json_string_value(dt), dtypes[d].name) == 0) t->dtype = d;
        if (t->dtype < 0) { rc = g4_err_set(err, G4_EFORMAT, "%s: tensor %s: unknown dtype \"%s\"", fname, key, json_string_value(dt)); goto out; }
        if (!json_is_array(sh) || json_array_size(sh) > G4_ST_MAX_DIMS) { rc = g4_err_set(err, G4_EFORMAT, "%s: tensor %s: shape must be a list of at most %d dims", fname, key, G4_ST_MAX_DIMS); goto out; }
        t->ndim = (int)json_array_size(sh);
        uint64_t count = 1;
        for (int d = 0; d < t->ndim; d++) {
            json_t *e = json_array_get(sh, (size_t)d);
            if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) > ((int64_t)1 << 40)) { rc = g4_err_set(err, G4_EFORMAT, "%s: tensor %s: bad shape dim %d", fname, key, d); goto out; }
            t->shape[d] = json_integer_value(e);
            if (t->shape[d] && count > UINT64_MAX / 16 / (uint64_t)t->shape[d]) { rc = g4_err_set(err, G4_EFORMAT, "%s: tensor %s: shape overflows", fname, key); goto out; }
            count *= (uint64_t)t->shape[d];
        }
        if (!json_is_array(off) || json_array_size(off) != 2 || !json_is_integer(json_array_get(off, 0)) || !json_is_integer(json_array_get(off, 1))) { rc = g4_err_set(err, G4_EFORMAT, "%s: tensor %s: data_offsets must be [begin, end]", fname, key); goto out; }
        json_int_t b = json_integer_value(json_array_get(off, 0)), e = json_integer_value(json_array_get(off, 1));
        if (b < 0 || e < b || (uint64_t)e > data_size) { rc = g4_err_set(err, G4_EFORMAT, "%s: tensor %s: data_offsets [%lld, %lld] out of range (data area is %llu bytes)", fname, key, (long long)b, (long long)e, (unsigned long long)data_size); goto out; }
        uint64_t want = count * dtypes[t->dtype].size;
        if ((uint64_t)(e - b) != want) { rc = g4_err_set(err, G4_EFORMAT, "%s: tensor %s: data_offsets span %lld bytes but shape and dtype need %llu", fname, key, (long long)(e - b), (unsigned long long)want); goto out; }
        t->name = strdup(key);
        if (!t->name) { rc = g4_err_set(err, G4_ENOMEM, "out of memory"); goto out; }
        t->data = data + b;
        t->nbytes = want;
        spans[f->n_tensors] = (span){(uint64_t)b, (uint64_t)e, t->name};
        f->n_tensors++;
    }
    /* sorted by begin, each non-empty range against the one reaching furthest before it (an
     * empty tensor between two overlapping ones must not hide the overlap) */
    qsort(spans, f->n_tensors, sizeof *spans, cmp_span);
    const span *far = NULL;
    for (size_t i = 0; i < f->n_tensors; i++) {
        if (spans[i].end == spans[i].begin) continue;
        if (far && spans[i].begin < far->end) {
            rc = g4_err_set(err, G4_EFORMAT, "%s: tensors %s and %s overlap", fname, far->name, spans[i].name);
            goto out;
        }
        if (!far || spans[i].end > far->end) far = &spans[i];
    }
    qsort(f->tensors, f->n_tensors, sizeof *f->tensors, cmp_tensor);
out:
    free(spans);
    json_decref(h);
    if (rc) free_tensors(f);
    return rc;
}

int g4_st_open(g4_st_file *f, const char *path, g4_err *err) {
    memset(f, 0, sizeof *f);
    int rc = g4_mapfile_open(&f->map, path, err);
    if (rc) return rc;
    rc = g4_st_parse(f, f->map.data, f->map.size, path, err);
    if (rc) g4_mapfile_close(&f->map);
    return rc;
}

void g4_st_close(g4_st_file *f) {
    free_tensors(f);
    g4_mapfile_close(&f->map);
}

const g4_st_tensor *g4_st_find(const g4_st_file *f, const char *name) {
    g4_st_tensor key = {.name = (char *)name};
    return bsearch(&key, f->tensors, f->n_tensors, sizeof key, cmp_tensor);
}
