/* kvbudget.h — the default size of the KV cache: what the machine has free once the weights are
 * in memory, less a reserve, shared by the ranks of this process; never more than the older rule
 * (a quarter of RAM per rank), never less than one sequence of the context limit. The sizing is
 * a pure function of its inputs (tests give them); reading them is separate. Knows no model. */
#ifndef G4_ENGINE_KVBUDGET_H
#define G4_ENGINE_KVBUDGET_H

#include <stddef.h>
#include <stdint.h>

typedef struct g4_mem_info {
    uint64_t total;           /* MemTotal (bytes; 0: unknown) */
    uint64_t available;       /* MemAvailable: free plus reclaimable cache (0: unknown) */
    uint64_t cg_limit;        /* the cgroup's memory.max (0: none or unknown) */
    uint64_t cg_used;         /* ... and its memory.current */
} g4_mem_info;

/* /proc/meminfo and the cgroup (v2) of this process; what cannot be read stays 0. total falls
 * back to the physical pages (sysconf). */
void g4_mem_info_read(g4_mem_info *m);

/* Per rank: (free - weight_bytes - reserve) / n_ranks, where free is MemAvailable (or MemTotal)
 * and at most what the cgroup has left, the reserve 1 GiB + total/16 (at most 8 GiB) for
 * activations, buffers and everything else; capped at total / 4 / n_ranks, raised to floor_bytes.
 * weight_bytes: what this process's ranks hold. Writes how it was chosen into why (one line). */
size_t g4_kv_default_budget(const g4_mem_info *m, uint64_t weight_bytes, int n_ranks, uint64_t floor_bytes, char *why, size_t why_len);

#endif
