/* gen_config.c — reads generation_config.json (and, for missing stop ids, config.json's
 * eos/bos/pad) into g4_gen_config, and turns it into default sampling params.
 *
 * Owns the field types and ranges listed in gen_config.h and the fallback rules. Knows nothing
 * about the model architecture (config.json is read only for the three token-id fields) or
 * about requests; the server decides how request fields override these defaults. */
#include "engine/gen_config.h"

#include <errno.h>
#include <float.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/mapfile.h"

void g4_gen_config_default(g4_gen_config *c) {
    memset(c, 0, sizeof *c);
    c->bos_token_id = -1;
    c->pad_token_id = -1;
    c->do_sample = 0;
    c->temperature = 1.0f;
    c->top_p = 1.0f;
    c->min_p = 0.0f;
    c->top_k = 0;
    c->max_new_tokens = -1;
    c->max_length = -1;
}

static const char *type_name(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "a list";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a real number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "?";
}

/* A present, non-null field, or NULL. */
static json_t *field(json_t *o, const char *k) {
    json_t *v = json_object_get(o, k);
    return (v && !json_is_null(v)) ? v : NULL;
}

static int get_id(json_t *o, const char *k, const char *what, int32_t *dst, g4_err *err) {
    json_t *v = field(o, k);
    if (!v) return G4_OK;
    if (!json_is_integer(v))
        return g4_err_set(err, G4_EFORMAT, "%s: %s must be an integer, got %s", what, k, type_name(v));
    json_int_t x = json_integer_value(v);
    if (x < 0 || x > INT32_MAX)
        return g4_err_set(err, G4_EFORMAT, "%s: %s = %lld is not a valid token id", what, k, (long long)x);
    *dst = (int32_t)x;
    return G4_OK;
}

/* eos_token_id: integer or list of integers. *found = 1 when present. */
static int get_eos(json_t *o, const char *what, g4_gen_config *c, int *found, g4_err *err) {
    json_t *v = field(o, "eos_token_id");
    *found = 0;
    if (!v) return G4_OK;
    int32_t ids[G4_GEN_MAX_EOS];
    int n = 0;
    if (json_is_integer(v)) {
        json_int_t x = json_integer_value(v);
        if (x < 0 || x > INT32_MAX)
            return g4_err_set(err, G4_EFORMAT, "%s: eos_token_id = %lld is not a valid token id", what, (long long)x);
        ids[n++] = (int32_t)x;
    } else if (json_is_array(v)) {
        size_t i;
        json_t *e;
        if (json_array_size(v) > G4_GEN_MAX_EOS)
            return g4_err_set(err, G4_EFORMAT, "%s: eos_token_id has %zu entries, at most %d supported", what,
                              json_array_size(v), G4_GEN_MAX_EOS);
        json_array_foreach(v, i, e) {
            if (!json_is_integer(e))
                return g4_err_set(err, G4_EFORMAT, "%s: eos_token_id[%zu] must be an integer, got %s", what, i,
                                  type_name(e));
            json_int_t x = json_integer_value(e);
            if (x < 0 || x > INT32_MAX)
                return g4_err_set(err, G4_EFORMAT, "%s: eos_token_id[%zu] = %lld is not a valid token id", what, i,
                                  (long long)x);
            ids[n++] = (int32_t)x;
        }
    } else {
        return g4_err_set(err, G4_EFORMAT, "%s: eos_token_id must be an integer or a list of integers, got %s", what,
                          type_name(v));
    }
    memcpy(c->eos_ids, ids, sizeof ids[0] * (size_t)n);
    c->n_eos = n;
    *found = 1;
    return G4_OK;
}

static int get_num(json_t *o, const char *k, const char *what, double lo, double hi, float *dst, g4_err *err) {
    json_t *v = field(o, k);
    if (!v) return G4_OK;
    if (!json_is_number(v))
        return g4_err_set(err, G4_EFORMAT, "%s: %s must be a number, got %s", what, k, type_name(v));
    double x = json_number_value(v);
    if (!isfinite(x) || x < lo || x > hi) {
        if (isinf(hi))
            return g4_err_set(err, G4_EFORMAT, "%s: %s = %g must be >= %g", what, k, x, lo);
        return g4_err_set(err, G4_EFORMAT, "%s: %s = %g must be in [%g, %g]", what, k, x, lo, hi);
    }
    /* beyond FLT_MAX the float would be inf, which the sampler refuses on every request */
    if (x > FLT_MAX) return g4_err_set(err, G4_EFORMAT, "%s: %s = %g is too large", what, k, x);
    *dst = (float)x;
    return G4_OK;
}

static int get_int(json_t *o, const char *k, const char *what, long long lo, int64_t *dst, g4_err *err) {
    json_t *v = field(o, k);
    if (!v) return G4_OK;
    if (!json_is_integer(v))
        return g4_err_set(err, G4_EFORMAT, "%s: %s must be an integer, got %s", what, k, type_name(v));
    json_int_t x = json_integer_value(v);
    if (x < lo) return g4_err_set(err, G4_EFORMAT, "%s: %s = %lld must be >= %lld", what, k, (long long)x, lo);
    *dst = (int64_t)x;
    return G4_OK;
}

static int parse_root(json_t *root, const char *what, g4_gen_config *c, int *eos_found, g4_err *err) {
    if (!json_is_object(root)) return g4_err_set(err, G4_EFORMAT, "%s: top level must be an object", what);
    int rc;
    if ((rc = get_eos(root, what, c, eos_found, err))) return rc;
    if ((rc = get_id(root, "bos_token_id", what, &c->bos_token_id, err))) return rc;
    if ((rc = get_id(root, "pad_token_id", what, &c->pad_token_id, err))) return rc;
    json_t *ds = field(root, "do_sample");
    if (ds) {
        if (!json_is_boolean(ds))
            return g4_err_set(err, G4_EFORMAT, "%s: do_sample must be true or false, got %s", what, type_name(ds));
        c->do_sample = json_is_true(ds);
    }
    if ((rc = get_num(root, "temperature", what, 0.0, INFINITY, &c->temperature, err))) return rc;
    if ((rc = get_num(root, "top_p", what, 0.0, 1.0, &c->top_p, err))) return rc;
    if ((rc = get_num(root, "min_p", what, 0.0, 1.0, &c->min_p, err))) return rc;
    int64_t k = c->top_k;
    if ((rc = get_int(root, "top_k", what, 0, &k, err))) return rc;
    if (k > INT32_MAX) return g4_err_set(err, G4_EFORMAT, "%s: top_k = %lld is too large", what, (long long)k);
    c->top_k = (int)k;
    if ((rc = get_int(root, "max_new_tokens", what, 1, &c->max_new_tokens, err))) return rc;
    if ((rc = get_int(root, "max_length", what, 1, &c->max_length, err))) return rc;
    return G4_OK;
}

int g4_gen_config_parse(const char *json, size_t len, const char *what, g4_gen_config *c, g4_err *err) {
    if (!c || (!json && len)) return g4_err_set(err, G4_EINVAL, "generation config: NULL argument");
    if (!what) what = "generation_config.json";
    g4_gen_config_default(c);
    json_error_t je;
    json_t *root = json_loadb(json ? json : "", len, 0, &je);
    if (!root) return g4_err_set(err, G4_EFORMAT, "%s: invalid JSON at line %d column %d: %s", what, je.line, je.column, je.text);
    int found;
    int rc = parse_root(root, what, c, &found, err);
    json_decref(root);
    if (rc) return rc;
    c->from_file = 1;
    return G4_OK;
}

static int read_all(const char *path, char **buf, size_t *len, g4_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return g4_err_set(err, G4_EIO, "%s: cannot open: %s", path, strerror(errno));
    size_t cap = 4096, n = 0;
    char *b = malloc(cap);
    if (!b) { fclose(f); return g4_err_set(err, G4_ENOMEM, "%s: out of memory", path); }
    for (;;) {
        if (n == cap) {
            if (cap > ((size_t)64 << 20)) {
                free(b);
                fclose(f);
                return g4_err_set(err, G4_EFORMAT, "%s: over 64 MiB, not a config file", path);
            }
            char *nb = realloc(b, cap * 2);
            if (!nb) { free(b); fclose(f); return g4_err_set(err, G4_ENOMEM, "%s: out of memory", path); }
            b = nb;
            cap *= 2;
        }
        size_t r = fread(b + n, 1, cap - n, f);
        n += r;
        if (r == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) { free(b); return g4_err_set(err, G4_EIO, "%s: read error", path); }
    *buf = b;
    *len = n;
    return G4_OK;
}

int g4_gen_config_load_file(const char *path, g4_gen_config *c, g4_err *err) {
    if (!path || !c) return g4_err_set(err, G4_EINVAL, "generation config: NULL argument");
    char *b;
    size_t n;
    int rc = read_all(path, &b, &n, err);
    if (rc) return rc;
    rc = g4_gen_config_parse(b, n, path, c, err);
    free(b);
    return rc;
}

/* eos/bos/pad from config.json (top level, else text_config), filling only what is missing. */
static int from_model_config(const char *path, g4_gen_config *c, int need_eos, g4_err *err) {
    char *b;
    size_t n;
    int rc = read_all(path, &b, &n, err);
    if (rc) return rc;
    json_error_t je;
    json_t *root = json_loadb(b, n, 0, &je);
    free(b);
    if (!root) return g4_err_set(err, G4_EFORMAT, "%s: invalid JSON at line %d column %d: %s", path, je.line, je.column, je.text);
    if (!json_is_object(root)) {
        json_decref(root);
        return g4_err_set(err, G4_EFORMAT, "%s: top level must be an object", path);
    }
    json_t *levels[2] = {root, json_object_get(root, "text_config")};
    for (int l = 0; l < 2 && !rc; l++) {
        json_t *o = levels[l];
        if (!json_is_object(o)) continue;
        char what[600];
        snprintf(what, sizeof what, "%s%s", path, l ? " (text_config)" : "");
        if (need_eos) {
            g4_gen_config tmp = *c;
            int found;
            rc = get_eos(o, what, &tmp, &found, err);
            if (!rc && found) {
                memcpy(c->eos_ids, tmp.eos_ids, sizeof tmp.eos_ids);
                c->n_eos = tmp.n_eos;
                need_eos = 0;
            }
        }
        if (!rc && c->bos_token_id < 0) rc = get_id(o, "bos_token_id", what, &c->bos_token_id, err);
        if (!rc && c->pad_token_id < 0) rc = get_id(o, "pad_token_id", what, &c->pad_token_id, err);
    }
    json_decref(root);
    return rc;
}

int g4_gen_config_load_dir(const char *model_dir, g4_gen_config *c, g4_err *err) {
    if (!model_dir || !c) return g4_err_set(err, G4_EINVAL, "generation config: NULL argument");
    char gpath[4096], cpath[4096];
    snprintf(gpath, sizeof gpath, "%s/generation_config.json", model_dir);
    snprintf(cpath, sizeof cpath, "%s/config.json", model_dir);
    /* absent files fall back; present but unreadable ones are errors (never silently defaults) */
    int have_gen, have_cfg;
    int rc = g4_optional_file(gpath, &have_gen, err);
    if (!rc) rc = g4_optional_file(cpath, &have_cfg, err);
    if (rc) return rc;
    if (have_gen) {
        rc = g4_gen_config_load_file(gpath, c, err);
        if (!rc && c->n_eos == 0 && have_cfg) rc = from_model_config(cpath, c, 1, err);
        return rc;
    }
    g4_gen_config_default(c);
    if (!have_cfg)
        return g4_err_set(err, G4_EIO, "%s: neither generation_config.json nor config.json is there", model_dir);
    return from_model_config(cpath, c, 1, err);
}

void g4_gen_config_sampling_defaults(const g4_gen_config *c, g4_sampling_params *p) {
    g4_sampling_params_default(p);
    if (!c || !c->do_sample || c->temperature <= 0.0f) return; /* greedy */
    p->temperature = c->temperature;
    p->top_k = c->top_k;
    p->top_p = c->top_p;
    p->min_p = c->min_p;
}

int g4_gen_config_is_eos(const g4_gen_config *c, int32_t id) {
    for (int i = 0; c && i < c->n_eos; i++)
        if (c->eos_ids[i] == id) return 1;
    return 0;
}
