/* ui.c — answers for the chat page's embedded files (ui.h): lookup by path, Content-Type by
 * extension, ETag revalidation (304), and the security headers every page answer carries. The
 * bytes come from the table scripts/embed-files.sh generates; nothing is read from disk. */
#include "server/ui.h"

#include <string.h>

const g4_ui_file *g4_ui_find(const char *path) {
    const char *name;
    if (!strcmp(path, "/")) name = "index.html";
    else if (!strncmp(path, "/ui/", 4)) name = path + 4;
    else return NULL;
    for (size_t i = 0; i < g4_ui_n_files; i++)
        if (!strcmp(g4_ui_files[i].name, name)) return &g4_ui_files[i];
    return NULL;
}

const char *g4_ui_content_type(const char *name) {
    static const struct { const char *ext, *type; } types[] = {
        {".html", "text/html; charset=utf-8"},
        {".js", "text/javascript; charset=utf-8"}, /* RFC 9239 */
        {".css", "text/css; charset=utf-8"},
        {".svg", "image/svg+xml"},
        {".png", "image/png"},
        {".json", "application/json"},
    };
    const char *dot = strrchr(name, '.');
    for (size_t i = 0; dot && i < sizeof types / sizeof *types; i++)
        if (!strcmp(dot, types[i].ext)) return types[i].type;
    return "application/octet-stream";
}

/* If-None-Match: "*" or a list of entity tags, weak ones (W/"...") compared weakly (RFC 9110 13.1.2). */
static int etag_matches(const char *header, const char *etag) {
    if (!header) return 0;
    size_t n = strlen(etag);
    for (const char *p = header; *p;) {
        while (*p == ' ' || *p == '\t' || *p == ',') p++;
        if (*p == '*') return 1;
        if (!strncmp(p, "W/", 2)) p += 2;
        if (!strncmp(p, etag, n) && (p[n] == 0 || p[n] == ',' || p[n] == ' ' || p[n] == '\t')) return 1;
        while (*p && *p != ',') p++;
    }
    return 0;
}

/* Only this origin's files; no inline script or style, no plugins, no framing. Images may be
 * data: URLs (attached pictures are shown from them) and blob: URLs. */
#define UI_CSP "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; " \
               "connect-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

int g4_ui_answer(g4_http_req *r, const g4_ui_file *f, const char *if_none_match, int *status) {
    const char *headers[] = {
        "ETag", f->etag,
        /* revalidate every time: an upgraded server's page is picked up at once, and an
         * unchanged one costs a 304 */
        "Cache-Control", "no-cache",
        "Content-Security-Policy", UI_CSP,
        "X-Content-Type-Options", "nosniff",
        "Referrer-Policy", "no-referrer",
        "X-Frame-Options", "DENY",
        "Cross-Origin-Opener-Policy", "same-origin",
        NULL,
    };
    *status = etag_matches(if_none_match, f->etag) ? 304 : 200;
    if (*status == 304) return g4_http_send(r, 304, NULL, "", 0, headers);
    return g4_http_send(r, 200, g4_ui_content_type(f->name), (const char *)f->data, f->len, headers);
}
