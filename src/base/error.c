/* error.c — formatting of error messages; the name table of the codes in error.h; the abort of a
 * failed G4_ASSERT (assert.h). */
#include "base/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/assert.h"

static const char *const status_names[G4_NSTATUS] = {
    [G4_OK] = "ok",
    [G4_EINVAL] = "invalid_argument",
    [G4_EIO] = "io",
    [G4_EFORMAT] = "format",
    [G4_ESHAPE] = "shape",
    [G4_ENOMEM] = "out_of_memory",
    [G4_EUNSUPPORTED] = "unsupported",
    [G4_ECONTEXT] = "context_length_exceeded",
    [G4_ECOMM] = "communication",
    [G4_ECANCELED] = "cancelled",
    [G4_EBUSY] = "busy",
    [G4_ENOTFOUND] = "not_found",
    [G4_ECHECKSUM] = "checksum",
    [G4_ETEMPLATE] = "template",
};

const char *g4_status_name(int code) {
    if (code < 0 || code >= G4_NSTATUS || !status_names[code]) return "unknown";
    return status_names[code];
}

int g4_err_set(g4_err *err, int code, const char *fmt, ...) {
    if (!err) return code;
    err->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return code;
}

int g4_err_prefix(g4_err *err, const char *fmt, ...) {
    if (!err) return G4_OK;
    char head[G4_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(head, sizeof head, fmt, ap);
    va_end(ap);
    char tail[G4_ERR_MSG_MAX];
    memcpy(tail, err->msg, sizeof tail);
    size_t hl = strlen(head);
    memcpy(err->msg, head, hl + 1);
    if (hl < sizeof err->msg - 1) {
        size_t room = sizeof err->msg - 1 - hl, tl = strnlen(tail, room);
        memcpy(err->msg + hl, tail, tl);
        err->msg[hl + tl] = '\0';
    }
    return err->code;
}

void g4_err_clear(g4_err *err) {
    if (!err) return;
    err->code = G4_OK;
    err->msg[0] = '\0';
}

void g4_assert_fail(const char *file, int line, const char *cond, const char *fmt, ...) {
    char msg[G4_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "g4tp: assertion failed at %s:%d: %s: %s\n", file, line, cond, msg);
    fflush(stderr);
    abort();
}
