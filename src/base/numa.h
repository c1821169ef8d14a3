/* numa.h — NUMA placement without libnuma: the nodes and their CPUs from sysfs, binding the
 * calling thread's CPUs and memory to one node, and a one-line account of where a thread runs.
 * G4_NUMA_SYSFS (tests) replaces /sys/devices/system/node, so a two-node machine can be
 * simulated on one node. */
#ifndef G4_BASE_NUMA_H
#define G4_BASE_NUMA_H

#include <stddef.h>

#include "base/error.h"

#define G4_NUMA_MAX_CPUS 1024

/* Nodes with CPUs (1 where sysfs says nothing). */
int g4_numa_nodes(void);
/* The CPUs of node n, ascending, into cpus[max]; returns how many (0: none or no such node). */
int g4_numa_node_cpus(int node, int *cpus, int max);
/* The node whose CPUs hold cpu, or -1. */
int g4_numa_node_of_cpu(int cpu);
/* Binds the calling thread to the given CPUs and prefers node's memory for what it allocates
 * (first touch does the rest). A memory policy the kernel refuses is not an error (one-node
 * machines, simulated nodes): *mem_ok says whether it took. */
int g4_numa_bind(int node, const int *cpus, int n_cpus, int *mem_ok, g4_err *err);
/* "CPUs 0-3,8 (NUMA node 0 of 2)" for the calling thread's affinity. */
void g4_numa_describe(char *buf, size_t len);

#endif
