/* jinja_engine.h — a Jinja2 template engine with Python semantics (the subset chat templates
 * use; see docs/chat-template.md). Compile once, render many times; a compiled template is
 * immutable and may be rendered from several threads at once.
 *
 * Errors: G4_EFORMAT for template syntax errors, G4_EUNSUPPORTED for valid Jinja the engine does
 * not implement (message names the construct and line), G4_ETEMPLATE where Jinja2 would raise at
 * render time (raise_exception(), TypeError, UndefinedError, ...), G4_ENOMEM past a limit of
 * g4_jinja_limits (memory, output, steps), G4_EBUSY past the shared memory budget, G4_ECANCELED
 * when cancelled or past the timeout. */
#ifndef G4_TEXT_JINJA_ENGINE_H
#define G4_TEXT_JINJA_ENGINE_H

#include <jansson.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

typedef struct g4_jinja g4_jinja;

int g4_jinja_compile(const char *src, size_t len, g4_jinja **out, g4_err *err);
void g4_jinja_free(g4_jinja *t);
/* vars: a JSON object whose keys become template variables (JSON objects become Python dicts in
 * key order, arrays lists, integers int, reals float). *out is malloc'd and NUL-terminated.
 * Renders with the default limits (g4_jinja_render_ex with lim = NULL). */
int g4_jinja_render(const g4_jinja *t, const json_t *vars, char **out, size_t *out_len, g4_err *err);

/* Defaults of the limits below (a field left 0 takes its default). With the Gemma-4 templates a
 * render costs steps and memory linear in the conversation: 20,000 short messages take about
 * 3.5 M steps (0.2 s of one core) and 40-70 MiB. */
#define G4_JINJA_DEFAULT_MEMORY (256u << 20)   /* working memory of one render, bytes */
#define G4_JINJA_DEFAULT_OUTPUT (64u << 20)    /* rendered text, bytes */
#define G4_JINJA_DEFAULT_STEPS 50000000ull     /* about 3 s of one core */

/* Bounds of one render. The render checks the step budget at every step, and cancel/timeout
 * every 1024 steps (a few microseconds), so a render stops promptly wherever it loops. */
typedef struct g4_jinja_limits {
    size_t max_memory;          /* working memory, bytes: past it G4_ENOMEM */
    size_t max_output;          /* rendered text, bytes: past it G4_ENOMEM */
    uint64_t max_steps;         /* evaluation steps (each expression, statement list, loop
                                   iteration): past it G4_ENOMEM */
    uint32_t timeout_ms;        /* 0: none; CLOCK_MONOTONIC from the start: past it G4_ECANCELED */
    const volatile int *cancel; /* NULL or a flag another thread may set: nonzero stops the render
                                   with G4_ECANCELED */
    /* A budget across renders: when shared is set, the working memory of every render given the
     * same counter is charged to it while the render runs (released when it returns); a render
     * that would take it past shared_max fails with G4_EBUSY. */
    atomic_size_t *shared;
    size_t shared_max;
} g4_jinja_limits;

/* What a render used (filled on success and on failure). */
typedef struct g4_jinja_stats {
    uint64_t steps;
    size_t memory;              /* peak working memory, bytes */
} g4_jinja_stats;

/* g4_jinja_render with limits (lim may be NULL: defaults) and usage statistics (stats may be NULL). */
int g4_jinja_render_ex(const g4_jinja *t, const json_t *vars, const g4_jinja_limits *lim, g4_jinja_stats *stats,
                       char **out, size_t *out_len, g4_err *err);

#endif
