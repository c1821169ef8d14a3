/* dtype.c — the dtype table and the row conversions it points to (dtype.h): names and sizes,
 * f16 <-> f32, the q8_0 and q4_0 quantizers (llama.cpp's rules; q4_0 lossless on a 4-bit grid)
 * and dequantizers. Portable C, no ISA flags; the reference every kernel set's row_to_f32 meets. */
#include "kernels/dtype.h"

#include <math.h>
#include <string.h>

float g4_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
    if (exp == 0) {
        if (man == 0) u = sign;
        else { /* subnormal: normalise */
            int e = -1;
            do { e++; man <<= 1; } while (!(man & 0x400));
            u = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
        }
    } else if (exp == 31) u = sign | 0x7f800000u | (man << 13);
    else u = sign | ((exp + 127 - 15) << 23) | (man << 13);
    union { uint32_t u; float f; } v = { u };
    return v.f;
}

uint16_t g4_f32_to_f16(float f) {
    union { float f; uint32_t u; } v = { f };
    uint32_t sign = (v.u >> 16) & 0x8000, a = v.u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00);
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* overflow -> inf (RNE threshold) */
    if (a < 0x38800000u) { /* result subnormal or zero */
        if (a < 0x33000000u) return (uint16_t)sign;
        uint32_t e = a >> 23, m = (a & 0x7fffff) | 0x800000;
        uint32_t shift = 126 - e; /* 14 + (113 - e) */
        uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1))) r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = a - 0x38000000u; /* rebias exponent 127 -> 15 */
    r = (r + 0xfffu + ((r >> 13) & 1u)) >> 13;
    return (uint16_t)(sign | r);
}

void g4_quantize_row_q8_0(const float *x, g4_block_q8_0 *y, int64_t n) {
    for (int64_t b = 0; b < n / G4_Q8_BLOCK; b++) {
        const float *xb = x + b * G4_Q8_BLOCK;
        float amax = 0;
        for (int j = 0; j < G4_Q8_BLOCK; j++) {
            float a = fabsf(xb[j]);
            if (a > amax) amax = a;
        }
        const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = g4_f32_to_f16(d);
        for (int j = 0; j < G4_Q8_BLOCK; j++) y[b].qs[j] = (int8_t)roundf(xb[j] * id);
    }
}

static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* llama.cpp's level of v = x * id + 8.5f: (int8_t)v, at most 15. Finite inputs give v in
 * [0.5, 16.5]; the clamps only keep NaN (-> 8, the zero level) and out-of-range values defined. */
static inline uint8_t llama_level(float v) {
    v = v == v ? v : 8.5f;
    v = v < 0.0f ? 0.0f : v > 15.0f ? 15.0f : v;
    return (uint8_t)(int)v;
}

/* 1 when D * (q - 8) gives back every x bit for bit (zeros with their sign). */
static int q4_block_exact(const float *x, uint16_t dh, const uint8_t *q) {
    const float D = g4_f16_to_f32(dh);
    for (int j = 0; j < G4_Q4_BLOCK; j++)
        if (f32_bits(D * (float)(q[j] - 8)) != f32_bits(x[j])) return 0;
    return 1;
}

/* The levels of x on the grid of step D (fp32, nonzero, finite): 1 and q[] when every x / D is
 * an integer in -8..7, else 0 (most candidates fail on the first element). */
static int q4_block_levels(const float *x, float D, uint8_t *q) {
    for (int j = 0; j < G4_Q4_BLOCK; j++) {
        const float r = x[j] / D;
        if (!(r >= -8.0f && r <= 7.0f) || r != rintf(r)) return 0;
        q[j] = (uint8_t)((int)r + 8);
    }
    return 1;
}

/* The first grid that gives the block back exactly, if any: step D = m / k for the element m of
 * largest |x| (index im) and its level k = -8, 7, -7, .., 1, -1 (if the block is D * levels, m / k
 * is D exactly for m's own level). A probe element besides m is tested first with a product
 * (x_p * k / m must be an integer; off by far less than the 1e-3 tolerance on the grid): it
 * rejects almost every candidate of a block off the grid before the exact tests. */
static int q4_block_grid(const float *x, float m, int im, uint16_t *dh, uint8_t *q) {
    int p = -1;
    for (int j = 0; j < G4_Q4_BLOCK && p < 0; j++)
        if (j != im && x[j] != 0.0f) p = j;
    const float inv = 1.0f / m;
    for (int i = 0; i < 15; i++) {
        const int k = i == 0 ? -8 : (i & 1) ? 8 - (i + 1) / 2 : -(8 - i / 2);
        if (p >= 0) {
            const float r = x[p] * (float)k * inv;
            if (!(fabsf(r - rintf(r)) <= 1e-3f)) continue;
        }
        const float D = m / (float)k;
        const uint16_t h = g4_f32_to_f16(D);
        if (g4_f16_to_f32(h) != D || !q4_block_levels(x, D, q) || !q4_block_exact(x, h, q)) continue;
        *dh = h;
        return 1;
    }
    return 0;
}

/* One block: llama.cpp's quantize_row_q4_0_ref (the element of largest |x|, the first one, with
 * its sign is max; d = max / -8; id = 1/d from the fp32 d; q = min(15, (int8_t)(x*id + 8.5))) when
 * it gives the block back exactly; else the first exact grid (q4_block_grid); an all-zero block
 * step +0 (llama's -0 turns +0 into -0: level 8 -> +0, 7 -> -0); else llama's result. */
static void q4_block(const float *x, g4_block_q4_0 *y) {
    uint8_t q[G4_Q4_BLOCK], c[G4_Q4_BLOCK];
    float amax = 0.0f, max = 0.0f;
    int im = 0, zero = 1;
    for (int j = 0; j < G4_Q4_BLOCK; j++) {
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
            im = j;
        }
        zero &= x[j] == 0.0f;
    }
    const float d = max / -8, id = d != 0.0f ? 1.0f / d : 0.0f;
    uint16_t dh = g4_f32_to_f16(d), h;
    for (int j = 0; j < G4_Q4_BLOCK; j++) q[j] = llama_level(x[j] * id + 8.5f);
    if (!q4_block_exact(x, dh, q)) {
        if (zero) {
            dh = 0;
            for (int j = 0; j < G4_Q4_BLOCK; j++) q[j] = signbit(x[j]) ? 7 : 8;
        } else if (isfinite(max) && q4_block_grid(x, max, im, &h, c)) {
            dh = h;
            memcpy(q, c, sizeof q);
        }
    }
    y->d = dh;
    for (int j = 0; j < G4_Q4_BLOCK / 2; j++) y->qs[j] = (uint8_t)(q[j] | q[j + G4_Q4_BLOCK / 2] << 4);
}

void g4_quantize_row_q4_0(const float *x, g4_block_q4_0 *y, int64_t n) {
    for (int64_t b = 0; b < n / G4_Q4_BLOCK; b++) q4_block(x + b * G4_Q4_BLOCK, y + b);
}

void g4_dequantize_row_q4_0(const g4_block_q4_0 *x, float *y, int64_t n) {
    for (int64_t b = 0; b < n / G4_Q4_BLOCK; b++) {
        const float d = g4_f16_to_f32(x[b].d);
        for (int j = 0; j < G4_Q4_BLOCK / 2; j++) {
            y[b * 32 + j] = d * (float)((x[b].qs[j] & 15) - 8);
            y[b * 32 + j + 16] = d * (float)((x[b].qs[j] >> 4) - 8);
        }
    }
}

static void f32_to_f32(const void *src, float *dst, int64_t n) { memcpy(dst, src, (size_t)n * 4); }
static void f32_from_f32(const float *src, void *dst, int64_t n) { memcpy(dst, src, (size_t)n * 4); }

static void bf16_to_f32(const void *src, float *dst, int64_t n) {
    const uint16_t *s = src;
    for (int64_t i = 0; i < n; i++) dst[i] = g4_bf16_to_f32(s[i]);
}
static void bf16_from_f32(const float *src, void *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = g4_f32_to_bf16(src[i]);
}

static void f16_to_f32(const void *src, float *dst, int64_t n) {
    const uint16_t *s = src;
    for (int64_t i = 0; i < n; i++) dst[i] = g4_f16_to_f32(s[i]);
}
static void f16_from_f32(const float *src, void *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = g4_f32_to_f16(src[i]);
}

static void q8_0_to_f32(const void *src, float *dst, int64_t n) {
    const g4_block_q8_0 *b = src;
    for (int64_t i = 0; i < n / G4_Q8_BLOCK; i++) {
        float d = g4_f16_to_f32(b[i].d);
        for (int j = 0; j < G4_Q8_BLOCK; j++) dst[i * G4_Q8_BLOCK + j] = d * (float)b[i].qs[j];
    }
}
static void q8_0_from_f32(const float *src, void *dst, int64_t n) { g4_quantize_row_q8_0(src, dst, n); }

static void q4_0_to_f32(const void *src, float *dst, int64_t n) { g4_dequantize_row_q4_0(src, dst, n); }
static void q4_0_from_f32(const float *src, void *dst, int64_t n) { g4_quantize_row_q4_0(src, dst, n); }

static const g4_dtype_traits traits[G4_DT_COUNT] = {
    [G4_DT_F32] = {"f32", 1, 4, 0, 1, f32_to_f32, f32_from_f32},
    [G4_DT_BF16] = {"bf16", 1, 2, 0, 1, bf16_to_f32, bf16_from_f32},
    [G4_DT_F16] = {"f16", 1, 2, 0, 0, f16_to_f32, f16_from_f32},
    [G4_DT_Q8_0] = {"q8_0", G4_Q8_BLOCK, sizeof(g4_block_q8_0), 1, 1, q8_0_to_f32, q8_0_from_f32},
    [G4_DT_Q4_0] = {"q4_0", G4_Q4_BLOCK, sizeof(g4_block_q4_0), 1, 0, q4_0_to_f32, q4_0_from_f32},
};

const g4_dtype_traits *g4_dtype_info(int dt) { return dt >= 0 && dt < G4_DT_COUNT ? &traits[dt] : NULL; }

size_t g4_dtype_row_bytes(int dt, int64_t n) {
    const g4_dtype_traits *t = g4_dtype_info(dt);
    return t ? (size_t)(n / t->block) * (size_t)t->block_bytes : 0;
}

const char *g4_dtype_name(int dt) {
    const g4_dtype_traits *t = g4_dtype_info(dt);
    return t ? t->name : "?";
}

int g4_dtype_from_name(const char *s) {
    for (int dt = 0; dt < G4_DT_COUNT; dt++)
        if (strcmp(s, traits[dt].name) == 0) return dt;
    return -1;
}
