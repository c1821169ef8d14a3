/* images.h — a prompt's images as the engine sees them: where each image's block of soft
 * tokens sits in the token sequence, and the keys its tokens carry in the prefix cache.
 *
 * The chat template (or the caller of `g4tp generate`) puts one image placeholder token per
 * image; g4_images_expand turns each into boi, n image tokens, eoi, as Hugging Face's processor
 * does (n is the image's soft-token count, from its size: never a constant). In a batch
 * (g4_batch) an image token has a negative id, its key: derived from the image's pixel hash and
 * the token's index, so two prompts share cached KV across an image exactly when they hold the
 * same pixels there (and the same text before). Knows tokens and hashes, not pixels or tensors. */
#ifndef G4_ENGINE_IMAGES_H
#define G4_ENGINE_IMAGES_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "engine/textgen.h"
#include "image/processor.h"
#include "model/config.h"

/* The prefix-cache key of token i of the n_tok tokens of an image whose pixels hash to hash: a
 * negative int32. The block's length is part of every key: an image token's KV depends on the
 * whole block (its tokens see each other), so blocks of other lengths must never share keys. */
int32_t g4_image_key(const uint64_t hash[2], int n_tok, int i);

/* Expands the n_images placeholders (image_id) of ids[0..n) in order: each becomes boi,
 * n_tok[i] image_id's, eoi. *out (malloc'd) gets the expanded ids, pos[i] the position of image
 * i's first image token. The counts must agree (G4_EINVAL naming both otherwise). */
int g4_images_expand(const int32_t *ids, size_t n, int32_t image_id, int32_t boi, int32_t eoi, const int *n_tok, int n_images,
                     int32_t **out, size_t *n_out, int64_t *pos, g4_err *err);

/* A prompt with n_images placeholders (the config's image token id) and each image's
 * preprocessed patches pp[i] (kept by the caller until submitted): *out the expanded ids,
 * images[i] the g4_prompt_image of image i (pointing into pp[i]). Refuses a model whose image
 * token ids are not in its vocabulary or without a vision config, and counts that differ. */
int g4_images_prepare(const g4_config *cfg, const int32_t *ids, size_t n, const g4_image_patches *pp, int n_images, int32_t **out,
                      size_t *n_out, g4_prompt_image *images, g4_err *err);

#endif
