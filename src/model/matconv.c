/* matconv.c — matrix conversions and the q4_0 grouping rule (see matconv.h). */
#include "model/matconv.h"

#include <stdlib.h>
#include <string.h>

#include "model/compressed.h"

static int is_block(int dt) { return g4_dtype_info(dt) && g4_dtype_info(dt)->quantized; }

static int check_convert(const g4_mat *src, int dt, g4_err *err) {
    if (is_block(dt) && src->cols % 32)
        return g4_err_set(err, G4_EUNSUPPORTED, "%s needs rows whose length is a multiple of 32 (got %lld)", g4_dtype_name(dt), (long long)src->cols);
    if (is_block(src->dtype) && is_block(dt) && dt != src->dtype) /* dequantizing is exact; requantizing is not asked for */
        return g4_err_set(err, G4_EUNSUPPORTED, "cannot convert %s weights to %s", g4_dtype_name(src->dtype), g4_dtype_name(dt));
    if (dt < 0 || dt >= G4_DT_COUNT) return g4_err_set(err, G4_EINVAL, "no kernel dtype %d", dt);
    return G4_OK;
}

static int convert_into(const g4_mat *src, int dt, uint8_t *dst, g4_err *err) {
    size_t rb = g4_dtype_row_bytes(dt, src->cols);
    float *row = src->dtype == dt ? NULL : malloc(sizeof(float) * (size_t)(src->cols ? src->cols : 1));
    if (src->dtype != dt && !row) return g4_err_set(err, G4_ENOMEM, "out of memory");
    int rc = G4_OK;
    for (int64_t r = 0; r < src->rows && rc == G4_OK; r++) {
        const void *s = (const uint8_t *)src->data + r * src->ld_bytes;
        uint8_t *d = dst + (size_t)r * rb;
        if (src->dtype == dt) { memcpy(d, s, rb); continue; }
        if (src->dtype == G4_DT_CT_INT4 && dt == G4_DT_Q4_0) { rc = g4_ct_row_to_q4_0(src, r, (g4_block_q4_0 *)d, err); continue; }
        g4_mat_row_to_f32(src, r, row);
        g4_dtype_info(dt)->from_f32(row, d, src->cols);
    }
    free(row);
    return rc;
}

int g4_mat_convert_into(const g4_mat *src, int dt, void *dst, g4_err *err) {
    int rc = check_convert(src, dt, err);
    return rc ? rc : convert_into(src, dt, dst, err);
}

int g4_mat_convert(const g4_mat *src, int dt, void **out, size_t *bytes, g4_err *err) {
    int rc = check_convert(src, dt, err);
    if (rc) return rc;
    size_t total = g4_dtype_row_bytes(dt, src->cols) * (size_t)src->rows;
    uint8_t *dst = aligned_alloc(64, (total + 63) / 64 * 64 + 64);
    if (!dst) return g4_err_set(err, G4_ENOMEM, "out of memory converting a %lldx%lld matrix", (long long)src->rows, (long long)src->cols);
    if ((rc = convert_into(src, dt, dst, err))) { free(dst); return rc; }
    *out = dst;
    *bytes = total;
    return G4_OK;
}

g4_mat g4_mat_rows(const g4_mat *m, int64_t r0, int64_t n) {
    g4_mat v = *m;
    v.data = (const uint8_t *)m->data + r0 * m->ld_bytes;
    if (m->scales) v.scales = (const uint8_t *)m->scales + r0 * m->scales_ld;
    v.rows = n;
    return v;
}

void g4_mat_row_to_f32(const g4_mat *m, int64_t r, float *dst) {
    if (m->dtype == G4_DT_CT_INT4) g4_ct_row_to_f32(m, r, dst);
    else if (m->layout) g4_mat_lookup_row(&g4_kernels_scalar, m, r, dst);
    else g4_kernels_scalar.row_to_f32(dst, (const uint8_t *)m->data + r * m->ld_bytes, m->dtype, m->cols);
}

size_t g4_mat_src_row_bytes(const g4_mat *m) {
    return m->dtype == G4_DT_CT_INT4 ? (size_t)m->cols / 2 : g4_dtype_row_bytes(m->dtype, m->cols);
}

int64_t g4_q4_0_group_cols(const g4_config *cfg, const g4_tp_plan *plan, int kind, int layer, int64_t cols) {
    int64_t seg;
    switch (kind) {
    case G4_T_EMBED: case G4_T_Q: case G4_T_K: case G4_T_V: case G4_T_GATE: case G4_T_UP: seg = cols; break;
    case G4_T_O: seg = layer >= 0 && layer < cfg->n_layers ? g4_tp_attn_slice_cols(cfg, layer) : 0; break;
    case G4_T_DOWN: seg = plan->mlp_slice_cols; break;
    default: return 0;
    }
    return seg > 0 && seg % G4_Q4_BLOCK == 0 && cols > 0 && cols % seg == 0 ? seg : 0;
}

int g4_rowpar_col_parts(const g4_config *cfg, const g4_tp_plan *plan, int dtype, int kind, int layer, int64_t cols, int64_t part_cols) {
    if (part_cols == 0) part_cols = dtype == G4_DT_Q4_0 ? G4_ROWPAR_PART_COLS : G4_ROWPAR_PART_COLS_Q8;
    if ((dtype != G4_DT_Q4_0 && dtype != G4_DT_Q8_0) || (kind != G4_T_O && kind != G4_T_DOWN)) return 1;
    const int64_t slice = g4_q4_0_group_cols(cfg, plan, kind, layer, cols);
    if (slice <= 0 || part_cols < 0 || cols <= part_cols) return 1;
    const int64_t ns = cols / slice;
    for (int64_t p = 2; p <= ns; p++)
        if (ns % p == 0 && cols / p <= part_cols) return (int)p;
    return 1;
}
