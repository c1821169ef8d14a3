/* bench_attention — decode attention of the 31B's layer shapes over a paged KV cache in f32, bf16
 * and q8_0 (docs/kvcache.md "KV dtype"): one query token at context 1k / 8k / 32k, the keys and
 * values laid out as the pool lays them out (blocks of 16 positions, K rows then V rows, all of
 * a layer's KV heads per row), one segment per block. A full layer has 4 KV heads x 512 with 8
 * query heads each; a sliding layer 16 x 256 with 2 each and reads at most 1024 keys. Prints
 * microseconds per layer and the KV bytes read per second, and the 31B's attention per decoded
 * token at TP 1 (10 full + 50 sliding layers). Threads split the KV heads. Times are each
 * thread's CPU time (the slowest thread's, best of 5), so a loaded host does not count the
 * time the bench was not running; memory contention still does.
 *   bench_attention [threads] [isa]     (default 1, the best set) */
#include "kernels/kernels.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { BS = 16 };

static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct {
    const g4_kernels *K;
    int dt, nkv, qper, kv0, kv1;
    int64_t d, nk, ctx, head_b, row_b;
    const uint8_t *arena;
    const float *q;
    float *out;
    double cpu;      /* this thread's CPU seconds */
} job;

static void *run(void *p) {
    job *j = p;
    const int64_t nblk = (j->ctx + BS - 1) / BS, first = j->ctx - j->nk;
    g4_kv_seg *fs = malloc(sizeof(g4_kv_seg) * (size_t)(nblk + 1));
    g4_kvq_seg *qs = malloc(sizeof(g4_kvq_seg) * (size_t)(nblk + 1));
    float *sc = malloc(sizeof(float) * G4_ATTN_KV_SCRATCH(j->qper, j->nk, j->d));
    memset(sc, 0, sizeof(float) * G4_ATTN_KV_SCRATCH(j->qper, j->nk, j->d));
    const double t0 = cpu_s();
    for (int h = j->kv0; h < j->kv1; h++) {
        int ns = 0;
        for (int64_t b = first / BS; b < nblk; b++, ns++) {
            const int64_t i0 = b == first / BS ? first % BS : 0, i1 = b == nblk - 1 ? (j->ctx - 1) % BS : BS - 1;
            const uint8_t *k = j->arena + b * 2 * BS * j->row_b + i0 * j->row_b + h * j->head_b, *v = k + BS * j->row_b;
            fs[ns] = (g4_kv_seg){(const float *)k, (const float *)v, i1 - i0 + 1, j->row_b / 4};
            qs[ns] = (g4_kvq_seg){k, v, i1 - i0 + 1, j->row_b};
        }
        const float *q = j->q + (int64_t)h * j->qper * j->d;
        float *o = j->out + (int64_t)h * j->qper * j->d;
        for (int g = 0; g < j->qper; g += 4) {
            const int nq = j->qper - g < 4 ? j->qper - g : 4;
            if (j->dt == G4_DT_F32) j->K->attention(o + g * j->d, q + g * j->d, nq, j->d, fs, ns, sc);
            else j->K->attention_kv(o + g * j->d, q + g * j->d, nq, j->d, qs, ns, j->dt, sc);
        }
    }
    j->cpu = cpu_s() - t0;
    free(fs);
    free(qs);
    free(sc);
    return NULL;
}

/* microseconds per call of one layer's attention (best of reps) */
static double layer_us(const g4_kernels *K, int dt, int nkv, int qper, int64_t d, int64_t ctx, int64_t window, int nth, double *gbs) {
    const int64_t head_b = (int64_t)g4_dtype_row_bytes(dt, d), row_b = head_b * nkv, nblk = (ctx + BS - 1) / BS;
    const size_t bytes = (size_t)(nblk * 2 * BS * row_b);
    uint8_t *arena = malloc(bytes);
    float *tmp = malloc(sizeof(float) * (size_t)d);
    for (int64_t r = 0; r < nblk * 2 * BS * nkv; r++) {
        for (int64_t i = 0; i < d; i++) tmp[i] = (float)((r * 7 + i * 13) % 101) / 50.0f - 1.0f;
        uint8_t *dst = arena + r * head_b;
        if (dt == G4_DT_F32) memcpy(dst, tmp, sizeof(float) * (size_t)d);
        else if (dt == G4_DT_BF16) for (int64_t i = 0; i < d; i++) ((uint16_t *)dst)[i] = g4_f32_to_bf16(tmp[i]);
        else g4_quantize_row_q8_0(tmp, (g4_block_q8_0 *)dst, d);
    }
    float *q = malloc(sizeof(float) * (size_t)(nkv * qper * d)), *out = malloc(sizeof(float) * (size_t)(nkv * qper * d));
    for (int64_t i = 0; i < nkv * qper * d; i++) q[i] = (float)(i % 17) / 40.0f;
    const int64_t nk = window && window < ctx ? window : ctx;
    double best = 1e9;
    for (int rep = 0; rep < 5; rep++) {
        pthread_t th[16];
        job jb[16];
        for (int t = 0; t < nth; t++) {
            jb[t] = (job){K, dt, nkv, qper, nkv * t / nth, nkv * (t + 1) / nth, d, nk, ctx, head_b, row_b, arena, q, out, 0};
            pthread_create(&th[t], NULL, run, &jb[t]);
        }
        double dt_s = 0;
        for (int t = 0; t < nth; t++) {
            pthread_join(th[t], NULL);
            if (jb[t].cpu > dt_s) dt_s = jb[t].cpu;
        }
        if (dt_s < best) best = dt_s;
    }
    *gbs = (double)(2 * nk * row_b) / best / 1e9;
    free(arena); free(tmp); free(q); free(out);
    return best * 1e6;
}

int main(int argc, char **argv) {
    const int nth = argc > 1 ? atoi(argv[1]) : 1;
    const g4_kernels *K = argc > 2 ? g4_kernels_by_name(argv[2]) : g4_kernels_get();
    if (!K || nth < 1 || nth > 16) { fprintf(stderr, "usage: bench_attention [threads 1..16] [isa]\n"); return 2; }
    printf("# decode attention, 31B layer shapes, %s, %d thread(s); us per layer (KV GB/s)\n", K->name, nth);
    printf("| context | KV | full layer (4 x 512, 8 q each) | sliding layer (16 x 256, 2 q each, <= 1024 keys) | 31B: 10 full + 50 sliding |\n");
    printf("| ---: | --- | ---: | ---: | ---: |\n");
    const int64_t ctxs[3] = {1024, 8192, 32768};
    const int dts[3] = {G4_DT_F32, G4_DT_BF16, G4_DT_Q8_0};
    for (int c = 0; c < 3; c++)
        for (int k = 0; k < 3; k++) {
            double gf, gs;
            const double f = layer_us(K, dts[k], 4, 8, 512, ctxs[c], 0, nth, &gf);
            const double s = layer_us(K, dts[k], 16, 2, 256, ctxs[c], 1024, nth, &gs);
            printf("| %lldk | %s | %.0f (%.1f) | %.0f (%.1f) | %.1f ms |\n", (long long)(ctxs[c] / 1024), g4_dtype_name(dts[k]), f, gf, s, gs,
                   (10 * f + 50 * s) / 1e3);
            fflush(stdout);
        }
    return 0;
}
