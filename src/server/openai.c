/* openai.c — OpenAI-compatible bodies (see openai.h): validation of every field the server
 * reads, with 400 errors naming the field, and the response objects of /generate,
 * /v1/completions and /v1/chat/completions. Knows JSON and the output parser's result; knows
 * nothing about HTTP, the tokenizer or the scheduler. */
#include "server/openai.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "g4.h"
#include "grammar/grammar.h"
#include "engine/logprobs.h"
#include "engine/penalty.h"
#include "text/utf8.h"

#define BAD(ae, param, ...) g4_api_err_status(ae, G4_EINVAL, param, __VA_ARGS__)
#define UNSUPPORTED(ae, param, ...) g4_api_err_status(ae, G4_EUNSUPPORTED, param, __VA_ARGS__)

/* ---- body ---------------------------------------------------------------------------------- */

int g4_api_parse_object(const char *body, size_t len, json_t **out, g4_api_err *ae) {
    *out = NULL;
    size_t bad = g4_utf8_invalid_at(body, len);
    if (bad < len) {
        g4_api_err_status(ae, G4_EFORMAT, NULL, "the request body is not valid UTF-8 (byte offset %zu)", bad);
        ae->code = "invalid_utf8";
        return ae->status;
    }
    if (len == 0) return g4_api_err_refuse(ae, G4_API_INVALID_JSON, NULL, "the request body is empty; a JSON object is expected");
    json_error_t je;
    json_t *j = json_loadb(body, len, JSON_ALLOW_NUL, &je); /* U+0000 is a character like any other */
    if (!j) {
        int utf = strstr(je.text, "Unicode") || strstr(je.text, "UTF-8");
        g4_api_err_refuse(ae, G4_API_INVALID_JSON, NULL, "malformed JSON at line %d, column %d: %s", je.line, je.column, je.text);
        if (utf) ae->code = "invalid_utf8";
        return ae->status;
    }
    if (!json_is_object(j)) {
        json_decref(j);
        return g4_api_err_refuse(ae, G4_API_INVALID_JSON, NULL, "the request body must be a JSON object");
    }
    *out = j;
    return 0;
}

/* ---- field readers: absent or null leaves *has 0; a wrong type or range is a 400 -------------- */

static int get_number(const json_t *o, const char *k, double lo, double hi, int *has, double *out, g4_api_err *ae) {
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v)) return BAD(ae, k, "'%s' must be a number", k);
    double x = json_number_value(v);
    if (!isfinite(x) || x < lo || x > hi) return BAD(ae, k, "'%s' must be between %g and %g (got %g)", k, lo, hi, x);
    *has = 1;
    *out = x;
    return 0;
}

static int get_int(const json_t *o, const char *k, long long lo, long long hi, int *has, long long *out, g4_api_err *ae) {
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_integer(v)) return BAD(ae, k, "'%s' must be an integer", k);
    long long x = json_integer_value(v);
    if (x < lo || x > hi) return BAD(ae, k, "'%s' must be between %lld and %lld (got %lld)", k, lo, hi, x);
    *has = 1;
    *out = x;
    return 0;
}

static int get_bool(const json_t *o, const char *k, int *out, g4_api_err *ae) {
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) return BAD(ae, k, "'%s' must be true or false", k);
    *out = json_is_true(v);
    return 0;
}

static int get_string(const json_t *o, const char *k, const char **out, g4_api_err *ae) {
    json_t *v = json_object_get(o, k);
    *out = NULL;
    if (!v || json_is_null(v)) return 0;
    if (!json_is_string(v)) return BAD(ae, k, "'%s' must be a string", k);
    *out = json_string_value(v);
    return 0;
}

/* The field readers for the other APIs' translations (anthropic.c, responses.c). */
int g4_api_field_number(const json_t *o, const char *k, double lo, double hi, int *has, double *out, g4_api_err *ae) {
    return get_number(o, k, lo, hi, has, out, ae);
}
int g4_api_field_int(const json_t *o, const char *k, long long lo, long long hi, int *has, long long *out, g4_api_err *ae) {
    return get_int(o, k, lo, hi, has, out, ae);
}
int g4_api_field_bool(const json_t *o, const char *k, int *out, g4_api_err *ae) { return get_bool(o, k, out, ae); }
int g4_api_field_string(const json_t *o, const char *k, const char **out, g4_api_err *ae) { return get_string(o, k, out, ae); }

int g4_api_field_stops(const json_t *o, const char *k, int string_ok, g4_api_request *r, g4_api_err *ae) {
    json_t *st = json_object_get(o, k);
    if (!st || json_is_null(st)) return 0;
    if (json_is_string(st) && string_ok) {
        if (!json_string_length(st)) return BAD(ae, k, "'%s' must not be an empty string", k);
        if (strlen(json_string_value(st)) != json_string_length(st)) return BAD(ae, k, "'%s' strings must not contain U+0000", k);
        r->stops[r->n_stops++] = strdup(json_string_value(st));
    } else if (json_is_array(st)) {
        if (json_array_size(st) > G4_API_MAX_STOPS) return BAD(ae, k, "'%s' may hold at most %d strings", k, G4_API_MAX_STOPS);
        size_t i;
        json_t *v;
        json_array_foreach(st, i, v) {
            if (!json_is_string(v) || !json_string_length(v))
                return BAD(ae, k, string_ok ? "'%s' must be a string or a list of non-empty strings" : "'%s' must be a list of non-empty strings", k);
            if (strlen(json_string_value(v)) != json_string_length(v)) return BAD(ae, k, "'%s' strings must not contain U+0000", k);
            r->stops[r->n_stops++] = strdup(json_string_value(v));
        }
    } else return BAD(ae, k, string_ok ? "'%s' must be a string or a list of strings" : "'%s' must be a list of strings", k);
    return 0;
}

/* ---- shared sampling / length / stop fields -------------------------------------------------- */

static int bias_by_id(const void *a, const void *b) {
    const int32_t x = ((const g4_logit_bias *)a)->id, y = ((const g4_logit_bias *)b)->id;
    return (x > y) - (x < y);
}

/* OpenAI's logit_bias: {"<token id>": bias, ...}; the keys are decimal token ids. */
static int parse_logit_bias(const json_t *o, g4_api_request *r, g4_api_err *ae) {
    json_t *lb = json_object_get(o, "logit_bias"), *v;
    if (!lb || json_is_null(lb)) return 0;
    if (!json_is_object(lb)) return BAD(ae, "logit_bias", "'logit_bias' must be an object mapping token ids (as strings) to a bias between -100 and 100");
    const size_t n = json_object_size(lb);
    if (!n) return 0;
    if (!(r->logit_bias = malloc(n * sizeof *r->logit_bias))) return g4_api_err_status(ae, G4_ENOMEM, NULL, "out of memory");
    const char *k;
    size_t kl;
    json_object_keylen_foreach(lb, k, kl, v) {
        long long id = 0;
        size_t d = 0;
        for (; d < kl && d < 11 && k[d] >= '0' && k[d] <= '9'; d++) id = id * 10 + (k[d] - '0');
        if (!d || d != kl || id > INT32_MAX) return BAD(ae, "logit_bias", "'logit_bias' keys must be token ids (decimal integers), not \"%.40s\"", k);
        if (!json_is_number(v)) return BAD(ae, "logit_bias", "'logit_bias' values must be numbers (the bias of token %lld)", id);
        const double b = json_number_value(v);
        if (!(b >= -G4_LOGIT_BIAS_MAX && b <= G4_LOGIT_BIAS_MAX))
            return BAD(ae, "logit_bias", "'logit_bias' values must be between -100 and 100 (token %lld: %g)", id, b);
        r->logit_bias[r->n_logit_bias++] = (g4_logit_bias){.id = (int32_t)id, .bias = (float)b};
    }
    qsort(r->logit_bias, r->n_logit_bias, sizeof *r->logit_bias, bias_by_id);
    for (size_t i = 1; i < r->n_logit_bias; i++)
        if (r->logit_bias[i].id == r->logit_bias[i - 1].id) return BAD(ae, "logit_bias", "'logit_bias' gives token %d twice", r->logit_bias[i].id);
    return 0;
}

int g4_api_field_penalties(const json_t *o, g4_api_request *r, g4_api_err *ae) {
    int rc, has = 0;
    long long x;
    if ((rc = get_number(o, "presence_penalty", -G4_PENALTY_MAX, G4_PENALTY_MAX, &has, &r->presence_penalty, ae))) return rc;
    if ((rc = get_number(o, "frequency_penalty", -G4_PENALTY_MAX, G4_PENALTY_MAX, &has, &r->frequency_penalty, ae))) return rc;
    has = 0;
    if ((rc = get_number(o, "repetition_penalty", 0, 1e9, &has, &r->repetition_penalty, ae))) return rc;
    if (has && !(r->repetition_penalty > 0)) return BAD(ae, "repetition_penalty", "'repetition_penalty' must be > 0 (1 turns it off)");
    has = 0;
    if ((rc = get_int(o, "min_tokens", 0, INT64_MAX / 2, &has, &x, ae))) return rc;
    if (has) r->min_tokens = x;
    if ((rc = get_int(o, "seed", INT64_MIN, INT64_MAX, &r->has_seed, &x, ae))) return rc;
    if (r->has_seed) r->seed = (uint64_t)x;
    return parse_logit_bias(o, r, ae);
}

static int parse_common(const json_t *o, g4_api_request *r, g4_api_err *ae) {
    int rc, has = 0;
    long long x;
    if ((rc = get_number(o, "temperature", 0, 100, &r->has_temperature, &r->temperature, ae))) return rc;
    if ((rc = get_number(o, "top_p", 0, 1, &r->has_top_p, &r->top_p, ae))) return rc;
    if ((rc = get_number(o, "min_p", 0, 1, &r->has_min_p, &r->min_p, ae))) return rc;
    if ((rc = get_int(o, "top_k", -1, 1 << 30, &r->has_top_k, &x, ae))) return rc;
    if (r->has_top_k) r->top_k = x < 0 ? 0 : (int)x; /* -1 means off, as in vLLM */
    if ((rc = g4_api_field_penalties(o, r, ae))) return rc;
    /* the length field: max_completion_tokens wins over max_tokens; /generate says max_new_tokens */
    const char *lk[] = {"max_completion_tokens", "max_tokens", "max_new_tokens"};
    for (int i = 0; i < 3; i++) {
        has = 0;
        if ((rc = get_int(o, lk[i], 1, INT64_MAX / 2, &has, &x, ae))) return rc;
        if (has && r->max_tokens < 0) r->max_tokens = x;
    }
    if ((rc = g4_api_field_stops(o, "stop", 1, r, ae))) return rc;
    if ((rc = get_bool(o, "stream", &r->stream, ae))) return rc;
    if ((rc = get_bool(o, "ignore_eos", &r->ignore_eos, ae))) return rc;
    /* speculative decoding per request: true (the server's drafter), false or 0 (none), or at most N drafts per round */
    json_t *sp = json_object_get(o, "speculative");
    if (json_is_boolean(sp)) r->speculative = json_is_true(sp) ? 0 : -1;
    else if (sp && !json_is_null(sp)) {
        if ((rc = get_int(o, "speculative", 0, G4_SPEC_MAX_K, &has, &x, ae))) return rc;
        r->speculative = x == 0 ? -1 : (int)x;
    }
    json_t *so = json_object_get(o, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so)) return BAD(ae, "stream_options", "'stream_options' must be an object");
        json_t *iu = json_object_get(so, "include_usage");
        if (iu && !json_is_null(iu) && !json_is_boolean(iu)) return BAD(ae, "stream_options.include_usage", "'stream_options.include_usage' must be true or false");
        r->include_usage = iu && json_is_true(iu);
    }
    const char *model;
    if ((rc = get_string(o, "model", &model, ae))) return rc;
    if (model) { /* with its length: a name with U+0000 must not match by its prefix */
        r->model_len = json_string_length(json_object_get(o, "model"));
        if (!(r->model = malloc(r->model_len + 1))) return g4_api_err_status(ae, G4_ENOMEM, NULL, "out of memory");
        memcpy(r->model, model, r->model_len + 1);
    }
    long long n = 1;
    has = 0;
    if ((rc = get_int(o, "n", 1, G4_API_MAX_N, &has, &n, ae))) return rc;
    r->n = (int)n;
    return 0;
}

/* ---- chat messages ------------------------------------------------------------------------- */

int g4_api_messages(const json_t *messages, json_t **out, g4_api_images *images, g4_api_err *ae) {
    *out = NULL;
    if (!messages || json_is_null(messages)) return BAD(ae, "messages", "'messages' is required");
    if (!json_is_array(messages)) return BAD(ae, "messages", "'messages' must be an array");
    if (json_array_size(messages) == 0) return BAD(ae, "messages", "'messages' must not be empty");
    json_t *copy = json_deep_copy(messages);
    if (!copy) return g4_api_err_status(ae, G4_ENOMEM, NULL, "out of memory");
    size_t i;
    json_t *m;
    char param[128];
    json_array_foreach(copy, i, m) {
        snprintf(param, sizeof param, "messages[%zu]", i);
        if (!json_is_object(m)) { int st_ = BAD(ae, param, "%s must be an object", param); json_decref(copy); return st_; }
        json_t *role = json_object_get(m, "role");
        snprintf(param, sizeof param, "messages[%zu].role", i);
        if (!json_is_string(role) || strlen(json_string_value(role)) != json_string_length(role)) {
            int st_ = BAD(ae, param, "%s must be a string", param);
            json_decref(copy);
            return st_;
        }
        const char *rs = json_string_value(role);
        if (strcmp(rs, "system") && strcmp(rs, "developer") && strcmp(rs, "user") && strcmp(rs, "assistant") && strcmp(rs, "tool")) {
            int st_ = BAD(ae, param, "%s must be one of system, developer, user, assistant, tool (got \"%s\")", param, rs);
            json_decref(copy);
            return st_;
        }
        json_t *content = json_object_get(m, "content");
        snprintf(param, sizeof param, "messages[%zu].content", i);
        if (content && !json_is_null(content) && !json_is_string(content) && !json_is_array(content)) {
            json_decref(copy);
            return g4_api_err_status(ae, G4_EINVAL, param, "%s must be a string, an array of content parts or null", param);
        }
        if (json_is_array(content)) {
            size_t k;
            json_t *part;
            json_array_foreach(content, k, part) {
                json_t *type = json_is_object(part) ? json_object_get(part, "type") : NULL;
                if (!json_is_string(type)) { int st_ = BAD(ae, param, "%s[%zu] must be an object with a 'type'", param, k); json_decref(copy); return st_; }
                if (!strcmp(json_string_value(type), "image_url") && images) {
                    char at[160];
                    snprintf(at, sizeof at, "%s[%zu]", param, k);
                    if (!strcmp(rs, "system") || !strcmp(rs, "developer")) { /* the template renders only a system turn's text */
                        int st_ = UNSUPPORTED(ae, at, "%s: images go in user, assistant or tool messages, not in a %s message", at, rs);
                        json_decref(copy);
                        return st_;
                    }
                    int st_ = g4_api_images_take(part, at, images, ae);
                    if (st_) { json_decref(copy); return st_; }
                    continue;
                }
                if (strcmp(json_string_value(type), "text") != 0) {
                    int st_ = UNSUPPORTED(ae, param, "%s[%zu]: content parts of type \"%s\" are not supported (text%s)", param, k, json_string_value(type),
                                          images ? " and image_url" : " only");
                    json_decref(copy);
                    return st_;
                }
                if (!json_is_string(json_object_get(part, "text"))) { int st_ = BAD(ae, param, "%s[%zu].text must be a string", param, k); json_decref(copy); return st_; }
            }
        }
        json_t *calls = json_object_get(m, "tool_calls");
        if (calls && !json_is_null(calls)) {
            snprintf(param, sizeof param, "messages[%zu].tool_calls", i);
            if (!json_is_array(calls)) { int st_ = BAD(ae, param, "%s must be an array", param); json_decref(copy); return st_; }
            size_t k;
            json_t *c;
            json_array_foreach(calls, k, c) {
                json_t *fn = json_is_object(c) ? json_object_get(c, "function") : NULL;
                snprintf(param, sizeof param, "messages[%zu].tool_calls[%zu].function", i, k);
                if (!json_is_object(fn) || !json_is_string(json_object_get(fn, "name"))) {
                    json_decref(copy);
                    return BAD(ae, param, "%s must be an object with a string 'name'", param);
                }
                json_t *args = json_object_get(fn, "arguments");
                if (json_is_string(args)) {
                    json_error_t je;
                    json_t *obj = json_loadb(json_string_value(args), json_string_length(args), 0, &je); /* U+0000 is an error, not the end */
                    if (!json_is_object(obj)) {
                        json_decref(obj);
                        json_decref(copy);
                        snprintf(param, sizeof param, "messages[%zu].tool_calls[%zu].function.arguments", i, k);
                        return BAD(ae, param, "%s must be a JSON object (as a string or an object)", param);
                    }
                    json_object_set_new(fn, "arguments", obj);
                } else if (args && !json_is_object(args) && !json_is_null(args)) {
                    json_decref(copy);
                    snprintf(param, sizeof param, "messages[%zu].tool_calls[%zu].function.arguments", i, k);
                    return BAD(ae, param, "%s must be a JSON object (as a string or an object)", param);
                }
            }
        }
    }
    *out = copy;
    return 0;
}

/* A name Gemma's call syntax can carry (output_parser.c stops a name at these). */
int g4_api_tool_name_ok(const json_t *name) {
    if (!json_is_string(name)) return 0;
    const char *n = json_string_value(name);
    if (!*n || strlen(n) != json_string_length(name) || json_string_length(name) > 256) return 0;
    for (const char *p = n; *p; p++)
        if ((unsigned char)*p <= ' ' || *p == 0x7F || strchr("{}[]<>,\"'()", *p)) return 0;
    return 1;
}

int g4_api_set_tools(g4_api_request *r, json_t *tools, int mode, const char *name, int parallel, g4_api_err *ae) {
    const size_t n = json_is_array(tools) ? json_array_size(tools) : 0;
    r->tool_mode = mode;
    r->no_parallel_tool_calls = !parallel;
    if ((mode == G4_TOOLS_REQUIRED || mode == G4_TOOLS_NAMED) && !n)
        return BAD(ae, "tool_choice", "'tool_choice' %s needs 'tools'", mode == G4_TOOLS_NAMED ? "naming a function" : "\"required\"");
    if (mode == G4_TOOLS_NAMED) {
        int found = 0;
        for (size_t i = 0; i < n && !found; i++) {
            json_t *fn = json_object_get(json_array_get(tools, i), "function");
            found = json_is_string(json_object_get(fn, "name")) && !strcmp(json_string_value(json_object_get(fn, "name")), name);
        }
        if (!found) return BAD(ae, "tool_choice", "'tool_choice' names \"%s\", which is not among the tools", name);
        if (!(r->tool_name = strdup(name))) return g4_api_err_status(ae, G4_ENOMEM, NULL, "out of memory");
    }
    if (n) r->tools = json_incref(tools);
    return 0;
}

/* "none", "auto", "required" or {"type": "function", "function": {"name": NAME}} */
static int parse_tool_choice(const json_t *o, int *mode, const char **name, g4_api_err *ae) {
    json_t *tc = json_object_get(o, "tool_choice");
    static const char want[] = "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}";
    if (!tc || json_is_null(tc)) return 0;
    if (json_is_string(tc)) {
        const char *c = json_string_value(tc);
        if (!strcmp(c, "auto")) *mode = G4_TOOLS_AUTO;
        else if (!strcmp(c, "none")) *mode = G4_TOOLS_NONE;
        else if (!strcmp(c, "required")) *mode = G4_TOOLS_REQUIRED;
        else return BAD(ae, "tool_choice", "%s (got \"%s\")", want, c);
        return 0;
    }
    if (!json_is_object(tc)) return BAD(ae, "tool_choice", "%s", want);
    const char *k;
    json_t *v, *type = json_object_get(tc, "type"), *fn = json_object_get(tc, "function");
    json_object_foreach(tc, k, v)
        if (strcmp(k, "type") && strcmp(k, "function")) return BAD(ae, "tool_choice", "unknown field '%s' in 'tool_choice'", k);
    if (!json_is_string(type)) return BAD(ae, "tool_choice.type", "%s", want);
    if (strcmp(json_string_value(type), "function"))
        return UNSUPPORTED(ae, "tool_choice.type", "'tool_choice' of type \"%s\" is not supported (only \"function\")", json_string_value(type));
    if (!json_is_object(fn) || !json_is_string(json_object_get(fn, "name")))
        return BAD(ae, "tool_choice.function", "'tool_choice.function' must be an object with a string 'name'");
    json_object_foreach(fn, k, v)
        if (strcmp(k, "name")) return BAD(ae, "tool_choice.function", "unknown field '%s' in 'tool_choice.function'", k);
    *mode = G4_TOOLS_NAMED;
    *name = json_string_value(json_object_get(fn, "name"));
    return 0;
}

static int parse_tools(const json_t *o, json_t *chat, g4_api_request *r, g4_api_err *ae) {
    json_t *tools = json_object_get(o, "tools");
    int rc, ptc = 1, mode = G4_TOOLS_AUTO;
    const char *name = NULL;
    if ((rc = parse_tool_choice(o, &mode, &name, ae))) return rc;
    if ((rc = get_bool(o, "parallel_tool_calls", &ptc, ae))) return rc;
    if (tools && !json_is_null(tools) && !json_is_array(tools)) return BAD(ae, "tools", "'tools' must be an array");
    size_t n = json_is_array(tools) ? json_array_size(tools) : 0, i;
    json_t *t;
    char param[48];
    if (n) json_array_foreach(tools, i, t) {
        snprintf(param, sizeof param, "tools[%zu]", i);
        json_t *type = json_is_object(t) ? json_object_get(t, "type") : NULL;
        if (!json_is_string(type) || strcmp(json_string_value(type), "function"))
            return BAD(ae, param, "%s must be an object with \"type\": \"function\"", param);
        json_t *fn = json_object_get(t, "function");
        if (!json_is_object(fn) || !json_is_string(json_object_get(fn, "name")))
            return BAD(ae, param, "%s.function must be an object with a string 'name'", param);
        snprintf(param, sizeof param, "tools[%zu].function.name", i);
        if (!g4_api_tool_name_ok(json_object_get(fn, "name")))
            return BAD(ae, param, "%s must be a non-empty name without white space or any of {}[]<>,\"'() (Gemma's tool-call format cannot carry them)", param);
        snprintf(param, sizeof param, "tools[%zu].function", i);
        json_t *params = json_object_get(fn, "parameters"), *strict = json_object_get(fn, "strict");
        if (params && !json_is_null(params) && !json_is_object(params)) return BAD(ae, param, "%s.parameters must be an object", param);
        if (strict && !json_is_null(strict) && !json_is_boolean(strict)) return BAD(ae, param, "%s.strict must be true or false", param);
        if (json_is_true(strict)) r->strict_tools = 1;
    }
    if ((rc = g4_api_set_tools(r, n ? tools : NULL, mode, name, ptc, ae))) return rc;
    if (n && mode != G4_TOOLS_NONE) json_object_set(chat, "tools", tools);
    return 0;
}

/* response_format: {"type": "text"}, {"type": "json_object"} or {"type": "json_schema",
 * "json_schema": {"name", "schema", "strict"?, "description"?}}. Unknown keys are refused: a
 * schema under the wrong key must not silently go unenforced. */
static int parse_response_format(const json_t *o, g4_api_request *r, g4_api_err *ae) {
    json_t *rf = json_object_get(o, "response_format");
    if (!rf || json_is_null(rf)) return 0;
    json_t *type = json_is_object(rf) ? json_object_get(rf, "type") : NULL, *v;
    if (!json_is_string(type)) return BAD(ae, "response_format", "'response_format' must be an object with a 'type' (\"text\", \"json_object\" or \"json_schema\")");
    const char *t = json_string_value(type), *k;
    const int schema = !strcmp(t, "json_schema");
    if (strcmp(t, "text") && strcmp(t, "json_object") && !schema)
        return BAD(ae, "response_format.type", "'response_format.type' must be \"text\", \"json_object\" or \"json_schema\" (got \"%s\")", t);
    json_object_foreach(rf, k, v)
        if (strcmp(k, "type") && !(schema && !strcmp(k, "json_schema")))
            return BAD(ae, "response_format", "unknown field '%s' in 'response_format'%s", k,
                       !strcmp(k, "schema") || !strcmp(k, "json_schema") ? " (a schema goes in response_format.json_schema.schema, with \"type\": \"json_schema\")" : "");
    if (!schema) {
        r->out_format = !strcmp(t, "text") ? G4_FMT_TEXT : G4_FMT_JSON_OBJECT;
        return 0;
    }
    json_t *js = json_object_get(rf, "json_schema");
    if (!json_is_object(js)) return BAD(ae, "response_format.json_schema", "'response_format.json_schema' must be an object with 'name' and 'schema'");
    return g4_api_schema_format(js, "response_format.json_schema", NULL, r, ae);
}

int g4_api_schema_format(const json_t *js, const char *where, const char *also, g4_api_request *r, g4_api_err *ae) {
    char at[96];
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)js, k, v) {
        snprintf(at, sizeof at, "%s.%s", where, k);
        if (!strcmp(k, "name")) {
            size_t l = json_is_string(v) ? json_string_length(v) : 0;
            int ok = l >= 1 && l <= 64;
            for (size_t i = 0; ok && i < l; i++) {
                char ch = json_string_value(v)[i];
                ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' || ch == '-';
            }
            if (!ok) return BAD(ae, at, "'%s' must be 1 to 64 letters, digits, '_' or '-'", at);
        } else if (!strcmp(k, "schema")) {
            if (!json_is_object(v) && !json_is_boolean(v)) return BAD(ae, at, "'%s' must be a JSON Schema (an object)", at);
        } else if (!strcmp(k, "strict")) {
            if (!json_is_null(v) && !json_is_boolean(v)) return BAD(ae, at, "'%s' must be true or false", at);
        } else if (!strcmp(k, "description")) {
            if (!json_is_string(v)) return BAD(ae, at, "'%s' must be a string", at);
        } else if (!also || strcmp(k, also)) {
            return BAD(ae, where, "unknown field '%s' in '%s' (name, schema, strict, description)", k, where);
        }
    }
    snprintf(at, sizeof at, "%s.name", where);
    if (!json_object_get(js, "name")) return BAD(ae, at, "'%s' is required", at);
    snprintf(at, sizeof at, "%s.schema", where);
    if (!json_object_get(js, "schema")) return BAD(ae, at, "'%s' is required", at);
    r->out_format = G4_FMT_JSON_SCHEMA;
    json_decref(r->out_schema);
    r->out_schema = json_incref(json_object_get(js, "schema"));
    return 0;
}

/* The request field a compile error's part names, in the API's own terms. */
static void constraint_param(const g4_api_request *q, const char *part, char *out, size_t cap) {
    size_t i;
    int used = 0;
    if (!strcmp(part, "response_format") || !strcmp(part, "regex") || !strcmp(part, "choice")) {
        const int schema = q->out_format == G4_FMT_JSON_SCHEMA;
        if (q->guided) {
            snprintf(out, cap, "%s", q->out_format == G4_FMT_REGEX ? "guided_regex" : q->out_format == G4_FMT_CHOICE ? "guided_choice" : "guided_json");
            return;
        }
        snprintf(out, cap, "%s", q->kind == G4_API_GENERATE ? "json_schema"
                                 : q->kind == G4_API_RESPONSES ? (schema ? "text.format.schema" : "text.format")
                                 : q->kind == G4_API_ANTHROPIC ? "output_config.format.schema"
                                 : schema ? "response_format.json_schema.schema" : "response_format");
        return;
    }
    if (sscanf(part, "tools[%zu].function%n", &i, &used) == 1 && used > 0 && q->kind != G4_API_CHAT) {
        const char *rest = part + used; /* "" or ".parameters" */
        if (q->kind == G4_API_ANTHROPIC) snprintf(out, cap, "tools[%zu]%s", i, *rest ? ".input_schema" : "");
        else snprintf(out, cap, "tools[%zu]%s", i, rest);
        return;
    }
    snprintf(out, cap, "%s", part);
}

static void output_spec(const g4_api_request *q, int thought, g4_output_spec *sp) {
    g4_output_spec_init(sp);
    sp->format = (g4_out_format)q->out_format;
    sp->schema = q->out_schema;
    sp->regex = q->out_regex;
    sp->regex_len = q->out_regex_len;
    sp->choices = q->out_choices;
    sp->tools = q->tools;
    sp->tool_mode = (g4_tool_mode)q->tool_mode;
    sp->tool_name = q->tool_name;
    sp->parallel_calls = !q->no_parallel_tool_calls;
    sp->strict_calls = q->strict_tools;
    sp->chat = q->parse_output;
    /* a thinking block first only where the model may think: with thinking off the template ends
     * the prompt with an empty one, and a model let into another one may never leave it */
    const int think = q->chat && json_is_true(json_object_get(q->chat, "enable_thinking"));
    sp->thought = !sp->chat ? G4_THOUGHT_NONE : thought ? G4_THOUGHT_INSIDE : think ? G4_THOUGHT_OPTIONAL : G4_THOUGHT_NONE;
}

int g4_api_constrains(const g4_api_request *q) {
    g4_output_spec sp;
    output_spec(q, 0, &sp);
    return g4_output_spec_constrains(&sp);
}

int g4_api_constraint(const g4_api_request *q, int thought, g4_grammar **out, g4_api_err *ae) {
    return g4_api_constraint_cached(q, thought, NULL, NULL, NULL, out, ae);
}

int g4_api_constraint_cached(const g4_api_request *q, int thought, g4_grammar_cache *cache, const g4_grammar_limits *lim,
                             g4_grammar_compile_stats *st, g4_grammar **out, g4_api_err *ae) {
    g4_output_spec sp;
    output_spec(q, thought, &sp);
    char part[64], param[80];
    g4_err err = {0};
    if (!g4_output_compile_cached(cache, &sp, lim, st, out, part, sizeof part, &err)) return 0;
    constraint_param(q, part, param, sizeof param);
    return g4_api_err_from(ae, &err, param[0] ? param : NULL);
}

int g4_api_check_stops(const g4_api_request *r, const char *stop_field, g4_api_err *ae) {
    if (!r->n_stops) return 0;
    const int json = r->out_format != G4_FMT_TEXT, calls = r->tool_mode == G4_TOOLS_REQUIRED || r->tool_mode == G4_TOOLS_NAMED;
    if (!json && !calls) return 0;
    return UNSUPPORTED(ae, stop_field, "'%s' cannot be combined with %s: a stop string would cut the constrained output into something "
                       "invalid (the grammar ends the answer where it is complete)", stop_field,
                       calls ? "a required tool call (tool_choice)" : "structured output (a JSON, regex or choice format)");
}

/* vLLM's guided decoding fields (chat and completions): guided_json (a schema, or its JSON text),
 * guided_regex (the answer matches it whole), guided_choice (the answer is one of the strings)
 * map onto the compiler; guided_grammar (EBNF) and guided_whitespace_pattern do not and are
 * refused, as is vLLM's newer structured_outputs object; guided_decoding_backend names vLLM's
 * engine and is accepted and ignored (one compiler enforces every format here). */
static int parse_guided(const json_t *o, g4_api_request *r, g4_api_err *ae) {
    static const char *const fields[] = {"guided_json", "guided_regex", "guided_choice", "guided_grammar", NULL};
    const char *given = NULL;
    json_t *v = NULL;
    for (int i = 0; fields[i]; i++) {
        json_t *x = json_object_get(o, fields[i]);
        if (!x || json_is_null(x)) continue;
        if (given) return BAD(ae, fields[i], "give one of guided_json, guided_regex and guided_choice (got '%s' and '%s')", given, fields[i]);
        given = fields[i];
        v = x;
    }
    json_t *be = json_object_get(o, "guided_decoding_backend"), *ws = json_object_get(o, "guided_whitespace_pattern");
    json_t *so = json_object_get(o, "structured_outputs");
    if (so && !json_is_null(so)) /* vLLM 0.10's successor of guided_*: refused rather than ignored */
        return UNSUPPORTED(ae, "structured_outputs", "'structured_outputs' is not supported; use guided_json, guided_regex, guided_choice or "
                           "response_format (docs/structured-output.md)");
    if (be && !json_is_null(be) && !json_is_string(be)) return BAD(ae, "guided_decoding_backend", "'guided_decoding_backend' must be a string");
    if (ws && !json_is_null(ws))
        return UNSUPPORTED(ae, "guided_whitespace_pattern", "'guided_whitespace_pattern' is not supported (white space between JSON tokens is at "
                           "most one space; see docs/structured-output.md)");
    if (!given) return 0;
    if (r->out_format != G4_FMT_TEXT) return BAD(ae, given, "'%s' and 'response_format' both constrain the output; give one", given);
    if (!strcmp(given, "guided_grammar"))
        return UNSUPPORTED(ae, given, "'guided_grammar' (an EBNF / Lark grammar) is not supported; use guided_json, guided_regex or guided_choice");
    r->guided = 1;
    if (!strcmp(given, "guided_json")) {
        json_t *sch = json_incref(v);
        if (json_is_string(v)) { /* vLLM takes the schema's JSON text too */
            json_decref(sch);
            sch = json_loadb(json_string_value(v), json_string_length(v), JSON_DECODE_ANY, NULL);
        }
        if (!json_is_object(sch) && !json_is_boolean(sch)) {
            json_decref(sch);
            return BAD(ae, given, "'guided_json' must be a JSON Schema (an object, or its JSON text)");
        }
        r->out_format = G4_FMT_JSON_SCHEMA;
        r->out_schema = sch;
    } else if (!strcmp(given, "guided_regex")) {
        if (!json_is_string(v) || !json_string_length(v)) return BAD(ae, given, "'guided_regex' must be a non-empty string");
        r->out_regex_len = json_string_length(v);
        if (!(r->out_regex = malloc(r->out_regex_len + 1))) return g4_api_err_status(ae, G4_ENOMEM, NULL, "out of memory");
        memcpy(r->out_regex, json_string_value(v), r->out_regex_len + 1);
        r->out_format = G4_FMT_REGEX;
    } else {
        size_t i;
        json_t *x;
        if (!json_is_array(v) || !json_array_size(v)) return BAD(ae, given, "'guided_choice' must be a non-empty list of strings");
        json_array_foreach(v, i, x) if (!json_is_string(x)) return BAD(ae, given, "'guided_choice' must be a non-empty list of strings");
        r->out_format = G4_FMT_CHOICE;
        r->out_choices = json_incref(v);
    }
    return 0;
}

static int parse_chat(const json_t *o, g4_api_request *r, g4_api_err *ae) {
    json_t *msgs;
    int rc = g4_api_messages(json_object_get(o, "messages"), &msgs, &r->images, ae);
    if (rc) return rc;
    json_t *chat = json_object();
    r->chat = chat;
    /* chat_template_kwargs first: the request's own fields below win over it */
    json_t *kw = json_object_get(o, "chat_template_kwargs");
    if (kw && !json_is_null(kw)) {
        if (!json_is_object(kw)) { json_decref(msgs); return BAD(ae, "chat_template_kwargs", "'chat_template_kwargs' must be an object"); }
        const char *k;
        json_t *v;
        json_object_foreach(kw, k, v) if (strcmp(k, "messages") && strcmp(k, "tools")) json_object_set(chat, k, v);
        json_t *et = json_object_get(kw, "enable_thinking");
        if (et && !json_is_boolean(et) && !json_is_null(et)) { json_decref(msgs); return BAD(ae, "chat_template_kwargs.enable_thinking", "'enable_thinking' must be true or false"); }
    }
    json_object_set_new(chat, "messages", msgs);
    int think = -1;
    if ((rc = get_bool(o, "enable_thinking", &think, ae))) return rc;
    if (think >= 0) json_object_set_new(chat, "enable_thinking", json_boolean(think));
    if (!json_object_get(chat, "add_generation_prompt")) json_object_set_new(chat, "add_generation_prompt", json_true());
    if ((rc = parse_tools(o, chat, r, ae))) return rc;
    if ((rc = parse_response_format(o, r, ae))) return rc;
    if ((rc = parse_guided(o, r, ae))) return rc;
    r->parse_output = 1;
    return 0;
}

/* Chat: "logprobs": true and "top_logprobs": 0..20. Completions: "logprobs": N (0..20), the
 * top N (and always the chosen token). /generate: neither. */
static int parse_logprobs(const json_t *o, g4_api_kind kind, g4_api_request *r, g4_api_err *ae) {
    json_t *lp = json_object_get(o, "logprobs"), *top = json_object_get(o, "top_logprobs");
    int rc, has = 0;
    long long x = 0;
    if (kind == G4_API_CHAT) {
        if ((rc = get_bool(o, "logprobs", &r->logprobs, ae))) return rc;
        if ((rc = get_int(o, "top_logprobs", 0, G4_TOP_LOGPROBS_MAX, &has, &x, ae))) return rc;
        if (has && x > 0 && !r->logprobs) return BAD(ae, "top_logprobs", "'top_logprobs' needs \"logprobs\": true");
        r->top_logprobs = (int)x;
        return 0;
    }
    if (top && !json_is_null(top)) return BAD(ae, "top_logprobs", "'top_logprobs' is a chat completions field; completions take \"logprobs\": N");
    if (kind == G4_API_GENERATE) {
        if (lp && !json_is_null(lp)) return UNSUPPORTED(ae, "logprobs", "/generate has no logprobs; use /v1/completions or /v1/chat/completions");
        return 0;
    }
    if (lp && json_is_boolean(lp)) return BAD(ae, "logprobs", "'logprobs' of completions is the number of alternatives (0 to %d), not a boolean", G4_TOP_LOGPROBS_MAX);
    if ((rc = get_int(o, "logprobs", 0, G4_TOP_LOGPROBS_MAX, &has, &x, ae))) return rc;
    r->logprobs = has;
    r->top_logprobs = (int)x;
    return 0;
}

/* One prompt: a string, or a non-empty list of token ids (where names it in errors). */
static int one_prompt(const json_t *p, const char *where, g4_api_prompt *out, g4_api_err *ae) {
    if (json_is_string(p)) {
        out->len = json_string_length(p);
        if (!(out->text = malloc(out->len + 1))) return g4_api_err_status(ae, G4_ENOMEM, NULL, "out of memory");
        memcpy(out->text, json_string_value(p), out->len + 1);
        return 0;
    }
    if (!json_is_array(p)) return BAD(ae, "prompt", "%s must be a string or a list of token ids", where);
    size_t n = json_array_size(p), i;
    json_t *v;
    if (n == 0) return BAD(ae, "prompt", "%s must not be empty", where);
    json_array_foreach(p, i, v)
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX)
            return BAD(ae, "prompt", "%s must be a string or a list of token ids", where);
    if (!(out->ids = malloc(sizeof(int32_t) * n))) return g4_api_err_status(ae, G4_ENOMEM, NULL, "out of memory");
    json_array_foreach(p, i, v) out->ids[i] = (int32_t)json_integer_value(v);
    out->n_ids = n;
    return 0;
}

/* "prompt": a string, token ids, or a batch: a list of strings and / or lists of token ids
 * (lm-eval-harness sends those); a batch of one is a single prompt. */
static int parse_completion_prompt(const json_t *o, g4_api_request *r, g4_api_err *ae) {
    json_t *p = json_object_get(o, "prompt");
    if (!p || json_is_null(p)) return BAD(ae, "prompt", "'prompt' is required");
    const json_t *first = json_is_array(p) ? json_array_get(p, 0) : NULL;
    const int batch = json_is_string(first) || json_is_array(first);
    if (batch && json_array_size(p) == 1) p = json_array_get(p, 0);
    else if (batch) {
        size_t n = json_array_size(p), i;
        if (n > G4_API_MAX_PROMPTS) return BAD(ae, "prompt", "'prompt' holds %zu prompts; at most %d go in one request", n, G4_API_MAX_PROMPTS);
        if (!(r->batch = calloc(n, sizeof *r->batch))) return g4_api_err_status(ae, G4_ENOMEM, NULL, "out of memory");
        r->n_batch = n;
        json_t *v;
        char where[48];
        json_array_foreach(p, i, v) {
            snprintf(where, sizeof where, "'prompt[%zu]'", i);
            int rc = one_prompt(v, where, &r->batch[i], ae);
            if (rc) return rc;
        }
        return 0;
    }
    g4_api_prompt one = {0};
    int rc = one_prompt(p, "'prompt'", &one, ae);
    r->prompt = one.text;
    r->prompt_len = one.len;
    r->prompt_ids = one.ids;
    r->n_prompt_ids = one.n_ids;
    return rc;
}

int g4_api_parse(g4_api_kind kind, const char *body, size_t len, g4_api_request *r, g4_api_err *ae) {
    memset(r, 0, sizeof *r);
    r->kind = kind;
    r->max_tokens = -1;
    json_t *o;
    int rc = g4_api_parse_object(body, len, &o, ae);
    if (rc) return rc;
    rc = parse_common(o, r, ae);
    if (!rc) rc = parse_logprobs(o, kind, r, ae);
    if (!rc && kind == G4_API_GENERATE && r->n != 1) rc = UNSUPPORTED(ae, "n", "/generate gives one answer (n = 1); use /v1/chat/completions or /v1/completions");
    if (!rc && kind == G4_API_CHAT) rc = parse_chat(o, r, ae);
    if (!rc && kind == G4_API_COMPLETIONS) {
        rc = parse_completion_prompt(o, r, ae);
        if (!rc) rc = get_bool(o, "echo", &r->echo, ae);
        if (!rc && json_object_get(o, "suffix") && !json_is_null(json_object_get(o, "suffix"))) rc = UNSUPPORTED(ae, "suffix", "'suffix' is not supported");
        r->add_special = 1;
        if (!rc) rc = get_bool(o, "add_special_tokens", &r->add_special, ae);
        if (!rc) rc = parse_response_format(o, r, ae);
        if (!rc) rc = parse_guided(o, r, ae);
    }
    if (!rc && kind == G4_API_GENERATE) {
        const char *prompt;
        int raw = 0, think = -1;
        rc = get_string(o, "prompt", &prompt, ae);
        if (!rc && !prompt) rc = BAD(ae, "prompt", "'prompt' is required (a string)");
        if (!rc) rc = get_bool(o, "raw", &raw, ae);
        if (!rc) rc = get_bool(o, "enable_thinking", &think, ae);
        json_t *js = json_object_get(o, "json_schema");
        if (!rc && js && !json_is_null(js)) { /* the answer is JSON of this schema */
            if (!json_is_object(js) && !json_is_boolean(js)) rc = BAD(ae, "json_schema", "'json_schema' must be a JSON Schema (an object)");
            r->out_format = G4_FMT_JSON_SCHEMA;
            r->out_schema = json_incref(js);
        }
        if (!rc && r->stream) rc = UNSUPPORTED(ae, "stream", "/generate does not stream; use /v1/chat/completions or /v1/completions with \"stream\": true");
        json_t *imgs = json_object_get(o, "images");
        if (!rc && imgs && !json_is_null(imgs) && !json_is_array(imgs)) rc = BAD(ae, "images", "'images' must be a list of base64 strings");
        size_t k;
        json_t *im;
        json_array_foreach(imgs, k, im) { /* base64 (or data URLs), in the order of the prompt's placeholders */
            if (rc) break;
            char at[32];
            snprintf(at, sizeof at, "images[%zu]", k);
            if (!json_is_string(im)) { rc = BAD(ae, at, "%s must be a base64 string", at); break; }
            const int is_url = !strncasecmp(json_string_value(im), "data:", 5) || !strncasecmp(json_string_value(im), "http://", 7) ||
                               !strncasecmp(json_string_value(im), "https://", 8);
            json_t *part = is_url ? json_pack("{s:s,s:O}", "type", "image_url", "image_url", im) : NULL;
            if (!is_url) {
                const size_t l = json_string_length(im);
                char *u = malloc(l + 32);
                if (u) {
                    memcpy(u, "data:image/*;base64,", 20);
                    memcpy(u + 20, json_string_value(im), l);
                    part = json_pack("{s:s,s:s%}", "type", "image_url", "image_url", u, l + 20);
                    free(u);
                }
            }
            rc = part ? g4_api_images_take(part, at, &r->images, ae) : g4_api_err_status(ae, G4_ENOMEM, NULL, "out of memory");
            json_decref(part);
        }
        if (!rc && raw && r->images.n)
            rc = BAD(ae, "images", "'images' go with a chat prompt, not a raw one (with \"raw\": true the prompt is the model's text as it is)");
        if (!rc && raw) {
            r->prompt_len = json_string_length(json_object_get(o, "prompt"));
            r->prompt = malloc(r->prompt_len + 1);
            if (r->prompt) memcpy(r->prompt, prompt, r->prompt_len + 1);
            r->add_special = 1;
            rc = get_bool(o, "add_special_tokens", &r->add_special, ae);
        } else if (!rc) {
            json_t *msg = json_object();
            json_object_set_new(msg, "role", json_string("user"));
            if (r->images.n) { /* the images first, then the text (as g4tp run puts them) */
                json_t *parts = json_array();
                for (size_t i = 0; i < r->images.n; i++) json_array_append_new(parts, json_pack("{s:s}", "type", "image"));
                json_array_append_new(parts, json_pack("{s:s,s:O}", "type", "text", "text", json_object_get(o, "prompt")));
                json_object_set_new(msg, "content", parts);
            } else {
                json_object_set(msg, "content", json_object_get(o, "prompt"));
            }
            r->chat = json_object();
            json_object_set_new(r->chat, "messages", json_pack("[o]", msg));
            json_object_set_new(r->chat, "add_generation_prompt", json_true());
            if (think >= 0) json_object_set_new(r->chat, "enable_thinking", json_boolean(think));
            r->parse_output = 1;
        }
    }
    if (!rc) rc = g4_api_check_stops(r, "stop", ae);
    json_decref(o);
    if (rc) g4_api_request_free(r);
    return rc;
}

void g4_api_request_free(g4_api_request *r) {
    json_decref(r->chat);
    json_decref(r->extra);
    free(r->prompt);
    free(r->prompt_ids);
    for (size_t i = 0; i < r->n_batch; i++) { free(r->batch[i].text); free(r->batch[i].ids); }
    free(r->batch);
    for (size_t i = 0; i < r->n_stops; i++) free(r->stops[i]);
    free(r->model);
    json_decref(r->out_schema);
    free(r->out_regex);
    json_decref(r->out_choices);
    json_decref(r->tools);
    free(r->tool_name);
    free(r->logit_bias);
    g4_api_images_free(&r->images);
    memset(r, 0, sizeof *r);
    r->max_tokens = -1;
}

/* ---- parsed output ------------------------------------------------------------------------ */

typedef struct { char *p; size_t n, cap; } buf_t;

static int buf_add(buf_t *b, const char *p, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t c = b->cap ? b->cap * 2 : 256;
        while (c < b->n + n + 1) c *= 2;
        char *q = realloc(b->p, c);
        if (!q) return G4_ENOMEM;
        b->p = q;
        b->cap = c;
    }
    if (n) memcpy(b->p + b->n, p, n);
    b->n += n;
    b->p[b->n] = 0;
    return G4_OK;
}

static int collect_text(buf_t *acc, const g4_out_event *ev, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (ev[i].kind != G4_OUT_TOOL_CALL && buf_add(&acc[ev[i].kind], ev[i].text, ev[i].len)) return G4_ENOMEM;
    return G4_OK;
}

/* The streaming parser's deltas carry lengths, the whole-text result does not: content and
 * reasoning are rebuilt from the deltas, calls and the malformed count come from the result. */
int g4_api_parse_output(const char *text, size_t len, int start_in_thought, g4_api_output *out, g4_err *err) {
    memset(out, 0, sizeof *out);
    g4_output_parse_opts po = {.start_in_thought = start_in_thought};
    g4_output_stream *s = NULL;
    buf_t acc[2] = {{0}};
    const g4_out_event *ev;
    size_t n;
    int rc = g4_output_stream_create(&po, &s, err);
    if (!rc) rc = g4_output_stream_feed(s, text ? text : "", len, &ev, &n, err);
    if (!rc && collect_text(acc, ev, n)) rc = g4_err_set(err, G4_ENOMEM, "out of memory");
    if (!rc) rc = g4_output_stream_finish(s, &ev, &n, err);
    if (!rc && collect_text(acc, ev, n)) rc = g4_err_set(err, G4_ENOMEM, "out of memory");
    if (!rc && (buf_add(&acc[0], "", 0) || buf_add(&acc[1], "", 0))) rc = g4_err_set(err, G4_ENOMEM, "out of memory");
    if (!rc) rc = g4_output_stream_take(s, &out->po, err);
    g4_output_stream_free(s);
    if (rc) {
        free(acc[0].p);
        free(acc[1].p);
        return rc;
    }
    free(out->po.reasoning);
    free(out->po.content);
    out->po.reasoning = acc[G4_OUT_REASONING].p;
    out->reasoning_len = acc[G4_OUT_REASONING].n;
    out->po.content = acc[G4_OUT_CONTENT].p;
    out->content_len = acc[G4_OUT_CONTENT].n;
    return G4_OK;
}

void g4_api_output_free(g4_api_output *o) {
    g4_parsed_output_free(&o->po);
    o->content_len = o->reasoning_len = 0;
}

/* ---- responses ------------------------------------------------------------------------------ */

const char *g4_api_finish_reason(const g4_api_result *r) {
    if (r->parsed && r->parsed->po.n_calls && !strcmp(r->finish_reason, "stop")) return "tool_calls";
    return r->finish_reason;
}

json_t *g4_api_usage(size_t prompt_tokens, size_t completion_tokens, size_t cached_tokens) {
    return json_pack("{s:I,s:I,s:I,s:{s:I}}", "prompt_tokens", (json_int_t)prompt_tokens, "completion_tokens", (json_int_t)completion_tokens,
                     "total_tokens", (json_int_t)(prompt_tokens + completion_tokens), "prompt_tokens_details", "cached_tokens",
                     (json_int_t)cached_tokens);
}

size_t g4_api_args_pieces(const char *json, size_t len, size_t *ends, size_t max) {
    size_t n = 0;
    int depth = 0, str = 0;
    for (size_t i = 0; i < len; i++) {
        char ch = json[i];
        if (str) {
            if (ch == '\\') i++;
            else if (ch == '"') str = 0;
        } else if (ch == '"') {
            str = 1;
        } else if (ch == '{' || ch == '[') {
            depth++;
        } else if (ch == '}' || ch == ']') {
            depth--;
        } else if (ch == ',' && depth == 1 && i + 1 < len) {
            if (n < max) ends[n] = i + 1;
            n++;
        }
    }
    if (n < max) ends[n] = len;
    return n + 1;
}

json_t *g4_api_tool_call(const char *resp_id, size_t k, const g4_tool_call *c) {
    char id[96];
    const char *tail = strchr(resp_id, '-');
    snprintf(id, sizeof id, "call_%s_%zu", tail ? tail + 1 : resp_id, k);
    return json_pack("{s:s,s:s,s:{s:s,s:s}}", "id", id, "type", "function", "function", "name", c->name, "arguments",
                     c->arguments_json ? c->arguments_json : "{}");
}

static json_t *envelope(const g4_api_result *r, const char *object) {
    return json_pack("{s:s,s:s,s:I,s:s}", "id", r->id, "object", object, "created", (json_int_t)r->created, "model", r->model);
}

static json_t *choice_logprobs(const g4_api_result *r) { return r->logprobs ? json_incref(r->logprobs) : json_null(); }

static json_t *chat_choice(const g4_api_result *r) {
    json_t *msg = json_object();
    json_object_set_new(msg, "role", json_string("assistant"));
    const g4_parsed_output *po = r->parsed ? &r->parsed->po : NULL;
    const char *content = po ? po->content : r->text ? r->text : "";
    size_t clen = po ? r->parsed->content_len : r->text ? r->text_len : 0;
    if (po && po->n_calls && !clen) json_object_set_new(msg, "content", json_null());
    else json_object_set_new(msg, "content", json_stringn(content, clen));
    if (po && r->parsed->reasoning_len) json_object_set_new(msg, "reasoning_content", json_stringn(po->reasoning, r->parsed->reasoning_len));
    if (po && po->n_calls) {
        json_t *calls = json_array();
        for (size_t k = 0; k < po->n_calls; k++) json_array_append_new(calls, g4_api_tool_call(r->id, k, &po->calls[k]));
        json_object_set_new(msg, "tool_calls", calls);
    }
    return json_pack("{s:i,s:o,s:s,s:o}", "index", r->index, "message", msg, "finish_reason", g4_api_finish_reason(r), "logprobs",
                     choice_logprobs(r));
}

static json_t *completion_choice(const g4_api_result *r) {
    return json_pack("{s:i,s:s%,s:s,s:o}", "index", r->index, "text", r->text ? r->text : "", r->text ? r->text_len : 0, "finish_reason",
                     r->finish_reason, "logprobs", choice_logprobs(r));
}

/* The envelope of r[0], the choices in order, usage: each prompt once, every choice's tokens. */
static json_t *response_n(const g4_api_result *r, size_t n, const char *object, json_t *(*choice)(const g4_api_result *)) {
    json_t *j = envelope(r, object), *choices = json_array();
    size_t completion = 0, prompt = 0, cached = 0;
    for (size_t i = 0; i < n; i++) {
        json_array_append_new(choices, choice(&r[i]));
        completion += r[i].completion_tokens;
        if (i && !r[i].new_prompt) continue;
        prompt += r[i].prompt_tokens;
        cached += r[i].cached_tokens;
    }
    json_object_set_new(j, "choices", choices);
    json_object_set_new(j, "usage", g4_api_usage(prompt, completion, cached));
    return j;
}

json_t *g4_api_chat_response_n(const g4_api_result *r, size_t n) { return response_n(r, n, "chat.completion", chat_choice); }
json_t *g4_api_completion_response_n(const g4_api_result *r, size_t n) { return response_n(r, n, "text_completion", completion_choice); }
json_t *g4_api_chat_response(const g4_api_result *r) { return g4_api_chat_response_n(r, 1); }
json_t *g4_api_completion_response(const g4_api_result *r) { return g4_api_completion_response_n(r, 1); }

json_t *g4_api_generate_response(const g4_api_result *r) {
    const g4_parsed_output *po = r->parsed ? &r->parsed->po : NULL;
    json_t *j = json_object();
    if (po) json_object_set_new(j, "response", json_stringn(po->content, r->parsed->content_len));
    else json_object_set_new(j, "response", json_stringn(r->text ? r->text : "", r->text ? r->text_len : 0));
    json_object_set_new(j, "prompt_tokens", json_integer((json_int_t)r->prompt_tokens));
    json_object_set_new(j, "cached_tokens", json_integer((json_int_t)r->cached_tokens));
    json_object_set_new(j, "completion_tokens", json_integer((json_int_t)r->completion_tokens));
    json_object_set_new(j, "finish_reason", json_string(g4_api_finish_reason(r)));
    json_object_set_new(j, "time_to_first_token_ms", json_real(r->ttft_ms));
    json_object_set_new(j, "tokens_per_second", json_real(r->tokens_per_s));
    if (po && r->parsed->reasoning_len) json_object_set_new(j, "reasoning", json_stringn(po->reasoning, r->parsed->reasoning_len));
    if (po && po->n_calls) {
        json_t *calls = json_array();
        for (size_t k = 0; k < po->n_calls; k++)
            json_array_append_new(calls, json_pack("{s:s,s:O}", "name", po->calls[k].name, "arguments",
                                                   po->calls[k].arguments ? po->calls[k].arguments : json_object()));
        json_object_set_new(j, "tool_calls", calls);
    }
    return j;
}
