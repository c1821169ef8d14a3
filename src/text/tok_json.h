/* tok_json.h — a small, fast, read-only JSON reader for tokenizer.json.
 *
 * Why not jansson: the real Gemma tokenizer.json is 33 MB (262,144 vocab entries, ~515k merge
 * pairs) and jansson needs ~1.7 s to build its DOM; this reader parses it into an arena in a
 * fraction of that. Strings keep their byte length (they may contain U+0000). */
#ifndef G4_TEXT_TOK_JSON_H
#define G4_TEXT_TOK_JSON_H

#include <stddef.h>
#include <stdint.h>
#include "base/error.h"

typedef enum { TJ_NULL, TJ_FALSE, TJ_TRUE, TJ_NUM, TJ_STR, TJ_ARR, TJ_OBJ } tj_type;

typedef struct tj_val {
    tj_type type;
    uint32_t n;               /* TJ_STR: byte length; TJ_ARR: items; TJ_OBJ: members */
    union {
        const char *s;        /* TJ_STR: decoded UTF-8, NUL-terminated (may contain NULs) */
        double num;           /* TJ_NUM */
        struct tj_val *items; /* TJ_ARR: n values; TJ_OBJ: 2n values, key then value */
    } u;
} tj_val;

typedef struct tj_doc tj_doc;

/* Parses buf[0..len). On success *root points into *doc (free with tj_free). Errors are
 * G4_EFORMAT with the byte offset, or G4_ENOMEM. */
int tj_parse(const char *buf, size_t len, tj_doc **doc, const tj_val **root, g4_err *err);
void tj_free(tj_doc *doc);
/* Hands over the buffer holding every decoded string (the u.s pointers point into it), so a
 * caller can keep the strings without copying them: *used bytes are filled, *cap allocated
 * (cap >= used + 1). The values stay readable until tj_free, which then leaves the buffer alone;
 * the caller frees it (or reallocs it once it no longer reads the values). */
char *tj_take_strings(tj_doc *doc, size_t *used, size_t *cap);

/* malloc for big buffers (free with free): from 4 MB on, 2 MB-aligned and marked for transparent
 * huge pages, which makes faulting it in and random access (hash tables) much cheaper. */
void *tj_big_alloc(size_t n);

/* Member of an object by key (the last one when repeated), NULL when absent or not an object. */
const tj_val *tj_get(const tj_val *obj, const char *key);
/* 1 when v is a string equal to s. */
int tj_str_eq(const tj_val *v, const char *s);
const char *tj_type_name(const tj_val *v);

#endif
