/* fetch.h — an image URL fetched for a request (libcurl), only from hosts the operator allowed
 * (`--allowed-image-domains`), over http(s) only, within a size and a time limit, redirects
 * followed by hand (at most 3, each hop's host checked against the list again), cancelled when
 * the client goes away. Knows URLs and bytes, nothing of images or APIs. */
#ifndef G4_SERVER_FETCH_H
#define G4_SERVER_FETCH_H

#include <stddef.h>

#include "base/error.h"

typedef struct g4_fetch_opts {
    const char *allowed;      /* comma-separated host names; "*.example.com" matches subdomains; NULL: none */
    size_t max_bytes;         /* a larger body is refused (as it arrives, not after) */
    int timeout_ms;           /* the whole fetch, redirects included */
    int (*gone)(void *ctx);   /* non-zero: the client left, stop (may be NULL) */
    void *gone_ctx;
} g4_fetch_opts;

/* 1 when url's host is on the list (exact, or a "*.suffix" entry's subdomain). */
int g4_fetch_host_allowed(const char *allowed, const char *url);
/* GETs url: *data (malloc'd) and *len. G4_EINVAL: not allowed, not http(s), too many redirects,
 * too large, an HTTP status other than 200; G4_EIO: the network (naming it); G4_ECANCELED. */
int g4_fetch(const char *url, const g4_fetch_opts *o, unsigned char **data, size_t *len, g4_err *err);

#endif
