/* probe.h — quick machine probes for reporting kernel efficiency (bench, `g4tp bench`):
 * a STREAM-triad-like memory bandwidth, a read-only stream, and the fp32 FMA peak of the
 * kernel set in use.
 * Each probe takes well under a second. */
#ifndef G4_PROBE_H
#define G4_PROBE_H

/* STREAM triad a[i] = b[i] + s*c[i] over 3 x 40 MiB float arrays, `threads` pthreads each on
 * its own slice; best of several passes; GB/s counted as STREAM does (12 bytes per element,
 * write-allocate traffic not counted). Returns <= 0 on failure (out of memory, threads). */
double g4_probe_bandwidth_gbs(int threads);

/* A read-only stream over 512 MiB (nothing written), GB/s of bytes read: the bound that fits
 * decode, which only reads its weights. Host-dependent against the triad: on the development
 * VM anywhere from ~85 % to ~115 % of it, from minute to minute. */
double g4_probe_read_gbs(int threads);

/* The same probe kept allocated, for measuring the bandwidth again and again (e.g. next to each
 * decode step on a machine whose neighbours take a varying share of it). run: best of `passes`
 * (~2 ms each); <= 0 on failure. new returns NULL on failure; free accepts NULL. */
typedef struct g4_bw_probe g4_bw_probe;
g4_bw_probe *g4_bw_probe_new(int threads);
double g4_bw_probe_run(g4_bw_probe *p, int passes);
void g4_bw_probe_free(g4_bw_probe *p);

/* fp32 FMA peak in GFLOP/s (2 flops per lane per FMA) of the widest kernel set this CPU runs
 * (the one g4_kernels_get() picks), using independent FMA chains in `threads` pthreads. */
double g4_probe_fma_gflops(int threads);
/* The same for a named set ("scalar", "avx2", "avx512"); -1 if this CPU cannot run it. */
double g4_probe_fma_gflops_isa(const char *isa, int threads);

#endif
