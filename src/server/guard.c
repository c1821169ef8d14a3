/* guard.c — the browser rules of guard.h: Host names served, CORS origins answered, JSON
 * content types. Host names and origins compare case-insensitively; a Host's port and one
 * trailing dot do not count. Knows strings only. */
#include "server/guard.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MAX_NAMES 64

struct g4_guard {
    int any_host;             /* no Host check: bound beyond loopback without --allowed-hosts, or --allowed-hosts "*" */
    char *hosts[MAX_NAMES];
    int n_hosts;
    int cors_any;             /* --cors "*" */
    char *origins[MAX_NAMES];
    int n_origins;
};

/* The name of a Host value: without the port, the brackets of an IPv6 literal and one trailing
 * dot, lowercased (malloc'd; NULL: out of memory). */
static char *host_name(const char *h, size_t n) {
    const char *end = h + n;
    if (n && *h == '[') {
        const char *rb = memchr(h, ']', n);
        if (rb) { end = rb; h++; }
    } else {
        const char *c = memchr(h, ':', n);
        if (c && !memchr(c + 1, ':', (size_t)(end - c - 1))) end = c; /* one colon: name:port (more: a bare IPv6 literal) */
    }
    if (end > h && end[-1] == '.') end--;
    char *s = strndup(h, (size_t)(end - h));
    for (char *p = s; s && *p; p++)
        if (*p >= 'A' && *p <= 'Z') *p = (char)(*p - 'A' + 'a');
    return s;
}

static int add(char **list, int *n, char *s, g4_err *err) {
    if (!s) return g4_err_set(err, G4_ENOMEM, "out of memory");
    if (*n == MAX_NAMES) { free(s); return g4_err_set(err, G4_EINVAL, "more than %d names in a list", MAX_NAMES); }
    list[(*n)++] = s;
    return G4_OK;
}

/* An origin as browsers send it: http(s)://host[:port], nothing after. */
static int origin_ok(const char *o, size_t n) {
    size_t k = n >= 7 && !strncasecmp(o, "http://", 7) ? 7 : n >= 8 && !strncasecmp(o, "https://", 8) ? 8 : 0;
    if (!k || k == n) return 0;
    for (size_t i = k; i < n; i++)
        if (strchr("/?#* \t\"", o[i])) return 0;
    return 1;
}

/* Calls one(entry, len) for each comma-separated entry of list (spaces around entries skipped). */
static int each(const char *list, int (*one)(g4_guard *, const char *, size_t, g4_err *), g4_guard *g, g4_err *err) {
    for (const char *p = list; *p;) {
        while (*p == ' ' || *p == ',') p++;
        const char *e = p;
        while (*e && *e != ',') e++;
        size_t n = (size_t)(e - p);
        while (n && p[n - 1] == ' ') n--;
        int rc = n ? one(g, p, n, err) : G4_OK;
        if (rc) return rc;
        p = e;
    }
    return G4_OK;
}

static int one_host(g4_guard *g, const char *h, size_t n, g4_err *err) {
    if (n == 1 && *h == '*') { g->any_host = 1; return G4_OK; }
    for (size_t i = 0; i < n; i++)
        if (h[i] == '/' || h[i] == ' ' || h[i] == '*')
            return g4_err_set(err, G4_EINVAL, "--allowed-hosts: \"%.*s\" is not a host name (give names like example.com, or *)", (int)n, h);
    return add(g->hosts, &g->n_hosts, host_name(h, n), err);
}

static int one_origin(g4_guard *g, const char *o, size_t n, g4_err *err) {
    if (n == 1 && *o == '*') { g->cors_any = 1; return G4_OK; }
    if (n && o[n - 1] == '/') n--; /* http://host/ names the same origin */
    if (n == 4 && !strncasecmp(o, "null", 4))
        return g4_err_set(err, G4_EINVAL, "--cors: \"null\" is the origin of sandboxed and file pages of any site: it cannot be allowed");
    if (!origin_ok(o, n))
        return g4_err_set(err, G4_EINVAL, "--cors: \"%.*s\" is not an origin (scheme://host[:port], e.g. http://localhost:3000, or *)", (int)n, o);
    return add(g->origins, &g->n_origins, strndup(o, n), err);
}

int g4_guard_create(const char *bind_host, int loopback, const char *allowed_hosts, const char *cors, g4_guard **out, g4_err *err) {
    *out = NULL;
    g4_guard *g = calloc(1, sizeof *g);
    if (!g) return g4_err_set(err, G4_ENOMEM, "out of memory");
    g->any_host = !loopback && !(allowed_hosts && *allowed_hosts);
    static const char *const local[] = {"localhost", "127.0.0.1", "[::1]"};
    int rc = G4_OK;
    for (int i = 0; i < 3 && !rc; i++) rc = one_host(g, local[i], strlen(local[i]), err);
    if (!rc && bind_host && *bind_host) rc = one_host(g, bind_host, strlen(bind_host), err);
    if (!rc && allowed_hosts) rc = each(allowed_hosts, one_host, g, err);
    if (!rc && cors) rc = each(cors, one_origin, g, err);
    if (rc) { g4_guard_free(g); return rc; }
    *out = g;
    return G4_OK;
}

void g4_guard_free(g4_guard *g) {
    if (!g) return;
    for (int i = 0; i < g->n_hosts; i++) free(g->hosts[i]);
    for (int i = 0; i < g->n_origins; i++) free(g->origins[i]);
    free(g);
}

int g4_guard_host_ok(const g4_guard *g, const char *host) {
    if (g->any_host || !host) return 1;
    char *h = host_name(host, strlen(host));
    int ok = 0;
    for (int i = 0; h && !ok && i < g->n_hosts; i++) ok = !strcmp(h, g->hosts[i]);
    free(h);
    return ok;
}

const char *g4_guard_cors(const g4_guard *g, const char *origin) {
    if (!origin) return NULL;
    if (g->cors_any) return "*";
    for (int i = 0; i < g->n_origins; i++)
        if (!strcasecmp(origin, g->origins[i])) return origin;
    return NULL;
}

int g4_guard_cors_any(const g4_guard *g) { return g->cors_any; }

int g4_guard_json_type(const char *ct) {
    if (!ct) return 0;
    while (*ct == ' ') ct++;
    size_t n = strcspn(ct, ";");
    while (n && (ct[n - 1] == ' ' || ct[n - 1] == '\t')) n--;
    if (n == 16 && !strncasecmp(ct, "application/json", 16)) return 1;
    return n > 17 && !strncasecmp(ct, "application/", 12) && !strncasecmp(ct + n - 5, "+json", 5) && !memchr(ct + 12, '/', n - 12);
}
