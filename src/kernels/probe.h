/* probe.h — quick machine probes for reporting kernel efficiency (bench, `g4tp bench`):
 * a STREAM-triad-like memory bandwidth, a read-only stream, and the fp32 FMA peak of the
 * kernel set in use.
 * Each probe takes about a second at most. */
#ifndef G4_PROBE_H
#define G4_PROBE_H

#include <stddef.h>

/* Every bandwidth probe streams a buffer of `bytes` (0: g4_probe_stream_bytes()); a buffer the
 * caches hold measures the caches, not memory (the development VM has a 480 MiB L3), so to bound
 * a decode give it the bytes the decode streams per token. */
size_t g4_probe_llc_bytes(void);    /* the last-level cache (sysfs; 32 MiB if unknown) */
size_t g4_probe_stream_bytes(void); /* 4 x the last-level cache, >= 256 MiB, <= 1/8 of RAM */

/* STREAM triad a[i] = b[i] + s*c[i] over 3 float arrays of bytes/3 in all, `threads` pthreads
 * each on its own slice; best of several passes (fewer for big buffers: ~1 s in all); GB/s counted
 * as STREAM does (12 bytes per element, write-allocate traffic not counted). Returns <= 0 on
 * failure (out of memory, threads). */
double g4_probe_bandwidth_gbs(int threads, size_t bytes);

/* A read-only stream over `bytes` (nothing written), GB/s of bytes read: the bound that fits
 * decode, which only reads its weights. Host-dependent against the triad: on the development
 * VM anywhere from ~85 % to ~115 % of it, from minute to minute. */
double g4_probe_read_gbs(int threads, size_t bytes);

/* A read-only stream over given memory regions (e.g. a model's mapped weight matrices, the
 * very pages a decode reads): `threads` threads each read a contiguous share of all the bytes,
 * best of `passes`; GB/s of bytes read, <= 0 on failure. The regions are only read. */
typedef struct g4_mem_region {
    const void *p;
    size_t n;                 /* bytes of each row */
    size_t rows, stride;      /* rows of n bytes, stride bytes apart (a column slice of a matrix) */
} g4_mem_region;
double g4_probe_read_regions_gbs(int threads, const g4_mem_region *r, int n_regions, int passes);

/* The triad kept allocated, for measuring the bandwidth again and again (e.g. next to each
 * decode step on a machine whose neighbours take a varying share of it). run: best of `passes`;
 * <= 0 on failure. new returns NULL on failure; free accepts NULL; bytes: the buffer's size. */
typedef struct g4_bw_probe g4_bw_probe;
g4_bw_probe *g4_bw_probe_new(int threads, size_t bytes);
size_t g4_bw_probe_bytes(const g4_bw_probe *p);
double g4_bw_probe_run(g4_bw_probe *p, int passes);
void g4_bw_probe_free(g4_bw_probe *p);

/* fp32 FMA peak in GFLOP/s (2 flops per lane per FMA) of the widest kernel set this CPU runs
 * (the one g4_kernels_get() picks), using independent FMA chains in `threads` pthreads. */
double g4_probe_fma_gflops(int threads);
/* The same for a named set ("scalar", "avx2", "avx512"); -1 if this CPU cannot run it. */
double g4_probe_fma_gflops_isa(const char *isa, int threads);
/* The dot-product peaks the prefill of quantized and fast-math models is bounded by: int8
 * products (vpdpbusd, AVX512-VNNI; the q8_0/q4_0 matmuls) in GOP/s and bf16 products
 * (vdpbf16ps, AVX512-BF16; --math fast) in GFLOP/s, 2 ops per product; -1 without the feature. */
double g4_probe_int8_gops(int threads);
double g4_probe_bf16_gflops(int threads);

#endif
