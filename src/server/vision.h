/* vision.h — a request's images made ready for the scheduler: fetched (fetch.h, when the
 * operator allows the host), decoded and preprocessed with the model's image processor, the
 * prompt's placeholders expanded over them (engine/images.h); within the server's image limits
 * and a budget of pixels being decoded at once across requests (503 beyond); counted in /metrics. */
#ifndef G4_SERVER_VISION_H
#define G4_SERVER_VISION_H

#include "engine/textgen.h"
#include "image/processor.h"
#include "server/server_internal.h"

typedef struct g4_srv_images {
    g4_image_patches *pp;     /* [n] */
    g4_prompt_image *pim;     /* [n] what g4_gen_params.images points at */
    int n;
} g4_srv_images;

/* For the prompt *ids (*n tokens; replaced by the expanded prompt): q's images. Nothing to do
 * (0, out->n = 0) without images and placeholders. A 400 for a model without a tower, more
 * images than allowed, a bad image (the decoder's words, naming where the request put it), a
 * URL the server may not fetch, placeholders and images that differ in number. count: the
 * images go to the scheduler (g4tp_images_total counts them; a token count does not). */
int g4_srv_images_prepare(g4_server *s, g4_http_req *hr, const g4_api_request *q, int32_t **ids, size_t *n, g4_srv_images *out,
                          int count, g4_api_err *ae);
void g4_srv_images_free(g4_srv_images *im);

#endif
