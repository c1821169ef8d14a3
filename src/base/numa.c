/* numa.c — see numa.h. sysfs cpulists ("0-3,8,10-11"), sched_setaffinity, set_mempolicy. */
#include "base/numa.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MPOL_PREFERRED_ 1 /* <linux/mempolicy.h>, without its header dependency */

static const char *root(void) {
    const char *r = getenv("G4_NUMA_SYSFS");
    return r && *r ? r : "/sys/devices/system/node";
}

/* Parses a cpulist into cpus[max]; returns the count. */
static int parse_list(const char *s, int *cpus, int max) {
    int n = 0;
    while (*s && *s != '\n') {
        char *end;
        long a = strtol(s, &end, 10), b = a;
        if (end == s || a < 0) break;
        if (*end == '-') b = strtol(end + 1, &end, 10);
        for (long c = a; c <= b && n < max; c++) cpus[n++] = (int)c;
        s = *end == ',' ? end + 1 : end;
    }
    return n;
}

int g4_numa_node_cpus(int node, int *cpus, int max) {
    char path[512], line[4096];
    snprintf(path, sizeof path, "%s/node%d/cpulist", root(), node);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    int n = fgets(line, sizeof line, f) ? parse_list(line, cpus, max) : 0;
    fclose(f);
    return n;
}

int g4_numa_nodes(void) {
    int cpus[G4_NUMA_MAX_CPUS], n = 0;
    while (n < 1024 && g4_numa_node_cpus(n, cpus, G4_NUMA_MAX_CPUS) > 0) n++;
    return n > 0 ? n : 1;
}

int g4_numa_node_of_cpu(int cpu) {
    int cpus[G4_NUMA_MAX_CPUS];
    for (int node = 0, n; (n = g4_numa_node_cpus(node, cpus, G4_NUMA_MAX_CPUS)) > 0; node++)
        for (int i = 0; i < n; i++)
            if (cpus[i] == cpu) return node;
    return -1;
}

int g4_numa_bind(int node, const int *cpus, int n_cpus, int *mem_ok, g4_err *err) {
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int i = 0; i < n_cpus; i++)
        if (cpus[i] >= 0 && cpus[i] < CPU_SETSIZE) CPU_SET(cpus[i], &set);
    if (n_cpus > 0 && sched_setaffinity(0, sizeof set, &set) != 0)
        return g4_err_set(err, G4_EINVAL, "cannot bind to the CPUs of NUMA node %d: %s", node, strerror(errno));
    unsigned long mask[16] = {0};
    if (node >= 0 && node < (int)(sizeof mask * 8)) mask[node / (8 * sizeof *mask)] = 1UL << (node % (8 * sizeof *mask));
    *mem_ok = syscall(SYS_set_mempolicy, MPOL_PREFERRED_, mask, sizeof mask * 8) == 0;
    return G4_OK;
}

void g4_numa_describe(char *buf, size_t len) {
    cpu_set_t set;
    size_t k = 0;
    if (sched_getaffinity(0, sizeof set, &set) != 0) { snprintf(buf, len, "CPUs unknown"); return; }
    int first = -1, node = -2;
    k += (size_t)snprintf(buf + k, len - k, "CPUs ");
    for (int c = 0; c <= CPU_SETSIZE && k < len; c++) {
        int in = c < CPU_SETSIZE && CPU_ISSET(c, &set);
        if (in && first < 0) first = c;
        if (in) {
            int nd = g4_numa_node_of_cpu(c);
            node = node == -2 ? nd : (node == nd ? node : -3);
        }
        if (!in && first >= 0) {
            k += (size_t)snprintf(buf + k, len - k, "%s%d", k > 5 ? "," : "", first);
            if (c - 1 > first && k < len) k += (size_t)snprintf(buf + k, len - k, "-%d", c - 1);
            first = -1;
        }
    }
    if (k >= len) return;
    if (node >= 0) snprintf(buf + k, len - k, " (NUMA node %d of %d)", node, g4_numa_nodes());
    else snprintf(buf + k, len - k, " (%s of %d NUMA nodes)", node == -3 ? "several" : "none", g4_numa_nodes());
}
