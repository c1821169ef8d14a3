/* json_schema.h — what an API asks of the output (a JSON object, a JSON Schema, tool calls)
 * compiled into a grammar for constrain.h. The one internal shape every API translation fills
 * (g4_output_spec); the grammar it gives accepts only outputs that parse and validate.
 *
 * JSON Schema coverage (docs/structured-output.md has the details): type (and type lists,
 * nullable), properties, required, additionalProperties (true / false / a schema; absent means
 * no extra properties unless the object declares no properties at all), enum, const, items,
 * prefixItems (and the older items-array / additionalItems), minItems, maxItems, anyOf, oneOf
 * (alternatives must be provably disjoint), allOf (merged: objects, bounds, enums), local $ref
 * and $defs / definitions (recursion through rule calls), string minLength / maxLength /
 * pattern (regex.h) / format (date, time, date-time, uuid, email, ipv4), integer and number
 * minimum / maximum / exclusiveMinimum / exclusiveMaximum (whole-number bounds for numbers),
 * uniqueItems false, unevaluatedProperties / unevaluatedItems false, minProperties /
 * maxProperties / multipleOf where the rest of the schema already implies them. Annotations
 * (title, description, default, examples, ...) and x-* keywords are ignored. Any other keyword
 * is refused with G4_EUNSUPPORTED naming it and where it is; an invalid schema is G4_EINVAL.
 *
 * Generated text: JSON with optional white space (none, one space, or a newline and up to 20
 * spaces) between tokens, strings in one canonical escaping, numbers of at most 18 integer, 16
 * fraction and 2 exponent digits; objects in the schema's property order. Tool calls in
 * Gemma-4's format: <|tool_call>call:NAME{key:value,...}<tool_call|>, keys sorted as the chat
 * template writes them, strings between <|"|> tokens. In a chat turn no string holds the byte
 * pair "<|" or the texts "<turn|>" and "<eos>", which the output parser would take for markup. */
#ifndef G4_GRAMMAR_JSON_SCHEMA_H
#define G4_GRAMMAR_JSON_SCHEMA_H

#include <jansson.h>
#include <stddef.h>

#include "grammar/constrain.h"

typedef enum { G4_FMT_TEXT = 0, G4_FMT_JSON_OBJECT, G4_FMT_JSON_SCHEMA } g4_out_format;
typedef enum { G4_TOOLS_AUTO = 0, G4_TOOLS_NONE, G4_TOOLS_REQUIRED, G4_TOOLS_NAMED } g4_tool_mode;
typedef enum { G4_THOUGHT_NONE = 0, G4_THOUGHT_OPTIONAL, G4_THOUGHT_INSIDE } g4_thought_mode;

typedef struct g4_output_spec {
    g4_out_format format;
    const json_t *schema;     /* G4_FMT_JSON_SCHEMA: the schema (an object or a boolean) */
    const json_t *tools;      /* OpenAI-shaped [{type:"function", function:{name, parameters}}] or NULL */
    g4_tool_mode tool_mode;
    const char *tool_name;    /* G4_TOOLS_NAMED */
    int parallel_calls;       /* 0: at most one call */
    int strict_calls;         /* tools "auto": calls follow their schemas too (text may come first) */
    int chat;                 /* the output is a Gemma-4 model turn (markup, thinking, calls); else raw text */
    g4_thought_mode thought;  /* chat: a thinking block may come first / the text starts inside one */
} g4_output_spec;

/* Defaults: free text, tools auto, parallel calls allowed, not chat. */
void g4_output_spec_init(g4_output_spec *s);
/* 1 when the spec needs a grammar: a format, required / named tools, or tools with "none",
 * with parallel calls off or with strict calls. */
int g4_output_spec_constrains(const g4_output_spec *s);

/* Compiles the spec; *out is NULL when nothing is to be constrained. Errors name the part at
 * fault in param ("response_format", "tools[2].function.parameters") and say where in the
 * schema in the message; a schema whose automaton would exceed G4_GRAMMAR_MAX_STATES is
 * G4_EINVAL naming the limit. */
int g4_output_compile(const g4_output_spec *s, g4_grammar **out, char *param, size_t param_cap, g4_err *err);
/* One JSON value of the schema as raw text (tests, benchmarks). */
int g4_json_schema_compile(const json_t *schema, g4_grammar **out, g4_err *err);

#endif
