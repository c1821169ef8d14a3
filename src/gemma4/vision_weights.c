/* vision_weights.c — binds the vision tower's weights (see vision_weights.h). */
#include "gemma4/vision_weights.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int dense(int dt) { return dt == G4_DT_F32 || dt == G4_DT_BF16 || dt == G4_DT_F16; }

/* Where a 1-D (or scalar) tensor of kind goes; NULL for matrices and the table. */
static float **vec_slot(g4_vision_weights *w, const g4_tensor_spec *s) {
    g4_vision_layer *L = s->layer >= 0 ? &w->layers[s->layer] : NULL;
    switch (s->kind) {
    case G4_VT_LN_IN: return &L->ln_in;
    case G4_VT_LN_POST_ATTN: return &L->ln_post_attn;
    case G4_VT_LN_PRE_FF: return &L->ln_pre_ff;
    case G4_VT_LN_POST_FF: return &L->ln_post_ff;
    case G4_VT_QNORM: return &L->q_norm;
    case G4_VT_KNORM: return &L->k_norm;
    case G4_VT_STD_BIAS: return &w->std_bias;
    case G4_VT_STD_SCALE: return &w->std_scale;
    default: return NULL;
    }
}

static g4_mat *mat_slot(g4_vision_weights *w, const g4_tensor_spec *s) {
    switch (s->kind) {
    case G4_VT_INPUT_PROJ: return &w->input_proj;
    case G4_VT_POS_TABLE: return &w->pos_table;
    case G4_VT_PROJ: return &w->proj;
    case G4_VT_Q: return &w->layers[s->layer].lin[G4_VL_Q];
    case G4_VT_K: return &w->layers[s->layer].lin[G4_VL_K];
    case G4_VT_V: return &w->layers[s->layer].lin[G4_VL_V];
    case G4_VT_O: return &w->layers[s->layer].lin[G4_VL_O];
    case G4_VT_GATE: return &w->layers[s->layer].lin[G4_VL_GATE];
    case G4_VT_UP: return &w->layers[s->layer].lin[G4_VL_UP];
    case G4_VT_DOWN: return &w->layers[s->layer].lin[G4_VL_DOWN];
    default: return NULL;
    }
}

int g4_vision_weights_bind(const g4_config *cfg, const g4_vision_source *src, g4_vision_weights *w, g4_err *err) {
    memset(w, 0, sizeof *w);
    if (!cfg->vision.has_vision) return g4_err_set(err, G4_EUNSUPPORTED, "the config has no vision_config");
    g4_tensor_spec *want;
    int n_want, rc = g4_vision_tensor_specs(cfg, &want, &n_want, err);
    if (rc) return rc;
    if (src->n_specs != n_want) rc = g4_err_set(err, G4_EFORMAT, "the vision tower has %d tensors; its config needs %d", src->n_specs, n_want);
    for (int i = 0; rc == G4_OK && i < n_want; i++)
        if (strcmp(src->specs[i].name, want[i].name))
            rc = g4_err_set(err, G4_EFORMAT, "vision tensor %d is %s; the config's table has %s there", i, src->specs[i].name, want[i].name);
    free(want);
    if (rc) return rc;
    const int nl = cfg->vision.n_layers;
    size_t nvec = 0;
    if (!(w->layers = calloc((size_t)nl, sizeof *w->layers))) return g4_err_set(err, G4_ENOMEM, "out of memory");
    for (int i = 0; i < src->n_specs; i++)
        if (!mat_slot(w, &src->specs[i])) nvec += (size_t)g4_tensor_spec_numel(&src->specs[i]);
    if (!(w->vecs = malloc(sizeof(float) * (nvec + 1)))) { free(w->layers); w->layers = NULL; return g4_err_set(err, G4_ENOMEM, "out of memory"); }
    for (int l = 0; l < nl; l++)
        for (int j = 0; j < G4_VL_N; j++) {
            w->layers[l].clip[j][G4_CLIP_IN_MIN] = w->layers[l].clip[j][G4_CLIP_OUT_MIN] = -INFINITY;
            w->layers[l].clip[j][G4_CLIP_IN_MAX] = w->layers[l].clip[j][G4_CLIP_OUT_MAX] = INFINITY;
        }
    float *next = w->vecs;
    for (int i = 0; i < src->n_specs && rc == G4_OK; i++) {
        const g4_tensor_spec *s = &src->specs[i];
        g4_mat v;
        int64_t rows, cols;
        g4_tensor_spec_rows_cols(s, &rows, &cols);
        if ((rc = src->get(src->ctx, s, i, &v, err))) break;
        if (v.rows != rows || v.cols != cols) {
            rc = g4_err_set(err, G4_ESHAPE, "vision tensor %s is %lldx%lld; expected %lldx%lld", s->name, (long long)v.rows, (long long)v.cols,
                            (long long)rows, (long long)cols);
            break;
        }
        if (!dense(v.dtype) || v.layout) {
            rc = g4_err_set(err, G4_EUNSUPPORTED, "vision tensor %s is %s: the tower reads f32, bf16 or f16", s->name, g4_dtype_name(v.dtype));
            break;
        }
        g4_mat *m = mat_slot(w, s);
        if (m) {
            *m = v;
            w->mapped_bytes += g4_dtype_row_bytes(v.dtype, v.cols) * (size_t)v.rows;
            continue;
        }
        const int64_t n = rows * cols; /* a vector or a scalar: one row, or one element per row */
        for (int64_t r = 0; r < rows; r++) g4_kernels_scalar.row_to_f32(next + r * cols, (const char *)v.data + r * v.ld_bytes, v.dtype, cols);
        if (s->kind == G4_VT_CLIP) w->layers[s->layer].clip[s->sub / 4][s->sub % 4] = next[0];
        else *vec_slot(w, s) = next;
        next += n;
    }
    for (int l = 0; rc == G4_OK && l < nl; l++)
        for (int j = 0; j < G4_VL_N; j++) {
            const float *c = w->layers[l].clip[j];
            if (isnan(c[0]) || isnan(c[1]) || isnan(c[2]) || isnan(c[3]) || c[G4_CLIP_IN_MIN] > c[G4_CLIP_IN_MAX] || c[G4_CLIP_OUT_MIN] > c[G4_CLIP_OUT_MAX]) {
                rc = g4_err_set(err, G4_EFORMAT, "vision layer %d: the clip bounds of linear %d are not a range (min > max or NaN)", l, j);
                break;
            }
        }
    if (rc) g4_vision_weights_free(w);
    return rc;
}

void g4_vision_weights_free(g4_vision_weights *w) {
    free(w->layers);
    free(w->vecs);
    memset(w, 0, sizeof *w);
}
