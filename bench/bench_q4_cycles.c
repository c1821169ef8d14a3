/* bench_q4_cycles — the q4_0 decode loop's compute cost: cycles per group of 16 blocks (one row,
 * one token) of one thread on a matrix resident in L2, from the thread's CPU time (which leaves
 * out preemption, so the figure holds on a loaded machine), for T = 1..4 tokens, in llama.cpp's
 * block layout and in the grouped layout (kernels.h, G4_Q4_GROUPED), and checks that both give
 * the same bits. Usage: bench_q4_cycles [isa [rows cols [GHz]]]   (default avx512 64 5376 3.37:
 * 3.37 GHz is what an integer chain measures on the development VM) */
#include "kernels/kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
    const char *isa = argc > 1 ? argv[1] : "avx512";
    const int64_t R = argc > 3 ? atoll(argv[2]) : 64, K = argc > 3 ? atoll(argv[3]) : 5376;
    const double ghz = argc > 4 ? atof(argv[4]) : 3.37;
    const g4_kernels *k = g4_kernels_by_name(isa);
    if (!k || R <= 0 || K <= 0 || K % 32) {
        fprintf(stderr, "bench_q4_cycles: unknown set '%s' or bad shape (cols a multiple of 32)\n", isa);
        return 2;
    }
    const int64_t nb = K / 32, rb = (int64_t)g4_dtype_row_bytes(G4_DT_Q4_0, K);
    char *w = malloc((size_t)(R * rb)), *wg = malloc((size_t)(R * rb));
    float *x = malloc(sizeof(float) * (size_t)(4 * K)), *y = malloc(sizeof(float) * (size_t)(4 * R)),
          *yg = malloc(sizeof(float) * (size_t)(4 * R));
    uint32_t s = 7;
    for (int64_t i = 0; i < 4 * K; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = (float)(s >> 8) / 16777216.0f - 0.5f;
    }
    for (int64_t r = 0; r < R; r++) g4_quantize_row_q4_0(x + (r % 4) * K, (g4_block_q4_0 *)(w + r * rb), K);
    memcpy(wg, w, (size_t)(R * rb));
    const int tail = g4_q4_0_tail_default(); /* as the engine */
    for (int64_t r = 0; r < R; r++) g4_q4_0_group_row(wg + r * rb, nb, tail);
    g4_mat W = {.data = w, .dtype = G4_DT_Q4_0, .rows = R, .cols = K, .ld_bytes = rb};
    g4_mat Wg = W;
    Wg.data = wg;
    Wg.layout = G4_Q4_GROUPED;
    Wg.q4_tail = tail;
    void *act = aligned_alloc(64, (k->matmul_act_bytes(&W, 4) + 63) / 64 * 64);
    void *scr = malloc(k->matmul_scratch_bytes(&W, 4));
    const double groups = (double)R * (double)nb / 16.0;
    const int reps = (int)(2e8 / (double)(R * K)) + 1;
    printf("%s q4_0 %lldx%lld (%.0f KB), %d calls each, cycles per group of 16 blocks and token at %.2f GHz\n",
           k->name, (long long)R, (long long)K, (double)(R * rb) / 1024, reps, ghz);
    for (int T = 1; T <= 4; T++) {
        k->matmul_prepare(&W, x, K, T, act);
        double best[2] = {1e30, 1e30};
        for (int round = 0; round < 5; round++)
            for (int v = 0; v < 2; v++) {
                const g4_mat *M = v ? &Wg : &W;
                double t0 = cpu_s();
                for (int i = 0; i < reps; i++) k->matmul_prepared(M, act, T, v ? yg : y, R, 0, R, scr);
                double dt = cpu_s() - t0;
                if (dt < best[v]) best[v] = dt;
            }
        const int same = memcmp(y, yg, sizeof(float) * (size_t)(T * R)) == 0;
        const double c0 = best[0] * ghz * 1e9 / reps / groups, c1 = best[1] * ghz * 1e9 / reps / groups;
        printf("T=%d  blocks %5.1f cycles/group (%4.1f per token)  grouped %5.1f (%4.1f)  %s\n", T, c0, c0 / T, c1,
               c1 / T, same ? "same bits" : "BITS DIFFER");
        if (!same) return 1;
    }
    free(w);
    free(wg);
    free(x);
    free(y);
    free(yg);
    free(act);
    free(scr);
    return 0;
}
