/* synth_assistant.h — a random-weight Gemma-4 MTP assistant (Gemma4AssistantForCausalLM, the
 * layout of google/gemma-4-31B-it-assistant) for a given target config.json: config.json with
 * backbone_hidden_size = the target's hidden size and a text_config that copies the target's
 * attention geometry (heads, KV heads, head dims, window, RoPE, vocabulary), and one
 * model.safetensors with the assistant's tensors in bf16. For benchmarks and tests of the MTP
 * drafter at real widths (its drafts are random: its acceptance is near zero). */
#ifndef G4_MODEL_SYNTH_ASSISTANT_H
#define G4_MODEL_SYNTH_ASSISTANT_H

#include <stdint.h>

#include "base/error.h"

typedef struct g4_synth_asst_opts {
    const char *like;        /* the TARGET's config.json */
    const char *out_dir;     /* created if missing */
    int64_t hidden;          /* 0: 1024 (the 31B assistant's) */
    int64_t intermediate;    /* 0: 8 x hidden (8192 on the 31B assistant) */
    int layers;              /* 0: 4 (sliding, sliding, sliding, full) */
    uint64_t seed;
} g4_synth_asst_opts;

int g4_synth_assistant_write(const g4_synth_asst_opts *o, g4_err *err);

#endif
