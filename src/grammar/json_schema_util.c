/* json_schema_util.c — small helpers the schema walk (json_schema.c) and the oneOf proof
 * (json_schema_oneof.c) share: a JSON value's types, UTF-8 character counts, local $ref
 * resolution. Below both, so neither calls the other back. */
#include <math.h>

#include "grammar/json_schema_int.h"

int jsc_value_types(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_NULL: return T_NULL;
    case JSON_TRUE: case JSON_FALSE: return T_BOOL;
    case JSON_INTEGER: return T_INT | T_NUM;
    case JSON_REAL: { double d = json_real_value(v); return T_NUM | (d == floor(d) ? T_INT : 0); }
    case JSON_STRING: return T_STR;
    case JSON_ARRAY: return T_ARR;
    default: return T_OBJ;
    }
}

size_t jsc_utf8_chars(const char *p, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += ((unsigned char)p[i] & 0xC0) != 0x80;
    return k;
}

/* ---- $ref ------------------------------------------------------------------------------------- */

const json_t *jsc_resolve_ref(sc *c, const char *ref, int quiet) {
    if (ref[0] != '#') { if (!quiet) jsc_fail(c, G4_EUNSUPPORTED, "only local references ('#...') are supported, not '%s'", ref); return NULL; }
    const json_t *cur = c->root;
    const char *p = ref + 1;
    if (*p && *p != '/') { if (!quiet) jsc_fail(c, G4_EUNSUPPORTED, "'$ref' '%s': anchors are not supported, only JSON pointers ('#/...')", ref); return NULL; }
    while (*p == '/') {
        p++;
        char seg[256];
        size_t k = 0;
        while (*p && *p != '/' && k + 1 < sizeof seg) {
            if (*p == '~' && (p[1] == '0' || p[1] == '1')) { seg[k++] = p[1] == '0' ? '~' : '/'; p += 2; continue; }
            if (*p == '%' && p[1] && p[2]) {
                char h[3] = {p[1], p[2], 0};
                char *e;
                long v = strtol(h, &e, 16);
                if (!*e) { seg[k++] = (char)v; p += 3; continue; }
            }
            seg[k++] = *p++;
        }
        seg[k] = 0;
        if (json_is_object(cur)) cur = json_object_get(cur, seg);
        else if (json_is_array(cur)) {
            char *e;
            long i = strtol(seg, &e, 10);
            cur = *e || i < 0 ? NULL : json_array_get(cur, (size_t)i);
        } else {
            cur = NULL;
        }
        if (!cur) { if (!quiet) jsc_fail(c, G4_EINVAL, "'$ref' '%s' does not resolve", ref); return NULL; }
    }
    return cur;
}

