/* error.h — the one table of error codes and the error-message carrier.
 *
 * Every function that can fail on input, files, network or memory returns one of these codes
 * (G4_OK == 0) and may fill a g4_err with a human-readable message that names the file, tensor
 * or field at fault. The server maps codes to HTTP statuses in one place (src/server).
 * Knows nothing about models. */
#ifndef G4_BASE_ERROR_H
#define G4_BASE_ERROR_H

#include <stddef.h>

/* The library's exported face: libg4.so is built with -fvisibility=hidden, and only what
 * include/g4.h and this file declare (between G4_API_BEGIN and G4_API_END) is exported. */
#define G4_API_BEGIN _Pragma("GCC visibility push(default)")
#define G4_API_END _Pragma("GCC visibility pop")

G4_API_BEGIN

typedef enum {
    G4_OK = 0,
    G4_EINVAL,        /* a bad argument or request field */
    G4_EIO,           /* the file system said no: missing file, read error */
    G4_EFORMAT,       /* a file or body is malformed: JSON, safetensors, artifact, UTF-8 */
    G4_ESHAPE,        /* a tensor has the wrong shape or dtype */
    G4_ENOMEM,        /* out of memory or out of the KV budget */
    G4_EUNSUPPORTED,  /* valid input we do not implement (a model feature, a template construct) */
    G4_ECONTEXT,      /* prompt plus requested tokens exceed the context */
    G4_ECOMM,         /* a rank failed or a collective broke */
    G4_ECANCELED,     /* the caller cancelled (client gone, shutdown) */
    G4_EBUSY,         /* queue full: try again later */
    G4_ENOTFOUND,     /* a named thing (model, token, tensor) does not exist */
    G4_ECHECKSUM,     /* stored data does not match its checksum */
    G4_ETEMPLATE,     /* the chat template raised an error */
    G4_NSTATUS
} g4_status;

#define G4_ERR_MSG_MAX 1024

typedef struct g4_err {
    int code;
    char msg[G4_ERR_MSG_MAX];
} g4_err;

/* Sets err (may be NULL) and returns code, so callers write `return g4_err_set(err, ...)`. */
int g4_err_set(g4_err *err, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Prepends context ("loading model.safetensors: ") to an existing message; returns err->code. */
int g4_err_prefix(g4_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void g4_err_clear(g4_err *err);
/* Short stable name of a code, e.g. "format" — used in logs and JSON error types. */
const char *g4_status_name(int code);

G4_API_END

#endif
