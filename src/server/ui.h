/* ui.h — the chat page's files (src/server/ui/), embedded into the binary at build time by
 * scripts/embed-files.sh, and how they are answered: "/" is index.html, "/ui/NAME" the others.
 * Knows the HTTP adapter's interface only: no routing, auth or model. */
#ifndef G4_SERVER_UI_H
#define G4_SERVER_UI_H

#include <stddef.h>

#include "server/http.h"

typedef struct g4_ui_file {
    const char *name;          /* base name, e.g. "app.js" */
    const unsigned char *data;
    size_t len;
    const char *etag;          /* quoted: "\"0123456789abcdef\"" (a hash of the bytes) */
} g4_ui_file;

/* The generated table (build/gen/ui_files.c). */
extern const g4_ui_file g4_ui_files[];
extern const size_t g4_ui_n_files;

/* The file a request path names, or NULL ("/" -> index.html, "/ui/NAME" -> NAME). */
const g4_ui_file *g4_ui_find(const char *path);
/* Content-Type for a file name (by its extension). */
const char *g4_ui_content_type(const char *name);
/* Answers GET / HEAD of f: 200 with the bytes, or 304 when if_none_match (the request's
 * If-None-Match header, may be NULL) names its ETag; always with the page's security headers
 * (Content-Security-Policy: same-origin files only, no inline script or style). *status: the
 * HTTP status answered. */
int g4_ui_answer(g4_http_req *r, const g4_ui_file *f, const char *if_none_match, int *status);

#endif
