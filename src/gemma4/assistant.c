/* assistant.c — the Gemma-4 MTP assistant on one rank: config and checkpoint checks, binding,
 * and the draft steps (see assistant.h; the math: shared/assistant/ASSISTANT.md).
 *
 * Work of one step, for the T sequences drafting together: the input embedding (the rank holding
 * the token's row contributes it, an all-reduce of zeros elsewhere), then every matrix product
 * as this rank's share of the output rows, gathered (an all-reduce over buffers that are zero
 * outside each rank's rows: x + 0 = x, and "+ 0.0f" afterwards makes every zero +0 at every TP
 * degree); element-wise work (norms, RoPE, residuals) is replicated and runs on the rank's first
 * thread (it is tiny); matrix rows and attention items are split statically over the rank's
 * threads. The head: each rank scores its vocabulary rows and the ranks agree on the argmax. */
#include "gemma4/assistant.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/mapfile.h"
#include "model/matconv.h"
#include "model/safetensors.h"

enum { ATT_GROUP = 4 };

typedef struct {
    g4_mat q, o, gate, up, down;
    float *ln_in, *ln_post_attn, *ln_pre_ff, *ln_post_ff, *q_norm; /* [Ha], q_norm [hd] */
    float scalar;
    int full, hd, src;        /* src: the target layer whose keys and values it reads */
    float *inv_freq;          /* [hd / 2] */
    int h0, h1;               /* this rank's query heads */
} asst_layer;

struct g4_asst {
    g4_asst_info info;
    g4_asst_target t;
    g4_config tc;             /* the assistant's text_config */
    int64_t Ha, Ht, V, I;
    int nh, n_layers, C, topk;
    int32_t *order;           /* [V] token_ordering (ordered embeddings) */
    g4_mat embed, pre, post, cent;
    float *norm;
    asst_layer *L;
    g4_st_file *files;
    int n_files;
    float embed_scale;
    int tp, rank;
    int64_t max_nv, hd_max, q_dim;
    /* workspace, [max_seqs][...] */
    float *x, *emb, *z, *xn, *buf, *qb, *attn, *gate, *up, *hcur, *loc, *cl, *pairs, *recv;
    int32_t *cur, *sel;
    uint8_t *ok;
    void **scratch;           /* [nth] matmul scratch */
    float **scores;           /* [nth] attention scores */
    void **segs;              /* [nth][tlen + 2] */
    /* the current attention phase */
    const asst_layer *al;
    int T;
    const int32_t *seq, *pos;
};

/* ---- config ------------------------------------------------------------------------------ */

static int bad(g4_err *err, const char *dir, int code, const char *what) {
    return g4_err_set(err, code, "assistant %s: %s", dir, what);
}

/* The last target layer of each kind: what the assistant's layers of that kind read. */
static int last_of_kind(const g4_config *c, int full) {
    for (int l = c->n_layers - 1; l >= 0; l--)
        if (c->layers[l].full == full) return l;
    return -1;
}

typedef struct {
    g4_config tc;
    int64_t backbone;
    int ordered, C, topk;
} asst_cfg;

static int parse_config(const char *dir, const g4_config *target, asst_cfg *c, g4_err *err) {
    memset(c, 0, sizeof *c);
    char *path = g4_path_join(dir, "config.json"), *text = NULL;
    size_t len;
    int rc = g4_read_file(path, &text, &len, err);
    free(path);
    if (rc) return g4_err_prefix(err, "assistant %s: ", dir);
    json_error_t je;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je), *tc = NULL;
    free(text);
    char msg[512];
    if (!root || !json_is_object(root)) {
        snprintf(msg, sizeof msg, "config.json is not a JSON object (%s)", root ? "" : je.text);
        rc = bad(err, dir, G4_EFORMAT, msg);
        goto out;
    }
    json_t *mt = json_object_get(root, "model_type");
    if (!json_is_string(mt) || strcmp(json_string_value(mt), "gemma4_assistant") != 0) {
        snprintf(msg, sizeof msg, "config.json: model_type is %s%s%s, not \"gemma4_assistant\" (an MTP assistant checkpoint such as "
                 "google/gemma-4-31B-it-assistant)", json_is_string(mt) ? "\"" : "", json_is_string(mt) ? json_string_value(mt) : "missing",
                 json_is_string(mt) ? "\"" : "");
        rc = bad(err, dir, G4_EUNSUPPORTED, msg);
        goto out;
    }
    /* top-level keys: Hugging Face's defaults (configuration_gemma4_assistant.py) when absent */
    json_t *v = json_object_get(root, "backbone_hidden_size");
    c->backbone = json_is_integer(v) ? json_integer_value(v) : v ? -1 : 1536;
    v = json_object_get(root, "use_ordered_embeddings");
    c->ordered = json_is_true(v);
    v = json_object_get(root, "num_centroids");
    c->C = json_is_integer(v) ? (int)json_integer_value(v) : v ? -1 : 2048;
    v = json_object_get(root, "centroid_intermediate_top_k");
    c->topk = json_is_integer(v) ? (int)json_integer_value(v) : v ? -1 : 32;
    if (c->backbone < 1 || c->C < 1 || c->topk < 1) {
        rc = bad(err, dir, G4_EFORMAT, "config.json: backbone_hidden_size, num_centroids and centroid_intermediate_top_k must be positive integers");
        goto out;
    }
    tc = json_deep_copy(json_object_get(root, "text_config"));
    if (!json_is_object(tc)) { rc = bad(err, dir, G4_EFORMAT, "config.json: text_config is missing"); goto out; }
    /* validate_architecture: every layer KV-shared (0 or absent means all), no per-layer inputs */
    json_t *nl = json_object_get(tc, "num_hidden_layers"), *ks = json_object_get(tc, "num_kv_shared_layers");
    json_t *vp = json_object_get(tc, "vocab_size_per_layer_input"), *dw = json_object_get(tc, "use_double_wide_mlp");
    if (!json_is_integer(nl)) { rc = bad(err, dir, G4_EFORMAT, "config.json: text_config.num_hidden_layers must be an integer"); goto out; }
    if (ks && !json_is_null(ks) && (!json_is_integer(ks) || (json_integer_value(ks) != 0 && json_integer_value(ks) != json_integer_value(nl)))) {
        rc = bad(err, dir, G4_EUNSUPPORTED, "config.json: num_kv_shared_layers must equal num_hidden_layers (every assistant layer reads the target's KV)");
        goto out;
    }
    if (!json_is_integer(vp) || json_integer_value(vp) != 0) {
        rc = bad(err, dir, G4_EUNSUPPORTED, "config.json: text_config.vocab_size_per_layer_input must be 0 (per-layer inputs are not supported)");
        goto out;
    }
    if (json_is_true(dw)) { rc = bad(err, dir, G4_EUNSUPPORTED, "config.json: use_double_wide_mlp is not supported"); goto out; }
    /* the rest is a Gemma-4 text config: parse it as one, its layers read the target's KV */
    json_object_set_new(tc, "num_kv_shared_layers", json_integer(0));
    json_object_set_new(tc, "model_type", json_string("gemma4_text"));
    json_object_del(tc, "architectures");
    if (!json_object_get(tc, "expert_intermediate_size")) json_object_set_new(tc, "expert_intermediate_size", json_null());
    char *dump = json_dumps(tc, JSON_COMPACT);
    if (!dump) { rc = g4_err_set(err, G4_ENOMEM, "out of memory"); goto out; }
    rc = g4_config_parse(dump, strlen(dump), &c->tc, err);
    free(dump);
    if (rc) { g4_err_prefix(err, "assistant %s: text_config: ", dir); goto out; }
    if (c->backbone != target->hidden_size) {
        rc = g4_err_set(err, G4_ESHAPE, "assistant %s: backbone_hidden_size %lld does not match the target's hidden_size %lld", dir,
                        (long long)c->backbone, (long long)target->hidden_size);
        goto out;
    }
    if (c->tc.vocab_size != target->vocab_size) {
        rc = g4_err_set(err, G4_ESHAPE, "assistant %s: vocab_size %lld does not match the target's vocab_size %lld", dir,
                        (long long)c->tc.vocab_size, (long long)target->vocab_size);
        goto out;
    }
    for (int i = 0; i < c->tc.n_layers; i++) {
        const g4_layer_cfg *lc = &c->tc.layers[i];
        const int src = last_of_kind(target, lc->full);
        if (src < 0) {
            rc = g4_err_set(err, G4_EUNSUPPORTED, "assistant %s: layer %d is %s attention, but the target has no such layer to read keys from", dir, i,
                            lc->full ? "full" : "sliding");
            goto out;
        }
        const g4_layer_cfg *tl = &target->layers[src];
        if (tl->head_dim != lc->head_dim || tl->n_kv != lc->n_kv) {
            rc = g4_err_set(err, G4_ESHAPE, "assistant %s: layer %d reads the target's layer %d, which has %d KV heads of %d, the assistant expects %d of %d", dir,
                            i, src, tl->n_kv, tl->head_dim, lc->n_kv, lc->head_dim);
            goto out;
        }
    }
    if (c->ordered && (c->tc.vocab_size % c->C || c->topk > c->C)) {
        rc = bad(err, dir, G4_EFORMAT, "config.json: with use_ordered_embeddings, vocab_size must be a multiple of num_centroids and centroid_intermediate_top_k at most num_centroids");
        goto out;
    }
out:
    json_decref(tc);
    json_decref(root);
    if (rc) g4_config_free(&c->tc);
    return rc;
}

int g4_asst_probe(const char *dir, const g4_config *target, g4_asst_info *info, g4_err *err) {
    asst_cfg c;
    int rc = parse_config(dir, target, &c, err);
    if (rc) return rc;
    memset(info, 0, sizeof *info);
    info->window = c.tc.sliding_window;
    info->n_layers = c.tc.n_layers;
    info->hidden = c.tc.hidden_size;
    info->ordered = c.ordered;
    g4_config_free(&c.tc);
    return G4_OK;
}

/* ---- tensors ----------------------------------------------------------------------------- */

static const g4_st_tensor *find(const g4_asst *a, const char *name) {
    for (int i = 0; i < a->n_files; i++) {
        const g4_st_tensor *t = g4_st_find(&a->files[i], name);
        if (t) return t;
    }
    return NULL;
}

static int kernel_dtype(int st) {
    return st == G4_ST_F32 ? G4_DT_F32 : st == G4_ST_BF16 ? G4_DT_BF16 : st == G4_ST_F16 ? G4_DT_F16 : -1;
}

/* Tensor `name` must be there, of a float dtype, shaped [rows, cols] (cols 0: 1-D [rows]). */
static int get(const g4_asst *a, const char *dir, const char *name, int64_t rows, int64_t cols, const g4_st_tensor **out, g4_err *err) {
    const g4_st_tensor *t = find(a, name);
    if (!t) return g4_err_set(err, G4_ENOTFOUND, "assistant %s: tensor %s is missing", dir, name);
    if (kernel_dtype(t->dtype) < 0)
        return g4_err_set(err, G4_ESHAPE, "assistant %s: %s is %s (F32, BF16 or F16 expected)", dir, name, g4_st_dtype_name(t->dtype));
    const int nd = cols ? 2 : 1;
    if (t->ndim != nd || t->shape[0] != rows || (cols && t->shape[1] != cols)) {
        char got[96] = "";
        for (int d = 0; d < t->ndim; d++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", d ? ", " : "", (long long)t->shape[d]);
        if (cols) return g4_err_set(err, G4_ESHAPE, "assistant %s: %s has shape [%s], expected [%lld, %lld]", dir, name, got, (long long)rows, (long long)cols);
        return g4_err_set(err, G4_ESHAPE, "assistant %s: %s has shape [%s], expected [%lld]", dir, name, got, (long long)rows);
    }
    *out = t;
    return G4_OK;
}

static int get_mat(const g4_asst *a, const char *dir, const char *name, int64_t rows, int64_t cols, g4_mat *m, g4_err *err) {
    const g4_st_tensor *t;
    int rc = get(a, dir, name, rows, cols, &t, err);
    if (rc) return rc;
    const int dt = kernel_dtype(t->dtype);
    *m = (g4_mat){.data = t->data, .dtype = dt, .rows = rows, .cols = cols, .ld_bytes = (int64_t)g4_dtype_row_bytes(dt, cols)};
    return G4_OK;
}

static float elem_f32(const g4_st_tensor *t, int64_t i) {
    switch (t->dtype) {
    case G4_ST_BF16: return g4_bf16_to_f32(((const uint16_t *)t->data)[i]);
    case G4_ST_F16: return g4_f16_to_f32(((const uint16_t *)t->data)[i]);
    default: { float f; memcpy(&f, t->data + 4 * i, 4); return f; }
    }
}

/* A 1-D float tensor of n elements, upcast to a new fp32 array. */
static int get_vec(const g4_asst *a, const char *dir, const char *name, int64_t n, float **out, g4_err *err) {
    const g4_st_tensor *t;
    int rc = get(a, dir, name, n, 0, &t, err);
    if (rc) return rc;
    if (!(*out = malloc(sizeof(float) * (size_t)n + 4))) return g4_err_set(err, G4_ENOMEM, "out of memory");
    for (int64_t i = 0; i < n; i++) (*out)[i] = elem_f32(t, i);
    return G4_OK;
}

static int open_files(g4_asst *a, const char *dir, g4_err *err) {
    char *idx = g4_path_join(dir, "model.safetensors.index.json");
    const char *names[64];
    int n = 0, rc = G4_OK;
    json_t *root = NULL;
    if (g4_file_exists(idx)) {
        json_error_t je;
        root = json_load_file(idx, JSON_REJECT_DUPLICATES, &je);
        json_t *wm = json_object_get(root, "weight_map");
        if (!json_is_object(wm)) rc = g4_err_set(err, G4_EFORMAT, "assistant %s: model.safetensors.index.json has no weight_map", dir);
        const char *k;
        json_t *v;
        json_object_foreach(wm, k, v) {
            if (rc) break;
            const char *f = json_string_value(v);
            if (!f || strchr(f, '/')) { rc = g4_err_set(err, G4_EFORMAT, "assistant %s: weight_map entry %s is not a file name", dir, k); break; }
            int dup = 0;
            for (int i = 0; i < n; i++) dup |= !strcmp(names[i], f);
            if (!dup && n == 64) rc = g4_err_set(err, G4_EFORMAT, "assistant %s: more than 64 safetensors files", dir);
            else if (!dup) names[n++] = f;
        }
    } else {
        names[n++] = "model.safetensors";
    }
    free(idx);
    if (!rc && !(a->files = calloc((size_t)n, sizeof *a->files))) rc = g4_err_set(err, G4_ENOMEM, "out of memory");
    for (int i = 0; !rc && i < n; i++) {
        char *p = g4_path_join(dir, names[i]);
        rc = g4_st_open(&a->files[i], p, err);
        free(p);
        if (rc) g4_err_prefix(err, "assistant %s: ", dir);
        else a->n_files++;
    }
    json_decref(root);
    return rc;
}

/* Names the checkpoint may hold that the drafter does not read: the KV projections of shared
 * layers (Hugging Face ignores them on load) and a stored copy of the tied head. */
static int ignorable(const char *name) {
    static const char *const parts[] = {".self_attn.k_proj.", ".self_attn.v_proj.", ".self_attn.k_norm.", ".self_attn.v_norm."};
    for (size_t i = 0; i < sizeof parts / sizeof *parts; i++)
        if (strstr(name, parts[i])) return 1;
    return !strcmp(name, "lm_head.weight");
}

static int is_expected(const g4_asst *a, const char *name) {
    static const char *const top[] = {"model.embed_tokens.weight", "model.norm.weight", "pre_projection.weight", "post_projection.weight"};
    for (size_t i = 0; i < 4; i++)
        if (!strcmp(name, top[i])) return 1;
    if (a->info.ordered && (!strcmp(name, "masked_embedding.centroids.weight") || !strcmp(name, "masked_embedding.token_ordering"))) return 1;
    static const char *const per[] = {"input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.q_norm.weight", "self_attn.o_proj.weight",
                                      "post_attention_layernorm.weight", "pre_feedforward_layernorm.weight", "mlp.gate_proj.weight",
                                      "mlp.up_proj.weight", "mlp.down_proj.weight", "post_feedforward_layernorm.weight", "layer_scalar"};
    int l, off = 0;
    if (sscanf(name, "model.layers.%d.%n", &l, &off) != 1 || off == 0 || l < 0 || l >= a->n_layers) return 0;
    for (size_t i = 0; i < sizeof per / sizeof *per; i++)
        if (!strcmp(name + off, per[i])) return 1;
    return 0;
}

static int bind(g4_asst *a, const char *dir, g4_err *err) {
    const int64_t Ha = a->Ha, V = a->V, I = a->I;
    int rc;
    for (int f = 0; f < a->n_files; f++)
        for (size_t i = 0; i < a->files[f].n_tensors; i++) {
            const char *nm = a->files[f].tensors[i].name;
            if (!is_expected(a, nm) && !ignorable(nm)) return g4_err_set(err, G4_EFORMAT, "assistant %s: unexpected tensor %s", dir, nm);
        }
    if ((rc = get_mat(a, dir, "model.embed_tokens.weight", V, Ha, &a->embed, err)) ||
        (rc = get_mat(a, dir, "pre_projection.weight", Ha, 2 * a->Ht, &a->pre, err)) ||
        (rc = get_mat(a, dir, "post_projection.weight", a->Ht, Ha, &a->post, err)) ||
        (rc = get_vec(a, dir, "model.norm.weight", Ha, &a->norm, err)))
        return rc;
    if (a->info.ordered) {
        if ((rc = get_mat(a, dir, "masked_embedding.centroids.weight", a->C, Ha, &a->cent, err))) return rc;
        const g4_st_tensor *t = find(a, "masked_embedding.token_ordering");
        if (!t || (t->dtype != G4_ST_I64 && t->dtype != G4_ST_I32) || t->ndim != 1 || t->shape[0] != V)
            return g4_err_set(err, G4_ESHAPE, "assistant %s: masked_embedding.token_ordering must be an integer tensor of shape [%lld]", dir, (long long)V);
        uint8_t *seen = calloc((size_t)V, 1);
        if (!seen || !(a->order = malloc(sizeof(int32_t) * (size_t)V))) { free(seen); return g4_err_set(err, G4_ENOMEM, "out of memory"); }
        for (int64_t i = 0; i < V && !rc; i++) {
            int64_t x;
            if (t->dtype == G4_ST_I64) memcpy(&x, t->data + 8 * i, 8);
            else { int32_t y; memcpy(&y, t->data + 4 * i, 4); x = y; }
            if (x < 0 || x >= V || seen[x]) rc = g4_err_set(err, G4_EFORMAT, "assistant %s: masked_embedding.token_ordering is not a permutation of the vocabulary (entry %lld = %lld)", dir, (long long)i, (long long)x);
            else { seen[x] = 1; a->order[i] = (int32_t)x; }
        }
        free(seen);
        if (rc) return rc;
    }
    char nm[128];
    for (int l = 0; l < a->n_layers; l++) {
        asst_layer *L = &a->L[l];
        const int64_t qd = (int64_t)a->nh * L->hd;
#define P(s) (snprintf(nm, sizeof nm, "model.layers.%d.%s", l, s), nm)
        if ((rc = get_mat(a, dir, P("self_attn.q_proj.weight"), qd, Ha, &L->q, err)) ||
            (rc = get_mat(a, dir, P("self_attn.o_proj.weight"), Ha, qd, &L->o, err)) ||
            (rc = get_mat(a, dir, P("mlp.gate_proj.weight"), I, Ha, &L->gate, err)) ||
            (rc = get_mat(a, dir, P("mlp.up_proj.weight"), I, Ha, &L->up, err)) ||
            (rc = get_mat(a, dir, P("mlp.down_proj.weight"), Ha, I, &L->down, err)) ||
            (rc = get_vec(a, dir, P("input_layernorm.weight"), Ha, &L->ln_in, err)) ||
            (rc = get_vec(a, dir, P("post_attention_layernorm.weight"), Ha, &L->ln_post_attn, err)) ||
            (rc = get_vec(a, dir, P("pre_feedforward_layernorm.weight"), Ha, &L->ln_pre_ff, err)) ||
            (rc = get_vec(a, dir, P("post_feedforward_layernorm.weight"), Ha, &L->ln_post_ff, err)) ||
            (rc = get_vec(a, dir, P("self_attn.q_norm.weight"), L->hd, &L->q_norm, err)))
            return rc;
        float *s;
        if ((rc = get_vec(a, dir, P("layer_scalar"), 1, &s, err))) return rc;
#undef P
        L->scalar = s[0];
        free(s);
        a->info.bytes += (size_t)(L->q.rows * L->q.ld_bytes + L->o.rows * L->o.ld_bytes + 2 * L->gate.rows * L->gate.ld_bytes +
                                  L->down.rows * L->down.ld_bytes);
    }
    a->info.bytes += (size_t)(a->embed.rows * a->embed.ld_bytes + a->pre.rows * a->pre.ld_bytes + a->post.rows * a->post.ld_bytes);
    return G4_OK;
}

/* This rank's query heads of each layer: those of the KV heads it holds; a KV head held by
 * several ranks (fewer KV heads than ranks) has its query heads split between them in rank order. */
static int assign_heads(g4_asst *a, g4_err *err) {
    const g4_tp_plan *mine = a->t.plan;
    g4_tp_plan *all = calloc((size_t)a->tp, sizeof *all);
    if (!all) return g4_err_set(err, G4_ENOMEM, "out of memory");
    int rc = G4_OK, made = 0;
    for (int r = 0; r < a->tp && !rc; r++, made++) rc = g4_tp_plan_make(a->t.cfg, mine->wdtype, a->tp, r, &all[r], err);
    for (int l = 0; l < a->n_layers && !rc; l++) {
        asst_layer *L = &a->L[l];
        const int nkv = a->t.cfg->layers[L->src].n_kv, ga = a->nh / nkv;
        const g4_tp_layer *ml = &mine->layers[L->src];
        L->h0 = L->h1 = -1;
        for (int g = ml->kv0; g < ml->kv0 + ml->n_kv_local; g++) {
            int R = 0, j = 0;
            for (int r = 0; r < a->tp; r++) {
                const g4_tp_layer *tl = &all[r].layers[L->src];
                if (g >= tl->kv0 && g < tl->kv0 + tl->n_kv_local) { if (r == a->rank) j = R; R++; }
            }
            const int lo = g * ga + j * ga / R, hi = g * ga + (j + 1) * ga / R;
            if (lo >= hi) continue;
            if (L->h0 < 0) L->h0 = lo;
            else if (lo != L->h1) { rc = g4_err_set(err, G4_EINVAL, "assistant layer %d: this rank's query heads are not contiguous", l); break; }
            L->h1 = hi;
        }
        if (L->h0 < 0) L->h0 = L->h1 = 0;
    }
    for (int r = 0; r < made; r++) g4_tp_plan_free(&all[r]);
    free(all);
    return rc;
}

/* ---- open / free -------------------------------------------------------------------------- */

static void ph_alloc(void *ctx, int ith, int nth) {
    g4_asst *a = ctx;
    size_t s = a->t.K->matmul_scratch_bytes(&a->embed, a->t.max_seqs);
    const g4_mat *all[] = {&a->pre, &a->post, &a->cent};
    for (int i = 0; i < 3; i++)
        if (all[i]->data) { size_t x = a->t.K->matmul_scratch_bytes(all[i], a->t.max_seqs); if (x > s) s = x; }
    for (int l = 0; l < a->n_layers; l++) {
        const g4_mat *m[] = {&a->L[l].q, &a->L[l].o, &a->L[l].gate, &a->L[l].up, &a->L[l].down};
        for (int i = 0; i < 5; i++) { size_t x = a->t.K->matmul_scratch_bytes(m[i], a->t.max_seqs); if (x > s) s = x; }
    }
    a->scratch[ith] = aligned_alloc(64, (s + 63) / 64 * 64 + 64);
    const int64_t keys = a->t.kv->tlen * a->t.kv->g.bs + 16;
    a->scores[ith] = malloc(sizeof(float) * G4_ATTN_KV_SCRATCH(ATT_GROUP, keys, a->hd_max));
    a->segs[ith] = malloc(sizeof(g4_kvq_seg) * (size_t)(a->t.kv->tlen + 2));
}

int g4_asst_open(const char *dir, const g4_asst_target *t, g4_asst **out, g4_err *err) {
    *out = NULL;
    asst_cfg c;
    int rc = parse_config(dir, t->cfg, &c, err);
    if (rc) return rc;
    g4_asst *a = calloc(1, sizeof *a);
    if (!a) { g4_config_free(&c.tc); return g4_err_set(err, G4_ENOMEM, "out of memory"); }
    a->t = *t;
    a->tc = c.tc;
    a->Ha = c.tc.hidden_size;
    a->Ht = t->cfg->hidden_size;
    a->V = c.tc.vocab_size;
    a->I = c.tc.intermediate_size;
    a->nh = c.tc.n_heads;
    a->n_layers = c.tc.n_layers;
    a->C = c.C;
    a->topk = c.topk;
    a->info.window = c.tc.sliding_window;
    a->info.n_layers = c.tc.n_layers;
    a->info.hidden = c.tc.hidden_size;
    a->info.ordered = c.ordered;
    a->embed_scale = g4_config_embed_scale(t->cfg);
    a->tp = t->comm->size;
    a->rank = t->comm->rank;
    int64_t v0;
    g4_tp_vocab_range(a->V, a->tp, 0, &v0, &a->max_nv);
    a->L = calloc((size_t)a->n_layers, sizeof *a->L);
    if (!a->L) { rc = g4_err_set(err, G4_ENOMEM, "out of memory"); goto fail; }
    if (a->V >= (1 << 24)) { rc = g4_err_set(err, G4_EUNSUPPORTED, "assistant %s: a vocabulary of 2^24 tokens or more", dir); goto fail; }
    for (int l = 0; l < a->n_layers; l++) {
        asst_layer *L = &a->L[l];
        L->full = c.tc.layers[l].full;
        L->hd = c.tc.layers[l].head_dim;
        L->src = last_of_kind(t->cfg, L->full);
        if (L->hd > 1024) { rc = g4_err_set(err, G4_EUNSUPPORTED, "assistant %s: head_dim %d (at most 1024)", dir, L->hd); goto fail; }
        if (L->hd > a->hd_max) a->hd_max = L->hd;
        if ((int64_t)a->nh * L->hd > a->q_dim) a->q_dim = (int64_t)a->nh * L->hd;
        if (!(L->inv_freq = malloc(sizeof(float) * (size_t)(L->hd / 2 + 1)))) { rc = g4_err_set(err, G4_ENOMEM, "out of memory"); goto fail; }
        g4_config_rope_inv_freq(&a->tc, l, L->inv_freq);
    }
    if ((rc = open_files(a, dir, err)) || (rc = bind(a, dir, err)) || (rc = assign_heads(a, err))) goto fail;
    const size_t T = (size_t)t->max_seqs;
    const int64_t wide = a->Ha > a->Ht ? a->Ha : a->Ht;
    a->x = malloc(sizeof(float) * T * (size_t)(2 * a->Ht) + 64);
    a->emb = malloc(sizeof(float) * T * (size_t)a->Ht + 64);
    a->hcur = malloc(sizeof(float) * T * (size_t)a->Ht + 64);
    a->z = malloc(sizeof(float) * T * (size_t)a->Ha + 64);
    a->xn = malloc(sizeof(float) * T * (size_t)a->Ha + 64);
    a->buf = malloc(sizeof(float) * T * (size_t)wide + 64);
    a->qb = malloc(sizeof(float) * T * (size_t)a->q_dim + 64);
    a->attn = malloc(sizeof(float) * T * (size_t)a->q_dim + 64);
    a->gate = malloc(sizeof(float) * T * (size_t)a->I + 64);
    a->up = malloc(sizeof(float) * T * (size_t)a->I + 64);
    a->loc = malloc(sizeof(float) * T * (size_t)a->max_nv + 64);
    a->cl = malloc(sizeof(float) * T * (size_t)a->C + 64);
    a->pairs = malloc(sizeof(float) * T * (size_t)(2 * a->tp) + 64);
    a->cur = malloc(sizeof(int32_t) * T + 4);
    a->sel = malloc(sizeof(int32_t) * (size_t)a->C + 4);
    a->ok = malloc(T + 1);
    const int nth = g4_pool_size(t->pool);
    a->scratch = calloc((size_t)nth, sizeof *a->scratch);
    a->scores = calloc((size_t)nth, sizeof *a->scores);
    a->segs = calloc((size_t)nth, sizeof *a->segs);
    int ok = a->x && a->emb && a->hcur && a->z && a->xn && a->buf && a->qb && a->attn && a->gate && a->up && a->loc && a->cl && a->pairs &&
             a->cur && a->sel && a->ok && a->scratch && a->scores && a->segs;
    if (ok) {
        g4_pool_run_unpinned(t->pool, ph_alloc, a);
        for (int i = 0; i < nth; i++) ok = ok && a->scratch[i] && a->scores[i] && a->segs[i];
    }
    if (!ok) { rc = g4_err_set(err, G4_ENOMEM, "out of memory for the assistant's workspace"); goto fail; }
    *out = a;
    return G4_OK;
fail:
    g4_asst_free(a);
    return rc;
}

void g4_asst_free(g4_asst *a) {
    if (!a) return;
    for (int l = 0; a->L && l < a->n_layers; l++) {
        asst_layer *L = &a->L[l];
        free(L->ln_in); free(L->ln_post_attn); free(L->ln_pre_ff); free(L->ln_post_ff); free(L->q_norm); free(L->inv_freq);
    }
    free(a->L);
    for (int i = 0; i < a->n_files; i++) g4_st_close(&a->files[i]);
    free(a->files);
    const int nth = a->t.pool ? g4_pool_size(a->t.pool) : 0;
    for (int i = 0; i < nth; i++) {
        if (a->scratch) free(a->scratch[i]);
        if (a->scores) free(a->scores[i]);
        if (a->segs) free(a->segs[i]);
    }
    free(a->scratch); free(a->scores); free(a->segs);
    free(a->x); free(a->emb); free(a->hcur); free(a->z); free(a->xn); free(a->buf); free(a->qb); free(a->attn); free(a->gate);
    free(a->up); free(a->loc); free(a->cl); free(a->pairs); free(a->recv); free(a->cur); free(a->sel); free(a->ok);
    free(a->order);
    free(a->norm);
    g4_config_free(&a->tc);
    free(a);
}

const g4_asst_info *g4_asst_get_info(const g4_asst *a) { return &a->info; }

/* ---- parallel pieces ---------------------------------------------------------------------- */

typedef struct {
    g4_asst *a;
    const g4_mat *W;
    const float *x;
    int64_t ldx;
    int T;
    float *y;
    int64_t ldy, r0, r1;
} mm_job;

static void mm_fn(void *ctx, int ith, int nth) {
    const mm_job *j = ctx;
    long a0, a1;
    g4_split_range((long)((j->r1 - j->r0 + 31) / 32), ith, nth, &a0, &a1); /* 32-row pieces */
    int64_t r0 = j->r0 + a0 * 32, r1 = j->r0 + a1 * 32;
    if (r1 > j->r1) r1 = j->r1;
    if (r0 < r1) j->a->t.K->matmul(j->W, j->x, j->ldx, j->T, j->y, j->ldy, r0, r1, j->a->scratch[ith]);
}

/* y rows [r0, r1) of every token = W x, on the rank's threads. */
static void par_mm(g4_asst *a, const g4_mat *W, const float *x, int64_t ldx, int T, float *y, int64_t ldy, int64_t r0, int64_t r1) {
    mm_job j = {a, W, x, ldx, T, y, ldy, r0, r1};
    if (r0 < r1) g4_pool_run(a->t.pool, mm_fn, &j);
}

/* buf [T][rows], zero outside this rank's rows, becomes every rank's full result. */
static int gather(g4_asst *a, float *buf, int T, int64_t rows) {
    const size_t n = (size_t)T * (size_t)rows, cap = a->t.comm_floats;
    for (size_t off = 0; off < n && a->tp > 1; off += cap)
        if (g4_comm_allreduce_sum(a->t.comm, buf + off, n - off < cap ? n - off : cap)) return G4_ECOMM;
    for (size_t i = 0; i < n; i++) buf[i] += 0.0f;
    return G4_OK;
}

/* y [T][W->rows] = W x on every rank: this rank's share of the rows, gathered. */
static int dist_mm(g4_asst *a, const g4_mat *W, const float *x, int T, float *y) {
    long r0, r1;
    g4_split_range((long)W->rows, a->rank, a->tp, &r0, &r1);
    memset(y, 0, sizeof(float) * (size_t)T * (size_t)W->rows);
    par_mm(a, W, x, W->cols, T, y, W->rows, r0, r1);
    return gather(a, y, T, W->rows);
}

/* The first key row a query at q reads on layer L: full layers all, sliding ones the last W+1. */
static int64_t first_row(const g4_asst *a, const asst_layer *L, int64_t q) {
    if (L->full) return 0;
    const int64_t w = a->info.window + (a->t.mutation == G4_MUT_ASST_WINDOW_W ? 0 : 1);
    return q - w > 0 ? q - w : 0;
}

static void att_fn(void *ctx, int ith, int nth) {
    g4_asst *a = ctx;
    const asst_layer *L = a->al;
    const int hd = L->hd, nkv = a->t.cfg->layers[L->src].n_kv, ga = a->nh / nkv, kv0 = a->t.plan->layers[L->src].kv0;
    const int nloc = L->h1 - L->h0, per = (ga + ATT_GROUP - 1) / ATT_GROUP;
    /* items: (token, KV head, group of up to ATT_GROUP of its heads) */
    const int g0 = L->h0 / ga, ng = nloc ? (L->h1 - 1) / ga - g0 + 1 : 0;
    long i0, i1;
    g4_split_range((long)a->T * ng * per, ith, nth, &i0, &i1);
    for (long it = i0; it < i1; it++) {
        const int t = (int)(it / (ng * per)), g = g0 + (int)(it % (ng * per)) / per, part = (int)(it % per);
        int h = g * ga + part * ATT_GROUP, he = h + ATT_GROUP;
        if (he > (g + 1) * ga) he = (g + 1) * ga;
        if (h < L->h0) h = L->h0;
        if (he > L->h1) he = L->h1;
        if (h >= he || !a->ok[t]) continue;
        const int64_t q = a->pos[t];
        const int nseg = g4_kv_segments(a->t.kv, L->src, a->seq[t], first_row(a, L, q), q - 1, g - kv0, a->segs[ith]);
        float *o = a->attn + (int64_t)t * a->q_dim + (int64_t)h * hd;
        const float *qv = a->qb + (int64_t)t * a->q_dim + (int64_t)(h - L->h0) * hd;
        if (a->t.kv->g.dtype == G4_DT_F32) a->t.K->attention(o, qv, he - h, hd, a->segs[ith], nseg, a->scores[ith]);
        else a->t.K->attention_kv(o, qv, he - h, hd, a->segs[ith], nseg, a->t.kv->g.dtype, a->scores[ith]);
    }
}

/* ---- one step ------------------------------------------------------------------------------ */

static int layer(g4_asst *a, const asst_layer *L, int T) {
    const g4_kernels *K = a->t.K;
    const float eps = (float)a->tc.rms_norm_eps;
    const int64_t Ha = a->Ha, hd = L->hd, nloc = L->h1 - L->h0;
    for (int t = 0; t < T; t++) K->rmsnorm(a->xn + t * Ha, a->z + t * Ha, L->ln_in, Ha, eps);
    /* this rank's query heads: q_proj rows, q_norm, RoPE at the query position */
    g4_mat Wq = g4_mat_rows(&L->q, L->h0 * hd, nloc * hd);
    par_mm(a, &Wq, a->xn, Ha, T, a->qb, a->q_dim, 0, nloc * hd);
    float cs[512], sn[512];
    for (int t = 0; t < T; t++) {
        const float p = (float)(a->pos[t] - (a->t.mutation == G4_MUT_ASST_QPOS ? 1 : 0));
        for (int j = 0; j < hd / 2; j++) {
            const float f = p * L->inv_freq[j];
            cs[j] = cosf(f);
            sn[j] = sinf(f);
        }
        for (int h = 0; h < nloc; h++) {
            float *q = a->qb + t * a->q_dim + h * hd;
            K->rmsnorm(q, q, L->q_norm, hd, eps);
            K->rope(q, cs, sn, hd);
        }
    }
    /* attention over the target's keys, every head gathered */
    const int64_t qd = (int64_t)a->nh * hd;
    for (int t = 0; t < T; t++) memset(a->attn + t * a->q_dim, 0, sizeof(float) * (size_t)qd);
    a->al = L;
    a->T = T;
    g4_pool_run(a->t.pool, att_fn, a);
    if (a->q_dim != qd)
        for (int t = 1; t < T; t++) memmove(a->attn + t * qd, a->attn + t * a->q_dim, sizeof(float) * (size_t)qd);
    if (gather(a, a->attn, T, qd) || dist_mm(a, &L->o, a->attn, T, a->buf)) return G4_ECOMM;
    for (int t = 0; t < T; t++) {
        float *z = a->z + t * Ha, *x = a->xn + t * Ha;
        K->rmsnorm(x, a->buf + t * Ha, L->ln_post_attn, Ha, eps);
        K->add(z, z, x, Ha);
        K->rmsnorm(x, z, L->ln_pre_ff, Ha, eps);
    }
    /* MLP: this rank's FFN rows, gathered, then down_proj's rows */
    long f0, f1;
    g4_split_range((long)a->I, a->rank, a->tp, &f0, &f1);
    memset(a->gate, 0, sizeof(float) * (size_t)T * (size_t)a->I);
    par_mm(a, &L->gate, a->xn, Ha, T, a->gate, a->I, f0, f1);
    par_mm(a, &L->up, a->xn, Ha, T, a->up, a->I, f0, f1);
    for (int t = 0; t < T; t++) K->gelu_mul(a->gate + t * a->I + f0, a->gate + t * a->I + f0, a->up + t * a->I + f0, f1 - f0);
    if (gather(a, a->gate, T, a->I) || dist_mm(a, &L->down, a->gate, T, a->buf)) return G4_ECOMM;
    for (int t = 0; t < T; t++) {
        float *z = a->z + t * Ha, *x = a->xn + t * Ha;
        K->rmsnorm(x, a->buf + t * Ha, L->ln_post_ff, Ha, eps);
        K->add(z, z, x, Ha);
        K->scale(z, z, L->scalar, Ha);
    }
    return G4_OK;
}

/* The top-k centroids of token t (value descending, ties to the lower index) into sel. */
static int select_ids(g4_asst *a, int t) {
    const float *c = a->cl + (int64_t)t * a->C;
    int32_t *top = a->sel;
    int n = 0;
    for (int i = 0; i < a->C; i++) {
        int k;
        if (n < a->topk) k = n++;
        else if (c[i] > c[top[a->topk - 1]]) k = a->topk - 1;
        else continue;
        while (k > 0 && c[i] > c[top[k - 1]]) { top[k] = top[k - 1]; k--; }
        top[k] = i;
    }
    return n;
}

/* Logits of this rank's vocabulary rows into loc [T][max_nv] (NAN: not scored), and the
 * ranks' agreed argmax per token into ids. */
static int head(g4_asst *a, int T, int32_t *ids) {
    const int64_t v0 = a->t.plan->v0, nv = a->t.plan->n_v_local;
    if (!a->info.ordered) {
        g4_mat E = g4_mat_rows(&a->embed, v0, nv);
        par_mm(a, &E, a->xn, a->Ha, T, a->loc, a->max_nv, 0, nv);
        const float cap = (float)a->t.cfg->final_logit_softcapping;
        if (a->t.mutation == G4_MUT_ASST_SOFTCAP && cap > 0)
            for (int t = 0; t < T; t++) a->t.K->softcap(a->loc + t * a->max_nv, a->loc + t * a->max_nv, cap, nv);
    } else {
        /* centroids scored in full on every rank (small), then the tokens of the top-k clusters */
        par_mm(a, &a->cent, a->xn, a->Ha, T, a->cl, a->C, 0, a->C);
        const int64_t per = a->V / a->C;
        for (int t = 0; t < T; t++) {
            float *lo = a->loc + t * a->max_nv;
            for (int64_t i = 0; i < nv; i++) lo[i] = NAN;
            const int n = select_ids(a, t);
            for (int c = 0; c < n; c++)
                for (int64_t i = 0; i < per; i++) {
                    const int32_t id = a->order[(int64_t)a->sel[c] * per + i];
                    if (id < v0 || id >= v0 + nv) continue;
                    g4_mat row = g4_mat_rows(&a->embed, id, 1);
                    a->t.K->matmul(&row, a->xn + t * a->Ha, a->Ha, 1, lo + (id - v0), 1, 0, 1, a->scratch[0]);
                }
        }
    }
    memset(a->pairs, 0, sizeof(float) * (size_t)T * (size_t)(2 * a->tp));
    for (int t = 0; t < T; t++) {
        const float *lo = a->loc + t * a->max_nv;
        float best = -INFINITY;
        int64_t bi = -1;
        for (int64_t i = 0; i < nv; i++)
            if (lo[i] > best || (bi < 0 && lo[i] == best)) { best = lo[i]; bi = i; } /* NAN never wins */
        a->pairs[(t * a->tp + a->rank) * 2] = best;
        a->pairs[(t * a->tp + a->rank) * 2 + 1] = bi < 0 ? -1.0f : (float)(v0 + bi);
    }
    if (a->tp > 1 && g4_comm_allreduce_sum(a->t.comm, a->pairs, (size_t)T * (size_t)(2 * a->tp))) return G4_ECOMM;
    for (int t = 0; t < T; t++) {
        float best = -INFINITY;
        int32_t id = -1;
        for (int r = 0; r < a->tp; r++) { /* ranks in vocab order: ties go to the lower id */
            const float v = a->pairs[(t * a->tp + r) * 2], i = a->pairs[(t * a->tp + r) * 2 + 1];
            if (i >= 0 && (id < 0 || v > best)) { best = v; id = (int32_t)i; }
        }
        ids[t] = id;
    }
    return G4_OK;
}

/* Every rank's slices of step j's logits into logits [t][k][V] on rank 0. */
static int collect_logits(g4_asst *a, int T, int k, int j, float *logits) {
    const size_t bytes = sizeof(float) * (size_t)T * (size_t)a->max_nv;
    if (!a->recv && a->rank == 0 && !(a->recv = malloc(bytes * (size_t)a->tp + 64))) return G4_ENOMEM;
    if (g4_comm_gather(a->t.comm, a->loc, bytes, a->rank == 0 ? a->recv : NULL, 0)) return G4_ECOMM;
    if (a->rank != 0) return G4_OK;
    for (int t = 0; t < T; t++) {
        float *out = logits + ((size_t)t * (size_t)k + (size_t)j) * (size_t)a->V, lo = INFINITY;
        for (int r = 0; r < a->tp; r++) {
            int64_t v0, nv;
            g4_tp_vocab_range(a->V, a->tp, r, &v0, &nv);
            memcpy(out + v0, a->recv + ((size_t)r * (size_t)T + (size_t)t) * (size_t)a->max_nv, sizeof(float) * (size_t)nv);
        }
        if (!a->info.ordered) continue;
        /* Gemma4AssistantMaskedEmbedder: every unscored token gets min(scored) - 1 */
        for (int64_t i = 0; i < a->V; i++)
            if (out[i] < lo) lo = out[i];
        for (int64_t i = 0; i < a->V; i++)
            if (isnan(out[i])) out[i] = lo - 1.0f;
    }
    return G4_OK;
}

/* The input of a step: [E_target[tok] * sqrt(Ht), h] per token, into x. */
static int input(g4_asst *a, int T, const int32_t *tok) {
    const int64_t Ht = a->Ht;
    const g4_mat *E = &a->t.w->embed;
    for (int t = 0; t < T; t++) {
        float *e = a->emb + t * Ht;
        const int64_t row = (int64_t)tok[t] - a->t.plan->v0;
        if (tok[t] >= 0 && row >= 0 && row < a->t.plan->n_v_local) {
            g4_mat_lookup_row(a->t.K, E, row, e);
            for (int64_t i = 0; i < Ht; i++) e[i] = e[i] * a->embed_scale + 0.0f; /* as the target's lookup */
        } else {
            memset(e, 0, sizeof(float) * (size_t)Ht);
        }
    }
    if (gather(a, a->emb, T, Ht)) return G4_ECOMM;
    for (int t = 0; t < T; t++) {
        memcpy(a->x + t * 2 * Ht, a->emb + t * Ht, sizeof(float) * (size_t)Ht);
        memcpy(a->x + t * 2 * Ht + Ht, a->hcur + t * Ht, sizeof(float) * (size_t)Ht);
    }
    return G4_OK;
}

/* Whether every key row the drafter reads for a query at q of seq is in the pool. */
static int rows_there(const g4_asst *a, int seq, int64_t q) {
    const g4_kvstore *s = a->t.kv;
    if (seq < 0 || seq >= s->max_seqs || !s->cap[seq] || q < 1 || q > s->cap[seq]) return 0;
    for (int l = 0; l < a->n_layers; l++) {
        const asst_layer *L = &a->L[l];
        for (int64_t j = first_row(a, L, q) / s->g.bs; j <= (q - 1) / s->g.bs; j++)
            if (g4_kv_block(s, seq, s->g.kind[L->src], j) < 0) return 0;
    }
    return 1;
}

int g4_asst_draft(g4_asst *a, int n, int k, const int32_t *seq, const int32_t *pos, const int32_t *tok, const float *hidden,
                  int32_t *ids, int want_logits, float *logits, g4_err *err) {
    if (n < 1 || n > a->t.max_seqs || k < 1) return g4_err_set(err, G4_EINVAL, "draft of %d sequences x %d tokens (1..%d sequences)", n, k, a->t.max_seqs);
    const float eps = (float)a->tc.rms_norm_eps;
    a->seq = seq;
    a->pos = pos;
    for (int t = 0; t < n; t++) {
        a->ok[t] = tok[t] >= 0 && tok[t] < a->V && rows_there(a, seq[t], pos[t]);
        a->cur[t] = tok[t];
    }
    memcpy(a->hcur, hidden, sizeof(float) * (size_t)n * (size_t)a->Ht);
    int32_t step_ids[n];
    for (int j = 0; j < k; j++) {
        if (input(a, n, a->cur) || dist_mm(a, &a->pre, a->x, n, a->z)) goto comm;
        for (int l = 0; l < a->n_layers; l++)
            if (layer(a, &a->L[l], n)) goto comm;
        for (int t = 0; t < n; t++) a->t.K->rmsnorm(a->xn + t * a->Ha, a->z + t * a->Ha, a->norm, a->Ha, eps);
        if (head(a, n, step_ids)) goto comm;
        if (want_logits) {
            int rc = collect_logits(a, n, k, j, logits);
            if (rc == G4_ENOMEM) return g4_err_set(err, rc, "out of memory for the drafts' logits");
            if (rc) goto comm;
        }
        for (int t = 0; t < n; t++) ids[t * k + j] = a->ok[t] ? step_ids[t] : -1;
        if (j + 1 < k && dist_mm(a, &a->post, a->xn, n, a->hcur)) goto comm;
        for (int t = 0; t < n; t++) a->cur[t] = step_ids[t] >= 0 ? step_ids[t] : 0;
    }
    return G4_OK;
comm:
    return g4_err_set(err, G4_ECOMM, "a rank failed while drafting");
}
