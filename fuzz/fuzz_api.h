/* fuzz_api.h — what the Anthropic and Responses harnesses (fuzz_anthropic.c, fuzz_responses.c)
 * check of a request their parser accepted or refused, as the server goes on with it: a refusal
 * is a 4xx/5xx with a message; an accepted request has a conversation the demo chat template
 * renders into valid UTF-8 that encodes, tools in the OpenAI shape the grammar compiler takes
 * (a named tool among them, none out of the prompt), and its output constraint either compiles
 * within G4_GRAMMAR_MAX_STATES or is a 4xx naming a field. Header-only, one per harness. */
#ifndef G4_FUZZ_API_H
#define G4_FUZZ_API_H

#include <jansson.h>

#include "grammar/grammar.h"
#include "fuzz_tok.h"
#include "server/openai.h"
#include "text/chat_template.h"

static g4_chat_template *fuzz_tmpl;
static g4_tokenizer *fuzz_tokz;

static inline void fuzz_api_init(void) {
    size_t len;
    g4_err err = {0};
    char *src = fuzz_repo_file("models/demo/chat_template.jinja", &len);
    if (g4_chat_template_load(src, len, &fuzz_tmpl, &err)) { fprintf(stderr, "demo template: %s\n", err.msg); abort(); }
    free(src);
    char *json = fuzz_repo_file("models/demo/tokenizer.json", &len);
    if (g4_tokenizer_load_json(json, len, &fuzz_tokz, &err)) { fprintf(stderr, "demo tokenizer: %s\n", err.msg); abort(); }
    free(json);
}

static inline void fuzz_api_refusal(const g4_api_err *ae, int rc) {
    FUZZ_CHECK(rc == ae->status, "returned %d, status %d", rc, ae->status);
    FUZZ_CHECK(ae->status >= 400 && ae->status < 600 && ae->message[0] && ae->type, "refusal %d \"%s\"", ae->status, ae->message);
}

static inline int fuzz_api_has_tool(const json_t *tools, const char *name) {
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        json_t *n = json_object_get(json_object_get(t, "function"), "name");
        if (json_is_string(n) && !strcmp(json_string_value(n), name)) return 1;
    }
    return 0;
}

/* The checks of an accepted request (r->chat set by both translations). */
static inline void fuzz_api_accepted(g4_api_request *r) {
    FUZZ_CHECK(r->chat && json_is_array(json_object_get(r->chat, "messages")), "no conversation");
    FUZZ_CHECK(r->n == 1 && r->parse_output, "n %d parse_output %d", r->n, r->parse_output);
    FUZZ_CHECK(r->tool_mode >= G4_TOOLS_AUTO && r->tool_mode <= G4_TOOLS_NAMED, "tool_mode %d", r->tool_mode);
    FUZZ_CHECK(r->out_format >= G4_FMT_TEXT && r->out_format <= G4_FMT_JSON_SCHEMA, "out_format %d", r->out_format);
    FUZZ_CHECK((r->out_format == G4_FMT_JSON_SCHEMA) == (r->out_schema != NULL), "a schema iff json_schema");
    FUZZ_CHECK(!r->out_schema || json_is_object(r->out_schema) || json_is_boolean(r->out_schema), "schema type");
    FUZZ_CHECK(!r->tools || (json_is_array(r->tools) && json_array_size(r->tools)), "tools kept as a non-empty list");
    if (r->tool_mode == G4_TOOLS_REQUIRED || r->tool_mode == G4_TOOLS_NAMED) FUZZ_CHECK(r->tools, "required / named without tools");
    if (r->tool_mode == G4_TOOLS_NAMED) FUZZ_CHECK(r->tool_name && fuzz_api_has_tool(r->tools, r->tool_name), "the named tool is not among the tools");
    else FUZZ_CHECK(!r->tool_name, "a tool name without tool_choice naming one");
    size_t i;
    json_t *t;
    json_array_foreach(r->tools, i, t) {
        json_t *fn = json_object_get(t, "function");
        FUZZ_CHECK(json_is_string(json_object_get(t, "type")) && json_is_string(json_object_get(fn, "name")), "tools[%zu] not OpenAI-shaped", i);
        json_t *p = json_object_get(fn, "parameters");
        FUZZ_CHECK(!p || json_is_object(p), "tools[%zu].function.parameters", i);
    }
    json_t *ct = json_object_get(r->chat, "tools");
    if (r->tool_mode == G4_TOOLS_NONE || !r->tools) FUZZ_CHECK(!ct, "tools in the prompt with tool_choice none / no tools");
    else FUZZ_CHECK(json_equal(ct, r->tools), "the prompt's tools are not the grammar's");
    g4_err err = {0};
    char *text = NULL;
    size_t len = 0;
    int rc = g4_chat_template_render(fuzz_tmpl, r->chat, NULL, &text, &len, &err);
    if (rc) FUZZ_CHECK_ERR(rc, err);
    else {
        FUZZ_CHECK(fuzz_utf8_ok(text, len), "the prompt is not valid UTF-8");
        size_t n = 0;
        int32_t *ids = fuzz_encode(fuzz_tokz, text, len, 0, &n);
        FUZZ_CHECK(ids != NULL, "a valid UTF-8 prompt did not encode");
        free(ids);
    }
    free(text);
    g4_grammar *g = NULL;
    g4_api_err ae;
    memset(&ae, 0, sizeof ae);
    rc = g4_api_constraint(r, 0, &g, &ae);
    if (rc) {
        fuzz_api_refusal(&ae, rc);
        FUZZ_CHECK(rc == 400 || rc == 500, "a constraint refused with %d", rc);
        FUZZ_CHECK(rc != 400 || ae.param[0], "a refused constraint names no field: %s", ae.message);
        FUZZ_CHECK(!g, "a grammar with an error");
    } else if (g) {
        FUZZ_CHECK(g4_grammar_n_states(g) > 0 && g4_grammar_n_states(g) <= G4_GRAMMAR_MAX_STATES, "grammar of %d states", g4_grammar_n_states(g));
        g4_grammar_release(g);
    }
}

/* A fixed answer (a thought, text, a call) parsed as the server parses one, for the renderers. */
static inline void fuzz_api_answer(g4_api_output *po) {
    static const char out[] = "<|channel>thought\nhm<channel|>Sure.<|tool_call>call:f{a:1}<tool_call|>";
    g4_err err = {0};
    FUZZ_CHECK(g4_api_parse_output(out, sizeof out - 1, 0, po, &err) == 0, "parse: %s", err.msg);
}

#endif
