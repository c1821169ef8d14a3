/* probe.h — quick machine probes for reporting kernel efficiency (bench, `g4tp bench`):
 * a STREAM-triad-like memory bandwidth and the fp32 FMA peak of the kernel set in use.
 * Each probe takes well under a second. */
#ifndef G4_PROBE_H
#define G4_PROBE_H

/* STREAM triad a[i] = b[i] + s*c[i] over 3 x 40 MiB float arrays, `threads` pthreads each on
 * its own slice; best of several passes; GB/s counted as STREAM does (12 bytes per element,
 * write-allocate traffic not counted). Returns <= 0 on failure (out of memory, threads). */
double g4_probe_bandwidth_gbs(int threads);

/* fp32 FMA peak in GFLOP/s (2 flops per lane per FMA) of the widest kernel set this CPU runs
 * (the one g4_kernels_get() picks), using independent FMA chains in `threads` pthreads. */
double g4_probe_fma_gflops(int threads);
/* The same for a named set ("scalar", "avx2", "avx512"); -1 if this CPU cannot run it. */
double g4_probe_fma_gflops_isa(const char *isa, int threads);

#endif
