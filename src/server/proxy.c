/* proxy.c — a request passed on to a local server (see proxy.h). libcurl runs the upstream
 * transfer in a thread of its own; its body goes through a bounded buffer to the adapter's
 * streamed answer, so a slow client slows the upstream (backpressure) instead of filling memory,
 * and a client that leaves stops the transfer (the upstream sees its client go and cancels). */
#include "server/proxy.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

enum { PENDING_MAX = 1 << 20 }; /* bytes held for a slow client before the upstream waits */

typedef struct xfer {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    char *buf;
    size_t len, off, cap;
    int status, headers_done, finished, failed, gone;
    char ctype[128], retry[32];
    CURL *c;
    struct curl_slist *hdrs;
    pthread_t th;
    g4_proxy_done_fn done;
    void *user;
} xfer;

static void wait_ms(xfer *x, int ms) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += (long)ms * 1000000L;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    pthread_cond_timedwait(&x->cv, &x->mu, &ts);
}

static size_t on_body(char *p, size_t sz, size_t nm, void *u) {
    xfer *x = u;
    const size_t n = sz * nm;
    pthread_mutex_lock(&x->mu);
    while (!x->gone && x->len - x->off > PENDING_MAX) wait_ms(x, 100);
    if (x->gone) { pthread_mutex_unlock(&x->mu); return 0; } /* aborts the transfer */
    if (x->off && x->off == x->len) x->off = x->len = 0;
    if (x->len + n > x->cap) {
        if (x->off) { memmove(x->buf, x->buf + x->off, x->len - x->off); x->len -= x->off; x->off = 0; }
        size_t cap = x->cap ? x->cap : 16384;
        while (cap < x->len + n) cap *= 2;
        char *b = realloc(x->buf, cap);
        if (!b) { x->failed = 1; pthread_mutex_unlock(&x->mu); return 0; }
        x->buf = b;
        x->cap = cap;
    }
    memcpy(x->buf + x->len, p, n);
    x->len += n;
    pthread_cond_broadcast(&x->cv);
    pthread_mutex_unlock(&x->mu);
    return n;
}

/* "Name: value\r\n" -> value into out when the name matches */
static void header_value(const char *line, size_t n, const char *name, char *out, size_t cap) {
    const size_t nl = strlen(name);
    if (n <= nl + 1 || strncasecmp(line, name, nl) || line[nl] != ':') return;
    const char *v = line + nl + 1;
    size_t vl = n - nl - 1;
    while (vl && (*v == ' ' || *v == '\t')) v++, vl--;
    while (vl && (v[vl - 1] == '\r' || v[vl - 1] == '\n' || v[vl - 1] == ' ')) vl--;
    if (vl >= cap) vl = cap - 1;
    memcpy(out, v, vl);
    out[vl] = 0;
}

static size_t on_header(char *p, size_t sz, size_t nm, void *u) {
    xfer *x = u;
    const size_t n = sz * nm;
    pthread_mutex_lock(&x->mu);
    if (n >= 5 && !strncmp(p, "HTTP/", 5)) x->ctype[0] = x->retry[0] = 0; /* a new response (after a 1xx) */
    header_value(p, n, "Content-Type", x->ctype, sizeof x->ctype);
    header_value(p, n, "Retry-After", x->retry, sizeof x->retry);
    if ((n == 2 && p[0] == '\r') || (n == 1 && p[0] == '\n')) {
        long code = 0;
        curl_easy_getinfo(x->c, CURLINFO_RESPONSE_CODE, &code);
        if (code >= 200) {
            x->status = (int)code;
            x->headers_done = 1;
            pthread_cond_broadcast(&x->cv);
        }
    }
    pthread_mutex_unlock(&x->mu);
    return n;
}

static int on_progress(void *u, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d) {
    (void)a, (void)b, (void)c, (void)d;
    xfer *x = u;
    pthread_mutex_lock(&x->mu);
    const int gone = x->gone;
    pthread_mutex_unlock(&x->mu);
    return gone;
}

static void *run(void *u) {
    xfer *x = u;
    const CURLcode rc = curl_easy_perform(x->c);
    pthread_mutex_lock(&x->mu);
    x->finished = 1;
    if (rc != CURLE_OK) x->failed = 1;
    pthread_cond_broadcast(&x->cv);
    pthread_mutex_unlock(&x->mu);
    return NULL;
}

static void xfer_free(xfer *x) {
    curl_easy_cleanup(x->c);
    curl_slist_free_all(x->hdrs);
    pthread_cond_destroy(&x->cv);
    pthread_mutex_destroy(&x->mu);
    free(x->buf);
    free(x);
}

static void stop_and_join(xfer *x) {
    pthread_mutex_lock(&x->mu);
    x->gone = 1;
    pthread_cond_broadcast(&x->cv);
    pthread_mutex_unlock(&x->mu);
    pthread_join(x->th, NULL);
}

static long read_body(void *u, char *buf, size_t max) {
    xfer *x = u;
    pthread_mutex_lock(&x->mu);
    while (x->off == x->len && !x->finished) wait_ms(x, 200);
    long n;
    if (x->off < x->len) {
        size_t k = x->len - x->off < max ? x->len - x->off : max;
        memcpy(buf, x->buf + x->off, k);
        x->off += k;
        pthread_cond_broadcast(&x->cv); /* room for the upstream again */
        n = (long)k;
    } else {
        n = x->failed ? G4_HTTP_ABORT : G4_HTTP_END; /* an upstream cut short cuts the client's answer */
    }
    pthread_mutex_unlock(&x->mu);
    return n;
}

static void body_done(void *u) {
    xfer *x = u;
    stop_and_join(x);
    if (x->done) x->done(x->user);
    xfer_free(x);
}

int g4_proxy_forward(g4_http_req *r, int port, const char *key, g4_proxy_done_fn done, void *user, g4_err *err) {
    xfer *x = calloc(1, sizeof *x);
    if (!x) return g4_err_set(err, G4_ENOMEM, "out of memory");
    pthread_mutex_init(&x->mu, NULL);
    pthread_cond_init(&x->cv, NULL);
    x->done = done;
    x->user = user;
    char url[4200], h[4300];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port, g4_http_path(r));
    static const char *const pass[] = {"Content-Type", "Accept", "anthropic-version", "anthropic-beta"};
    for (size_t i = 0; i < sizeof pass / sizeof *pass; i++) {
        const char *v = g4_http_header(r, pass[i]);
        if (v && !strpbrk(v, "\r\n")) {
            snprintf(h, sizeof h, "%s: %s", pass[i], v);
            x->hdrs = curl_slist_append(x->hdrs, h);
        }
    }
    snprintf(h, sizeof h, "Authorization: Bearer %s", key);
    x->hdrs = curl_slist_append(x->hdrs, h);
    x->hdrs = curl_slist_append(x->hdrs, "Expect:"); /* no 100-continue round trip */
    size_t blen = 0;
    const char *body = g4_http_body(r, &blen);
    if (!(x->c = curl_easy_init()) || !x->hdrs) { xfer_free(x); return g4_err_set(err, G4_ENOMEM, "out of memory"); }
    curl_easy_setopt(x->c, CURLOPT_URL, url);
    curl_easy_setopt(x->c, CURLOPT_PROTOCOLS_STR, "http");
    curl_easy_setopt(x->c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(x->c, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
    curl_easy_setopt(x->c, CURLOPT_HTTPHEADER, x->hdrs);
    curl_easy_setopt(x->c, CURLOPT_CUSTOMREQUEST, g4_http_method(r));
    if (!strcmp(g4_http_method(r), "HEAD")) curl_easy_setopt(x->c, CURLOPT_NOBODY, 1L);
    if (!strcmp(g4_http_method(r), "POST")) {
        curl_easy_setopt(x->c, CURLOPT_POSTFIELDS, body ? body : "");
        curl_easy_setopt(x->c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)blen);
    }
    curl_easy_setopt(x->c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(x->c, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(x->c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(x->c, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(x->c, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(x->c, CURLOPT_XFERINFODATA, x);
    curl_easy_setopt(x->c, CURLOPT_NOPROGRESS, 0L);
    if (pthread_create(&x->th, NULL, run, x)) { xfer_free(x); return g4_err_set(err, G4_ENOMEM, "cannot start a thread"); }
    /* the answer's head first; the client leaving meanwhile stops the wait */
    pthread_mutex_lock(&x->mu);
    while (!x->headers_done && !x->finished) {
        pthread_mutex_unlock(&x->mu);
        const int gone = g4_http_client_gone(r);
        pthread_mutex_lock(&x->mu);
        if (gone) { x->gone = 1; break; }
        wait_ms(x, 100);
    }
    const int ok = x->headers_done && !x->gone;
    pthread_mutex_unlock(&x->mu);
    if (!ok) {
        stop_and_join(x);
        xfer_free(x);
        return g4_err_set(err, G4_EIO, "the model's server did not answer");
    }
    const char *extra[] = {x->retry[0] ? "Retry-After" : NULL, x->retry, NULL, NULL};
    /* from here body_done runs once whatever happens (the adapter calls it on a failure too) */
    g4_http_send_stream(r, x->status, x->ctype[0] ? x->ctype : "application/octet-stream", read_body, body_done, x, extra);
    return G4_OK;
}
