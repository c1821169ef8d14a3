/* textgen.h — text in, text out for one sequence: the model's chat template and tokenizer on
 * top of an engine, a sampled generation loop with stop ids and stop strings, and streaming of
 * the decoded text (never a partial UTF-8 character). Used by `g4tp run` and `g4tp chat`; the
 * server's scheduler uses the same pieces for many sequences at once. The engine's prefix cache
 * outlives each call: a chat's next turn computes only what its prompt adds to the last one. */
#ifndef G4_ENGINE_TEXTGEN_H
#define G4_ENGINE_TEXTGEN_H

#include <jansson.h>

#include "g4.h"
#include "engine/gen_config.h"
#include "engine/penalty.h"
#include "engine/sampler.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

typedef struct g4_textgen {
    g4_engine *engine;
    g4_tokenizer *tok;
    g4_chat_template *tmpl;   /* NULL when the model has no chat_template.jinja */
    json_t *special;          /* *_token strings of tokenizer_config.json */
    g4_gen_config gen;        /* generation_config.json (stop ids, sampling defaults) */
} g4_textgen;

int g4_textgen_open(g4_engine *e, const char *model_dir, g4_textgen *tg, g4_err *err);
void g4_textgen_close(g4_textgen *tg);
/* Renders an OpenAI-style chat request with the model's template. */
int g4_textgen_render(const g4_textgen *tg, const json_t *request, char **text, size_t *len, g4_err *err);

/* An image of the prompt (docs/vision.md): its block of n_tok image tokens starts at position
 * pos of the expanded prompt (engine/images.h; the prompt holds the model's image token id
 * there). Either its preprocessed patches, encoded by the model's vision tower when the prefix
 * cache does not hold the block, or its soft tokens, given. Submitting copies what is needed. */
typedef struct g4_prompt_image {
    int64_t pos;
    int n_tok;
    uint64_t hash[2];         /* of its pixels: the image tokens' prefix-cache keys (g4_image_key) */
    const float *pixels;      /* [ph * pw][patch_dim], or NULL when soft is given */
    const int32_t *ppos;      /* [ph * pw][2]: (x = column, y = row) */
    int ph, pw, patch_dim;
    const float *soft;        /* NULL, or [n_tok][hidden_size] */
} g4_prompt_image;

typedef struct g4_gen_params {
    int64_t max_new_tokens;
    g4_sampling_params sampling;
    g4_penalty_params penalty;  /* logit_bias, min_tokens, repetition / frequency / presence (engine/penalty.h);
                               * zero: none; the request keeps its own copy of the bias list */
    const char *const *stop_strings;
    size_t n_stop_strings;
    int skip_special;         /* decode without special tokens (1) or keep markers for parsing (0) */
    int ignore_eos;           /* end-of-sequence ids do not end the generation (benchmarks) */
    const int32_t *stop_ids;  /* ids that also end it, included in the output (g4tp generate --stop-ids); */
    size_t n_stop_ids;        /* ... the request keeps its own copy */
    int speculative;          /* 0: the engine's drafter (if any); -1: none for this request; 1..G4_SPEC_MAX_K:
                               * at most that many drafts per round (docs/speculative.md) */
    struct g4_grammar *grammar; /* constrained decoding (grammar/grammar.h): what the output must be, or NULL;
                               * the request keeps its own reference (docs/structured-output.md) */
    const g4_prompt_image *images; /* the prompt's images, in position order */
    int n_images;
} g4_gen_params;

/* Called with each newly decoded piece of text; return non-zero to cancel. */
typedef int (*g4_text_cb)(void *user, const char *text, size_t len);

typedef struct g4_gen_result {
    int32_t *ids;             /* generated ids (the stop id included, if any) */
    size_t n_ids;
    char *text;               /* the decoded text, cut at a stop string */
    size_t text_len;
    const char *finish_reason;/* "stop", "length" or "cancelled" */
    size_t prompt_tokens;
    size_t cached_tokens;     /* prompt tokens the prefix cache gave (not computed again) */
    double ttft_ms, decode_tok_s;
} g4_gen_result;

int g4_textgen_generate(g4_textgen *tg, const int32_t *prompt, size_t n_prompt, const g4_gen_params *p,
                        g4_text_cb cb, void *user, g4_gen_result *res, g4_err *err);
void g4_gen_result_free(g4_gen_result *r);

#endif
