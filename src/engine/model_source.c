/* model_source.c — opens a model folder of either kind (see model_source.h). */
#include "engine/model_source.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mapfile.h"
#include "engine/gen_config.h"
#include "model/artifact.h"

static int hf_get(void *src, const g4_tensor_spec *spec, int idx, g4_mat *view, g4_err *err);

typedef struct { g4_model_source *s; const g4_tp_plan *plan; } hf_ctx;

static int hf_get(void *p, const g4_tensor_spec *spec, int idx, g4_mat *view, g4_err *err) {
    hf_ctx *c = p;
    const g4_checkpoint *ck = &c->s->ck;
    const g4_st_tensor *t = ck->bound[idx];
    int dt = g4_checkpoint_dtype(ck, idx);
    int64_t r0, nr, c0, nc;
    g4_tp_tensor_slice(&c->s->cfg, c->plan, spec, &r0, &nr, &c0, &nc);
    int64_t full_cols = spec->ndim == 2 ? spec->shape[1] : spec->shape[0];
    size_t es = g4_dtype_row_bytes(dt, 1);
    if (spec->ndim == 1) {
        *view = (g4_mat){t->data, dt, spec->shape[0], 1, (int64_t)es};
        view->rows = nr;
        view->cols = 1;
        return G4_OK;
    }
    *view = (g4_mat){t->data + (size_t)r0 * (size_t)full_cols * es + (size_t)c0 * es, dt, nr, nc, (int64_t)((size_t)full_cols * es)};
    (void)err;
    return G4_OK;
}

typedef struct { g4_artifact *a; int rank; } art_ctx;

/* Artifacts: the rank's rectangle is already cut and contiguous; a view into the map. */
static int art_get(void *p, const g4_tensor_spec *spec, int idx, g4_mat *view, g4_err *err) {
    art_ctx *c = p;
    int rc = g4_artifact_view(c->a, c->rank, idx, view, err);
    if (rc == G4_OK && spec->ndim == 1) view->cols = 1;
    return rc;
}

int g4_model_source_tp(const char *dir) { return g4_artifact_is_dir(dir) ? g4_artifact_manifest_tp(dir) : 0; }

/* The stop ids of generation_config.json: absent is fine, unreadable or malformed is an error
 * (the same reader and rules as `g4tp run`'s sampling defaults). */
static int read_gen_config(g4_model_source *s, const char *dir, g4_err *err) {
    char *p = g4_path_join(dir, "generation_config.json");
    if (!p) return g4_err_set(err, G4_ENOMEM, "out of memory");
    g4_gen_config gc;
    int present, rc = g4_optional_file(p, &present, err);
    if (!rc && present) rc = g4_gen_config_load_file(p, &gc, err);
    free(p);
    for (int i = 0; !rc && present && i < gc.n_eos && s->n_gen_eos < 8; i++) s->gen_eos[s->n_gen_eos++] = gc.eos_ids[i];
    return rc;
}

int g4_model_source_open(g4_model_source *s, const char *dir, int only_rank, int tp, int verify, g4_err *err) {
    memset(s, 0, sizeof *s);
    int rc = g4_check_dir(dir, "model folder", err);
    if (rc) return rc;
    if (g4_artifact_is_dir(dir)) {
        if ((rc = g4_artifact_open(dir, only_rank, tp, verify, &s->art, err))) return rc;
        s->is_artifact = 1;
        s->cfg = s->art->cfg; /* the source owns the config from here on */
        memset(&s->art->cfg, 0, sizeof s->art->cfg);
    } else {
        if ((rc = g4_checkpoint_open(dir, &s->ck, err))) return rc;
        s->cfg = s->ck.cfg; /* the source owns the config from here on */
    }
    if ((rc = read_gen_config(s, dir, err))) g4_model_source_close(s);
    return rc;
}

/* Checkpoints hold f32/bf16/f16 only (-1: none of them is block-quantized); an artifact holds
 * its manifest's dtype. */
int g4_model_source_wdtype(const g4_model_source *s, int convert) {
    return g4_tensor_dtype_for(G4_T_DOWN, s->is_artifact ? s->art->dtype : -1, convert);
}

int g4_model_source_bind(g4_model_source *s, const g4_tp_plan *plan, int dtype, int copy, g4_rank_weights *w, g4_err *err) {
    int rc;
    if (s->is_artifact) {
        if (plan->tp != s->art->tp)
            return g4_err_set(err, G4_EINVAL, "%s holds artifacts for TP %d, not TP %d", s->art->dir, s->art->tp, plan->tp);
        art_ctx ac = {s->art, plan->rank};
        rc = g4_weights_bind(&s->cfg, plan, s->art->specs, s->art->n_specs, art_get, &ac, dtype, copy, w, err);
    } else {
        hf_ctx c = {s, plan};
        rc = g4_weights_bind(&s->cfg, plan, s->ck.specs, s->ck.n_specs, hf_get, &c, dtype, copy, w, err);
    }
    /* the plan was cut for one weight dtype; blocks straddling its slices would break the tree */
    for (int l = 0; rc == G4_OK && l < s->cfg.n_layers; l++) {
        char name[48];
        snprintf(name, sizeof name, "layers.%d.down_proj", l);
        rc = g4_tp_check_plan_dtype(plan, w->layers[l].down.dtype, name, err);
    }
    if (rc) g4_weights_free(w);
    return rc;
}

void g4_model_source_close(g4_model_source *s) {
    if (s->art) {
        g4_artifact_close(s->art);
        g4_config_free(&s->cfg);
    } else if (s->ck.dir) {
        s->ck.cfg = s->cfg;
        g4_checkpoint_close(&s->ck);
    } else {
        g4_config_free(&s->cfg);
    }
    memset(s, 0, sizeof *s);
}
