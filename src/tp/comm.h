/* comm.h — the collective operations between the ranks of a TP group.
 *
 * One small interface, two backends: ranks as threads of one process (comm_local.c, shared
 * memory) and ranks as MPI processes (comm_mpi.c). TP=1 is a local group of one rank, not a
 * separate code path. allreduce_sum is deterministic: it finishes the pairwise tree over ranks
 * ((r0+r1)+(r2+r3))+… exactly as recursive doubling does, so every rank gets the same bits and
 * those equal the single-rank tree (DESIGN.md §4). If a rank fails it calls fail(); collectives
 * in other ranks then return G4_ECOMM instead of hanging, and failure() says which rank failed
 * and how (MPI: see comm_mpi.c for how a dead peer is noticed). */
#ifndef G4_TP_COMM_H
#define G4_TP_COMM_H

#include <stddef.h>

#include "base/error.h"

typedef struct g4_comm g4_comm;

typedef struct g4_comm_ops {
    int (*allreduce_sum)(g4_comm *c, float *buf, size_t n);
    int (*broadcast)(g4_comm *c, void *buf, size_t bytes, int root);
    /* root receives size * bytes: rank r's block at r * bytes. */
    int (*gather)(g4_comm *c, const void *send, size_t bytes, void *recv, int root);
    int (*barrier)(g4_comm *c);
    void (*fail)(g4_comm *c, const char *why);
    /* NULL while the group is healthy; once a collective failed, why, naming the rank. */
    const char *(*failure)(g4_comm *c);
    void (*free)(g4_comm *c);
} g4_comm_ops;

struct g4_comm {
    int rank, size;
    const g4_comm_ops *ops;
    void *impl;
    char backend[8]; /* "local" or "mpi" */
};

static inline int g4_comm_allreduce_sum(g4_comm *c, float *buf, size_t n) { return c->ops->allreduce_sum(c, buf, n); }
static inline int g4_comm_broadcast(g4_comm *c, void *buf, size_t bytes, int root) { return c->ops->broadcast(c, buf, bytes, root); }
static inline int g4_comm_gather(g4_comm *c, const void *send, size_t bytes, void *recv, int root) { return c->ops->gather(c, send, bytes, recv, root); }
static inline int g4_comm_barrier(g4_comm *c) { return c->ops->barrier(c); }
static inline void g4_comm_fail(g4_comm *c, const char *why) { c->ops->fail(c, why); }
static inline const char *g4_comm_failure(g4_comm *c) { return c->ops->failure(c); }
static inline void g4_comm_free(g4_comm *c) { if (c) c->ops->free(c); }

/* Local (threads) backend: creates the n handles of one group; handle r belongs to rank r's
 * thread. max_floats bounds one allreduce (scratch is allocated once, here). */
int g4_comm_local_create(int n, size_t max_floats, g4_comm **handles /* [n] */, g4_err *err);

/* MPI backend (when built with MPI): MPI_Init_thread if needed, one handle for this process. */
int g4_comm_mpi_create(size_t max_floats, g4_comm **out, g4_err *err);
int g4_comm_mpi_available(void);
/* MPI_Init (once) and this process's rank and the world size. */
int g4_comm_mpi_world(int *rank, int *size, g4_err *err);
/* MPI_Finalize if initialised and not yet finalised (after the last comm is freed). */
void g4_comm_mpi_finalize(void);
/* Ends the whole MPI job (every rank) with an error exit code. */
void g4_comm_mpi_abort(int code);
/* 1 when this process was started by mpirun (OMPI_COMM_WORLD_SIZE / PMI_SIZE set). */
int g4_comm_mpi_launched(void);
/* The launcher has begun ending the job (its SIGCONT/SIGTERM/SIGINT reached this rank): from now
 * on a peer that does not answer a collective within G4_COMM_END_TIMEOUT_MS (default 500) has
 * failed, and MPI_Finalize is skipped (it would wait for a launcher that is busy ending the job).
 * Async-signal-safe; harmless without MPI. */
void g4_comm_mpi_ending(void);
int g4_comm_mpi_is_ending(void);

/* Pairwise tree sum of vals[0..n) (n a power of two) in rank order: ((v0+v1)+(v2+v3))+… */
static inline float g4_tree_sum(float *vals, int n) {
    for (int w = 1; w < n; w *= 2)
        for (int i = 0; i + w < n; i += 2 * w) vals[i] = vals[i] + vals[i + w];
    return vals[0];
}

#endif
