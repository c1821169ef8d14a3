/* chat_template.c — glue between chat requests and the Jinja engine: builds the variables HF's
 * apply_chat_template passes to a chat template (special tokens, messages, tools, documents,
 * add_generation_prompt, then the request's other keys as **kwargs) and renders. Knows nothing
 * about Jinja internals (jinja_engine.h only) or about tokenization. */
#include <stdlib.h>
#include <string.h>

#include "base/mapfile.h"
#include "text/chat_template.h"
#include "text/jinja_engine.h"

struct g4_chat_template {
    g4_jinja *j;
};

int g4_chat_template_load(const char *src, size_t len, g4_chat_template **out, g4_err *err)
{
    if (!out) return g4_err_set(err, G4_EINVAL, "chat template: out is NULL");
    *out = NULL;
    g4_chat_template *t = calloc(1, sizeof *t);
    if (!t) return g4_err_set(err, G4_ENOMEM, "chat template: out of memory");
    int rc = g4_jinja_compile(src, len, &t->j, err);
    if (rc) {
        free(t);
        if (err) g4_err_prefix(err, "chat template: ");
        return rc;
    }
    *out = t;
    return G4_OK;
}

void g4_chat_template_free(g4_chat_template *t)
{
    if (!t) return;
    g4_jinja_free(t->j);
    free(t);
}

int g4_chat_template_render(const g4_chat_template *t, const json_t *request, const json_t *special,
                            char **out, size_t *out_len, g4_err *err)
{
    return g4_chat_template_render_ex(t, request, special, NULL, NULL, out, out_len, err);
}

int g4_chat_template_render_ex(const g4_chat_template *t, const json_t *request, const json_t *special,
                               const g4_jinja_limits *lim, g4_jinja_stats *stats, char **out, size_t *out_len,
                               g4_err *err)
{
    if (stats) memset(stats, 0, sizeof *stats);
    if (!out) return g4_err_set(err, G4_EINVAL, "chat template: out is NULL");
    *out = NULL;
    if (out_len) *out_len = 0;
    if (!t) return g4_err_set(err, G4_EINVAL, "chat template: template is NULL");
    if (!json_is_object(request)) return g4_err_set(err, G4_EINVAL, "chat request must be a JSON object");
    json_t *msgs = json_object_get(request, "messages");
    if (!json_is_array(msgs)) return g4_err_set(err, G4_EINVAL, "chat request: \"messages\" must be an array");
    json_t *tools = json_object_get(request, "tools");
    if (tools && !json_is_array(tools) && !json_is_null(tools))
        return g4_err_set(err, G4_EINVAL, "chat request: \"tools\" must be an array");
    for (size_t i = 0; tools && json_is_array(tools) && i < json_array_size(tools); i++)
        if (!json_is_object(json_array_get(tools, i)))
            return g4_err_set(err, G4_EINVAL, "chat request: tools[%zu] must be an object (HF accepts JSON schemas or functions)", i);
    if (special && !json_is_object(special)) return g4_err_set(err, G4_EINVAL, "special tokens must be a JSON object");

    json_t *vars = json_object();
    if (!vars) return g4_err_set(err, G4_ENOMEM, "chat template: out of memory");
    /* template_kwargs = {**special_tokens_map, **kwargs}; render(messages=, tools=, documents=,
     * add_generation_prompt=, **template_kwargs) */
    if (special) {
        json_object_update(vars, (json_t *)special);
    } else {
        json_object_set_new(vars, "bos_token", json_string("<bos>"));
        json_object_set_new(vars, "eos_token", json_string("<eos>"));
    }
    json_object_set(vars, "messages", msgs);
    json_object_set_new(vars, "tools", tools ? json_incref(tools) : json_null());
    json_object_set_new(vars, "documents", json_null());
    json_object_set_new(vars, "add_generation_prompt", json_false());
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)request, k, v) {
        if (!strcmp(k, "messages") || !strcmp(k, "tools")) continue;
        json_object_set(vars, k, v);
    }
    int rc = g4_jinja_render_ex(t->j, vars, lim, stats, out, out_len, err);
    json_decref(vars);
    if (rc && err) g4_err_prefix(err, "chat template: ");
    return rc;
}

int g4_chat_template_special_tokens(const char *model_dir, json_t **out, g4_err *err) {
    *out = json_object();
    if (!*out) return g4_err_set(err, G4_ENOMEM, "out of memory");
    size_t dl = strlen(model_dir);
    char *p = malloc(dl + 32);
    if (!p) return g4_err_set(err, G4_ENOMEM, "out of memory");
    snprintf(p, dl + 32, "%s/tokenizer_config.json", model_dir);
    /* no tokenizer_config.json: the template's defaults; one that cannot be read is an error
     * (rendering without its bos_token would silently change every prompt) */
    int present, rc = g4_optional_file(p, &present, err);
    if (rc || !present) { free(p); return rc; }
    /* INT_AS_REAL: HF writes model_max_length = 1e30 as an integer literal jansson cannot hold */
    json_error_t je;
    json_t *tc = json_load_file(p, JSON_DECODE_INT_AS_REAL, &je);
    if (!tc) {
        rc = g4_err_set(err, G4_EFORMAT, "%s: malformed JSON at line %d: %s", p, je.line, je.text);
        free(p);
        return rc;
    }
    free(p);
    const char *key;
    json_t *v;
    if (json_is_object(tc))
        json_object_foreach(tc, key, v) {
            size_t kl = strlen(key);
            if (kl > 6 && strcmp(key + kl - 6, "_token") == 0 && json_is_string(v)) json_object_set(*out, key, v);
        }
    json_decref(tc);
    return G4_OK;
}
