/* kernels_q4.c — the grouped q4_0 layout (kernels.h G4_Q4_GROUPED): rows to and from it, and a
 * row of either layout as floats. The format itself (blocks, quantizer, dequantizer) is dtype.c's.
 * Portable C, no ISA flags. */
#include "kernels/kernels.h"

#include <stdlib.h>
#include <string.h>

/* The grouped layout (kernels.h): blk(L) is the lane order of the avx512 loop. */
static int grp_blk(int L) { return 4 * (L % 4) + L / 4; }

/* The partial group of n blocks at p to the tail layout (kernels.h), and back. */
static void group_tail(uint8_t *p, int n) {
    g4_block_q4_0 b[16];
    memcpy(b, p, (size_t)n * sizeof *b);
    for (int k = 0; k < n; k++) {
        memcpy(p + 2 * k, &b[k].d, 2);
        for (int j = 0; j < 4; j++) memcpy(p + 2 * n + 4 * n * j + 4 * k, b[k].qs + 4 * j, 4);
    }
}

static void ungroup_tail(uint8_t *p, int n) {
    g4_block_q4_0 b[16];
    for (int k = 0; k < n; k++) {
        memcpy(&b[k].d, p + 2 * k, 2);
        for (int j = 0; j < 4; j++) memcpy(b[k].qs + 4 * j, p + 2 * n + 4 * n * j + 4 * k, 4);
    }
    memcpy(p, b, (size_t)n * sizeof *b);
}

void g4_q4_0_group_row(void *row, int64_t nb, int tail) {
    uint8_t *p = row;
    if (tail && nb % 16) group_tail(p + (size_t)(nb / 16) * 16 * sizeof(g4_block_q4_0), (int)(nb % 16));
    for (int64_t g = 0; g < nb / 16; g++, p += 16 * sizeof(g4_block_q4_0)) {
        g4_block_q4_0 b[16];
        memcpy(b, p, sizeof b);
        for (int L = 0; L < 16; L++) {
            const g4_block_q4_0 *s = &b[grp_blk(L)];
            memcpy(p + 2 * L, &s->d, 2);
            for (int j = 0; j < 4; j++) memcpy(p + 32 + 64 * j + 4 * L, s->qs + 4 * j, 4);
        }
    }
}

void g4_q4_0_ungroup_row(void *row, int64_t nb, int tail) {
    uint8_t *p = row;
    if (tail && nb % 16) ungroup_tail(p + (size_t)(nb / 16) * 16 * sizeof(g4_block_q4_0), (int)(nb % 16));
    for (int64_t g = 0; g < nb / 16; g++, p += 16 * sizeof(g4_block_q4_0)) {
        uint8_t q[16 * sizeof(g4_block_q4_0)];
        g4_block_q4_0 b[16];
        memcpy(q, p, sizeof q);
        for (int L = 0; L < 16; L++) {
            g4_block_q4_0 *s = &b[grp_blk(L)];
            memcpy(&s->d, q + 2 * L, 2);
            for (int j = 0; j < 4; j++) memcpy(s->qs + 4 * j, q + 32 + 64 * j + 4 * L, 4);
        }
        memcpy(p, b, sizeof b);
    }
}

void g4_mat_lookup_row(const g4_kernels *K, const g4_mat *W, int64_t r, float *dst) {
    const uint8_t *src = (const uint8_t *)W->data + r * W->ld_bytes;
    if (W->dtype != G4_DT_Q4_0 || W->layout != G4_Q4_GROUPED) {
        K->row_to_f32(dst, src, W->dtype, W->cols);
        return;
    }
    const int64_t seg = W->layout_cols > 0 ? W->layout_cols : W->cols, sb = seg / G4_Q4_BLOCK;
    for (int64_t c = 0; c < W->cols; c += seg)
        for (int64_t g = 0; g < sb; g += 16) { /* a group back to blocks, 288 bytes on the stack */
            uint8_t q[16 * sizeof(g4_block_q4_0)];
            const int64_t n = sb - g < 16 ? sb - g : 16, b0 = c / G4_Q4_BLOCK + g;
            memcpy(q, src + (size_t)b0 * sizeof(g4_block_q4_0), (size_t)n * sizeof(g4_block_q4_0));
            if (n == 16) g4_q4_0_ungroup_row(q, 16, 0);
            else if (W->q4_tail) ungroup_tail(q, (int)n);
            K->row_to_f32(dst + b0 * G4_Q4_BLOCK, q, G4_DT_Q4_0, n * G4_Q4_BLOCK);
        }
}

int g4_q4_0_tail_default(void) {
    const char *v = getenv("G4_Q4_TAIL");
    return !(v && !strcmp(v, "0"));
}

int g4_q4_0_layout_for(const g4_kernels *k) { return k ? k->q4_0_layout : 0; }
