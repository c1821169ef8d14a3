/* vision.c — a request's images (see vision.h). Runs in the connection's thread: the decoding
 * and resizing are bounded by the image limits, the fetch by its own, and the pixels held at
 * once across requests by the image budget. */
#include "server/vision.h"

#include <stdlib.h>
#include <string.h>

#include "engine/images.h"
#include "image/image.h"
#include "model/config.h"
#include "server/fetch.h"

static int client_gone(void *ctx) { return g4_http_client_gone(ctx); }

static int refuse(g4_server *s, g4_api_err *ae, const char *why, int code, const char *param, const char *msg) {
    g4_metrics_image_refused(s->metrics, why);
    return g4_api_err_status(ae, code, param, "%s", msg);
}

int g4_srv_images_prepare(g4_server *s, g4_http_req *hr, const g4_api_request *q, int32_t **ids, size_t *n, g4_srv_images *out,
                          int count, g4_api_err *ae) {
    memset(out, 0, sizeof *out);
    const g4_config *cfg = g4_engine_config(s->e);
    size_t placeholders = 0;
    for (size_t i = 0; cfg->vision.has_vision && i < *n; i++) placeholders += (*ids)[i] == cfg->vision.image_token_id;
    const size_t ni = q->images.n;
    if (!ni && !placeholders) return 0;
    char msg[1600];
    const char *where = ni ? q->images.v[0].param : q->chat ? "messages" : "prompt";
    if (!g4_engine_has_vision(s->e)) {
        snprintf(msg, sizeof msg, "this model takes no images (%s has no vision tower)", s->model_id);
        return refuse(s, ae, "no_vision", G4_EUNSUPPORTED, where, msg);
    }
    if ((int)ni > s->o.max_images) {
        snprintf(msg, sizeof msg, "%zu images in one request; the server takes at most %d (--max-images)", ni, s->o.max_images);
        return refuse(s, ae, "too_many", G4_EINVAL, where, msg);
    }
    if (s->image_proc_err[0]) {
        snprintf(msg, sizeof msg, "this model cannot take images: %s", s->image_proc_err);
        return refuse(s, ae, "no_vision", G4_EUNSUPPORTED, where, msg);
    }
    const g4_image_proc *proc = &s->image_proc;
    g4_err err = {0};
    out->pp = calloc(ni + 1, sizeof *out->pp);
    out->pim = calloc(ni + 1, sizeof *out->pim);
    if (!out->pp || !out->pim) return g4_api_err_status(ae, G4_ENOMEM, NULL, "out of memory");
    const g4_image_limits lim = {.max_bytes = s->o.image_max_bytes, .max_pixels = s->o.image_max_pixels, .max_side = G4_IMAGE_DEFAULT_MAX_SIDE};
    const g4_fetch_opts fo = {.allowed = s->o.allowed_image_domains, .max_bytes = s->o.image_max_bytes, .timeout_ms = s->o.image_fetch_timeout_ms,
                              .gone = client_gone, .gone_ctx = hr};
    int rc = 0;
    for (size_t i = 0; i < ni && !rc; i++) {
        const g4_api_image *a = &q->images.v[i];
        unsigned char *fetched = NULL;
        const unsigned char *data = a->data;
        size_t len = a->len;
        if (a->url) {
            if (!s->o.allowed_image_domains) {
                snprintf(msg, sizeof msg, "%s: this server does not fetch image URLs (send the image as a data URL, or start it with --allowed-image-domains)", a->param);
                rc = refuse(s, ae, "url", G4_EINVAL, a->param, msg);
                break;
            }
            if (g4_fetch(a->url, &fo, &fetched, &len, &err)) {
                snprintf(msg, sizeof msg, "%s: %s", a->param, err.msg);
                rc = err.code == G4_ECANCELED ? g4_api_err_status(ae, G4_ECANCELED, a->param, "%s", msg) : refuse(s, ae, "url", err.code == G4_EIO ? G4_EINVAL : err.code, a->param, msg);
                break;
            }
            data = fetched;
        }
        g4_image im;
        /* One image is decoded at a time; its worst case (the pixel limit) counts against the
         * budget shared with other requests while it is decoded and resized. The first decoder
         * is always let in, so a budget below one image still serves one at a time. */
        const size_t worst = (size_t)s->o.image_max_pixels * 3;
        size_t before = atomic_load(&s->image_bytes);
        int admitted = 0;
        while (!admitted && !(before && before + worst > s->o.image_budget)) /* counted only once let in */
            admitted = atomic_compare_exchange_weak(&s->image_bytes, &before, before + worst);
        if (!admitted) {
            free(fetched);
            g4_api_err_status(ae, G4_EBUSY, NULL, "too many images are being decoded now (--image-budget-bytes); retry shortly");
            g4_metrics_image_refused(s->metrics, "busy");
            rc = ae->status;
            break;
        }
        rc = g4_image_decode(data, len, &lim, &im, &err);
        free(fetched);
        if (!rc) {
            rc = g4_image_preprocess(proc, &im, &out->pp[out->n], &err);
            g4_image_free(&im);
        }
        atomic_fetch_sub(&s->image_bytes, worst);
        if (rc) {
            snprintf(msg, sizeof msg, "%s: %s", a->param, err.msg);
            rc = refuse(s, ae, err.code == G4_EUNSUPPORTED ? "format" : err.code == G4_EINVAL ? "limit" : "corrupt",
                        err.code == G4_ENOMEM ? G4_ENOMEM : G4_EINVAL, a->param, msg);
            break;
        }
        out->n++;
    }
    if (rc) return rc;
    int32_t *x;
    size_t nx;
    if (g4_images_prepare(cfg, *ids, *n, out->pp, out->n, &x, &nx, out->pim, &err)) {
        snprintf(msg, sizeof msg, "%s%s", err.msg, placeholders > ni ? " (the text may not name the image placeholder itself)" : "");
        return refuse(s, ae, "placeholders", G4_EINVAL, where, msg);
    }
    free(*ids);
    *ids = x;
    *n = nx;
    if (count) g4_metrics_images(s->metrics, out->n);
    return 0;
}

void g4_srv_images_free(g4_srv_images *im) {
    for (int i = 0; i < im->n; i++) g4_image_patches_free(&im->pp[i]);
    free(im->pp);
    free(im->pim);
    memset(im, 0, sizeof *im);
}
