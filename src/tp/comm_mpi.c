/* comm_mpi.c — ranks as MPI processes (OpenMPI). allreduce is written out as recursive
 * doubling with point-to-point messages — never MPI_Allreduce, whose summation order is the
 * library's choice — so the result equals the tree of comm.h bit for bit.
 *
 * Failures. Errors come back from MPI (MPI_ERRORS_RETURN, never the default abort). A dead peer
 * is another matter: OpenMPI 4's TCP transport reports "peer unexpectedly disconnected" through
 * the launcher — and blocks until the launcher, busy ending the job, takes the report — and
 * leaves the request pending forever; the launcher then sends SIGCONT, SIGTERM
 * odls_base_sigkill_timeout seconds later, then SIGKILL. So the TCP transport runs in its own
 * progress thread (btl_tcp_progress_thread, unless the launcher says otherwise) and every
 * collective here is a nonblocking exchange polled by wait_all, which gives up
 *   - at once when a rank's process has ended (liveness.h: its connection to rank 0 closed),
 *   - G4_COMM_END_TIMEOUT_MS (default 500) after the launcher began ending the job (the CLI
 *     calls g4_comm_mpi_ending on SIGCONT/SIGTERM), or
 *   - G4_COMM_TIMEOUT_S after the wait began, if set (a hung peer: SIGSTOP).
 * The message (failure()) names the rank waited on; the group is failed from then on (every call returns
 * G4_ECOMM at once) and MPI_Finalize is skipped. A follower waiting for its leader's next
 * command (a broadcast it receives) waits without limit: an idle leader and a dead one look the
 * same from there, and the launcher ends the follower of a dead leader. Idle waits sleep after
 * 2 ms of spinning, so an idle follower does not hold a core. Built only when mpicc exists
 * (G4_HAVE_MPI); otherwise the create function explains how to get MPI. */
#include "tp/comm.h"
#include "tp/liveness.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int g4_comm_mpi_launched(void) {
    return getenv("OMPI_COMM_WORLD_SIZE") != NULL || getenv("PMI_SIZE") != NULL || getenv("PMIX_RANK") != NULL;
}

static atomic_llong ending_ns; /* CLOCK_MONOTONIC when the launcher began ending the job; 0: not */

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Async-signal-safe (clock_gettime and a lock-free atomic): called from signal handlers. */
void g4_comm_mpi_ending(void) {
    long long zero = 0;
    atomic_compare_exchange_strong(&ending_ns, &zero, now_ns());
}

int g4_comm_mpi_is_ending(void) { return atomic_load(&ending_ns) != 0; }

#ifdef G4_HAVE_MPI
#include <mpi.h>

typedef struct {
    float *tmp;
    size_t max_floats;
    long long end_timeout_ns, timeout_ns; /* see the top of the file; timeout 0: none */
    int failed;
    char why[256];
} mpi_impl;

static int failed_now(g4_comm *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int failed_now(g4_comm *c, const char *fmt, ...) {
    mpi_impl *m = c->impl;
    if (!m->failed) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(m->why, sizeof m->why, fmt, ap);
        va_end(ap);
        m->failed = 1;
    }
    return G4_ECOMM;
}

static int mpi_error(g4_comm *c, int mrc, const char *what) {
    char es[MPI_MAX_ERROR_STRING];
    int el = 0;
    if (MPI_Error_string(mrc, es, &el) != MPI_SUCCESS) snprintf(es, sizeof es, "error %d", mrc);
    return failed_now(c, "rank %d: MPI %s failed: %s", c->rank, what, es);
}

/* Polls n requests to completion; peer[i] is the rank request i waits on. bounded = 0 for a
 * follower's wait on its leader (no limit, sleeps when idle). */
static int wait_all(g4_comm *c, MPI_Request *rq, int n, const int *peer, int bounded, const char *what) {
    mpi_impl *m = c->impl;
    const long long t0 = now_ns();
    int idle = 0;
    for (unsigned spins = 0;; spins++) {
        int done = 0, mrc = MPI_Testall(n, rq, &done, MPI_STATUSES_IGNORE);
        if (mrc != MPI_SUCCESS) return mpi_error(c, mrc, what);
        if (done) return G4_OK;
        int g = bounded ? g4_live_gone() : -1;
        if (g >= 0) return failed_now(c, "rank %d: rank %d's process ended (%s; its connection to rank 0 closed)", c->rank, g, what);
        if (!idle && spins % 64) continue;
        long long t = now_ns(), end = atomic_load(&ending_ns);
        int late = bounded && ((end && t - (end > t0 ? end : t0) > m->end_timeout_ns) || (m->timeout_ns && t - t0 > m->timeout_ns));
        if (late) { /* the pending requests are left as they are: no MPI call follows a failure */
            int who = -1;
            for (int i = 0; i < n && who < 0; i++) {
                int flag = 0;
                if (rq[i] == MPI_REQUEST_NULL) continue;
                MPI_Test(&rq[i], &flag, MPI_STATUS_IGNORE);
                if (!flag) who = peer[i];
            }
            return failed_now(c, "rank %d: rank %d did not answer (%s) within %.1f s%s: it died or hangs", c->rank, who, what,
                              (end ? m->end_timeout_ns : m->timeout_ns) * 1e-9, end ? " after the launcher began ending the job" : "");
        }
        if (!bounded && t - t0 > 2000000) { /* idle: sleep a little between polls */
            idle = 1;
            struct timespec ts = {0, 50000};
            nanosleep(&ts, NULL);
        }
    }
}

static int check_failed(g4_comm *c) { return ((mpi_impl *)c->impl)->failed ? G4_ECOMM : G4_OK; }

static int allreduce_sum(g4_comm *c, float *buf, size_t n) {
    mpi_impl *m = c->impl;
    if (c->size == 1) return G4_OK;
    if (check_failed(c)) return G4_ECOMM;
    if (n > m->max_floats) return failed_now(c, "rank %d: allreduce of %zu floats exceeds the reserved %zu", c->rank, n, m->max_floats);
    for (int k = 1; k < c->size; k <<= 1) {
        int partner = c->rank ^ k;
        for (size_t off = 0; off < n;) { /* MPI counts are int */
            int cnt = (int)((n - off) > (1u << 30) ? (1u << 30) : (n - off));
            MPI_Request rq[2];
            int peer[2] = {partner, partner}, mrc;
            if ((mrc = MPI_Irecv(m->tmp + off, cnt, MPI_FLOAT, partner, 7, MPI_COMM_WORLD, &rq[0])) != MPI_SUCCESS) return mpi_error(c, mrc, "Irecv");
            if ((mrc = MPI_Isend(buf + off, cnt, MPI_FLOAT, partner, 7, MPI_COMM_WORLD, &rq[1])) != MPI_SUCCESS) return mpi_error(c, mrc, "Isend");
            int rc = wait_all(c, rq, 2, peer, 1, "all-reduce");
            if (rc) return rc;
            off += (size_t)cnt;
        }
        /* lower block + upper block: commutative, so both partners get the same bits */
        for (size_t i = 0; i < n; i++) buf[i] = buf[i] + m->tmp[i];
    }
    return G4_OK;
}

/* root sends to every rank; the others receive from root (unbounded: see the top). */
static int broadcast(g4_comm *c, void *buf, size_t bytes, int root) {
    if (c->size == 1) return G4_OK;
    if (check_failed(c)) return G4_ECOMM;
    MPI_Request rq[64];
    int peer[64], n = 0, mrc;
    if (c->rank != root) {
        peer[n] = root;
        if ((mrc = MPI_Irecv(buf, (int)bytes, MPI_BYTE, root, 8, MPI_COMM_WORLD, &rq[n++])) != MPI_SUCCESS) return mpi_error(c, mrc, "Irecv");
        return wait_all(c, rq, n, peer, 0, "broadcast");
    }
    for (int r = 0; r < c->size; r++) {
        if (r == root) continue;
        peer[n] = r;
        if ((mrc = MPI_Isend(buf, (int)bytes, MPI_BYTE, r, 8, MPI_COMM_WORLD, &rq[n++])) != MPI_SUCCESS) return mpi_error(c, mrc, "Isend");
    }
    return wait_all(c, rq, n, peer, 1, "broadcast");
}

static int gather(g4_comm *c, const void *send, size_t bytes, void *recv, int root) {
    if (c->size == 1) { if (recv != send) memmove(recv, send, bytes); return G4_OK; }
    if (check_failed(c)) return G4_ECOMM;
    MPI_Request rq[64];
    int peer[64], n = 0, mrc;
    if (c->rank != root) {
        peer[n] = root;
        if ((mrc = MPI_Isend(send, (int)bytes, MPI_BYTE, root, 9, MPI_COMM_WORLD, &rq[n++])) != MPI_SUCCESS) return mpi_error(c, mrc, "Isend");
        return wait_all(c, rq, n, peer, 1, "gather");
    }
    for (int r = 0; r < c->size; r++) {
        char *dst = (char *)recv + (size_t)r * bytes;
        if (r == root) { if (dst != send) memmove(dst, send, bytes); continue; }
        peer[n] = r;
        if ((mrc = MPI_Irecv(dst, (int)bytes, MPI_BYTE, r, 9, MPI_COMM_WORLD, &rq[n++])) != MPI_SUCCESS) return mpi_error(c, mrc, "Irecv");
    }
    return wait_all(c, rq, n, peer, 1, "gather");
}

static int barrier(g4_comm *c) {
    if (check_failed(c)) return G4_ECOMM;
    MPI_Request rq;
    int peer = -1, mrc = MPI_Ibarrier(MPI_COMM_WORLD, &rq);
    if (mrc != MPI_SUCCESS) return mpi_error(c, mrc, "Ibarrier");
    return wait_all(c, &rq, 1, &peer, 1, "barrier");
}

/* This rank failed: it says why; the others find out when it stops answering (its process
 * ends, the launcher ends the job), so nobody is aborted from here. */
static void fail(g4_comm *c, const char *why) { failed_now(c, "rank %d failed: %s", c->rank, why); }

static const char *failure(g4_comm *c) {
    mpi_impl *m = c->impl;
    return m->failed ? m->why : NULL;
}

static int world_failed; /* a group failed: MPI_Finalize would wait for the dead */

static void comm_free(g4_comm *c) {
    mpi_impl *m = c->impl;
    if (m->failed) world_failed = 1;
    free(m->tmp);
    free(m);
    free(c);
}

void g4_comm_mpi_abort(int code) { MPI_Abort(MPI_COMM_WORLD, code); }

void g4_comm_mpi_finalize(void) {
    int inited = 0, fin = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&fin);
    /* not after a failure (it would wait for the dead), nor while the launcher ends the job
     * (OpenMPI's launcher sleeps between its signals, and MPI_Finalize waits for it) */
    if (inited && !fin && !world_failed && !g4_comm_mpi_is_ending()) MPI_Finalize();
    /* only now: MPI_Finalize waits for every rank, so none is still in a collective with us
     * when our end of the liveness connection closes (a follower would take it for our death) */
    g4_live_stop();
}

int g4_comm_mpi_world(int *rank, int *size, g4_err *err) {
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        int provided;
        setenv("OMPI_MCA_btl_tcp_progress_thread", "1", 0); /* see the top of the file */
        /* SERIALIZED: one thread at a time, not always the main one (the server's scheduler
         * thread drives the engine). Under FUNNELED OpenMPI's peer-hangup report never returned
         * to a thread other than main, and the server hung in it. */
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
            return g4_err_set(err, G4_ECOMM, "MPI_Init_thread failed");
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    }
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, size);
    return G4_OK;
}

static const g4_comm_ops mpi_ops = {allreduce_sum, broadcast, gather, barrier, fail, failure, comm_free};

int g4_comm_mpi_available(void) { return 1; }

/* The liveness connections (liveness.h); without them a dead rank is noticed only when the
 * launcher ends the job. G4_COMM_LIVENESS=0: none. */
static void live_connect(int r, int n) {
    const char *v = getenv("G4_COMM_LIVENESS");
    if (v && !strcmp(v, "0")) return;
    g4_live_addr a;
    g4_err err = {0};
    int ok = 1;
    if (r == 0 && g4_live_listen(&a, &err)) ok = 0;
    MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (!ok) { fprintf(stderr, "g4tp: rank 0: %s: dead ranks are noticed only when the launcher ends the job\n", err.msg); return; }
    MPI_Barrier(MPI_COMM_WORLD); /* everyone is here: the connects come at once */
    MPI_Bcast(&a, sizeof a, MPI_BYTE, 0, MPI_COMM_WORLD);
    if (r == 0) {
        int got = g4_live_accept(n - 1, 10.0);
        if (got < n - 1) fprintf(stderr, "g4tp: rank 0: %d of %d ranks made no liveness connection\n", n - 1 - got, n - 1);
    } else if (g4_live_connect(&a, r, 5.0, &err)) {
        fprintf(stderr, "g4tp: rank %d: no liveness connection to rank 0 (%s)\n", r, err.msg);
    }
}

static long long env_ns(const char *name, double def, double unit_ns) {
    const char *v = getenv(name);
    char *end;
    double x = v && *v ? strtod(v, &end) : def;
    if (v && *v && (*end || !(x >= 0))) {
        fprintf(stderr, "g4tp: %s must be a non-negative number (got \"%s\"); using %g\n", name, v, def);
        x = def;
    }
    return (long long)(x * unit_ns);
}

int g4_comm_mpi_create(size_t max_floats, g4_comm **out, g4_err *err) {
    int r, n;
    int rc = g4_comm_mpi_world(&r, &n, err);
    if (rc) return rc;
    if (n > 64) return g4_err_set(err, G4_EINVAL, "%d MPI processes: at most 64 ranks", n);
    g4_comm *c = calloc(1, sizeof *c);
    mpi_impl *m = calloc(1, sizeof *m);
    if (!c || !m) { free(c); free(m); return g4_err_set(err, G4_ENOMEM, "out of memory"); }
    c->rank = r;
    c->size = n;
    m->max_floats = max_floats;
    m->end_timeout_ns = env_ns("G4_COMM_END_TIMEOUT_MS", 500, 1e6);
    m->timeout_ns = env_ns("G4_COMM_TIMEOUT_S", 0, 1e9);
    m->tmp = malloc(max_floats * sizeof(float) + 1);
    if (!m->tmp) { free(c); free(m); return g4_err_set(err, G4_ENOMEM, "out of memory"); }
    if (n > 1) live_connect(r, n);
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
