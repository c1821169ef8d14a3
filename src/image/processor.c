/* processor.c — Gemma4ImageProcessor (PIL backend): the config keys, the size rule
 * (get_aspect_ratio_preserving_size), rescale, patchify and positions, and the image hash.
 * The resampler is resize.c. Owns nothing about decoding (image.c) or the tower. */
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include "image/processor.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "base/mapfile.h"

static const int SUPPORTED_SOFT_TOKENS[] = {70, 140, 280, 560, 1120};

void g4_image_proc_default(g4_image_proc *p) {
    memset(p, 0, sizeof *p);
    p->max_soft_tokens = 280;
    p->patch_size = 16;
    p->pooling = 3;
    p->rescale = 1.0 / 255;
    p->do_rescale = 1;
    p->do_normalize = 0;
    for (int c = 0; c < 3; c++) { p->mean[c] = 0.0; p->std[c] = 1.0; }
    p->do_convert_rgb = 1;
    p->resample = 3;
}

int g4_image_proc_check(const g4_image_proc *p, g4_err *err) {
    int ok = 0;
    for (size_t i = 0; i < sizeof SUPPORTED_SOFT_TOKENS / sizeof *SUPPORTED_SOFT_TOKENS; i++)
        ok |= p->max_soft_tokens == SUPPORTED_SOFT_TOKENS[i];
    if (!ok)
        return g4_err_set(err, G4_EUNSUPPORTED, "max_soft_tokens = %d: Gemma-4's processor accepts only 70, 140, 280, 560 or 1120",
                          p->max_soft_tokens);
    if (p->patch_size < 1 || p->patch_size > 64)
        return g4_err_set(err, G4_EFORMAT, "patch_size = %d is out of range [1, 64]", p->patch_size);
    if (p->pooling < 1 || p->pooling > 8)
        return g4_err_set(err, G4_EFORMAT, "pooling_kernel_size = %d is out of range [1, 8]", p->pooling);
    if (p->resample != 3)
        return g4_err_set(err, G4_EUNSUPPORTED, "resample = %d: only 3 (BICUBIC, Gemma-4's) is implemented", p->resample);
    if (!(p->rescale > 0 && isfinite(p->rescale)))
        return g4_err_set(err, G4_EFORMAT, "rescale_factor = %g must be a positive number", p->rescale);
    if (p->do_normalize)
        for (int c = 0; c < 3; c++)
            if (p->mean[c] != 0.0 || p->std[c] != 1.0)
                return g4_err_set(err, G4_EUNSUPPORTED, "do_normalize with image_mean %g / image_std %g: only the identity "
                                  "(mean 0, std 1, what Gemma-4 ships) is implemented", p->mean[c], p->std[c]);
    return G4_OK;
}

/* ---- config ---------------------------------------------------------------------------- */

enum { KEY_BOOL, KEY_INT, KEY_NUM };

/* One optional key (absent or null: *dst unchanged) of the given kind into an int or a double. */
static int get_key(json_t *o, const char *k, int kind, void *dst, const char *what, g4_err *err) {
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v)) return G4_OK;
    if (kind == KEY_BOOL) {
        if (!json_is_boolean(v)) return g4_err_set(err, G4_EFORMAT, "%s: %s must be true or false", what, k);
        *(int *)dst = json_is_true(v);
    } else if (kind == KEY_INT) {
        if (!json_is_integer(v) || json_integer_value(v) < -1000000 || json_integer_value(v) > 1000000)
            return g4_err_set(err, G4_EFORMAT, "%s: %s must be an integer", what, k);
        *(int *)dst = (int)json_integer_value(v);
    } else {
        if (!json_is_number(v)) return g4_err_set(err, G4_EFORMAT, "%s: %s must be a number", what, k);
        *(double *)dst = json_number_value(v);
    }
    return G4_OK;
}

/* image_mean / image_std: one number or a list of 3. */
static int get_triple(json_t *o, const char *k, const char *what, double dst[3], g4_err *err) {
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v)) return G4_OK;
    if (json_is_number(v)) {
        dst[0] = dst[1] = dst[2] = json_number_value(v);
        return G4_OK;
    }
    if (!json_is_array(v) || json_array_size(v) != 3)
        return g4_err_set(err, G4_EFORMAT, "%s: %s must be a number or a list of 3 numbers", what, k);
    for (int c = 0; c < 3; c++) {
        json_t *e = json_array_get(v, (size_t)c);
        if (!json_is_number(e)) return g4_err_set(err, G4_EFORMAT, "%s: %s[%d] must be a number", what, k, c);
        dst[c] = json_number_value(e);
    }
    return G4_OK;
}

/* The object holding the image-processor keys: "image_processor" when nested, else the top. */
static json_t *proc_object(json_t *root) {
    json_t *ip = json_object_get(root, "image_processor");
    return json_is_object(ip) ? ip : root;
}

static int has_proc_keys(json_t *root) {
    return json_object_get(root, "image_processor") || json_object_get(root, "image_processor_type") ||
           json_object_get(root, "max_soft_tokens") || json_object_get(root, "patch_size");
}

static int parse_obj(json_t *root, const char *what, g4_image_proc *p, g4_err *err) {
    g4_image_proc_default(p);
    json_t *ip = json_object_get(root, "image_processor");
    if (ip && !json_is_object(ip)) return g4_err_set(err, G4_EFORMAT, "%s: image_processor must be an object", what);
    json_t *o = proc_object(root);
    json_t *type = json_object_get(o, "image_processor_type");
    if (type && !json_is_null(type)) {
        if (!json_is_string(type)) return g4_err_set(err, G4_EFORMAT, "%s: image_processor_type must be a string", what);
        if (strncmp(json_string_value(type), "Gemma4ImageProcessor", 20))
            return g4_err_set(err, G4_EUNSUPPORTED, "%s: image_processor_type \"%s\" is not Gemma-4's (Gemma4ImageProcessor)",
                              what, json_string_value(type));
    }
    int do_resize = 1;
    const struct { const char *key; int kind; void *dst; } keys[] = {
        {"max_soft_tokens", KEY_INT, &p->max_soft_tokens}, {"patch_size", KEY_INT, &p->patch_size},
        {"pooling_kernel_size", KEY_INT, &p->pooling}, {"resample", KEY_INT, &p->resample},
        {"rescale_factor", KEY_NUM, &p->rescale}, {"do_rescale", KEY_BOOL, &p->do_rescale},
        {"do_normalize", KEY_BOOL, &p->do_normalize}, {"do_convert_rgb", KEY_BOOL, &p->do_convert_rgb},
        {"do_resize", KEY_BOOL, &do_resize},
    };
    int rc = G4_OK;
    for (size_t i = 0; i < sizeof keys / sizeof *keys && !rc; i++) rc = get_key(o, keys[i].key, keys[i].kind, keys[i].dst, what, err);
    if (!rc) rc = get_triple(o, "image_mean", what, p->mean, err);
    if (!rc) rc = get_triple(o, "image_std", what, p->std, err);
    if (rc) return rc;
    if (!do_resize)
        return g4_err_set(err, G4_EUNSUPPORTED, "%s: do_resize false is not implemented (Gemma-4's processor always resizes)", what);
    rc = g4_image_proc_check(p, err);
    if (rc) return g4_err_prefix(err, "%s: ", what);
    return G4_OK;
}

int g4_image_proc_parse(const char *text, size_t n, const char *what, g4_image_proc *p, g4_err *err) {
    json_error_t je;
    json_t *root = json_loadb(text, n, JSON_REJECT_DUPLICATES, &je);
    if (!root) return g4_err_set(err, G4_EFORMAT, "%s: bad JSON at line %d: %s", what, je.line, je.text);
    int rc = json_is_object(root) ? parse_obj(root, what, p, err)
                                  : g4_err_set(err, G4_EFORMAT, "%s: the top level must be an object", what);
    json_decref(root);
    return rc;
}

int g4_image_proc_load(const char *model_dir, g4_image_proc *p, g4_err *err) {
    static const char *const names[] = {"processor_config.json", "preprocessor_config.json"};
    g4_image_proc_default(p);
    for (int i = 0; i < 2; i++) {
        char *path = g4_path_join(model_dir, names[i]);
        if (!path) return g4_err_set(err, G4_ENOMEM, "out of memory");
        int present = 0;
        int rc = g4_optional_file(path, &present, err);
        char *text = NULL;
        size_t len = 0;
        if (!rc && present) rc = g4_read_file(path, &text, &len, err);
        if (rc || !present) {
            free(path);
            if (rc) return rc;
            continue;
        }
        json_error_t je;
        json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
        if (!root) rc = g4_err_set(err, G4_EFORMAT, "%s: bad JSON at line %d: %s", path, je.line, je.text);
        else if (!json_is_object(root)) rc = g4_err_set(err, G4_EFORMAT, "%s: the top level must be an object", path);
        else if (i == 0 && !has_proc_keys(root)) rc = -1;   /* a processor file without image keys: try the other */
        else rc = parse_obj(root, path, p, err);
        json_decref(root);
        free(text);
        free(path);
        if (rc != -1) return rc;
    }
    g4_image_proc_default(p);
    return g4_err_set(err, G4_ENOTFOUND, "%s: no image processor config (processor_config.json with image-processor keys, "
                      "or preprocessor_config.json)", model_dir);
}

/* ---- size rule ------------------------------------------------------------------------- */

int g4_image_proc_size(const g4_image_proc *p, int h, int w, int *oh, int *ow, g4_err *err) {
    *oh = *ow = 0;
    int rc = g4_image_proc_check(p, err);
    if (rc) return rc;
    if (h <= 0 || w <= 0) return g4_err_set(err, G4_EINVAL, "image size %d x %d: both sides must be positive", h, w);
    const int64_t k = p->pooling, ps = p->patch_size;
    const int64_t max_patches = (int64_t)p->max_soft_tokens * k * k;
    const int64_t target_px = max_patches * ps * ps;
    const int64_t side = k * ps;
    /* float64 exactly as Python: sqrt(target_px / total_px), ideal = factor * side_len */
    double factor = sqrt((double)target_px / (double)((int64_t)h * w));
    int64_t th = (int64_t)floor(factor * h / (double)side) * side;
    int64_t tw = (int64_t)floor(factor * w / (double)side) * side;
    if (th == 0 && tw == 0)
        return g4_err_set(err, G4_EINVAL, "image %d x %d: the processor's size rule gives 0 x 0", h, w);
    const int64_t max_side = (max_patches / (k * k)) * side;
    if (th == 0) {
        th = side;
        tw = (int64_t)floor((double)w / (double)h) * side;
        if (tw > max_side) tw = max_side;
    } else if (tw == 0) {
        tw = side;
        th = (int64_t)floor((double)h / (double)w) * side;
        if (th > max_side) th = max_side;
    }
    if (th * tw > target_px)
        return g4_err_set(err, G4_EINVAL, "image %d x %d: resizing to %lld x %lld exceeds %lld patches of %d pixels", h, w,
                          (long long)th, (long long)tw, (long long)max_patches, p->patch_size);
    *oh = (int)th;
    *ow = (int)tw;
    return G4_OK;
}

/* ---- patches --------------------------------------------------------------------------- */

void g4_image_hash(const g4_image *im, uint64_t hash[2]) {
    XXH3_state_t st;
    XXH3_128bits_reset(&st);
    uint8_t hdr[8];
    for (int i = 0; i < 4; i++) {
        hdr[i] = (uint8_t)((uint32_t)im->h >> (8 * i));
        hdr[4 + i] = (uint8_t)((uint32_t)im->w >> (8 * i));
    }
    XXH3_128bits_update(&st, hdr, sizeof hdr);
    XXH3_128bits_update(&st, im->rgb, (size_t)im->w * (size_t)im->h * 3);
    XXH128_hash_t d = XXH3_128bits_digest(&st);
    hash[0] = d.low64;
    hash[1] = d.high64;
}

void g4_image_patches_free(g4_image_patches *pp) {
    if (!pp) return;
    free(pp->pixels);
    free(pp->pos);
    memset(pp, 0, sizeof *pp);
}

int g4_image_preprocess(const g4_image_proc *p, const g4_image *im, g4_image_patches *out, g4_err *err) {
    memset(out, 0, sizeof *out);
    if (!im || !im->rgb || im->w <= 0 || im->h <= 0)
        return g4_err_set(err, G4_EINVAL, "preprocess: empty image");
    int th, tw;
    int rc = g4_image_proc_size(p, im->h, im->w, &th, &tw, err);
    if (rc) return rc;
    g4_image resized = {0};
    const g4_image *src = im;
    if (th != im->h || tw != im->w) {   /* HF resizes only when the size changes */
        rc = g4_image_resize_bicubic(im, th, tw, &resized, err);
        if (rc) return rc;
        src = &resized;
    }
    const int ps = p->patch_size;
    out->height = th;
    out->width = tw;
    out->ph = th / ps;
    out->pw = tw / ps;
    out->n = out->ph * out->pw;
    out->n_soft = out->n / (p->pooling * p->pooling);
    out->patch_dim = ps * ps * 3;
    g4_image_hash(src, out->hash);
    out->pixels = malloc((size_t)out->n * out->patch_dim * sizeof *out->pixels);
    out->pos = malloc((size_t)out->n * 2 * sizeof *out->pos);
    if (!out->pixels || !out->pos) {
        g4_image_free(&resized);
        g4_image_patches_free(out);
        return g4_err_set(err, G4_ENOMEM, "out of memory for %d patches", th / ps * (tw / ps));
    }
    /* HF's PIL backend: float32(float64(u8) * rescale_factor); identity normalization adds nothing */
    float lut[256];
    for (int v = 0; v < 256; v++) lut[v] = p->do_rescale ? (float)((double)v * p->rescale) : (float)v;
    float *dst = out->pixels;
    for (int r = 0; r < out->ph; r++) {
        for (int c = 0; c < out->pw; c++) {
            int i = r * out->pw + c;
            out->pos[2 * i] = c;        /* x = column */
            out->pos[2 * i + 1] = r;    /* y = row */
            for (int py = 0; py < ps; py++) {
                const uint8_t *s = src->rgb + ((size_t)(r * ps + py) * tw + (size_t)c * ps) * 3;
                for (int j = 0; j < ps * 3; j++) *dst++ = lut[s[j]];
            }
        }
    }
    g4_image_free(&resized);
    return G4_OK;
}
