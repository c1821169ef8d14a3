/* kernels_internal.h — helpers shared by the kernel sets (scalar, avx2, avx512) and nothing else:
 * the per-token int8 quantization of activations used by the q8_0 matmul, its scratch layout,
 * and the scratch fallback. Not part of the public interface. */
#ifndef G4_KERNELS_INTERNAL_H
#define G4_KERNELS_INTERNAL_H

#include "base/assert.h"
#include "kernels/kernels.h"

/* One token's quantized activations in the matmul scratch buffer:
 *   int8_t qs[qs_bytes]   (K values, zero-padded to a multiple of 16 blocks = 512 bytes; a set
 *                          may rearrange them in place for its own inner loop)
 *   float  d[nb_pad]      (one scale per 32-block, zero-padded to a multiple of 16 blocks)
 * The whole record is a multiple of 64 bytes so consecutive tokens stay 64-byte aligned. */
static inline int64_t g4__q8_act_nb_pad(int64_t K) { return ((K / G4_Q8_BLOCK) + 15) / 16 * 16; }
static inline int64_t g4__q8_act_qs_bytes(int64_t K) { return g4__q8_act_nb_pad(K) * G4_Q8_BLOCK; }
static inline int64_t g4__q8_act_stride(int64_t K) {
    return g4__q8_act_qs_bytes(K) + g4__q8_act_nb_pad(K) * 4;
}

/* Quantizes x[0..K) (K a multiple of 32) into one token record at dst (layout above): per block
 * d = max|x|/127, q = roundf(x/d) (as llama.cpp's quantize_row_q8_0_ref, but d is kept in fp32).
 * Deterministic and per token; every kernel set uses this same function. */
void g4__q8_quantize_act(const float *x, int64_t K, void *dst);
/* matmul_act_bytes / matmul_prepare of the sets that keep g4__q8_quantize_act's records as they
 * are (scalar, avx2): T records of g4__q8_act_stride(cols) bytes. */
size_t g4__q8_act_bytes_plain(const g4_mat *W, int T);
void g4__q8_prepare_plain(const g4_mat *W, const float *x, int64_t ldx, int T, int t0, int t1, void *act);
/* The same, vectorised (kernels_avx512.c; identical bytes — IEEE division, exact rounding). */
void g4__q8_quantize_act_avx512(const float *x, int64_t K, void *dst);

/* The avx512 attention kernels (attention_avx512.c), the table's attention entries. */
void g4__attention_avx512(float *out, const float *q, int nq, int64_t d, const g4_kv_seg *segs, int nseg,
                          float *scores);
void g4__attention_kv_avx512(float *out, const float *q, int nq, int64_t d, const g4_kvq_seg *segs, int nseg,
                             int dt, float *scratch);
void g4__attention_tokens_avx512(float *out, int64_t ldo, const float *q, int64_t ldq, int nt, int nq, int64_t d,
                                 const void *segs, int nseg, int dt, const int64_t *k0, const int64_t *k1,
                                 float *scratch);

/* q4_0 uses the same quantized activations plus, after the record above, int32 s[nb_pad]: the
 * sum of each block's int8 values, for sum (q-8) x = sum q x - 8 sum x (scalar and avx2 keep
 * them as they are; avx512 arranges all three arrays for its own loop, same size). */
static inline int64_t g4__q4_act_stride(int64_t K) { return g4__q8_act_stride(K) + g4__q8_act_nb_pad(K) * 4; }
static inline int32_t *g4__q4_act_sums(void *rec, int64_t K) {
    return (int32_t *)((char *)rec + g4__q8_act_stride(K));
}
/* T records of g4__q4_act_stride(cols) bytes (every set). */
size_t g4__q4_act_bytes(const g4_mat *W, int T);
/* s[] of a quantized record (zero-padded blocks give 0). */
void g4__q4_block_sums(void *rec, int64_t K);
/* matmul_prepare of scalar and avx2 for q4_0: g4__q8_quantize_act, then the sums. */
void g4__q4_prepare_plain(const g4_mat *W, const float *x, int64_t ldx, int T, int t0, int t1, void *act);

/* The avx512 q4_0 matmul (kernels_q4_avx512.c; its own record layout, same size). */
size_t g4__q4_scratch_bytes_avx512(const g4_mat *W, int T);
void g4__q4_prepare_avx512(const g4_mat *W, const float *x, int64_t ldx, int T, int t0, int t1, void *act);
void g4__q4_matmul_prepared_avx512(const g4_mat *W, const void *act, int T, float *y, int64_t ldy, int64_t r0,
                                   int64_t r1, void *scratch);
void g4__q4_matmul_avx512(const g4_mat *W, const float *x, int64_t ldx, int T, float *y, int64_t ldy, int64_t r0,
                          int64_t r1, void *scratch);
void g4__q4_matmul_slices_avx512(const g4_mat *W, int64_t slice_cols, int nslices, const void *act,
                                 size_t act_stride, float *y, int64_t ldy, int64_t r0, int64_t r1);

/* The avx512 exact bf16 prefill with rows in the lanes (kernels_bf16_rl_avx512.c): T tokens of
 * width K prepared class-major (act: g4__bf16_rl_act_bytes, 64-byte aligned), then rows [r0, r1)
 * of a bf16 W, bitwise the set's matmul; scratch: g4__bf16_rl_scratch_bytes(K). Calls of
 * g4__bf16_rl_call_rows(K) rows reuse the activations best. */
size_t g4__bf16_rl_act_bytes(int64_t K, int T);
size_t g4__bf16_rl_scratch_bytes(int64_t K);
int64_t g4__bf16_rl_call_rows(int64_t K);
void g4__bf16_rl_prepare(const float *x, int64_t ldx, int64_t K, int T, int t0, int t1, float *act);
void g4__bf16_rl_matmul(const g4_mat *W, const float *act, int T, float *y, int64_t ldy, int64_t r0, int64_t r1,
                        void *scratch);

/* A set's matmul entries for one quantized dtype: what its g4_kernels matmul, matmul_scratch_bytes,
 * matmul_act_bytes, matmul_prepare(_tokens) and matmul_prepared do for W of that dtype. Each set
 * keeps a table of them indexed by dtype, so a new format is a row there and a row of dtype.c's
 * table, not a branch in every dispatcher. A float dtype's row is empty, or holds only the
 * prepared entries (avx512's bf16: its plain matmul and scratch stay the set's float path). */
typedef struct g4__qmm {
    void (*matmul)(const g4_mat *W, const float *x, int64_t ldx, int T, float *y, int64_t ldy, int64_t r0, int64_t r1,
                   void *scratch);
    size_t (*scratch_bytes)(const g4_mat *W, int T);
    size_t (*act_bytes)(const g4_mat *W, int T);
    void (*prepare)(const g4_mat *W, const float *x, int64_t ldx, int T, int t0, int t1, void *act); /* tokens [t0, t1) */;
    void (*prepared)(const g4_mat *W, const void *act, int T, float *y, int64_t ldy, int64_t r0, int64_t r1,
                     void *scratch);
} g4__qmm;
/* A set's matmul_act_bytes / matmul_prepare(_tokens) / matmul_prepared from its table; a dtype
 * without prepared entries (f32, f16; bf16 outside avx512, where a fast table takes it itself) has
 * no prepared form, and matmul_act_bytes says 0. */
static inline const g4__qmm *g4__qmm_entry(const g4__qmm *tab, const g4_mat *W) {
    G4_ASSERT(W->dtype >= 0 && W->dtype < G4_DT_COUNT && tab[W->dtype].prepare, "prepared matmul entry on a %s matrix",
              g4_dtype_name(W->dtype));
    return &tab[W->dtype];
}
#define G4__QMM_ENTRY_POINTS(tab)                                                                                        \
    static size_t act_bytes_any(const g4_mat *W, int T) {                                                              \
        return W->dtype >= 0 && W->dtype < G4_DT_COUNT && tab[W->dtype].act_bytes ? tab[W->dtype].act_bytes(W, T) : 0; \
    }                                                                                                                   \
    static void prepare_any(const g4_mat *W, const float *x, int64_t ldx, int T, void *act) {                           \
        g4__qmm_entry(tab, W)->prepare(W, x, ldx, T, 0, T, act);                                                        \
    }                                                                                                                   \
    static void prepare_tokens_any(const g4_mat *W, const float *x, int64_t ldx, int T, int t0, int t1, void *act) {     \
        g4__qmm_entry(tab, W)->prepare(W, x, ldx, T, t0, t1, act);                                                      \
    }                                                                                                                   \
    static void prepared_any(const g4_mat *W, const void *act, int T, float *y, int64_t ldy, int64_t r0, int64_t r1,    \
                             void *scratch) {                                                                           \
        g4__qmm_entry(tab, W)->prepared(W, act, T, y, ldy, r0, r1, scratch);                                            \
    }

/* Aligns a scratch pointer up to 64 bytes (scratch sizes include the 64 bytes of slack). */
static inline void *g4__align64(void *p) {
    return (void *)(((uintptr_t)p + 63) & ~(uintptr_t)63);
}

/* 1 when the avx512 q8_0 matmul may use VNNI (set by kernels_dispatch.c from cpuid; tests may
 * clear it to exercise the AVX512-BW path, which gives the same bits). */
extern int g4__avx512_vnni;

/* 1 when the one-token matvecs of the float sets (exact bf16/f16/f32, and bf16 --math fast)
 * prefetch their 8 row streams into L2 (hint T1) instead of L1 (T0), and the avx512 q4_0 decode
 * its row stream into L2 three times as far ahead (6912 bytes instead of 2304): set by
 * kernels_dispatch.c from the CPU (AMD family 19h, Zen 3/4) or $G4_PREFETCH_L2 (0|1). On a Zen 4
 * EPYC T1 decoded 8 layers of the 31B widths in bf16 30-35 % faster (8 streams x 1 KiB ahead in
 * L1's miss buffers), and the q4_0 slices of down_proj streamed at 0.84-0.97 of a bare read
 * instead of 0.59-0.87. Elsewhere T0 stays: T1 was slower for q4_0 on the Zen 5 host, T0 beat NTA
 * on the Intel one, and T1 for the float matvecs was not measured on either (docs/kernels.md
 * "Prefetch hint by CPU"). Either hint reads the same bytes: the results are the same bits. */
extern int g4__prefetch_l2;

/* FMA burn loops for g4_probe_fma_gflops: `iters` rounds of 16 independent FMA chains of the
 * set's vector width; return the flops done (2 per lane per FMA). *sink defeats dead-code
 * elimination. Only call after the cpuid check for that set. */
double g4__fma_burn_avx512(long iters, float *sink);
double g4__fma_burn_avx2(long iters, float *sink);
/* The same for the dot-product instructions (probe_avx512.c): int8 vpdpbusd (needs VNNI) and
 * bf16 vdpbf16ps (needs AVX512-BF16); ops = 2 per byte or bf16 product. */
double g4__vnni_burn_avx512(long iters, float *sink);
double g4__bf16_burn_avx512(long iters, float *sink);

#endif
