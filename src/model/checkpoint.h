/* checkpoint.h — a Hugging Face Gemma-4 checkpoint directory, opened and fully validated.
 *
 * config.json + model.safetensors, or shards listed in model.safetensors.index.json; every file
 * mapped read-only. Text tensors live under "model.language_model." (multimodal layout) or
 * "model." (Gemma4ForCausalLM); vision/audio tensors are skipped; anything else is an error.
 * Every tensor of the tensor table is bound, with its dtype (F32/BF16/F16) and shape checked. */
#ifndef G4_MODEL_CHECKPOINT_H
#define G4_MODEL_CHECKPOINT_H

#include "model/config.h"
#include "model/safetensors.h"
#include "model/tensors.h"

typedef struct g4_checkpoint {
    char *dir;
    g4_config cfg;
    g4_st_file *files;
    int n_files;
    g4_tensor_spec *specs;          /* [n_specs] the tensor table */
    int n_specs;
    const g4_st_tensor **bound;     /* [n_specs] the checkpoint tensor of each spec */
    char prefix[32];                /* "model.language_model." or "model." */
    int n_skipped;                  /* vision/audio tensors ignored */
} g4_checkpoint;

int g4_checkpoint_open(const char *dir, g4_checkpoint *ck, g4_err *err);
void g4_checkpoint_close(g4_checkpoint *ck);
/* The dtype of a bound tensor as a kernel dtype (G4_DT_F32/BF16/F16). */
int g4_checkpoint_dtype(const g4_checkpoint *ck, int spec_index);

#endif
