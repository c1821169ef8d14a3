/* http.c — libmicrohttpd behind the small interface of http.h: binds the listener (one thread
 * per connection), collects request bodies up to the limit, calls the handler once per
 * request, and turns its answers into MHD responses (fixed or chunked streaming). Owns no
 * routing, JSON or engine knowledge. */
#include "server/http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

struct g4_http {
    struct MHD_Daemon *d;
    g4_http_opts o;
    int port;
    atomic_int inflight;      /* requests begun and not yet completed */
};

#define MAX_EXTRA 8            /* headers added to every answer of a request (g4_http_add_header) */

struct g4_http_req {
    g4_http *h;
    struct MHD_Connection *conn;
    const char *method, *url;
    char *body;
    size_t len, cap;
    int too_large, answered;
    int http11;               /* HTTP/1.1: may be sent interim 1xx answers */
    int n_content_length;     /* Content-Length headers in the head */
    int broken;               /* a probe was cut short: the connection must be dropped */
    double probed_at;         /* monotonic seconds of the last 100 Continue probe (0: none) */
    char *extra[2 * MAX_EXTRA];/* name, value pairs (owned) */
    int n_extra;
};

typedef struct {
    g4_http_read_fn read;
    g4_http_done_fn done;
    void *user;
} stream_ctx;

const char *g4_http_method(const g4_http_req *r) { return r->method; }
const char *g4_http_path(const g4_http_req *r) { return r->url; }
const char *g4_http_header(const g4_http_req *r, const char *name) {
    return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, name);
}

const char *g4_http_query(const g4_http_req *r, const char *name) { return MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, name); }
const char *g4_http_body(const g4_http_req *r, size_t *len) {
    *len = r->len;
    return r->body ? r->body : "";
}
int g4_http_body_too_large(const g4_http_req *r) { return r->too_large; }

const char *g4_http_malformed(const g4_http_req *r) {
    return r->n_content_length > 1 ? "the request has several Content-Length headers" : NULL;
}

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Seconds between probes of a client that half-closed: each one is a few bytes its reader skips. */
#define PROBE_INTERVAL_S 5.0

int g4_http_client_gone(g4_http_req *r) {
    if (r->broken) return 1;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return 0;
    /* POLLHUP: both directions are closed (a reset, or our FIN too); POLLRDHUP: the peer's FIN */
    struct pollfd p = {.fd = ci->connect_fd, .events = POLLRDHUP};
    if (poll(&p, 1, 0) <= 0) return 0;
    if (p.revents & (POLLHUP | POLLERR | POLLNVAL)) return 1;
    if (!(p.revents & POLLRDHUP) || !r->http11) return 0;
    double t = mono_s();
    if (r->probed_at > 0 && t - r->probed_at < PROBE_INTERVAL_S) return 0;
    r->probed_at = t;
    static const char probe[] = "HTTP/1.1 100 Continue\r\n\r\n";
    ssize_t n = send(ci->connect_fd, probe, sizeof probe - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n == (ssize_t)(sizeof probe - 1)) return 0;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return 0; /* nothing went out: try later */
    r->broken = n > 0; /* a part of the probe went out: no answer can follow it */
    return 1;
}

int g4_http_add_header(g4_http_req *r, const char *name, const char *value) {
    if (r->n_extra == MAX_EXTRA) return G4_EINVAL;
    char *n = strdup(name), *v = strdup(value);
    if (!n || !v) { free(n); free(v); return G4_ENOMEM; }
    r->extra[2 * r->n_extra] = n;
    r->extra[2 * r->n_extra + 1] = v;
    r->n_extra++;
    return G4_OK;
}

static int add_headers(const g4_http_req *r, struct MHD_Response *resp, const char *ctype, const char *const *headers) {
    if (ctype && MHD_add_response_header(resp, "Content-Type", ctype) != MHD_YES) return 0;
    for (size_t i = 0; headers && headers[i] && headers[i + 1]; i += 2)
        if (MHD_add_response_header(resp, headers[i], headers[i + 1]) != MHD_YES) return 0;
    for (int i = 0; i < r->n_extra; i++)
        if (MHD_add_response_header(resp, r->extra[2 * i], r->extra[2 * i + 1]) != MHD_YES) return 0;
    return 1;
}

int g4_http_send(g4_http_req *r, int status, const char *content_type, const char *body, size_t len,
                 const char *const *headers) {
    if (r->answered) return G4_EINVAL;
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!resp) return G4_ENOMEM;
    int ok = add_headers(r, resp, content_type, headers);
    if (ok) ok = MHD_queue_response(r->conn, (unsigned)status, resp) == MHD_YES;
    MHD_destroy_response(resp);
    r->answered = 1;
    return ok ? G4_OK : G4_EIO;
}

static enum MHD_Result count_content_length(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    (void)kind; (void)value;
    if (key && !strcasecmp(key, "Content-Length")) ++*(int *)cls;
    return MHD_YES;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    stream_ctx *s = cls;
    long n = s->read(s->user, buf, max);
    if (n == G4_HTTP_END) return MHD_CONTENT_READER_END_OF_STREAM;
    if (n <= 0) return MHD_CONTENT_READER_END_WITH_ERROR;
    return (ssize_t)n;
}

static void stream_free(void *cls) {
    stream_ctx *s = cls;
    if (s->done) s->done(s->user);
    free(s);
}

int g4_http_send_stream(g4_http_req *r, int status, const char *content_type, g4_http_read_fn read,
                        g4_http_done_fn done, void *user, const char *const *headers) {
    if (r->answered) return G4_EINVAL;
    stream_ctx *s = malloc(sizeof *s);
    if (!s) { if (done) done(user); return G4_ENOMEM; }
    s->read = read;
    s->done = done;
    s->user = user;
    r->answered = 1;
    /* from here on the response owns s: stream_free runs when MHD is done with it */
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, s, stream_free);
    if (!resp) { stream_free(s); return G4_ENOMEM; }
    int ok = add_headers(r, resp, content_type, headers);
    if (ok) ok = MHD_queue_response(r->conn, (unsigned)status, resp) == MHD_YES;
    MHD_destroy_response(resp); /* frees s (calls done) when it was not queued */
    return ok ? G4_OK : G4_EIO;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **con_cls) {
    g4_http *h = cls;
    g4_http_req *r = *con_cls;
    if (!r) {
        r = calloc(1, sizeof *r);
        if (!r) return MHD_NO;
        r->h = h;
        r->conn = conn;
        atomic_fetch_add(&h->inflight, 1);
        r->method = method;
        r->url = url;
        r->http11 = version && !strcmp(version, MHD_HTTP_VERSION_1_1);
        *con_cls = r;
        MHD_get_connection_values(conn, MHD_HEADER_KIND, count_content_length, &r->n_content_length);
        if (r->n_content_length > 1) { /* which length frames the body is ambiguous: answer now, then close */
            h->o.handler(h->o.user, r);
            if (!r->answered) g4_http_send(r, 400, "text/plain", "bad request\n", 12, NULL);
            return MHD_YES;
        }
        /* a declared length over the limit is refused before reading the body */
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
        if (cl) {
            char *end;
            unsigned long long v = strtoull(cl, &end, 10);
            if (end != cl && v > h->o.max_body) {
                r->too_large = 1;
                h->o.handler(h->o.user, r);
                if (!r->answered) g4_http_send(r, 413, "text/plain", "request body too large\n", 23, NULL);
                return MHD_YES;
            }
        }
        return MHD_YES;
    }
    if (*upload_data_size) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (r->answered || r->too_large) return MHD_YES; /* discard */
        if (r->len + n > h->o.max_body) {
            r->too_large = 1;
            free(r->body);
            r->body = NULL;
            r->len = r->cap = 0;
            return MHD_YES;
        }
        if (r->len + n + 1 > r->cap) {
            size_t c = r->cap ? r->cap : 4096;
            while (c < r->len + n + 1) c *= 2;
            char *b = realloc(r->body, c);
            if (!b) return MHD_NO;
            r->body = b;
            r->cap = c;
        }
        memcpy(r->body + r->len, upload_data, n);
        r->len += n;
        r->body[r->len] = 0;
        return MHD_YES;
    }
    if (r->answered) return MHD_YES;
    h->o.handler(h->o.user, r);
    if (!r->answered) g4_http_send(r, 500, "text/plain", "no response\n", 12, NULL);
    return r->broken ? MHD_NO : MHD_YES;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* URL unescaping as libmicrohttpd's own, except that %00 stays as it is: the handler sees the
 * path as a C string, and "/health%00x" must not be served as "/health". */
static size_t unescape(void *cls, struct MHD_Connection *c, char *s) {
    (void)cls; (void)c;
    char *w = s;
    for (const char *p = s; *p; p++) {
        int hi, lo;
        if (*p == '%' && (hi = hexval(p[1])) >= 0 && (lo = hexval(p[2])) >= 0 && (hi | lo)) {
            *w++ = (char)(hi * 16 + lo);
            p += 2;
        } else {
            *w++ = *p;
        }
    }
    *w = 0;
    return (size_t)(w - s);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)cls; (void)conn; (void)toe;
    g4_http_req *r = *con_cls;
    if (!r) return;
    atomic_fetch_sub(&r->h->inflight, 1);
    for (int i = 0; i < 2 * r->n_extra; i++) free(r->extra[i]);
    free(r->body);
    free(r);
    *con_cls = NULL;
}

/* The address a host name binds: getaddrinfo's first answer. 0, or getaddrinfo's error. */
static int resolve(const char *host, int port, struct sockaddr_storage *sa) {
    struct addrinfo hints = {0}, *ai = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    int gr = getaddrinfo(host, ps, &hints, &ai);
    if (!gr && !ai) gr = EAI_NONAME;
    if (gr) return gr;
    memset(sa, 0, sizeof *sa);
    memcpy(sa, ai->ai_addr, ai->ai_addrlen);
    freeaddrinfo(ai);
    return 0;
}

int g4_http_host_is_loopback(const char *host) {
    struct sockaddr_storage sa;
    if (resolve(host && *host ? host : "127.0.0.1", 0, &sa)) return 0;
    if (sa.ss_family == AF_INET) return (ntohl(((struct sockaddr_in *)&sa)->sin_addr.s_addr) >> 24) == 127;
    if (sa.ss_family != AF_INET6) return 0;
    const struct in6_addr *a = &((struct sockaddr_in6 *)&sa)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
}

int g4_http_start(const g4_http_opts *o, g4_http **out, g4_err *err) {
    *out = NULL;
    if (!o->handler) return g4_err_set(err, G4_EINVAL, "no request handler");
    if (o->port < 0 || o->port > 65535) return g4_err_set(err, G4_EINVAL, "port %d is out of range", o->port);
    const char *host = o->host && *o->host ? o->host : "127.0.0.1";
    struct sockaddr_storage sa;
    int gr = resolve(host, o->port, &sa);
    if (gr) return g4_err_set(err, G4_EINVAL, "cannot resolve host \"%s\": %s", host, gai_strerror(gr));
    int v6 = sa.ss_family == AF_INET6;
    g4_http *h = calloc(1, sizeof *h);
    if (!h) return g4_err_set(err, G4_ENOMEM, "out of memory");
    h->o = *o;
    if (!h->o.max_body) h->o.max_body = 4u << 20;
    if (h->o.max_conns <= 0) h->o.max_conns = 256;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL | MHD_USE_ERROR_LOG;
    if (v6) flags |= MHD_USE_IPv6;
    errno = 0;
    h->d = MHD_start_daemon(flags, (uint16_t)o->port, NULL, NULL, on_request, h,
                            MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)h->o.max_conns,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)600,
                            MHD_OPTION_UNESCAPE_CALLBACK, unescape, NULL,
                            MHD_OPTION_END);
    if (!h->d) {
        int en = errno; /* what bind/listen said (libmicrohttpd leaves it) */
        free(h);
        if (en) return g4_err_set(err, G4_EIO, "cannot listen on %s:%d: %s", host, o->port, strerror(en));
        return g4_err_set(err, G4_EIO, "cannot listen on %s:%d", host, o->port);
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    h->port = di && di->port ? di->port : o->port;
    *out = h;
    return G4_OK;
}

int g4_http_port(const g4_http *h) { return h->port; }

void g4_http_stop(g4_http *h, int wait_ms) {
    if (!h) return;
    /* let answers already being written reach their clients before the sockets close */
    for (int waited = 0; waited < wait_ms && atomic_load(&h->inflight) > 0; waited += 20) {
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
    }
    MHD_stop_daemon(h->d);
    free(h);
}
