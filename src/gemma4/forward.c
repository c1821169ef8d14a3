/* forward.c — the Gemma-4 dense forward pass of one rank (spec §3; see forward.h).
 *
 * Per layer: input norm → q/k/v (column-parallel: this rank's heads) → q_norm/k_norm, weightless
 * v_norm, RoPE, K/V written to the paged cache → attention over the cache (keys in absolute
 * position order, one segment per block) → o_proj (row-parallel: canonical slices summed in a fixed tree, then all-reduce) →
 * post-attention norm, residual → pre-FF norm → gate/up (column-parallel) → GELU-tanh·up →
 * down_proj (row-parallel, all-reduce) → post-FF norm, residual → × layer_scalar. Then the final
 * norm, the tied head over this rank's vocab rows and the 30·tanh(x/30) soft-cap.
 * Element-wise phases split tokens statically between the pool's threads; the matrix phases and
 * attention hand out chunks of output rows or (token, head group) items: each thread owns a
 * contiguous share and takes from the others' when it is done (grab), so a thread that is held
 * up (another process, an interrupt, a slower core) does not stall the others at the barrier.
 * Which thread computes a row never changes its arithmetic: work is never split over a dot
 * product's K. */
#include "gemma4/forward.h"
#include "kernels/kernels_fast.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* One thread's share of a phase's work items, on a cache line of its own. */
typedef struct {
    _Alignas(64) atomic_long next;
} g4_cursor;

struct g4_rank_model {
    const g4_config *cfg;
    const g4_tp_plan *plan;
    const g4_rank_weights *w;
    const g4_kernels *K;
    int fast;               /* K is a fast-math table (kernels_fast.h): bf16 activations prepared too */
    g4_pool *pool;
    g4_comm *comm;
    g4_rank_model_opts o;
    int64_t H, q_dim_max, kv_dim_max, nf;
    int nth;
    float embed_scale;
    /* workspace, [max_batch][...] */
    float *h, *xn, *tmp, *q, *kb, *vb, *attn, *gate, *up;
    float *stack[6];        /* slice-tree partial sums, [max_batch][H] each */
    int n_stack;
    float **rp_local;       /* [nth] several tokens: a chunk's slice products and tree levels, n_stack
                             * + 1 buffers of [max_batch][rp_local_rows] (ph_rowpar) */
    int64_t rp_local_rows;
    float **scores;         /* [nth][max_ctx] */
    float **trig;           /* [nth][head_dim_max] cos then sin */
    void **mm_scratch;      /* [nth] */
    void **act;             /* [nth] q8_0/q4_0: this thread's copy of the phase's activations, prepared */
    float **inv_freq;       /* [n_layers][head_dim/2] */
    float **mut_norms;      /* NORM_PLUS_ONE copies, [n_layers*6+1] */
    g4_kvstore kv;          /* this rank's KV pool and block tables */
    void **segs;            /* [nth][tlen + 2] attention segments (g4_kv_seg, or g4_kvq_seg) */
    /* the current phase's arguments */
    const g4_batch *b;
    int layer;
    float *logits_out;
    int n_logits;
    const g4_mat *rp_w;     /* row-parallel matrix */
    const float *rp_x;
    int64_t rp_ldx, rp_slice_cols;
    int rp_nslices;
    g4_cursor *cursor;      /* [nth] work counters of the current phase, reset by run() */
    size_t alloc_scratch;   /* setup: matmul scratch bytes per thread */
    size_t alloc_act;       /* setup: act bytes per thread (0: no prepared matrix), for one token */
    void *act_shared;       /* the prepared copy of a phase's activations, one for all threads
                             * (each prepares its share of the tokens in the phase before) */
    int alloc_hd;           /* setup: largest head_dim */
    /* phase times (g4_rank_phase_times): nanoseconds, [0] one-token passes, [1] several, written
     * by the rank's calling thread, read by a benchmark's (atomics: no torn or racy reads) */
    atomic_llong phase_ns[2][G4_PHASE_COUNT], phase_steps, prefill_tokens;
    double phase_bytes[G4_PHASE_COUNT]; /* weight bytes per decode step, from the matrices */
    double phase_madds[G4_PHASE_COUNT]; /* weight multiply-adds per token */
};

/* ---- helpers ---------------------------------------------------------------------------- */

static const float *norm_w(const g4_rank_model *m, const float *w, int which, int layer) {
    if (m->o.mutation != G4_MUT_NORM_PLUS_ONE || !w) return w;
    return m->mut_norms[layer < 0 ? m->cfg->n_layers * 6 : layer * 6 + which];
}

typedef void (*phase_fn)(g4_rank_model *m, int ith, int nth);
typedef struct { g4_rank_model *m; phase_fn fn; } phase_ctx;
static void phase_tramp(void *ctx, int ith, int nth) {
    phase_ctx *p = ctx;
    p->fn(p->m, ith, nth);
}

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

/* Adds the time since t0 to a phase, of decode (one-token batches) or of prefill (two clock
 * reads per phase: ~11 per layer, microseconds per token against the milliseconds of its weights). */
static void phase_add(g4_rank_model *m, int phase, long long t0) {
    atomic_fetch_add_explicit(&m->phase_ns[m->b->n > 1][phase], now_ns() - t0, memory_order_relaxed);
}

static int phase_of(const g4_rank_model *m, phase_fn fn);

static void run(g4_rank_model *m, phase_fn fn) {
    phase_ctx p = {m, fn};
    const long long t0 = now_ns();
    for (int i = 0; i < m->nth; i++) atomic_store_explicit(&m->cursor[i].next, 0, memory_order_relaxed);
    g4_pool_run(m->pool, phase_tramp, &p);
    phase_add(m, phase_of(m, fn), t0);
}

/* The all-reduce of the tensor-parallel sum, timed (most of it is waiting for the slowest rank). */
static int allreduce(g4_rank_model *m, float *buf, size_t n) {
    const long long t0 = now_ns();
    const int rc = g4_comm_allreduce_sum(m->comm, buf, n);
    phase_add(m, G4_PHASE_ALLREDUCE, t0);
    return rc;
}

/* The next of a phase's n work items (chunk indices 0..n-1) for thread ith, or -1 when all are
 * taken. Thread i owns the i-th contiguous 1/nth of the items and takes them front to back; a
 * thread whose share is done takes from the others' (so a thread slowed by a neighbour on the
 * host is helped, as with one shared counter). Owning a contiguous range matters in decode:
 * each thread then streams one region of the matrix; with one shared counter the two threads
 * took alternate 256 KiB chunks and the 2.8 GB head streamed ~15 % slower (bench/README.md).
 * Which thread computes an item never changes its arithmetic. */
static long grab(g4_rank_model *m, int ith, long n) {
    const int nth = m->nth;
    const long per = (n + nth - 1) / nth;
    for (int k = 0; k < nth; k++) {
        const int v = (ith + k) % nth;
        const long lo = (long)v * per, hi = lo + per < n ? lo + per : n;
        if (lo >= hi || atomic_load_explicit(&m->cursor[v].next, memory_order_relaxed) >= hi - lo) continue;
        const long c = lo + atomic_fetch_add_explicit(&m->cursor[v].next, 1, memory_order_relaxed);
        if (c < hi) return c;
    }
    return -1;
}

/* The most rows a chunk of a matrix of `rows` rows may have: at least 8 chunks per thread where
 * the matrix allows it (a multiple of 32). */
static int64_t chunk_rows_most(int64_t rows, int nth) {
    const int64_t most = (rows / (8 * (int64_t)nth) + 31) / 32 * 32;
    return most < 32 ? 32 : most;
}

/* Rows per chunk of a matrix phase: about 256 KiB of weights (L2-sized, so a prefill re-reads a
 * chunk's rows from cache for each block of tokens), a multiple of 32 rows (the kernels' row
 * blocks), at most chunk_rows_most. */
static int64_t chunk_rows(const g4_rank_model *m, const g4_mat *W) {
    int64_t rb = (int64_t)g4_dtype_row_bytes(W->dtype, W->cols);
    const int64_t target = m->b->n <= 3 ? (int64_t)2 << 20 : (int64_t)256 << 10; /* decode: long streams */
    int64_t c = (target / (rb > 0 ? rb : 1) + 31) / 32 * 32;
    /* a kernel that reuses its activations across more rows asks for them */
    const int64_t want = m->K->matmul_call_rows && m->b->n > 3 ? m->K->matmul_call_rows(W, m->b->n) : 0;
    if (want > c) c = (want + 31) / 32 * 32;
    const int64_t most = chunk_rows_most(W->rows, m->nth);
    if (c > most) c = most;
    return c < 32 ? 32 : c;
}

/* Whether matrices of dtype dt take activations prepared once per phase (kernels.h
 * matmul_prepare): block-quantized ones (q8_0, q4_0) multiply int8-quantized activations, fast
 * math bf16 bf16-rounded ones (kernels_fast.h); the set says so by a nonzero matmul_act_bytes. */
static int prepared_dt(const g4_rank_model *m, int dt) {
    if (dt < 0 || dt >= G4_DT_COUNT) return 0;
    const g4_mat w = {.dtype = dt, .rows = 1, .cols = 512, .ld_bytes = (int64_t)g4_dtype_row_bytes(dt, 512)};
    return m->K->matmul_act_bytes(&w, 1) > 0;
}

/* Bytes of one prepared copy of T tokens' activations for dt matrices of width cols, rounded
 * to whole cache lines (so copies can sit side by side). */
static size_t act_bytes(const g4_rank_model *m, int dt, int64_t cols, int T) {
    g4_mat w = {.dtype = dt, .rows = 1, .cols = cols, .ld_bytes = (int64_t)g4_dtype_row_bytes(dt, cols)};
    return (m->K->matmul_act_bytes(&w, T) + 63) / 64 * 64;
}

/* A q8_0/q4_0 matmul quantizes its activations; in a phase of many calls (chunks, and in decode
 * 8-row steps) they are prepared once: here, for one token's row-parallel slices, by each thread
 * into its own act buffer at offset `off` (several tokens: one shared copy, prepare_shared_tokens).
 * Returns the prepared copy, or NULL when W has none (plain matmul).
 * Quantizing in every call cost as much as streaming a 64-row chunk at T = 1 and 0.9 ms per
 * call at T = 512 (5376 columns). */
static const char *prepare(g4_rank_model *m, int ith, const g4_mat *W, const float *x, int64_t ldx, size_t off) {
    if (!prepared_dt(m, W->dtype) || !W->data) return NULL;
    char *a = (char *)m->act[ith] + off;
    m->K->matmul_prepare(W, x, ldx, m->b->n, a);
    return a;
}

/* y rows [r0, r1) = W x, from the prepared copy when there is one. */
static void mm(g4_rank_model *m, int ith, const g4_mat *W, const float *x, int64_t ldx, const char *act,
               float *y, int64_t ldy, int64_t r0, int64_t r1) {
    if (act) m->K->matmul_prepared(W, act, m->b->n, y, ldy, r0, r1, m->mm_scratch[ith]);
    else m->K->matmul(W, x, ldx, m->b->n, y, ldy, r0, r1, m->mm_scratch[ith]);
}

/* The matrix of ws[0..n) whose dtype a shared copy of their common input is prepared for: the
 * first with a prepared form (a matrix of another prepared dtype then quantizes in its own
 * calls: the same bits), or NULL. */
static const g4_mat *shared_prep_w(const g4_rank_model *m, const g4_mat *const *ws, int n) {
    for (int j = 0; j < n; j++)
        if (ws[j]->data && prepared_dt(m, ws[j]->dtype)) return ws[j];
    return NULL;
}

/* Thread ith's tokens of the shared copy of x for W (prepared in the phase that computes x, so
 * the phase boundary orders it before the matmuls that read it: each thread prepares 1/nth of
 * the tokens once instead of all of them, and the threads share one copy in the cache). */
static void prepare_shared_tokens(g4_rank_model *m, const g4_mat *W, const float *x, int64_t ldx, size_t off, long t0,
                                  long t1) {
    if (W && t1 > t0) m->K->matmul_prepare_tokens(W, x, ldx, m->b->n, (int)t0, (int)t1, (char *)m->act_shared + off);
}

/* The shared copy for matrix W of the phase whose inputs were prepared for P (NULL: none). */
static const char *shared_act(const g4_rank_model *m, const g4_mat *P, const g4_mat *W) {
    return P && W->data && W->dtype == P->dtype ? m->act_shared : NULL;
}

static const g4_mat *qkv_prep_w(const g4_rank_model *m, const g4_layer_weights *L) {
    const g4_mat *ws[3] = {&L->q, &L->k, &L->v};
    return shared_prep_w(m, ws, 3);
}
static const g4_mat *gate_up_prep_w(const g4_rank_model *m, const g4_layer_weights *L) {
    const g4_mat *ws[2] = {&L->gate, &L->up};
    return shared_prep_w(m, ws, 2);
}

/* Chunk i of [0, rows): rows [*r0, *r1); 0 when i is past the end. */
static int chunk_range(int64_t rows, int64_t per, long i, int64_t *r0, int64_t *r1) {
    *r0 = (int64_t)i * per;
    *r1 = *r0 + per < rows ? *r0 + per : rows;
    return *r0 < rows;
}

/* Query heads per attention work item: up to this many heads that share a key/value head
 * (grouped-query attention) go to the kernel together, which then reads each key and value
 * row once for all of them. */
enum { ATT_GROUP = 4 };
/* Tokens per attention work item at most (a prefill tile reads each key and value row once for
 * all of them: the kernel set's attention_tokens); fewer where the scores would pass 16 MB per
 * thread (long contexts) or where the batch has too few items for the threads (decode). */
enum { ATT_TILE = 8 };

static int att_tile_max(const g4_rank_model *m) {
    if (!m->K->attention_tokens) return 1;
    const int64_t per_token = (int64_t)ATT_GROUP * (m->o.max_ctx + 16 + ATT_TILE) * (int64_t)sizeof(float);
    const int64_t nt = (16ll << 20) / per_token;
    return nt < 1 ? 1 : nt > ATT_TILE ? ATT_TILE : (int)nt;
}

/* ---- phases ----------------------------------------------------------------------------- */

static float *falloc(size_t n);

static void ph_alloc_scratch(g4_rank_model *m, int ith, int nth) {
    const int nt = att_tile_max(m);
    size_t sc = G4_ATTN_KV_SCRATCH(ATT_GROUP, m->o.max_ctx + 16, m->alloc_hd);
    if (nt > 1 && G4_ATTN_TOKENS_SCRATCH(nt, ATT_GROUP, m->o.max_ctx + 16 + nt) > sc)
        sc = G4_ATTN_TOKENS_SCRATCH(nt, ATT_GROUP, m->o.max_ctx + 16 + nt);
    m->scores[ith] = falloc(sc);
    m->trig[ith] = falloc((size_t)m->alloc_hd + 16);
    _Static_assert(sizeof(g4_kv_seg) == sizeof(g4_kvq_seg), "segment records of one size");
    m->segs[ith] = malloc(sizeof(g4_kvq_seg) * (size_t)(m->kv.tlen + 2));
    size_t bytes = (m->alloc_scratch + 63) / 64 * 64 + 64;
    if ((m->mm_scratch[ith] = aligned_alloc(64, bytes))) memset(m->mm_scratch[ith], 0, bytes);
    bytes = (m->alloc_act + 63) / 64 * 64;
    if (bytes && (m->act[ith] = aligned_alloc(64, bytes))) memset(m->act[ith], 0, bytes);
    if (m->o.max_batch > 1) { /* several tokens' row-parallel chunks (rowpar_rows_local) */
        const size_t n = (size_t)(m->n_stack + 1) * (size_t)m->o.max_batch * (size_t)m->rp_local_rows;
        if ((m->rp_local[ith] = falloc(n))) memset(m->rp_local[ith], 0, n * sizeof(float));
    }
}

static void ph_embed(g4_rank_model *m, int ith, int nth) {
    const g4_batch *b = m->b;
    long t0, t1;
    g4_split_range(b->n, ith, nth, &t0, &t1);
    const int64_t H = m->H;
    for (long t = t0; t < t1; t++) {
        float *h = m->h + t * H;
        int64_t row = (int64_t)b->ids[t] - m->plan->v0;
        if (b->ids[t] < 0) {
            /* a given embedding (an image's soft token), unscaled: rank 0 contributes it, the
             * others zeros, so the all-reduce gives it whole at every TP degree ("+ 0.0f" as below) */
            const float *x = m->plan->rank == 0 ? b->embd[t] : NULL;
            for (int64_t i = 0; i < H; i++) h[i] = x ? x[i] + 0.0f : 0.0f;
        } else if (row >= 0 && row < m->plan->n_v_local) {
            g4_mat_lookup_row(m->K, &m->w->embed, row, h);
            /* "+ 0.0f" turns -0 into +0 so the all-reduce with the other ranks' zeros is exact
             * and TP=1 (which does the same) gives the same bits */
            for (int64_t i = 0; i < H; i++) h[i] = h[i] * m->embed_scale + 0.0f;
        } else {
            memset(h, 0, sizeof(float) * (size_t)H);
        }
    }
}

static void ph_norm_in(g4_rank_model *m, int ith, int nth) {
    long t0, t1;
    g4_split_range(m->b->n, ith, nth, &t0, &t1);
    const g4_layer_weights *L = &m->w->layers[m->layer];
    for (long t = t0; t < t1; t++)
        m->K->rmsnorm(m->xn + t * m->H, m->h + t * m->H, norm_w(m, L->ln_in, 0, m->layer), m->H, (float)m->cfg->rms_norm_eps);
    prepare_shared_tokens(m, qkv_prep_w(m, L), m->xn, m->H, 0, t0, t1);
}

/* q, k and v as one run of chunks: q's chunks first, then k's, then v's. */
static void ph_qkv(g4_rank_model *m, int ith, int nth) {
    const g4_layer_weights *L = &m->w->layers[m->layer];
    const g4_mat *W[3] = {&L->q, &L->k, &L->v};
    float *y[3] = {m->q, m->kb, m->vb};
    const int64_t ldy[3] = {m->q_dim_max, m->kv_dim_max, m->kv_dim_max};
    int64_t per[3], nch[3];
    for (int j = 0; j < 3; j++) {
        per[j] = chunk_rows(m, W[j]);
        nch[j] = W[j]->data ? (W[j]->rows + per[j] - 1) / per[j] : 0;
    }
    const long n = (long)(nch[0] + nch[1] + nch[2]);
    /* q, k and v have the same width: one shared copy (ph_norm_in) */
    const g4_mat *P = qkv_prep_w(m, L);
    const char *act[3] = {shared_act(m, P, W[0]), shared_act(m, P, W[1]), shared_act(m, P, W[2])};
    for (long i = grab(m, ith, n); i >= 0; i = grab(m, ith, n)) {
        long c = i;
        int j = 0;
        while (c >= nch[j]) c -= nch[j++];
        int64_t r0, r1;
        chunk_range(W[j]->rows, per[j], c, &r0, &r1);
        mm(m, ith, W[j], m->xn, m->H, act[j], y[j], ldy[j], r0, r1);
    }
}

/* A row of n floats into the cache's element type. */
static void store_row(const g4_rank_model *m, uint8_t *dst, const float *x, int64_t n) { g4_dtype_info(m->kv.g.dtype)->from_f32(x, dst, n); }

/* q/k norms, v_norm, RoPE; K and V go to the cache. */
static void ph_qk_post(g4_rank_model *m, int ith, int nth) {
    const g4_batch *b = m->b;
    const int l = m->layer;
    const g4_layer_cfg *lc = &m->cfg->layers[l];
    const g4_layer_weights *L = &m->w->layers[l];
    const int hd = lc->head_dim, half = hd / 2, nq = m->plan->n_q_local, nkv = m->plan->layers[l].n_kv_local;
    const float eps = (float)m->cfg->rms_norm_eps;
    const float *qn = norm_w(m, L->q_norm, 4, l), *kn = norm_w(m, L->k_norm, 5, l);
    float *cs = m->trig[ith], *sn = cs + half;
    long t0, t1;
    g4_split_range(b->n, ith, nth, &t0, &t1);
    for (long t = t0; t < t1; t++) {
        const float pos = (float)b->pos[t];
        for (int j = 0; j < half; j++) {
            float f = pos * m->inv_freq[l][j];
            cs[j] = cosf(f);
            sn[j] = sinf(f);
        }
        float *q = m->q + t * m->q_dim_max, *k = m->kb + t * m->kv_dim_max, *v = m->vb + t * m->kv_dim_max;
        for (int h = 0; h < nq; h++) {
            m->K->rmsnorm(q + h * hd, q + h * hd, qn, hd, eps);
            m->K->rope(q + h * hd, cs, sn, hd);
            if (m->o.mutation == G4_MUT_ATTN_SCALE) m->K->scale(q + h * hd, q + h * hd, 1.0f / sqrtf((float)hd), hd);
        }
        if (lc->k_eq_v) memcpy(v, k, sizeof(float) * (size_t)nkv * hd); /* V = raw k_proj output */
        for (int h = 0; h < nkv; h++) {
            m->K->rmsnorm(k + h * hd, k + h * hd, kn, hd, eps);
            if (m->o.mutation == G4_MUT_V_AFTER_KNORM && lc->k_eq_v) memcpy(v + h * hd, k + h * hd, sizeof(float) * hd);
            m->K->rope(k + h * hd, cs, sn, hd);
            if (m->o.mutation != G4_MUT_NO_VNORM) m->K->rmsnorm(v + h * hd, v + h * hd, NULL, hd, eps);
        }
        const int bs = m->kv.g.bs;
        const int32_t blk = g4_kv_block(&m->kv, b->seq[t], m->kv.g.kind[l], b->pos[t] / bs);
        const int64_t i = b->pos[t] % bs;
        store_row(m, g4_kv_rows(&m->kv, l, blk, i), k, (int64_t)nkv * hd);
        store_row(m, g4_kv_rows(&m->kv, l, blk, bs + i), v, (int64_t)nkv * hd);
    }
}

/* The keys a query at position p reads on layer l: positions [*first, *last]. */
static void kv_range(const g4_rank_model *m, int l, int64_t p, int64_t span_end, int64_t *first, int64_t *last) {
    const int full = m->kv.g.kind[l] == G4_KV_FULL;
    const int64_t w = m->cfg->layers[l].window;
    *first = full || p - w + 1 < 0 ? 0 : p - w + 1;
    /* an image block's token sees the block's later keys too, in sliding layers only (the
     * text mask of Gemma-4 since transformers 1f3294c8: AND(window, OR(causal, same block))) */
    *last = !full && span_end > p + 1 ? span_end - 1 : p;
}

/* Batch tokens [t, t + n) whose key ranges slide together (one sequence, consecutive
 * positions, each range starting and ending at most one key after the previous one's), at most
 * nmax of them; their ranges in first/last. */
static int shared_keys_run(const g4_rank_model *m, int l, int t, int nmax, int64_t *first, int64_t *last) {
    const g4_batch *b = m->b;
    int n = 0;
    for (; n < nmax; n++) {
        const int u = t + n;
        kv_range(m, l, b->pos[u], b->span_end ? b->span_end[u] : 0, &first[n], &last[n]);
        if (n && (b->seq[u] != b->seq[t] || b->pos[u] != b->pos[u - 1] + 1 || first[n] < first[n - 1] ||
                  first[n] > first[n - 1] + 1 || last[n] < last[n - 1] || last[n] > last[n - 1] + 1))
            break;
    }
    return n;
}

static void ph_attention(g4_rank_model *m, int ith, int nth) {
    const g4_batch *b = m->b;
    const int l = m->layer;
    const g4_layer_cfg *lc = &m->cfg->layers[l];
    const int hd = lc->head_dim, nq = m->plan->n_q_local;
    const int q_per_kv = m->cfg->n_heads / lc->n_kv;
    const int kv0 = m->plan->layers[l].kv0, q0 = m->plan->q0;
    /* items: (tile of tokens, group); a group is a run of local heads of one KV head, cut into
     * ATT_GROUP; tiles as long as leaves each thread 4 items or more */
    const int per_kv = (q_per_kv + ATT_GROUP - 1) / ATT_GROUP;
    const int kv_first = q0 / q_per_kv, kv_last = (q0 + nq - 1) / q_per_kv;
    const int ngroups = (kv_last - kv_first + 1) * per_kv;
    int tile = (int)((long)b->n * ngroups / (4l * nth));
    if (tile > att_tile_max(m)) tile = att_tile_max(m);
    if (tile < 1) tile = 1;
    const long n_items = ((long)b->n + tile - 1) / tile * ngroups;
    for (long a = grab(m, ith, n_items); a >= 0; a = grab(m, ith, n_items)) {
        const int t0 = (int)(a / ngroups) * tile, g = (int)(a % ngroups);
        const int t1 = t0 + tile < b->n ? t0 + tile : b->n;
        const int kvg = kv_first + g / per_kv; /* global KV head */
        int h = kvg * q_per_kv + (g % per_kv) * ATT_GROUP - q0, he = h + ATT_GROUP;
        if (he > (kvg + 1) * q_per_kv - q0) he = (kvg + 1) * q_per_kv - q0;
        if (h < 0) h = 0;
        if (he > nq) he = nq;
        if (h >= he) continue; /* a cut of this KV head's heads that lies on another rank */
        for (int t = t0, n; t < t1; t += n) {
            int64_t first[ATT_TILE], last[ATT_TILE], k0[ATT_TILE], k1[ATT_TILE];
            n = shared_keys_run(m, l, t, t1 - t, first, last);
            const int nseg = g4_kv_segments(&m->kv, l, b->seq[t], first[0], last[n - 1], kvg - kv0, m->segs[ith]);
            float *out = m->attn + (int64_t)t * m->q_dim_max + (int64_t)h * hd;
            const float *q = m->q + (int64_t)t * m->q_dim_max + (int64_t)h * hd;
            if (n > 1) {
                for (int i = 0; i < n; i++) k0[i] = first[i] - first[0], k1[i] = last[i] - first[0] + 1;
                m->K->attention_tokens(out, m->q_dim_max, q, m->q_dim_max, n, he - h, hd, m->segs[ith], nseg,
                                       m->kv.g.dtype, k0, k1, m->scores[ith]);
            } else if (m->kv.g.dtype == G4_DT_F32)
                m->K->attention(out, q, he - h, hd, m->segs[ith], nseg, m->scores[ith]);
            else m->K->attention_kv(out, q, he - h, hd, m->segs[ith], nseg, m->kv.g.dtype, m->scores[ith]);
        }
    }
}

/* Part p of the row-parallel matrix (kernels.h col_parts; the whole matrix when it has none). */
static g4_mat rp_part(const g4_rank_model *m, int p) {
    g4_mat Wp = *m->rp_w;
    if (Wp.col_parts > 1) {
        Wp.cols /= Wp.col_parts;
        Wp.data = (const uint8_t *)Wp.data + (size_t)p * (size_t)Wp.rows * (size_t)Wp.ld_bytes;
        Wp.col_parts = 1;
    }
    return Wp;
}

static int rp_parts(const g4_rank_model *m) { return m->rp_w->col_parts > 1 ? m->rp_w->col_parts : 1; }

/* Row-parallel product with the canonical slice tree: out rows [r0,r1) of every token =
 * tree-sum over this rank's slices of (W[:, slice] · x[slice]). The merge is a binary counter:
 * finished subtrees wait on a stack, so the adds happen in the pairwise tree order.
 * rp_slice: column slice i, in part i / (slices per part). */
static g4_mat rp_slice(const g4_rank_model *m, int i) {
    const int spp = m->rp_nslices / rp_parts(m);
    g4_mat Ws = rp_part(m, i / spp);
    Ws.cols = m->rp_slice_cols;
    Ws.data = (const uint8_t *)Ws.data + g4_dtype_row_bytes(Ws.dtype, (int64_t)(i % spp) * m->rp_slice_cols);
    return Ws;
}

/* Slice i's products (elements [r0, r1) of each token's row of src, rows ld floats apart) into
 * the tree whose levels are lv[]: added to the finished subtrees it completes, in the pairwise
 * order, and parked on the stack. */
static void tree_add(const g4_rank_model *m, float *const *lv, int64_t ld, int i, float *src, int64_t r0, int64_t r1) {
    const int T = m->b->n;
    int lvl = 0;
    for (int j = i; j & 1; j >>= 1, lvl++) {
        float *dst = lv[lvl];
        for (int t = 0; t < T; t++) m->K->add(dst + t * ld + r0, dst + t * ld + r0, src + t * ld + r0, r1 - r0);
        src = dst;
    }
    if (src != lv[lvl])
        for (int t = 0; t < T; t++) memcpy(lv[lvl] + t * ld + r0, src + t * ld + r0, sizeof(float) * (size_t)(r1 - r0));
}

static void merge_slice(g4_rank_model *m, int i, float *src, int64_t r0, int64_t r1) { tree_add(m, m->stack, m->H, i, src, r0, r1); }

/* The tree's top level: where the finished sum of nslices slices ends up. */
static int tree_top(int nslices) {
    int lvl = 0;
    while ((1 << lvl) < nslices) lvl++;
    return lvl;
}

/* Decode of a q4_0 matrix (whose kernel takes rows one at a time), or of a q8_0 one where the
 * set walks slices: each row through all its slices in turn, so the rows are read as one stream,
 * the slices' products side by side in tmp until the tree takes them. A slice at a time over 8
 * rows read 576-byte pieces 2.3 KB apart, past the reach of the kernel's prefetch: q4_0's o_proj
 * streamed at half the speed, and q8_0's o_proj / down_proj at half gate/up's on a Zen 4 host. */
static int rowpar_by_rows(const g4_rank_model *m) {
    const int dt = m->rp_w->dtype;
    return m->b->n == 1 && (dt == G4_DT_Q4_0 || (dt == G4_DT_Q8_0 && m->K->matmul_slices)) &&
           m->rp_nslices <= m->o.max_batch;
}

/* Whether the row-parallel matrix's slices read one shared prepared copy (ph_rowpar_prep):
 * several tokens and a prepared form; one token prepares per thread in ph_rowpar. */
static int rowpar_shared(const g4_rank_model *m) {
    return m->b->n > 1 && m->rp_w->data && prepared_dt(m, m->rp_w->dtype);
}

/* Several tokens, rows [r0, r1): each slice's products and the tree's levels in this thread's
 * own buffers, the chunk's rows side by side (ld of 16-float multiples; L2-sized), and only the
 * finished sum stored into the stack's top level. In the [T][H] arrays each token's few hundred
 * rows lie H floats apart: the kernels' stores and the merges' passes missed L2 there, ~10 % of the
 * int8 o_proj prefill (docs/kernels.md "Why the row-parallel prefill lags"). Same adds, same bits. */
static void rowpar_rows_local(g4_rank_model *m, int ith, int64_t r0, int64_t r1, const char *act, size_t act_stride) {
    const int T = m->b->n;
    const int64_t nr = r1 - r0, ld = (nr + 15) / 16 * 16;
    float *lv[8];
    for (int k = 0; k <= m->n_stack; k++) lv[k] = m->rp_local[ith] + (size_t)k * (size_t)m->o.max_batch * (size_t)m->rp_local_rows;
    for (int i = 0; i < m->rp_nslices; i++) {
        g4_mat Ws = rp_slice(m, i); /* its rows [r0, r1), so that the products land at row 0 */
        Ws.data = (const uint8_t *)Ws.data + (size_t)r0 * (size_t)Ws.ld_bytes;
        Ws.rows = nr;
        /* an even slice's products wait at level 0 as they are: written there directly */
        float *prod = i & 1 ? lv[m->n_stack] : lv[0];
        mm(m, ith, &Ws, m->rp_x + (int64_t)i * m->rp_slice_cols, m->rp_ldx, act ? act + (size_t)i * act_stride : NULL, prod, ld, 0, nr);
        tree_add(m, lv, ld, i, prod, 0, nr);
    }
    const int top = tree_top(m->rp_nslices);
    for (int t = 0; t < T; t++) memcpy(m->stack[top] + t * m->H + r0, lv[top] + t * ld, sizeof(float) * (size_t)nr);
}

/* act: the slices' prepared activations, act_stride bytes apart (NULL: matmul from rp_x). */
static void rowpar_rows(g4_rank_model *m, int ith, int64_t r0, int64_t r1, const char *act, size_t act_stride) {
    const int64_t H = m->H;
    if (rowpar_by_rows(m)) {
        /* the set's slice walk in one call (a call per row and slice cost as much as the
         * slice's weights: the 60-layer decode's row-parallel phase ran at 70 % of the others' speed) */
        if (act && m->K->matmul_slices) {
            const int np = rp_parts(m), spp = m->rp_nslices / np; /* each part's rows: one stream */
            for (int p = 0; p < np; p++) {
                const g4_mat Wp = rp_part(m, p);
                m->K->matmul_slices(&Wp, m->rp_slice_cols, spp, act + (size_t)p * spp * act_stride, act_stride,
                                       m->tmp + (int64_t)p * spp * H, H, r0, r1);
            }
        } else
            for (int64_t r = r0; r < r1; r++)
                for (int i = 0; i < m->rp_nslices; i++) {
                    g4_mat Ws = rp_slice(m, i);
                    mm(m, ith, &Ws, m->rp_x + (int64_t)i * m->rp_slice_cols, m->rp_ldx,
                       act ? act + (size_t)i * act_stride : NULL, m->tmp + (int64_t)i * H, H, r, r + 1);
                }
        for (int i = 0; i < m->rp_nslices; i++) merge_slice(m, i, m->tmp + (int64_t)i * H, r0, r1);
        return;
    }
    if (m->b->n > 1 && r1 - r0 <= m->rp_local_rows) {
        rowpar_rows_local(m, ith, r0, r1, act, act_stride);
        return;
    }
    for (int i = 0; i < m->rp_nslices; i++) {
        g4_mat Ws = rp_slice(m, i);
        mm(m, ith, &Ws, m->rp_x + (int64_t)i * m->rp_slice_cols, m->rp_ldx, act ? act + (size_t)i * act_stride : NULL,
           m->tmp, H, r0, r1);
        merge_slice(m, i, m->tmp, r0, r1);
    }
}

static void ph_rowpar(g4_rank_model *m, int ith, int nth) {
    const g4_mat slice = rp_slice(m, 0);
    const int64_t per = chunk_rows(m, &slice);
    /* decode (not q4_0, whose rows rowpar_rows walks through their slices itself, so the tree
     * takes the whole chunk): walk the slices 8 rows at a time, so each row is read front to
     * back (the matvec's prefetch then runs ahead into the next slice's columns instead of a row that is only read
     * a slice later; whole chunks per slice read q8_0 rows in 1.4 KB pieces 22 KB apart, and
     * the phase streamed at ~60 % of the head's speed). */
    const int64_t step = m->b->n == 1 && !rowpar_by_rows(m) ? 8 : per;
    const char *act = NULL;
    const size_t act_stride = prepared_dt(m, slice.dtype) ? act_bytes(m, slice.dtype, slice.cols, m->b->n) : 0;
    if (rowpar_shared(m)) act = m->act_shared;
    for (int i = 0; i < m->rp_nslices && act_stride && m->b->n == 1; i++) {
        g4_mat Ws = rp_slice(m, i);
        const char *a = prepare(m, ith, &Ws, m->rp_x + (int64_t)i * m->rp_slice_cols, m->rp_ldx, (size_t)i * act_stride);
        if (!i) act = a;
    }
    int64_t r0, r1;
    const long n = (long)((m->rp_w->rows + per - 1) / per);
    for (long i = grab(m, ith, n); i >= 0 && chunk_range(m->rp_w->rows, per, i, &r0, &r1); i = grab(m, ith, n))
        for (int64_t s0 = r0; s0 < r1; s0 += step)
            rowpar_rows(m, ith, s0, s0 + step < r1 ? s0 + step : r1, act, act_stride);
}

/* Several tokens: the slices' shared prepared copy, each thread its share of the tokens (one
 * token, in decode: each thread prepares its own copy in ph_rowpar, which saves a phase). */
static void ph_rowpar_prep(g4_rank_model *m, int ith, int nth) {
    long t0, t1;
    g4_split_range(m->b->n, ith, nth, &t0, &t1);
    const g4_mat slice = rp_slice(m, 0);
    const size_t stride = act_bytes(m, slice.dtype, slice.cols, m->b->n);
    for (int i = 0; i < m->rp_nslices; i++) {
        const g4_mat Ws = rp_slice(m, i);
        prepare_shared_tokens(m, &Ws, m->rp_x + (int64_t)i * m->rp_slice_cols, m->rp_ldx, (size_t)i * stride, t0, t1);
    }
}

static int rowpar(g4_rank_model *m, const g4_mat *W, const float *x, int64_t ldx, int64_t slice_cols, int nslices, float **result) {
    m->rp_w = W;
    m->rp_x = x;
    m->rp_ldx = ldx;
    m->rp_slice_cols = slice_cols;
    m->rp_nslices = nslices;
    if (rowpar_shared(m)) run(m, ph_rowpar_prep);
    run(m, ph_rowpar);
    *result = m->stack[tree_top(nslices)];
    return allreduce(m, *result, (size_t)m->b->n * (size_t)m->H);
}


static void ph_post_attn(g4_rank_model *m, int ith, int nth) {
    long t0, t1;
    g4_split_range(m->b->n, ith, nth, &t0, &t1);
    const g4_layer_weights *L = &m->w->layers[m->layer];
    const float eps = (float)m->cfg->rms_norm_eps;
    const int64_t H = m->H;
    for (long t = t0; t < t1; t++) {
        float *h = m->h + t * H, *x = m->xn + t * H;
        m->K->rmsnorm(x, m->rp_x + t * H, norm_w(m, L->ln_post_attn, 1, m->layer), H, eps);
        m->K->add(h, h, x, H);
        m->K->rmsnorm(x, h, norm_w(m, L->ln_pre_ff, 2, m->layer), H, eps);
    }
    prepare_shared_tokens(m, gate_up_prep_w(m, L), m->xn, H, 0, t0, t1);
}

static void ph_gate_up(g4_rank_model *m, int ith, int nth) {
    const g4_layer_weights *L = &m->w->layers[m->layer];
    const int T = m->b->n;
    const int64_t per = chunk_rows(m, &L->gate);
    const g4_mat *P = gate_up_prep_w(m, L); /* gate and up: same width, one shared copy (ph_post_attn) */
    const char *ag = shared_act(m, P, &L->gate), *au = shared_act(m, P, &L->up);
    int64_t r0, r1;
    const long n = (long)((L->gate.rows + per - 1) / per);
    for (long i = grab(m, ith, n); i >= 0 && chunk_range(L->gate.rows, per, i, &r0, &r1); i = grab(m, ith, n)) {
        mm(m, ith, &L->gate, m->xn, m->H, ag, m->gate, m->nf, r0, r1);
        mm(m, ith, &L->up, m->xn, m->H, au, m->up, m->nf, r0, r1);
        for (int t = 0; t < T; t++)
            m->K->gelu_mul(m->gate + t * m->nf + r0, m->gate + t * m->nf + r0, m->up + t * m->nf + r0, r1 - r0);
    }
}

static void ph_post_mlp(g4_rank_model *m, int ith, int nth) {
    long t0, t1;
    g4_split_range(m->b->n, ith, nth, &t0, &t1);
    const g4_layer_weights *L = &m->w->layers[m->layer];
    const float eps = (float)m->cfg->rms_norm_eps;
    const float s = m->o.mutation == G4_MUT_SCALAR_ONE ? 1.0f : L->scalar;
    const int64_t H = m->H;
    for (long t = t0; t < t1; t++) {
        float *h = m->h + t * H, *x = m->xn + t * H;
        m->K->rmsnorm(x, m->rp_x + t * H, norm_w(m, L->ln_post_ff, 3, m->layer), H, eps);
        m->K->add(h, h, x, H);
        m->K->scale(h, h, s, H); /* layer_scalar scales the whole residual stream */
    }
}

static void ph_final_norm(g4_rank_model *m, int ith, int nth) {
    const g4_batch *b = m->b;
    long t0, t1;
    g4_split_range(b->n, ith, nth, &t0, &t1);
    int k = 0;
    for (long t = 0; t < t0; t++) k += b->logits[t] ? 1 : 0;
    for (long t = t0; t < t1; t++)
        if (b->logits[t]) {
            m->K->rmsnorm(m->xn + (int64_t)k * m->H, m->h + t * m->H, norm_w(m, m->w->final_norm, 0, -1), m->H, (float)m->cfg->rms_norm_eps);
            k++;
        }
}

static void ph_head(g4_rank_model *m, int ith, int nth) {
    const g4_mat *E = &m->w->embed;
    const int64_t nv = m->plan->n_v_local, per = chunk_rows(m, E);
    const float cap = (float)m->cfg->final_logit_softcapping;
    int64_t r0, r1;
    const long n = (long)((E->rows + per - 1) / per);
    for (long i = grab(m, ith, n); i >= 0 && chunk_range(E->rows, per, i, &r0, &r1); i = grab(m, ith, n)) {
        m->K->matmul(E, m->xn, m->H, m->n_logits, m->logits_out, nv, r0, r1, m->mm_scratch[ith]); /* plain: its tokens are xn's n_logits rows */
        if (cap > 0)
            for (int k = 0; k < m->n_logits; k++) m->K->softcap(m->logits_out + k * nv + r0, m->logits_out + k * nv + r0, cap, r1 - r0);
    }
}

/* ---- the pass --------------------------------------------------------------------------- */

int g4_rank_forward(g4_rank_model *m, const g4_batch *b, float *logits_local, g4_err *err) {
    if (b->n < 1 || b->n > m->o.max_batch)
        return g4_err_set(err, G4_EINVAL, "batch of %d tokens (1..%d allowed)", b->n, m->o.max_batch);
    int n_logits = 0;
    for (int t = 0; t < b->n; t++) {
        if (b->ids[t] >= m->cfg->vocab_size)
            return g4_err_set(err, G4_EINVAL, "token id %d out of range (vocab %lld)", b->ids[t], (long long)m->cfg->vocab_size);
        if (b->ids[t] < 0 && m->plan->rank == 0 && !(b->embd && b->embd[t]))
            return g4_err_set(err, G4_EINVAL, "token %d has no id and no embedding", t);
        if (b->seq[t] < 0 || b->seq[t] >= m->o.max_seqs || !m->kv.cap[b->seq[t]])
            return g4_err_set(err, G4_EINVAL, "token %d names sequence %d, which is not open", t, b->seq[t]);
        if (b->pos[t] < 0 || b->pos[t] >= m->kv.cap[b->seq[t]])
            return g4_err_set(err, G4_ECONTEXT, "position %d is beyond the %lld positions allowed for sequence %d", b->pos[t],
                              (long long)m->kv.cap[b->seq[t]], b->seq[t]);
        /* every block the token writes or reads is in the table (the leader put it there) */
        for (int k = 0; k < 2; k++) {
            if (!m->kv.g.ng[k]) continue;
            const int64_t w = m->kv.g.window, p = b->pos[t], j0 = k == G4_KV_FULL || p - w + 1 < 0 ? 0 : (p - w + 1) / m->kv.g.bs;
            const int64_t last = k == G4_KV_SLIDE && b->span_end && b->span_end[t] > p + 1 ? b->span_end[t] - 1 : p;
            for (int64_t j = j0; j <= last / m->kv.g.bs; j++)
                if (g4_kv_block(&m->kv, b->seq[t], k, j) < 0)
                    return g4_err_set(err, G4_EINVAL, "token %d (sequence %d, position %d): no KV block for positions %lld..", t, b->seq[t],
                                      b->pos[t], (long long)(j * m->kv.g.bs));
        }
        n_logits += b->logits[t] ? 1 : 0;
    }
    m->b = b;
    run(m, ph_embed);
    int rc = allreduce(m, m->h, (size_t)b->n * (size_t)m->H);
    for (int l = 0; l < m->cfg->n_layers && rc == G4_OK; l++) {
        m->layer = l;
        const g4_layer_weights *L = &m->w->layers[l];
        run(m, ph_norm_in);
        run(m, ph_qkv);
        run(m, ph_qk_post);
        run(m, ph_attention);
        float *o;
        if ((rc = rowpar(m, &L->o, m->attn, m->q_dim_max, g4_tp_attn_slice_cols(m->cfg, l), m->plan->p_attn / m->plan->tp, &o))) break;
        m->rp_x = o;
        run(m, ph_post_attn);
        run(m, ph_gate_up);
        float *d;
        if ((rc = rowpar(m, &L->down, m->gate, m->nf, m->plan->mlp_slice_cols, m->plan->p_mlp / m->plan->tp, &d))) break;
        m->rp_x = d;
        run(m, ph_post_mlp);
    }
    if (rc) return g4_err_set(err, G4_ECOMM, "a rank failed during the forward pass");
    if (n_logits > 0) {
        m->n_logits = n_logits;
        m->logits_out = logits_local;
        run(m, ph_final_norm);
        run(m, ph_head);
    }
    if (b->n == 1) atomic_fetch_add_explicit(&m->phase_steps, 1, memory_order_relaxed);
    else atomic_fetch_add_explicit(&m->prefill_tokens, b->n, memory_order_relaxed);
    return G4_OK;
}

/* ---- phase times ------------------------------------------------------------------------ */

static int phase_of(const g4_rank_model *m, phase_fn fn) {
    if (fn == ph_qkv) return G4_PHASE_QKV;
    if (fn == ph_attention) return G4_PHASE_ATTENTION;
    if (fn == ph_gate_up) return G4_PHASE_GATE_UP;
    if (fn == ph_head) return G4_PHASE_HEAD;
    if (fn == ph_rowpar) return m->rp_w == &m->w->layers[m->layer].o ? G4_PHASE_O_PROJ : G4_PHASE_DOWN_PROJ;
    return G4_PHASE_OTHER;
}

static double mat_bytes(const g4_mat *W) { return W->data ? (double)g4_dtype_row_bytes(W->dtype, W->cols) * (double)W->rows : 0; }
static double mat_madds(const g4_mat *W) { return W->data ? (double)W->cols * (double)W->rows : 0; }

void g4_rank_phase_times(const g4_rank_model *m, g4_phase_times *out) {
    memset(out, 0, sizeof *out);
    out->steps = atomic_load_explicit(&m->phase_steps, memory_order_relaxed);
    out->prefill_tokens = atomic_load_explicit(&m->prefill_tokens, memory_order_relaxed);
    for (int i = 0; i < G4_PHASE_COUNT; i++) {
        out->seconds[i] = 1e-9 * (double)atomic_load_explicit(&m->phase_ns[0][i], memory_order_relaxed);
        out->prefill_seconds[i] = 1e-9 * (double)atomic_load_explicit(&m->phase_ns[1][i], memory_order_relaxed);
        out->step_bytes[i] = m->phase_bytes[i];
        out->token_madds[i] = m->phase_madds[i];
    }
}

void g4_rank_phase_times_reset(g4_rank_model *m) {
    for (int i = 0; i < G4_PHASE_COUNT; i++) {
        atomic_store_explicit(&m->phase_ns[0][i], 0, memory_order_relaxed);
        atomic_store_explicit(&m->phase_ns[1][i], 0, memory_order_relaxed);
    }
    atomic_store_explicit(&m->phase_steps, 0, memory_order_relaxed);
    atomic_store_explicit(&m->prefill_tokens, 0, memory_order_relaxed);
}

static void phase_bytes_init(g4_rank_model *m) {
    for (int l = 0; l < m->cfg->n_layers; l++) {
        const g4_layer_weights *L = &m->w->layers[l];
        m->phase_bytes[G4_PHASE_QKV] += mat_bytes(&L->q) + mat_bytes(&L->k) + mat_bytes(&L->v);
        m->phase_bytes[G4_PHASE_O_PROJ] += mat_bytes(&L->o);
        m->phase_bytes[G4_PHASE_GATE_UP] += mat_bytes(&L->gate) + mat_bytes(&L->up);
        m->phase_bytes[G4_PHASE_DOWN_PROJ] += mat_bytes(&L->down);
        m->phase_madds[G4_PHASE_QKV] += mat_madds(&L->q) + mat_madds(&L->k) + mat_madds(&L->v);
        m->phase_madds[G4_PHASE_O_PROJ] += mat_madds(&L->o);
        m->phase_madds[G4_PHASE_GATE_UP] += mat_madds(&L->gate) + mat_madds(&L->up);
        m->phase_madds[G4_PHASE_DOWN_PROJ] += mat_madds(&L->down);
    }
    m->phase_bytes[G4_PHASE_HEAD] = mat_bytes(&m->w->embed);
    m->phase_madds[G4_PHASE_HEAD] = mat_madds(&m->w->embed);
}

/* ---- setup ------------------------------------------------------------------------------ */

static float *falloc(size_t n) {
    float *p = aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64 + 64);
    if (p) memset(p, 0, n * sizeof(float));
    return p;
}

static size_t max_scratch(const g4_rank_model *m) {
    size_t s = m->K->matmul_scratch_bytes(&m->w->embed, m->o.max_batch);
    for (int l = 0; l < m->cfg->n_layers; l++) {
        const g4_layer_weights *L = &m->w->layers[l];
        const g4_mat *all[] = {&L->q, &L->k, &L->v, &L->gate, &L->up};
        for (int i = 0; i < 5; i++)
            if (all[i]->data) { size_t x = m->K->matmul_scratch_bytes(all[i], m->o.max_batch); if (x > s) s = x; }
        g4_mat o = L->o, d = L->down;
        o.cols = g4_tp_attn_slice_cols(m->cfg, l);
        d.cols = m->plan->mlp_slice_cols;
        size_t x = m->K->matmul_scratch_bytes(&o, m->o.max_batch);
        if (x > s) s = x;
        x = m->K->matmul_scratch_bytes(&d, m->o.max_batch);
        if (x > s) s = x;
    }
    return s;
}

/* The largest prepared copy a phase makes for T tokens: xn for q/k/v/gate/up, or every local
 * slice of a row-parallel matrix (matrices with a prepared form). The shared copy holds it at the
 * largest batch, each thread's own at one token (decode's row-parallel phases). */
static size_t max_act(const g4_rank_model *m, int T) {
    size_t s = 0;
    for (int l = 0; l < m->cfg->n_layers; l++) {
        const g4_layer_weights *L = &m->w->layers[l];
        const g4_mat *col[] = {&L->q, &L->k, &L->v, &L->gate, &L->up};
        for (int i = 0; i < 5; i++)
            if (prepared_dt(m, col[i]->dtype) && act_bytes(m, col[i]->dtype, m->H, T) > s) s = act_bytes(m, col[i]->dtype, m->H, T);
        const int64_t cols[2] = {g4_tp_attn_slice_cols(m->cfg, l), m->plan->mlp_slice_cols};
        const int ns[2] = {m->plan->p_attn / m->plan->tp, m->plan->p_mlp / m->plan->tp};
        const int dt[2] = {L->o.dtype, L->down.dtype};
        for (int i = 0; i < 2; i++) {
            size_t x = prepared_dt(m, dt[i]) ? (size_t)ns[i] * act_bytes(m, dt[i], cols[i], T) : 0;
            if (x > s) s = x;
        }
    }
    return s;
}

int g4_rank_model_create(const g4_config *cfg, const g4_tp_plan *plan, const g4_rank_weights *w, const g4_kernels *K,
                         g4_pool *pool, g4_comm *comm, const g4_rank_model_opts *opts, g4_rank_model **out, g4_err *err) {
    g4_rank_model *m = calloc(1, sizeof *m);
    if (!m) return g4_err_set(err, G4_ENOMEM, "out of memory");
    m->cfg = cfg;
    m->plan = plan;
    m->w = w;
    m->K = K;
    m->fast = g4_kernels_math_of(K) == G4_MATH_FAST;
    m->pool = pool;
    m->comm = comm;
    m->o = *opts;
    m->nth = g4_pool_size(pool);
    phase_bytes_init(m);
    g4_rank_phase_times_reset(m);
    m->H = cfg->hidden_size;
    m->nf = plan->n_f_local;
    m->embed_scale = g4_config_embed_scale(cfg);
    int hd_max = 0;
    for (int l = 0; l < cfg->n_layers; l++) {
        const g4_layer_cfg *lc = &cfg->layers[l];
        if (lc->head_dim > hd_max) hd_max = lc->head_dim;
        int64_t qd = (int64_t)plan->n_q_local * lc->head_dim, kd = (int64_t)plan->layers[l].n_kv_local * lc->head_dim;
        if (qd > m->q_dim_max) m->q_dim_max = qd;
        if (kd > m->kv_dim_max) m->kv_dim_max = kd;
    }
    const size_t B = (size_t)opts->max_batch;
    m->h = falloc(B * m->H);
    m->xn = falloc(B * m->H);
    m->tmp = falloc(B * m->H);
    m->q = falloc(B * m->q_dim_max);
    m->attn = falloc(B * m->q_dim_max);
    m->kb = falloc(B * m->kv_dim_max);
    m->vb = falloc(B * m->kv_dim_max);
    m->gate = falloc(B * m->nf);
    m->up = falloc(B * m->nf);
    int maxs = plan->p_attn / plan->tp > plan->p_mlp / plan->tp ? plan->p_attn / plan->tp : plan->p_mlp / plan->tp;
    m->n_stack = 1;
    while ((1 << (m->n_stack - 1)) < maxs) m->n_stack++;
    int ok = m->h && m->xn && m->tmp && m->q && m->attn && m->kb && m->vb && m->gate && m->up;
    for (int i = 0; i < m->n_stack; i++) ok = ok && (m->stack[i] = falloc(B * m->H));
    m->scores = calloc((size_t)m->nth, sizeof *m->scores);
    m->trig = calloc((size_t)m->nth, sizeof *m->trig);
    m->mm_scratch = calloc((size_t)m->nth, sizeof *m->mm_scratch);
    m->act = calloc((size_t)m->nth, sizeof *m->act);
    m->rp_local = calloc((size_t)m->nth, sizeof *m->rp_local);
    /* the row-parallel matrices' rows are H; their several-token chunks at most this many */
    m->rp_local_rows = (chunk_rows_most(m->H, m->nth) + 15) / 16 * 16;
    m->cursor = aligned_alloc(64, sizeof(g4_cursor) * (size_t)m->nth);
    m->inv_freq = calloc((size_t)cfg->n_layers, sizeof *m->inv_freq);
    m->segs = calloc((size_t)m->nth, sizeof *m->segs);
    ok = ok && m->scores && m->trig && m->mm_scratch && m->act && m->rp_local && m->cursor && m->inv_freq && m->segs;
    if (ok) {
        int rc = g4_kvstore_create(&m->kv, cfg, plan, opts->kv_dtype, opts->kv_pages, opts->max_seqs, opts->max_ctx, err);
        if (rc) {
            g4_rank_model_free(m);
            return rc;
        }
    }
    if (ok) {
        /* each thread allocates (and first touches) its own scratch: glibc then serves it from
         * that thread's arena, far from the other threads'. Allocated back to back by one
         * thread, the 2-thread prefill of the 31B-width model ran 20-30 % slower
         * (88 vs 116 tok/s, bench/README.md). */
        m->alloc_scratch = max_scratch(m);
        m->alloc_act = max_act(m, 1);
        const size_t shared = (max_act(m, m->o.max_batch) + 63) / 64 * 64;
        if (shared && (m->act_shared = aligned_alloc(64, shared))) memset(m->act_shared, 0, shared);
        ok = ok && (!shared || m->act_shared);
        m->alloc_hd = hd_max;
        phase_ctx pc = {m, ph_alloc_scratch};
        g4_pool_run_unpinned(m->pool, phase_tramp, &pc);
        for (int i = 0; i < m->nth; i++)
            ok = ok && m->scores[i] && m->trig[i] && m->segs[i] && m->mm_scratch[i] && (!m->alloc_act || m->act[i]) &&
                 (m->o.max_batch <= 1 || m->rp_local[i]);
    }
    for (int l = 0; ok && l < cfg->n_layers; l++) {
        ok = (m->inv_freq[l] = falloc((size_t)cfg->layers[l].head_dim / 2 + 1)) != NULL;
        if (ok) g4_config_rope_inv_freq(cfg, l, m->inv_freq[l]);
    }
    if (ok && opts->mutation == G4_MUT_NORM_PLUS_ONE) {
        int n = cfg->n_layers * 6 + 1;
        m->mut_norms = calloc((size_t)n, sizeof *m->mut_norms);
        for (int i = 0; ok && i < n; i++) {
            int l = i / 6, which = i % 6;
            const float *src;
            int64_t len;
            if (i == n - 1) { src = w->final_norm; len = m->H; }
            else {
                const g4_layer_weights *L = &w->layers[l];
                const float *v[6] = {L->ln_in, L->ln_post_attn, L->ln_pre_ff, L->ln_post_ff, L->q_norm, L->k_norm};
                src = v[which];
                len = which >= 4 ? cfg->layers[l].head_dim : m->H;
            }
            ok = (m->mut_norms[i] = falloc((size_t)len)) != NULL;
            for (int64_t j = 0; ok && j < len; j++) m->mut_norms[i][j] = 1.0f + src[j];
        }
    }
    if (!ok) {
        g4_rank_model_free(m);
        return g4_err_set(err, G4_ENOMEM, "out of memory for the forward workspace (max batch %d, context %lld)", opts->max_batch, (long long)opts->max_ctx);
    }
    *out = m;
    return G4_OK;
}

void g4_rank_model_free(g4_rank_model *m) {
    if (!m) return;
    g4_kvstore_free(&m->kv);
    free(m->h); free(m->xn); free(m->tmp); free(m->q); free(m->attn); free(m->kb); free(m->vb); free(m->gate); free(m->up);
    for (int i = 0; i < m->n_stack; i++) free(m->stack[i]);
    for (int i = 0; i < m->nth; i++) {
        if (m->scores) free(m->scores[i]);
        if (m->trig) free(m->trig[i]);
        if (m->mm_scratch) free(m->mm_scratch[i]);
        if (m->act) free(m->act[i]);
        if (m->rp_local) free(m->rp_local[i]);
        if (m->segs) free(m->segs[i]);
    }
    free(m->segs);
    free(m->rp_local);
    free(m->scores); free(m->trig); free(m->mm_scratch); free(m->act); free(m->act_shared); free(m->cursor);
    if (m->inv_freq)
        for (int l = 0; l < m->cfg->n_layers; l++) free(m->inv_freq[l]);
    free(m->inv_freq);
    if (m->mut_norms)
        for (int i = 0; i < m->cfg->n_layers * 6 + 1; i++) free(m->mut_norms[i]);
    free(m->mut_norms);
    free(m);
}

g4_kvstore *g4_rank_kv(g4_rank_model *m) { return &m->kv; }
const float *g4_rank_hidden(const g4_rank_model *m) { return m->xn; }
