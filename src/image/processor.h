/* processor.h — Gemma-4's image processor (transformers' Gemma4ImageProcessor, PIL backend):
 * an RGB picture -> the size rule -> Pillow-exact BICUBIC resize -> rescaled 16x16 patches with
 * their (x, y) positions, what the vision tower eats. Also reads processor_config.json.
 * The math and its sources: the oracle's VISION.md section 2 and docs/vision.md.
 * Knows nothing about the tower, the prompt or token ids: only the processor's own keys. */
#ifndef G4_IMAGE_PROCESSOR_H
#define G4_IMAGE_PROCESSOR_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "image/image.h"

typedef struct g4_image_proc {
    int max_soft_tokens;     /* 70, 140, 280, 560 or 1120 (HF accepts only these) */
    int patch_size;          /* 16 */
    int pooling;             /* pooling_kernel_size, 3 */
    double rescale;          /* rescale_factor (1/255) */
    int do_rescale;          /* 1: value = float32(u8 * rescale); 0: float32(u8) */
    int do_normalize;        /* accepted only with the identity mean 0 / std 1 (what Gemma-4 ships) */
    double mean[3], std[3];
    int do_convert_rgb;      /* recorded; decoding always gives RGB */
    int resample;            /* 3 = BICUBIC, the only one accepted */
} g4_image_proc;

/* HF's class defaults (Gemma4ImageProcessor): 280 tokens, patch 16, pooling 3, rescale 1/255,
 * no normalization, BICUBIC. A key absent from the config keeps its default. */
void g4_image_proc_default(g4_image_proc *p);
/* Reads processor_config.json (or preprocessor_config.json) from a model folder: keys flat at
 * the top or nested under "image_processor". processor_config.json is used when it carries the
 * image-processor keys, else preprocessor_config.json. Neither file: G4_ENOTFOUND (error.h has
 * no ENOENT; G4_EIO is kept for files that exist but cannot be read). Unknown resample / budget,
 * wrong types or inconsistent values: a clear G4_EFORMAT / G4_EUNSUPPORTED naming the key. */
int g4_image_proc_load(const char *model_dir, g4_image_proc *p, g4_err *err);
/* The same from JSON text; what names the source in messages. */
int g4_image_proc_parse(const char *json, size_t n, const char *what, g4_image_proc *p, g4_err *err);
/* G4_OK when p's values are ones this processor can run (as g4_image_proc_parse checks them). */
int g4_image_proc_check(const g4_image_proc *p, g4_err *err);

/* The processor's target size for an h x w image (VISION.md 2.2, exactly, incl. the edge cases:
 * float64 sqrt, floor to multiples of patch * pooling, small images upscaled, a side that floors
 * to 0 becomes patch * pooling and the other min(floor(long / short), max_soft_tokens) of them). */
int g4_image_proc_size(const g4_image_proc *p, int h, int w, int *oh, int *ow, g4_err *err);

/* Pillow-exact BICUBIC (Image.resize(BICUBIC), antialiased, 22-bit fixed point, horizontal pass
 * then vertical, rounding+clipping to uint8 between passes); a pass is skipped when its side
 * does not change. Sides up to 1 << 20. */
int g4_image_resize_bicubic(const g4_image *in, int oh, int ow, g4_image *out, g4_err *err);

typedef struct g4_image_patches {
    int ph, pw, n;           /* patch grid and n = ph * pw (unpadded) */
    int n_soft;              /* soft tokens = n / pooling^2 */
    int patch_dim;           /* patch_size^2 * 3 */
    int height, width;       /* the resized image */
    float *pixels;           /* [n][patch_dim], (py, px, c) channel fastest, float32(u8 * rescale) as HF */
    int32_t *pos;            /* [n][2]: (x = column, y = row), patches row-major */
    uint64_t hash[2];        /* XXH3-128 of the resized pixels + size (g4_image_hash): the key the
                              * prefix cache will use for this image; [0] = low 64 bits */
} g4_image_patches;

/* RGB image -> resized (skipped when the size is unchanged) -> rescaled patches. On failure
 * *out is zeroed. */
int g4_image_preprocess(const g4_image_proc *p, const g4_image *im, g4_image_patches *out, g4_err *err);
void g4_image_patches_free(g4_image_patches *pp);

/* XXH3-128 over (height, width as little-endian uint32) then the [h][w][3] bytes. */
void g4_image_hash(const g4_image *im, uint64_t hash[2]);

#endif
