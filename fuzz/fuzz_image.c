/* fuzz_image.c — image bytes (g4_image_decode: PNG via libpng, JPEG via libjpeg-turbo, WebP via
 * libwebp, EXIF/XMP orientation), then the Gemma-4 processor on what decoded (size rule,
 * Pillow-exact resize, patches), under small limits so that each input stays fast. The first
 * byte picks the token budget (70 or 140) and is also part of the image (most seeds start with
 * a magic byte). Invariants: a failure has a code and a message and leaves nothing behind; a
 * decoded image is within the limits; the patches cover the resized image exactly, with values
 * in [0, 1], positions on the grid and soft tokens = patches / 9; the hash is deterministic. */
#include "fuzz_util.h"
#include "image/image.h"
#include "image/processor.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    g4_image_limits lim = {.max_bytes = 1 << 20, .max_pixels = 1 << 20, .max_side = 4096};
    g4_image im;
    g4_err err = {0};
    int rc = g4_image_decode(data, size, &lim, &im, &err);
    if (rc) {
        FUZZ_CHECK_ERR(rc, err);
        FUZZ_CHECK(im.rgb == NULL && im.w == 0 && im.h == 0, "memory left after a failure");
        return 0;
    }
    FUZZ_CHECK(im.rgb && im.w > 0 && im.h > 0 && im.w <= lim.max_side && im.h <= lim.max_side &&
               (int64_t)im.w * im.h <= lim.max_pixels, "decoded %d x %d past the limits", im.w, im.h);

    g4_image_proc p;
    g4_image_proc_default(&p);
    p.max_soft_tokens = size && (data[0] & 1) ? 140 : 70;
    g4_image_patches pp;
    rc = g4_image_preprocess(&p, &im, &pp, &err);
    if (rc) {
        /* only an allocation can fail on a decoded image */
        FUZZ_CHECK(rc == G4_ENOMEM && err.msg[0], "preprocess of %d x %d: rc %d \"%s\"", im.w, im.h, rc, err.msg);
        FUZZ_CHECK(pp.pixels == NULL && pp.pos == NULL, "memory left after a failure");
        g4_image_free(&im);
        return 0;
    }
    int oh, ow;
    FUZZ_CHECK(g4_image_proc_size(&p, im.h, im.w, &oh, &ow, &err) == G4_OK, "size rule failed after preprocess");
    FUZZ_CHECK(pp.height == oh && pp.width == ow && pp.ph * 16 == oh && pp.pw * 16 == ow, "grid %d x %d for %d x %d",
               pp.ph, pp.pw, oh, ow);
    FUZZ_CHECK(pp.n == pp.ph * pp.pw && pp.n_soft * 9 == pp.n && pp.n_soft >= 1 && pp.n_soft <= p.max_soft_tokens,
               "n %d, n_soft %d", pp.n, pp.n_soft);
    FUZZ_CHECK(pp.patch_dim == 768, "patch_dim %d", pp.patch_dim);
    for (size_t i = 0; i < (size_t)pp.n * pp.patch_dim; i++)
        FUZZ_CHECK(pp.pixels[i] >= 0.0f && pp.pixels[i] <= 1.0f, "pixel value %g", pp.pixels[i]);
    for (int i = 0; i < pp.n; i++)
        FUZZ_CHECK(pp.pos[2 * i] == i % pp.pw && pp.pos[2 * i + 1] == i / pp.pw, "position of patch %d", i);
    g4_image_patches again;
    FUZZ_CHECK(g4_image_preprocess(&p, &im, &again, &err) == G4_OK, "a second preprocess failed");
    FUZZ_CHECK(again.hash[0] == pp.hash[0] && again.hash[1] == pp.hash[1] &&
               !memcmp(again.pixels, pp.pixels, (size_t)pp.n * pp.patch_dim * sizeof(float)), "preprocess is not deterministic");
    g4_image_patches_free(&again);
    g4_image_patches_free(&pp);
    g4_image_free(&im);
    return 0;
}
