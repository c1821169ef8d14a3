/* image.h — image file bytes -> an RGB uint8 picture, as Hugging Face loads one for Gemma-4:
 * PIL.Image.open, ImageOps.exif_transpose, convert("RGB") (transformers' image_utils.load_image).
 *
 * PNG (libpng), JPEG (libjpeg-turbo) and WebP (libwebp) are decoded; the format is sniffed from
 * the bytes, never from a file name. Every bad input (empty, truncated, corrupt, another format,
 * dimensions past the limits) is a g4_err with a clear message, never a crash: the limits are
 * checked on the declared size before any pixel buffer exists (decompression bombs).
 * docs/vision.md, "Preprocessing", says what is matched and what is refused.
 * Knows nothing about models: the size rule and the patches live in processor.h. */
#ifndef G4_IMAGE_IMAGE_H
#define G4_IMAGE_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

typedef struct g4_image {
    int w, h;
    uint8_t *rgb;            /* [h][w][3], malloc'd */
} g4_image;

typedef struct g4_image_limits {
    size_t max_bytes;        /* encoded size accepted */
    int64_t max_pixels;      /* declared w*h accepted, checked BEFORE decoding (decompression bombs) */
    int max_side;            /* either side */
} g4_image_limits;

/* Defaults: 20 MiB encoded, Pillow's MAX_IMAGE_PIXELS (89,478,485) pixels, 65535 per side. */
#define G4_IMAGE_DEFAULT_MAX_BYTES  ((size_t)20 << 20)
#define G4_IMAGE_DEFAULT_MAX_PIXELS ((int64_t)89478485)
#define G4_IMAGE_DEFAULT_MAX_SIDE   65535

void g4_image_limits_default(g4_image_limits *l);

/* Sniffs PNG / JPEG / WebP from the bytes (not the file name); anything else: G4_EUNSUPPORTED
 * naming what it looks like (GIF, BMP, TIFF, HEIF, base64 text, ...). Corrupt, truncated,
 * zero-size: G4_EFORMAT with a clear message. Past a limit: G4_EINVAL. lim may be NULL (the
 * defaults). EXIF orientation is applied; alpha is dropped; animations give their first frame.
 * On failure *out is zeroed. */
int g4_image_decode(const void *data, size_t n, const g4_image_limits *lim, g4_image *out, g4_err *err);
/* The same from a file (its size is checked against max_bytes before it is read). */
int g4_image_load_file(const char *path, const g4_image_limits *lim, g4_image *out, g4_err *err);
void g4_image_free(g4_image *im);
/* A zeroed w x h picture (w, h > 0; the caller checks them against its limits). */
int g4_image_alloc(g4_image *im, int w, int h, g4_err *err);

/* What the bytes look like: "PNG", "JPEG", "WebP", "GIF", ..., or NULL when unknown. */
const char *g4_image_sniff(const void *data, size_t n);

#endif
