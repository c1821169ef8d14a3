/* kernels.h — the numeric kernels of the forward pass, one table per instruction set.
 *
 * A g4_kernels table is chosen once at start (kernels_dispatch.c: cpuid, or G4_ISA=scalar|avx2|
 * avx512) and never changes. Every kernel has a fixed arithmetic order that depends only on the
 * ISA and on the shape of the one output element it computes — never on how many tokens are in
 * the batch, which rows a thread was given, or the TP degree. That is what makes prefill equal
 * decode and TP=1 equal TP=8 bit for bit (DESIGN.md §4).
 *
 * Knows nothing about Gemma: only matrices, vectors and attention over key/value segments.
 * The element types (sizes, names, conversions, quantizers) are dtype.h's table.
 * Activations are fp32; weights are fp32, bf16, f16, q8_0 (blocks of 32 int8 + one f16 scale,
 * the llama.cpp Q8_0 layout) or q4_0 (blocks of 32 4-bit levels + one f16 scale, llama.cpp's
 * Q4_0). A q8_0 or q4_0 matmul has llama.cpp's semantics: each token's activations are quantized
 * per 32-block to int8 with an fp32 scale (in the scratch buffer, deterministically, per token),
 * each block's integer dot product is exact (q4_0: sum (q-8) x) and is scaled by d_w * d_x in
 * fp32, and the block values are summed in fp32 in the set's fixed order. */
#ifndef G4_KERNELS_H
#define G4_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/dtype.h"

/* A weight matrix W [rows][cols], row-major, row r starting ld_bytes after row r-1.
 * A column sub-range is another g4_mat whose data points at the first column (for q8_0 the
 * offset must be a multiple of 32 columns; the same for q4_0). */
typedef struct {
    const void *data;
    int dtype;
    int64_t rows, cols;
    int64_t ld_bytes;
    /* Source formats only (model/compressed.h: packed int4 + per-group scales), which no kernel
     * reads — the loader converts them first. Zero for every kernel dtype. */
    const void *scales;
    int scales_dtype;
    int64_t scales_ld;
    /* q4_0 only: G4_Q4_GROUPED when every row's full groups of 16 blocks are in the grouped
     * layout (g4_q4_0_group_row), which only the avx512 set reads; 0 = llama.cpp's blocks. */
    int layout;
    /* grouped only: each row was grouped as segments of this many columns (the forward pass's
     * reduction slices of o_proj / down_proj; the whole row otherwise); 0 = the whole row */
    int64_t layout_cols;
    /* grouped only: 1 when each segment's partial last group (its last nb % 16 blocks) is in the
     * grouped tail layout (below), 0 when those blocks are llama.cpp's (artifacts before version 5) */
    int q4_tail;
    /* 0 or 1: rows as above. P > 1 (row-parallel q4_0 matrices only, weights.h
     * g4_weights_split_rowpar): the columns in P equal parts, part p (columns [p*cols/P,
     * (p+1)*cols/P) of every row) a rows x cols/P matrix at data + p*rows*ld_bytes, ld_bytes being
     * one part's row. No kernel takes such a matrix whole: the forward pass passes views of its
     * parts or column slices (forward.c rp_slice). */
    int col_parts;
} g4_mat;

/* One contiguous run of cached keys and values, in absolute-position order:
 * k[j*stride .. +d] and v[j*stride .. +d] for j in [0, n). */
typedef struct {
    const float *k, *v;
    int64_t n;
    int64_t stride; /* floats between consecutive positions */
} g4_kv_seg;

/* The same for a KV cache of another element type (bf16, q8_0): row j of a head's keys at
 * (const char *)k + j * stride, d elements of that type (q8_0: d / 32 blocks). */
typedef struct {
    const void *k, *v;
    int64_t n;
    int64_t stride; /* bytes between consecutive positions */
} g4_kvq_seg;

/* Floats of scratch attention_kv needs: the scores, and tiles of rows dequantized for f32. */
#define G4_ATTN_KV_TILE 8
#define G4_ATTN_KV_SCRATCH(nq, nk, d) ((size_t)(nq) * (size_t)(nk) + (size_t)G4_ATTN_KV_TILE * (size_t)(d) + 32)
/* attention_tokens: at most this many (token, head) rows per call, and its scratch in floats */
#define G4_ATTN_ROWS_MAX 64
#define G4_ATTN_TOKENS_SCRATCH(nt, nq, nk) ((size_t)(nt) * (size_t)(nq) * (size_t)(nk) + 32)

typedef struct g4_kernels {
    const char *name; /* "scalar", "avx2", "avx512" */

    /* y[t*ldy + r] = dot(W row r, x[t*ldx .. +cols]) for t in [0,T), r in [r0,r1).
     * The dot product's order is fixed per ISA and per cols; it is the same for every T and
     * every row range. scratch: matmul_scratch_bytes(W, T) bytes owned by the calling thread
     * (quantized activations, prepared weight rows, parked partial accumulators), so the hot path
     * never allocates; any alignment is fine. NULL makes the kernel allocate (and free) what it
     * needs itself. A column sub-range of a q8_0 / q4_0 matrix needs cols a multiple of 32. */
    void (*matmul)(const g4_mat *W, const float *x, int64_t ldx, int T,
                   float *y, int64_t ldy, int64_t r0, int64_t r1, void *scratch);
    size_t (*matmul_scratch_bytes)(const g4_mat *W, int T);

    /* matmul's activations prepared once for many calls over row ranges of W, or of column
     * slices of W's width: q8_0 and q4_0 quantize them (decode walks a matrix a few rows at a
     * time; quantizing in every call cost as much as the rows), a fast table rounds them for
     * bf16, and avx512 rearranges them for its exact bf16 prefill. matmul_act_bytes is 0 where
     * the set has no prepared form for W's dtype (then call matmul). act: 64-byte aligned,
     * matmul_act_bytes(W, T) bytes, laid out per ISA and per dtype: a copy prepared for a q4_0
     * matrix serves any q4_0 matrix of that width, never a q8_0 one (and the other way round).
     * matmul_prepared(W, act, ..) gives the bits of matmul(W, x, ..); scratch:
     * matmul_scratch_bytes(W, T) bytes, not NULL. */
    size_t (*matmul_act_bytes)(const g4_mat *W, int T);
    void (*matmul_prepare)(const g4_mat *W, const float *x, int64_t ldx, int T, void *act);
    /* matmul_prepare of tokens [t0, t1) of the T-token copy only (x still points at token 0,
     * the copy's layout is that of T tokens): threads may prepare disjoint token ranges of one
     * shared copy; matmul_prepare is t0 = 0, t1 = T. */
    void (*matmul_prepare_tokens)(const g4_mat *W, const float *x, int64_t ldx, int T, int t0, int t1, void *act);
    void (*matmul_prepared)(const g4_mat *W, const void *act, int T, float *y, int64_t ldy,
                            int64_t r0, int64_t r1, void *scratch);
    /* Optional (NULL or 0: the caller's choice). Rows a matmul_prepared call of T tokens over W
     * should cover at least, where the kernel reuses the activations across that many rows
     * (avx512's exact bf16 prefill: a group of row panels per pass over the activations). */
    int64_t (*matmul_call_rows)(const g4_mat *W, int T);
    /* Optional (NULL: call matmul_prepared per row and slice). One token through a q4_0 or
     * q8_0 matrix cut into nslices column slices of slice_cols (a row-parallel matrix's reduction
     * slices; grouped q4_0 W: grouped per slice, layout_cols == slice_cols): for rows [r0, r1) and
     * slices s, y[s*ldy + r] = W[r, s*slice_cols .. +slice_cols) . x_s, x_s prepared for that
     * slice at act + s*act_stride. Bitwise matmul_prepared of each slice alone; the point is one
     * call per row range, each row read through all its slices as one stream (a call per row and
     * slice cost as much as the slice's ~600 bytes of q4_0 weights; q8_0 walked in calls of 8 rows
     * a slice streamed at half the column-parallel matrices' rate on a Zen 4 host). */
    void (*matmul_slices)(const g4_mat *W, int64_t slice_cols, int nslices, const void *act, size_t act_stride,
                          float *y, int64_t ldy, int64_t r0, int64_t r1);

    /* y = x * (mean(x^2) + eps)^-1/2 * w (w may be NULL: no weight). In-place allowed. */
    void (*rmsnorm)(float *y, const float *x, const float *w, int64_t n, float eps);

    /* x[d] rotated in the half-split (NeoX) form: pairs (i, i+d/2), cos/sin have d/2 entries. */
    void (*rope)(float *x, const float *cos, const float *sin, int64_t d);

    /* out[i] = gelu_tanh(gate[i]) * up[i] */
    void (*gelu_mul)(float *out, const float *gate, const float *up, int64_t n);

    /* nq query heads over the same keys of nseg segments (in position order), scale 1.0:
     * out[h*d + i] = sum_j softmax_j(q_h.k_j) v_j[i], q_h = q + h*d. The heads of a group share
     * one key/value head (grouped-query attention), so a set may read each key and value row
     * once for all of them; each head's bits are those of nq = 1. scratch holds >= nq x total
     * keys floats. */
    void (*attention)(float *out, const float *q, int nq, int64_t d, const g4_kv_seg *segs,
                      int nseg, float *scratch);
    /* attention over keys and values of type dt (G4_DT_BF16 or G4_DT_Q8_0): bitwise the
     * attention above over the rows dequantized to f32 (bf16 widened, q8_0 d * q, both exact);
     * the cache is read at its own size (avx512 widens rows as it loads them, avx2 into L1
     * tiles of G4_ATTN_KV_TILE rows shared by the heads). scratch:
     * G4_ATTN_KV_SCRATCH(nq, total keys, d) floats. */
    void (*attention_kv)(float *out, const float *q, int nq, int64_t d, const g4_kvq_seg *segs,
                         int nseg, int dt, float *scratch);
    /* nt tokens' nq heads each over keys they share, in one pass: token t's heads at
     * q + t*ldq (+ h*d), its outputs at out + t*ldo (+ h*d), and it reads keys [k0[t], k1[t])
     * of the segments' keys (numbered from 0 in position order). dt: G4_DT_F32 (segs are
     * g4_kv_seg) or G4_DT_BF16 / G4_DT_Q8_0 (g4_kvq_seg). Each token's bits are those of
     * attention / attention_kv over its own keys alone (prefill tiles equal decode); each key
     * and value row is read once per tile of tokens instead of once per token. nt * nq <=
     * G4_ATTN_ROWS_MAX; scratch: G4_ATTN_TOKENS_SCRATCH(nt, nq, total keys) floats. NULL in
     * the sets without it (the caller goes token by token). */
    void (*attention_tokens)(float *out, int64_t ldo, const float *q, int64_t ldq, int nt, int nq, int64_t d,
                             const void *segs, int nseg, int dt, const int64_t *k0, const int64_t *k1,
                             float *scratch);

    /* y[i] = a[i] + b[i] */
    void (*add)(float *y, const float *a, const float *b, int64_t n);
    /* y[i] = x[i] * s */
    void (*scale)(float *y, const float *x, float s, int64_t n);
    /* y[i] = cap * tanh(x[i] / cap) */
    void (*softcap)(float *y, const float *x, float cap, int64_t n);
    /* dst[i] = (float)src[i] for a row of dtype dt (exact for bf16/f16; dequantized for q8_0 and
     * q4_0: d * q, d * (q - 8), bitwise the same in every set) */
    void (*row_to_f32)(float *dst, const void *src, int dt, int64_t n);

    /* The q4_0 layout this set's matmuls read fastest: G4_Q4_GROUPED (below) or 0 (llama.cpp's
     * blocks). Every set reads both with the same bits; a field rather than a pointer test so
     * that code which never runs a kernel (the loaders, the fuzz harnesses) links without them. */
    int q4_0_layout;
} g4_kernels;

/* The kernel set in use: chosen on first call from cpuid or $G4_ISA. Thread-safe. */
const g4_kernels *g4_kernels_get(void);
/* A specific set: "scalar", "avx2", "avx512"; NULL if unknown or not supported by this CPU. */
const g4_kernels *g4_kernels_by_name(const char *name);
/* Names of the sets this CPU can run, best last; returns how many (<= 3). */
int g4_kernels_available(const char **names, int max);

extern const g4_kernels g4_kernels_scalar;
/* The SIMD sets; only call them through g4_kernels_by_name/g4_kernels_get (cpuid-checked). */
extern const g4_kernels g4_kernels_avx2;
extern const g4_kernels g4_kernels_avx512;

/* The grouped q4_0 layout (the avx512 decode loop's order; same bytes per row): a row of nb
 * blocks is nb / 16 groups of 288 bytes, then its last n = nb % 16 blocks (the partial group).
 * Group bytes [0, 32): the f16 scale of block blk(L) = 4 (L mod 4) + L / 4 of the group as word L;
 * bytes 32 + 64 j + 4 L + i: level byte 4 j + i of block blk(L) (j, i in 0..3). The partial group
 * (18 n bytes): as llama.cpp's blocks, or with the tail (g4_mat q4_tail) the n scales as words
 * 0..n-1 in block order, then for j = 0..3 the level bytes 4 j..4 j+3 of blocks 0..n-1 (bytes
 * 2 n + 4 n j + 4 b + i) — one masked load and one lane permutation per vector (a masked and
 * transposed read of the blocks cost ~1.4 groups for 10 blocks). Column slices of such a matrix
 * are only valid at the offsets it was grouped from (each slice grouped as a row). */
#define G4_Q4_GROUPED 1
/* In place: one row (or row segment) of nb llama.cpp blocks to the grouped layout (tail: the
 * partial group too), and back. */
void g4_q4_0_group_row(void *row, int64_t nb, int tail);
void g4_q4_0_ungroup_row(void *row, int64_t nb, int tail);
/* Whether grouped rows get tails: 1 unless the environment says G4_Q4_TAIL=0 (the one reading of
 * it for the engine, g4tp shard and the benchmarks). */
int g4_q4_0_tail_default(void);
/* Row r of W as floats (dst: W->cols), in either q4_0 layout (grouped: by its layout_cols
 * segments): the embedding lookup of a tied head whose matrix the head's matmul reads grouped,
 * and dequantizing a grouped matrix. The bits of K->row_to_f32 on the blocks. */
void g4_mat_lookup_row(const struct g4_kernels *K, const g4_mat *W, int64_t r, float *dst);
/* G4_Q4_GROUPED when the set k reads grouped q4_0 matrices (avx512), else 0. */
int g4_q4_0_layout_for(const g4_kernels *k);

#endif
