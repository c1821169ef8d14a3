/* gen_config.h — a checkpoint's generation defaults (generation_config.json).
 *
 * Fields read (anything else is ignored; null counts as absent):
 *   eos_token_id      integer or list of integers (>= 0)      stop ids
 *   bos_token_id, pad_token_id  integer >= 0
 *   do_sample         boolean                                 false -> greedy
 *   temperature       number >= 0 (and a finite float)
 *   top_k             integer >= 0 (0 = off)
 *   top_p             number in [0, 1]
 *   min_p             number in [0, 1]
 *   max_new_tokens, max_length  integer > 0
 * A wrong type or range is G4_EFORMAT naming the field. When the file is missing, the defaults
 * below apply and the stop ids (and bos/pad) come from config.json's eos_token_id (top level,
 * else text_config); a present file without eos_token_id also takes config.json's.
 * Defaults: do_sample false (greedy), temperature 1, top_k 0, top_p 1, min_p 0, no length
 * limits, ids -1. Note: HF's implicit top_k = 50 for an absent top_k is NOT applied. */
#ifndef G4_ENGINE_GEN_CONFIG_H
#define G4_ENGINE_GEN_CONFIG_H

#include <stdint.h>

#include "base/error.h"
#include "engine/sampler.h"

#define G4_GEN_MAX_EOS 16

typedef struct {
    int32_t eos_ids[G4_GEN_MAX_EOS];
    int n_eos;
    int32_t bos_token_id;   /* -1 when absent */
    int32_t pad_token_id;   /* -1 when absent */
    int do_sample;
    float temperature, top_p, min_p;
    int top_k;
    int64_t max_new_tokens; /* -1 when absent */
    int64_t max_length;     /* -1 when absent */
    int from_file;          /* 1 when generation_config.json was read */
} g4_gen_config;

void g4_gen_config_default(g4_gen_config *c);
/* Parses generation_config.json text on top of the defaults; `what` names it in messages. */
int g4_gen_config_parse(const char *json, size_t len, const char *what, g4_gen_config *c, g4_err *err);
/* Reads one file (G4_EIO when it cannot be read). */
int g4_gen_config_load_file(const char *path, g4_gen_config *c, g4_err *err);
/* The checkpoint directory: generation_config.json if present, config.json for missing stop
 * ids. G4_EIO when neither file exists, or when one is there but cannot be read (permission
 * denied, a directory, a symbolic-link loop or dangling link: never taken as absent);
 * G4_EFORMAT on bad content of either. */
int g4_gen_config_load_dir(const char *model_dir, g4_gen_config *c, g4_err *err);

/* The request defaults the checkpoint asks for: do_sample false (or temperature 0) gives
 * greedy params; otherwise temperature/top_k/top_p/min_p as configured. No seed. */
void g4_gen_config_sampling_defaults(const g4_gen_config *c, g4_sampling_params *p);
/* 1 when id is one of the stop ids. */
int g4_gen_config_is_eos(const g4_gen_config *c, int32_t id);

#endif
