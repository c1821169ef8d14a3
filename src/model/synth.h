/* synth.h — random-weight Gemma-4 checkpoints shaped like a given config.json, for tests and
 * benchmarks of the load and shard paths at real widths without downloading weights.
 *
 * The checkpoint has the real tensor names and shapes (model/tensors.h), data that depends
 * only on the seed and the tensor name, the multimodal prefix "model.language_model." when the
 * config is multimodal and "model." otherwise (with `vision`, also the config's vision tower
 * under "model.vision_tower." / "model.embed_vision.", bf16, and processor_config.json with the
 * real image processor's keys; without it none: such a folder loads text-only), split into safetensors files of
 * at most shard_bytes (a tensor larger than that gets a file of its own) with
 * model.safetensors.index.json. Written through a bounded buffer: memory does not grow with the
 * model. The matrices are bf16, bf16 on the 4-bit grid, or packed W4A16 (model/compressed.h) with
 * the config's quantization_config; the embedding is always bf16. */
#ifndef G4_MODEL_SYNTH_H
#define G4_MODEL_SYNTH_H

#include <stdint.h>

#include "base/error.h"

/* What the matrices (all but the embedding) are written as. */
enum { G4_SYNTH_BF16 = 0,   /* bf16 ~ N(0, 0.02) */
       G4_SYNTH_Q4GRID,     /* bf16 on the Q4_0 grid (as google/gemma-4-31B-it-qat-q4_0-unquantized) */
       G4_SYNTH_W4A16 };    /* compressed-tensors pack-quantized int4 (as ...-qat-w4a16-ct) */

typedef struct g4_synth_opts {
    const char *like;        /* a config.json */
    int layers;              /* > 0: cut to this many layers (layer_types cut, last forced full) */
    uint64_t seed;
    const char *out_dir;     /* created if missing */
    uint64_t shard_bytes;    /* 0: 2 GB */
    int format;              /* G4_SYNTH_* */
    int vision;              /* also write the vision tower (the config must have a vision_config) */
} g4_synth_opts;

int g4_synth_write(const g4_synth_opts *o, g4_err *err);

#endif
