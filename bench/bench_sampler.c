/* bench_sampler.c — time per token of g4_sampler_sample on a 262,144-entry logit row for the
 * common settings (greedy, the 31B default top_k 64 / top_p 0.95, no top-k with top_p, min_p).
 * Usage: bench_sampler [reps]. Prints one line per setting. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "engine/sampler.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    enum { V = 262144 };
    int reps = argc > 1 ? atoi(argv[1]) : 200;
    if (reps <= 0) reps = 200;
    float *l = malloc(sizeof *l * V);
    if (!l) return 1;
    g4_rng r;
    g4_rng_seed(&r, 5);
    for (int i = 0; i < V; i++) { /* roughly Gaussian logits with a few strong ones */
        double a = g4_rng_uniform(&r) + g4_rng_uniform(&r) + g4_rng_uniform(&r) - 1.5;
        l[i] = (float)(a * 3.0);
    }
    for (int i = 0; i < 20; i++) l[(i * 7919) % V] = 12.0f - (float)i * 0.3f;
    static const struct { const char *name; float t, tp, mp; int k; } cfg[] = {
        {"greedy", 0.0f, 1.0f, 0.0f, 0},
        {"T1 top_k64 top_p0.95 (31B default)", 1.0f, 0.95f, 0.0f, 64},
        {"T1 top_k64", 1.0f, 1.0f, 0.0f, 64},
        {"T0.7 top_k0 top_p0.95", 0.7f, 0.95f, 0.0f, 0},
        {"T1 top_k0 min_p0.05", 1.0f, 1.0f, 0.05f, 0},
        {"T1 top_k0 (full softmax)", 1.0f, 1.0f, 0.0f, 0},
    };
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
        g4_sampling_params p;
        g4_sampling_params_default(&p);
        p.temperature = cfg[c].t;
        p.top_p = cfg[c].tp;
        p.min_p = cfg[c].mp;
        p.top_k = cfg[c].k;
        p.has_seed = 1;
        p.seed = 1;
        g4_sampler *s;
        g4_err err;
        if (g4_sampler_create(V, &p, &s, &err)) {
            fprintf(stderr, "%s\n", err.msg);
            return 1;
        }
        long acc = 0;
        double t0 = now_s();
        for (int i = 0; i < reps; i++) acc += g4_sampler_sample(s, l, V);
        double dt = (now_s() - t0) / reps;
        printf("%-40s %8.3f ms/token  (checksum %ld)\n", cfg[c].name, dt * 1e3, acc);
        g4_sampler_free(s);
    }
    free(l);
    return 0;
}
