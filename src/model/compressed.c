/* compressed.c — compressed-tensors pack-quantized W4A16 (see compressed.h). */
#include "model/compressed.h"

#include <jansson.h>
#include <string.h>

static int is_off(json_t *v) { return !v || json_is_null(v) || json_is_false(v); }

/* One config group's "weights" arguments: only symmetric int4 groups of 32, static, no act order. */
static int check_weights(json_t *w, const char *group, g4_ct_scheme *s, g4_err *err) {
#define BAD(...) g4_err_set(err, G4_EUNSUPPORTED, "config.json: quantization_config group %s: " __VA_ARGS__)
    if (!json_is_object(w)) return BAD("\"weights\" must be an object (only weight quantization is supported)", group);
    json_t *nb = json_object_get(w, "num_bits"), *ty = json_object_get(w, "type");
    json_t *sy = json_object_get(w, "symmetric"), *st = json_object_get(w, "strategy");
    json_t *gs = json_object_get(w, "group_size"), *ao = json_object_get(w, "actorder");
    json_t *dy = json_object_get(w, "dynamic");
    if (!json_is_integer(nb) || json_integer_value(nb) != 4) return BAD("num_bits must be 4 (W4A16)", group);
    if (ty && !(json_is_string(ty) && !strcmp(json_string_value(ty), "int"))) return BAD("type must be \"int\"", group);
    if (!json_is_true(sy)) return BAD("asymmetric quantization (zero points) is not supported; only symmetric", group);
    if (!json_is_string(st) || strcmp(json_string_value(st), "group"))
        return BAD("strategy \"%s\" is not supported; only \"group\"", group, json_is_string(st) ? json_string_value(st) : "?");
    if (!json_is_integer(gs) || json_integer_value(gs) != 32)
        return BAD("group_size %lld is not supported; only 32 (the Q4_0 block)", group, json_is_integer(gs) ? (long long)json_integer_value(gs) : -1LL);
    if (!is_off(ao) && !(json_is_string(ao) && !strcmp(json_string_value(ao), "none")))
        return BAD("actorder (g_idx) is not supported", group);
    if (!is_off(dy)) return BAD("dynamic weight quantization is not supported", group);
#undef BAD
    s->group_size = 32;
    return G4_OK;
}

int g4_ct_scheme_parse(const char *text, size_t len, g4_ct_scheme *s, g4_err *err) {
    memset(s, 0, sizeof *s);
    json_t *root = json_loadb(text, len, 0, NULL);
    if (!root) return g4_err_set(err, G4_EFORMAT, "config.json: malformed JSON");
    json_t *q = json_object_get(root, "quantization_config");
    if (!q) q = json_object_get(json_object_get(root, "text_config"), "quantization_config");
    int rc = G4_OK;
    if (!q || json_is_null(q)) goto done;
    s->present = 1;
    const char *method = json_string_value(json_object_get(q, "quant_method"));
    if (!method || strcmp(method, "compressed-tensors")) {
        rc = g4_err_set(err, G4_EUNSUPPORTED, "config.json: quantization_config.quant_method \"%s\" is not supported (only \"compressed-tensors\" pack-quantized W4A16)",
                        method ? method : "?");
        goto done;
    }
    const char *fmt = json_string_value(json_object_get(q, "format"));
    json_t *groups = json_object_get(q, "config_groups");
    if (!json_is_object(groups) || json_object_size(groups) == 0) {
        rc = g4_err_set(err, G4_EFORMAT, "config.json: quantization_config has no config_groups");
        goto done;
    }
    const char *name;
    json_t *g;
    json_object_foreach(groups, name, g) {
        const char *gf = json_string_value(json_object_get(g, "format"));
        const char *f = gf ? gf : fmt;
        if (!f || strcmp(f, "pack-quantized")) {
            rc = g4_err_set(err, G4_EUNSUPPORTED, "config.json: quantization_config group %s: format \"%s\" is not supported (only \"pack-quantized\")", name,
                            f ? f : "?");
            break;
        }
        if (!is_off(json_object_get(g, "input_activations")) || !is_off(json_object_get(g, "output_activations"))) {
            rc = g4_err_set(err, G4_EUNSUPPORTED, "config.json: quantization_config group %s quantizes activations; only weight-only (W4A16) is supported", name);
            break;
        }
        if ((rc = check_weights(json_object_get(g, "weights"), name, s, err))) break;
    }
    if (rc == G4_OK && !is_off(json_object_get(q, "kv_cache_scheme")))
        rc = g4_err_set(err, G4_EUNSUPPORTED, "config.json: quantization_config.kv_cache_scheme is not supported");
done:
    json_decref(root);
    return rc;
}

g4_mat g4_ct_view(const void *packed, const void *scales, int scales_dtype, int64_t in_cols,
                  int64_t r0, int64_t nr, int64_t c0, int64_t nc) {
    const int64_t ld = in_cols / 8 * 4, sld = (int64_t)g4_dtype_row_bytes(scales_dtype, in_cols / 32);
    return (g4_mat){.data = (const uint8_t *)packed + r0 * ld + c0 / 2, .dtype = G4_DT_CT_INT4, .rows = nr, .cols = nc,
                    .ld_bytes = ld, .scales = (const uint8_t *)scales + r0 * sld + (int64_t)g4_dtype_row_bytes(scales_dtype, c0 / 32),
                    .scales_dtype = scales_dtype, .scales_ld = sld};
}

static float scale_at(const g4_mat *v, int64_t r, int64_t b) {
    const uint8_t *p = (const uint8_t *)v->scales + r * v->scales_ld;
    switch (v->scales_dtype) {
    case G4_DT_BF16: return g4_bf16_to_f32(((const uint16_t *)p)[b]);
    case G4_DT_F16: return g4_f16_to_f32(((const uint16_t *)p)[b]);
    default: return ((const float *)p)[b];
    }
}

/* Nibble i (0..31) of 32-block b of row r: the unsigned stored value q + 8. */
static inline unsigned nib(const uint8_t *row, int64_t col) { return (row[col / 2] >> (4 * (col & 1))) & 15u; }

int g4_ct_row_to_q4_0(const g4_mat *v, int64_t r, g4_block_q4_0 *dst, g4_err *err) {
    /* int32 words are little-endian in the file: element 8j+i is nibble i of word j, i.e. byte
     * 4j + i/2, low nibble for even i — so the row is simply a nibble array */
    const uint8_t *row = (const uint8_t *)v->data + r * v->ld_bytes;
    for (int64_t b = 0; b < v->cols / 32; b++) {
        float d = scale_at(v, r, b);
        uint16_t h = g4_f32_to_f16(d);
        if (g4_f16_to_f32(h) != d && !(d != d))
            return g4_err_set(err, G4_EUNSUPPORTED, "row %lld, columns %lld..%lld: scale %g has no exact f16 value, so it cannot become a Q4_0 block "
                                                    "without rounding (load it with --dtype bf16 or q8_0 instead)",
                              (long long)r, (long long)b * 32, (long long)b * 32 + 31, (double)d);
        dst[b].d = h;
        for (int i = 0; i < 16; i++)
            dst[b].qs[i] = (uint8_t)(nib(row, b * 32 + i) | nib(row, b * 32 + i + 16) << 4);
    }
    return G4_OK;
}

void g4_ct_row_to_f32(const g4_mat *v, int64_t r, float *dst) {
    const uint8_t *row = (const uint8_t *)v->data + r * v->ld_bytes;
    for (int64_t c = 0; c < v->cols; c++) dst[c] = scale_at(v, r, c / 32) * (float)((int)nib(row, c) - 8);
}

void g4_ct_pack_row(const int8_t *q, int64_t n, int32_t *dst) {
    for (int64_t j = 0; j < n / 8; j++) {
        uint32_t w = 0;
        for (int i = 0; i < 8; i++) w |= (uint32_t)((q[8 * j + i] + 8) & 15) << (4 * i);
        dst[j] = (int32_t)w;
    }
}
