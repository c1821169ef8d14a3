/* kvcache.h — one rank's KV cache for one sequence: only this rank's KV heads, fp32.
 *
 * Full layers keep every position up to the sequence's reserved length (its cap); sliding
 * layers keep a ring of `ring` positions, ring >= W + max_batch - 1, so writing a whole batch of
 * keys before attending never overwrites a key that a query of the same batch still needs.
 * Positions are absolute; position p lives at index p (full) or p % ring (sliding). The memory
 * is reserved when the sequence opens — never in the decode loop. */
#ifndef G4_GEMMA4_KVCACHE_H
#define G4_GEMMA4_KVCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "model/config.h"
#include "tp/split.h"

typedef struct g4_kv_seq {
    int64_t cap;      /* positions reserved: 0 .. cap-1 */
    int64_t ring;     /* ring length of sliding layers */
    float **k, **v;   /* [n_layers] -> [slots][n_kv_local][head_dim] */
    size_t bytes;
    int open;
} g4_kv_seq;

/* Bytes one sequence of `cap` positions needs on this rank. */
size_t g4_kv_seq_bytes(const g4_config *cfg, const g4_tp_plan *plan, int64_t cap, int max_batch);
int g4_kv_seq_open(g4_kv_seq *s, const g4_config *cfg, const g4_tp_plan *plan, int64_t cap, int max_batch, g4_err *err);
void g4_kv_seq_close(g4_kv_seq *s, const g4_config *cfg);
/* Slot index of position p on layer l. */
static inline int64_t g4_kv_slot(const g4_kv_seq *s, const g4_layer_cfg *lc, int64_t p) {
    return lc->full ? p : p % s->ring;
}

#endif
