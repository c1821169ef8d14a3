/* bench_vision — one image through the vision tower (gemma4/vision.h) of a model folder: wall
 * time per image, the tower's FLOPs (linears and attention counted apart) and the rate, and the
 * workspace encode allocates. The picture is synthetic (a fixed pattern; the tower's cost does
 * not depend on the pixels); the grid is ph x pw patches (default 42 x 60 = 2520, the 31B's
 * 280-token budget). A 31B-shaped tower without downloading weights:
 *   g4tp synth --like tests/data/spec/gemma-4-31B-it.config.json --layers 1 --vision --out S31
 *   build/bench/bench_vision S31 [threads] [ph pw] [reps]        (default 1 thread, 42 60, 3)
 * Prints the best of the reps (the first includes page faults on the mapped weights). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "engine/model_source.h"
#include "gemma4/vision.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_vision MODEL_DIR [threads] [ph pw] [reps]\n");
        return 2;
    }
    const int nth = argc > 2 ? atoi(argv[2]) : 1, ph = argc > 4 ? atoi(argv[3]) : 42, pw = argc > 4 ? atoi(argv[4]) : 60;
    const int reps = argc > 5 ? atoi(argv[5]) : 3;
    g4_err err = {0};
    g4_model_source s;
    g4_vision *v = NULL;
    g4_pool *pool = NULL;
    if (g4_model_source_open(&s, argv[1], 0, 0, 0, &err) || g4_model_source_vision_create(&s, g4_kernels_get(), &v, &err) ||
        g4_pool_create(nth < 1 ? 1 : nth, NULL, &pool, &err)) {
        fprintf(stderr, "bench_vision: %s\n", err.msg);
        return 1;
    }
    const int64_t n = (int64_t)ph * pw, pd = g4_vision_patch_dim(v), k = g4_vision_pooling(v), m = n / (k * k);
    float *px = malloc(sizeof(float) * (size_t)(n * pd)), *soft = malloc(sizeof(float) * (size_t)(m * g4_vision_soft_dim(v)));
    int32_t *pos = malloc(sizeof(int32_t) * 2 * (size_t)n);
    for (int64_t i = 0; i < n * pd; i++) px[i] = (float)((i * 2654435761u >> 7) % 256) / 255.0f;
    for (int64_t i = 0; i < n; i++) pos[2 * i] = (int32_t)(i % pw), pos[2 * i + 1] = (int32_t)(i / pw);
    const g4_vision_cfg *c = &s.cfg.vision;
    const double H = (double)c->hidden, A = (double)c->n_heads * c->head_dim, I = (double)c->intermediate, L = c->n_layers;
    const double lin = 2.0 * (double)n * (H * (double)pd + L * (4 * A * H + 3 * H * I)) + 2.0 * (double)m * H * (double)s.cfg.hidden_size;
    const double att = L * 4.0 * (double)n * (double)n * A;
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        const double t0 = now_s();
        if (g4_vision_encode(v, pool, px, pos, ph, pw, soft, NULL, &err)) {
            fprintf(stderr, "bench_vision: %s\n", err.msg);
            return 1;
        }
        const double t = now_s() - t0;
        if (t < best) best = t;
        printf("rep %d: %.3f s\n", r, t);
    }
    printf("%s: %d layers, hidden %.0f; %dx%d patches (%lld soft tokens), %d threads, kernels %s\n", argv[1], c->n_layers, H, ph, pw, (long long)m,
           nth, g4_kernels_get()->name);
    printf("best %.3f s per image; %.1f GFLOP (linears %.1f, attention %.1f): %.1f GFLOP/s; workspace %.1f MiB\n", best, (lin + att) / 1e9,
           lin / 1e9, att / 1e9, (lin + att) / 1e9 / best, (double)g4_vision_workspace_bytes(v, n, nth) / 1048576.0);
    free(px);
    free(soft);
    free(pos);
    g4_pool_free(pool);
    g4_vision_free(v);
    g4_model_source_close(&s);
    return 0;
}
