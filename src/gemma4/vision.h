/* vision.h — the Gemma-4 vision tower: one image's patches in, its soft tokens out
 * (Gemma4VisionModel + Gemma4MultimodalEmbedder; the math in the oracle's VISION.md, summarised in docs/vision.md
 * sections 3-6, traps T6-T12, T16, T18).
 *
 *   patch embedding   h = (2 px - 1) input_proj^T + table[0][x] + table[1][y]
 *   N encoder layers  bidirectional attention over the image's patches (no padding, no mask),
 *                     q/k RMSNorm with weights, weightless v norm, 2D RoPE (channels [0, hd/2)
 *                     rotate with x, [hd/2, hd) with y, NeoX halves, theta from the config),
 *                     scale 1.0; gelu_tanh MLP; post norms; no layer scalar; optional clamps
 *   pooling           k x k block average by position, pooled grid row-major, x sqrt(hidden),
 *                     (h - std_bias) * std_scale
 *   projection        weightless RMSNorm, then embed_vision [text hidden][hidden]
 *
 * Activations are fp32; weights are read as stored (bf16 upcast exactly by the kernels). The
 * work runs on a g4_pool, split over output rows, (head, query block) items, tokens or pooled
 * tokens — never over a dot product's K — so the soft tokens are bitwise the same for any thread
 * count, any order of earlier calls (nothing is carried between calls) and any TP degree (the
 * tower knows nothing of TP; the engine runs it on the leader). Knows the kernels and the
 * weights (vision_weights.h); nothing of images, prompts or the text model. */
#ifndef G4_GEMMA4_VISION_H
#define G4_GEMMA4_VISION_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "base/threadpool.h"
#include "gemma4/vision_weights.h"
#include "kernels/kernels.h"
#include "model/config.h"

/* The largest max_soft_tokens Gemma-4's image processor accepts (70, 140, 280, 560, 1120): an
 * image has at most this many soft tokens, i.e. 1120 * pooling^2 patches (10080 on the 31B). */
#define G4_VISION_MAX_SOFT_TOKENS 1120

typedef struct g4_vision g4_vision;

/* Binds the tower (cfg->vision.has_vision) from src and keeps K (any set, exact or fast math:
 * the bits are K's). cfg is copied; src's tensors must outlive the tower (they are read in
 * place). */
int g4_vision_create(const g4_config *cfg, const g4_vision_source *src, const g4_kernels *K, g4_vision **out, g4_err *err);
void g4_vision_free(g4_vision *v);

int64_t g4_vision_max_patches(const g4_vision *v);
int g4_vision_patch_dim(const g4_vision *v);      /* 3 * patch^2 floats per patch */
int g4_vision_pooling(const g4_vision *v);        /* k: a soft token per k x k patches */
int64_t g4_vision_soft_dim(const g4_vision *v);   /* text hidden size: floats per soft token */
int64_t g4_vision_hidden(const g4_vision *v);     /* the tower's width (pooled rows) */
const g4_vision_weights *g4_vision_weights_of(const g4_vision *v);
/* Bytes g4_vision_encode allocates (and frees) for n patches on nth threads. */
size_t g4_vision_workspace_bytes(const g4_vision *v, int64_t n, int nth);

/* One image: pixels [n][patch_dim] in [0, 1] ((py, px, c) order inside a patch), pos [n][2]
 * (x = column, y = row) covering the ph x pw grid exactly once each (any row order), n = ph*pw,
 * ph and pw multiples of the pooling k, each at most the position table's size, n at most
 * g4_vision_max_patches. soft: [n / k^2][soft_dim], the pooled grid row-major. pooled (NULL or
 * [n / k^2][hidden]): the standardized pooled features, the projection's input (for tests).
 * Bad arguments are refused (G4_EINVAL) before any work; G4_ENOMEM if the workspace cannot be
 * had. Runs on the pool's threads; one call at a time per tower. */
int g4_vision_encode(g4_vision *v, g4_pool *pool, const float *pixels, const int32_t *pos, int ph, int pw, float *soft,
                     float *pooled, g4_err *err);

#endif
