/* bigalloc.h — large, page-aligned allocations for weights copied into process memory: an
 * anonymous mapping aligned to 2 MiB and advised for transparent huge pages (fewer TLB misses
 * when a matrix is streamed every token; also far fewer page faults while filling it). */
#ifndef G4_BASE_BIGALLOC_H
#define G4_BASE_BIGALLOC_H

#include <stddef.h>

void *g4_big_alloc(size_t n);   /* NULL when out of memory; 64-byte aligned at least */
void g4_big_free(void *p);      /* accepts NULL */

#endif
