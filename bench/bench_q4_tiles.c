/* bench_q4_tiles — the compute side of the q4_0 / q8_0 matmuls that the int8 peak and the
 * row-parallel decode depend on, one thread, CPU time (which leaves out preemption, so the figures
 * hold on a shared host; alternate builds to compare), against this machine's int8 dot-product
 * probe (g4_probe_int8_gops, 1 thread) measured in the same run:
 *   prefill R K T [q4|q8|bf16]  the prepared matmul of T tokens over an R x K matrix (grouped
 *                          q4_0 as the avx512 set reads it), GOP/s (2 per product) and % of the
 *                          probe (bf16: the exact float matmul, against the FMA probe),
 *                          called on the engine's row chunks (~256 KiB of weights each, as
 *                          forward.c's chunk_rows; G4_BENCH_CHUNK=N rows per call, 0 = all);
 *   slices R SC NS         matmul_slices over R rows of NS column slices of SC columns each
 *                          (grouped per slice, as the row-parallel decode reads o_proj/down_proj),
 *                          weight GB/s per thread and cycles per slice at 3.37 GHz.
 *   stream NS              from memory, not cache: two threads (pinned to CPUs 0 and 1) each
 *                          stream their own 1.5 GB of q4_0 weights, one matrix shape after another,
 *                          4 rounds: matmul_slices over rows of NS slices of 1344 columns
 *                          (down_proj's at TP 16/NS), the T = 1 matvec over the same bytes as rows
 *                          of NS x 1344 and of 5376 columns, and a bare read (XOR of 64-byte
 *                          loads); wall-clock GB/s per thread over the 4 rounds. What the decode
 *                          depends on: how close each kernel's one stream per thread comes to
 *                          the memory's pace (prefetch distance, partial groups, slice overhead).
 * prefill and slices print a hash of their output bits (equal hashes across builds: the same bits).
 * G4_ISA=avx2 runs the prefill on that set (and its FMA probe) instead of avx512. G4_Q4_TAIL=0
 * keeps the grouped rows' partial groups as blocks (kernels.h; the layout before version 5
 * artifacts), as the engine does with it; the bits are the same either way.
 * Usage: bench_q4_tiles prefill 10752 5376 128 | slices 64 1344 8 | stream 8 (avx512 only) */
#include "kernels/kernels.h"
#include "kernels/probe.h"

#include <immintrin.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static int q4_tail = 1; /* G4_Q4_TAIL */

static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static unsigned hash_bits(const float *y, int64_t n) {
    unsigned h = 0;
    for (int64_t i = 0; i < n; i++) {
        unsigned u;
        memcpy(&u, &y[i], 4);
        h = h * 31 + u;
    }
    return h;
}

static void fill(float *x, int64_t n) {
    uint32_t s = 7;
    for (int64_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = (float)(s >> 8) / 16777216.0f - 0.5f;
    }
}

/* q8: 0 q4_0, 1 q8_0, 2 bf16 (the exact float matmul, against the FMA probe) */
static int prefill(const g4_kernels *k, int64_t R, int64_t K, int T, int q8) {
    const int dt = q8 == 2 ? G4_DT_BF16 : q8 ? G4_DT_Q8_0 : G4_DT_Q4_0;
    const size_t rb = g4_dtype_row_bytes(dt, K);
    char *w = malloc((size_t)R * rb);
    float *x = malloc(sizeof(float) * (size_t)T * (size_t)K), *y = malloc(sizeof(float) * (size_t)T * (size_t)R);
    if (!w || !x || !y) return 1;
    fill(x, (int64_t)T * K);
    for (int64_t r = 0; r < R; r++) {
        if (q8 == 2) {
            uint16_t *o = (uint16_t *)(w + r * rb);
            for (int64_t c = 0; c < K; c++) {
                uint32_t u;
                memcpy(&u, &x[(r % T) * K + c], 4);
                o[c] = (uint16_t)(u >> 16);
            }
        } else if (q8) g4_quantize_row_q8_0(x + (r % T) * K, (void *)(w + r * rb), K);
        else g4_quantize_row_q4_0(x + (r % T) * K, (void *)(w + r * rb), K);
    }
    g4_mat W = {.data = w, .dtype = dt, .rows = R, .cols = K, .ld_bytes = (int64_t)rb};
    if (!q8 && g4_q4_0_layout_for(k) == G4_Q4_GROUPED) {
        for (int64_t r = 0; r < R; r++) g4_q4_0_group_row(w + r * rb, K / 32, q4_tail);
        W.layout = G4_Q4_GROUPED;
        W.q4_tail = q4_tail;
        W.layout_cols = K;
    }
    /* bf16: the prepared form where the set has one (avx512), the plain matmul with
     * G4_BENCH_BF16_PLAIN=1 or without it (same bits) */
    const int plain = q8 == 2 && (k->matmul_act_bytes(&W, T) == 0 || getenv("G4_BENCH_BF16_PLAIN"));
    void *act = aligned_alloc(64, plain ? 64 : (k->matmul_act_bytes(&W, T) + 63) / 64 * 64),
         *scratch = aligned_alloc(64, (k->matmul_scratch_bytes(&W, T) + 127) / 64 * 64);
    if (!act || !scratch) return 1;
    if (!plain) k->matmul_prepare(&W, x, K, T, act);
    /* rows per call: the engine's chunks (forward.c chunk_rows: ~256 KiB of weights, a multiple
     * of 32 rows, or what the kernel asks for: matmul_call_rows), or the whole matrix with
     * G4_BENCH_CHUNK=0 */
    const char *ce = getenv("G4_BENCH_CHUNK");
    int64_t chunk = ce ? atoll(ce) : (((int64_t)256 << 10) / (int64_t)rb + 31) / 32 * 32;
    const int64_t want = !ce && !plain && k->matmul_call_rows ? k->matmul_call_rows(&W, T) : 0;
    if (want > chunk) chunk = (want + 31) / 32 * 32;
    if (chunk <= 0) chunk = R;
    double best = 1e30;
    for (int it = 0; it < 25; it++) {
        const double t0 = cpu_s();
        for (int64_t r0 = 0; r0 < R; r0 += chunk) {
            const int64_t r1 = r0 + chunk < R ? r0 + chunk : R;
            if (plain) k->matmul(&W, x, K, T, y, R, r0, r1, scratch);
            else k->matmul_prepared(&W, act, T, y, R, r0, r1, scratch);
        }
        const double t = cpu_s() - t0;
        if (t < best) best = t;
    }
    const double gops = 2.0 * (double)R * (double)K * T / best * 1e-9, peak = q8 == 2 ? g4_probe_fma_gflops(1) : g4_probe_int8_gops(1);
    printf("%s prefill %ldx%ld T=%d: %.1f GOP/s = %.1f %% of the %s probe (%.0f GOP/s, 1 thread); bits %08x\n",
           q8 == 2 ? "bf16" : q8 ? "q8_0" : "q4_0", (long)R, (long)K, T, gops, 100 * gops / peak, q8 == 2 ? "fma" : "int8", peak,
           hash_bits(y, (int64_t)T * R));
    free(w), free(x), free(y), free(act), free(scratch);
    return 0;
}

static int slices(const g4_kernels *k, int64_t R, int64_t SC, int NS) {
    if (!k->matmul_slices) return fprintf(stderr, "bench_q4_tiles: set %s has no matmul_slices\n", k->name), 2;
    const int64_t K = SC * NS, snb = SC / 32;
    const size_t rb = g4_dtype_row_bytes(G4_DT_Q4_0, K);
    char *w = malloc((size_t)R * rb);
    float *x = malloc(sizeof(float) * (size_t)K), *y = malloc(sizeof(float) * (size_t)R * (size_t)NS);
    if (!w || !x || !y) return 1;
    fill(x, K);
    for (int64_t r = 0; r < R; r++) {
        g4_quantize_row_q4_0(x, (void *)(w + r * rb), K);
        for (int s = 0; s < NS; s++) g4_q4_0_group_row(w + r * rb + (size_t)s * (size_t)snb * sizeof(g4_block_q4_0), snb, q4_tail);
    }
    g4_mat W = {.data = w, .dtype = G4_DT_Q4_0, .rows = R, .cols = K, .ld_bytes = (int64_t)rb, .layout = G4_Q4_GROUPED, .layout_cols = SC, .q4_tail = q4_tail};
    g4_mat S = W;
    S.cols = SC;
    const size_t ab = (k->matmul_act_bytes(&S, 1) + 63) / 64 * 64;
    char *act = aligned_alloc(64, ab * (size_t)NS);
    if (!act) return 1;
    for (int s = 0; s < NS; s++) k->matmul_prepare(&S, x + s * SC, SC, 1, act + (size_t)s * ab);
    double best = 1e30;
    for (int rep = 0; rep < 5; rep++) {
        const double t0 = cpu_s();
        for (int it = 0; it < 200; it++) k->matmul_slices(&W, SC, NS, act, ab, y, R, 0, R);
        const double t = (cpu_s() - t0) / 200;
        if (t < best) best = t;
    }
    printf("q4_0 slices %ld rows x %d slices of %ld columns: %.1f GB/s of weights (%.1f cycles a slice at 3.37 GHz); bits %08x\n",
           (long)R, NS, (long)SC, (double)R * (double)rb / best * 1e-9, best * 3.37e9 / (double)(R * NS), hash_bits(y, R * NS));
    free(w), free(x), free(y), free(act);
    return 0;
}

/* ---- stream: the decode kernels from memory, two threads ---------------------------------- */

enum { ST_H = 5376, ST_SC = 1344, ST_MODES = 4, ST_ROUNDS = 4 };
#define ST_BYTES ((size_t)1536 << 20)
static const char *const st_name[ST_MODES] = {"slices", "matvec NSx1344", "matvec 5376", "bare read"};

typedef struct {
    const g4_kernels *k;
    int cpu, ns, ok;
    pthread_barrier_t *bar;
    double secs[ST_MODES];
    unsigned sink;
} st_thread;

static double wall_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* XOR of every 64-byte line: a read with nothing else in the loop (compiled for AVX-512 here
 * alone: the benchmark itself is built without the ISA flags and main checks the CPU first) */
__attribute__((target("avx512f"))) static unsigned st_bare_read(const char *p, size_t n) {
    __m512i a = _mm512_setzero_si512();
    for (size_t o = 0; o < n; o += 64) a = _mm512_xor_si512(a, _mm512_load_si512(p + o));
    return (unsigned)_mm512_reduce_add_epi32(a);
}

static void *st_run(void *arg) {
    st_thread *t = arg;
    const g4_kernels *k = t->k;
    cpu_set_t cs;
    CPU_ZERO(&cs);
    CPU_SET(t->cpu, &cs);
    pthread_setaffinity_np(pthread_self(), sizeof cs, &cs);
    const int NS = t->ns;
    const int64_t K = (int64_t)ST_SC * NS;
    const size_t rbd = g4_dtype_row_bytes(G4_DT_Q4_0, K), rbg = g4_dtype_row_bytes(G4_DT_Q4_0, ST_H);
    const int64_t Rd = (int64_t)(ST_BYTES / rbd), Rg = (int64_t)(ST_BYTES / rbg);
    const size_t huge = (size_t)2 << 20;
    char *map = mmap(NULL, ST_BYTES + huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    float *x = malloc(sizeof(float) * (size_t)K), *y = malloc(sizeof(float) * (size_t)(Rd * NS + Rg));
    char *row = malloc(rbd);
    t->ok = map != MAP_FAILED && x && y && row;
    if (t->ok) {
        madvise(map, ST_BYTES + huge, MADV_HUGEPAGE);
        char *w = (char *)(((uintptr_t)map + huge - 1) & ~(uintptr_t)(huge - 1));
        fill(x, K);
        g4_quantize_row_q4_0(x, (void *)row, K);
        for (int s = 0; s < NS; s++) g4_q4_0_group_row(row + (size_t)s * (ST_SC / 32) * sizeof(g4_block_q4_0), ST_SC / 32, q4_tail);
        for (int64_t r = 0; r < Rd; r++) memcpy(w + r * rbd, row, rbd);
        /* the same bytes as three shapes: only the bandwidth matters here, not the values */
        g4_mat S = {.data = w, .dtype = G4_DT_Q4_0, .rows = Rd, .cols = K, .ld_bytes = (int64_t)rbd, .layout = G4_Q4_GROUPED, .layout_cols = ST_SC, .q4_tail = q4_tail};
        g4_mat S1 = S, P = S, G = S;
        S1.cols = ST_SC;
        P.layout_cols = K;
        G.rows = Rg, G.cols = ST_H, G.ld_bytes = (int64_t)rbg, G.layout_cols = ST_H;
        const size_t ab = (k->matmul_act_bytes(&S1, 1) + 63) / 64 * 64;
        char *act = aligned_alloc(64, ab * (size_t)NS), *actp = aligned_alloc(64, (k->matmul_act_bytes(&P, 1) + 63) / 64 * 64);
        char *actg = aligned_alloc(64, (k->matmul_act_bytes(&G, 1) + 63) / 64 * 64);
        void *scr = aligned_alloc(64, (k->matmul_scratch_bytes(&P, 1) + k->matmul_scratch_bytes(&G, 1) + 127) / 64 * 64);
        t->ok = act && actp && actg && scr;
        if (t->ok) {
            for (int s = 0; s < NS; s++) k->matmul_prepare(&S1, x + s * ST_SC, ST_SC, 1, act + (size_t)s * ab);
            k->matmul_prepare(&P, x, K, 1, actp);
            k->matmul_prepare(&G, x, ST_H, 1, actg);
        }
        for (int rep = 0; rep < ST_ROUNDS; rep++)
            for (int m = 0; m < ST_MODES; m++) {
                pthread_barrier_wait(t->bar);
                const double t0 = wall_s();
                const int64_t per = 352; /* about the engine's 2 MiB decode chunks */
                if (!t->ok) {
                } else if (m == 0) {
                    for (int64_t r = 0; r < Rd; r += per) k->matmul_slices(&S, ST_SC, NS, act, ab, y, Rd, r, r + per < Rd ? r + per : Rd);
                } else if (m == 1) {
                    for (int64_t r = 0; r < Rd; r += per) k->matmul_prepared(&P, actp, 1, y, Rd, r, r + per < Rd ? r + per : Rd, scr);
                } else if (m == 2) {
                    for (int64_t r = 0; r < Rg; r += per) k->matmul_prepared(&G, actg, 1, y, Rg, r, r + per < Rg ? r + per : Rg, scr);
                } else {
                    t->sink ^= st_bare_read(w, ST_BYTES);
                }
                t->secs[m] += wall_s() - t0;
            }
        free(act), free(actp), free(actg), free(scr);
    } else {
        for (int i = 0; i < ST_ROUNDS * ST_MODES; i++) pthread_barrier_wait(t->bar);
    }
    if (map != MAP_FAILED) munmap(map, ST_BYTES + huge);
    free(x), free(y), free(row);
    return NULL;
}

static int stream(const g4_kernels *k, int ns) {
    if (!k->matmul_slices) return fprintf(stderr, "bench_q4_tiles: set %s has no matmul_slices\n", k->name), 2;
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, 2);
    st_thread t[2] = {{.k = k, .cpu = 0, .ns = ns, .bar = &bar}, {.k = k, .cpu = 1, .ns = ns, .bar = &bar}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        if (pthread_create(&th[i], NULL, st_run, &t[i])) return fprintf(stderr, "bench_q4_tiles: no thread\n"), 1;
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    pthread_barrier_destroy(&bar);
    if (!t[0].ok || !t[1].ok) return fprintf(stderr, "bench_q4_tiles: out of memory (2 x 1.5 GB)\n"), 1;
    printf("q4_0 from memory, 2 threads x %.1f GB, %d rounds (slices of 1344 columns, %d a row):\n", ST_BYTES * 1e-9, ST_ROUNDS, ns);
    for (int m = 0; m < ST_MODES; m++)
        printf("  %-15s CPU 0 %5.1f GB/s, CPU 1 %5.1f GB/s\n", m == 1 ? "matvec NSx1344" : st_name[m],
               ST_ROUNDS * ST_BYTES / t[0].secs[m] * 1e-9, ST_ROUNDS * ST_BYTES / t[1].secs[m] * 1e-9);
    return 0;
}

int main(int argc, char **argv) {
    const char *isa = getenv("G4_ISA") ? getenv("G4_ISA") : "avx512"; /* prefill bf16 also runs on avx2 */
    const g4_kernels *k = g4_kernels_by_name(isa);
    q4_tail = g4_q4_0_tail_default();
    if (argc == 3 && !strcmp(argv[1], "stream")) {
        const int ns = atoi(argv[2]);
        if (ns < 1 || ns > 64) return fprintf(stderr, "usage: bench_q4_tiles stream NSLICES (1..64)\n"), 2;
        if (!k) return fprintf(stderr, "bench_q4_tiles: this CPU does not run the %s set\n", isa), 2;
        return stream(k, ns);
    }
    const int pre = argc >= 5 && !strcmp(argv[1], "prefill"), sl = argc == 5 && !strcmp(argv[1], "slices");
    const long long a = argc >= 5 ? atoll(argv[2]) : 0, b = argc >= 5 ? atoll(argv[3]) : 0, c = argc >= 5 ? atoll(argv[4]) : 0;
    if ((!pre && !sl) || a <= 0 || b <= 0 || b % 32 || c <= 0 || c > 4096 ||
        (pre && argc == 6 && strcmp(argv[5], "q4") && strcmp(argv[5], "q8") && strcmp(argv[5], "bf16")) || argc > 6) {
        fprintf(stderr, "usage: bench_q4_tiles prefill ROWS COLS T [q4|q8|bf16] | slices ROWS SLICE_COLS NSLICES (COLS a multiple of 32) | stream NSLICES\n");
        return 2;
    }
    if (!k) {
        fprintf(stderr, "bench_q4_tiles: this CPU does not run the %s set\n", isa);
        return 2;
    }
    const int dt = argc == 6 && !strcmp(argv[5], "bf16") ? 2 : argc == 6 && !strcmp(argv[5], "q8");
    return pre ? prefill(k, a, b, (int)c, dt) : slices(k, a, b, (int)c);
}
