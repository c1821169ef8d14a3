/* chat_template.h — renders a model's chat template (chat_template.jinja) for an OpenAI-style
 * chat request, byte-identical to Hugging Face's apply_chat_template (Jinja2 sandbox with
 * trim_blocks/lstrip_blocks, loopcontrols, raise_exception, strftime_now, HF's tojson).
 * See docs/chat-template.md for the implemented Jinja subset and how parity is checked. */
#ifndef G4_TEXT_CHAT_TEMPLATE_H
#define G4_TEXT_CHAT_TEMPLATE_H

#include <jansson.h>
#include <stddef.h>

#include "base/error.h"
#include "text/jinja_engine.h"

typedef struct g4_chat_template g4_chat_template;

/* Compiles the template. G4_EFORMAT: syntax error; G4_EUNSUPPORTED: a construct the engine does
 * not implement (message names it and its line). */
int g4_chat_template_load(const char *src, size_t len, g4_chat_template **out, g4_err *err);
void g4_chat_template_free(g4_chat_template *t);

/* request: a JSON object in the OpenAI chat shape: {"messages": [...], "tools"?: [...],
 * "add_generation_prompt"?: bool, "enable_thinking"?: bool, plus any other keys, which are
 * passed to the template as variables like HF's **kwargs}. special: {"bos_token": "<bos>",
 * "eos_token": "<eos>", ...} from tokenizer_config.json (may be NULL: then bos_token="<bos>",
 * eos_token="<eos>"); request keys override special ones. Like HF, `tools` is None when absent,
 * `documents` is None, add_generation_prompt defaults to false. *out is malloc'd,
 * NUL-terminated, *out_len bytes. G4_ETEMPLATE: the template raised (raise_exception, a type
 * error, an undefined value used); G4_EINVAL: the request is not an object / has no messages.
 * Renders under the engine's default limits (see g4_chat_template_render_ex). */
int g4_chat_template_render(const g4_chat_template *t, const json_t *request, const json_t *special,
                            char **out, size_t *out_len, g4_err *err);

/* The same under explicit bounds (lim may be NULL: G4_JINJA_DEFAULT_*), reporting the steps and
 * memory used in *stats (may be NULL). Past max_memory/max_output/max_steps: G4_ENOMEM; cancel
 * set or timeout_ms passed: G4_ECANCELED; the shared memory budget full: G4_EBUSY. Each message
 * names the limit. See g4_jinja_limits in text/jinja_engine.h. */
int g4_chat_template_render_ex(const g4_chat_template *t, const json_t *request, const json_t *special,
                               const g4_jinja_limits *lim, g4_jinja_stats *stats, char **out, size_t *out_len,
                               g4_err *err);

/* The *_token strings of MODEL_DIR/tokenizer_config.json (bos_token, eos_token, …) as HF passes
 * them to the template; an empty object when the file is absent (G4_EIO when it is there but
 * cannot be read, G4_EFORMAT when malformed). *out is a new reference. */
int g4_chat_template_special_tokens(const char *model_dir, json_t **out, g4_err *err);

#endif
