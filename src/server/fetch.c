/* fetch.c — image URLs (see fetch.h). libcurl with every protocol but http(s) off, no automatic
 * redirects, no cookies, no proxy from the environment unless curl's own variables say so. */
#include "server/fetch.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <strings.h>

static pthread_once_t once = PTHREAD_ONCE_INIT;
static void init(void) { curl_global_init(CURL_GLOBAL_DEFAULT); }

/* The host of an http(s) URL into buf (lower case, no port, no brackets); 0 when none. */
static int host_of(const char *url, char *buf, size_t cap) {
    CURLU *h = curl_url();
    char *host = NULL, *scheme = NULL;
    int ok = h && curl_url_set(h, CURLUPART_URL, url, 0) == CURLUE_OK && curl_url_get(h, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
             (!strcasecmp(scheme, "http") || !strcasecmp(scheme, "https")) && curl_url_get(h, CURLUPART_HOST, &host, 0) == CURLUE_OK &&
             strlen(host) < cap;
    if (ok) {
        size_t i = 0;
        for (const char *p = host; *p; p++)
            if (*p != '[' && *p != ']') buf[i++] = (char)(*p >= 'A' && *p <= 'Z' ? *p + 32 : *p);
        buf[i] = 0;
    }
    curl_free(host);
    curl_free(scheme);
    curl_url_cleanup(h);
    return ok;
}

int g4_fetch_host_allowed(const char *allowed, const char *url) {
    char host[256];
    if (!allowed || !*allowed || !host_of(url, host, sizeof host)) return 0;
    const size_t hl = strlen(host);
    for (const char *p = allowed; *p;) {
        const char *e = strchr(p, ',');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        while (n && *p == ' ') p++, n--;
        while (n && p[n - 1] == ' ') n--;
        if (n == 1 && *p == '*') return 1;
        if (n > 2 && p[0] == '*' && p[1] == '.') { /* a subdomain of the suffix */
            const size_t sl = n - 1; /* ".example.com" */
            if (hl > sl && !strncasecmp(host + hl - sl, p + 1, sl)) return 1;
        } else if (n == hl && !strncasecmp(host, p, n)) {
            return 1;
        }
        p += n;
        while (*p == ' ' || *p == ',') p++;
    }
    return 0;
}

typedef struct {
    unsigned char *d;
    size_t n, cap, max;
    int too_big;
    const g4_fetch_opts *o;
} sink;

static size_t on_data(char *p, size_t sz, size_t nm, void *u) {
    sink *s = u;
    const size_t n = sz * nm;
    if (s->n + n > s->max) { s->too_big = 1; return 0; }
    if (s->n + n > s->cap) {
        size_t c = s->cap ? s->cap : 65536;
        while (c < s->n + n) c *= 2;
        unsigned char *q = realloc(s->d, c);
        if (!q) return 0;
        s->d = q;
        s->cap = c;
    }
    memcpy(s->d + s->n, p, n);
    s->n += n;
    return n;
}

static int on_progress(void *u, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un) {
    const sink *s = u;
    (void)ut; (void)un;
    if (dt > 0 && (size_t)dt > s->max) return 1; /* Content-Length says too much */
    (void)dn;
    return s->o->gone && s->o->gone(s->o->gone_ctx) ? 1 : 0;
}

int g4_fetch(const char *url, const g4_fetch_opts *o, unsigned char **data, size_t *len, g4_err *err) {
    pthread_once(&once, init);
    *data = NULL;
    *len = 0;
    char cur[4096];
    if (strlen(url) >= sizeof cur) return g4_err_set(err, G4_EINVAL, "the image URL is longer than %zu characters", sizeof cur - 1);
    snprintf(cur, sizeof cur, "%s", url);
    /* one deadline for the whole fetch, redirects included */
    const long limit_ms = o->timeout_ms > 0 ? o->timeout_ms : 10000;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CURL *c = curl_easy_init();
    if (!c) return g4_err_set(err, G4_ENOMEM, "cannot start a fetch");
    int rc = G4_OK;
    for (int hop = 0;; hop++) {
        if (!g4_fetch_host_allowed(o->allowed, cur)) {
            rc = g4_err_set(err, G4_EINVAL, "%s %.200s: the server fetches images only from the hosts --allowed-image-domains lists",
                            hop ? "a redirect to" : "the image URL", cur);
            break;
        }
        if (hop > 3) { rc = g4_err_set(err, G4_EINVAL, "the image URL redirects more than 3 times"); break; }
        sink s = {.max = o->max_bytes, .o = o};
        char ebuf[CURL_ERROR_SIZE] = "";
        curl_easy_reset(c);
        curl_easy_setopt(c, CURLOPT_URL, cur);
        curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
        curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
        curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        const long left_ms = limit_ms - (long)((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000);
        if (left_ms <= 0) { rc = g4_err_set(err, G4_EINVAL, "fetching the image at %.200s: timed out (%ld ms in all, redirects included)", cur, limit_ms); break; }
        curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, left_ms);
        curl_easy_setopt(c, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)o->max_bytes);
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, &s);
        curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
        curl_easy_setopt(c, CURLOPT_XFERINFODATA, &s);
        curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
        curl_easy_setopt(c, CURLOPT_ERRORBUFFER, ebuf);
        curl_easy_setopt(c, CURLOPT_USERAGENT, "g4tp");
        CURLcode cr = curl_easy_perform(c);
        long status = 0;
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
        if (s.too_big || cr == CURLE_FILESIZE_EXCEEDED) {
            free(s.d);
            rc = g4_err_set(err, G4_EINVAL, "the image at %.200s is larger than the limit of %zu bytes", cur, o->max_bytes);
            break;
        }
        if (cr == CURLE_ABORTED_BY_CALLBACK) {
            free(s.d);
            rc = o->gone && o->gone(o->gone_ctx) ? g4_err_set(err, G4_ECANCELED, "the client left")
                                                 : g4_err_set(err, G4_EINVAL, "the image at %.200s is larger than the limit of %zu bytes", cur, o->max_bytes);
            break;
        }
        if (cr != CURLE_OK) {
            free(s.d);
            rc = g4_err_set(err, cr == CURLE_OPERATION_TIMEDOUT ? G4_EINVAL : G4_EIO, "fetching the image at %.200s: %s", cur,
                            cr == CURLE_OPERATION_TIMEDOUT ? "timed out" : ebuf[0] ? ebuf : curl_easy_strerror(cr));
            break;
        }
        if (status >= 300 && status < 400) {
            char *loc = NULL;
            free(s.d);
            if (curl_easy_getinfo(c, CURLINFO_REDIRECT_URL, &loc) != CURLE_OK || !loc) { rc = g4_err_set(err, G4_EINVAL, "the image URL redirects nowhere"); break; }
            if (strlen(loc) >= sizeof cur) { rc = g4_err_set(err, G4_EINVAL, "the image URL redirects to a URL longer than %zu characters", sizeof cur - 1); break; }
            snprintf(cur, sizeof cur, "%s", loc);
            continue;
        }
        if (status != 200) {
            free(s.d);
            rc = g4_err_set(err, G4_EINVAL, "fetching the image at %.200s: HTTP status %ld", cur, status);
            break;
        }
        *data = s.d;
        *len = s.n;
        break;
    }
    curl_easy_cleanup(c);
    return rc;
}
