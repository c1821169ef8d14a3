/* jinja_engine.h — a Jinja2 template engine with Python semantics (the subset chat templates
 * use; see docs/chat-template.md). Compile once, render many times; a compiled template is
 * immutable and may be rendered from several threads at once.
 *
 * Errors: G4_EFORMAT for template syntax errors, G4_EUNSUPPORTED for valid Jinja the engine does
 * not implement (message names the construct and line), G4_ETEMPLATE where Jinja2 would raise at
 * render time (raise_exception(), TypeError, UndefinedError, ...), G4_ENOMEM for limits. */
#ifndef G4_TEXT_JINJA_ENGINE_H
#define G4_TEXT_JINJA_ENGINE_H

#include <jansson.h>
#include <stddef.h>

#include "base/error.h"

typedef struct g4_jinja g4_jinja;

int g4_jinja_compile(const char *src, size_t len, g4_jinja **out, g4_err *err);
void g4_jinja_free(g4_jinja *t);
/* vars: a JSON object whose keys become template variables (JSON objects become Python dicts in
 * key order, arrays lists, integers int, reals float). *out is malloc'd and NUL-terminated. */
int g4_jinja_render(const g4_jinja *t, const json_t *vars, char **out, size_t *out_len, g4_err *err);

#endif
