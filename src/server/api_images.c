/* api_images.c — images found in API requests (see api_images.h). */
#include "server/api_images.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

void g4_api_images_free(g4_api_images *im) {
    for (size_t i = 0; i < im->n; i++) { free(im->v[i].data); free(im->v[i].url); }
    free(im->v);
    im->v = NULL;
    im->n = 0;
}

static int b64v(unsigned char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+' || c == '-') return 62; /* the URL-safe alphabet too */
    if (c == '/' || c == '_') return 63;
    return -1;
}

int g4_base64_decode(const char *s, size_t n, unsigned char **out, size_t *out_len) {
    unsigned char *o = malloc(n / 4 * 3 + 3);
    if (!o) return -1;
    size_t k = 0, pad = 0;
    uint32_t acc = 0;
    int bits = 0, q = 0; /* q: sextets in the current quantum */
    for (size_t i = 0; i < n; i++) {
        const unsigned char c = (unsigned char)s[i];
        if (c == '\n' || c == '\r') continue;
        if (c == '=') { pad++; continue; }
        const int v = b64v(c);
        if (v < 0 || pad) { free(o); return -1; } /* a bad character, or data after padding */
        acc = acc << 6 | (uint32_t)v;
        bits += 6;
        q = (q + 1) % 4;
        if (bits >= 8) {
            bits -= 8;
            o[k++] = (unsigned char)(acc >> bits);
        }
    }
    /* a final quantum of 1 sextet is impossible; padding must fill the quantum it ends */
    if (q == 1 || (pad && (q + pad) % 4) || pad > 2 || (acc & ((1u << bits) - 1))) { free(o); return -1; }
    *out = o;
    *out_len = k;
    return 0;
}

static int add(g4_api_images *im, const char *param, g4_api_image *x, g4_api_err *ae) {
    if (im->n == G4_API_MAX_IMAGES) {
        free(x->data); free(x->url);
        return g4_api_err_status(ae, G4_EINVAL, param, "more than %d images in one request", G4_API_MAX_IMAGES);
    }
    g4_api_image *v = realloc(im->v, (im->n + 1) * sizeof *v);
    if (!v) { free(x->data); free(x->url); return g4_api_err_status(ae, G4_ENOMEM, NULL, "out of memory"); }
    im->v = v;
    snprintf(x->param, sizeof x->param, "%s", param);
    im->v[im->n++] = *x;
    return 0;
}

int g4_api_images_take(json_t *part, const char *param, g4_api_images *im, g4_api_err *ae) {
    json_t *iu = json_object_get(part, "image_url");
    json_t *u = json_is_object(iu) ? json_object_get(iu, "url") : iu;
    if (!json_is_string(u)) return g4_api_err_status(ae, G4_EINVAL, param, "%s.image_url must be a URL string or an object with a string 'url'", param);
    const char *s = json_string_value(u);
    const size_t n = json_string_length(u);
    g4_api_image x = {0};
    if (n >= 5 && !strncasecmp(s, "data:", 5)) {
        const char *comma = memchr(s, ',', n);
        if (!comma) return g4_api_err_status(ae, G4_EINVAL, param, "%s: a data URL needs a ',' before its data", param);
        const char *meta = s + 5;
        const size_t ml = (size_t)(comma - meta);
        if (ml < 7 || strncasecmp(meta + ml - 7, ";base64", 7))
            return g4_api_err_status(ae, G4_EINVAL, param, "%s: only base64 data URLs are taken (data:image/png;base64,...)", param);
        if (ml > 7 && strncasecmp(meta, "image/", 6))
            return g4_api_err_status(ae, G4_EINVAL, param, "%s: the data URL's media type must be an image (image/png, image/jpeg, image/webp)", param);
        if (g4_base64_decode(comma + 1, n - (size_t)(comma + 1 - s), &x.data, &x.len))
            return g4_api_err_status(ae, G4_EINVAL, param, "%s: the data URL's base64 is not valid", param);
        if (x.len == 0) {
            free(x.data);
            return g4_api_err_status(ae, G4_EINVAL, param, "%s: the data URL holds no image (it is empty)", param);
        }
    } else if ((n >= 7 && !strncasecmp(s, "http://", 7)) || (n >= 8 && !strncasecmp(s, "https://", 8))) {
        if (strlen(s) != n || !(x.url = strdup(s))) return g4_api_err_status(ae, G4_EINVAL, param, "%s: the URL is not valid", param);
    } else {
        return g4_api_err_status(ae, G4_EINVAL, param, "%s: an image URL must be a data URL or an http(s) URL", param);
    }
    int rc = add(im, param, &x, ae);
    if (rc) return rc;
    json_object_clear(part);
    json_object_set_new(part, "type", json_string("image"));
    return 0;
}
