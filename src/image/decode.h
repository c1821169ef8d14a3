/* decode.h — inside src/image: the per-format decoders that image.c dispatches to, the
 * metadata they hand back for the orientation (EXIF / XMP, as Pillow collects them), and the
 * helpers they share (limit check, pixel buffer). Not a public header. */
#ifndef G4_IMAGE_DECODE_H
#define G4_IMAGE_DECODE_H

#include <stddef.h>
#include <stdint.h>

#include "image/image.h"

/* Where Pillow's getexif() finds the orientation, per format: EXIF bytes (a TIFF structure,
 * possibly behind "Exif\0\0" prefixes), or, when those carry no Orientation, the XMP text;
 * PNG also has ImageMagick's hex "Raw profile type exif" text. All malloc'd, any may be NULL. */
typedef struct g4_image_meta {
    uint8_t *exif;
    size_t exif_n;
    uint8_t *raw_profile;    /* only used when exif is NULL */
    size_t raw_profile_n;
    uint8_t *xmp;
    size_t xmp_n;
} g4_image_meta;

void g4_image_meta_free(g4_image_meta *m);
/* Replaces *dst (freeing the old one) with a copy of src[0..n): Pillow keeps the last chunk. */
int g4_image_meta_set(uint8_t **dst, size_t *dst_n, const void *src, size_t n);
/* Appends src to *dst (JPEG's extended EXIF over several APP1 segments). */
int g4_image_meta_append(uint8_t **dst, size_t *dst_n, const void *src, size_t n);

/* The declared size against the limits, before anything is allocated: G4_EINVAL past a limit,
 * G4_EFORMAT for a zero or negative side. fmt names the format in the message. */
int g4_image_check_size(const char *fmt, int64_t w, int64_t h, const g4_image_limits *lim, g4_err *err);

int g4_image_decode_png(const uint8_t *d, size_t n, const g4_image_limits *lim, g4_image *out,
                        g4_image_meta *meta, g4_err *err);
int g4_image_decode_jpeg(const uint8_t *d, size_t n, const g4_image_limits *lim, g4_image *out,
                         g4_image_meta *meta, g4_err *err);
int g4_image_decode_webp(const uint8_t *d, size_t n, const g4_image_limits *lim, g4_image *out,
                         g4_image_meta *meta, g4_err *err);

/* EXIF orientation 1..8 as ImageOps.exif_transpose reads it (exif.c); 1 when absent or unreadable. */
int g4_image_orientation(const g4_image_meta *m);
/* Applies orientation o (2..8) the way Pillow's Image.transpose does; 1 leaves im alone. */
int g4_image_orient(g4_image *im, int o, g4_err *err);

#endif
