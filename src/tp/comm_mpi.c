/* comm_mpi.c — ranks as MPI processes (OpenMPI). allreduce is written out as recursive
 * doubling with MPI_Sendrecv — never MPI_Allreduce, whose summation order is the library's
 * choice — so the result equals the tree of comm.h bit for bit. A failing rank calls
 * MPI_Abort: the job ends with an error everywhere instead of hanging. Built only when mpicc
 * exists (G4_HAVE_MPI); otherwise the create function explains how to get MPI. */
#include "tp/comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int g4_comm_mpi_launched(void) {
    return getenv("OMPI_COMM_WORLD_SIZE") != NULL || getenv("PMI_SIZE") != NULL || getenv("PMIX_RANK") != NULL;
}

#ifdef G4_HAVE_MPI
#include <mpi.h>

typedef struct {
    float *tmp;
    size_t max_floats;
} mpi_impl;

static int check(g4_comm *c, int mrc, const char *what) {
    if (mrc == MPI_SUCCESS) return G4_OK;
    fprintf(stderr, "g4tp: rank %d: MPI %s failed (%d); aborting the job\n", c->rank, what, mrc);
    MPI_Abort(MPI_COMM_WORLD, 3);
    return G4_ECOMM;
}

static int allreduce_sum(g4_comm *c, float *buf, size_t n) {
    mpi_impl *m = c->impl;
    if (c->size == 1) return G4_OK;
    if (n > m->max_floats) {
        fprintf(stderr, "g4tp: rank %d: allreduce of %zu floats exceeds the reserved %zu\n", c->rank, n, m->max_floats);
        MPI_Abort(MPI_COMM_WORLD, 3);
        return G4_ECOMM;
    }
    for (int k = 1; k < c->size; k <<= 1) {
        int partner = c->rank ^ k;
        size_t off = 0;
        while (off < n) { /* MPI counts are int */
            int cnt = (int)((n - off) > (1u << 30) ? (1u << 30) : (n - off));
            int rc = check(c, MPI_Sendrecv(buf + off, cnt, MPI_FLOAT, partner, 7, m->tmp + off, cnt, MPI_FLOAT, partner, 7,
                                           MPI_COMM_WORLD, MPI_STATUS_IGNORE), "Sendrecv");
            if (rc) return rc;
            off += (size_t)cnt;
        }
        /* lower block + upper block: commutative, so both partners get the same bits */
        for (size_t i = 0; i < n; i++) buf[i] = buf[i] + m->tmp[i];
    }
    return G4_OK;
}

static int broadcast(g4_comm *c, void *buf, size_t bytes, int root) {
    if (c->size == 1) return G4_OK;
    return check(c, MPI_Bcast(buf, (int)bytes, MPI_BYTE, root, MPI_COMM_WORLD), "Bcast");
}

static int gather(g4_comm *c, const void *send, size_t bytes, void *recv, int root) {
    if (c->size == 1) { if (recv != send) memmove(recv, send, bytes); return G4_OK; }
    return check(c, MPI_Gather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, root, MPI_COMM_WORLD), "Gather");
}

static int barrier(g4_comm *c) { return check(c, MPI_Barrier(MPI_COMM_WORLD), "Barrier"); }

static void fail(g4_comm *c, const char *why) {
    fprintf(stderr, "g4tp: rank %d failed: %s; aborting the MPI job\n", c->rank, why);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 2);
}

static void comm_free(g4_comm *c) {
    mpi_impl *m = c->impl;
    free(m->tmp);
    free(m);
    free(c);
}

void g4_comm_mpi_abort(int code) { MPI_Abort(MPI_COMM_WORLD, code); }

void g4_comm_mpi_finalize(void) {
    int inited = 0, fin = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&fin);
    if (inited && !fin) MPI_Finalize();
}

int g4_comm_mpi_world(int *rank, int *size, g4_err *err) {
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        int provided;
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
            return g4_err_set(err, G4_ECOMM, "MPI_Init_thread failed");
    }
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, size);
    return G4_OK;
}

static const g4_comm_ops mpi_ops = {allreduce_sum, broadcast, gather, barrier, fail, comm_free};

int g4_comm_mpi_available(void) { return 1; }

int g4_comm_mpi_create(size_t max_floats, g4_comm **out, g4_err *err) {
    int r, n;
    int rc = g4_comm_mpi_world(&r, &n, err);
    if (rc) return rc;
    g4_comm *c = calloc(1, sizeof *c);
    mpi_impl *m = calloc(1, sizeof *m);
    if (!c || !m) { free(c); free(m); return g4_err_set(err, G4_ENOMEM, "out of memory"); }
    MPI_Comm_rank(MPI_COMM_WORLD, &c->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &c->size);
    m->max_floats = max_floats;
    m->tmp = malloc(max_floats * sizeof(float) + 1);
    if (!m->tmp) { free(c); free(m); return g4_err_set(err, G4_ENOMEM, "out of memory"); }
    c->ops = &mpi_ops;
    c->impl = m;
    snprintf(c->backend, sizeof c->backend, "mpi");
    *out = c;
    return G4_OK;
}
#else
int g4_comm_mpi_available(void) { return 0; }
void g4_comm_mpi_finalize(void) {}
void g4_comm_mpi_abort(int code) { (void)code; }

int g4_comm_mpi_world(int *rank, int *size, g4_err *err) {
    *rank = 0;
    *size = 1;
    return g4_err_set(err, G4_EUNSUPPORTED,
                      "this g4tp was built without MPI: install OpenMPI (apt-get install openmpi-bin libopenmpi-dev) and rebuild");
}

int g4_comm_mpi_create(size_t max_floats, g4_comm **out, g4_err *err) {
    (void)max_floats;
    *out = NULL;
    return g4_err_set(err, G4_EUNSUPPORTED,
                      "this g4tp was built without MPI: install OpenMPI (apt-get install openmpi-bin libopenmpi-dev) and rebuild");
}
#endif
