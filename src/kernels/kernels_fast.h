/* kernels_fast.h — the fast math mode (`--math fast`): bf16 matmuls on `vdpbf16ps` arithmetic.
 *
 * A fast table is the set it wraps with matmul / matmul_scratch_bytes replaced for bf16 weights
 * (every other dtype and kernel is the set's own, bit for bit). A bf16 matmul in fast mode rounds
 * each activation to bf16 (round-to-nearest-even, g4_f32_to_bf16) and computes every output as
 * one fixed function of K, the same in every set, for every T and row range:
 *
 *   16 lanes; for each chunk c of 32 columns (the last zero-padded on both sides), lane l does
 *   acc = S(S(acc, w[32c+2l+1], x[32c+2l+1]), w[32c+2l], x[32c+2l]), then the avx512 reduction
 *   (lo256+hi256) -> (lo128+hi128) -> (0+2, 1+3) -> sum in plain fp32;
 *   S(a, w, x) = FTZ(fp32_RNE(DAZ(a) + DAZ(w) * DAZ(x))), the product exact (no fp32 range
 *   limit) — Intel's definition of VDPBF16PS, which this CPU follows bit for bit (probed over
 *   the whole exponent range, subnormals included).
 *
 * avx512 computes it with `vdpbf16ps` (AVX512_BF16; the scalar emulation where the CPU lacks
 * it), scalar and avx2 with the emulation below (slow: a reference, not a fast path).
 * matmul_act_bytes / matmul_prepare / matmul_prepared take bf16 matrices too in a fast table:
 * the prepared copy is the T rounded rows, each zero-padded to a multiple of 32 (the same bytes in
 * every set), so a phase rounds its activations once for all its row chunks.
 * Fast mode keeps every invariance of the exact mode (TP degree, threads, batch, prefill ≡
 * decode) because the order above depends on K only. Accuracy: docs/math.md. */
#ifndef G4_KERNELS_FAST_H
#define G4_KERNELS_FAST_H

#include "kernels/kernels.h"

typedef enum { G4_MATH_EXACT = 0, G4_MATH_FAST = 1 } g4_math;

/* "exact" / "fast" -> G4_MATH_*, -1 if unknown. */
int g4_math_from_name(const char *name);
const char *g4_math_name(int math);

/* The table for set `base` (one of the three sets) in math mode `math`: base itself for
 * G4_MATH_EXACT, its fast copy (same name) for G4_MATH_FAST; NULL for an unknown base. */
const g4_kernels *g4_kernels_math(const g4_kernels *base, int math);
/* G4_MATH_FAST when k is a fast table, else G4_MATH_EXACT. */
int g4_kernels_math_of(const g4_kernels *k);

/* The emulated step S and the reference fast bf16 matmul (matmul's signature; W bf16). */
float g4_bf16dp_step(float acc, uint16_t w, uint16_t x);
void g4__fast_matmul_bf16_ref(const g4_mat *W, const float *x, int64_t ldx, int T, float *y, int64_t ldy,
                              int64_t r0, int64_t r1, void *scratch);
size_t g4__fast_scratch_bytes(const g4_mat *W, int T);
/* The prepared copy (T rows of (cols + 31) / 32 * 32 bf16): bytes, rounding, and the matmul on it. */
size_t g4__fast_act_bytes(const g4_mat *W, int T);
void g4__fast_prepare_ref(const g4_mat *W, const float *x, int64_t ldx, int T, int t0, int t1, void *act);
void g4__fast_prepared_ref(const g4_mat *W, const void *act, int T, float *y, int64_t ldy, int64_t r0, int64_t r1,
                           void *scratch);

/* The avx512 version (kernels_fast_avx512.c); only after the set's cpuid check. */
void g4__fast_matmul_bf16_avx512(const g4_mat *W, const float *x, int64_t ldx, int T, float *y, int64_t ldy,
                                 int64_t r0, int64_t r1, void *scratch);
void g4__fast_prepare_avx512(const g4_mat *W, const float *x, int64_t ldx, int T, int t0, int t1, void *act);
void g4__fast_prepared_avx512(const g4_mat *W, const void *act, int T, float *y, int64_t ldy, int64_t r0, int64_t r1,
                              void *scratch);

/* Token block of the fast matmuls: activations are rounded to bf16 this many tokens at a time. */
#define G4_FAST_TB 48

#endif
