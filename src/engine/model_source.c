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
    int64_t r0, nr, c0, nc;
    g4_tp_tensor_slice(&c->s->cfg, c->plan, spec, &r0, &nr, &c0, &nc);
    if (spec->ndim == 1) { r0 = 0; c0 = 0; nc = 1; }
    *view = g4_checkpoint_view(&c->s->ck, idx, r0, nr, c0, nc);
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

/* The dtype a down_proj is held in (checkpoint, or an opened rank of an artifact). */
static int stored_dtype(const g4_model_source *s, int idx) {
    if (!s->is_artifact) return g4_checkpoint_dtype(&s->ck, idx);
    for (int r = 0; r < s->art->tp; r++)
        if (s->art->ranks[r].ents) return s->art->ranks[r].ents[idx].dtype;
    return -1;
}

/* A converted dtype applies to every matrix; else the stored one, and of mixed layers the one
 * with the widest blocks (its slices fit the others too). */
int g4_model_source_wdtype(const g4_model_source *s, g4_dtype_req req) {
    if (req.mat >= 0) return req.mat;
    const g4_tensor_spec *specs = s->is_artifact ? s->art->specs : s->ck.specs;
    int n = s->is_artifact ? s->art->n_specs : s->ck.n_specs, wd = -1;
    for (int i = 0; i < n; i++)
        if (specs[i].kind == G4_T_DOWN) {
            int d = g4_tensor_dtype_for(G4_T_DOWN, stored_dtype(s, i), req);
            if (wd < 0 || g4_tp_block_cols(d) > g4_tp_block_cols(wd)) wd = d;
        }
    return wd;
}

uint64_t g4_model_source_rank_bytes(const g4_model_source *s, const g4_tp_plan *plan, g4_dtype_req dtype) {
    const g4_tensor_spec *specs = s->is_artifact ? s->art->specs : s->ck.specs;
    const int n = s->is_artifact ? s->art->n_specs : s->ck.n_specs;
    uint64_t b = 0;
    for (int i = 0; i < n; i++) {
        int64_t r0, nr, c0, nc;
        g4_tp_tensor_slice(&s->cfg, plan, &specs[i], &r0, &nr, &c0, &nc);
        if (specs[i].ndim == 1) { b += sizeof(float) * (uint64_t)nr; continue; }
        const int d = g4_tensor_dtype_for(specs[i].kind, stored_dtype(s, i), dtype);
        b += (uint64_t)g4_dtype_row_bytes(d >= 0 ? d : stored_dtype(s, i), nc) * (uint64_t)nr;
    }
    return b;
}

int g4_model_source_bind(g4_model_source *s, const g4_tp_plan *plan, g4_dtype_req dtype, int copy, g4_rank_weights *w, g4_err *err) {
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

int g4_model_source_has_vision(const g4_model_source *s) {
    if (!s->is_artifact) return s->ck.has_vision;
    return s->art->n_vision > 0 && s->art->ranks[0].map.data != NULL;
}

const char *g4_model_source_vision_note(const g4_model_source *s) {
    if (g4_model_source_has_vision(s)) return "";
    if (!s->cfg.vision.has_vision) return "config.json has no vision_config";
    if (!s->is_artifact) return s->ck.vision_note;
    if (!s->art->n_vision) return "the artifact folder holds no vision tower (sharded with --no-vision or by a build without towers; shard it again)";
    return "the vision tower is in rank 0's file, which this process did not open";
}

static int vision_ck_get(void *p, const g4_tensor_spec *spec, int idx, g4_mat *view, g4_err *err) {
    (void)spec;
    (void)err;
    *view = g4_checkpoint_vision_view(p, idx);
    return G4_OK;
}

static int vision_art_get(void *p, const g4_tensor_spec *spec, int idx, g4_mat *view, g4_err *err) {
    (void)spec;
    return g4_artifact_vision_view(p, idx, view, err);
}

int g4_model_source_vision(g4_model_source *s, g4_vision_source *out, g4_err *err) {
    if (!g4_model_source_has_vision(s)) return g4_err_set(err, G4_EUNSUPPORTED, "this model has no vision tower: %s", g4_model_source_vision_note(s));
    if (s->is_artifact) *out = (g4_vision_source){s->art->vspecs, s->art->n_vision, vision_art_get, s->art};
    else *out = (g4_vision_source){s->ck.vspecs, s->ck.n_vspecs, vision_ck_get, &s->ck};
    return G4_OK;
}

int g4_model_source_vision_create(g4_model_source *s, const g4_kernels *K, g4_vision **out, g4_err *err) {
    g4_vision_source vs;
    int rc = g4_model_source_vision(s, &vs, err);
    return rc ? rc : g4_vision_create(&s->cfg, &vs, K, out, err);
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
