/* cli_images.c — command-line images (see cli_images.h). */
#include "cli_images.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "engine/images.h"
#include "image/image.h"

int cli_images_add(cli_images *ci, const char *model_dir, const char *file, const char *cmd) {
    if (ci->n == CLI_MAX_IMAGES) { fprintf(stderr, "g4tp %s: at most %d images\n", cmd, CLI_MAX_IMAGES); return 0; }
    g4_err err = {0};
    g4_image_proc proc;
    g4_image im;
    int rc = g4_image_proc_load(model_dir, &proc, &err);
    if (rc == G4_ENOTFOUND) g4_err_set(&err, G4_EUNSUPPORTED, "the model in %s takes no images (no processor_config.json)", model_dir);
    if (rc) { cli_error(cmd, &err); return 0; }
    if ((rc = g4_image_load_file(file, NULL, &im, &err))) { g4_err_prefix(&err, "%s: ", file); cli_error(cmd, &err); return 0; }
    rc = g4_image_preprocess(&proc, &im, &ci->pp[ci->n], &err);
    g4_image_free(&im);
    if (rc) { g4_err_prefix(&err, "%s: ", file); cli_error(cmd, &err); return 0; }
    ci->n++;
    return 1;
}

int cli_images_attach(cli_images *ci, g4_engine *e, int32_t **ids, size_t *n, g4_gen_params *gp, const char *cmd) {
    g4_err err = {0};
    if (ci->n && !g4_engine_has_vision(e)) {
        g4_engine_encode_image(e, NULL, NULL, 0, 0, NULL, &err); /* its message says why */
        cli_error(cmd, &err);
        return 0;
    }
    gp->images = NULL;
    gp->n_images = 0;
    /* a vision model: the placeholders must match the images, none given included (a prompt that
     * names an image it does not have is refused); a text model has no placeholder to expand */
    const g4_config *cfg = g4_engine_config(e);
    int placeholders = 0;
    for (size_t i = 0; i < *n; i++) placeholders += cfg->vision.has_vision && (*ids)[i] == cfg->vision.image_token_id;
    if (!ci->n && !placeholders) return 1;
    int32_t *out;
    size_t n_out;
    if (g4_images_prepare(g4_engine_config(e), *ids, *n, ci->pp, ci->n, &out, &n_out, ci->im, &err)) {
        cli_error(cmd, &err);
        return 0;
    }
    free(*ids);
    *ids = out;
    *n = n_out;
    gp->images = ci->n ? ci->im : NULL;
    gp->n_images = ci->n;
    return 1;
}

void cli_images_free(cli_images *ci) {
    for (int i = 0; i < ci->n; i++) g4_image_patches_free(&ci->pp[i]);
    ci->n = 0;
}
