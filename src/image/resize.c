/* resize.c — Pillow's Image.resize(size, BICUBIC) for 8-bit RGB, bit for bit (Pillow's
 * libImaging/Resample.c, unchanged in its arithmetic from 7.x to 12.x):
 *   per output position a window of input samples, support 2 * max(1, in/out) (antialiased
 *   when shrinking), Keys' cubic with a = -0.5 evaluated in double, weights normalized by their
 *   running sum, then turned into 22-bit fixed point (round half away from zero); each pass sums
 *   integer products from 1 << 21 and clips (sum >> 22) to 0..255. The horizontal pass runs
 *   first, into uint8, then the vertical one; a pass whose side is unchanged is skipped.
 * The same expression order as Pillow's C matters (the weights are compared after rounding to
 * 22 bits), so the double arithmetic below mirrors it operation by operation, and no FMA
 * contraction is allowed (-std=c11 turns it off in GCC; the pragma does for clang). */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "image/processor.h"

#define PRECISION_BITS (32 - 8 - 2)
#define MAX_SIDE (1 << 20)

typedef struct {
    int ksize;
    int *bounds;         /* [out][2]: first input index, count */
    int32_t *k;          /* [out][ksize] fixed-point weights */
} coeffs;

static double bicubic(double x) {
#define A (-0.5)
    if (x < 0.0) x = -x;
    if (x < 1.0) return ((A + 2.0) * x - (A + 3.0)) * x * x + 1;
    if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * A;
    return 0.0;
#undef A
}

static void coeffs_free(coeffs *c) {
    free(c->bounds);
    free(c->k);
    memset(c, 0, sizeof *c);
}

/* precompute_coeffs + normalize_coeffs_8bpc for the box [0, in_size). */
static int coeffs_make(int in_size, int out_size, coeffs *c, g4_err *err) {
    memset(c, 0, sizeof *c);
    /* Pillow: scale = (double)(in1 - in0) / outSize with a float box */
    double scale = (double)((float)in_size - 0.0f) / out_size, filterscale = scale;
    if (filterscale < 1.0) filterscale = 1.0;
    double support = 2.0 * filterscale;
    int ksize = (int)ceil(support) * 2 + 1;
    double *kk = malloc((size_t)out_size * (size_t)ksize * sizeof *kk);
    c->bounds = malloc((size_t)out_size * 2 * sizeof *c->bounds);
    c->k = malloc((size_t)out_size * (size_t)ksize * sizeof *c->k);
    if (!kk || !c->bounds || !c->k) {
        free(kk);
        coeffs_free(c);
        return g4_err_set(err, G4_ENOMEM, "out of memory for resampling weights (%d -> %d)", in_size, out_size);
    }
    c->ksize = ksize;
    double inv_filterscale = 1.0 / filterscale;
    for (int xx = 0; xx < out_size; xx++) {
        double center = 0.0 + (xx + 0.5) * scale, ww = 0.0;
        int xmin = (int)(center - support + 0.5);
        if (xmin < 0) xmin = 0;
        int xmax = (int)(center + support + 0.5);
        if (xmax > in_size) xmax = in_size;
        xmax -= xmin;
        if (xmax > ksize) xmax = ksize;   /* cannot happen (Pillow relies on it); keeps k[] in bounds */
        double *k = kk + (size_t)xx * ksize;
        int x;
        for (x = 0; x < xmax; x++) {
            double w = bicubic((x + xmin - center + 0.5) * inv_filterscale);
            k[x] = w;
            ww += w;
        }
        if (ww != 0.0)
            for (x = 0; x < xmax; x++) k[x] /= ww;
        for (; x < ksize; x++) k[x] = 0;
        c->bounds[2 * xx] = xmin;
        c->bounds[2 * xx + 1] = xmax;
    }
    for (size_t i = 0; i < (size_t)out_size * (size_t)ksize; i++)
        c->k[i] = kk[i] < 0 ? (int32_t)(-0.5 + kk[i] * (1 << PRECISION_BITS)) : (int32_t)(0.5 + kk[i] * (1 << PRECISION_BITS));
    free(kk);
    return G4_OK;
}

static inline uint8_t clip8(int64_t ss) {
    if (ss <= 0) return 0;
    ss >>= PRECISION_BITS;
    return (uint8_t)(ss > 255 ? 255 : ss);
}

/* in [h][in_w][3] -> out [h][out_w][3] */
static void pass_h(const uint8_t *in, int in_w, int h, uint8_t *out, int out_w, const coeffs *c) {
    for (int y = 0; y < h; y++) {
        const uint8_t *row = in + (size_t)y * in_w * 3;
        uint8_t *o = out + (size_t)y * out_w * 3;
        for (int xx = 0; xx < out_w; xx++) {
            int xmin = c->bounds[2 * xx], xmax = c->bounds[2 * xx + 1];
            const int32_t *k = c->k + (size_t)xx * c->ksize;
            int64_t s0 = 1 << (PRECISION_BITS - 1), s1 = s0, s2 = s0;
            const uint8_t *p = row + (size_t)xmin * 3;
            for (int x = 0; x < xmax; x++, p += 3) {
                s0 += p[0] * k[x];
                s1 += p[1] * k[x];
                s2 += p[2] * k[x];
            }
            o[3 * xx] = clip8(s0);
            o[3 * xx + 1] = clip8(s1);
            o[3 * xx + 2] = clip8(s2);
        }
    }
}

/* in [in_h][w][3] -> out [out_h][w][3] */
static void pass_v(const uint8_t *in, int w, uint8_t *out, int out_h, const coeffs *c) {
    const size_t stride = (size_t)w * 3;
    for (int yy = 0; yy < out_h; yy++) {
        int ymin = c->bounds[2 * yy], ymax = c->bounds[2 * yy + 1];
        const int32_t *k = c->k + (size_t)yy * c->ksize;
        uint8_t *o = out + (size_t)yy * stride;
        for (size_t i = 0; i < stride; i++) {
            int64_t s = 1 << (PRECISION_BITS - 1);
            const uint8_t *p = in + (size_t)ymin * stride + i;
            for (int y = 0; y < ymax; y++, p += stride) s += *p * k[y];
            o[i] = clip8(s);
        }
    }
}

int g4_image_resize_bicubic(const g4_image *in, int oh, int ow, g4_image *out, g4_err *err) {
    memset(out, 0, sizeof *out);
    if (!in || !in->rgb || in->w <= 0 || in->h <= 0 || in->w > MAX_SIDE || in->h > MAX_SIDE)
        return g4_err_set(err, G4_EINVAL, "resize: bad input image (%d x %d)", in ? in->w : 0, in ? in->h : 0);
    if (oh <= 0 || ow <= 0 || oh > MAX_SIDE || ow > MAX_SIDE)
        return g4_err_set(err, G4_EINVAL, "resize: bad output size %d x %d (sides 1..%d)", oh, ow, MAX_SIDE);
    if ((uint64_t)oh * (uint64_t)ow > ((uint64_t)1 << 32) || (uint64_t)in->h * (uint64_t)ow > ((uint64_t)1 << 32))
        return g4_err_set(err, G4_EINVAL, "resize: %d x %d -> %d x %d is too large", in->h, in->w, oh, ow);
    int rc = g4_image_alloc(out, ow, oh, err);
    if (rc) return rc;
    const uint8_t *src = in->rgb;
    uint8_t *tmp = NULL;
    coeffs ch = {0}, cv = {0};
    if (ow != in->w) {
        rc = coeffs_make(in->w, ow, &ch, err);
        if (!rc && oh != in->h) {
            tmp = malloc((size_t)in->h * ow * 3);
            if (!tmp) rc = g4_err_set(err, G4_ENOMEM, "out of memory resizing %d x %d -> %d x %d", in->h, in->w, oh, ow);
        }
        if (!rc) {
            pass_h(in->rgb, in->w, in->h, tmp ? tmp : out->rgb, ow, &ch);
            src = tmp;
        }
    }
    if (!rc && oh != in->h) {
        rc = coeffs_make(in->h, oh, &cv, err);
        if (!rc) pass_v(src, ow, out->rgb, oh, &cv);
    } else if (!rc && ow == in->w) {
        memcpy(out->rgb, in->rgb, (size_t)oh * ow * 3);
    }
    coeffs_free(&ch);
    coeffs_free(&cv);
    free(tmp);
    if (rc) g4_image_free(out);
    return rc;
}
