/* split.c — the TP split rules and the canonical reduction slices (see split.h). */
#include "model/split.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"

static int pow2_slices(int64_t units) {
    int p = 1;
    while (p < G4_MAX_SLICES && units % (2 * p) == 0) p *= 2;
    return p;
}

/* Only block-quantized weights (q8_0, q4_0) need slices of whole blocks. */
int g4_tp_block_cols(int wdtype) { return g4_dtype_info(wdtype) ? g4_dtype_info(wdtype)->block : 1; }

int g4_tp_slices_attn(const g4_config *cfg) { return pow2_slices(cfg->n_heads); }

/* Units of whole blocks; a FFN that is no whole number of blocks cannot take that dtype at all
 * (g4_tp_check_dtype says so) and keeps whole columns so the count stays defined. */
int g4_tp_slices_mlp(const g4_config *cfg, int wdtype) {
    int64_t b = g4_tp_block_cols(wdtype), f = cfg->intermediate_size;
    return pow2_slices(f % b == 0 ? f / b : f);
}

int64_t g4_tp_mlp_slice_cols(const g4_config *cfg, int wdtype) { return cfg->intermediate_size / g4_tp_slices_mlp(cfg, wdtype); }

int64_t g4_tp_attn_slice_cols(const g4_config *cfg, int l) {
    return (int64_t)(cfg->n_heads / g4_tp_slices_attn(cfg)) * cfg->layers[l].head_dim;
}

int g4_tp_degree_ok(const g4_config *cfg, int wdtype, int tp) {
    if (tp < 1 || (tp & (tp - 1))) return 0;
    return g4_tp_slices_attn(cfg) % tp == 0 && g4_tp_slices_mlp(cfg, wdtype) % tp == 0;
}

void g4_tp_valid_degrees(const g4_config *cfg, int wdtype, char *buf, size_t len) {
    buf[0] = 0;
    for (int t = 1; t <= G4_MAX_SLICES; t *= 2)
        if (g4_tp_degree_ok(cfg, wdtype, t)) {
            size_t l = strlen(buf);
            snprintf(buf + l, len - l, "%s%d", l ? ", " : "", t);
        }
}

void g4_tp_vocab_range(int64_t vocab, int tp, int rank, int64_t *v0, int64_t *n) {
    int64_t base = vocab / tp, extra = vocab % tp;
    *n = base + (rank < extra ? 1 : 0);
    *v0 = rank * base + (rank < extra ? rank : extra);
}

int g4_tp_plan_make(const g4_config *cfg, int wdtype, int tp, int rank, g4_tp_plan *p, g4_err *err) {
    memset(p, 0, sizeof *p);
    if (!g4_tp_degree_ok(cfg, wdtype, tp)) {
        char ok[128], why[96] = "";
        const int b = g4_tp_block_cols(wdtype);
        if (b > 1) snprintf(why, sizeof why, ": %s weights need slices of whole %d-column blocks", g4_dtype_name(wdtype), b);
        g4_tp_valid_degrees(cfg, wdtype, ok, sizeof ok);
        return g4_err_set(err, G4_EINVAL,
                          "TP degree %d does not work for this model (%d query heads, FFN %lld): it must be a power "
                          "of two that splits the query heads and the FFN into whole reduction slices "
                          "(attention %d, mlp %d%s); valid degrees: %s",
                          tp, cfg->n_heads, (long long)cfg->intermediate_size, g4_tp_slices_attn(cfg), g4_tp_slices_mlp(cfg, wdtype),
                          why, ok);
    }
    if (rank < 0 || rank >= tp) return g4_err_set(err, G4_EINVAL, "rank %d out of range for TP %d", rank, tp);
    p->tp = tp;
    p->rank = rank;
    p->n_q_local = cfg->n_heads / tp;
    p->q0 = rank * p->n_q_local;
    p->n_f_local = cfg->intermediate_size / tp;
    p->f0 = rank * p->n_f_local;
    g4_tp_vocab_range(cfg->vocab_size, tp, rank, &p->v0, &p->n_v_local);
    p->wdtype = wdtype;
    p->p_attn = g4_tp_slices_attn(cfg);
    p->p_mlp = g4_tp_slices_mlp(cfg, wdtype);
    p->mlp_slice_cols = g4_tp_mlp_slice_cols(cfg, wdtype);
    p->s_attn0 = rank * (p->p_attn / tp);
    p->s_mlp0 = rank * (p->p_mlp / tp);
    p->layers = calloc((size_t)cfg->n_layers, sizeof *p->layers);
    if (!p->layers) return g4_err_set(err, G4_ENOMEM, "out of memory");
    for (int l = 0; l < cfg->n_layers; l++) {
        /* the KV heads this rank's query heads use: an exact share when the KV heads divide
         * evenly, else (fewer KV heads than ranks, or groups straddling ranks) the few KV heads
         * needed are replicated — never the query heads or the rest of the layer */
        int q_per_kv = cfg->n_heads / cfg->layers[l].n_kv;
        int first = p->q0 / q_per_kv, last = (p->q0 + p->n_q_local - 1) / q_per_kv;
        p->layers[l].kv0 = first;
        p->layers[l].n_kv_local = last - first + 1;
    }
    return G4_OK;
}

void g4_tp_plan_free(g4_tp_plan *p) {
    free(p->layers);
    p->layers = NULL;
}

int g4_tp_check_dtype(const g4_config *cfg, int dtype, g4_err *err) {
    const int b = g4_tp_block_cols(dtype);
    if (b == 1) return G4_OK;
    int64_t sm = g4_tp_mlp_slice_cols(cfg, dtype);
    for (int l = 0; l < cfg->n_layers; l++) {
        int64_t sa = g4_tp_attn_slice_cols(cfg, l);
        if (sa % b || sm % b || cfg->hidden_size % b)
            return g4_err_set(err, G4_EUNSUPPORTED,
                              "%s needs the hidden size and the reduction slices of o_proj and down_proj to be "
                              "multiples of %d columns; this model has hidden %lld and slices of %lld and %lld "
                              "(use bf16, f16 or f32)", g4_dtype_name(dtype), b, (long long)cfg->hidden_size, (long long)sa, (long long)sm);
    }
    return G4_OK;
}

int g4_tp_check_plan_dtype(const g4_tp_plan *p, int dtype, const char *name, g4_err *err) {
    if (p->mlp_slice_cols % g4_tp_block_cols(dtype) == 0) return G4_OK;
    return g4_err_set(err, G4_EUNSUPPORTED, "%s is %s, but the reduction slices were cut %lld columns wide for %s weights",
                      name, g4_dtype_name(dtype), (long long)p->mlp_slice_cols, p->wdtype < 0 ? "as-stored" : g4_dtype_name(p->wdtype));
}

void g4_tp_tensor_slice(const g4_config *cfg, const g4_tp_plan *p, const g4_tensor_spec *s,
                        int64_t *r0, int64_t *nr, int64_t *c0, int64_t *nc) {
    *r0 = 0;
    *nr = s->shape[0];
    *c0 = 0;
    *nc = s->ndim == 2 ? s->shape[1] : 1;
    int64_t hd = s->layer >= 0 ? cfg->layers[s->layer].head_dim : 0;
    switch (s->kind) {
    case G4_T_EMBED: *r0 = p->v0; *nr = p->n_v_local; break;
    case G4_T_Q: *r0 = p->q0 * hd; *nr = p->n_q_local * hd; break;
    case G4_T_K:
    case G4_T_V: *r0 = p->layers[s->layer].kv0 * hd; *nr = p->layers[s->layer].n_kv_local * hd; break;
    case G4_T_O: *c0 = p->q0 * hd; *nc = p->n_q_local * hd; break;
    case G4_T_GATE:
    case G4_T_UP: *r0 = p->f0; *nr = p->n_f_local; break;
    case G4_T_DOWN: *c0 = p->f0; *nc = p->n_f_local; break;
    default: break; /* norms, scalars: replicated */
    }
}
