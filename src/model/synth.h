/* synth.h — random-weight Gemma-4 checkpoints shaped like a given config.json, for tests and
 * benchmarks of the load and shard paths at real widths without downloading weights.
 *
 * The checkpoint has the real tensor names and shapes (model/tensors.h), BF16 data that depends
 * only on the seed and the tensor name, the multimodal prefix "model.language_model." when the
 * config is multimodal (no vision tower) and "model." otherwise, split into safetensors files of
 * at most shard_bytes (a tensor larger than that gets a file of its own) with
 * model.safetensors.index.json. Written through a bounded buffer: memory does not grow with the
 * model. */
#ifndef G4_MODEL_SYNTH_H
#define G4_MODEL_SYNTH_H

#include <stdint.h>

#include "base/error.h"

typedef struct g4_synth_opts {
    const char *like;        /* a config.json */
    int layers;              /* > 0: cut to this many layers (layer_types cut, last forced full) */
    uint64_t seed;
    const char *out_dir;     /* created if missing */
    uint64_t shard_bytes;    /* 0: 2 GB */
} g4_synth_opts;

int g4_synth_write(const g4_synth_opts *o, g4_err *err);

#endif
