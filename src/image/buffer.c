/* buffer.c — what the decoders (png.c, jpeg.c, webp.c) and the entry (image.c) share: the
 * limits and their check before anything is allocated, the pixel buffer, the metadata buffers
 * the orientation is read from. Below them all, so no decoder calls the entry back. */
#include <stdlib.h>
#include <string.h>

#include "image/decode.h"

void g4_image_limits_default(g4_image_limits *l) {
    l->max_bytes = G4_IMAGE_DEFAULT_MAX_BYTES;
    l->max_pixels = G4_IMAGE_DEFAULT_MAX_PIXELS;
    l->max_side = G4_IMAGE_DEFAULT_MAX_SIDE;
}

void g4_image_free(g4_image *im) {
    if (!im) return;
    free(im->rgb);
    memset(im, 0, sizeof *im);
}

void g4_image_meta_free(g4_image_meta *m) {
    free(m->exif);
    free(m->raw_profile);
    free(m->xmp);
    memset(m, 0, sizeof *m);
}

int g4_image_meta_set(uint8_t **dst, size_t *dst_n, const void *src, size_t n) {
    uint8_t *p = malloc(n ? n : 1);
    if (!p) return G4_ENOMEM;
    if (n) memcpy(p, src, n);
    free(*dst);
    *dst = p;
    *dst_n = n;
    return G4_OK;
}

int g4_image_meta_append(uint8_t **dst, size_t *dst_n, const void *src, size_t n) {
    if (!*dst) return g4_image_meta_set(dst, dst_n, src, n);
    uint8_t *p = realloc(*dst, *dst_n + n + 1);
    if (!p) return G4_ENOMEM;
    memcpy(p + *dst_n, src, n);
    *dst = p;
    *dst_n += n;
    return G4_OK;
}

int g4_image_check_size(const char *fmt, int64_t w, int64_t h, const g4_image_limits *lim, g4_err *err) {
    if (w <= 0 || h <= 0)
        return g4_err_set(err, G4_EFORMAT, "%s image declares a size of %lld x %lld pixels", fmt, (long long)w, (long long)h);
    if (w > lim->max_side || h > lim->max_side)
        return g4_err_set(err, G4_EINVAL, "%s image of %lld x %lld pixels: a side is longer than the limit of %d",
                          fmt, (long long)w, (long long)h, lim->max_side);
    if (w * h > lim->max_pixels)
        return g4_err_set(err, G4_EINVAL, "%s image of %lld x %lld = %lld pixels is larger than the limit of %lld pixels",
                          fmt, (long long)w, (long long)h, (long long)(w * h), (long long)lim->max_pixels);
    return G4_OK;
}

int g4_image_alloc(g4_image *im, int w, int h, g4_err *err) {
    im->rgb = calloc((size_t)w * (size_t)h, 3);
    if (!im->rgb) return g4_err_set(err, G4_ENOMEM, "out of memory for a %d x %d image", w, h);
    im->w = w;
    im->h = h;
    return G4_OK;
}

