/* kernels_tiled.h — the blocking loop of the float matmul for T > SMALL_T, written once for the
 * avx2 and avx512 sets (an inline template: each includes it once, in its own translation unit
 * with its own ISA flags, so each gets its own copy compiled for its vectors).
 *
 * Before including it a set defines LANES (floats per vector), the enum constants MR, NR (the
 * register tile: rows x tokens), KC (the K block), TB (tokens per pass), RB (rows per pass), and
 * the static functions
 *   unpack_row(dt, row, k0, n, dst)  n weights of a bf16/f16 row from element k0 to fp32, padded;
 *   tile_any(mr, nr, w, x, ldx, n, accb, first, last, y, ldy)  one mr x nr tile over n columns,
 *       its LANES-wide partial sums parked in accb between K blocks (first: start from zero,
 *       last: reduce into y).
 * The loop: token blocks of TB, row blocks of RB, K blocks of KC; each row's K block unpacked to
 * a panel once per pass (f32 rows are read in place) and its next K block prefetched; then the
 * tiles. The per-element order is the tile's, so the bits depend on K only. */
#ifndef G4_KERNELS_TILED_H
#define G4_KERNELS_TILED_H

static size_t f_scratch_bytes(void) {
    return (size_t)TB * RB * LANES * sizeof(float) + (size_t)MR * KC * sizeof(float) + 64;
}

static void matmul_tiled(const g4_mat *W, const float *x, int64_t ldx, int T, float *y,
                         int64_t ldy, int64_t r0, int64_t r1, void *scratch) {
    const int dt = W->dtype;
    const int64_t K = W->cols, ld = W->ld_bytes;
    float *accbuf = g4__align64(scratch);
    float *panel = accbuf + (size_t)TB * RB * LANES;
    for (int tb = 0; tb < T; tb += TB) {
        const int nt = T - tb < TB ? T - tb : TB;
        for (int64_t rb = r0; rb < r1; rb += RB) {
            const int64_t re = rb + RB < r1 ? rb + RB : r1;
            for (int64_t kb = 0; kb < K; kb += KC) {
                const int64_t n = K - kb < KC ? K - kb : KC;
                const int first = kb == 0, last = kb + n == K;
                for (int64_t rt = rb; rt < re; rt += MR) {
                    const int mr = re - rt < MR ? (int)(re - rt) : MR;
                    const float *wp[MR];
                    for (int i = 0; i < mr; i++) {
                        const char *row = (const char *)W->data + (rt + i) * ld;
                        if (dt == G4_DT_F32) wp[i] = (const float *)row + kb;
                        else {
                            unpack_row(dt, row, kb, n, panel + i * KC);
                            wp[i] = panel + i * KC;
                        }
                        /* this row's next K block is needed one row-block pass from now */
                        if (!last) {
                            const int64_t esz = dt == G4_DT_F32 ? 4 : 2;
                            const char *nx = row + (kb + KC) * esz;
                            const int64_t nbytes = (K - kb - KC < KC ? K - kb - KC : KC) * esz;
                            for (int64_t o = 0; o < nbytes; o += 64) _mm_prefetch(nx + o, _MM_HINT_T1);
                        }
                    }
                    for (int tt = tb; tt < tb + nt; tt += NR) {
                        const int nr = tb + nt - tt < NR ? tb + nt - tt : NR;
                        tile_any(mr, nr, wp, x + tt * ldx + kb, ldx, n,
                                 accbuf + ((tt - tb) * RB + (rt - rb)) * LANES, first, last,
                                 y + tt * ldy + rt, ldy);
                    }
                }
            }
        }
    }
}

#endif
