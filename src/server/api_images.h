/* api_images.h — the images of an API request, as the parsers find them: bytes given inline
 * (data URLs, base64 blocks) or http(s) URLs to fetch later (fetch.h, behind an allow-list).
 * In every API an image becomes an OpenAI `image_url` content part before the one message check
 * (g4_api_messages), which takes each such part out of the conversation into the request's list,
 * in the order the chat template renders them, and leaves {"type":"image"} behind (the template
 * renders that as the image placeholder). Pure: no HTTP, no network, no pixels. */
#ifndef G4_SERVER_API_IMAGES_H
#define G4_SERVER_API_IMAGES_H

#include <jansson.h>
#include <stddef.h>

#include "server/errors.h"

#define G4_API_MAX_IMAGES 64       /* per request, whatever the server's own limit */

typedef struct g4_api_image {
    unsigned char *data;           /* the encoded image (data URL / base64), or NULL */
    size_t len;
    char *url;                     /* or an http(s) URL to fetch */
    char param[96];                /* where the request put it, for error messages */
} g4_api_image;

typedef struct g4_api_images {
    g4_api_image *v;
    size_t n;
} g4_api_images;

void g4_api_images_free(g4_api_images *im);

/* A content part {"type":"image_url","image_url":{"url":U}} (or "image_url":U): U is a data URL
 * ("data:image/...;base64,...") or an http(s) URL. Appends the image, replaces the part in place
 * by {"type":"image"}. 400 (naming param) for anything else: bad base64, other schemes, a data
 * URL that is not base64, a media type that is not an image type. */
int g4_api_images_take(json_t *part, const char *param, g4_api_images *im, g4_api_err *ae);

/* Strict base64 (RFC 4648, the standard or the URL-safe alphabet, padding optional, canonical
 * spare bits, no whitespace but '\n'/'\r' line breaks): *out
 * malloc'd. 0, or -1 on a bad character, length or padding (nothing allocated). */
int g4_base64_decode(const char *s, size_t n, unsigned char **out, size_t *out_len);

#endif
