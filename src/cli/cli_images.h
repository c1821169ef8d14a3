/* cli_images.h — images given on the command line (`--image FILE`, chat's `/image FILE`):
 * decoded and preprocessed with the model's image processor, then attached to a tokenized
 * prompt (its placeholders expanded) for the scheduler. */
#ifndef G4_CLI_IMAGES_H
#define G4_CLI_IMAGES_H

#include "g4.h"
#include "engine/textgen.h"
#include "image/processor.h"

#define CLI_MAX_IMAGES 16

typedef struct cli_images {
    int n;
    g4_image_patches pp[CLI_MAX_IMAGES];
    g4_prompt_image im[CLI_MAX_IMAGES];
} cli_images;

/* Appends FILE's image (decoded, preprocessed with model_dir's processor_config.json). Prints
 * the error as `g4tp CMD: ...` and returns 0 on failure. */
int cli_images_add(cli_images *ci, const char *model_dir, const char *file, const char *cmd);
/* Expands the placeholders of *ids (replacing it) and points gp at the images. 0 on failure
 * (printed). */
int cli_images_attach(cli_images *ci, g4_engine *e, int32_t **ids, size_t *n, g4_gen_params *gp, const char *cmd);
void cli_images_free(cli_images *ci);

#endif
