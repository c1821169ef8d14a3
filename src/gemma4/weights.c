/* weights.c — binds one rank's weights (see weights.h). */
#include "gemma4/weights.h"

#include <stdlib.h>
#include <string.h>

#include "base/bigalloc.h"
#include "base/mapfile.h"
#include "model/compressed.h"
#include "model/matconv.h"

static int own(g4_rank_weights *w, void *p, g4_err *err) {
    if (w->n_owned == w->cap_owned) {
        int cap = w->cap_owned ? w->cap_owned * 2 : 64;
        void **n = realloc(w->owned, sizeof(void *) * (size_t)cap);
        if (!n) return g4_err_set(err, G4_ENOMEM, "out of memory");
        w->owned = n;
        w->cap_owned = cap;
    }
    w->owned[w->n_owned++] = p;
    return G4_OK;
}

static int own_big(g4_rank_weights *w, void *p, g4_err *err) {
    if (w->n_big == w->cap_big) {
        int cap = w->cap_big ? w->cap_big * 2 : 64;
        void **n = realloc(w->big, sizeof(void *) * (size_t)cap);
        if (!n) return g4_err_set(err, G4_ENOMEM, "out of memory");
        w->big = n;
        w->cap_big = cap;
    }
    w->big[w->n_big++] = p;
    return G4_OK;
}

/* fp32 copy of a 1-D tensor (norm weights, the layer scalar). */
static int vec_f32(g4_rank_weights *w, const g4_mat *v, int64_t n, float **out, g4_err *err) {
    float *p = malloc(sizeof(float) * (size_t)n);
    if (!p) return g4_err_set(err, G4_ENOMEM, "out of memory");
    g4_kernels_scalar.row_to_f32(p, v->data, v->dtype, n);
    *out = p;
    return own(w, p, err);
}

/* The pages a converted or copied matrix was read from, out of the resident set (a map's pages:
 * mapfile.h g4_mapfile_release; other memory is left alone). */
static void release_source(const g4_mat *v) {
    if (v->rows <= 0) return;
    if (v->col_parts > 1) { /* the parts: one contiguous run */
        g4_mapfile_release(v->data, g4_dtype_row_bytes(v->dtype, v->cols) * (size_t)v->rows);
        return;
    }
    g4_mapfile_release(v->data, (size_t)(v->ld_bytes * (v->rows - 1)) + g4_dtype_row_bytes(v->dtype, v->cols));
    if (v->scales) g4_mapfile_release(v->scales, (size_t)(v->scales_ld * v->rows));
}

/* seg: the q4_0 grouping this rank's forward pass reads the matrix in (g4_q4_0_group_cols) —
 * a matrix grouped otherwise (an artifact from another build's slice rules) is refused. */
static int matrix(g4_rank_weights *w, const g4_mat *v, g4_dtype_req req, int64_t seg, g4_mat *out, g4_err *err) {
    *out = *v;
    if (v->layout == G4_Q4_GROUPED && (v->dtype != G4_DT_Q4_0 || !seg || v->layout_cols != seg))
        return g4_err_set(err, G4_EFORMAT, "grouped q4_0 in segments of %lld columns, but this engine reads it in segments of %lld (shard it again)",
                          (long long)v->layout_cols, (long long)seg);
    int convert = g4_tensor_dtype_for(w->binding_kind, v->dtype, req);
    if ((convert >= 0 && convert != v->dtype) || (w->copy && g4_tensor_kind_is_matrix(w->binding_kind))) {
        if (convert < 0) convert = v->dtype;
        g4_mat flat = *v; /* column parts (kernels.h): converted as the rows of the parts, kept */
        if (v->col_parts > 1) flat.rows *= v->col_parts, flat.cols /= v->col_parts, flat.col_parts = 0;
        size_t bytes = g4_dtype_row_bytes(convert, flat.cols) * (size_t)flat.rows;
        void *data = g4_big_alloc(bytes);
        if (!data) return g4_err_set(err, G4_ENOMEM, "out of memory for a %lldx%lld matrix", (long long)v->rows, (long long)v->cols);
        int rc;
        if ((rc = g4_mat_convert_into(&flat, convert, data, err)) || (rc = own_big(w, data, err))) { g4_big_free(data); return rc; }
        w->copied_bytes += bytes;
        release_source(v);
        out->data = data;
        out->dtype = convert;
        out->ld_bytes = (int64_t)g4_dtype_row_bytes(convert, flat.cols);
        out->scales = NULL;
        out->scales_dtype = 0;
        out->scales_ld = 0;
        if (out->dtype != v->dtype) out->layout = 0, out->layout_cols = 0, out->q4_tail = 0; /* dequantized */
    }
    w->matrix_bytes += g4_dtype_row_bytes(out->dtype, out->cols) * (size_t)out->rows;
    return G4_OK;
}

int g4_weights_bind(const g4_config *cfg, const g4_tp_plan *plan, const g4_tensor_spec *specs, int n_specs,
                    g4_tensor_getter get, void *src, g4_dtype_req convert, int copy, g4_rank_weights *w, g4_err *err) {
    memset(w, 0, sizeof *w);
    w->copy = copy;
    w->layers = calloc((size_t)cfg->n_layers, sizeof *w->layers);
    if (!w->layers) return g4_err_set(err, G4_ENOMEM, "out of memory");
    int rc = g4_tp_check_dtype(cfg, plan->wdtype, err); /* the dtype the plan was cut for */
    for (int i = 0; i < n_specs && rc == G4_OK; i++) {
        const g4_tensor_spec *s = &specs[i];
        g4_mat v;
        if ((rc = get(src, s, i, &v, err))) break;
        int64_t r0, nr, c0, nc;
        g4_tp_tensor_slice(cfg, plan, s, &r0, &nr, &c0, &nc);
        if (v.rows != nr || v.cols != nc) {
            rc = g4_err_set(err, G4_ESHAPE, "tensor %s: rank %d expects a %lldx%lld slice, got %lldx%lld", s->name, plan->rank,
                            (long long)nr, (long long)nc, (long long)v.rows, (long long)v.cols);
            break;
        }
        g4_layer_weights *L = s->layer >= 0 ? &w->layers[s->layer] : NULL;
        const int64_t seg = g4_q4_0_group_cols(cfg, plan, s->kind, s->layer, nc);
        w->binding_kind = s->kind;
        switch (s->kind) {
        case G4_T_EMBED: rc = matrix(w, &v, convert, seg, &w->embed, err); break;
        case G4_T_FINAL_NORM: rc = vec_f32(w, &v, nr, &w->final_norm, err); break;
        case G4_T_LN_IN: rc = vec_f32(w, &v, nr, &L->ln_in, err); break;
        case G4_T_LN_POST_ATTN: rc = vec_f32(w, &v, nr, &L->ln_post_attn, err); break;
        case G4_T_LN_PRE_FF: rc = vec_f32(w, &v, nr, &L->ln_pre_ff, err); break;
        case G4_T_LN_POST_FF: rc = vec_f32(w, &v, nr, &L->ln_post_ff, err); break;
        case G4_T_QNORM: rc = vec_f32(w, &v, nr, &L->q_norm, err); break;
        case G4_T_KNORM: rc = vec_f32(w, &v, nr, &L->k_norm, err); break;
        case G4_T_SCALAR: {
            float s1;
            g4_kernels_scalar.row_to_f32(&s1, v.data, v.dtype, 1);
            L->scalar = s1;
            break;
        }
        case G4_T_Q: rc = matrix(w, &v, convert, seg, &L->q, err); break;
        case G4_T_K: rc = matrix(w, &v, convert, seg, &L->k, err); break;
        case G4_T_V: rc = matrix(w, &v, convert, seg, &L->v, err); break;
        case G4_T_O: rc = matrix(w, &v, convert, seg, &L->o, err); break;
        case G4_T_GATE: rc = matrix(w, &v, convert, seg, &L->gate, err); break;
        case G4_T_UP: rc = matrix(w, &v, convert, seg, &L->up, err); break;
        case G4_T_DOWN: rc = matrix(w, &v, convert, seg, &L->down, err); break;
        }
        if (rc) g4_err_prefix(err, "%s: ", s->name);
    }
    if (rc) g4_weights_free(w);
    return rc;
}

void g4_weights_free(g4_rank_weights *w) {
    for (int i = 0; i < w->n_owned; i++) free(w->owned[i]);
    free(w->owned);
    for (int i = 0; i < w->n_big; i++) g4_big_free(w->big[i]);
    free(w->big);
    free(w->layers);
    memset(w, 0, sizeof *w);
}

static int owned_big(const g4_rank_weights *w, const void *p) {
    for (int i = 0; i < w->n_big; i++)
        if (w->big[i] == p) return 1;
    return 0;
}

/* m in place (copied first unless owned here) to layout (0 = blocks, G4_Q4_GROUPED: each row as
 * rows of seg columns, their partial groups in the tail layout when tail). A grouped matrix stays
 * as it is whatever its tail (an older artifact's: the kernels read both, the same bits). */
static int relayout_q4(g4_rank_weights *w, g4_mat *m, int layout, int tail, int64_t seg, g4_err *err) {
    if (!m->data || m->dtype != G4_DT_Q4_0 || m->layout == layout) return G4_OK;
    if (layout == G4_Q4_GROUPED && !seg) return G4_OK; /* slices the layout cannot follow: stay blocks */
    if (m->layout == G4_Q4_GROUPED) seg = m->layout_cols;
    const int parts = m->col_parts > 1 ? m->col_parts : 1; /* column parts: the rows of the parts */
    const int64_t rows = m->rows * parts, cols = m->cols / parts;
    const size_t rb = g4_dtype_row_bytes(G4_DT_Q4_0, cols);
    uint8_t *d = (uint8_t *)m->data;
    if (!owned_big(w, m->data)) {
        if (!(d = g4_big_alloc(rb * (size_t)rows)))
            return g4_err_set(err, G4_ENOMEM, "out of memory for a %lldx%lld matrix", (long long)m->rows, (long long)m->cols);
        for (int64_t r = 0; r < rows; r++) memcpy(d + (size_t)r * rb, (const uint8_t *)m->data + r * m->ld_bytes, rb);
        int rc = own_big(w, d, err);
        if (rc) { g4_big_free(d); return rc; }
        w->copied_bytes += rb * (size_t)rows;
        m->data = d;
        m->ld_bytes = (int64_t)rb;
    }
    const size_t sb = g4_dtype_row_bytes(G4_DT_Q4_0, seg);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c += seg) {
            uint8_t *p = d + r * m->ld_bytes + (size_t)(c / seg) * sb;
            if (layout == G4_Q4_GROUPED) g4_q4_0_group_row(p, seg / G4_Q4_BLOCK, tail);
            else g4_q4_0_ungroup_row(p, seg / G4_Q4_BLOCK, m->q4_tail);
        }
    m->layout = layout;
    m->layout_cols = layout == G4_Q4_GROUPED ? seg : 0;
    m->q4_tail = layout == G4_Q4_GROUPED && tail;
    return G4_OK;
}

int g4_weights_set_q4_layout(g4_rank_weights *w, const g4_config *cfg, const g4_tp_plan *plan, int layout, int tail, g4_err *err) {
    int rc = G4_OK;
    for (int l = 0; l < cfg->n_layers && rc == G4_OK; l++) {
        g4_layer_weights *L = &w->layers[l];
        const struct { g4_mat *m; int kind; } ms[] = {{&L->q, G4_T_Q}, {&L->k, G4_T_K}, {&L->v, G4_T_V}, {&L->o, G4_T_O},
                                                      {&L->gate, G4_T_GATE}, {&L->up, G4_T_UP}, {&L->down, G4_T_DOWN}};
        for (size_t i = 0; i < sizeof ms / sizeof *ms && rc == G4_OK; i++)
            rc = relayout_q4(w, ms[i].m, layout, tail, g4_q4_0_group_cols(cfg, plan, ms[i].kind, l, ms[i].m->cols), err);
    }
    /* the tied head by rows (each rank holds whole vocabulary rows); its lookups go through
     * g4_mat_lookup_row (kernels.h), which reads either layout */
    if (rc == G4_OK) rc = relayout_q4(w, &w->embed, layout, tail, g4_q4_0_group_cols(cfg, plan, G4_T_EMBED, -1, w->embed.cols), err);
    return rc;
}

/* m (q4_0 or q8_0, row-parallel) as `parts` column parts (kernels.h col_parts):
 * part p of every row copied into its own rows x cols/parts matrix, all parts in one new
 * allocation; the old one freed if owned here, else its map pages released. */
static int split_cols(g4_rank_weights *w, g4_mat *m, int parts, g4_err *err) {
    const size_t rb = g4_dtype_row_bytes(m->dtype, m->cols), pb = rb / (size_t)parts;
    uint8_t *d = g4_big_alloc(rb * (size_t)m->rows);
    if (!d) return g4_err_set(err, G4_ENOMEM, "out of memory for a %lldx%lld matrix", (long long)m->rows, (long long)m->cols);
    for (int p = 0; p < parts; p++)
        for (int64_t r = 0; r < m->rows; r++)
            memcpy(d + ((size_t)p * (size_t)m->rows + (size_t)r) * pb, (const uint8_t *)m->data + r * m->ld_bytes + (size_t)p * pb, pb);
    int i = 0;
    while (i < w->n_big && w->big[i] != m->data) i++;
    if (i < w->n_big) {
        g4_big_free(w->big[i]);
        w->big[i] = d;
    } else {
        int rc = own_big(w, d, err);
        if (rc) { g4_big_free(d); return rc; }
        release_source(m);
        w->copied_bytes += rb * (size_t)m->rows;
    }
    m->data = d;
    m->ld_bytes = (int64_t)pb;
    m->col_parts = parts;
    return G4_OK;
}

int g4_weights_split_rowpar(g4_rank_weights *w, const g4_config *cfg, const g4_tp_plan *plan, int64_t part_cols, g4_err *err) {
    int rc = G4_OK;
    for (int l = 0; l < cfg->n_layers && rc == G4_OK; l++) {
        g4_layer_weights *L = &w->layers[l];
        g4_mat *ms[2] = {&L->o, &L->down};
        const int kinds[2] = {G4_T_O, G4_T_DOWN};
        for (int i = 0; i < 2 && rc == G4_OK; i++) {
            if (!ms[i]->data || ms[i]->col_parts > 1) continue; /* as stored */
            const int p = g4_rowpar_col_parts(cfg, plan, ms[i]->dtype, kinds[i], l, ms[i]->cols, part_cols);
            if (p > 1) rc = split_cols(w, ms[i], p, err);
        }
    }
    return rc;
}
