/* bigalloc.c — see bigalloc.h. A 64-byte header just before the returned pointer records how
 * the block was made, so one free works for both kinds. */
#include "base/bigalloc.h"

#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

#define HUGE_BYTES ((size_t)2 << 20)
#define HDR 64

typedef struct { void *base; size_t len; int mapped; } hdr;

void *g4_big_alloc(size_t n) {
    if (n < HUGE_BYTES) {
        uint8_t *b = aligned_alloc(64, (n + HDR + 63) / 64 * 64);
        if (!b) return NULL;
        *(hdr *)b = (hdr){b, 0, 0};
        return b + HDR;
    }
    size_t len = n + HUGE_BYTES + HDR;
    uint8_t *b = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (b == MAP_FAILED) return NULL;
    uint8_t *p = (uint8_t *)(((uintptr_t)b + HDR + HUGE_BYTES - 1) & ~(uintptr_t)(HUGE_BYTES - 1));
#ifdef MADV_HUGEPAGE
    madvise(p, n, MADV_HUGEPAGE);
#endif
    *(hdr *)(p - HDR) = (hdr){b, len, 1};
    return p;
}

void g4_big_free(void *p) {
    if (!p) return;
    hdr h = *(hdr *)((uint8_t *)p - HDR);
    if (h.mapped) munmap(h.base, h.len);
    else free(h.base);
}
