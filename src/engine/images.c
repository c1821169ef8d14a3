/* images.c — image blocks in a prompt and their prefix-cache keys (see images.h). */
#include "engine/images.h"

#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

int32_t g4_image_key(const uint64_t hash[2], int n_tok, int i) {
    const uint64_t in[3] = {hash[0], hash[1], (uint64_t)(uint32_t)n_tok << 32 | (uint32_t)i};
    /* 31 bits of a 64-bit hash of (pixels, index): a 16-token cache block of another image
     * matches only if 16 independent 31-bit values collide */
    const uint64_t h = XXH3_64bits(in, sizeof in);
    return -1 - (int32_t)(h & 0x7fffffff);
}

int g4_images_expand(const int32_t *ids, size_t n, int32_t image_id, int32_t boi, int32_t eoi, const int *n_tok, int n_images,
                     int32_t **out, size_t *n_out, int64_t *pos, g4_err *err) {
    int found = 0;
    size_t total = n;
    for (size_t i = 0; i < n; i++)
        if (ids[i] == image_id) {
            if (found < n_images) {
                if (n_tok[found] < 1) return g4_err_set(err, G4_EINVAL, "image %d has %d soft tokens", found + 1, n_tok[found]);
                total += (size_t)n_tok[found] + 1;
            }
            found++;
        }
    if (found != n_images)
        return g4_err_set(err, G4_EINVAL, "the prompt has %d image placeholder%s but %d image%s given", found, found == 1 ? "" : "s", n_images,
                          n_images == 1 ? " is" : "s are");
    int32_t *o = malloc(sizeof(int32_t) * (total ? total : 1));
    if (!o) return g4_err_set(err, G4_ENOMEM, "out of memory for a prompt of %zu tokens", total);
    size_t k = 0;
    int im = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] != image_id) { o[k++] = ids[i]; continue; }
        o[k++] = boi;
        pos[im] = (int64_t)k;
        for (int j = 0; j < n_tok[im]; j++) o[k++] = image_id;
        o[k++] = eoi;
        im++;
    }
    *out = o;
    *n_out = k;
    return G4_OK;
}

int g4_images_prepare(const g4_config *cfg, const int32_t *ids, size_t n, const g4_image_patches *pp, int n_images, int32_t **out,
                      size_t *n_out, g4_prompt_image *images, g4_err *err) {
    const g4_vision_cfg *v = &cfg->vision;
    if (!v->has_vision) return g4_err_set(err, G4_EUNSUPPORTED, "the model has no vision_config: it takes no images");
    const int32_t tok[3] = {v->boi_token_id, v->image_token_id, v->eoi_token_id};
    for (int i = 0; i < 3; i++)
        if (tok[i] < 0 || tok[i] >= cfg->vocab_size)
            return g4_err_set(err, G4_EUNSUPPORTED, "the model's image token id %d is outside its vocabulary of %lld", tok[i], (long long)cfg->vocab_size);
    if (n_images < 0) return g4_err_set(err, G4_EINVAL, "%d images", n_images);
    int *n_tok = calloc((size_t)n_images + 1, sizeof *n_tok);
    int64_t *pos = calloc((size_t)n_images + 1, sizeof *pos);
    int rc = n_tok && pos ? G4_OK : g4_err_set(err, G4_ENOMEM, "out of memory");
    for (int i = 0; rc == G4_OK && i < n_images; i++) n_tok[i] = pp[i].n_soft;
    if (rc == G4_OK) rc = g4_images_expand(ids, n, v->image_token_id, v->boi_token_id, v->eoi_token_id, n_tok, n_images, out, n_out, pos, err);
    free(n_tok);
    if (rc) { free(pos); return rc; }
    for (int i = 0; i < n_images; i++)
        images[i] = (g4_prompt_image){.pos = pos[i], .n_tok = pp[i].n_soft, .hash = {pp[i].hash[0], pp[i].hash[1]}, .pixels = pp[i].pixels,
                                      .ppos = pp[i].pos, .ph = pp[i].ph, .pw = pp[i].pw, .patch_dim = pp[i].patch_dim};
    free(pos);
    return G4_OK;
}
