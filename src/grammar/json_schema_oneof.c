/* json_schema_oneof.c — oneOf: proving alternatives disjoint (json_schema_int.h).
 *
 * The grammar of a oneOf is the union of its alternatives, which is right only when no JSON
 * value validates against two of them: then every value of the union matches exactly one.
 * Disjointness is decided on what the alternatives VALIDATE (JSON Schema's meaning), not on the
 * text the compiler would generate: {"const": 1} and {"const": 1.0} are different texts and the
 * same value, and an object alternative without additionalProperties: false validates objects
 * with any other members, whatever the compiler writes for it. The proof is conservative:
 * alternatives are disjoint when their types are, when the enum / const values of one all fail
 * the other, when their numeric ranges, string lengths or item counts do not meet, or — for
 * objects — when a property one requires is forbidden by the other or has disjoint schemas in
 * both (a discriminator). Anything else is "not proven", and the compiler refuses the oneOf
 * (anyOf is what such schemas mean in practice). Knows JSON Schema, not automata. */
#include "grammar/json_schema_int.h"

#include <math.h>
#include <string.h>

#define DJ_DEPTH 24 /* references and nested properties followed */
#define DJ_STEP 64  /* budget steps one comparison counts for (it looks at a few keywords) */

/* JSON equality as JSON Schema has it: 1 and 1.0 are the same number */
static int value_eq(const json_t *a, const json_t *b) {
    if (json_is_number(a) && json_is_number(b)) {
        if (json_is_integer(a) && json_is_integer(b)) return json_integer_value(a) == json_integer_value(b);
        return json_number_value(a) == json_number_value(b);
    }
    if (json_typeof(a) != json_typeof(b)) return 0;
    if (json_is_array(a)) {
        if (json_array_size(a) != json_array_size(b)) return 0;
        for (size_t i = 0; i < json_array_size(a); i++) if (!value_eq(json_array_get(a, i), json_array_get(b, i))) return 0;
        return 1;
    }
    if (json_is_object(a)) {
        if (json_object_size(a) != json_object_size(b)) return 0;
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)a, k, v) {
            json_t *w = json_object_get(b, k);
            if (!w || !value_eq(v, w)) return 0;
        }
        return 1;
    }
    return json_equal(a, b);
}

/* the types a schema lets through, by its "type" alone (T_NUM: every number, T_INT: whole ones) */
static int stypes(const json_t *s) {
    static const char *const names[] = {"null", "boolean", "integer", "number", "string", "array", "object"};
    json_t *t = json_object_get(s, "type");
    if (!t) return T_ALL;
    int m = 0;
    size_t n = json_is_array(t) ? json_array_size(t) : 1;
    for (size_t i = 0; i < n; i++) {
        json_t *x = json_is_array(t) ? json_array_get(t, i) : t;
        for (int k = 0; k < 7; k++) if (json_is_string(x) && !strcmp(json_string_value(x), names[k])) m |= 1 << k;
    }
    if (m & T_NUM) m |= T_INT;
    if (json_is_true(json_object_get(s, "nullable"))) m |= T_NULL;
    return m ? m : T_ALL; /* a bad "type" is refused where the schema is compiled */
}

/* a referenced schema, or NULL (not followed) */
static const json_t *target(sc *c, const json_t *ref) {
    return json_is_string(ref) ? jsc_resolve_ref(c, json_string_value(ref), 1) : NULL;
}

/* numeric bounds of a schema: lo / hi (excl: exclusive), none: +-inf */
static void bounds(const json_t *s, double *lo, int *lox, double *hi, int *hix) {
    *lo = -INFINITY; *hi = INFINITY; *lox = *hix = 0;
    json_t *mn = json_object_get(s, "minimum"), *mx = json_object_get(s, "maximum");
    json_t *emn = json_object_get(s, "exclusiveMinimum"), *emx = json_object_get(s, "exclusiveMaximum");
    if (json_is_number(mn)) { *lo = json_number_value(mn); *lox = json_is_true(emn); }
    if (json_is_number(mx)) { *hi = json_number_value(mx); *hix = json_is_true(emx); }
    if (json_is_number(emn) && json_number_value(emn) >= *lo) { *lo = json_number_value(emn); *lox = 1; }
    if (json_is_number(emx) && json_number_value(emx) <= *hi) { *hi = json_number_value(emx); *hix = 1; }
}

/* a count range [lo, hi] of two keywords (hi -1: none) */
static void counts(const json_t *s, const char *kmin, const char *kmax, double *lo, double *hi) {
    json_t *a = json_object_get(s, kmin), *b = json_object_get(s, kmax);
    *lo = json_is_number(a) ? json_number_value(a) : 0;
    *hi = json_is_number(b) ? json_number_value(b) : INFINITY;
}

/* the schema a member named k of an object must satisfy under s (true when s says nothing, NULL
 * when s forbids it) */
static const json_t *member_schema(const json_t *s, const char *k) {
    json_t *props = json_object_get(s, "properties"), *p = json_is_object(props) ? json_object_get(props, k) : NULL;
    if (p) return p;
    json_t *ap = json_object_get(s, "additionalProperties");
    if (json_is_false(ap)) return NULL;
    return json_is_object(ap) ? ap : json_true();
}

static int fails(sc *c, const json_t *s, const json_t *v, int depth);
static int disjoint(sc *c, const json_t *a, const json_t *b, int depth);

typedef int (*member_test)(sc *c, const json_t *member, const json_t *other, int depth);

/* 1 when test holds for every member of list (all) or for some member (!all) */
static int list_test(sc *c, const json_t *list, const json_t *other, int depth, int all, member_test test) {
    if (!json_is_array(list) || !json_array_size(list)) return 0;
    for (size_t i = 0; i < json_array_size(list); i++) {
        int r = test(c, json_array_get(list, i), other, depth + 1);
        if (all && !r) return 0;
        if (!all && r) return 1;
    }
    return all;
}

/* 1 when v provably does not validate against s (0: it may) */
static int fails(sc *c, const json_t *s, const json_t *v, int depth) {
    if (json_is_false(s)) return 1;
    if (!json_is_object(s) || depth > DJ_DEPTH) return 0;
    if (g4_fsa_poll(&c->bud, DJ_STEP)) return 0; /* nested lists branch: the compile's steps bound it */
    json_t *ref = json_object_get(s, "$ref"), *x;
    const json_t *t = ref ? target(c, ref) : NULL;
    if (t && fails(c, t, v, depth + 1)) return 1;
    /* some allOf member fails it, or every anyOf / oneOf member does */
    if (list_test(c, json_object_get(s, "allOf"), v, depth, 0, fails)) return 1;
    if (list_test(c, json_object_get(s, "anyOf"), v, depth, 1, fails) || list_test(c, json_object_get(s, "oneOf"), v, depth, 1, fails)) return 1;
    int vt = jsc_value_types(v);
    if (!(vt & stypes(s))) return 1;
    if ((x = json_object_get(s, "const")) && !value_eq(x, v)) return 1;
    if ((x = json_object_get(s, "enum")) && json_is_array(x)) {
        int any = 0;
        for (size_t i = 0; i < json_array_size(x) && !any; i++) any = value_eq(json_array_get(x, i), v);
        if (!any) return 1;
    }
    if (vt & T_NUM) {
        double lo, hi, d = json_number_value(v);
        int lox, hix;
        bounds(s, &lo, &lox, &hi, &hix);
        if (d < lo || (lox && d == lo) || d > hi || (hix && d == hi)) return 1;
    }
    double lo, hi;
    if (vt & T_STR) {
        counts(s, "minLength", "maxLength", &lo, &hi);
        double n = (double)jsc_utf8_chars(json_string_value(v), json_string_length(v));
        if (n < lo || n > hi) return 1;
    }
    if (vt & T_ARR) {
        counts(s, "minItems", "maxItems", &lo, &hi);
        double n = (double)json_array_size(v);
        if (n < lo || n > hi) return 1;
        json_t *pre = json_object_get(s, "prefixItems"), *items = json_object_get(s, "items");
        if (json_is_array(items)) { pre = items; items = json_object_get(s, "additionalItems"); }
        for (size_t i = 0; i < json_array_size(v); i++) {
            const json_t *is = json_is_array(pre) && i < json_array_size(pre) ? json_array_get(pre, i) : items;
            if (is && fails(c, is, json_array_get(v, i), depth + 1)) return 1;
        }
    }
    if (vt & T_OBJ) {
        json_t *req = json_object_get(s, "required");
        for (size_t i = 0; json_is_array(req) && i < json_array_size(req); i++)
            if (json_is_string(json_array_get(req, i)) && !json_object_get(v, json_string_value(json_array_get(req, i)))) return 1;
        const char *k;
        json_object_foreach((json_t *)v, k, x) {
            const json_t *ms = member_schema(s, k);
            if (!ms || fails(c, ms, x, depth + 1)) return 1;
        }
    }
    return 0;
}

/* every value of a's enum / const fails b */
static int values_fail(sc *c, const json_t *a, const json_t *b, int depth) {
    json_t *cn = json_object_get(a, "const"), *en = json_object_get(a, "enum");
    if (cn) return fails(c, b, cn, depth + 1);
    if (!json_is_array(en)) return 0;
    for (size_t i = 0; i < json_array_size(en); i++) if (!fails(c, b, json_array_get(en, i), depth + 1)) return 0;
    return 1;
}

/* a property a requires that b forbids, or whose schemas in a and b are disjoint */
static int required_apart(sc *c, const json_t *a, const json_t *b, int depth) {
    json_t *req = json_object_get(a, "required");
    for (size_t i = 0; json_is_array(req) && i < json_array_size(req); i++) {
        const char *k = json_string_value(json_array_get(req, i));
        if (!k) continue;
        const json_t *sa = member_schema(a, k), *sb = member_schema(b, k);
        if (!sa || !sb || disjoint(c, sa, sb, depth + 1)) return 1;
    }
    return 0;
}

static int disjoint(sc *c, const json_t *a, const json_t *b, int depth) {
    if (json_is_false(a) || json_is_false(b)) return 1;
    if (!json_is_object(a) || !json_is_object(b) || depth > DJ_DEPTH) return 0;
    if (g4_fsa_poll(&c->bud, DJ_STEP)) return 0; /* the compile stops on its budget anyway */
    /* a schema is within each of its references and allOf members, and within the union of its
     * anyOf / oneOf members: any of these disjoint from the other side is enough */
    for (int side = 0; side < 2; side++) {
        const json_t *x = side ? b : a, *y = side ? a : b, *t;
        json_t *ref = json_object_get(x, "$ref");
        if (ref && (t = target(c, ref)) && disjoint(c, t, y, depth + 1)) return 1;
        if (list_test(c, json_object_get(x, "allOf"), y, depth, 0, disjoint)) return 1;
        if (list_test(c, json_object_get(x, "anyOf"), y, depth, 1, disjoint) || list_test(c, json_object_get(x, "oneOf"), y, depth, 1, disjoint)) return 1;
    }
    int common = stypes(a) & stypes(b);
    if (!common) return 1;
    if (values_fail(c, a, b, depth) || values_fail(c, b, a, depth)) return 1;
    /* every common type must be kept apart */
    double la, ha, lb, hb;
    if (common & (T_INT | T_NUM)) {
        int lax, hax, lbx, hbx;
        bounds(a, &la, &lax, &ha, &hax);
        bounds(b, &lb, &lbx, &hb, &hbx);
        int apart = ha < lb || (ha == lb && (hax || lbx)) || hb < la || (hb == la && (hbx || lax));
        if (!apart) return 0;
    }
    if (common & T_STR) {
        counts(a, "minLength", "maxLength", &la, &ha);
        counts(b, "minLength", "maxLength", &lb, &hb);
        if (!(ha < lb || hb < la)) return 0;
    }
    if (common & T_ARR) {
        counts(a, "minItems", "maxItems", &la, &ha);
        counts(b, "minItems", "maxItems", &lb, &hb);
        if (!(ha < lb || hb < la)) return 0;
    }
    if (common & T_OBJ && !required_apart(c, a, b, depth) && !required_apart(c, b, a, depth)) return 0;
    if (common & (T_NULL | T_BOOL)) return 0; /* only an enum / const keeps these apart */
    return 1;
}

int jsc_disjoint(sc *c, const json_t *a, const json_t *b) { return disjoint(c, a, b, 0); }
