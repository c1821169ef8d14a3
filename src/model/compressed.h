/* compressed.h — compressed-tensors "pack-quantized" W4A16 checkpoints (docs/quantization.md).
 *
 * What a checkpoint such as google/gemma-4-31B-it-qat-w4a16-ct holds for each quantized Linear
 * weight X.weight of shape [out, in]:
 *   X.weight_packed  I32  [out, in/8]   eight 4-bit values per int32, element 8j+i in bits 4i..4i+3,
 *                                        stored unsigned as q + 8 (q in -8..7)
 *   X.weight_scale   BF16/F16/F32 [out, in/group]   one scale per group of `group` input columns
 *   X.weight_shape   I32/I64 [2]        the unpacked shape, [out, in]
 * and w = scale * q (symmetric: no zero point). config.json's quantization_config says so:
 * quant_method "compressed-tensors", format "pack-quantized", weights {num_bits 4, type int,
 * symmetric true, strategy group, group_size 32}, no activation quantization.
 *
 * Such a weight is the Q4_0 block format in other clothes: each 32-column group is a Q4_0 block
 * with nibbles q + 8 and d = scale (as f16). The conversion here is exact — or refused where
 * a scale has no exact f16 value. Knows safetensors and kernel dtypes, not Gemma. */
#ifndef G4_MODEL_COMPRESSED_H
#define G4_MODEL_COMPRESSED_H

#include <stdint.h>

#include "base/error.h"
#include "kernels/kernels.h"

/* The source dtype of a packed view (g4_mat with .scales set); not a kernel dtype. */
#define G4_DT_CT_INT4 64

typedef struct g4_ct_scheme {
    int present;     /* config.json has a quantization_config */
    int group_size;  /* columns per scale: 32 (the only size supported) */
} g4_ct_scheme;

/* Reads config.json's quantization_config (root or text_config). Absent: present = 0, OK. Any
 * scheme other than symmetric 4-bit int weight-only groups of 32, packed, is an error that names
 * what is unsupported. */
int g4_ct_scheme_parse(const char *config_json, size_t len, g4_ct_scheme *s, g4_err *err);

/* The rectangle [r0, r0+nr) x [c0, c0+nc) of a packed weight as a view of dtype G4_DT_CT_INT4:
 * packed rows of in/8 int32 and scale rows of in/32 values of scales_dtype (a kernel dtype: f32,
 * bf16 or f16). c0 and nc must be multiples of 32. */
g4_mat g4_ct_view(const void *packed, const void *scales, int scales_dtype, int64_t in_cols,
                  int64_t r0, int64_t nr, int64_t c0, int64_t nc);

/* Row r of a packed view as exact Q4_0 blocks (cols/32 of them). Fails, naming the column, when a
 * scale has no exact f16 value (it is never rounded silently). */
int g4_ct_row_to_q4_0(const g4_mat *v, int64_t r, g4_block_q4_0 *dst, g4_err *err);
/* Row r of a packed view dequantized to fp32 (exact: scale * q). */
void g4_ct_row_to_f32(const g4_mat *v, int64_t r, float *dst);

/* Writes one packed row: q[0..n) in -8..7 into n/8 int32 (the layout above). */
void g4_ct_pack_row(const int8_t *q, int64_t n, int32_t *dst);

#endif
