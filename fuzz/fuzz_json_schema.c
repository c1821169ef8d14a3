/* fuzz_json_schema.c — the JSON Schema compiler (g4_output_compile_ex, grammar.h). Input: a flags
 * byte, a schema (JSON text) and, after a line "--", a candidate output. Bit 0 of the flags compiles the schema
 * as a tool's parameters under tool_choice "required" in a chat turn (Gemma's call syntax), else
 * as response_format json_schema (plain JSON); bit 1 lets the schema stand for "any JSON object"
 * (json_object) instead. Invariants: a refusal is G4_EINVAL / G4_EUNSUPPORTED / G4_ENOMEM with a
 * message that says where in the schema ("#...") and the request part at fault; a grammar has
 * at most G4_GRAMMAR_MAX_STATES states and a matcher over the demo vocabulary starts on it; and
 * (plain JSON) a candidate the matcher takes whole, up to where the output may end, parses as
 * JSON — the grammar never lets through what is not JSON. Time and memory: the compile runs
 * within LIM_WORK steps and LIM_BYTES of working memory (a refusal past them names the limit in
 * its stats and the peak stays within); fuzz.mk runs this harness with -timeout and
 * -rss_limit_mb small enough that a schema whose automaton multiplies (the seeds regress-dos-*:
 * nested arrays, counts inside counts, a $ref used twice at every level) fails it, as it did
 * before the compiler was bounded. */
#include <jansson.h>

#include "grammar/grammar.h"
#include "fuzz_util.h"
#include "text/tokenizer.h"

#define LIM_WORK 20000000ull
#define LIM_BYTES (128u << 20)

static g4_tokenizer *tok;
static g4_vocab *vocab;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    size_t len;
    g4_err err = {0};
    char *json = fuzz_repo_file("models/demo/tokenizer.json", &len);
    if (g4_tokenizer_load_json(json, len, &tok, &err)) { fprintf(stderr, "demo tokenizer: %s\n", err.msg); abort(); }
    free(json);
    if (g4_vocab_create(tok, 0, &vocab, &err)) { fprintf(stderr, "vocab: %s\n", err.msg); abort(); }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_in in = {data, size};
    const unsigned flags = fuzz_byte(&in);
    fuzz_in sch = fuzz_split(&in, "\n--\n"), cand = in;
    json_t *schema = json_loadb((const char *)sch.p, sch.n, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
    if (!schema) return 0;
    const int tools = flags & 1, any = (flags & 2) && !tools;
    g4_output_spec sp;
    g4_output_spec_init(&sp);
    json_t *tl = NULL;
    if (tools) {
        tl = json_pack("[{s:s,s:{s:s,s:O}}]", "type", "function", "function", "name", "f", "parameters", schema);
        sp.tools = tl;
        sp.tool_mode = G4_TOOLS_REQUIRED;
        sp.chat = 1;
        sp.parallel_calls = !(flags & 4);
    } else {
        sp.format = any ? G4_FMT_JSON_OBJECT : G4_FMT_JSON_SCHEMA;
        sp.schema = schema;
    }
    g4_grammar *g = NULL;
    char part[64];
    g4_err err = {0};
    const g4_grammar_limits lim = {.max_work = LIM_WORK, .max_memory = LIM_BYTES};
    g4_grammar_compile_stats st;
    int rc = g4_output_compile_ex(&sp, &lim, &st, &g, part, sizeof part, &err);
    FUZZ_CHECK(st.peak_memory <= LIM_BYTES, "peak working memory %zu over the limit", st.peak_memory);
    FUZZ_CHECK(!st.limit || rc, "limit %s without an error", g4_grammar_limit_name(st.limit));
    if (rc) {
        FUZZ_CHECK(rc == G4_EINVAL || rc == G4_EUNSUPPORTED || rc == G4_ENOMEM, "rc %d: %s", rc, err.msg);
        FUZZ_CHECK(!st.limit || strstr(err.msg, "limit"), "stopped by the %s limit but the message does not say: %s", g4_grammar_limit_name(st.limit), err.msg);
        FUZZ_CHECK(err.msg[0] == '#' || rc == G4_ENOMEM, "the message does not say where: %s", err.msg);
        FUZZ_CHECK(part[0], "no request part named: %s", err.msg);
        FUZZ_CHECK(!g, "a grammar with an error");
    } else {
        FUZZ_CHECK(g && g4_grammar_n_states(g) > 0 && g4_grammar_n_states(g) <= G4_GRAMMAR_MAX_STATES, "grammar of %d states",
                   g ? g4_grammar_n_states(g) : -1);
        const int32_t stop = 1;
        g4_matcher *m = NULL;
        rc = g4_matcher_create(g, vocab, &stop, 1, &m, &err);
        FUZZ_CHECK(rc == 0 || rc == G4_ENOTFOUND, "matcher: %s", err.msg);
        if (m && !tools && g4_matcher_accept_bytes(m, (const char *)cand.p, cand.n, &err) == 0 && g4_matcher_can_end(m)) {
            json_t *v = json_loadb((const char *)cand.p, cand.n, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
            FUZZ_CHECK(v != NULL, "the grammar took text that is not JSON: %.*s", (int)(cand.n < 200 ? cand.n : 200), (const char *)cand.p);
            FUZZ_CHECK(!any || json_is_object(v), "json_object took a non-object");
            json_decref(v);
        }
        g4_matcher_free(m);
        g4_grammar_release(g);
    }
    json_decref(tl);
    json_decref(schema);
    return 0;
}
