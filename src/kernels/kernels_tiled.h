/* kernels_tiled.h — the blocking loop of the float matmul for T > SMALL_T, written once for the
 * avx2 and avx512 sets (an inline template: each includes it once, in its own translation unit
 * with its own ISA flags, so each gets its own copy compiled for its vectors).
 *
 * Before including it a set defines LANES (floats per vector), the enum constants MR, NR (the
 * register tile: rows x tokens), KC (the K block), TB (tokens per pass), RB (rows per pass),
 *   tile(dt, mr, nr, w, x, ldx, n, accb, first, last, y, ldy)  (always inline) one mr x nr tile
 *       over n columns, the rows (dtype dt, pointers at the K block's first element) read in
 *       place and converted in registers, its LANES-wide partial sums parked in accb between K
 *       blocks (first: start from zero, last: reduce into y);
 *   TILE_CASES(dt)  a switch on mr * 8 + nr with a TC(dt, mr, nr) for each tile shape it has.
 * The loop: token blocks of TB, row blocks of RB, K blocks of KC, then token tiles outside row
 * tiles: a token tile's activations stay in L1/L2 while the row block's tiles pass by, and the
 * row block (one of the forward pass's ~256 KiB chunks) stays in L2 for every token tile. The
 * per-element order is the tile's, so the bits depend on K only. */
#ifndef G4_KERNELS_TILED_H
#define G4_KERNELS_TILED_H

/* The tile of each dtype and shape, compiled with constant arguments. */
static void tile_any(int dt, int mr, int nr, const char *const *w, const float *x, int64_t ldx, int64_t n,
                     float *accb, int first, int last, float *y, int64_t ldy) {
#define TC(d, a, b) case a * 8 + b: tile(d, a, b, w, x, ldx, n, accb, first, last, y, ldy); break;
    if (dt == G4_DT_BF16) TILE_CASES(G4_DT_BF16)
    else if (dt == G4_DT_F16) TILE_CASES(G4_DT_F16)
    else TILE_CASES(G4_DT_F32)
#undef TC
}

static size_t f_scratch_bytes(void) { return (size_t)TB * RB * LANES * sizeof(float) + 64; }

static void matmul_tiled(const g4_mat *W, const float *x, int64_t ldx, int T, float *y,
                         int64_t ldy, int64_t r0, int64_t r1, void *scratch) {
    const int dt = W->dtype;
    const int64_t K = W->cols, ld = W->ld_bytes, esz = dt == G4_DT_F32 ? 4 : 2;
    float *accbuf = g4__align64(scratch);
    for (int tb = 0; tb < T; tb += TB) {
        const int nt = T - tb < TB ? T - tb : TB;
        for (int64_t rb = r0; rb < r1; rb += RB) {
            const int64_t re = rb + RB < r1 ? rb + RB : r1;
            for (int64_t kb = 0; kb < K; kb += KC) {
                const int64_t n = K - kb < KC ? K - kb : KC;
                const int first = kb == 0, last = kb + n == K;
                for (int tt = tb; tt < tb + nt; tt += NR) {
                    const int nr = tb + nt - tt < NR ? tb + nt - tt : NR;
                    for (int64_t rt = rb; rt < re; rt += MR) {
                        const int mr = re - rt < MR ? (int)(re - rt) : MR;
                        const char *wp[MR];
                        for (int i = 0; i < mr; i++) wp[i] = (const char *)W->data + (rt + i) * ld + kb * esz;
                        tile_any(dt, mr, nr, wp, x + tt * ldx + kb, ldx, n,
                                 accbuf + ((tt - tb) * RB + (rt - rb)) * LANES, first, last, y + tt * ldy + rt, ldy);
                    }
                }
            }
        }
    }
}

#endif
