/* checkpoint.h — a Hugging Face Gemma-4 checkpoint directory, opened and fully validated.
 *
 * config.json + model.safetensors, or shards listed in model.safetensors.index.json; every file
 * mapped read-only. Text tensors live under "model.language_model." (multimodal layout) or
 * "model." (Gemma4ForCausalLM); anything else is an error, except the encoders below.
 * Every tensor of the tensor table is bound, with its dtype (F32/BF16/F16) and shape checked; a
 * compressed-tensors W4A16 matrix (model/compressed.h) binds its weight_packed, weight_scale and
 * weight_shape, each checked against the config and the quantization_config.
 *
 * The vision tower ("model.vision_tower.", "model.embed_vision."): with a vision_config, every
 * tensor of the vision table (model/tensors.h) is bound and checked the same way, and a stray
 * tensor under those prefixes is an error. A checkpoint whose config has a vision_config but
 * that holds none of its tensors loads text-only (has_vision 0, vision_note says why: synthetic
 * or text-only exports); one that holds some but not all is refused (a broken tower). Without a
 * vision_config the tower's tensors are skipped, as the audio tower's always are. */
#ifndef G4_MODEL_CHECKPOINT_H
#define G4_MODEL_CHECKPOINT_H

#include "kernels/kernels.h"
#include "model/compressed.h"
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
    const g4_st_tensor **bound;     /* [n_specs] the checkpoint tensor of each spec (packed: weight_packed) */
    const g4_st_tensor **scales;    /* [n_specs] weight_scale of a packed matrix, else NULL */
    int n_packed;                   /* matrices stored as packed int4 */
    g4_ct_scheme scheme;            /* config.json's quantization_config */
    char prefix[32];                /* "model.language_model." or "model." */
    int n_skipped;                  /* encoder tensors ignored (audio; vision without a vision_config) */
    g4_tensor_spec *vspecs;         /* [n_vspecs] the vision table (the config has a vision_config) */
    int n_vspecs;
    const g4_st_tensor **vbound;    /* [n_vspecs] bound when has_vision */
    int has_vision;                 /* the whole tower is bound */
    char vision_note[192];          /* has_vision 0: why, for the log ("" otherwise) */
} g4_checkpoint;

int g4_checkpoint_open(const char *dir, g4_checkpoint *ck, g4_err *err);
void g4_checkpoint_close(g4_checkpoint *ck);
/* The dtype of a bound tensor: a kernel dtype (G4_DT_F32/BF16/F16) or G4_DT_CT_INT4 (packed). */
int g4_checkpoint_dtype(const g4_checkpoint *ck, int spec_index);
/* The rectangle [r0, r0+nr) x [c0, c0+nc) of a bound tensor as a view into the map (1-D
 * tensors: rows = length, cols = 1). Packed matrices need c0, nc multiples of 32. */
g4_mat g4_checkpoint_view(const g4_checkpoint *ck, int spec_index, int64_t r0, int64_t nr, int64_t c0, int64_t nc);
/* Vision table entry i (has_vision) as a whole-tensor view (g4_tensor_spec_rows_cols). */
g4_mat g4_checkpoint_vision_view(const g4_checkpoint *ck, int i);

#endif
