/* assistant.h — the Gemma-4 MTP assistant (Hugging Face Gemma4AssistantForCausalLM, e.g.
 * google/gemma-4-31B-it-assistant), the speculative-decoding drafter, on one rank.
 *
 * A small Gemma-4 decoder (4 layers on the 31B's) whose attention has only query projections:
 * every layer reads the TARGET's keys and values — its sliding layers those of the target's last
 * sliding layer, its full layer those of the target's last full layer — straight from this rank's
 * paged KV pool (kvpool.h), never a copy. One draft step at query position q (the target has
 * computed positions 0..q-1; the token at q is its last sampled one):
 *   x = [E_target[tok] * sqrt(H_target), h]   h: the target's final-normed hidden at q-1, or
 *   z = pre_projection x                         the previous step's post_projection output
 *   z = layer_i(z), i = 0..3 (query at q; full layers see rows 0..q-1, sliding layers the LAST
 *       W+1 rows q-W-1..q-1 — one more than the target keeps for itself)
 *   hf = norm(z); logits = hf E_assistant^T (centroid-masked with use_ordered_embeddings; no
 *       softcap); next token = argmax (ties: lowest id); h' = post_projection hf
 * and k steps chain at the same q (shared/assistant/ASSISTANT.md has the sources).
 *
 * Tensor parallelism: every rank maps the whole (small) checkpoint; each matrix is cut by output
 * rows between the ranks and the pieces are gathered, so no dot product is ever split and the
 * drafts are the same bits at every TP degree. The attention heads go where the target's KV
 * heads are (a rank computes the query heads of the KV heads it holds). The input embedding row
 * and the head's vocabulary rows are cut like the target's. docs/speculative.md argues the
 * choice. */
#ifndef G4_GEMMA4_ASSISTANT_H
#define G4_GEMMA4_ASSISTANT_H

#include <stddef.h>
#include <stdint.h>

#include "base/threadpool.h"
#include "gemma4/kvpool.h"
#include "gemma4/weights.h"
#include "kernels/kernels.h"
#include "model/config.h"
#include "tp/comm.h"
#include "model/split.h"

/* Test-only deliberate mistakes (after forward.h's G4_MUT_*), to show the goldens catch them. */
enum { G4_MUT_ASST_WINDOW_W = 20, /* sliding layers see W rows instead of W+1 */
       G4_MUT_ASST_QPOS,          /* query RoPE at q-1 instead of q */
       G4_MUT_ASST_SOFTCAP };     /* the target's final softcap applied to the drafts' logits */

typedef struct g4_asst g4_asst;

/* What the engine needs to know before loading (KV rows to keep, the checks of the pair). */
typedef struct g4_asst_info {
    int window;        /* the assistant's sliding_window W (its sliding layers read W+1 rows) */
    int n_layers;
    int64_t hidden;    /* the assistant's hidden size */
    int ordered;       /* use_ordered_embeddings */
    size_t bytes;      /* bytes of its matrices */
} g4_asst_info;

/* Everything of the target the drafter reads, on this rank. */
typedef struct g4_asst_target {
    const g4_config *cfg;
    const g4_tp_plan *plan;        /* this rank's target plan (KV heads, vocab rows) */
    const g4_rank_weights *w;      /* the target's embedding rows (the input lookup) */
    const g4_kvstore *kv;          /* this rank's KV pool */
    const g4_kernels *K;
    g4_pool *pool;
    g4_comm *comm;
    size_t comm_floats;            /* the largest all-reduce the comm takes */
    int max_seqs;                  /* sequences per draft call */
    int mutation;
} g4_asst_target;

/* Reads DIR's config.json and checks it against the target (backbone size, vocabulary, the KV
 * geometry of the layers it reads) without touching the weights. */
int g4_asst_probe(const char *dir, const g4_config *target, g4_asst_info *info, g4_err *err);
/* Opens DIR (config.json, model.safetensors or an index), validates every tensor's name, dtype
 * and shape, binds this rank's views and allocates the workspace. */
int g4_asst_open(const char *dir, const g4_asst_target *t, g4_asst **out, g4_err *err);
void g4_asst_free(g4_asst *a);
const g4_asst_info *g4_asst_get_info(const g4_asst *a);

/* k draft steps for n sequences at once (collective: every rank calls it with the same inputs).
 * pos[i]: the query position q (the sequence's length), tok[i]: its token at q, hidden:
 * [n][H_target] the target's final-normed hidden at q-1. ids [n][k] (every rank): the drafts;
 * -1 for a sequence whose KV rows are not all in the pool (nothing drafted). want_logits (the same
 * on every rank): each step's logits [n][k][vocab] into logits on rank 0 (tests, inspection). */
int g4_asst_draft(g4_asst *a, int n, int k, const int32_t *seq, const int32_t *pos, const int32_t *tok, const float *hidden,
                  int32_t *ids, int want_logits, float *logits, g4_err *err);

#endif
