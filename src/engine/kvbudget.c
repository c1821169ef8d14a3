/* kvbudget.c — see kvbudget.h. Linux: /proc/meminfo, /proc/self/cgroup, /sys/fs/cgroup. */
#include "engine/kvbudget.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MIB ((uint64_t)1 << 20)
#define GIB ((uint64_t)1 << 30)

/* "max" or a number of bytes in a one-line cgroup file; 0 when absent or "max". */
static uint64_t cg_value(const char *dir, const char *name) {
    char path[4200];
    snprintf(path, sizeof path, "/sys/fs/cgroup%s/%s", dir, name);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[64] = {0};
    uint64_t v = fgets(line, sizeof line, f) && strncmp(line, "max", 3) ? strtoull(line, NULL, 10) : 0;
    fclose(f);
    return v;
}

void g4_mem_info_read(g4_mem_info *m) {
    memset(m, 0, sizeof *m);
    FILE *f = fopen("/proc/meminfo", "r");
    char line[4200];
    while (f && fgets(line, sizeof line, f)) {
        unsigned long long kb;
        if (sscanf(line, "MemTotal: %llu kB", &kb) == 1) m->total = (uint64_t)kb << 10;
        else if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) m->available = (uint64_t)kb << 10;
    }
    if (f) fclose(f);
    if (!m->total) m->total = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
    /* cgroup v2: the line "0::/path" */
    f = fopen("/proc/self/cgroup", "r");
    while (f && fgets(line, sizeof line, f)) {
        if (strncmp(line, "0::", 3)) continue;
        line[strcspn(line, "\n")] = 0;
        const char *dir = strcmp(line + 3, "/") ? line + 3 : "";
        m->cg_limit = cg_value(dir, "memory.max");
        m->cg_used = m->cg_limit ? cg_value(dir, "memory.current") : 0;
        break;
    }
    if (f) fclose(f);
}

size_t g4_kv_default_budget(const g4_mem_info *m, uint64_t weight_bytes, int n_ranks, uint64_t floor_bytes, char *why, size_t why_len) {
    if (n_ranks < 1) n_ranks = 1;
    const uint64_t cap = m->total / 4 / (uint64_t)n_ranks; /* the older rule */
    uint64_t free_b = m->available ? m->available : m->total;
    const char *src = m->available ? "MemAvailable" : "MemTotal";
    if (m->cg_limit) {
        const uint64_t left = m->cg_limit > m->cg_used ? m->cg_limit - m->cg_used : 0;
        if (left < free_b) free_b = left, src = "the cgroup's memory.max - memory.current";
    }
    uint64_t reserve = GIB + m->total / 16;
    if (reserve > 8 * GIB) reserve = 8 * GIB;
    const uint64_t used = weight_bytes + reserve;
    uint64_t b = free_b > used ? (free_b - used) / (uint64_t)n_ranks : 0;
    const char *bound = "what is free after the weights";
    if (b > cap) b = cap, bound = "a quarter of RAM per rank";
    if (b < floor_bytes) b = floor_bytes, bound = "the least that holds one sequence of --max-ctx: memory is short";
    if (why && why_len)
        snprintf(why, why_len, "%llu MiB per rank (%s: %s %llu MiB - weights %llu MiB - reserve %llu MiB, over %d rank%s)",
                 (unsigned long long)(b / MIB), bound, src, (unsigned long long)(free_b / MIB), (unsigned long long)(weight_bytes / MIB),
                 (unsigned long long)(reserve / MIB), n_ranks, n_ranks == 1 ? "" : "s");
    return (size_t)b;
}
