/* json_schema.c — output specs and JSON Schemas compiled into grammars (g4_output_compile in
 * grammar.h): a JSON object, a JSON Schema, a regex, a choice or tool calls; the grammar accepts
 * only outputs that parse and validate.
 *
 * Every schema node becomes NFA paths between two states of the rule being built (gen_m). A
 * $ref is inlined unless its target is already being inlined further up (recursion) or is large
 * and used again: then it becomes a call of a rule of its own. Array items that would be copied
 * many times (minItems / maxItems) become a rule too when large. Strings are DFAs of their
 * content (encoding x length x pattern x the markers a chat turn must not contain) embedded
 * between the quotes. At the end each rule is determinized and constrain.c builds the grammar.
 * Every automaton is charged to the compile's budget (fsa.h), which enforces the limits.
 *
 * JSON Schema coverage (docs/structured-output.md has the details): type (and type lists,
 * nullable), properties, required, additionalProperties (true / false / a schema; absent means
 * no extra properties unless the object declares no properties at all), enum, const, items,
 * prefixItems (and the older items-array / additionalItems), minItems, maxItems, anyOf, oneOf
 * (alternatives must be provably disjoint as JSON Schema validates them: json_schema_oneof.c), allOf (merged: objects, bounds, enums), local $ref
 * and $defs / definitions (recursion through rule calls), string minLength / maxLength /
 * pattern (regex.h) / format (date, time, date-time, uuid, email, ipv4; int32 / int64 on
 * integers, float / double on numbers), integer and number
 * minimum / maximum / exclusiveMinimum / exclusiveMaximum (whole-number bounds for numbers),
 * uniqueItems false, unevaluatedProperties / unevaluatedItems false, minProperties /
 * maxProperties / multipleOf where the rest of the schema already implies them. Annotations
 * (title, description, default, examples, ...) and x-* keywords are ignored. Any other keyword
 * is refused with G4_EUNSUPPORTED naming it and where it is; an invalid schema is G4_EINVAL.
 *
 * Generated text: JSON with at most one space between tokens (after '{' '[' ',' ':' and before
 * '}' ']'), never a newline, strings in one canonical escaping, numbers of at most 18 integer, 16
 * fraction and 2 exponent digits; objects in the schema's property order. Tool calls in
 * Gemma-4's format: <|tool_call>call:NAME{key:value,...}<tool_call|>, keys sorted as the chat
 * template writes them, strings between <|"|> tokens. In a chat turn no string holds the byte
 * pair "<|" or the texts "<turn|>" and "<eos>", which the output parser would take for markup:
 * literal strings (const, enum, keys) write such a '<' as \u003c in JSON and cannot be written in
 * a tool call. */
#include "grammar/json_schema_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- keywords ---------------------------------------------------------------------------------- */

static const char *const ANNOTATIONS[] = {"title", "description", "default", "examples", "example", "$comment", "$schema", "$id", "deprecated",
                                          "readOnly", "writeOnly", "discriminator", "contentEncoding", "contentMediaType", "propertyOrdering",
                                          "$defs", "definitions", "strict", NULL};
static const char *const HANDLED[] = {"type", "enum", "const", "$ref", "anyOf", "oneOf", "allOf", "properties", "required", "additionalProperties",
                                      "items", "prefixItems", "additionalItems", "minItems", "maxItems", "minLength", "maxLength", "pattern",
                                      "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "nullable", "uniqueItems",
                                      "minProperties", "maxProperties", "multipleOf", "unevaluatedProperties", "unevaluatedItems", NULL};
static const char *const UNSUPPORTED_KW[] = {"patternProperties", "propertyNames", "dependentRequired", "dependentSchemas", "dependencies", "if",
                                             "then", "else", "not", "contains", "minContains", "maxContains", "$dynamicRef", "$dynamicAnchor",
                                             "$recursiveRef", "$recursiveAnchor", "$anchor", "$vocabulary", "contentSchema", NULL};
static const char *const OBJ_KW[] = {"properties", "required", "additionalProperties", "minProperties", "maxProperties", "unevaluatedProperties", NULL};
static const char *const ARR_KW[] = {"items", "prefixItems", "additionalItems", "minItems", "maxItems", "uniqueItems", "unevaluatedItems", NULL};
static const char *const STR_KW[] = {"minLength", "maxLength", "pattern", NULL}; /* and a string format */
static const char *const NUM_KW[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", NULL};

static int in_list(const char *const *l, const char *k) {
    for (; *l; l++) if (!strcmp(*l, k)) return 1;
    return 0;
}

static int is_annotation(const char *k) { return in_list(ANNOTATIONS, k) || !strncmp(k, "x-", 2); }

static int check_keywords(sc *c, const json_t *s) {
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)s, k, v) {
        if (is_annotation(k) || in_list(HANDLED, k)) {
            if (!strcmp(k, "$id") && s != c->root) { jsc_fail(c, G4_EUNSUPPORTED, "'$id' in a subschema is not supported (only at the root)"); return -1; }
            continue;
        }
        if (in_list(UNSUPPORTED_KW, k)) jsc_fail(c, G4_EUNSUPPORTED, "the keyword '%s' is not supported", k);
        else jsc_fail(c, G4_EUNSUPPORTED, "unknown keyword '%s' (not a JSON Schema keyword this server knows; see docs/structured-output.md)", k);
        return -1;
    }
    return 0;
}

/* keywords other than annotations and `except` */
static int has_assertions(const json_t *s, const char *except, const char *except2) {
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)s, k, v) {
        if (is_annotation(k) || (except && !strcmp(k, except)) || (except2 && !strcmp(k, except2))) continue;
        return 1;
    }
    return 0;
}

static int type_bit(const char *t) {
    static const char *const names[] = {"null", "boolean", "integer", "number", "string", "array", "object"};
    for (int i = 0; i < 7; i++) if (!strcmp(t, names[i])) return 1 << i;
    return 0;
}

static int has_any(const json_t *s, const char *const *kw) {
    for (; *kw; kw++) if (json_object_get(s, *kw)) return 1;
    return 0;
}

/* the types this schema node generates; -1 on a bad 'type' */
static int type_set(sc *c, const json_t *s) {
    json_t *t = json_object_get(s, "type");
    int m = 0;
    if (t) {
        if (json_is_string(t)) m = type_bit(json_string_value(t));
        else if (json_is_array(t) && json_array_size(t)) {
            size_t i;
            json_t *x;
            json_array_foreach(t, i, x) {
                int b = json_is_string(x) ? type_bit(json_string_value(x)) : 0;
                if (!b || (m & b)) { m = 0; break; }
                m |= b;
            }
        }
        if (!m) { jsc_fail(c, G4_EINVAL, "'type' must be one of null, boolean, integer, number, string, array, object, or a non-empty list of them without repeats"); return -1; }
    } else {
        json_t *f = json_object_get(s, "format");
        int fk = json_is_string(f) ? jsc_format_kind(json_string_value(f)) : 0;
        if (has_any(s, OBJ_KW)) m |= T_OBJ;
        if (has_any(s, ARR_KW)) m |= T_ARR;
        if (has_any(s, STR_KW) || (f && fk != JSC_FMT_NUMBER)) m |= T_STR; /* an unknown format is refused there */
        if (has_any(s, NUM_KW) || (f && fk == JSC_FMT_NUMBER)) m |= T_NUM;
        if (!m) m = T_ALL;
    }
    json_t *nl = json_object_get(s, "nullable");
    if (nl && !json_is_boolean(nl)) { jsc_fail(c, G4_EINVAL, "'nullable' must be true or false"); return -1; }
    if (json_is_true(nl)) m |= T_NULL;
    if ((m & T_NUM) && (m & T_INT)) m &= ~T_INT;
    return m;
}

/* non-negative integer keyword: -2 absent, -1 failed */
static long count_kw(sc *c, const json_t *s, const char *k) {
    json_t *x = s ? json_object_get(s, k) : NULL;
    if (!x) return -2;
    double d = json_is_number(x) ? json_number_value(x) : -1;
    if (!json_is_number(x) || d < 0 || d != floor(d)) { jsc_fail(c, G4_EINVAL, "'%s' must be a non-negative integer", k); return -1; }
    if (d > SC_MAX_COUNT) {
        jsc_fail(c, G4_EUNSUPPORTED, "'%s' above %d is not supported (the automaton counts it)", k, SC_MAX_COUNT);
        return -1;
    }
    return (long)d;
}

/* ---- merging (allOf) ------------------------------------------------------------------------------ */

static void gen_m(sc *c, const json_t *s, int fmt, int mask, int from, int to);

static int collect_members(sc *c, const json_t *s, const json_t **out, int *n, int cap) {
    if (json_is_true(s)) return 0;
    if (!json_is_object(s) && !json_is_false(s)) { jsc_fail(c, G4_EINVAL, "a schema must be an object or a boolean"); return -1; }
    if (*n >= cap) { jsc_fail(c, G4_EUNSUPPORTED, "allOf with more than %d members", cap); return -1; }
    if (json_is_false(s)) { out[(*n)++] = s; return 0; }
    if (check_keywords(c, s)) return -1;
    json_t *ref = json_object_get(s, "$ref"), *all = json_object_get(s, "allOf");
    if (ref) {
        if (!json_is_string(ref)) { jsc_fail(c, G4_EINVAL, "'$ref' must be a string"); return -1; }
        const json_t *t = jsc_resolve_ref(c, json_string_value(ref), 0);
        if (!t) return -1;
        for (int i = 0; i < c->depth; i++)
            if (c->stack[i] == t) { jsc_fail(c, G4_EUNSUPPORTED, "a recursive '$ref' merged with other keywords (or inside allOf) is not supported"); return -1; }
        if (c->depth >= SC_MAX_NEST) { jsc_fail(c, G4_EINVAL, "references nested deeper than %d", SC_MAX_NEST); return -1; }
        c->stack[c->depth++] = t;
        int rc = collect_members(c, t, out, n, cap);
        c->depth--;
        if (rc) return -1;
    }
    if (all) {
        if (!json_is_array(all) || !json_array_size(all)) { jsc_fail(c, G4_EINVAL, "'allOf' must be a non-empty array"); return -1; }
        size_t i;
        json_t *x;
        json_array_foreach(all, i, x) if (collect_members(c, x, out, n, cap)) return -1;
    }
    if (ref || all) {
        if (!has_assertions(s, "$ref", "allOf")) return 0;
        json_t *rest = json_object();
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)s, k, v) if (strcmp(k, "$ref") && strcmp(k, "allOf")) json_object_set(rest, k, v);
        json_array_append_new(c->owned, rest);
        out[(*n)++] = rest;
        return 0;
    }
    out[(*n)++] = s;
    return 0;
}

static const json_t *merged_false(sc *c) { return json_false(); (void)c; }

/* One schema equivalent to all the members together, for the keywords this compiler knows. */
static const json_t *merge(sc *c, const json_t *const *in, int n_in) {
    const json_t *m[64];
    int n = 0;
    for (int i = 0; i < n_in; i++) if (collect_members(c, in[i], m, &n, 64)) return NULL;
    for (int i = 0; i < n; i++) if (json_is_false(m[i])) return merged_false(c);
    if (n == 0) return json_true();
    if (n == 1) return m[0];
    json_t *o = json_object();
    json_array_append_new(c->owned, o);
    int types = T_ALL, any_types = 0, ap_false = 0, ap_true = 0;
    json_t *props = json_object(), *req = json_array(), *en = NULL;
    json_object_set_new(o, "properties", props);
    for (int i = 0; i < n; i++) {
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)m[i], k, v) {
            if (is_annotation(k)) continue;
            json_t *cur = json_object_get(o, k);
            if (!strcmp(k, "type") || !strcmp(k, "nullable")) {
                if (!strcmp(k, "type")) {
                    int t = type_set(c, m[i]);
                    if (t < 0) goto bad;
                    if (t & T_NUM) t |= T_INT; /* a number may be an integer: integer ∩ number is integer */
                    types &= t;
                    any_types = 1;
                }
                continue;
            }
            if (!strcmp(k, "properties")) {
                if (!json_is_object(v)) { jsc_fail(c, G4_EINVAL, "'properties' must be an object"); goto bad; }
                const char *pk;
                json_t *pv;
                json_object_foreach(v, pk, pv) {
                    json_t *old = json_object_get(props, pk);
                    if (!old || json_equal(old, pv)) json_object_set(props, pk, pv);
                    else json_object_set_new(props, pk, json_pack("{s:[O,O]}", "allOf", old, pv));
                }
            } else if (!strcmp(k, "required")) {
                if (!json_is_array(v)) { jsc_fail(c, G4_EINVAL, "'required' must be an array of strings"); goto bad; }
                size_t j;
                json_t *x;
                json_array_foreach(v, j, x) {
                    if (!json_is_string(x)) { jsc_fail(c, G4_EINVAL, "'required' must be an array of strings"); goto bad; }
                    int dup = 0;
                    size_t q;
                    json_t *y;
                    json_array_foreach(req, q, y) if (json_equal(x, y)) dup = 1;
                    if (!dup) json_array_append(req, x);
                }
            } else if (!strcmp(k, "additionalProperties")) {
                if (json_is_false(v)) ap_false = 1;
                else if (json_is_true(v)) ap_true = 1;
                else { jsc_fail(c, G4_EUNSUPPORTED, "'additionalProperties' as a schema inside allOf is not supported"); goto bad; }
            } else if (!strcmp(k, "enum") || !strcmp(k, "const")) {
                json_t *vals = !strcmp(k, "const") ? json_pack("[O]", v) : json_incref(v);
                if (!json_is_array(vals)) { json_decref(vals); jsc_fail(c, G4_EINVAL, "'enum' must be an array"); goto bad; }
                if (!en) en = vals;
                else {
                    json_t *keep = json_array();
                    size_t a, b;
                    json_t *x, *y;
                    json_array_foreach(en, a, x) json_array_foreach(vals, b, y) if (json_equal(x, y)) { json_array_append(keep, x); break; }
                    json_decref(en);
                    json_decref(vals);
                    en = keep;
                }
            } else if (!strncmp(k, "min", 3) || !strncmp(k, "max", 3) || !strcmp(k, "exclusiveMinimum") || !strcmp(k, "exclusiveMaximum")) {
                if (!json_is_number(v)) {
                    if (!cur || json_equal(cur, v)) { json_object_set(o, k, v); continue; }
                    jsc_fail(c, G4_EUNSUPPORTED, "allOf members disagree on '%s'", k);
                    goto bad;
                }
                int upper = !strncmp(k, "max", 3) || !strcmp(k, "exclusiveMaximum");
                if (!cur || (upper ? json_number_value(v) < json_number_value(cur) : json_number_value(v) > json_number_value(cur)))
                    json_object_set(o, k, v);
            } else if (!strcmp(k, "items")) {
                if (!cur || json_equal(cur, v)) json_object_set(o, k, v);
                else if (json_is_array(cur) || json_is_array(v)) { jsc_fail(c, G4_EUNSUPPORTED, "allOf members disagree on 'items'"); goto bad; }
                else json_object_set_new(o, k, json_pack("{s:[O,O]}", "allOf", cur, v));
            } else if (cur && !json_equal(cur, v)) {
                jsc_fail(c, G4_EUNSUPPORTED, "allOf members disagree on '%s' (only objects, bounds, enums and items are merged)", k);
                goto bad;
            } else {
                json_object_set(o, k, v);
            }
        }
    }
    /* names another member's additionalProperties: false forbids go */
    for (int i = 0; i < n; i++) {
        if (!json_is_false(json_object_get(m[i], "additionalProperties"))) continue;
        json_t *own = json_object_get(m[i], "properties");
        const char *pk;
        json_t *pv;
        void *tmp;
        json_object_foreach_safe(props, tmp, pk, pv) if (!own || !json_object_get(own, pk)) json_object_del(props, pk);
        size_t j;
        json_t *x;
        json_array_foreach(req, j, x)
            if (!own || !json_object_get(own, json_string_value(x))) {
                jsc_fail(c, G4_EINVAL, "allOf: '%s' is required but another member forbids it (additionalProperties false)", json_string_value(x));
                goto bad;
            }
    }
    if (json_array_size(req)) json_object_set_new(o, "required", req);
    else json_decref(req);
    if (ap_false) json_object_set_new(o, "additionalProperties", json_false());
    else if (ap_true) json_object_set_new(o, "additionalProperties", json_true());
    if (!json_object_size(props) && !json_object_get(o, "required") && !ap_false) json_object_del(o, "properties");
    if (en) json_object_set_new(o, "enum", en);
    if (any_types) {
        if (!types) return merged_false(c);
        json_t *tl = json_array();
        static const char *const names[] = {"null", "boolean", "integer", "number", "string", "array", "object"};
        for (int i = 0; i < 7; i++) if (types & (1 << i)) json_array_append_new(tl, json_string(names[i]));
        json_object_set_new(o, "type", tl);
    }
    return o;
bad:
    json_decref(req);
    json_decref(en);
    return NULL;
}

/* ---- objects ---------------------------------------------------------------------------------- */

typedef struct { const char *name; size_t len; const json_t *schema; int req; } prop_t;

static int cmp_prop(const void *a, const void *b) {
    const prop_t *x = a, *y = b;
    size_t l = x->len < y->len ? x->len : y->len;
    int r = memcmp(x->name, y->name, l);
    return r ? r : (x->len > y->len) - (x->len < y->len);
}

/* a key that is none of the declared names */
static void extra_key(sc *c, int fmt, const prop_t *p, int np, int from, int to) {
    const char **ex = malloc((size_t)(np ? np : 1) * sizeof *ex);
    size_t *el = malloc((size_t)(np ? np : 1) * sizeof *el);
    char **bufs = calloc((size_t)(np ? np : 1), sizeof *bufs);
    int nx = 0;
    if (!ex || !el || !bufs) { jsc_fail(c, G4_ENOMEM, "out of memory"); goto out; }
    for (int i = 0; i < np; i++) {
        if (fmt == FMT_GEMMA && !jsc_bare_key_ok(p[i].name, p[i].len)) continue;
        if (!(bufs[nx] = malloc(6 * p[i].len + 1))) { jsc_fail(c, G4_ENOMEM, "out of memory"); goto out; }
        el[nx] = fmt == FMT_JSON ? g4_enc_string(p[i].name, p[i].len, G4_ENC_JSON, bufs[nx]) : p[i].len;
        if (fmt == FMT_GEMMA) memcpy(bufs[nx], p[i].name, p[i].len);
        ex[nx] = bufs[nx];
        nx++;
    }
    g4_dfa body;
    if (fmt == FMT_JSON) {
        if (jsc_string_body(c, G4_ENC_JSON, c->chat ? MK_CONTENT : MK_NONE, 0, -1, NULL, 0, NULL, ex, el, nx, &body)) goto out;
        int a = jsc_lit_new(c, from, "\""), b = jsc_st(c);
        g4_nfa_embed(&c->a, &body, a, b);
        jsc_lit(c, b, to, "\"");
    } else { /* bare keys of word characters */
        static const char word[] = "^[A-Za-z_][A-Za-z0-9_]*$";
        if (jsc_string_body(c, G4_ENC_RAW, MK_NONE, 1, 64, word, sizeof word - 1, NULL, ex, el, nx, &body)) goto out;
        g4_nfa_embed(&c->a, &body, from, to);
    }
    g4_dfa_free(&body);
out:
    for (int i = 0; i < nx; i++) free(bufs[i]);
    free(bufs);
    free(ex);
    free(el);
}

static void gen_object(sc *c, const json_t *s, int fmt, int from, int to) {
    json_t *props = s ? json_object_get(s, "properties") : NULL, *req = s ? json_object_get(s, "required") : NULL;
    json_t *ap = s ? json_object_get(s, "additionalProperties") : NULL, *up = s ? json_object_get(s, "unevaluatedProperties") : NULL;
    if (props && !json_is_object(props)) { jsc_fail(c, G4_EINVAL, "'properties' must be an object"); return; }
    if (req && !json_is_array(req)) { jsc_fail(c, G4_EINVAL, "'required' must be an array of strings"); return; }
    if (ap && !json_is_boolean(ap) && !json_is_object(ap)) { jsc_fail(c, G4_EINVAL, "'additionalProperties' must be a boolean or a schema"); return; }
    if (up && !json_is_false(up)) { jsc_fail(c, G4_EUNSUPPORTED, "'unevaluatedProperties' other than false is not supported"); return; }
    size_t np = props ? json_object_size(props) : 0, nr = req ? json_array_size(req) : 0;
    prop_t *p = calloc(np + nr + 1, sizeof *p);
    if (!p) { jsc_fail(c, G4_ENOMEM, "out of memory"); return; }
    int n = 0;
    const char *k;
    json_t *v;
    if (props) json_object_foreach(props, k, v) p[n++] = (prop_t){k, strlen(k), v, 0};
    /* absent additionalProperties: extra keys only for an object that declares nothing */
    const json_t *extra = ap ? (json_is_false(ap) ? NULL : ap) : (!props && !nr && !up ? json_true() : NULL);
    for (size_t i = 0; i < nr; i++) {
        json_t *x = json_array_get(req, i);
        if (!json_is_string(x)) { jsc_fail(c, G4_EINVAL, "'required' must be an array of strings"); free(p); return; }
        int found = 0;
        for (int j = 0; j < n; j++)
            if (p[j].len == json_string_length(x) && !memcmp(p[j].name, json_string_value(x), p[j].len)) { found = 1; p[j].req = 1; }
        if (found) continue;
        if (!extra) { jsc_fail(c, G4_EINVAL, "the required property '%s' is not in 'properties' and no other property is allowed", json_string_value(x)); free(p); return; }
        p[n++] = (prop_t){json_string_value(x), json_string_length(x), extra, 1};
    }
    long minp = count_kw(c, s, "minProperties"), maxp = count_kw(c, s, "maxProperties");
    int nreq = 0;
    for (int i = 0; i < n; i++) nreq += p[i].req;
    if (minp == -1 || maxp == -1) { free(p); return; }
    if (minp > nreq) { jsc_fail(c, G4_EUNSUPPORTED, "'minProperties' %ld is more than the required properties (%d): not supported", minp, nreq); free(p); return; }
    if (maxp >= 0 && (extra || maxp < n)) {
        jsc_fail(c, G4_EUNSUPPORTED, "'maxProperties' is supported only when it allows every declared property and no others");
        free(p);
        return;
    }
    if (fmt == FMT_GEMMA) qsort(p, (size_t)n, sizeof *p, cmp_prop);
    /* af: no member yet, at: some member written; i counts the properties considered */
    int o = jsc_lit_new(c, from, "{"), af = jsc_st(c), at = -1;
    jsc_ws(c, fmt, o, af);
    for (int i = 0; i < n && !c->rc; i++) {
        if (!jsc_key_ok(c, fmt, p[i].name, p[i].len)) { /* markup in a tool call's key: as in a free string, never written */
            if (!p[i].req) continue;
            jsc_fail(c, G4_EUNSUPPORTED, "the required property '%s' holds '<|', '<turn|>' or '<eos>', which Gemma's call syntax cannot carry",
                     p[i].name);
            break;
        }
        int naf = jsc_st(c), nat = jsc_st(c), key = jsc_st(c);
        jsc_eps(c, af, key);
        if (at >= 0) jsc_eps(c, jsc_comma(c, fmt, at), key);
        int kk = jsc_st(c);
        jsc_emit_key(c, fmt, key, kk, p[i].name, p[i].len);
        int val = jsc_colon(c, fmt, kk);
        size_t m = jsc_path_push(c, "properties");
        size_t m2 = jsc_path_push(c, p[i].name);
        gen_m(c, p[i].schema, fmt, T_ALL, val, nat);
        jsc_path_pop(c, m2);
        jsc_path_pop(c, m);
        if (!p[i].req) { jsc_eps(c, af, naf); if (at >= 0) jsc_eps(c, at, nat); }
        af = p[i].req ? -1 : naf;
        at = nat;
        if (af < 0) af = jsc_st(c); /* unreachable: something is written */
    }
    if (extra && !c->rc) {
        int key = jsc_st(c), kk = jsc_st(c), nat = at >= 0 ? at : jsc_st(c);
        jsc_eps(c, af, key);
        jsc_eps(c, jsc_comma(c, fmt, nat), key); /* more extra members after any member */
        extra_key(c, fmt, p, n, key, kk);
        int val = jsc_colon(c, fmt, kk);
        size_t m = jsc_path_push(c, "additionalProperties");
        gen_m(c, extra, fmt, T_ALL, val, nat);
        jsc_path_pop(c, m);
        at = nat;
    }
    jsc_lit(c, af, to, "}");
    if (at >= 0) { int e = jsc_st(c); jsc_ws(c, fmt, at, e); jsc_lit(c, e, to, "}"); }
    free(p);
}

/* ---- shared pieces ---------------------------------------------------------------------------------- */

/* A schema node used more than once (array items copied, a $def referenced from many places) is
 * built inline while it is small and called as a rule of its own when it is large, so that the
 * automaton grows with the schema and not with the product of its counts (nested arrays with
 * maxItems 2 were exponential in their depth). The size of a node is learnt the first time it
 * is built and remembered. */
static int size_get(const sc *c, const json_t *s, int fmt, int mask) {
    for (int i = 0; i < c->nsizes; i++)
        if (c->sizes[i].schema == s && c->sizes[i].root == c->root && c->sizes[i].fmt == fmt && c->sizes[i].mask == mask) return c->sizes[i].states;
    return -1;
}

static void size_put(sc *c, const json_t *s, int fmt, int mask, int states) {
    for (int i = 0; i < c->nsizes; i++)
        if (c->sizes[i].schema == s && c->sizes[i].root == c->root && c->sizes[i].fmt == fmt && c->sizes[i].mask == mask) { c->sizes[i].states = states; return; }
    if (c->nsizes == c->capsizes) {
        int cap = c->capsizes ? 2 * c->capsizes : 64;
        sc_size *n = realloc(c->sizes, (size_t)cap * sizeof *n);
        if (!n) { jsc_fail(c, G4_ENOMEM, "out of memory"); return; }
        c->sizes = n;
        c->capsizes = cap;
    }
    c->sizes[c->nsizes++] = (sc_size){s, c->root, fmt, mask, states};
}

/* Builds s between from and to as one of `copies` uses: inline (1) when copies of it stay within
 * SC_COPY_BUDGET states, else as a call of its rule (0). A node of unknown size is built inline
 * first to learn it, and undone (with the rules it made) when it is too large. */
static int copy_or_rule(sc *c, const json_t *s, int fmt, int mask, long copies, int from, int to) {
    int known = size_get(c, s, fmt, mask);
    if (known < 0 || (double)known * (double)copies <= SC_COPY_BUDGET) {
        const int n0 = c->a.n, r0 = c->nr, any0 = c->any_rule[0], any1 = c->any_rule[1];
        size_t e0 = c->a.ne;
        gen_m(c, s, fmt, mask, from, to);
        if (c->rc) return 1;
        size_put(c, s, fmt, mask, c->a.n - n0);
        if ((double)(c->a.n - n0) * (double)copies <= SC_COPY_BUDGET) return 1;
        g4_nfa_truncate(&c->a, n0, e0); /* too large: undone, and the rules it made (their states went too) */
        c->nr = r0;
        c->any_rule[0] = any0;
        c->any_rule[1] = any1;
    }
    jsc_call(c, from, to, jsc_new_rule(c, s, fmt, mask, 0));
    return 0;
}

/* ---- arrays --------------------------------------------------------------------------------------- */

static void gen_array(sc *c, const json_t *s, int fmt, int from, int to) {
    json_t *items = s ? json_object_get(s, "items") : NULL, *prefix = s ? json_object_get(s, "prefixItems") : NULL;
    json_t *addl = s ? json_object_get(s, "additionalItems") : NULL, *ue = s ? json_object_get(s, "unevaluatedItems") : NULL;
    json_t *uniq = s ? json_object_get(s, "uniqueItems") : NULL;
    const json_t *extra;
    if (uniq && !json_is_boolean(uniq)) { jsc_fail(c, G4_EINVAL, "'uniqueItems' must be true or false"); return; }
    if (ue && !json_is_false(ue)) { jsc_fail(c, G4_EUNSUPPORTED, "'unevaluatedItems' other than false is not supported"); return; }
    if (prefix && !json_is_array(prefix)) { jsc_fail(c, G4_EINVAL, "'prefixItems' must be an array of schemas"); return; }
    if (json_is_array(items)) { /* the older tuple form */
        if (prefix) { jsc_fail(c, G4_EINVAL, "'items' as an array together with 'prefixItems'"); return; }
        prefix = items;
        extra = addl && !json_is_false(addl) ? addl : NULL;
    } else {
        if (items && !json_is_object(items) && !json_is_boolean(items)) { jsc_fail(c, G4_EINVAL, "'items' must be a schema"); return; }
        extra = items ? (json_is_false(items) ? NULL : items) : (prefix ? NULL : json_true());
    }
    long np = prefix ? (long)json_array_size(prefix) : 0, mn = count_kw(c, s, "minItems"), mx = count_kw(c, s, "maxItems");
    if (mn == -1 || mx == -1) return;
    if (mn < 0) mn = 0;
    if (mx >= 0 && mx < mn) { jsc_fail(c, G4_EINVAL, "'minItems' is greater than 'maxItems'"); return; }
    if (json_is_true(uniq) && !(mx >= 0 && mx <= 1)) { jsc_fail(c, G4_EUNSUPPORTED, "'uniqueItems': true is not supported"); return; }
    long U;
    int loop = 0;
    if (extra) {
        if (mx >= 0) U = mx;
        else { U = np > mn ? np : mn; if (U == 0) U = 1; loop = 1; }
    } else {
        U = mx >= 0 && mx < np ? mx : np;
        if (mn > U) { jsc_fail(c, G4_EINVAL, "'minItems' %ld cannot be met: no items are allowed after the %ld of 'prefixItems'", mn, np); return; }
    }
    int *P = malloc(((size_t)U + 1) * sizeof *P);
    if (!P) { jsc_fail(c, G4_ENOMEM, "out of memory"); return; }
    int o = jsc_lit_new(c, from, "[");
    P[0] = jsc_st(c);
    jsc_ws(c, fmt, o, P[0]);
    for (long k = 1; k <= U; k++) P[k] = jsc_st(c);
    int rule = -1;
    const long copies = U - np + loop; /* of the item schema after the prefix */
    for (long k = 0; k < U && !c->rc; k++) {
        const json_t *it = k < np ? json_array_get(prefix, (size_t)k) : extra;
        int src = k ? jsc_comma(c, fmt, P[k]) : P[0];
        size_t m = k < np ? jsc_path_push_i(c, "prefixItems", (size_t)k) : jsc_path_push(c, "items");
        if (k >= np && rule >= 0) {
            jsc_call(c, src, P[k + 1], rule);
        } else if (k == np && copies > 1) { /* many copies: one rule if the item is large */
            if (!copy_or_rule(c, it, fmt, T_ALL, copies, src, P[k + 1])) rule = jsc_new_rule(c, it, fmt, T_ALL, 0);
        } else {
            gen_m(c, it, fmt, T_ALL, src, P[k + 1]);
        }
        jsc_path_pop(c, m);
    }
    if (loop && !c->rc) {
        int src = jsc_comma(c, fmt, P[U]);
        size_t m = jsc_path_push(c, "items");
        if (rule >= 0) jsc_call(c, src, P[U], rule);
        else gen_m(c, extra, fmt, T_ALL, src, P[U]);
        jsc_path_pop(c, m);
    }
    for (long k = mn; k <= U; k++) {
        if (k == 0) { jsc_lit(c, P[0], to, "]"); continue; }
        int e = jsc_st(c);
        jsc_ws(c, fmt, P[k], e);
        jsc_lit(c, e, to, "]");
    }
    free(P);
}

/* ---- strings ---------------------------------------------------------------------------------- */

static void gen_string(sc *c, const json_t *s, int fmt, int from, int to) {
    long mn = count_kw(c, s, "minLength"), mx = count_kw(c, s, "maxLength");
    if (mn == -1 || mx == -1) return;
    if (mn < 0) mn = 0;
    if (mx < 0) mx = -1;
    if (mx >= 0 && mx < mn) { jsc_fail(c, G4_EINVAL, "'minLength' is greater than 'maxLength'"); return; }
    json_t *pat = s ? json_object_get(s, "pattern") : NULL, *f = s ? json_object_get(s, "format") : NULL;
    if (pat && !json_is_string(pat)) { jsc_fail(c, G4_EINVAL, "'pattern' must be a string"); return; }
    if (f && !json_is_string(f)) { jsc_fail(c, G4_EINVAL, "'format' must be a string"); return; }
    g4_str_enc enc = fmt == FMT_JSON ? G4_ENC_JSON : G4_ENC_RAW;
    int mk = fmt == FMT_GEMMA || c->chat ? MK_CONTENT : MK_NONE;
    g4_dfa body;
    size_t m = jsc_path_push(c, pat ? "pattern" : "format");
    if (!pat && !f) jsc_path_pop(c, m);
    const char *fs = f && jsc_format_kind(json_string_value(f)) != JSC_FMT_NUMBER ? json_string_value(f) : NULL; /* int32: the number's */
    int rc = jsc_string_body(c, enc, mk, mn, mx, pat ? json_string_value(pat) : NULL, pat ? json_string_length(pat) : 0, fs, NULL, NULL, 0, &body);
    jsc_path_pop(c, m);
    if (rc) return;
    if (body.n == 0) { jsc_fail(c, G4_EINVAL, "no string satisfies its length, pattern and format together"); g4_dfa_free(&body); return; }
    int a = jsc_st(c), b = jsc_st(c);
    if (fmt == FMT_JSON) { jsc_lit(c, from, a, "\""); jsc_lit(c, b, to, "\""); }
    else { jsc_tok(c, from, a, TOK_STR); jsc_tok(c, b, to, TOK_STR); }
    g4_nfa_embed(&c->a, &body, a, b);
    g4_dfa_free(&body);
}

/* ---- any value -------------------------------------------------------------------------------------- */

static int any_rule(sc *c, int fmt) {
    if (c->any_rule[fmt] < 0) c->any_rule[fmt] = jsc_new_rule(c, NULL, fmt, T_ALL, 1);
    return c->any_rule[fmt];
}

static void gen_any_body(sc *c, int fmt, int from, int to) {
    gen_object(c, NULL, fmt, from, to);
    gen_array(c, NULL, fmt, from, to);
    gen_string(c, NULL, fmt, from, to);
    jsc_number_plain(c, 0, from, to);
    jsc_lit(c, from, to, "true");
    jsc_lit(c, from, to, "false");
    jsc_lit(c, from, to, "null");
}

/* ---- dispatch -------------------------------------------------------------------------------------- */

/* 'format' where it stands: an unknown one, or one of another type than the schema generates
 * (a date on an integer), is refused rather than left unchecked. */
static int check_format(sc *c, const json_t *s, int types) {
    json_t *f = json_object_get(s, "format");
    if (!f) return 0;
    size_t m = jsc_path_push(c, "format");
    int k = json_is_string(f) ? jsc_format_kind(json_string_value(f)) : -1;
    if (k < 0) jsc_fail(c, G4_EINVAL, "'format' must be a string");
    else if (!k) jsc_fail(c, G4_EUNSUPPORTED, "'format' \"%s\" is not supported (%s)", json_string_value(f), JSC_FORMATS_KNOWN);
    else if (k == JSC_FMT_STRING && !(types & T_STR))
        jsc_fail(c, G4_EUNSUPPORTED, "'format' \"%s\" applies to strings, and this schema allows none", json_string_value(f));
    else if (k == JSC_FMT_NUMBER && !(types & (T_INT | T_NUM)))
        jsc_fail(c, G4_EUNSUPPORTED, "'format' \"%s\" applies to numbers, and this schema allows none", json_string_value(f));
    if (!c->rc) jsc_path_pop(c, m);
    return c->rc ? -1 : 0;
}

static void gen_types(sc *c, const json_t *s, int fmt, int types, int from, int to) {
    if (types & T_NULL) jsc_lit(c, from, to, "null");
    if (types & T_BOOL) { jsc_lit(c, from, to, "true"); jsc_lit(c, from, to, "false"); }
    if (types & T_NUM) jsc_gen_number(c, s, 0, from, to);
    else if (types & T_INT) jsc_gen_number(c, s, 1, from, to);
    if (types & T_STR) gen_string(c, s, fmt, from, to);
    if (types & T_ARR) gen_array(c, s, fmt, from, to);
    if (types & T_OBJ) gen_object(c, s, fmt, from, to);
}

/* Does an enum value satisfy the other keywords of its schema? 1 / 0, -1 (failed) for a keyword
 * that is not checked here. Keywords of another type than the value's do not apply to it. */
static int value_fits(sc *c, const json_t *s, const json_t *v) {
    const char *k;
    json_t *x;
    int vt = jsc_value_types(v);
    json_object_foreach((json_t *)s, k, x) {
        if (is_annotation(k) || !strcmp(k, "enum") || !strcmp(k, "const") || !strcmp(k, "type") || !strcmp(k, "nullable")) continue;
        int lo = !strcmp(k, "minimum") || !strcmp(k, "exclusiveMinimum"), hi = !strcmp(k, "maximum") || !strcmp(k, "exclusiveMaximum");
        if (lo || hi) {
            if (!(vt & T_NUM)) continue;
            if (json_is_boolean(x)) continue; /* draft 4: read with its minimum / maximum below */
            if (!json_is_number(x)) { jsc_fail(c, G4_EINVAL, "'%s' must be a number", k); return -1; }
            double d = json_number_value(v), b = json_number_value(x);
            int excl = k[0] == 'e' || json_is_true(json_object_get(s, lo ? "exclusiveMinimum" : "exclusiveMaximum"));
            if (lo ? (d < b || (excl && d == b)) : (d > b || (excl && d == b))) return 0;
        } else if (!strcmp(k, "minLength") || !strcmp(k, "maxLength")) {
            if (!(vt & T_STR)) continue;
            if (!json_is_integer(x)) { jsc_fail(c, G4_EINVAL, "'%s' must be a non-negative integer", k); return -1; }
            long n = (long)jsc_utf8_chars(json_string_value(v), json_string_length(v));
            if (k[1] == 'i' ? n < json_integer_value(x) : n > json_integer_value(x)) return 0;
        } else {
            jsc_fail(c, G4_EUNSUPPORTED, "'%s' together with '%s' is not supported", k, json_object_get(s, "enum") ? "enum" : "const");
            return -1;
        }
    }
    return 1;
}

static void gen_enum(sc *c, const json_t *s, int fmt, int mask, int from, int to) {
    json_t *en = json_object_get(s, "enum"), *cn = json_object_get(s, "const");
    if (en && (!json_is_array(en) || !json_array_size(en))) { jsc_fail(c, G4_EINVAL, "'enum' must be a non-empty array"); return; }
    int types = json_object_get(s, "type") || json_object_get(s, "nullable") ? type_set(c, s) : T_ALL;
    if (types < 0) return;
    if (types & T_NUM) types |= T_INT;
    types &= mask | (mask & T_NUM ? T_INT : 0);
    int n = 0, unwritable = 0;
    size_t i = 0;
    json_t *v;
    for (;;) {
        v = en ? json_array_get(en, i++) : (i++ ? NULL : cn);
        if (!v) break;
        if (en && cn && !json_equal(cn, v)) continue;
        if (!(jsc_value_types(v) & types)) continue;
        int fit = value_fits(c, s, v);
        if (fit < 0) return;
        if (!fit) continue;
        if (!jsc_literal_ok(c, fmt, v)) { unwritable++; continue; } /* as free strings: no markup in a tool call */
        jsc_emit_value(c, v, fmt, from, to);
        n++;
    }
    if (!n && !c->rc && unwritable)
        jsc_fail(c, G4_EUNSUPPORTED, "no value of '%s' can be written in a tool call: the strings hold '<|', '<turn|>' or '<eos>', which "
                 "Gemma's call syntax cannot carry", en ? "enum" : "const");
    else if (!n && !c->rc) jsc_fail(c, G4_EINVAL, "no value of '%s' fits the rest of the schema", en ? "enum" : "const");
}

static void gen_alts(sc *c, const json_t *s, const char *key, int fmt, int mask, int from, int to) {
    json_t *arr = json_object_get(s, key);
    if (!json_is_array(arr) || !json_array_size(arr)) { jsc_fail(c, G4_EINVAL, "'%s' must be a non-empty array", key); return; }
    int one = !strcmp(key, "oneOf");
    json_t *sib = NULL;
    if (has_assertions(s, key, NULL)) { /* the other keywords apply to every alternative */
        sib = json_object();
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)s, k, v) if (strcmp(k, key)) json_object_set(sib, k, v);
        json_array_append_new(c->owned, sib);
    }
    size_t n = json_array_size(arr), i;
    const json_t **x = calloc(n, sizeof *x);
    if (!x) { jsc_fail(c, G4_ENOMEM, "out of memory"); return; }
    json_t *alt;
    json_array_foreach(arr, i, alt) {
        size_t m = jsc_path_push_i(c, key, i);
        x[i] = alt;
        if (sib) { const json_t *pair[2] = {sib, alt}; x[i] = merge(c, pair, 2); }
        if (x[i]) gen_m(c, x[i], fmt, mask, from, to);
        jsc_path_pop(c, m);
        if (c->rc) break;
    }
    /* oneOf is the union of its alternatives only when no value validates against two of them */
    for (size_t a = 0; one && a < n && !c->rc; a++)
        for (size_t b = a + 1; b < n && !c->rc; b++)
            if (!jsc_disjoint(c, x[a], x[b]) && !c->bud.stop)
                jsc_fail(c, G4_EUNSUPPORTED, "'oneOf' alternatives %zu and %zu may both match one value (only alternatives that are provably "
                         "disjoint are supported: by type, const / enum values, ranges, lengths, or a required property; use anyOf)", a, b);
    if (!c->rc && c->bud.stop) jsc_fail_budget(c);
    free(x);
}

static void gen_ref(sc *c, const char *ref, int fmt, int mask, int from, int to) {
    const json_t *t = jsc_resolve_ref(c, ref, 0);
    if (!t) return;
    for (int i = 0; i < c->depth; i++)
        if (c->stack[i] == t) { jsc_call(c, from, to, jsc_new_rule(c, t, fmt, mask, 0)); return; } /* recursion */
    if (c->depth >= SC_MAX_NEST) { jsc_fail(c, G4_EINVAL, "references nested deeper than %d", SC_MAX_NEST); return; }
    char save[512];
    memcpy(save, c->path, sizeof save);
    snprintf(c->path, sizeof c->path, "%s", ref);
    if (size_get(c, t, fmt, mask) > SC_REF_SHARE) { /* referenced again and large: one rule for all its uses */
        jsc_call(c, from, to, jsc_new_rule(c, t, fmt, mask, 0));
    } else {
        const int n0 = c->a.n;
        c->stack[c->depth++] = t;
        gen_m(c, t, fmt, mask, from, to);
        c->depth--;
        if (!c->rc) size_put(c, t, fmt, mask, c->a.n - n0);
    }
    if (!c->rc) memcpy(c->path, save, sizeof save);
}

static void gen_m(sc *c, const json_t *s, int fmt, int mask, int from, int to) {
    if (c->rc) return;
    if (c->nest >= SC_MAX_NEST) { jsc_fail(c, G4_EINVAL, "the schema is nested deeper than %d", SC_MAX_NEST); return; }
    c->nest++;
    if (json_is_true(s)) {
        if (mask == T_ALL) jsc_call(c, from, to, any_rule(c, fmt));
        else gen_types(c, NULL, fmt, mask, from, to);
    } else if (json_is_false(s)) {
        /* accepts nothing: no path */
    } else if (!json_is_object(s)) {
        jsc_fail(c, G4_EINVAL, "a schema must be an object or a boolean");
    } else if (!check_keywords(c, s)) {
        json_t *ref = json_object_get(s, "$ref");
        if (ref && !json_is_string(ref)) jsc_fail(c, G4_EINVAL, "'$ref' must be a string");
        else if (json_object_get(s, "anyOf") && json_object_get(s, "oneOf")) jsc_fail(c, G4_EUNSUPPORTED, "'anyOf' together with 'oneOf' is not supported");
        else if ((ref && has_assertions(s, "$ref", NULL)) || json_object_get(s, "allOf")) {
            const json_t *one[1] = {s};
            const json_t *m = merge(c, one, 1);
            if (m && m != s) gen_m(c, m, fmt, mask, from, to);
            else if (m) jsc_fail(c, G4_EINVAL, "allOf could not be merged");
        } else if (ref) {
            gen_ref(c, json_string_value(ref), fmt, mask, from, to);
        } else if (json_object_get(s, "anyOf")) {
            gen_alts(c, s, "anyOf", fmt, mask, from, to);
        } else if (json_object_get(s, "oneOf")) {
            gen_alts(c, s, "oneOf", fmt, mask, from, to);
        } else if (json_object_get(s, "enum") || json_object_get(s, "const")) {
            gen_enum(c, s, fmt, mask, from, to);
        } else {
            int t = type_set(c, s);
            if (t > 0) {
                if (!(t & mask)) jsc_fail(c, G4_EINVAL, "the schema must describe an object here");
                else if (!check_format(c, s, t & mask)) gen_types(c, s, fmt, t & mask, from, to);
            }
        }
    }
    c->nest--;
}

/* ---- top level ------------------------------------------------------------------------------------------- */

void g4_output_spec_init(g4_output_spec *s) {
    memset(s, 0, sizeof *s);
    s->parallel_calls = 1;
}

static int n_tools(const g4_output_spec *s) { return json_is_array(s->tools) ? (int)json_array_size(s->tools) : 0; }

int g4_output_spec_constrains(const g4_output_spec *s) {
    if (s->format != G4_FMT_TEXT) return 1;
    if (s->tool_mode == G4_TOOLS_REQUIRED || s->tool_mode == G4_TOOLS_NAMED) return 1;
    return s->chat && n_tools(s) && (s->tool_mode == G4_TOOLS_NONE || !s->parallel_calls || s->strict_calls);
}

/* free text without the markers (mk), as raw bytes */
static void text(sc *c, int mk, int from, int to) {
    const g4_dfa *d = jsc_plain_body(c, G4_ENC_RAW, mk);
    if (d) g4_nfa_embed(&c->a, d, from, to);
}

/* <|tool_call>call:NAME{...}<tool_call|>, once or (multi) repeated */
static void gen_calls(sc *c, const g4_output_spec *sp, int from, int to, int multi) {
    int L = jsc_st(c), a = jsc_st(c), done = jsc_st(c);
    jsc_eps(c, from, L);
    jsc_tok(c, L, a, "<|tool_call>");
    int b = jsc_lit_new(c, a, "call:"), args_end = jsc_st(c), count = 0;
    size_t i;
    json_t *t;
    json_array_foreach((json_t *)sp->tools, i, t) {
        json_t *fn = json_object_get(t, "function");
        json_t *name = json_object_get(fn, "name"), *params = json_object_get(fn, "parameters");
        snprintf(c->part, sizeof c->part, "tools[%zu].function", i);
        if (!json_is_string(name)) { jsc_fail(c, G4_EINVAL, "'name' must be a string"); return; }
        const char *nm = json_string_value(name);
        if (sp->tool_mode == G4_TOOLS_NAMED && strcmp(nm, sp->tool_name)) continue;
        for (const char *q = nm; *q; q++)
            if ((unsigned char)*q <= ' ' || (unsigned char)*q == 0x7F || strchr("{}[]<>,\"'()", *q)) {
                jsc_fail(c, G4_EINVAL, "the function name '%s' has a character Gemma's tool-call format cannot carry ('%c')", nm, *q);
                return;
            }
        if (!*nm || strlen(nm) != json_string_length(name)) { jsc_fail(c, G4_EINVAL, "the function name must be a non-empty string without U+0000"); return; }
        int n1 = jsc_lit_new(c, b, nm);
        snprintf(c->part, sizeof c->part, "tools[%zu].function.parameters", i);
        if (!params || json_is_null(params)) {
            jsc_lit(c, n1, args_end, "{}");
        } else {
            const json_t *root = c->root;
            c->root = params;
            c->depth = 0;
            c->stack[c->depth++] = params;
            snprintf(c->path, sizeof c->path, "#");
            gen_m(c, params, FMT_GEMMA, T_OBJ, n1, args_end);
            c->depth = 0;
            c->root = root;
        }
        count++;
    }
    if (!count && !c->rc) { snprintf(c->part, sizeof c->part, "tool_choice"); jsc_fail(c, G4_EINVAL, "no tool to call"); }
    jsc_tok(c, args_end, done, "<tool_call|>");
    jsc_eps(c, done, to);
    if (multi) jsc_eps(c, done, L);
}

static double mono_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* exactly one of the choices, as raw text (those a chat turn cannot carry left out) */
static void gen_choice(sc *c, const json_t *choices, int from, int to) {
    size_t i, n = 0;
    json_t *v;
    if (!json_is_array(choices) || !json_array_size(choices)) { jsc_fail(c, G4_EINVAL, "the choices must be a non-empty array of strings"); return; }
    json_array_foreach(choices, i, v) {
        if (!json_is_string(v)) { jsc_fail(c, G4_EINVAL, "choice %zu is not a string", i); return; }
        if (c->chat && !jsc_literal_ok(c, FMT_GEMMA, v)) continue; /* as a free text: no markup in a chat turn */
        g4_nfa_lit(&c->a, from, to, json_string_value(v), json_string_length(v));
        n++;
    }
    if (!n) jsc_fail(c, G4_EUNSUPPORTED, "every choice holds '<|', '<turn|>' or '<eos>', which a chat answer cannot carry");
}

/* text the pattern matches whole (vLLM's guided_regex), without markup in a chat turn */
static void gen_regex(sc *c, const char *pat, size_t len, int from, int to) {
    if (!pat) { jsc_fail(c, G4_EINVAL, "no pattern"); return; }
    char *w = malloc(len + 8);
    if (!w) { jsc_fail(c, G4_ENOMEM, "out of memory"); return; }
    size_t a = 0, b = len, n = 0, bs = 0;
    if (b > a && pat[a] == '^') a++; /* anchors there are what the whole match means anyway */
    if (b > a && pat[b - 1] == '$') {
        while (b - 1 - bs > a && pat[b - 2 - bs] == '\\') bs++; /* an escaped $ is a character */
        if (!(bs & 1)) b--;
    }
    memcpy(w, "^(?:", 4);
    n = 4;
    memcpy(w + n, pat + a, b - a);
    n += b - a;
    memcpy(w + n, ")$", 2);
    n += 2;
    g4_dfa body;
    if (!jsc_string_body(c, G4_ENC_RAW, c->chat ? MK_CONTENT : MK_NONE, 0, -1, w, n, NULL, NULL, NULL, 0, &body)) {
        if (body.n == 0) jsc_fail(c, G4_EINVAL, "no text matches the pattern%s", c->chat ? " (without '<|', '<turn|>' or '<eos>')" : "");
        else g4_nfa_embed(&c->a, &body, from, to);
        g4_dfa_free(&body);
    }
    free(w);
}

static void set_limits(sc *c, const g4_grammar_limits *lim) {
    static const g4_grammar_limits none;
    if (!lim) lim = &none;
    c->max_states = lim->max_states > 0 && lim->max_states < G4_GRAMMAR_MAX_STATES ? lim->max_states : G4_GRAMMAR_MAX_STATES;
    c->max_nfa = lim->max_nfa_states > 0 ? lim->max_nfa_states : G4_GRAMMAR_DEFAULT_NFA_STATES;
    c->max_edges = lim->max_transitions ? lim->max_transitions : G4_GRAMMAR_DEFAULT_TRANSITIONS;
    c->bud.max_bytes = lim->max_memory ? lim->max_memory : G4_GRAMMAR_DEFAULT_MEMORY;
    c->bud.max_work = lim->max_work ? lim->max_work : G4_GRAMMAR_DEFAULT_WORK;
    uint32_t ms = lim->timeout_ms ? lim->timeout_ms : G4_GRAMMAR_DEFAULT_TIMEOUT_MS;
    c->bud.deadline = ms == UINT32_MAX ? 0 : mono_now() + ms / 1e3;
    c->bud.cancelled = lim->cancelled;
    c->bud.user = lim->user;
    c->bud.shared = lim->shared;
    c->bud.shared_max = lim->shared_max;
    c->a.max_states = c->max_nfa;
    c->a.max_edges = c->max_edges;
    c->a.budget = &c->bud;
}

const char *g4_grammar_limit_name(int limit) {
    static const char *const names[] = {"", "states", "nfa_states", "transitions", "memory", "work", "time", "busy", "cancelled"};
    return limit >= 0 && limit <= G4_GLIM_CANCELLED ? names[limit] : "";
}

static int budget_limit(int stop) {
    switch (stop) {
    case G4_FSA_MEMORY: return G4_GLIM_MEMORY;
    case G4_FSA_WORK: return G4_GLIM_WORK;
    case G4_FSA_TIME: return G4_GLIM_TIME;
    case G4_FSA_SHARED: return G4_GLIM_BUSY;
    case G4_FSA_CANCELLED: return G4_GLIM_CANCELLED;
    default: return G4_GLIM_NONE;
    }
}

int g4_output_compile_ex(const g4_output_spec *sp, const g4_grammar_limits *lim, g4_grammar_compile_stats *st, g4_grammar **out, char *param,
                         size_t pcap, g4_err *err) {
    *out = NULL;
    if (param && pcap) param[0] = 0;
    if (st) memset(st, 0, sizeof *st);
    if (!g4_output_spec_constrains(sp)) return G4_OK;
    const double t0 = mono_now();
    sc c;
    memset(&c, 0, sizeof c);
    set_limits(&c, lim);
    c.err = err;
    c.chat = sp->chat;
    c.any_rule[0] = c.any_rule[1] = -1;
    c.owned = json_array();
    snprintf(c.path, sizeof c.path, "#");
    if (g4_fsa_poll(&c.bud, 0)) jsc_fail_budget(&c); /* cancelled before it starts: nothing is done */
    jsc_new_rule(&c, NULL, FMT_JSON, T_ALL, 0); /* rule 0: the whole output */
    int cur = c.rules ? c.rules[0].start : -1, acc = c.rules ? c.rules[0].accept : -1;
    if (c.rc) {
    } else if (sp->chat && sp->thought == G4_THOUGHT_INSIDE) {
        int t = jsc_st(&c), e = jsc_st(&c);
        text(&c, MK_THOUGHT, cur, t);
        jsc_tok(&c, t, e, "<channel|>");
        cur = e;
    } else if (sp->chat && sp->thought == G4_THOUGHT_OPTIONAL) {
        int e = jsc_st(&c), h = jsc_st(&c), t = jsc_st(&c);
        jsc_eps(&c, cur, e);
        jsc_tok(&c, cur, h, "<|channel>");
        int h2 = jsc_lit_new(&c, h, "thought");
        jsc_tok(&c, h2, e, "<channel|>");
        int h3 = jsc_lit_new(&c, h2, "\n");
        text(&c, MK_THOUGHT, h3, t);
        jsc_tok(&c, t, e, "<channel|>");
        cur = e;
    }
    int tools = sp->chat && n_tools(sp);
    if (c.rc) {
    } else if (sp->tool_mode == G4_TOOLS_REQUIRED || sp->tool_mode == G4_TOOLS_NAMED) {
        if (!tools) { snprintf(c.part, sizeof c.part, "tool_choice"); jsc_fail(&c, G4_EINVAL, "tool_choice asks for a tool call but there are no tools"); }
        else gen_calls(&c, sp, cur, acc, sp->parallel_calls);
    } else if (sp->format != G4_FMT_TEXT) {
        snprintf(c.part, sizeof c.part, "response_format");
        int v = cur; /* no white space first: a model let in may spend its tokens there */
        if (sp->format == G4_FMT_JSON_OBJECT) {
            gen_object(&c, NULL, FMT_JSON, v, acc);
        } else if (sp->format == G4_FMT_REGEX) {
            snprintf(c.part, sizeof c.part, "regex");
            gen_regex(&c, sp->regex, sp->regex_len, v, acc);
        } else if (sp->format == G4_FMT_CHOICE) {
            snprintf(c.part, sizeof c.part, "choice");
            gen_choice(&c, sp->choices, v, acc);
        } else {
            c.root = sp->schema;
            c.stack[c.depth++] = sp->schema;
            gen_m(&c, sp->schema, FMT_JSON, T_ALL, v, acc);
            c.depth = 0;
        }
        if (tools && sp->tool_mode == G4_TOOLS_AUTO) gen_calls(&c, sp, cur, acc, sp->parallel_calls);
    } else {
        int t = jsc_st(&c);
        text(&c, MK_CONTENT, cur, t);
        jsc_eps(&c, t, acc);
        if (sp->tool_mode == G4_TOOLS_AUTO) gen_calls(&c, sp, t, acc, sp->parallel_calls);
    }
    /* the rules' bodies (more may be added while building them) */
    for (int r = 1; r < c.nr && !c.rc; r++) {
        sc_rule R = c.rules[r];
        c.root = R.root;
        c.depth = 0;
        c.nest = 0;
        snprintf(c.path, sizeof c.path, "%s", R.path);
        snprintf(c.part, sizeof c.part, "%s", R.part);
        if (R.any) {
            gen_any_body(&c, R.fmt, R.start, R.accept);
        } else {
            c.stack[c.depth++] = R.schema;
            gen_m(&c, R.schema, R.fmt, R.mask, R.start, R.accept);
        }
    }
    g4_dfa *d = NULL;
    if (!c.rc && c.a.oom) jsc_fail_budget(&c);
    if (!c.rc) {
        snprintf(c.path, sizeof c.path, "#");
        d = calloc((size_t)c.nr, sizeof *d);
        if (!d) jsc_fail(&c, G4_ENOMEM, "out of memory");
        g4_err e = {0};
        size_t total = 0;
        for (int r = 0; r < c.nr && !c.rc; r++) {
            if (g4_nfa_to_dfa(&c.a, c.rules[r].start, c.rules[r].accept, c.max_states, &d[r], &e)) jsc_fail_fsa(&c, NULL, &e);
            total += (size_t)d[r].n;
            if (!c.rc && total > (size_t)c.max_states) {
                c.limit = G4_GLIM_STATES;
                jsc_fail(&c, G4_EINVAL, "the schema compiles to more than %d automaton states (the grammar state limit)", c.max_states);
            }
        }
        if (!c.rc && g4_grammar_build(d, c.nr, c.special, c.ns, c.max_states, &c.bud, out, &e)) jsc_fail_fsa(&c, NULL, &e);
    }
    if (d) for (int r = 0; r < c.nr; r++) g4_dfa_free(&d[r]);
    free(d);
    if (c.rc && param && pcap) snprintf(param, pcap, "%s", c.fail_part);
    if (st) {
        st->limit = c.bud.stop ? budget_limit(c.bud.stop) : c.rc ? c.limit : G4_GLIM_NONE;
        st->seconds = mono_now() - t0;
        st->peak_memory = c.bud.peak;
        st->work = c.bud.work;
        st->nfa_states = c.a.n;
        st->states = *out ? g4_grammar_n_states(*out) : 0;
    }
    for (int k = 0; k < 4; k++) if (c.have_body[k]) g4_dfa_free(&c.body[k]);
    g4_nfa_free(&c.a);
    free(c.rules);
    free(c.sizes);
    json_decref(c.owned);
    g4_fsa_budget_release(&c.bud); /* what is left: the grammar's tables, which the caller now owns */
    return c.rc;
}

int g4_output_compile(const g4_output_spec *sp, g4_grammar **out, char *param, size_t pcap, g4_err *err) {
    return g4_output_compile_ex(sp, NULL, NULL, out, param, pcap, err);
}

int g4_json_schema_compile(const json_t *schema, g4_grammar **out, g4_err *err) {
    g4_output_spec s;
    g4_output_spec_init(&s);
    s.format = G4_FMT_JSON_SCHEMA;
    s.schema = schema;
    return g4_output_compile(&s, out, NULL, 0, err);
}
