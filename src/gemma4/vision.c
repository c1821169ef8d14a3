/* vision.c — the Gemma-4 vision tower's forward pass (see vision.h).
 *
 * One call = one image, n patches. Layout of the work buffers (all fp32, sized for this n):
 *   h    [n][H]       the residual stream
 *   xn   [n][H]       normed input of the next linears (later: pooled features)
 *   x    [n][max(A, patch_dim)]  patch inputs, then the attention output (o_proj's input)
 *   q, k, vv [heads][n][hd]      per head, so a head's keys and values are contiguous
 *   tmp  [n][H]       o_proj / down_proj output (later: the normed pooled features)
 *   g, u [TBLK][I]    gate / up of one block of tokens
 *   xc   [n][H]       clamped copy of a linear's input (use_clipped_linears only)
 * Phases: static token splits for element-wise work; a shared item counter for matmuls (items =
 * token block x row chunk; q/k/v chunks are whole heads so the kernel writes the per-head
 * layout directly), attention ((head, query block) items) and pooling. */
#include "gemma4/vision.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

enum {
    TBLK = 256, /* tokens per matmul item (and per MLP block): activations stay in cache */
    QB = 8,     /* queries of one head per attention call: the kernel reads each key row once for them */
};

struct g4_vision {
    g4_vision_cfg c;
    int64_t text_hidden;
    const g4_kernels *K;
    g4_vision_weights w;
    float *inv_freq;             /* [head_dim/4] */
};

/* One linear of a phase: y rows [0, W->rows) for tokens [0, T) of x. */
typedef struct {
    const g4_mat *W;
    const float *x;
    int64_t ldx;
    float *y;
    int64_t ldy;                 /* token-major y; per_head: unused */
    int per_head;                /* y is [W->rows / hd][n][hd]: whole heads per chunk */
    int64_t chunk;               /* rows per item */
    float lo, hi;                /* output clamp (-inf, inf: none) */
} lin_job;

typedef struct run run;
typedef void (*phase_fn)(run *r, int ith, int nth);

struct run {
    g4_vision *v;
    const g4_kernels *K;
    int64_t n, H, A, I, hd, pd;  /* patches, widths, head dim, patch dim */
    int ph, pw;
    const float *pixels;
    const int32_t *pos;
    float *h, *xn, *x, *q, *k, *vv, *tmp, *g, *u, *xc;
    int32_t *order;              /* [n] patch rows by pooled token, each token's rows ascending */
    float *soft, *pooled_out;
    void **mm;                   /* [nth] matmul scratch */
    float **scores, **aout, **row; /* [nth] QB x n, QB x hd, max(H, hd) */
    atomic_long next;            /* the phase's item counter */
    phase_fn fn;
    int layer;
    lin_job jobs[3];
    int njobs;
    int64_t T;                   /* tokens of the current linear phase / MLP block */
    float clo, chi;              /* clamp phase bounds */
    const float *csrc;
};

/* ---- phases ------------------------------------------------------------------------------- */

static void tramp(void *ctx, int ith, int nth) {
    run *r = ctx;
    r->fn(r, ith, nth);
}

static void go(run *r, g4_pool *pool, phase_fn fn) {
    atomic_store_explicit(&r->next, 0, memory_order_relaxed);
    r->fn = fn;
    g4_pool_run(pool, tramp, r);
}

static long take(run *r) { return atomic_fetch_add_explicit(&r->next, 1, memory_order_relaxed); }

static int finite_range(float lo, float hi) { return lo != -INFINITY || hi != INFINITY; }

static void clamp_row(float *y, int64_t n, float lo, float hi) {
    for (int64_t i = 0; i < n; i++) y[i] = fminf(fmaxf(y[i], lo), hi);
}

static void ph_patch_in(run *r, int ith, int nth) {
    long t0, t1;
    g4_split_range((long)r->n, ith, nth, &t0, &t1);
    for (long t = t0; t < t1; t++)
        for (int64_t c = 0; c < r->pd; c++) r->x[t * r->pd + c] = 2.0f * (r->pixels[t * r->pd + c] - 0.5f);
}

/* h[t] += table[0][x] + table[1][y] (the two rows summed first, as HF does). */
static void ph_pos(run *r, int ith, int nth) {
    const g4_mat *tb = &r->v->w.pos_table;
    const int64_t P = r->v->c.pos_size;
    float *a = r->row[ith], *b = a + r->H;
    long t0, t1;
    g4_split_range((long)r->n, ith, nth, &t0, &t1);
    for (long t = t0; t < t1; t++) {
        r->K->row_to_f32(a, (const char *)tb->data + (int64_t)r->pos[2 * t] * tb->ld_bytes, tb->dtype, r->H);
        r->K->row_to_f32(b, (const char *)tb->data + (P + r->pos[2 * t + 1]) * tb->ld_bytes, tb->dtype, r->H);
        r->K->add(a, a, b, r->H);
        r->K->add(r->h + t * r->H, r->h + t * r->H, a, r->H);
    }
}

/* Items: token block x (the jobs' chunks, one job after the other). */
static void ph_linear(run *r, int ith, int nth) {
    int64_t nch[3], total = 0;
    for (int j = 0; j < r->njobs; j++) total += nch[j] = (r->jobs[j].W->rows + r->jobs[j].chunk - 1) / r->jobs[j].chunk;
    const long nblk = (long)((r->T + TBLK - 1) / TBLK), items = nblk * (long)total;
    for (long i = take(r); i < items; i = take(r)) {
        const int64_t t0 = (i / total) * TBLK, T = r->T - t0 < TBLK ? r->T - t0 : TBLK;
        int64_t c = i % total;
        int j = 0;
        while (c >= nch[j]) c -= nch[j++];
        const lin_job *J = &r->jobs[j];
        const int64_t r0 = c * J->chunk, r1 = r0 + J->chunk < J->W->rows ? r0 + J->chunk : J->W->rows;
        float *y;
        int64_t ldy;
        if (J->per_head) { /* head r0/hd, tokens t0..: y[t*hd + row] lands at [head][t][row - r0] */
            y = J->y + (r0 / r->hd * r->n + t0) * r->hd - r0;
            ldy = r->hd;
        } else {
            y = J->y + t0 * J->ldy;
            ldy = J->ldy;
        }
        r->K->matmul(J->W, J->x + t0 * J->ldx, J->ldx, (int)T, y, ldy, r0, r1, r->mm[ith]);
        if (finite_range(J->lo, J->hi))
            for (int64_t t = 0; t < T; t++) clamp_row(y + t * ldy + r0, r1 - r0, J->lo, J->hi);
    }
}

static void ph_clamp(run *r, int ith, int nth) {
    long t0, t1;
    g4_split_range((long)r->T, ith, nth, &t0, &t1);
    for (long t = t0; t < t1; t++) {
        memcpy(r->xc + t * r->H, r->csrc + t * r->H, sizeof(float) * (size_t)r->H);
        clamp_row(r->xc + t * r->H, r->H, r->clo, r->chi);
    }
}

static void ph_norm_in(run *r, int ith, int nth) {
    const g4_vision_layer *L = &r->v->w.layers[r->layer];
    long t0, t1;
    g4_split_range((long)r->n, ith, nth, &t0, &t1);
    for (long t = t0; t < t1; t++) r->K->rmsnorm(r->xn + t * r->H, r->h + t * r->H, L->ln_in, r->H, (float)r->v->c.rms_norm_eps);
}

/* q/k norms and the 2D RoPE, the weightless v norm, per token, in the per-head layout. */
static void ph_qkv_post(run *r, int ith, int nth) {
    const g4_vision_layer *L = &r->v->w.layers[r->layer];
    const int64_t hd = r->hd, qd = hd / 4, half = hd / 2;
    const float eps = (float)r->v->c.rms_norm_eps;
    float *cx = r->row[ith], *sx = cx + qd, *cy = sx + qd, *sy = cy + qd;
    long t0, t1;
    g4_split_range((long)r->n, ith, nth, &t0, &t1);
    for (long t = t0; t < t1; t++) {
        const float px = (float)r->pos[2 * t], py = (float)r->pos[2 * t + 1];
        for (int64_t j = 0; j < qd; j++) {
            const float fx = px * r->v->inv_freq[j], fy = py * r->v->inv_freq[j];
            cx[j] = cosf(fx), sx[j] = sinf(fx), cy[j] = cosf(fy), sy[j] = sinf(fy);
        }
        for (int hh = 0; hh < r->v->c.n_heads; hh++) {
            const int64_t off = ((int64_t)hh * r->n + t) * hd;
            float *q = r->q + off, *k = r->k + off, *v = r->vv + off;
            r->K->rmsnorm(q, q, L->q_norm, hd, eps);
            r->K->rope(q, cx, sx, half);        /* channels [0, hd/2): x, the column */
            r->K->rope(q + half, cy, sy, half); /* [hd/2, hd): y, the row */
            r->K->rmsnorm(k, k, L->k_norm, hd, eps);
            r->K->rope(k, cx, sx, half);
            r->K->rope(k + half, cy, sy, half);
            r->K->rmsnorm(v, v, NULL, hd, eps);
        }
    }
}

/* Items (head, block of QB queries): every query sees every patch (scale 1.0); the outputs go
 * token-major into x (o_proj's input), clamped to o_proj's input range. */
static void ph_attention(run *r, int ith, int nth) {
    const g4_vision_layer *L = &r->v->w.layers[r->layer];
    const float lo = L->clip[G4_VL_O][G4_CLIP_IN_MIN], hi = L->clip[G4_VL_O][G4_CLIP_IN_MAX];
    const int64_t hd = r->hd, nqb = (r->n + QB - 1) / QB;
    const long items = (long)(r->v->c.n_heads * nqb);
    for (long i = take(r); i < items; i = take(r)) {
        const int64_t hh = i / nqb, t0 = (i % nqb) * QB, nq = r->n - t0 < QB ? r->n - t0 : QB;
        const g4_kv_seg seg = {.k = r->k + hh * r->n * hd, .v = r->vv + hh * r->n * hd, .n = r->n, .stride = hd};
        r->K->attention(r->aout[ith], r->q + (hh * r->n + t0) * hd, (int)nq, hd, &seg, 1, r->scores[ith]);
        for (int64_t j = 0; j < nq; j++) {
            float *dst = r->x + (t0 + j) * r->A + hh * hd;
            memcpy(dst, r->aout[ith] + j * hd, sizeof(float) * (size_t)hd);
            if (finite_range(lo, hi)) clamp_row(dst, hd, lo, hi);
        }
    }
}

/* h += post_norm(tmp); xn = pre_ff_norm(h) */
static void ph_post_attn(run *r, int ith, int nth) {
    const g4_vision_layer *L = &r->v->w.layers[r->layer];
    const float eps = (float)r->v->c.rms_norm_eps;
    long t0, t1;
    g4_split_range((long)r->n, ith, nth, &t0, &t1);
    for (long t = t0; t < t1; t++) {
        float *h = r->h + t * r->H, *x = r->xn + t * r->H;
        r->K->rmsnorm(x, r->tmp + t * r->H, L->ln_post_attn, r->H, eps);
        r->K->add(h, h, x, r->H);
        r->K->rmsnorm(x, h, L->ln_pre_ff, r->H, eps);
    }
}

/* g = gelu_tanh(g) * u over the block, clamped to down_proj's input range. */
static void ph_gelu(run *r, int ith, int nth) {
    const g4_vision_layer *L = &r->v->w.layers[r->layer];
    const float lo = L->clip[G4_VL_DOWN][G4_CLIP_IN_MIN], hi = L->clip[G4_VL_DOWN][G4_CLIP_IN_MAX];
    long t0, t1;
    g4_split_range((long)r->T, ith, nth, &t0, &t1);
    for (long t = t0; t < t1; t++) {
        float *g = r->g + t * r->I;
        r->K->gelu_mul(g, g, r->u + t * r->I, r->I);
        if (finite_range(lo, hi)) clamp_row(g, r->I, lo, hi);
    }
}

static void ph_post_mlp(run *r, int ith, int nth) {
    const g4_vision_layer *L = &r->v->w.layers[r->layer];
    long t0, t1;
    g4_split_range((long)r->n, ith, nth, &t0, &t1);
    for (long t = t0; t < t1; t++) {
        float *x = r->xn + t * r->H;
        r->K->rmsnorm(x, r->tmp + t * r->H, L->ln_post_ff, r->H, (float)r->v->c.rms_norm_eps);
        r->K->add(r->h + t * r->H, r->h + t * r->H, x, r->H);
    }
}

/* Pooled token b: its k^2 patches summed in row order, / k^2, x sqrt(hidden), standardized
 * (into xn), then the weightless norm (into tmp, the projection's input). */
static void ph_pool(run *r, int ith, int nth) {
    const g4_vision *v = r->v;
    const int64_t kk = (int64_t)v->c.pooling * v->c.pooling, m = r->n / kk, H = r->H;
    const float div = (float)kk, scale = (float)sqrt((double)H);
    long b0, b1;
    g4_split_range((long)m, ith, nth, &b0, &b1);
    for (long b = b0; b < b1; b++) {
        float *p = r->xn + b * H;
        memset(p, 0, sizeof(float) * (size_t)H);
        for (int64_t j = 0; j < kk; j++) r->K->add(p, p, r->h + (int64_t)r->order[b * kk + j] * H, H);
        for (int64_t c = 0; c < H; c++) {
            float x = p[c] / div * scale;
            if (v->w.std_bias) x = (x - v->w.std_bias[c]) * v->w.std_scale[c];
            p[c] = x;
        }
        if (r->pooled_out) memcpy(r->pooled_out + b * H, p, sizeof(float) * (size_t)H);
        r->K->rmsnorm(r->tmp + b * H, p, NULL, H, (float)v->c.rms_norm_eps);
    }
}

/* ---- the pass ------------------------------------------------------------------------------ */

static int64_t chunk_rows(const g4_mat *W) {
    const int64_t rb = (int64_t)g4_dtype_row_bytes(W->dtype, W->cols);
    int64_t c = ((int64_t)(256 << 10) / (rb > 0 ? rb : 1) + 31) / 32 * 32; /* ~256 KiB of weights */
    return c < 32 ? 32 : c;
}

static lin_job job(const g4_mat *W, const float *x, int64_t ldx, float *y, int64_t ldy, const float *clip) {
    return (lin_job){.W = W, .x = x, .ldx = ldx, .y = y, .ldy = ldy, .chunk = chunk_rows(W), .lo = clip ? clip[G4_CLIP_OUT_MIN] : -INFINITY,
                     .hi = clip ? clip[G4_CLIP_OUT_MAX] : INFINITY};
}

/* Runs the jobs over T tokens: together when they read x as it is, else one by one, each on
 * its own clamped copy of x (width H) — use_clipped_linears gives each linear its input range. */
static void linears(run *r, g4_pool *pool, lin_job *jobs, int nj, const float *const *in_clip, int64_t T) {
    int clamp = 0;
    for (int j = 0; j < nj; j++) clamp |= in_clip && finite_range(in_clip[j][0], in_clip[j][1]);
    r->T = T;
    if (!clamp) {
        memcpy(r->jobs, jobs, sizeof *jobs * (size_t)nj);
        r->njobs = nj;
        go(r, pool, ph_linear);
        return;
    }
    for (int j = 0; j < nj; j++) {
        r->csrc = jobs[j].x;
        r->clo = in_clip[j][0];
        r->chi = in_clip[j][1];
        go(r, pool, ph_clamp);
        r->jobs[0] = jobs[j];
        r->jobs[0].x = r->xc;
        r->njobs = 1;
        go(r, pool, ph_linear);
    }
}

static void layer(run *r, g4_pool *pool, int l) {
    const g4_vision_layer *L = &r->v->w.layers[l];
    const int64_t H = r->H, I = r->I;
    r->layer = l;
    go(r, pool, ph_norm_in);
    lin_job qkv[3] = {job(&L->lin[G4_VL_Q], r->xn, H, r->q, 0, L->clip[G4_VL_Q]), job(&L->lin[G4_VL_K], r->xn, H, r->k, 0, L->clip[G4_VL_K]),
                      job(&L->lin[G4_VL_V], r->xn, H, r->vv, 0, L->clip[G4_VL_V])};
    for (int j = 0; j < 3; j++) qkv[j].per_head = 1, qkv[j].chunk = r->hd;
    const float *qkv_in[3] = {L->clip[G4_VL_Q], L->clip[G4_VL_K], L->clip[G4_VL_V]};
    linears(r, pool, qkv, 3, qkv_in, r->n);
    go(r, pool, ph_qkv_post);
    go(r, pool, ph_attention);
    lin_job o = job(&L->lin[G4_VL_O], r->x, r->A, r->tmp, H, L->clip[G4_VL_O]);
    linears(r, pool, &o, 1, NULL, r->n); /* its input was clamped by the attention phase */
    go(r, pool, ph_post_attn);
    for (int64_t t0 = 0; t0 < r->n; t0 += TBLK) {
        const int64_t T = r->n - t0 < TBLK ? r->n - t0 : TBLK;
        lin_job gu[2] = {job(&L->lin[G4_VL_GATE], r->xn + t0 * H, H, r->g, I, L->clip[G4_VL_GATE]),
                         job(&L->lin[G4_VL_UP], r->xn + t0 * H, H, r->u, I, L->clip[G4_VL_UP])};
        const float *gu_in[2] = {L->clip[G4_VL_GATE], L->clip[G4_VL_UP]};
        linears(r, pool, gu, 2, gu_in, T);
        go(r, pool, ph_gelu);
        lin_job d = job(&L->lin[G4_VL_DOWN], r->g, I, r->tmp + t0 * H, H, L->clip[G4_VL_DOWN]);
        linears(r, pool, &d, 1, NULL, T); /* input clamped by ph_gelu */
    }
    go(r, pool, ph_post_mlp);
}

/* Checks the grid and positions; fills order (patch rows grouped by pooled token). */
static int check_input(const g4_vision *v, const float *pixels, const int32_t *pos, int ph, int pw, const float *soft, int32_t **order_out,
                       g4_err *err) {
    const int k = v->c.pooling;
    if (!pixels || !pos || !soft) return g4_err_set(err, G4_EINVAL, "vision: pixels, positions and the output are required");
    if (ph < 1 || pw < 1 || ph % k || pw % k)
        return g4_err_set(err, G4_EINVAL, "vision: a %dx%d patch grid; both sides must be positive multiples of the pooling size %d", ph, pw, k);
    if (ph > v->c.pos_size || pw > v->c.pos_size)
        return g4_err_set(err, G4_EINVAL, "vision: a %dx%d patch grid; the position table has %lld positions per axis", ph, pw, (long long)v->c.pos_size);
    const int64_t n = (int64_t)ph * pw;
    if (n > g4_vision_max_patches(v))
        return g4_err_set(err, G4_EINVAL, "vision: %lld patches; at most %lld (%d soft tokens) per image", (long long)n,
                          (long long)g4_vision_max_patches(v), G4_VISION_MAX_SOFT_TOKENS);
    const int64_t pd = g4_vision_patch_dim(v);
    for (int64_t i = 0; i < n * pd; i++)
        if (!isfinite(pixels[i])) return g4_err_set(err, G4_EINVAL, "vision: pixel value %lld of patch %lld is not finite", (long long)(i % pd), (long long)(i / pd));
    const int64_t kk = (int64_t)k * k, gw = pw / k;
    int32_t *order = malloc(sizeof(int32_t) * (size_t)n), *fill = calloc((size_t)(n / kk), sizeof(int32_t));
    uint8_t *seen = calloc((size_t)n, 1);
    int rc = order && fill && seen ? G4_OK : g4_err_set(err, G4_ENOMEM, "out of memory");
    for (int64_t i = 0; rc == G4_OK && i < n; i++) {
        const int32_t x = pos[2 * i], y = pos[2 * i + 1];
        if (x < 0 || x >= pw || y < 0 || y >= ph)
            rc = g4_err_set(err, G4_EINVAL, "vision: patch %lld has position (%d, %d), outside the %dx%d grid", (long long)i, x, y, ph, pw);
        else if (seen[(int64_t)y * pw + x]++)
            rc = g4_err_set(err, G4_EINVAL, "vision: patch %lld repeats position (%d, %d)", (long long)i, x, y);
        else {
            const int64_t b = (int64_t)(y / k) * gw + x / k; /* the pooled grid, row-major */
            order[b * kk + fill[b]++] = (int32_t)i;
        }
    }
    free(fill);
    free(seen);
    if (rc) free(order);
    else *order_out = order;
    return rc;
}

static float *falloc(size_t n) {
    float *p = aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64 + 64);
    if (p) memset(p, 0, n * sizeof(float));
    return p;
}

static size_t scratch_bytes(const g4_vision *v, int64_t n) {
    const int T = n < TBLK ? (int)n : TBLK;
    size_t s = v->K->matmul_scratch_bytes(&v->w.input_proj, T);
    const size_t p = v->K->matmul_scratch_bytes(&v->w.proj, T);
    if (p > s) s = p;
    for (int l = 0; l < v->c.n_layers; l++)
        for (int j = 0; j < G4_VL_N; j++) {
            const size_t x = v->K->matmul_scratch_bytes(&v->w.layers[l].lin[j], T);
            if (x > s) s = x;
        }
    return (s + 63) / 64 * 64 + 64;
}

static int64_t x_width(const g4_vision *v) {
    const int64_t A = (int64_t)v->c.n_heads * v->c.head_dim, pd = g4_vision_patch_dim(v);
    return A > pd ? A : pd;
}

size_t g4_vision_workspace_bytes(const g4_vision *v, int64_t n, int nth) {
    const int64_t H = v->c.hidden, A = (int64_t)v->c.n_heads * v->c.head_dim, blk = n < TBLK ? n : TBLK;
    size_t f = (size_t)n * (size_t)(3 * H + x_width(v) + 3 * A + (v->c.clipped ? H : 0)) + (size_t)(2 * blk * v->c.intermediate);
    f += (size_t)nth * (size_t)(QB * n + QB * v->c.head_dim + 2 * H + v->c.head_dim);
    return f * sizeof(float) + (size_t)nth * scratch_bytes(v, n) + (size_t)n * sizeof(int32_t);
}

static void free_run(run *r, int nth) {
    free(r->h); free(r->xn); free(r->x); free(r->q); free(r->k); free(r->vv); free(r->tmp); free(r->g); free(r->u); free(r->xc);
    free(r->order);
    for (int i = 0; i < nth; i++) {
        if (r->mm) free(r->mm[i]);
        if (r->scores) free(r->scores[i]);
        if (r->aout) free(r->aout[i]);
        if (r->row) free(r->row[i]);
    }
    free(r->mm); free(r->scores); free(r->aout); free(r->row);
}

int g4_vision_encode(g4_vision *v, g4_pool *pool, const float *pixels, const int32_t *pos, int ph, int pw, float *soft, float *pooled,
                     g4_err *err) {
    run r = {.v = v, .K = v->K, .ph = ph, .pw = pw, .pixels = pixels, .pos = pos, .soft = soft, .pooled_out = pooled};
    if (!pool) return g4_err_set(err, G4_EINVAL, "vision: no thread pool");
    int rc = check_input(v, pixels, pos, ph, pw, soft, &r.order, err);
    if (rc) return rc;
    const int nth = g4_pool_size(pool);
    r.n = (int64_t)ph * pw;
    r.H = v->c.hidden;
    r.A = (int64_t)v->c.n_heads * v->c.head_dim;
    r.I = v->c.intermediate;
    r.hd = v->c.head_dim;
    r.pd = g4_vision_patch_dim(v);
    const size_t n = (size_t)r.n, blk = (size_t)(r.n < TBLK ? r.n : TBLK);
    r.h = falloc(n * (size_t)r.H);
    r.xn = falloc(n * (size_t)r.H);
    r.tmp = falloc(n * (size_t)r.H);
    r.x = falloc(n * (size_t)x_width(v));
    r.q = falloc(n * (size_t)r.A);
    r.k = falloc(n * (size_t)r.A);
    r.vv = falloc(n * (size_t)r.A);
    r.g = falloc(blk * (size_t)r.I);
    r.u = falloc(blk * (size_t)r.I);
    if (v->c.clipped) r.xc = falloc(n * (size_t)r.H);
    r.mm = calloc((size_t)nth, sizeof *r.mm);
    r.scores = calloc((size_t)nth, sizeof *r.scores);
    r.aout = calloc((size_t)nth, sizeof *r.aout);
    r.row = calloc((size_t)nth, sizeof *r.row);
    int ok = r.h && r.xn && r.tmp && r.x && r.q && r.k && r.vv && r.g && r.u && (!v->c.clipped || r.xc) && r.mm && r.scores && r.aout && r.row;
    const size_t sb = scratch_bytes(v, r.n);
    for (int i = 0; ok && i < nth; i++) {
        ok = (r.mm[i] = aligned_alloc(64, sb)) && (r.scores[i] = falloc((size_t)QB * n)) && (r.aout[i] = falloc((size_t)(QB * r.hd))) &&
             (r.row[i] = falloc((size_t)(2 * r.H + r.hd)));
        if (ok) memset(r.mm[i], 0, sb);
    }
    if (!ok) {
        free_run(&r, nth);
        return g4_err_set(err, G4_ENOMEM, "out of memory for the vision tower's workspace (%lld patches, %.1f MiB)", (long long)r.n,
                          (double)g4_vision_workspace_bytes(v, r.n, nth) / 1048576.0);
    }
    /* patch embedding */
    go(&r, pool, ph_patch_in);
    lin_job in = job(&v->w.input_proj, r.x, r.pd, r.h, r.H, NULL);
    linears(&r, pool, &in, 1, NULL, r.n);
    go(&r, pool, ph_pos);
    for (int l = 0; l < v->c.n_layers; l++) layer(&r, pool, l);
    /* pooling, standardization, the weightless norm, the projection */
    go(&r, pool, ph_pool);
    const int64_t m = r.n / ((int64_t)v->c.pooling * v->c.pooling);
    lin_job pj = job(&v->w.proj, r.tmp, r.H, soft, v->text_hidden, NULL);
    linears(&r, pool, &pj, 1, NULL, m);
    free_run(&r, nth);
    return G4_OK;
}

/* ---- setup -------------------------------------------------------------------------------- */

int g4_vision_create(const g4_config *cfg, const g4_vision_source *src, const g4_kernels *K, g4_vision **out, g4_err *err) {
    *out = NULL;
    if (!cfg->vision.has_vision) return g4_err_set(err, G4_EUNSUPPORTED, "this model has no vision tower (config.json has no vision_config)");
    g4_vision *v = calloc(1, sizeof *v);
    if (!v) return g4_err_set(err, G4_ENOMEM, "out of memory");
    v->c = cfg->vision;
    v->text_hidden = cfg->hidden_size;
    v->K = K;
    int rc = g4_vision_weights_bind(cfg, src, &v->w, err);
    if (rc == G4_OK && !(v->inv_freq = falloc((size_t)v->c.head_dim / 4 + 1))) rc = g4_err_set(err, G4_ENOMEM, "out of memory");
    if (rc) {
        g4_vision_free(v);
        return rc;
    }
    g4_vision_rope_inv_freq(&v->c, v->inv_freq);
    *out = v;
    return G4_OK;
}

void g4_vision_free(g4_vision *v) {
    if (!v) return;
    g4_vision_weights_free(&v->w);
    free(v->inv_freq);
    free(v);
}

int64_t g4_vision_max_patches(const g4_vision *v) { return (int64_t)G4_VISION_MAX_SOFT_TOKENS * v->c.pooling * v->c.pooling; }
int g4_vision_patch_dim(const g4_vision *v) { return 3 * v->c.patch_size * v->c.patch_size; }
int g4_vision_pooling(const g4_vision *v) { return v->c.pooling; }
int64_t g4_vision_soft_dim(const g4_vision *v) { return v->text_hidden; }
int64_t g4_vision_hidden(const g4_vision *v) { return v->c.hidden; }
const g4_vision_weights *g4_vision_weights_of(const g4_vision *v) { return &v->w; }
