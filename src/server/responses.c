/* responses.c — OpenAI Responses bodies to and from the one internal request and result (see
 * responses.h). Input items become OpenAI-style chat messages (instructions -> a system
 * message, message items -> turns, function_call -> an assistant tool call, function_call_output
 * -> a tool message, reasoning -> the next assistant turn's reasoning_content), checked by
 * g4_api_messages; the parsed output becomes reasoning, message and function_call items.
 * Knows JSON and the output parser's result; nothing about HTTP or tokens. */
#include "server/responses.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"

#define BAD(ae, param, ...) g4_api_err_status(ae, G4_EINVAL, param, __VA_ARGS__)
#define UNSUPPORTED(ae, param, ...) g4_api_err_status(ae, G4_EUNSUPPORTED, param, __VA_ARGS__)

/* ---- requests ------------------------------------------------------------------------------- */

static const char *str_of(const json_t *o, const char *k) {
    json_t *v = json_is_object(o) ? json_object_get(o, k) : NULL;
    return json_is_string(v) ? json_string_value(v) : NULL;
}

/* Text of a string or of a list of parts of the given types (text in "text", or "refusal"). */
/* A user turn with input_image parts: OpenAI chat parts (text, image_url) in order. */
static int image_parts(const json_t *c, const char *where, json_t **out, g4_api_err *ae) {
    json_t *parts = json_array();
    size_t k;
    json_t *p;
    json_array_foreach(c, k, p) {
        const char *t = str_of(p, "type");
        if (t && !strcmp(t, "input_text") && json_is_string(json_object_get(p, "text"))) {
            json_array_append_new(parts, json_pack("{s:s,s:O}", "type", "text", "text", json_object_get(p, "text")));
        } else if (t && !strcmp(t, "input_image")) {
            json_t *u = json_object_get(p, "image_url");
            if (json_object_get(p, "file_id") && !u) {
                json_decref(parts);
                return UNSUPPORTED(ae, where, "%s[%zu]: images by file_id are not supported (give image_url: a data URL or an http(s) URL)", where, k);
            }
            if (!json_is_string(u)) { json_decref(parts); return BAD(ae, where, "%s[%zu].image_url must be a string", where, k); }
            json_array_append_new(parts, json_pack("{s:s,s:{s:O}}", "type", "image_url", "image_url", "url", u));
        } else {
            json_decref(parts);
            return BAD(ae, where, "%s[%zu] must be an input_text or input_image part", where, k);
        }
    }
    *out = parts;
    return 0;
}

static int parts_text(const json_t *c, const char *where, int assistant, json_t **out, g4_api_err *ae) {
    if (json_is_string(c)) { *out = json_incref((json_t *)c); return 0; }
    if (!json_is_array(c)) return BAD(ae, where, "%s must be a string or a list of content parts", where);
    if (!assistant) {
        size_t k;
        json_t *p;
        json_array_foreach(c, k, p) if (str_of(p, "type") && !strcmp(str_of(p, "type"), "input_image")) return image_parts(c, where, out, ae);
    }
    char *acc = NULL;
    size_t n = 0, k;
    json_t *p;
    json_array_foreach(c, k, p) {
        const char *t = str_of(p, "type");
        json_t *text = json_is_object(p) ? json_object_get(p, t && !strcmp(t, "refusal") ? "refusal" : "text") : NULL;
        int ok = t && (!strcmp(t, "input_text") || (assistant && (!strcmp(t, "output_text") || !strcmp(t, "refusal"))));
        if (!t || !ok) {
            free(acc);
            if (t && (!strncmp(t, "input_", 6) || !strcmp(t, "output_text") || !strcmp(t, "refusal")))
                return UNSUPPORTED(ae, where, "%s[%zu]: content parts of type \"%s\" are not supported here", where, k, t);
            return BAD(ae, where, "%s[%zu] must be a content part with a known 'type'", where, k);
        }
        if (!json_is_string(text)) { free(acc); return BAD(ae, where, "%s[%zu] needs its text as a string", where, k); }
        size_t l = json_string_length(text);
        char *b = realloc(acc, n + l + 1);
        if (!b) { free(acc); return g4_api_err_status(ae, G4_ENOMEM, NULL, "out of memory"); }
        acc = b;
        memcpy(acc + n, json_string_value(text), l);
        n += l;
    }
    *out = json_stringn(acc ? acc : "", n);
    free(acc);
    return 0;
}

/* The assistant message function calls and reasoning attach to: the last message when it is an
 * assistant turn without tool results after it, else a new one. */
static json_t *assistant_tail(json_t *conv) {
    json_t *last = json_array_get(conv, json_array_size(conv) - 1);
    if (last && !strcmp(str_of(last, "role"), "assistant")) return last;
    json_t *m = json_pack("{s:s,s:n}", "role", "assistant", "content");
    json_array_append_new(conv, m);
    return m;
}

static int convert_item(const json_t *it, size_t i, json_t *conv, json_t **reasoning, g4_api_err *ae) {
    char at[64];
    snprintf(at, sizeof at, "input[%zu]", i);
    if (!json_is_object(it)) return BAD(ae, at, "%s must be an object", at);
    const char *type = str_of(it, "type");
    json_t *tv = json_object_get(it, "type");
    if (tv && !json_is_string(tv)) return BAD(ae, at, "%s.type must be a string", at);
    if (!type && json_object_get(it, "role")) type = "message";
    if (!type) return BAD(ae, at, "%s needs a 'type' (or a 'role' for a message)", at);
    char where[96];
    if (!strcmp(type, "message")) {
        const char *role = str_of(it, "role");
        if (!role || (strcmp(role, "user") && strcmp(role, "assistant") && strcmp(role, "system") && strcmp(role, "developer")))
            return BAD(ae, at, "%s.role must be one of user, assistant, system, developer", at);
        snprintf(where, sizeof where, "%s.content", at);
        json_t *text = NULL;
        int rc = parts_text(json_object_get(it, "content"), where, !strcmp(role, "assistant"), &text, ae);
        if (rc) return rc;
        json_t *m = json_pack("{s:s,s:o}", "role", role, "content", text);
        if (*reasoning && !strcmp(role, "assistant")) { json_object_set_new(m, "reasoning_content", *reasoning); *reasoning = NULL; }
        json_array_append_new(conv, m);
        return 0;
    }
    if (!strcmp(type, "function_call")) {
        const char *id = str_of(it, "call_id"), *name = str_of(it, "name"), *args = str_of(it, "arguments");
        if (!id || !name || !args) return BAD(ae, at, "%s needs string 'call_id', 'name' and 'arguments'", at);
        json_t *m = assistant_tail(conv), *calls = json_object_get(m, "tool_calls");
        if (!calls) json_object_set_new(m, "tool_calls", calls = json_array());
        json_array_append_new(calls, json_pack("{s:s,s:s,s:{s:s,s:s}}", "id", id, "type", "function", "function", "name", name, "arguments", args));
        if (*reasoning) { json_object_set_new(m, "reasoning_content", *reasoning); *reasoning = NULL; }
        return 0;
    }
    if (!strcmp(type, "function_call_output")) {
        const char *id = str_of(it, "call_id");
        if (!id) return BAD(ae, at, "%s needs a string 'call_id'", at);
        snprintf(where, sizeof where, "%s.output", at);
        json_t *out = NULL;
        int rc = parts_text(json_object_get(it, "output"), where, 0, &out, ae);
        if (rc) return rc;
        json_array_append_new(conv, json_pack("{s:s,s:s,s:o}", "role", "tool", "tool_call_id", id, "content", out));
        return 0;
    }
    if (!strcmp(type, "reasoning")) { /* its text (content, else summary) goes with the next assistant turn */
        json_t *parts = json_object_get(it, "content");
        if (!json_is_array(parts) || !json_array_size(parts)) parts = json_object_get(it, "summary");
        if (parts && !json_is_array(parts)) return BAD(ae, at, "%s.summary and .content must be lists", at);
        size_t k;
        json_t *p;
        json_array_foreach(parts, k, p) {
            const char *t = str_of(p, "text");
            if (!t) return BAD(ae, at, "%s: each reasoning part needs a string 'text'", at);
            if (!*reasoning) *reasoning = json_string(t);
            else {
                size_t a = json_string_length(*reasoning), b = strlen(t);
                char *s = malloc(a + 1 + b + 1);
                if (!s) return g4_api_err_status(ae, G4_ENOMEM, NULL, "out of memory");
                memcpy(s, json_string_value(*reasoning), a);
                s[a] = '\n';
                memcpy(s + a + 1, t, b);
                json_string_setn(*reasoning, s, a + 1 + b);
                free(s);
            }
        }
        return 0;
    }
    if (!strcmp(type, "item_reference"))
        return UNSUPPORTED(ae, at, "%s: item references need stored items; this server is stateless: send the items themselves", at);
    return UNSUPPORTED(ae, at, "%s: input items of type \"%s\" are not supported (message, function_call, function_call_output, reasoning are)", at, type);
}

/* tool_choice: "none", "auto", "required" or {"type": "function", "name": NAME}; required and
 * named are enforced by the grammar. */
static int parse_tool_choice(const json_t *o, int *mode, const char **name, g4_api_err *ae) {
    json_t *tc = json_object_get(o, "tool_choice");
    static const char want[] = "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"name\": ...}";
    if (!tc || json_is_null(tc)) return 0;
    if (json_is_string(tc)) {
        const char *t = json_string_value(tc);
        if (!strcmp(t, "none")) *mode = G4_TOOLS_NONE;
        else if (!strcmp(t, "required")) *mode = G4_TOOLS_REQUIRED;
        else if (!strcmp(t, "auto")) *mode = G4_TOOLS_AUTO;
        else return BAD(ae, "tool_choice", "%s (got \"%s\")", want, t);
        return 0;
    }
    const char *t = str_of(tc, "type"), *k;
    json_t *v;
    if (!t) return BAD(ae, "tool_choice", "%s", want);
    if (strcmp(t, "function"))
        return UNSUPPORTED(ae, "tool_choice", "'tool_choice' of type \"%s\" is not supported (\"function\" with a 'name' is)", t);
    json_object_foreach((json_t *)tc, k, v)
        if (strcmp(k, "type") && strcmp(k, "name")) return BAD(ae, "tool_choice", "unknown field '%s' in 'tool_choice'", k);
    if (!(*name = str_of(tc, "name"))) return BAD(ae, "tool_choice", "'tool_choice' of type \"function\" needs a string 'name'");
    *mode = G4_TOOLS_NAMED;
    return 0;
}

/* tools [{type:function, name, description?, parameters?, strict?}] -> chat tools, kept by the
 * request for the grammar; tool_choice none keeps them out of the prompt. */
static int convert_tools(const json_t *o, json_t *chat, g4_api_request *r, g4_api_err *ae) {
    json_t *tools = json_object_get(o, "tools");
    int mode = G4_TOOLS_AUTO, ptc = 1, rc;
    const char *name = NULL;
    if ((rc = parse_tool_choice(o, &mode, &name, ae))) return rc;
    if ((rc = g4_api_field_bool(o, "parallel_tool_calls", &ptc, ae))) return rc;
    if (tools && !json_is_null(tools) && !json_is_array(tools)) return BAD(ae, "tools", "'tools' must be a list");
    json_t *out = json_array();
    size_t i;
    json_t *t;
    if (json_is_array(tools)) json_array_foreach(tools, i, t) {
        char at[48];
        snprintf(at, sizeof at, "tools[%zu]", i);
        const char *type = str_of(t, "type");
        json_t *name_j = json_object_get(t, "name"), *desc = json_object_get(t, "description"), *params = json_object_get(t, "parameters"),
               *strict = json_object_get(t, "strict");
        rc = 0;
        if (!type) rc = BAD(ae, at, "%s must be an object with a 'type'", at);
        else if (strcmp(type, "function")) rc = UNSUPPORTED(ae, at, "%s: tools of type \"%s\" are not supported (function tools are)", at, type);
        else if (!g4_api_tool_name_ok(name_j))
            rc = BAD(ae, at, "%s.name must be a non-empty string without white space or any of {}[]<>,\"'() (Gemma's tool-call format cannot carry them)", at);
        else if (desc && !json_is_null(desc) && !json_is_string(desc)) rc = BAD(ae, at, "%s.description must be a string", at);
        else if (params && !json_is_null(params) && !json_is_object(params)) rc = BAD(ae, at, "%s.parameters must be an object", at);
        else if (strict && !json_is_null(strict) && !json_is_boolean(strict)) rc = BAD(ae, at, "%s.strict must be true or false", at);
        if (rc) { json_decref(out); return rc; }
        if (json_is_true(strict)) r->strict_tools = 1;
        json_t *fn = json_pack("{s:O}", "name", name_j);
        json_object_set_new(fn, "description", json_is_string(desc) ? json_incref(desc) : json_string(""));
        if (json_is_object(params)) json_object_set(fn, "parameters", params);
        json_array_append_new(out, json_pack("{s:s,s:o}", "type", "function", "function", fn));
    }
    rc = g4_api_set_tools(r, json_array_size(out) ? out : NULL, mode, name, ptc, ae);
    if (!rc && json_array_size(out) && mode != G4_TOOLS_NONE) json_object_set(chat, "tools", out);
    json_decref(out);
    return rc;
}

/* text {format: {type: text | json_object | json_schema (name, schema, strict?, description?)},
 * verbosity?}: the output format, enforced by the grammar. */
static int parse_text(const json_t *o, g4_api_request *r, g4_api_err *ae) {
    json_t *text = json_object_get(o, "text");
    if (!text || json_is_null(text)) return 0;
    if (!json_is_object(text)) return BAD(ae, "text", "'text' must be an object");
    const char *k;
    json_t *v, *f = json_object_get(text, "format");
    json_object_foreach(text, k, v) {
        if (!strcmp(k, "verbosity")) {
            const char *vb = json_is_string(v) ? json_string_value(v) : "";
            if (!json_is_null(v) && strcmp(vb, "low") && strcmp(vb, "medium") && strcmp(vb, "high"))
                return BAD(ae, "text.verbosity", "'text.verbosity' must be \"low\", \"medium\" or \"high\"");
        } else if (strcmp(k, "format")) {
            return BAD(ae, "text", "unknown field '%s' in 'text' (format, verbosity)%s", k,
                       !strcmp(k, "schema") || !strcmp(k, "json_schema") ? "; a schema goes in text.format.schema, with \"type\": \"json_schema\"" : "");
        }
    }
    if (!f || json_is_null(f)) return 0;
    const char *ft = str_of(f, "type");
    if (!ft) return BAD(ae, "text.format", "'text.format' must be an object with a 'type' (\"text\", \"json_object\" or \"json_schema\")");
    if (!strcmp(ft, "json_schema")) return g4_api_schema_format(f, "text.format", "type", r, ae);
    if (strcmp(ft, "text") && strcmp(ft, "json_object"))
        return BAD(ae, "text.format.type", "'text.format.type' must be \"text\", \"json_object\" or \"json_schema\" (got \"%s\")", ft);
    json_object_foreach(f, k, v)
        if (strcmp(k, "type")) return BAD(ae, "text.format", "unknown field '%s' in 'text.format' of type \"%s\"", k, ft);
    r->out_format = !strcmp(ft, "text") ? G4_FMT_TEXT : G4_FMT_JSON_OBJECT;
    return 0;
}

/* Fields that need stored state or features we do not implement: a 400 each, never ignored. */
static int refuse_stateful(const json_t *o, g4_api_err *ae) {
    int store = 0, bg = 0, rc;
    if ((rc = g4_api_field_bool(o, "store", &store, ae))) return rc;
    if (store) return UNSUPPORTED(ae, "store", "responses are not stored (this server is stateless): send \"store\": false");
    if ((rc = g4_api_field_bool(o, "background", &bg, ae))) return rc;
    if (bg) return UNSUPPORTED(ae, "background", "background responses need stored state; this server is stateless");
    json_t *v = json_object_get(o, "previous_response_id");
    if (v && !json_is_null(v))
        return UNSUPPORTED(ae, "previous_response_id",
                           "'previous_response_id' needs stored responses, and this server is stateless: send the whole conversation in 'input'");
    const char *refused[] = {"conversation", "prompt", "max_tool_calls"};
    for (int i = 0; i < 3; i++)
        if ((v = json_object_get(o, refused[i])) && !json_is_null(v)) return UNSUPPORTED(ae, refused[i], "'%s' is not supported", refused[i]);
    return 0;
}

/* reasoning {effort, summary}: effort other than none / minimal turns thinking on. */
static int parse_reasoning(const json_t *o, json_t *chat, g4_api_err *ae) {
    json_t *rs = json_object_get(o, "reasoning");
    if (!rs || json_is_null(rs)) return 0;
    if (!json_is_object(rs)) return BAD(ae, "reasoning", "'reasoning' must be an object");
    json_t *eff = json_object_get(rs, "effort"), *sum = json_object_get(rs, "summary");
    static const char *const efforts[] = {"none", "minimal", "low", "medium", "high", "xhigh"};
    if (sum && !json_is_null(sum) && !json_is_string(sum)) return BAD(ae, "reasoning.summary", "'reasoning.summary' must be a string");
    if (!eff || json_is_null(eff)) return 0;
    for (int i = 0; json_is_string(eff) && i < 6; i++)
        if (!strcmp(json_string_value(eff), efforts[i])) {
            json_object_set_new(chat, "enable_thinking", json_boolean(i >= 2));
            return 0;
        }
    return BAD(ae, "reasoning.effort", "'reasoning.effort' must be one of none, minimal, low, medium, high, xhigh");
}

/* The request fields a response object repeats, with their defaults. */
static json_t *echo_fields(const json_t *o, const g4_api_request *r) {
    json_t *x = json_object();
    const char *keys[] = {"instructions", "tools", "tool_choice", "metadata", "reasoning", "text", "truncation", "user", "parallel_tool_calls",
                          "top_logprobs"};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
        json_t *v = json_object_get(o, keys[i]);
        json_object_set(x, keys[i], v ? v : json_null());
    }
    if (json_is_null(json_object_get(x, "tools"))) json_object_set_new(x, "tools", json_array());
    if (json_is_null(json_object_get(x, "tool_choice"))) json_object_set_new(x, "tool_choice", json_string("auto"));
    if (json_is_null(json_object_get(x, "metadata"))) json_object_set_new(x, "metadata", json_object());
    if (json_is_null(json_object_get(x, "text"))) json_object_set_new(x, "text", json_pack("{s:{s:s}}", "format", "type", "text"));
    if (json_is_null(json_object_get(x, "truncation"))) json_object_set_new(x, "truncation", json_string("disabled"));
    if (json_is_null(json_object_get(x, "parallel_tool_calls"))) json_object_set_new(x, "parallel_tool_calls", json_true());
    if (json_is_null(json_object_get(x, "top_logprobs"))) json_object_set_new(x, "top_logprobs", json_integer(0));
    json_object_set_new(x, "temperature", r->has_temperature ? json_real(r->temperature) : json_null());
    json_object_set_new(x, "top_p", r->has_top_p ? json_real(r->top_p) : json_null());
    json_object_set_new(x, "max_output_tokens", r->max_tokens > 0 ? json_integer((json_int_t)r->max_tokens) : json_null());
    json_object_set_new(x, "previous_response_id", json_null());
    json_object_set_new(x, "store", json_false());
    return x;
}

static int parse_body(const json_t *o, g4_api_request *r, g4_api_err *ae) {
    int rc, has = 0;
    long long x;
    const char *s;
    if ((rc = refuse_stateful(o, ae))) return rc;
    if ((rc = g4_api_field_string(o, "model", &s, ae))) return rc;
    if (s) {
        r->model_len = json_string_length(json_object_get(o, "model"));
        if (!(r->model = malloc(r->model_len + 1))) return g4_api_err_status(ae, G4_ENOMEM, NULL, "out of memory");
        memcpy(r->model, s, r->model_len + 1);
    }
    if ((rc = g4_api_field_int(o, "max_output_tokens", 1, INT64_MAX / 2, &has, &x, ae))) return rc;
    if (has) r->max_tokens = x;
    if ((rc = g4_api_field_number(o, "temperature", 0, 2, &r->has_temperature, &r->temperature, ae))) return rc;
    if ((rc = g4_api_field_number(o, "top_p", 0, 1, &r->has_top_p, &r->top_p, ae))) return rc;
    /* not in OpenAI's Responses: the same sampling extensions as chat completions (docs/server.md) */
    if ((rc = g4_api_field_penalties(o, r, ae))) return rc;
    if ((rc = g4_api_field_bool(o, "stream", &r->stream, ae))) return rc;
    has = 0;
    if ((rc = g4_api_field_int(o, "top_logprobs", 0, 20, &has, &x, ae))) return rc;
    if (has && x > 0) return UNSUPPORTED(ae, "top_logprobs", "'top_logprobs' is not supported here (chat and completions have logprobs)");
    const char *strs[] = {"user", "safety_identifier", "prompt_cache_key", "service_tier", "instructions"};
    for (int i = 0; i < 5; i++)
        if ((rc = g4_api_field_string(o, strs[i], &s, ae))) return rc;
    const char *tr;
    if ((rc = g4_api_field_string(o, "truncation", &tr, ae))) return rc;
    if (tr && strcmp(tr, "auto") && strcmp(tr, "disabled")) return BAD(ae, "truncation", "'truncation' must be \"auto\" or \"disabled\"");
    json_t *inc = json_object_get(o, "include"), *md = json_object_get(o, "metadata");
    if (inc && !json_is_null(inc) && !json_is_array(inc)) return BAD(ae, "include", "'include' must be a list of strings");
    if (md && !json_is_null(md) && !json_is_object(md)) return BAD(ae, "metadata", "'metadata' must be an object");
    if ((rc = parse_text(o, r, ae))) return rc;
    json_t *input = json_object_get(o, "input");
    if (!input || json_is_null(input)) return BAD(ae, "input", "'input' is required");
    if (!json_is_string(input) && !json_is_array(input)) return BAD(ae, "input", "'input' must be a string or a list of input items");
    json_t *conv = json_array(), *reasoning = NULL;
    const char *ins = str_of(o, "instructions");
    if (ins) json_array_append_new(conv, json_pack("{s:s,s:O}", "role", "system", "content", json_object_get(o, "instructions")));
    if (json_is_string(input)) json_array_append_new(conv, json_pack("{s:s,s:O}", "role", "user", "content", input));
    size_t i;
    json_t *it;
    rc = 0;
    if (json_is_array(input)) json_array_foreach(input, i, it) if ((rc = convert_item(it, i, conv, &reasoning, ae))) break;
    json_decref(reasoning); /* reasoning with no assistant turn after it: nothing to attach it to */
    if (!rc && !json_array_size(input) && !json_is_string(input)) rc = BAD(ae, "input", "'input' must not be empty");
    json_t *checked = NULL;
    if (!rc) rc = g4_api_messages(conv, &checked, &r->images, ae);
    json_decref(conv);
    if (rc) return rc;
    r->chat = json_pack("{s:o,s:b}", "messages", checked, "add_generation_prompt", 1);
    if ((rc = parse_reasoning(o, r->chat, ae))) return rc;
    if ((rc = convert_tools(o, r->chat, r, ae))) return rc;
    r->extra = echo_fields(o, r);
    return 0;
}

int g4_resp_parse(const char *body, size_t len, g4_api_request *r, g4_api_err *ae) {
    memset(r, 0, sizeof *r);
    r->kind = G4_API_RESPONSES;
    r->max_tokens = -1;
    r->n = 1;
    r->parse_output = 1;
    json_t *o;
    int rc = g4_api_parse_object(body, len, &o, ae);
    if (rc) return rc;
    rc = parse_body(o, r, ae);
    json_decref(o);
    if (rc) g4_api_request_free(r);
    return rc;
}

/* ---- output items and the response object --------------------------------------------------- */

static const char *tail_of(const char *id) { return strncmp(id, "resp_", 5) ? id : id + 5; }

static json_t *item_id(const char *prefix, const char *resp_id, size_t index) {
    char b[128];
    snprintf(b, sizeof b, "%s_%s_%zu", prefix, tail_of(resp_id), index);
    return json_string(b);
}

static json_t *reasoning_item(const char *resp_id, size_t index, const char *text, size_t len, const char *status) {
    json_t *it = json_pack("{s:o,s:s,s:[],s:[{s:s,s:s%}]}", "id", item_id("rs", resp_id, index), "type", "reasoning", "summary", "content",
                           "type", "reasoning_text", "text", text, len);
    if (status) json_object_set_new(it, "status", json_string(status));
    return it;
}

static json_t *text_part(const char *text, size_t len) {
    return json_pack("{s:s,s:s%,s:[],s:[]}", "type", "output_text", "text", text, len, "annotations", "logprobs");
}

static json_t *message_item(const char *resp_id, size_t index, const char *text, size_t len, int done) {
    json_t *content = done ? json_pack("[o]", text_part(text, len)) : json_array();
    return json_pack("{s:o,s:s,s:s,s:s,s:o}", "id", item_id("msg", resp_id, index), "type", "message", "status", done ? "completed" : "in_progress",
                     "role", "assistant", "content", content);
}

static json_t *call_item(const char *resp_id, size_t index, size_t k, const g4_tool_call *c, int done) {
    char cid[128];
    snprintf(cid, sizeof cid, "call_%s_%zu", tail_of(resp_id), k);
    return json_pack("{s:o,s:s,s:s,s:s,s:s,s:s}", "id", item_id("fc", resp_id, index), "type", "function_call", "status",
                     done ? "completed" : "in_progress", "call_id", cid, "name", c->name, "arguments",
                     done ? (c->arguments_json ? c->arguments_json : "{}") : "");
}

static json_t *usage(size_t prompt, size_t completion, size_t cached) {
    return json_pack("{s:I,s:{s:I},s:I,s:{s:I},s:I}", "input_tokens", (json_int_t)prompt, "input_tokens_details", "cached_tokens",
                     (json_int_t)cached, "output_tokens", (json_int_t)completion, "output_tokens_details", "reasoning_tokens", (json_int_t)0,
                     "total_tokens", (json_int_t)(prompt + completion));
}

/* The envelope: id, status, the repeated request fields; output and usage as given (taken). */
static json_t *envelope(const char *id, long long created, const char *model, const json_t *extra, const char *finish, json_t *output,
                        json_t *use) {
    const char *status = !finish ? "in_progress" : !strcmp(finish, "length") ? "incomplete" : "completed";
    json_t *j = json_pack("{s:s,s:s,s:I,s:s,s:s,s:n,s:o}", "id", id, "object", "response", "created_at", (json_int_t)created, "status", status,
                          "model", model, "error", "output", output);
    json_object_set_new(j, "incomplete_details", finish && !strcmp(finish, "length") ? json_pack("{s:s}", "reason", "max_output_tokens") : json_null());
    json_object_set_new(j, "usage", use ? use : json_null());
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)extra, k, v) json_object_set(j, k, v);
    return j;
}

json_t *g4_resp_response(const g4_api_result *r, const json_t *extra) {
    const g4_parsed_output *po = r->parsed ? &r->parsed->po : NULL;
    json_t *out = json_array();
    if (po && r->parsed->reasoning_len) json_array_append_new(out, reasoning_item(r->id, json_array_size(out), po->reasoning, r->parsed->reasoning_len, NULL));
    const char *text = po ? po->content : r->text;
    size_t tl = po ? r->parsed->content_len : r->text_len;
    if (tl || !po || !po->n_calls) json_array_append_new(out, message_item(r->id, json_array_size(out), text ? text : "", tl, 1));
    for (size_t k = 0; po && k < po->n_calls; k++) json_array_append_new(out, call_item(r->id, json_array_size(out), k, &po->calls[k], 1));
    return envelope(r->id, r->created, r->model, extra, r->finish_reason, out, usage(r->prompt_tokens, r->completion_tokens, r->cached_tokens));
}

/* ---- streaming ------------------------------------------------------------------------------ */

typedef struct {
    char *id, *model;
    long long created;
    json_t *extra;
    int seq;                  /* sequence_number of the next event */
    json_t *out;              /* the finished output items */
    int open;                 /* -1, G4_OUT_REASONING or G4_OUT_CONTENT: the item being streamed */
    char *text;               /* its text so far */
    size_t len, cap;
} resp_stream;

static void *st_create(const g4_sse_opts *o) {
    resp_stream *a = calloc(1, sizeof *a);
    if (!a) return NULL;
    a->id = strdup(o->id);
    a->model = strdup(o->model);
    a->created = o->created;
    a->extra = o->extra ? json_deep_copy(o->extra) : json_object();
    a->out = json_array();
    a->open = -1;
    if (!a->id || !a->model || !a->extra || !a->out) {
        free(a->id); free(a->model); json_decref(a->extra); json_decref(a->out); free(a);
        return NULL;
    }
    return a;
}

static void st_free(void *p) {
    resp_stream *a = p;
    free(a->id);
    free(a->model);
    json_decref(a->extra);
    json_decref(a->out);
    free(a->text);
    free(a);
}

/* One event: its type and sequence number go into data (taken). */
static int event(resp_stream *a, g4_sse *s, const char *type, json_t *data) {
    if (!data) return G4_ENOMEM;
    json_t *e = json_pack("{s:s}", "type", type); /* the type first, as OpenAI sends it */
    json_object_update(e, data);
    json_decref(data);
    json_object_set_new(e, "sequence_number", json_integer(a->seq++));
    return g4_sse_event(s, type, e);
}

static int st_start(void *p, g4_sse *s, int i) {
    (void)i; /* one choice */
    resp_stream *a = p;
    int rc = event(a, s, "response.created", json_pack("{s:o}", "response", envelope(a->id, a->created, a->model, a->extra, NULL, json_array(), NULL)));
    if (!rc) rc = event(a, s, "response.in_progress", json_pack("{s:o}", "response", envelope(a->id, a->created, a->model, a->extra, NULL, json_array(), NULL)));
    return rc;
}

static json_t *loc(resp_stream *a, const char *prefix) {
    const size_t index = json_array_size(a->out);
    return json_pack("{s:o,s:I,s:i}", "item_id", item_id(prefix, a->id, index), "output_index", (json_int_t)index, "content_index", 0);
}

/* Ends the open reasoning or message item: its *.done events, then output_item.done. */
static int close_item(resp_stream *a, g4_sse *s) {
    if (a->open < 0) return G4_OK;
    const int msg = a->open == G4_OUT_CONTENT;
    const char *text = a->text ? a->text : "";
    const size_t index = json_array_size(a->out);
    json_t *d = loc(a, msg ? "msg" : "rs");
    json_object_set_new(d, "text", json_stringn(text, a->len));
    if (msg) json_object_set_new(d, "logprobs", json_array());
    int rc = event(a, s, msg ? "response.output_text.done" : "response.reasoning_text.done", d);
    d = loc(a, msg ? "msg" : "rs");
    json_object_set_new(d, "part", msg ? text_part(text, a->len) : json_pack("{s:s,s:s%}", "type", "reasoning_text", "text", text, a->len));
    if (!rc) rc = event(a, s, "response.content_part.done", d);
    else json_decref(d);
    json_t *item = msg ? message_item(a->id, index, text, a->len, 1) : reasoning_item(a->id, index, text, a->len, NULL);
    if (!rc) rc = event(a, s, "response.output_item.done", json_pack("{s:I,s:O}", "output_index", (json_int_t)index, "item", item));
    json_array_append_new(a->out, item);
    a->open = -1;
    a->len = 0;
    return rc;
}

static int open_item(resp_stream *a, g4_sse *s, int kind) {
    const int msg = kind == G4_OUT_CONTENT;
    const size_t index = json_array_size(a->out);
    json_t *item = msg ? message_item(a->id, index, "", 0, 0) : json_pack("{s:o,s:s,s:[],s:[]}", "id", item_id("rs", a->id, index), "type", "reasoning",
                                                                          "summary", "content");
    int rc = event(a, s, "response.output_item.added", json_pack("{s:I,s:o}", "output_index", (json_int_t)index, "item", item));
    json_t *d = loc(a, msg ? "msg" : "rs");
    json_object_set_new(d, "part", msg ? text_part("", 0) : json_pack("{s:s,s:s}", "type", "reasoning_text", "text", ""));
    if (!rc) rc = event(a, s, "response.content_part.added", d);
    else json_decref(d);
    a->open = kind;
    a->len = 0;
    return rc;
}

static int add_text(resp_stream *a, const char *t, size_t n) {
    if (a->len + n + 1 > a->cap) {
        size_t c = a->cap ? a->cap * 2 : 256;
        while (c < a->len + n + 1) c *= 2;
        char *b = realloc(a->text, c);
        if (!b) return G4_ENOMEM;
        a->text = b;
        a->cap = c;
    }
    memcpy(a->text + a->len, t, n);
    a->len += n;
    a->text[a->len] = 0;
    return G4_OK;
}

static int st_events(void *p, g4_sse *s, int i, const g4_out_event *ev, size_t n) {
    (void)i;
    resp_stream *a = p;
    int rc = G4_OK;
    for (size_t k = 0; k < n && !rc; k++) {
        if (ev[k].kind == G4_OUT_TOOL_CALL) {
            const size_t index = (rc = close_item(a, s)) ? 0 : json_array_size(a->out);
            json_t *item = call_item(a->id, index, ev[k].call_index, ev[k].call, 0);
            if (!rc) rc = event(a, s, "response.output_item.added", json_pack("{s:I,s:O}", "output_index", (json_int_t)index, "item", item));
            const char *args = ev[k].call->arguments_json ? ev[k].call->arguments_json : "{}";
            json_t *fid = json_object_get(item, "id");
            if (!rc) rc = event(a, s, "response.function_call_arguments.delta", json_pack("{s:O,s:I,s:s}", "item_id", fid, "output_index", (json_int_t)index, "delta", args));
            if (!rc) rc = event(a, s, "response.function_call_arguments.done",
                                json_pack("{s:O,s:I,s:s,s:s}", "item_id", fid, "output_index", (json_int_t)index, "name", ev[k].call->name, "arguments", args));
            json_decref(item);
            item = call_item(a->id, index, ev[k].call_index, ev[k].call, 1);
            if (!rc) rc = event(a, s, "response.output_item.done", json_pack("{s:I,s:O}", "output_index", (json_int_t)index, "item", item));
            json_array_append_new(a->out, item);
            continue;
        }
        if (a->open != (int)ev[k].kind) {
            rc = close_item(a, s);
            if (!rc) rc = open_item(a, s, (int)ev[k].kind);
        }
        const int msg = ev[k].kind == G4_OUT_CONTENT;
        json_t *d = loc(a, msg ? "msg" : "rs");
        json_object_set_new(d, "delta", json_stringn(ev[k].text, ev[k].len));
        if (msg) json_object_set_new(d, "logprobs", json_array());
        if (!rc) rc = add_text(a, ev[k].text, ev[k].len);
        if (!rc) rc = event(a, s, msg ? "response.output_text.delta" : "response.reasoning_text.delta", d);
        else json_decref(d);
    }
    return rc;
}

static int st_end(void *p, g4_sse *s, const g4_sse_end *e) {
    resp_stream *a = p;
    int rc = close_item(a, s);
    json_t *r = envelope(a->id, a->created, a->model, a->extra, e->finish_reason, json_incref(a->out),
                         usage(e->prompt_tokens, e->completion_tokens, e->cached_tokens));
    if (!rc) rc = event(a, s, strcmp(e->finish_reason, "length") ? "response.completed" : "response.incomplete", json_pack("{s:o}", "response", r));
    else json_decref(r);
    return rc;
}

static int st_error(void *p, g4_sse *s, const g4_api_err *ae) {
    resp_stream *a = p;
    json_t *d = json_pack("{s:s,s:s}", "code", ae->code ? ae->code : "server_error", "message", ae->message);
    if (!d) d = json_pack("{s:s,s:s}", "code", "server_error", "message", "error"); /* a message that is not UTF-8 */
    json_object_set_new(d, "param", ae->param[0] ? json_string(ae->param) : json_null());
    return event(a, s, "error", d);
}

const g4_sse_shape g4_resp_sse_shape = {.max_choices = 1, .create = st_create, .free = st_free, .start = st_start, .events = st_events, .end = st_end,
                                     .error = st_error};
