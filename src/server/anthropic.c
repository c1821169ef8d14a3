/* anthropic.c — Anthropic Messages bodies to and from the one internal request and result (see
 * anthropic.h). The conversation becomes OpenAI-style messages, which g4_api_messages checks
 * and the chat template renders: system blocks -> a system message, text blocks -> content,
 * thinking blocks -> reasoning_content, tool_use -> tool_calls, tool_result -> tool messages.
 * The answer's parsed output (reasoning, content, tool calls) becomes thinking, text and
 * tool_use blocks. Knows JSON and the output parser's result; nothing about HTTP or tokens. */
#include "server/anthropic.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"

#define BAD(ae, param, ...) g4_api_err_status(ae, G4_EINVAL, param, __VA_ARGS__)
#define UNSUPPORTED(ae, param, ...) g4_api_err_status(ae, G4_EUNSUPPORTED, param, __VA_ARGS__)

/* ---- requests ------------------------------------------------------------------------------- */

/* Appends s (n bytes) to the JSON string *acc (created on first use), "\n\n" between pieces. */
static void join(json_t **acc, const char *s, size_t n) {
    if (!*acc) { *acc = json_stringn(s, n); return; }
    size_t a = json_string_length(*acc);
    char *b = malloc(a + 2 + n + 1);
    if (!b) return;
    memcpy(b, json_string_value(*acc), a);
    memcpy(b + a, "\n\n", 2);
    memcpy(b + a + 2, s, n);
    json_string_setn(*acc, b, a + 2 + n);
    free(b);
}

static const char *type_of(const json_t *block) {
    json_t *t = json_is_object(block) ? json_object_get(block, "type") : NULL;
    return json_is_string(t) ? json_string_value(t) : NULL;
}

/* Text of a string or of a list of text blocks (system, tool_result content). */
static int text_of(const json_t *v, const char *where, json_t **out, g4_api_err *ae) {
    if (json_is_string(v)) { *out = json_incref((json_t *)v); return 0; }
    if (!json_is_array(v)) return BAD(ae, where, "%s must be a string or a list of text blocks", where);
    size_t k;
    json_t *b;
    json_array_foreach(v, k, b) {
        const char *t = type_of(b);
        json_t *text = json_object_get(b, "text");
        if (!t) return BAD(ae, where, "%s[%zu] must be an object with a 'type'", where, k);
        if (strcmp(t, "text")) return UNSUPPORTED(ae, where, "%s[%zu]: blocks of type \"%s\" are not supported here (text only)", where, k, t);
        if (!json_is_string(text)) return BAD(ae, where, "%s[%zu].text must be a string", where, k);
        join(out, json_string_value(text), json_string_length(text));
    }
    if (!*out) *out = json_string("");
    return 0;
}

/* An image block {source: {type: base64, media_type, data} | {type: url, url}} as the OpenAI
 * image_url part the one message check takes (api_images.h). */
static int image_part(const json_t *b, const char *at, json_t **out, g4_api_err *ae) {
    json_t *src = json_object_get(b, "source");
    const char *st = type_of(src);
    if (!st) return BAD(ae, at, "%s.source must be an object with a 'type'", at);
    if (!strcmp(st, "url")) {
        json_t *u = json_object_get(src, "url");
        if (!json_is_string(u)) return BAD(ae, at, "%s.source.url must be a string", at);
        *out = json_pack("{s:s,s:{s:O}}", "type", "image_url", "image_url", "url", u);
        return *out ? 0 : g4_api_err_status(ae, G4_ENOMEM, NULL, "out of memory");
    }
    if (strcmp(st, "base64")) return UNSUPPORTED(ae, at, "%s.source.type \"%s\" is not supported (base64, url)", at, st);
    json_t *mt = json_object_get(src, "media_type"), *data = json_object_get(src, "data");
    if (!json_is_string(mt) || strncmp(json_string_value(mt), "image/", 6) || strchr(json_string_value(mt), ';') || strchr(json_string_value(mt), ','))
        return BAD(ae, at, "%s.source.media_type must be an image type (image/png, image/jpeg, image/webp)", at);
    if (!json_is_string(data)) return BAD(ae, at, "%s.source.data must be a base64 string", at);
    const size_t ml = json_string_length(mt), dl = json_string_length(data);
    char *url = malloc(5 + ml + 8 + dl + 1);
    if (!url) return g4_api_err_status(ae, G4_ENOMEM, NULL, "out of memory");
    memcpy(url, "data:", 5);
    memcpy(url + 5, json_string_value(mt), ml);
    memcpy(url + 5 + ml, ";base64,", 8);
    memcpy(url + 13 + ml, json_string_value(data), dl);
    url[13 + ml + dl] = 0;
    *out = json_pack("{s:s,s:{s:s%}}", "type", "image_url", "image_url", "url", url, 13 + ml + dl);
    free(url);
    return *out ? 0 : g4_api_err_status(ae, G4_ENOMEM, NULL, "out of memory");
}

/* A content part list out of joined text so far (parts come once an image does). */
static int to_parts(json_t **text, json_t **parts) {
    if (*parts) return 0;
    *parts = json_array();
    if (*text) json_array_append_new(*parts, json_pack("{s:s,s:o}", "type", "text", "text", *text));
    *text = NULL;
    return *parts ? 0 : -1;
}

/* A tool_result's content: a string, or text and image blocks (parts once an image is there). */
static int tool_content(const json_t *c, const char *where, json_t **out, g4_api_err *ae) {
    if (!json_is_array(c)) return text_of(c, where, out, ae);
    /* the text blocks joined as without images ("\n\n"), then the images: one text part, so
     * the template's join of parts cannot glue texts around an image */
    json_t *text = NULL, *images = json_array();
    if (!images) return g4_api_err_status(ae, G4_ENOMEM, NULL, "out of memory");
    size_t k;
    json_t *b;
    int rc = 0;
    json_array_foreach(c, k, b) {
        char at[200];
        snprintf(at, sizeof at, "%s[%zu]", where, k);
        const char *t = type_of(b);
        if (t && !strcmp(t, "image")) {
            json_t *img = NULL;
            if ((rc = image_part(b, at, &img, ae))) break;
            json_array_append_new(images, img);
            continue;
        }
        json_t *one = NULL;
        json_t *arr = json_pack("[O]", b);
        rc = text_of(arr, where, &one, ae);
        json_decref(arr);
        if (rc) break;
        join(&text, json_string_value(one), json_string_length(one));
        json_decref(one);
    }
    if (rc) { json_decref(text); json_decref(images); return rc; }
    if (!json_array_size(images)) {
        json_decref(images);
        *out = text ? text : json_string("");
        return 0;
    }
    json_t *parts = json_array();
    if (text) json_array_append_new(parts, json_pack("{s:s,s:o}", "type", "text", "text", text));
    json_array_extend(parts, images);
    json_decref(images);
    *out = parts;
    return 0;
}

static int is_server_block(const char *t) {
    static const char *const known[] = {"document", "search_result", "server_tool_use", "web_search_tool_result",
                                        "web_fetch_tool_result", "code_execution_tool_result", "mcp_tool_use", "mcp_tool_result",
                                        "container_upload"};
    for (size_t i = 0; i < sizeof known / sizeof *known; i++)
        if (!strcmp(t, known[i])) return 1;
    return 0;
}

/* One Anthropic message -> OpenAI-style messages appended to out: a user turn's tool_result
 * blocks become tool messages (first, in order), its text blocks one user message; an
 * assistant turn becomes one assistant message with content, reasoning_content, tool_calls. */
static int convert_message(const json_t *m, size_t i, json_t *out, g4_api_err *ae) {
    char where[96];
    snprintf(where, sizeof where, "messages[%zu]", i);
    if (!json_is_object(m)) return BAD(ae, where, "%s must be an object", where);
    json_t *role = json_object_get(m, "role"), *content = json_object_get(m, "content");
    snprintf(where, sizeof where, "messages[%zu].role", i);
    const char *rs = json_is_string(role) ? json_string_value(role) : "";
    const int user = !strcmp(rs, "user");
    if (!user && strcmp(rs, "assistant")) return BAD(ae, where, "%s must be \"user\" or \"assistant\"", where);
    snprintf(where, sizeof where, "messages[%zu].content", i);
    if (json_is_string(content)) {
        json_array_append_new(out, json_pack("{s:s,s:O}", "role", rs, "content", content));
        return 0;
    }
    if (!json_is_array(content)) return BAD(ae, where, "%s must be a string or a list of content blocks", where);
    json_t *text = NULL, *parts = NULL, *reasoning = NULL, *calls = json_array(), *tools = json_array();
    int rc = 0;
    size_t k;
    json_t *b;
    json_array_foreach(content, k, b) {
        char at[128];
        snprintf(at, sizeof at, "messages[%zu].content[%zu]", i, k);
        const char *t = type_of(b);
        if (!t) { rc = BAD(ae, at, "%s must be an object with a 'type'", at); break; }
        if (!strcmp(t, "text")) {
            json_t *s = json_object_get(b, "text");
            if (!json_is_string(s)) { rc = BAD(ae, at, "%s.text must be a string", at); break; }
            if (parts) json_array_append_new(parts, json_pack("{s:s,s:O}", "type", "text", "text", s));
            else join(&text, json_string_value(s), json_string_length(s));
        } else if (!strcmp(t, "image")) {
            json_t *img;
            if (!user) { rc = BAD(ae, at, "%s: image blocks belong to user turns", at); break; }
            if ((rc = image_part(b, at, &img, ae))) break;
            if (to_parts(&text, &parts)) { json_decref(img); rc = g4_api_err_status(ae, G4_ENOMEM, NULL, "out of memory"); break; }
            json_array_append_new(parts, img);
        } else if (!strcmp(t, "thinking") || !strcmp(t, "redacted_thinking")) {
            if (user) { rc = BAD(ae, at, "%s: %s blocks belong to assistant turns", at, t); break; }
            json_t *s = json_object_get(b, "thinking");
            if (!strcmp(t, "redacted_thinking")) continue; /* opaque to this model: nothing to render */
            if (!json_is_string(s)) { rc = BAD(ae, at, "%s.thinking must be a string", at); break; }
            join(&reasoning, json_string_value(s), json_string_length(s));
        } else if (!strcmp(t, "tool_use")) {
            json_t *id = json_object_get(b, "id"), *name = json_object_get(b, "name"), *input = json_object_get(b, "input");
            if (user) { rc = BAD(ae, at, "%s: tool_use blocks belong to assistant turns", at); break; }
            if (!json_is_string(id) || !json_is_string(name)) { rc = BAD(ae, at, "%s needs a string 'id' and 'name'", at); break; }
            if (!json_is_object(input)) { rc = BAD(ae, at, "%s.input must be an object", at); break; }
            json_array_append_new(calls, json_pack("{s:O,s:s,s:{s:O,s:O}}", "id", id, "type", "function", "function", "name", name, "arguments", input));
        } else if (!strcmp(t, "tool_result")) {
            json_t *id = json_object_get(b, "tool_use_id"), *c = json_object_get(b, "content"), *err = json_object_get(b, "is_error");
            if (!user) { rc = BAD(ae, at, "%s: tool_result blocks belong to user turns", at); break; }
            if (!json_is_string(id)) { rc = BAD(ae, at, "%s.tool_use_id must be a string", at); break; }
            if (err && !json_is_null(err) && !json_is_boolean(err)) { rc = BAD(ae, at, "%s.is_error must be true or false", at); break; }
            char cw[160];
            snprintf(cw, sizeof cw, "%s.content", at);
            json_t *body = NULL;
            if ((!c || json_is_null(c)) && !(body = json_string(""))) { rc = g4_api_err_status(ae, G4_ENOMEM, NULL, "out of memory"); break; }
            if (!body && (rc = tool_content(c, cw, &body, ae))) break;
            json_array_append_new(tools, json_pack("{s:s,s:O,s:o}", "role", "tool", "tool_call_id", id, "content", body));
        } else if (is_server_block(t)) {
            rc = UNSUPPORTED(ae, at, "%s: content blocks of type \"%s\" are not supported (text, image, thinking, tool_use and tool_result are)", at, t);
            break;
        } else {
            rc = BAD(ae, at, "%s: unknown content block type \"%s\"", at, t);
            break;
        }
    }
    if (!rc && user) {
        json_array_extend(out, tools);
        if (parts) json_array_append_new(out, json_pack("{s:s,s:o}", "role", "user", "content", parts));
        else if (text || !json_array_size(tools)) json_array_append_new(out, json_pack("{s:s,s:o}", "role", "user", "content", text ? text : json_string("")));
        text = parts = NULL;
    } else if (!rc) {
        json_t *msg = json_pack("{s:s}", "role", "assistant");
        json_object_set_new(msg, "content", text ? text : json_array_size(calls) ? json_null() : json_string(""));
        text = NULL;
        if (reasoning) json_object_set(msg, "reasoning_content", reasoning);
        if (json_array_size(calls)) json_object_set(msg, "tool_calls", calls);
        json_array_append_new(out, msg);
    }
    json_decref(text);
    json_decref(parts);
    json_decref(reasoning);
    json_decref(calls);
    json_decref(tools);
    return rc;
}

/* Anthropic's rule for tool names, which also keeps them parseable in Gemma's call syntax. */
static int good_name(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > 128) return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_' || s[i] == '-'))
            return 0;
    return 1;
}

/* tool_choice {type: auto | any | tool (with name) | none, disable_parallel_tool_use?}: any is
 * OpenAI's "required", tool a named function; both are enforced by the grammar. */
static int parse_tool_choice(const json_t *o, int *mode, const char **name, int *parallel, g4_api_err *ae) {
    json_t *tc = json_object_get(o, "tool_choice");
    if (!tc || json_is_null(tc)) return 0;
    const char *t = type_of(tc), *k;
    json_t *dp = json_object_get(tc, "disable_parallel_tool_use"), *v;
    if (!t) return BAD(ae, "tool_choice", "'tool_choice' must be an object with a 'type'");
    if (dp && !json_is_null(dp) && !json_is_boolean(dp)) return BAD(ae, "tool_choice", "'tool_choice.disable_parallel_tool_use' must be true or false");
    const int is_tool = !strcmp(t, "tool");
    json_object_foreach((json_t *)tc, k, v)
        if (strcmp(k, "type") && strcmp(k, "disable_parallel_tool_use") && !(is_tool && !strcmp(k, "name")))
            return BAD(ae, "tool_choice", "unknown field '%s' in 'tool_choice' of type \"%s\"", k, t);
    if (!strcmp(t, "none")) *mode = G4_TOOLS_NONE;
    else if (!strcmp(t, "any")) *mode = G4_TOOLS_REQUIRED;
    else if (is_tool) {
        json_t *n = json_object_get(tc, "name");
        if (!json_is_string(n) || !json_string_length(n)) return BAD(ae, "tool_choice", "'tool_choice' of type \"tool\" needs a string 'name'");
        *mode = G4_TOOLS_NAMED;
        *name = json_string_value(n);
    } else if (!strcmp(t, "auto")) *mode = G4_TOOLS_AUTO;
    else return BAD(ae, "tool_choice", "'tool_choice.type' must be \"auto\", \"any\", \"tool\" or \"none\"");
    if (json_is_true(dp)) *parallel = 0;
    return 0;
}

/* tools [{name, description?, input_schema}] -> chat tools [{type:function, function:{...}}],
 * kept by the request for the grammar; tool_choice none keeps them out of the prompt. */
static int convert_tools(const json_t *o, json_t *chat, g4_api_request *r, g4_api_err *ae) {
    json_t *tools = json_object_get(o, "tools");
    int mode = G4_TOOLS_AUTO, parallel = 1, rc;
    const char *name = NULL;
    if ((rc = parse_tool_choice(o, &mode, &name, &parallel, ae))) return rc;
    if (tools && !json_is_null(tools) && !json_is_array(tools)) return BAD(ae, "tools", "'tools' must be a list");
    json_t *out = json_array();
    size_t i;
    json_t *t;
    if (json_is_array(tools)) json_array_foreach(tools, i, t) {
        char at[48];
        snprintf(at, sizeof at, "tools[%zu]", i);
        json_t *name_j = json_is_object(t) ? json_object_get(t, "name") : NULL, *desc = json_object_get(t, "description"),
               *schema = json_object_get(t, "input_schema"), *type = json_object_get(t, "type");
        rc = 0;
        if (!json_is_object(t)) rc = BAD(ae, at, "%s must be an object", at);
        else if (type && !json_is_null(type) && !(json_is_string(type) && !strcmp(json_string_value(type), "custom")))
            rc = UNSUPPORTED(ae, at, "%s: server tools (type \"%s\") are not supported; give custom tools (name, input_schema)", at,
                             json_is_string(type) ? json_string_value(type) : "?");
        else if (!json_is_string(name_j) || !good_name(json_string_value(name_j)))
            rc = BAD(ae, at, "%s.name must be a string of 1 to 128 letters, digits, '_' or '-'", at);
        else if (desc && !json_is_null(desc) && !json_is_string(desc)) rc = BAD(ae, at, "%s.description must be a string", at);
        else if (!json_is_object(schema)) rc = BAD(ae, at, "%s.input_schema must be an object (a JSON Schema)", at);
        else if (json_object_get(schema, "type") && !(json_is_string(json_object_get(schema, "type")) && !strcmp(json_string_value(json_object_get(schema, "type")), "object")))
            rc = BAD(ae, at, "%s.input_schema.type must be \"object\"", at);
        else if (json_object_get(t, "strict") && !json_is_null(json_object_get(t, "strict")) && !json_is_boolean(json_object_get(t, "strict")))
            rc = BAD(ae, at, "%s.strict must be true or false", at);
        if (rc) { json_decref(out); return rc; }
        if (json_is_true(json_object_get(t, "strict"))) r->strict_tools = 1; /* its calls follow input_schema under auto too */
        json_t *fn = json_pack("{s:O,s:O}", "name", name_j, "parameters", schema);
        json_object_set_new(fn, "description", json_is_string(desc) ? json_incref(desc) : json_string(""));
        json_array_append_new(out, json_pack("{s:s,s:o}", "type", "function", "function", fn));
    }
    rc = g4_api_set_tools(r, json_array_size(out) ? out : NULL, mode, name, parallel, ae);
    if (!rc && json_array_size(out) && mode != G4_TOOLS_NONE) json_object_set(chat, "tools", out);
    json_decref(out);
    return rc;
}

/* output_config {format?: {type: json_schema, schema}, effort?} (and the beta's output_format,
 * the same format object): the text is JSON of the schema, enforced by the grammar. */
static int parse_output_format(const json_t *o, g4_api_request *r, g4_api_err *ae) {
    json_t *oc = json_object_get(o, "output_config"), *f = NULL, *beta = json_object_get(o, "output_format");
    const char *where = "output_config.format";
    if (oc && !json_is_null(oc)) {
        if (!json_is_object(oc)) return BAD(ae, "output_config", "'output_config' must be an object");
        json_t *eff = json_object_get(oc, "effort");
        static const char *const efforts[] = {"low", "medium", "high", "xhigh", "max"};
        int ok = !eff || json_is_null(eff);
        for (int i = 0; !ok && json_is_string(eff) && i < 5; i++) ok = !strcmp(json_string_value(eff), efforts[i]);
        if (!ok) return BAD(ae, "output_config.effort", "'output_config.effort' must be one of low, medium, high, xhigh, max");
        f = json_object_get(oc, "format");
    }
    if (beta && !json_is_null(beta)) {
        if (f && !json_is_null(f)) return BAD(ae, "output_format", "give the format once: 'output_config.format' or 'output_format'");
        f = beta;
        where = "output_format";
    }
    if (!f || json_is_null(f)) return 0;
    const char *t = type_of(f), *k;
    json_t *v, *schema = json_object_get(f, "schema");
    if (!t || strcmp(t, "json_schema")) return BAD(ae, where, "'%s' must be {\"type\": \"json_schema\", \"schema\": ...}", where);
    json_object_foreach((json_t *)f, k, v)
        if (strcmp(k, "type") && strcmp(k, "schema")) return BAD(ae, where, "unknown field '%s' in '%s' (type, schema)", k, where);
    if (!json_is_object(schema) && !json_is_boolean(schema)) return BAD(ae, where, "'%s.schema' must be a JSON Schema (an object)", where);
    r->out_format = G4_FMT_JSON_SCHEMA;
    r->out_schema = json_incref(schema);
    return 0;
}

/* A date YYYY-MM-DD from 2023-01-01 on: the SDKs send their own dates (2023-06-01, later ones);
 * what a later version added is refused field by field, not by its date. */
int g4_anth_check_version(const char *v, g4_api_err *ae) {
    if (!v) return 0;
    int ok = strlen(v) == 10 && v[4] == '-' && v[7] == '-' && strcmp(v, "2023-01-01") >= 0;
    for (int i = 0; ok && i < 10; i++) ok = i == 4 || i == 7 || (v[i] >= '0' && v[i] <= '9');
    if (ok) return 0;
    return BAD(ae, "anthropic-version", "the anthropic-version header \"%.40s\" is not a version of the Messages API (e.g. 2023-06-01)", v);
}

static int parse_body(const json_t *o, int count_only, g4_api_request *r, g4_api_err *ae) {
    int rc, has = 0;
    long long x;
    const char *model;
    if ((rc = g4_api_field_string(o, "model", &model, ae))) return rc;
    if (!model) return BAD(ae, "model", "'model' is required");
    r->model_len = json_string_length(json_object_get(o, "model"));
    if (!(r->model = malloc(r->model_len + 1))) return g4_api_err_status(ae, G4_ENOMEM, NULL, "out of memory");
    memcpy(r->model, model, r->model_len + 1);
    if (!count_only) {
        if ((rc = g4_api_field_int(o, "max_tokens", 1, INT64_MAX / 2, &has, &x, ae))) return rc;
        if (!has) return BAD(ae, "max_tokens", "'max_tokens' is required");
        r->max_tokens = x;
        if ((rc = g4_api_field_number(o, "temperature", 0, 1, &r->has_temperature, &r->temperature, ae))) return rc;
        if ((rc = g4_api_field_number(o, "top_p", 0, 1, &r->has_top_p, &r->top_p, ae))) return rc;
        if ((rc = g4_api_field_int(o, "top_k", 0, 1 << 30, &r->has_top_k, &x, ae))) return rc;
        if (r->has_top_k) r->top_k = (int)x;
        if ((rc = g4_api_field_stops(o, "stop_sequences", 0, r, ae))) return rc;
        /* not Anthropic's: the same sampling extensions as the OpenAI routes (docs/server.md) */
        if ((rc = g4_api_field_penalties(o, r, ae))) return rc;
        if ((rc = g4_api_field_bool(o, "stream", &r->stream, ae))) return rc;
        json_t *md = json_object_get(o, "metadata");
        if (md && !json_is_null(md)) {
            json_t *uid = json_is_object(md) ? json_object_get(md, "user_id") : NULL;
            if (!json_is_object(md)) return BAD(ae, "metadata", "'metadata' must be an object");
            if (uid && !json_is_null(uid) && !json_is_string(uid)) return BAD(ae, "metadata.user_id", "'metadata.user_id' must be a string");
        }
        const char *tier;
        if ((rc = g4_api_field_string(o, "service_tier", &tier, ae))) return rc;
    }
    const char *refused[] = {"container", "mcp_servers"};
    for (int i = 0; i < 2; i++) {
        json_t *v = json_object_get(o, refused[i]);
        if (v && !json_is_null(v)) return UNSUPPORTED(ae, refused[i], "'%s' is not supported", refused[i]);
    }
    json_t *msgs = json_object_get(o, "messages");
    if (!json_is_array(msgs) || !json_array_size(msgs)) return BAD(ae, "messages", "'messages' must be a non-empty list");
    json_t *conv = json_array();
    r->chat = json_pack("{s:b}", "add_generation_prompt", 1);
    json_t *sys = json_object_get(o, "system");
    if (sys && !json_is_null(sys)) {
        json_t *text = NULL;
        if ((rc = text_of(sys, "system", &text, ae))) { json_decref(conv); return rc; }
        json_array_append_new(conv, json_pack("{s:s,s:o}", "role", "system", "content", text));
    }
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) if ((rc = convert_message(m, i, conv, ae))) { json_decref(conv); return rc; }
    json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);
    if (!strcmp(json_string_value(json_object_get(last, "role")), "assistant")) {
        json_decref(conv);
        return UNSUPPORTED(ae, "messages", "a final assistant message (a prefill to continue) is not supported; end with a user message");
    }
    json_t *checked;
    rc = g4_api_messages(conv, &checked, &r->images, ae); /* the same checks, argument objects and images as chat completions */
    json_decref(conv);
    if (rc) return rc;
    json_object_set_new(r->chat, "messages", checked);
    json_t *th = json_object_get(o, "thinking");
    if (th && !json_is_null(th)) {
        const char *t = type_of(th);
        if (!t) return BAD(ae, "thinking", "'thinking' must be an object with a 'type'");
        if (!strcmp(t, "enabled")) {
            json_t *bt = json_object_get(th, "budget_tokens");
            if (!json_is_integer(bt) || json_integer_value(bt) < 1024) return BAD(ae, "thinking.budget_tokens", "'thinking.budget_tokens' must be an integer >= 1024");
            if (!count_only && json_integer_value(bt) >= r->max_tokens) return BAD(ae, "thinking.budget_tokens", "'thinking.budget_tokens' must be less than 'max_tokens'");
        } else if (strcmp(t, "disabled") && strcmp(t, "adaptive"))
            return BAD(ae, "thinking.type", "'thinking.type' must be \"enabled\", \"adaptive\" or \"disabled\"");
        json_object_set_new(r->chat, "enable_thinking", json_boolean(strcmp(t, "disabled") != 0));
    }
    if ((rc = parse_output_format(o, r, ae))) return rc;
    return convert_tools(o, r->chat, r, ae);
}

int g4_anth_parse(const char *body, size_t len, int count_only, g4_api_request *r, g4_api_err *ae) {
    memset(r, 0, sizeof *r);
    r->kind = G4_API_ANTHROPIC;
    r->max_tokens = -1;
    r->n = 1;
    r->parse_output = 1;
    json_t *o;
    int rc = g4_api_parse_object(body, len, &o, ae);
    if (rc) return rc;
    rc = parse_body(o, count_only, r, ae);
    if (!rc) rc = g4_api_check_stops(r, "stop_sequences", ae);
    json_decref(o);
    if (rc) g4_api_request_free(r);
    return rc;
}

/* ---- responses ------------------------------------------------------------------------------ */

const char *g4_anth_stop_reason(const char *finish_reason, const char *stop_sequence, size_t n_calls) {
    if (!strcmp(finish_reason, "length")) return "max_tokens";
    if (stop_sequence) return "stop_sequence";
    return n_calls ? "tool_use" : "end_turn";
}

/* Anthropic counts cache reads apart: input_tokens are the prompt tokens computed anew. */
static json_t *usage(size_t prompt, size_t completion, size_t cached) {
    return json_pack("{s:I,s:I,s:I,s:I}", "input_tokens", (json_int_t)(prompt - (cached < prompt ? cached : prompt)), "output_tokens",
                     (json_int_t)completion, "cache_creation_input_tokens", (json_int_t)0, "cache_read_input_tokens", (json_int_t)cached);
}

static json_t *tool_use_block(const char *msg_id, size_t k, const g4_tool_call *c) {
    char id[96];
    snprintf(id, sizeof id, "toolu_%s_%zu", strncmp(msg_id, "msg_", 4) ? msg_id : msg_id + 4, k);
    return json_pack("{s:s,s:s,s:s,s:O}", "type", "tool_use", "id", id, "name", c->name, "input",
                     c->arguments ? c->arguments : json_object());
}

json_t *g4_anth_response(const g4_api_result *r) {
    const g4_parsed_output *po = r->parsed ? &r->parsed->po : NULL;
    json_t *content = json_array();
    if (po && r->parsed->reasoning_len)
        json_array_append_new(content, json_pack("{s:s,s:s%,s:s}", "type", "thinking", "thinking", po->reasoning, r->parsed->reasoning_len,
                                                 "signature", ""));
    const char *text = po ? po->content : r->text;
    size_t tl = po ? r->parsed->content_len : r->text_len;
    if (tl) json_array_append_new(content, json_pack("{s:s,s:s%}", "type", "text", "text", text, tl));
    for (size_t k = 0; po && k < po->n_calls; k++) json_array_append_new(content, tool_use_block(r->id, k, &po->calls[k]));
    json_t *j = json_pack("{s:s,s:s,s:s,s:s,s:o,s:s}", "id", r->id, "type", "message", "role", "assistant", "model", r->model, "content",
                          content, "stop_reason", g4_anth_stop_reason(r->finish_reason, r->stop_sequence, po ? po->n_calls : 0));
    json_object_set_new(j, "stop_sequence", r->stop_sequence ? json_string(r->stop_sequence) : json_null());
    json_object_set_new(j, "usage", usage(r->prompt_tokens, r->completion_tokens, r->cached_tokens));
    return j;
}

/* ---- streaming: message_start, a block per thinking / text run and per tool call, message_delta,
 * message_stop ---------------------------------------------------------------------------------- */

typedef struct {
    char *id, *model;
    size_t prompt_tokens;
    int open;                 /* index of the open block, -1 none */
    int open_kind;            /* G4_OUT_REASONING or G4_OUT_CONTENT */
    int n_blocks;
    size_t n_calls;
} anth_stream;

static void *st_create(const g4_sse_opts *o) {
    anth_stream *a = calloc(1, sizeof *a);
    if (!a) return NULL;
    a->id = strdup(o->id);
    a->model = strdup(o->model);
    a->prompt_tokens = o->prompt_tokens;
    a->open = -1;
    if (!a->id || !a->model) { free(a->id); free(a->model); free(a); return NULL; }
    return a;
}

static void st_free(void *p) {
    anth_stream *a = p;
    free(a->id);
    free(a->model);
    free(a);
}

static int st_start(void *p, g4_sse *s, int i) {
    (void)i; /* one choice */
    anth_stream *a = p;
    json_t *msg = json_pack("{s:s,s:s,s:s,s:[],s:s,s:n,s:n,s:o}", "id", a->id, "type", "message", "role", "assistant", "content", "model",
                            a->model, "stop_reason", "stop_sequence", "usage", usage(a->prompt_tokens, 0, 0));
    int rc = g4_sse_event(s, "message_start", json_pack("{s:s,s:o}", "type", "message_start", "message", msg));
    if (!rc) rc = g4_sse_event(s, "ping", json_pack("{s:s}", "type", "ping"));
    return rc;
}

static int close_block(anth_stream *a, g4_sse *s) {
    if (a->open < 0) return G4_OK;
    int rc = g4_sse_event(s, "content_block_stop", json_pack("{s:s,s:i}", "type", "content_block_stop", "index", a->open));
    a->open = -1;
    return rc;
}

static int open_block(anth_stream *a, g4_sse *s, json_t *block) {
    a->open = a->n_blocks++;
    return g4_sse_event(s, "content_block_start", json_pack("{s:s,s:i,s:o}", "type", "content_block_start", "index", a->open, "content_block", block));
}

static int delta(anth_stream *a, g4_sse *s, json_t *d) {
    return g4_sse_event(s, "content_block_delta", json_pack("{s:s,s:i,s:o}", "type", "content_block_delta", "index", a->open, "delta", d));
}

static int st_events(void *p, g4_sse *s, int i, const g4_out_event *ev, size_t n) {
    (void)i;
    anth_stream *a = p;
    int rc = G4_OK;
    for (size_t k = 0; k < n && !rc; k++) {
        if (ev[k].kind == G4_OUT_TOOL_CALL) {
            const g4_tool_call *c = ev[k].call;
            json_t *block = tool_use_block(a->id, ev[k].call_index, c);
            json_object_set_new(block, "input", json_object()); /* the input follows as JSON text */
            rc = close_block(a, s);
            if (!rc) rc = open_block(a, s, block);
            else json_decref(block);
            if (!rc) rc = delta(a, s, json_pack("{s:s,s:s}", "type", "input_json_delta", "partial_json", c->arguments_json ? c->arguments_json : "{}"));
            if (!rc) rc = close_block(a, s);
            a->n_calls++;
            continue;
        }
        const int thinking = ev[k].kind == G4_OUT_REASONING;
        if (a->open < 0 || a->open_kind != (int)ev[k].kind) {
            rc = close_block(a, s);
            if (!rc) rc = open_block(a, s, thinking ? json_pack("{s:s,s:s,s:s}", "type", "thinking", "thinking", "", "signature", "")
                                                    : json_pack("{s:s,s:s}", "type", "text", "text", ""));
            a->open_kind = (int)ev[k].kind;
        }
        if (!rc) rc = delta(a, s, thinking ? json_pack("{s:s,s:s%}", "type", "thinking_delta", "thinking", ev[k].text, ev[k].len)
                                           : json_pack("{s:s,s:s%}", "type", "text_delta", "text", ev[k].text, ev[k].len));
    }
    return rc;
}

static int st_end(void *p, g4_sse *s, const g4_sse_end *e) {
    anth_stream *a = p;
    int rc = close_block(a, s);
    json_t *d = json_pack("{s:s}", "stop_reason", g4_anth_stop_reason(e->finish_reason, e->stop_sequence, a->n_calls));
    json_object_set_new(d, "stop_sequence", e->stop_sequence ? json_string(e->stop_sequence) : json_null());
    if (!rc) rc = g4_sse_event(s, "message_delta", json_pack("{s:s,s:o,s:o}", "type", "message_delta", "delta", d, "usage",
                                                             usage(e->prompt_tokens, e->completion_tokens, e->cached_tokens)));
    else json_decref(d);
    if (!rc) rc = g4_sse_event(s, "message_stop", json_pack("{s:s}", "type", "message_stop"));
    return rc;
}

static int st_error(void *p, g4_sse *s, const g4_api_err *ae) {
    (void)p;
    char *e = g4_api_err_json_anthropic(ae);
    json_t *j = e ? json_loads(e, 0, NULL) : NULL;
    free(e);
    return g4_sse_event(s, "error", j);
}

const g4_sse_shape g4_anth_sse_shape = {.max_choices = 1, .create = st_create, .free = st_free, .start = st_start, .events = st_events, .end = st_end,
                                     .error = st_error};
