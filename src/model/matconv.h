/* matconv.h — whole-matrix conversions between the kernels' dtypes (and from packed int4
 * checkpoints), row views and row reads, and the q4_0 grouping rule of a rank's matrices. Used
 * by the loader (gemma4/weights.c) and the shard step (model/artifact.c); knows dtypes and the
 * split rules, never the forward pass. */
#ifndef G4_MODEL_MATCONV_H
#define G4_MODEL_MATCONV_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "kernels/kernels.h"
#include "model/config.h"
#include "model/split.h"

/* Converts a view (any kernel dtype, or packed int4) into a new dense matrix of dtype dt
 * (rows × row_bytes(cols)); q8_0 and q4_0 need cols % 32 == 0. Used by the loader and the shard
 * step. */
int g4_mat_convert(const g4_mat *src, int dt, void **out, size_t *bytes, g4_err *err);
/* The same into dst: rows × row_bytes(dt, cols) bytes, dense. A packed int4 source becomes q4_0
 * exactly (or not at all); to any other dtype it is dequantized first. */
int g4_mat_convert_into(const g4_mat *src, int dt, void *dst, g4_err *err);
/* Rows [r0, r0+n) of a view, as a view. */
g4_mat g4_mat_rows(const g4_mat *m, int64_t r0, int64_t n);
/* Row r of a view as fp32 (dequantized for q8_0, q4_0 and packed int4). */
void g4_mat_row_to_f32(const g4_mat *m, int64_t r, float *dst);
/* Bytes one row of a view spans in its source (packed int4: the nibbles). */
size_t g4_mat_src_row_bytes(const g4_mat *m);

/* The column segments the q4_0 grouped layout (kernels.h, G4_Q4_GROUPED) groups each row of a
 * rank's matrix of this kind in: the forward pass's row-parallel slices for o_proj (layer l) and
 * down_proj (each slice a view that starts at its first column), the whole row otherwise; 0 when
 * the matrix cannot be grouped (a slice width that does not divide the row, or not a matrix).
 * The one rule for the loader and the shard step. */
int64_t g4_q4_0_group_cols(const g4_config *cfg, const g4_tp_plan *plan, int kind, int layer, int64_t cols);

/* The column parts (kernels.h col_parts) a rank's row-parallel q4_0 or q8_0 matrix (o_proj of
 * layer l, down_proj) of `cols` columns is stored in so that each part is at most part_cols wide
 * (0: the dtype's default below, < 0: never) and a whole number of its reduction slices: the
 * fewest such parts; 1 (whole) for other kinds and dtypes, a matrix that fits, or slices that
 * cannot be cut so. The one rule for the loader (gemma4/weights.h g4_weights_split_rowpar) and the
 * shard step. The widths the avx512 slice walk streams best (docs/quantization.md findings 8, 11):
 * q4_0 8 slices of the 31B's TP-1 down_proj a part, q8_0 (larger activation records) 4. */
#define G4_ROWPAR_PART_COLS 10752
#define G4_ROWPAR_PART_COLS_Q8 5376
int g4_rowpar_col_parts(const g4_config *cfg, const g4_tp_plan *plan, int dtype, int kind, int layer, int64_t cols, int64_t part_cols);
#endif
