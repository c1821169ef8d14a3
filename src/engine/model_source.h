/* model_source.h — where a rank's weights come from: a Hugging Face checkpoint folder (sliced
 * at load time, in place) or a g4tp artifact folder (already sliced per rank). The engine asks
 * for the config and for one rank's bound weights, and does not care which it is. The vision
 * tower, when the model has one, comes from the same folder (whole; rank 0's file of an artifact
 * folder), for the leader. */
#ifndef G4_ENGINE_MODEL_SOURCE_H
#define G4_ENGINE_MODEL_SOURCE_H

#include "gemma4/vision.h"
#include "gemma4/weights.h"
#include "model/checkpoint.h"
#include "model/config.h"

typedef struct g4_artifact g4_artifact;

typedef struct g4_model_source {
    int is_artifact;
    g4_config cfg;
    g4_checkpoint ck;        /* HF */
    g4_artifact *art;        /* artifact */
    int gen_eos[8];          /* generation_config.json eos_token_id, if present */
    int n_gen_eos;
} g4_model_source;

/* The TP degree an artifact folder was sharded for; 0 for a Hugging Face folder (any degree).
 * The engine uses it when no --tp is given. */
int g4_model_source_tp(const char *dir);
/* Artifacts: tp > 0 must equal the folder's degree (0 takes it); verify checks every tensor's
 * XXH3, not only the headers. HF folders ignore both.
 * only_rank >= 0: this process needs only that rank's data (MPI); -1: all ranks (threads). */
int g4_model_source_open(g4_model_source *s, const char *dir, int only_rank, int tp, int verify, g4_err *err);
/* The dtype the row-parallel weights (o_proj, down_proj) are multiplied in when `convert` (a
 * g4_dtype, or -1 for none) is asked: what g4_tp_plan_make needs to cut the reduction slices. */
int g4_model_source_wdtype(const g4_model_source *s, g4_dtype_req req);
/* The bytes one rank's weights take in memory once bound with dtype (its slice of every tensor
 * in the dtype it is held in; 1-D tensors as fp32): what the default KV budget leaves room for. */
uint64_t g4_model_source_rank_bytes(const g4_model_source *s, const g4_tp_plan *plan, g4_dtype_req dtype);
/* Binds one rank's weights; refuses weights whose blocks do not fit the plan's slices. */
int g4_model_source_bind(g4_model_source *s, const g4_tp_plan *plan, g4_dtype_req dtype, int copy, g4_rank_weights *w, g4_err *err);
/* 1 when this process can build the vision tower: the config has a vision_config and the
 * checkpoint holds the tower (an artifact folder: rank 0's file holds it and was opened here). */
int g4_model_source_has_vision(const g4_model_source *s);
/* has_vision 0: why, one line for the load log ("" when there is a tower). */
const char *g4_model_source_vision_note(const g4_model_source *s);
/* The tower's tensors, read in place (the source must outlive what is built from them). */
int g4_model_source_vision(g4_model_source *s, g4_vision_source *out, g4_err *err);
/* g4_vision_create on this source; a clear G4_EUNSUPPORTED (with the note) without a tower. */
int g4_model_source_vision_create(g4_model_source *s, const g4_kernels *K, g4_vision **out, g4_err *err);
void g4_model_source_close(g4_model_source *s);

#endif
