/* test_output_parser.c — Gemma-4 turn output: thinking, content, tool calls (argument syntax to
 * JSON), terminators, malformed calls kept as content, and the streaming form checked against
 * the whole-text parse at every split position, byte by byte, and on random marker soup. */
#include "testutil.h"

#include <jansson.h>

#include "text/output_parser.h"

#define Q "<|\"|>"

typedef struct {
    const char *in;
    const char *reasoning, *content;
    int n_calls;
    const char *names[3];
    const char *args[3]; /* expected compact JSON text */
    int malformed;
    int start_in_thought;
} pcase;

static const pcase CASES[] = {
    {"The capital of France is Paris.<turn|>", "", "The capital of France is Paris.", 0, {0}, {0}, 0, 0},
    {"<|channel>thought\nLet me think.\n<channel|>Answer here.<turn|>", "Let me think.", "Answer here.", 0, {0}, {0}, 0, 0},
    {"<|channel>thought\n<channel|>Hi<turn|>", "", "Hi", 0, {0}, {0}, 0, 0},
    {"<|channel>thought<channel|>Hi", "", "Hi", 0, {0}, {0}, 0, 0},
    {"<|tool_call>call:get_weather{city:" Q "Paris" Q ",days:2}<tool_call|><|tool_response>", "", "", 1,
     {"get_weather"}, {"{\"city\":\"Paris\",\"days\":2}"}, 0, 0},
    {"Let me check.<|tool_call>call:f{}<tool_call|><|tool_response>", "", "Let me check.", 1, {"f"}, {"{}"}, 0, 0},
    {"<|channel>thought\nNeed two tools.<channel|><|tool_call>call:a{x:1}<tool_call|><|tool_call>call:b.c-d_e{y:[]}<tool_call|>",
     "Need two tools.", "", 2, {"a", "b.c-d_e"}, {"{\"x\":1}", "{\"y\":[]}"}, 0, 0},
    {"<|tool_call>call:search{filters:{tags:[" Q "a" Q "," Q "b" Q "],min:-1.5e3,exact:true,none:null,f:false},q:" Q
     "x \"y\" \\ z\n\t" Q "}<tool_call|>",
     "", "", 1, {"search"},
     {"{\"filters\":{\"tags\":[\"a\",\"b\"],\"min\":-1.5e3,\"exact\":true,\"none\":null,\"f\":false},\"q\":\"x \\\"y\\\" \\\\ z\\n\\t\"}"},
     0, 0},
    /* white space inside the argument syntax, quoted keys, numbers kept verbatim */
    {"<|tool_call>call:f{ " Q "k y" Q " : 0.1 , n : [ 1 , 2.50 , -0 , 1e-05 ] , big:123456789012345678901234 }<tool_call|>", "", "",
     1, {"f"}, {"{\"k y\":0.1,\"n\":[1,2.50,-0,1e-05],\"big\":123456789012345678901234.0}"}, 0, 0},
    /* a string may contain anything but the string marker, markers included */
    {"<|tool_call>call:run{code:" Q "if (a<b) {x} <tool_call|><turn|" Q "}<tool_call|>done", "", "done", 1, {"run"},
     {"{\"code\":\"if (a<b) {x} <tool_call|><turn|\"}"}, 0, 0},
    {"Café ☕ 日本<|tool_call>call:t{s:" Q "ü€😀" Q "}<tool_call|>", "", "Café ☕ 日本", 1, {"t"},
     {"{\"s\":\"ü€😀\"}"}, 0, 0},
    /* malformed calls come back as content */
    /* generation cut inside a call (max_tokens, a stop string): the partial call is dropped, no
     * markup reaches the content (issue 24 item 9) */
    {"Sure<|tool_call>call:f{a:1", "", "Sure", 0, {0}, {0}, 0, 0},
    {"<|tool_call>call:get_weather{city:" Q "Par", "", "", 0, {0}, {0}, 0, 0},
    {"<|tool_call>call:f{}<tool_call|><|tool_call>call:g{a:[1,", "", "", 1, {"f"}, {"{}"}, 0, 0},
    {"Sure<|tool_call>call:f{a:1<turn|>ignored", "", "Sure<|tool_call>call:f{a:1", 0, {0}, {0}, 1, 0},
    {"<|tool_call>call:f{a:}<tool_call|>", "", "<|tool_call>call:f{a:}<tool_call|>", 0, {0}, {0}, 1, 0},
    {"<|tool_call>f{a:1}<tool_call|>ok", "", "<|tool_call>f{a:1}<tool_call|>ok", 0, {0}, {0}, 1, 0},
    {"<|tool_call>call:f{a:\"x\"}<tool_call|>", "", "<|tool_call>call:f{a:\"x\"}<tool_call|>", 0, {0}, {0}, 1, 0},
    {"<|tool_call>call:f{a:1,a:2}<tool_call|>", "", "<|tool_call>call:f{a:1,a:2}<tool_call|>", 0, {0}, {0}, 1, 0},
    {"<|tool_call>call:f{a:1} extra<tool_call|>", "", "<|tool_call>call:f{a:1} extra<tool_call|>", 0, {0}, {0}, 1, 0},
    {"<|tool_call>call:f{a:1,}<tool_call|>", "", "<|tool_call>call:f{a:1,}<tool_call|>", 0, {0}, {0}, 1, 0},
    {"<|tool_call>call:f{a:[1 2]}<tool_call|>", "", "<|tool_call>call:f{a:[1 2]}<tool_call|>", 0, {0}, {0}, 1, 0},
    {"<|tool_call>call:f{a:01}<tool_call|>", "", "<|tool_call>call:f{a:01}<tool_call|>", 0, {0}, {0}, 1, 0},
    {"<|tool_call>call:f{a:truex}<tool_call|>", "", "<|tool_call>call:f{a:truex}<tool_call|>", 0, {0}, {0}, 1, 0},
    {"<|tool_call>call:{a:1}<tool_call|>", "", "<|tool_call>call:{a:1}<tool_call|>", 0, {0}, {0}, 1, 0},
    {"<|tool_call>call:f{s:" Q "open<tool_call|>", "", "", 0, {0}, {0}, 0, 0}, /* the text ends inside the string: cut */
    {"<|tool_call>call:f{s:" Q "\xff\xfe" Q "}<tool_call|>", "", "<|tool_call>call:f{s:" Q "\xff\xfe" Q "}<tool_call|>", 0,
     {0}, {0}, 1, 0},
    /* one bad call does not spoil the good one after it */
    {"<|tool_call>call:f{a:}<tool_call|><|tool_call>call:g{b:2}<tool_call|>", "", "<|tool_call>call:f{a:}<tool_call|>", 1,
     {"g"}, {"{\"b\":2}"}, 1, 0},
    /* terminators */
    {"Hi<eos>junk", "", "Hi", 0, {0}, {0}, 0, 0},
    {"Hi<|tool_response>junk<turn|>", "", "Hi", 0, {0}, {0}, 0, 0},
    {"<|channel>thought\nhmm<turn|>", "hmm", "", 0, {0}, {0}, 0, 0},
    /* stray angle brackets and unknown markers are content */
    {"a < b and <b>bold</b> <|turn>x <channel|> <|tool", "", "a < b and <b>bold</b> <|turn>x <channel|> <|tool", 0, {0},
     {0}, 0, 0},
    {"<", "", "<", 0, {0}, {0}, 0, 0},
    {"<|channel>thought\nunfinished thinking...", "unfinished thinking...", "", 0, {0}, {0}, 0, 0},
    {"<|channel>analysis\nxx<channel|>yy", "analysis\nxx", "yy", 0, {0}, {0}, 0, 0},
    {"<|channel>thoughts are\nhere<channel|>yy", "thoughts are\nhere", "yy", 0, {0}, {0}, 0, 0},
    {"<|channel>thought\na<channel|>b<|channel>thought\nc<channel|>d", "ac", "bd", 0, {0}, {0}, 0, 0},
    {"<|channel>thought\n<|tool_call>not a call<channel|>x", "<|tool_call>not a call", "x", 0, {0}, {0}, 0, 0},
    /* trimming is of the whole, inner white space stays */
    {"\n\n  Hello  \n<turn|>", "", "Hello", 0, {0}, {0}, 0, 0},
    {"A  <|tool_call>call:f{}<tool_call|>  B \n", "", "A    B", 1, {"f"}, {"{}"}, 0, 0},
    {"  \n ", "", "", 0, {0}, {0}, 0, 0},
    {"", "", "", 0, {0}, {0}, 0, 0},
    /* continuing inside a thought block */
    {"more thinking\n<channel|>\nAnswer<turn|>", "more thinking", "Answer", 0, {0}, {0}, 0, 1},
};
#define NCASES (sizeof CASES / sizeof CASES[0])

/* ------------------------------------------------------------------ helpers */

typedef struct {
    char *text[2];
    size_t len[2];
    char *names[16];
    char *args[16];
    int n_calls;
} collected;

static void col_add(collected *c, int kind, const char *t, size_t n) {
    c->text[kind] = realloc(c->text[kind], c->len[kind] + n + 1);
    memcpy(c->text[kind] + c->len[kind], t, n);
    c->len[kind] += n;
    c->text[kind][c->len[kind]] = 0;
}

static void col_events(collected *c, const g4_out_event *ev, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (ev[i].kind == G4_OUT_TOOL_CALL) {
            assert_true(c->n_calls < 16);
            assert_int_equal(ev[i].call_index, (size_t)c->n_calls);
            c->names[c->n_calls] = strdup(ev[i].call->name);
            c->args[c->n_calls] = strdup(ev[i].call->arguments_json);
            c->n_calls++;
        } else {
            assert_true(ev[i].len > 0);
            col_add(c, ev[i].kind, ev[i].text, ev[i].len);
        }
    }
}

static void col_free(collected *c) {
    free(c->text[0]);
    free(c->text[1]);
    for (int i = 0; i < c->n_calls; i++) { free(c->names[i]); free(c->args[i]); }
    memset(c, 0, sizeof *c);
}

/* arguments_json is JSON that jansson reads back as the same object as `arguments`. */
static void check_reads_back(const g4_tool_call *c) {
    json_error_t je;
    json_t *re = json_loads(c->arguments_json, JSON_ALLOW_NUL, &je);
    if (!re) fail_msg("arguments %s do not read back: %s", c->arguments_json, je.text);
    assert_true(json_is_object(c->arguments));
    assert_true(json_equal(re, c->arguments));
    json_decref(re);
}

/* Streams `in` cut at the given positions; checks the deltas against the whole-text parse. */
static void stream_check(const char *in, size_t len, const size_t *cuts, int ncuts, const g4_parsed_output *want,
                         int start_in_thought) {
    g4_output_parse_opts o = {start_in_thought};
    g4_output_stream *s = NULL;
    g4_err err;
    assert_int_equal(g4_output_stream_create(&o, &s, &err), 0);
    collected c = {0};
    size_t prev = 0;
    const g4_out_event *ev;
    size_t nev;
    for (int i = 0; i <= ncuts; i++) {
        size_t at = i < ncuts ? cuts[i] : len;
        assert_int_equal(g4_output_stream_feed(s, in + prev, at - prev, &ev, &nev, &err), 0);
        col_events(&c, ev, nev);
        prev = at;
    }
    assert_int_equal(g4_output_stream_finish(s, &ev, &nev, &err), 0);
    col_events(&c, ev, nev);
    const char *r = c.text[0] ? c.text[0] : "", *t = c.text[1] ? c.text[1] : "";
    assert_int_equal(c.len[0], want->reasoning_len);
    assert_int_equal(c.len[1], want->content_len);
    assert_memory_equal(r, want->reasoning, c.len[0]);
    assert_memory_equal(t, want->content, c.len[1]);
    if (strcmp(r, want->reasoning) || strcmp(t, want->content) || c.n_calls != (int)want->n_calls) {
        fprintf(stderr, "stream mismatch for input [%s] cut at", in);
        for (int i = 0; i < ncuts; i++) fprintf(stderr, " %zu", cuts[i]);
        fprintf(stderr, "\n reasoning [%s] vs [%s]\n content [%s] vs [%s]\n calls %d vs %zu\n", r, want->reasoning, t,
                want->content, c.n_calls, want->n_calls);
    }
    assert_string_equal(r, want->reasoning);
    assert_string_equal(t, want->content);
    assert_int_equal(c.n_calls, (int)want->n_calls);
    for (int i = 0; i < c.n_calls; i++) {
        assert_string_equal(c.names[i], want->calls[i].name);
        assert_string_equal(c.args[i], want->calls[i].arguments_json);
    }
    g4_parsed_output got;
    assert_int_equal(g4_output_stream_take(s, &got, &err), 0);
    assert_int_equal(got.reasoning_len, want->reasoning_len);
    assert_int_equal(got.content_len, want->content_len);
    assert_memory_equal(got.reasoning, want->reasoning, want->reasoning_len);
    assert_memory_equal(got.content, want->content, want->content_len);
    assert_int_equal(got.malformed, want->malformed);
    assert_int_equal(got.ended, want->ended);
    g4_parsed_output_free(&got);
    /* feeding after finish is refused */
    assert_int_equal(g4_output_stream_feed(s, "x", 1, &ev, &nev, &err), G4_EINVAL);
    g4_output_stream_free(s);
    col_free(&c);
}

/* ------------------------------------------------------------------ tests */

static void test_cases(void **st) {
    (void)st;
    for (size_t k = 0; k < NCASES; k++) {
        const pcase *pc = &CASES[k];
        g4_output_parse_opts o = {pc->start_in_thought};
        g4_parsed_output out;
        g4_err err;
        int rc = g4_output_parse_ex(pc->in, strlen(pc->in), &o, &out, &err);
        assert_int_equal(rc, 0);
        if (strcmp(out.reasoning, pc->reasoning) || strcmp(out.content, pc->content) ||
            out.n_calls != (size_t)pc->n_calls || out.malformed != pc->malformed)
            fprintf(stderr, "case %zu [%s]: reasoning [%s] content [%s] calls %zu malformed %d (%s)\n", k, pc->in,
                    out.reasoning, out.content, out.n_calls, out.malformed,
                    out.malformed_msg ? out.malformed_msg : "-");
        assert_string_equal(out.reasoning, pc->reasoning);
        assert_string_equal(out.content, pc->content);
        assert_int_equal(out.n_calls, (size_t)pc->n_calls);
        assert_int_equal(out.malformed, pc->malformed);
        if (pc->malformed) assert_non_null(out.malformed_msg);
        else assert_null(out.malformed_msg);
        for (int i = 0; i < pc->n_calls; i++) {
            assert_string_equal(out.calls[i].name, pc->names[i]);
            if (strcmp(out.calls[i].arguments_json, pc->args[i]))
                fprintf(stderr, "case %zu call %d: got %s\n", k, i, out.calls[i].arguments_json);
            assert_string_equal(out.calls[i].arguments_json, pc->args[i]);
            /* the jansson object and the text agree (jansson re-parses the text) */
            check_reads_back(&out.calls[i]);
        }
        g4_parsed_output_free(&out);
    }
}

/* A call the text ends inside is cut (max_tokens, a stop string): dropped and said so, whole and
 * streamed; a call closed before it, and a malformed closed one, are not affected. */
static void test_truncated_call(void **st) {
    (void)st;
    static const struct { const char *in, *content; int truncated, malformed; size_t calls; } cs[] = {
        {"Sure<|tool_call>call:f{a:1", "Sure", 1, 0, 0},
        {"<|tool_call>call:f{}<tool_call|><|tool_call>call:g{s:" Q "ab", "", 1, 0, 1},
        {"<|tool_call>call:f{}<tool_call|>", "", 0, 0, 1},
        {"<|tool_call>call:f{a:}<tool_call|>", "<|tool_call>call:f{a:}<tool_call|>", 0, 1, 0},
        {"Sure<|tool_call>call:f{a:1<turn|>", "Sure<|tool_call>call:f{a:1", 0, 1, 0},
    };
    for (size_t i = 0; i < sizeof cs / sizeof *cs; i++) {
        g4_parsed_output out;
        g4_err err = {0};
        assert_int_equal(g4_output_parse(cs[i].in, strlen(cs[i].in), &out, &err), 0);
        assert_string_equal(out.content, cs[i].content);
        assert_int_equal(out.truncated, cs[i].truncated);
        assert_int_equal(out.malformed, cs[i].malformed);
        assert_int_equal(out.n_calls, cs[i].calls);
        assert_null(strstr(out.content, cs[i].truncated ? "<|tool_call>" : "\x01"));
        g4_parsed_output_free(&out);
        g4_output_stream *s = NULL;
        const g4_out_event *ev;
        size_t n;
        g4_output_parse_opts po = {0};
        assert_int_equal(g4_output_stream_create(&po, &s, &err), 0);
        for (const char *p = cs[i].in; *p; p++) assert_int_equal(g4_output_stream_feed(s, p, 1, &ev, &n, &err), 0);
        assert_int_equal(g4_output_stream_finish(s, &ev, &n, &err), 0);
        assert_int_equal(g4_output_stream_take(s, &out, &err), 0);
        assert_string_equal(out.content, cs[i].content);
        assert_int_equal(out.truncated, cs[i].truncated);
        g4_parsed_output_free(&out);
        g4_output_stream_free(s);
    }
}

static void test_stream_every_split(void **st) {
    (void)st;
    for (size_t k = 0; k < NCASES; k++) {
        const pcase *pc = &CASES[k];
        size_t len = strlen(pc->in);
        g4_output_parse_opts o = {pc->start_in_thought};
        g4_parsed_output want;
        assert_int_equal(g4_output_parse_ex(pc->in, len, &o, &want, NULL), 0);
        for (size_t i = 0; i <= len; i++) stream_check(pc->in, len, &i, 1, &want, pc->start_in_thought);
        /* every byte on its own */
        size_t *cuts = malloc(sizeof *cuts * (len + 1));
        for (size_t i = 0; i < len; i++) cuts[i] = i;
        stream_check(pc->in, len, cuts, (int)len, &want, pc->start_in_thought);
        /* every pair of cuts for the short inputs */
        if (len < 90)
            for (size_t i = 0; i <= len; i++)
                for (size_t j = i; j <= len; j++) {
                    size_t two[2] = {i, j};
                    stream_check(pc->in, len, two, 2, &want, pc->start_in_thought);
                }
        free(cuts);
        g4_parsed_output_free(&want);
    }
}

static void test_holdback(void **st) {
    (void)st;
    g4_output_stream *s = NULL;
    assert_int_equal(g4_output_stream_create(NULL, &s, NULL), 0);
    const g4_out_event *ev;
    size_t n;
    /* "Hello " then the start of a marker: only "Hello" may go out */
    assert_int_equal(g4_output_stream_feed(s, "Hello <|tool", 12, &ev, &n, NULL), 0);
    assert_int_equal(n, 1);
    assert_int_equal(ev[0].kind, G4_OUT_CONTENT);
    assert_int_equal(ev[0].len, 5);
    assert_memory_equal(ev[0].text, "Hello", 5);
    /* it was a call after all: nothing yet, then the completed call in one event */
    assert_int_equal(g4_output_stream_feed(s, "_call>call:f{a:" Q "x", 15 + 5 + 1, &ev, &n, NULL), 0);
    assert_int_equal(n, 0);
    assert_int_equal(g4_output_stream_feed(s, Q "}<tool_call|> world", 5 + 19, &ev, &n, NULL), 0);
    assert_int_equal(n, 2);
    assert_int_equal(ev[0].kind, G4_OUT_TOOL_CALL);
    assert_string_equal(ev[0].call->name, "f");
    assert_string_equal(ev[0].call->arguments_json, "{\"a\":\"x\"}");
    assert_true(json_is_string(json_object_get(ev[0].call->arguments, "a")));
    assert_int_equal(ev[1].kind, G4_OUT_CONTENT);
    assert_int_equal(ev[1].len, 7); /* the held " " plus " world" */
    assert_memory_equal(ev[1].text, "  world", 7);
    /* a '<' that turns out to be text is released as soon as it is known */
    assert_int_equal(g4_output_stream_feed(s, " <|x", 4, &ev, &n, NULL), 0);
    assert_int_equal(n, 1);
    assert_int_equal(ev[0].len, 4);
    assert_memory_equal(ev[0].text, " <|x", 4);
    assert_int_equal(g4_output_stream_feed(s, "<turn|>more", 11, &ev, &n, NULL), 0);
    assert_int_equal(n, 0);
    assert_int_equal(g4_output_stream_finish(s, &ev, &n, NULL), 0);
    assert_int_equal(n, 0);
    g4_parsed_output out;
    assert_int_equal(g4_output_stream_take(s, &out, NULL), 0);
    assert_string_equal(out.content, "Hello  world <|x");
    assert_int_equal(out.n_calls, 1);
    assert_int_equal(out.ended, 1);
    g4_parsed_output_free(&out);
    assert_int_equal(g4_output_stream_finish(s, &ev, &n, NULL), G4_EINVAL);
    g4_output_stream_free(s);

    /* reasoning streams as reasoning, the thought header is never shown */
    assert_int_equal(g4_output_stream_create(NULL, &s, NULL), 0);
    assert_int_equal(g4_output_stream_feed(s, "<|channel>thou", 14, &ev, &n, NULL), 0);
    assert_int_equal(n, 0);
    assert_int_equal(g4_output_stream_feed(s, "ght\nStep 1", 10, &ev, &n, NULL), 0);
    assert_int_equal(n, 1);
    assert_int_equal(ev[0].kind, G4_OUT_REASONING);
    assert_memory_equal(ev[0].text, "Step 1", 6);
    assert_int_equal(g4_output_stream_finish(s, &ev, &n, NULL), 0);
    g4_output_stream_free(s);
}

static void test_tool_call_parse_errors(void **st) {
    (void)st;
    g4_tool_call c;
    g4_err err;
    const char *bad[][2] = {
        {"call:f{a:", "expected a value"},
        {"call:f{a:1", "unterminated object"},
        {"call:f{a 1}", "expected ':'"},
        {"call:f", "expected '{'"},
        {"call:f{a:" Q "x}", "unterminated"},
        {"call:f{a:1e}", "exponent"},
        {"call:f{a:1.}", "after '.'"},
        {"call:f{a:inf}", "unexpected 'i'"},
        {"call:f{a:[1,}", "unexpected '}'"},
        {"call:f{:1}", "expected a key"},
        {"call:f{a:1}}", "after the arguments"},
        {"call:f{a:1e999}", "out of range"},
        {"xcall:f{}", "call:NAME"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = g4_tool_call_parse(bad[i][0], strlen(bad[i][0]), &c, &err);
        if (rc != G4_EFORMAT || !strstr(err.msg, bad[i][1]))
            fprintf(stderr, "[%s]: rc %d msg [%s], want [%s]\n", bad[i][0], rc, err.msg, bad[i][1]);
        assert_int_equal(rc, G4_EFORMAT);
        assert_non_null(strstr(err.msg, bad[i][1]));
        assert_non_null(strstr(err.msg, "offset"));
        assert_null(c.name);
    }
    /* deep nesting is refused, not a stack overflow */
    char deep[2000];
    size_t n = 0;
    n += (size_t)sprintf(deep, "call:f{a:");
    for (int i = 0; i < 300; i++) deep[n++] = '[';
    for (int i = 0; i < 300; i++) deep[n++] = ']';
    deep[n++] = '}';
    deep[n] = 0;
    assert_int_equal(g4_tool_call_parse(deep, n, &c, &err), G4_EFORMAT);
    assert_non_null(strstr(err.msg, "nesting"));
    /* a good one, with NUL and control bytes escaped in JSON */
    const char good[] = "call:f{s:" Q "a\0b\x01" Q "}";
    assert_int_equal(g4_tool_call_parse(good, sizeof good - 1, &c, &err), 0);
    assert_string_equal(c.arguments_json, "{\"s\":\"a\\u0000b\\u0001\"}");
    assert_int_equal(json_string_length(json_object_get(c.arguments, "s")), 4);
    g4_tool_call_free(&c);
    /* the template's own rendering of nested arguments round-trips */
    const char tmpl[] = "call:get_weather{city:" Q "Paris" Q ",days:2,opts:{metric:true,tags:[" Q "a" Q ",1,null]}}";
    assert_int_equal(g4_tool_call_parse(tmpl, sizeof tmpl - 1, &c, &err), 0);
    json_t *want = json_pack("{s:s, s:i, s:{s:b, s:[s,i,n]}}", "city", "Paris", "days", 2, "opts", "metric", 1, "tags",
                             "a", 1);
    assert_true(json_equal(want, c.arguments));
    json_decref(want);
    g4_tool_call_free(&c);
    g4_parsed_output out;
    assert_int_equal(g4_output_parse(NULL, 3, &out, &err), G4_EINVAL);
    assert_int_equal(g4_output_parse(NULL, 0, &out, &err), 0);
    g4_parsed_output_free(&out);
}

/* Calls rendered by the real chat template (tests/data/parser/template_calls.json, made by
 * make_template_calls.py with jinja2) parse back to the arguments that produced them. */
static void test_template_round_trip(void **st) {
    (void)st;
    json_error_t je;
    json_t *all = json_load_file(tu_path("parser/template_calls.json"), 0, &je);
    if (!all) fail_msg("template_calls.json: %s", je.text);
    assert_true(json_array_size(all) >= 8);
    size_t i;
    json_t *c;
    json_array_foreach(all, i, c) {
        const char *text = json_string_value(json_object_get(c, "text"));
        const char *name = json_string_value(json_object_get(c, "name"));
        json_t *args = json_object_get(c, "arguments");
        g4_parsed_output out;
        assert_int_equal(g4_output_parse(text, strlen(text), &out, NULL), 0);
        if (out.n_calls != 1) fprintf(stderr, "[%s]: %s\n", text, out.malformed_msg ? out.malformed_msg : "?");
        assert_int_equal(out.n_calls, 1);
        assert_int_equal(out.malformed, 0);
        assert_int_equal(out.ended, 1);
        assert_string_equal(out.content, "");
        assert_string_equal(out.calls[0].name, name);
        if (!json_equal(out.calls[0].arguments, args)) {
            char *a = json_dumps(args, JSON_COMPACT | JSON_SORT_KEYS);
            fprintf(stderr, "%s: got %s want %s\n", name, out.calls[0].arguments_json, a);
            free(a);
        }
        assert_true(json_equal(out.calls[0].arguments, args));
        /* the JSON text says the same thing */
        json_t *re = json_loads(out.calls[0].arguments_json, 0, &je);
        assert_non_null(re);
        assert_true(json_equal(re, args));
        json_decref(re);
        size_t len = strlen(text);
        for (size_t k = 0; k <= len; k++) stream_check(text, len, &k, 1, &out, 0);
        g4_parsed_output_free(&out);
    }
    json_decref(all);
}

/* Random soup of markers and characters: never crashes, stream always equals whole. */
static void test_fuzz(void **st) {
    (void)st;
    static const char *const alpha[] = {
        "<|channel>", "thought\n", "<channel|>", "<|tool_call>", "<tool_call|>", "call:", "f", "{", "}", "[", "]",
        ":", ",", Q, "<turn|>", "<eos>", "<|tool_response>", "<", "|", ">", "a", " ", "\n", "1", "-", ".", "e",
        "true", "null", "é", "<|", "<tool", "x:", "\"", "", "99999999999999999999", "\x02",
    };
    const int na = (int)(sizeof alpha / sizeof alpha[0]);
    uint64_t r = 0x1234567;
    char buf[512];
    size_t calls = 0;
    for (int it = 0; it < 3000; it++) {
        size_t len = 0;
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        int parts = (int)((r >> 33) % 40);
        for (int i = 0; i < parts; i++) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            const char *a = alpha[(r >> 33) % (uint64_t)na];
            size_t l = *a ? strlen(a) : 1; /* "": a NUL byte */
            if (len + l >= sizeof buf) break;
            memcpy(buf + len, a, l);
            len += l;
        }
        buf[len] = 0;
        g4_parsed_output want;
        int sit = (int)(r >> 60) & 1;
        g4_output_parse_opts o = {sit};
        assert_int_equal(g4_output_parse_ex(buf, len, &o, &want, NULL), 0);
        for (size_t i = 0; i < want.n_calls; i++) check_reads_back(&want.calls[i]);
        calls += want.n_calls;
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        size_t cuts[3];
        for (int i = 0; i < 3; i++) cuts[i] = len ? (size_t)((r >> (10 + 15 * i)) % (len + 1)) : 0;
        if (cuts[0] > cuts[1]) { size_t t = cuts[0]; cuts[0] = cuts[1]; cuts[1] = t; }
        if (cuts[1] > cuts[2]) { size_t t = cuts[1]; cuts[1] = cuts[2]; cuts[2] = t; }
        if (cuts[0] > cuts[1]) { size_t t = cuts[0]; cuts[0] = cuts[1]; cuts[1] = t; }
        stream_check(buf, len, cuts, 3, &want, sit);
        g4_parsed_output_free(&want);
    }
    print_message("%zu tool calls parsed\n", calls);
}

/* NUL bytes: a key holding one makes the call malformed (jansson could not read `arguments`
 * back: the fuzzer's {"b+3\u0000\u0000\u0002":1.5}), the raw text stays content with its
 * NULs counted; integers beyond 64 bits read back as reals. */
static void test_nul_bytes(void **st) {
    (void)st;
    const char in[] = "A\0B<|tool_call>call:f{b+3\0\0\x02:1.5}<tool_call|>";
    g4_parsed_output out;
    g4_err err;
    assert_int_equal(g4_output_parse(in, sizeof in - 1, &out, &err), 0);
    assert_int_equal(out.n_calls, 0);
    assert_int_equal(out.malformed, 1);
    assert_non_null(strstr(out.malformed_msg, "NUL"));
    assert_int_equal(out.content_len, sizeof in - 1);
    assert_memory_equal(out.content, in, sizeof in - 1);
    for (size_t k = 0; k <= sizeof in - 1; k++) stream_check(in, sizeof in - 1, &k, 1, &out, 0);
    g4_parsed_output_free(&out);
    const char th[] = "<|channel>thought\na\0b<channel|>c\0";
    assert_int_equal(g4_output_parse(th, sizeof th - 1, &out, &err), 0);
    assert_int_equal(out.reasoning_len, 3);
    assert_memory_equal(out.reasoning, "a\0b", 3);
    assert_int_equal(out.content_len, 2);
    g4_parsed_output_free(&out);
    g4_tool_call c;
    const char quoted[] = "call:f{" Q "k\0" Q ":1}";
    assert_int_equal(g4_tool_call_parse(quoted, sizeof quoted - 1, &c, &err), G4_EFORMAT);
    assert_non_null(strstr(err.msg, "key contains a NUL byte"));
    const char big[] = "call:f{n:-99999999999999999999,m:[18446744073709551616]}";
    assert_int_equal(g4_tool_call_parse(big, sizeof big - 1, &c, &err), 0);
    assert_string_equal(c.arguments_json, "{\"n\":-99999999999999999999.0,\"m\":[18446744073709551616.0]}");
    json_t *re = json_loads(c.arguments_json, 0, NULL);
    assert_non_null(re);
    assert_true(json_equal(re, c.arguments));
    json_decref(re);
    g4_tool_call_free(&c);
    /* random keys and values from bytes that broke it: every call that parses reads back */
    static const char *const kp[] = {"b", "+", "3", "", "\x02", "\x7f", "é", "_"};
    static const char *const vp[] = {"1.5", "-0", "99999999999999999999", Q "x\0y" Q, "[1,2]", "true", "{z:1}", "1e-400"};
    uint64_t r = 0xfeed;
    int ok = 0;
    for (int it = 0; it < 4000; it++) {
        char b[256];
        size_t n = (size_t)sprintf(b, "call:f{");
        for (int pair = 0; pair < 3; pair++) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            int quote = (int)(r >> 62) & 1, nk = 1 + (int)((r >> 40) % 5);
            if (pair) b[n++] = ',';
            if (quote) n += (size_t)sprintf(b + n, Q);
            for (int i = 0; i < nk; i++) {
                r = r * 6364136223846793005ull + 1442695040888963407ull;
                const char *k = kp[(r >> 33) % 8];
                size_t l = *k ? strlen(k) : 1;
                memcpy(b + n, k, l);
                n += l;
            }
            if (quote) n += (size_t)sprintf(b + n, Q);
            b[n++] = ':';
            const char *v = vp[(r >> 20) % 8];
            size_t l = strlen(v) + (v[0] == '<' ? 1 + strlen(v + strlen(v) + 1) : 0); /* past the NUL */
            memcpy(b + n, v, l);
            n += l;
        }
        b[n++] = '}';
        int rc = g4_tool_call_parse(b, n, &c, &err);
        if (rc == G4_OK) {
            check_reads_back(&c);
            ok++;
            g4_tool_call_free(&c);
        } else {
            assert_int_equal(rc, G4_EFORMAT);
        }
    }
    print_message("%d of 4000 random calls parsed\n", ok);
    assert_true(ok > 100);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cases),
        cmocka_unit_test(test_truncated_call),
        cmocka_unit_test(test_stream_every_split),
        cmocka_unit_test(test_holdback),
        cmocka_unit_test(test_tool_call_parse_errors),
        cmocka_unit_test(test_template_round_trip),
        cmocka_unit_test(test_fuzz),
        cmocka_unit_test(test_nul_bytes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
