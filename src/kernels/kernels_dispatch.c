/* kernels_dispatch.c — picks the kernel table once: $G4_ISA if set, else the best set this CPU
 * runs (cpuid + the OS's saved-register check via __builtin_cpu_supports). Owns the CPU feature
 * checks: "avx2" needs avx2+fma+f16c, "avx512" needs avx512f/bw/vl/dq (+ the avx2 set); VNNI is
 * used inside the avx512 q8_0 matmul only when present (same results either way). Knows nothing
 * about what the kernels compute. */
#include "kernels/kernels.h"
#include "kernels/kernels_internal.h"

#include <cpuid.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const g4_kernels *chosen;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static pthread_once_t cpu_once = PTHREAD_ONCE_INIT;
static int has_avx2, has_avx512;

/* F16C straight from cpuid (leaf 1, ECX bit 29): clang's __builtin_cpu_supports has no "f16c". */
static int has_f16c(void) {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}

/* AMD's family (base + extended, cpuid leaf 1), or 0 on other vendors. */
static unsigned amd_family(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d) || b != 0x68747541u /* "Auth" enticAMD */) return 0;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    const unsigned fam = (a >> 8) & 0xf;
    return fam == 0xf ? fam + ((a >> 20) & 0xff) : fam;
}

static void detect(void) {
    __builtin_cpu_init();
    has_avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
    has_avx512 = has_avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                 __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    g4__avx512_vnni = has_avx512 && __builtin_cpu_supports("avx512vnni");
    const char *pf = getenv("G4_PREFETCH_L2");
    g4__prefetch_l2 = pf && *pf ? strcmp(pf, "0") != 0 : amd_family() == 0x19;
}

const g4_kernels *g4_kernels_by_name(const char *name) {
    if (!name) return NULL;
    pthread_once(&cpu_once, detect);
    if (strcmp(name, "scalar") == 0) return &g4_kernels_scalar;
    if (strcmp(name, "avx2") == 0) return has_avx2 ? &g4_kernels_avx2 : NULL;
    if (strcmp(name, "avx512") == 0) return has_avx512 ? &g4_kernels_avx512 : NULL;
    return NULL;
}

int g4_kernels_available(const char **names, int max) {
    static const char *const all[] = {"scalar", "avx2", "avx512"};
    int n = 0;
    for (int i = 0; i < 3 && n < max; i++)
        if (g4_kernels_by_name(all[i])) names[n++] = all[i];
    return n;
}

static void choose(void) {
    const char *want = getenv("G4_ISA");
    if (want && *want) {
        chosen = g4_kernels_by_name(want);
        if (!chosen) {
            int known = !strcmp(want, "scalar") || !strcmp(want, "avx2") || !strcmp(want, "avx512");
            fprintf(stderr, "g4tp: G4_ISA=%s %s; using the best available kernel set\n", want,
                    known ? "is not supported by this CPU" : "is unknown (scalar|avx2|avx512)");
        }
    }
    if (!chosen) {
        const char *names[3];
        int n = g4_kernels_available(names, 3);
        chosen = g4_kernels_by_name(names[n - 1]);
    }
}

const g4_kernels *g4_kernels_get(void) {
    pthread_once(&once, choose);
    return chosen;
}
