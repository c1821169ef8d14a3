/* dtype.h — the element types of weights and KV caches, described once: the g4_dtype_traits
 * table (name, block size and bytes, whether quantized, whether a KV cache may use it, and the
 * row conversions to and from fp32), the block layouts, and the exact scalar conversions.
 *
 * A new weight format is one row of the table (dtype.c) plus its kernels in each set; code that
 * sizes, names, converts or validates rows asks the table instead of naming formats. Portable C
 * with no kernel knowledge: the kernel sets (scalar, avx2, avx512, q4) and everything above them
 * include this file; it includes none of theirs. */
#ifndef G4_KERNELS_DTYPE_H
#define G4_KERNELS_DTYPE_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    G4_DT_F32 = 0,
    G4_DT_BF16 = 1,
    G4_DT_F16 = 2,
    G4_DT_Q8_0 = 3,
    G4_DT_Q4_0 = 4,
    G4_DT_COUNT
} g4_dtype;

#define G4_Q8_BLOCK 32
typedef struct {
    uint16_t d;              /* f16 scale */
    int8_t qs[G4_Q8_BLOCK];  /* value = d * qs[i] */
} g4_block_q8_0;

/* llama.cpp's block_q4_0, the on-disk layout: element j of the block is the low nibble of qs[j]
 * (j < 16) or the high nibble of qs[j-16]; value = d * (q - 8), q in 0..15. */
#define G4_Q4_BLOCK 32
typedef struct {
    uint16_t d;                   /* f16 scale */
    uint8_t qs[G4_Q4_BLOCK / 2];  /* two levels per byte */
} g4_block_q4_0;
_Static_assert(sizeof(g4_block_q4_0) == 18, "g4_block_q4_0 must be 18 bytes, unpadded");

typedef struct g4_dtype_traits {
    const char *name;         /* "f32", "bf16", "f16", "q8_0", "q4_0" (artifacts and flags use it) */
    int block;                /* elements per block: 1 for the float types */
    int block_bytes;          /* bytes per block */
    int quantized;            /* blocks with a scale: rows are whole blocks (and so are TP column
                               * slices), and a matmul quantizes its activations (matmul_prepare) */
    int kv;                   /* may be a KV cache's element type (--kv-dtype) */
    /* dst[i] = src[i] as fp32 for a row of n elements: exact for the float types, d * q (q8_0),
     * d * (q - 8) (q4_0); every kernel set's row_to_f32 gives these bits */
    void (*to_f32)(const void *src, float *dst, int64_t n);
    /* a row of n floats into this type: copy, round to nearest even (bf16, f16), quantize
     * (g4_quantize_row_q8_0 / _q4_0) */
    void (*from_f32)(const float *src, void *dst, int64_t n);
} g4_dtype_traits;

/* The row of dt, or NULL when dt is no kernel dtype. */
const g4_dtype_traits *g4_dtype_info(int dt);
/* Bytes of one row of n elements in dtype dt (quantized: n must be a multiple of the block);
 * 0 for an unknown dtype. */
size_t g4_dtype_row_bytes(int dt, int64_t n);
const char *g4_dtype_name(int dt);        /* "?" if unknown */
int g4_dtype_from_name(const char *name); /* "f32", "bf16", "f16", "q8_0", "q4_0"; -1 if unknown */

/* Quantizes n floats (n a multiple of 32) to q8_0 blocks, as llama.cpp's quantize_row_q8_0_ref:
 * per block d = max|x|/127 (stored as f16), q = roundf(x / d). For shard/load-time conversion
 * and the q8_0 KV cache. */
void g4_quantize_row_q8_0(const float *x, g4_block_q8_0 *y, int64_t n);

/* Quantizes n floats (n a multiple of 32) to q4_0 blocks by llama.cpp's quantize_row_q4_0_ref
 * (the element of largest |x| is `max`, d = max / -8 stored as f16, q = min(15, (int)(x/d + 8.5))
 * with x/d computed as x * (1/d)), except that a block already on a 4-bit grid, every value
 * exactly D * (q - 8) for one f16 D and q in 0..15 (not necessarily spanning the levels),
 * quantizes losslessly: g4_dequantize_row_q4_0 gives back its values bit for bit (zeros with their
 * sign), and an unambiguous block its D and levels. Non-finite inputs never invoke undefined
 * behaviour (NaN -> level 8). */
void g4_quantize_row_q4_0(const float *x, g4_block_q4_0 *y, int64_t n);
/* y[i] = d * (q - 8) for n elements (n a multiple of 32); the same as row_to_f32. */
void g4_dequantize_row_q4_0(const g4_block_q4_0 *x, float *y, int64_t n);

/* Exact conversions used everywhere. */
static inline float g4_bf16_to_f32(uint16_t h) {
    union { uint32_t u; float f; } v = { (uint32_t)h << 16 };
    return v.f;
}
/* Round-to-nearest-even (NaN stays NaN). */
static inline uint16_t g4_f32_to_bf16(float f) {
    union { float f; uint32_t u; } v = { f };
    if ((v.u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((v.u >> 16) | 0x40);
    uint32_t r = v.u + 0x7fffu + ((v.u >> 16) & 1u);
    return (uint16_t)(r >> 16);
}
float g4_f16_to_f32(uint16_t h);
uint16_t g4_f32_to_f16(float f);

#endif
